//! Window functions: incremental ones (`reduce`, [`AggregateFunction`]) keep one accumulator per
//! window; a [`ProcessWindowFunction`] gets every element (or, combined with an incremental one,
//! just its result); an [`Evictor`] removes elements before the function sees them.

use std::marker::PhantomData;
use std::sync::Arc;

use super::TimeWindow;
use crate::data::Data;
use crate::operators::Collector;

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
pub trait ProcessWindowFunction<K, IN, O>: Send + Sync + 'static {
    fn process(&self, key: &K, ctx: &WindowContext, elements: &[IN], out: &mut dyn Collector<O>);
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
pub(crate) trait WindowFn<K, T, O>: Send + Sync + 'static {
    type Acc: Data;
    fn add(&self, acc: Option<Self::Acc>, timestamp: i64, value: T) -> Self::Acc;
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn emit(&self, key: &K, ctx: &WindowContext, acc: &Self::Acc, out: &mut dyn Collector<O>);
}

/// What the result of an incremental function goes through: straight out, or a process function.
pub(crate) trait ResultStage<K, R, O>: Send + Sync + 'static {
    fn emit(&self, key: &K, ctx: &WindowContext, result: R, out: &mut dyn Collector<O>);
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
    fn add(&self, acc: Option<T>, _: i64, value: T) -> T {
        match acc {
            Some(acc) => (self.0)(acc, value),
            None => value,
        }
    }
    fn merge(&self, a: T, b: T) -> T {
        (self.0)(a, b)
    }
    fn emit(&self, key: &K, ctx: &WindowContext, acc: &T, out: &mut dyn Collector<O>) {
        self.1.emit(key, ctx, acc.clone(), out)
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
    fn add(&self, acc: Option<A::Acc>, _: i64, value: T) -> A::Acc {
        let mut acc = acc.unwrap_or_else(|| self.0.create_accumulator());
        self.0.add(value, &mut acc);
        acc
    }
    fn merge(&self, a: A::Acc, b: A::Acc) -> A::Acc {
        self.0.merge(a, b)
    }
    fn emit(&self, key: &K, ctx: &WindowContext, acc: &A::Acc, out: &mut dyn Collector<O>) {
        self.1.emit(key, ctx, self.0.get_result(acc), out)
    }
}

/// `process` (and any evictor): every element is kept, with its timestamp.
pub(crate) struct ContentsFn<P> {
    pub f: Arc<P>,
    pub evictor: Option<Evictor>,
}

impl<K, T, O, P> WindowFn<K, T, O> for ContentsFn<P>
where
    T: Data,
    P: ProcessWindowFunction<K, T, O>,
{
    type Acc = Vec<(i64, T)>;
    fn add(&self, acc: Option<Self::Acc>, timestamp: i64, value: T) -> Self::Acc {
        let mut acc = acc.unwrap_or_default();
        acc.push((timestamp, value));
        acc
    }
    fn merge(&self, mut a: Self::Acc, b: Self::Acc) -> Self::Acc {
        a.extend(b);
        a
    }
    fn emit(&self, key: &K, ctx: &WindowContext, acc: &Self::Acc, out: &mut dyn Collector<O>) {
        let mut kept = acc.clone();
        if let Some(e) = &self.evictor {
            e.evict(&mut kept);
        }
        let elements: Vec<T> = kept.into_iter().map(|(_, v)| v).collect();
        self.f.process(key, ctx, &elements, out)
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
