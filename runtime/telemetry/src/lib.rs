//! How Floe's processes report themselves, the same way in each: the `floe` command's JobManager
//! and TaskManagers and the operator write their logs through [`logs`], and the JobManager's and
//! the TaskManagers' `/metrics` give a task's figures under one set of Flink names and helps
//! through [`metrics`], so a dashboard reads either.

pub mod logs;
pub mod metrics;
