//! Errors of the JobManager.

/// What the JobManager refuses or fails at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("job {0} not found")]
    UnknownJob(String),
    #[error("cannot build job '{job}': {message}")]
    JobBuild { job: String, message: String },
    #[error("invalid configuration {key}: {message}")]
    Config { key: String, message: String },
    #[error(transparent)]
    Scheduling(#[from] floe_scheduler::Error),
    /// The cause is in the message, not chained, so any way of printing it says why.
    #[error("cannot bind {address}: {cause}")]
    Bind { address: String, cause: std::io::Error },
    #[error("server failed: {0}")]
    Serve(String),
    /// The operation log could not be taken, read or written (fenced, lost the election, corrupt).
    #[error(transparent)]
    Oplog(#[from] floe_oplog::Error),
    /// This JobManager stopped acting earlier (a log write was refused); it writes nothing more.
    #[error("this JobManager has stopped: {0}")]
    Stopped(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
