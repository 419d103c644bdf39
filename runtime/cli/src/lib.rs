//! The `floe` command's parts. `main.rs` parses arguments and calls into these modules: [`graph_file`]
//! reads JobGraph YAML, [`plan_cmd`] renders plans, [`run_cmd`] runs a manifest on a
//! [`local_cluster`] of real processes, [`generate`] writes seeded test inputs, [`application`] is
//! the JobManager's application mode (`floe jobmanager --job-file`).

pub mod application;
pub mod generate;
pub mod graph_file;
pub mod local_cluster;
pub mod plan_cmd;
pub mod run_cmd;
