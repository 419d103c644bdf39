//! Nexmark, the streaming benchmark Flink, Arroyo and RisingWave report: the model (people,
//! auctions, bids), a generator after the reference rules ([`NexmarkConfig`]), a source of it
//! that is deterministic per seed, split across subtasks and rate-limitable, and the queries
//! written with the DataStream API, registered as the job `nexmark` (`--query q5 --events N`).
//!
//! The source knows its event time: each split (a subtask's stride of event numbers, in time
//! order) emits the watermark the suite declares (`dateTime - 4 s`), and a subtask reading
//! several splits (after a rescale) emits the smallest (Flink's per-split watermarks).

use std::sync::Arc;

use async_trait::async_trait;

use crate::api::{DataStream, StreamExecutionEnvironment};
use crate::error::Result;
use crate::io::Source;
use crate::operators::Op;
use crate::pace::{Pacer, Stride, paced_batch};
use crate::time::TaskTime;
use crate::types::TaskMetrics;

mod generator;
mod model;
mod queries;
mod reference;
mod rules;

pub use generator::{BASE_TIME, FIRST_AUCTION_ID, FIRST_PERSON_ID, NexmarkConfig};
pub use model::{Auction, Bid, Event, Person, parse_sql_timestamp, sql_timestamp};
pub use queries::{NEXMARK, QUERIES, nexmark_job};
pub use reference::{output_table, reference};
pub use rules::{BROADCAST_RULES, broadcast_rules_job, rule_factor, rules_reference};

/// The suite's watermark delay: `WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND`.
pub const WATERMARK_DELAY_MS: i64 = 4_000;

/// One split of the generator: events `next, next + step, ...`.
pub(crate) struct NexmarkSource {
    config: Arc<NexmarkConfig>,
    stride: Stride,
    pacer: Pacer,
    time: Arc<TaskTime>,
    /// The time of the last event made: later ones of this split are no earlier.
    last: Option<i64>,
    metrics: Arc<TaskMetrics>,
    /// The latency benchmark: each event's stream timestamp is the wall-clock µs it was made
    /// (its `dateTime` stays the model's).
    wall_clock: bool,
}

#[async_trait]
impl Source<Event> for NexmarkSource {
    async fn produce(&mut self, out: &mut dyn Op<Event>) -> Result<bool> {
        let (config, time, last, wall_clock) = (&self.config, &self.time, &mut self.last, self.wall_clock);
        let make = |n| {
            let event = config.event(n);
            let ts = event.date_time();
            time.set_timestamp(if wall_clock { crate::latency::now_us() } else { ts });
            *last = Some(ts);
            out.collect(event);
        };
        Ok(paced_batch(&mut self.stride, &mut self.pacer, &self.metrics, make).await)
    }

    fn position(&self) -> String {
        self.stride.position()
    }

    fn restore(&mut self, position: &str) -> std::result::Result<(), String> {
        self.stride = Stride::restore(position)?;
        Ok(())
    }

    fn pending(&self) -> Option<u64> {
        self.pacer.lag
    }

    fn share_rate(&mut self, n: usize) {
        self.pacer.share(n)
    }

    fn watermark(&self) -> Option<i64> {
        // Before its first event a split holds event time at the start of its stride.
        let at = self
            .last
            .unwrap_or_else(|| self.config.timestamp(self.stride.next));
        Some(at - WATERMARK_DELAY_MS - 1)
    }
}

/// Events `0..events`.
pub fn events(config: &NexmarkConfig, events: u64) -> Vec<Event> {
    (0..events).map(|n| config.event(n)).collect()
}

impl StreamExecutionEnvironment {
    /// Nexmark events `0..events` (`None`: unbounded) with timestamps and the suite's watermarks,
    /// at `rate` events per second of wall-clock time for the whole source (`None`: as fast as
    /// it goes). Subtask `s` of `p` makes events `s, s + p, ...`: the same events at any
    /// parallelism, every subtask's event time advancing alike.
    pub fn nexmark_source(
        &self,
        config: NexmarkConfig,
        events: Option<u64>,
        rate: Option<f64>,
    ) -> DataStream<Event> {
        self.nexmark_source_with(config, events, rate, false)
    }

    /// [`Self::nexmark_source`]; `wall_clock`: each event's stream timestamp is the wall-clock
    /// µs it was made at (for the latency sink; only stateless queries).
    pub(crate) fn nexmark_source_with(
        &self,
        config: NexmarkConfig,
        events: Option<u64>,
        rate: Option<f64>,
        wall_clock: bool,
    ) -> DataStream<Event> {
        let config = Arc::new(config);
        self.timed_source("Source: Nexmark", move |ctx, time| {
            let p = f64::from(ctx.parallelism.max(1));
            NexmarkSource {
                config: config.clone(),
                stride: Stride::interleaved(ctx.subtask, ctx.parallelism, events),
                pacer: Pacer::new(rate.map(|r| vec![(0, r / p)]).unwrap_or_default()),
                time,
                last: None,
                metrics: ctx.metrics.clone(),
                wall_clock,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::tests::TimedSink;
    use crate::time::TimeEvent;

    #[tokio::test]
    async fn a_split_sets_each_events_time_and_trails_it_with_its_watermark() {
        let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
        let config = Arc::new(NexmarkConfig::default());
        let mut source = NexmarkSource {
            config: config.clone(),
            stride: Stride::interleaved(1, 3, Some(3_000)),
            pacer: Pacer::default(),
            time: time.clone(),
            last: None,
            metrics: Arc::default(),
            wall_clock: false,
        };
        assert_eq!(source.watermark(), Some(config.timestamp(1) - 4_001));
        let mut sink = TimedSink::new(time);
        while source.produce(&mut sink).await.unwrap() {}
        let records = sink.records();
        assert_eq!(records.len(), 1_000);
        for (i, (ts, event)) in records.iter().enumerate() {
            assert_eq!(*event, config.event(1 + 3 * i as u64));
            assert_eq!(*ts, event.date_time());
        }
        assert_eq!(source.watermark(), Some(config.timestamp(2_998) - 4_001));
        assert!(
            sink.events()
                .iter()
                .all(|e| !matches!(e, TimeEvent::Watermark(_)))
        );
    }
}
