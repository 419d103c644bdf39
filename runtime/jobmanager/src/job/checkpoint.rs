//! A job's checkpoints as the JobMaster sees them: resume, trigger (with finished tasks, FLIP-147),
//! acknowledgements, and completion, which a restart waits for while its log append is in flight.

use super::*;

/// A checkpoint that is due: its id, the sources to send its barrier to (address, attempt), and
/// whether it is a stop's savepoint (the sources end their input after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointTrigger {
    pub id: u64,
    pub sources: Vec<(String, AttemptId)>,
    pub stop: bool,
    /// A stop with `drain`: the sources end event time before the barrier.
    pub drain: bool,
}

impl JobMaster {
    /// Continue after `latest` (read from the job storage; `None`: a fresh start).
    pub fn resume_checkpoints(&mut self, latest: Option<CompletedCheckpoint>) {
        let (tasks, sources) = checkpoint_tasks(&self.graph);
        if let Some(c) = self.checkpoints.as_mut() {
            if let Some(l) = &latest {
                tracing::info!(job = %self.id, checkpoint = l.id, "the job restores from its latest checkpoint");
            }
            c.resume_from(&self.id, tasks, sources, latest);
        }
    }

    /// The sources to send the barrier of the checkpoint that is due to.
    pub fn trigger_checkpoint(&mut self, now_ms: u64) -> Option<CheckpointTrigger> {
        if self.status != JobStatus::Running {
            return None;
        }
        // Finished tasks do not stop checkpoints (FLIP-147): sources that reached the end of their
        // input wait for a checkpoint to complete before they finish.
        let all_running = self.graph.execution_vertices().all(|e| {
            matches!(
                e.current.state,
                ExecutionState::Running | ExecutionState::Finished
            )
        });
        let finished: Vec<String> = self
            .graph
            .execution_vertices()
            .filter(|e| e.current.state == ExecutionState::Finished)
            .map(|e| self.graph.task_name(e.id))
            .collect();
        let (id, sources) = self
            .checkpoints
            .as_mut()?
            .maybe_trigger(now_ms, all_running, &finished)?;
        self.checkpoint_lineage = (id, self.restarts);
        let targets = self
            .graph
            .execution_vertices()
            .filter(|e| sources.contains(&self.graph.task_name(e.id)))
            .filter_map(|e| {
                let slot = self.location[self.graph.global_index(e.id)].as_ref()?;
                Some((slot.address.clone(), self.attempt_id(e.id)))
            })
            .collect();
        Some(CheckpointTrigger {
            id,
            stop: self.stops_at(id),
            drain: self.stops_at(id) && self.drains(),
            sources: targets,
        })
    }

    /// A task acknowledged checkpoint `checkpoint`; `Some` when it completed (write the metadata).
    pub fn acknowledge_checkpoint(
        &mut self,
        id: &AttemptId,
        checkpoint: u64,
        snapshot: TaskSnapshot,
        now_ms: u64,
    ) -> Option<CompletedCheckpoint> {
        if !self.is_current(id) {
            return None;
        }
        let task = self.graph.task_name(id.vertex);
        let completed = self
            .checkpoints
            .as_mut()?
            .acknowledge(checkpoint, &task, snapshot, now_ms)?;
        Some(self.with_vertex_metadata(completed))
    }

    /// A completed checkpoint's metadata records each vertex's max parallelism and the operators
    /// that own its state.
    pub(super) fn with_vertex_metadata(&self, checkpoint: CompletedCheckpoint) -> CompletedCheckpoint {
        CompletedCheckpoint {
            max_parallelism: self.max_parallelism(),
            operators: self.state_owners.clone(),
            ..checkpoint
        }
    }

    /// Checkpoint `checkpoint` cannot go on (its id could not be claimed).
    pub fn abort_checkpoint(&mut self, checkpoint: u64, why: &str) {
        if let Some(c) = self.checkpoints.as_mut() {
            c.abort(Some(checkpoint), why, super::history_now_ms());
        }
    }

    pub fn decline_checkpoint(&mut self, id: &AttemptId, checkpoint: u64, reason: &str) {
        if self.is_current(id)
            && let Some(c) = self.checkpoints.as_mut()
        {
            let why = format!("{} declined: {reason}", self.graph.task_name(id.vertex));
            c.abort(Some(checkpoint), &why, super::history_now_ms());
        }
    }

    /// Whether completed checkpoint `id` still describes the running attempts (no restart since it
    /// was triggered).
    pub fn checkpoint_is_current(&self, id: u64) -> bool {
        self.status == JobStatus::Running && self.checkpoint_lineage == (id, self.restarts)
    }

    /// The metadata of checkpoint `id` is written and the log append that completes it starts:
    /// `false` if a restart happened since it was triggered (it is dropped). Until
    /// [`JobMaster::checkpoint_completed`] or [`JobMaster::checkpoint_not_logged`], restarts wait,
    /// so no attempt restores from an older checkpoint than one the log then records.
    pub fn begin_checkpoint_completion(&mut self, id: u64) -> bool {
        if !self.checkpoint_is_current(id) {
            return false;
        }
        self.checkpoint_completing = Some(id);
        true
    }

    /// A checkpoint's completion (its log append) is under way: it may still become retained.
    /// Only a running job begins one, so once a job has ended this turns false for good.
    pub fn checkpoint_completion_in_flight(&self) -> bool {
        self.checkpoint_completing.is_some()
    }

    /// The completing append failed: the checkpoint does not count, restarts go on.
    pub fn checkpoint_not_logged(&mut self) {
        self.checkpoint_completing = None;
    }

    /// Checkpoint metadata is written and logged: returns what retention drops and the
    /// TaskManagers to notify.
    pub fn checkpoint_completed(&mut self, checkpoint: CompletedCheckpoint) -> (Subsumed, Vec<String>) {
        self.checkpoint_completing = None;
        let Some(c) = self.checkpoints.as_mut() else {
            return (Subsumed::default(), Vec::new());
        };
        let subsumed = c.completed(checkpoint);
        (subsumed, self.taskmanager_addresses())
    }

    /// The TaskManagers the job's current attempts run on.
    fn taskmanager_addresses(&self) -> Vec<String> {
        self.location
            .iter()
            .flatten()
            .map(|s| s.address.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Checkpoints aborted since the last call, and the TaskManagers to tell (their sources send
    /// the cancel-checkpoint marker); `None` when there are none.
    pub fn take_aborted_checkpoints(&mut self) -> Option<(Vec<u64>, Vec<String>)> {
        let aborted = std::mem::take(&mut self.checkpoints.as_mut()?.aborted_unsent);
        (!aborted.is_empty()).then(|| (aborted, self.taskmanager_addresses()))
    }
}
