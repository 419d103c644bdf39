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
use bytes::Bytes;
use floe_scheduler::Partitioner;
use floe_shuffle::{GateItem, InputGate, PartitionStats, PartitionWriter};
use tokio::time::Instant;

use crate::checkpoint::{ChainSnapshot, Checkpointing, Control, KeyedStateInit, TaskRestore};
use crate::data::{Data, KeyGroupRouter};
use crate::error::{Error, Result};
use crate::io::{SinkIo, Source};
use crate::operators::{
    AnyOp, BoxOp, Chunk, Collector, Op, SideOutput, SideWriter, TaggedUnion, Target, downcast, erase,
};
use crate::time::element::{self, Header};
use crate::time::valve::WatermarkValve;
use crate::time::{TaskTime, TimeEvent};
pub use crate::types::TaskMetrics;
use crate::types::Wait;

/// What a TaskManager gives a task: which subtask it is and its shuffle endpoints.
#[derive(Default)]
pub struct TaskContext {
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

/// Hash of a record's key (a key selector followed by the stable key hash).
pub(crate) type KeyHasher<T> = Arc<dyn Fn(&T) -> u32 + Send + Sync>;

/// How one output of a vertex routes records (from the JobGraph edge).
#[derive(Clone)]
pub(crate) struct OutputRoute {
    pub partitioner: Partitioner,
    /// `KeyHasher<T>` of the producing stream, for `Partitioner::Hash`.
    pub key: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Key groups of the consumer.
    pub max_parallelism: u32,
    /// Which of the vertex's outputs (partition writers) the route feeds.
    pub index: usize,
}

/// What every record writer of a task is built with.
#[derive(Clone)]
pub(crate) struct WriterSetup {
    /// Per vertex output (partition writer): its subpartitions.
    pub subpartitions: Vec<u32>,
    pub subtask: u32,
    pub parallelism: u32,
    pub buffer_size: usize,
    pub flush_each_record: bool,
    pub metrics: Arc<TaskMetrics>,
    pub time: Option<Arc<TaskTime>>,
}

enum Router<T> {
    /// Always this subpartition (forward).
    Fixed(u32),
    /// Round robin over `start..start + len` (rebalance: all; rescale: the pointwise targets).
    RoundRobin {
        next: u32,
        start: u32,
        len: u32,
    },
    Broadcast(u32),
    Hash {
        key: KeyHasher<T>,
        groups: KeyGroupRouter,
    },
}

struct OutputState<T> {
    index: usize,
    router: Router<T>,
    buffers: Vec<Vec<u8>>,
}

/// The tail of a chain that feeds the vertex's outputs: serialises each record once and appends
/// it to the buffers of the subpartitions it is routed to; a buffer holds whole records and is
/// handed on when the next record would not fit.
pub(crate) struct RecordWriter<T> {
    outputs: Vec<OutputState<T>>,
    scratch: Vec<u8>,
    pending: Vec<Chunk>,
    buffer_size: usize,
    flush_each_record: bool,
    count: u64,
    metrics: Arc<TaskMetrics>,
    /// A timed job's writer: each record goes out as a stream element with its timestamp, and
    /// watermarks and status go to every subpartition in order with the records.
    time: Option<Arc<TaskTime>>,
}

/// Consumers `[start, end)` a producer subtask feeds on a pointwise edge (Flink's
/// `EdgeManagerBuildUtil.connectPointwise`).
pub(crate) fn pointwise_targets(producer: u32, producers: u32, consumers: u32) -> (u32, u32) {
    let (p, sp, tp) = (u64::from(producer), u64::from(producers), u64::from(consumers));
    if sp == tp {
        (producer, producer + 1)
    } else if sp > tp {
        let i = (0..tp)
            .find(|&i| i * sp / tp <= p && p < (i + 1) * sp / tp)
            .unwrap_or(0);
        (i as u32, i as u32 + 1)
    } else {
        ((p * tp).div_ceil(sp) as u32, ((p + 1) * tp).div_ceil(sp) as u32)
    }
}

impl<T: Data> RecordWriter<T> {
    fn new(routes: &[OutputRoute], setup: &WriterSetup) -> Result<Self> {
        let (subtask, parallelism) = (setup.subtask, setup.parallelism);
        let mut outputs = Vec::with_capacity(routes.len());
        for route in routes {
            let index = route.index;
            let n = setup
                .subpartitions
                .get(index)
                .copied()
                .ok_or_else(|| Error::Graph(format!("no vertex output {index}")))?
                .max(1);
            let router = match route.partitioner {
                Partitioner::Forward | Partitioner::Rescale => {
                    let (start, end) = pointwise_targets(subtask, parallelism, n);
                    let (start, end) = if end > n || start >= end {
                        (subtask % n, subtask % n + 1)
                    } else {
                        (start, end)
                    };
                    if route.partitioner == Partitioner::Forward || end - start == 1 {
                        Router::Fixed(start)
                    } else {
                        Router::RoundRobin {
                            next: 0,
                            start,
                            len: end - start,
                        }
                    }
                }
                Partitioner::Rebalance => Router::RoundRobin {
                    next: subtask % n,
                    start: 0,
                    len: n,
                },
                Partitioner::Broadcast => Router::Broadcast(n),
                Partitioner::Hash => {
                    let key = route
                        .key
                        .clone()
                        .and_then(|k| k.downcast::<KeyHasher<T>>().ok())
                        .ok_or_else(|| {
                            Error::Graph("hash edge without a key selector of this type".into())
                        })?;
                    Router::Hash {
                        key: (*key).clone(),
                        groups: KeyGroupRouter::new(route.max_parallelism.max(n), n),
                    }
                }
            };
            outputs.push(OutputState {
                index,
                router,
                buffers: (0..n).map(|_| Vec::new()).collect(),
            });
        }
        Ok(RecordWriter {
            outputs,
            scratch: Vec::new(),
            pending: Vec::new(),
            buffer_size: setup.buffer_size.max(1),
            flush_each_record: setup.flush_each_record,
            count: 0,
            metrics: setup.metrics.clone(),
            time: setup.time.clone(),
        })
    }
}

/// Bytes a shuffle buffer is allocated with beyond its size, for the one record that overflows it.
const RECORD_OVERFLOW_ROOM: usize = 1024;

/// Writes one record into a subpartition's buffer with `write` and ships full buffers to `pending`.
/// A record that overflows a non-empty buffer moves to the start of the next one, so every shipped
/// buffer holds whole records and at most `size` bytes unless one record alone is larger.
#[allow(clippy::too_many_arguments)]
fn write_record(
    buffers: &mut [Vec<u8>],
    index: usize,
    subpartition: u32,
    size: usize,
    flush_each_record: bool,
    pending: &mut Vec<Chunk>,
    write: impl FnOnce(&mut Vec<u8>),
) {
    let mut ship = |bytes: Vec<u8>| {
        pending.push(Chunk {
            target: Target::Output(index),
            subpartition,
            bytes: Bytes::from(bytes),
        })
    };
    let buf = &mut buffers[subpartition as usize];
    if buf.capacity() == 0 {
        // Room for the record that overflows a full buffer before it moves to the next one:
        // without it nearly every buffer was reallocated (and copied) to twice its size.
        buf.reserve(size + RECORD_OVERFLOW_ROOM);
    }
    let start = buf.len();
    write(buf);
    if start > 0 && buf.len() > size {
        let mut next = Vec::with_capacity(size.max(buf.len() - start));
        next.extend_from_slice(&buf[start..]);
        buf.truncate(start);
        ship(std::mem::replace(buf, next));
    }
    if flush_each_record || buf.len() >= size {
        ship(std::mem::take(buf));
    }
}

impl<T: Data> RecordWriter<T> {
    /// The one subpartition a record goes to, for every router but broadcast.
    fn route(router: &mut Router<T>, record: &T) -> Option<u32> {
        match router {
            Router::Fixed(sp) => Some(*sp),
            Router::RoundRobin { next, start, len } => {
                let sp = *start + *next;
                *next = (*next + 1) % *len;
                Some(sp)
            }
            Router::Broadcast(_) => None,
            Router::Hash { key, groups } => Some(groups.subtask(key(record))),
        }
    }
}

impl<T: Data> Collector<T> for RecordWriter<T> {
    fn collect(&mut self, record: T) {
        self.write(&record)
    }
}

impl<T: Data> RecordWriter<T> {
    fn write(&mut self, record: &T) {
        self.count += 1;
        let (size, each) = (self.buffer_size, self.flush_each_record);
        let timestamp = self.time.as_ref().map(|t| t.timestamp());
        // The common case, one output and one target: no intermediate copy of the record.
        if let [out] = self.outputs.as_mut_slice()
            && let Some(sp) = Self::route(&mut out.router, record)
        {
            let encode = |b: &mut Vec<u8>| {
                if let Some(ts) = timestamp {
                    element::write_record_header(b, ts);
                }
                record.encode(b)
            };
            write_record(
                &mut out.buffers,
                out.index,
                sp,
                size,
                each,
                &mut self.pending,
                encode,
            );
            return;
        }
        self.scratch.clear();
        if let Some(ts) = timestamp {
            element::write_record_header(&mut self.scratch, ts);
        }
        record.encode(&mut self.scratch);
        for out in &mut self.outputs {
            let targets = match Self::route(&mut out.router, record) {
                Some(sp) => sp..sp + 1,
                None => match out.router {
                    Router::Broadcast(n) => 0..n,
                    _ => 0..0,
                },
            };
            let encoded = self.scratch.as_slice();
            for sp in targets {
                let copy = |b: &mut Vec<u8>| b.extend_from_slice(encoded);
                write_record(
                    &mut out.buffers,
                    out.index,
                    sp,
                    size,
                    each,
                    &mut self.pending,
                    copy,
                );
            }
        }
    }
}

impl<T: Data> Op<T> for RecordWriter<T> {
    fn takes_reused(&self) -> bool {
        true
    }

    fn collect_reused(&mut self, record: &mut T) {
        self.write(record)
    }

    fn on_time(&mut self, event: TimeEvent) {
        if self.time.is_none() || matches!(event, TimeEvent::ProcessingTime(_)) {
            return;
        }
        let (size, each) = (self.buffer_size, self.flush_each_record);
        for out in &mut self.outputs {
            for sp in 0..out.buffers.len() as u32 {
                let write = |b: &mut Vec<u8>| element::write_event(b, event);
                write_record(
                    &mut out.buffers,
                    out.index,
                    sp,
                    size,
                    each,
                    &mut self.pending,
                    write,
                );
            }
        }
    }

    fn finish(&mut self) {}

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        if flush {
            for o in &mut self.outputs {
                for (sp, buf) in o.buffers.iter_mut().enumerate() {
                    if !buf.is_empty() {
                        self.pending.push(Chunk {
                            target: Target::Output(o.index),
                            subpartition: sp as u32,
                            bytes: Bytes::from(std::mem::take(buf)),
                        });
                    }
                }
            }
        }
        out.append(&mut self.pending);
        self.metrics.add_out(std::mem::take(&mut self.count));
    }

    fn snapshot(&mut self, _checkpoint: u64, _out: &mut ChainSnapshot) -> Result<()> {
        Ok(())
    }

    fn failure(&mut self) -> Option<String> {
        None
    }
}

/// Operations on a stream's record type, erased once per stream node.
pub(crate) trait StreamType: Send + Sync {
    /// The tail of a chain writing the vertex outputs `routes`.
    fn writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<AnyOp>;
    /// An operator's writer of one side output, read by the vertex outputs `routes`.
    fn side_writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<Box<dyn SideOutput>>;
    /// The decoder of a vertex input of `channels` channels (their watermarks combine).
    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        channels: usize,
    ) -> Result<Box<dyn Head>>;
}

pub(crate) struct TypeOf<T>(pub PhantomData<fn() -> T>);

/// The input side of a two-input operator: its channels carry records of its first input's type
/// or of its second's, and the operator takes both as one [`TaggedUnion`] stream.
pub(crate) trait TwoInputType: Send + Sync {
    /// The decoder of the operator's input gates; `sides[channel]` says which input a channel
    /// (numbered across the gates) feeds.
    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        sides: Vec<u8>,
    ) -> Result<Box<dyn Head>>;
}

pub(crate) struct TwoInputOf<A, B>(pub PhantomData<fn() -> (A, B)>);

fn decode_side<A: Data, B: Data>(side: u8, input: &mut &[u8]) -> Result<TaggedUnion<A, B>> {
    Ok(match side {
        0 => TaggedUnion::One(A::decode(input)?),
        _ => TaggedUnion::Two(B::decode(input)?),
    })
}

impl<A: Data, B: Data> TwoInputType for TwoInputOf<A, B> {
    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        sides: Vec<u8>,
    ) -> Result<Box<dyn Head>> {
        // One valve over the channels of both inputs: the minimum over them is the minimum of the
        // two inputs' watermarks, and an idle input drops out of it as an idle channel does.
        let time = time.map(|t| (t, WatermarkValve::new(sides.len().max(1))));
        let mut head = InputHead::new(downcast::<TaggedUnion<A, B>>(chain)?, metrics, time);
        head.sides = Some((sides, decode_side::<A, B>));
        Ok(Box::new(head))
    }
}

impl<T: Data> StreamType for TypeOf<T> {
    fn writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<AnyOp> {
        Ok(erase::<T>(Box::new(RecordWriter::<T>::new(routes, setup)?)))
    }

    fn side_writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<Box<dyn SideOutput>> {
        Ok(Box::new(SideWriter::<T>(Box::new(RecordWriter::<T>::new(
            routes, setup,
        )?))))
    }

    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        channels: usize,
    ) -> Result<Box<dyn Head>> {
        let time = time.map(|t| (t, WatermarkValve::new(channels)));
        Ok(Box::new(InputHead::new(downcast::<T>(chain)?, metrics, time)))
    }
}

/// The start of a chain: a source, or the decoder of an input gate's buffers.
#[async_trait]
pub(crate) trait Head: Send {
    /// Sources: push the next batch; `Ok(false)` when exhausted.
    async fn produce(&mut self) -> Result<bool>;
    /// Inputs: decode one buffer's records (and, in a timed job, its time events) into the chain.
    fn push_buffer(&mut self, channel: usize, buffer: &[u8]) -> Result<()>;
    /// A time event for the whole chain: a processing-time tick, end of input's MAX watermark.
    fn on_time(&mut self, event: TimeEvent);
    fn finish(&mut self);
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>);
    /// The chain's snapshot (and a source's position) at a barrier, between batches.
    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()>;
    fn failure(&mut self) -> Option<String>;
}

pub(crate) struct InputHead<T> {
    chain: BoxOp<T>,
    metrics: Arc<TaskMetrics>,
    /// The chain takes borrowed records: each one is decoded into `record`, reusing its buffers.
    reuse: bool,
    record: Option<T>,
    /// A timed job: the task's record timestamp and how its channels' watermarks combine.
    time: Option<(Arc<TaskTime>, WatermarkValve)>,
    events: Vec<TimeEvent>,
    /// A two-input operator's head: the input of each channel and how its records decode.
    sides: Option<(Vec<u8>, SideDecoder<T>)>,
}

type SideDecoder<T> = fn(u8, &mut &[u8]) -> Result<T>;

impl<T: Data> InputHead<T> {
    fn new(
        chain: BoxOp<T>,
        metrics: Arc<TaskMetrics>,
        time: Option<(Arc<TaskTime>, WatermarkValve)>,
    ) -> Self {
        InputHead {
            reuse: chain.takes_reused(),
            chain,
            metrics,
            record: None,
            time,
            events: Vec::new(),
            sides: None,
        }
    }

    #[inline]
    fn push_record(&mut self, input: &mut &[u8], side: Option<(u8, SideDecoder<T>)>) -> Result<()> {
        if let Some((side, decode)) = side {
            self.chain.collect(decode(side, input)?);
        } else if self.reuse {
            let record = match &mut self.record {
                Some(record) => {
                    record.decode_into(input)?;
                    record
                }
                None => self.record.insert(T::decode(input)?),
            };
            self.chain.collect_reused(record);
        } else {
            self.chain.collect(T::decode(input)?);
        }
        Ok(())
    }

    /// A time event from channel `channel`: what the valve lets through goes down the chain.
    fn channel_event(&mut self, channel: usize, event: TimeEvent) {
        let Some((_, valve)) = self.time.as_mut() else {
            return;
        };
        valve.input(channel, event, &mut self.events);
        let watermark = valve.current();
        for event in self.events.drain(..) {
            if let TimeEvent::Watermark(_) = event {
                self.metrics.set_watermark(watermark);
            }
            self.chain.on_time(event);
        }
    }
}

#[async_trait]
impl<T: Data> Head for InputHead<T> {
    async fn produce(&mut self) -> Result<bool> {
        Err(Error::Graph("an input-fed chain has no source".into()))
    }

    fn push_buffer(&mut self, channel: usize, buffer: &[u8]) -> Result<()> {
        let mut input = buffer;
        let mut n = 0u64;
        let side = match &self.sides {
            Some((sides, decode)) => Some((
                *sides.get(channel).ok_or_else(|| {
                    Error::Graph(format!(
                        "channel {channel} of a two-input task with {}",
                        sides.len()
                    ))
                })?,
                *decode,
            )),
            None => None,
        };
        if let Some((time, _)) = &self.time {
            let time = time.clone();
            while !input.is_empty() {
                match element::read_header(&mut input)? {
                    Header::Record(ts) => {
                        time.set_timestamp(ts);
                        self.push_record(&mut input, side)?;
                        n += 1;
                    }
                    Header::Event(event) => self.channel_event(channel, event),
                }
            }
        } else {
            while !input.is_empty() {
                self.push_record(&mut input, side)?;
                n += 1;
            }
        }
        self.metrics.add_in(n);
        Ok(())
    }

    fn on_time(&mut self, event: TimeEvent) {
        if let TimeEvent::Watermark(w) = event {
            // End of input: every channel is at the end of event time.
            if self.time.as_ref().is_some_and(|(_, valve)| valve.current() >= w) {
                return;
            }
            self.metrics.set_watermark(w);
        }
        self.chain.on_time(event)
    }

    fn finish(&mut self) {
        self.chain.finish()
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.chain.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        self.chain.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.chain.failure()
    }
}

pub(crate) struct SourceHead<T, S> {
    pub source: S,
    pub chain: BoxOp<T>,
    pub metrics: Arc<TaskMetrics>,
    /// The last watermark the source's splits gave (sources that know their event time).
    pub watermark: i64,
}

#[async_trait]
impl<T: Data, S: Source<T>> Head for SourceHead<T, S> {
    async fn produce(&mut self) -> Result<bool> {
        let more = self.source.produce(&mut *self.chain).await?;
        if let Some(w) = self.source.watermark()
            && w > self.watermark
        {
            self.watermark = w;
            self.metrics.set_watermark(w);
            self.chain.on_time(TimeEvent::Watermark(w));
        }
        if let Some(n) = self.source.pending() {
            self.metrics
                .pending_records
                .store(n, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(more)
    }

    fn push_buffer(&mut self, _: usize, _: &[u8]) -> Result<()> {
        Err(Error::Graph("a source chain has no input".into()))
    }

    fn on_time(&mut self, event: TimeEvent) {
        self.chain.on_time(event)
    }

    fn finish(&mut self) {
        self.chain.finish()
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.chain.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        out.source = Some(self.source.position());
        self.chain.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.chain.failure()
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
            return Err(Error::State(failure));
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
    /// are fixed, the barrier goes downstream, and the snapshot to the TaskManager for upload.
    async fn checkpoint(&mut self, id: u64) -> Result<()> {
        self.flush(true).await?;
        let mut snapshot = ChainSnapshot {
            checkpoint: id,
            keyed: None,
            source: None,
            sink: None,
            broadcast: None,
        };
        self.head.snapshot(id, &mut snapshot)?;
        if let Some(sink) = self.sink.as_mut() {
            snapshot.sink = sink.pre_commit(id).await?;
        }
        for w in &mut self.outputs {
            self.metrics.waiting(Wait::Output, w.emit_barrier(id)).await?;
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
                Control::Trigger(id) | Control::Stop(id) => {
                    self.checkpoint(id).await?;
                    taken = Some(id);
                }
                Control::Complete(id) => {
                    if let Some(sink) = self.sink.as_mut() {
                        sink.commit(id).await?;
                    }
                    if taken.is_some_and(|t| id >= t) {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn control(&mut self, control: Control, is_source: bool) -> Result<()> {
        match control {
            Control::Trigger(id) | Control::Stop(id) if is_source => self.checkpoint(id).await,
            // Barriers reach other tasks through their inputs.
            Control::Trigger(_) | Control::Stop(_) => Ok(()),
            Control::Complete(id) => match self.sink.as_mut() {
                Some(sink) => sink.commit(id).await,
                None => Ok(()),
            },
        }
    }
}

impl Task {
    /// Runs the subtask to the end of its input; one [`PartitionStats`] per output, in output
    /// order. Cancel by dropping the future: nothing outlives it (a file sink then leaves only its
    /// `.inprogress` file behind).
    pub async fn run(self) -> Result<Vec<PartitionStats>> {
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
        match input {
            None => 'read: loop {
                while let Some(control) = task.checkpoints.try_recv() {
                    if let Control::Stop(id) = control {
                        task.checkpoint(id).await?;
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
                    let next = metrics.waiting(Wait::Input, gate.next());
                    tokio::pin!(next);
                    // The same `next` future is polled across timer ticks and control messages, so
                    // a gate whose `next` is not cancel-safe loses nothing.
                    loop {
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
                            r = &mut next => break r?,
                            control = task.checkpoints.recv() => task.control(control, false).await?,
                            _ = tick => {
                                task.flush(true).await?;
                                last_flush = Instant::now();
                            }
                            _ = time_tick => {
                                task.tick().await?;
                                last_tick = Instant::now();
                            }
                        }
                    }
                };
                match item {
                    None => break,
                    Some(GateItem::Barrier(id)) => task.checkpoint(id).await?,
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
        task.head.finish();
        task.flush(true).await?;
        if is_source {
            task.final_checkpoint(stopped_at).await?;
        }
        let Running { outputs, sink, .. } = task;
        let mut stats = Vec::with_capacity(outputs.len());
        for w in outputs {
            stats.push(w.finish().await?);
        }
        if let Some(s) = sink {
            s.close().await?;
        }
        tracing::debug!(vertex, "task finished");
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn pointwise_targets_match_the_scheduler() {
        assert_eq!(pointwise_targets(2, 3, 3), (2, 3));
        // 5 producers, 2 consumers: consumer 0 reads producers 0..2, consumer 1 reads 2..5.
        let got: Vec<_> = (0..5).map(|p| pointwise_targets(p, 5, 2).0).collect();
        assert_eq!(got, vec![0, 0, 1, 1, 1]);
        // 2 producers, 5 consumers: producer 0 feeds 0..3, producer 1 feeds 3..5.
        assert_eq!(pointwise_targets(0, 2, 5), (0, 3));
        assert_eq!(pointwise_targets(1, 2, 5), (3, 5));
    }

    #[test]
    fn buffers_hold_whole_records_and_respect_the_size() {
        let metrics = Arc::new(TaskMetrics::default());
        let route = OutputRoute {
            partitioner: Partitioner::Rebalance,
            key: None,
            max_parallelism: 128,
            index: 0,
        };
        let setup = WriterSetup {
            subpartitions: vec![2],
            subtask: 0,
            parallelism: 1,
            buffer_size: 16,
            flush_each_record: false,
            metrics: metrics.clone(),
            time: None,
        };
        let mut w = RecordWriter::<String>::new(&[route], &setup).expect("writer");
        for i in 0..20 {
            w.collect(format!("record-{i}"));
        }
        let mut out = Vec::new();
        w.drain(true, &mut out);
        let mut decoded = Vec::new();
        for c in &out {
            assert!(c.bytes.len() <= 16, "buffer of {} bytes", c.bytes.len());
            let mut input = &c.bytes[..];
            while !input.is_empty() {
                decoded.push((c.subpartition, String::decode(&mut input).expect("whole records")));
            }
        }
        assert_eq!(decoded.len(), 20);
        assert_eq!(decoded.iter().filter(|d| d.0 == 0).count(), 10, "round robin");
        assert_eq!(metrics.records_out.load(Ordering::Relaxed), 20);
    }
}
