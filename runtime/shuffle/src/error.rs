//! Errors of the shuffle.

/// What can go wrong moving data between tasks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("partition {0} is not known to this TaskManager")]
    PartitionNotFound(String),
    #[error("subpartition {subpartition} out of range: partition {partition} has {count}")]
    SubpartitionOutOfRange { partition: String, subpartition: u32, count: u32 },
    #[error("cannot reach TaskManager at {address}: {source}")]
    Unreachable {
        address: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("reading {partition} from {address} failed: {message}")]
    Remote { partition: String, address: String, message: String },
    #[error("shuffle file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("partition {0} was released")]
    Released(String),
}

impl Error {
    /// Whether retrying may help (a peer not reachable yet, a partition not registered yet).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unreachable { .. } | Error::PartitionNotFound(_))
    }
}

/// Result with the shuffle's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
