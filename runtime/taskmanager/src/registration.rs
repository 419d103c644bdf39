//! Registration with the JobManager and heartbeats: the registration request (with the finished
//! partitions held), the heartbeat loop (metrics, buffers, memory, and every execution held, so the
//! JobManager reconciles both ways), and dropping everything when a JobManager no longer knows
//! this TaskManager.

use std::time::Duration;

use floe_proto::v1::job_manager_client::JobManagerClient;
use floe_proto::v1::{self as pb};
use tonic::transport::Channel;

use crate::tasks::TaskEntry;
use crate::{Error, Result, TaskManager, lock, rss_bytes};

/// An error and its causes, `outer: inner: ...` (a transport error alone says nothing of why).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

pub(crate) async fn connect(address: &str, timeout: Duration) -> Result<JobManagerClient<Channel>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let endpoint = floe_proto::channel::endpoint(
        address,
        Duration::from_secs(2),
        floe_proto::channel::CONTROL_KEEP_ALIVE,
    )
    .map_err(|e| Error::JobManagerUnreachable {
        address: address.into(),
        message: e.to_string(),
    })?;
    loop {
        match endpoint.connect().await {
            Ok(ch) => return Ok(JobManagerClient::new(ch)),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(Error::JobManagerUnreachable {
                    address: address.into(),
                    message: format!(
                        "no connection within {} s: {}",
                        timeout.as_secs(),
                        error_chain(&e)
                    ),
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// `call`, or DEADLINE_EXCEEDED after `timeout`.
async fn within<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(timeout, call).await.unwrap_or_else(|_| {
        Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {timeout:?}"
        )))
    })
}

impl TaskManager {
    /// The registration request, with the finished partitions held right now.
    pub(crate) fn registration(
        &self,
        base: &pb::RegisterTaskManagerRequest,
    ) -> pb::RegisterTaskManagerRequest {
        let (held_ids, held) = self
            .inner
            .shuffle
            .finished_partitions()
            .into_iter()
            .map(|(id, stats)| {
                (
                    pb::ResultPartitionId::from(id.clone()),
                    pb::PartitionStats {
                        result: id.result,
                        partition: id.partition,
                        bytes_per_subpartition: stats.bytes_per_subpartition,
                    },
                )
            })
            .unzip();
        pb::RegisterTaskManagerRequest {
            held_ids,
            held,
            ..base.clone()
        }
    }

    /// Aborts every task and releases every job's unfinished partitions: what a TaskManager does
    /// when the JobManager it worked for no longer knows it.
    pub(crate) fn forget_all(&self) {
        let tasks: Vec<TaskEntry> = lock(&self.inner.tasks).drain().map(|(_, t)| t).collect();
        for t in &tasks {
            t.abort.abort();
        }
        let jobs: Vec<String> = lock(&self.inner.jobs).drain().map(|(id, _)| id).collect();
        // Finished blocking partitions stay: the next JobManager is told about them at registration
        // and need not run their producers again.
        self.inner.shuffle.release_unfinished();
        if !tasks.is_empty() || !jobs.is_empty() {
            tracing::info!(
                tasks = tasks.len(),
                jobs = jobs.len(),
                "dropped the work of the previous JobManager"
            );
        }
    }

    /// Heartbeats every `interval` until the process ends; registers again (after dropping all
    /// work) when the JobManager does not know this TaskManager. A heartbeat or registration that
    /// gets no answer within `timeout` (the JobManager's heartbeat timeout: by then it declared this
    /// TaskManager lost anyway) is given up, so a partition never stalls the loop.
    pub(crate) fn spawn_heartbeats(
        &self,
        register: pb::RegisterTaskManagerRequest,
        interval: Duration,
        timeout: Duration,
    ) {
        let beat = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                let (rss, rss_peak) = rss_bytes();
                let (metrics, executions, reported) = beat.heartbeat_payload();
                let request = pb::HeartbeatRequest {
                    taskmanager_id: beat.inner.id.clone(),
                    metrics,
                    executions,
                    buffered_bytes: beat.inner.shuffle.buffered_bytes(),
                    buffered_bytes_peak: beat.inner.shuffle.peak_buffered_bytes(),
                    rss_bytes: rss,
                    rss_peak_bytes: rss_peak,
                };
                let answer = within(timeout, beat.inner.jobmanager.clone().heartbeat(request)).await;
                if let Ok(r) = &answer
                    && let Err(refused) = beat.admit(r.get_ref().leader_epoch)
                {
                    tracing::warn!("heartbeat answered by an older JobManager: {}", refused.message());
                }
                match answer {
                    Ok(r) if !r.get_ref().known => {
                        // A new JobManager (the old one died) or one that declared this TaskManager lost:
                        // either way nobody tracks the tasks running here any more.
                        tracing::warn!(
                            "JobManager does not know this TaskManager; dropping its tasks and registering again"
                        );
                        beat.forget_all();
                        let mut jobmanager = beat.inner.jobmanager.clone();
                        if let Ok(r) = within(
                            timeout,
                            jobmanager.register_task_manager(beat.registration(&register)),
                        )
                        .await
                        {
                            let _ = beat.admit(r.get_ref().leader_epoch);
                        }
                    }
                    // The JobManager applied the final states this heartbeat carried.
                    Ok(_) => beat.acknowledged(&reported),
                    Err(e) => tracing::warn!("heartbeat failed: {e}"),
                }
            }
        });
    }
}
