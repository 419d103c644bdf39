//! Async I/O (Flink's `AsyncWaitOperator`): a user `async fn` per record, many requests in flight
//! at once, their results emitted in input order (`ordered_wait`) or as they complete
//! (`unordered_wait`, with watermarks still ordering them: no result overtakes a watermark).
//!
//! The requests are futures the task itself polls: the operator heads its chain, and the task's
//! loop polls [`Op::poll_async`] beside its input, timers and checkpoint messages, so the task
//! thread never blocks on a request and results reach the chain on the task's own thread, between
//! input buffers. A dropped task drops its requests with it (nothing outlives a cancelled task).
//!
//! **Capacity.** At most `capacity` requests are in flight. The task stops reading input while the
//! queue holds `capacity` records or more (backpressure), so the queue holds at most `capacity`
//! plus the records of one input buffer; records beyond `capacity` wait in it unissued.
//!
//! **Checkpoints.** At a barrier every record whose result was not emitted yet (waiting, in flight,
//! or completed behind an earlier one) is part of the snapshot, with its timestamp; a restore issues
//! them again before any new input (as Flink's operator does), so a failover loses none and emits
//! each result once after the checkpoint. After a rescale the old subtasks' records are dealt out
//! round-robin, as sources' splits are. Watermarks in the queue are not saved: sources emit them
//! again.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};

use super::{BoxOp, Chunk, Collector, FunctionResult, Op, OpContext, Opened, RuntimeContext, open_shared};
use crate::checkpoint::{ChainSnapshot, hex_decode, hex_encode};
use crate::data::Data;
use crate::error::{Error, Result};
use crate::time::{MIN_WATERMARK, TaskTime, TimeEvent};

/// A function called asynchronously per record (Flink's `AsyncFunction`, Rust's `async fn`):
/// `async_invoke` returns the record's results (any number: an empty `Vec` drops the record).
///
/// Each subtask opens its own copy (`open` makes a client once and keeps it in a field), then calls
/// `async_invoke` on it concurrently: it takes `&self`, and a client it uses must be shareable (most
/// async clients are cheap handles to a shared pool).
///
/// ```no_run
/// use floe_datastream::{AsyncFunction, FunctionResult};
///
/// #[derive(Clone)]
/// struct Lookup;
///
/// impl AsyncFunction<String, (String, usize)> for Lookup {
///     async fn async_invoke(&self, word: String) -> FunctionResult<Vec<(String, usize)>> {
///         let n = word.len(); // a query to a service, in a real job
///         Ok(vec![(word, n)])
///     }
/// }
/// ```
pub trait AsyncFunction<I, O>: Clone + Send + Sync + 'static {
    /// Once per subtask, before its first request.
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let _ = ctx;
        Ok(())
    }

    /// The request of one record. An error is retried by the operator's [`AsyncRetryStrategy`];
    /// when no attempt is left, the task fails (its restart strategy applies).
    fn async_invoke(&self, input: I) -> impl Future<Output = FunctionResult<Vec<O>>> + Send;

    /// A record's requests took longer than the operator's timeout (Flink's `timeout`): its
    /// results instead, or, by default, an error that fails the task.
    fn timeout(&self, input: I) -> FunctionResult<Vec<O>> {
        let _ = input;
        Err("no result within the timeout".into())
    }

    /// Once per subtask, when it ends (after its last request completed, or when it is cancelled).
    fn close(&mut self) -> FunctionResult {
        Ok(())
    }
}

/// How often and how soon a failed request is tried again (Flink's `AsyncRetryStrategies`). The
/// whole, attempts and delays together, is bounded by the operator's timeout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AsyncRetryStrategy {
    max_attempts: u32,
    delay: Duration,
    max_delay: Duration,
    multiplier: f64,
}

impl AsyncRetryStrategy {
    /// One attempt: a failed request fails the task.
    pub const NO_RETRY: AsyncRetryStrategy = AsyncRetryStrategy {
        max_attempts: 1,
        delay: Duration::ZERO,
        max_delay: Duration::ZERO,
        multiplier: 1.0,
    };

    /// Up to `max_attempts` attempts (the first included), `delay` apart.
    pub fn fixed_delay(max_attempts: u32, delay: Duration) -> Self {
        AsyncRetryStrategy {
            max_attempts: max_attempts.max(1),
            delay,
            max_delay: delay,
            multiplier: 1.0,
        }
    }

    /// Up to `max_attempts` attempts, the delay starting at `initial` and multiplied by
    /// `multiplier` after each attempt, up to `max_delay`.
    pub fn exponential_backoff(
        max_attempts: u32,
        initial: Duration,
        max_delay: Duration,
        multiplier: f64,
    ) -> Self {
        AsyncRetryStrategy {
            max_attempts: max_attempts.max(1),
            delay: initial,
            max_delay: max_delay.max(initial),
            multiplier: if multiplier.is_finite() {
                multiplier.max(1.0)
            } else {
                1.0
            },
        }
    }

    /// The delay after attempt `attempt` (from 1) failed.
    fn delay_after(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.powi(attempt.saturating_sub(1).min(64) as i32);
        Duration::try_from_secs_f64(self.delay.as_secs_f64() * factor)
            .map_or(self.max_delay, |d| d.min(self.max_delay))
    }
}

/// How an async operator emits and bounds its requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AsyncConfig {
    /// Results in input order (`ordered_wait`), or as they complete (`unordered_wait`).
    pub ordered: bool,
    pub capacity: usize,
    pub timeout: Duration,
    pub retry: AsyncRetryStrategy,
}

/// What a request ends with: its record's sequence number and its results, or why it failed.
type Outcome<O> = (u64, std::result::Result<Vec<O>, String>);
type Request<O> = Pin<Box<dyn Future<Output = Outcome<O>> + Send>>;

/// One request: attempts with the retry strategy's delays, all within the timeout; past it the
/// function's `timeout` gives the results. The function is dropped before the outcome is returned,
/// so a closed operator holds the only reference to it.
fn request<I: Data, O: Data, F: AsyncFunction<I, O>>(
    f: Arc<F>,
    seq: u64,
    input: I,
    config: AsyncConfig,
) -> Request<O> {
    Box::pin(async move {
        let retry = config.retry;
        let attempts = async {
            let mut attempt = 1;
            loop {
                match f.async_invoke(input.clone()).await {
                    Ok(out) => return Ok(out),
                    Err(e) if attempt < retry.max_attempts => {
                        tracing::debug!(attempt, "async request failed, retrying: {e}");
                        tokio::time::sleep(retry.delay_after(attempt)).await;
                        attempt += 1;
                    }
                    Err(e) if retry.max_attempts > 1 => {
                        return Err(format!("{e} (attempt {attempt} of {})", retry.max_attempts));
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        };
        let within = tokio::time::timeout(config.timeout, attempts).await;
        let outcome = match within {
            Ok(r) => r,
            Err(_) => f
                .timeout(input)
                .map_err(|e| format!("{e} ({} ms, the operator's timeout)", config.timeout.as_millis())),
        };
        drop(f);
        (seq, outcome)
    })
}

/// Where a queued record is.
enum Progress<O> {
    /// Not issued yet: `capacity` requests are in flight.
    Waiting,
    InFlight,
    /// Completed, its results held until those before it are out (ordered, or behind a
    /// watermark).
    Done(Vec<O>),
    /// Its results are out (unordered: before earlier records'); leaves the queue at its front.
    Emitted,
}

enum Entry<I, O> {
    Record {
        ts: i64,
        input: I,
        progress: Progress<O>,
    },
    /// A watermark that came after the records before it: it goes on once their results are out.
    Watermark(i64),
}

/// The async operator: see the module docs.
pub(crate) struct AsyncWaitOp<I, O, F> {
    /// Declared before `f`: the requests (each holding the function) are dropped first, so
    /// closing the function at drop finds it unshared.
    running: FuturesUnordered<Request<O>>,
    f: Opened<Arc<F>>,
    config: AsyncConfig,
    /// Records and watermarks in input order; entry `i` has sequence number `front + i`.
    queue: VecDeque<Entry<I, O>>,
    front: u64,
    /// Every record entry before this sequence number was issued.
    issued_upto: u64,
    in_flight: usize,
    /// The sequence numbers of the watermarks in the queue: the first one ends the segment whose
    /// results an unordered operator may emit.
    watermarks: VecDeque<u64>,
    time: Option<Arc<TaskTime>>,
    /// The end of input came: the rest of the chain finishes once the queue is empty.
    finishing: bool,
    finished: bool,
    failure: Option<String>,
    down: BoxOp<O>,
}

impl<I: Data, O: Data, F: AsyncFunction<I, O>> AsyncWaitOp<I, O, F> {
    /// The operator of one subtask: its copy of `f` opened, and the records its restore holds
    /// queued (to be issued first).
    pub(crate) fn new(f: F, config: AsyncConfig, ctx: &OpContext, down: BoxOp<O>) -> Result<Self> {
        let f = open_shared(f, ctx, F::open, F::close)?;
        let mut op = AsyncWaitOp {
            running: FuturesUnordered::new(),
            f,
            config: AsyncConfig {
                capacity: config.capacity.max(1),
                ..config
            },
            queue: VecDeque::new(),
            front: 0,
            issued_upto: 0,
            in_flight: 0,
            watermarks: VecDeque::new(),
            time: ctx.time.clone(),
            finishing: false,
            finished: false,
            failure: None,
            down,
        };
        for saved in ctx.restore.iter().flat_map(|r| &r.in_flight) {
            for (ts, input) in decode_in_flight::<I>(saved)? {
                op.queue.push_back(Entry::Record {
                    ts,
                    input,
                    progress: Progress::Waiting,
                });
            }
        }
        op.issue();
        Ok(op)
    }

    fn end(&self) -> u64 {
        self.front + self.queue.len() as u64
    }

    /// Issues waiting records, oldest first, while fewer than `capacity` requests are in flight.
    fn issue(&mut self) {
        while self.in_flight < self.config.capacity && self.issued_upto < self.end() {
            let seq = self.issued_upto;
            self.issued_upto += 1;
            if let Some(Entry::Record { input, progress, .. }) =
                self.queue.get_mut((seq - self.front) as usize)
                && matches!(progress, Progress::Waiting)
            {
                *progress = Progress::InFlight;
                self.in_flight += 1;
                self.running
                    .push(request((*self.f).clone(), seq, input.clone(), self.config));
            }
        }
    }

    /// Whether record `seq`'s results may go out now: ordered, only at the queue's front (handled
    /// by [`Self::emit_ready`]); unordered, anywhere before the first queued watermark.
    fn may_emit_now(&self, seq: u64) -> bool {
        !self.config.ordered && self.watermarks.front().is_none_or(|&w| seq < w)
    }

    fn emit(&mut self, ts: i64, out: Vec<O>) {
        if let Some(time) = &self.time {
            time.set_timestamp(ts);
        }
        for o in out {
            self.down.collect(o);
        }
    }

    /// A request completed.
    fn completed(&mut self, seq: u64, outcome: std::result::Result<Vec<O>, String>) {
        self.in_flight -= 1;
        let out = match outcome {
            Ok(out) => out,
            Err(e) => {
                self.failure
                    .get_or_insert_with(|| self.f.failed("async_invoke", e.into()));
                return;
            }
        };
        let emit_now = self.may_emit_now(seq);
        let Some(Entry::Record { ts, progress, .. }) = self.queue.get_mut((seq - self.front) as usize) else {
            return;
        };
        let ts = *ts;
        if emit_now {
            *progress = Progress::Emitted;
            self.emit(ts, out);
        } else {
            *progress = Progress::Done(out);
        }
    }

    /// Emits from the queue's front what may go: completed records in order, and a watermark once
    /// everything before it is out (an unordered operator then emits the completed records of the
    /// segment it opened).
    fn emit_ready(&mut self) {
        loop {
            match self.queue.front_mut() {
                Some(Entry::Record {
                    progress: Progress::Emitted,
                    ..
                }) => {}
                Some(Entry::Record {
                    ts,
                    progress: progress @ Progress::Done(_),
                    ..
                }) => {
                    let ts = *ts;
                    let Progress::Done(out) = std::mem::replace(progress, Progress::Emitted) else {
                        unreachable!("matched Done")
                    };
                    self.emit(ts, out);
                }
                Some(Entry::Watermark(w)) => {
                    let w = *w;
                    self.watermarks.pop_front();
                    self.down.on_time(TimeEvent::Watermark(w));
                    if !self.config.ordered {
                        self.emit_segment();
                    }
                }
                _ => break,
            }
            self.queue.pop_front();
            self.front += 1;
        }
        self.finish_if_drained();
    }

    /// Unordered: the completed records of the segment at the queue's front go out (the
    /// watermark before them just did).
    fn emit_segment(&mut self) {
        let end = self.watermarks.front().map_or(self.end(), |&w| w);
        // Entry 0 is the watermark being popped.
        for i in 1..(end - self.front) as usize {
            if let Some(Entry::Record { ts, progress, .. }) = self.queue.get_mut(i)
                && matches!(progress, Progress::Done(_))
            {
                let ts = *ts;
                let Progress::Done(out) = std::mem::replace(progress, Progress::Emitted) else {
                    unreachable!("matched Done")
                };
                self.emit(ts, out);
            }
        }
    }

    fn finish_if_drained(&mut self) {
        if self.finishing && !self.finished && self.queue.is_empty() {
            self.finished = true;
            self.down.finish();
            self.f.close_into(&mut self.failure);
        }
    }
}

impl<I: Data, O: Data, F: AsyncFunction<I, O>> Collector<I> for AsyncWaitOp<I, O, F> {
    fn collect(&mut self, record: I) {
        if self.failure.is_some() {
            return;
        }
        let ts = self.time.as_ref().map_or(MIN_WATERMARK, |t| t.timestamp());
        self.queue.push_back(Entry::Record {
            ts,
            input: record,
            progress: Progress::Waiting,
        });
        self.issue();
    }
}

impl<I: Data, O: Data, F: AsyncFunction<I, O>> Op<I> for AsyncWaitOp<I, O, F> {
    fn on_time(&mut self, event: TimeEvent) {
        match event {
            TimeEvent::Watermark(w) if !self.queue.is_empty() => {
                self.watermarks.push_back(self.end());
                self.queue.push_back(Entry::Watermark(w));
            }
            // Processing time and idleness are not ordered with records (as in Flink).
            _ => self.down.on_time(event),
        }
    }

    fn finish(&mut self) {
        self.finishing = true;
        self.finish_if_drained();
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        let pending: Vec<(i64, &I)> = self
            .queue
            .iter()
            .filter_map(|e| match e {
                Entry::Record {
                    progress: Progress::Emitted,
                    ..
                }
                | Entry::Watermark(_) => None,
                Entry::Record { ts, input, .. } => Some((*ts, input)),
            })
            .collect();
        out.in_flight = (!pending.is_empty()).then(|| encode_in_flight(&pending));
        self.down.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.failure.take().or_else(|| self.down.failure())
    }

    fn poll_async(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut progressed = false;
        while let Poll::Ready(Some((seq, outcome))) = self.running.poll_next_unpin(cx) {
            self.completed(seq, outcome);
            progressed = true;
        }
        if !progressed {
            return Poll::Pending;
        }
        if self.failure.is_none() {
            self.issue();
        }
        self.emit_ready();
        Poll::Ready(())
    }

    fn async_blocked(&self) -> bool {
        self.queue.len() >= self.config.capacity && self.failure.is_none()
    }

    fn async_busy(&self) -> bool {
        self.finishing && !self.finished && self.failure.is_none()
    }
}

/// The records a snapshot holds: their count, then each timestamp and record.
fn encode_in_flight<I: Data>(records: &[(i64, &I)]) -> String {
    let mut bytes = Vec::new();
    (records.len() as u64).encode(&mut bytes);
    for (ts, input) in records {
        ts.encode(&mut bytes);
        input.encode(&mut bytes);
    }
    hex_encode(&bytes)
}

fn decode_in_flight<I: Data>(saved: &str) -> Result<Vec<(i64, I)>> {
    let bytes =
        hex_decode(saved).map_err(|e| Error::Decode(format!("async operator's records in flight: {e}")))?;
    let mut input = &bytes[..];
    let n = u64::decode(&mut input)?;
    let mut records = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        let ts = i64::decode(&mut input)?;
        records.push((ts, I::decode(&mut input)?));
    }
    Ok(records)
}

#[cfg(test)]
#[path = "async_wait_tests.rs"]
mod tests;
