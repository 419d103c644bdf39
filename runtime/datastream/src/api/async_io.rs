//! Async I/O (Flink's `AsyncDataStream`): enrich a stream from a database or service without a
//! blocking call per record (see `crate::operators::async_wait`).

use super::*;
use crate::operators::{AsyncConfig, AsyncFunction, AsyncRetryStrategy, AsyncWaitOp};

/// Flink's `AsyncDataStream`: applies an [`AsyncFunction`] to a stream with many requests in
/// flight per subtask.
///
/// - `timeout` bounds each record's requests, retries included; past it the function's
///   [`AsyncFunction::timeout`] decides (by default the task fails).
/// - `capacity` bounds the requests in flight per subtask (Flink's default is 100); the input
///   waits while the operator's queue is full.
/// - Results go out in input order (`ordered_wait`) or as they complete (`unordered_wait`; a
///   watermark still waits for every record before it, so event time stays correct).
/// - Records in flight are part of every checkpoint and are issued again after a restore: with an
///   exactly-once sink each record's results are in the output once, however the job fails.
///
/// The operator heads a chain of its own (a forward exchange from its input, when the
/// parallelism is the same): its records in flight are its state, kept under its uid.
#[derive(Debug, Clone, Copy)]
pub struct AsyncDataStream;

impl AsyncDataStream {
    /// Results as they complete (Flink's `unorderedWait`).
    pub fn unordered_wait<I: Data, O: Data, F: AsyncFunction<I, O>>(
        input: &DataStream<I>,
        f: F,
        timeout: Duration,
        capacity: usize,
    ) -> DataStream<O> {
        async_wait(
            input,
            f,
            config(false, timeout, capacity, AsyncRetryStrategy::NO_RETRY),
        )
    }

    /// Results in input order (Flink's `orderedWait`).
    pub fn ordered_wait<I: Data, O: Data, F: AsyncFunction<I, O>>(
        input: &DataStream<I>,
        f: F,
        timeout: Duration,
        capacity: usize,
    ) -> DataStream<O> {
        async_wait(
            input,
            f,
            config(true, timeout, capacity, AsyncRetryStrategy::NO_RETRY),
        )
    }

    /// [`Self::unordered_wait`] with failed requests tried again (Flink's
    /// `unorderedWaitWithRetry`).
    pub fn unordered_wait_with_retry<I: Data, O: Data, F: AsyncFunction<I, O>>(
        input: &DataStream<I>,
        f: F,
        timeout: Duration,
        capacity: usize,
        retry: AsyncRetryStrategy,
    ) -> DataStream<O> {
        async_wait(input, f, config(false, timeout, capacity, retry))
    }

    /// [`Self::ordered_wait`] with failed requests tried again (Flink's `orderedWaitWithRetry`).
    pub fn ordered_wait_with_retry<I: Data, O: Data, F: AsyncFunction<I, O>>(
        input: &DataStream<I>,
        f: F,
        timeout: Duration,
        capacity: usize,
        retry: AsyncRetryStrategy,
    ) -> DataStream<O> {
        async_wait(input, f, config(true, timeout, capacity, retry))
    }
}

fn config(ordered: bool, timeout: Duration, capacity: usize, retry: AsyncRetryStrategy) -> AsyncConfig {
    AsyncConfig {
        ordered,
        capacity,
        timeout,
        retry,
    }
}

fn async_wait<I: Data, O: Data, F: AsyncFunction<I, O>>(
    input: &DataStream<I>,
    f: F,
    config: AsyncConfig,
) -> DataStream<O> {
    let name = if config.ordered {
        "AsyncWait (ordered)"
    } else {
        "AsyncWait (unordered)"
    };
    if config.capacity == 0 {
        lock(&input.shared).errors.push(format!(
            "{name}: capacity is 0: at least one request must be in flight"
        ));
    }
    if config.timeout.is_zero() {
        lock(&input.shared)
            .errors
            .push(format!("{name}: timeout is 0: a request needs time to complete"));
    }
    let prototype = Arc::new(crate::operators::Prototype::new(f));
    let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
        let down = downcast::<O>(down)?;
        let op = AsyncWaitOp::new(prototype.copy(), config, ctx, down)?;
        Ok(erase::<I>(Box::new(op)))
    });
    input
        .add_operator("async-wait", name, Par::Default, input.plain_input(), factory)
        .start_new_chain()
}
