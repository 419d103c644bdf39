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

/// Flink-style durations: `500 ms`, `1 s`, `2min`, `1 h`, `1 d`; a bare number is milliseconds. (Here
/// because every crate that reads Flink's keys depends on this one.)
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit.trim() {
        "" | "ms" | "milli" | "millis" | "milliseconds" => n,
        "s" | "sec" | "secs" | "second" | "seconds" => n * 1000,
        "min" | "m" | "minute" | "minutes" => n * 60_000,
        "h" | "hour" | "hours" => n * 3_600_000,
        "d" | "day" | "days" => n * 86_400_000,
        _ => return None,
    };
    Some(std::time::Duration::from_millis(ms))
}
