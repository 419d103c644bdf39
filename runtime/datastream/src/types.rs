//! Types every layer of the task runtime shares: the runtime mode, a task's counters and
//! the hash map keyed operators and their snapshots use. They live apart so that `checkpoint`,
//! `operators`, `io` and `task` depend on each other in one direction only
//! (`checkpoint` <- `operators` <- `io` <- `task`), with this module and `data` beneath them all.

use std::collections::HashMap;
use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

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

/// Counters of one task, updated once per buffer or per wait, not per record: records, and the
/// time it waited for input (idle) and for output buffers (backpressured), Flink's
/// `idleTimeMsPerSecond` and `backPressuredTimeMsPerSecond`; busy time is the rest of its running
/// time. A wait is timed only when the future it waits on is not ready at once
/// (`TaskMetrics::waiting`), so a task that never waits pays one poll per buffer and no clock.
#[derive(Debug)]
pub struct TaskMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    /// Bytes of the buffers the task read from its input gates and wrote to its result
    /// partitions (Flink's `numBytesIn`, `numBytesOut`): once per buffer.
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub idle_ns: AtomicU64,
    pub backpressured_ns: AtomicU64,
    /// Records a source knows are due but has not read yet (Flink's `pendingRecords`, a Kafka
    /// source's lag); `u64::MAX` when the source does not know.
    pub pending_records: AtomicU64,
    /// The event time the task's chain is at (Flink's `currentInputWatermark`; a source's, the
    /// watermark its assigner emitted); `i64::MIN` before the first.
    pub watermark: AtomicI64,
    /// Records a window operator dropped as too late for all their windows (Flink's
    /// `numLateRecordsDropped`).
    pub late_records_dropped: AtomicU64,
    /// When the task began to run (after restoring its state): busy time counts from here.
    pub running_since: OnceLock<Instant>,
    /// The task's result partitions and input gates, set when it is deployed: how full their
    /// buffers are is read from them when the metrics are.
    pub pools: OnceLock<BufferPools>,
    /// The metrics the task's functions registered (`RuntimeContext::metric_group`).
    pub user: std::sync::Arc<crate::metrics::UserMetrics>,
}

/// The buffers of a task's outputs and inputs (Flink's `buffers.outPoolUsage`,
/// `buffers.inPoolUsage`).
#[derive(Debug, Default)]
pub struct BufferPools {
    pub outputs: Vec<std::sync::Arc<dyn floe_shuffle::PoolUsage>>,
    pub inputs: Vec<std::sync::Arc<dyn floe_shuffle::PoolUsage>>,
}

fn pool_usage(pools: &[std::sync::Arc<dyn floe_shuffle::PoolUsage>]) -> Option<f64> {
    let (held, capacity) = pools
        .iter()
        .map(|p| p.usage())
        .fold((0, 0), |(h, c), (ph, pc)| (h + ph, c + pc));
    (capacity > 0).then(|| held as f64 / capacity as f64)
}

impl BufferPools {
    /// Buffers queued in the task's pipelined result partitions over what they may queue.
    pub fn out_usage(&self) -> Option<f64> {
        pool_usage(&self.outputs)
    }

    /// Buffers received and not yet taken over the credit its input channels may have out.
    pub fn in_usage(&self) -> Option<f64> {
        pool_usage(&self.inputs)
    }
}

impl Default for TaskMetrics {
    fn default() -> Self {
        TaskMetrics {
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            idle_ns: AtomicU64::new(0),
            backpressured_ns: AtomicU64::new(0),
            pending_records: AtomicU64::new(u64::MAX),
            watermark: AtomicI64::new(i64::MIN),
            late_records_dropped: AtomicU64::new(0),
            running_since: OnceLock::new(),
            pools: OnceLock::new(),
            user: Default::default(),
        }
    }
}

/// What a wait is for: input (idle) or output buffers (backpressure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Input,
    Output,
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

    pub(crate) fn add_bytes_in(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_bytes_out(&self, n: usize) {
        if n > 0 {
            self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_wait(&self, wait: Wait, elapsed: Duration) {
        let counter = match wait {
            Wait::Input => &self.idle_ns,
            Wait::Output => &self.backpressured_ns,
        };
        counter.fetch_add(
            elapsed.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// Nanoseconds since the task began to run (0 before).
    pub fn running_ns(&self) -> u64 {
        self.running_since
            .get()
            .map_or(0, |t| t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64)
    }

    pub(crate) fn add_late_dropped(&self, n: u64) {
        self.late_records_dropped.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn set_watermark(&self, watermark: i64) {
        self.watermark.store(watermark, Ordering::Relaxed);
    }

    /// The task's current watermark, once it has one.
    pub fn current_watermark(&self) -> Option<i64> {
        match self.watermark.load(Ordering::Relaxed) {
            i64::MIN => None,
            w => Some(w),
        }
    }

    /// The pending records a source reported, if it knows them.
    pub fn pending(&self) -> Option<u64> {
        match self.pending_records.load(Ordering::Relaxed) {
            u64::MAX => None,
            n => Some(n),
        }
    }

    /// Awaits `fut`, adding the time from its first `Pending` to its completion to `wait`'s
    /// counter: a future that is ready at once costs no clock read.
    pub(crate) async fn waiting<F: Future>(&self, wait: Wait, fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let mut since: Option<Instant> = None;
        let out = std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(v),
            Poll::Pending => {
                since.get_or_insert_with(Instant::now);
                Poll::Pending
            }
        })
        .await;
        if let Some(t) = since {
            self.add_wait(wait, t.elapsed());
        }
        out
    }
}
