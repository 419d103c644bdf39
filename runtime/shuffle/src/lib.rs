//! The shuffle boundary (DESIGN.md "Shuffle", seed 000 section 5). Three parts:
//!
//! - [`ShuffleMaster`] (JobManager side): registers result partitions, says where their data lives,
//!   knows which are still available, releases them when the job ends;
//! - [`PartitionWriter`] (task side): a producer subtask hands it full buffers of serialised records,
//!   one subpartition at a time;
//! - [`InputGate`] (task side): a consumer subtask reads buffers from all the channels (producer
//!   partition x subpartition range) of one input.
//!
//! Start with [`ShuffleEnvironment`]: one per TaskManager, it creates writers and gates and serves the
//! `Shuffle` gRPC service other TaskManagers read from. Its memory bound is on [`ShuffleConfig`].
//!
//! Data moves as `Bytes` from writer to gate: the only copies are gRPC's encoding and decoding
//! (and, for blocking partitions, the file system's).

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

mod config;
mod environment;
mod error;
mod gate;
mod master;
mod memory;
mod partition;
mod remote;
mod server;
mod union;

pub use config::ShuffleConfig;
pub use environment::ShuffleEnvironment;
pub use error::{Error, Result};
pub use master::{ShuffleMaster, TaskManagerShuffleMaster};
pub use remote::{JOB_STORAGE_KEY, REMOTE_SHUFFLE_KEY, remote_shuffle_enabled, remote_storage};
pub use server::ShuffleService;
pub use union::UnionInputGate;

/// Identifies one attempt's output for one result: a restarted producer writes a new partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResultPartitionId {
    pub job_id: String,
    pub result: u32,
    pub partition: u32,
    pub attempt: u64,
}

impl std::fmt::Display for ResultPartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ResultPartitionId {
            job_id,
            result,
            partition,
            attempt,
        } = self;
        write!(f, "{job_id}/r{result}-p{partition}-a{attempt}")
    }
}

impl From<floe_proto::v1::ResultPartitionId> for ResultPartitionId {
    fn from(id: floe_proto::v1::ResultPartitionId) -> Self {
        let floe_proto::v1::ResultPartitionId {
            job_id,
            result,
            partition,
            attempt,
        } = id;
        ResultPartitionId {
            job_id,
            result,
            partition,
            attempt,
        }
    }
}

impl From<ResultPartitionId> for floe_proto::v1::ResultPartitionId {
    fn from(id: ResultPartitionId) -> Self {
        let ResultPartitionId {
            job_id,
            result,
            partition,
            attempt,
        } = id;
        floe_proto::v1::ResultPartitionId {
            job_id,
            result,
            partition,
            attempt,
        }
    }
}

/// How a partition is exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartitionKind {
    /// Kept in bounded memory and streamed to consumers while produced (credit-based).
    Pipelined,
    /// Written to the TaskManager's local disk; readable (again and again) once finished.
    Blocking,
    /// Blocking, and uploaded to object storage when finished: it outlives its TaskManager, so losing
    /// that TaskManager does not make the partition's producer run again.
    Remote,
}

/// The address a remote partition's consumers are given: read it from object storage.
pub const OBJECT_STORAGE_ADDRESS: &str = "object-storage";

/// What a finished partition holds: bytes per subpartition (adaptive parallelism reads this).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionStats {
    pub bytes_per_subpartition: Vec<u64>,
}

/// Where a consumer reads one producer partition from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputChannelSpec {
    pub partition: ResultPartitionId,
    /// host:port of the TaskManager serving the partition.
    pub address: String,
    pub subpartitions: Range<u32>,
}

/// How full the buffers of one partition or gate are, for Flink's `buffers.outPoolUsage` and
/// `buffers.inPoolUsage`: read by the metrics while the task runs, so it is shared and atomic.
pub trait PoolUsage: Send + Sync + std::fmt::Debug {
    /// Buffers held now, and the most it may hold.
    fn usage(&self) -> (usize, usize);
}

/// Task side, producer: one per produced result partition.
///
/// Invariants: buffers of one subpartition reach consumers in emit order; `emit` waits (never drops,
/// never grows memory without bound) while consumers have not made room; after `finish` returns,
/// every consumer sees end-of-partition after the last buffer.
#[async_trait]
pub trait PartitionWriter: Send {
    fn num_subpartitions(&self) -> u32;
    async fn emit(&mut self, subpartition: u32, buffer: Bytes) -> Result<()>;
    /// Puts checkpoint barrier `checkpoint` into every subpartition, after the buffers emitted so
    /// far. Only pipelined partitions carry barriers (streaming jobs); blocking ones ignore them.
    async fn emit_barrier(&mut self, checkpoint: u64) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
    /// Puts the cancel-checkpoint marker of `checkpoint` (aborted) into every subpartition, after
    /// the buffers emitted so far: a consumer aligning its barrier stops waiting for it. Pipelined
    /// partitions only, as barriers.
    async fn emit_cancel(&mut self, checkpoint: u64) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
    async fn finish(self: Box<Self>) -> Result<PartitionStats>;
    /// Its queued buffers over what it may queue (pipelined partitions; a blocking one writes to
    /// disk and queues nothing).
    fn pool_usage(&self) -> Option<std::sync::Arc<dyn PoolUsage>> {
        None
    }
}

/// What an [`InputGate`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateItem {
    /// A buffer of input channel `channel` (channels are numbered across the gate's partitions
    /// and subpartitions, `0..num_channels()`).
    Buffer { channel: usize, data: Bytes },
    /// Every channel delivered the barrier of this checkpoint (aligned): the task snapshots now.
    Barrier(u64),
    /// Some channel delivered the cancel-checkpoint marker of this checkpoint (Flink's
    /// `CancelCheckpointMarker`): its alignment ended without a snapshot, every channel flows
    /// again, and its barriers that still come are passed over. Yielded once per checkpoint; the
    /// task sends it on downstream.
    Cancel(u64),
}

/// The checkpoint a barrier's id on the wire is of: the top bit flags a stop-with-savepoint
/// barrier (`floe_datastream::checkpoint::STOP_BARRIER`), which aligns like any other.
pub fn checkpoint_of_barrier(wire: u64) -> u64 {
    wire & !(1 << 63)
}

/// Task side, consumer: the channels of one input, merged in arrival order.
///
/// Invariants: yields each buffer of each channel exactly once, in order per channel; returns
/// `Ok(None)` only after every channel reached end-of-partition; a lost producer is an error, not an
/// early end. Barriers are aligned (Flink's exactly-once mode): once a channel delivered barrier `n`,
/// its later buffers are held back until every channel still open delivered it, then
/// [`GateItem::Barrier`] is yielded once, before any buffer that followed a barrier.
///
/// `next` is cancel-safe: dropping its future before it is ready loses nothing (a task polls it
/// alongside timers, and [`UnionInputGate`] polls several gates at once).
#[async_trait]
pub trait InputGate: Send {
    async fn next(&mut self) -> Result<Option<GateItem>>;

    /// How many channels the gate merges (a task's watermark is the minimum over them).
    fn num_channels(&self) -> usize;

    /// Buffers received and not yet taken by the task, over the credit its channels may have out.
    fn pool_usage(&self) -> Option<std::sync::Arc<dyn PoolUsage>> {
        None
    }

    /// The next buffer, passing over barriers (for readers that take no checkpoints).
    async fn next_buffer(&mut self) -> Result<Option<Bytes>> {
        loop {
            match self.next().await? {
                Some(GateItem::Buffer { data, .. }) => return Ok(Some(data)),
                Some(GateItem::Barrier(_) | GateItem::Cancel(_)) => {}
                None => return Ok(None),
            }
        }
    }
}
