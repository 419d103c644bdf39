//! The broadcast state pattern (Flink's `BroadcastProcessFunction` and
//! `KeyedBroadcastProcessFunction`): a low-volume stream (rules, a configuration) is broadcast to
//! every subtask of an operator, which keeps it in a broadcast state, a map that is the same in
//! every subtask because every subtask sees the same broadcast elements. The other input's
//! elements read it.
//!
//! The broadcast state is checkpointed by every subtask (`ChainSnapshot::broadcast`); any copy
//! restores any subtask, so a restore into another parallelism gives each new subtask one.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use super::{
    BoxOp, Chunk, Collector, KeyedContext, KeyedProcessFunction, KeyedProcessOperator, Op, ProcessContext,
    SortedKeyedProcess,
};
use crate::checkpoint::ChainSnapshot;
use crate::data::Data;
use crate::error::{Error, Result};
use crate::operators::{SideOutputs, TaggedUnion};
use crate::state::MapState;
use crate::time::{MIN_WATERMARK, TaskTime, TimeEvent};

/// A function over a stream and a broadcast stream (Flink's `BroadcastProcessFunction`).
///
/// Each subtask runs its own copy (the API asks for `Clone`): `open` runs once before its first
/// element, `close` once when it ends.
pub trait BroadcastProcessFunction<I, B, O>: Send + Sync + 'static {
    type Key: Data + Ord;
    type Value: Data;

    /// Once per subtask, before its first element; an error fails the task.
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        let _ = ctx;
        Ok(())
    }

    /// Once per subtask, when it ends (finished, stopped, cancelled or failed).
    fn close(&mut self) -> crate::FunctionResult {
        Ok(())
    }

    /// An element of the non-broadcast input; the broadcast state is read-only here.
    fn process_element(
        &self,
        value: I,
        broadcast: &MapState<Self::Key, Self::Value>,
        ctx: &mut ProcessContext<'_>,
        out: &mut dyn Collector<O>,
    );

    /// An element of the broadcast input, seen by every subtask: update the broadcast state
    /// here, the same way in every subtask.
    fn process_broadcast_element(
        &self,
        value: B,
        broadcast: &mut MapState<Self::Key, Self::Value>,
        out: &mut dyn Collector<O>,
    );
}

/// A function over a keyed stream and a broadcast stream (Flink's
/// `KeyedBroadcastProcessFunction`): keyed state and timers for the keyed input's elements,
/// the broadcast state for both.
///
/// Each subtask runs its own copy (the API asks for `Clone`): `open` runs once before its first
/// element (after its state is restored), `close` once when it ends.
pub trait KeyedBroadcastProcessFunction<K, I, B, O>: Send + Sync + 'static {
    /// Per-key state, `Default` for a key seen for the first time.
    type State: Data + Default;
    type Key: Data + Ord;
    type Value: Data;

    /// Once per subtask, before its first element; an error fails the task.
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        let _ = ctx;
        Ok(())
    }

    /// Once per subtask, when it ends (finished, stopped, cancelled or failed).
    fn close(&mut self) -> crate::FunctionResult {
        Ok(())
    }

    fn process_element(
        &self,
        value: I,
        broadcast: &MapState<Self::Key, Self::Value>,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    );

    fn process_broadcast_element(
        &self,
        value: B,
        broadcast: &mut MapState<Self::Key, Self::Value>,
        out: &mut dyn Collector<O>,
    );

    /// A timer of `ctx.key()` fired at `timestamp`.
    fn on_timer(
        &self,
        timestamp: i64,
        broadcast: &MapState<Self::Key, Self::Value>,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        let _ = (timestamp, broadcast, ctx, out);
    }
}

/// The broadcast state of one subtask, shared by its operator and the function adapter.
type Shared<K, V> = Arc<Mutex<MapState<K, V>>>;

fn lock<K: Ord, V>(state: &Shared<K, V>) -> std::sync::MutexGuard<'_, MapState<K, V>> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The broadcast state restored for this subtask (`None` in a fresh job).
pub(crate) fn restore_broadcast<K: Data + Ord, V: Data>(restored: Option<&str>) -> Result<MapState<K, V>> {
    let Some(hex) = restored else {
        return Ok(MapState::default());
    };
    let bytes =
        crate::checkpoint::hex_decode(hex).map_err(|e| Error::Decode(format!("broadcast state: {e}")))?;
    MapState::decode(&mut &bytes[..])
}

fn snapshot_broadcast<K: Data + Ord, V: Data>(state: &MapState<K, V>) -> String {
    let mut bytes = Vec::new();
    state.encode(&mut bytes);
    crate::checkpoint::hex_encode(&bytes)
}

/// The keyed side of a [`KeyedBroadcastProcessFunction`] as a keyed process function.
pub(crate) struct KeyedSide<F, B, BK: Ord, BV> {
    pub f: Arc<F>,
    pub broadcast: Shared<BK, BV>,
    pub _b: PhantomData<fn(B)>,
}

impl<K, I, B, O, F> KeyedProcessFunction<K, I, O> for KeyedSide<F, B, F::Key, F::Value>
where
    B: 'static,
    F: KeyedBroadcastProcessFunction<K, I, B, O>,
{
    type State = F::State;

    /// The broadcast function's own `open`: this side holds the subtask's only `Arc` of it.
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        Arc::get_mut(&mut self.f).map_or(Ok(()), |f| f.open(ctx))
    }

    fn close(&mut self) -> crate::FunctionResult {
        Arc::get_mut(&mut self.f).map_or(Ok(()), |f| f.close())
    }

    fn process_element(
        &self,
        value: I,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        self.f.process_element(value, &lock(&self.broadcast), ctx, out)
    }

    fn on_timer(
        &self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        self.f.on_timer(timestamp, &lock(&self.broadcast), ctx, out)
    }
}

/// The STREAMING operator of a [`KeyedBroadcastProcessFunction`]: the keyed operator for the
/// keyed input, the broadcast state for the other.
///
/// The function lives in the keyed operator's [`KeyedSide`] (opened and closed there); broadcast
/// elements reach it through that.
pub(crate) struct KeyedBroadcastOp<K, I, B: 'static, O, F: KeyedBroadcastProcessFunction<K, I, B, O>> {
    pub inner: KeyedInner<K, I, B, O, F>,
    pub broadcast: Shared<F::Key, F::Value>,
}

/// The keyed input's function with the broadcast state it reads.
type SideOf<K, I, B, O, F> = KeyedSide<
    F,
    B,
    <F as KeyedBroadcastProcessFunction<K, I, B, O>>::Key,
    <F as KeyedBroadcastProcessFunction<K, I, B, O>>::Value,
>;

/// The keyed input's operator: STREAMING, or BATCH sorted by key, which keeps the keyed
/// elements until the end, so every broadcast element is seen before any of them (as Flink
/// processes the broadcast side first in BATCH).
pub(crate) enum KeyedInner<K, I, B: 'static, O, F: KeyedBroadcastProcessFunction<K, I, B, O>> {
    Streaming(KeyedProcessOperator<I, K, O, SideOf<K, I, B, O, F>>),
    Batch(SortedKeyedProcess<I, K, O, SideOf<K, I, B, O, F>>),
}

impl<K, I, B, O, F> KeyedInner<K, I, B, O, F>
where
    K: Data + std::hash::Hash + Eq + Ord,
    I: Data,
    B: Data,
    O: Data,
    F: KeyedBroadcastProcessFunction<K, I, B, O>,
{
    fn op(&mut self) -> &mut dyn Op<I> {
        match self {
            KeyedInner::Streaming(op) => op,
            KeyedInner::Batch(op) => op,
        }
    }

    fn down(&mut self) -> &mut BoxOp<O> {
        match self {
            KeyedInner::Streaming(op) => &mut op.down,
            KeyedInner::Batch(op) => op.down(),
        }
    }

    /// The function (held by the keyed side).
    fn function(&self) -> Arc<F> {
        let side: &SideOf<K, I, B, O, F> = match self {
            KeyedInner::Streaming(op) => &op.f,
            KeyedInner::Batch(op) => &op.inner().f,
        };
        side.f.clone()
    }
}

impl<K, I, B, O, F> Collector<TaggedUnion<I, B>> for KeyedBroadcastOp<K, I, B, O, F>
where
    K: Data + std::hash::Hash + Eq + Ord,
    I: Data,
    B: Data,
    O: Data,
    F: KeyedBroadcastProcessFunction<K, I, B, O>,
{
    fn collect(&mut self, record: TaggedUnion<I, B>) {
        match record {
            TaggedUnion::One(i) => self.inner.op().collect(i),
            TaggedUnion::Two(b) => {
                let f = self.inner.function();
                let down = self.inner.down();
                f.process_broadcast_element(b, &mut lock(&self.broadcast), &mut **down)
            }
        }
    }
}

impl<K, I, B, O, F> Op<TaggedUnion<I, B>> for KeyedBroadcastOp<K, I, B, O, F>
where
    K: Data + std::hash::Hash + Eq + Ord,
    I: Data,
    B: Data,
    O: Data,
    F: KeyedBroadcastProcessFunction<K, I, B, O>,
{
    fn on_time(&mut self, event: TimeEvent) {
        self.inner.op().on_time(event)
    }
    fn finish(&mut self) {
        self.inner.op().finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.inner.op().drain(flush, out)
    }
    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        out.broadcast = Some(snapshot_broadcast(&lock(&self.broadcast)));
        self.inner.op().snapshot(checkpoint, out)
    }
    fn failure(&mut self) -> Option<String> {
        self.inner.op().failure()
    }
}

/// The operator of a [`BroadcastProcessFunction`].
pub(crate) struct BroadcastOp<I, B, O, F: BroadcastProcessFunction<I, B, O>> {
    pub f: super::Opened<F>,
    pub broadcast: MapState<F::Key, F::Value>,
    pub time: Option<Arc<TaskTime>>,
    pub watermark: i64,
    pub side: SideOutputs,
    pub failure: Option<String>,
    pub down: BoxOp<O>,
    /// BATCH: the other input's elements (with their timestamps) are held until the end, so every
    /// broadcast element is processed first (as Flink does in BATCH).
    pub held: Option<Vec<(i64, I)>>,
    pub _in: PhantomData<fn(I, B)>,
}

impl<I: Data, B: Data, O: Data, F: BroadcastProcessFunction<I, B, O>> BroadcastOp<I, B, O, F> {
    fn process(&mut self, i: I, timestamp: Option<i64>) {
        let mut ctx = ProcessContext::new(timestamp, self.watermark, &mut self.side, &mut self.failure);
        self.f
            .process_element(i, &self.broadcast, &mut ctx, &mut *self.down)
    }

    /// BATCH, at the end of input: the held elements, now that every broadcast element is in.
    fn release(&mut self) {
        for (ts, i) in self.held.take().unwrap_or_default() {
            if let Some(time) = &self.time {
                time.set_timestamp(ts);
            }
            self.process(i, (ts != MIN_WATERMARK).then_some(ts));
        }
    }
}

impl<I: Data, B: Data, O: Data, F: BroadcastProcessFunction<I, B, O>> Collector<TaggedUnion<I, B>>
    for BroadcastOp<I, B, O, F>
{
    fn collect(&mut self, record: TaggedUnion<I, B>) {
        match record {
            TaggedUnion::One(i) => {
                let ts = self.time.as_ref().map_or(MIN_WATERMARK, |t| t.timestamp());
                match &mut self.held {
                    Some(held) => held.push((ts, i)),
                    None => self.process(i, (ts != MIN_WATERMARK).then_some(ts)),
                }
            }
            TaggedUnion::Two(b) => self
                .f
                .process_broadcast_element(b, &mut self.broadcast, &mut *self.down),
        }
    }
}

impl<I: Data, B: Data, O: Data, F: BroadcastProcessFunction<I, B, O>> Op<TaggedUnion<I, B>>
    for BroadcastOp<I, B, O, F>
{
    fn on_time(&mut self, event: TimeEvent) {
        if let TimeEvent::Watermark(w) = event {
            if w == i64::MAX {
                self.release();
            }
            self.watermark = w;
        }
        self.side.on_time(event);
        self.down.on_time(event)
    }
    fn finish(&mut self) {
        self.release();
        self.side.finish();
        self.down.finish();
        self.f.close_into(&mut self.failure);
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.side.drain(flush, out);
        self.down.drain(flush, out)
    }
    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        out.broadcast = Some(snapshot_broadcast(&self.broadcast));
        self.down.snapshot(checkpoint, out)
    }
    fn failure(&mut self) -> Option<String> {
        self.failure.take().or_else(|| self.down.failure())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_state_survives_its_snapshot_text() {
        let mut state: MapState<String, u64> = MapState::default();
        state.put("rule-a".into(), 3);
        state.put("rule-b".into(), 500);
        let text = snapshot_broadcast(&state);
        let back: MapState<String, u64> = restore_broadcast(Some(&text)).expect("restores");
        assert_eq!(back, state);
        let err = restore_broadcast::<String, u64>(Some("zz")).expect_err("not hex");
        assert!(err.to_string().contains("broadcast state: not hex"), "{err}");
    }
}
