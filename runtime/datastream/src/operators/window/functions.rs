//! Window functions: incremental ones (`reduce`, [`AggregateFunction`]) keep one accumulator per
//! window; a [`ProcessWindowFunction`] gets every element (or, combined with an incremental one,
//! just its result); an [`Evictor`] removes elements before the function sees them.

use std::collections::BTreeSet;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use super::{TimeWindow, WindowsContext};
use crate::data::Data;
use crate::operators::Collector;
use crate::state::descriptors::MapStateDescriptor;

/// An incremental aggregation with an accumulator (Flink's `AggregateFunction`).
pub trait AggregateFunction<IN>: Send + Sync + 'static {
    type Acc: Data;
    type Out: Data;
    fn create_accumulator(&self) -> Self::Acc;
    fn add(&self, value: IN, acc: &mut Self::Acc);
    fn get_result(&self, acc: &Self::Acc) -> Self::Out;
    /// Two accumulators of windows that merged (session windows).
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

/// What a [`ProcessWindowFunction`] knows besides the elements.
#[derive(Debug, Clone, Copy)]
pub struct WindowContext {
    pub window: TimeWindow,
    pub current_watermark: i64,
    pub current_processing_time: i64,
}

/// A function over all of a window's elements (Flink's `ProcessWindowFunction`).
///
/// Each subtask runs its own copy (the API asks for `Clone`): `open` runs once before its first
/// element (after its state is restored), `close` once when it ends.
pub trait ProcessWindowFunction<K, IN, O>: Send + Sync + 'static {
    /// Once per subtask, before its first element; an error fails the task.
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        let _ = ctx;
        Ok(())
    }

    /// Once per subtask, when it ends (finished, stopped, cancelled or failed).
    fn close(&mut self) -> crate::FunctionResult {
        Ok(())
    }

    fn process(&self, key: &K, ctx: &WindowContext, elements: &[IN], out: &mut dyn Collector<O>);
}

/// Opens the function behind `f`, the subtask's only `Arc` of it (window operators are built per
/// subtask).
pub(crate) fn open_in<P: ?Sized>(
    f: &mut Arc<P>,
    open: impl FnOnce(&mut P) -> crate::FunctionResult,
) -> crate::FunctionResult {
    Arc::get_mut(f).map_or(Ok(()), open)
}

/// Removes elements from a window before its function is evaluated (Flink's `CountEvictor` and
/// `TimeEvictor`, evicting before the function).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evictor {
    /// Keep the last `n` elements.
    Count(usize),
    /// Keep elements no older than `ms` before the window's newest element.
    Time(i64),
}

#[derive(Debug)]
pub struct CountEvictor;
impl CountEvictor {
    pub fn of(n: usize) -> Evictor {
        Evictor::Count(n)
    }
}

#[derive(Debug)]
pub struct TimeEvictor;
impl TimeEvictor {
    pub fn of(keep: std::time::Duration) -> Evictor {
        Evictor::Time(keep.as_millis().min(i64::MAX as u128) as i64)
    }
}

impl Evictor {
    /// Evicts from `elements` (in arrival order, with timestamps) in place.
    pub(crate) fn evict<T>(&self, elements: &mut Vec<(i64, T)>) {
        match *self {
            Evictor::Count(n) => {
                if elements.len() > n {
                    elements.drain(..elements.len() - n);
                }
            }
            Evictor::Time(keep) => {
                if let Some(newest) = elements.iter().map(|e| e.0).max() {
                    let cut = newest.saturating_sub(keep);
                    elements.retain(|e| e.0 >= cut);
                }
            }
        }
    }
}

/// How the window operator accumulates and evaluates a window, for every kind of window function.
/// Each call gets the key's context: a function may keep a window's contents in per-entry state
/// of the key ([`ContentsFn`]), its accumulator then only naming them.
pub(crate) trait WindowFn<K, T, O>: Send + Sync + 'static {
    type Acc: Data;
    /// Opens the user's process function, if it has one.
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        let _ = ctx;
        Ok(())
    }
    fn close(&mut self) -> crate::FunctionResult {
        Ok(())
    }
    fn add(
        &self,
        ctx: &mut WindowsContext<'_, K, Self::Acc>,
        acc: Option<Self::Acc>,
        timestamp: i64,
        value: T,
    ) -> Self::Acc;
    /// The accumulator of windows that merged (sessions), their elements in the order given;
    /// `accs` is not empty.
    fn merge(&self, ctx: &mut WindowsContext<'_, K, Self::Acc>, accs: Vec<Self::Acc>) -> Self::Acc;
    /// Evaluates a window; may change its accumulator (an evictor removes what it evicted).
    fn emit(
        &self,
        ctx: &mut WindowsContext<'_, K, Self::Acc>,
        key: &K,
        window: &WindowContext,
        acc: &mut Self::Acc,
        out: &mut dyn Collector<O>,
    );
    /// A window's accumulator is dropped (purged, or the window cleaned up): whatever it names
    /// elsewhere goes with it.
    fn purge(&self, ctx: &mut WindowsContext<'_, K, Self::Acc>, acc: Self::Acc) {
        let _ = (ctx, acc);
    }
}

/// What the result of an incremental function goes through: straight out, or a process function.
pub(crate) trait ResultStage<K, R, O>: Send + Sync + 'static {
    fn emit(&self, key: &K, ctx: &WindowContext, result: R, out: &mut dyn Collector<O>);
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        let _ = ctx;
        Ok(())
    }
    fn close(&mut self) -> crate::FunctionResult {
        Ok(())
    }
}

/// Results go out as they are.
pub(crate) struct Direct;

impl<K, R: Data> ResultStage<K, R, R> for Direct {
    fn emit(&self, _: &K, _: &WindowContext, result: R, out: &mut dyn Collector<R>) {
        out.collect(result)
    }
}

/// A process function gets the one result (Flink's `reduce(f, processWindowFunction)`).
pub(crate) struct ThenProcess<P, R>(pub Arc<P>, pub PhantomData<fn(R)>);

impl<K, R, O, P> ResultStage<K, R, O> for ThenProcess<P, R>
where
    R: Data,
    P: ProcessWindowFunction<K, R, O>,
{
    fn emit(&self, key: &K, ctx: &WindowContext, result: R, out: &mut dyn Collector<O>) {
        self.0.process(key, ctx, std::slice::from_ref(&result), out)
    }
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        open_in(&mut self.0, |f| f.open(ctx))
    }
    fn close(&mut self) -> crate::FunctionResult {
        open_in(&mut self.0, |f| f.close())
    }
}

/// `reduce`: the accumulator is the reduced element.
pub(crate) struct ReduceFn<F, S>(pub Arc<F>, pub S);

impl<K, T, O, F, S> WindowFn<K, T, O> for ReduceFn<F, S>
where
    T: Data,
    F: Fn(T, T) -> T + Send + Sync + 'static,
    S: ResultStage<K, T, O>,
{
    type Acc = T;
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        self.1.open(ctx)
    }
    fn close(&mut self) -> crate::FunctionResult {
        self.1.close()
    }
    fn add(&self, _: &mut WindowsContext<'_, K, T>, acc: Option<T>, _: i64, value: T) -> T {
        match acc {
            Some(acc) => (self.0)(acc, value),
            None => value,
        }
    }
    fn merge(&self, _: &mut WindowsContext<'_, K, T>, accs: Vec<T>) -> T {
        let mut accs = accs.into_iter();
        let first = accs.next().expect("windows to merge");
        accs.fold(first, |a, b| (self.0)(a, b))
    }
    fn emit(
        &self,
        _: &mut WindowsContext<'_, K, T>,
        key: &K,
        window: &WindowContext,
        acc: &mut T,
        out: &mut dyn Collector<O>,
    ) {
        self.1.emit(key, window, acc.clone(), out)
    }
}

/// `aggregate`: an accumulator of the function's type.
pub(crate) struct AggregateFn<A, S>(pub Arc<A>, pub S);

impl<K, T, O, A, S> WindowFn<K, T, O> for AggregateFn<A, S>
where
    T: Data,
    A: AggregateFunction<T>,
    S: ResultStage<K, A::Out, O>,
{
    type Acc = A::Acc;
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        self.1.open(ctx)
    }
    fn close(&mut self) -> crate::FunctionResult {
        self.1.close()
    }
    fn add(&self, _: &mut WindowsContext<'_, K, A::Acc>, acc: Option<A::Acc>, _: i64, value: T) -> A::Acc {
        let mut acc = acc.unwrap_or_else(|| self.0.create_accumulator());
        self.0.add(value, &mut acc);
        acc
    }
    fn merge(&self, _: &mut WindowsContext<'_, K, A::Acc>, accs: Vec<A::Acc>) -> A::Acc {
        let mut accs = accs.into_iter();
        let first = accs.next().expect("windows to merge");
        accs.fold(first, |a, b| self.0.merge(a, b))
    }
    fn emit(
        &self,
        _: &mut WindowsContext<'_, K, A::Acc>,
        key: &K,
        window: &WindowContext,
        acc: &mut A::Acc,
        out: &mut dyn Collector<O>,
    ) {
        self.1.emit(key, window, self.0.get_result(acc), out)
    }
}

/// `process` (and any evictor): every element is kept, with its timestamp. On the heap the
/// window's accumulator holds them in a vector (objects, nothing encoded). On a byte-level backend
/// (RocksDB) each is its own entry of a map state of the key, `(contents id, sequence number) ->
/// (timestamp, element)`, as Flink keeps a window's contents as list state in the window's
/// namespace: adding an element is one write whatever the window holds. Before, a window's
/// elements were one value of the key there, decoded and written again whole by every element
/// (n elements cost O(n^2)). A window keeps the form it has until it is purged, except that
/// inline contents restored into a backend move to entries at their next element. As in Flink's
/// evicting window operator, what an evictor evicts leaves the state.
pub(crate) struct ContentsFn<P, T> {
    pub f: Arc<P>,
    pub evictor: Option<Evictor>,
    entries: MapStateDescriptor<(u64, i64), (i64, T)>,
}

impl<P, T: Data> ContentsFn<P, T> {
    pub(crate) fn new(f: Arc<P>, evictor: Option<Evictor>) -> Self {
        ContentsFn {
            f,
            evictor,
            entries: MapStateDescriptor::new(CONTENTS_STATE),
        }
    }
}

/// The map state window contents are kept in on a byte-level backend (one per window operator).
pub(crate) const CONTENTS_STATE: &str = "window-contents";

/// A window's contents: inline, or entries `(id, n)` of [`ContentsFn`]'s map state for `n` in
/// `first..next` (some may have been evicted), with an id unique among the key's windows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Contents<T> {
    Inline(Vec<(i64, T)>),
    Entries { id: u64, first: i64, next: i64 },
}

impl<T: Data> Data for Contents<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Contents::Inline(elements) => {
                0u8.encode(out);
                elements.encode(out);
            }
            Contents::Entries { id, first, next } => {
                1u8.encode(out);
                id.encode(out);
                first.encode(out);
                next.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> crate::error::Result<Self> {
        match u8::decode(input)? {
            0 => Ok(Contents::Inline(Vec::decode(input)?)),
            1 => Ok(Contents::Entries {
                id: u64::decode(input)?,
                first: i64::decode(input)?,
                next: i64::decode(input)?,
            }),
            tag => Err(crate::error::Error::Decode(format!(
                "window contents: unknown form {tag} (state written by another version?)"
            ))),
        }
    }

    fn write_text(&self, out: &mut Vec<u8>) {
        let text = match self {
            Contents::Inline(elements) => format!("{} elements", elements.len()),
            Contents::Entries { id, first, next } => format!("entries {id} [{first}, {next})"),
        };
        out.extend_from_slice(text.as_bytes());
    }

    /// An enum (its one-byte form tag is a variant index).
    fn schema() -> crate::data::Schema {
        use crate::data::{Field, Schema, Variant};
        Schema::Enum {
            name: "Contents".into(),
            variants: vec![
                Variant::new("Inline", vec![Field::new("0", Vec::<(i64, T)>::schema(), None)]),
                Variant::new(
                    "Entries",
                    vec![
                        Field::new("id", Schema::U64, None),
                        Field::new("first", Schema::I64, None),
                        Field::new("next", Schema::I64, None),
                    ],
                ),
            ],
        }
    }
}

impl<P, T: Data> ContentsFn<P, T> {
    /// `(id, first, next)` of `acc` as entries: inline contents are written out as entries first.
    fn as_entries<K: Data + Hash + Eq>(
        &self,
        ctx: &mut WindowsContext<'_, K, Contents<T>>,
        acc: Option<Contents<T>>,
    ) -> (u64, i64, i64) {
        match acc {
            Some(Contents::Entries { id, first, next }) => (id, first, next),
            inline => {
                // Any id not among the key's other windows (this one's accumulator is out).
                let id = ctx
                    .state()
                    .0
                    .iter()
                    .filter_map(|e| match &e.acc {
                        Some(Contents::Entries { id, .. }) => Some(id + 1),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                let mut map = ctx.map_state(&self.entries);
                let mut next = 0;
                if let Some(Contents::Inline(elements)) = inline {
                    for element in elements {
                        map.put((id, next), element);
                        next += 1;
                    }
                }
                (id, 0, next)
            }
        }
    }
}

impl<K, T, O, P> WindowFn<K, T, O> for ContentsFn<P, T>
where
    K: Data + Hash + Eq,
    T: Data,
    P: ProcessWindowFunction<K, T, O>,
{
    type Acc = Contents<T>;

    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        open_in(&mut self.f, |f| f.open(ctx))
    }
    fn close(&mut self) -> crate::FunctionResult {
        open_in(&mut self.f, |f| f.close())
    }

    fn add(
        &self,
        ctx: &mut WindowsContext<'_, K, Contents<T>>,
        acc: Option<Contents<T>>,
        timestamp: i64,
        value: T,
    ) -> Contents<T> {
        match acc {
            Some(Contents::Inline(mut elements)) if ctx.keeps_objects() => {
                elements.push((timestamp, value));
                Contents::Inline(elements)
            }
            None if ctx.keeps_objects() => Contents::Inline(vec![(timestamp, value)]),
            acc => {
                let (id, first, next) = self.as_entries(ctx, acc);
                ctx.map_state(&self.entries).put((id, next), (timestamp, value));
                Contents::Entries {
                    id,
                    first,
                    next: next + 1,
                }
            }
        }
    }

    fn merge(&self, ctx: &mut WindowsContext<'_, K, Contents<T>>, accs: Vec<Contents<T>>) -> Contents<T> {
        let len = |c: &Contents<T>| match c {
            Contents::Inline(elements) => elements.len() as i64,
            Contents::Entries { first, next, .. } => next - first,
        };
        // The largest entries stay where they are and the others' elements move to its id
        // (each element moves O(log n) times over a session's merges), numbered before or after
        // its own to keep the order. No new id is needed: the merged windows' own are out of the
        // key's state now, and a new one could collide with them.
        let target = accs
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, Contents::Entries { .. }))
            .max_by_key(|(_, c)| len(c))
            .map(|(i, _)| i);
        let Some(target) = target else {
            let merged = accs
                .into_iter()
                .flat_map(|c| match c {
                    Contents::Inline(elements) => elements,
                    Contents::Entries { .. } => Vec::new(),
                })
                .collect();
            return Contents::Inline(merged);
        };
        let Contents::Entries {
            id,
            mut first,
            mut next,
        } = accs[target]
        else {
            unreachable!("the target holds entries")
        };
        let before: i64 = accs[..target].iter().map(len).sum();
        first -= before;
        let mut at = first;
        let mut map = ctx.map_state(&self.entries);
        for (i, acc) in accs.into_iter().enumerate() {
            if i == target {
                at = next;
                continue;
            }
            match acc {
                Contents::Inline(elements) => {
                    for element in elements {
                        map.put((id, at), element);
                        at += 1;
                    }
                }
                Contents::Entries {
                    id: from,
                    first: from_first,
                    next: from_next,
                } => {
                    for n in from_first..from_next {
                        if let Some(element) = map.get(&(from, n)) {
                            map.remove(&(from, n));
                            map.put((id, at + (n - from_first)), element);
                        }
                    }
                    at += from_next - from_first;
                }
            }
            if i > target {
                next = at;
            }
        }
        Contents::Entries { id, first, next }
    }

    fn emit(
        &self,
        ctx: &mut WindowsContext<'_, K, Contents<T>>,
        key: &K,
        window: &WindowContext,
        acc: &mut Contents<T>,
        out: &mut dyn Collector<O>,
    ) {
        let (id, first, next) = match acc {
            Contents::Inline(elements) => {
                if let Some(e) = &self.evictor {
                    e.evict(elements);
                }
                let values: Vec<T> = elements.iter().map(|(_, v)| v.clone()).collect();
                return self.f.process(key, window, &values, out);
            }
            Contents::Entries { id, first, next } => (*id, first, *next),
        };
        let mut map = ctx.map_state(&self.entries);
        let mut held: Vec<(i64, (i64, T))> = Vec::new();
        map.for_each(|(of, n), (timestamp, value)| {
            if of == id {
                held.push((n, (timestamp, value)));
            }
            true
        });
        held.sort_unstable_by_key(|e| e.0);
        let mut kept: Vec<(i64, (i64, T))> = held.into_iter().map(|(n, (ts, v))| (ts, (n, v))).collect();
        if let Some(e) = &self.evictor {
            let before: BTreeSet<i64> = kept.iter().map(|e| e.1.0).collect();
            e.evict(&mut kept);
            let after: BTreeSet<i64> = kept.iter().map(|e| e.1.0).collect();
            for n in before.difference(&after) {
                map.remove(&(id, *n));
            }
            *first = after.first().copied().unwrap_or(next);
        }
        let values: Vec<T> = kept.into_iter().map(|(_, (_, v))| v).collect();
        self.f.process(key, window, &values, out)
    }

    fn purge(&self, ctx: &mut WindowsContext<'_, K, Contents<T>>, acc: Contents<T>) {
        if let Contents::Entries { id, first, next } = acc {
            let mut map = ctx.map_state(&self.entries);
            for n in first..next {
                map.remove(&(id, n));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evictors_keep_the_last_elements_or_the_recent_ones() {
        let mut e: Vec<(i64, u32)> = vec![(5, 1), (1, 2), (9, 3), (7, 4)];
        CountEvictor::of(2).evict(&mut e);
        assert_eq!(e, vec![(9, 3), (7, 4)]);
        let mut e: Vec<(i64, u32)> = vec![(5, 1), (1, 2), (9, 3), (7, 4)];
        TimeEvictor::of(std::time::Duration::from_millis(4)).evict(&mut e);
        assert_eq!(e, vec![(5, 1), (9, 3), (7, 4)]);
    }
}
