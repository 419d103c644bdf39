//! The `JobManager` gRPC service (TaskManagers register, heartbeat and report; clients submit, query
//! and cancel) and the conversions of its messages at this edge.

use super::*;

pub(crate) fn attempt_to_proto(id: &AttemptId) -> pb::ExecutionAttemptId {
    pb::ExecutionAttemptId {
        job_id: id.job_id.clone(),
        vertex: id.vertex.vertex.0,
        subtask: id.vertex.subtask,
        attempt: id.attempt,
    }
}

pub(crate) fn attempt_from_proto(id: Option<pb::ExecutionAttemptId>) -> Result<AttemptId, Status> {
    let id = id.ok_or_else(|| Status::invalid_argument("id: missing execution attempt id"))?;
    Ok(AttemptId {
        job_id: id.job_id,
        vertex: floe_scheduler::ExecutionVertexId::new(id.vertex, id.subtask),
        attempt: id.attempt,
    })
}

pub(super) fn to_proto(d: &Deployment) -> pb::TaskDeployment {
    pb::TaskDeployment {
        id: Some(attempt_to_proto(&d.id)),
        job_name: d.job.name.clone(),
        args: d.job.args.clone(),
        configuration: d.job.configuration.clone().into_iter().collect(),
        graph_fingerprint: d.fingerprint.clone(),
        restore_checkpoint: d.restore.as_ref().map_or(0, |r| r.0),
        restore_snapshot_json: d
            .restore
            .as_ref()
            .map(|r| serde_json::to_string(&r.1).unwrap_or_default())
            .unwrap_or_default(),
        inputs: d
            .inputs
            .iter()
            .enumerate()
            .map(|(i, channels)| pb::InputGateDeployment {
                result: i as u32,
                channels: channels
                    .iter()
                    .map(|c| pb::InputChannelDeployment {
                        partition: Some(partition_to_proto(&c.partition)),
                        address: c.address.clone(),
                        subpartition_start: c.subpartitions.start,
                        subpartition_end: c.subpartitions.end,
                    })
                    .collect(),
            })
            .collect(),
        outputs: d
            .outputs
            .iter()
            .map(|o| pb::OutputDeployment {
                partition: Some(partition_to_proto(&o.partition)),
                num_subpartitions: o.num_subpartitions,
                blocking: o.kind != floe_shuffle::PartitionKind::Pipelined,
            })
            .collect(),
        parallelism: d.parallelism,
    }
}

pub(super) fn partition_to_proto(p: &floe_shuffle::ResultPartitionId) -> pb::ResultPartitionId {
    pb::ResultPartitionId {
        job_id: p.job_id.clone(),
        result: p.result,
        partition: p.partition,
        attempt: p.attempt,
    }
}

#[tonic::async_trait]
impl JobManagerRpc for JobManager {
    async fn register_task_manager(
        &self,
        request: Request<pb::RegisterTaskManagerRequest>,
    ) -> Result<Response<pb::RegisterTaskManagerResponse>, Status> {
        let r = request.into_inner();
        if r.taskmanager_id.is_empty() || r.address.is_empty() {
            return Err(Status::invalid_argument(
                "taskmanager_id and address are required",
            ));
        }
        if r.slots == 0 {
            return Err(Status::invalid_argument(
                "slots: a TaskManager must offer at least 1 slot",
            ));
        }
        tracing::info!(
            taskmanager = %r.taskmanager_id,
            address = %r.address,
            slots = r.slots,
            held_partitions = r.held_ids.len(),
            "TaskManager registered"
        );
        let held: Vec<(floe_shuffle::ResultPartitionId, floe_shuffle::PartitionStats)> = r
            .held_ids
            .iter()
            .cloned()
            .zip(&r.held)
            .map(|(id, stats)| {
                (
                    id.into(),
                    floe_shuffle::PartitionStats {
                        bytes_per_subpartition: stats.bytes_per_subpartition.clone(),
                    },
                )
            })
            .collect();
        // The same id from another process: the earlier one is gone (a container restarted under
        // its pod's name). Its executions fail and its partitions are unavailable, as for any
        // TaskManager lost; waiting for its heartbeat to time out would wait forever, the new
        // instance heartbeats under the same id.
        let restarted = self
            .state()
            .taskmanagers
            .get(&r.taskmanager_id)
            .is_some_and(|tm| tm.instance_id != r.instance_id);
        if restarted {
            self.declare_lost(
                &r.taskmanager_id,
                &format!(
                    "a new instance ({}) registered under its id: the process restarted",
                    r.instance_id
                ),
            );
        }
        let mut state = self.state();
        for job in state.jobs.values_mut() {
            job.master.partitions_held(&r.taskmanager_id, &r.address, &held);
        }
        state.taskmanagers.insert(
            r.taskmanager_id.clone(),
            TaskManagerInfo {
                instance_id: r.instance_id,
                id: r.taskmanager_id,
                address: r.address,
                slots: r.slots,
                last_heartbeat: Instant::now(),
                buffered_bytes: 0,
                buffered_bytes_peak: 0,
                running_executions: 0,
                rss_bytes: 0,
                rss_peak_bytes: 0,
                held,
            },
        );
        drop(state);
        self.try_start_jobs();
        Ok(Response::new(pb::RegisterTaskManagerResponse {
            jobmanager_id: self.inner.id.clone(),
            heartbeat_interval_ms: self.inner.config.heartbeat_interval.as_millis() as u64,
            heartbeat_timeout_ms: self.inner.config.heartbeat_timeout.as_millis() as u64,
            leader_epoch: self.leader_epoch(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let r = request.into_inner();
        let address = {
            let mut state = self.state();
            let Some(tm) = state.taskmanagers.get_mut(&r.taskmanager_id) else {
                return Ok(Response::new(pb::HeartbeatResponse {
                    known: false,
                    leader_epoch: self.leader_epoch(),
                }));
            };
            tm.last_heartbeat = Instant::now();
            tm.buffered_bytes = r.buffered_bytes;
            tm.buffered_bytes_peak = tm.buffered_bytes_peak.max(r.buffered_bytes_peak);
            tm.rss_bytes = r.rss_bytes;
            tm.rss_peak_bytes = tm.rss_peak_bytes.max(r.rss_peak_bytes);
            let address = tm.address.clone();
            for m in r.metrics {
                let Ok(id) = attempt_from_proto(m.id.clone()) else {
                    continue;
                };
                if let Some(job) = state.jobs.get_mut(&id.job_id) {
                    job.master.update_counters(&id, TaskCounters::from(&m));
                }
            }
            address
        };
        // Final states whose report did not get through: applied as the report would have been.
        let mut held = Vec::with_capacity(r.executions.len());
        for mut execution in r.executions {
            let Ok(id) = attempt_from_proto(execution.id.clone()) else {
                continue;
            };
            match floe_proto::convert::execution_state(execution.state) {
                Some(state) if state.is_terminal() => {
                    execution.taskmanager_id = r.taskmanager_id.clone();
                    self.apply_report(execution).await?;
                }
                Some(state) => held.push((id, state)),
                None => {}
            }
        }
        let actions: Vec<Action> = {
            let mut state = self.state();
            if let Some(tm) = state.taskmanagers.get_mut(&r.taskmanager_id) {
                tm.running_executions = held.len();
            }
            state
                .jobs
                .values_mut()
                .filter(|j| !j.master.status.is_terminal())
                .flat_map(|j| j.master.reconcile(&r.taskmanager_id, &address, &held))
                .collect()
        };
        self.perform(actions);
        Ok(Response::new(pb::HeartbeatResponse {
            known: true,
            leader_epoch: self.leader_epoch(),
        }))
    }

    async fn update_task_execution_state(
        &self,
        request: Request<pb::TaskExecutionStateUpdate>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.apply_report(request.into_inner()).await?;
        Ok(Response::new(pb::Ack {}))
    }

    async fn submit_job(
        &self,
        request: Request<pb::SubmitJobRequest>,
    ) -> Result<Response<pb::SubmitJobResponse>, Status> {
        let r = request.into_inner();
        let args = JobArgs {
            name: r.job_name,
            args: r.args,
            configuration: r.configuration.into_iter().collect(),
        };
        let job_id = self
            .submit(args)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(pb::SubmitJobResponse { job_id }))
    }

    async fn get_job_status(
        &self,
        request: Request<pb::GetJobStatusRequest>,
    ) -> Result<Response<pb::JobStatusResponse>, Status> {
        // A job that ended is in the log before anyone hears of it (`floe run` stops the cluster
        // as soon as it sees the end).
        let ended = self.job_statuses().iter().any(|s| s.status.is_terminal());
        if ended && let Err(e) = self.log_status_changes().await {
            tracing::warn!("cannot log the job's end yet: {e}");
        }
        let mut job_id = request.into_inner().job_id;
        let state = self.state();
        // An empty id asks for the newest job: a JobManager in application mode runs one.
        if job_id.is_empty() {
            let newest = state
                .jobs
                .iter()
                .max_by_key(|(_, j)| j.start_time_ms)
                .map(|(id, _)| id);
            let ended = state
                .ended
                .iter()
                .max_by_key(|(_, j)| j.start_time_ms)
                .map(|(id, _)| id);
            job_id = newest
                .or(ended)
                .cloned()
                .ok_or_else(|| Status::not_found("this JobManager has no job"))?;
        }
        let Some(job) = state.jobs.get(&job_id) else {
            let ended = state
                .ended
                .get(&job_id)
                .ok_or_else(|| Status::not_found(format!("job {job_id} not found")))?;
            return Ok(Response::new(pb::JobStatusResponse {
                job_id,
                status: ended.status.clone(),
                failure: ended.failure.clone().unwrap_or_default(),
                ..pb::JobStatusResponse::default()
            }));
        };
        let (total, finished) = job.master.progress();
        Ok(Response::new(pb::JobStatusResponse {
            job_id,
            status: job.master.status.name().to_string(),
            tasks_total: total as u32,
            tasks_finished: finished as u32,
            records_processed: job.master.records_processed(),
            failure: job.master.failure.clone().unwrap_or_default(),
            savepoint_results_unfetched: u32::try_from(job.master.unfetched_savepoint_results())
                .unwrap_or(u32::MAX),
            cluster_peak_rss_bytes: peak_rss_bytes()
                + state
                    .taskmanagers
                    .values()
                    .map(|tm| tm.rss_peak_bytes)
                    .sum::<u64>(),
        }))
    }

    async fn acknowledge_checkpoint(
        &self,
        request: Request<pb::AcknowledgeCheckpointRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        let r = request.into_inner();
        let id = attempt_from_proto(r.id)?;
        let snapshot: floe_checkpoint::TaskSnapshot = serde_json::from_str(&r.snapshot_json)
            .map_err(|e| Status::invalid_argument(format!("snapshot_json: not a task snapshot: {e}")))?;
        self.on_checkpoint_ack(&id, &r.taskmanager_id, r.checkpoint, snapshot);
        Ok(Response::new(pb::Ack {}))
    }

    async fn decline_checkpoint(
        &self,
        request: Request<pb::DeclineCheckpointRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        let r = request.into_inner();
        let id = attempt_from_proto(r.id)?;
        if let Some(job) = self.state().jobs.get_mut(&id.job_id) {
            job.master.decline_checkpoint(&id, r.checkpoint, &r.reason);
        }
        Ok(Response::new(pb::Ack {}))
    }

    async fn cancel_job(&self, request: Request<pb::CancelJobRequest>) -> Result<Response<pb::Ack>, Status> {
        let job_id = request.into_inner().job_id;
        match self.cancel(&job_id) {
            Ok(()) => Ok(Response::new(pb::Ack {})),
            Err(Error::UnknownJob(id)) => Err(Status::not_found(format!("job {id} not found"))),
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        }
    }
}

impl From<&pb::TaskMetrics> for TaskCounters {
    fn from(m: &pb::TaskMetrics) -> Self {
        TaskCounters {
            records_in: m.records_in,
            records_out: m.records_out,
            bytes_in: m.bytes_in,
            bytes_out: m.bytes_out,
            idle_ns: m.idle_ns,
            backpressured_ns: m.backpressured_ns,
            running_ns: m.running_ns,
            pending_records: m.pending_records,
            current_watermark: m.current_watermark,
            late_records_dropped: m.late_records_dropped,
            in_pool_usage: m.in_pool_usage,
            out_pool_usage: m.out_pool_usage,
        }
    }
}
