//! What the seeded generators (`data_generator`, the Nexmark source) share: a subtask's
//! [`Stride`] through the numbered records of the whole source (any parallelism reads the same
//! records), and the [`Pacer`] that holds a rate-limited generator to its schedule.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::types::TaskMetrics;

/// Records `next, next + step, ...` up to `end` (exclusive; `None`: unbounded). Its position is
/// self-describing (stride and end, not only where it is), so a subtask of another parallelism
/// can take it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stride {
    pub next: u64,
    pub step: u64,
    pub end: Option<u64>,
}

impl Stride {
    /// Subtask `s` of `p`: a contiguous share of `0..count`, or every `p`-th record from `s`.
    pub(crate) fn of_subtask(s: u32, p: u32, count: Option<u64>) -> Self {
        let (s, p) = (u64::from(s), u64::from(p.max(1)));
        match count {
            Some(c) => Stride {
                next: c * s / p,
                step: 1,
                end: Some(c * (s + 1) / p),
            },
            None => Stride {
                next: s,
                step: p,
                end: None,
            },
        }
    }

    /// Subtask `s` of `p` interleaved: records `s, s + p, ...` below `count`, so every subtask's
    /// records are spread over the whole range (event time advances alike in all of them).
    pub(crate) fn interleaved(s: u32, p: u32, count: Option<u64>) -> Self {
        Stride {
            next: u64::from(s),
            step: u64::from(p.max(1)),
            end: count,
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.end.is_some_and(|e| self.next >= e)
    }

    pub(crate) fn position(&self) -> String {
        match self.end {
            Some(end) => format!("next={},step={},end={end}", self.next, self.step),
            None => format!("next={},step={}", self.next, self.step),
        }
    }

    pub(crate) fn restore(position: &str) -> Result<Self, String> {
        let fields = position.split(',').count();
        let (next, step, end) = match fields {
            3 => {
                let [next, step, end] = crate::io::position_fields(position, ["next", "step", "end"])?;
                (next, step, Some(end))
            }
            2 => {
                let [next, step] = crate::io::position_fields(position, ["next", "step"])?;
                (next, step, None)
            }
            _ => return Err(format!("expected next=N,step=S[,end=E], got {position:?}")),
        };
        if step == 0 {
            return Err("step must be at least 1".into());
        }
        Ok(Stride { next, step, end })
    }
}

/// One batch of a paced generator: the wait until its first record is due, then `make(n)` for
/// each record number `n` the batch takes from `stride` (as many as `pacer` allows), so records
/// leave as soon as they are made (waiting after making them held each batch back by its own
/// length: 20 ms at 50,000 records/s). `false` when the stride is done.
pub(crate) async fn paced_batch(
    stride: &mut Stride,
    pacer: &mut Pacer,
    metrics: &Arc<TaskMetrics>,
    mut make: impl FnMut(u64),
) -> bool {
    let rate = pacer.rate(stride.next);
    let batch = pacer.batch(stride.next);
    if !stride.done() {
        pacer.wait_for_next(rate, metrics).await;
    }
    let mut made = 0;
    while made < batch && !stride.done() {
        make(stride.next);
        stride.next += stride.step;
        made += 1;
    }
    if made == 0 {
        return false;
    }
    pacer.emitted += made;
    !stride.done()
}

/// Holds a generator to `rates`: `(from record, records per second)` steps for this subtask, the
/// step whose first record `next` reached applies. Behind schedule (backpressured) it lets the
/// generator read as fast as it can until it caught up, and says how far behind it is (a Kafka
/// source's lag); waiting for a record's time is idle time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pacer {
    pub rates: Vec<(u64, f64)>,
    pub emitted: u64,
    /// Where the current rate's clock started: when, at which rate, after how many records.
    started: Option<(Instant, f64, u64)>,
    /// Records behind the schedule at the last batch.
    pub lag: Option<u64>,
}

impl Pacer {
    pub(crate) fn new(rates: Vec<(u64, f64)>) -> Self {
        Pacer {
            rates,
            ..Pacer::default()
        }
    }

    /// The rate at record `next`, if limited.
    pub(crate) fn rate(&self, next: u64) -> Option<f64> {
        self.rates
            .iter()
            .rev()
            .find(|(from, _)| next >= *from)
            .map(|(_, r)| *r)
            .filter(|r| *r > 0.0)
    }

    /// Records to make in the next batch: a millisecond's worth when limited (records of a
    /// batch are made at once), at most 1024.
    pub(crate) fn batch(&self, next: u64) -> u64 {
        match self.rate(next) {
            Some(r) => ((r / 1000.0) as u64).clamp(1, 1024),
            None => 1024,
        }
    }

    /// Waits until the next record (the `emitted`th at `rate`) is due by the schedule.
    pub(crate) async fn wait_for_next(&mut self, rate: Option<f64>, metrics: &Arc<TaskMetrics>) {
        let Some(rate) = rate else { return };
        let (since, _, base) = match self.started {
            Some(s) if s.1 == rate => s,
            _ => *self.started.insert((Instant::now(), rate, self.emitted)),
        };
        let done = (self.emitted - base) as f64;
        let due_now = since.elapsed().as_secs_f64() * rate;
        self.lag = Some((due_now - done).max(0.0) as u64);
        let due = since + Duration::from_secs_f64(done / rate);
        // A record already due is made at once: a timer for a past instant still waits for the
        // timer wheel's next millisecond tick.
        if due > Instant::now() {
            metrics
                .waiting(crate::types::Wait::Input, tokio::time::sleep_until(due.into()))
                .await;
        }
    }

    /// This source is one of `n` splits a subtask reads: it takes `1/n` of the rate.
    pub(crate) fn share(&mut self, n: usize) {
        for (_, r) in &mut self.rates {
            *r /= n.max(1) as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// A paced batch leaves as soon as it is made: the wait for the schedule comes before the
    /// next batch, not after this one (waiting after held every batch back by its own length,
    /// 20 ms of latency at 50,000 records/s). The first batch is due at once, so making it waits
    /// for nothing: no idle time is counted (a wait counts only when it is not over at once).
    #[tokio::test]
    async fn a_paced_batch_is_made_when_due_and_not_held_after() {
        let metrics = Arc::new(TaskMetrics::default());
        let mut stride = Stride::of_subtask(0, 1, Some(1_000));
        let mut pacer = Pacer::new(vec![(0, 100_000.0)]);
        let mut made = Vec::new();
        assert!(paced_batch(&mut stride, &mut pacer, &metrics, |n| made.push(n)).await);
        // A millisecond's worth, made at once.
        assert_eq!(made.len(), 100);
        assert_eq!(
            metrics.idle_ns.load(Ordering::Relaxed),
            0,
            "the first batch waited after it was made"
        );
        // The rest come in order, each batch when it is due.
        while paced_batch(&mut stride, &mut pacer, &metrics, |n| made.push(n)).await {}
        assert_eq!(made, (0..1_000).collect::<Vec<u64>>());
    }
}
