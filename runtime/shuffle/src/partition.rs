//! Producer-side partitions: what a [`PartitionWriter`] fills and the `Shuffle` service drains.
//!
//! Pipelined: one queue per subpartition, bounded by a semaphore of slots so `emit` waits for room
//! (backpressure); the buffers carry their slots and their memory accounting, so whoever drops a
//! buffer (the server sending it, a release, a failed task) gives both back. Blocking: one data file
//! per partition plus an index, readable only once `finish` made them durable, then any number of
//! times.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::memory::{MemoryCounter, TrackedBuffer};
use crate::{Error, PartitionStats, PartitionWriter, Result, ResultPartitionId, ShuffleConfig};

/// Blocking writers hand the file batches of about this many bytes (one blocking-pool hop each).
const WRITE_BATCH_BYTES: usize = 1024 * 1024;

/// Locks a std mutex that is only ever held for a few instructions: a panic while holding it leaves
/// the data consistent, so poisoning is ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A partition this TaskManager produces (or produced).
#[derive(Debug, Clone)]
pub(crate) enum Partition {
    Pipelined(Arc<PipelinedPartition>),
    Blocking(Arc<BlockingPartition>),
}

impl Partition {
    /// Opens one subpartition for one consumer.
    pub(crate) fn open_reader(&self, subpartition: u32) -> Result<SubpartitionReader> {
        match self {
            Partition::Pipelined(p) => p.open_reader(subpartition).map(SubpartitionReader::Pipelined),
            Partition::Blocking(p) => p.open_reader(subpartition).map(SubpartitionReader::Blocking),
        }
    }

    /// Stops writers and readers and frees queued memory. Files are deleted by the environment.
    pub(crate) fn release(&self) {
        match self {
            Partition::Pipelined(p) => p.release(),
            Partition::Blocking(p) => p.released.store(true, Ordering::Release),
        }
    }
}

fn check_subpartition(name: &str, subpartition: u32, count: u32) -> Result<usize> {
    if subpartition < count {
        Ok(subpartition as usize)
    } else {
        Err(Error::SubpartitionOutOfRange {
            partition: name.to_owned(),
            subpartition,
            count,
        })
    }
}

/// What a reader yields next.
#[derive(Debug)]
pub(crate) enum ReadItem {
    Data(Bytes),
    Barrier(u64),
    /// The cancel-checkpoint marker of this checkpoint.
    Cancel(u64),
    End,
}

/// One consumer's view of one subpartition.
#[derive(Debug)]
pub(crate) enum SubpartitionReader {
    Pipelined(PipelinedReader),
    Blocking(BlockingReader),
}

impl SubpartitionReader {
    pub(crate) async fn next(&mut self) -> Result<ReadItem> {
        match self {
            SubpartitionReader::Pipelined(r) => r.next().await,
            SubpartitionReader::Blocking(r) => r.next().await,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pipelined

#[derive(Debug)]
enum QueueItem {
    Data(TrackedBuffer),
    Barrier(u64),
    Cancel(u64),
    End,
}

/// Who holds a pipelined subpartition's queue. A reader takes the receiver and gives it back when
/// its stream drops early, so a consumer that reconnects continues where the last one stopped.
#[derive(Debug)]
enum ReaderSlot {
    Idle(mpsc::UnboundedReceiver<QueueItem>),
    Reading,
    Consumed,
}

#[derive(Debug)]
struct PipelinedSubpartition {
    /// Free queue slots: `emit` takes them, dropping the buffer returns them.
    slots: Arc<Semaphore>,
    reader: Mutex<ReaderSlot>,
}

#[derive(Debug)]
pub(crate) struct PipelinedPartition {
    name: String,
    subpartitions: Vec<PipelinedSubpartition>,
    /// Queue slots of each subpartition.
    slots_per_subpartition: usize,
    released: AtomicBool,
}

impl crate::PoolUsage for PipelinedPartition {
    fn usage(&self) -> (usize, usize) {
        let capacity = self.slots_per_subpartition * self.subpartitions.len();
        let free: usize = self
            .subpartitions
            .iter()
            .map(|s| s.slots.available_permits().min(self.slots_per_subpartition))
            .sum();
        (capacity - free, capacity)
    }
}

impl PipelinedPartition {
    /// The partition (registered by the caller) and its writer.
    pub(crate) fn create(
        id: &ResultPartitionId,
        num_subpartitions: u32,
        config: &ShuffleConfig,
        memory: Arc<MemoryCounter>,
    ) -> (Arc<Self>, PipelinedWriter) {
        let mut senders = Vec::with_capacity(num_subpartitions as usize);
        let mut subpartitions = Vec::with_capacity(num_subpartitions as usize);
        let slots_per_subpartition = config.max_buffers_per_subpartition.max(1) as usize;
        for _ in 0..num_subpartitions {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            subpartitions.push(PipelinedSubpartition {
                slots: Arc::new(Semaphore::new(slots_per_subpartition)),
                reader: Mutex::new(ReaderSlot::Idle(rx)),
            });
        }
        let partition = Arc::new(PipelinedPartition {
            name: id.to_string(),
            subpartitions,
            slots_per_subpartition,
            released: AtomicBool::new(false),
        });
        let writer = PipelinedWriter {
            partition: partition.clone(),
            senders,
            memory,
            config: config.clone(),
            bytes: vec![0; num_subpartitions as usize],
        };
        (partition, writer)
    }

    fn open_reader(self: &Arc<Self>, subpartition: u32) -> Result<PipelinedReader> {
        if self.released.load(Ordering::Acquire) {
            return Err(Error::Released(self.name.clone()));
        }
        let index = check_subpartition(&self.name, subpartition, self.subpartitions.len() as u32)?;
        let mut slot = lock(&self.subpartitions[index].reader);
        match std::mem::replace(&mut *slot, ReaderSlot::Reading) {
            ReaderSlot::Idle(rx) => Ok(PipelinedReader {
                partition: self.clone(),
                index,
                rx: Some(rx),
                ended: false,
            }),
            ReaderSlot::Reading => Err(Error::SubpartitionBusy {
                partition: self.name.clone(),
                subpartition,
            }),
            ReaderSlot::Consumed => {
                *slot = ReaderSlot::Consumed;
                Err(Error::AlreadyConsumed {
                    partition: self.name.clone(),
                    subpartition,
                })
            }
        }
    }

    fn release(&self) {
        self.released.store(true, Ordering::Release);
        for subpartition in &self.subpartitions {
            // Wakes a writer waiting for room; its emit fails with Released.
            subpartition.slots.close();
            // Drops queued buffers (and so their accounting) unless a reader holds the queue; that
            // reader drops it on its next call.
            let idle = std::mem::replace(&mut *lock(&subpartition.reader), ReaderSlot::Consumed);
            drop(idle);
        }
    }
}

/// Producer of a pipelined partition.
#[derive(Debug)]
pub(crate) struct PipelinedWriter {
    partition: Arc<PipelinedPartition>,
    senders: Vec<mpsc::UnboundedSender<QueueItem>>,
    memory: Arc<MemoryCounter>,
    config: ShuffleConfig,
    bytes: Vec<u64>,
}

#[async_trait]
impl PartitionWriter for PipelinedWriter {
    fn num_subpartitions(&self) -> u32 {
        self.senders.len() as u32
    }

    async fn emit(&mut self, subpartition: u32, buffer: Bytes) -> Result<()> {
        let index = check_subpartition(&self.partition.name, subpartition, self.num_subpartitions())?;
        if buffer.is_empty() {
            return Ok(());
        }
        let released = || Error::Released(self.partition.name.clone());
        let slots = self.config.slots_for(buffer.len());
        let permit = self.partition.subpartitions[index]
            .slots
            .clone()
            .acquire_many_owned(slots)
            .await
            .map_err(|_| released())?;
        let len = buffer.len() as u64;
        let tracked = TrackedBuffer::new(buffer, self.memory.clone(), Some(permit));
        // Fails only when the queue's receiver is gone, which happens only on release.
        self.senders[index]
            .send(QueueItem::Data(tracked))
            .map_err(|_| released())?;
        self.bytes[index] += len;
        Ok(())
    }

    async fn emit_barrier(&mut self, checkpoint: u64) -> Result<()> {
        // Barriers take no queue slot: they are a few bytes and at most one is in flight per checkpoint.
        for sender in &self.senders {
            sender
                .send(QueueItem::Barrier(checkpoint))
                .map_err(|_| Error::Released(self.partition.name.clone()))?;
        }
        Ok(())
    }

    async fn emit_cancel(&mut self, checkpoint: u64) -> Result<()> {
        // No queue slot either, as barriers.
        for sender in &self.senders {
            sender
                .send(QueueItem::Cancel(checkpoint))
                .map_err(|_| Error::Released(self.partition.name.clone()))?;
        }
        Ok(())
    }

    async fn finish(self: Box<Self>) -> Result<PartitionStats> {
        for sender in &self.senders {
            sender
                .send(QueueItem::End)
                .map_err(|_| Error::Released(self.partition.name.clone()))?;
        }
        Ok(PartitionStats {
            bytes_per_subpartition: self.bytes,
        })
    }

    fn pool_usage(&self) -> Option<Arc<dyn crate::PoolUsage>> {
        Some(self.partition.clone())
    }
}

/// A consumer's hold on a pipelined subpartition's queue.
#[derive(Debug)]
pub(crate) struct PipelinedReader {
    partition: Arc<PipelinedPartition>,
    index: usize,
    rx: Option<mpsc::UnboundedReceiver<QueueItem>>,
    ended: bool,
}

impl PipelinedReader {
    async fn next(&mut self) -> Result<ReadItem> {
        let name = &self.partition.name;
        if self.partition.released.load(Ordering::Acquire) {
            self.rx = None;
            return Err(Error::Released(name.clone()));
        }
        let Some(rx) = self.rx.as_mut() else {
            return Err(Error::AlreadyConsumed {
                partition: name.clone(),
                subpartition: self.index as u32,
            });
        };
        match rx.recv().await {
            Some(QueueItem::Data(buffer)) => Ok(ReadItem::Data(buffer.into_bytes())),
            Some(QueueItem::Barrier(id)) => Ok(ReadItem::Barrier(id)),
            Some(QueueItem::Cancel(id)) => Ok(ReadItem::Cancel(id)),
            Some(QueueItem::End) => {
                self.ended = true;
                Ok(ReadItem::End)
            }
            None if self.partition.released.load(Ordering::Acquire) => Err(Error::Released(name.clone())),
            None => Err(Error::ProducerFailed(name.clone())),
        }
    }
}

impl Drop for PipelinedReader {
    fn drop(&mut self) {
        let mut slot = lock(&self.partition.subpartitions[self.index].reader);
        *slot = match self.rx.take() {
            Some(rx) if !self.ended && !self.partition.released.load(Ordering::Acquire) => {
                ReaderSlot::Idle(rx)
            }
            _ => ReaderSlot::Consumed,
        };
    }
}

// ---------------------------------------------------------------------------------------------
// Blocking

/// Where each subpartition's buffers are in the data file: (offset, len) in emit order.
#[derive(Debug)]
pub(crate) struct BlockingIndex {
    pub(crate) data_path: PathBuf,
    pub(crate) entries: Vec<Vec<(u64, u64)>>,
}

#[derive(Debug, Clone)]
pub(crate) enum BlockingState {
    Writing,
    Finished(Arc<BlockingIndex>),
}

#[derive(Debug)]
pub(crate) struct BlockingPartition {
    name: String,
    num_subpartitions: u32,
    state: watch::Receiver<BlockingState>,
    released: AtomicBool,
}

/// `data_dir/<job_id>/r<result>-p<partition>-a<attempt>.{data,index}`.
pub(crate) fn blocking_paths(data_dir: &Path, id: &ResultPartitionId) -> (PathBuf, PathBuf) {
    let stem = format!("r{}-p{}-a{}", id.result, id.partition, id.attempt);
    let dir = data_dir.join(&id.job_id);
    (
        dir.join(format!("{stem}.data")),
        dir.join(format!("{stem}.index")),
    )
}

impl BlockingPartition {
    /// Creates the data file; the partition (registered by the caller) is readable once the writer
    /// finished.
    pub(crate) fn create(
        id: &ResultPartitionId,
        num_subpartitions: u32,
        config: &ShuffleConfig,
    ) -> Result<(Arc<Self>, BlockingWriter)> {
        let (data_path, index_path) = blocking_paths(&config.data_dir, id);
        if let Some(dir) = data_path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let file = File::create(&data_path).map_err(|e| Error::io(&data_path, e))?;
        let (state_tx, state) = watch::channel(BlockingState::Writing);
        let partition = Arc::new(BlockingPartition {
            name: id.to_string(),
            num_subpartitions,
            state,
            released: AtomicBool::new(false),
        });
        let writer = BlockingWriter {
            partition: partition.clone(),
            state_tx,
            file: Some(file),
            data_path,
            index_path,
            offset: 0,
            pending: Vec::new(),
            pending_len: 0,
            entries: vec![Vec::new(); num_subpartitions as usize],
            bytes: vec![0; num_subpartitions as usize],
        };
        Ok((partition, writer))
    }

    fn open_reader(self: &Arc<Self>, subpartition: u32) -> Result<BlockingReader> {
        if self.released.load(Ordering::Acquire) {
            return Err(Error::Released(self.name.clone()));
        }
        let index = check_subpartition(&self.name, subpartition, self.num_subpartitions)?;
        Ok(BlockingReader {
            partition: self.clone(),
            index,
            open: None,
            next: 0,
        })
    }

    /// Bytes per subpartition, once the writer finished.
    pub(crate) fn finished_stats(&self) -> Option<PartitionStats> {
        match &*self.state.borrow() {
            BlockingState::Finished(index) => Some(PartitionStats {
                bytes_per_subpartition: index
                    .entries
                    .iter()
                    .map(|e| e.iter().map(|(_, len)| len).sum())
                    .collect(),
            }),
            BlockingState::Writing => None,
        }
    }

    /// Waits until the writer finished; an error if it was dropped unfinished.
    pub(crate) async fn finished(&self) -> Result<Arc<BlockingIndex>> {
        let mut state = self.state.clone();
        loop {
            if let BlockingState::Finished(index) = &*state.borrow_and_update() {
                return Ok(index.clone());
            }
            state
                .changed()
                .await
                .map_err(|_| Error::ProducerFailed(self.name.clone()))?;
        }
    }
}

async fn blocking<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::io(path, std::io::Error::other(e)))?
        .map_err(|e| Error::io(path, e))
}

/// Producer of a blocking partition: appends buffers to the data file in batches, records where
/// each went.
#[derive(Debug)]
pub(crate) struct BlockingWriter {
    partition: Arc<BlockingPartition>,
    state_tx: watch::Sender<BlockingState>,
    /// `None` only while a batch is being written on the blocking pool.
    file: Option<File>,
    data_path: PathBuf,
    index_path: PathBuf,
    offset: u64,
    pending: Vec<Bytes>,
    pending_len: usize,
    entries: Vec<Vec<(u64, u64)>>,
    bytes: Vec<u64>,
}

impl BlockingWriter {
    async fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let Some(mut file) = self.file.take() else {
            return Err(Error::io(
                &self.data_path,
                std::io::Error::other("an earlier write failed"),
            ));
        };
        let pending = std::mem::take(&mut self.pending);
        self.pending_len = 0;
        let file = blocking(&self.data_path, move || {
            for buffer in &pending {
                file.write_all(buffer)?;
            }
            Ok(file)
        })
        .await?;
        self.file = Some(file);
        Ok(())
    }

    fn encode_index(&self) -> Vec<u8> {
        // magic, subpartition count, then per entry: subpartition u32, offset u64, len u64 (LE).
        let count: usize = self.entries.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(12 + count * 20);
        out.extend_from_slice(b"FLOEIDX1");
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (subpartition, entries) in self.entries.iter().enumerate() {
            for (offset, len) in entries {
                out.extend_from_slice(&(subpartition as u32).to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
        }
        out
    }
}

#[async_trait]
impl PartitionWriter for BlockingWriter {
    fn num_subpartitions(&self) -> u32 {
        self.partition.num_subpartitions
    }

    async fn emit(&mut self, subpartition: u32, buffer: Bytes) -> Result<()> {
        let index = check_subpartition(&self.partition.name, subpartition, self.num_subpartitions())?;
        if self.partition.released.load(Ordering::Acquire) {
            return Err(Error::Released(self.partition.name.clone()));
        }
        if buffer.is_empty() {
            return Ok(());
        }
        let len = buffer.len() as u64;
        self.entries[index].push((self.offset, len));
        self.offset += len;
        self.bytes[index] += len;
        self.pending_len += buffer.len();
        self.pending.push(buffer);
        if self.pending_len >= WRITE_BATCH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<PartitionStats> {
        self.flush().await?;
        if self.partition.released.load(Ordering::Acquire) {
            return Err(Error::Released(self.partition.name.clone()));
        }
        if let Some(file) = self.file.take() {
            blocking(&self.data_path, move || file.sync_all()).await?;
        }
        let encoded = self.encode_index();
        let index_path = self.index_path.clone();
        blocking(&self.index_path, move || {
            let mut file = File::create(&index_path)?;
            file.write_all(&encoded)?;
            file.sync_all()
        })
        .await?;
        let entries = std::mem::take(&mut self.entries);
        let index = BlockingIndex {
            data_path: self.data_path.clone(),
            entries,
        };
        self.state_tx
            .send_replace(BlockingState::Finished(Arc::new(index)));
        Ok(PartitionStats {
            bytes_per_subpartition: std::mem::take(&mut self.bytes),
        })
    }
}

/// A consumer's cursor over one subpartition of a blocking partition.
#[derive(Debug)]
pub(crate) struct BlockingReader {
    partition: Arc<BlockingPartition>,
    index: usize,
    open: Option<(Arc<BlockingIndex>, Arc<File>)>,
    next: usize,
}

impl BlockingReader {
    async fn next(&mut self) -> Result<ReadItem> {
        if self.partition.released.load(Ordering::Acquire) {
            return Err(Error::Released(self.partition.name.clone()));
        }
        let (index, file) = match &self.open {
            Some(open) => open.clone(),
            None => {
                let index = self.partition.finished().await?;
                let path = index.data_path.clone();
                let file = Arc::new(blocking(&index.data_path, move || File::open(path)).await?);
                self.open = Some((index.clone(), file.clone()));
                (index, file)
            }
        };
        let Some(&(offset, len)) = index.entries[self.index].get(self.next) else {
            return Ok(ReadItem::End);
        };
        self.next += 1;
        let data = blocking(&index.data_path, move || {
            use std::os::unix::fs::FileExt;
            let len = usize::try_from(len).map_err(std::io::Error::other)?;
            let mut buffer = vec![0; len];
            file.read_exact_at(&mut buffer, offset)?;
            Ok(buffer)
        })
        .await?;
        Ok(ReadItem::Data(Bytes::from(data)))
    }
}
