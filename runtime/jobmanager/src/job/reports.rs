//! What TaskManagers tell a JobMaster besides state reports: heartbeats listing the executions they
//! hold (reconciled both ways), final reports arriving twice (by RPC and on a heartbeat), and
//! input partitions a consumer could not read.

use super::*;

impl JobMaster {
    /// A final report of `id` is about to be applied: `false` when it is not the current attempt,
    /// its state is final already, or another report of it is being applied (a report and a
    /// heartbeat carrying the same final state).
    pub fn claim_final_report(&mut self, id: &AttemptId) -> bool {
        let live = self
            .graph
            .execution_vertex(id.vertex)
            .is_ok_and(|e| e.current.attempt == id.attempt && !e.current.state.is_terminal());
        live && self.is_current(id) && self.final_reports.insert((id.vertex, id.attempt))
    }

    /// A claimed final report could not be applied (its log append failed): another may be.
    pub fn release_final_report(&mut self, id: &AttemptId) {
        self.final_reports.remove(&(id.vertex, id.attempt));
    }

    /// Reconciles with what a TaskManager's heartbeat says it holds of this job (Flink's heartbeat
    /// payload of executions; final states it carries were applied before, as reports). An attempt
    /// it holds that this JobMaster did not deploy there, or that is no longer current, is
    /// cancelled; an attempt deployed there that had started (INITIALIZING or RUNNING) but is
    /// missing from two heartbeats in a row is failed, and one being cancelled is taken as
    /// cancelled. Without this a lost final-state report, or a task that vanished with no report,
    /// would leave the job waiting forever.
    pub fn reconcile(
        &mut self,
        taskmanager: &str,
        address: &str,
        held: &[(AttemptId, ExecutionState)],
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let job_id = self.id.clone();
        for (id, state) in held.iter().filter(|(id, _)| id.job_id == job_id) {
            if self.deployed_on(id) != Some(taskmanager) {
                actions.push(Action::Cancel {
                    address: address.to_string(),
                    id: id.clone(),
                });
                continue;
            }
            // A lost INITIALIZING or RUNNING report: catch up (checkpoints wait for RUNNING).
            let current = self.graph.execution_vertex(id.vertex).map(|e| e.current.state);
            let steps: &[ExecutionState] = match (current, state) {
                (Ok(ExecutionState::Deploying), ExecutionState::Initializing) => {
                    &[ExecutionState::Initializing]
                }
                (Ok(ExecutionState::Deploying), ExecutionState::Running) => {
                    &[ExecutionState::Initializing, ExecutionState::Running]
                }
                (Ok(ExecutionState::Initializing), ExecutionState::Running) => &[ExecutionState::Running],
                _ => &[],
            };
            for step in steps {
                actions.extend(self.on_task_state(id, *step, None, Vec::new(), None));
            }
        }
        let held: std::collections::BTreeSet<(ExecutionVertexId, u64)> = held
            .iter()
            .filter(|(id, _)| id.job_id == self.id)
            .map(|(id, _)| (id.vertex, id.attempt))
            .collect();
        let started_here: Vec<(ExecutionVertexId, u64, ExecutionState)> = self
            .graph
            .execution_vertices()
            .filter(|e| {
                matches!(
                    e.current.state,
                    ExecutionState::Initializing | ExecutionState::Running | ExecutionState::Canceling
                )
            })
            .filter(|e| {
                self.location[self.graph.global_index(e.id)]
                    .as_ref()
                    .is_some_and(|s| s.taskmanager == taskmanager)
            })
            .map(|e| (e.id, e.current.attempt, e.current.state))
            .collect();
        let mut gone = Vec::new();
        for (v, attempt, state) in started_here {
            let key = (v, attempt);
            // Its final report is being applied: the TaskManager may already have let it go.
            if held.contains(&key) || self.final_reports.contains(&key) {
                self.missing_once.remove(&key);
            } else if !self.missing_once.insert(key) {
                self.missing_once.remove(&key);
                gone.push((v, attempt, state));
            }
        }
        let (canceled, lost): (Vec<_>, Vec<_>) = gone
            .into_iter()
            .partition(|(_, _, state)| *state == ExecutionState::Canceling);
        for (v, attempt, _) in canceled {
            let id = AttemptId {
                job_id: self.id.clone(),
                vertex: v,
                attempt,
            };
            actions.extend(self.on_task_state(&id, ExecutionState::Canceled, None, Vec::new(), None));
        }
        if !lost.is_empty() {
            let vertices: Vec<ExecutionVertexId> = lost.iter().map(|(v, _, _)| *v).collect();
            let names: Vec<String> = vertices.iter().map(|v| self.graph.task_name(*v)).collect();
            let cause = format!(
                "TaskManager {taskmanager} no longer runs {} (missing from two heartbeats)",
                names.join(", ")
            );
            actions.extend(self.on_failure(&vertices, cause));
        }
        actions
    }

    /// A consumer failed because it could not read these partitions: they are lost, so the failover
    /// that follows restarts their producers' regions too (reading them again would fail again).
    pub fn partitions_unavailable(&mut self, partitions: &[ResultPartitionId]) {
        for p in partitions.iter().filter(|p| p.job_id == self.id) {
            if self.shuffle.partition_lost(p) {
                tracing::info!(job = %self.id, partition = %p, "a consumer could not read a finished partition: it will be produced again");
            }
        }
        // The failure this report comes with restarts the producers; until then nothing more is
        // scheduled on the partitions.
        self.partitions_gone(partitions);
    }
}
