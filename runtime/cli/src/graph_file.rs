//! The YAML form of a JobGraph that `floe plan --graph FILE` reads.
//!
//! ```yaml
//! vertices:
//!   - { id: source, parallelism: 4 }
//!   - { id: reduce, parallelism: 3, max_parallelism: 128, slot_sharing_group: default }
//! edges:
//!   - { from: source, to: reduce, pattern: all_to_all, partitioner: hash }
//! ```
//! `pattern` defaults to the partitioner's; `type` (PIPELINED, PIPELINED_BOUNDED, BLOCKING, HYBRID)
//! overrides what the shuffle mode decides for that edge.

use std::path::Path;

use floe_scheduler::BatchShuffleMode;
use floe_scheduler::job_graph::{
    DistributionPattern, JobEdge, JobGraph, JobVertex, Partitioner, ResultPartitionType,
    default_max_parallelism,
};
use serde::Deserialize;

/// Why a graph file was refused. Every variant names the file and the line, field, vertex or edge.
#[derive(Debug, thiserror::Error)]
pub enum GraphFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: String, message: String },
    #[error("{path}: {source}")]
    Invalid {
        path: String,
        #[source]
        source: floe_scheduler::Error,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphSpec {
    vertices: Vec<VertexSpec>,
    #[serde(default)]
    edges: Vec<EdgeSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VertexSpec {
    id: String,
    #[serde(default)]
    name: Option<String>,
    parallelism: u32,
    #[serde(default)]
    max_parallelism: Option<u32>,
    #[serde(default)]
    slot_sharing_group: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EdgeSpec {
    from: String,
    to: String,
    partitioner: Partitioner,
    #[serde(default)]
    pattern: Option<DistributionPattern>,
    #[serde(default, rename = "type")]
    partition_type: Option<ResultPartitionType>,
}

/// Reads and validates a graph file; edge types come from `mode` unless the file sets them.
pub fn load(path: &Path, mode: BatchShuffleMode) -> Result<JobGraph, GraphFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| GraphFileError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&text, mode).map_err(|e| match e {
        GraphFileError::Syntax { message, .. } => GraphFileError::Syntax { path: shown, message },
        GraphFileError::Invalid { source, .. } => GraphFileError::Invalid { path: shown, source },
        other => other,
    })
}

/// Parses graph YAML text (errors carry an empty path; [`load`] fills it in).
pub fn parse(text: &str, mode: BatchShuffleMode) -> Result<JobGraph, GraphFileError> {
    let spec: GraphSpec = serde_yaml::from_str(text).map_err(|e| GraphFileError::Syntax {
        path: String::new(),
        message: e.to_string(),
    })?;
    let vertices = spec
        .vertices
        .into_iter()
        .map(|v| JobVertex {
            name: v.name.unwrap_or_else(|| v.id.clone()),
            max_parallelism: v
                .max_parallelism
                .unwrap_or_else(|| default_max_parallelism(v.parallelism)),
            slot_sharing_group: v.slot_sharing_group.unwrap_or_else(|| "default".to_string()),
            parallelism: v.parallelism,
            id: v.id,
        })
        .collect();
    let edges = spec
        .edges
        .into_iter()
        .map(|e| {
            let pattern = e.pattern.unwrap_or_else(|| e.partitioner.default_pattern());
            JobEdge {
                partition_type: e
                    .partition_type
                    .unwrap_or_else(|| mode.partition_type(e.partitioner, pattern)),
                from: e.from,
                to: e.to,
                pattern,
                partitioner: e.partitioner,
            }
        })
        .collect();
    JobGraph::new(vertices, edges).map_err(|source| GraphFileError::Invalid {
        path: String::new(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_names_field_and_line() {
        let err = parse(
            "vertices:\n  - { id: a, paralelism: 2 }\n",
            BatchShuffleMode::default(),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("unknown field `paralelism`"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn bad_partitioner_lists_the_choices() {
        let text = "vertices:\n  - { id: a, parallelism: 1 }\n  - { id: b, parallelism: 1 }\nedges:\n  - { from: a, to: b, partitioner: random }\n";
        let msg = parse(text, BatchShuffleMode::default()).unwrap_err().to_string();
        assert!(msg.contains("unknown variant `random`"), "{msg}");
        assert!(msg.contains("line 5"), "{msg}");
    }

    #[test]
    fn explicit_edge_type_wins_over_shuffle_mode() {
        let text = "vertices:\n  - { id: a, parallelism: 2 }\n  - { id: b, parallelism: 2 }\nedges:\n  - { from: a, to: b, partitioner: hash, type: PIPELINED }\n";
        let g = parse(text, BatchShuffleMode::AllExchangesBlocking).unwrap();
        assert_eq!(g.data_sets()[0].partition_type, ResultPartitionType::Pipelined);
    }
}
