//! [`KeyedStream`]: a stream partitioned by key, and its keyed operators (reduce, sum, process
//! functions with and without timers, windows).

use std::hash::Hash;
use std::marker::PhantomData;
use std::ops::Add;
use std::sync::Arc;

use floe_scheduler::Partitioner;

use super::{DataStream, NodeInput, Par, RuntimeMode, lock};
use crate::data::{Data, key_hash_only};
use crate::operators::{
    AnyOp, Collector, Combiner, KeyFn, KeyRefFn, KeyedProcessFunction, KeyedProcessOperator, OpContext,
    OpFactory, SortedKeyedProcess, SortedProcess, SortedReduce, StreamingProcess, StreamingReduce,
    StreamingSumGroups, SumGroup, SumGrouper, downcast, erase,
};
use crate::task::KeyHasher;
use crate::types::KeyMap;

/// A stream partitioned by key (Flink's `KeyedStream`); its aggregations keep per-key state.
///
/// Every record of a key goes to the same subtask, and a keyed operator sees the state of the
/// record's key only:
///
/// ```
/// use floe_datastream::StreamExecutionEnvironment;
///
/// let env = StreamExecutionEnvironment::new();
/// let bids = env.from_collection(vec![("ada".to_string(), 30u64), ("bob".to_string(), 5), ("ada".to_string(), 12)]);
/// // Each user's highest bid so far, one update per bid.
/// bids.key_by(|b: &(String, u64)| b.0.clone())
///     .reduce(|a, b| if a.1 >= b.1 { a } else { b })
///     .uid("highest-bid")
///     .print();
/// env.build()?;
/// # Ok::<(), floe_datastream::Error>(())
/// ```
pub struct KeyedStream<T, K> {
    pub(crate) stream: DataStream<T>,
    pub(crate) key: KeyFn<T, K>,
    /// Set by [`DataStream::key_by_ref`]: routing and keyed state then look keys up by reference and
    /// copy a key only when it is new.
    pub(crate) key_ref: Option<KeyRefFn<T, K>>,
}

impl<T, K> Clone for KeyedStream<T, K> {
    fn clone(&self) -> Self {
        KeyedStream {
            stream: self.stream.clone(),
            key: self.key.clone(),
            key_ref: self.key_ref.clone(),
        }
    }
}

impl<T, K> std::fmt::Debug for KeyedStream<T, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedStream")
            .field("node", &self.stream.node)
            .finish()
    }
}

impl<T: Data, K: Data + Hash + Eq + Ord> KeyedStream<T, K> {
    pub(crate) fn hash_input(&self, node: usize) -> NodeInput {
        self.hash_input_via(node, |r: &T| r)
    }

    /// A hash edge from `node`, whose records (of type `U`) each carry a `T` the key is taken from.
    fn hash_input_via<U, P>(&self, node: usize, record: P) -> NodeInput
    where
        U: Data,
        P: Fn(&U) -> &T + Send + Sync + 'static,
    {
        let hasher: KeyHasher<U> = match self.key_ref.clone() {
            Some(key) => Arc::new(move |u: &U| key_hash_only(key(record(u)))),
            None => {
                let key = self.key.clone();
                Arc::new(move |u: &U| key_hash_only(&key(record(u))))
            }
        };
        NodeInput {
            node,
            partitioner: Some(Partitioner::Hash),
            key: Some(Arc::new(hasher)),
            side: 0,
            tag: None,
        }
    }

    /// Keyed reduce with an associative `f`. STREAMING: the updated value for every record.
    /// BATCH: a combiner before the exchange, then one result per key.
    pub fn reduce<F: Fn(T, T) -> T + Send + Sync + 'static>(&self, f: F) -> DataStream<T> {
        self.reduce_named("Reduce", f)
    }

    fn reduce_named<F: Fn(T, T) -> T + Send + Sync + 'static>(&self, name: &str, f: F) -> DataStream<T> {
        let f = Arc::new(f);
        let key = self.key.clone();
        match self.stream.mode() {
            RuntimeMode::Streaming => {
                let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
                    Ok(erase::<T>(Box::new(StreamingReduce {
                        key: key.clone(),
                        f: f.clone(),
                        state: ctx.keyed()?,
                        down: downcast::<T>(down)?,
                    })))
                });
                let input = self.hash_input(self.stream.node);
                self.stream
                    .add_operator("reduce", name, Par::Default, input, factory)
            }
            RuntimeMode::Batch => {
                let (ck, cf, ckr) = (key.clone(), f.clone(), self.key_ref.clone());
                let combine: OpFactory = Arc::new(move |_: &OpContext, down: AnyOp| {
                    Ok(erase::<T>(Box::new(Combiner {
                        key: ck.clone(),
                        key_ref: ckr.clone(),
                        f: cf.clone(),
                        state: KeyMap::default(),
                        down: downcast::<T>(down)?,
                    })))
                });
                let input = NodeInput::from(self.stream.node, None);
                let combined: DataStream<T> =
                    self.stream
                        .add_operator("combine", "Combine", Par::SameAsInput, input, combine);
                let factory: OpFactory = Arc::new(move |_: &OpContext, down: AnyOp| {
                    Ok(erase::<T>(Box::new(SortedReduce {
                        key: key.clone(),
                        f: f.clone(),
                        records: Vec::new(),
                        down: downcast::<T>(down)?,
                    })))
                });
                let input = self.hash_input(combined.node);
                self.stream
                    .add_operator("reduce", name, Par::Default, input, factory)
            }
        }
    }

    /// Per-key function with state `S` (default-initialised per key):
    /// `f(key, value, &mut state, out)`. BATCH processes the keys one at a time, in key order.
    /// `S` is any [`Data`]: a number, a tuple, or the [`ValueState`](crate::ValueState),
    /// [`ListState`](crate::ListState) and [`MapState`](crate::MapState) facades; in STREAMING it is
    /// checkpointed with the job (and kept in RocksDB with `state.backend.type: rocksdb`).
    pub fn process<S, O, F>(&self, f: F) -> DataStream<O>
    where
        S: Data + Default,
        O: Data,
        F: Fn(&K, T, &mut S, &mut dyn Collector<O>) + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        let key = self.key.clone();
        let batch = self.stream.mode() == RuntimeMode::Batch;
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let down = downcast::<O>(down)?;
            Ok(if batch {
                erase::<T>(Box::new(SortedProcess::<T, K, S, O, F> {
                    key: key.clone(),
                    f: f.clone(),
                    records: Vec::new(),
                    down,
                    _state: PhantomData,
                }))
            } else {
                erase::<T>(Box::new(StreamingProcess::<T, K, S, O, F> {
                    key: key.clone(),
                    f: f.clone(),
                    state: ctx.keyed()?,
                    down,
                    _in: PhantomData,
                }))
            })
        });
        let input = self.hash_input(self.stream.node);
        self.stream
            .add_operator("process", "KeyedProcess", Par::Default, input, factory)
    }

    /// A [`KeyedProcessFunction`] over this keyed stream (Flink's `process(KeyedProcessFunction)`):
    /// per-key state and event-time and processing-time timers, checkpointed in either state
    /// backend. BATCH sorts the input by key and time and runs one key at a time, its event time
    /// ending after its last element (`SortedKeyedProcess`).
    ///
    /// Each subtask runs its own copy of `f`, opened before its first element (after its state
    /// is restored) and closed when it ends.
    pub fn process_function<O, F>(&self, f: F) -> DataStream<O>
    where
        O: Data,
        F: KeyedProcessFunction<K, T, O> + Clone,
    {
        let prototype = Arc::new(crate::operators::Prototype::new(f));
        let factory = self.keyed_process_factory(
            move |ctx: &OpContext| crate::operators::open_shared(prototype.copy(), ctx, F::open, F::close),
            false,
        );
        let input = self.hash_input(self.stream.node);
        self.stream
            .add_operator("process", "KeyedProcess", Par::Default, input, factory)
    }

    /// The operator of a keyed process function: the timer-aware keyed operator in STREAMING, its
    /// sorted one-key-at-a-time form in BATCH. Marks the job timed.
    /// `function`: the function each subtask runs (a user's function copied and opened for it).
    /// `window`: the function is a window operator, whose processing time ends with the input
    /// (see `KeyedProcessOperator::ending_processing_time`).
    pub(crate) fn keyed_process_factory<O, F>(
        &self,
        function: impl Fn(&OpContext) -> crate::Result<crate::operators::Opened<Arc<F>>> + Send + Sync + 'static,
        window: bool,
    ) -> OpFactory
    where
        O: Data,
        F: KeyedProcessFunction<K, T, O>,
    {
        lock(&self.stream.shared).timed = true;
        let batch = self.stream.mode() == RuntimeMode::Batch;
        let key = self.key.clone();
        Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let (state, timers) = ctx.keyed_with_timers::<K, F::State>()?;
            let down = downcast::<O>(down)?;
            let op = KeyedProcessOperator::<T, K, O, F>::opened(
                key.clone(),
                function(ctx)?,
                state,
                timers,
                ctx.task_time()?,
                down,
            )
            .with_metrics(ctx.metrics.clone())
            .with_side_outputs(ctx.take_side_outputs());
            let op = if window { op.ending_processing_time() } else { op };
            Ok(if batch {
                erase::<T>(Box::new(SortedKeyedProcess::new(op)))
            } else {
                erase::<T>(Box::new(op))
            })
        })
    }

    /// Records per key, as `(key, count)`.
    pub fn count(&self) -> DataStream<(K, u64)> {
        let key = self.key.clone();
        self.stream
            .map(move |r: T| (key(&r), 1u64))
            .key_by(|p: &(K, u64)| p.0.clone())
            .reduce_named("Count", |a, b| (a.0, a.1 + b.1))
    }
}

impl<A: Data, N: Data + Add<Output = N>, K: Data + Hash + Eq + Ord> KeyedStream<(A, N), K> {
    /// Sums the second field per key, keeping the first (Flink's `sum(1)` on a `Tuple2`).
    /// STREAMING: the updated sum for every record, computed as local-global aggregation (records of
    /// one key are grouped per input batch before the exchange, see `SumGrouper`). BATCH: a
    /// combiner before the exchange, then one result per key.
    pub fn sum(&self) -> DataStream<(A, N)> {
        if self.stream.mode() == RuntimeMode::Batch {
            return self.reduce_named("Sum", |a, b| (a.0, a.1 + b.1));
        }
        let (key, key_ref) = (self.key.clone(), self.key_ref.clone());
        let (gk, gkr) = (key.clone(), key_ref.clone());
        let group: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            Ok(erase::<(A, N)>(Box::new(SumGrouper::new(
                gk.clone(),
                gkr.clone(),
                downcast::<SumGroup<A, N>>(down)?,
                ctx.metrics.clone(),
                ctx.time.clone(),
            ))))
        });
        let input = NodeInput::from(self.stream.node, None);
        let grouped: DataStream<SumGroup<A, N>> =
            self.stream
                .add_operator("localsum", "LocalSum", Par::SameAsInput, input, group);
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            Ok(erase::<SumGroup<A, N>>(Box::new(StreamingSumGroups {
                key: key.clone(),
                key_ref: key_ref.clone(),
                state: ctx.keyed()?,
                down: downcast::<(A, N)>(down)?,
                grouped: 0,
                metrics: ctx.metrics.clone(),
            })))
        });
        let input = self.hash_input_via(grouped.node, |g: &SumGroup<A, N>| &g.0);
        self.stream
            .add_operator("reduce", "Sum", Par::Default, input, factory)
    }
}
