//! The driver: starting jobs that fit, carrying out each job's [`Action`]s (deployments,
//! cancellations, releases, delayed restarts, checkpoint completion) and the TaskManager clients
//! they go through.

use super::rpc::to_proto;
use super::*;

impl JobManager {
    /// Starts every CREATED job that now fits; fails those that waited longer than the slot timeout.
    pub(crate) fn try_start_jobs(&self) {
        let mut actions = Vec::new();
        {
            let mut state = self.state();
            let ids: Vec<String> = state
                .jobs
                .iter()
                .filter(|(_, j)| j.master.status == JobStatus::Created && j.master.ready_to_start(now_ms()))
                .map(|(id, _)| id.clone())
                .collect();
            for id in ids {
                let free = Self::free_slots(&state);
                let Some(job) = state.jobs.get_mut(&id) else {
                    continue;
                };
                let timeout = self.slot_request_timeout(&job.master);
                // The adaptive scheduler waits a while for all the slots it wants.
                if job
                    .master
                    .waits_for_more_slots(free.len(), job.submitted.elapsed())
                {
                    continue;
                }
                match job.master.start(&free) {
                    Ok(a) => {
                        job.master.mark_scaled(now_ms());
                        actions.extend(a)
                    }
                    Err(Error::Scheduling(floe_scheduler::Error::NotEnoughSlots { needed, available })) => {
                        if job.submitted.elapsed() > timeout {
                            let m = &mut job.master;
                            m.failure = Some(crate::job::no_resource_available(needed, available, timeout));
                            for s in [JobStatus::Running, JobStatus::Failing, JobStatus::Failed] {
                                m.status = m.status.transition(s).unwrap_or(s);
                            }
                            job.end_time_ms = Some(now_ms());
                        }
                    }
                    Err(e) => tracing::error!(job = %id, "cannot start: {e}"),
                }
            }
        }
        self.perform(actions);
    }

    /// The adaptive scheduler: running jobs that can use more of the slots now free scale up;
    /// the autoscaler's evaluations.
    pub(crate) fn scale_adaptive_jobs(&self) {
        let mut actions = Vec::new();
        {
            let mut state = self.state();
            let free = Self::free_slots(&state);
            for job in state.jobs.values_mut() {
                actions.extend(job.master.maybe_scale_up(&free, now_ms()));
                actions.extend(job.master.autoscale(&free, now_ms()));
            }
        }
        self.perform(actions);
    }

    /// How long `job` waits for its slots: its `slot.request.timeout`, else this JobManager's.
    fn slot_request_timeout(&self, job: &JobMaster) -> Duration {
        job.slot_request_timeout
            .unwrap_or(self.inner.config.slot_request_timeout)
    }

    /// An adaptive-scheduled job waiting for more slots starts with what it has once its
    /// resource stabilization timeout passed, even if no TaskManager event comes.
    pub(crate) fn start_after_stabilization(&self, id: &str) {
        let wait = {
            let state = self.state();
            match state.jobs.get(id).and_then(|j| j.master.adaptive_scheduler) {
                Some(a) => a.stabilization,
                None => return,
            }
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            tokio::time::sleep(wait + Duration::from_millis(100)).await;
            this.try_start_jobs();
        });
    }

    /// Looks at job `id` again once its slot request timeout has passed, so a job that never got
    /// its slots fails then even if no TaskManager registers, leaves or reports in the meantime.
    pub(crate) fn fail_unstarted_after_timeout(&self, id: &str) {
        let timeout = {
            let state = self.state();
            let Some(job) = state.jobs.get(id) else {
                return;
            };
            self.slot_request_timeout(&job.master)
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            tokio::time::sleep(timeout + Duration::from_millis(100)).await;
            this.try_start_jobs();
        });
    }

    /// Carries out actions; failures to deploy become task failures. A stopped (fenced) JobManager
    /// carries out nothing.
    pub(crate) fn perform(&self, actions: Vec<Action>) {
        if self.fatal().is_some() {
            return;
        }
        for action in actions {
            let this = self.clone();
            match action {
                Action::Deploy {
                    taskmanager,
                    address,
                    deployment,
                } => {
                    tokio::spawn(async move {
                        let id = deployment.id.clone();
                        // (unreachable, message): a TaskManager that cannot be reached is lost, not
                        // just this task; waiting for its heartbeat timeout would spend a restart
                        // on every deployment sent to it meanwhile.
                        let result = match this.client(&address).await {
                            Ok(mut c) => c
                                .submit_task(to_proto(&deployment))
                                .await
                                .map(|_| ())
                                .map_err(|s| (s.code() == tonic::Code::Unavailable, s.message().to_string())),
                            Err(e) => Err((true, e)),
                        };
                        match result {
                            Ok(()) => {}
                            Err((true, message)) => this
                                .declare_lost(&taskmanager, &format!("unreachable at {address}: {message}")),
                            Err((false, message)) => {
                                let cause = format!(
                                    "deploying to TaskManager {taskmanager} at {address} failed: {message}"
                                );
                                this.task_state(&id, ExecutionState::Failed, Some(cause), Vec::new(), None);
                            }
                        }
                    });
                }
                Action::Cancel { address, id } => {
                    tokio::spawn(async move {
                        if let Ok(mut c) = this.client(&address).await {
                            let _ = c.cancel_task(attempt_to_proto(&id)).await;
                        }
                    });
                }
                Action::Release { job_id, addresses } => {
                    let mut remote_storage = None;
                    if let Some(job) = this.state().jobs.get_mut(&job_id) {
                        job.end_time_ms.get_or_insert_with(now_ms);
                        tracing::info!(job = %job_id, status = %job.master.status, "job ended");
                        let conf = &job.master.args.configuration;
                        if job.master.remote_shuffle {
                            remote_storage = conf
                                .get(floe_shuffle::JOB_STORAGE_KEY)
                                .map(|url| (url.clone(), conf.clone()));
                        }
                    }
                    // Its storage keeps only its retained checkpoints (issue 31, item 11).
                    this.sweep_ended_job(&job_id);
                    if let Some((url, conf)) = remote_storage {
                        let job_id = job_id.clone();
                        tokio::spawn(async move {
                            let deleted = match floe_storage::ObjectStore::open(&url, &conf) {
                                Ok(store) => store.scoped("shuffle").delete_all(&job_id).await,
                                Err(e) => Err(e),
                            };
                            if let Err(e) = deleted {
                                tracing::warn!(job = %job_id, "could not delete remote partitions: {e}");
                            }
                        });
                    }
                    tokio::spawn(async move {
                        for address in addresses {
                            if let Ok(mut c) = this.client(&address).await {
                                let _ = c
                                    .release_partitions(pb::ReleasePartitionsRequest {
                                        job_id: job_id.clone(),
                                    })
                                    .await;
                            }
                        }
                    });
                }
                Action::CompleteCheckpoint(mut checkpoint) => {
                    checkpoint.completed_ms = now_ms();
                    let conf = this
                        .state()
                        .jobs
                        .get(&checkpoint.job_id)
                        .map(|j| j.master.args.configuration.clone());
                    if let Some(conf) = conf {
                        tokio::spawn(async move {
                            if let Err(e) = this.complete_checkpoint(*checkpoint, &conf).await {
                                tracing::warn!("checkpoint could not be completed: {e}");
                            }
                        });
                    }
                }
                Action::DecideParallelism {
                    job_id,
                    mut decisions,
                } => {
                    let now = now_ms();
                    for d in &mut decisions {
                        d.time_ms = now;
                    }
                    tokio::spawn(async move { this.decide_parallelism(job_id, decisions).await });
                }
                Action::RestartAfter {
                    job_id,
                    delay,
                    vertices,
                } => {
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        this.restart(&job_id, &vertices);
                    });
                }
            }
        }
    }

    /// Logs parallelism decisions, then applies them: a JobManager that takes over keeps them. A
    /// log write that fails is tried again until it succeeds or this JobManager is fenced.
    async fn decide_parallelism(&self, job_id: String, decisions: Vec<crate::job::VertexDecision>) {
        let events: Vec<crate::oplog::Event> = decisions
            .iter()
            .map(|d| crate::oplog::Event::ParallelismDecided {
                job_id: job_id.clone(),
                decision: d.clone(),
            })
            .collect();
        while let Err(e) = self.log(&events).await {
            if self.fatal().is_some() {
                return;
            }
            tracing::warn!(job = %job_id, "cannot log the parallelism decisions, retrying: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let actions = match self.state().jobs.get_mut(&job_id) {
            Some(job) => job.master.apply_decisions(&decisions),
            None => Vec::new(),
        };
        self.perform(actions);
        // A vertex following a pointwise input, or one whose inputs were restored finished, may be
        // decidable at once.
        self.propose_decisions(&job_id);
    }

    pub(super) fn restart(&self, job_id: &str, vertices: &[floe_scheduler::ExecutionVertexId]) {
        let actions = {
            let mut state = self.state();
            let free = Self::free_slots(&state);
            match state.jobs.get_mut(job_id) {
                Some(job) => job.master.restart(vertices, &free, now_ms()),
                None => Vec::new(),
            }
        };
        self.perform(actions);
    }

    pub(crate) async fn client(&self, address: &str) -> Result<TaskExecutorRpc, String> {
        if let Some(c) = self
            .inner
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(address)
        {
            return Ok(c.clone());
        }
        let endpoint = floe_proto::channel::endpoint(
            address,
            Duration::from_secs(5),
            floe_proto::channel::CONTROL_KEEP_ALIVE,
        )
        .map_err(|e| e.to_string())?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let client = TaskExecutorClient::with_interceptor(channel, self.inner.leader_epoch.clone())
            .max_decoding_message_size(64 << 20);
        self.inner
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(address.to_string(), client.clone());
        Ok(client)
    }
}
