//! Keyed process functions with timers (Flink's `KeyedProcessFunction` and `KeyedProcessOperator`):
//! per-key state, the record's timestamp, and a timer service of event-time and processing-time
//! timers that call [`KeyedProcessFunction::on_timer`] for their key.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use super::rich::Opened;
use super::{BoxOp, Chunk, Collector, FunctionResult, KeyFn, Op, OutputTag, RuntimeContext, SideOutputs};
use crate::checkpoint::{ChainSnapshot, Keyed};
use crate::data::Data;
use crate::error::Result;
use crate::operators::window::AggregateFunction;
use crate::state::entries::{
    AggregatingHandle, AggregatingStateDescriptor, EntryAccess, ListHandle, ListStateDescriptor, MapHandle,
    MapStateDescriptor, ReducingHandle, ReducingStateDescriptor, ValueHandle, ValueStateDescriptor,
};
use crate::time::timers::{TimeDomain, Timers};
use crate::time::{MAX_WATERMARK, MIN_WATERMARK, TaskTime, TimeEvent};
use crate::types::TaskMetrics;

/// A function over a keyed stream with per-key state and timers (Flink's `KeyedProcessFunction`).
/// `State` is checkpointed with the job in either state backend; timers are too.
///
/// Each subtask runs its own copy (the API asks for `Clone`): `open` runs once before its first element (after its
/// state is restored), `close` once when it ends (see [`crate::RuntimeContext`]).
pub trait KeyedProcessFunction<K, I, O>: Send + Sync + 'static {
    /// Per-key state, `Default` for a key seen for the first time.
    type State: Data + Default;

    /// Once per subtask, before its first element; an error fails the task.
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let _ = ctx;
        Ok(())
    }

    /// Once per subtask, when it ends (finished, stopped, cancelled or failed).
    fn close(&mut self) -> FunctionResult {
        Ok(())
    }

    fn process_element(
        &self,
        value: I,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    );

    /// A timer of `ctx.key()` fired at `timestamp` (in `ctx.time_domain()`).
    fn on_timer(
        &self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        let _ = (timestamp, ctx, out);
    }
}

/// What a [`KeyedProcessFunction`] sees of its key: the key, its state, the element's (or the
/// timer's) timestamp, the current watermark and processing time, and the timer service.
pub struct KeyedContext<'a, K, S> {
    key: &'a K,
    state: &'a mut S,
    /// The key's per-entry states (declared with descriptors).
    entries: EntryAccess<'a, K>,
    timestamp: Option<i64>,
    watermark: i64,
    processing_time: i64,
    domain: Option<TimeDomain>,
    /// Timer changes of this call, applied after it: (domain, timestamp, registered).
    changes: &'a mut Vec<(TimeDomain, i64, bool)>,
    cleared: bool,
    time: &'a TaskTime,
    failure: &'a mut Option<String>,
    metrics: &'a TaskMetrics,
    side: &'a mut SideOutputs,
}

impl<K, S> std::fmt::Debug for KeyedContext<'_, K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedContext")
            .field("timestamp", &self.timestamp)
            .field("watermark", &self.watermark)
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl<K, S: Default> KeyedContext<'_, K, S> {
    pub fn key(&self) -> &K {
        self.key
    }

    /// This key's state.
    pub fn state(&mut self) -> &mut S {
        // State touched after a clear is kept (as it is then).
        self.cleared = false;
        self.state
    }

    /// Drops this key's state (it starts from `Default` again); its timers stay.
    pub fn clear_state(&mut self) {
        *self.state = S::default();
        self.cleared = true;
    }

    /// The element's timestamp (or the firing event-time timer's); `None` when it has none.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The operator's current event time (`i64::MIN` before the first watermark).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Milliseconds since the epoch.
    pub fn current_processing_time(&self) -> i64 {
        self.processing_time
    }

    /// In `on_timer`: which clock fired the timer.
    pub fn time_domain(&self) -> Option<TimeDomain> {
        self.domain
    }

    /// Calls `on_timer` once the watermark reaches `time` (once per key and time).
    pub fn register_event_time_timer(&mut self, time: i64) {
        self.changes.push((TimeDomain::EventTime, time, true));
    }

    /// Calls `on_timer` once processing time reaches `time` (checked every
    /// `pipeline.auto-watermark-interval`).
    pub fn register_processing_time_timer(&mut self, time: i64) {
        self.changes.push((TimeDomain::ProcessingTime, time, true));
    }

    pub fn delete_event_time_timer(&mut self, time: i64) {
        self.changes.push((TimeDomain::EventTime, time, false));
    }

    pub fn delete_processing_time_timer(&mut self, time: i64) {
        self.changes.push((TimeDomain::ProcessingTime, time, false));
    }

    /// The timestamp of what the function emits next (a window's result carries its end).
    pub(crate) fn set_output_timestamp(&mut self, timestamp: i64) {
        self.time.set_timestamp(timestamp);
    }

    /// An element came too late for every window it belongs to and was dropped (Flink's
    /// `numLateRecordsDropped`).
    pub(crate) fn late_record_dropped(&mut self) {
        self.metrics.add_late_dropped(1);
    }

    /// Fails the task with `message` at its next step (an element a window cannot place).
    pub(crate) fn fail(&mut self, message: String) {
        self.failure.get_or_insert(message);
    }

    /// Emits `value` to the side output `tag` (Flink's `ctx.output`), with the timestamp the main
    /// output's records get now.
    pub fn output<X: Data>(&mut self, tag: &OutputTag<X>, value: X) {
        if let Err(e) = self.side.emit(tag, value) {
            self.fail(e);
        }
    }
}

/// Per-entry state (Flink's descriptors; see `state/entries.rs`): each access reads or
/// writes one entry of the current key, whatever the size of its map or list.
impl<'a, K: Data + Hash + Eq, S> KeyedContext<'a, K, S> {
    /// Whether the key's state is objects on the heap (nothing encoded per access), rather than
    /// bytes in a backend (RocksDB): what a function may keep inline in its value is cheap there.
    pub(crate) fn keeps_objects(&self) -> bool {
        matches!(self.entries.store, crate::state::entries::EntryStore::Heap(_))
    }

    /// The current key's map of `d`.
    pub fn map_state<'c, UK: Data, UV: Data>(
        &'c mut self,
        d: &'c MapStateDescriptor<UK, UV>,
    ) -> MapHandle<'c, 'a, K, UK, UV> {
        MapHandle::new(&mut self.entries, d)
    }

    /// The current key's list of `d`.
    pub fn list_state<'c, T: Data>(&'c mut self, d: &'c ListStateDescriptor<T>) -> ListHandle<'c, 'a, K, T> {
        ListHandle::new(&mut self.entries, d)
    }

    /// The current key's value of `d`.
    pub fn value_state<'c, T: Data>(
        &'c mut self,
        d: &'c ValueStateDescriptor<T>,
    ) -> ValueHandle<'c, 'a, K, T> {
        ValueHandle::new(&mut self.entries, d)
    }

    /// The current key's reducing state of `d`.
    pub fn reducing_state<'c, T: Data>(
        &'c mut self,
        d: &'c ReducingStateDescriptor<T>,
    ) -> ReducingHandle<'c, 'a, K, T> {
        ReducingHandle::new(&mut self.entries, d)
    }

    /// The current key's aggregating state of `d`.
    pub fn aggregating_state<'c, IN, F: AggregateFunction<IN>>(
        &'c mut self,
        d: &'c AggregatingStateDescriptor<IN, F>,
    ) -> AggregatingHandle<'c, 'a, K, IN, F> {
        AggregatingHandle::new(&mut self.entries, d)
    }
}

/// The STREAMING operator of a [`KeyedProcessFunction`].
pub(crate) struct KeyedProcessOperator<T, K, O, F: KeyedProcessFunction<K, T, O>> {
    pub key: KeyFn<T, K>,
    pub f: Opened<Arc<F>>,
    pub state: Keyed<K, F::State>,
    pub timers: Timers<K>,
    pub time: Arc<TaskTime>,
    pub watermark: i64,
    pub down: BoxOp<O>,
    pub changes: Vec<(TimeDomain, i64, bool)>,
    /// The first failure a function reported (the task fails at its next step).
    pub failure: Option<String>,
    /// The task's counters (late records dropped).
    pub metrics: Arc<TaskMetrics>,
    /// The side outputs something reads.
    pub side: SideOutputs,
    /// Windows: processing time ends with the input (see [`Self::ending_processing_time`]).
    pub processing_time_ends: bool,
    /// Timers registered now are dropped: the timer service is quiesced while the end of input
    /// fires what is pending (as Flink's at a key's end in BATCH), so a callback that registers
    /// the next timer cannot loop for ever.
    pub quiesced: bool,
    pub _in: PhantomData<fn(T)>,
}

impl<T, K, O, F> KeyedProcessOperator<T, K, O, F>
where
    T: Data,
    K: Data + Hash + Eq + Ord,
    O: Data,
    F: KeyedProcessFunction<K, T, O>,
{
    /// The operator of a function without `open` (the unit tests' form).
    #[cfg(test)]
    pub(crate) fn new(
        key: KeyFn<T, K>,
        f: Arc<F>,
        state: Keyed<K, F::State>,
        timers: Timers<K>,
        time: Arc<TaskTime>,
        down: BoxOp<O>,
    ) -> Self {
        Self::opened(key, Opened::plain(f), state, timers, time, down)
    }

    /// The operator of `f`, opened for its subtask (closed at the end of input or when dropped).
    pub(crate) fn opened(
        key: KeyFn<T, K>,
        f: Opened<Arc<F>>,
        state: Keyed<K, F::State>,
        timers: Timers<K>,
        time: Arc<TaskTime>,
        down: BoxOp<O>,
    ) -> Self {
        KeyedProcessOperator {
            key,
            f,
            state,
            timers,
            time,
            watermark: MIN_WATERMARK,
            down,
            changes: Vec::new(),
            failure: None,
            metrics: Arc::default(),
            side: SideOutputs::default(),
            processing_time_ends: false,
            quiesced: false,
            _in: PhantomData,
        }
    }

    /// Processing time ends with the input, as event time does: when the MAX watermark comes
    /// (every input ended, or a stop with drain), every pending processing-time timer fires, so a
    /// bounded job's last processing-time windows are emitted, and before the final checkpoint's
    /// (or the drain's savepoint's) barrier, which then covers them. Flink drops them (its timer
    /// service is quiesced at the end of a STREAMING task); nothing can reach such a window after
    /// the end, so firing it then gives what waiting for its end would. Only windows: a process
    /// function's processing-time timer may be a timeout, which the end of input must not fake.
    pub(crate) fn ending_processing_time(mut self) -> Self {
        self.processing_time_ends = true;
        self
    }

    /// Emits side outputs to these writers.
    pub(crate) fn with_side_outputs(mut self, side: SideOutputs) -> Self {
        self.side = side;
        self
    }

    /// Counts into the task's counters.
    pub(crate) fn with_metrics(mut self, metrics: Arc<TaskMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Runs `call` on `key`'s state, then applies the timer changes it made.
    fn with_key(
        &mut self,
        key: &K,
        timestamp: Option<i64>,
        domain: Option<TimeDomain>,
        call: impl FnOnce(&F, &mut KeyedContext<'_, K, F::State>, &mut dyn Collector<O>),
    ) {
        let (f, down, changes, time, failure, metrics, side) = (
            &self.f,
            &mut self.down,
            &mut self.changes,
            &*self.time,
            &mut self.failure,
            &*self.metrics,
            &mut self.side,
        );
        let (watermark, processing_time) = (self.watermark, crate::time::now_ms());
        self.state.update_entries(key, |key, state, entries| {
            let mut ctx = KeyedContext {
                key,
                state,
                entries,
                timestamp,
                watermark,
                processing_time,
                domain,
                changes,
                cleared: false,
                time,
                failure,
                metrics,
                side,
            };
            call(f, &mut ctx, &mut **down);
            !ctx.cleared
        });
        for (domain, ts, register) in self.changes.drain(..) {
            if register && self.quiesced {
                tracing::debug!(ts, ?domain, "a timer registered at the end of input is dropped");
                continue;
            }
            let changed = if register {
                self.timers.register(domain, key.clone(), ts)
            } else {
                self.timers.delete(domain, key, ts)
            };
            if changed {
                self.state.set_timer(domain, key, ts, register);
            }
        }
    }

    fn fire(&mut self, domain: TimeDomain, until: i64) {
        while let Some((ts, key)) = self.timers.pop_due(domain, until) {
            self.state.set_timer(domain, &key, ts, false);
            // Output of an event-time timer carries the timer's time (Flink's `onEventTime`).
            let timestamp = (domain == TimeDomain::EventTime).then_some(ts);
            self.time.set_timestamp(timestamp.unwrap_or(MIN_WATERMARK));
            self.with_key(&key, timestamp, Some(domain), |f, ctx, out| {
                f.on_timer(ts, ctx, out)
            });
        }
    }

    /// Fires every pending timer of `domain` in time order, as if its time had come, with the
    /// timer service quiesced (what the callbacks register is dropped).
    fn fire_to_the_end(&mut self, domain: TimeDomain) {
        self.quiesced = true;
        self.fire(domain, i64::MAX);
        self.quiesced = false;
    }
}

impl<T, K, O, F> Collector<T> for KeyedProcessOperator<T, K, O, F>
where
    T: Data,
    K: Data + Hash + Eq + Ord,
    O: Data,
    F: KeyedProcessFunction<K, T, O>,
{
    fn collect(&mut self, record: T) {
        let key = (self.key)(&record);
        let ts = self.time.timestamp();
        let timestamp = (ts != MIN_WATERMARK).then_some(ts);
        self.with_key(&key, timestamp, None, |f, ctx, out| {
            f.process_element(record, ctx, out)
        });
    }
}

impl<T, K, O, F> Op<T> for KeyedProcessOperator<T, K, O, F>
where
    T: Data,
    K: Data + Hash + Eq + Ord,
    O: Data,
    F: KeyedProcessFunction<K, T, O>,
{
    fn on_time(&mut self, event: TimeEvent) {
        match event {
            TimeEvent::Watermark(w) => {
                self.watermark = w;
                self.fire(TimeDomain::EventTime, w);
                if w == MAX_WATERMARK && self.processing_time_ends {
                    self.fire_to_the_end(TimeDomain::ProcessingTime);
                }
            }
            TimeEvent::ProcessingTime(now) => self.fire(TimeDomain::ProcessingTime, now),
            TimeEvent::Idle | TimeEvent::Active => {}
        }
        self.side.on_time(event);
        self.down.on_time(event);
    }

    fn finish(&mut self) {
        // A process function's processing-time timers do not fire at end of input (Flink's
        // behaviour); event time ended with the MAX watermark that came before this, and a
        // window's processing time with it (see `ending_processing_time`).
        self.side.finish();
        self.down.finish();
        self.f.close_into(&mut self.failure);
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.side.drain(flush, out);
        self.down.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        out.keyed = Some(
            self.state
                .prepare_snapshot_with_timers(checkpoint, &self.timers)?,
        );
        self.down.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.failure
            .take()
            .or_else(|| self.state.failure())
            .or_else(|| self.down.failure())
    }
}

/// The BATCH operator of a [`KeyedProcessFunction`] (and so of windows), as seed 000 describes
/// BATCH keyed operators: the input is kept, sorted by key and then timestamp at the end, and
/// processed one key at a time with fresh state; after a key's last element its event-time timers
/// fire (event time ends with the input) and its state is dropped, so state never holds more than
/// one key. Then its processing-time timers fire, as in Flink's BATCH (so processing-time windows
/// give what they would in STREAMING); what timer callbacks register there is dropped. Watermarks
/// before the end are not passed on: the output comes at the end, and a downstream operator must
/// not see it as late.
pub(crate) struct SortedKeyedProcess<T, K, O, F: KeyedProcessFunction<K, T, O>> {
    inner: KeyedProcessOperator<T, K, O, F>,
    records: Vec<(K, i64, T)>,
    done: bool,
}

impl<T, K, O, F> SortedKeyedProcess<T, K, O, F>
where
    T: Data,
    K: Data + Hash + Eq + Ord,
    O: Data,
    F: KeyedProcessFunction<K, T, O>,
{
    pub(crate) fn new(inner: KeyedProcessOperator<T, K, O, F>) -> Self {
        SortedKeyedProcess {
            inner,
            records: Vec::new(),
            done: false,
        }
    }

    /// The rest of the chain (a broadcast process function emits into it directly).
    pub(crate) fn down(&mut self) -> &mut BoxOp<O> {
        &mut self.inner.down
    }

    pub(crate) fn inner(&self) -> &KeyedProcessOperator<T, K, O, F> {
        &self.inner
    }

    fn run_sorted(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let mut records = std::mem::take(&mut self.records);
        // Stable: elements of one key and time keep their arrival order.
        records.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let mut records = records.into_iter().peekable();
        while let Some((key, ts, record)) = records.next() {
            self.inner.watermark = MIN_WATERMARK;
            self.inner.time.set_timestamp(ts);
            self.inner.collect(record);
            if records.peek().is_some_and(|next| next.0 == key) {
                continue;
            }
            // The key's last element: its event time ends, then its processing time, then its
            // state goes.
            self.inner.watermark = i64::MAX;
            self.inner.fire(TimeDomain::EventTime, i64::MAX);
            self.inner.fire_to_the_end(TimeDomain::ProcessingTime);
            self.inner.state.remove_key(&key);
        }
    }
}

impl<T, K, O, F> Collector<T> for SortedKeyedProcess<T, K, O, F>
where
    T: Data,
    K: Data + Hash + Eq + Ord,
    O: Data,
    F: KeyedProcessFunction<K, T, O>,
{
    fn collect(&mut self, record: T) {
        let key = (self.inner.key)(&record);
        self.records.push((key, self.inner.time.timestamp(), record));
    }
}

impl<T, K, O, F> Op<T> for SortedKeyedProcess<T, K, O, F>
where
    T: Data,
    K: Data + Hash + Eq + Ord,
    O: Data,
    F: KeyedProcessFunction<K, T, O>,
{
    fn on_time(&mut self, event: TimeEvent) {
        if event == TimeEvent::Watermark(i64::MAX) {
            self.run_sorted();
            self.inner.side.on_time(event);
            self.inner.down.on_time(event);
        }
    }

    fn finish(&mut self) {
        self.run_sorted();
        self.inner.side.finish();
        self.inner.down.finish()
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.inner.side.drain(flush, out);
        self.inner.down.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        // BATCH jobs take no checkpoints; the rest of the chain decides.
        self.inner.down.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.inner.failure()
    }
}

/// A function over a stream that is not keyed (Flink's `ProcessFunction`): per element, with its
/// timestamp, the current watermark and side outputs. Timers and state need a keyed stream.
///
/// Each subtask runs its own copy (the API asks for `Clone`): `open` runs once before its first element, `close`
/// once when it ends (see [`crate::RuntimeContext`]).
pub trait ProcessFunction<I, O>: Send + Sync + 'static {
    /// Once per subtask, before its first element; an error fails the task.
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let _ = ctx;
        Ok(())
    }

    fn process_element(&self, value: I, ctx: &mut ProcessContext<'_>, out: &mut dyn Collector<O>);

    /// Once per subtask, when it ends (finished, stopped, cancelled or failed).
    fn close(&mut self) -> FunctionResult {
        Ok(())
    }
}

/// What a [`ProcessFunction`] sees of an element.
pub struct ProcessContext<'a> {
    timestamp: Option<i64>,
    watermark: i64,
    side: &'a mut SideOutputs,
    failure: &'a mut Option<String>,
}

impl std::fmt::Debug for ProcessContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessContext")
            .field("timestamp", &self.timestamp)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

impl<'a> ProcessContext<'a> {
    pub(crate) fn new(
        timestamp: Option<i64>,
        watermark: i64,
        side: &'a mut SideOutputs,
        failure: &'a mut Option<String>,
    ) -> Self {
        ProcessContext {
            timestamp,
            watermark,
            side,
            failure,
        }
    }

    /// The element's timestamp; `None` when it has none.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The operator's current event time (`i64::MIN` before the first watermark).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Milliseconds since the epoch.
    pub fn current_processing_time(&self) -> i64 {
        crate::time::now_ms()
    }

    /// Emits `value` to the side output `tag`, with the element's timestamp.
    pub fn output<X: Data>(&mut self, tag: &OutputTag<X>, value: X) {
        if let Err(e) = self.side.emit(tag, value) {
            self.failure.get_or_insert(e);
        }
    }
}

/// The operator of a [`ProcessFunction`].
pub(crate) struct ProcessOp<T, O, F> {
    pub f: Opened<F>,
    pub time: Option<Arc<TaskTime>>,
    pub watermark: i64,
    pub side: SideOutputs,
    pub failure: Option<String>,
    pub down: BoxOp<O>,
    pub _in: PhantomData<fn(T)>,
}

impl<T: Data, O: Data, F: ProcessFunction<T, O>> Collector<T> for ProcessOp<T, O, F> {
    fn collect(&mut self, record: T) {
        let timestamp = self
            .time
            .as_ref()
            .map(|t| t.timestamp())
            .filter(|ts| *ts != MIN_WATERMARK);
        let mut ctx = ProcessContext {
            timestamp,
            watermark: self.watermark,
            side: &mut self.side,
            failure: &mut self.failure,
        };
        self.f.process_element(record, &mut ctx, &mut *self.down);
    }
}

impl<T: Data, O: Data, F: ProcessFunction<T, O>> Op<T> for ProcessOp<T, O, F> {
    fn on_time(&mut self, event: TimeEvent) {
        if let TimeEvent::Watermark(w) = event {
            self.watermark = w;
        }
        self.side.on_time(event);
        self.down.on_time(event)
    }

    fn finish(&mut self) {
        self.side.finish();
        self.down.finish();
        self.f.close_into(&mut self.failure);
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.side.drain(flush, out);
        self.down.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        self.down.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.failure.take().or_else(|| self.down.failure())
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
