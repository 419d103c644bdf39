//! The task runtime: one subtask of one JobVertex, running its operator chain between the shuffle
//! inputs and outputs. The chain is synchronous and monomorphic per record; this module's async loop
//! feeds it one input buffer (or source batch) at a time and hands the buffers it produced to the
//! [`PartitionWriter`]s, so backpressure reaches the chain between buffers and cancelling the task
//! (dropping its future) stops it at the next await.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use floe_shuffle::{GateItem, InputGate, PartitionStats, PartitionWriter};
use tokio::time::Instant;

use crate::checkpoint::{ChainSnapshot, Checkpointing, Control, KeyedStateInit, TaskRestore};
use crate::data::Data;
use crate::error::{Error, Result};
use crate::io::{SinkIo, Source};
use crate::operators::{AnyOp, BoxOp, Chunk, SideOutput, SideWriter, TaggedUnion, Target, downcast, erase};
use crate::time::element::{self, Header};
use crate::time::valve::WatermarkValve;
use crate::time::{TaskTime, TimeEvent};
use crate::types::Wait;
pub use crate::types::{BufferPools, TaskMetrics};
pub(crate) use crate::writer::{KeyHasher, OutputRoute, RecordWriter, WriterSetup};

mod head;
pub(crate) use head::{Head, SourceHead, StreamType, TwoInputOf, TwoInputType, TypeOf};

/// What a TaskManager gives a task: which subtask it is and its shuffle endpoints.
#[derive(Default)]
pub struct TaskContext {
    /// The JobManager's id of the job run this task belongs to: new with every submission (a
    /// redeploy, a resubmit, a start from a savepoint), kept across restarts and a JobManager's
    /// failover. Sinks scope what they write and clean up to it, so two runs never touch each
    /// other's output (empty: a test harness's single run).
    pub job_id: String,
    pub subtask: u32,
    pub parallelism: u32,
    pub attempt: u64,
    /// One gate per vertex input, in JobGraph input order.
    pub inputs: Vec<Box<dyn InputGate>>,
    /// One writer per vertex output, in JobGraph output order; `num_subpartitions` = consumer
    /// parallelism (or its max parallelism, for adaptive batch scheduling).
    pub outputs: Vec<Box<dyn PartitionWriter>>,
    pub metrics: Arc<TaskMetrics>,
    /// Flush partially filled buffers this long after the last flush; `Some(ZERO)` after every
    /// record; `None` only when full (`execution.buffer-timeout` -1).
    pub buffer_timeout: Option<Duration>,
    /// Bytes per shuffle buffer (`taskmanager.memory.segment-size`).
    pub buffer_size: usize,
    /// The job's configuration (storage credentials for sources and sinks).
    pub configuration: BTreeMap<String, String>,
    /// Streaming with `execution.checkpointing.interval`: barriers in, snapshots out.
    pub checkpointing: Option<Checkpointing>,
    /// Restored from a checkpoint: the source position and sink state.
    pub restore: Option<TaskRestore>,
    /// Keyed state to start from (`None`: empty state on the heap).
    pub keyed_state: Option<KeyedStateInit>,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("job_id", &self.job_id)
            .field("subtask", &self.subtask)
            .field("parallelism", &self.parallelism)
            .field("attempt", &self.attempt)
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .field("buffer_timeout", &self.buffer_timeout)
            .field("buffer_size", &self.buffer_size)
            .field("checkpointing", &self.checkpointing.is_some())
            .field("restore", &self.restore)
            .finish()
    }
}

/// One subtask, ready to run: created by [`crate::BuiltJob::create_task`].
pub struct Task {
    pub(crate) vertex: u32,
    pub(crate) metrics: Arc<TaskMetrics>,
    pub(crate) head: Box<dyn Head>,
    pub(crate) input: Option<Box<dyn InputGate>>,
    pub(crate) outputs: Vec<Box<dyn PartitionWriter>>,
    pub(crate) sink: Option<Box<dyn SinkIo>>,
    /// Timer-driven flushing; `None` also when every record is flushed by itself.
    pub(crate) flush_interval: Option<Duration>,
    pub(crate) checkpointing: Option<Checkpointing>,
    /// A timed job: the chain hears a processing-time tick every `interval`, and the MAX
    /// watermark at the end of input.
    pub(crate) time: Option<Arc<TaskTime>>,
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("vertex", &self.vertex)
            .field("outputs", &self.outputs.len())
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

/// Hands the chain's finished buffers on. Waiting for an output's buffers is backpressure; a
/// sink's write is the sink's own work (busy time), as in Flink.
async fn dispatch(
    pending: &mut Vec<Chunk>,
    outputs: &mut [Box<dyn PartitionWriter>],
    sink: &mut Option<Box<dyn SinkIo>>,
    metrics: &TaskMetrics,
) -> Result<()> {
    for chunk in pending.drain(..) {
        match chunk.target {
            Target::Output(i) => match outputs.get_mut(i) {
                Some(w) => {
                    metrics
                        .waiting(Wait::Output, w.emit(chunk.subpartition, chunk.bytes))
                        .await?
                }
                None => return Err(Error::Graph(format!("no output {i}"))),
            },
            Target::Sink => match sink.as_mut() {
                Some(s) => s.write(chunk.bytes).await?,
                None => return Err(Error::Graph("no sink".into())),
            },
        }
    }
    Ok(())
}

/// The task's side of checkpointing: barriers reach the chain between buffers, so a snapshot holds
/// exactly the effect of the records before the barrier.
struct Checkpoints {
    control: Option<tokio::sync::mpsc::UnboundedReceiver<Control>>,
    snapshots: Option<tokio::sync::mpsc::UnboundedSender<ChainSnapshot>>,
}

impl Checkpoints {
    /// The next control message, or never (no checkpointing, or the TaskManager let go).
    async fn recv(&mut self) -> Control {
        match self.control.as_mut() {
            Some(rx) => match rx.recv().await {
                Some(c) => c,
                None => {
                    self.control = None;
                    std::future::pending().await
                }
            },
            None => std::future::pending().await,
        }
    }

    fn try_recv(&mut self) -> Option<Control> {
        self.control.as_mut()?.try_recv().ok()
    }
}

struct Running {
    metrics: Arc<TaskMetrics>,
    head: Box<dyn Head>,
    outputs: Vec<Box<dyn PartitionWriter>>,
    sink: Option<Box<dyn SinkIo>>,
    pending: Vec<Chunk>,
    checkpoints: Checkpoints,
}

impl Running {
    async fn flush(&mut self, all: bool) -> Result<()> {
        self.head.drain(all, &mut self.pending);
        dispatch(
            &mut self.pending,
            &mut self.outputs,
            &mut self.sink,
            &self.metrics,
        )
        .await?;
        if let Some(failure) = self.head.failure() {
            return Err(Error::Operator(failure));
        }
        Ok(())
    }

    /// The processing-time tick of a timed task: assigners emit watermarks, processing-time timers
    /// fire; what they emitted goes out at once (a watermark must not wait for a full buffer).
    async fn tick(&mut self) -> Result<()> {
        self.head
            .on_time(TimeEvent::ProcessingTime(crate::time::now_ms()));
        self.flush(true).await
    }

    /// Barrier `id`: everything before it goes out, the chain's state and the sink's pending part
    /// are fixed, the barrier goes downstream (a stop barrier with `stop`, see
    /// [`crate::checkpoint::STOP_BARRIER`]), and the snapshot to the TaskManager for upload.
    async fn checkpoint(&mut self, id: u64, stop: bool) -> Result<()> {
        self.flush(true).await?;
        let mut snapshot = ChainSnapshot {
            checkpoint: id,
            keyed: None,
            source: None,
            sink: None,
            broadcast: None,
            in_flight: None,
        };
        self.head.snapshot(id, &mut snapshot)?;
        if let Some(sink) = self.sink.as_mut() {
            snapshot.sink = sink.pre_commit(id).await?;
        }
        let wire = if stop {
            id | crate::checkpoint::STOP_BARRIER
        } else {
            id
        };
        for w in &mut self.outputs {
            self.metrics.waiting(Wait::Output, w.emit_barrier(wire)).await?;
        }
        if let Some(tx) = &self.checkpoints.snapshots {
            let _ = tx.send(snapshot);
        }
        Ok(())
    }

    /// A checkpointing source at the end of its input (Flink's final checkpoint, FLIP-147): it
    /// does not finish until a checkpoint taken at its end completed, so everything downstream of
    /// it, up to the sinks' last commit, is covered by a checkpoint, and a failover after it
    /// restores this source at its end instead of replaying committed output.
    /// `taken`: a savepoint this source stopped at (its barrier is out already).
    async fn final_checkpoint(&mut self, mut taken: Option<u64>) -> Result<()> {
        if self.checkpoints.control.is_none() {
            return Ok(());
        }
        loop {
            match self.checkpoints.recv().await {
                // The input really ended: a stop's barrier is a plain one now.
                Control::Trigger(id) | Control::Stop { checkpoint: id, .. } => {
                    self.checkpoint(id, false).await?;
                    taken = Some(id);
                }
                Control::Complete(id) => {
                    self.complete(id).await?;
                    if taken.is_some_and(|t| id >= t) {
                        return Ok(());
                    }
                }
                Control::Abort(id) => self.cancel(id).await?,
            }
        }
    }

    async fn control(&mut self, control: Control, is_source: bool) -> Result<()> {
        match control {
            Control::Trigger(id) | Control::Stop { checkpoint: id, .. } if is_source => {
                self.checkpoint(id, false).await
            }
            // Barriers and their cancel markers reach other tasks through their inputs.
            Control::Trigger(_) | Control::Stop { .. } => Ok(()),
            Control::Abort(id) if is_source => self.cancel(id).await,
            Control::Abort(_) => Ok(()),
            Control::Complete(id) => self.complete(id).await,
        }
    }

    /// Checkpoint `id` was aborted (a source was told, or the input yielded its cancel marker
    /// once): its marker goes downstream, so an alignment waiting for its barrier ends there too.
    /// It splits no data (records buffered in the chain may go before or after it).
    async fn cancel(&mut self, id: u64) -> Result<()> {
        for w in &mut self.outputs {
            self.metrics.waiting(Wait::Output, w.emit_cancel(id)).await?;
        }
        Ok(())
    }

    /// Checkpoint `id` completed: the sink commits what it pre-committed, then a source acts on
    /// what it snapshotted (Flink's `notifyCheckpointComplete`, never at the snapshot itself).
    async fn complete(&mut self, id: u64) -> Result<()> {
        if let Some(sink) = self.sink.as_mut() {
            sink.commit(id).await?;
        }
        self.head.notify_checkpoint_complete(id).await
    }
}

/// A task's failure, with its outputs unfinished: their consumers see them end (and fail, their
/// input gone) only when [`HeldOutputs`] is dropped.
#[derive(Debug)]
pub struct TaskFailure {
    pub error: Error,
    pub outputs: HeldOutputs,
}

/// A failed task's result partition writers, not finished: dropping them ends their partitions.
pub struct HeldOutputs(Vec<Box<dyn PartitionWriter>>);

impl std::fmt::Debug for HeldOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldOutputs({} partitions)", self.0.len())
    }
}

impl Task {
    /// Runs the subtask to the end of its input; one [`PartitionStats`] per output, in output
    /// order. Cancel by dropping the future: nothing outlives it (a file sink then leaves only its
    /// `.inprogress` file behind).
    pub async fn run(self) -> Result<Vec<PartitionStats>> {
        self.run_holding_outputs().await.map_err(|f| f.error)
    }

    /// [`Task::run`], but a failure in the task's loop hands its outputs back unfinished
    /// ([`TaskFailure::outputs`]): a TaskManager reports the failure first and drops them after,
    /// so the JobManager hears this task's own failure before its consumers', which fail because
    /// their input ended (Flink likewise fails a task's partitions after it reports). A failure
    /// while finishing the outputs hands back none.
    pub async fn run_holding_outputs(self) -> std::result::Result<Vec<PartitionStats>, TaskFailure> {
        let fail = |error| TaskFailure {
            error,
            outputs: HeldOutputs(Vec::new()),
        };
        let Task {
            vertex,
            metrics,
            head,
            input,
            outputs,
            sink,
            flush_interval,
            checkpointing,
            time,
        } = self;
        let tick_interval = time.as_ref().map(|t| t.interval);
        let (control, snapshots) = match checkpointing {
            Some(c) => (Some(c.control), Some(c.snapshots)),
            None => (None, None),
        };
        let _ = metrics.running_since.set(std::time::Instant::now());
        let mut task = Running {
            metrics: metrics.clone(),
            head,
            outputs,
            sink,
            pending: Vec::new(),
            checkpoints: Checkpoints { control, snapshots },
        };
        let mut last_flush = Instant::now();
        let mut last_tick = Instant::now();
        let due = |last: Instant| flush_interval.is_some_and(|t| last.elapsed() >= t);
        let tick_due = |last: Instant| tick_interval.is_some_and(|t| last.elapsed() >= t);
        let is_source = input.is_none();
        // Stop with a savepoint: the source's input ends at the savepoint's barrier.
        let mut stopped_at = None;
        // Stopped without drain (this source's stop, or a stop barrier taken from the input):
        // nothing after the barrier is emitted or committed (see `STOP_BARRIER`).
        let mut stopped = false;
        // Drained: the chain finished before the barrier.
        let mut finished = false;
        // The loop and the end of input; a failure hands back the outputs unfinished (see
        // `run_holding_outputs`).
        let body = async {
            match input {
                None => 'read: loop {
                    while let Some(control) = task.checkpoints.try_recv() {
                        if let Control::Stop {
                            checkpoint: id,
                            drain,
                        } = control
                        {
                            if drain {
                                // Flink's `stop --drain`: event time ends and the chain finishes
                                // before the barrier, so what that fires is in the savepoint.
                                if time.is_some() {
                                    task.head
                                        .on_time(TimeEvent::Watermark(crate::time::MAX_WATERMARK));
                                }
                                task.head.finish();
                                task.flush(true).await?;
                                finished = true;
                            } else {
                                stopped = true;
                            }
                            task.checkpoint(id, stopped).await?;
                            stopped_at = Some(id);
                            break 'read;
                        }
                        task.control(control, true).await?;
                    }
                    let more = task.head.produce().await?;
                    if tick_due(last_tick) {
                        task.tick().await?;
                        last_tick = Instant::now();
                    }
                    let flush = due(last_flush);
                    task.flush(flush).await?;
                    if flush {
                        last_flush = Instant::now();
                    }
                    if !more {
                        break;
                    }
                    // A generator never waits on I/O: give cancellation and other tasks a turn.
                    tokio::task::yield_now().await;
                },
                Some(mut gate) => loop {
                    let item = {
                        // Waiting for input is idle time (a timer tick's flush inside it counts too).
                        // The same `next` future is polled across timer ticks, control messages and
                        // async results, so a gate whose `next` is not cancel-safe loses nothing. An
                        // async operator at its capacity holds the input back: `next` is not polled
                        // until it has room (only an operator's input makes it full).
                        let next = metrics.waiting(Wait::Input, gate.next());
                        tokio::pin!(next);
                        loop {
                            let blocked = task.head.async_blocked();
                            // Held back by an async operator at its capacity, the task waits on
                            // the operator's requests, not working: idle time, as Flink's mailbox
                            // counts an AsyncWaitOperator's yield (before, it counted as busy, and a
                            // lookup task waiting on a slow service read as saturated).
                            let blocked_since = blocked.then(Instant::now);
                            let waited = || {
                                if let Some(since) = blocked_since {
                                    metrics.add_wait(Wait::Input, since.elapsed());
                                }
                            };
                            let input = async {
                                if blocked {
                                    std::future::pending().await
                                } else {
                                    (&mut next).await
                                }
                            };
                            let tick = async move {
                                match flush_interval {
                                    Some(interval) => tokio::time::sleep_until(last_flush + interval).await,
                                    None => std::future::pending().await,
                                }
                            };
                            let time_tick = async move {
                                match tick_interval {
                                    Some(interval) => tokio::time::sleep_until(last_tick + interval).await,
                                    None => std::future::pending().await,
                                }
                            };
                            tokio::select! {
                                biased;
                                () = std::future::poll_fn(|cx| task.head.poll_async(cx)) => {
                                    waited();
                                    let flush = due(last_flush);
                                    task.flush(flush).await?;
                                    if flush {
                                        last_flush = Instant::now();
                                    }
                                }
                                r = input => break r?,
                                control = task.checkpoints.recv() => {
                                    waited();
                                    task.control(control, false).await?;
                                }
                                _ = tick => {
                                    waited();
                                    task.flush(true).await?;
                                    last_flush = Instant::now();
                                }
                                _ = time_tick => {
                                    waited();
                                    // Stopped: no processing-time timer fires after the savepoint.
                                    if !stopped {
                                        task.tick().await?;
                                    }
                                    last_tick = Instant::now();
                                }
                            }
                        }
                    };
                    match item {
                        None => break,
                        Some(GateItem::Barrier(wire)) => {
                            let (id, stop) = crate::checkpoint::barrier_of(wire);
                            task.checkpoint(id, stop).await?;
                            stopped |= stop;
                        }
                        Some(GateItem::Cancel(id)) => task.cancel(id).await?,
                        // Upstream stopped at the same barrier: nothing follows it; were anything
                        // to, it is the resumed job's to produce.
                        Some(GateItem::Buffer { .. }) if stopped => {
                            tracing::warn!(vertex, "input after a stop-with-savepoint barrier dropped");
                        }
                        Some(GateItem::Buffer { channel, data }) => {
                            task.head.push_buffer(channel, &data)?;
                            if tick_due(last_tick) {
                                task.tick().await?;
                                last_tick = Instant::now();
                            }
                            let flush = due(last_flush);
                            task.flush(flush).await?;
                            if flush {
                                last_flush = Instant::now();
                            }
                        }
                    }
                },
            }
            // A source at the end of its input ends event time: the MAX watermark goes down its chain
            // and through every exchange, and each task downstream passes it on once all its channels
            // delivered it (the valve). A source stopped with a savepoint does not end event time
            // (its input ends only until the job resumes: Flink's stop without `--drain`), so no
            // window downstream fires early on a stop.
            if time.is_some() && is_source && stopped_at.is_none() {
                task.head
                    .on_time(TimeEvent::Watermark(crate::time::MAX_WATERMARK));
            }
            if !stopped && !finished {
                task.head.finish();
                task.flush(true).await?;
                // An async operator finishes the rest of its chain once its last request completed
                // (waiting on requests is idle time, as above).
                while task.head.async_busy() {
                    tokio::select! {
                        biased;
                        () = metrics.waiting(Wait::Input, std::future::poll_fn(|cx| task.head.poll_async(cx))) => {
                            task.flush(true).await?
                        }
                        control = task.checkpoints.recv() => task.control(control, is_source).await?,
                    }
                }
            }
            if is_source {
                task.final_checkpoint(stopped_at).await?;
                // The final checkpoint's (or the stop's savepoint's) completion is acted on before
                // the task ends: a Kafka source's offsets of it reach the group, so a later job
                // starting from `committed` continues exactly there.
                task.head.close().await?;
            }
            Ok::<(), Error>(())
        };
        if let Err(error) = body.await {
            return Err(TaskFailure {
                error,
                outputs: HeldOutputs(task.outputs),
            });
        }
        let Running { outputs, sink, .. } = task;
        let mut stats = Vec::with_capacity(outputs.len());
        for w in outputs {
            stats.push(w.finish().await.map_err(|e| fail(e.into()))?);
        }
        if let Some(s) = sink {
            if stopped {
                s.stop().await.map_err(fail)?;
            } else {
                s.close().await.map_err(fail)?;
            }
        }
        tracing::debug!(vertex, "task finished");
        Ok(stats)
    }
}
