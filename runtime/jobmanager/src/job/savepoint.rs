//! Savepoints of one job (Flink's `POST /jobs/{id}/savepoints` and `POST /jobs/{id}/stop`), and
//! a job's start from one (`execution.state-recovery.path`).
//!
//! A savepoint is a checkpoint triggered at once, then copied out of the job storage into a
//! directory of its own (`floe_checkpoint::savepoint`) before the TaskManagers hear that it
//! completed. Stop with a savepoint is Flink's synchronous savepoint: each source ends its input
//! right after the savepoint's barrier and finishes once the savepoint is written and its sinks
//! committed, so the job ends FINISHED with exactly the savepoint's output committed. A
//! savepoint whose checkpoint is aborted fails; a stop whose savepoint fails fails the job over
//! (its sources stopped reading), so it runs on from its latest checkpoint, as Flink's does.

use std::collections::BTreeMap;

use floe_checkpoint::Savepoint;

use super::*;

/// Where savepoints go when a request names no directory (Flink's key).
pub const SAVEPOINT_DIR_KEY: &str = "state.savepoints.dir";
/// The savepoint (or retained checkpoint) a new job starts from (Flink 2's key; Flink 1's
/// `execution.savepoint.path` is read too).
pub const RECOVERY_PATH_KEY: &str = "execution.state-recovery.path";
pub const RECOVERY_PATH_KEY_V1: &str = "execution.savepoint.path";
/// Start although the savepoint holds state of an operator the job no longer has (Flink's
/// `--allowNonRestoredState`).
pub const IGNORE_UNCLAIMED_KEY: &str = "execution.state-recovery.ignore-unclaimed-state";
pub const IGNORE_UNCLAIMED_KEY_V1: &str = "execution.savepoint.ignore-unclaimed-state";

/// Where a savepoint stands (Flink's asynchronous operation states).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavepointStatus {
    InProgress,
    Completed { location: String },
    Failed { cause: String },
}

/// A savepoint asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointRequest {
    /// The trigger id the request was answered with.
    pub trigger: String,
    /// The savepoint directory to create (a URL: `{target}/savepoint-{job6}-{random}`).
    pub directory: String,
    /// Stop with the savepoint.
    pub stop: bool,
    /// Flink's `drain` (end the input rather than pause it): the sources end event time before
    /// the savepoint's barrier, so every event-time window and timer fires and its output is
    /// covered by the savepoint; the savepoint records it.
    pub drain: bool,
    /// When it was asked for (ms since the epoch): one whose checkpoint never starts fails after
    /// `execution.checkpointing.timeout`.
    pub requested_ms: u64,
}

/// A job's savepoints: the one in flight and what became of each asked for.
#[derive(Debug, Default)]
pub struct Savepoints {
    pending: Option<SavepointRequest>,
    results: BTreeMap<String, SavepointStatus>,
    /// Outcomes (completed or failed) no client has fetched yet: `floe run` keeps its cluster up
    /// a little after the job ended until they are, so a `floe stop` hears how its stop went.
    unfetched: std::collections::BTreeSet<String>,
}

/// What a job restores from at its start, from its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecovery {
    pub path: String,
    pub ignore_unclaimed: bool,
}

/// `execution.state-recovery.path` (or Flink 1's key) and whether unclaimed state may be left.
pub fn state_recovery(conf: &BTreeMap<String, String>) -> Result<Option<StateRecovery>> {
    let path = conf
        .get(RECOVERY_PATH_KEY)
        .or_else(|| conf.get(RECOVERY_PATH_KEY_V1))
        .map(|p| p.trim())
        .filter(|p| !p.is_empty());
    let (key, value) = match (conf.get(IGNORE_UNCLAIMED_KEY), conf.get(IGNORE_UNCLAIMED_KEY_V1)) {
        (Some(v), _) => (IGNORE_UNCLAIMED_KEY, Some(v)),
        (None, v) => (IGNORE_UNCLAIMED_KEY_V1, v),
    };
    let ignore_unclaimed = match value.map(|v| v.trim()) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(Error::Config {
                key: key.into(),
                message: format!("expected true or false, got {other:?}"),
            });
        }
    };
    Ok(path.map(|path| StateRecovery {
        path: path.to_string(),
        ignore_unclaimed,
    }))
}

impl JobMaster {
    /// A checkpoint asked for now (`POST /jobs/{id}/checkpoints`). Refused unless the job runs and
    /// takes checkpoints.
    pub fn request_checkpoint(&mut self) -> Result<(), String> {
        if self.status != JobStatus::Running {
            return Err(format!("job {} is {}, not RUNNING", self.id, self.status.name()));
        }
        let Some(checkpoints) = self.checkpoints.as_mut() else {
            return Err(format!(
                "job {} takes no checkpoints: a STREAMING job with {} and spec.storage does",
                self.id,
                floe_datastream::checkpoint::CHECKPOINT_INTERVAL_KEY
            ));
        };
        checkpoints.request_checkpoint();
        tracing::info!(job = %self.id, "checkpoint requested");
        Ok(())
    }

    /// A savepoint asked for (`request.trigger` answers it). Refused unless the job runs, takes
    /// checkpoints and has no savepoint in flight.
    pub fn request_savepoint(&mut self, request: SavepointRequest) -> Result<(), String> {
        if self.status != JobStatus::Running {
            return Err(format!("job {} is {}, not RUNNING", self.id, self.status.name()));
        }
        let Some(checkpoints) = self.checkpoints.as_mut() else {
            return Err(format!(
                "job {} takes no checkpoints: savepoints need a STREAMING job with {} and spec.storage",
                self.id,
                floe_datastream::checkpoint::CHECKPOINT_INTERVAL_KEY
            ));
        };
        if let Some(p) = &self.savepoints.pending {
            return Err(format!(
                "savepoint {} of job {} is still in progress",
                p.trigger, self.id
            ));
        }
        checkpoints.request_savepoint();
        self.savepoints
            .results
            .insert(request.trigger.clone(), SavepointStatus::InProgress);
        tracing::info!(job = %self.id, trigger = %request.trigger, stop = request.stop, directory = %request.directory, "savepoint requested");
        self.savepoints.pending = Some(request);
        Ok(())
    }

    pub fn savepoint_status(&self, trigger: &str) -> Option<&SavepointStatus> {
        self.savepoints.results.get(trigger)
    }

    /// [`JobMaster::savepoint_status`] for a client (`GET /jobs/{id}/savepoints/{trigger}`): an
    /// outcome it is given counts as fetched.
    pub fn fetch_savepoint_status(&mut self, trigger: &str) -> Option<SavepointStatus> {
        let status = self.savepoints.results.get(trigger)?.clone();
        if status != SavepointStatus::InProgress {
            self.savepoints.unfetched.remove(trigger);
        }
        Some(status)
    }

    /// How many savepoints have an outcome no client has fetched yet.
    pub fn unfetched_savepoint_results(&self) -> usize {
        self.savepoints.unfetched.len()
    }

    /// Whether checkpoint `id` is the savepoint of a stop (its sources end after its barrier).
    pub fn stops_at(&self, id: u64) -> bool {
        self.savepoints.pending.as_ref().is_some_and(|p| p.stop)
            && self.checkpoints.as_ref().and_then(|c| c.savepoint_checkpoint) == Some(id)
    }

    /// The pending savepoint is a stop with `drain`.
    pub fn drains(&self) -> bool {
        self.savepoints
            .pending
            .as_ref()
            .is_some_and(|p| p.stop && p.drain)
    }

    /// The savepoint to write now that checkpoint `id` completed and is logged.
    pub fn savepoint_of(&self, id: u64) -> Option<SavepointRequest> {
        let c = self.checkpoints.as_ref()?;
        (c.savepoint_checkpoint == Some(id))
            .then(|| self.savepoints.pending.clone())
            .flatten()
    }

    /// Each vertex's max parallelism, as a savepoint records it.
    pub fn max_parallelism(&self) -> BTreeMap<String, u32> {
        self.graph
            .job_graph()
            .vertices()
            .iter()
            .map(|v| (v.id.clone(), v.max_parallelism))
            .collect()
    }

    /// The savepoint of `trigger` was written at `Ok(location)`, or could not be.
    pub fn savepoint_written(&mut self, trigger: &str, result: Result<String, String>) -> Vec<Action> {
        match result {
            Ok(location) => {
                tracing::info!(job = %self.id, trigger, location, "savepoint completed");
                self.resolve_savepoint(trigger, SavepointStatus::Completed { location });
                Vec::new()
            }
            Err(cause) => self.savepoint_failed(trigger, format!("could not write the savepoint: {cause}")),
        }
    }

    fn resolve_savepoint(&mut self, trigger: &str, status: SavepointStatus) -> Option<SavepointRequest> {
        if self
            .savepoints
            .pending
            .as_ref()
            .is_none_or(|p| p.trigger != trigger)
        {
            return None;
        }
        if let Some(c) = self.checkpoints.as_mut() {
            c.savepoint_resolved();
        }
        self.savepoints.results.insert(trigger.to_string(), status);
        self.savepoints.unfetched.insert(trigger.to_string());
        self.savepoints.pending.take()
    }

    fn savepoint_failed(&mut self, trigger: &str, cause: String) -> Vec<Action> {
        tracing::warn!(job = %self.id, trigger, "savepoint failed: {cause}");
        let Some(request) = self.resolve_savepoint(trigger, SavepointStatus::Failed { cause: cause.clone() })
        else {
            return Vec::new();
        };
        // A stop's sources ended their input at the barrier: fail them over so the job runs on
        // from its latest checkpoint, unless a failover is under way already.
        let sources: Vec<ExecutionVertexId> = self
            .graph
            .execution_vertices()
            .filter(|e| e.consumed.is_empty())
            .map(|e| e.id)
            .collect();
        // Some source may have reached the end of its input before; any that stopped must run on.
        let stopped = sources.iter().any(|&s| {
            self.graph
                .execution_vertex(s)
                .is_ok_and(|e| e.current.state == ExecutionState::Running)
        });
        if request.stop && self.status == JobStatus::Running && stopped {
            return self.on_failure(&sources, format!("stop with savepoint {trigger} failed: {cause}"));
        }
        Vec::new()
    }

    /// Checkpoint `id` could not be completed (metadata, log): a savepoint taken as it fails.
    pub fn checkpoint_dropped(&mut self, id: u64, why: &str) -> Vec<Action> {
        match self.savepoint_of(id) {
            Some(request) => self.savepoint_failed(
                &request.trigger,
                format!("its checkpoint {id} was dropped: {why}"),
            ),
            None => Vec::new(),
        }
    }

    /// A savepoint fails when its checkpoint was aborted, when the job stops running before it
    /// is taken, or when its checkpoint does not start within `execution.checkpointing.timeout`
    /// (a source finished before any checkpoint covered it, say). The driver looks every tick.
    pub fn check_savepoint(&mut self, now_ms: u64) -> Vec<Action> {
        let Some(request) = self.savepoints.pending.clone() else {
            return Vec::new();
        };
        let Some(c) = self.checkpoints.as_mut() else {
            return Vec::new();
        };
        let why = if let Some(why) = c.savepoint_aborted.take() {
            format!("its checkpoint was aborted: {why}")
        } else if self.status != JobStatus::Running {
            format!("the job is {}", self.status.name())
        } else if c.savepoint_checkpoint.is_none()
            && now_ms.saturating_sub(request.requested_ms) > c.config.timeout.as_millis() as u64
        {
            format!(
                "its checkpoint did not start within {:?} (execution.checkpointing.timeout): not every task runs",
                c.config.timeout
            )
        } else {
            return Vec::new();
        };
        self.savepoint_failed(&request.trigger, why)
    }

    /// The job starts from `savepoint`, read from `directory`. Each part of the saved state goes to
    /// the vertex its operator is in now ([`floe_checkpoint::owners`]). Refused when it holds
    /// state of an operator the job does not have (unless `ignore_unclaimed`), or keyed state of
    /// an operator whose number of key groups (max parallelism) changed.
    pub fn restore_savepoint(
        &mut self,
        savepoint: Savepoint,
        directory: &str,
        ignore_unclaimed: bool,
    ) -> Result<(), String> {
        use floe_checkpoint::{StatePart, owners};
        let max_parallelism = self.max_parallelism();
        let mut checkpoint = savepoint.checkpoint;
        let then = checkpoint.operators.clone();
        let vertex_of = |task: &str| task.rsplit_once('#').map_or(task, |(v, _)| v).to_string();
        let mut unclaimed = std::collections::BTreeSet::new();
        let mut dropped = std::collections::BTreeSet::new();
        for (task, snapshot) in &checkpoint.tasks {
            let vertex = vertex_of(task);
            for part in StatePart::ALL {
                if !part.held_by(snapshot) {
                    continue;
                }
                let successor = owners::successor(&then, &self.state_owners, &vertex, part, |v| {
                    max_parallelism.contains_key(v)
                });
                let Some(now_vertex) = successor else {
                    unclaimed.insert(owners::describe(&then, &vertex, part));
                    dropped.insert((vertex.clone(), part));
                    continue;
                };
                let Some(&now) = max_parallelism.get(&now_vertex) else {
                    continue;
                };
                let saved = savepoint.max_parallelism.get(&vertex).copied().unwrap_or(now);
                if part == StatePart::Head && saved != now && !snapshot.files.is_empty() {
                    let operator = owners::describe(&then, &vertex, part);
                    return Err(format!(
                        "savepoint {directory}: {operator} was saved with max parallelism {saved} \
                         (key groups), this job has {now}; keyed state restores only into the same \
                         number of key groups: set pipeline.max-parallelism: {saved}"
                    ));
                }
            }
        }
        if !unclaimed.is_empty() {
            let names = unclaimed.iter().cloned().collect::<Vec<_>>().join(", ");
            if !ignore_unclaimed {
                return Err(format!(
                    "savepoint {directory} holds state of {names}, which this job does not have; to start \
                     without that state set {IGNORE_UNCLAIMED_KEY}: \"true\" (spec.job.allowNonRestoredState: true)"
                ));
            }
            tracing::warn!(job = %self.id, "starting from savepoint {directory} without the state of {names} ({IGNORE_UNCLAIMED_KEY})");
            // Tasks left with nothing go; the others keep the parts an operator claims.
            checkpoint.tasks.retain(|task, snapshot| {
                let vertex = vertex_of(task);
                let held = StatePart::ALL.iter().any(|p| p.held_by(snapshot));
                for part in StatePart::ALL {
                    if dropped.contains(&(vertex.clone(), part)) {
                        part.remove_from(snapshot);
                    }
                }
                !held || StatePart::ALL.iter().any(|p| p.held_by(snapshot))
            });
        }
        let (tasks, sources) = checkpoint_tasks(&self.graph);
        if let Some(c) = self.checkpoints.as_mut() {
            tracing::info!(job = %self.id, checkpoint = checkpoint.id, "the job starts from savepoint {directory}");
            c.resume_from_savepoint(&self.id, tasks, sources, checkpoint, directory.to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{checkpointing_job, report, slots};
    use super::*;

    /// The seed streaming job, started, every task RUNNING.
    fn running_job() -> JobMaster {
        let mut job = checkpointing_job();
        job.start(&slots()).unwrap();
        let all: Vec<ExecutionVertexId> = job.graph.execution_vertices().map(|e| e.id).collect();
        for v in all {
            report(&mut job, v, ExecutionState::Initializing);
            report(&mut job, v, ExecutionState::Running);
        }
        job
    }

    fn request(trigger: &str, stop: bool) -> SavepointRequest {
        SavepointRequest {
            trigger: trigger.into(),
            directory: format!("memory://savepoints/{trigger}"),
            stop,
            drain: false,
            requested_ms: 10_000,
        }
    }

    /// Every task acknowledges `id`; the completed checkpoint, logged.
    fn complete(job: &mut JobMaster, id: u64, now: u64) {
        let all: Vec<ExecutionVertexId> = job.graph.execution_vertices().map(|e| e.id).collect();
        let mut completed = None;
        for v in all {
            let attempt = job.attempt_id(v);
            let snapshot = TaskSnapshot {
                files: vec![format!("checkpoints/job/chk-{id}/{}", job.graph.task_name(v))],
                ..TaskSnapshot::default()
            };
            completed = job.acknowledge_checkpoint(&attempt, id, snapshot, now);
        }
        assert!(job.begin_checkpoint_completion(id));
        job.checkpoint_completed(completed.expect("every task acknowledged"));
    }

    #[test]
    fn a_savepoint_triggers_at_once_and_holds_checkpoints_until_it_is_written() {
        let mut job = running_job();
        let t = job.trigger_checkpoint(10_000).expect("due");
        let first = t.id;
        assert!(!t.stop);
        complete(&mut job, first, 10_050);
        assert_eq!(
            job.trigger_checkpoint(10_100),
            None,
            "the interval (1 s) has not passed"
        );
        job.request_savepoint(request("t1", true)).unwrap();
        assert_eq!(job.savepoint_status("t1"), Some(&SavepointStatus::InProgress));
        let refused = job.request_savepoint(request("t2", false)).unwrap_err();
        assert!(
            refused.contains("savepoint t1 of job job is still in progress"),
            "{refused}"
        );
        let t = job.trigger_checkpoint(10_100).expect("a savepoint goes at once");
        let id = t.id;
        assert!(t.stop, "a stop's barrier ends the sources' input");
        assert_eq!(t.sources.len(), 4, "every source");
        complete(&mut job, id, 10_200);
        assert_eq!(job.savepoint_of(id).map(|r| r.trigger), Some("t1".to_string()));
        assert_eq!(job.savepoint_of(first), None);
        assert_eq!(
            job.trigger_checkpoint(20_000),
            None,
            "none while the savepoint is written"
        );
        assert!(
            job.savepoint_written("t1", Ok("memory://savepoints/t1".into()))
                .is_empty()
        );
        assert_eq!(
            job.savepoint_status("t1"),
            Some(&SavepointStatus::Completed {
                location: "memory://savepoints/t1".into()
            })
        );
        assert!(!job.trigger_checkpoint(20_000).expect("checkpoints go on").stop);
    }

    #[test]
    fn an_outcome_is_unfetched_until_a_client_is_given_it() {
        let mut job = running_job();
        job.request_savepoint(request("t1", true)).unwrap();
        assert_eq!(
            job.fetch_savepoint_status("t1"),
            Some(SavepointStatus::InProgress)
        );
        assert_eq!(job.unfetched_savepoint_results(), 0, "nothing to hear yet");
        let id = job.trigger_checkpoint(10_000).expect("due").id;
        complete(&mut job, id, 10_100);
        assert!(
            job.savepoint_written("t1", Ok("memory://savepoints/t1".into()))
                .is_empty()
        );
        assert_eq!(job.unfetched_savepoint_results(), 1);
        // The JobManager's own look does not count; a client's does, once.
        assert!(job.savepoint_status("t1").is_some());
        assert_eq!(job.unfetched_savepoint_results(), 1);
        assert_eq!(
            job.fetch_savepoint_status("t1"),
            Some(SavepointStatus::Completed {
                location: "memory://savepoints/t1".into()
            })
        );
        assert_eq!(job.unfetched_savepoint_results(), 0);
        assert_eq!(job.fetch_savepoint_status("no-such-trigger"), None);
    }

    #[test]
    fn a_stop_whose_savepoint_is_declined_fails_and_the_job_fails_over() {
        let mut job = running_job();
        job.request_savepoint(request("t1", true)).unwrap();
        let id = job.trigger_checkpoint(10_000).expect("due").id;
        let attempt = job.attempt_id(ExecutionVertexId::new(2, 0));
        job.decline_checkpoint(&attempt, id, "disk full");
        let actions = job.check_savepoint(10_001);
        assert!(
            actions.iter().any(|a| matches!(a, Action::RestartAfter { .. })),
            "its sources stopped reading: they run again from the latest checkpoint: {actions:?}"
        );
        let Some(SavepointStatus::Failed { cause }) = job.savepoint_status("t1") else {
            panic!("failed: {:?}", job.savepoint_status("t1"))
        };
        assert!(cause.contains("reduce#0 declined: disk full"), "{cause}");
        assert!(job.check_savepoint(10_002).is_empty(), "reported once");
        // A plain savepoint that fails leaves the job running.
        let mut job = running_job();
        job.request_savepoint(request("t2", false)).unwrap();
        let id = job.trigger_checkpoint(10_000).expect("due").id;
        // Every task acknowledged; then its log append failed.
        let all: Vec<ExecutionVertexId> = job.graph.execution_vertices().map(|e| e.id).collect();
        for v in all {
            let attempt = job.attempt_id(v);
            job.acknowledge_checkpoint(&attempt, id, TaskSnapshot::default(), 10_100);
        }
        assert!(job.checkpoint_dropped(id, "the log append failed").is_empty());
        assert!(matches!(
            job.savepoint_status("t2"),
            Some(SavepointStatus::Failed { .. })
        ));
        assert!(job.trigger_checkpoint(20_000).is_some(), "checkpoints go on");
    }

    #[test]
    fn a_savepoint_fails_when_the_job_stops_running_or_its_checkpoint_never_starts() {
        let mut job = running_job();
        job.request_savepoint(request("t1", false)).unwrap();
        job.cancel().unwrap();
        assert!(job.check_savepoint(10_001).is_empty());
        let Some(SavepointStatus::Failed { cause }) = job.savepoint_status("t1") else {
            panic!("{:?}", job.savepoint_status("t1"))
        };
        assert!(cause.contains("the job is CANCELED"), "{cause}");
        // Started, but a task never runs: no checkpoint can start.
        let mut job = checkpointing_job();
        job.start(&slots()).unwrap();
        job.status = JobStatus::Running;
        job.request_savepoint(request("t2", false)).unwrap();
        assert_eq!(job.trigger_checkpoint(10_001), None);
        assert!(job.check_savepoint(10_000 + 600_000).is_empty());
        assert_eq!(
            job.savepoint_status("t2"),
            Some(&SavepointStatus::InProgress),
            "not yet"
        );
        job.check_savepoint(10_000 + 600_001);
        let Some(SavepointStatus::Failed { cause }) = job.savepoint_status("t2") else {
            panic!("{:?}", job.savepoint_status("t2"))
        };
        assert!(
            cause.contains("did not start within") && cause.contains("execution.checkpointing.timeout"),
            "{cause}"
        );
    }

    #[test]
    fn a_job_without_checkpoints_or_not_running_takes_no_savepoint() {
        let mut job = super::super::tests::seed_job();
        let e = job.request_savepoint(request("t", false)).unwrap_err();
        assert!(e.contains("is CREATED, not RUNNING"), "{e}");
        job.start(&slots()).unwrap();
        let e = job.request_savepoint(request("t", false)).unwrap_err();
        assert!(
            e.contains("takes no checkpoints") && e.contains("execution.checkpointing.interval"),
            "{e}"
        );
    }

    fn savepoint(tasks: &[(&str, u32)]) -> Savepoint {
        let snapshot = |task: &str| TaskSnapshot {
            files: vec![format!("{task}/keyed-state")],
            ..TaskSnapshot::default()
        };
        Savepoint {
            format: "floe-savepoint-v1".into(),
            job_name: "seed".into(),
            checkpoint: CompletedCheckpoint {
                max_parallelism: BTreeMap::new(),
                operators: BTreeMap::new(),
                job_id: "old".into(),
                id: 9,
                triggered_ms: 0,
                completed_ms: 1,
                tasks: tasks
                    .iter()
                    .flat_map(|(v, p)| (0..*p).map(move |i| format!("{v}#{i}")))
                    .map(|t| (t.clone(), snapshot(&t)))
                    .collect(),
            },
            max_parallelism: BTreeMap::from([("reduce".into(), 128), ("ghost".into(), 128)]),
            drained: false,
        }
    }

    #[test]
    fn a_savepoint_restores_into_the_new_parallelism_from_its_own_directory() {
        // reduce ran at 2 when saved; the job has it at 3.
        let mut job = checkpointing_job();
        job.restore_savepoint(savepoint(&[("reduce", 2)]), "memory://sp/savepoint-x", false)
            .unwrap();
        let actions = job.start(&slots()).unwrap();
        let restores: BTreeMap<String, floe_checkpoint::SubtaskRestore> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Deploy { deployment, .. } => {
                    let (id, r) = deployment.restore.clone()?;
                    assert_eq!(id, 9);
                    Some((job.graph.task_name(deployment.id.vertex), r))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            restores.len(),
            3,
            "reduce#0..2, nothing else had state: {restores:?}"
        );
        for r in restores.values() {
            assert_eq!(r.storage.as_deref(), Some("memory://sp/savepoint-x"));
        }
        // 2 -> 3 by key groups of 128: 0..43 from old 0; 43..86 from both; 86..128 from old 1.
        let files = |t: &str| {
            restores[t]
                .keyed
                .iter()
                .map(|s| s.files[0].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(files("reduce#0"), ["reduce#0/keyed-state"]);
        assert_eq!(
            files("reduce#1"),
            ["reduce#0/keyed-state", "reduce#1/keyed-state"]
        );
        assert_eq!(files("reduce#2"), ["reduce#1/keyed-state"]);
    }

    #[test]
    fn unclaimed_state_and_other_key_groups_are_refused_naming_them() {
        let mut job = checkpointing_job();
        let e = job
            .restore_savepoint(savepoint(&[("reduce", 2), ("ghost", 1)]), "memory://sp/x", false)
            .unwrap_err();
        assert!(
            e.contains("savepoint memory://sp/x holds state of vertex ghost, which this job does not have")
                && e.contains("execution.state-recovery.ignore-unclaimed-state")
                && e.contains("allowNonRestoredState"),
            "{e}"
        );
        job.restore_savepoint(savepoint(&[("reduce", 2), ("ghost", 1)]), "memory://sp/x", true)
            .unwrap();
        let latest = job.checkpoints.as_ref().unwrap().latest.clone().unwrap();
        assert!(
            latest.tasks.keys().all(|t| t.starts_with("reduce#")),
            "{:?}",
            latest.tasks.keys()
        );
        let mut other = savepoint(&[("reduce", 2)]);
        other.max_parallelism.insert("reduce".into(), 256);
        let e = checkpointing_job()
            .restore_savepoint(other, "memory://sp/y", false)
            .unwrap_err();
        assert!(
            e.contains("vertex reduce was saved with max parallelism 256")
                && e.contains("pipeline.max-parallelism: 256"),
            "{e}"
        );
    }

    /// Issue 31, item 5: the savepoint was taken when another reduce (operator `latest`) came
    /// before the counting one, so `counts` headed vertex `reduce-2`, and the sink `out` was a
    /// vertex of its own. This job has counts heading `reduce` with `out` chained to it. Each
    /// part of the state goes to its operator: keyed state from `reduce-2`, the sink's from
    /// `sink`; `latest`'s state is unclaimed, refused by name unless allowed.
    #[test]
    fn savepoint_state_goes_to_its_operator_whatever_vertex_it_is_in() {
        let owners =
            |pairs: &[(&str, &str, Option<&str>)]| -> BTreeMap<String, floe_checkpoint::StateOwners> {
                pairs
                    .iter()
                    .map(|(v, head, sink)| {
                        let owners = floe_checkpoint::StateOwners {
                            head: head.to_string(),
                            sink: sink.map(String::from),
                        };
                        (v.to_string(), owners)
                    })
                    .collect()
            };
        let saved = || {
            let mut sp = savepoint(&[("reduce", 2), ("reduce-2", 2)]);
            sp.checkpoint.tasks.insert(
                "sink#0".into(),
                TaskSnapshot {
                    sink: Some("pending part-0".into()),
                    ..TaskSnapshot::default()
                },
            );
            sp.checkpoint.operators = owners(&[
                ("reduce", "latest", None),
                ("reduce-2", "counts", None),
                ("sink", "out", Some("out")),
            ]);
            sp
        };
        let job = || {
            let mut job = checkpointing_job();
            job.state_owners = owners(&[
                ("source", "src", None),
                ("map", "m", None),
                ("reduce", "counts", Some("out")),
            ]);
            job
        };
        let e = job()
            .restore_savepoint(saved(), "memory://sp/x", false)
            .unwrap_err();
        assert!(
            e.contains("holds state of operator latest (vertex reduce), which this job does not have"),
            "{e}"
        );
        let mut job = job();
        job.restore_savepoint(saved(), "memory://sp/x", true).unwrap();
        let actions = job.start(&slots()).unwrap();
        let restores: BTreeMap<String, floe_checkpoint::SubtaskRestore> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Deploy { deployment, .. } => Some((
                    job.graph.task_name(deployment.id.vertex),
                    deployment.restore.clone()?.1,
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            restores.keys().collect::<Vec<_>>(),
            ["reduce#0", "reduce#1", "reduce#2"],
            "only reduce's operators had state"
        );
        let files = |t: &str| {
            restores[t]
                .keyed
                .iter()
                .map(|s| s.files[0].clone())
                .collect::<Vec<_>>()
        };
        // counts' keyed state, 2 -> 3 by key groups, from the vertex it was in then.
        assert_eq!(files("reduce#0"), ["reduce-2#0/keyed-state"]);
        assert_eq!(
            files("reduce#1"),
            ["reduce-2#0/keyed-state", "reduce-2#1/keyed-state"]
        );
        assert_eq!(files("reduce#2"), ["reduce-2#1/keyed-state"]);
        // out's committer state, once (round-robin over the new subtasks).
        assert_eq!(restores["reduce#0"].sinks, ["pending part-0"]);
        assert!(restores["reduce#1"].sinks.is_empty() && restores["reduce#2"].sinks.is_empty());
        // The job's own checkpoints record its owners for the next restore.
        let completed = job.with_vertex_metadata(saved().checkpoint);
        assert_eq!(completed.operators, job.state_owners);
    }

    #[test]
    fn the_recovery_keys_are_read_in_both_spellings_and_checked() {
        let conf = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(state_recovery(&conf(&[])).unwrap(), None);
        assert_eq!(
            state_recovery(&conf(&[
                ("execution.savepoint.path", "s3://b/sp"),
                ("execution.savepoint.ignore-unclaimed-state", "true")
            ]))
            .unwrap(),
            Some(StateRecovery {
                path: "s3://b/sp".into(),
                ignore_unclaimed: true
            })
        );
        let e = state_recovery(&conf(&[
            (RECOVERY_PATH_KEY, "s3://b/sp"),
            (IGNORE_UNCLAIMED_KEY, "yes"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(IGNORE_UNCLAIMED_KEY) && e.contains("expected true or false"),
            "{e}"
        );
    }
}
