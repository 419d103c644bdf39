//! What a connector crate (Kafka, in `floe-connector-kafka`) plugs into: a source reader that emits
//! records, says where each of its splits is (the position a checkpoint records and a restore,
//! rescaled or not, deals out again) and hears when a checkpoint completed, and a sink writer that
//! gets records as encoded frames and takes part in checkpoints (pre-commit at the barrier, commit
//! when the checkpoint completes), as the built-in file source and sink do.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;

use crate::api::{DataStream, DataStreamSink, StreamExecutionEnvironment};
use crate::data::Data;
use crate::error::Result;
use crate::operators::{Collector, Op, OpContext, erase};

pub use crate::io::sink::SinkIo as SinkWriter;

/// Encodes a record for a connector's sink (the frame's bytes).
pub type Encoder<T> = Arc<dyn Fn(&T, &mut Vec<u8>) + Send + Sync>;

/// The subtask a source reader or sink writer runs as.
#[derive(Debug, Clone)]
pub struct ConnectorContext {
    /// The job run (see [`crate::TaskContext::job_id`]): what a sink's commit markers are scoped
    /// to, so the checkpoint ids of another run (which start again at 1) never read as written.
    pub job_id: String,
    pub subtask: u32,
    pub parallelism: u32,
    /// The execution attempt (0 first; a restart counts up).
    pub attempt: u64,
    /// The job's configuration (`spec.configuration`): object storage, job storage, connector keys.
    pub configuration: BTreeMap<String, String>,
    /// `execution.checkpointing.interval` is set: sinks commit per checkpoint.
    pub checkpointing: bool,
    /// Restored from this checkpoint: `Some((checkpoint, states))`, the split positions (sources)
    /// or committer states (sinks) this subtask takes over; after a rescale any number, none for
    /// a subtask the rescale added. `None`: a fresh start.
    pub restored: Option<(u64, Vec<String>)>,
    /// A source made with [`StreamExecutionEnvironment::from_source_with_timestamps`]: where it
    /// sets each record's event time before it emits it.
    pub timestamps: Option<RecordTimestamps>,
}

/// Sets the event time of the record a source emits next (Flink's `SourceOutput.collect(record,
/// timestamp)`); the source gives its watermark through [`SourceReader::watermark`].
#[derive(Debug, Clone)]
pub struct RecordTimestamps(Arc<crate::time::TaskTime>);

impl RecordTimestamps {
    /// The next record's timestamp (ms since the epoch).
    #[inline]
    pub fn set(&self, timestamp: i64) {
        self.0.set_timestamp(timestamp)
    }

    /// The last timestamp set.
    pub fn get(&self) -> i64 {
        self.0.timestamp()
    }
}

/// A handle of its own, read by no task (a connector's unit tests).
impl Default for RecordTimestamps {
    fn default() -> Self {
        RecordTimestamps(Arc::new(crate::time::TaskTime::new(
            std::time::Duration::from_millis(200),
        )))
    }
}

impl ConnectorContext {
    fn of(ctx: &OpContext, sink: bool) -> Self {
        ConnectorContext {
            job_id: ctx.job_id.clone(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            attempt: ctx.attempt,
            configuration: ctx.configuration.clone(),
            checkpointing: ctx.checkpointing,
            restored: ctx.restore.as_ref().map(|r| {
                let states = if sink { r.sinks.clone() } else { r.sources.clone() };
                (r.checkpoint, states)
            }),
            timestamps: None,
        }
    }
}

/// A connector's source: one per subtask, reading the splits that subtask owns.
#[async_trait]
pub trait SourceReader<T>: Send {
    /// Emits the records available now (a bounded batch; waits at most briefly when there are
    /// none, so checkpoint barriers are not held up); `Ok(false)` once the source has ended.
    async fn poll_next(&mut self, out: &mut dyn Collector<T>) -> Result<bool>;
    /// Where each split this reader owns continues from, one string per split: what a checkpoint
    /// records, and what a restore deals out to the subtasks again.
    fn positions(&self) -> Vec<String>;
    /// Records due but not read yet (Flink's `pendingRecords`, e.g. a Kafka consumer's lag).
    fn pending(&self) -> Option<u64> {
        None
    }
    /// A source that sets its records' timestamps: no record it emits later has a smaller one
    /// (the smallest of its splits' watermarks). `None`: it does not know.
    fn watermark(&self) -> Option<i64> {
        None
    }
    /// Every split this reader owns has gone quiet for the idle timeout, or it owns none: the
    /// subtask is idle and downstream watermarks go on without it until it has records again
    /// (Flink's `WatermarkStrategy.withIdleness`). Default: never.
    fn idle(&self) -> bool {
        false
    }
    /// The positions checkpoint `checkpoint` records (Flink's `snapshotState(checkpointId)`): by
    /// default [`SourceReader::positions`]. A reader that acts once the checkpoint completes
    /// (commits offsets to an external system) remembers here what it snapshotted for it.
    fn snapshot_state(&mut self, checkpoint: u64) -> Vec<String> {
        let _ = checkpoint;
        self.positions()
    }
    /// Checkpoint `checkpoint` completed (Flink's `notifyCheckpointComplete`): everything up to
    /// its snapshot is durable, so what the reader snapshotted for it (and for any earlier
    /// checkpoint, which a completion also covers: a notification may be skipped) may be made
    /// visible outside, e.g. offsets committed to a consumer group. Never before: a checkpoint
    /// that is snapshotted may still fail. Default: nothing.
    async fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
    /// The subtask ends: finish what is in flight for completed checkpoints (a commit of
    /// offsets), so a job that ended has made visible everything its last checkpoint covers.
    /// Default: nothing.
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

struct ReaderSource<R, T> {
    reader: R,
    _t: PhantomData<fn() -> T>,
}

#[async_trait]
impl<T: Data, R: SourceReader<T>> crate::io::Source<T> for ReaderSource<R, T> {
    async fn produce(&mut self, out: &mut dyn Op<T>) -> Result<bool> {
        self.reader.poll_next(out).await
    }

    fn position(&self) -> String {
        match self.reader.positions().as_slice() {
            [one] => one.clone(),
            many => serde_json::to_string(many).unwrap_or_default(),
        }
    }

    fn restore(&mut self, _: &str) -> std::result::Result<(), String> {
        Err("a connector's reader is made from its restored positions".into())
    }

    fn pending(&self) -> Option<u64> {
        self.reader.pending()
    }

    fn watermark(&self) -> Option<i64> {
        self.reader.watermark()
    }

    fn idle(&self) -> bool {
        self.reader.idle()
    }

    fn snapshot(&mut self, checkpoint: u64) -> String {
        match self.reader.snapshot_state(checkpoint).as_slice() {
            [one] => one.clone(),
            many => serde_json::to_string(many).unwrap_or_default(),
        }
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        self.reader.notify_checkpoint_complete(checkpoint).await
    }

    async fn close(&mut self) -> Result<()> {
        self.reader.close().await
    }
}

impl StreamExecutionEnvironment {
    /// A connector's source named `name`: `make` builds each subtask's reader (restored ones from
    /// the positions the restore gives them).
    pub fn from_source<T, R, M>(&self, name: &str, make: M) -> DataStream<T>
    where
        T: Data,
        R: SourceReader<T> + 'static,
        M: Fn(&ConnectorContext) -> Result<R> + Send + Sync + 'static,
    {
        self.connector_source(
            name,
            Arc::new(move |ctx: &OpContext| {
                let reader = make(&ConnectorContext::of(ctx, false))?;
                Ok(ReaderSource {
                    reader,
                    _t: PhantomData,
                })
            }),
        )
    }
}

impl StreamExecutionEnvironment {
    /// [`Self::from_source`] for a source that knows its records' event time (Kafka's record
    /// timestamps): it sets each record's timestamp through [`ConnectorContext::timestamps`] and
    /// gives its watermark, so the job's event-time operators need no timestamp assigner.
    pub fn from_source_with_timestamps<T, R, M>(&self, name: &str, make: M) -> DataStream<T>
    where
        T: Data,
        R: SourceReader<T> + 'static,
        M: Fn(&ConnectorContext) -> Result<R> + Send + Sync + 'static,
    {
        self.mark_timed();
        self.connector_source(
            name,
            Arc::new(move |ctx: &OpContext| {
                let mut c = ConnectorContext::of(ctx, false);
                c.timestamps = Some(RecordTimestamps(ctx.task_time()?));
                let reader = make(&c)?;
                Ok(ReaderSource {
                    reader,
                    _t: PhantomData,
                })
            }),
        )
    }
}

/// Makes a connector's reader for a subtask (as the graph keeps it).
pub(crate) type ReaderFactory<S> = Arc<dyn Fn(&OpContext) -> Result<S> + Send + Sync>;

impl<T: Data> DataStream<T> {
    /// A connector's sink named `name`: `encode` turns each record into the bytes of a frame,
    /// `make` builds each subtask's writer, which gets the frames in chunks ([`frames`]).
    pub fn sink_to<W, M>(
        &self,
        name: &str,
        encode: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static,
        make: M,
    ) -> DataStreamSink
    where
        W: SinkWriter + 'static,
        M: Fn(&ConnectorContext) -> Result<W> + Send + Sync + 'static,
    {
        let encode: Encoder<T> = Arc::new(encode);
        self.connector_sink(
            name,
            Arc::new(move |ctx: &OpContext, metrics| {
                let op = crate::io::framed_sink_op(encode.clone(), 256 << 10, metrics);
                let writer = make(&ConnectorContext::of(ctx, true))?;
                Ok((erase::<T>(op), Box::new(writer) as Box<dyn SinkWriter>))
            }),
        )
    }
}

/// Appends one frame: a 4-byte little-endian length, then what `write` puts.
pub(crate) fn write_frame(buffer: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = buffer.len();
    buffer.extend_from_slice(&[0; 4]);
    write(buffer);
    let len = u32::try_from(buffer.len() - at - 4).unwrap_or(u32::MAX);
    buffer[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// The frames of a chunk a connector's sink writer got, in order.
pub fn frames(mut chunk: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if chunk.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) as usize;
        let end = (4 + len).min(chunk.len());
        let frame = &chunk[4..end];
        chunk = &chunk[end..];
        Some(frame)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_back_as_written() {
        let mut buffer = Vec::new();
        for word in ["a", "", "three"] {
            write_frame(&mut buffer, |out| out.extend_from_slice(word.as_bytes()));
        }
        let got: Vec<&[u8]> = frames(&buffer).collect();
        assert_eq!(got, vec![&b"a"[..], b"", b"three"]);
    }
}
