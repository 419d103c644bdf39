//! Errors of the DataStream API and the task runtime.

/// What can go wrong building a job or running one of its tasks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A job argument is missing, unknown or malformed (`--input`, `--output`, ...).
    #[error("job argument {argument}: {message}")]
    Argument { argument: String, message: String },
    /// A configuration key has a value Floe cannot use.
    #[error("configuration {key} = {value:?}: {message}")]
    Configuration {
        key: String,
        value: String,
        message: String,
    },
    /// No job of that name is registered.
    #[error("unknown job {name:?}; registered jobs: {registered}")]
    UnknownJob { name: String, registered: String },
    /// The stream graph cannot be turned into a JobGraph.
    /// A connector (Kafka) failed: the broker, topic, partition or record it names.
    #[error("{connector}: {message}")]
    Connector { connector: String, message: String },

    #[error("invalid stream graph: {0}")]
    Graph(String),
    /// The scheduler rejected the generated JobGraph.
    #[error("job graph: {0}")]
    JobGraph(#[from] floe_scheduler::Error),
    /// The TaskManager asked for a task that does not fit the job (wrong vertex, wrong gates).
    #[error("task of vertex {vertex}: {message}")]
    Task { vertex: u32, message: String },
    /// A shuffle buffer did not decode (corrupt or written by a different job build).
    #[error("cannot decode record: {0}")]
    Decode(String),
    /// Keyed state could not be read, written, snapshotted or restored.
    #[error("keyed state: {0}")]
    State(String),
    /// A checkpointed position or sink state does not parse (written by a different build).
    #[error("restoring from checkpoint {checkpoint}: {message}")]
    Restore { checkpoint: u64, message: String },
    /// Reading from or writing to the shuffle failed.
    #[error("shuffle: {0}")]
    Shuffle(#[from] floe_shuffle::Error),
    /// Reading a source or writing a sink failed.
    #[error("storage {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: opendal::Error,
    },
    /// A source's location holds nothing to read.
    #[error(
        "no input files at {url}: expected a file, or a directory of files (names starting with '.' or '_' are hidden)"
    )]
    NoInput { url: String },
    /// A file sink's location is a file, where its part files would go.
    #[error("output {url} is a file: expected a directory (created if missing)")]
    OutputIsAFile { url: String },
    /// Opening object storage failed (a bad URL, an unreachable store).
    #[error(transparent)]
    ObjectStore(#[from] floe_storage::Error),
    /// A record of a source's input does not parse (issue 34, item 4): no restart can fix it,
    /// so the job fails at once, naming where the record is and what is wrong with it.
    #[error("bad record in {file}, line {line}: {message}")]
    BadRecord {
        file: String,
        line: u64,
        message: String,
    },
    /// An operator failed while it ran: a user function's `open`, per-record call or `close`
    /// returned an error, or state or a side output could not be written. The task fails and
    /// the job's restart strategy applies, as when a Flink function throws.
    #[error("{0}")]
    Operator(String),
    /// Writing to stdout (the print sink) failed.
    #[error("print sink: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Whether retrying the task may help: storage and shuffle hiccups may pass, bad jobs do not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Shuffle(e) => e.is_retryable(),
            Error::Storage { source, .. } => source.is_temporary(),
            Error::ObjectStore(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// Whether restarting the task cannot help: the job's arguments, configuration or graph are
    /// wrong, its input is missing, its storage refuses it. The JobManager then fails the job at
    /// once instead of spending its restart budget (Flink's non-recoverable errors).
    pub fn is_non_recoverable(&self) -> bool {
        match self {
            Error::Argument { .. }
            | Error::Configuration { .. }
            | Error::UnknownJob { .. }
            | Error::Graph(_)
            | Error::JobGraph(_)
            | Error::Task { .. }
            | Error::Restore { .. }
            | Error::NoInput { .. }
            | Error::OutputIsAFile { .. }
            | Error::BadRecord { .. } => true,
            Error::Storage { source, .. } => floe_storage::is_permanent_kind(source.kind()),
            Error::ObjectStore(e) => e.is_permanent(),
            _ => false,
        }
    }

    /// The input partition this task could not read, when that is why it failed: failover must
    /// produce it again.
    /// The task failed because a producer it read from stopped (its input's failure, not its
    /// own): the producer's failure is the cause.
    pub fn is_input_failure(&self) -> bool {
        fn producer_failed(e: &floe_shuffle::Error) -> bool {
            match e {
                floe_shuffle::Error::ProducerFailed(_) | floe_shuffle::Error::GateFailed(_) => true,
                floe_shuffle::Error::PartitionUnavailable { source, .. } => producer_failed(source),
                _ => false,
            }
        }
        matches!(self, Error::Shuffle(e) if producer_failed(e))
    }

    pub fn unavailable_partition(&self) -> Option<&floe_shuffle::ResultPartitionId> {
        match self {
            Error::Shuffle(e) => e.unavailable_partition(),
            _ => None,
        }
    }

    pub fn argument(argument: &str, message: impl Into<String>) -> Self {
        Error::Argument {
            argument: argument.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn config(key: &str, value: &str, message: impl Into<String>) -> Self {
        Error::Configuration {
            key: key.to_string(),
            value: value.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn storage(path: &str, source: opendal::Error) -> Self {
        Error::Storage {
            path: path.to_string(),
            source,
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
