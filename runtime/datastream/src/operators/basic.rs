//! Stateless one-input links: map, filter, flat map.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{BoxOp, Chunk, Collector, Op};
use crate::checkpoint::ChainSnapshot;
use crate::data::Data;
use crate::error::Result;

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
