//! The task table: every execution this TaskManager holds, from its deployment until the
//! JobManager has its final state. A final report that does not get through stays in the table and
//! rides on every heartbeat until the JobManager has applied it (Flink keeps a task in its slot
//! table until its final state is acknowledged), so a lost report never leaves a job waiting.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use floe_datastream::TaskMetrics;
use floe_datastream::checkpoint::Control;
use floe_proto::v1::{self as pb};
use floe_scheduler::ExecutionState;
use tokio::sync::mpsc;

use crate::thread::TaskThread;
use crate::{TaskManager, lock};

/// Task identity as the map key: job, vertex, subtask, attempt.
pub(crate) type AttemptKey = (String, u32, u32, u64);

pub(crate) fn key(id: &pb::ExecutionAttemptId) -> AttemptKey {
    (id.job_id.clone(), id.vertex, id.subtask, id.attempt)
}

fn attempt_id((job_id, vertex, subtask, attempt): &AttemptKey) -> pb::ExecutionAttemptId {
    pb::ExecutionAttemptId {
        job_id: job_id.clone(),
        vertex: *vertex,
        subtask: *subtask,
        attempt: *attempt,
    }
}

/// A subtask: job, vertex, subtask.
pub(crate) type SubtaskKey = (String, u32, u32);

/// What this TaskManager was told about a subtask's attempts. The JobManager sends a deployment
/// and a cancel as separate calls, so a cancel can arrive before the deployment it cancels; and a
/// newer attempt replaces an older one only once the older one stopped. Without this, a canceled
/// attempt whose deployment came late ran beside its successor (in a lifecycle campaign run, two
/// attempts of each exactly-once Kafka sink subtask: the late one removed the other's write-ahead
/// objects as orphans, and a checkpoint's records were lost).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SeenAttempts {
    deployed: Option<u64>,
    canceled: Option<u64>,
}

impl SeenAttempts {
    /// Whether attempt `attempt` may start: neither canceled nor older than one deployed here.
    /// Attempt numbers grow with every restart and JobManager epoch.
    pub(crate) fn admits(&self, attempt: u64) -> bool {
        self.canceled.is_none_or(|c| c < attempt) && self.deployed.is_none_or(|d| d < attempt)
    }
}

/// One execution held here.
#[derive(Debug)]
pub(crate) struct TaskEntry {
    /// The execution's own thread.
    pub abort: TaskThread,
    pub metrics: Arc<TaskMetrics>,
    /// Checkpointing tasks: barrier triggers and completions go here.
    pub control: Option<mpsc::UnboundedSender<Control>>,
    /// The last state reported (or being reported).
    pub state: ExecutionState,
    /// Set once the execution ended: its final report, until the JobManager has it.
    pub final_report: Option<pb::TaskExecutionStateUpdate>,
}

/// Backoff between attempts at a final report; heartbeats carry it meanwhile.
const REPORT_BACKOFF_MAX: Duration = Duration::from_secs(5);

impl TaskManager {
    /// This TaskManager's report of `id` reaching `state`.
    pub(crate) fn update(
        &self,
        id: &pb::ExecutionAttemptId,
        state: ExecutionState,
        error: String,
        produced: Vec<pb::PartitionStats>,
        metrics: Option<&TaskMetrics>,
    ) -> pb::TaskExecutionStateUpdate {
        pb::TaskExecutionStateUpdate {
            taskmanager_id: self.inner.id.clone(),
            id: Some(id.clone()),
            state: pb::ExecutionStateProto::from(state) as i32,
            error,
            produced,
            metrics: metrics.map(|m| task_metrics(id, m)),
            unavailable_partitions: Vec::new(),
            non_recoverable: false,
            input_failed: false,
        }
    }

    /// Reports a live state (INITIALIZING, RUNNING) from a task thread: the call runs on the
    /// process runtime, where the JobManager connection lives; the task waits for it.
    pub(crate) async fn report(&self, id: &pb::ExecutionAttemptId, state: ExecutionState) {
        let (this, id) = (self.clone(), id.clone());
        let _ = self
            .inner
            .control
            .spawn(async move { this.send_report(&id, state).await })
            .await;
    }

    /// Sends a live state. The table keeps it, so if every attempt to send it fails the next
    /// heartbeat tells the JobManager instead.
    async fn send_report(&self, id: &pb::ExecutionAttemptId, state: ExecutionState) {
        if let Some(entry) = lock(&self.inner.tasks).get_mut(&key(id)) {
            entry.state = state;
        }
        let update = self.update(id, state, String::new(), Vec::new(), None);
        for attempt in 0..3 {
            match self
                .inner
                .jobmanager
                .clone()
                .update_task_execution_state(update.clone())
                .await
            {
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(attempt, "reporting {state} failed: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }

    /// An execution ended: its final report goes into the table, then to the JobManager, retried
    /// until it gets through or a heartbeat carried it; only then does the entry go.
    pub(crate) fn finish(&self, report: pb::TaskExecutionStateUpdate) {
        drop(self.finish_heard(report));
    }

    /// [`Self::finish`]; the receiver hears when the JobManager answered the report (or, its
    /// sender dropped, that this report will not be sent).
    pub(crate) fn finish_heard(
        &self,
        report: pb::TaskExecutionStateUpdate,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (delivered, heard) = tokio::sync::oneshot::channel();
        let Some(id) = report.id.clone() else {
            return heard;
        };
        let k = key(&id);
        {
            let mut tasks = lock(&self.inner.tasks);
            // Gone: dropped with the work of a JobManager that no longer knows this TaskManager.
            let Some(entry) = tasks.get_mut(&k) else {
                return heard;
            };
            // The first final state stands: a shutdown recorded its own before aborting the task.
            if entry.final_report.is_some() {
                return heard;
            }
            entry.final_report = Some(report.clone());
        }
        let this = self.clone();
        // On the process runtime: the task thread that ended may be gone before this gets through.
        self.inner.control.spawn(async move {
            let mut backoff = Duration::from_millis(100);
            // Until the JobManager answers, even if a heartbeat carried the report meanwhile: that
            // heartbeat may have met this report being applied, and the apply may still fail. A
            // JobManager that does not know the attempt answers too (it ignores the report).
            loop {
                match this
                    .inner
                    .jobmanager
                    .clone()
                    .update_task_execution_state(report.clone())
                    .await
                {
                    Ok(_) => {
                        {
                            let mut tasks = lock(&this.inner.tasks);
                            if tasks.get(&k).is_some_and(|e| e.final_report.is_some()) {
                                tasks.remove(&k);
                            }
                        }
                        let _ = delivered.send(());
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(task = ?k, "final report failed, retrying (heartbeats carry it too): {e}");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(REPORT_BACKOFF_MAX);
                    }
                }
            }
        });
        heard
    }

    /// Admits the deployment of attempt `id` ([`SeenAttempts`]): refused when that attempt was
    /// canceled or a newer one of its subtask was deployed here; older attempts of its subtask
    /// still held here are canceled first (the JobManager replaced them).
    pub(crate) fn admit_attempt(&self, id: &pb::ExecutionAttemptId) -> Result<(), tonic::Status> {
        {
            let mut seen = lock(&self.inner.attempts);
            let entry = seen
                .entry((id.job_id.clone(), id.vertex, id.subtask))
                .or_default();
            if !entry.admits(id.attempt) {
                tracing::warn!(
                    job = %id.job_id,
                    vertex = id.vertex,
                    subtask = id.subtask,
                    attempt = id.attempt,
                    ?entry,
                    "refusing a deployment that arrived after its cancel or a newer attempt's"
                );
                return Err(tonic::Status::failed_precondition(format!(
                    "attempt {} of {}#{} of job {} was canceled or replaced before its deployment arrived",
                    id.attempt, id.vertex, id.subtask, id.job_id
                )));
            }
            entry.deployed = Some(id.attempt);
        }
        let older: Vec<pb::ExecutionAttemptId> = lock(&self.inner.tasks)
            .iter()
            .filter(|((job, vertex, subtask, attempt), e)| {
                *job == id.job_id
                    && *vertex == id.vertex
                    && *subtask == id.subtask
                    && *attempt < id.attempt
                    && e.final_report.is_none()
            })
            .map(|(k, _)| attempt_id(k))
            .collect();
        for old in older {
            tracing::warn!(
                attempt = old.attempt,
                newer = id.attempt,
                "canceling an attempt its successor replaces"
            );
            if let Some(canceled) = self.cancel(&old) {
                self.finish(canceled);
            }
        }
        Ok(())
    }

    /// Remembers that attempt `id` was canceled, so that its deployment, if it comes later, is
    /// refused.
    pub(crate) fn note_canceled(&self, id: &pb::ExecutionAttemptId) {
        let mut seen = lock(&self.inner.attempts);
        let entry = seen
            .entry((id.job_id.clone(), id.vertex, id.subtask))
            .or_default();
        entry.canceled = Some(entry.canceled.map_or(id.attempt, |c| c.max(id.attempt)));
    }

    /// Forgets the attempts of a job that ended.
    pub(crate) fn forget_attempts(&self, job_id: &str) {
        lock(&self.inner.attempts).retain(|(job, _, _), _| job != job_id);
    }

    /// Aborts a running execution for a cancel; its CANCELED report, or `None` when it is not
    /// held or already ended.
    pub(crate) fn cancel(&self, id: &pb::ExecutionAttemptId) -> Option<pb::TaskExecutionStateUpdate> {
        let metrics = {
            let tasks = lock(&self.inner.tasks);
            let entry = tasks.get(&key(id)).filter(|e| e.final_report.is_none())?;
            entry.abort.abort();
            entry.metrics.clone()
        };
        Some(self.update(
            id,
            ExecutionState::Canceled,
            String::new(),
            Vec::new(),
            Some(&metrics),
        ))
    }

    /// Fails every execution held (the process is stopping): each is aborted and reported
    /// FAILED with `why`, the reports sent together and awaited up to
    /// [`crate::SHUTDOWN_REPORT_TIMEOUT`].
    pub(crate) async fn shut_down(&self, why: &str) {
        // Every live task's final state is the shutdown, recorded before any task is aborted: a
        // task that fails because another one was aborted first (a consumer whose local producer
        // stopped) must not report that as the cause, racing the shutdown's report.
        let live: Vec<pb::TaskExecutionStateUpdate> = {
            let mut tasks = lock(&self.inner.tasks);
            let mut live = Vec::new();
            for (k, e) in tasks.iter_mut().filter(|(_, e)| e.final_report.is_none()) {
                let report = self.update(
                    &attempt_id(k),
                    ExecutionState::Failed,
                    why.to_string(),
                    Vec::new(),
                    Some(&e.metrics),
                );
                e.final_report = Some(report.clone());
                live.push((k.clone(), report));
            }
            for (k, _) in &live {
                if let Some(e) = tasks.get(k) {
                    e.abort.abort();
                }
            }
            live.into_iter().map(|(_, report)| report).collect()
        };
        tracing::warn!(tasks = live.len(), "{why}: failing every task");
        let mut reports = tokio::task::JoinSet::new();
        for report in live {
            let mut jobmanager = self.inner.jobmanager.clone();
            reports.spawn(async move { jobmanager.update_task_execution_state(report).await });
        }
        let all = async {
            let mut failed = 0;
            while let Some(r) = reports.join_next().await {
                failed += usize::from(!matches!(r, Ok(Ok(_))));
            }
            failed
        };
        match tokio::time::timeout(crate::SHUTDOWN_REPORT_TIMEOUT, all).await {
            Ok(0) => {}
            Ok(failed) => tracing::warn!(failed, "some failure reports did not get through"),
            Err(_) => tracing::warn!("the JobManager did not take the failure reports in time"),
        }
    }

    /// What a heartbeat carries: counters of live executions, every execution held (final ones
    /// with their whole report), and the keys of those final ones.
    pub(crate) fn heartbeat_payload(
        &self,
    ) -> (
        Vec<pb::TaskMetrics>,
        Vec<pb::TaskExecutionStateUpdate>,
        Vec<AttemptKey>,
    ) {
        let tasks = lock(&self.inner.tasks);
        let mut metrics = Vec::new();
        let mut executions = Vec::with_capacity(tasks.len());
        let mut finals = Vec::new();
        for (k, entry) in tasks.iter() {
            match &entry.final_report {
                Some(report) => {
                    executions.push(report.clone());
                    finals.push(k.clone());
                }
                None => {
                    let id = attempt_id(k);
                    metrics.push(task_metrics(&id, &entry.metrics));
                    executions.push(self.update(&id, entry.state, String::new(), Vec::new(), None));
                }
            }
        }
        (metrics, executions, finals)
    }

    /// The JobManager answered a heartbeat that carried these final reports: it has them.
    pub(crate) fn acknowledged(&self, reported: &[AttemptKey]) {
        let mut tasks = lock(&self.inner.tasks);
        for k in reported {
            if tasks.get(k).is_some_and(|e| e.final_report.is_some()) {
                tasks.remove(k);
            }
        }
    }
}

/// A task's counters as the heartbeat and the final report carry them.
fn task_metrics(id: &pb::ExecutionAttemptId, m: &TaskMetrics) -> pb::TaskMetrics {
    pb::TaskMetrics {
        id: Some(id.clone()),
        records_in: m.records_in.load(Ordering::Relaxed),
        records_out: m.records_out.load(Ordering::Relaxed),
        bytes_in: m.bytes_in.load(Ordering::Relaxed),
        bytes_out: m.bytes_out.load(Ordering::Relaxed),
        idle_ns: m.idle_ns.load(Ordering::Relaxed),
        backpressured_ns: m.backpressured_ns.load(Ordering::Relaxed),
        running_ns: m.running_ns(),
        pending_records: m.pending(),
        current_watermark: m.current_watermark(),
        late_records_dropped: m.late_records_dropped.load(Ordering::Relaxed),
        in_pool_usage: m.pools.get().and_then(|p| p.in_usage()),
        out_pool_usage: m.pools.get().and_then(|p| p.out_usage()),
    }
}
