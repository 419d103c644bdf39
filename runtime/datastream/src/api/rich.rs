//! `map`, `flat_map` and `filter` with rich functions (Flink's `RichMapFunction`, ...): each
//! subtask copies the function, opens it with its [`crate::RuntimeContext`] before its first
//! record, and closes it when it ends (see `crate::operators::rich`).

use super::*;
use crate::FunctionResult;
use crate::operators::{
    Call, Opened, Prototype, RichFilterFunction, RichFlatMapFunction, RichMapFunction, RichOp,
    RuntimeContext, filter_call, flat_map_call, map_call,
};

impl<T: Data> DataStream<T> {
    /// [`DataStream::map`] with a [`RichMapFunction`]: `open` once per subtask, `map` per record
    /// (an error fails the task), `close` at the end.
    pub fn map_rich<O: Data, F: RichMapFunction<T, O>>(&self, f: F) -> DataStream<O> {
        self.rich(("map", "Map", "map"), f, F::open, F::close, map_call::<T, O, F>)
    }

    /// [`DataStream::flat_map`] with a [`RichFlatMapFunction`].
    pub fn flat_map_rich<O: Data, F: RichFlatMapFunction<T, O>>(&self, f: F) -> DataStream<O> {
        self.rich(
            ("flat-map", "FlatMap", "flat_map"),
            f,
            F::open,
            F::close,
            flat_map_call::<T, O, F>,
        )
    }

    /// [`DataStream::filter`] with a [`RichFilterFunction`].
    pub fn filter_rich<F: RichFilterFunction<T>>(&self, f: F) -> DataStream<T> {
        self.rich(
            ("filter", "Filter", "filter"),
            f,
            F::open,
            F::close,
            filter_call::<T, F>,
        )
    }

    /// The operator that copies `f` for each subtask, opens it, `call`s it per record and closes
    /// it; `(id, name, call name)` name the operator and the call in errors.
    fn rich<O: Data, F: Clone + Send + 'static>(
        &self,
        (id, name, call_name): (&'static str, &'static str, &'static str),
        f: F,
        open: fn(&mut F, &RuntimeContext) -> FunctionResult,
        close: fn(&mut F) -> FunctionResult,
        call: Call<F, T, O>,
    ) -> DataStream<O> {
        let prototype = Arc::new(Prototype::new(f));
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let down = downcast::<O>(down)?;
            let f = Opened::open(prototype.copy(), ctx, open, close)?;
            Ok(erase::<T>(Box::new(RichOp {
                f,
                call,
                call_name,
                failure: None,
                down,
            })))
        });
        self.add_operator(id, name, Par::Default, self.plain_input(), factory)
    }
}
