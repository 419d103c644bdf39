//! Checkpoints (DESIGN.md "State and checkpoints"): [`CheckpointCoordinator`], the JobManager's pure
//! bookkeeping of asynchronous barrier snapshots (which checkpoint is pending, who acknowledged, when it
//! completes, which older ones it subsumes), and [`CheckpointStore`], where completed checkpoints live:
//! `checkpoints/{job-id}/chk-{n}/_metadata` under the job storage.
//!
//! Read [`CheckpointCoordinator`] first. It has no I/O and no clock (times are arguments), like the
//! scheduling core. Checkpoints go on after some tasks finished (Flink's FLIP-147): a finished
//! task is not asked again, its last snapshot is carried into every later checkpoint, so a restore
//! gives it back its end state (a finished source restores at its end and reads nothing).

pub mod owners;
pub mod redistribute;
pub mod savepoint;
pub mod store;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use owners::{StateOwners, StatePart};
pub use redistribute::{SubtaskRestore, redistribute};
pub use savepoint::Savepoint;
pub use store::CheckpointStore;

/// Why a checkpoint operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Storage(#[from] floe_storage::Error),
    #[error("checkpoint metadata {url} is corrupt: {reason}")]
    CorruptMetadata { url: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens the sealed metadata `bytes` read from `url` (a checkpoint's or a savepoint's) as a `T`;
/// damage and a body that is not `what` are [`Error::CorruptMetadata`] naming the object.
pub(crate) fn open_metadata<T: serde::de::DeserializeOwned>(
    url: &str,
    bytes: &bytes::Bytes,
    what: &str,
) -> Result<T> {
    let corrupt = |reason: String| Error::CorruptMetadata {
        url: url.to_string(),
        reason,
    };
    let payload = floe_storage::envelope::open(url, bytes).map_err(|e| match e {
        floe_storage::Error::Corrupt { reason, .. } => corrupt(reason),
        other => Error::Storage(other),
    })?;
    serde_json::from_slice(&payload).map_err(|e| corrupt(format!("not {what}: {e}")))
}

/// A task of the job, as the coordinator names it (`vertex#subtask`).
pub type TaskName = String;

/// What one task snapshotted for one checkpoint: where its state went and how big it is.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TaskSnapshot {
    /// Objects (relative to the checkpoint directory or the shared one) holding the state.
    pub files: Vec<String>,
    /// Bytes this checkpoint uploaded for the task (incremental backends upload less than they hold).
    pub uploaded_bytes: u64,
    /// Bytes of state the task holds, including files shared with earlier checkpoints.
    pub state_bytes: u64,
    /// Sources: where to read on from (opaque to the coordinator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<String>,
    /// Sinks: what the committer needs after a restore (files pending commit, the next part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<String>,
    /// Broadcast state (Flink's broadcast state pattern): the same in every subtask, so any one
    /// copy restores any subtask (opaque to the coordinator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<String>,
    /// An async operator's records whose results were not emitted at the barrier (opaque to the
    /// coordinator): issued again after a restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,
    /// The schema each keyed state was written with (state name to the value type's schema, as
    /// JSON): a restore into a changed type migrates or refuses by it. Opaque to the coordinator.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemas: BTreeMap<String, String>,
}

/// A checkpoint every task acknowledged: what `_metadata` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedCheckpoint {
    pub job_id: String,
    pub id: u64,
    pub triggered_ms: u64,
    pub completed_ms: u64,
    pub tasks: BTreeMap<TaskName, TaskSnapshot>,
    /// Each vertex's max parallelism (its number of key groups): keyed state restores only into
    /// the same number, so a restore into another job (a last-state upgrade) checks it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_parallelism: BTreeMap<String, u32>,
    /// Each vertex's operators that own its tasks' state (by uid): a restore into another job
    /// maps state by operator, whatever vertex the operator is in now ([`owners`]). Empty in
    /// checkpoints written before they were recorded (those map by vertex id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operators: BTreeMap<String, StateOwners>,
}

impl CompletedCheckpoint {
    pub fn uploaded_bytes(&self) -> u64 {
        self.tasks.values().map(|t| t.uploaded_bytes).sum()
    }

    pub fn state_bytes(&self) -> u64 {
        self.tasks.values().map(|t| t.state_bytes).sum()
    }
}

/// The coordinator's answer to a trigger: inject barrier `id` at these sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub id: u64,
    pub timestamp_ms: u64,
    pub sources: Vec<TaskName>,
}

/// What an acknowledgement led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acked {
    /// Still waiting for these tasks.
    Pending { waiting_for: usize },
    /// Every task acknowledged: write the metadata, then call [`CheckpointCoordinator::completed`].
    Complete(Box<CompletedCheckpoint>),
    /// Not the pending checkpoint (aborted, or from an earlier attempt): ignore.
    Ignored,
}

#[derive(Debug)]
struct Pending {
    id: u64,
    triggered_ms: u64,
    waiting: BTreeSet<TaskName>,
    acked: BTreeMap<TaskName, TaskSnapshot>,
}

/// One job's checkpoints: at most one pending at a time (Flink's default
/// `execution.checkpointing.max-concurrent-checkpoints: 1`), ids increasing, the last
/// `num_retained` completed ones kept.
///
/// Invariants: a checkpoint completes only when every task of the job acknowledged it; an abort
/// (decline, task failure) drops the pending one and its id is never reused; `completed` returns the
/// ids that fell out of retention, oldest first, so their storage can be deleted.
#[derive(Debug)]
pub struct CheckpointCoordinator {
    job_id: String,
    tasks: BTreeSet<TaskName>,
    sources: Vec<TaskName>,
    num_retained: usize,
    next_id: u64,
    pending: Option<Pending>,
    retained: Vec<u64>,
}

impl CheckpointCoordinator {
    /// `next_id` continues after the latest completed checkpoint when a job is restored.
    pub fn new(
        job_id: &str,
        tasks: impl IntoIterator<Item = TaskName>,
        sources: Vec<TaskName>,
        num_retained: usize,
        next_id: u64,
    ) -> Self {
        CheckpointCoordinator {
            job_id: job_id.to_string(),
            tasks: tasks.into_iter().collect(),
            sources,
            num_retained: num_retained.max(1),
            next_id: next_id.max(1),
            pending: None,
            retained: Vec::new(),
        }
    }

    /// Starts the next checkpoint, unless one is still pending.
    pub fn trigger(&mut self, now_ms: u64) -> Option<Trigger> {
        self.trigger_with_finished(now_ms, BTreeMap::new())
    }

    /// Starts the next checkpoint of a job some of whose tasks finished, with the snapshot each
    /// finished task ended with: they are not asked (their snapshots are carried into this one),
    /// and barriers go to the sources still running. `None` while one is pending or when no source
    /// runs.
    pub fn trigger_with_finished(
        &mut self,
        now_ms: u64,
        finished: BTreeMap<TaskName, TaskSnapshot>,
    ) -> Option<Trigger> {
        if self.pending.is_some() {
            return None;
        }
        let sources: Vec<TaskName> = self
            .sources
            .iter()
            .filter(|s| !finished.contains_key(*s))
            .cloned()
            .collect();
        if sources.is_empty() {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let waiting = self
            .tasks
            .iter()
            .filter(|t| !finished.contains_key(*t))
            .cloned()
            .collect();
        self.pending = Some(Pending {
            id,
            triggered_ms: now_ms,
            waiting,
            acked: finished,
        });
        Some(Trigger {
            id,
            timestamp_ms: now_ms,
            sources,
        })
    }

    /// `task` finished while a checkpoint is pending: its barrier will never come (its inputs
    /// ended), so `end_state`, the snapshot it ended with, stands for its acknowledgement.
    pub fn task_finished(&mut self, task: &str, end_state: TaskSnapshot, now_ms: u64) -> Acked {
        match self.pending.as_ref().map(|p| p.id) {
            Some(id) => self.acknowledge(id, task, end_state, now_ms),
            None => Acked::Ignored,
        }
    }

    /// A task snapshotted its state for checkpoint `id`.
    pub fn acknowledge(&mut self, id: u64, task: &str, snapshot: TaskSnapshot, now_ms: u64) -> Acked {
        let Some(p) = self.pending.as_mut().filter(|p| p.id == id) else {
            return Acked::Ignored;
        };
        if !p.waiting.remove(task) {
            return Acked::Ignored;
        }
        p.acked.insert(task.to_string(), snapshot);
        if !p.waiting.is_empty() {
            return Acked::Pending {
                waiting_for: p.waiting.len(),
            };
        }
        let Some(p) = self.pending.take() else {
            return Acked::Ignored;
        };
        Acked::Complete(Box::new(CompletedCheckpoint {
            job_id: self.job_id.clone(),
            id: p.id,
            triggered_ms: p.triggered_ms,
            completed_ms: now_ms,
            tasks: p.acked,
            max_parallelism: BTreeMap::new(),
            operators: BTreeMap::new(),
        }))
    }

    /// The metadata of `id` is written: it is now the latest checkpoint. Returns the checkpoints that
    /// fell out of retention, oldest first.
    pub fn completed(&mut self, id: u64) -> Vec<u64> {
        self.retained.push(id);
        let excess = self.retained.len().saturating_sub(self.num_retained);
        self.retained.drain(..excess).collect()
    }

    /// A task declined or failed: the pending checkpoint (if it is `id`, or any with `None`) is
    /// aborted. Returns the aborted id.
    pub fn abort(&mut self, id: Option<u64>) -> Option<u64> {
        match (&self.pending, id) {
            (Some(p), Some(id)) if p.id != id => None,
            (Some(_), _) => self.pending.take().map(|p| p.id),
            (None, _) => None,
        }
    }

    /// Completed checkpoints kept, oldest first.
    pub fn retained(&self) -> &[u64] {
        &self.retained
    }

    pub fn pending(&self) -> Option<u64> {
        self.pending.as_ref().map(|p| p.id)
    }

    /// How many tasks each checkpoint waits for (finished ones included).
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// The job's tasks changed (it was rescaled): checkpoints from now on wait for these tasks'
    /// acknowledgements; a pending one is aborted (its tasks are gone). Ids go on increasing.
    pub fn set_tasks(
        &mut self,
        tasks: impl IntoIterator<Item = TaskName>,
        sources: Vec<TaskName>,
    ) -> Option<u64> {
        self.tasks = tasks.into_iter().collect();
        self.sources = sources;
        self.pending.take().map(|p| p.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(bytes: u64) -> TaskSnapshot {
        TaskSnapshot {
            files: vec![format!("state-{bytes}")],
            uploaded_bytes: bytes,
            state_bytes: bytes,
            ..TaskSnapshot::default()
        }
    }

    fn coordinator() -> CheckpointCoordinator {
        let tasks = ["source#0", "source#1", "count#0"].map(String::from);
        CheckpointCoordinator::new("job1", tasks, vec!["source#0".into(), "source#1".into()], 2, 1)
    }

    #[test]
    fn completes_when_every_task_acked_and_keeps_the_last_retained() {
        let mut c = coordinator();
        let t = c.trigger(1000).unwrap();
        assert_eq!((t.id, t.sources.len()), (1, 2));
        assert_eq!(c.trigger(1100), None, "one pending at a time");
        assert_eq!(
            c.acknowledge(1, "source#0", snap(10), 1200),
            Acked::Pending { waiting_for: 2 }
        );
        assert_eq!(
            c.acknowledge(1, "source#0", snap(10), 1200),
            Acked::Ignored,
            "twice"
        );
        assert_eq!(c.acknowledge(1, "nobody", snap(1), 1200), Acked::Ignored);
        assert_eq!(
            c.acknowledge(1, "source#1", snap(20), 1300),
            Acked::Pending { waiting_for: 1 }
        );
        let Acked::Complete(done) = c.acknowledge(1, "count#0", snap(30), 1400) else {
            panic!("complete")
        };
        assert_eq!((done.id, done.triggered_ms, done.completed_ms), (1, 1000, 1400));
        assert_eq!(done.uploaded_bytes(), 60);
        assert_eq!(c.completed(1), Vec::<u64>::new());
        for id in 2..=4 {
            assert_eq!(c.trigger(2000).unwrap().id, id);
            for task in ["source#0", "source#1", "count#0"] {
                c.acknowledge(id, task, snap(1), 2100);
            }
            let subsumed = c.completed(id);
            assert_eq!(subsumed, if id == 2 { vec![] } else { vec![id - 2] });
        }
        assert_eq!(c.retained(), [3, 4]);
    }

    /// Issue 11, scenario 7 (FLIP-147): checkpoints go on after a task finished; its end state is
    /// carried into them.
    #[test]
    fn checkpoints_go_on_with_finished_tasks_carrying_their_end_state() {
        let mut c = coordinator();
        let end = TaskSnapshot {
            position: Some("end".into()),
            ..snap(5)
        };
        let finished = BTreeMap::from([("source#0".to_string(), end.clone())]);
        let t = c.trigger_with_finished(0, finished).unwrap();
        assert_eq!(
            t.sources,
            vec!["source#1".to_string()],
            "barriers only where sources run"
        );
        assert_eq!(
            c.acknowledge(t.id, "source#1", snap(1), 1),
            Acked::Pending { waiting_for: 1 }
        );
        // count#0 finishes before the barrier reaches it: its end state acknowledges it.
        let Acked::Complete(done) = c.task_finished("count#0", snap(9), 2) else {
            panic!("complete")
        };
        assert_eq!(done.tasks.len(), 3);
        assert_eq!(done.tasks["source#0"], end, "carried over");
        assert_eq!(done.tasks["count#0"], snap(9));
        // Every source finished: nothing to trigger.
        let all = BTreeMap::from([
            ("source#0".to_string(), end.clone()),
            ("source#1".to_string(), end),
        ]);
        assert_eq!(c.trigger_with_finished(3, all), None);
        assert_eq!(
            c.task_finished("count#0", snap(1), 4),
            Acked::Ignored,
            "nothing pending"
        );
    }

    #[test]
    fn an_abort_drops_the_pending_checkpoint_and_late_acks_are_ignored() {
        let mut c = coordinator();
        c.trigger(0);
        c.acknowledge(1, "source#0", snap(1), 1);
        assert_eq!(c.abort(Some(7)), None, "not the pending one");
        assert_eq!(c.abort(Some(1)), Some(1));
        assert_eq!(c.pending(), None);
        assert_eq!(c.acknowledge(1, "source#1", snap(1), 2), Acked::Ignored);
        assert_eq!(c.trigger(3).unwrap().id, 2, "ids are never reused");
        assert_eq!(c.abort(None), Some(2));
    }
}
