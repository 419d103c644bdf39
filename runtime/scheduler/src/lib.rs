//! Floe's scheduling core: one pure model of a job, used by the JobManager to decide what runs where
//! and what restarts. No I/O, no async, no clocks: the JobManager feeds events in and carries the
//! decisions out, so everything here is a plain function of its inputs and testable at 10,000 tasks.
//!
//! Read in this order: [`JobGraph`] (what the user's job is), [`ExecutionGraph`] (its parallel form,
//! all-to-all edges stored as consumed partition groups), [`PipelinedRegions`] (the units of
//! scheduling), [`PipelinedRegionSchedulingStrategy`] (what to deploy next), [`failover`] (what to
//! restart), [`slots`] (where subtasks go), [`adaptive`] (parallelism decided from data),
//! [`autoscaler`] (the parallelism a running job needs, from its busy time and rates), and
//! [`plan`] (all of it at once). State machines live in [`state`].

pub mod adaptive;
pub mod autoscaler;
pub mod error;
pub mod execution_graph;
pub mod failover;
pub mod job_graph;
pub mod plan;
pub mod regions;
pub mod scheduling;
pub mod slots;
pub mod state;

pub use error::{Error, Result};
pub use execution_graph::{ExecutionGraph, ExecutionVertexId, PartitionId};
pub use job_graph::{BatchShuffleMode, DistributionPattern, JobEdge, JobGraph, JobVertex, Partitioner};
pub use plan::Plan;
pub use regions::PipelinedRegions;
pub use scheduling::PipelinedRegionSchedulingStrategy;
pub use state::{ExecutionState, JobStatus};
