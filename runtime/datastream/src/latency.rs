//! End-to-end latency of a job (the latency benchmark of issue 14): a source stamps each record
//! with the wall-clock microsecond it made it (its stream timestamp; Beam's wall-clock event time,
//! at a finer grain), and the latency sink puts `now - stamp` of every record into a histogram,
//! written at the end of input as `bucket start (µs) TAB count` lines, one file per sink subtask,
//! for the benchmark to merge. Only stateless queries run so (their stream timestamps mean
//! nothing else to them).

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use crate::api::{DataStream, SinkFactory};
use crate::checkpoint::ChainSnapshot;
use crate::data::Data;
use crate::error::Result;
use crate::io::{FileSinkIo, SinkIo};
use crate::operators::{BoxOp, Chunk, Collector, Op, OpContext, Target, erase};
use crate::time::{TaskTime, TimeEvent};
use crate::types::TaskMetrics;

/// Microseconds since the epoch.
pub(crate) fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros().min(i64::MAX as u128) as i64)
}

/// Histogram resolution and range: 10 µs buckets up to 1 s; later records share the last.
const BUCKET_US: i64 = 10;
const BUCKETS: usize = 100_000;

/// Latencies, counted per 10 µs.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: vec![0; BUCKETS],
        }
    }
}

impl LatencyHistogram {
    pub fn record(&mut self, latency_us: i64) {
        let i = (latency_us.max(0) / BUCKET_US).min(BUCKETS as i64 - 1) as usize;
        self.counts[i] += 1;
    }

    /// Adds a histogram as [`LatencyHistogram::to_text`] wrote it.
    pub fn add_text(&mut self, text: &str) -> std::result::Result<(), String> {
        for line in text.lines().filter(|l| !l.is_empty()) {
            let parse = |v: Option<&str>| v.and_then(|v| v.trim().parse::<i64>().ok());
            let mut f = line.split('\t');
            match (parse(f.next()), parse(f.next())) {
                (Some(start), Some(n)) if start >= 0 && n >= 0 => {
                    let i = (start / BUCKET_US).min(BUCKETS as i64 - 1) as usize;
                    self.counts[i] += n as u64;
                }
                _ => return Err(format!("not a latency histogram line: {line:?}")),
            }
        }
        Ok(())
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (i, &n) in self.counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            out.push_str(&format!("{}\t{n}\n", i as i64 * BUCKET_US));
        }
        out
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The latency (µs, a bucket's upper end) below which fraction `q` of the records are.
    pub fn quantile_us(&self, q: f64) -> i64 {
        let total = self.count();
        let want = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= want {
                return (i as i64 + 1) * BUCKET_US;
            }
        }
        BUCKETS as i64 * BUCKET_US
    }
}

/// The latency sink's operator: records each record's latency, writes the histogram at the end.
struct LatencyOp<T> {
    time: Option<Arc<TaskTime>>,
    histogram: LatencyHistogram,
    /// Records made before `first + warmup` are not counted (start-up: tasks still deploying).
    warmup_us: i64,
    first: Option<i64>,
    pending: Vec<Chunk>,
    count: u64,
    metrics: Arc<TaskMetrics>,
    _t: PhantomData<fn(T)>,
}

impl<T: Data> Collector<T> for LatencyOp<T> {
    fn collect(&mut self, _: T) {
        self.count += 1;
        let Some(made) = self.time.as_ref().map(|t| t.timestamp()) else {
            return;
        };
        // Without a warm-up every record counts, also one made before the first to arrive
        // (rows of several source subtasks interleave).
        let first = *self.first.get_or_insert(made);
        if self.warmup_us == 0 || made >= first + self.warmup_us {
            self.histogram.record(now_us() - made);
        }
    }
}

impl<T: Data> Op<T> for LatencyOp<T> {
    fn on_time(&mut self, _: TimeEvent) {}

    fn finish(&mut self) {
        self.pending.push(Chunk {
            target: Target::Sink,
            subpartition: 0,
            bytes: Bytes::from(self.histogram.to_text()),
        });
    }

    fn drain(&mut self, _: bool, out: &mut Vec<Chunk>) {
        out.append(&mut self.pending);
        self.metrics.add_out(std::mem::take(&mut self.count));
    }

    fn snapshot(&mut self, _: u64, _: &mut ChainSnapshot) -> Result<()> {
        Ok(())
    }

    fn failure(&mut self) -> Option<String> {
        None
    }
}

impl<T: Data> DataStream<T> {
    /// A sink that keeps only each record's latency (now less its stream timestamp, read as wall
    /// clock µs), not counting records made in the first `warmup`; one histogram file per
    /// subtask under `url`.
    pub(crate) fn sink_latency(&self, url: &str, warmup: std::time::Duration) -> crate::api::DataStreamSink {
        let url = url.to_string();
        let warmup_us = warmup.as_micros().min(i64::MAX as u128) as i64;
        let factory: SinkFactory = Arc::new(move |ctx: &OpContext, metrics: Arc<TaskMetrics>| {
            let op: BoxOp<T> = Box::new(LatencyOp::<T> {
                time: ctx.time.clone(),
                histogram: LatencyHistogram::default(),
                warmup_us,
                first: None,
                pending: Vec::new(),
                count: 0,
                metrics,
                _t: PhantomData,
            });
            let sink = FileSinkIo::new(url.clone(), ctx);
            Ok((erase::<T>(op), Box::new(sink) as Box<dyn SinkIo>))
        });
        self.push_sink("Sink: Latency", factory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_histogram_survive_its_text() {
        let mut h = LatencyHistogram::default();
        for us in 0..1_000 {
            h.record(us);
        }
        h.record(5_000_000); // beyond the range: the last bucket
        let mut back = LatencyHistogram::default();
        back.add_text(&h.to_text()).expect("parses");
        assert_eq!(back.count(), 1_001);
        // Upper ends of 10 µs buckets: the 501st of 1,001 is in [500, 510).
        assert_eq!(back.quantile_us(0.5), 510);
        assert_eq!(back.quantile_us(0.99), 1_000);
        assert_eq!(back.quantile_us(1.0), 1_000_000);
        assert!(back.add_text("x\t1").is_err());
    }
}
