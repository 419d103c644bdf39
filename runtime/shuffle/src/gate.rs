//! The consumer side: an [`InputGate`] reading every (channel, subpartition) through its own gRPC
//! stream, granting credit as the task takes buffers, merging streams in arrival order.
//!
//! One task per stream reads the stream and forwards buffers to the gate over one channel; a buffer
//! is counted in the environment's memory from the moment it is decoded until the gate hands it to
//! the task, and each stream has at most `buffers_per_channel` buffers outstanding, which is what
//! bounds the consumer side.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use floe_proto::channel::KeepAlive;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use crate::environment::Shared;
use crate::memory::TrackedBuffer;
use crate::partition::lock;
use crate::{
    Error, GateItem, InputChannelSpec, InputGate, OBJECT_STORAGE_ADDRESS, Result, ResultPartitionId,
};
use floe_proto::v1::read_request::Kind;
use floe_proto::v1::shuffle_client::ShuffleClient;
use floe_proto::v1::{OpenSubpartition, ReadRequest, ShuffleBuffer};
use floe_storage::ObjectStore;

/// Bounds a connection attempt to a peer that drops packets instead of refusing them.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Detects a producer TaskManager that vanished mid-stream (no FIN, no RST); long enough that a
/// short partition only stalls a stream.
const KEEP_ALIVE: KeepAlive = KeepAlive {
    interval: Duration::from_secs(10),
    timeout: Duration::from_secs(20),
};

/// What a stream task tells the gate.
#[derive(Debug)]
enum Event {
    /// The stream is open; credits for it go to this sender.
    Opened(usize, mpsc::UnboundedSender<ReadRequest>),
    Buffer(usize, TrackedBuffer),
    Barrier(usize, u64),
    Cancel(usize, u64),
    End(usize),
    Failed(Error),
}

#[derive(Debug)]
enum GateState {
    NotStarted,
    Running {
        events: mpsc::UnboundedReceiver<Event>,
        credits: Vec<Option<mpsc::UnboundedSender<ReadRequest>>>,
        remaining: usize,
        alignment: Alignment,
        /// Aborts the stream tasks when the gate is dropped.
        _tasks: JoinSet<()>,
    },
    Finished,
    Failed(String),
}

/// What a channel delivered, as the gate orders it.
#[derive(Debug)]
enum ChannelItem {
    Buffer(TrackedBuffer),
    Barrier(u64),
    Cancel(u64),
    End,
}

/// Barrier alignment (Flink's aligned checkpoints): which channels delivered the barrier being
/// aligned, and everything those channels delivered after it, held back in arrival order.
///
/// A blocked channel is not read past its barrier: its later buffers, barriers and end are held
/// and acted on only when the channel unblocks, in the order they came. So a newer barrier that
/// arrives on a blocked channel never overtakes data sent before it; when a newer checkpoint
/// subsumes an older alignment (the older one was aborted upstream), every channel unblocks and
/// its held items are replayed in order, which re-blocks it at its newer barrier. A held buffer's
/// credit goes out only when the task takes it, so a blocked channel holds at most its credit's
/// worth of buffers.
///
/// A cancel-checkpoint marker (the checkpoint was aborted, and some channel will never deliver
/// its barrier) ends the alignment of that checkpoint at once, as a newer barrier would; the
/// checkpoint's barriers that still come, and its markers on other channels, are passed over.
#[derive(Debug)]
struct Alignment {
    /// The barrier being aligned, as on the wire (a stop barrier's flag kept).
    checkpoint: Option<u64>,
    /// The newest checkpoint aligned or cancelled: its barriers and older ones are stragglers.
    done: u64,
    blocked: Vec<bool>,
    ended: Vec<bool>,
    held: std::collections::VecDeque<(usize, ChannelItem)>,
}

impl Alignment {
    fn new(streams: usize) -> Self {
        Alignment {
            checkpoint: None,
            done: 0,
            blocked: vec![false; streams],
            ended: vec![false; streams],
            held: std::collections::VecDeque::new(),
        }
    }

    /// Channel `index` delivered the cancel-checkpoint marker of `id`; `Some(id)` the first time
    /// (the task sends it on), `None` for a checkpoint aligned or cancelled already, or older than
    /// the one being aligned.
    fn cancel(&mut self, id: u64) -> Option<u64> {
        let aligning = self.checkpoint.map(crate::checkpoint_of_barrier);
        if id <= self.done || aligning.is_some_and(|current| current > id) {
            return None;
        }
        self.done = id;
        if aligning.is_some() {
            // Every channel flows again; what the blocked ones hold is replayed in order first.
            self.checkpoint = None;
            self.blocked.iter_mut().for_each(|b| *b = false);
        }
        Some(id)
    }

    /// Channel `index` delivered `item`: held when the channel is blocked, otherwise handed back to
    /// be acted on now.
    fn offer(&mut self, index: usize, item: ChannelItem) -> Option<ChannelItem> {
        if self.blocked[index] {
            self.held.push_back((index, item));
            None
        } else {
            Some(item)
        }
    }

    /// The oldest held item of a channel that no longer blocks, to act on before anything new.
    fn next_released(&mut self) -> Option<(usize, ChannelItem)> {
        let at = self.held.iter().position(|(i, _)| !self.blocked[*i])?;
        self.held.remove(at)
    }

    /// Channel `index` delivered barrier `wire`; `Some(wire)` when that completes the alignment.
    fn barrier(&mut self, index: usize, wire: u64) -> Option<u64> {
        let id = crate::checkpoint_of_barrier(wire);
        if id <= self.done {
            return None; // a straggler of a checkpoint aligned or cancelled
        }
        match self.checkpoint.map(crate::checkpoint_of_barrier) {
            Some(current) if id < current => return None, // an aborted checkpoint's straggler
            Some(current) if id > current => {
                // The aligned checkpoint was abandoned upstream: start over for the newer one.
                // Channels blocked at the older barrier flow again; what they hold is replayed
                // in order first (`next_released`), so their own newer barrier blocks them again
                // only after the data that preceded it.
                self.blocked.iter_mut().for_each(|b| *b = false);
                self.checkpoint = Some(wire);
            }
            Some(_) => {}
            None => self.checkpoint = Some(wire),
        }
        self.blocked[index] = true;
        self.complete()
    }

    fn end(&mut self, index: usize) -> Option<u64> {
        self.ended[index] = true;
        self.complete()
    }

    /// Every channel still open delivered the barrier: unblock.
    fn complete(&mut self) -> Option<u64> {
        let id = self.checkpoint?;
        let aligned = self.blocked.iter().zip(&self.ended).all(|(b, e)| *b || *e);
        if !aligned {
            return None;
        }
        self.checkpoint = None;
        self.done = crate::checkpoint_of_barrier(id);
        self.blocked.iter_mut().for_each(|b| *b = false);
        Some(id)
    }
}

fn grant_credit(credits: &[Option<mpsc::UnboundedSender<ReadRequest>>], index: usize) {
    if let Some(sender) = &credits[index] {
        // The stream may have just failed; its task reports that.
        let _ = sender.send(ReadRequest {
            kind: Some(Kind::Credit(1)),
        });
    }
}

/// The [`InputGate`] of [`crate::ShuffleEnvironment::create_input_gate`].
#[derive(Debug)]
pub(crate) struct RemoteInputGate {
    shared: Arc<Shared>,
    channels: Vec<InputChannelSpec>,
    storage: Option<ObjectStore>,
    state: GateState,
    usage: Arc<GateUsage>,
}

/// Buffers the gate's streams delivered and the task has not taken yet (held by an alignment
/// included), against the credit all its streams may have out.
#[derive(Debug)]
struct GateUsage {
    queued: AtomicUsize,
    capacity: usize,
}

impl crate::PoolUsage for GateUsage {
    fn usage(&self) -> (usize, usize) {
        (
            self.queued.load(Ordering::Relaxed).min(self.capacity),
            self.capacity,
        )
    }
}

impl RemoteInputGate {
    pub(crate) fn new(
        shared: Arc<Shared>,
        channels: Vec<InputChannelSpec>,
        storage: Option<ObjectStore>,
    ) -> Self {
        let streams: usize = channels.iter().map(|c| c.subpartitions.len()).sum();
        let usage = Arc::new(GateUsage {
            queued: AtomicUsize::new(0),
            capacity: streams * shared.config.buffers_per_channel.max(1) as usize,
        });
        RemoteInputGate {
            shared,
            channels,
            storage,
            state: GateState::NotStarted,
            usage,
        }
    }

    fn start(&mut self) {
        let (tx, events) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        let mut streams = 0;
        let local = lock(&self.shared.local_address).clone();
        for spec in &self.channels {
            for subpartition in spec.subpartitions.clone() {
                let stream = Stream {
                    shared: self.shared.clone(),
                    partition: spec.partition.clone(),
                    address: spec.address.clone(),
                    subpartition,
                    index: streams,
                    usage: self.usage.clone(),
                };
                // A stream of a local pipelined partition runs where the gate is read (the task's
                // own thread): its buffers then cross threads once, from the producer's queue, and
                // its credits not at all. Every other stream runs on the process runtime: a local
                // blocking partition's file reads there overlap the task's work (on the task's
                // thread they would wait for it), and streams over a connection (gRPC to a peer,
                // object storage) share that runtime's pooled connections with other tasks.
                let is_local = local.as_deref() == Some(spec.address.as_str());
                if is_local && !self.shared.is_blocking(&spec.partition) {
                    tasks.spawn(stream.run_local(tx.clone()));
                } else {
                    let run: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
                        if spec.address == OBJECT_STORAGE_ADDRESS {
                            Box::pin(stream.run_remote(self.storage.clone(), tx.clone()))
                        } else if is_local {
                            Box::pin(stream.run_local(tx.clone()))
                        } else {
                            Box::pin(stream.run(tx.clone()))
                        };
                    match &self.shared.io {
                        Some(io) => tasks.spawn_on(run, io),
                        None => tasks.spawn(run),
                    };
                }
                streams += 1;
            }
        }
        self.state = if streams == 0 {
            GateState::Finished
        } else {
            GateState::Running {
                events,
                credits: (0..streams).map(|_| None).collect(),
                remaining: streams,
                alignment: Alignment::new(streams),
                _tasks: tasks,
            }
        };
    }
}

#[async_trait]
impl InputGate for RemoteInputGate {
    fn num_channels(&self) -> usize {
        self.channels.iter().map(|c| c.subpartitions.len()).sum()
    }

    fn pool_usage(&self) -> Option<Arc<dyn crate::PoolUsage>> {
        Some(self.usage.clone())
    }

    async fn next(&mut self) -> Result<Option<GateItem>> {
        loop {
            let (events, credits, remaining, alignment) = match &mut self.state {
                GateState::NotStarted => {
                    self.start();
                    continue;
                }
                GateState::Finished => return Ok(None),
                GateState::Failed(message) => return Err(Error::GateFailed(message.clone())),
                GateState::Running {
                    events,
                    credits,
                    remaining,
                    alignment,
                    ..
                } => (events, credits, remaining, alignment),
            };
            // What channels that no longer block delivered while blocked goes first, in order.
            let (index, item) = match alignment.next_released() {
                Some(released) => released,
                None => {
                    if *remaining == 0 && alignment.held.is_empty() {
                        self.state = GateState::Finished;
                        return Ok(None);
                    }
                    let (index, item) = match events.recv().await {
                        Some(Event::Opened(index, sender)) => {
                            credits[index] = Some(sender);
                            continue;
                        }
                        Some(Event::Buffer(index, buffer)) => (index, ChannelItem::Buffer(buffer)),
                        Some(Event::Barrier(index, id)) => (index, ChannelItem::Barrier(id)),
                        Some(Event::Cancel(index, id)) => (index, ChannelItem::Cancel(id)),
                        Some(Event::End(index)) => (index, ChannelItem::End),
                        Some(Event::Failed(error)) => {
                            // Dropping the state aborts the other streams: the task fails as a whole.
                            self.state = GateState::Failed(error.to_string());
                            return Err(error);
                        }
                        None => {
                            let message =
                                "every channel stopped without reaching end of partition".to_owned();
                            self.state = GateState::Failed(message.clone());
                            return Err(Error::GateFailed(message));
                        }
                    };
                    match alignment.offer(index, item) {
                        Some(item) => (index, item),
                        None => continue,
                    }
                }
            };
            match item {
                ChannelItem::Buffer(buffer) => {
                    // Uncounted before the credit goes out, or the next buffer may arrive first.
                    let data = buffer.into_bytes();
                    self.usage.queued.fetch_sub(1, Ordering::Relaxed);
                    grant_credit(credits, index);
                    return Ok(Some(GateItem::Buffer { channel: index, data }));
                }
                ChannelItem::Barrier(id) => {
                    grant_credit(credits, index);
                    if let Some(id) = alignment.barrier(index, id) {
                        return Ok(Some(GateItem::Barrier(id)));
                    }
                }
                ChannelItem::Cancel(id) => {
                    grant_credit(credits, index);
                    if let Some(id) = alignment.cancel(id) {
                        return Ok(Some(GateItem::Cancel(id)));
                    }
                }
                ChannelItem::End => {
                    credits[index] = None;
                    *remaining -= 1;
                    if let Some(id) = alignment.end(index) {
                        return Ok(Some(GateItem::Barrier(id)));
                    }
                }
            }
        }
    }
}

/// Where an in-process stream's buffers come from.
enum Source {
    Local(crate::partition::SubpartitionReader),
    Remote(Box<crate::remote::RemoteSubpartitionReader>),
}

impl Source {
    async fn next(&mut self) -> Result<crate::partition::ReadItem> {
        use crate::partition::ReadItem;
        match self {
            Source::Local(reader) => reader.next().await,
            Source::Remote(reader) => Ok(reader.next().await?.map_or(ReadItem::End, ReadItem::Data)),
        }
    }
}

/// One (channel, subpartition) stream.
#[derive(Debug)]
struct Stream {
    shared: Arc<Shared>,
    partition: ResultPartitionId,
    address: String,
    subpartition: u32,
    index: usize,
    /// The gate's count of buffers delivered and not yet taken.
    usage: Arc<GateUsage>,
}

impl Stream {
    async fn run(self, events: mpsc::UnboundedSender<Event>) {
        if let Err(error) = self.read(&events).await {
            tracing::debug!(%error, "shuffle input channel failed");
            let _ = events.send(Event::Failed(self.unavailable(error)));
        }
    }

    /// A channel that failed could not read its partition: named, so failover restarts its
    /// producer (Flink's PartitionNotFoundException).
    fn unavailable(&self, error: Error) -> Error {
        Error::PartitionUnavailable {
            partition: self.partition.clone(),
            source: Box::new(error),
        }
    }

    /// The same protocol as a remote stream (open, then one buffer per credit), for a partition of
    /// this TaskManager: read from its queue or file in process, without the gRPC hop.
    async fn run_local(self, events: mpsc::UnboundedSender<Event>) {
        if let Err(error) = self.read_local(&events).await {
            tracing::debug!(%error, "local shuffle input channel failed");
            let _ = events.send(Event::Failed(self.unavailable(error)));
        }
    }

    async fn read_local(&self, events: &mpsc::UnboundedSender<Event>) -> Result<()> {
        let config = &self.shared.config;
        let deadline = Instant::now() + config.request_timeout;
        let mut backoff = config.request_backoff_initial;
        // Pipelined consumers may start before their producer registered the partition.
        let partition = loop {
            if let Some(p) = lock(&self.shared.partitions).get(&self.partition).cloned() {
                break p;
            }
            if Instant::now() + backoff > deadline {
                return Err(Error::PartitionNotFound(self.partition.to_string()));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(config.request_backoff_max);
        };
        let reader = partition.open_reader(self.subpartition)?;
        self.pump(events, Source::Local(reader)).await
    }

    /// A remote partition: its subpartition from object storage, served with the same credit protocol.
    async fn run_remote(self, storage: Option<ObjectStore>, events: mpsc::UnboundedSender<Event>) {
        let result = match &storage {
            None => Err(Error::NoStorage(self.partition.to_string())),
            Some(store) => {
                // Ranged reads of one buffer's size: a remote stream holds about one buffer more
                // than its credit, never the whole subpartition.
                let reader = crate::remote::RemoteSubpartitionReader::new(
                    store.clone(),
                    self.partition.clone(),
                    self.subpartition,
                    self.shared.config.buffer_size,
                );
                self.pump(&events, Source::Remote(Box::new(reader))).await
            }
        };
        if let Err(error) = result {
            tracing::debug!(%error, "remote shuffle input channel failed");
            let _ = events.send(Event::Failed(self.unavailable(error)));
        }
    }

    /// Opens the stream towards the gate and hands it the source's buffers, one per credit.
    async fn pump(&self, events: &mpsc::UnboundedSender<Event>, mut source: Source) -> Result<()> {
        use crate::partition::ReadItem;
        let config = &self.shared.config;
        let (credit_tx, mut credit_rx) = mpsc::unbounded_channel::<ReadRequest>();
        if events.send(Event::Opened(self.index, credit_tx)).is_err() {
            return Ok(());
        }
        let mut credit = u64::from(config.buffers_per_channel.max(1));
        loop {
            while credit == 0 {
                match credit_rx.recv().await {
                    Some(ReadRequest {
                        kind: Some(Kind::Credit(n)),
                    }) => credit += u64::from(n),
                    Some(_) => {}
                    None => return Ok(()), // the gate is gone
                }
            }
            match source.next().await? {
                ReadItem::Data(data) => {
                    credit -= 1;
                    let buffer = TrackedBuffer::new(data, self.shared.memory.clone(), None);
                    self.usage.queued.fetch_add(1, Ordering::Relaxed);
                    if events.send(Event::Buffer(self.index, buffer)).is_err() {
                        return Ok(());
                    }
                }
                ReadItem::Barrier(id) => {
                    credit -= 1;
                    if events.send(Event::Barrier(self.index, id)).is_err() {
                        return Ok(());
                    }
                }
                ReadItem::Cancel(id) => {
                    credit -= 1;
                    if events.send(Event::Cancel(self.index, id)).is_err() {
                        return Ok(());
                    }
                }
                ReadItem::End => {
                    let _ = events.send(Event::End(self.index));
                    return Ok(());
                }
            }
        }
    }

    async fn read(&self, events: &mpsc::UnboundedSender<Event>) -> Result<()> {
        let (credits, mut response) = self.open_with_retry().await?;
        if events.send(Event::Opened(self.index, credits)).is_err() {
            return Ok(()); // the gate is gone
        }
        loop {
            let message = match response.message().await {
                Ok(Some(message)) => message,
                Ok(None) => return Err(self.remote("stream ended before end of partition")),
                Err(status) => {
                    self.forget_channel_if_broken(&status);
                    return Err(self.status_error(status));
                }
            };
            let ShuffleBuffer {
                data,
                end_of_partition,
                barrier,
                cancel,
            } = message;
            if barrier != 0 && events.send(Event::Barrier(self.index, barrier)).is_err() {
                return Ok(());
            }
            if cancel != 0 && events.send(Event::Cancel(self.index, cancel)).is_err() {
                return Ok(());
            }
            if !data.is_empty() {
                let buffer = TrackedBuffer::new(data, self.shared.memory.clone(), None);
                self.usage.queued.fetch_add(1, Ordering::Relaxed);
                if events.send(Event::Buffer(self.index, buffer)).is_err() {
                    return Ok(());
                }
            }
            if end_of_partition {
                let _ = events.send(Event::End(self.index));
                return Ok(());
            }
        }
    }

    /// Opens the stream, retrying what may heal (producer not up or not registered yet) with
    /// exponential backoff until `request_timeout`.
    async fn open_with_retry(
        &self,
    ) -> Result<(mpsc::UnboundedSender<ReadRequest>, Streaming<ShuffleBuffer>)> {
        let config = &self.shared.config;
        let deadline = Instant::now() + config.request_timeout;
        let mut backoff = config.request_backoff_initial;
        loop {
            match self.open().await {
                Ok(opened) => return Ok(opened),
                Err(error) if error.is_retryable() && Instant::now() < deadline => {
                    tracing::debug!(%error, ?backoff, "retrying shuffle input channel");
                    let wait = backoff.min(deadline.saturating_duration_since(Instant::now()));
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(config.request_backoff_max);
                }
                Err(Error::PartitionNotFound(_)) => {
                    return Err(self.remote(&format!(
                        "the partition was not registered there within {:?}",
                        config.request_timeout
                    )));
                }
                Err(error) => return Err(error),
            }
        }
    }

    async fn open(&self) -> Result<(mpsc::UnboundedSender<ReadRequest>, Streaming<ShuffleBuffer>)> {
        let channel = self.channel().await?;
        let (requests, rx) = mpsc::unbounded_channel();
        let open = OpenSubpartition {
            partition: Some(self.partition.clone().into()),
            subpartition: self.subpartition,
            initial_credit: self.shared.config.buffers_per_channel.max(1),
        };
        // Queued before the call so the server sees it first; cannot fail, `rx` is alive.
        let _ = requests.send(ReadRequest {
            kind: Some(Kind::Open(open)),
        });
        let mut client = ShuffleClient::new(channel).max_decoding_message_size(usize::MAX);
        match client.read_subpartition(UnboundedReceiverStream::new(rx)).await {
            Ok(response) => Ok((requests, response.into_inner())),
            Err(status) => {
                self.forget_channel_if_broken(&status);
                Err(self.status_error(status))
            }
        }
    }

    /// The shared connection to the producer's TaskManager, connecting if there is none.
    async fn channel(&self) -> Result<Channel> {
        if let Some(channel) = lock(&self.shared.channels).get(&self.address) {
            return Ok(channel.clone());
        }
        let unreachable = |source| Error::Unreachable {
            address: self.address.clone(),
            partition: self.partition.to_string(),
            source,
        };
        let endpoint =
            floe_proto::channel::endpoint(&self.address, CONNECT_TIMEOUT, KEEP_ALIVE).map_err(unreachable)?;
        let channel = endpoint.connect().await.map_err(unreachable)?;
        // Another stream may have connected meanwhile: keep one connection per peer.
        Ok(lock(&self.shared.channels)
            .entry(self.address.clone())
            .or_insert(channel)
            .clone())
    }

    fn forget_channel_if_broken(&self, status: &Status) {
        if matches!(status.code(), Code::Unavailable | Code::Unknown | Code::Internal) {
            lock(&self.shared.channels).remove(&self.address);
        }
    }

    fn remote(&self, message: &str) -> Error {
        Error::Remote {
            partition: format!("{} subpartition {}", self.partition, self.subpartition),
            address: self.address.clone(),
            message: message.to_owned(),
        }
    }

    fn status_error(&self, status: Status) -> Error {
        let partition = format!("{} subpartition {}", self.partition, self.subpartition);
        match status.code() {
            Code::NotFound => Error::PartitionNotFound(partition),
            Code::Unavailable => Error::Unavailable {
                partition,
                address: self.address.clone(),
                message: status.message().to_owned(),
            },
            code => Error::Remote {
                partition,
                address: self.address.clone(),
                message: format!("{code:?}: {}", status.message()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Alignment;

    #[test]
    fn a_barrier_is_aligned_once_every_open_channel_delivered_it() {
        let mut a = Alignment::new(3);
        assert_eq!(a.barrier(0, 1), None);
        assert!(a.blocked[0] && !a.blocked[1], "channel 0 waits for the others");
        assert_eq!(a.barrier(2, 1), None);
        // Channel 1 ends instead of sending the barrier: nothing more can come from it.
        assert_eq!(a.end(1), Some(1));
        assert!(a.blocked.iter().all(|b| !b), "aligned: every channel flows again");
        // A newer barrier abandons the alignment of an older one; a straggler of the older is ignored.
        assert_eq!(a.barrier(0, 2), None);
        assert_eq!(a.barrier(2, 3), None);
        assert!(!a.blocked[0] && a.blocked[2]);
        assert_eq!(a.barrier(0, 2), None);
        assert_eq!(a.barrier(0, 3), Some(3));
    }

    /// Issue 31, item 9: the cancel-checkpoint marker of an aborted checkpoint releases its
    /// alignment at once instead of at the next checkpoint's barrier.
    #[test]
    fn a_cancel_marker_ends_the_alignment_of_its_checkpoint_once() {
        let mut a = Alignment::new(3);
        assert_eq!(a.barrier(0, 5), None);
        assert_eq!(a.cancel(5), Some(5));
        assert!(a.blocked.iter().all(|b| !b), "every channel flows again");
        assert_eq!(a.cancel(5), None, "sent on once");
        assert_eq!(
            a.barrier(1, 5),
            None,
            "its barriers that still come are passed over"
        );
        assert!(!a.blocked[1]);
        // The marker of a checkpoint whose barrier came on no channel yet: its barriers are
        // passed over too.
        assert_eq!(a.cancel(6), Some(6));
        assert_eq!(a.barrier(0, 6), None);
        assert!(!a.blocked[0]);
        // A marker older than the alignment under way leaves it be.
        assert_eq!(a.barrier(0, 8), None);
        assert_eq!(a.cancel(7), None);
        assert!(a.blocked[0]);
        assert_eq!(a.barrier(1, 8), None);
        assert_eq!(a.barrier(2, 8), Some(8));
        // A stop barrier (top bit set) is cancelled by its checkpoint's id.
        let stop = 9 | 1 << 63;
        assert_eq!(a.barrier(0, stop), None);
        assert!(a.blocked[0]);
        assert_eq!(a.cancel(9), Some(9));
        assert!(!a.blocked[0]);
        assert_eq!(a.barrier(1, stop), None);
    }
}
