//! Operators over two inputs. A two-input task decodes each input's records as its own type and
//! hands the operator one stream of [`TaggedUnion`]s (as Flink's `CoGroupedStreams` tags its
//! inputs), so co-map and co-flat-map are the one-input map and flat-map over it, and a keyed
//! co-process function is a keyed process function over it ([`CoProcess`]): its state, timers,
//! checkpoints, rescaling and BATCH sorting are the one-input operator's.
//!
//! The interval join ([`IntervalJoin`], Flink's `IntervalJoinOperator`) is such a keyed co-process
//! function: each side's elements wait in the key's state until the watermark passes the end of
//! the interval they can still join in.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{Collector, KeyedContext, KeyedProcessFunction};
use crate::data::{Data, StableHash};
use crate::error::{Error, Result};

/// An element of one of two inputs (Flink's `TaggedUnion`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaggedUnion<A, B> {
    /// From the first input.
    One(A),
    /// From the second input.
    Two(B),
}

impl<A: Data, B: Data> Data for TaggedUnion<A, B> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            TaggedUnion::One(a) => {
                out.push(0);
                a.encode(out)
            }
            TaggedUnion::Two(b) => {
                out.push(1);
                b.encode(out)
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Result<Self> {
        let (&tag, rest) = input
            .split_first()
            .ok_or_else(|| Error::Decode("a tagged union ends before its tag".into()))?;
        *input = rest;
        match tag {
            0 => Ok(TaggedUnion::One(A::decode(input)?)),
            1 => Ok(TaggedUnion::Two(B::decode(input)?)),
            other => Err(Error::Decode(format!(
                "tagged union tag {other}, expected 0 or 1"
            ))),
        }
    }

    fn write_text(&self, out: &mut Vec<u8>) {
        match self {
            TaggedUnion::One(a) => a.write_text(out),
            TaggedUnion::Two(b) => b.write_text(out),
        }
    }

    /// An enum of two variants of one field each.
    fn schema() -> crate::data::Schema {
        use crate::data::{Field, Schema, Variant};
        Schema::Enum {
            name: "TaggedUnion".into(),
            variants: vec![
                Variant::new("One", vec![Field::new("0", A::schema(), None)]),
                Variant::new("Two", vec![Field::new("0", B::schema(), None)]),
            ],
        }
    }

    fn data_eq(&self, other: &Self) -> bool {
        match (self, other) {
            (TaggedUnion::One(a), TaggedUnion::One(b)) => a.data_eq(b),
            (TaggedUnion::Two(a), TaggedUnion::Two(b)) => a.data_eq(b),
            _ => false,
        }
    }

    fn stable_hash(&self, h: &mut StableHash) {
        match self {
            TaggedUnion::One(a) => {
                h.write_u64(0);
                a.stable_hash(h)
            }
            TaggedUnion::Two(b) => {
                h.write_u64(1);
                b.stable_hash(h)
            }
        }
    }
}

/// A function over two connected keyed streams with shared per-key state and timers (Flink's
/// `KeyedCoProcessFunction`): the two inputs' elements of one key see the same state.
///
/// Each subtask runs its own copy (the API asks for `Clone`): `open` runs once before its first
/// element (after its state is restored), `close` once when it ends.
pub trait KeyedCoProcessFunction<K, I1, I2, O>: Send + Sync + 'static {
    /// Per-key state, `Default` for a key seen for the first time.
    type State: Data + Default;

    /// Once per subtask, before its first element; an error fails the task.
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        let _ = ctx;
        Ok(())
    }

    /// Once per subtask, when it ends (finished, stopped, cancelled or failed).
    fn close(&mut self) -> crate::FunctionResult {
        Ok(())
    }

    /// An element of the first input.
    fn process_element1(
        &self,
        value: I1,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    );

    /// An element of the second input.
    fn process_element2(
        &self,
        value: I2,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    );

    /// A timer of `ctx.key()` fired at `timestamp`.
    fn on_timer(
        &self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        let _ = (timestamp, ctx, out);
    }
}

/// A [`KeyedCoProcessFunction`] as the keyed process function over the tagged inputs.
pub(crate) struct CoProcess<F, I1, I2>(pub Arc<F>, pub PhantomData<fn(I1, I2)>);

impl<K, I1, I2, O, F> KeyedProcessFunction<K, TaggedUnion<I1, I2>, O> for CoProcess<F, I1, I2>
where
    I1: 'static,
    I2: 'static,
    F: KeyedCoProcessFunction<K, I1, I2, O>,
{
    type State = F::State;

    /// The co-function's own `open`: this adapter's `Arc` is its subtask's alone.
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        Arc::get_mut(&mut self.0).map_or(Ok(()), |f| f.open(ctx))
    }

    fn close(&mut self) -> crate::FunctionResult {
        Arc::get_mut(&mut self.0).map_or(Ok(()), |f| f.close())
    }

    fn process_element(
        &self,
        value: TaggedUnion<I1, I2>,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        match value {
            TaggedUnion::One(v) => self.0.process_element1(v, ctx, out),
            TaggedUnion::Two(v) => self.0.process_element2(v, ctx, out),
        }
    }

    fn on_timer(
        &self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        self.0.on_timer(timestamp, ctx, out)
    }
}

/// The interval join of two keyed streams (Flink's `IntervalJoinOperator`): a left element at
/// `t` joins every right element of its key at `t + lower ..= t + upper`; a pair is emitted once,
/// when its second element arrives, with the larger of the two timestamps. Elements behind the
/// watermark are late and dropped. A key's state holds each side's elements, with their
/// timestamps, until the watermark passes the last time they can still join.
pub(crate) struct IntervalJoin<A, B, F> {
    pub lower: i64,
    pub upper: i64,
    pub f: Arc<F>,
    pub _types: PhantomData<fn(A, B)>,
}

/// What an interval join keeps per key: each side's elements and their timestamps.
pub(crate) type JoinBuffers<A, B> = (Vec<(i64, A)>, Vec<(i64, B)>);

impl<A, B, F> IntervalJoin<A, B, F> {
    /// When a left element at `t` can join nothing more (Flink's cleanup time for it).
    fn left_done(&self, t: i64) -> i64 {
        t.saturating_add(self.upper.max(0))
    }

    /// When a right element at `t` can join nothing more.
    fn right_done(&self, t: i64) -> i64 {
        t.saturating_sub(self.lower.min(0))
    }

    fn late<K, S: Default>(ctx: &KeyedContext<'_, K, S>, t: i64) -> bool {
        ctx.current_watermark() != crate::time::MIN_WATERMARK && t < ctx.current_watermark()
    }
}

impl<K, A, B, O, F> KeyedCoProcessFunction<K, A, B, O> for IntervalJoin<A, B, F>
where
    K: 'static,
    A: Data,
    B: Data,
    O: 'static,
    F: Fn(&A, &B, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    type State = JoinBuffers<A, B>;

    fn process_element1(
        &self,
        value: A,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        let Some(t) = ctx.timestamp() else {
            ctx.fail("an interval join's first input has no timestamps: assign them first".into());
            return;
        };
        if Self::late(ctx, t) {
            ctx.late_record_dropped();
            return;
        }
        let (from, to) = (t.saturating_add(self.lower), t.saturating_add(self.upper));
        let matches: Vec<(i64, B)> = ctx
            .state()
            .1
            .iter()
            .filter(|(rt, _)| (from..=to).contains(rt))
            .cloned()
            .collect();
        for (rt, right) in &matches {
            ctx.set_output_timestamp(t.max(*rt));
            (self.f)(&value, right, out);
        }
        ctx.state().0.push((t, value));
        ctx.register_event_time_timer(self.left_done(t));
    }

    fn process_element2(
        &self,
        value: B,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        let Some(t) = ctx.timestamp() else {
            ctx.fail("an interval join's second input has no timestamps: assign them first".into());
            return;
        };
        if Self::late(ctx, t) {
            ctx.late_record_dropped();
            return;
        }
        // Left elements at `l` with `l + lower <= t <= l + upper`.
        let (from, to) = (t.saturating_sub(self.upper), t.saturating_sub(self.lower));
        let matches: Vec<(i64, A)> = ctx
            .state()
            .0
            .iter()
            .filter(|(lt, _)| (from..=to).contains(lt))
            .cloned()
            .collect();
        for (lt, left) in &matches {
            ctx.set_output_timestamp(t.max(*lt));
            (self.f)(left, &value, out);
        }
        ctx.state().1.push((t, value));
        ctx.register_event_time_timer(self.right_done(t));
    }

    fn on_timer(&self, timestamp: i64, ctx: &mut KeyedContext<'_, K, Self::State>, _: &mut dyn Collector<O>) {
        let (left, right) = ctx.state();
        left.retain(|(t, _)| self.left_done(*t) > timestamp);
        right.retain(|(t, _)| self.right_done(*t) > timestamp);
        if left.is_empty() && right.is_empty() {
            ctx.clear_state();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_union_round_trips_and_rejects_a_bad_tag() {
        let values: Vec<TaggedUnion<String, u64>> = vec![TaggedUnion::One("a".into()), TaggedUnion::Two(7)];
        let mut bytes = Vec::new();
        for v in &values {
            v.encode(&mut bytes);
        }
        let mut input = &bytes[..];
        let back: Vec<TaggedUnion<String, u64>> = (0..2)
            .map(|_| TaggedUnion::decode(&mut input).expect("decodes"))
            .collect();
        assert_eq!(back, values);
        let err = TaggedUnion::<String, u64>::decode(&mut &[9u8][..]).expect_err("tag 9");
        assert!(err.to_string().contains("tag 9, expected 0 or 1"), "{err}");
    }
}
