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

pub(crate) async fn connect(address: &str, backoff: &mut Backoff) -> Result<JobManagerClient<Channel>> {
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
            Err(e) => {
                backoff
                    .wait(|| Error::JobManagerUnreachable {
                        address: address.into(),
                        message: error_chain(&e),
                    })
                    .await?
            }
        }
    }
}

/// Retrying to reach and register with the JobManager: 200 ms after the first failure, doubling
/// up to 10 s, forever unless a registration timeout was given (Kubernetes starts TaskManagers
/// and the JobManager in any order, and a JobManager replaying a long log takes its time).
#[derive(Debug)]
pub(crate) struct Backoff {
    delay: Duration,
    deadline: Option<tokio::time::Instant>,
    timeout: Option<Duration>,
    attempts: u32,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(10);

    pub(crate) fn new(timeout: Option<Duration>) -> Self {
        Backoff {
            delay: Self::FIRST,
            deadline: timeout.map(|t| tokio::time::Instant::now() + t),
            timeout,
            attempts: 0,
        }
    }

    /// The delay before the next attempt, and the one after it.
    fn next_delay(&mut self) -> Duration {
        let d = self.delay;
        self.delay = (self.delay * 2).min(Self::MAX);
        d
    }

    /// After a failed attempt: sleeps before the next one, or fails with `error` (its message
    /// saying for how long it was tried) once the registration timeout passed.
    pub(crate) async fn wait(&mut self, error: impl FnOnce() -> Error) -> Result<()> {
        self.attempts += 1;
        if let (Some(deadline), Some(timeout)) = (self.deadline, self.timeout)
            && tokio::time::Instant::now() >= deadline
        {
            return Err(match error() {
                Error::JobManagerUnreachable { address, message } => Error::JobManagerUnreachable {
                    address,
                    message: format!(
                        "no registration within {} s ({} attempts): {message}",
                        timeout.as_secs(),
                        self.attempts
                    ),
                },
                other => other,
            });
        }
        let delay = self.next_delay();
        // The first failures are the usual start-up order; say so only once it lasts.
        if self.attempts >= 5 {
            tracing::warn!(attempts = self.attempts, "{}; trying again in {delay:?}", error());
        } else {
            tracing::debug!(attempts = self.attempts, "{}; trying again in {delay:?}", error());
        }
        tokio::time::sleep(delay).await;
        Ok(())
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
    fn holds_tasks(&self) -> bool {
        !lock(&self.inner.tasks).is_empty()
    }

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
    ///
    /// No answer at all for `timeout` drops every task, as Flink's TaskExecutor does when its
    /// JobManager's heartbeat times out: the JobManager has declared this TaskManager lost and
    /// runs its tasks' new attempts elsewhere, so these would run on beside them (across a
    /// partition, until it heals), writing what their successors write.
    pub(crate) fn spawn_heartbeats(
        &self,
        register: pb::RegisterTaskManagerRequest,
        interval: Duration,
        timeout: Duration,
    ) {
        let beat = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            let mut answered = tokio::time::Instant::now();
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
                let got_answer = answer.is_ok();
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
                if got_answer {
                    answered = tokio::time::Instant::now();
                } else if answered.elapsed() >= timeout && beat.holds_tasks() {
                    tracing::warn!(
                        "no answer from the JobManager for {} ms: it has declared this TaskManager lost; \
                         dropping its tasks",
                        timeout.as_millis()
                    );
                    beat.forget_all();
                }
            }
        });
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_ten_seconds() {
        let mut b = Backoff::new(None);
        let delays: Vec<u64> = (0..9).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_timeout_it_never_gives_up() {
        // An hour of failures (paused time): still retrying.
        let mut b = Backoff::new(None);
        let started = tokio::time::Instant::now();
        while started.elapsed() < Duration::from_secs(3600) {
            b.wait(|| Error::Refused("not yet".into()))
                .await
                .expect("keeps trying");
        }
        assert!(b.attempts > 300, "{}", b.attempts);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_ends_it_with_the_attempts_in_the_message() {
        let mut b = Backoff::new(Some(Duration::from_secs(5)));
        let error = loop {
            if let Err(e) = b
                .wait(|| Error::JobManagerUnreachable {
                    address: "jm:6123".into(),
                    message: "connection refused".into(),
                })
                .await
            {
                break e;
            }
        };
        let message = error.to_string();
        assert!(
            message.contains("cannot reach the JobManager at jm:6123: no registration within 5 s"),
            "{message}"
        );
        assert!(message.contains("connection refused"), "{message}");
    }
}
