//! The per-record path: operators push records into the next operator of their chain through
//! [`Op`]. Every operator is a generic struct over the user's closure, so the only dynamic call per
//! record and operator is the one into the next operator; type erasure happens once per task, when
//! [`OpFactory`]s downcast the chain built so far.

use std::any::Any;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use crate::checkpoint::{ChainSnapshot, Keyed, KeyedStateInit, TaskRestore};
use crate::data::Data;
use crate::error::{Error, Result};
use crate::types::{KeyMap, TaskMetrics};

/// Where user functions put their output records (the `Collector` of Flink's `FlatMapFunction`).
pub trait Collector<T>: Send {
    fn collect(&mut self, record: T);
}

/// Which async consumer a chunk of serialised bytes goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Output `i` of the vertex (a `PartitionWriter`).
    Output(usize),
    /// The chain's sink (file or stdout).
    Sink,
}

/// A finished buffer waiting to be written: the synchronous chain produces them, the task's async
/// loop hands them on (emit, sink write), so backpressure reaches the chain between input buffers.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub target: Target,
    pub subpartition: u32,
    pub bytes: Bytes,
}

/// One link of an operator chain.
pub(crate) trait Op<T>: Collector<T> {
    /// Whether this link works on a record it is lent ([`Op::collect_reused`]) without copying it;
    /// the input side of a task then decodes every record into one reused value instead of
    /// allocating one per record (Flink's object reuse, kept safe by lending the record only for
    /// the call).
    fn takes_reused(&self) -> bool {
        false
    }
    /// A lent record: the link may change it (a keyed sum puts its running total in) and hand it
    /// on; its owner decodes the next record into it afterwards. Links that keep or hand on owned
    /// records copy it.
    fn collect_reused(&mut self, record: &mut T)
    where
        T: Clone,
    {
        self.collect(record.clone())
    }
    /// End of input: emit what is held back (batch aggregates), then finish the rest of the chain.
    fn finish(&mut self);
    /// Move finished buffers (and partially filled ones if `flush`) of the chain's tail to `out`.
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>);
    /// A checkpoint barrier reached this operator: add its state to `out`, then the rest of the
    /// chain's (the synchronous part of the snapshot; the task uploads it afterwards).
    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()>;
    /// The first failure an operator could not return from `collect` (a state backend's), if any.
    fn failure(&mut self) -> Option<String>;
}

pub(crate) type BoxOp<T> = Box<dyn Op<T>>;

/// A chain link of some record type, erased (`Box<BoxOp<T>>`); downcast once per task.
pub(crate) type AnyOp = Box<dyn Any + Send>;

pub(crate) fn erase<T: Data>(op: BoxOp<T>) -> AnyOp {
    Box::new(op)
}

pub(crate) fn downcast<T: Data>(op: AnyOp) -> Result<BoxOp<T>> {
    op.downcast::<BoxOp<T>>().map(|b| *b).map_err(|_| {
        Error::Graph(format!(
            "operator chain type mismatch: expected records of {}",
            std::any::type_name::<T>()
        ))
    })
}

/// Which subtask an operator runs as.
#[derive(Debug, Clone)]
pub(crate) struct OpContext {
    pub subtask: u32,
    pub parallelism: u32,
    pub attempt: u64,
    pub configuration: std::collections::BTreeMap<String, String>,
    /// The task's counters (sources count the records they read as records in).
    pub metrics: Arc<TaskMetrics>,
    /// The key groups this subtask owns, out of `max_parallelism`.
    pub key_groups: std::ops::Range<u32>,
    pub max_parallelism: u32,
    /// The keyed state the task was given, taken by its keyed operator.
    pub keyed_state: Arc<std::sync::Mutex<Option<KeyedStateInit>>>,
    /// Where a restored source reads on from, and a restored sink's committer state.
    pub restore: Option<TaskRestore>,
    /// `execution.checkpointing.interval` is set (streaming): sinks commit per checkpoint.
    pub checkpointing: bool,
}

impl OpContext {
    /// The keyed state of this task for its keyed operator, fresh or restored.
    pub(crate) fn keyed<K: Data + Hash + Eq, V: Data>(&self) -> Result<Keyed<K, V>> {
        let init = self.keyed_state.lock().unwrap_or_else(|p| p.into_inner()).take();
        Keyed::new(init, self.key_groups.clone(), self.max_parallelism)
    }
}

/// Builds one operator in front of the (already built) rest of its chain.
pub(crate) type OpFactory = Arc<dyn Fn(&OpContext, AnyOp) -> Result<AnyOp> + Send + Sync>;

/// The key of a record, as a key selector gives it.
pub(crate) type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;

/// A key selector that borrows the key from the record.
pub(crate) type KeyRefFn<T, K> = Arc<dyn for<'a> Fn(&'a T) -> &'a K + Send + Sync>;

macro_rules! forward_control {
    () => {
        fn finish(&mut self) {
            self.down.finish()
        }
        fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
            self.down.drain(flush, out)
        }
        forward_checkpoint!();
    };
}

/// For stateless links: the snapshot and failures are the rest of the chain's.
macro_rules! forward_checkpoint {
    () => {
        fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
            self.down.snapshot(checkpoint, out)
        }
        fn failure(&mut self) -> Option<String> {
            self.down.failure()
        }
    };
}

/// For keyed links: their state, then the rest of the chain's.
macro_rules! keyed_checkpoint {
    () => {
        fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
            out.keyed = Some(self.state.prepare_snapshot(checkpoint)?);
            self.down.snapshot(checkpoint, out)
        }
        fn failure(&mut self) -> Option<String> {
            self.state.failure().or_else(|| self.down.failure())
        }
    };
}

/// For the ends of chains (writers, sinks): nothing to snapshot here, nothing after them.
macro_rules! tail_checkpoint {
    () => {
        fn snapshot(&mut self, _checkpoint: u64, _out: &mut crate::checkpoint::ChainSnapshot) -> Result<()> {
            Ok(())
        }
        fn failure(&mut self) -> Option<String> {
            None
        }
    };
}
pub(crate) use tail_checkpoint;

/// Counts the records a source emits into its chain as the task's records in (what it read).
pub(crate) struct CountIn<T> {
    pub down: BoxOp<T>,
    pub count: u64,
    pub metrics: Arc<TaskMetrics>,
}

impl<T: Data> Collector<T> for CountIn<T> {
    fn collect(&mut self, record: T) {
        self.count += 1;
        self.down.collect(record);
    }
}

impl<T: Data> Op<T> for CountIn<T> {
    fn takes_reused(&self) -> bool {
        self.down.takes_reused()
    }
    fn collect_reused(&mut self, record: &mut T) {
        self.count += 1;
        self.down.collect_reused(record);
    }
    fn finish(&mut self) {
        self.down.finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.metrics.add_in(std::mem::take(&mut self.count));
        self.down.drain(flush, out)
    }
    forward_checkpoint!();
}

pub(crate) struct MapOp<I, O, F> {
    pub f: Arc<F>,
    pub down: BoxOp<O>,
    pub _in: PhantomData<fn(I)>,
}

impl<I: Data, O: Data, F: Fn(I) -> O + Send + Sync + 'static> Collector<I> for MapOp<I, O, F> {
    #[inline]
    fn collect(&mut self, record: I) {
        self.down.collect((self.f)(record))
    }
}

impl<I: Data, O: Data, F: Fn(I) -> O + Send + Sync + 'static> Op<I> for MapOp<I, O, F> {
    forward_control!();
}

pub(crate) struct FilterOp<T, F> {
    pub f: Arc<F>,
    pub down: BoxOp<T>,
}

impl<T: Data, F: Fn(&T) -> bool + Send + Sync + 'static> Collector<T> for FilterOp<T, F> {
    #[inline]
    fn collect(&mut self, record: T) {
        if (self.f)(&record) {
            self.down.collect(record)
        }
    }
}

impl<T: Data, F: Fn(&T) -> bool + Send + Sync + 'static> Op<T> for FilterOp<T, F> {
    fn takes_reused(&self) -> bool {
        self.down.takes_reused()
    }
    fn collect_reused(&mut self, record: &mut T) {
        if (self.f)(record) {
            self.down.collect_reused(record)
        }
    }
    forward_control!();
}

pub(crate) struct FlatMapOp<I, O, F> {
    pub f: Arc<F>,
    pub down: BoxOp<O>,
    pub _in: PhantomData<fn(I)>,
}

impl<I, O, F> Collector<I> for FlatMapOp<I, O, F>
where
    I: Data,
    O: Data,
    F: Fn(I, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    #[inline]
    fn collect(&mut self, record: I) {
        (self.f)(record, &mut *self.down)
    }
}

impl<I, O, F> Op<I> for FlatMapOp<I, O, F>
where
    I: Data,
    O: Data,
    F: Fn(I, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    forward_control!();
}

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
}

impl<A: Data, N: Data, K: Data + Hash + Eq> SumGrouper<A, N, K> {
    pub(crate) fn new(
        key: KeyFn<(A, N), K>,
        key_ref: Option<KeyRefFn<(A, N), K>>,
        down: BoxOp<SumGroup<A, N>>,
        metrics: Arc<TaskMetrics>,
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
        }
    }

    fn emit(&mut self) {
        self.index.clear();
        self.held = 0;
        let reuse = self.down.takes_reused();
        for mut group in self.groups.drain(..) {
            self.grouped += group.1.len() as u64;
            if reuse {
                self.down.collect_reused(&mut group);
            } else {
                self.down.collect(group);
            }
        }
    }

    fn open_group(&mut self, record: (A, N)) {
        self.index.insert((self.key)(&record), self.groups.len());
        self.groups.push((record, Vec::new()));
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
        match found {
            Some(i) if key_is_first || self.groups[i].0.0.data_eq(&record.0) => {
                self.groups[i].1.push(record.1)
            }
            Some(_) => {
                // Same key, another first field: the updates keep their order if the batch
                // ends here.
                self.emit();
                self.open_group(record);
            }
            None => self.open_group(record),
        }
        self.held += 1;
        if self.held >= GROUPER_MAX_RECORDS {
            self.emit();
        }
    }
}

impl<A: Data, N: Data, K: Data + Hash + Eq> Op<(A, N)> for SumGrouper<A, N, K> {
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

impl<T, K, F> Op<T> for SortedReduce<T, K, F>
where
    T: Data,
    K: Data + Ord,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn finish(&mut self) {
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
    fn finish(&mut self) {
        self.flush();
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

impl<T, K, S, O, F> Op<T> for SortedProcess<T, K, S, O, F>
where
    T: Data,
    K: Data + Ord,
    S: Default + Send + 'static,
    O: Data,
    F: Fn(&K, T, &mut S, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    fn finish(&mut self) {
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
        self.down.finish();
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }

    forward_checkpoint!();
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Collects into a Vec: the tail of chains under test.
    pub(crate) struct VecSink<T>(pub Arc<std::sync::Mutex<Vec<T>>>);

    impl<T: Data> Collector<T> for VecSink<T> {
        fn collect(&mut self, record: T) {
            self.0.lock().expect("lock").push(record)
        }
    }

    impl<T: Data> Op<T> for VecSink<T> {
        fn finish(&mut self) {}
        fn drain(&mut self, _: bool, _: &mut Vec<Chunk>) {}
        tail_checkpoint!();
    }

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
