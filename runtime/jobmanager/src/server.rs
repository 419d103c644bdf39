//! The JobManager process: the `JobManager` gRPC service (TaskManagers and clients), the heartbeat
//! monitor, and the driver that carries out each job's [`Action`]s. State sits behind one mutex that
//! is never held across an await: events are applied synchronously, actions run afterwards.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floe_datastream::{JobArgs, JobRegistry};
use floe_proto::fencing::LeaderEpoch;
use floe_proto::v1::job_manager_server::{JobManager as JobManagerRpc, JobManagerServer};
use floe_proto::v1::task_executor_client::TaskExecutorClient;
use floe_proto::v1::{self as pb};
use floe_scheduler::{ExecutionState, JobStatus};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// A TaskManager's TaskExecutor client; every call carries this JobManager's leader epoch.
pub(crate) type TaskExecutorRpc = TaskExecutorClient<InterceptedService<Channel, LeaderEpoch>>;

use crate::error::{Error, Result};
use crate::job::{Action, AttemptId, Deployment, JobMaster, SlotRef, TaskCounters};

/// How the JobManager listens and judges TaskManagers.
#[derive(Debug, Clone)]
pub struct JobManagerConfig {
    pub rpc_address: SocketAddr,
    pub rest_address: SocketAddr,
    /// How often TaskManagers send heartbeats (`heartbeat.interval`, Flink's default 10 s; Floe 1 s).
    pub heartbeat_interval: Duration,
    /// A TaskManager silent this long is lost (`heartbeat.timeout`; Flink 50 s, Floe 10 s).
    pub heartbeat_timeout: Duration,
    /// How long a job waits for enough slots (`slot.request.timeout`; Flink 300 s, Floe 60 s).
    pub slot_request_timeout: Duration,
    /// After a restart, how long a resumed job waits for TaskManagers to report the finished
    /// partitions they still hold before it runs their producers again.
    pub partition_reconnect_timeout: Duration,
}

impl Default for JobManagerConfig {
    fn default() -> Self {
        JobManagerConfig {
            rpc_address: SocketAddr::from(([127, 0, 0, 1], 6123)),
            rest_address: SocketAddr::from(([127, 0, 0, 1], 8081)),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(10),
            slot_request_timeout: Duration::from_secs(60),
            partition_reconnect_timeout: Duration::from_secs(5),
        }
    }
}

/// A registered TaskManager.
#[derive(Debug, Clone)]
pub struct TaskManagerInfo {
    pub id: String,
    /// The process behind the id (a restarted container registers a new one).
    pub instance_id: String,
    pub address: String,
    pub slots: u32,
    pub last_heartbeat: Instant,
    pub buffered_bytes: u64,
    pub buffered_bytes_peak: u64,
    pub rss_bytes: u64,
    pub rss_peak_bytes: u64,
    /// Finished partitions it reported holding when it registered.
    pub held: Vec<(floe_shuffle::ResultPartitionId, floe_shuffle::PartitionStats)>,
    /// Executions not yet ended that its last heartbeat said it runs.
    pub running_executions: usize,
}

/// A job and its times.
#[derive(Debug)]
pub struct JobEntry {
    pub master: JobMaster,
    pub submitted: Instant,
    pub start_time_ms: u64,
    pub end_time_ms: Option<u64>,
}

/// A job that ended under an earlier JobManager, known from the operation log: listed and described,
/// never run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedJob {
    pub name: String,
    /// Flink's job status name (FINISHED, FAILED, CANCELED).
    pub status: String,
    pub failure: Option<String>,
    pub start_time_ms: u64,
    pub end_time_ms: u64,
}

/// Everything the JobManager knows.
#[derive(Debug, Default)]
pub struct State {
    pub taskmanagers: BTreeMap<String, TaskManagerInfo>,
    pub jobs: BTreeMap<String, JobEntry>,
    pub ended: BTreeMap<String, EndedJob>,
}

/// A job's status as the operation log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatusSnapshot {
    pub job_id: String,
    pub status: JobStatus,
    pub failure: Option<String>,
}

/// The operation log and the last status of each job written to it.
#[derive(Debug)]
struct LogState {
    log: floe_oplog::OperationLog,
    logged_status: BTreeMap<String, String>,
}

/// Shared handle to the JobManager's state and clients.
#[derive(Debug, Clone)]
pub struct JobManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    registry: JobRegistry,
    config: JobManagerConfig,
    id: String,
    clients: Mutex<BTreeMap<String, TaskExecutorRpc>>,
    /// This JobManager's leader epoch (0 without an operation log): the fencing token of every
    /// call to a TaskManager, and the base of its attempt numbers.
    leader_epoch: LeaderEpoch,
    /// The operation log this JobManager leads, if it has job storage. An async mutex: appends are
    /// awaited before the JobManager acts on what they record.
    oplog: tokio::sync::Mutex<Option<LogState>>,
    /// Why this JobManager must stop (it was fenced), once a log write said so.
    fatal: Mutex<Option<String>>,
    /// Wakes [`JobManager::fenced`] when `fatal` is set.
    fatal_set: tokio::sync::Notify,
}

/// This process's peak resident memory (VmHWM), in bytes.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Each vertex's id and parallelism, in vertex order (what the operation log records).
fn vertex_parallelism(graph: &floe_scheduler::JobGraph) -> Vec<(String, u32)> {
    graph
        .vertices()
        .iter()
        .map(|v| (v.id.clone(), v.parallelism))
        .collect()
}

/// A 32-hex-digit id like Flink's JobID, unique per process and time.
fn new_id(salt: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(salt);
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    let a = h.finish();
    h.write_u64(a);
    format!("{:016x}{:016x}", a, h.finish())
}

impl JobManager {
    pub fn new(config: JobManagerConfig, registry: JobRegistry) -> Self {
        JobManager {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                registry,
                config,
                id: new_id(std::process::id() as u64),
                clients: Mutex::new(BTreeMap::new()),
                leader_epoch: LeaderEpoch::default(),
                oplog: tokio::sync::Mutex::new(None),
                fatal: Mutex::new(None),
                fatal_set: tokio::sync::Notify::new(),
            }),
        }
    }

    pub fn config(&self) -> &JobManagerConfig {
        &self.inner.config
    }

    /// Locks the state. Poisoning means a panic elsewhere already broke an invariant: keep serving
    /// what is there rather than cascade.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Free slots, TaskManager by TaskManager (registration order is id order).
    fn free_slots(state: &State) -> Vec<SlotRef> {
        let held: Vec<&SlotRef> = state.jobs.values().flat_map(|j| j.master.held_slots()).collect();
        state
            .taskmanagers
            .values()
            .flat_map(|tm| {
                (0..tm.slots).map(move |slot| SlotRef {
                    taskmanager: tm.id.clone(),
                    address: tm.address.clone(),
                    slot,
                })
            })
            .filter(|s| !held.contains(&s))
            .collect()
    }

    /// Builds the job's graph from the registry and queues it; it starts when enough slots exist.
    pub fn submit(&self, args: JobArgs) -> Result<String> {
        self.submit_with_id(args, Self::new_job_id())
    }

    /// A fresh job id (32 hex digits, as Flink's JobID).
    pub fn new_job_id() -> String {
        new_id(now_ms())
    }

    /// Builds a job's graph without submitting it: whether the registry knows the job and its
    /// arguments are valid. Returns each vertex's id and parallelism.
    pub fn check(&self, args: &JobArgs) -> Result<Vec<(String, u32)>> {
        self.inner
            .registry
            .build(args)
            .map(|built| vertex_parallelism(built.job_graph()))
            .map_err(|e| Error::JobBuild {
                job: args.name.clone(),
                message: e.to_string(),
            })
    }

    /// Each vertex's id and parallelism in a submitted job's graph.
    pub fn vertex_parallelism(&self, job_id: &str) -> Vec<(String, u32)> {
        self.state()
            .jobs
            .get(job_id)
            .map_or_else(Vec::new, |j| vertex_parallelism(j.master.graph.job_graph()))
    }

    /// [`JobManager::submit`] under a given id: a job the operation log already knows keeps its id.
    pub fn submit_with_id(&self, args: JobArgs, id: String) -> Result<String> {
        self.submit_resumed(args, id, Vec::new())
    }

    /// [`JobManager::submit_with_id`] of a job the operation log knows, with the checkpoints it
    /// records as completed: the job restores from the newest of those that reads back.
    pub fn submit_resumed(&self, args: JobArgs, id: String, vouched_checkpoints: Vec<u64>) -> Result<String> {
        let built = self.inner.registry.build(&args).map_err(|e| Error::JobBuild {
            job: args.name.clone(),
            message: e.to_string(),
        })?;
        let fingerprint = built.fingerprint();
        let job_graph = built.job_graph().clone();
        let first_attempt = floe_scheduler::execution_graph::first_attempt_of_epoch(self.leader_epoch());
        let mut master = JobMaster::new(id.clone(), args, job_graph, fingerprint, first_attempt)?;
        master.vouched_checkpoints = vouched_checkpoints;
        tracing::info!(job = %id, name = %master.args.name, tasks = master.graph.task_count(), "job submitted");
        self.state().jobs.insert(
            id.clone(),
            JobEntry {
                master,
                submitted: Instant::now(),
                start_time_ms: now_ms(),
                end_time_ms: None,
            },
        );
        self.resume_checkpoints(&id);
        self.try_start_jobs();
        Ok(id)
    }

    /// From now on, events are appended to `log` before they are acted on.
    pub async fn attach_log(&self, log: floe_oplog::OperationLog, logged_status: BTreeMap<String, String>) {
        *self.inner.oplog.lock().await = Some(LogState { log, logged_status });
    }

    /// Logs every job status change not logged yet (a no-op without a log).
    pub async fn log_status_changes(&self) -> Result<()> {
        let mut guard = self.inner.oplog.lock().await;
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        let events = crate::oplog::status_events(self, &state.logged_status);
        if events.is_empty() {
            return Ok(());
        }
        self.append(&mut state.log, &events).await?;
        for e in events {
            if let crate::oplog::Event::JobStatusChanged { job_id, status, .. } = e {
                state.logged_status.insert(job_id, status);
            }
        }
        Ok(())
    }

    async fn append(&self, log: &mut floe_oplog::OperationLog, events: &[crate::oplog::Event]) -> Result<()> {
        if let Some(why) = self.fatal() {
            return Err(Error::Stopped(why));
        }
        match log.append(events).await {
            Ok(()) => Ok(()),
            Err(e) => {
                if !e.is_retryable() {
                    self.stop(e.to_string());
                }
                Err(e.into())
            }
        }
    }

    /// This JobManager must not act any more (a log write was refused: a newer JobManager leads).
    /// From now on it performs no action and writes nothing; [`JobManager::fenced`] returns.
    fn stop(&self, why: String) {
        tracing::error!("stopping: {why}");
        self.inner
            .fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        self.inner.fatal_set.notify_waiters();
    }

    /// Returns (with the reason) once this JobManager must stop: the process should exit.
    pub async fn fenced(&self) -> String {
        loop {
            // Registered before the check, so a `stop` in between is not missed.
            let notified = self.inner.fatal_set.notified();
            if let Some(why) = self.fatal() {
                return why;
            }
            notified.await;
        }
    }

    /// The leader epoch this JobManager holds (0 without an operation log).
    pub fn leader_epoch(&self) -> u64 {
        self.inner
            .leader_epoch
            .0
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Takes leader epoch `epoch` of the operation log: before any job is submitted (attempt
    /// numbers start from it) or any TaskManager is called (it is their fencing token).
    pub fn set_leader_epoch(&self, epoch: u64) {
        self.inner
            .leader_epoch
            .0
            .store(epoch, std::sync::atomic::Ordering::Release);
    }

    /// Appends events to the operation log (a no-op without one). A refused write (fenced) is
    /// remembered: [`JobManager::fatal`] then says why this JobManager must stop.
    pub async fn log(&self, events: &[crate::oplog::Event]) -> Result<()> {
        let mut guard = self.inner.oplog.lock().await;
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        self.append(&mut state.log, events).await
    }

    /// Why this JobManager must stop, if a log write was refused.
    pub fn fatal(&self) -> Option<String> {
        self.inner.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Hands executions that finished under an earlier JobManager to a job not started yet. With
    /// local blocking partitions the job waits (up to the partition reconnect timeout) for
    /// TaskManagers to register with the partitions they still hold.
    pub fn restore_finished(&self, job_id: &str, finished: &[crate::job::FinishedExecution]) -> usize {
        let wait = self.inner.config.partition_reconnect_timeout;
        let restored = {
            let mut state = self.state();
            let State {
                jobs, taskmanagers, ..
            } = &mut *state;
            match jobs.get_mut(job_id) {
                Some(job) => {
                    let n = job
                        .master
                        .restore_finished(finished, now_ms() + wait.as_millis() as u64);
                    // TaskManagers that registered before: what they said they hold.
                    for tm in taskmanagers.values() {
                        job.master.partitions_held(&tm.id, &tm.address, &tm.held);
                    }
                    n
                }
                None => 0,
            }
        };
        if !wait.is_zero() {
            // The job may start once the window closes even if no TaskManager reports anything.
            let this = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                this.try_start_jobs();
            });
        }
        restored
    }

    /// Records a job that ended under an earlier JobManager (from the operation log).
    pub fn restore_ended(&self, id: String, job: EndedJob) {
        tracing::info!(job = %id, status = %job.status, "restored an ended job from the operation log; not running it again");
        self.state().ended.insert(id, job);
    }

    /// Every running or ended job's status, for the operation log.
    pub fn job_statuses(&self) -> Vec<JobStatusSnapshot> {
        self.state()
            .jobs
            .iter()
            .map(|(id, j)| JobStatusSnapshot {
                job_id: id.clone(),
                status: j.master.status,
                failure: j.master.failure.clone(),
            })
            .collect()
    }

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
                let timeout = self.inner.config.slot_request_timeout;
                let Some(job) = state.jobs.get_mut(&id) else {
                    continue;
                };
                match job.master.start(&free) {
                    Ok(a) => actions.extend(a),
                    Err(Error::Scheduling(floe_scheduler::Error::NotEnoughSlots { needed, available })) => {
                        if job.submitted.elapsed() > timeout {
                            let m = &mut job.master;
                            m.failure = Some(format!(
                                "could not get {needed} slots within {} s: the cluster offers {available} free",
                                timeout.as_secs()
                            ));
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

    /// Carries out actions; failures to deploy become task failures. A stopped (fenced) JobManager
    /// carries out nothing.
    fn perform(&self, actions: Vec<Action>) {
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

    fn restart(&self, job_id: &str, vertices: &[floe_scheduler::ExecutionVertexId]) {
        let actions = {
            let mut state = self.state();
            let free = Self::free_slots(&state);
            match state.jobs.get_mut(job_id) {
                Some(job) => job.master.restart(vertices, &free),
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
        let endpoint = Channel::from_shared(format!("http://{address}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(5));
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

    /// Applies a task state report.
    pub fn task_state(
        &self,
        id: &AttemptId,
        state: ExecutionState,
        error: Option<String>,
        produced: Vec<floe_shuffle::PartitionStats>,
        counters: Option<TaskCounters>,
    ) {
        let actions = match self.state().jobs.get_mut(&id.job_id) {
            Some(job) => job.master.on_task_state(id, state, error, produced, counters),
            None => Vec::new(),
        };
        self.perform(actions);
    }

    /// A TaskManager's report of an execution's state (an RPC of its own, or a final state carried
    /// by a heartbeat after the report did not get through).
    async fn apply_report(&self, r: pb::TaskExecutionStateUpdate) -> Result<(), Status> {
        let id = attempt_from_proto(r.id)?;
        if !r.taskmanager_id.is_empty() {
            let state = self.state();
            let deployed_there = state
                .jobs
                .get(&id.job_id)
                .and_then(|j| j.master.deployed_on(&id))
                .is_some_and(|tm| tm == r.taskmanager_id);
            if !deployed_there {
                // An attempt this JobManager did not deploy there: a previous JobManager's task,
                // reported before its TaskManager noticed the change. Its numbers may collide with
                // an attempt of this JobManager's, so it must not count.
                tracing::debug!(attempt = ?id, taskmanager = %r.taskmanager_id, "ignoring a report about an attempt not deployed there");
                return Ok(());
            }
        }
        let state = floe_proto::convert::execution_state(r.state)
            .ok_or_else(|| Status::invalid_argument(format!("state: unknown execution state {}", r.state)))?;
        // A final state arrives once by the report and maybe again on a heartbeat: the first one
        // counts (and is logged), later ones are dropped here.
        if state.is_terminal() {
            let first = self
                .state()
                .jobs
                .get_mut(&id.job_id)
                .is_some_and(|j| j.master.claim_final_report(&id));
            if !first {
                return Ok(());
            }
        }
        let produced: Vec<floe_shuffle::PartitionStats> = r
            .produced
            .into_iter()
            .map(|p| floe_shuffle::PartitionStats {
                bytes_per_subpartition: p.bytes_per_subpartition,
            })
            .collect();
        let counters = r.metrics.map(|m| TaskCounters {
            records_in: m.records_in,
            records_out: m.records_out,
        });
        let error = (!r.error.is_empty()).then_some(r.error);
        if state == ExecutionState::Failed && !r.unavailable_partitions.is_empty() {
            let lost: Vec<floe_shuffle::ResultPartitionId> =
                r.unavailable_partitions.into_iter().map(Into::into).collect();
            if let Some(job) = self.state().jobs.get_mut(&id.job_id) {
                job.master.partitions_unavailable(&lost);
            }
        }
        // A finished execution with blocking results is logged before it counts: a JobManager that
        // takes over will not run it again (remote results are in object storage; local ones are
        // reported by the TaskManager that holds them).
        let logged = state == ExecutionState::Finished
            && self
                .state()
                .jobs
                .get(&id.job_id)
                .is_some_and(|j| j.master.remote_shuffle || j.master.produces_blocking(id.vertex));
        if logged {
            let event = crate::oplog::Event::ExecutionFinished {
                job_id: id.job_id.clone(),
                vertex: id.vertex.vertex.0,
                subtask: id.vertex.subtask,
                attempt: id.attempt,
                produced: produced
                    .iter()
                    .map(|p: &floe_shuffle::PartitionStats| p.bytes_per_subpartition.clone())
                    .collect(),
                time_ms: now_ms(),
            };
            if let Err(e) = self.log(&[event]).await {
                // Not counted: the TaskManager's next report or heartbeat tries again.
                if let Some(job) = self.state().jobs.get_mut(&id.job_id) {
                    job.master.release_final_report(&id);
                }
                return Err(Status::unavailable(format!("cannot log the finish: {e}")));
            }
        }
        self.task_state(&id, state, error, produced, counters);
        Ok(())
    }

    /// Cancels a job (PATCH /jobs/{id}).
    pub fn cancel(&self, job_id: &str) -> Result<()> {
        let actions = {
            let mut state = self.state();
            let job = state
                .jobs
                .get_mut(job_id)
                .ok_or_else(|| Error::UnknownJob(job_id.to_string()))?;
            job.master.cancel()?
        };
        self.perform(actions);
        Ok(())
    }

    /// Declares TaskManagers whose heartbeat is older than the timeout lost.
    pub fn check_heartbeats(&self) {
        let timeout = self.inner.config.heartbeat_timeout;
        let lost: Vec<String> = self
            .state()
            .taskmanagers
            .values()
            .filter(|tm| tm.last_heartbeat.elapsed() > timeout)
            .map(|tm| tm.id.clone())
            .collect();
        for tm in lost {
            self.declare_lost(&tm, &format!("no heartbeat for {} ms", timeout.as_millis()));
        }
    }

    /// A TaskManager is gone (silent past the heartbeat timeout, or refusing connections): its slots
    /// leave the pool and every job reacts once, whatever number of its tasks ran there.
    fn declare_lost(&self, tm: &str, why: &str) {
        let mut actions = Vec::new();
        {
            let mut state = self.state();
            let Some(info) = state.taskmanagers.remove(tm) else {
                return;
            };
            tracing::warn!(taskmanager = %tm, "TaskManager lost: {why}");
            self.inner
                .clients
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&info.address);
            let free = Self::free_slots(&state);
            for job in state.jobs.values_mut() {
                if !job.master.status.is_terminal() {
                    actions.extend(job.master.on_taskmanager_lost(tm, &free));
                }
            }
        }
        self.perform(actions);
        self.try_start_jobs();
    }

    /// Serves gRPC and REST until the process is told to stop.
    pub async fn serve(self) -> Result<()> {
        let rpc = tokio::net::TcpListener::bind(self.inner.config.rpc_address)
            .await
            .map_err(|source| Error::Bind {
                address: self.inner.config.rpc_address.to_string(),
                source,
            })?;
        let rest = tokio::net::TcpListener::bind(self.inner.config.rest_address)
            .await
            .map_err(|source| Error::Bind {
                address: self.inner.config.rest_address.to_string(),
                source,
            })?;
        let rpc_addr = rpc.local_addr().map_err(|e| Error::Serve(e.to_string()))?;
        let rest_addr = rest.local_addr().map_err(|e| Error::Serve(e.to_string()))?;
        // One line on stdout that `floe run` (and people) read to find the ports.
        println!("floe jobmanager listening rpc={rpc_addr} rest={rest_addr}");
        tracing::info!(%rpc_addr, %rest_addr, "JobManager started");
        let monitor = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                monitor.check_heartbeats();
            }
        });
        let checkpoints = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                checkpoints.trigger_checkpoints();
            }
        });
        let app = crate::rest::router(self.clone());
        let rest_server = tokio::spawn(async move { axum::serve(rest, app).await });
        let grpc = tonic::transport::Server::builder()
            .add_service(JobManagerServer::new(self.clone()).max_decoding_message_size(64 << 20))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(rpc));
        tokio::select! {
            r = grpc => r.map_err(|e| Error::Serve(e.to_string()))?,
            r = rest_server => r.map_err(|e| Error::Serve(e.to_string()))?.map_err(|e| Error::Serve(e.to_string()))?,
        }
        Ok(())
    }
}

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

fn to_proto(d: &Deployment) -> pb::TaskDeployment {
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
    }
}

fn partition_to_proto(p: &floe_shuffle::ResultPartitionId) -> pb::ResultPartitionId {
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
                let Ok(id) = attempt_from_proto(m.id) else {
                    continue;
                };
                if let Some(job) = state.jobs.get_mut(&id.job_id) {
                    job.master.update_counters(
                        &id,
                        TaskCounters {
                            records_in: m.records_in,
                            records_out: m.records_out,
                        },
                    );
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
