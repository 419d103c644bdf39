//! Rich functions (Flink's `RichFunction`): a function with `open` and `close` around its records,
//! and the [`RuntimeContext`] `open` is given (which subtask of how many, which attempt, the job's
//! configuration, and a [`MetricGroup`] for user metrics).
//!
//! Each subtask gets its own copy of the function (`Clone`, as Flink deserializes one per
//! subtask): `open` makes what the copy needs once (a client, a cache, metric handles) and keeps it
//! in the function's fields, and `close` releases it. `open` runs when the task starts, after its
//! state is restored and before its first record; `close` runs once when the task ends however it
//! ends (finished, stopped, cancelled or failed), after the operator's last record.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use super::{BoxOp, Chunk, Collector, Op, OpContext};
use crate::checkpoint::ChainSnapshot;
use crate::data::Data;
use crate::error::{Error, Result};
use crate::metrics::MetricGroup;

/// What a function may fail with: any error (`?` converts it).
pub type FunctionError = Box<dyn std::error::Error + Send + Sync>;

/// The result of a user function's call.
pub type FunctionResult<T = ()> = std::result::Result<T, FunctionError>;

/// What a function's `open` learns of where it runs (Flink's `RuntimeContext`).
#[derive(Debug, Clone)]
pub struct RuntimeContext {
    job_id: String,
    operator_name: String,
    subtask: u32,
    parallelism: u32,
    max_parallelism: u32,
    attempt: u64,
    configuration: BTreeMap<String, String>,
    metrics: MetricGroup,
}

impl RuntimeContext {
    pub(crate) fn of(ctx: &OpContext) -> Self {
        RuntimeContext {
            job_id: ctx.job_id.clone(),
            operator_name: ctx.operator_name.clone(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            max_parallelism: ctx.max_parallelism,
            attempt: ctx.attempt,
            configuration: ctx.configuration.clone(),
            metrics: MetricGroup::new(ctx.metrics.user.clone(), &ctx.operator_name),
        }
    }

    /// The job's id (the same in every attempt).
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The operator's name (`name(..)` in the job, else its kind: `Map`, `Process`).
    pub fn operator_name(&self) -> &str {
        &self.operator_name
    }

    /// Which subtask this is, from 0 (Flink's `getIndexOfThisSubtask`).
    pub fn index_of_this_subtask(&self) -> u32 {
        self.subtask
    }

    /// How many subtasks the operator runs as (Flink's `getNumberOfParallelSubtasks`).
    pub fn number_of_parallel_subtasks(&self) -> u32 {
        self.parallelism
    }

    /// The operator's maximum parallelism: its number of key groups.
    pub fn max_number_of_parallel_subtasks(&self) -> u32 {
        self.max_parallelism
    }

    /// How many times this subtask was deployed before (0 the first time; a restart adds 1).
    pub fn attempt_number(&self) -> u64 {
        self.attempt
    }

    /// The job's configuration (`spec.configuration`, `-D` keys): Flink's global job parameters.
    pub fn configuration(&self) -> &BTreeMap<String, String> {
        &self.configuration
    }

    /// One key of the job's configuration.
    pub fn parameter(&self, key: &str) -> Option<&str> {
        self.configuration.get(key).map(String::as_str)
    }

    /// Where the function registers its metrics: they appear in the TaskManager's `/metrics`
    /// under the operator's scope (see [`crate::metrics`]).
    pub fn metric_group(&self) -> &MetricGroup {
        &self.metrics
    }
}

/// `map` with a lifecycle (Flink's `RichMapFunction`).
pub trait RichMapFunction<I, O>: Clone + Send + 'static {
    /// Once per subtask, before its first record.
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let _ = ctx;
        Ok(())
    }
    /// One output per input; an error fails the task (its restart strategy applies).
    fn map(&mut self, value: I) -> FunctionResult<O>;
    /// Once per subtask, when it ends.
    fn close(&mut self) -> FunctionResult {
        Ok(())
    }
}

/// `flat_map` with a lifecycle (Flink's `RichFlatMapFunction`).
pub trait RichFlatMapFunction<I, O>: Clone + Send + 'static {
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let _ = ctx;
        Ok(())
    }
    /// Any number of outputs per input, through `out.collect(..)`.
    fn flat_map(&mut self, value: I, out: &mut dyn Collector<O>) -> FunctionResult;
    fn close(&mut self) -> FunctionResult {
        Ok(())
    }
}

/// `filter` with a lifecycle (Flink's `RichFilterFunction`).
pub trait RichFilterFunction<T>: Clone + Send + 'static {
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let _ = ctx;
        Ok(())
    }
    /// Whether `value` goes on.
    fn filter(&mut self, value: &T) -> FunctionResult<bool>;
    fn close(&mut self) -> FunctionResult {
        Ok(())
    }
}

/// A sink with a lifecycle (Flink's `RichSinkFunction`): records leave the job through `invoke`.
/// At-least-once: `flush` runs at every checkpoint barrier (Flink's `snapshotState` of a sink
/// that buffers) and before `close`, so a checkpoint completes only after everything before its
/// barrier was flushed; a restore replays what came after. A sink whose writes are idempotent
/// (an upsert by key) is exactly-once in effect.
pub trait RichSinkFunction<T>: Clone + Send + 'static {
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let _ = ctx;
        Ok(())
    }
    /// One record; an error fails the task (its restart strategy applies).
    fn invoke(&mut self, value: T) -> FunctionResult;
    /// Makes what `invoke` buffered durable: at each checkpoint barrier and at the end of input.
    fn flush(&mut self) -> FunctionResult {
        Ok(())
    }
    fn close(&mut self) -> FunctionResult {
        Ok(())
    }
}

/// The function a factory copies for each subtask: kept behind a lock so that the factory (shared
/// by the task threads of a process) needs the function to be `Send` only.
pub(crate) struct Prototype<F>(Mutex<F>);

impl<F: Clone> Prototype<F> {
    pub(crate) fn new(f: F) -> Self {
        Prototype(Mutex::new(f))
    }

    /// A copy for one subtask.
    pub(crate) fn copy(&self) -> F {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// How an opened function is closed.
type Close<F> = Box<dyn FnOnce(&mut F) -> FunctionResult + Send>;

/// A subtask's copy of a function, opened: it is closed once, at [`Opened::close`] (the end of
/// input) or, if the task ends otherwise, when the operator is dropped.
pub(crate) struct Opened<F> {
    f: F,
    operator: String,
    /// Taken when the function is closed; `None` for a function without a lifecycle.
    close: Option<Close<F>>,
}

impl<F> Opened<F> {
    /// Opens `f` for the subtask of `ctx`; its error fails the task, naming the operator.
    pub(crate) fn open(
        mut f: F,
        ctx: &OpContext,
        open: impl FnOnce(&mut F, &RuntimeContext) -> FunctionResult,
        close: impl FnOnce(&mut F) -> FunctionResult + Send + 'static,
    ) -> Result<Self> {
        let runtime = RuntimeContext::of(ctx);
        open(&mut f, &runtime).map_err(|e| {
            Error::Operator(format!(
                "{} (subtask {} of {}): open failed: {e}",
                ctx.operator_name,
                ctx.subtask + 1,
                ctx.parallelism
            ))
        })?;
        Ok(Opened {
            f,
            operator: ctx.operator_name.clone(),
            close: Some(Box::new(close)),
        })
    }

    /// A function with nothing to open or close (an operator's own adapter).
    pub(crate) fn plain(f: F) -> Self {
        Opened {
            f,
            operator: String::new(),
            close: None,
        }
    }

    /// Closes the function (once); its error, naming the operator.
    pub(crate) fn close(&mut self) -> std::result::Result<(), String> {
        match self.close.take() {
            Some(close) => close(&mut self.f).map_err(|e| format!("{}: close failed: {e}", self.operator)),
            None => Ok(()),
        }
    }

    /// [`Self::close`] at an operator's end: its error becomes the operator's failure unless
    /// one was recorded first.
    pub(crate) fn close_into(&mut self, failure: &mut Option<String>) {
        if let Err(e) = self.close() {
            failure.get_or_insert(e);
        }
    }

    /// The message of a per-record call's error.
    pub(crate) fn failed(&self, call: &str, e: FunctionError) -> String {
        format!("{}: {call} failed: {e}", self.operator)
    }
}

/// Opens a subtask's copy of `f` behind an `Arc` (for operators that lend `&F` to callbacks): the
/// `Arc` is this subtask's alone, so `open` and `close` reach the function through it.
pub(crate) fn open_shared<F: Send + Sync + 'static>(
    f: F,
    ctx: &OpContext,
    open: fn(&mut F, &RuntimeContext) -> FunctionResult,
    close: fn(&mut F) -> FunctionResult,
) -> Result<Opened<std::sync::Arc<F>>> {
    Opened::open(
        std::sync::Arc::new(f),
        ctx,
        |f, c| std::sync::Arc::get_mut(f).map_or(Ok(()), |f| open(f, c)),
        move |f| std::sync::Arc::get_mut(f).map_or(Ok(()), close),
    )
}

impl<F> Deref for Opened<F> {
    type Target = F;
    fn deref(&self) -> &F {
        &self.f
    }
}

impl<F> DerefMut for Opened<F> {
    fn deref_mut(&mut self) -> &mut F {
        &mut self.f
    }
}

impl<F> Drop for Opened<F> {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!("{e}");
        }
    }
}

/// One record's call of a rich function: `map`, `flat_map` or `filter`, with its outputs.
pub(crate) type Call<F, I, O> = fn(&mut F, I, &mut dyn Collector<O>) -> FunctionResult;

/// [`RichMapFunction::map`] as a [`Call`].
pub(crate) fn map_call<I, O, F: RichMapFunction<I, O>>(
    f: &mut F,
    record: I,
    out: &mut dyn Collector<O>,
) -> FunctionResult {
    out.collect(f.map(record)?);
    Ok(())
}

/// [`RichFlatMapFunction::flat_map`] as a [`Call`].
pub(crate) fn flat_map_call<I, O, F: RichFlatMapFunction<I, O>>(
    f: &mut F,
    record: I,
    out: &mut dyn Collector<O>,
) -> FunctionResult {
    f.flat_map(record, out)
}

/// [`RichFilterFunction::filter`] as a [`Call`].
pub(crate) fn filter_call<T, F: RichFilterFunction<T>>(
    f: &mut F,
    record: T,
    out: &mut dyn Collector<T>,
) -> FunctionResult {
    if f.filter(&record)? {
        out.collect(record);
    }
    Ok(())
}

/// The operator of a rich `map`, `flat_map` or `filter`: `call` per record; the first error
/// stops the calls and fails the task at its next check (the barrier or the end of input), as
/// does an error of `close`, which runs after everything downstream finished.
pub(crate) struct RichOp<I, O, F> {
    pub f: Opened<F>,
    pub call: Call<F, I, O>,
    /// What the call is, for its error: `map`, `flat_map`, `filter`.
    pub call_name: &'static str,
    pub failure: Option<String>,
    pub down: BoxOp<O>,
}

impl<I: Data, O: Data, F: Send + 'static> Collector<I> for RichOp<I, O, F> {
    fn collect(&mut self, record: I) {
        if self.failure.is_some() {
            return;
        }
        if let Err(e) = (self.call)(&mut self.f, record, &mut *self.down) {
            self.failure = Some(self.f.failed(self.call_name, e));
        }
    }
}

impl<I: Data, O: Data, F: Send + 'static> Op<I> for RichOp<I, O, F> {
    forward_time!();
    fn finish(&mut self) {
        self.down.finish();
        self.f.close_into(&mut self.failure);
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.down.drain(flush, out)
    }
    forward_checkpoint_with_failure!();
}
