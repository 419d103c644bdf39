//! [`WindowedStream`]: a keyed stream cut into windows (Flink's `WindowedStream`), from
//! [`KeyedStream::window`] or [`DataStream::window_all`].

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::{DataStream, KeyedStream, Par, lock};
use crate::data::Data;
use crate::operators::OutputTag;
use crate::operators::window::{
    AggregateFn, AggregateFunction, ContentsFn, Direct, EventTimeTrigger, Evictor, NeverTrigger,
    ProcessWindowFunction, ProcessingTimeTrigger, ReduceFn, ThenProcess, Trigger, WindowAssigner, WindowFn,
    WindowOperator,
};

/// A keyed stream whose elements go into windows; a window function makes it a stream again.
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
            None => self.apply("Window(Reduce)", ReduceFn(Arc::new(f), Direct)),
            Some(_) => self.apply_contents("Window(Reduce)", ReduceAll(Arc::new(f))),
        }
    }

    /// Aggregates each window incrementally with an accumulator.
    pub fn aggregate<A: AggregateFunction<T>>(&self, f: A) -> DataStream<A::Out> {
        match self.evictor {
            None => self.apply("Window(Aggregate)", AggregateFn(Arc::new(f), Direct)),
            Some(_) => self.apply_contents("Window(Aggregate)", AggregateAll(Arc::new(f), PhantomData)),
        }
    }

    /// Evaluates `f` over all of a window's elements.
    pub fn process<O: Data, P: ProcessWindowFunction<K, T, O>>(&self, f: P) -> DataStream<O> {
        self.apply_contents("Window(Process)", f)
    }

    /// Reduces incrementally, then hands the one result to `f` with the window (Flink's
    /// `reduce(reduceFunction, processWindowFunction)`).
    pub fn reduce_process<O, F, P>(&self, reduce: F, f: P) -> DataStream<O>
    where
        O: Data,
        F: Fn(T, T) -> T + Send + Sync + 'static,
        P: ProcessWindowFunction<K, T, O>,
    {
        let f = Arc::new(f);
        match self.evictor {
            None => self.apply(
                "Window(Reduce, Process)",
                ReduceFn(Arc::new(reduce), ThenProcess(f, PhantomData)),
            ),
            Some(_) => self.apply_contents(
                "Window(Reduce, Process)",
                Then(ReduceAll(Arc::new(reduce)), f, PhantomData),
            ),
        }
    }

    /// Aggregates incrementally, then hands the one result to `f` with the window.
    pub fn aggregate_process<A, O, P>(&self, aggregate: A, f: P) -> DataStream<O>
    where
        A: AggregateFunction<T>,
        O: Data,
        P: ProcessWindowFunction<K, A::Out, O>,
    {
        let f = Arc::new(f);
        match self.evictor {
            None => self.apply(
                "Window(Aggregate, Process)",
                AggregateFn(Arc::new(aggregate), ThenProcess(f, PhantomData)),
            ),
            Some(_) => self.apply_contents(
                "Window(Aggregate, Process)",
                Then(AggregateAll(Arc::new(aggregate), PhantomData), f, PhantomData),
            ),
        }
    }

    fn apply_contents<O: Data, P: ProcessWindowFunction<K, T, O>>(&self, name: &str, f: P) -> DataStream<O> {
        let evictor = self.evictor;
        self.apply(name, ContentsFn::new(Arc::new(f), evictor))
    }

    fn default_trigger(&self) -> Trigger {
        match self.assigner {
            WindowAssigner::Global => NeverTrigger::create(),
            a if a.is_event_time() => EventTimeTrigger::create(),
            _ => ProcessingTimeTrigger::create(),
        }
    }

    fn apply<O: Data, W: WindowFn<K, T, O>>(&self, name: &str, f: W) -> DataStream<O> {
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
        let window = Arc::new(WindowOperator {
            assigner,
            trigger,
            allowed_lateness: lateness,
            f,
            late: self.late.clone(),
            _types: PhantomData,
        });
        let factory = self.keyed.keyed_process_factory(window, true);
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
