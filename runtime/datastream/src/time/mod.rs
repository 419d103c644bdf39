//! Event time (seed 001, "Time"): timestamps on records, watermarks and watermark status flowing
//! with the data, and the processing-time clock a task ticks its chain with.
//!
//! A job that assigns timestamps (or uses timers or windows) is *timed*: every record crosses an
//! exchange as a stream element with its timestamp, and watermarks and idleness go in the same
//! buffers, in order with the records (`element`), so they travel through chains, pipelined and
//! blocking partitions alike, and a checkpoint barrier (sent after a full flush) never overtakes
//! them. A job that is not timed keeps the plain record encoding: WordCount pays nothing.
//!
//! Inside a chain, the timestamp of the record being processed is the task's [`TaskTime`] (Flink's
//! `StreamRecord` timestamp): the input side or a timestamp assigner sets it before a record goes
//! down the chain, operators that emit at a watermark (windows, timers) set it before they emit,
//! and the writer encodes it. Time events reach operators through `Op::on_time`.
//!
//! Start with [`WatermarkStrategy`]; `valve` is how a task combines its input channels, and
//! `timers` is the keyed timer service.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

pub(crate) mod element;
mod strategy;
pub(crate) mod timers;
pub(crate) mod valve;

pub(crate) use strategy::TimestampsAndWatermarks;
pub use strategy::WatermarkStrategy;

/// No watermark yet (Flink's `Long.MIN_VALUE`), and the timestamp of a record that has none.
pub const MIN_WATERMARK: i64 = i64::MIN;
/// End of input: every event-time timer and window fires (Flink's `Watermark.MAX_WATERMARK`).
pub const MAX_WATERMARK: i64 = i64::MAX;

/// `pipeline.auto-watermark-interval`: how often timestamp assigners emit watermarks and a task
/// checks its processing-time timers (Flink's default, 200 ms).
pub const AUTO_WATERMARK_INTERVAL_KEY: &str = "pipeline.auto-watermark-interval";
pub const DEFAULT_AUTO_WATERMARK_INTERVAL: Duration = Duration::from_millis(200);

/// What moves time on in an operator chain, between records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeEvent {
    /// Event time is at least this: no record with a smaller timestamp is expected any more.
    Watermark(i64),
    /// Every input of the task is idle (Flink's `WatermarkStatus.IDLE`): downstream tasks leave
    /// this channel out of their watermark until it is active again.
    Idle,
    /// An idle task has records again (`WatermarkStatus.ACTIVE`).
    Active,
    /// The task's processing-time clock (ms since the epoch), at every auto-watermark interval:
    /// timestamp assigners emit watermarks, processing-time timers fire.
    ProcessingTime(i64),
}

/// The time state a timed task's operators share (one task, one thread: relaxed atomics are plain
/// loads and stores).
#[derive(Debug)]
pub(crate) struct TaskTime {
    /// The timestamp of the record going down the chain now ([`MIN_WATERMARK`]: none).
    record: AtomicI64,
    /// How often the task ticks its chain with [`TimeEvent::ProcessingTime`].
    pub interval: Duration,
}

impl TaskTime {
    pub(crate) fn new(interval: Duration) -> Self {
        TaskTime {
            record: AtomicI64::new(MIN_WATERMARK),
            interval,
        }
    }

    #[inline]
    pub(crate) fn timestamp(&self) -> i64 {
        self.record.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set_timestamp(&self, ts: i64) {
        self.record.store(ts, Ordering::Relaxed)
    }
}

/// Milliseconds since the epoch: the processing-time clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64)
}
