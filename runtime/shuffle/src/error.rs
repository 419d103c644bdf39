//! Errors of the shuffle: typed so that a gate knows what to retry (a producer not up yet) and a user
//! sees which partition on which TaskManager failed.

/// What can go wrong moving data between tasks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("partition {0} is not known to this TaskManager")]
    PartitionNotFound(String),
    #[error("partition {0} is already registered on this TaskManager")]
    PartitionExists(String),
    #[error("subpartition {subpartition} out of range: partition {partition} has {count}")]
    SubpartitionOutOfRange {
        partition: String,
        subpartition: u32,
        count: u32,
    },
    #[error("subpartition {subpartition} of {partition} is already being read by another consumer")]
    SubpartitionBusy { partition: String, subpartition: u32 },
    #[error("subpartition {subpartition} of pipelined partition {partition} was already fully consumed")]
    AlreadyConsumed { partition: String, subpartition: u32 },
    #[error("invalid job id {0:?}: it names a directory, so it must be non-empty without '/', '\\' or '..'")]
    InvalidJobId(String),
    #[error("invalid shuffle request: {0}")]
    InvalidRequest(String),
    #[error("cannot reach TaskManager at {address} to read {partition}: {source}")]
    Unreachable {
        address: String,
        partition: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The connection to a producer TaskManager broke (gRPC `UNAVAILABLE`): worth reconnecting.
    #[error("TaskManager at {address} is unavailable for {partition}: {message}")]
    Unavailable {
        partition: String,
        address: String,
        message: String,
    },
    #[error("reading {partition} from {address} failed: {message}")]
    Remote {
        partition: String,
        address: String,
        message: String,
    },
    #[error("producer of {0} stopped before finishing its partition")]
    ProducerFailed(String),
    /// A gate keeps failing after its first error: the task must fail, not read on with a hole.
    #[error("input gate failed earlier: {0}")]
    GateFailed(String),
    #[error("shuffle file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("partition {0} was released")]
    Released(String),
    /// A remote partition could not be written to or read from object storage.
    #[error("remote partition {partition}: {source}")]
    Storage {
        partition: String,
        /// Boxed: storage errors carry opendal's context and would make every shuffle result large.
        #[source]
        source: Box<floe_storage::Error>,
    },
    /// A channel names object storage, but the task was given none (`shuffle.remote.enabled` without
    /// a storage URL).
    #[error("partition {0} is in object storage, but this task has no storage configured")]
    NoStorage(String),
    #[error("invalid configuration {key}: {message}")]
    Config { key: String, message: String },
    /// A consumer could not read `partition` (not found, its TaskManager gone, its file or object
    /// missing, its producer failed): the JobManager treats it as lost, so failover restarts its
    /// producer too rather than only the consumer, which would fail the same way again.
    #[error("cannot read partition {partition}: {source}")]
    PartitionUnavailable {
        partition: crate::ResultPartitionId,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// Whether retrying may help (a peer not reachable yet, a partition not registered yet).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Unreachable { .. }
                | Error::Unavailable { .. }
                | Error::PartitionNotFound(_)
                | Error::SubpartitionBusy { .. }
        ) || matches!(self, Error::Storage { source, .. } if source.is_retryable())
            || matches!(self, Error::PartitionUnavailable { source, .. } if source.is_retryable())
    }

    /// The partitions this error says could not be read.
    pub fn unavailable_partition(&self) -> Option<&crate::ResultPartitionId> {
        match self {
            Error::PartitionUnavailable { partition, .. } => Some(partition),
            _ => None,
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Result with the shuffle's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
