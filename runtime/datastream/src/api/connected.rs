//! More than one input (Flink's names): [`DataStream::union`], [`DataStream::connect`] with
//! co-map, co-flat-map and keyed co-process functions, the interval join
//! ([`KeyedStream::interval_join`]) and the window join and co-group ([`DataStream::join`],
//! [`DataStream::co_group`]).
//!
//! A union is not an operator: its consumers read every unioned stream directly. A connected
//! operator is a two-input operator: its task reads both inputs' gates as one, aligns barriers
//! across them and takes the minimum of their watermarks, and its function sees one stream of
//! [`TaggedUnion`]s. Window joins are, as in Flink, a union of the two inputs tagged, keyed by
//! the two key selectors, windowed, and a window function that splits each window by tag.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use super::{
    DataStream, KeyedStream, NodeInput, NodeKind, Par, StreamNode, flat_map_factory, lock, map_factory,
    push_node,
};
use crate::data::Data;
use crate::operators::window::{ProcessWindowFunction, WindowAssigner, WindowContext};
use crate::operators::{
    AnyOp, BroadcastOp, CoProcess, Collector, IntervalJoin, KeyFn, KeyedBroadcastOp, KeyedCoProcessFunction,
    KeyedInner, KeyedProcessOperator, KeyedSide, OpContext, OpFactory, SortedKeyedProcess, TaggedUnion,
    downcast, erase, restore_broadcast,
};
use crate::task::{TwoInputOf, TypeOf};

impl<T: Data> DataStream<T> {
    /// One stream of this stream's and `others`' records (Flink's `union`): no operator runs for
    /// it, the next operator reads all of them.
    pub fn union(&self, others: &[&DataStream<T>]) -> DataStream<T> {
        let mut inputs = vec![self.plain_input()];
        for other in others {
            if !Arc::ptr_eq(&self.shared, &other.shared) {
                lock(&self.shared)
                    .errors
                    .push("union: the streams belong to different environments".into());
            }
            inputs.push(other.plain_input());
        }
        let node = push_node(
            &self.shared,
            StreamNode {
                uid: None,
                id: "union",
                name: "Union".into(),
                parallelism: Par::Default,
                inputs,
                kind: NodeKind::Union,
                two_input: None,
                out_type: Some(Arc::new(TypeOf::<T>(PhantomData))),
                new_chain: false,
                source_input: None,
            },
        );
        DataStream::at(self.shared.clone(), node)
    }

    /// This stream and `other` as the two inputs of one operator (Flink's `connect`).
    pub fn connect<B: Data>(&self, other: &DataStream<B>) -> ConnectedStreams<T, B> {
        if !Arc::ptr_eq(&self.shared, &other.shared) {
            lock(&self.shared)
                .errors
                .push("connect: the streams belong to different environments".into());
        }
        ConnectedStreams {
            first: self.clone(),
            second: other.clone(),
        }
    }

    /// Pairs of this stream's and `other`'s elements of equal key in the same window (Flink's
    /// window join): `.where_key(..).equal_to(..).window(..).apply(..)`.
    pub fn join<B: Data>(&self, other: &DataStream<B>) -> JoinedStreams<T, B> {
        CoGroupedStreams {
            first: self.clone(),
            second: other.clone(),
        }
    }

    /// All of this stream's and `other`'s elements of equal key in the same window, as two groups
    /// (Flink's `coGroup`): `.where_key(..).equal_to(..).window(..).apply(..)`.
    pub fn co_group<B: Data>(&self, other: &DataStream<B>) -> CoGroupedStreams<T, B> {
        CoGroupedStreams {
            first: self.clone(),
            second: other.clone(),
        }
    }
}

/// Adds a two-input operator reading `first` (side 0) and `second` (side 1).
fn two_input_node<A: Data, B: Data, O: Data>(
    shared: &DataStream<A>,
    first: NodeInput,
    mut second: NodeInput,
    id: &'static str,
    name: &str,
    factory: OpFactory,
) -> DataStream<O> {
    second.side = 1;
    let node = push_node(
        &shared.shared,
        StreamNode {
            uid: None,
            id,
            name: name.to_string(),
            parallelism: Par::Default,
            inputs: vec![first, second],
            kind: NodeKind::Operator(factory),
            two_input: Some(Arc::new(TwoInputOf::<A, B>(PhantomData))),
            out_type: Some(Arc::new(TypeOf::<O>(PhantomData))),
            new_chain: false,
            source_input: None,
        },
    );
    DataStream::at(shared.shared.clone(), node)
}

/// Two streams connected as the inputs of one operator (Flink's `ConnectedStreams`).
pub struct ConnectedStreams<A, B> {
    first: DataStream<A>,
    second: DataStream<B>,
}

impl<A, B> std::fmt::Debug for ConnectedStreams<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectedStreams")
            .field("first", &self.first.node)
            .field("second", &self.second.node)
            .finish()
    }
}

impl<A: Data, B: Data> ConnectedStreams<A, B> {
    /// `f1` maps the first input's elements, `f2` the second's (Flink's `CoMapFunction`).
    pub fn map<O, F1, F2>(&self, f1: F1, f2: F2) -> DataStream<O>
    where
        O: Data,
        F1: Fn(A) -> O + Send + Sync + 'static,
        F2: Fn(B) -> O + Send + Sync + 'static,
    {
        let factory = map_factory(move |t: TaggedUnion<A, B>| match t {
            TaggedUnion::One(a) => f1(a),
            TaggedUnion::Two(b) => f2(b),
        });
        two_input_node::<A, B, O>(
            &self.first,
            self.first.plain_input(),
            self.second.plain_input(),
            "co-map",
            "CoMap",
            factory,
        )
    }

    /// `f1` and `f2` emit any number of records for the first and second input's elements
    /// (Flink's `CoFlatMapFunction`).
    pub fn flat_map<O, F1, F2>(&self, f1: F1, f2: F2) -> DataStream<O>
    where
        O: Data,
        F1: Fn(A, &mut dyn Collector<O>) + Send + Sync + 'static,
        F2: Fn(B, &mut dyn Collector<O>) + Send + Sync + 'static,
    {
        let factory = flat_map_factory(move |t: TaggedUnion<A, B>, out: &mut dyn Collector<O>| match t {
            TaggedUnion::One(a) => f1(a, out),
            TaggedUnion::Two(b) => f2(b, out),
        });
        two_input_node::<A, B, O>(
            &self.first,
            self.first.plain_input(),
            self.second.plain_input(),
            "co-flat-map",
            "CoFlatMap",
            factory,
        )
    }

    /// Partitions both inputs by key, `k1` for the first and `k2` for the second: elements of one
    /// key meet in one subtask and share its state.
    pub fn key_by<K, F1, F2>(&self, k1: F1, k2: F2) -> KeyedConnectedStreams<A, B, K>
    where
        K: Data + Hash + Eq + Ord,
        F1: Fn(&A) -> K + Send + Sync + 'static,
        F2: Fn(&B) -> K + Send + Sync + 'static,
    {
        KeyedConnectedStreams {
            first: self.first.key_by(k1),
            second: self.second.key_by(k2),
        }
    }
}

/// Two keyed streams connected (Flink's `ConnectedStreams` after `keyBy`).
pub struct KeyedConnectedStreams<A, B, K> {
    first: KeyedStream<A, K>,
    second: KeyedStream<B, K>,
}

impl<A, B, K> std::fmt::Debug for KeyedConnectedStreams<A, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedConnectedStreams")
            .field("first", &self.first.stream.node)
            .field("second", &self.second.stream.node)
            .finish()
    }
}

impl<A: Data, B: Data, K: Data + Hash + Eq + Ord> KeyedConnectedStreams<A, B, K> {
    /// A [`KeyedCoProcessFunction`] over both inputs: per-key state shared by the two, and
    /// event-time and processing-time timers (Flink's `process(KeyedCoProcessFunction)`).
    /// Checkpointed, restored and rescaled as any keyed state; in BATCH both inputs are sorted by
    /// key and time and each key runs alone.
    ///
    /// Each subtask runs its own copy of `f`, opened before its first element (after its state
    /// is restored) and closed when it ends.
    pub fn process<O: Data, F: KeyedCoProcessFunction<K, A, B, O> + Clone>(&self, f: F) -> DataStream<O> {
        let prototype = Arc::new(crate::operators::Prototype::new(f));
        self.process_with(
            "co-process",
            "KeyedCoProcess",
            move |ctx: &OpContext| {
                crate::operators::open_shared(
                    CoProcess(Arc::new(prototype.copy()), PhantomData),
                    ctx,
                    <CoProcess<F, A, B> as crate::operators::KeyedProcessFunction<K, TaggedUnion<A, B>, O>>::open,
                    <CoProcess<F, A, B> as crate::operators::KeyedProcessFunction<K, TaggedUnion<A, B>, O>>::close,
                )
            },
        )
    }

    fn process_named<O, F>(&self, id: &'static str, name: &str, f: Arc<F>) -> DataStream<O>
    where
        O: Data,
        F: crate::operators::KeyedProcessFunction<K, TaggedUnion<A, B>, O>,
    {
        self.process_with(id, name, move |_: &OpContext| {
            Ok(crate::operators::Opened::plain(f.clone()))
        })
    }

    /// The two-input keyed operator of the function each subtask's `function` makes.
    fn process_with<O, F>(
        &self,
        id: &'static str,
        name: &str,
        function: impl Fn(&OpContext) -> crate::Result<crate::operators::Opened<Arc<F>>> + Send + Sync + 'static,
    ) -> DataStream<O>
    where
        O: Data,
        F: crate::operators::KeyedProcessFunction<K, TaggedUnion<A, B>, O>,
    {
        let (k1, k2) = (self.first.key.clone(), self.second.key.clone());
        let key: KeyFn<TaggedUnion<A, B>, K> = Arc::new(move |t: &TaggedUnion<A, B>| match t {
            TaggedUnion::One(a) => k1(a),
            TaggedUnion::Two(b) => k2(b),
        });
        // The operator over the tagged elements: a keyed stream of them (its node is not read).
        let tagged = KeyedStream {
            stream: DataStream::<TaggedUnion<A, B>>::at(
                self.first.stream.shared.clone(),
                self.first.stream.node,
            ),
            key,
            key_ref: None,
        };
        let factory = tagged.keyed_process_factory(function, false);
        two_input_node::<A, B, O>(
            &self.first.stream,
            self.first.hash_input(self.first.stream.node),
            self.second.hash_input(self.second.stream.node),
            id,
            name,
            factory,
        )
    }
}

impl<A: Data, K: Data + Hash + Eq + Ord> KeyedStream<A, K> {
    /// Joins this stream's elements with `other`'s of the same key whose timestamps are within
    /// an interval of theirs (Flink's `intervalJoin`): `.between(lower_ms, upper_ms).process(..)`.
    pub fn interval_join<B: Data>(&self, other: &KeyedStream<B, K>) -> IntervalJoined<A, B, K> {
        IntervalJoined {
            first: self.clone(),
            second: other.clone(),
            bounds: None,
        }
    }
}

/// An interval join being defined (Flink's `IntervalJoin` and `IntervalJoined`).
pub struct IntervalJoined<A, B, K> {
    first: KeyedStream<A, K>,
    second: KeyedStream<B, K>,
    bounds: Option<(i64, i64)>,
}

impl<A, B, K> std::fmt::Debug for IntervalJoined<A, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntervalJoined")
            .field("bounds", &self.bounds)
            .finish()
    }
}

impl<A: Data, B: Data, K: Data + Hash + Eq + Ord> IntervalJoined<A, B, K> {
    /// A left element at `t` joins right elements at `t + lower_ms ..= t + upper_ms` (either
    /// bound may be negative; `lower_ms <= upper_ms`).
    pub fn between(mut self, lower_ms: i64, upper_ms: i64) -> Self {
        if lower_ms > upper_ms {
            lock(&self.first.stream.shared).errors.push(format!(
                "interval join: the lower bound ({lower_ms} ms) is above the upper bound ({upper_ms} ms)"
            ));
        }
        self.bounds = Some((lower_ms, upper_ms));
        self
    }

    /// `f(left, right, out)` for every pair within the interval (Flink's `ProcessJoinFunction`);
    /// what it emits carries the later of the two timestamps.
    pub fn process<O, F>(&self, f: F) -> DataStream<O>
    where
        O: Data,
        F: Fn(&A, &B, &mut dyn Collector<O>) + Send + Sync + 'static,
    {
        let (lower, upper) = self.bounds.unwrap_or_else(|| {
            lock(&self.first.stream.shared)
                .errors
                .push("interval join: call between(lower_ms, upper_ms) before process".into());
            (0, 0)
        });
        let join = IntervalJoin {
            lower,
            upper,
            f: Arc::new(f),
            _types: PhantomData,
        };
        let connected = KeyedConnectedStreams {
            first: self.first.clone(),
            second: self.second.clone(),
        };
        connected.process_named(
            "interval-join",
            "IntervalJoin",
            Arc::new(CoProcess(Arc::new(join), PhantomData)),
        )
    }
}

/// Two streams to co-group (`JOIN = false`, Flink's `CoGroupedStreams`) or join (`JOIN = true`,
/// [`JoinedStreams`]) by key and window; the two differ in their window function only.
pub struct CoGroupedStreams<A, B, const JOIN: bool = false> {
    first: DataStream<A>,
    second: DataStream<B>,
}

impl<A, B, const JOIN: bool> std::fmt::Debug for CoGroupedStreams<A, B, JOIN> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoGroupedStreams").finish_non_exhaustive()
    }
}

impl<A: Data, B: Data, const JOIN: bool> CoGroupedStreams<A, B, JOIN> {
    /// The first input's key (Flink's `where`).
    pub fn where_key<K, F1>(&self, k1: F1) -> CoGroupWhere<A, B, K, JOIN>
    where
        K: Data + Hash + Eq + Ord,
        F1: Fn(&A) -> K + Send + Sync + 'static,
    {
        CoGroupWhere {
            first: self.first.clone(),
            second: self.second.clone(),
            k1: Arc::new(k1),
        }
    }
}

/// Two streams to join by key and window (Flink's `JoinedStreams`).
pub type JoinedStreams<A, B> = CoGroupedStreams<A, B, true>;

/// A window join or co-group with its first key.
pub struct CoGroupWhere<A, B, K, const JOIN: bool> {
    first: DataStream<A>,
    second: DataStream<B>,
    k1: KeyFn<A, K>,
}

impl<A, B, K, const JOIN: bool> std::fmt::Debug for CoGroupWhere<A, B, K, JOIN> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoGroupWhere").finish_non_exhaustive()
    }
}

impl<A: Data, B: Data, K: Data + Hash + Eq + Ord, const JOIN: bool> CoGroupWhere<A, B, K, JOIN> {
    /// The second input's key (Flink's `equalTo`).
    pub fn equal_to<F2>(&self, k2: F2) -> CoGroupKeyed<A, B, K, JOIN>
    where
        F2: Fn(&B) -> K + Send + Sync + 'static,
    {
        CoGroupKeyed {
            first: self.first.clone(),
            second: self.second.clone(),
            k1: self.k1.clone(),
            k2: Arc::new(k2),
        }
    }
}

/// A window join or co-group with both keys.
pub struct CoGroupKeyed<A, B, K, const JOIN: bool> {
    first: DataStream<A>,
    second: DataStream<B>,
    k1: KeyFn<A, K>,
    k2: KeyFn<B, K>,
}

impl<A, B, K, const JOIN: bool> std::fmt::Debug for CoGroupKeyed<A, B, K, JOIN> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoGroupKeyed").finish_non_exhaustive()
    }
}

impl<A: Data, B: Data, K: Data + Hash + Eq + Ord, const JOIN: bool> CoGroupKeyed<A, B, K, JOIN> {
    /// The windows both inputs' elements are grouped in.
    pub fn window(&self, assigner: WindowAssigner) -> CoGroupWindowed<A, B, K, JOIN> {
        let (k1, k2) = (self.k1.clone(), self.k2.clone());
        let tagged = self
            .first
            .map(TaggedUnion::<A, B>::One)
            .union(&[&self.second.map(TaggedUnion::<A, B>::Two)])
            .key_by(move |t: &TaggedUnion<A, B>| match t {
                TaggedUnion::One(a) => k1(a),
                TaggedUnion::Two(b) => k2(b),
            });
        CoGroupWindowed {
            windowed: tagged.window(assigner),
        }
    }
}

/// A window join or co-group ready for its function.
pub struct CoGroupWindowed<A, B, K, const JOIN: bool> {
    windowed: super::WindowedStream<TaggedUnion<A, B>, K>,
}

impl<A, B, K, const JOIN: bool> std::fmt::Debug for CoGroupWindowed<A, B, K, JOIN> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoGroupWindowed").finish_non_exhaustive()
    }
}

impl<A: Data, B: Data, K: Data + Hash + Eq + Ord> CoGroupWindowed<A, B, K, false> {
    /// `f(key, window, firsts, seconds, out)` once per key and window in which either input has
    /// elements (Flink's `CoGroupFunction`, with the key and window).
    pub fn apply<O, F>(&self, f: F) -> DataStream<O>
    where
        O: Data,
        F: Fn(&K, &WindowContext, &[A], &[B], &mut dyn Collector<O>) + Send + Sync + 'static,
    {
        self.windowed.process(CoGroupWindow(Arc::new(f), PhantomData))
    }
}

impl<A: Data, B: Data, K: Data + Hash + Eq + Ord> CoGroupWindowed<A, B, K, true> {
    /// `f(first, second)` for every pair of the two inputs' elements of one key and window
    /// (Flink's `JoinFunction`); a window with elements of one input only emits nothing.
    pub fn apply<O, F>(&self, f: F) -> DataStream<O>
    where
        O: Data,
        F: Fn(&A, &B) -> O + Send + Sync + 'static,
    {
        let pairs =
            move |_: &K, _: &WindowContext, firsts: &[A], seconds: &[B], out: &mut dyn Collector<O>| {
                for a in firsts {
                    for b in seconds {
                        out.collect(f(a, b));
                    }
                }
            };
        self.windowed.process(CoGroupWindow(Arc::new(pairs), PhantomData))
    }
}

/// A co-group function as the window function over the tagged elements (shared by the
/// subtasks' copies: a closure need not be `Clone`).
struct CoGroupWindow<F, A, B>(Arc<F>, PhantomData<fn(A, B)>);

impl<F, A, B> Clone for CoGroupWindow<F, A, B> {
    fn clone(&self) -> Self {
        CoGroupWindow(Arc::clone(&self.0), PhantomData)
    }
}

impl<K, A, B, O, F> ProcessWindowFunction<K, TaggedUnion<A, B>, O> for CoGroupWindow<F, A, B>
where
    A: Data,
    B: Data,
    F: Fn(&K, &WindowContext, &[A], &[B], &mut dyn Collector<O>) + Send + Sync + 'static,
{
    fn process(
        &self,
        key: &K,
        ctx: &WindowContext,
        elements: &[TaggedUnion<A, B>],
        out: &mut dyn Collector<O>,
    ) {
        let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
        for e in elements {
            match e {
                TaggedUnion::One(a) => firsts.push(a.clone()),
                TaggedUnion::Two(b) => seconds.push(b.clone()),
            }
        }
        (self.0)(key, ctx, &firsts, &seconds, out)
    }
}

impl<T: Data> DataStream<T> {
    /// This stream and `broadcast`, every element of which goes to every subtask (Flink's
    /// `connect(stream.broadcast(descriptor))`): `.process(BroadcastProcessFunction)`.
    pub fn connect_broadcast<B: Data>(&self, broadcast: &DataStream<B>) -> BroadcastConnectedStream<T, B> {
        BroadcastConnectedStream {
            first: self.clone(),
            broadcast: broadcast.broadcast(),
        }
    }
}

impl<T: Data, K: Data + Hash + Eq + Ord> KeyedStream<T, K> {
    /// This keyed stream and `broadcast`, every element of which goes to every subtask:
    /// `.process(KeyedBroadcastProcessFunction)`.
    pub fn connect_broadcast<B: Data>(
        &self,
        broadcast: &DataStream<B>,
    ) -> KeyedBroadcastConnectedStream<T, B, K> {
        KeyedBroadcastConnectedStream {
            keyed: self.clone(),
            broadcast: broadcast.broadcast(),
        }
    }
}

/// A stream connected with a broadcast stream (Flink's `BroadcastConnectedStream`).
pub struct BroadcastConnectedStream<A, B> {
    first: DataStream<A>,
    broadcast: DataStream<B>,
}

impl<A, B> std::fmt::Debug for BroadcastConnectedStream<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BroadcastConnectedStream").finish_non_exhaustive()
    }
}

impl<A: Data, B: Data> BroadcastConnectedStream<A, B> {
    /// A [`BroadcastProcessFunction`](crate::BroadcastProcessFunction): the broadcast state,
    /// checkpointed by every subtask and restored into any parallelism.
    ///
    /// Each subtask runs its own copy of `f`, opened before its first element and closed when it
    /// ends.
    pub fn process<O: Data, F: crate::BroadcastProcessFunction<A, B, O> + Clone>(
        &self,
        f: F,
    ) -> DataStream<O> {
        let prototype = Arc::new(crate::operators::Prototype::new(f));
        let batch = self.first.mode() == super::RuntimeMode::Batch;
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let restored = ctx.restore.as_ref().and_then(|r| r.broadcast.as_deref());
            let broadcast = restore_broadcast(restored)?;
            let down = downcast::<O>(down)?;
            let f = crate::operators::Opened::open(prototype.copy(), ctx, F::open, F::close)?;
            Ok(erase::<TaggedUnion<A, B>>(Box::new(BroadcastOp {
                f,
                broadcast,
                time: ctx.time.clone(),
                watermark: crate::time::MIN_WATERMARK,
                side: ctx.take_side_outputs(),
                failure: None,
                down,
                held: batch.then(Vec::new),
                _in: PhantomData,
            })))
        });
        two_input_node::<A, B, O>(
            &self.first,
            self.first.plain_input(),
            self.broadcast.plain_input(),
            "broadcast-process",
            "BroadcastProcess",
            factory,
        )
    }
}

/// A keyed stream connected with a broadcast stream.
pub struct KeyedBroadcastConnectedStream<A, B, K> {
    keyed: KeyedStream<A, K>,
    broadcast: DataStream<B>,
}

impl<A, B, K> std::fmt::Debug for KeyedBroadcastConnectedStream<A, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedBroadcastConnectedStream")
            .finish_non_exhaustive()
    }
}

impl<A: Data, B: Data, K: Data + Hash + Eq + Ord> KeyedBroadcastConnectedStream<A, B, K> {
    /// A [`KeyedBroadcastProcessFunction`](crate::KeyedBroadcastProcessFunction): keyed state
    /// and timers for the keyed input, the broadcast state for both; in BATCH every broadcast
    /// element is processed before the keyed input (which is sorted by key, as any BATCH keyed
    /// operator's).
    ///
    /// Each subtask runs its own copy of `f`, opened before its first element (after its state
    /// is restored) and closed when it ends.
    pub fn process<O, F>(&self, f: F) -> DataStream<O>
    where
        O: Data,
        F: crate::KeyedBroadcastProcessFunction<K, A, B, O> + Clone,
    {
        lock(&self.keyed.stream.shared).timed = true;
        let batch = self.keyed.stream.mode() == super::RuntimeMode::Batch;
        let (prototype, key) = (
            Arc::new(crate::operators::Prototype::new(f)),
            self.keyed.key.clone(),
        );
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let restored = ctx.restore.as_ref().and_then(|r| r.broadcast.as_deref());
            let broadcast = Arc::new(std::sync::Mutex::new(restore_broadcast(restored)?));
            let (state, timers) = ctx.keyed_with_timers::<K, F::State>()?;
            let down = downcast::<O>(down)?;
            let side = KeyedSide {
                f: Arc::new(prototype.copy()),
                broadcast: broadcast.clone(),
                _b: PhantomData,
            };
            let side = crate::operators::open_shared(
                side,
                ctx,
                <KeyedSide<F, B, F::Key, F::Value> as crate::operators::KeyedProcessFunction<K, A, O>>::open,
                <KeyedSide<F, B, F::Key, F::Value> as crate::operators::KeyedProcessFunction<K, A, O>>::close,
            )?;
            let op = KeyedProcessOperator::opened(key.clone(), side, state, timers, ctx.task_time()?, down)
                .with_metrics(ctx.metrics.clone())
                .with_side_outputs(ctx.take_side_outputs());
            let inner = if batch {
                KeyedInner::Batch(SortedKeyedProcess::new(op))
            } else {
                KeyedInner::Streaming(op)
            };
            Ok(erase::<TaggedUnion<A, B>>(Box::new(KeyedBroadcastOp {
                inner,
                broadcast,
            })))
        });
        two_input_node::<A, B, O>(
            &self.keyed.stream,
            self.keyed.hash_input(self.keyed.stream.node),
            self.broadcast.plain_input(),
            "broadcast-process",
            "KeyedBroadcastProcess",
            factory,
        )
    }
}
