//! Shuffle configuration, with Flink's defaults. The memory the shuffle may hold follows from it
//! (see [`ShuffleConfig::memory_bound`]), which is what makes backpressure bounded rather than hopeful.

use std::path::PathBuf;
use std::time::Duration;

/// Sizes and limits of one TaskManager's shuffle.
///
/// # Memory bound
///
/// Pipelined data is held in two places only, and both are bounded:
///
/// - producer side: each subpartition of a pipelined partition queues at most
///   `max_buffers_per_subpartition * buffer_size` bytes (a buffer takes `ceil(len / buffer_size)`
///   slots), `emit` waits for room;
/// - consumer side: each (channel, subpartition) stream grants `buffers_per_channel` credits, and the
///   producer sends one buffer per credit, so at most `buffers_per_channel` buffers per stream wait to
///   be handed to the task.
///
/// So for buffers of at most `buffer_size` bytes (how writers are meant to cut them):
///
/// ```text
/// buffered_bytes <= buffer_size * ( max_buffers_per_subpartition * Σ produced pipelined subpartitions
///                                 + buffers_per_channel          * Σ consumed (channel, subpartition) streams )
/// ```
///
/// Bytes in flight on the network (HTTP/2 windows) and blocking partitions' write batches are not
/// counted: the former is bounded by the credits, the latter is on its way to disk. A stream of a
/// remote partition (object storage) reads ranges of `buffer_size` bytes and holds one range (or
/// one larger buffer) besides the buffers its credit allows, never its whole subpartition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShuffleConfig {
    /// Flink `taskmanager.memory.segment-size`: the size writers cut buffers to. Default 32 KiB.
    pub buffer_size: usize,
    /// Flink `taskmanager.network.memory.buffers-per-channel`: credit a consumer grants per stream.
    /// Default 2.
    pub buffers_per_channel: u32,
    /// Producer-side queue, in buffers, per subpartition of a pipelined partition. Default 10.
    pub max_buffers_per_subpartition: u32,
    /// Where blocking partitions are written: `data_dir/<job_id>/r<result>-p<partition>-a<attempt>.data`.
    pub data_dir: PathBuf,
    /// How long a gate keeps retrying a producer that is unreachable or has not registered the
    /// partition yet (pipelined consumers may start before their producers). Default 30 s.
    pub request_timeout: Duration,
    /// First wait between retries (Flink `taskmanager.network.request-backoff.initial`). Default 100 ms.
    pub request_backoff_initial: Duration,
    /// Longest wait between retries (doubles up to this). Default 2 s.
    pub request_backoff_max: Duration,
}

impl Default for ShuffleConfig {
    fn default() -> Self {
        ShuffleConfig {
            buffer_size: 32 * 1024,
            buffers_per_channel: 2,
            max_buffers_per_subpartition: 10,
            data_dir: std::env::temp_dir().join("floe-shuffle"),
            request_timeout: Duration::from_secs(30),
            request_backoff_initial: Duration::from_millis(100),
            request_backoff_max: Duration::from_secs(2),
        }
    }
}

impl ShuffleConfig {
    /// The most bytes a TaskManager's shuffle holds in memory while it produces
    /// `produced_subpartitions` pipelined subpartitions and reads `consumed_streams`
    /// (channel, subpartition) streams, for buffers of at most `buffer_size` (see the type's docs).
    pub fn memory_bound(&self, produced_subpartitions: u64, consumed_streams: u64) -> u64 {
        let buffer = self.buffer_size as u64;
        buffer
            * (u64::from(self.max_buffers_per_subpartition) * produced_subpartitions
                + u64::from(self.buffers_per_channel) * consumed_streams)
    }

    /// Queue slots a buffer of `len` bytes takes in a pipelined subpartition: at least one, and never
    /// more than the whole queue (so an oversized buffer still goes through, alone).
    pub(crate) fn slots_for(&self, len: usize) -> u32 {
        let size = self.buffer_size.max(1);
        let slots = len.div_ceil(size).max(1);
        u32::try_from(slots)
            .unwrap_or(u32::MAX)
            .min(self.max_buffers_per_subpartition.max(1))
    }
}
