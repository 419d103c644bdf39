//! Floe as a library: a user's crate depends on this one, registers its jobs in a [`JobRegistry`]
//! (built with the DataStream API, [`datastream`]) and calls [`main`], which is the whole `floe`
//! command with those jobs. [`cli`] parses arguments and calls into these modules: [`graph_file`]
//! reads JobGraph YAML, [`plan_cmd`] renders plans, [`run_cmd`] runs a manifest on a
//! [`local_cluster`] of real processes, [`generate`] writes seeded test inputs, [`new_project`] scaffolds a user's crate (`floe new`), [`verify`] proves a job's output exact under faults and
//! lifecycle operations, [`application`] is
//! the JobManager's application mode (`floe jobmanager --job-file`).

pub mod application;
pub mod cli;
pub mod client;
pub mod generate;
pub mod graph_file;
pub mod local_cluster;
pub mod new_project;
pub mod plan_cmd;
pub mod run_cmd;
pub mod verify;

pub use cli::main;
/// HTTP lookups for async I/O (`HttpLookup`).
pub use floe_connector_http as http;
/// The Kafka source and sink.
pub use floe_connector_kafka as kafka;
/// The DataStream API and the job registry, for a user's jobs.
pub use floe_datastream as datastream;
pub use floe_datastream::{JobRegistry, JobSpec};

/// The jobs that ship with Floe: the DataStream built-ins (`wordcount`, `pipeline`, `nexmark`, ...)
/// the Kafka jobs (`kafka-to-files`, `files-to-kafka`, `kafka-wordcount`, `kafka-keyed-count`),
/// `words-to-postgres`, `http-enrich` and `kafka-to-postgres`. A user's binary adds its own to these (or starts from an
/// empty registry).
pub fn jobs() -> JobRegistry {
    let mut registry = JobRegistry::builtin();
    floe_connector_kafka::register(&mut registry);
    floe_connector_postgres::register(&mut registry);
    floe_connector_http::register(&mut registry);
    floe_jobs::register(&mut registry);
    registry
}

/// mimalloc: the per-record path allocates small strings (words, keys), where glibc's malloc and
/// free took about 15% of WordCount's CPU. In the library, so a user's binary gets it too (and so
/// cannot declare a global allocator of its own).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The guide (`docs/src`, an mdBook): every Rust example in it is a doctest of this crate, so
/// `cargo test --workspace` compiles each one (and runs those that need no files or servers).
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../../docs/src/first-job.md")]
    pub struct FirstJob;
    #[doc = include_str!("../../../docs/src/types-and-state.md")]
    pub struct TypesAndState;
    #[doc = include_str!("../../../docs/src/event-time-and-windows.md")]
    pub struct EventTimeAndWindows;
    #[doc = include_str!("../../../docs/src/joins.md")]
    pub struct Joins;
    #[doc = include_str!("../../../docs/src/connectors-and-formats.md")]
    pub struct ConnectorsAndFormats;
    #[doc = include_str!("../../../docs/src/async-io.md")]
    pub struct AsyncIo;
    #[doc = include_str!("../../../docs/src/savepoints-and-upgrades.md")]
    pub struct SavepointsAndUpgrades;
    #[doc = include_str!("../../../docs/src/kubernetes.md")]
    pub struct Kubernetes;
    #[doc = include_str!("../../../docs/src/metrics-and-ui.md")]
    pub struct MetricsAndUi;
    #[doc = include_str!("../../../docs/src/migrating-from-flink.md")]
    pub struct MigratingFromFlink;
}
