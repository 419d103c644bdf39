//! Types every layer of the task runtime shares: the runtime mode, a task's record counters and
//! the hash map keyed operators and their snapshots use. They live apart so that `checkpoint`,
//! `operators`, `io` and `task` depend on each other in one direction only
//! (`checkpoint` <- `operators` <- `io` <- `task`), with this module and `data` beneath them all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Keyed state and combiner maps: foldhash, because keys here are short and hashing is on the
/// per-record path (std's SipHash cost WordCount a third of its time); no untrusted keys reach it in
/// a way that makes hash flooding a concern beyond the job's own data.
pub(crate) type KeyMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Flink's `execution.runtime-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RuntimeMode {
    /// Bounded input, blocking exchanges by default, sorted keyed aggregation, final results only.
    Batch,
    /// Pipelined exchanges, keyed state in memory, an update per input record.
    #[default]
    Streaming,
}

impl std::str::FromStr for RuntimeMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_uppercase().as_str() {
            "BATCH" => Ok(RuntimeMode::Batch),
            "STREAMING" | "AUTOMATIC" => Ok(RuntimeMode::Streaming),
            _ => Err(Error::config(
                "execution.runtime-mode",
                s,
                "expected BATCH or STREAMING",
            )),
        }
    }
}

/// Record counters of one task, updated once per buffer, not per record.
#[derive(Debug, Default)]
pub struct TaskMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
}

impl TaskMetrics {
    pub(crate) fn add_in(&self, n: u64) {
        if n > 0 {
            self.records_in.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_out(&self, n: u64) {
        if n > 0 {
            self.records_out.fetch_add(n, Ordering::Relaxed);
        }
    }
}
