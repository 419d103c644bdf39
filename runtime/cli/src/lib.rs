//! The `floe` command's parts. `main.rs` parses arguments and calls into these modules; the modules
//! own the work: [`graph_file`] reads JobGraph YAML, [`plan_cmd`] renders plans.

pub mod graph_file;
pub mod plan_cmd;
