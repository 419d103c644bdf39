//! Timestamp assignment and watermark generation (Flink's `WatermarkStrategy` and
//! `TimestampsAndWatermarksOperator`): bounded out-of-orderness, monotonous timestamps, no
//! watermarks, each optionally with idleness.

use std::sync::Arc;
use std::time::Duration;

use super::{MAX_WATERMARK, MIN_WATERMARK, TaskTime, TimeEvent};
use crate::checkpoint::ChainSnapshot;
use crate::data::Data;
use crate::error::Result;
use crate::operators::{BoxOp, Chunk, Collector, Op};
use crate::types::TaskMetrics;

/// A record's event time, from the record and the timestamp it carries so far
/// ([`MIN_WATERMARK`](super::MIN_WATERMARK) when none).
pub(crate) type TimestampFn<T> = Arc<dyn Fn(&T, i64) -> i64 + Send + Sync>;

/// How a stream gets timestamps and watermarks (Flink's `WatermarkStrategy`), given to
/// [`DataStream::assign_timestamps_and_watermarks`](crate::DataStream::assign_timestamps_and_watermarks).
/// Watermarks are emitted every `pipeline.auto-watermark-interval` (200 ms by default), like
/// Flink's periodic generators.
pub struct WatermarkStrategy<T> {
    /// `Some(bound)`: the watermark trails the largest timestamp seen by `bound` ms (Flink's
    /// `maxTimestamp - outOfOrderness - 1`); `None`: no watermarks (only end of input's).
    pub(crate) out_of_orderness: Option<i64>,
    pub(crate) assigner: Option<TimestampFn<T>>,
    pub(crate) idleness: Option<Duration>,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            out_of_orderness: self.out_of_orderness,
            assigner: self.assigner.clone(),
            idleness: self.idleness,
        }
    }
}

impl<T> std::fmt::Debug for WatermarkStrategy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatermarkStrategy")
            .field("out_of_orderness_ms", &self.out_of_orderness)
            .field("assigner", &self.assigner.is_some())
            .field("idleness", &self.idleness)
            .finish()
    }
}

impl<T: Data> WatermarkStrategy<T> {
    /// Records arrive at most `max` behind the largest timestamp seen (Flink's
    /// `forBoundedOutOfOrderness`).
    pub fn for_bounded_out_of_orderness(max: Duration) -> Self {
        WatermarkStrategy {
            out_of_orderness: Some(max.as_millis().min(i64::MAX as u128) as i64),
            assigner: None,
            idleness: None,
        }
    }

    /// Timestamps never go back (Flink's `forMonotonousTimestamps`: out-of-orderness 0).
    pub fn for_monotonous_timestamps() -> Self {
        Self::for_bounded_out_of_orderness(Duration::ZERO)
    }

    /// Timestamps only; the one watermark is end of input's (Flink's `noWatermarks`).
    pub fn no_watermarks() -> Self {
        WatermarkStrategy {
            out_of_orderness: None,
            assigner: None,
            idleness: None,
        }
    }

    /// A record's timestamp in ms: `f(record, timestamp it had)` (Flink's
    /// `withTimestampAssigner`). Without one, records keep the timestamps they carry.
    pub fn with_timestamp_assigner(mut self, f: impl Fn(&T, i64) -> i64 + Send + Sync + 'static) -> Self {
        self.assigner = Some(Arc::new(f));
        self
    }

    /// A subtask that sees no records for `timeout` is idle: downstream watermarks go on without
    /// it until it has records again (Flink's `withIdleness`).
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }
}

/// The operator of `assign_timestamps_and_watermarks`: sets each record's timestamp, and emits its
/// own watermarks in place of upstream's (only end of input's passes through).
pub(crate) struct TimestampsAndWatermarks<T> {
    strategy: WatermarkStrategy<T>,
    time: Arc<TaskTime>,
    metrics: Arc<TaskMetrics>,
    down: BoxOp<T>,
    max_timestamp: i64,
    emitted: i64,
    /// Records came since the last idleness check.
    active_since_check: bool,
    /// Processing time when the current stretch without records began.
    inactive_since: Option<i64>,
    idle: bool,
}

impl<T: Data> TimestampsAndWatermarks<T> {
    pub(crate) fn new(
        strategy: WatermarkStrategy<T>,
        time: Arc<TaskTime>,
        metrics: Arc<TaskMetrics>,
        down: BoxOp<T>,
    ) -> Self {
        TimestampsAndWatermarks {
            strategy,
            time,
            metrics,
            down,
            max_timestamp: MIN_WATERMARK,
            emitted: MIN_WATERMARK,
            active_since_check: false,
            inactive_since: None,
            idle: false,
        }
    }

    fn emit(&mut self, watermark: i64) {
        if watermark > self.emitted {
            self.emitted = watermark;
            self.metrics.set_watermark(watermark);
            self.down.on_time(TimeEvent::Watermark(watermark));
        }
    }

    fn periodic(&mut self, now: i64) {
        if let Some(timeout) = self.strategy.idleness {
            let timeout = timeout.as_millis().min(i64::MAX as u128) as i64;
            if std::mem::take(&mut self.active_since_check) {
                self.inactive_since = None;
            } else {
                let since = *self.inactive_since.get_or_insert(now);
                if !self.idle && now.saturating_sub(since) >= timeout {
                    self.idle = true;
                    self.down.on_time(TimeEvent::Idle);
                }
            }
        }
        if self.idle {
            return;
        }
        if let Some(bound) = self.strategy.out_of_orderness
            && self.max_timestamp != MIN_WATERMARK
        {
            self.emit(self.max_timestamp.saturating_sub(bound).saturating_sub(1));
        }
    }
}

impl<T: Data> Collector<T> for TimestampsAndWatermarks<T> {
    fn collect(&mut self, record: T) {
        let mut record = record;
        self.collect_reused(&mut record);
    }
}

impl<T: Data> Op<T> for TimestampsAndWatermarks<T> {
    fn takes_reused(&self) -> bool {
        self.down.takes_reused()
    }

    fn collect_reused(&mut self, record: &mut T) {
        let ts = match &self.strategy.assigner {
            Some(f) => f(record, self.time.timestamp()),
            None => self.time.timestamp(),
        };
        self.time.set_timestamp(ts);
        self.max_timestamp = self.max_timestamp.max(ts);
        self.active_since_check = true;
        if self.idle {
            self.idle = false;
            self.down.on_time(TimeEvent::Active);
        }
        if self.down.takes_reused() {
            self.down.collect_reused(record)
        } else {
            self.down.collect(record.clone())
        }
    }

    fn on_time(&mut self, event: TimeEvent) {
        match event {
            // Upstream's watermarks and status give way to this strategy's; end of input does not.
            TimeEvent::Watermark(MAX_WATERMARK) => {
                if self.idle {
                    self.idle = false;
                    self.down.on_time(TimeEvent::Active);
                }
                self.emit(MAX_WATERMARK)
            }
            TimeEvent::Watermark(_) | TimeEvent::Idle | TimeEvent::Active => {}
            TimeEvent::ProcessingTime(now) => {
                self.periodic(now);
                self.down.on_time(event);
            }
        }
    }

    fn finish(&mut self) {
        self.down.finish()
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        self.down.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.down.failure()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::tests::TimedSink;

    type Assigner = TimestampsAndWatermarks<(i64, u32)>;

    fn assigner(strategy: WatermarkStrategy<(i64, u32)>) -> (Assigner, TimedSink<(i64, u32)>) {
        let time = Arc::new(TaskTime::new(Duration::from_millis(200)));
        let sink = TimedSink::new(time.clone());
        let op = TimestampsAndWatermarks::new(strategy, time, Arc::default(), Box::new(sink.clone()));
        (op, sink)
    }

    #[test]
    fn bounded_out_of_orderness_trails_the_largest_timestamp_and_never_goes_back() {
        let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(10))
            .with_timestamp_assigner(|r: &(i64, u32), _| r.0);
        let (mut op, sink) = assigner(strategy);
        op.on_time(TimeEvent::ProcessingTime(0));
        assert!(sink.events().is_empty(), "no watermark before a record");
        op.collect((100, 1));
        op.collect((95, 2));
        op.on_time(TimeEvent::ProcessingTime(200));
        op.collect((90, 3));
        op.on_time(TimeEvent::ProcessingTime(400));
        op.collect((130, 4));
        op.on_time(TimeEvent::ProcessingTime(600));
        // Upstream watermarks are replaced, end of input passes.
        op.on_time(TimeEvent::Watermark(1_000));
        op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
        assert_eq!(
            sink.records(),
            vec![(100, (100, 1)), (95, (95, 2)), (90, (90, 3)), (130, (130, 4))]
        );
        assert_eq!(
            sink.watermarks(),
            vec![89, 119, MAX_WATERMARK],
            "max - bound - 1 at each interval, once per value"
        );
    }

    #[test]
    fn monotonous_timestamps_and_idleness() {
        let strategy = WatermarkStrategy::for_monotonous_timestamps()
            .with_timestamp_assigner(|r: &(i64, u32), _| r.0)
            .with_idleness(Duration::from_millis(500));
        let (mut op, sink) = assigner(strategy);
        op.collect((7, 0));
        op.on_time(TimeEvent::ProcessingTime(1_000));
        op.on_time(TimeEvent::ProcessingTime(1_200));
        op.on_time(TimeEvent::ProcessingTime(1_600));
        op.on_time(TimeEvent::ProcessingTime(1_800));
        op.collect((8, 0));
        op.on_time(TimeEvent::ProcessingTime(2_000));
        assert_eq!(
            sink.events(),
            vec![
                TimeEvent::Watermark(6),
                TimeEvent::Idle,
                TimeEvent::Active,
                TimeEvent::Watermark(7)
            ],
            "idle after 500 ms of processing time without records, active with the next one"
        );
    }
}
