//! The recent checkpoints of a job, for Flink's `/jobs/{id}/checkpoints` history and
//! `/jobs/{id}/checkpoints/details/{checkpoint}`: each one's status, when it was triggered and
//! acknowledged, and what each task uploaded. Kept in memory on the JobManager for the web UI;
//! what restores a job is the checkpoint metadata in the job storage, not this.

use std::collections::{BTreeMap, VecDeque};

use floe_checkpoint::{CompletedCheckpoint, TaskSnapshot};

/// How many checkpoints the history keeps (Flink's `web.checkpoints.history` default).
pub const HISTORY_SIZE: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointStatus {
    InProgress,
    Completed,
    Failed,
}

impl CheckpointStatus {
    /// Flink's names.
    pub fn name(self) -> &'static str {
        match self {
            CheckpointStatus::InProgress => "IN_PROGRESS",
            CheckpointStatus::Completed => "COMPLETED",
            CheckpointStatus::Failed => "FAILED",
        }
    }
}

/// One task's acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskAck {
    pub ack_ms: u64,
    /// What this checkpoint uploaded for the task.
    pub checkpointed_size: u64,
    /// All the state the task holds (shared files included).
    pub state_size: u64,
}

impl TaskAck {
    fn of(snapshot: &TaskSnapshot, ack_ms: u64) -> Self {
        TaskAck {
            ack_ms,
            checkpointed_size: snapshot.uploaded_bytes,
            state_size: snapshot.state_bytes,
        }
    }
}

/// One checkpoint as the history shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointStats {
    pub id: u64,
    pub savepoint: bool,
    pub status: CheckpointStatus,
    pub triggered_ms: u64,
    /// When it completed or failed.
    pub ended_ms: Option<u64>,
    /// The tasks that take part (each must acknowledge).
    pub num_subtasks: usize,
    /// Per task (`vertex#subtask`), its acknowledgement.
    pub acks: BTreeMap<String, TaskAck>,
    pub failure: Option<String>,
}

impl CheckpointStats {
    pub fn checkpointed_size(&self) -> u64 {
        self.acks.values().map(|a| a.checkpointed_size).sum()
    }

    pub fn state_size(&self) -> u64 {
        self.acks.values().map(|a| a.state_size).sum()
    }

    /// The newest acknowledgement (Flink's `latest_ack_timestamp`).
    pub fn latest_ack_ms(&self) -> Option<u64> {
        self.acks.values().map(|a| a.ack_ms).max()
    }
}

/// The newest [`HISTORY_SIZE`] checkpoints, oldest first.
#[derive(Debug, Default)]
pub struct CheckpointHistory {
    entries: VecDeque<CheckpointStats>,
}

impl CheckpointHistory {
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &CheckpointStats> {
        self.entries.iter()
    }

    pub fn get(&self, id: u64) -> Option<&CheckpointStats> {
        self.entries.iter().find(|e| e.id == id)
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut CheckpointStats> {
        self.entries.iter_mut().find(|e| e.id == id)
    }

    /// Checkpoint `id` was triggered. One still in progress before it never completed: its
    /// metadata was not written, or a restart dropped it.
    pub fn triggered(&mut self, id: u64, at_ms: u64, savepoint: bool, num_subtasks: usize) {
        for e in self.entries.iter_mut() {
            if e.status == CheckpointStatus::InProgress {
                e.status = CheckpointStatus::Failed;
                e.ended_ms = Some(at_ms);
                e.failure =
                    Some("it did not complete: a restart dropped it, or its metadata was not written".into());
            }
        }
        if self.entries.len() == HISTORY_SIZE {
            self.entries.pop_front();
        }
        self.entries.push_back(CheckpointStats {
            id,
            savepoint,
            status: CheckpointStatus::InProgress,
            triggered_ms: at_ms,
            ended_ms: None,
            num_subtasks,
            acks: BTreeMap::new(),
            failure: None,
        });
    }

    pub fn acknowledged(&mut self, id: u64, task: &str, snapshot: &TaskSnapshot, at_ms: u64) {
        if let Some(e) = self
            .get_mut(id)
            .filter(|e| e.status == CheckpointStatus::InProgress)
        {
            e.acks.insert(task.to_string(), TaskAck::of(snapshot, at_ms));
        }
    }

    /// Its metadata is written. Tasks that finished before it carried their last snapshot into
    /// it without acknowledging: they count as acknowledged when it completed.
    pub fn completed(&mut self, checkpoint: &CompletedCheckpoint) {
        let Some(e) = self.get_mut(checkpoint.id) else {
            return;
        };
        for (task, snapshot) in &checkpoint.tasks {
            e.acks
                .entry(task.clone())
                .or_insert_with(|| TaskAck::of(snapshot, checkpoint.completed_ms));
        }
        e.status = CheckpointStatus::Completed;
        e.ended_ms = Some(checkpoint.completed_ms);
    }

    pub fn failed(&mut self, id: u64, at_ms: u64, why: &str) {
        if let Some(e) = self
            .get_mut(id)
            .filter(|e| e.status == CheckpointStatus::InProgress)
        {
            e.status = CheckpointStatus::Failed;
            e.ended_ms = Some(at_ms);
            e.failure = Some(why.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(uploaded: u64, state: u64) -> TaskSnapshot {
        TaskSnapshot {
            uploaded_bytes: uploaded,
            state_bytes: state,
            ..TaskSnapshot::default()
        }
    }

    #[test]
    fn a_checkpoint_goes_from_in_progress_to_completed_with_every_tasks_sizes() {
        let mut h = CheckpointHistory::default();
        h.triggered(1, 100, false, 2);
        h.acknowledged(1, "map#0", &snap(10, 30), 120);
        let e = h.get(1).unwrap();
        assert_eq!(
            (e.status, e.acks.len(), e.num_subtasks),
            (CheckpointStatus::InProgress, 1, 2)
        );
        let checkpoint = CompletedCheckpoint {
            job_id: "j".into(),
            id: 1,
            triggered_ms: 100,
            completed_ms: 150,
            tasks: [
                ("map#0".to_string(), snap(10, 30)),
                ("sink#0".to_string(), snap(5, 5)),
            ]
            .into(),
            max_parallelism: BTreeMap::new(),
            operators: BTreeMap::new(),
        };
        h.completed(&checkpoint);
        let e = h.get(1).unwrap();
        assert_eq!(e.status, CheckpointStatus::Completed);
        assert_eq!((e.checkpointed_size(), e.state_size()), (15, 35));
        assert_eq!(e.acks["map#0"].ack_ms, 120, "its own acknowledgement kept");
        assert_eq!(
            e.acks["sink#0"].ack_ms, 150,
            "a finished task counts at completion"
        );
        assert_eq!((e.ended_ms, e.latest_ack_ms()), (Some(150), Some(150)));
    }

    #[test]
    fn a_failure_keeps_its_reason_and_one_that_never_completed_fails_at_the_next_trigger() {
        let mut h = CheckpointHistory::default();
        h.triggered(1, 100, false, 1);
        h.failed(1, 200, "map#0 declined: disk full");
        assert_eq!(
            h.get(1).unwrap().failure.as_deref(),
            Some("map#0 declined: disk full")
        );
        h.triggered(2, 300, true, 1);
        h.triggered(3, 400, false, 1);
        let e = h.get(2).unwrap();
        assert_eq!(
            (e.status, e.ended_ms, e.savepoint),
            (CheckpointStatus::Failed, Some(400), true)
        );
        assert_eq!(h.get(3).unwrap().status, CheckpointStatus::InProgress);
    }

    #[test]
    fn it_keeps_the_newest_ten() {
        let mut h = CheckpointHistory::default();
        for id in 1..=25 {
            h.triggered(id, id * 10, false, 1);
        }
        let ids: Vec<u64> = h.entries().map(|e| e.id).collect();
        assert_eq!(ids, (16..=25).collect::<Vec<_>>());
    }
}
