//! The JobManager's checkpoint driver (the I/O around [`crate::checkpoints::JobCheckpoints`]):
//! reads a job's latest checkpoint before it starts, sends barriers to the sources when one is due,
//! writes the metadata when every task acknowledged, records it in the operation log, tells the
//! TaskManagers (sinks commit), and deletes what retention drops.

use floe_checkpoint::{CheckpointStore, CompletedCheckpoint, TaskSnapshot};
use floe_proto::v1 as pb;
use floe_scheduler::JobStatus;
use floe_storage::ObjectStore;

use crate::job::AttemptId;
use crate::server::{JobManager, attempt_to_proto, now_ms};

fn checkpoint_store(conf: &std::collections::BTreeMap<String, String>) -> Result<CheckpointStore, String> {
    match ObjectStore::job_storage(conf) {
        Ok(Some(store)) => Ok(CheckpointStore::new(store)),
        Ok(None) => Err(format!("no job storage ({})", floe_storage::JOB_STORAGE_KEY)),
        Err(e) => Err(e.to_string()),
    }
}

impl JobManager {
    /// A checkpointing job waits for this: the newest readable checkpoint among those the
    /// operation log vouches for (a JobManager that took over resumes from it), then it may start.
    pub(crate) fn resume_checkpoints(&self, job_id: &str) {
        let (conf, vouched) = match self.state().jobs.get(job_id) {
            Some(job) if job.master.checkpoints.is_some() => (
                job.master.args.configuration.clone(),
                job.master.vouched_checkpoints.clone(),
            ),
            _ => return,
        };
        let this = self.clone();
        let job_id = job_id.to_string();
        tokio::spawn(async move {
            let latest = match checkpoint_store(&conf) {
                Ok(store) => store.latest(&job_id, &vouched).await.map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            // A job that has no checkpoint of its own yet starts from its savepoint, if it names one.
            let recovery = crate::job::state_recovery(&conf).ok().flatten();
            let savepoint = match (&latest, recovery) {
                (Ok(l), Some(recovery)) if l.checkpoint.is_none() => {
                    Some(read_savepoint(&recovery.path, &conf).await.map(|s| (s, recovery)))
                }
                _ => None,
            };
            {
                let mut state = this.state();
                let Some(job) = state.jobs.get_mut(&job_id) else {
                    return;
                };
                let resumed = match (latest, savepoint) {
                    (Ok(_), Some(Ok(((savepoint, directory), recovery)))) => job
                        .master
                        .restore_savepoint(savepoint, &directory, recovery.ignore_unclaimed)
                        .map_err(|e| format!("cannot start from the savepoint: {e}")),
                    (Ok(_), Some(Err(e))) => Err(format!(
                        "cannot start from the savepoint ({}): {e}",
                        crate::job::RECOVERY_PATH_KEY
                    )),
                    (Ok(latest), None) => {
                        for skipped in &latest.skipped {
                            tracing::warn!(job = %job_id, "passing over a damaged checkpoint: {skipped}");
                        }
                        job.master.resume_checkpoints(latest.checkpoint);
                        Ok(())
                    }
                    // Checkpoints exist and none reads back: starting empty would lose state.
                    (Err(e), _) => Err(format!("cannot restore the job's checkpoints: {e}")),
                };
                match resumed {
                    Ok(()) => {}
                    Err(e) => {
                        let m = &mut job.master;
                        m.failure = Some(e.clone());
                        tracing::error!(job = %job_id, "{e}");
                        for s in [JobStatus::Running, JobStatus::Failing, JobStatus::Failed] {
                            m.status = m.status.transition(s).unwrap_or(s);
                        }
                        job.end_time_ms = Some(now_ms());
                        return;
                    }
                }
            }
            this.try_start_jobs();
        });
    }

    /// Sends the barriers of every checkpoint that is due, once its id is claimed in the job
    /// storage (a stopped JobManager triggers nothing).
    pub(crate) fn trigger_checkpoints(&self) {
        if self.fatal().is_some() {
            return;
        }
        let now = now_ms();
        type Trigger = (
            String,
            u64,
            Vec<(String, AttemptId)>,
            (bool, bool),
            Option<CheckpointStore>,
        );
        let mut actions = Vec::new();
        let triggers: Vec<Trigger> = self
            .state()
            .jobs
            .values_mut()
            .filter_map(|job| {
                actions.extend(job.master.check_savepoint(now));
                let t = job.master.trigger_checkpoint(now)?;
                let store = checkpoint_store(&job.master.args.configuration).ok();
                Some((job.master.id.clone(), t.id, t.sources, (t.stop, t.drain), store))
            })
            .collect();
        self.perform(actions);
        self.notify_aborted_checkpoints();
        let holder = format!("leader epoch {}", self.leader_epoch());
        for (job_id, checkpoint, sources, (stop, drain), store) in triggers {
            let this = self.clone();
            let holder = holder.clone();
            tokio::spawn(async move {
                let claimed = match &store {
                    Some(store) => store
                        .claim(&job_id, checkpoint, &holder)
                        .await
                        .map_err(|e| format!("cannot claim its id: {e}")),
                    None => Ok(true),
                };
                let refused = match claimed {
                    Ok(true) => None,
                    Ok(false) => Some("its id was claimed by another JobManager".to_string()),
                    Err(e) => Some(e),
                };
                if let Some(why) = refused {
                    if let Some(job) = this.state().jobs.get_mut(&job_id) {
                        job.master.abort_checkpoint(checkpoint, &why);
                    }
                    return;
                }
                for (address, id) in sources {
                    this.send_trigger(address, id, checkpoint, stop, drain);
                }
            });
        }
    }

    /// Tells the TaskManagers of every job which of its checkpoints were aborted: its sources send
    /// the cancel-checkpoint marker, which ends any alignment waiting for the barrier (else the
    /// channels that delivered it stay blocked until the next checkpoint's barrier).
    fn notify_aborted_checkpoints(&self) {
        let aborted: Vec<(String, Vec<u64>, Vec<String>)> = self
            .state()
            .jobs
            .values_mut()
            .filter_map(|job| {
                let (ids, addresses) = job.master.take_aborted_checkpoints()?;
                Some((job.master.id.clone(), ids, addresses))
            })
            .collect();
        for (job_id, ids, addresses) in aborted {
            let this = self.clone();
            tokio::spawn(async move {
                for address in addresses {
                    let Ok(mut c) = this.client(&address).await else {
                        continue;
                    };
                    for &checkpoint in &ids {
                        let request = pb::CheckpointAbortedRequest {
                            job_id: job_id.clone(),
                            checkpoint,
                        };
                        // A TaskManager that misses it waits for the next barrier, as before.
                        let _ = c.notify_checkpoint_aborted(request).await;
                    }
                }
            });
        }
    }

    fn send_trigger(&self, address: String, id: AttemptId, checkpoint: u64, stop: bool, drain: bool) {
        let this = self.clone();
        tokio::spawn(async move {
            let request = pb::TriggerCheckpointRequest {
                id: Some(attempt_to_proto(&id)),
                checkpoint,
                stop,
                drain,
            };
            let sent = match this.client(&address).await {
                Ok(mut c) => c
                    .trigger_checkpoint(request)
                    .await
                    .map(|_| ())
                    .map_err(|s| s.to_string()),
                Err(e) => Err(e),
            };
            if let Err(e) = sent
                && let Some(job) = this.state().jobs.get_mut(&id.job_id)
            {
                job.master
                    .decline_checkpoint(&id, checkpoint, &format!("trigger failed: {e}"));
            }
        });
    }

    /// A task's acknowledgement: when it completes the checkpoint, write the metadata, log it, then
    /// make it the latest, notify the TaskManagers and delete what retention drops.
    pub(crate) fn on_checkpoint_ack(
        &self,
        id: &AttemptId,
        taskmanager: &str,
        checkpoint: u64,
        snapshot: TaskSnapshot,
    ) {
        let completed = {
            let mut state = self.state();
            let Some(job) = state.jobs.get_mut(&id.job_id) else {
                return;
            };
            if job.master.deployed_on(id) != Some(taskmanager) {
                return;
            }
            job.master
                .acknowledge_checkpoint(id, checkpoint, snapshot, now_ms())
                .map(|c| (c, job.master.args.configuration.clone()))
        };
        let Some((completed, conf)) = completed else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.complete_checkpoint(completed, &conf).await {
                tracing::warn!("checkpoint could not be completed: {e}");
            }
        });
    }

    /// Completes `checkpoint` (metadata, log, savepoint, notify, retention). When it cannot, a
    /// savepoint being taken as it fails.
    pub(crate) async fn complete_checkpoint(
        &self,
        checkpoint: CompletedCheckpoint,
        conf: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), String> {
        let (job_id, id) = (checkpoint.job_id.clone(), checkpoint.id);
        let completed = self.write_checkpoint(checkpoint, conf).await;
        if let Err(e) = &completed {
            let actions = match self.state().jobs.get_mut(&job_id) {
                Some(job) => job.master.checkpoint_dropped(id, e),
                None => Vec::new(),
            };
            self.perform(actions);
        }
        completed
    }

    async fn write_checkpoint(
        &self,
        checkpoint: CompletedCheckpoint,
        conf: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), String> {
        let store = checkpoint_store(conf)?;
        let (job_id, id) = (checkpoint.job_id.clone(), checkpoint.id);
        let current = |this: &Self| {
            this.state()
                .jobs
                .get(&job_id)
                .is_some_and(|j| j.master.checkpoint_is_current(id))
        };
        if !current(self) {
            return Err(format!(
                "checkpoint {id} of job {job_id} completed after a restart; dropped"
            ));
        }
        store.write(&checkpoint).await.map_err(|e| e.to_string())?;
        let logging = self
            .state()
            .jobs
            .get_mut(&job_id)
            .is_some_and(|j| j.master.begin_checkpoint_completion(id));
        if !logging {
            // A restart happened while the metadata was written: the log never records it, so it
            // is never restored; deleting it only saves space.
            let _ = store.delete(&job_id, id).await;
            return Err(format!(
                "checkpoint {id} of job {job_id} completed after a restart; dropped"
            ));
        }
        let logged = self
            .log(&[crate::oplog::Event::CheckpointCompleted {
                job_id: job_id.clone(),
                checkpoint: id,
                time_ms: now_ms(),
            }])
            .await;
        if let Err(e) = logged {
            if let Some(job) = self.state().jobs.get_mut(&job_id) {
                job.master.checkpoint_not_logged();
            }
            return Err(e.to_string());
        }
        tracing::info!(
            job = %job_id,
            checkpoint = id,
            uploaded_bytes = checkpoint.uploaded_bytes(),
            state_bytes = checkpoint.state_bytes(),
            duration_ms = checkpoint.completed_ms.saturating_sub(checkpoint.triggered_ms),
            "checkpoint completed"
        );
        let (subsumed, addresses, savepoint) = match self.state().jobs.get_mut(&job_id) {
            Some(job) => {
                let savepoint = job.master.savepoint_of(id).map(|request| {
                    (
                        request,
                        job.master.args.name.clone(),
                        job.master.max_parallelism(),
                    )
                });
                let (subsumed, addresses) = job.master.checkpoint_completed(checkpoint.clone());
                (subsumed, addresses, savepoint)
            }
            None => return Ok(()),
        };
        // A savepoint is copied out before any sink commits or a stopped source finishes: a stop
        // whose savepoint cannot be written fails over and runs on.
        if let Some((request, name, max_parallelism)) = savepoint {
            let written = write_savepoint(conf, &request, &name, &checkpoint, max_parallelism).await;
            let actions = match self.state().jobs.get_mut(&job_id) {
                Some(job) => job.master.savepoint_written(&request.trigger, written),
                None => Vec::new(),
            };
            self.perform(actions);
        }
        for address in addresses {
            if let Ok(mut c) = self.client(&address).await {
                let _ = c
                    .notify_checkpoint_complete(pb::CheckpointCompleteRequest {
                        job_id: job_id.clone(),
                        checkpoint: id,
                    })
                    .await;
            }
        }
        // Everything below the oldest retained checkpoint goes in one sweep: the checkpoints
        // retention just dropped, aborted ones, and any an earlier delete missed.
        if let Some(oldest) = subsumed.oldest_retained
            && let Err(e) = store.delete_older_than(&job_id, oldest).await
        {
            tracing::warn!(job = %job_id, "could not delete checkpoints older than {oldest}: {e}");
        }
        if let Ok(Some(objects)) = ObjectStore::job_storage(conf) {
            for file in subsumed.shared_files {
                if let Err(e) = objects.delete(&file).await {
                    tracing::warn!(job = %job_id, file, "could not delete an unused shared state file: {e}");
                }
            }
        }
        if let Some(before_ms) = subsumed.sweep_before_ms {
            sweep_shared_state(&store, conf, &checkpoint, before_ms).await;
        }
        Ok(())
    }

    /// The final sweep of a job that ended (issue 31, item 11): its storage keeps exactly its
    /// retained checkpoints. Aborted checkpoints' directories, shared uploads never acknowledged
    /// and anything an earlier delete missed would otherwise stay for good, since nothing runs for
    /// the job again. It waits for a checkpoint completion still in flight (it may become
    /// retained), and does nothing for a job whose checkpoints were never read back (what it
    /// retains is unknown) or when this JobManager is fenced.
    pub(crate) fn sweep_ended_job(&self, job_id: &str) {
        let this = self.clone();
        let job_id = job_id.to_string();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
            let (store, retained) = loop {
                if this.fatal().is_some() {
                    return;
                }
                {
                    let state = this.state();
                    let Some(job) = state.jobs.get(&job_id) else {
                        return;
                    };
                    let Some(checkpoints) = job.master.checkpoints.as_ref().filter(|c| c.ready) else {
                        return;
                    };
                    if !job.master.checkpoint_completion_in_flight() {
                        let Ok(store) = checkpoint_store(&job.master.args.configuration) else {
                            return;
                        };
                        break (store, checkpoints.retained().to_vec());
                    }
                }
                if tokio::time::Instant::now() > deadline {
                    tracing::warn!(job = %job_id, "a checkpoint completion never ended; the ended job's storage is not swept");
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            };
            match store.sweep_ended(&job_id, &retained).await {
                Ok((checkpoints, shared)) => tracing::info!(
                    job = %job_id,
                    retained = ?retained.iter().map(|c| c.id).collect::<Vec<_>>(),
                    deleted_checkpoints = ?checkpoints,
                    deleted_shared_objects = shared,
                    "the ended job's storage keeps only its retained checkpoints"
                ),
                Err(e) => tracing::warn!(job = %job_id, "could not sweep the ended job's storage: {e}"),
            }
        });
    }
}

/// The listing sweep of the job's shared state (see `CheckpointStore::unreferenced_shared`):
/// what no checkpoint references and nothing will name again goes. A failure only leaves it for
/// the next sweep.
async fn sweep_shared_state(
    store: &floe_checkpoint::CheckpointStore,
    conf: &std::collections::BTreeMap<String, String>,
    latest: &CompletedCheckpoint,
    before_ms: u64,
) {
    let job_id = latest.job_id.as_str();
    let before = std::time::UNIX_EPOCH + std::time::Duration::from_millis(before_ms);
    let doomed = match store.unreferenced_shared(latest, before).await {
        Ok(doomed) => doomed,
        Err(e) => {
            tracing::warn!(job = %job_id, "could not sweep the shared state: {e}");
            return;
        }
    };
    if doomed.is_empty() {
        return;
    }
    let Ok(Some(objects)) = ObjectStore::job_storage(conf) else {
        return;
    };
    match objects.delete_many(&doomed).await {
        Ok(()) => tracing::info!(
            job = %job_id,
            objects = doomed.len(),
            "swept shared state no checkpoint references (uploads never acknowledged)"
        ),
        Err(e) => tracing::warn!(job = %job_id, "could not sweep the shared state: {e}"),
    }
}

/// Copies a completed checkpoint into the savepoint directory the request names.
async fn write_savepoint(
    conf: &std::collections::BTreeMap<String, String>,
    request: &crate::job::SavepointRequest,
    job_name: &str,
    checkpoint: &CompletedCheckpoint,
    max_parallelism: std::collections::BTreeMap<String, u32>,
) -> Result<String, String> {
    let job_storage = match ObjectStore::job_storage(conf) {
        Ok(Some(store)) => store,
        Ok(None) => return Err(format!("no job storage ({})", floe_storage::JOB_STORAGE_KEY)),
        Err(e) => return Err(e.to_string()),
    };
    let target =
        ObjectStore::open(&request.directory, conf).map_err(|e| format!("{}: {e}", request.directory))?;
    floe_checkpoint::savepoint::write(
        &job_storage,
        &target,
        job_name,
        checkpoint,
        max_parallelism,
        request.drain,
    )
    .await
    .map_err(|e| e.to_string())
}

/// Reads the savepoint (or retained checkpoint) at `location`: it and the URL its files are
/// relative to.
async fn read_savepoint(
    location: &str,
    conf: &std::collections::BTreeMap<String, String>,
) -> Result<(floe_checkpoint::Savepoint, String), String> {
    let point = floe_checkpoint::savepoint::load_recovery_point(location, conf)
        .await
        .map_err(|e| format!("{location}: {e}"))?;
    Ok((point.savepoint, point.storage))
}
