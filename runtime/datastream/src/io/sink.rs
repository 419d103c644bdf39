//! Sinks: the part-file sink (exactly-once with checkpoints) and stdout.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::data::Data;
use crate::error::{Error, Result};
use crate::operators::{BoxOp, Chunk, Collector, Op, Target};
use crate::types::TaskMetrics;

use super::*;

/// The synchronous end of a sink: formats records as text lines into chunks for the async side.
pub(crate) struct SinkOp<T> {
    /// A connector's record codec ([`crate::connector`]): records go out as length-prefixed
    /// frames of these bytes instead of text lines.
    pub encode: Option<crate::connector::Encoder<T>>,
    pub prefix: Vec<u8>,
    pub buffer: Vec<u8>,
    /// Hand the buffer on once it holds this many bytes (0: at every drain).
    pub threshold: usize,
    pub pending: Vec<Chunk>,
    pub count: u64,
    pub metrics: Arc<TaskMetrics>,
    pub _t: std::marker::PhantomData<fn(T)>,
}

impl<T: Data> Collector<T> for SinkOp<T> {
    fn collect(&mut self, record: T) {
        self.write(&record)
    }
}

impl<T: Data> SinkOp<T> {
    /// A new buffer starts at full size (plus room for the line that crosses the threshold):
    /// growing it by doubling copied every byte again.
    fn next_capacity(&self) -> usize {
        if self.threshold == 0 {
            0
        } else {
            self.threshold + 256
        }
    }

    fn write(&mut self, record: &T) {
        if let Some(encode) = &self.encode {
            crate::connector::write_frame(&mut self.buffer, |out| encode(record, out));
        } else {
            if !self.prefix.is_empty() {
                self.buffer.extend_from_slice(&self.prefix);
            }
            record.write_text(&mut self.buffer);
            self.buffer.push(b'\n');
        }
        self.count += 1;
        if self.threshold > 0 && self.buffer.len() >= self.threshold {
            let next = Vec::with_capacity(self.next_capacity());
            self.pending.push(Chunk {
                target: Target::Sink,
                subpartition: 0,
                bytes: Bytes::from(std::mem::replace(&mut self.buffer, next)),
            });
        }
    }
}

impl<T: Data> Op<T> for SinkOp<T> {
    fn takes_reused(&self) -> bool {
        true
    }

    fn collect_reused(&mut self, record: &mut T) {
        self.write(record)
    }

    fn finish(&mut self) {}

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        if (flush || self.threshold == 0) && !self.buffer.is_empty() {
            let next = Vec::with_capacity(self.next_capacity());
            self.pending.push(Chunk {
                target: Target::Sink,
                subpartition: 0,
                bytes: Bytes::from(std::mem::replace(&mut self.buffer, next)),
            });
        }
        out.append(&mut self.pending);
        self.metrics.add_out(std::mem::take(&mut self.count));
    }

    crate::operators::tail_checkpoint!();
}

pub(crate) fn sink_op<T: Data>(prefix: Vec<u8>, threshold: usize, metrics: Arc<TaskMetrics>) -> BoxOp<T> {
    new_sink_op(None, prefix, threshold, metrics)
}

fn new_sink_op<T: Data>(
    encode: Option<crate::connector::Encoder<T>>,
    prefix: Vec<u8>,
    threshold: usize,
    metrics: Arc<TaskMetrics>,
) -> BoxOp<T> {
    let mut op = SinkOp::<T> {
        encode,
        prefix,
        buffer: Vec::new(),
        threshold,
        pending: Vec::new(),
        count: 0,
        metrics,
        _t: std::marker::PhantomData,
    };
    op.buffer.reserve(op.next_capacity());
    Box::new(op)
}

/// The synchronous end of a connector's sink: records encoded by `encode` into frames.
pub(crate) fn framed_sink_op<T: Data>(
    encode: crate::connector::Encoder<T>,
    threshold: usize,
    metrics: Arc<TaskMetrics>,
) -> BoxOp<T> {
    new_sink_op(Some(encode), Vec::new(), threshold, metrics)
}

/// The asynchronous end of a sink: the writer and committer of the unified sink model (seed 000).
#[async_trait]
pub trait SinkIo: Send {
    async fn write(&mut self, bytes: Bytes) -> Result<()>;
    /// A checkpoint barrier: close what was written since the last one as pending commit and say
    /// what the committer needs after a restore.
    async fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<String>> {
        Ok(None)
    }
    /// Checkpoint `checkpoint` completed: commit what it covers.
    async fn commit(&mut self, _checkpoint: u64) -> Result<()> {
        Ok(())
    }
    /// Makes the output visible (commit); only called after all input was processed.
    async fn close(self: Box<Self>) -> Result<()>;
    /// The job stopped with a savepoint (no drain) and the savepoint completed: commit what it and
    /// the checkpoints before it cover, and nothing else (the job resumed from the savepoint
    /// produces the rest). A sink that commits nothing per checkpoint just closes.
    async fn stop(self: Box<Self>) -> Result<()> {
        self.close().await
    }
}

/// Configuration key: the earlier runs of the job's lineage that completed no checkpoint (their
/// job ids, comma-separated), which the JobManager sets on a new deployment from its operation
/// log: runs killed before their first checkpoint, or that failed for good. No checkpoint or
/// savepoint lists a part of theirs as pending, so no restore will ever commit one: what they
/// left in progress is garbage of processes that are gone, which the file sink removes at its
/// end, as it removes its own lineages' abandoned parts. (A run that completed a checkpoint
/// keeps its in-progress parts: a later restore of that checkpoint commits its pending ones.)
pub const SUPERSEDED_RUNS_KEY: &str = "floe.internal.superseded-runs";

/// Configuration key: the latest checkpoint each earlier run of the job's lineage completed, as
/// `{run}:{checkpoint}` pairs, comma-separated, which the JobManager sets on a new deployment
/// from its operation log. A sink that restores another run's checkpoint removes what that run
/// left in progress only when the checkpoint is that run's latest: a newer one may list parts of
/// that run as pending, and a later restore of it must find them to commit. (Flink's FileSink
/// never removes another attempt's in-progress files; Floe removes them once nothing can commit
/// them.)
pub const RUNS_LATEST_CHECKPOINT_KEY: &str = "floe.internal.runs-latest-checkpoint";

/// What a checkpointing file sink records per checkpoint: the parts written up to the barrier
/// (pending commit), by name, and the number of the next part.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FileSinkState {
    /// File names (in the sink's directory) of the parts pending commit, without the leading `.`
    /// and `.inprogress` of their in-progress names.
    pub pending: Vec<String>,
    pub next_part: u64,
    /// The lineage the parts are numbered in (their `part-{lineage}-` prefix): `{run}-{subtask}`,
    /// or `{run}-{subtask}c{checkpoint}` for a subtask a rescale from that checkpoint added, where
    /// `{run}` is the job run that started the lineage (see [`FileSinkIo::run_prefix`]). Numbers
    /// are unique within a lineage, so a restore deletes exactly its lineage's parts after it, and
    /// only a restore within the same run deletes anything: another run's committed output is
    /// never touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    /// Lineages this sink took over from other subtasks in a rescale and numbers no parts in: their
    /// abandoned in-progress parts (of attempts a rescale cancelled) are its to remove at the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taken_over: Vec<String>,
}

/// `sink_to_file`. Without checkpointing: `.part-{run}-{subtask}-{attempt}.inprogress`, renamed
/// to `part-{run}-{subtask}` on success. With checkpointing: one part per checkpoint interval,
/// `.part-{run}-{subtask}-{n}-{writer}.inprogress`, renamed to `part-{run}-{subtask}-{n}-{writer}`
/// when the checkpoint covering it completes (or at end of input). `{run}` is the job run (its
/// JobManager job id, as Flink's FileSink's part prefix UUID): a redeploy, a resubmit or a start
/// from a savepoint writes beside what earlier runs committed and never renames or deletes it. `{writer}` is unique to this sink
/// instance (Flink's part-file UUID): two attempts of one subtask (one of them on a TaskManager
/// declared lost that still runs) never write, rename or delete each other's objects, and a commit
/// renames exactly the files its checkpoint recorded.
pub(crate) struct FileSinkIo {
    url: String,
    /// The job run's id (empty: a test harness's single run, no prefix).
    run: String,
    /// Earlier runs of the job's lineage without a checkpoint ([`SUPERSEDED_RUNS_KEY`]): their
    /// in-progress parts go at this sink's end.
    superseded: Vec<String>,
    /// The latest checkpoint of each earlier run of the job's lineage
    /// ([`RUNS_LATEST_CHECKPOINT_KEY`]).
    runs_latest: BTreeMap<String, u64>,
    conf: BTreeMap<String, String>,
    subtask: u32,
    attempt: u64,
    checkpointing: bool,
    /// Names this instance's parts apart from every other writer's.
    writer_id: String,
    /// Checkpointing: the states this sink resumes from (`None`: started fresh; several after a
    /// rescale; none: a subtask the rescale added).
    restore: Option<(u64, Vec<FileSinkState>)>,
    /// Prefix of this sink's committed parts (see [`FileSinkState::lineage`]).
    lineage: String,
    /// Lineages whose parts this sink took over (its own included): their abandoned in-progress
    /// parts are its to remove at the end.
    lineages: Vec<String>,
    started: bool,
    /// Parts closed at a barrier, by the checkpoint that covers them, with their names.
    pending: Vec<(u64, String)>,
    next_part: u64,
    open: Option<(Location, String, opendal::Writer)>,
}

impl std::fmt::Debug for FileSinkIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSinkIo")
            .field("url", &self.url)
            .field("subtask", &self.subtask)
            .field("attempt", &self.attempt)
            .field("writer_id", &self.writer_id)
            .field("next_part", &self.next_part)
            .finish()
    }
}

/// Deletes `path`; one already gone is not an error. Every subtask of a run removes what a run it
/// superseded left in progress, so two of them can list the same file, and the local file service
/// says NotFound when the other's delete lands between its own check and removal (in the
/// lifecycle campaign, seeds 7054 and 7059, that failed jobs at their stop with a savepoint).
async fn delete_if_present(loc: &Location, path: &str) -> Result<()> {
    match loc.op.delete(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == opendal::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::storage(path, e)),
    }
}

async fn rename(loc: &Location, from: &str, to: &str) -> Result<()> {
    if loc.op.info().capability().rename {
        loc.op.rename(from, to).await.map_err(|e| Error::storage(to, e))
    } else {
        loc.op.copy(from, to).await.map_err(|e| Error::storage(to, e))?;
        loc.op.delete(from).await.map_err(|e| Error::storage(from, e))
    }
}

/// The part number of `name` if it is a committed part of `lineage` written by a checkpointing
/// sink (`part-{lineage}-{n}-{writer}`).
fn committed_part_number(name: &str, lineage: &str) -> Option<u64> {
    // `{lineage}-{n}-{writer}`: the lineage is known, so dashes in it are no ambiguity.
    let rest = name.strip_prefix(&format!("part-{lineage}-"))?;
    let (n, writer) = rest.split_once('-')?;
    if writer.is_empty() {
        return None;
    }
    n.parse().ok()
}

/// `{run}:{checkpoint},...` ([`RUNS_LATEST_CHECKPOINT_KEY`]); a malformed pair is skipped (its
/// run's in-progress parts then stay: garbage, never a loss) with a warning.
fn parse_runs_latest(runs: &str) -> BTreeMap<String, u64> {
    runs.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let parsed = pair
                .rsplit_once(':')
                .and_then(|(run, c)| Some((run.to_string(), c.parse().ok()?)));
            if parsed.is_none() {
                tracing::warn!(
                    pair,
                    "{RUNS_LATEST_CHECKPOINT_KEY}: expected {{run}}:{{checkpoint}}"
                );
            }
            parsed
        })
        .collect()
}

impl FileSinkIo {
    pub(crate) fn new(url: String, ctx: &crate::operators::OpContext) -> Self {
        let restore = ctx.restore.as_ref().map(|r| {
            let states = r
                .sinks
                .iter()
                .map(|s| {
                    serde_json::from_str::<FileSinkState>(s).unwrap_or_else(|e| {
                        tracing::warn!(
                            "file sink state {s:?} unreadable ({e}): nothing pending taken from it"
                        );
                        FileSinkState::default()
                    })
                })
                .collect();
            (r.checkpoint, states)
        });
        FileSinkIo {
            url,
            run: ctx.job_id.clone(),
            superseded: ctx
                .configuration
                .get(SUPERSEDED_RUNS_KEY)
                .map(|runs| {
                    runs.split(',')
                        .map(str::trim)
                        .filter(|r| !r.is_empty() && *r != ctx.job_id)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            runs_latest: ctx
                .configuration
                .get(RUNS_LATEST_CHECKPOINT_KEY)
                .map(|runs| parse_runs_latest(runs))
                .unwrap_or_default(),
            conf: ctx.configuration.clone(),
            subtask: ctx.subtask,
            attempt: ctx.attempt,
            checkpointing: ctx.checkpointing,
            writer_id: uuid::Uuid::new_v4().simple().to_string(),
            restore,
            // Set by `start` (checkpointing only).
            lineage: String::new(),
            lineages: Vec::new(),
            started: false,
            pending: Vec::new(),
            next_part: 0,
            open: None,
        }
    }

    /// `{run}-`: what every lineage this run starts begins with.
    fn run_prefix(&self) -> String {
        if self.run.is_empty() {
            String::new()
        } else {
            format!("{}-", self.run)
        }
    }

    /// A state's lineage was started by this run: restoring it is a failover within the run,
    /// which may roll back what the run committed after the checkpoint.
    fn is_own(&self, lineage: &str) -> bool {
        let prefix = self.run_prefix();
        !prefix.is_empty() && lineage.starts_with(&prefix)
    }

    /// Another run's `lineage` restored from `checkpoint`, that run's latest: nothing restorable
    /// lists a part of it pending beyond what this restore commits.
    fn restores_latest_of(&self, lineage: &str, checkpoint: u64) -> bool {
        self.runs_latest
            .iter()
            .any(|(run, latest)| lineage.starts_with(&format!("{run}-")) && checkpoint >= *latest)
    }

    fn dir(loc: &Location) -> String {
        loc.path.trim_end_matches('/').to_string()
    }

    /// The committed name of this writer's part `part` (checkpointing).
    fn part_name(&self, part: u64) -> String {
        format!("part-{}-{part}-{}", self.lineage, self.writer_id)
    }

    fn in_progress_of(dir: &str, name: &str) -> String {
        format!("{dir}/.{name}.inprogress")
    }

    /// Before the first write: refuse a file where the directory goes; with checkpointing, also
    /// bring the directory to the restored checkpoint (or to nothing): commit the parts it left
    /// pending (its completion may not have reached this sink), and, in the lineages this run
    /// started, delete the committed parts numbered from the restored `next_part` on (committed
    /// after it, at an end of input). A restore of another run's checkpoint or savepoint (a
    /// redeploy, an upgrade) commits its pending parts and numbers on in a lineage of this run:
    /// whatever that run committed after it stays. In-progress parts of other writers are left
    /// alone: they are hidden (no reader lists them), and one may belong to an attempt still
    /// running whose data must not be lost.
    async fn start(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let loc = locate(&self.url, &self.conf)?;
        let dir = Self::dir(&loc);
        // Once per sink, before its first part: a file where the parts would go is an error that
        // names the output, not one write failure per attempt.
        if let Ok(meta) = loc.op.stat(&dir).await
            && meta.is_file()
        {
            return Err(Error::OutputIsAFile {
                url: self.url.clone(),
            });
        }
        if !self.checkpointing {
            return Ok(());
        }
        // (lineage, the first part number the restored checkpoint does not cover) of every
        // lineage of this run taken over; this sink numbers on in the first one. Pending parts
        // of every state restored, this run's or not.
        let own = format!("{}{}", self.run_prefix(), self.subtask);
        let mut inherited = Vec::new();
        let mut pending = Vec::new();
        let mut taken: Vec<(String, u64)> = Vec::new();
        match self.restore.take() {
            // A fresh start: nothing of an earlier run is this sink's.
            None => {}
            // A subtask a rescale from checkpoint `c` added: a lineage of its own; parts in it are
            // from an earlier attempt after that same checkpoint.
            Some((c, states)) if states.is_empty() => taken.push((format!("{own}c{c}"), 0)),
            Some((c, states)) => {
                for st in states {
                    pending.extend(st.pending);
                    match st.lineage {
                        // A failover within this run. What the state took over stays this
                        // sink's to clean, another run's lineage included: a redeploy's first
                        // attempt that failed before its end never removed what the run it
                        // restored left in progress.
                        Some(lineage) if self.is_own(&lineage) => {
                            inherited.extend(st.taken_over);
                            taken.push((lineage, st.next_part));
                        }
                        // Another run's (a redeploy from its checkpoint or savepoint): its
                        // committed parts are its own. What it left in progress after the
                        // restored checkpoint goes at this sink's end only if that checkpoint is
                        // the run's latest; else a newer checkpoint of it may list a part as
                        // pending, for a later restore of it to commit. (What the state took
                        // over carries no part any later checkpoint lists: that run numbered
                        // only in its own lineage.)
                        Some(lineage) => {
                            if self.restores_latest_of(&lineage, c) {
                                inherited.push(lineage);
                            }
                            inherited.extend(st.taken_over);
                        }
                        None => inherited.extend(st.taken_over),
                    }
                }
            }
        }
        if taken.is_empty() {
            taken.push((own, 0));
        }
        for name in &pending {
            let (from, to) = (Self::in_progress_of(&dir, name), format!("{dir}/{name}"));
            if loc.op.exists(&from).await.map_err(|e| Error::storage(&from, e))? {
                rename(&loc, &from, &to).await?;
            }
        }
        let entries = match loc.op.list(&format!("{dir}/")).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::storage(&self.url, e)),
        };
        for entry in entries {
            let name = entry.name().trim_end_matches('/');
            let stale = taken.iter().any(|(lineage, next_part)| {
                committed_part_number(name, lineage).is_some_and(|n| n >= *next_part)
            });
            if stale {
                let path = format!("{dir}/{name}");
                tracing::info!(path, "removing a part the restored checkpoint does not cover");
                delete_if_present(&loc, &path).await?;
            }
        }
        self.lineages = taken.iter().map(|(l, _)| l.clone()).collect();
        for l in inherited {
            if !self.lineages.contains(&l) {
                self.lineages.push(l);
            }
        }
        let (lineage, next_part) = taken.into_iter().next().unwrap_or_default();
        self.lineage = lineage;
        self.next_part = next_part;
        Ok(())
    }

    async fn writer(&mut self) -> Result<&mut opendal::Writer> {
        self.start().await?;
        if self.open.is_none() {
            let loc = locate(&self.url, &self.conf)?;
            let dir = Self::dir(&loc);
            let tmp = if self.checkpointing {
                Self::in_progress_of(&dir, &self.part_name(self.next_part))
            } else {
                format!(
                    "{dir}/.part-{}{}-{}.inprogress",
                    self.run_prefix(),
                    self.subtask,
                    self.attempt
                )
            };
            let w = loc.op.writer(&tmp).await.map_err(|e| Error::storage(&tmp, e))?;
            self.open = Some((loc, tmp, w));
        }
        match self.open.as_mut() {
            Some((_, _, w)) => Ok(w),
            None => Err(Error::Graph("sink writer not open".into())),
        }
    }

    /// Closes the open part (if any) and returns its committed name.
    async fn close_part(&mut self) -> Result<Option<String>> {
        let Some((_, tmp, mut w)) = self.open.take() else {
            return Ok(None);
        };
        w.close().await.map_err(|e| Error::storage(&tmp, e))?;
        let name = self.part_name(self.next_part);
        self.next_part += 1;
        Ok(Some(name))
    }

    /// End of input, after this writer committed everything: this subtask's in-progress parts of
    /// other writers (attempts that failed or were cancelled, whose names never repeat) will never
    /// be committed; they go now. Not earlier: while the job runs, one of them may belong to an
    /// attempt still writing. So does every in-progress part of the superseded runs without a
    /// checkpoint (any subtask's: every subtask removes them, and a part already gone is no error).
    async fn remove_abandoned_parts(&self) -> Result<()> {
        let loc = locate(&self.url, &self.conf)?;
        let dir = Self::dir(&loc);
        let entries = match loc.op.list(&format!("{dir}/")).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::storage(&self.url, e)),
        };
        let mut mine: Vec<String> = self.lineages.iter().map(|l| format!(".part-{l}-")).collect();
        if mine.is_empty() {
            mine.push(format!(".part-{}{}-", self.run_prefix(), self.subtask));
        }
        mine.extend(self.superseded.iter().map(|run| format!(".part-{run}-")));
        for entry in entries {
            let name = entry.name().trim_end_matches('/');
            // Everything of this writer is committed by now: what is left is someone else's.
            let abandoned = mine.iter().any(|m| {
                name.strip_prefix(m.as_str())
                    .is_some_and(|rest| rest.ends_with(".inprogress"))
            });
            if abandoned {
                let path = format!("{dir}/{name}");
                delete_if_present(&loc, &path).await?;
            }
        }
        Ok(())
    }

    async fn commit_parts(&mut self, up_to: u64) -> Result<()> {
        let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(c, _)| *c <= up_to);
        self.pending = later;
        if ready.is_empty() {
            return Ok(());
        }
        let loc = locate(&self.url, &self.conf)?;
        let dir = Self::dir(&loc);
        for (_, name) in ready {
            rename(&loc, &Self::in_progress_of(&dir, &name), &format!("{dir}/{name}")).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl SinkIo for FileSinkIo {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        let url = self.url.clone();
        self.writer()
            .await?
            .write(bytes)
            .await
            .map_err(|e| Error::storage(&url, e))
    }

    async fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<String>> {
        self.start().await?;
        if let Some(name) = self.close_part().await? {
            self.pending.push((checkpoint, name));
        }
        let state = FileSinkState {
            pending: self.pending.iter().map(|(_, name)| name.clone()).collect(),
            next_part: self.next_part,
            lineage: Some(self.lineage.clone()),
            taken_over: self
                .lineages
                .iter()
                .filter(|l| **l != self.lineage)
                .cloned()
                .collect(),
        };
        Ok(Some(serde_json::to_string(&state).unwrap_or_default()))
    }

    async fn commit(&mut self, checkpoint: u64) -> Result<()> {
        self.commit_parts(checkpoint).await
    }

    async fn stop(self: Box<Self>) -> Result<()> {
        if self.checkpointing {
            self.stop_checkpointed().await
        } else {
            self.close().await
        }
    }

    async fn close(mut self: Box<Self>) -> Result<()> {
        if self.checkpointing {
            // End of input. Its sources finished only after their final checkpoint completed, so
            // what is pending belongs to completed checkpoints. Data written after the last
            // barrier is not covered by any checkpoint: committed too, with a warning (an
            // operator that emits at end of input; a later restore removes it again, see `start`).
            self.start().await?;
            if let Some(name) = self.close_part().await? {
                tracing::warn!(
                    part = name,
                    "a part written after the last checkpoint barrier is committed at end of input, outside a checkpoint"
                );
                self.pending.push((u64::MAX, name));
            }
            self.commit_parts(u64::MAX).await?;
            return self.remove_abandoned_parts().await;
        }
        self.writer().await?;
        let Some((loc, tmp, mut w)) = self.open.take() else {
            return Ok(());
        };
        w.close().await.map_err(|e| Error::storage(&tmp, e))?;
        let fin = format!("{}/part-{}{}", Self::dir(&loc), self.run_prefix(), self.subtask);
        rename(&loc, &tmp, &fin).await?;
        self.remove_abandoned_parts().await
    }
}

/// An attempt dropped with a part open (cancelled, or aborted when its TaskManager dropped its
/// work for a JobManager that declared it lost): that part holds only output after the last
/// barrier, which no checkpoint covers and a restore replays, so nothing will ever commit it.
/// Removed now, in the background: when the attempt was a zombie resumed after the job's other
/// attempts ended, nobody else is left to. A killed process leaves it; see
/// `remove_abandoned_parts`.
impl Drop for FileSinkIo {
    fn drop(&mut self) {
        if let Some((loc, tmp, mut w)) = self.open.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                // Aborted, not just dropped: on S3 a part not closed is a multipart upload that
                // would stay (and be billed) with no object to delete.
                let _ = w.abort().await;
                if let Err(e) = loc.op.delete(&tmp).await {
                    tracing::warn!(part = tmp, "cannot remove an abandoned part: {e}");
                }
            });
        }
    }
}

impl FileSinkIo {
    /// [`SinkIo::stop`]: the part open since the stop's barrier (nothing should be in it) is
    /// removed, not committed; what completed checkpoints cover is.
    async fn stop_checkpointed(mut self: Box<Self>) -> Result<()> {
        self.start().await?;
        if let Some((loc, tmp, mut w)) = self.open.take() {
            w.close().await.map_err(|e| Error::storage(&tmp, e))?;
            tracing::warn!(
                part = tmp,
                "stopped with a savepoint: output after its barrier is not committed"
            );
            loc.op.delete(&tmp).await.map_err(|e| Error::storage(&tmp, e))?;
        }
        self.commit_parts(u64::MAX).await?;
        self.remove_abandoned_parts().await
    }
}

/// `print`: lines to stdout.
#[derive(Debug)]
pub(crate) struct PrintIo;

#[async_trait]
impl SinkIo for PrintIo {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut out = tokio::io::stdout();
        out.write_all(&bytes).await?;
        out.flush().await?;
        Ok(())
    }

    async fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
