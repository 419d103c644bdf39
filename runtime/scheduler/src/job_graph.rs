//! The JobGraph: what a job is before it is parallelised. Vertices (operator chains) and the edges
//! between them, each edge producing one IntermediateDataSet.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Flink's default max parallelism for small jobs (`KeyGroupRangeAssignment.computeDefaultMaxParallelism`
/// rounds up to at least 128).
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;
/// Flink's upper bound on max parallelism (key groups are 15-bit).
pub const UPPER_BOUND_MAX_PARALLELISM: u32 = 1 << 15;

/// Flink's default max parallelism for a vertex: parallelism * 1.5 rounded up to a power of two,
/// at least 128 and at most 32,768 (`KeyGroupRangeAssignment.computeDefaultMaxParallelism`).
pub fn default_max_parallelism(parallelism: u32) -> u32 {
    let scaled = (parallelism as u64 + parallelism as u64 / 2).next_power_of_two();
    scaled.clamp(DEFAULT_MAX_PARALLELISM as u64, UPPER_BOUND_MAX_PARALLELISM as u64) as u32
}

/// A JobVertex's parallelism when the adaptive batch scheduler decides it at run time.
pub const PARALLELISM_DECIDED_AT_RUN_TIME: u32 = 0;

/// Position of a JobVertex in its JobGraph. Vertices keep the order they were added in; validation
/// guarantees that order is topological.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VertexIndex(pub u32);

/// Position of an IntermediateDataSet (one per JobEdge) in its JobGraph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResultIndex(pub u32);

/// How producer subtasks connect to consumer subtasks (Flink's `DistributionPattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DistributionPattern {
    /// Each consumer reads a contiguous subset of producers (or the reverse), as Flink's
    /// `EdgeManagerBuildUtil` connects them.
    Pointwise,
    /// Every consumer reads from every producer.
    AllToAll,
}

/// How records are routed on an edge (Flink's `StreamPartitioner`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioner {
    Forward,
    Rebalance,
    Rescale,
    Hash,
    Broadcast,
}

impl Partitioner {
    /// The distribution pattern this partitioner implies, as in Flink's `StreamingJobGraphGenerator`.
    pub fn default_pattern(self) -> DistributionPattern {
        match self {
            Partitioner::Forward | Partitioner::Rescale => DistributionPattern::Pointwise,
            Partitioner::Rebalance | Partitioner::Hash | Partitioner::Broadcast => {
                DistributionPattern::AllToAll
            }
        }
    }
}

/// How an intermediate result is exchanged (Flink's `ResultPartitionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResultPartitionType {
    /// Streamed to the consumer while produced; unbounded buffering.
    Pipelined,
    /// Streamed with a bounded number of in-flight buffers (the streaming default).
    PipelinedBounded,
    /// Fully produced before it is consumed; can be consumed more than once.
    Blocking,
    /// Persisted like BLOCKING, but may be read while it is produced. For region building and scheduling
    /// Floe treats it like BLOCKING: it cuts regions and its consumers wait for it to be produced.
    Hybrid,
}

impl ResultPartitionType {
    /// Whether producer and consumer must run at the same time (they then share a pipelined region).
    pub fn must_be_pipelined_consumed(self) -> bool {
        matches!(
            self,
            ResultPartitionType::Pipelined | ResultPartitionType::PipelinedBounded
        )
    }

    /// Whether the data outlives the producer so a consumer can (re)read it after the producer finished.
    pub fn is_blocking(self) -> bool {
        !self.must_be_pipelined_consumed()
    }
}

/// Flink's `execution.batch-shuffle-mode`: which exchanges of a BATCH job are pipelined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BatchShuffleMode {
    /// Every exchange blocking: each task its own region (classic batch).
    #[default]
    AllExchangesBlocking,
    /// Forward edges pipelined, the rest blocking.
    ForwardExchangesPipelined,
    /// Pointwise edges (forward, rescale) pipelined, the rest blocking.
    PointwiseExchangesPipelined,
    /// Every exchange pipelined: one region per connected component, like streaming.
    AllExchangesPipelined,
}

impl BatchShuffleMode {
    pub const NAMES: &'static str = "ALL_EXCHANGES_BLOCKING, FORWARD_EXCHANGES_PIPELINED, \
                                     POINTWISE_EXCHANGES_PIPELINED, ALL_EXCHANGES_PIPELINED";
    pub const ALL: [BatchShuffleMode; 4] = [
        BatchShuffleMode::AllExchangesBlocking,
        BatchShuffleMode::ForwardExchangesPipelined,
        BatchShuffleMode::PointwiseExchangesPipelined,
        BatchShuffleMode::AllExchangesPipelined,
    ];

    /// The result partition type this mode gives an edge.
    pub fn partition_type(
        self,
        partitioner: Partitioner,
        pattern: DistributionPattern,
    ) -> ResultPartitionType {
        let pipelined = match self {
            BatchShuffleMode::AllExchangesBlocking => false,
            BatchShuffleMode::ForwardExchangesPipelined => partitioner == Partitioner::Forward,
            BatchShuffleMode::PointwiseExchangesPipelined => pattern == DistributionPattern::Pointwise,
            BatchShuffleMode::AllExchangesPipelined => true,
        };
        if pipelined {
            ResultPartitionType::PipelinedBounded
        } else {
            ResultPartitionType::Blocking
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BatchShuffleMode::AllExchangesBlocking => "ALL_EXCHANGES_BLOCKING",
            BatchShuffleMode::ForwardExchangesPipelined => "FORWARD_EXCHANGES_PIPELINED",
            BatchShuffleMode::PointwiseExchangesPipelined => "POINTWISE_EXCHANGES_PIPELINED",
            BatchShuffleMode::AllExchangesPipelined => "ALL_EXCHANGES_PIPELINED",
        }
    }
}

impl fmt::Display for BatchShuffleMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BatchShuffleMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim().replace('-', "_").to_ascii_uppercase();
        BatchShuffleMode::ALL
            .into_iter()
            .find(|m| m.name() == wanted)
            .ok_or_else(|| Error::UnknownName {
                kind: "execution.batch-shuffle-mode",
                value: s.to_string(),
                expected: BatchShuffleMode::NAMES,
            })
    }
}

/// One operator chain of the job, run as `parallelism` subtasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVertex {
    /// Unique, user-facing id (`source`, `map`); task names are `id#subtask`.
    pub id: String,
    /// Display name (the operator chain, e.g. `Source -> FlatMap`).
    pub name: String,
    /// Subtasks; [`PARALLELISM_DECIDED_AT_RUN_TIME`] for a vertex whose parallelism the adaptive
    /// batch scheduler decides from its inputs' size (Flink's -1, "not set").
    pub parallelism: u32,
    /// Upper bound for rescaling and the number of key groups.
    pub max_parallelism: u32,
    /// Subtasks of vertices in the same group may share a slot.
    pub slot_sharing_group: String,
}

impl JobVertex {
    /// Whether the parallelism is known (not left to the adaptive batch scheduler).
    pub fn is_decided(&self) -> bool {
        self.parallelism != PARALLELISM_DECIDED_AT_RUN_TIME
    }
}

/// The data set a JobVertex produces for one outgoing edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntermediateDataSet {
    pub producer: VertexIndex,
    pub consumer: VertexIndex,
    pub pattern: DistributionPattern,
    pub partitioner: Partitioner,
    pub partition_type: ResultPartitionType,
}

/// An edge as a user describes it, before validation (ids instead of indices).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEdge {
    pub from: String,
    pub to: String,
    pub pattern: DistributionPattern,
    pub partitioner: Partitioner,
    pub partition_type: ResultPartitionType,
}

impl JobEdge {
    /// `from->to`, the name errors use for an edge.
    pub fn name(&self) -> String {
        format!("{}->{}", self.from, self.to)
    }
}

/// A validated job graph: vertices in topological order, one IntermediateDataSet per edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGraph {
    vertices: Vec<JobVertex>,
    data_sets: Vec<IntermediateDataSet>,
    inputs: Vec<Vec<ResultIndex>>,
    outputs: Vec<Vec<ResultIndex>>,
}

impl JobGraph {
    /// Validates vertices and edges and orders vertices topologically (stable: among vertices whose
    /// inputs are ready, declaration order wins).
    pub fn new(vertices: Vec<JobVertex>, edges: Vec<JobEdge>) -> Result<Self> {
        if vertices.is_empty() {
            return Err(Error::EmptyGraph);
        }
        let mut by_id = HashMap::with_capacity(vertices.len());
        for (i, v) in vertices.iter().enumerate() {
            if v.id.is_empty() {
                return Err(Error::EmptyVertexId);
            }
            if by_id.insert(v.id.as_str(), i).is_some() {
                return Err(Error::DuplicateVertex { vertex: v.id.clone() });
            }
            if v.parallelism > v.max_parallelism {
                return Err(Error::ParallelismAboveMax {
                    vertex: v.id.clone(),
                    parallelism: v.parallelism,
                    max_parallelism: v.max_parallelism,
                });
            }
        }
        let mut resolved = Vec::with_capacity(edges.len());
        for e in &edges {
            let lookup = |id: &str| {
                by_id.get(id).copied().ok_or_else(|| Error::UnknownVertex {
                    edge: e.name(),
                    vertex: id.to_string(),
                })
            };
            let (from, to) = (lookup(&e.from)?, lookup(&e.to)?);
            if from == to {
                return Err(Error::SelfLoop { edge: e.name() });
            }
            let allowed = match e.partitioner {
                Partitioner::Forward | Partitioner::Rescale => e.pattern == DistributionPattern::Pointwise,
                Partitioner::Rebalance | Partitioner::Hash | Partitioner::Broadcast => {
                    e.pattern == DistributionPattern::AllToAll
                }
            };
            if !allowed {
                return Err(Error::PatternMismatch {
                    edge: e.name(),
                    partitioner: format!("{:?}", e.partitioner).to_lowercase(),
                    pattern: format!("{:?}", e.pattern).to_lowercase(),
                });
            }
            let (pf, pt) = (vertices[from].parallelism, vertices[to].parallelism);
            if e.partitioner == Partitioner::Forward && pf != pt && pf > 0 && pt > 0 {
                return Err(Error::ForwardParallelismMismatch {
                    edge: e.name(),
                    from: pf,
                    to: pt,
                });
            }
            resolved.push((from, to, e));
        }
        let order = topological_order(&vertices, &resolved)?;
        let mut position = vec![0u32; vertices.len()];
        for (pos, &old) in order.iter().enumerate() {
            position[old] = pos as u32;
        }
        let mut slots: Vec<Option<JobVertex>> = vertices.into_iter().map(Some).collect();
        let vertices: Vec<JobVertex> = order
            .iter()
            .map(|&old| slots[old].take().expect("each once"))
            .collect();
        let mut inputs = vec![Vec::new(); vertices.len()];
        let mut outputs = vec![Vec::new(); vertices.len()];
        let mut data_sets = Vec::with_capacity(resolved.len());
        for (from, to, e) in resolved {
            let (producer, consumer) = (position[from], position[to]);
            let index = ResultIndex(data_sets.len() as u32);
            outputs[producer as usize].push(index);
            inputs[consumer as usize].push(index);
            data_sets.push(IntermediateDataSet {
                producer: VertexIndex(producer),
                consumer: VertexIndex(consumer),
                pattern: e.pattern,
                partitioner: e.partitioner,
                partition_type: e.partition_type,
            });
        }
        Ok(JobGraph {
            vertices,
            data_sets,
            inputs,
            outputs,
        })
    }

    /// A builder for tests and examples: `JobGraph::test().vertex("map", 4)...build()`.
    pub fn test() -> JobGraphBuilder {
        JobGraphBuilder::default()
    }

    /// The example of Flink's scheduling docs (seed 002): Source(4) -> Map(4) by forward edge ->
    /// Reduce(3) by hash edge. Scheduling, slot and JobManager tests use it as their fixture.
    pub fn seed_example() -> JobGraph {
        JobGraph::test()
            .vertex("source", 4)
            .vertex("map", 4)
            .vertex("reduce", 3)
            .edge("source", "map", Partitioner::Forward)
            .edge("map", "reduce", Partitioner::Hash)
            .build()
            .expect("the seed example is a valid graph")
    }

    pub fn vertices(&self) -> &[JobVertex] {
        &self.vertices
    }

    pub fn vertex(&self, index: VertexIndex) -> &JobVertex {
        &self.vertices[index.0 as usize]
    }

    pub fn vertex_index(&self, id: &str) -> Option<VertexIndex> {
        self.vertices
            .iter()
            .position(|v| v.id == id)
            .map(|i| VertexIndex(i as u32))
    }

    pub fn data_sets(&self) -> &[IntermediateDataSet] {
        &self.data_sets
    }

    pub fn data_set(&self, index: ResultIndex) -> &IntermediateDataSet {
        &self.data_sets[index.0 as usize]
    }

    /// Results a vertex consumes, in edge declaration order.
    pub fn inputs(&self, vertex: VertexIndex) -> &[ResultIndex] {
        &self.inputs[vertex.0 as usize]
    }

    /// Results a vertex produces, in edge declaration order.
    pub fn outputs(&self, vertex: VertexIndex) -> &[ResultIndex] {
        &self.outputs[vertex.0 as usize]
    }

    /// The same graph with every edge's result partition type set by a batch shuffle mode.
    pub fn with_shuffle_mode(mut self, mode: BatchShuffleMode) -> Self {
        for ds in &mut self.data_sets {
            ds.partition_type = mode.partition_type(ds.partitioner, ds.pattern);
        }
        self
    }

    /// The same graph with every edge pipelined (STREAMING execution).
    pub fn streaming(mut self) -> Self {
        for ds in &mut self.data_sets {
            ds.partition_type = ResultPartitionType::PipelinedBounded;
        }
        self
    }

    /// Whether any vertex's parallelism is decided at run time.
    pub fn is_adaptive(&self) -> bool {
        self.vertices.iter().any(|v| !v.is_decided())
    }

    /// What the adaptive batch scheduler needs of a graph whose parallelism is decided at run time
    /// (Flink's "ALL_EXCHANGES_BLOCKING jobs only"): a vertex decided from its inputs' size reads
    /// every all-to-all input from a blocking result, so the input is complete when it is decided.
    /// A pointwise input is fine: its consumer takes its producer's parallelism.
    pub fn check_adaptive(&self) -> Result<()> {
        for (i, v) in self.vertices.iter().enumerate() {
            if v.is_decided() {
                continue;
            }
            for &r in self.inputs(VertexIndex(i as u32)) {
                let ds = self.data_set(r);
                if ds.pattern == DistributionPattern::AllToAll && !ds.partition_type.is_blocking() {
                    return Err(Error::AdaptiveInputNotBlocking {
                        vertex: v.id.clone(),
                        edge: format!("{}->{}", self.vertex(ds.producer).id, v.id),
                        partition_type: format!("{:?}", ds.partition_type),
                    });
                }
            }
        }
        Ok(())
    }

    /// Sets one vertex's parallelism (adaptive batch scheduling decides it late). Forward edges stay
    /// valid only if the caller keeps both ends equal.
    pub fn set_parallelism(&mut self, vertex: VertexIndex, parallelism: u32) -> Result<()> {
        let v = &mut self.vertices[vertex.0 as usize];
        if parallelism == 0 {
            return Err(Error::ZeroParallelism { vertex: v.id.clone() });
        }
        if parallelism > v.max_parallelism {
            return Err(Error::ParallelismAboveMax {
                vertex: v.id.clone(),
                parallelism,
                max_parallelism: v.max_parallelism,
            });
        }
        v.parallelism = parallelism;
        Ok(())
    }
}

/// Kahn's algorithm, picking the lowest declaration index among ready vertices so the order is stable.
fn topological_order(vertices: &[JobVertex], edges: &[(usize, usize, &JobEdge)]) -> Result<Vec<usize>> {
    let n = vertices.len();
    let mut indegree = vec![0usize; n];
    let mut out = vec![Vec::new(); n];
    for &(from, to, _) in edges {
        indegree[to] += 1;
        out[from].push(to);
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop_first() {
        order.push(v);
        for &w in &out[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.insert(w);
            }
        }
    }
    if order.len() < n {
        let stuck = (0..n).find(|&i| indegree[i] > 0).unwrap_or(0);
        return Err(Error::Cycle {
            vertex: vertices[stuck].id.clone(),
        });
    }
    Ok(order)
}

/// Fixture builder (CONVENTIONS.md: "builders for fixtures").
#[derive(Debug, Default, Clone)]
pub struct JobGraphBuilder {
    vertices: Vec<JobVertex>,
    edges: Vec<JobEdge>,
}

impl JobGraphBuilder {
    /// A vertex in the default slot sharing group with Flink's default max parallelism.
    pub fn vertex(mut self, id: &str, parallelism: u32) -> Self {
        self.vertices.push(JobVertex {
            id: id.to_string(),
            name: id.to_string(),
            parallelism,
            max_parallelism: default_max_parallelism(parallelism).max(parallelism),
            slot_sharing_group: "default".to_string(),
        });
        self
    }

    /// Sets the slot sharing group of the last added vertex.
    pub fn group(mut self, group: &str) -> Self {
        if let Some(v) = self.vertices.last_mut() {
            v.slot_sharing_group = group.to_string();
        }
        self
    }

    /// An edge with the partitioner's default pattern; blocking until a shuffle mode says otherwise.
    pub fn edge(mut self, from: &str, to: &str, partitioner: Partitioner) -> Self {
        self.edges.push(JobEdge {
            from: from.to_string(),
            to: to.to_string(),
            pattern: partitioner.default_pattern(),
            partitioner,
            partition_type: ResultPartitionType::Blocking,
        });
        self
    }

    pub fn build(self) -> Result<JobGraph> {
        JobGraph::new(self.vertices, self.edges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_vertices_topologically() {
        let g = JobGraph::test()
            .vertex("sink", 1)
            .vertex("source", 2)
            .edge("source", "sink", Partitioner::Rebalance)
            .build()
            .unwrap();
        let ids: Vec<_> = g.vertices().iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, ["source", "sink"]);
        assert_eq!(g.data_set(ResultIndex(0)).producer, VertexIndex(0));
        assert_eq!(g.inputs(VertexIndex(1)), &[ResultIndex(0)]);
    }

    #[test]
    fn rejects_cycle_naming_a_vertex() {
        let err = JobGraph::test()
            .vertex("a", 1)
            .vertex("b", 1)
            .edge("a", "b", Partitioner::Hash)
            .edge("b", "a", Partitioner::Hash)
            .build()
            .unwrap_err();
        assert_eq!(err.to_string(), "job graph has a cycle through vertex 'a'");
    }

    #[test]
    fn rejects_unknown_vertex_naming_the_edge() {
        let err = JobGraph::test()
            .vertex("a", 1)
            .edge("a", "nope", Partitioner::Hash)
            .build()
            .unwrap_err();
        assert_eq!(err.to_string(), "edge a->nope refers to unknown vertex 'nope'");
    }

    #[test]
    fn rejects_parallelism_above_max() {
        let mut v = JobGraph::test().vertex("a", 4);
        v.vertices[0].max_parallelism = 2;
        let err = v.build().unwrap_err();
        assert_eq!(
            err.to_string(),
            "vertex 'a': parallelism 4 is above its max parallelism 2"
        );
    }

    #[test]
    fn rejects_forward_between_different_parallelisms() {
        let err = JobGraph::test()
            .vertex("a", 4)
            .vertex("b", 3)
            .edge("a", "b", Partitioner::Forward)
            .build()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "edge a->b: a forward edge needs equal parallelism on both ends, found 4 and 3"
        );
    }

    #[test]
    fn rejects_duplicates_self_loops_zero_parallelism_and_bad_patterns() {
        let dup = JobGraph::test()
            .vertex("a", 1)
            .vertex("a", 1)
            .build()
            .unwrap_err();
        assert_eq!(dup, Error::DuplicateVertex { vertex: "a".into() });
        let self_loop = JobGraph::test()
            .vertex("a", 1)
            .edge("a", "a", Partitioner::Hash)
            .build()
            .unwrap_err();
        assert_eq!(self_loop, Error::SelfLoop { edge: "a->a".into() });
        // 0 is "decided at run time", not an error; but only over blocking all-to-all inputs.
        let auto = JobGraph::test()
            .vertex("a", 2)
            .vertex("z", 0)
            .edge("a", "z", Partitioner::Hash)
            .build()
            .unwrap();
        assert!(!auto.vertices()[1].is_decided());
        assert_eq!(
            auto.clone().streaming().check_adaptive().unwrap_err().to_string(),
            "vertex 'z': its parallelism is decided at run time from its inputs' size, so edge a->z \
             must be blocking (execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING), not PipelinedBounded"
        );
        auto.with_shuffle_mode(BatchShuffleMode::AllExchangesBlocking)
            .check_adaptive()
            .unwrap();
        let mut b = JobGraph::test()
            .vertex("a", 2)
            .vertex("b", 2)
            .edge("a", "b", Partitioner::Hash);
        b.edges[0].pattern = DistributionPattern::Pointwise;
        assert!(matches!(b.build().unwrap_err(), Error::PatternMismatch { .. }));
        assert_eq!(JobGraph::new(vec![], vec![]).unwrap_err(), Error::EmptyGraph);
    }

    #[test]
    fn shuffle_modes_set_partition_types() {
        use ResultPartitionType::*;
        let g = JobGraph::test()
            .vertex("a", 2)
            .vertex("b", 2)
            .vertex("c", 1)
            .vertex("d", 2)
            .edge("a", "b", Partitioner::Forward)
            .edge("b", "c", Partitioner::Rescale)
            .edge("c", "d", Partitioner::Hash)
            .build()
            .unwrap();
        let types = |m: BatchShuffleMode| {
            g.clone()
                .with_shuffle_mode(m)
                .data_sets()
                .iter()
                .map(|d| d.partition_type)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            types(BatchShuffleMode::AllExchangesBlocking),
            [Blocking, Blocking, Blocking]
        );
        assert_eq!(
            types(BatchShuffleMode::ForwardExchangesPipelined),
            [PipelinedBounded, Blocking, Blocking]
        );
        assert_eq!(
            types(BatchShuffleMode::PointwiseExchangesPipelined),
            [PipelinedBounded, PipelinedBounded, Blocking]
        );
        assert_eq!(
            types(BatchShuffleMode::AllExchangesPipelined),
            [PipelinedBounded, PipelinedBounded, PipelinedBounded]
        );
    }

    #[test]
    fn default_max_parallelism_follows_flink() {
        assert_eq!(default_max_parallelism(1), 128);
        assert_eq!(default_max_parallelism(100), 256);
        assert_eq!(default_max_parallelism(10_000), 16_384);
        assert_eq!(default_max_parallelism(30_000), 32_768);
    }

    #[test]
    fn parses_shuffle_mode_names() {
        assert_eq!(
            "forward_exchanges_pipelined".parse::<BatchShuffleMode>().unwrap(),
            BatchShuffleMode::ForwardExchangesPipelined
        );
        let err = "SOMETIMES".parse::<BatchShuffleMode>().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown execution.batch-shuffle-mode 'SOMETIMES', expected one of")
        );
    }
}
