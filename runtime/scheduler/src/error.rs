//! The one error type of the scheduling core.

use crate::state::{ExecutionState, JobStatus};

/// Everything the scheduling core can refuse. None of these is retryable: they describe a job graph,
/// a cluster shape or an event sequence that is wrong, and retrying the same call gives the same answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("job graph has no vertices")]
    EmptyGraph,
    #[error("vertex '{vertex}' is declared twice")]
    DuplicateVertex { vertex: String },
    #[error("vertex id must not be empty")]
    EmptyVertexId,
    #[error("edge {edge} refers to unknown vertex '{vertex}'")]
    UnknownVertex { edge: String, vertex: String },
    #[error("vertex '{vertex}': parallelism must be at least 1")]
    ZeroParallelism { vertex: String },
    #[error("vertex '{vertex}': parallelism {parallelism} is above its max parallelism {max_parallelism}")]
    ParallelismAboveMax {
        vertex: String,
        parallelism: u32,
        max_parallelism: u32,
    },
    #[error("edge {edge}: a forward edge needs equal parallelism on both ends, found {from} and {to}")]
    ForwardParallelismMismatch { edge: String, from: u32, to: u32 },
    #[error("edge {edge}: partitioner {partitioner} cannot use distribution pattern {pattern}")]
    PatternMismatch {
        edge: String,
        partitioner: String,
        pattern: String,
    },
    #[error("edge {edge} connects a vertex to itself")]
    SelfLoop { edge: String },
    #[error("job graph has a cycle through vertex '{vertex}'")]
    Cycle { vertex: String },
    #[error("unknown execution vertex {vertex}")]
    UnknownExecutionVertex { vertex: String },
    #[error("illegal job status transition {from} -> {to}")]
    IllegalJobTransition { from: JobStatus, to: JobStatus },
    #[error("illegal execution state transition {from} -> {to} for {vertex} attempt {attempt}")]
    IllegalExecutionTransition {
        vertex: String,
        attempt: u64,
        from: ExecutionState,
        to: ExecutionState,
    },
    #[error("job needs {needed} slots but the cluster offers {available}")]
    NotEnoughSlots { needed: usize, available: usize },
    #[error(
        "vertex '{vertex}': its parallelism is decided at run time from its inputs' size, so edge {edge} \
         must be blocking (execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING), not {partition_type}"
    )]
    AdaptiveInputNotBlocking {
        vertex: String,
        edge: String,
        partition_type: String,
    },
    #[error("adaptive parallelism: {0}")]
    InvalidAdaptiveConfig(String),
    #[error("unknown {kind} '{value}', expected one of: {expected}")]
    UnknownName {
        kind: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
