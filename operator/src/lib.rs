//! The Floe operator: a kube-rs controller that turns each FlinkJob into a ConfigMap, a JobManager
//! Deployment and Service, and a TaskManager Deployment, and reports the job's state on the FlinkJob.
//!
//! Read [`controller::reconcile`] first. Objects are built by pure functions in [`resources`], the
//! status by pure functions in [`status`]; [`jobmanager_api`] is the one boundary to the job's own
//! JobManager (its REST API). The resource type itself lives in `floe-manifest`, shared with `floe run`.

pub mod controller;
pub mod crd;
pub mod health;
pub mod jobmanager_api;
pub mod leader;
pub mod metrics;
pub mod rbac;
pub mod render;
pub mod resources;
pub mod savepoints;
pub mod status;
pub mod uninstall;
pub mod workloads;

#[cfg(test)]
mod fixtures;
