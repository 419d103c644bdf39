//! [`WindowedStream`]: a keyed stream cut into windows (Flink's `WindowedStream`), from
//! [`KeyedStream::window`] or [`DataStream::window_all`].

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::{DataStream, KeyedStream, Par, lock};
use crate::data::Data;
use crate::operators::window::{
    AggregateFn, AggregateFunction, ContentsFn, Direct, EventTimeTrigger, Evictor, NeverTrigger,
    ProcessWindowFunction, ProcessingTimeTrigger, ReduceFn, ThenProcess, Trigger, WindowAssigner, WindowFn,
    WindowOperator,
};
use crate::operators::{OutputTag, Prototype};

/// A keyed stream whose elements go into windows; a window function makes it a stream again.
///
/// ```
/// use std::time::Duration;
///
/// use floe_datastream::{StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy};
///
/// let env = StreamExecutionEnvironment::new();
/// // (user, clicks, event time in ms)
/// let clicks = env
///     .from_collection(vec![("ada".to_string(), 1u64, 1_000i64), ("ada".to_string(), 1, 61_000)])
///     .assign_timestamps_and_watermarks(
///         WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|c: &(String, u64, i64), _| c.2),
///     );
/// // Clicks per user and minute of event time, emitted when the watermark passes the minute.
/// clicks
///     .key_by(|c: &(String, u64, i64)| c.0.clone())
///     .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
///     .reduce(|a, b| (a.0, a.1 + b.1, a.2.max(b.2)))
///     .print();
/// env.build()?;
/// # Ok::<(), floe_datastream::Error>(())
/// ```
pub struct WindowedStream<T, K> {
    keyed: KeyedStream<T, K>,
    assigner: WindowAssigner,
    trigger: Option<Trigger>,
    evictor: Option<Evictor>,
    allowed_lateness: i64,
    /// `window_all`: one window operator, parallelism 1.
    all: bool,
    /// Flink's `sideOutputLateData`.
    late: Option<OutputTag<T>>,
}

impl<T, K> std::fmt::Debug for WindowedStream<T, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowedStream")
            .field("assigner", &self.assigner)
            .field("trigger", &self.trigger)
            .field("evictor", &self.evictor)
            .field("allowed_lateness", &self.allowed_lateness)
            .finish()
    }
}

impl<T: Data, K: Data + Hash + Eq + Ord> KeyedStream<T, K> {
    /// Windows per key (Flink's `window`): e.g. `TumblingEventTimeWindows::of(Duration::from_secs(10))`.
    pub fn window(&self, assigner: WindowAssigner) -> WindowedStream<T, K> {
        WindowedStream {
            keyed: self.clone(),
            assigner,
            trigger: None,
            evictor: None,
            allowed_lateness: 0,
            all: false,
            late: None,
        }
    }
}

impl<T: Data> DataStream<T> {
    /// Windows over the whole stream (Flink's `windowAll`): one subtask evaluates them.
    pub fn window_all(&self, assigner: WindowAssigner) -> WindowedStream<T, u32> {
        let mut w = self.key_by(|_: &T| 0u32).window(assigner);
        w.all = true;
        w
    }
}

impl<T: Data, K: Data + Hash + Eq + Ord> WindowedStream<T, K> {
    /// When windows fire, in place of the assigner's default trigger.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = Some(trigger);
        self
    }

    /// Drops elements before the window function sees them; the windows then keep every element.
    pub fn evictor(mut self, evictor: Evictor) -> Self {
        self.evictor = Some(evictor);
        self
    }

    /// Keeps a window's state this long past its end: a late element fires it again (event time).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.allowed_lateness = lateness.as_millis().min(i64::MAX as u128) as i64;
        self
    }

    /// Elements too late for every window they belong to go to the side output `tag` (Flink's
    /// `sideOutputLateData`; `get_side_output(&tag)` on the windowed result reads them) instead
    /// of being dropped and counted in `numLateRecordsDropped`.
    pub fn side_output_late_data(mut self, tag: &OutputTag<T>) -> Self {
        self.late = Some(tag.clone());
        self
    }

    /// Reduces each window's elements incrementally.
    pub fn reduce<F: Fn(T, T) -> T + Send + Sync + 'static>(&self, f: F) -> DataStream<T> {
        match self.evictor {
            None => {
                let f = Arc::new(f);
                self.apply("Window(Reduce)", move || ReduceFn(f.clone(), Direct))
            }
            Some(_) => {
                let f = Arc::new(f);
                self.apply_contents("Window(Reduce)", move || ReduceAll(f.clone()))
            }
        }
    }

    /// Aggregates each window incrementally with an accumulator.
    pub fn aggregate<A: AggregateFunction<T>>(&self, f: A) -> DataStream<A::Out> {
        let f = Arc::new(f);
        match self.evictor {
            None => self.apply("Window(Aggregate)", move || AggregateFn(f.clone(), Direct)),
            Some(_) => self.apply_contents("Window(Aggregate)", move || AggregateAll(f.clone(), PhantomData)),
        }
    }

    /// Evaluates `f` over all of a window's elements. Each subtask runs its own copy of `f`,
    /// opened before its first element and closed when it ends.
    pub fn process<O: Data, P: ProcessWindowFunction<K, T, O> + Clone>(&self, f: P) -> DataStream<O> {
        let prototype = Arc::new(Prototype::new(f));
        self.apply_contents("Window(Process)", move || prototype.copy())
    }

    /// Reduces incrementally, then hands the one result to `f` with the window (Flink's
    /// `reduce(reduceFunction, processWindowFunction)`).
    pub fn reduce_process<O, F, P>(&self, reduce: F, f: P) -> DataStream<O>
    where
        O: Data,
        F: Fn(T, T) -> T + Send + Sync + 'static,
        P: ProcessWindowFunction<K, T, O> + Clone,
    {
        let (reduce, prototype) = (Arc::new(reduce), Arc::new(Prototype::new(f)));
        match self.evictor {
            None => self.apply("Window(Reduce, Process)", move || {
                ReduceFn(
                    reduce.clone(),
                    ThenProcess(Arc::new(prototype.copy()), PhantomData),
                )
            }),
            Some(_) => self.apply_contents("Window(Reduce, Process)", move || {
                Then(ReduceAll(reduce.clone()), Arc::new(prototype.copy()), PhantomData)
            }),
        }
    }

    /// Aggregates incrementally, then hands the one result to `f` with the window.
    pub fn aggregate_process<A, O, P>(&self, aggregate: A, f: P) -> DataStream<O>
    where
        A: AggregateFunction<T>,
        O: Data,
        P: ProcessWindowFunction<K, A::Out, O> + Clone,
    {
        let (aggregate, prototype) = (Arc::new(aggregate), Arc::new(Prototype::new(f)));
        match self.evictor {
            None => self.apply("Window(Aggregate, Process)", move || {
                AggregateFn(
                    aggregate.clone(),
                    ThenProcess(Arc::new(prototype.copy()), PhantomData),
                )
            }),
            Some(_) => self.apply_contents("Window(Aggregate, Process)", move || {
                Then(
                    AggregateAll(aggregate.clone(), PhantomData),
                    Arc::new(prototype.copy()),
                    PhantomData,
                )
            }),
        }
    }

    /// A window operator over each window's kept elements, with the function each subtask's
    /// `make` gives it.
    fn apply_contents<O: Data, P: ProcessWindowFunction<K, T, O>>(
        &self,
        name: &str,
        make: impl Fn() -> P + Send + Sync + 'static,
    ) -> DataStream<O> {
        let evictor = self.evictor;
        self.apply(name, move || ContentsFn::new(Arc::new(make()), evictor))
    }

    fn default_trigger(&self) -> Trigger {
        match self.assigner {
            WindowAssigner::Global => NeverTrigger::create(),
            a if a.is_event_time() => EventTimeTrigger::create(),
            _ => ProcessingTimeTrigger::create(),
        }
    }

    /// The window operator, built for each subtask around the window function `make` gives (its
    /// own copy of a user's process function, opened there).
    fn apply<O: Data, W: WindowFn<K, T, O>>(
        &self,
        name: &str,
        make: impl Fn() -> W + Send + Sync + 'static,
    ) -> DataStream<O> {
        let (assigner, trigger, lateness) = (
            self.assigner,
            self.trigger.clone().unwrap_or_else(|| self.default_trigger()),
            self.allowed_lateness,
        );
        if let Err(e) = assigner.check() {
            lock(&self.keyed.stream.shared).errors.push(e.to_string());
        }
        if assigner.is_merging() && !trigger.can_merge() {
            lock(&self.keyed.stream.shared).errors.push(
                "a trigger of session windows must merge their states: implement \
                 WindowTrigger::can_merge and on_merge"
                    .into(),
            );
        }
        let late = self.late.clone();
        let factory = self.keyed.keyed_process_factory(
            move |ctx: &crate::operators::OpContext| {
                let window = WindowOperator {
                    assigner,
                    trigger: trigger.clone(),
                    allowed_lateness: lateness,
                    f: make(),
                    late: late.clone(),
                    _types: PhantomData,
                };
                crate::operators::open_shared(
                    window,
                    ctx,
                    <WindowOperator<K, T, O, W> as crate::operators::KeyedProcessFunction<K, T, O>>::open,
                    <WindowOperator<K, T, O, W> as crate::operators::KeyedProcessFunction<K, T, O>>::close,
                )
            },
            true,
        );
        let input = self.keyed.hash_input(self.keyed.stream.node);
        let parallelism = if self.all { Par::Fixed(1) } else { Par::Default };
        self.keyed
            .stream
            .add_operator("window", name, parallelism, input, factory)
    }
}

/// `reduce` over kept elements (with an evictor).
struct ReduceAll<F>(Arc<F>);

impl<K, T: Data, F: Fn(T, T) -> T + Send + Sync + 'static> ProcessWindowFunction<K, T, T> for ReduceAll<F> {
    fn process(&self, _: &K, _: &crate::WindowContext, elements: &[T], out: &mut dyn crate::Collector<T>) {
        if let Some(r) = elements.iter().cloned().reduce(|a, b| (self.0)(a, b)) {
            out.collect(r)
        }
    }
}

/// `aggregate` over kept elements (with an evictor).
struct AggregateAll<A, T>(Arc<A>, PhantomData<fn(T)>);

impl<K, T: Data, A: AggregateFunction<T>> ProcessWindowFunction<K, T, A::Out> for AggregateAll<A, T> {
    fn process(
        &self,
        _: &K,
        _: &crate::WindowContext,
        elements: &[T],
        out: &mut dyn crate::Collector<A::Out>,
    ) {
        let mut acc = self.0.create_accumulator();
        for e in elements {
            self.0.add(e.clone(), &mut acc);
        }
        out.collect(self.0.get_result(&acc))
    }
}

/// An evicting window's function, then a process function over its one result.
struct Then<F, P, R>(F, Arc<P>, PhantomData<fn(R)>);

impl<K, T, R, O, F, P> ProcessWindowFunction<K, T, O> for Then<F, P, R>
where
    T: Data,
    R: Data,
    O: Data,
    F: ProcessWindowFunction<K, T, R>,
    P: ProcessWindowFunction<K, R, O>,
{
    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        crate::operators::window::open_in(&mut self.1, |f| f.open(ctx))
    }

    fn close(&mut self) -> crate::FunctionResult {
        crate::operators::window::open_in(&mut self.1, |f| f.close())
    }

    fn process(
        &self,
        key: &K,
        ctx: &crate::WindowContext,
        elements: &[T],
        out: &mut dyn crate::Collector<O>,
    ) {
        let mut results = Vec::new();
        self.0.process(key, ctx, elements, &mut results);
        self.1.process(key, ctx, &results, out)
    }
}
