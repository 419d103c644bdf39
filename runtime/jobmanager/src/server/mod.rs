//! The JobManager process: the `JobManager` gRPC service (TaskManagers and clients), the heartbeat
//! monitor, and the driver that carries out each job's [`Action`]s. State sits behind one mutex that
//! is never held across an await: events are applied synchronously, actions run afterwards.
//!
//! By concern: this file holds the state, submission, task reports, heartbeats and `serve`;
//! `log` the operation log (append before acting, stop when fenced), `driver` the actions and
//! TaskManager clients, `rpc` the gRPC service and its message conversions.

mod driver;
mod log;
mod rpc;
mod savepoints;

pub(crate) use rpc::{attempt_from_proto, attempt_to_proto};

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
pub use savepoints::SavepointRefused;

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
    /// What the log holds, as its last snapshot summarized it (`crate::oplog::compact`), then the
    /// events appended after it: the next snapshot is made of these.
    history: Vec<crate::oplog::Event>,
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
        self.state().jobs.get(job_id).map_or_else(Vec::new, |j| {
            // As submitted: a parallelism decided at run time is logged apart.
            let g = &j.master.graph;
            vertex_parallelism(g.job_graph())
                .into_iter()
                .enumerate()
                .map(|(i, (id, p))| {
                    let dynamic = g.is_dynamic(floe_scheduler::job_graph::VertexIndex(i as u32));
                    (id, if dynamic { 0 } else { p })
                })
                .collect()
        })
    }

    /// [`JobManager::submit`] under a given id: a job the operation log already knows keeps its id.
    pub fn submit_with_id(&self, args: JobArgs, id: String) -> Result<String> {
        self.submit_resumed(args, id, Vec::new(), &[], 0)
    }

    /// [`JobManager::submit_with_id`] of a job the operation log knows, with the checkpoints it
    /// records as completed: the job restores from the newest of those that reads back; and with
    /// the parallelism decisions it records, which it keeps. Its checkpoint ids start above
    /// `checkpoint_id_floor` (see [`crate::oplog::lineage_checkpoint_floor`]).
    pub fn submit_resumed(
        &self,
        args: JobArgs,
        id: String,
        vouched_checkpoints: Vec<u64>,
        decisions: &[crate::job::VertexDecision],
        checkpoint_id_floor: u64,
    ) -> Result<String> {
        let built = self.inner.registry.build(&args).map_err(|e| Error::JobBuild {
            job: args.name.clone(),
            message: e.to_string(),
        })?;
        let fingerprint = built.fingerprint();
        let job_graph = built.job_graph().clone();
        let first_attempt = floe_scheduler::execution_graph::first_attempt_of_epoch(self.leader_epoch());
        let mut master = JobMaster::new(id.clone(), args, job_graph, fingerprint, first_attempt)?;
        master.state_owners = built.state_owners();
        let without_uid = built.stateful_operators_without_uid();
        if !without_uid.is_empty() {
            tracing::warn!(
                job = %id,
                "operators keeping state without a uid: {}; their state is named by their place in the \
                 graph, so adding an operator before them leaves it unclaimed at a restore from a \
                 savepoint (set uid() on each)",
                without_uid.join(", ")
            );
        }
        master.vouched_checkpoints = vouched_checkpoints;
        if let Some(c) = master.checkpoints.as_mut() {
            c.id_floor = checkpoint_id_floor;
        }
        master.apply_decisions(decisions);
        let sources = master.undecided_sources();
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
        if !sources.is_empty() {
            self.measure_sources(&id, Arc::new(built), sources);
        }
        self.try_start_jobs();
        self.fail_unstarted_after_timeout(&id);
        self.start_after_stabilization(&id);
        Ok(id)
    }

    /// Reads the input sizes of sources whose parallelism is decided at run time; the job starts
    /// once they are known. A size that cannot be read is left unknown: the source task reports why.
    fn measure_sources(&self, id: &str, built: Arc<floe_datastream::BuiltJob>, sources: Vec<u32>) {
        let this = self.clone();
        let id = id.to_string();
        let job = id.clone();
        let measure = async move {
            let mut bytes = BTreeMap::new();
            for v in sources {
                let size = match built.source_input_bytes(v).await {
                    Ok(size) => size,
                    Err(e) => {
                        tracing::warn!(job = %id, vertex = v, "cannot read the source's input size: {e}");
                        None
                    }
                };
                bytes.insert(v, size);
            }
            if let Some(job) = this.state().jobs.get_mut(&id) {
                job.master.set_source_bytes(bytes);
            }
            this.try_start_jobs();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(measure);
            }
            Err(_) => tracing::error!(job = %job, "no runtime to measure the sources on"),
        }
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
        if state == ExecutionState::Finished {
            self.propose_decisions(&id.job_id);
        }
    }

    /// Adaptive batch: decides what the job's finished executions allow, with the free slots.
    pub(crate) fn propose_decisions(&self, job_id: &str) {
        let action = {
            let mut state = self.state();
            let free = Self::free_slots(&state);
            state
                .jobs
                .get_mut(job_id)
                .and_then(|job| job.master.propose_decisions(&free))
        };
        self.perform(action.into_iter().collect());
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
        let counters = r.metrics.as_ref().map(TaskCounters::from);
        let error = (!r.error.is_empty()).then_some(r.error);
        if state == ExecutionState::Failed
            && r.non_recoverable
            && let Some(job) = self.state().jobs.get_mut(&id.job_id)
        {
            job.master.next_failure_is_not_recoverable(&id);
        }
        if state == ExecutionState::Failed
            && r.input_failed
            && let Some(job) = self.state().jobs.get_mut(&id.job_id)
        {
            job.master.next_failure_followed_its_input(&id);
        }
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

    /// New resource requirements for a job (PUT /jobs/{id}/resource-requirements): it rescales
    /// when they change its parallelism.
    pub fn set_resource_requirements(
        &self,
        job_id: &str,
        bounds: &BTreeMap<String, crate::job::ParallelismBounds>,
    ) -> Result<()> {
        let actions = {
            let mut state = self.state();
            let free = Self::free_slots(&state);
            let job = state
                .jobs
                .get_mut(job_id)
                .ok_or_else(|| Error::UnknownJob(job_id.to_string()))?;
            job.master.set_resource_requirements(bounds, &free, now_ms())?
        };
        self.perform(actions);
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
        let rpc = floe_proto::net::bind(self.inner.config.rpc_address)
            .await
            .map_err(|cause| Error::Bind {
                address: self.inner.config.rpc_address.to_string(),
                cause,
            })?;
        let rest = floe_proto::net::bind(self.inner.config.rest_address)
            .await
            .map_err(|cause| Error::Bind {
                address: self.inner.config.rest_address.to_string(),
                cause,
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
                monitor.scale_adaptive_jobs();
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
        let grpc = floe_proto::tls::server_builder()
            .map_err(|e| Error::Serve(format!("internal TLS: {e}")))?
            .add_service(JobManagerServer::new(self.clone()).max_decoding_message_size(64 << 20))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(rpc));
        tokio::select! {
            r = grpc => r.map_err(|e| Error::Serve(e.to_string()))?,
            r = rest_server => r.map_err(|e| Error::Serve(e.to_string()))?.map_err(|e| Error::Serve(e.to_string()))?,
        }
        Ok(())
    }
}
