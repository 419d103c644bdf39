//! Log lines to stderr, as text for people or as JSON (one object a line) for a cluster's log
//! collector (`--log-format json`: the operator's pods and the JobManager and TaskManager pods it
//! makes run with it).

/// How the process writes its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the process's log subscriber: `RUST_LOG` filters (else `default_level`), lines to
/// stderr as text or JSON.
pub fn init(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().with_current_span(false).init(),
    }
}
