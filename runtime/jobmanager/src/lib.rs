//! Floe's JobManager: accepts TaskManagers (registration, heartbeats, slots) and jobs, and drives each
//! job through the scheduling core: region scheduling, deployment into slots, state tracking, region
//! failover with the fixed-delay restart strategy, cancellation. REST API in Flink's shape.
//!
//! Read [`job::JobMaster`] first: the synchronous reactions of one job to events, returning
//! [`job::Action`]s. [`server::JobManager`] is the async process around it; [`rest`] is the HTTP API.

pub mod checkpoint_history;
pub mod checkpointing;
pub mod checkpoints;
pub mod error;
pub mod job;
pub mod oplog;
pub mod rest;
pub mod server;

pub use error::{Error, Result};
pub use server::{EndedJob, JobManager, JobManagerConfig, JobStatusSnapshot};
