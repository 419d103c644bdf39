//! One streaming job's checkpoints on the JobManager: when to trigger the next one, the pure
//! [`CheckpointCoordinator`] (acks, completion, retention), the latest completed checkpoint that
//! restarts restore from, and which shared files fall out of every retained checkpoint. No I/O:
//! the server writes metadata, deletes files and sends the RPCs this decides.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use floe_checkpoint::{Acked, CheckpointCoordinator, CompletedCheckpoint, TaskSnapshot};
use floe_datastream::CheckpointConfig;

use crate::checkpoint_history::CheckpointHistory;

/// What retention leaves to delete once a checkpoint completed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subsumed {
    pub checkpoints: Vec<u64>,
    /// Shared objects (incremental state) no retained checkpoint references any more.
    pub shared_files: Vec<String>,
    /// The oldest checkpoint retention keeps: every `chk-{n}` below it can go (aborted
    /// checkpoints' claims and late uploads, deletes that failed).
    pub oldest_retained: Option<u64>,
    /// When set, a sweep of the job's shared state is due: the objects no checkpoint in the store
    /// references, written before this time (ms since the epoch; see
    /// `CheckpointStore::unreferenced_shared`). At the first completion after a JobManager
    /// started (what one before it forgot), then at most every [`SWEEP_EVERY_MS`].
    pub sweep_before_ms: Option<u64>,
}

/// How often the shared state's listing sweep runs at most: it lists every shared object and
/// reads every checkpoint's metadata, which a checkpoint a second must not pay each time.
pub const SWEEP_EVERY_MS: u64 = 5 * 60 * 1000;

/// How much earlier than the latest completed checkpoint's trigger an object must have been
/// written to be swept: room for the object store's clock running ahead of the JobManager's.
pub const SWEEP_CLOCK_MARGIN_MS: u64 = 60 * 1000;

/// Counts for the REST API (Flink's `/jobs/{id}/checkpoints`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointCounts {
    pub triggered: u64,
    pub completed: u64,
    pub failed: u64,
}

/// A job's checkpointing state.
#[derive(Debug)]
pub struct JobCheckpoints {
    pub config: CheckpointConfig,
    coordinator: CheckpointCoordinator,
    /// The job storage has been read for an earlier checkpoint: the job may start.
    pub ready: bool,
    /// What restarts restore from.
    pub latest: Option<Arc<CompletedCheckpoint>>,
    retained: Vec<Arc<CompletedCheckpoint>>,
    next_trigger_ms: u64,
    pending_since_ms: Option<u64>,
    pub counts: CheckpointCounts,
    /// The checkpoint the running attempts were restored from (Flink's `latest.restored`).
    pub restored: Option<u64>,
    /// The savepoint directory (URL) `latest` was restored from: its files are there, not in
    /// the job storage. `None` once the job completed a checkpoint of its own.
    pub restored_savepoint: Option<String>,
    /// A savepoint was asked for: its checkpoint triggers at once, not at the interval.
    savepoint_wanted: bool,
    /// A checkpoint was asked for (`POST /jobs/{id}/checkpoints`): the next one goes as soon as
    /// none is pending, not at the interval.
    checkpoint_wanted: bool,
    /// The checkpoint a savepoint is being taken as: no other checkpoint triggers until the
    /// savepoint is resolved ([`JobCheckpoints::savepoint_resolved`]).
    pub savepoint_checkpoint: Option<u64>,
    /// Why the savepoint's checkpoint was aborted, until the JobMaster takes it.
    pub savepoint_aborted: Option<String>,
    /// The recent checkpoints, for the REST API and the web UI.
    pub history: CheckpointHistory,
    /// Checkpoint ids start above this: the highest id other jobs of this job's lineage completed
    /// (a savepoint's id + 1 alone would repeat theirs).
    pub id_floor: u64,
    /// Shared files (incremental state) tasks acknowledged, by checkpoint, until a checkpoint at
    /// or above it completes (issue 31, item 11): those of a checkpoint that never completed
    /// belong to no completed checkpoint, so subsumption never saw them. A task's snapshot names
    /// every shared file its state still has, so one acknowledged for an older checkpoint and not
    /// named by a retained one is gone from its state for good (a file is never made again).
    unconfirmed: BTreeMap<u64, BTreeSet<String>>,
    /// When the last shared state sweep was due (`None`: none since this JobManager started).
    swept_ms: Option<u64>,
    /// Checkpoints aborted whose abort the TaskManagers were not told yet (their sources send
    /// the cancel-checkpoint marker, so no alignment waits for the barrier until the next one).
    pub aborted_unsent: Vec<u64>,
}

impl JobCheckpoints {
    pub fn new(job_id: &str, config: CheckpointConfig, tasks: Vec<String>, sources: Vec<String>) -> Self {
        let coordinator = CheckpointCoordinator::new(job_id, tasks, sources, config.num_retained, 1);
        JobCheckpoints {
            config,
            coordinator,
            ready: false,
            latest: None,
            retained: Vec::new(),
            next_trigger_ms: 0,
            pending_since_ms: None,
            counts: CheckpointCounts::default(),
            restored: None,
            restored_savepoint: None,
            savepoint_wanted: false,
            checkpoint_wanted: false,
            savepoint_checkpoint: None,
            savepoint_aborted: None,
            history: CheckpointHistory::default(),
            id_floor: 0,
            unconfirmed: BTreeMap::new(),
            swept_ms: None,
            aborted_unsent: Vec::new(),
        }
    }

    /// A savepoint: the next checkpoint is triggered as soon as none is pending.
    pub fn request_savepoint(&mut self) {
        self.savepoint_wanted = true;
        self.savepoint_checkpoint = None;
        self.savepoint_aborted = None;
    }

    /// A checkpoint now (Flink's manual checkpoint trigger, the operator's
    /// `checkpointTriggerNonce`): the next one is triggered as soon as none is pending.
    pub fn request_checkpoint(&mut self) {
        self.checkpoint_wanted = true;
    }

    /// The savepoint was written, or failed: checkpoints go on at the interval.
    pub fn savepoint_resolved(&mut self) {
        self.savepoint_wanted = false;
        self.savepoint_checkpoint = None;
    }

    /// `aborted` was aborted at `now_ms`: if a savepoint was being taken as it, the savepoint failed.
    fn aborted(&mut self, aborted: u64, why: &str, now_ms: u64) {
        self.history.failed(aborted, now_ms, why);
        self.aborted_unsent.push(aborted);
        if self.savepoint_checkpoint == Some(aborted) {
            self.savepoint_aborted = Some(why.to_string());
        }
    }

    /// The job storage was read: continue after `latest` (if any) and start.
    pub fn resume_from(
        &mut self,
        job_id: &str,
        tasks: Vec<String>,
        sources: Vec<String>,
        latest: Option<CompletedCheckpoint>,
    ) {
        let next_id = latest.as_ref().map_or(1, |c| c.id + 1).max(self.id_floor + 1);
        self.coordinator =
            CheckpointCoordinator::new(job_id, tasks, sources, self.config.num_retained, next_id);
        if let Some(c) = latest {
            let c = Arc::new(c);
            self.coordinator.completed(c.id);
            self.retained = vec![c.clone()];
            self.restored = Some(c.id);
            self.latest = Some(c);
        }
        self.restored_savepoint = None;
        self.ready = true;
    }

    /// The job starts from a savepoint (`execution.state-recovery.path`; or a retained checkpoint
    /// of another job) whose files are relative to `directory`: it is what the job restores from
    /// until the job completes a checkpoint of its own. Nothing of it is ever deleted by
    /// retention, and the first checkpoint uploads all the state it keeps.
    pub fn resume_from_savepoint(
        &mut self,
        job_id: &str,
        tasks: Vec<String>,
        sources: Vec<String>,
        savepoint: CompletedCheckpoint,
        directory: String,
    ) {
        self.resume_from(job_id, tasks, sources, Some(savepoint));
        // Not the job's own: retention never deletes anything of it (Flink's NO_CLAIM).
        self.retained.clear();
        self.restored_savepoint = Some(directory);
    }

    /// The job was rescaled at `now_ms`: its task names changed (see
    /// [`CheckpointCoordinator::set_tasks`]).
    pub fn set_tasks(&mut self, tasks: Vec<String>, sources: Vec<String>, now_ms: u64) {
        if let Some(aborted) = self.coordinator.set_tasks(tasks, sources) {
            self.counts.failed += 1;
            self.aborted(aborted, "the job rescaled", now_ms);
        }
        self.pending_since_ms = None;
    }

    /// Restarted attempts restore from the latest checkpoint.
    pub fn restarting(&mut self) {
        self.restored = self.latest.as_ref().map(|c| c.id).or(self.restored);
    }

    /// This task's snapshot in the latest checkpoint, to restore it from.
    pub fn restore_of(&self, task: &str) -> Option<(u64, TaskSnapshot)> {
        let latest = self.latest.as_ref()?;
        latest.tasks.get(task).map(|s| (latest.id, s.clone()))
    }

    /// What subtask `subtask` of vertex `vertex` (whose state owners are `owners`) at
    /// `parallelism` restores from the latest checkpoint, whatever parallelism and vertex its
    /// state had when it was taken (one mechanism for a restart, a rescale and a savepoint
    /// upgrade: [`floe_checkpoint::redistribute()`]). Each part of the state comes from the vertex
    /// its operator was in then ([`floe_checkpoint::owners`]). `None` without a checkpoint, or
    /// when it holds nothing of the vertex's operators.
    pub fn restore_for(
        &self,
        vertex: &str,
        owners: Option<&floe_checkpoint::StateOwners>,
        subtask: u32,
        parallelism: u32,
        max_parallelism: u32,
    ) -> Option<(u64, floe_checkpoint::SubtaskRestore)> {
        use floe_checkpoint::{StatePart, owners::predecessor};
        let latest = self.latest.as_ref()?;
        let from = |old: &str| {
            let prefix = format!("{old}#");
            let mut old: Vec<(u32, &TaskSnapshot)> = latest
                .tasks
                .iter()
                .filter_map(|(name, s)| Some((name.strip_prefix(&prefix)?.parse().ok()?, s)))
                .collect();
            old.sort_by_key(|(i, _)| *i);
            // The old subtasks must be 0..n, each once: anything else is not a snapshot of a vertex.
            if old.is_empty() || old.iter().enumerate().any(|(k, (i, _))| *i as usize != k) {
                return None;
            }
            let old: Vec<&TaskSnapshot> = old.into_iter().map(|(_, s)| s).collect();
            let key_groups = |p: u32, i: u32| {
                let r = floe_datastream::data::key_group_range_for_operator(max_parallelism, p, i);
                *r.start()..*r.end() + 1
            };
            Some(floe_checkpoint::redistribute(
                &old,
                parallelism,
                subtask,
                key_groups,
                floe_datastream::checkpoint::source_positions,
            ))
        };
        let part = |part| predecessor(&latest.operators, owners, vertex, part).and_then(|old| from(&old));
        let (head, sink) = (part(StatePart::Head), part(StatePart::Sink));
        if head.is_none() && sink.is_none() {
            return None;
        }
        let (head, sink) = (head.unwrap_or_default(), sink.unwrap_or_default());
        Some((
            latest.id,
            floe_checkpoint::SubtaskRestore {
                keyed: head.keyed,
                positions: head.positions,
                broadcast: head.broadcast,
                in_flight: head.in_flight,
                sinks: sink.sinks,
                storage: self.restored_savepoint.clone(),
            },
        ))
    }

    /// The next checkpoint, when it is due and every task runs or finished (at least one source
    /// still running); aborts one pending past its timeout. Finished tasks carry the snapshot they
    /// ended with, from the latest checkpoint; one with none there (it finished before any
    /// checkpoint covered it) leaves nothing consistent to take.
    pub fn maybe_trigger(
        &mut self,
        now_ms: u64,
        all_running: bool,
        finished: &[String],
    ) -> Option<(u64, Vec<String>)> {
        if let Some(since) = self.pending_since_ms
            && now_ms.saturating_sub(since) > self.config.timeout.as_millis() as u64
        {
            if let Some(id) = self.coordinator.abort(None) {
                tracing::warn!(
                    checkpoint = id,
                    "checkpoint expired before every task acknowledged it"
                );
                self.counts.failed += 1;
                self.aborted(
                    id,
                    "it expired before every task acknowledged it (execution.checkpointing.timeout)",
                    now_ms,
                );
            }
            self.pending_since_ms = None;
        }
        // A savepoint's checkpoint goes at once; none goes while a savepoint is being written.
        let due = now_ms >= self.next_trigger_ms
            || self.checkpoint_wanted
            || (self.savepoint_wanted && self.savepoint_checkpoint.is_none());
        if !all_running
            || !self.ready
            || !due
            || self.coordinator.pending().is_some()
            || self.savepoint_checkpoint.is_some()
        {
            return None;
        }
        let mut end_states = std::collections::BTreeMap::new();
        for task in finished {
            let snapshot = self.latest.as_ref().and_then(|l| l.tasks.get(task))?;
            end_states.insert(task.clone(), snapshot.clone());
        }
        let trigger = self.coordinator.trigger_with_finished(now_ms, end_states)?;
        if self.savepoint_wanted {
            self.savepoint_checkpoint = Some(trigger.id);
        }
        self.checkpoint_wanted = false;
        self.history.triggered(
            trigger.id,
            now_ms,
            self.savepoint_wanted,
            self.coordinator.task_count(),
        );
        self.pending_since_ms = Some(now_ms);
        self.next_trigger_ms = now_ms + self.config.interval.as_millis() as u64;
        self.counts.triggered += 1;
        Some((trigger.id, trigger.sources))
    }

    /// A task acknowledged; `Some` when that completed the checkpoint (write its metadata next).
    pub fn acknowledge(
        &mut self,
        id: u64,
        task: &str,
        snapshot: TaskSnapshot,
        now_ms: u64,
    ) -> Option<CompletedCheckpoint> {
        if self.coordinator.pending() == Some(id) {
            self.history.acknowledged(id, task, &snapshot, now_ms);
        }
        // Late acknowledgements (of a checkpoint already aborted) too: their uploads happened.
        let shared = snapshot.files.iter().filter(|f| is_shared(f)).cloned();
        self.unconfirmed.entry(id).or_default().extend(shared);
        match self.coordinator.acknowledge(id, task, snapshot, now_ms) {
            Acked::Complete(c) => {
                self.pending_since_ms = None;
                Some(*c)
            }
            Acked::Pending { .. } | Acked::Ignored => None,
        }
    }

    /// `task` finished: the pending checkpoint takes the snapshot it ended with (its last, in the
    /// latest checkpoint) as its acknowledgement; `Some` when that completed it (its completion
    /// time is the caller's to set). Without such a snapshot the pending checkpoint is aborted.
    pub fn task_finished(&mut self, task: &str, now_ms: u64) -> Option<CompletedCheckpoint> {
        self.coordinator.pending()?;
        let Some(end) = self.latest.as_ref().and_then(|l| l.tasks.get(task)).cloned() else {
            self.abort(
                None,
                &format!("{task} finished before any checkpoint covered it"),
                now_ms,
            );
            return None;
        };
        match self.coordinator.task_finished(task, end, 0) {
            Acked::Complete(c) => {
                self.pending_since_ms = None;
                Some(*c)
            }
            Acked::Pending { .. } | Acked::Ignored => None,
        }
    }

    /// A task declined or failed: the pending checkpoint cannot complete.
    pub fn abort(&mut self, id: Option<u64>, why: &str, now_ms: u64) {
        if let Some(aborted) = self.coordinator.abort(id) {
            tracing::info!(checkpoint = aborted, "checkpoint aborted: {why}");
            self.counts.failed += 1;
            self.pending_since_ms = None;
            self.aborted(aborted, why, now_ms);
        }
    }

    /// The metadata of `checkpoint` is written: it is the latest; returns what retention drops.
    pub fn completed(&mut self, checkpoint: CompletedCheckpoint) -> Subsumed {
        let checkpoint_id = checkpoint.id;
        let checkpoint = Arc::new(checkpoint);
        let dropped = self.coordinator.completed(checkpoint.id);
        self.restored_savepoint = None;
        self.counts.completed += 1;
        self.history.completed(&checkpoint);
        self.retained.push(checkpoint.clone());
        self.latest = Some(checkpoint);
        let (gone, kept): (Vec<_>, Vec<_>) = self.retained.drain(..).partition(|c| dropped.contains(&c.id));
        self.retained = kept;
        let referenced: BTreeSet<&String> = self
            .retained
            .iter()
            .flat_map(|c| c.tasks.values().flat_map(|t| &t.files))
            .collect();
        // Those of subsumed checkpoints, and those acknowledged for older checkpoints that never
        // completed; not those of newer ones (acknowledged while this one's metadata was written).
        let newer = self.unconfirmed.split_off(&(checkpoint_id + 1));
        let unconfirmed = std::mem::replace(&mut self.unconfirmed, newer);
        let shared_files = gone
            .iter()
            .flat_map(|c| c.tasks.values().flat_map(|t| &t.files))
            .chain(unconfirmed.values().flatten())
            .filter(|f| is_shared(f) && !referenced.contains(f))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let sweep_before_ms = self
            .latest
            .as_ref()
            .filter(|c| self.swept_ms.is_none_or(|t| c.completed_ms >= t + SWEEP_EVERY_MS))
            .map(|c| {
                self.swept_ms = Some(c.completed_ms);
                c.triggered_ms.saturating_sub(SWEEP_CLOCK_MARGIN_MS)
            });
        Subsumed {
            checkpoints: dropped,
            shared_files,
            oldest_retained: self.retained.iter().map(|c| c.id).min(),
            sweep_before_ms,
        }
    }

    pub fn pending(&self) -> Option<u64> {
        self.coordinator.pending()
    }

    /// The checkpoints retention keeps: what a restore may still read of the job's own storage.
    pub fn retained(&self) -> &[Arc<CompletedCheckpoint>] {
        &self.retained
    }
}

/// A shared (incremental) state file, which several checkpoints may reference.
fn is_shared(file: &str) -> bool {
    file.contains("/shared/")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config() -> CheckpointConfig {
        CheckpointConfig {
            interval: Duration::from_millis(1000),
            num_retained: 1,
            timeout: Duration::from_millis(5000),
            backend: floe_datastream::StateBackendKind::RocksDb,
        }
    }

    fn snap(files: &[&str]) -> TaskSnapshot {
        TaskSnapshot {
            files: files.iter().map(|f| f.to_string()).collect(),
            ..TaskSnapshot::default()
        }
    }

    /// Issue 31, item 1: ids start above the lineage's floor, from nothing or from a savepoint
    /// older than it; above the savepoint when it is newer.
    #[test]
    fn checkpoint_ids_start_above_the_lineages_floor() {
        let tasks = vec!["source#0".to_string()];
        let savepoint = |id| CompletedCheckpoint {
            job_id: "old".into(),
            id,
            triggered_ms: 0,
            completed_ms: 0,
            tasks: Default::default(),
            max_parallelism: Default::default(),
            operators: Default::default(),
        };
        for (latest, floor, first) in [
            (None, 0, 1),
            (None, 12, 13),
            (Some(3), 12, 13),
            (Some(20), 12, 21),
        ] {
            let mut c = JobCheckpoints::new("j", config(), tasks.clone(), tasks.clone());
            c.id_floor = floor;
            match latest {
                Some(id) => {
                    c.resume_from_savepoint("j", tasks.clone(), tasks.clone(), savepoint(id), "sp".into())
                }
                None => c.resume_from("j", tasks.clone(), tasks.clone(), None),
            }
            assert_eq!(
                c.maybe_trigger(0, true, &[]).map(|t| t.0),
                Some(first),
                "from {latest:?} above {floor}"
            );
        }
    }

    /// Issue 31, item 9: every abort (an expiry, a decline) is queued once for the TaskManagers,
    /// whose sources send the cancel-checkpoint marker.
    #[test]
    fn aborted_checkpoints_are_queued_for_the_taskmanagers_once() {
        let tasks = vec!["source#0".to_string(), "sum#0".to_string()];
        let mut c = JobCheckpoints::new("j", config(), tasks.clone(), vec!["source#0".into()]);
        c.resume_from("j", tasks, vec!["source#0".into()], None);
        assert_eq!(c.maybe_trigger(0, true, &[]).map(|t| t.0), Some(1));
        assert!(c.aborted_unsent.is_empty());
        // Past the 5 s timeout: 1 expires, and 2 is triggered (due since 1 s).
        assert_eq!(c.maybe_trigger(5_001, true, &[]).map(|t| t.0), Some(2));
        assert_eq!(c.aborted_unsent, [1]);
        c.abort(Some(2), "sum#0 declined", 5_100);
        assert_eq!(std::mem::take(&mut c.aborted_unsent), [1, 2]);
        c.abort(Some(2), "again", 5_200);
        assert!(
            c.aborted_unsent.is_empty(),
            "an abort of nothing pending is no abort"
        );
    }

    /// Issue 32 (parity, `checkpointTriggerNonce`): a checkpoint asked for goes at once, not at
    /// the interval, and only once.
    #[test]
    fn a_checkpoint_asked_for_is_triggered_at_once() {
        let tasks = vec!["source#0".to_string()];
        let mut c = JobCheckpoints::new("j", config(), tasks.clone(), tasks.clone());
        c.resume_from("j", tasks.clone(), tasks, None);
        assert_eq!(c.maybe_trigger(0, true, &[]).map(|t| t.0), Some(1));
        let done = c.acknowledge(1, "source#0", snap(&[]), 10).unwrap();
        c.completed(done);
        assert_eq!(
            c.maybe_trigger(20, true, &[]),
            None,
            "the interval (1 s) is not up"
        );
        c.request_checkpoint();
        assert_eq!(c.maybe_trigger(30, true, &[]).map(|t| t.0), Some(2));
        c.acknowledge(2, "source#0", snap(&[]), 40).unwrap();
        assert_eq!(c.maybe_trigger(50, true, &[]), None, "asked for once");
    }

    /// Issue 31, item 11: a shared file uploaded for a checkpoint that never completed (expired,
    /// declined) and that the next completed checkpoint does not name is deleted with that
    /// completion; one the completed checkpoint names stays, and so do files acknowledged for a
    /// newer checkpoint meanwhile.
    #[test]
    fn shared_files_of_checkpoints_that_never_completed_go_at_the_next_completion() {
        let tasks = vec!["source#0".to_string(), "sum#0".to_string()];
        let mut c = JobCheckpoints::new("j", config(), tasks.clone(), vec!["source#0".into()]);
        c.resume_from("j", tasks, vec!["source#0".into()], None);
        assert_eq!(c.maybe_trigger(0, true, &[]).map(|t| t.0), Some(1));
        c.acknowledge(1, "source#0", snap(&[]), 10);
        let done = c.acknowledge(1, "sum#0", snap(&["j/shared/a.sst"]), 20).unwrap();
        c.completed(done);
        // 2 expires with sum#0's upload of x (a compaction's output, gone again by 3) and of y.
        assert_eq!(c.maybe_trigger(1000, true, &[]).map(|t| t.0), Some(2));
        c.acknowledge(
            2,
            "sum#0",
            snap(&["j/shared/a.sst", "j/shared/x.sst", "j/shared/y.sst"]),
            1010,
        );
        assert_eq!(
            c.maybe_trigger(7000, true, &[]).map(|t| t.0),
            Some(3),
            "2 expired"
        );
        // A late acknowledgement of 2 uploaded z.
        c.acknowledge(2, "source#0", snap(&["j/shared/z.sst"]), 7005);
        c.acknowledge(3, "source#0", snap(&[]), 7010);
        let done3 = c
            .acknowledge(3, "sum#0", snap(&["j/shared/a.sst", "j/shared/y.sst"]), 7020)
            .unwrap();
        // 4 triggers and is acknowledged before 3's metadata is written.
        assert_eq!(c.maybe_trigger(8000, true, &[]).map(|t| t.0), Some(4));
        c.acknowledge(4, "sum#0", snap(&["j/shared/w.sst"]), 8010);
        let subsumed = c.completed(done3);
        assert_eq!(subsumed.checkpoints, vec![1]);
        assert_eq!(
            subsumed.shared_files,
            vec!["j/shared/x.sst".to_string(), "j/shared/z.sst".to_string()],
            "a and y are 3's; w is 4's"
        );
        let done4 = c.acknowledge(4, "source#0", snap(&[]), 8020).unwrap();
        assert_eq!(
            c.completed(done4).shared_files,
            vec!["j/shared/a.sst".to_string(), "j/shared/y.sst".to_string()],
            "3 subsumed by 4, which names only w"
        );
    }

    /// Issue 31, item 11: the listing sweep of shared state is due at the first completion after
    /// a JobManager started, then at most every `SWEEP_EVERY_MS`, with the cutoff at the
    /// completed checkpoint's trigger less the clock margin.
    #[test]
    fn the_shared_state_sweep_is_due_first_then_every_five_minutes() {
        let tasks = vec!["source#0".to_string()];
        let mut c = JobCheckpoints::new("j", config(), tasks.clone(), tasks.clone());
        c.resume_from("j", tasks.clone(), tasks, None);
        let complete = |c: &mut JobCheckpoints, at: u64| {
            let (id, _) = c.maybe_trigger(at, true, &[]).expect("triggers");
            let done = c
                .acknowledge(id, "source#0", snap(&[]), at + 10)
                .expect("completes");
            c.completed(done).sweep_before_ms
        };
        let start = 10 * SWEEP_EVERY_MS;
        assert_eq!(complete(&mut c, start), Some(start - SWEEP_CLOCK_MARGIN_MS));
        assert_eq!(complete(&mut c, start + 60_000), None);
        assert_eq!(complete(&mut c, start + SWEEP_EVERY_MS - 1_000), None);
        let later = start + SWEEP_EVERY_MS + 1_000;
        assert_eq!(complete(&mut c, later), Some(later - SWEEP_CLOCK_MARGIN_MS));
    }

    #[test]
    fn triggers_on_interval_and_drops_shared_files_only_when_no_retained_checkpoint_uses_them() {
        let tasks = vec!["source#0".to_string(), "sum#0".to_string()];
        let mut c = JobCheckpoints::new("j", config(), tasks.clone(), vec!["source#0".into()]);
        assert_eq!(
            c.maybe_trigger(0, true, &[]),
            None,
            "not before the job storage was read"
        );
        c.resume_from("j", tasks, vec!["source#0".into()], None);
        assert_eq!(
            c.maybe_trigger(0, false, &[]),
            None,
            "not while a task is not running"
        );
        assert_eq!(
            c.maybe_trigger(0, true, &[]),
            Some((1, vec!["source#0".to_string()]))
        );
        assert_eq!(c.maybe_trigger(2000, true, &[]), None, "one pending at a time");
        c.acknowledge(1, "source#0", snap(&[]), 10);
        let done = c
            .acknowledge(
                1,
                "sum#0",
                snap(&["j/shared/a.sst", "j/shared/b.sst", "chk-1/MANIFEST"]),
                20,
            )
            .unwrap();
        assert_eq!(
            c.completed(done),
            Subsumed {
                oldest_retained: Some(1),
                // The first completion since this JobManager started sweeps.
                sweep_before_ms: Some(0),
                ..Subsumed::default()
            }
        );
        assert_eq!(c.restore_of("sum#0").map(|r| r.0), Some(1));
        assert_eq!(c.maybe_trigger(500, true, &[]), None, "interval not elapsed");
        assert_eq!(c.maybe_trigger(1000, true, &[]).map(|t| t.0), Some(2));
        c.acknowledge(2, "source#0", snap(&[]), 1010);
        let done = c
            .acknowledge(
                2,
                "sum#0",
                snap(&["j/shared/b.sst", "j/shared/c.sst", "chk-2/MANIFEST"]),
                1020,
            )
            .unwrap();
        let subsumed = c.completed(done);
        assert_eq!(subsumed.checkpoints, vec![1]);
        assert_eq!(subsumed.oldest_retained, Some(2), "retention keeps one here");
        assert_eq!(subsumed.sweep_before_ms, None, "a second later: not due");
        assert_eq!(
            subsumed.shared_files,
            vec!["j/shared/a.sst".to_string()],
            "b is still used by 2"
        );
        // A checkpoint nobody finishes expires.
        assert_eq!(c.maybe_trigger(2000, true, &[]).map(|t| t.0), Some(3));
        assert_eq!(
            c.maybe_trigger(8000, true, &[]).map(|t| t.0),
            Some(4),
            "3 expired, 4 triggered"
        );
        assert_eq!(
            c.counts,
            CheckpointCounts {
                triggered: 4,
                completed: 2,
                failed: 1
            }
        );
    }
}
