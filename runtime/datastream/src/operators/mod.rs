//! The per-record path: operators push records into the next operator of their chain through
//! [`Op`]. Every operator is a generic struct over the user's closure, so the only dynamic call per
//! record and operator is the one into the next operator; type erasure happens once per task, when
//! [`OpFactory`]s downcast the chain built so far.

use std::any::Any;
use std::hash::Hash;
use std::sync::Arc;

use bytes::Bytes;

use crate::checkpoint::{ChainSnapshot, Keyed, KeyedStateInit, TaskRestore};
use crate::data::Data;
use crate::error::{Error, Result};
use crate::time::{TaskTime, TimeEvent};
use crate::types::TaskMetrics;

/// Where user functions put their output records (the `Collector` of Flink's `FlatMapFunction`).
pub trait Collector<T>: Send {
    fn collect(&mut self, record: T);
}

/// Collecting into a vector: what a function's output is gathered in when it is not a chain.
impl<T: Send> Collector<T> for Vec<T> {
    fn collect(&mut self, record: T) {
        self.push(record)
    }
}

/// Which async consumer a chunk of serialised bytes goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Output `i` of the vertex (a `PartitionWriter`).
    Output(usize),
    /// The chain's sink (file or stdout).
    Sink,
}

/// A finished buffer waiting to be written: the synchronous chain produces them, the task's async
/// loop hands them on (emit, sink write), so backpressure reaches the chain between input buffers.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub target: Target,
    pub subpartition: u32,
    pub bytes: Bytes,
}

/// One link of an operator chain.
pub(crate) trait Op<T>: Collector<T> {
    /// Whether this link works on a record it is lent ([`Op::collect_reused`]) without copying it;
    /// the input side of a task then decodes every record into one reused value instead of
    /// allocating one per record (Flink's object reuse, kept safe by lending the record only for
    /// the call).
    fn takes_reused(&self) -> bool {
        false
    }
    /// A lent record: the link may change it (a keyed sum puts its running total in) and hand it
    /// on; its owner decodes the next record into it afterwards. Links that keep or hand on owned
    /// records copy it.
    fn collect_reused(&mut self, record: &mut T)
    where
        T: Clone,
    {
        self.collect(record.clone())
    }
    /// Time moved on (a watermark, a change of watermark status, a processing-time tick): act on
    /// it (fire timers and windows), then hand it down the chain. Stateless links only pass it on.
    fn on_time(&mut self, event: TimeEvent);
    /// End of input: emit what is held back (batch aggregates), then finish the rest of the chain.
    fn finish(&mut self);
    /// Move finished buffers (and partially filled ones if `flush`) of the chain's tail to `out`.
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>);
    /// A checkpoint barrier reached this operator: add its state to `out`, then the rest of the
    /// chain's (the synchronous part of the snapshot; the task uploads it afterwards).
    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()>;
    /// The first failure an operator could not return from `collect` (a state backend's), if any.
    fn failure(&mut self) -> Option<String>;

    /// An async operator (which heads its chain, so only a chain's first link is asked): polls its
    /// requests, and emits the results that may go; `Ready` when anything changed (the task then
    /// hands on what was emitted), `Pending` with the task woken when a request completes.
    fn poll_async(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let _ = cx;
        std::task::Poll::Pending
    }
    /// An async operator's queue is at its capacity: the task reads no more input until
    /// [`Op::poll_async`] made room.
    fn async_blocked(&self) -> bool {
        false
    }
    /// An async operator was told the end of input but still has requests: the task polls it
    /// until it finished the rest of the chain.
    fn async_busy(&self) -> bool {
        false
    }
}

pub(crate) type BoxOp<T> = Box<dyn Op<T>>;

/// A chain link of some record type, erased (`Box<BoxOp<T>>`); downcast once per task.
pub(crate) type AnyOp = Box<dyn Any + Send>;

pub(crate) fn erase<T: Data>(op: BoxOp<T>) -> AnyOp {
    Box::new(op)
}

pub(crate) fn downcast<T: Data>(op: AnyOp) -> Result<BoxOp<T>> {
    op.downcast::<BoxOp<T>>().map(|b| *b).map_err(|_| {
        Error::Graph(format!(
            "operator chain type mismatch: expected records of {}",
            std::any::type_name::<T>()
        ))
    })
}

/// Which subtask an operator runs as.
#[derive(Debug, Clone)]
pub(crate) struct OpContext {
    /// See [`crate::TaskContext::job_id`].
    pub job_id: String,
    /// The name of the operator being built (set per operator): its user metrics' scope.
    pub operator_name: String,
    pub subtask: u32,
    pub parallelism: u32,
    pub attempt: u64,
    pub configuration: std::collections::BTreeMap<String, String>,
    /// The task's counters (sources count the records they read as records in).
    pub metrics: Arc<TaskMetrics>,
    /// The key groups this subtask owns, out of `max_parallelism`.
    pub key_groups: std::ops::Range<u32>,
    pub max_parallelism: u32,
    /// The keyed state the task was given, taken by its keyed operator.
    pub keyed_state: Arc<std::sync::Mutex<Option<KeyedStateInit>>>,
    /// Where a restored source reads on from, and a restored sink's committer state.
    pub restore: Option<TaskRestore>,
    /// `execution.checkpointing.interval` is set (streaming): sinks commit per checkpoint.
    pub checkpointing: bool,
    /// The job is timed (it assigns timestamps or uses event time): the task's record timestamp
    /// and clock; `None` otherwise.
    pub time: Option<Arc<TaskTime>>,
    /// The writers of this operator's side outputs that something reads (set per operator).
    pub side_outputs: Arc<std::sync::Mutex<Option<SideOutputs>>>,
}

impl OpContext {
    /// The keyed state of this task for its keyed operator, fresh or restored.
    pub(crate) fn keyed<K: Data + Hash + Eq, V: Data>(&self) -> Result<Keyed<K, V>> {
        let init = self.keyed_state.lock().unwrap_or_else(|p| p.into_inner()).take();
        Keyed::restored(
            init,
            self.key_groups.clone(),
            self.max_parallelism,
            self.restore.as_ref(),
        )
    }

    /// The keyed state and timers of this task for its keyed operator, fresh or restored.
    pub(crate) fn keyed_with_timers<K: Data + Hash + Eq + Ord, V: Data>(
        &self,
    ) -> Result<(Keyed<K, V>, crate::time::timers::Timers<K>)> {
        let init = self.keyed_state.lock().unwrap_or_else(|p| p.into_inner()).take();
        let timers = crate::checkpoint::restore_timers(init.as_ref())?;
        Ok((
            Keyed::restored(
                init,
                self.key_groups.clone(),
                self.max_parallelism,
                self.restore.as_ref(),
            )?,
            timers,
        ))
    }

    /// The side outputs of the operator being built, taken once.
    pub(crate) fn take_side_outputs(&self) -> SideOutputs {
        self.side_outputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default()
    }

    /// The task's time, in a job with event time.
    pub(crate) fn task_time(&self) -> Result<Arc<TaskTime>> {
        self.time
            .clone()
            .ok_or_else(|| Error::Graph("an operator with timers in a job without event time".into()))
    }
}

/// Builds one operator in front of the (already built) rest of its chain.
pub(crate) type OpFactory = Arc<dyn Fn(&OpContext, AnyOp) -> Result<AnyOp> + Send + Sync>;

/// The key of a record, as a key selector gives it.
pub(crate) type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;

/// A key selector that borrows the key from the record.
pub(crate) type KeyRefFn<T, K> = Arc<dyn for<'a> Fn(&'a T) -> &'a K + Send + Sync>;

macro_rules! forward_control {
    () => {
        forward_time!();
        fn finish(&mut self) {
            self.down.finish()
        }
        fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
            self.down.drain(flush, out)
        }
        forward_checkpoint!();
    };
}

/// For links that do not act on time: time events go down the chain.
macro_rules! forward_time {
    () => {
        fn on_time(&mut self, event: crate::time::TimeEvent) {
            self.down.on_time(event)
        }
    };
}

/// For stateless links: the snapshot and failures are the rest of the chain's.
macro_rules! forward_checkpoint {
    () => {
        fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
            self.down.snapshot(checkpoint, out)
        }
        fn failure(&mut self) -> Option<String> {
            self.down.failure()
        }
    };
}

/// For links that fail on their own (a rich function's error): the snapshot is the rest of the
/// chain's, the failure this link's first.
macro_rules! forward_checkpoint_with_failure {
    () => {
        fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
            self.down.snapshot(checkpoint, out)
        }
        fn failure(&mut self) -> Option<String> {
            self.failure.take().or_else(|| self.down.failure())
        }
    };
}

/// For keyed links: their state, then the rest of the chain's.
macro_rules! keyed_checkpoint {
    () => {
        fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
            out.keyed = Some(self.state.prepare_snapshot(checkpoint)?);
            self.down.snapshot(checkpoint, out)
        }
        fn failure(&mut self) -> Option<String> {
            self.state.failure().or_else(|| self.down.failure())
        }
    };
}

/// For the ends of chains (writers, sinks): nothing to snapshot here, nothing after them.
macro_rules! tail_checkpoint {
    () => {
        fn on_time(&mut self, _event: crate::time::TimeEvent) {}
        fn snapshot(&mut self, _checkpoint: u64, _out: &mut crate::checkpoint::ChainSnapshot) -> Result<()> {
            Ok(())
        }
        fn failure(&mut self) -> Option<String> {
            None
        }
    };
}
pub(crate) use tail_checkpoint;

// After the macros: the operator families use them.
mod async_wait;
mod basic;
mod broadcast;
mod co;
mod keyed;
mod process;
mod rich;
mod side;
pub(crate) mod window;

pub(crate) use async_wait::{AsyncConfig, AsyncWaitOp};
pub use async_wait::{AsyncFunction, AsyncRetryStrategy};
pub(crate) use basic::{FilterOp, FlatMapOp, MapOp};
pub(crate) use broadcast::{BroadcastOp, KeyedBroadcastOp, KeyedInner, KeyedSide, restore_broadcast};
pub use broadcast::{BroadcastProcessFunction, KeyedBroadcastProcessFunction};
pub(crate) use co::{CoProcess, IntervalJoin};
pub use co::{KeyedCoProcessFunction, TaggedUnion};
pub(crate) use keyed::{
    Combiner, SortedProcess, SortedReduce, StreamingProcess, StreamingReduce, StreamingSumGroups, SumGroup,
    SumGrouper,
};
pub use process::{KeyedContext, KeyedProcessFunction, ProcessContext, ProcessFunction};
pub(crate) use process::{KeyedProcessOperator, ProcessOp, SortedKeyedProcess};
pub(crate) use rich::{Call, Opened, Prototype, RichOp, filter_call, flat_map_call, map_call, open_shared};
pub use rich::{
    FunctionError, FunctionResult, RichFilterFunction, RichFlatMapFunction, RichMapFunction,
    RichSinkFunction, RuntimeContext,
};
pub use side::OutputTag;
pub(crate) use side::{SideOutput, SideOutputs, SideWriter};

/// Counts the records a source emits into its chain as the task's records in (what it read).
pub(crate) struct CountIn<T> {
    pub down: BoxOp<T>,
    pub count: u64,
    pub metrics: Arc<TaskMetrics>,
}

impl<T: Data> Collector<T> for CountIn<T> {
    fn collect(&mut self, record: T) {
        self.count += 1;
        self.down.collect(record);
    }
}

impl<T: Data> Op<T> for CountIn<T> {
    fn takes_reused(&self) -> bool {
        self.down.takes_reused()
    }
    fn collect_reused(&mut self, record: &mut T) {
        self.count += 1;
        self.down.collect_reused(record);
    }
    forward_time!();
    fn finish(&mut self) {
        self.down.finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.metrics.add_in(std::mem::take(&mut self.count));
        self.down.drain(flush, out)
    }
    forward_checkpoint!();
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Collects into a Vec: the tail of chains under test.
    pub(crate) struct VecSink<T>(pub Arc<std::sync::Mutex<Vec<T>>>);

    impl<T: Data> Collector<T> for VecSink<T> {
        fn collect(&mut self, record: T) {
            self.0.lock().expect("lock").push(record)
        }
    }

    impl<T: Data> Op<T> for VecSink<T> {
        fn finish(&mut self) {}
        fn drain(&mut self, _: bool, _: &mut Vec<Chunk>) {}
        tail_checkpoint!();
    }

    /// Timestamped records and time events, in the order they came.
    type Seen<T> = (Vec<(i64, T)>, Vec<TimeEvent>);

    /// Collects records with their timestamps and the time events that reach it (processing-time
    /// ticks left out): the tail of timed chains under test.
    #[derive(Clone)]
    pub(crate) struct TimedSink<T> {
        time: Arc<TaskTime>,
        seen: Arc<std::sync::Mutex<Seen<T>>>,
    }

    impl<T: Data> TimedSink<T> {
        pub(crate) fn new(time: Arc<TaskTime>) -> Self {
            TimedSink {
                time,
                seen: Arc::default(),
            }
        }
        pub(crate) fn records(&self) -> Vec<(i64, T)> {
            self.seen.lock().expect("lock").0.clone()
        }
        pub(crate) fn events(&self) -> Vec<TimeEvent> {
            self.seen.lock().expect("lock").1.clone()
        }
        pub(crate) fn watermarks(&self) -> Vec<i64> {
            let events = self.events();
            events
                .into_iter()
                .filter_map(|e| match e {
                    TimeEvent::Watermark(w) => Some(w),
                    _ => None,
                })
                .collect()
        }
    }

    impl<T: Data> Collector<T> for TimedSink<T> {
        fn collect(&mut self, record: T) {
            let ts = self.time.timestamp();
            self.seen.lock().expect("lock").0.push((ts, record))
        }
    }

    impl<T: Data> Op<T> for TimedSink<T> {
        fn on_time(&mut self, event: TimeEvent) {
            if !matches!(event, TimeEvent::ProcessingTime(_)) {
                self.seen.lock().expect("lock").1.push(event)
            }
        }
        fn finish(&mut self) {}
        fn drain(&mut self, _: bool, _: &mut Vec<Chunk>) {}
        fn snapshot(&mut self, _: u64, _: &mut ChainSnapshot) -> Result<()> {
            Ok(())
        }
        fn failure(&mut self) -> Option<String> {
            None
        }
    }
}
