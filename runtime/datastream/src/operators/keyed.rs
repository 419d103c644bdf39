//! Keyed one-input operators without time: STREAMING reduce, sum (local-global) and process
//! functions on keyed state; BATCH sorted reduce and process, and the combiner before their
//! exchange.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use super::{BoxOp, Chunk, Collector, KeyFn, KeyRefFn, Op};
use crate::checkpoint::{ChainSnapshot, Keyed};
use crate::data::Data;
use crate::error::{Error, Result};
use crate::time::{TaskTime, TimeEvent};
use crate::types::{KeyMap, TaskMetrics};

/// Folds `value` into a keyed-state slot with `f` and returns the result in place; the slot is
/// `None` only for a key seen for the first time.
fn fold_into<T>(slot: &mut Option<T>, value: T, f: impl FnOnce(T, T) -> T) -> &mut T {
    let folded = match slot.take() {
        Some(acc) => f(acc, value),
        None => value,
    };
    slot.insert(folded)
}

/// STREAMING keyed reduce: the updated value emitted for every record.
pub(crate) struct StreamingReduce<T, K, F> {
    pub key: KeyFn<T, K>,
    pub f: Arc<F>,
    pub state: Keyed<K, T>,
    pub down: BoxOp<T>,
}

impl<T, K, F> Collector<T> for StreamingReduce<T, K, F>
where
    T: Data,
    K: Data + Hash + Eq,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn collect(&mut self, record: T) {
        let key = (self.key)(&record);
        let f = &self.f;
        if let Some(value) = self.state.fold(key, record, |a, b| f(a, b)) {
            self.down.collect(value.clone());
        }
    }
}

impl<T, K, F> Op<T> for StreamingReduce<T, K, F>
where
    T: Data,
    K: Data + Hash + Eq,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn finish(&mut self) {
        self.down.finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }
    forward_time!();
    keyed_checkpoint!();
}

/// The records of one key from one batch of a producer's input, in arrival order: the first record
/// and the values that followed it. What a STREAMING sum's exchange carries ([`SumGrouper`]).
pub(crate) type SumGroup<A, N> = ((A, N), Vec<N>);

/// Records a [`SumGrouper`] holds at most before it hands its groups on (its values take 8 bytes
/// each for `u64` sums). WordCount on 200 MiB: 2^14 was 7% slower than 2^18, 2^20 no faster.
pub(crate) const GROUPER_MAX_RECORDS: usize = 1 << 18;

/// STREAMING keyed sum, producer side: local-global aggregation that keeps every update. The
/// records of one batch of input (a source's batch, or one input buffer) are grouped by key, in
/// arrival order per key, and each key crosses the exchange once per batch with its values;
/// [`StreamingSumGroups`] looks the key up once and emits the updated total for every value. The
/// output is the updates a per-record sum emits, record for record; only updates of *different*
/// keys from one batch of one producer come out grouped by key rather than interleaved. A record
/// whose first field differs from its key's group (a key selector that is not the whole first
/// field) ends the batch there, so every update still carries its own record's first field (when
/// the key *is* the first field, `key_by_ref(|r| &r.0)`, equal keys mean equal first fields).
/// Groups go on at every drain (after each batch, so always before a checkpoint barrier, which
/// follows a full flush) and whenever [`GROUPER_MAX_RECORDS`] are held. The map starts afresh
/// each batch: small, so it stays in cache (an index kept across batches, which saves the inserts,
/// measured slower: its entries and groups no longer fit in the cache).
pub(crate) struct SumGrouper<A, N, K> {
    pub key: KeyFn<(A, N), K>,
    pub key_ref: Option<KeyRefFn<(A, N), K>>,
    /// Key -> position in `groups`.
    pub index: KeyMap<K, usize>,
    /// This batch's groups, in the order their keys first came.
    pub groups: Vec<SumGroup<A, N>>,
    pub held: usize,
    pub down: BoxOp<SumGroup<A, N>>,
    /// Records beyond the first of each group sent: the task's writer counts a group as one
    /// record, so these are added to keep "records out" a count of records.
    pub grouped: u64,
    pub metrics: Arc<TaskMetrics>,
    /// A timed job: a group holds records of one timestamp only (`stamps[i]` is group `i`'s),
    /// and goes out with it, so every update keeps its record's event time.
    pub time: Option<Arc<TaskTime>>,
    pub stamps: Vec<i64>,
}

impl<A: Data, N: Data, K: Data + Hash + Eq> SumGrouper<A, N, K> {
    pub(crate) fn new(
        key: KeyFn<(A, N), K>,
        key_ref: Option<KeyRefFn<(A, N), K>>,
        down: BoxOp<SumGroup<A, N>>,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
    ) -> Self {
        SumGrouper {
            key,
            key_ref,
            index: KeyMap::default(),
            groups: Vec::new(),
            held: 0,
            down,
            grouped: 0,
            metrics,
            time,
            stamps: Vec::new(),
        }
    }

    fn emit(&mut self) {
        self.index.clear();
        self.held = 0;
        let reuse = self.down.takes_reused();
        for (i, mut group) in self.groups.drain(..).enumerate() {
            if let (Some(time), Some(ts)) = (&self.time, self.stamps.get(i)) {
                time.set_timestamp(*ts);
            }
            self.grouped += group.1.len() as u64;
            if reuse {
                self.down.collect_reused(&mut group);
            } else {
                self.down.collect(group);
            }
        }
        self.stamps.clear();
    }

    /// A new group for `record`, whose timestamp is `ts` (read before an `emit` moved the
    /// task's time slot).
    fn open_group(&mut self, record: (A, N), ts: Option<i64>) {
        self.index.insert((self.key)(&record), self.groups.len());
        self.groups.push((record, Vec::new()));
        if let Some(ts) = ts {
            self.stamps.push(ts);
        }
    }
}

impl<A: Data, N: Data, K: Data + Hash + Eq> Collector<(A, N)> for SumGrouper<A, N, K> {
    fn collect(&mut self, record: (A, N)) {
        let (found, key_is_first) = match &self.key_ref {
            Some(k) => {
                let key = k(&record);
                // `key_by_ref(|r| &r.0)`: equal keys are equal first fields, no second comparison.
                let is_first = std::any::TypeId::of::<K>() == std::any::TypeId::of::<A>()
                    && std::ptr::addr_eq(key as *const K, &record.0 as *const A);
                (self.index.get(key).copied(), is_first)
            }
            None => (self.index.get(&(self.key)(&record)).copied(), false),
        };
        let ts = self.time.as_ref().map(|t| t.timestamp());
        let same_time = |i: usize| ts.is_none() || self.stamps.get(i) == ts.as_ref();
        match found {
            Some(i) if (key_is_first || self.groups[i].0.0.data_eq(&record.0)) && same_time(i) => {
                self.groups[i].1.push(record.1)
            }
            Some(_) => {
                // Same key, another first field (or another timestamp): the updates keep their
                // order if the batch ends here.
                self.emit();
                self.open_group(record, ts);
            }
            None => self.open_group(record, ts),
        }
        self.held += 1;
        if self.held >= GROUPER_MAX_RECORDS {
            self.emit();
        }
    }
}

impl<A: Data, N: Data, K: Data + Hash + Eq> Op<(A, N)> for SumGrouper<A, N, K> {
    fn on_time(&mut self, event: TimeEvent) {
        // Like a barrier, a watermark follows every record before it: the groups go first.
        if let TimeEvent::Watermark(_) = event {
            self.emit();
        }
        self.down.on_time(event)
    }
    fn finish(&mut self) {
        self.emit();
        self.down.finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.emit();
        self.metrics.add_out(std::mem::take(&mut self.grouped));
        self.down.drain(flush, out)
    }
    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        // The task drains the chain before it takes a snapshot; records held here at a barrier
        // would be counted in the wrong checkpoint.
        if !self.groups.is_empty() {
            return Err(Error::Graph(format!(
                "checkpoint {checkpoint}: {} records still grouped at the barrier",
                self.held
            )));
        }
        self.down.snapshot(checkpoint, out)
    }
    fn failure(&mut self) -> Option<String> {
        self.down.failure()
    }
}

/// STREAMING keyed sum, consumer side of [`SumGrouper`]: one state lookup per group, then the
/// updated total for each value in order, handed on in the group's first record.
pub(crate) struct StreamingSumGroups<A, N, K> {
    pub key: KeyFn<(A, N), K>,
    pub key_ref: Option<KeyRefFn<(A, N), K>>,
    pub state: Keyed<K, N>,
    pub down: BoxOp<(A, N)>,
    /// Records beyond the first of each group received (the task counts a group as one record in).
    pub grouped: u64,
    pub metrics: Arc<TaskMetrics>,
}

impl<A, N, K> Collector<SumGroup<A, N>> for StreamingSumGroups<A, N, K>
where
    A: Data,
    N: Data + std::ops::Add<Output = N>,
    K: Data + Hash + Eq,
{
    fn collect(&mut self, mut group: SumGroup<A, N>) {
        self.collect_reused(&mut group)
    }
}

impl<A, N, K> Op<SumGroup<A, N>> for StreamingSumGroups<A, N, K>
where
    A: Data,
    N: Data + std::ops::Add<Output = N>,
    K: Data + Hash + Eq,
{
    fn takes_reused(&self) -> bool {
        true
    }
    fn collect_reused(&mut self, group: &mut SumGroup<A, N>) {
        let (first, rest) = (&mut group.0, &group.1);
        self.grouped += rest.len() as u64;
        let values = std::iter::once(first.1.clone()).chain(rest.iter().cloned());
        let slot = self.key_ref.as_ref().and_then(|k| self.state.heap_slot(k(first)));
        if let Some(slot) = slot {
            for n in values {
                first.1 = fold_into(slot, n, |a, b| a + b).clone();
                self.down.collect_reused(first);
            }
            return;
        }
        // A new key, no borrowed key, or a byte-level backend: fold value by value.
        let key = (self.key)(first);
        for n in values {
            match self.state.fold(key.clone(), n, |a, b| a + b) {
                Some(total) => first.1 = total.clone(),
                None => return, // a backend failure, reported at the task's next step
            }
            self.down.collect_reused(first);
        }
    }
    fn finish(&mut self) {
        self.down.finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.metrics.add_in(std::mem::take(&mut self.grouped));
        self.down.drain(flush, out)
    }
    forward_time!();
    keyed_checkpoint!();
}

/// BATCH keyed reduce: all input is kept, sorted by key at end of input and reduced one key at a
/// time; one result per key.
pub(crate) struct SortedReduce<T, K, F> {
    pub key: KeyFn<T, K>,
    pub f: Arc<F>,
    pub records: Vec<(K, T)>,
    pub down: BoxOp<T>,
}

impl<T, K, F> Collector<T> for SortedReduce<T, K, F>
where
    T: Data,
    K: Data + Ord,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn collect(&mut self, record: T) {
        self.records.push(((self.key)(&record), record));
    }
}

impl<T, K, F> SortedReduce<T, K, F>
where
    T: Data,
    K: Data + Ord,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    /// End of input or of event time (the MAX watermark, which passes only after what is held):
    /// the results go out; a second call has nothing left to emit.
    fn emit_held(&mut self) {
        let mut records = std::mem::take(&mut self.records);
        records.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut current: Option<(K, T)> = None;
        for (k, v) in records {
            current = match current {
                Some((ck, acc)) if ck == k => Some((ck, (self.f)(acc, v))),
                Some((_, acc)) => {
                    self.down.collect(acc);
                    Some((k, v))
                }
                None => Some((k, v)),
            };
        }
        if let Some((_, acc)) = current {
            self.down.collect(acc);
        }
    }
}

impl<T, K, F> Op<T> for SortedReduce<T, K, F>
where
    T: Data,
    K: Data + Ord,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn on_time(&mut self, event: TimeEvent) {
        if event == TimeEvent::Watermark(crate::time::MAX_WATERMARK) {
            self.emit_held();
        }
        self.down.on_time(event)
    }

    fn finish(&mut self) {
        self.emit_held();
        self.down.finish();
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }

    forward_checkpoint!();
}

/// Keys a combiner holds before it flushes its partial results downstream.
pub(crate) const COMBINER_MAX_KEYS: usize = 1 << 16;

/// BATCH producer-side combiner before a hash exchange (Flink DataSet's combinable reduce): partial
/// aggregates per key in a bounded map, flushed when large and at end of input.
pub(crate) struct Combiner<T, K, F> {
    pub key: KeyFn<T, K>,
    pub key_ref: Option<KeyRefFn<T, K>>,
    pub f: Arc<F>,
    /// `None` only for the instant a value is being combined (one hash lookup per record).
    pub state: KeyMap<K, Option<T>>,
    pub down: BoxOp<T>,
}

impl<T, K, F> Collector<T> for Combiner<T, K, F>
where
    T: Data,
    K: Data + Hash + Eq,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn collect(&mut self, record: T) {
        if let Some(slot) = self.key_ref.as_ref().and_then(|k| self.state.get_mut(k(&record))) {
            fold_into(slot, record, |a, b| (self.f)(a, b));
            return;
        }
        let key = (self.key)(&record);
        if self.state.len() >= COMBINER_MAX_KEYS && !self.state.contains_key(&key) {
            self.flush();
        }
        let slot = self.state.entry(key).or_insert(None);
        fold_into(slot, record, |a, b| (self.f)(a, b));
    }
}

impl<T, K, F> Combiner<T, K, F>
where
    T: Data,
    K: Data + Hash + Eq,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn emit_held(&mut self) {
        self.flush()
    }

    fn flush(&mut self) {
        for v in self.state.drain().filter_map(|(_, v)| v) {
            self.down.collect(v);
        }
    }
}

impl<T, K, F> Op<T> for Combiner<T, K, F>
where
    T: Data,
    K: Data + Hash + Eq,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn on_time(&mut self, event: TimeEvent) {
        if event == TimeEvent::Watermark(crate::time::MAX_WATERMARK) {
            self.emit_held();
        }
        self.down.on_time(event)
    }

    fn finish(&mut self) {
        self.emit_held();
        self.down.finish();
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }

    forward_checkpoint!();
}

/// STREAMING keyed process function with per-key state of type `S`.
pub(crate) struct StreamingProcess<T, K, S, O, F> {
    pub key: KeyFn<T, K>,
    pub f: Arc<F>,
    pub state: Keyed<K, S>,
    pub down: BoxOp<O>,
    pub _in: PhantomData<fn(T)>,
}

impl<T, K, S, O, F> Collector<T> for StreamingProcess<T, K, S, O, F>
where
    T: Data,
    K: Data + Hash + Eq,
    S: Data + Default,
    O: Data,
    F: Fn(&K, T, &mut S, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    fn collect(&mut self, record: T) {
        let key = (self.key)(&record);
        let (f, down) = (&self.f, &mut self.down);
        self.state
            .update(key, |key, state| f(key, record, state, &mut **down));
    }
}

impl<T, K, S, O, F> Op<T> for StreamingProcess<T, K, S, O, F>
where
    T: Data,
    K: Data + Hash + Eq,
    S: Data + Default,
    O: Data,
    F: Fn(&K, T, &mut S, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    fn finish(&mut self) {
        self.down.finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }
    forward_time!();
    keyed_checkpoint!();
}

/// BATCH keyed process function: input sorted by key at end of input, then processed one key at a
/// time with fresh state per key (arrival order kept within a key).
pub(crate) struct SortedProcess<T, K, S, O, F> {
    pub key: KeyFn<T, K>,
    pub f: Arc<F>,
    pub records: Vec<(K, T)>,
    pub down: BoxOp<O>,
    pub _state: PhantomData<fn() -> S>,
}

impl<T, K, S, O, F> Collector<T> for SortedProcess<T, K, S, O, F>
where
    T: Data,
    K: Data + Ord,
    S: Default + Send + 'static,
    O: Data,
    F: Fn(&K, T, &mut S, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    fn collect(&mut self, record: T) {
        self.records.push(((self.key)(&record), record));
    }
}

impl<T, K, S, O, F> SortedProcess<T, K, S, O, F>
where
    T: Data,
    K: Data + Ord,
    S: Default + Send + 'static,
    O: Data,
    F: Fn(&K, T, &mut S, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    /// End of input or of event time (the MAX watermark, which passes only after what is held):
    /// the results go out; a second call has nothing left to emit.
    fn emit_held(&mut self) {
        let mut records = std::mem::take(&mut self.records);
        records.sort_by(|a, b| a.0.cmp(&b.0));
        let mut current: Option<(K, S)> = None;
        for (k, v) in records {
            let same = matches!(&current, Some((ck, _)) if *ck == k);
            if !same {
                current = Some((k, S::default()));
            }
            if let Some((ck, state)) = current.as_mut() {
                (self.f)(ck, v, state, &mut *self.down);
            }
        }
    }
}

impl<T, K, S, O, F> Op<T> for SortedProcess<T, K, S, O, F>
where
    T: Data,
    K: Data + Ord,
    S: Default + Send + 'static,
    O: Data,
    F: Fn(&K, T, &mut S, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    fn on_time(&mut self, event: TimeEvent) {
        if event == TimeEvent::Watermark(crate::time::MAX_WATERMARK) {
            self.emit_held();
        }
        self.down.on_time(event)
    }

    fn finish(&mut self) {
        self.emit_held();
        self.down.finish();
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }

    forward_checkpoint!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::tests::VecSink;
    use std::collections::HashMap;

    /// A grouped streaming sum (producer and consumer sides chained) whose updates land in `out`.
    fn grouped_sum(
        key: KeyFn<(String, u64), String>,
        key_ref: Option<KeyRefFn<(String, u64), String>>,
        out: &Arc<std::sync::Mutex<Vec<(String, u64)>>>,
    ) -> SumGrouper<String, u64, String> {
        let sum = StreamingSumGroups {
            key: key.clone(),
            key_ref: key_ref.clone(),
            state: Keyed::new(None, 0..128, 128).expect("heap state"),
            down: Box::new(VecSink(out.clone())) as BoxOp<(String, u64)>,
            grouped: 0,
            metrics: Arc::default(),
        };
        SumGrouper::new(
            key,
            key_ref,
            Box::new(sum) as BoxOp<SumGroup<String, u64>>,
            Arc::default(),
            None,
        )
    }

    #[test]
    fn grouped_streaming_sum_emits_every_running_total_in_arrival_order() {
        let out: Arc<std::sync::Mutex<Vec<(String, u64)>>> = Arc::default();
        let key: KeyFn<(String, u64), String> = Arc::new(|r: &(String, u64)| r.0.clone());
        let key_ref: KeyRefFn<(String, u64), String> = Arc::new(|r: &(String, u64)| &r.0);
        let mut grouper = grouped_sum(key, Some(key_ref), &out);
        // Two batches; values differ so the order of updates per key shows.
        let batches: [&[(&str, u64)]; 2] = [
            &[("a", 5), ("b", 1), ("a", 2), ("c", 4), ("a", 7)],
            &[("b", 3), ("a", 1)],
        ];
        let mut expected: HashMap<String, Vec<u64>> = HashMap::new();
        let mut totals: HashMap<String, u64> = HashMap::new();
        for batch in batches {
            for &(w, n) in batch {
                grouper.collect((w.to_string(), n));
                let t = totals.entry(w.to_string()).or_default();
                *t += n;
                expected.entry(w.to_string()).or_default().push(*t);
            }
            let mut snapshot = ChainSnapshot {
                checkpoint: 1,
                keyed: None,
                source: None,
                sink: None,
                broadcast: None,
                in_flight: None,
            };
            let held = grouper
                .snapshot(1, &mut snapshot)
                .expect_err("records held at a barrier");
            assert!(held.to_string().contains("still grouped"), "{held}");
            grouper.drain(false, &mut Vec::new());
        }
        grouper.finish();
        let mut got: HashMap<String, Vec<u64>> = HashMap::new();
        for (w, t) in out.lock().expect("lock").iter() {
            got.entry(w.clone()).or_default().push(*t);
        }
        assert_eq!(got, expected, "one update per record, per key in arrival order");
        assert_eq!(out.lock().expect("lock").len(), 7);
    }

    #[test]
    fn grouped_streaming_sum_keeps_every_updates_timestamp_in_a_timed_job() {
        let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
        let sink = crate::operators::tests::TimedSink::<(String, u64)>::new(time.clone());
        let key: KeyFn<(String, u64), String> = Arc::new(|r: &(String, u64)| r.0.clone());
        let sum = StreamingSumGroups {
            key: key.clone(),
            key_ref: None,
            state: Keyed::new(None, 0..128, 128).expect("heap state"),
            down: Box::new(sink.clone()) as BoxOp<(String, u64)>,
            grouped: 0,
            metrics: Arc::default(),
        };
        let mut grouper = SumGrouper::new(
            key,
            None,
            Box::new(sum) as BoxOp<SumGroup<String, u64>>,
            Arc::default(),
            Some(time.clone()),
        );
        for (w, n, ts) in [("a", 1u64, 10i64), ("a", 2, 10), ("a", 3, 20), ("b", 1, 20)] {
            time.set_timestamp(ts);
            grouper.collect((w.to_string(), n));
        }
        grouper.on_time(TimeEvent::Watermark(20));
        let got = sink.records();
        let want =
            [(10, "a", 1), (10, "a", 3), (20, "a", 6), (20, "b", 1)].map(|(t, w, n)| (t, (w.to_string(), n)));
        assert_eq!(got, want, "each running total carries its own record's timestamp");
        assert_eq!(
            sink.watermarks(),
            vec![20],
            "the watermark after the groups it follows"
        );
    }

    #[test]
    fn grouped_streaming_sum_keeps_each_records_first_field_when_the_key_is_not_it() {
        let out: Arc<std::sync::Mutex<Vec<(String, u64)>>> = Arc::default();
        // Keyed by the first letter: records of one key carry different first fields.
        let key: KeyFn<(String, u64), String> = Arc::new(|r: &(String, u64)| r.0[..1].to_string());
        let mut grouper = grouped_sum(key, None, &out);
        for (w, n) in [("ab", 1u64), ("ab", 1), ("ac", 2), ("x", 5), ("ab", 3)] {
            grouper.collect((w.to_string(), n));
        }
        grouper.finish();
        let got = out.lock().expect("lock").clone();
        let a: Vec<(String, u64)> = got.iter().filter(|r| r.0.starts_with('a')).cloned().collect();
        let expected = [("ab", 1), ("ab", 2), ("ac", 4), ("ab", 7)].map(|(w, t)| (w.to_string(), t));
        assert_eq!(a, expected, "every update carries its own record, in order");
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn sorted_reduce_emits_one_result_per_key_and_combiner_preaggregates() {
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let key: KeyFn<(String, u64), String> = Arc::new(|r: &(String, u64)| r.0.clone());
        let f = Arc::new(|a: (String, u64), b: (String, u64)| (a.0, a.1 + b.1));
        let reduce = SortedReduce {
            key: key.clone(),
            f: f.clone(),
            records: Vec::new(),
            down: Box::new(VecSink(out.clone())) as BoxOp<(String, u64)>,
        };
        let mut combiner = Combiner {
            key,
            key_ref: None,
            f,
            state: KeyMap::default(),
            down: Box::new(reduce) as BoxOp<(String, u64)>,
        };
        for w in ["b", "a", "b", "c", "b"] {
            combiner.collect((w.to_string(), 1));
        }
        combiner.finish();
        let got = out.lock().expect("lock").clone();
        assert_eq!(
            got,
            vec![
                ("a".to_string(), 1u64),
                ("b".to_string(), 3),
                ("c".to_string(), 1)
            ]
        );
    }
}
