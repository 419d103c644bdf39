//! Floe's TaskManager: offers slots to a JobManager, runs the operator chains it is given (built from
//! the job registry, the same way the JobManager built them, checked by graph fingerprint), moves data
//! through the [`floe_shuffle::ShuffleEnvironment`], and reports every state change.
//!
//! Read [`TaskManager`] first; [`run`] is the whole process. By concern: `deployment` (a task from
//! its deployment), `tasks` (the task table and state reports), `checkpoints` (snapshot upload),
//! `executor` (the service the JobManager calls), `registration` (registration and heartbeats).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floe_datastream::{BuiltJob, JobRegistry};
use floe_proto::v1::job_manager_client::JobManagerClient;
use floe_proto::v1::task_executor_server::TaskExecutorServer;
use floe_proto::v1::{self as pb};
use floe_shuffle::{ShuffleConfig, ShuffleEnvironment};
use tonic::transport::Channel;

/// What can stop a TaskManager.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cause is in the message, not chained, so any way of printing it says why.
    #[error("cannot bind {address}: {cause}")]
    Bind { address: String, cause: std::io::Error },
    #[error("cannot reach the JobManager at {address}: {message}")]
    JobManagerUnreachable { address: String, message: String },
    #[error("the JobManager refused registration: {0}")]
    Refused(String),
    #[error("shuffle: {0}")]
    Shuffle(#[from] floe_shuffle::Error),
    #[error("server failed: {0}")]
    Serve(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

mod checkpoints;
mod deployment;
mod executor;
pub mod history;
pub mod memory;
mod metrics;
mod registration;
mod tasks;
mod thread;

/// How a TaskManager runs.
#[derive(Debug, Clone)]
pub struct TaskManagerConfig {
    /// host:port of the JobManager's RPC endpoint.
    pub jobmanager: String,
    /// Where to serve TaskExecutor and Shuffle (port 0 picks one).
    pub bind: SocketAddr,
    /// Host peers reach this TaskManager at (a pod IP); `None`: the bound address.
    pub advertise_host: Option<String>,
    pub slots: u32,
    pub id: String,
    /// Local directory for blocking partitions.
    pub data_dir: PathBuf,
    /// How long to keep trying to reach and register with the JobManager at start; `None`:
    /// forever (with backoff), as in a pod.
    pub registration_timeout: Option<Duration>,
    /// The jobs this TaskManager can run: the same registry (the same build) as the JobManager's,
    /// which the graph fingerprint of each deployment checks.
    pub registry: JobRegistry,
    /// Where its own `/metrics` is served (`None`: not served).
    pub metrics_address: Option<SocketAddr>,
    /// Bytes its RocksDB instances share ([`memory::managed_memory`]); `None`: no bound.
    pub managed_memory: Option<u64>,
}

/// The TaskManager's shared state.
#[derive(Debug, Clone)]
pub struct TaskManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    /// Unique to this process: a restart under the same id is told apart at registration.
    instance_id: String,
    /// The newest JobManager leader epoch seen; calls from older ones are refused.
    fence: floe_proto::fencing::EpochFence,
    /// Fencing facts for the fault campaign (off unless `FLOE_TESTING_HISTORY` is set).
    history: history::History,
    jobmanager: JobManagerClient<Channel>,
    /// The process runtime: RPCs, heartbeats, state reports, shuffle streams. Tasks run on their
    /// own threads ([`thread::TaskThread`]) and hand their reports over to it.
    control: tokio::runtime::Handle,
    shuffle: ShuffleEnvironment,
    registry: JobRegistry,
    jobs: Mutex<HashMap<String, Arc<BuiltJob>>>,
    tasks: Mutex<HashMap<tasks::AttemptKey, tasks::TaskEntry>>,
    /// Per subtask, the newest attempt deployed here and the newest canceled
    /// ([`tasks::SeenAttempts`]): a deployment that arrives after its cancel, or after a newer
    /// attempt's, is refused.
    attempts: Mutex<HashMap<tasks::SubtaskKey, tasks::SeenAttempts>>,
    /// Local scratch space: blocking partitions, RocksDB instances.
    data_dir: PathBuf,
    /// Slots it offers (its `/metrics`).
    slots: u32,
    /// The managed memory its RocksDB instances share, if bounded.
    state_memory: Option<memory::StateMemory>,
}

impl TaskManager {
    /// Passes a JobManager of `epoch` through the fence (a call, or an answer to registration or
    /// a heartbeat), then runs `act`, what the call does that the campaign's history records,
    /// while no other JobManager passes: the history orders admissions and acts as they happened.
    pub(crate) fn admit_then<R>(
        &self,
        epoch: u64,
        act: impl FnOnce(&mut history::HistoryGuard<'_>) -> R,
    ) -> std::result::Result<R, tonic::Status> {
        let mut history = self.inner.history.lock();
        match self.inner.fence.admit_newer(epoch) {
            Ok(newer) => {
                if newer {
                    history.record("epoch", serde_json::json!({"epoch": epoch}));
                }
                Ok(act(&mut history))
            }
            Err(refused) => {
                let newest = self.inner.fence.highest();
                history.record("refused", serde_json::json!({"epoch": epoch, "newest": newest}));
                Err(refused)
            }
        }
    }

    pub(crate) fn admit(&self, epoch: u64) -> std::result::Result<(), tonic::Status> {
        self.admit_then(epoch, |_| ())
    }

    /// [`TaskManager::admit`] of a call's epoch; the epoch.
    pub(crate) fn admit_call<T>(
        &self,
        request: &tonic::Request<T>,
    ) -> std::result::Result<u64, tonic::Status> {
        let epoch = floe_proto::fencing::epoch_of(request)?;
        self.admit(epoch)?;
        Ok(epoch)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Resident memory of this process now and at its peak, in bytes (Linux /proc).
pub fn rss_bytes() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Runs a TaskManager until its server stops: serve, register, heartbeat.
pub async fn run(config: TaskManagerConfig) -> Result<()> {
    run_until(config, std::future::pending()).await
}

/// [`run`] until `stop` (the process got SIGTERM): then every task held fails at once, reported to
/// the JobManager within [`SHUTDOWN_REPORT_TIMEOUT`], so the job fails over now instead of after a
/// heartbeat timeout, and the process ends.
pub async fn run_until(config: TaskManagerConfig, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    let id = config.id.clone();
    let mut stop = std::pin::pin!(stop);
    let (tm, server) = tokio::select! {
        started = start(config) => started?,
        () = &mut stop => {
            tracing::info!(%id, "stopping before registration");
            return Ok(());
        }
    };
    tokio::select! {
        served = server => served
            .map_err(|e| Error::Serve(e.to_string()))?
            .map_err(|e| Error::Serve(e.to_string())),
        () = stop => {
            tm.shut_down("the TaskManager is shutting down (SIGTERM)").await;
            Ok(())
        }
    }
}

/// How long a shutting-down TaskManager tries to tell the JobManager its tasks failed.
pub const SHUTDOWN_REPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

type Served = tokio::task::JoinHandle<std::result::Result<(), tonic::transport::Error>>;

/// Binds, registers (retrying as [`TaskManagerConfig::registration_timeout`] says) and starts
/// heartbeats; the TaskManager and its running server.
async fn start(config: TaskManagerConfig) -> Result<(TaskManager, Served)> {
    let listener = floe_proto::net::bind(config.bind)
        .await
        .map_err(|cause| Error::Bind {
            address: config.bind.to_string(),
            cause,
        })?;
    let local = listener.local_addr().map_err(|e| Error::Serve(e.to_string()))?;
    let address = match &config.advertise_host {
        Some(host) => floe_proto::net::host_port(host, local.port()),
        None => local.to_string(),
    };
    let shuffle = ShuffleEnvironment::new(ShuffleConfig {
        data_dir: config.data_dir.clone(),
        ..ShuffleConfig::default()
    })?;
    shuffle.set_local_address(&address);
    let mut backoff = registration::Backoff::new(config.registration_timeout);
    let jobmanager = registration::connect(&config.jobmanager, &mut backoff).await?;
    let instance_id = uuid::Uuid::new_v4().simple().to_string();
    let tm = TaskManager {
        inner: Arc::new(Inner {
            id: config.id.clone(),
            history: history::History::from_env(&config.id, &instance_id),
            instance_id,
            fence: floe_proto::fencing::EpochFence::default(),
            jobmanager,
            control: tokio::runtime::Handle::current(),
            shuffle: shuffle.clone(),
            registry: config.registry.clone(),
            jobs: Mutex::new(HashMap::new()),
            tasks: Mutex::new(HashMap::new()),
            attempts: Mutex::new(HashMap::new()),
            data_dir: config.data_dir.clone(),
            slots: config.slots,
            state_memory: config.managed_memory.map(memory::StateMemory::new),
        }),
    };
    let server = floe_proto::tls::server_builder()
        .map_err(|e| Error::Serve(format!("internal TLS: {e}")))?
        .add_service(TaskExecutorServer::new(tm.clone()).max_decoding_message_size(64 << 20))
        .add_service(shuffle.service())
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let server = tokio::spawn(server);
    let register = pb::RegisterTaskManagerRequest {
        taskmanager_id: config.id.clone(),
        address: address.clone(),
        slots: config.slots,
        instance_id: tm.inner.instance_id.clone(),
        ..Default::default()
    };
    // A JobManager that is up but not serving yet (or restarting) is tried again too.
    let response = loop {
        match tm
            .inner
            .jobmanager
            .clone()
            .register_task_manager(register.clone())
            .await
        {
            Ok(r) => break r.into_inner(),
            Err(s) => {
                let message = s.message().to_string();
                backoff.wait(|| Error::Refused(message)).await?;
            }
        }
    };
    let _ = tm.admit(response.leader_epoch);
    let mut metrics = String::new();
    if let Some(at) = config.metrics_address {
        let listener = floe_proto::net::bind(at).await.map_err(|cause| Error::Bind {
            address: at.to_string(),
            cause,
        })?;
        metrics = format!(
            " metrics={}",
            listener.local_addr().map_err(|e| Error::Serve(e.to_string()))?
        );
        tm.serve_metrics(listener);
    }
    println!(
        "floe taskmanager {} listening {address} slots={}{metrics}",
        config.id, config.slots
    );
    if let Some(bytes) = config.managed_memory {
        tracing::info!(id = %config.id, bytes, "managed memory: its RocksDB instances share {} MiB", bytes >> 20);
    }
    tracing::info!(id = %config.id, %address, "registered with JobManager {}", response.jobmanager_id);
    let interval = Duration::from_millis(response.heartbeat_interval_ms.max(100));
    let timeout = Duration::from_millis(response.heartbeat_timeout_ms).max(interval * 2);
    tm.spawn_heartbeats(register, interval, timeout);
    Ok((tm, server))
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_datastream::JobArgs;
    use floe_proto::v1::task_executor_server::TaskExecutor;
    use floe_scheduler::ExecutionState;

    fn taskmanager(dir: &std::path::Path) -> TaskManager {
        let channel = Channel::from_static("http://127.0.0.1:9").connect_lazy();
        let shuffle = ShuffleEnvironment::new(ShuffleConfig {
            data_dir: dir.to_path_buf(),
            ..ShuffleConfig::default()
        })
        .expect("shuffle");
        TaskManager {
            inner: Arc::new(Inner {
                id: "tm-test".into(),
                instance_id: "instance-test".into(),
                fence: floe_proto::fencing::EpochFence::default(),
                history: history::History::default(),
                jobmanager: JobManagerClient::new(channel),
                control: tokio::runtime::Handle::current(),
                shuffle,
                registry: JobRegistry::builtin(),
                jobs: Mutex::new(HashMap::new()),
                tasks: Mutex::new(HashMap::new()),
                attempts: Mutex::new(HashMap::new()),
                data_dir: dir.to_path_buf(),
                slots: 1,
                state_memory: None,
            }),
        }
    }

    fn deployment(fingerprint: &str) -> pb::TaskDeployment {
        pb::TaskDeployment {
            id: Some(pb::ExecutionAttemptId {
                job_id: "job1".into(),
                vertex: 0,
                subtask: 0,
                attempt: 0,
            }),
            job_name: "wordcount".into(),
            args: ["--input", "/nonexistent/in", "--output", "/nonexistent/out"]
                .map(String::from)
                .to_vec(),
            configuration: [("execution.runtime-mode".to_string(), "BATCH".to_string())]
                .into_iter()
                .collect(),
            graph_fingerprint: fingerprint.into(),
            ..Default::default()
        }
    }

    /// A task held as running under `id` (no thread behind it), reached through `control`.
    fn hold_running(
        tm: &TaskManager,
        id: &pb::ExecutionAttemptId,
        control: Option<tokio::sync::mpsc::UnboundedSender<floe_datastream::checkpoint::Control>>,
    ) {
        lock(&tm.inner.tasks).insert(
            tasks::key(id),
            tasks::TaskEntry {
                abort: thread::TaskThread::detached(),
                metrics: Arc::default(),
                control,
                state: ExecutionState::Running,
                final_report: None,
            },
        );
    }

    #[tokio::test]
    async fn refuses_a_task_whose_graph_differs_from_the_jobmanagers() {
        let dir = std::env::temp_dir().join(format!("floe-tm-test-{}", std::process::id()));
        let tm = taskmanager(&dir);
        let status = tm
            .start_task(deployment("not-the-same-graph"))
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(
            status
                .message()
                .starts_with("graph fingerprint mismatch for job 'wordcount'"),
            "{}",
            status.message()
        );
        // The same deployment with the fingerprint the registry gives passes that check (and then
        // fails on the missing outputs, which is the next thing checked).
        let args = JobArgs {
            name: "wordcount".into(),
            args: deployment("").args,
            configuration: deployment("").configuration.into_iter().collect(),
        };
        let right = JobRegistry::builtin().build(&args).expect("builds").fingerprint();
        let status = tm.start_task(deployment(&right)).expect_err("no outputs given");
        assert_ne!(
            status.code(),
            tonic::Code::FailedPrecondition,
            "{}",
            status.message()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn unknown_job_names_the_registered_ones() {
        let dir = std::env::temp_dir().join(format!("floe-tm-test2-{}", std::process::id()));
        let tm = taskmanager(&dir);
        let mut d = deployment("x");
        d.job_name = "nope".into();
        let status = tm.start_task(d).expect_err("unknown job");
        assert!(
            status.message().contains("nope") && status.message().contains("wordcount"),
            "{}",
            status.message()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 11, scenario 4: a final report that cannot be delivered stays in the task table and
    /// rides on every heartbeat until the JobManager has it.
    #[tokio::test]
    async fn a_final_report_rides_on_heartbeats_until_the_jobmanager_has_it() {
        let dir = std::env::temp_dir().join(format!("floe-tm-test3-{}", std::process::id()));
        let tm = taskmanager(&dir);
        let id = deployment("x").id.expect("id");
        hold_running(&tm, &id, None);
        let (_, executions, finals) = tm.heartbeat_payload();
        assert_eq!(executions.len(), 1);
        assert_eq!(executions[0].state, pb::ExecutionStateProto::Running as i32);
        assert!(
            finals.is_empty(),
            "a live execution is not acknowledged by a heartbeat"
        );
        // The JobManager is unreachable (port 9): the FINISHED report does not get through.
        let finished = tm.update(&id, ExecutionState::Finished, String::new(), Vec::new(), None);
        tm.finish(finished.clone());
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let (_, executions, finals) = tm.heartbeat_payload();
        assert_eq!(
            executions,
            vec![finished],
            "the heartbeat carries the whole final report"
        );
        assert_eq!(finals.len(), 1);
        tm.acknowledged(&finals);
        assert!(
            tm.heartbeat_payload().1.is_empty(),
            "gone once a heartbeat delivered it"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 31: a TaskManager cut off from its JobManager for the heartbeat timeout drops its
    /// tasks (Flink's JobManager heartbeat timeout on the TaskExecutor). By then the JobManager
    /// has declared it lost and deployed new attempts elsewhere; before, these ran on beside
    /// them for as long as the partition lasted.
    #[tokio::test]
    async fn a_taskmanager_that_hears_nothing_from_its_jobmanager_drops_its_tasks() {
        let dir = std::env::temp_dir().join(format!("floe-tm-test-cut-off-{}", std::process::id()));
        let tm = taskmanager(&dir);
        hold_running(&tm, &deployment("x").id.expect("id"), None);
        // Port 9 answers nothing: every heartbeat fails.
        tm.spawn_heartbeats(
            pb::RegisterTaskManagerRequest::default(),
            std::time::Duration::from_millis(50),
            std::time::Duration::from_millis(300),
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !lock(&tm.inner.tasks).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "10 s without an answer from the JobManager and the task still runs"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The JobManager sends a deployment and its cancel as two calls that can cross: a cancel
    /// that arrives first must stop the deployment when it comes, and a deployment older than one
    /// already deployed must not start (before, either ran beside the newer attempt). A newer
    /// attempt cancels an older one still held.
    #[tokio::test]
    async fn a_deployment_after_its_cancel_or_a_newer_attempt_is_refused() {
        let dir = std::env::temp_dir().join(format!("floe-tm-test-crossed-{}", std::process::id()));
        let tm = taskmanager(&dir);
        let with_attempt = |attempt: u64| {
            let mut d = deployment("x");
            if let Some(id) = d.id.as_mut() {
                id.attempt = attempt;
            }
            d
        };
        let attempt_id = |attempt: u64| with_attempt(attempt).id.expect("id");
        // Attempt 1 was canceled before its deployment arrived.
        assert!(tm.cancel_task(tonic::Request::new(attempt_id(1))).await.is_ok());
        let refused = tm
            .submit_task(tonic::Request::new(with_attempt(1)))
            .await
            .expect_err("canceled first");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(
            refused
                .message()
                .contains("attempt 1 of 0#0 of job job1 was canceled or replaced"),
            "{}",
            refused.message()
        );
        // Attempt 3 held here (running); attempt 2's deployment arrives after it: refused.
        hold_running(&tm, &attempt_id(3), None);
        tm.admit_attempt(&attempt_id(3)).expect("the newest attempt");
        assert!(
            tm.admit_attempt(&attempt_id(2)).is_err(),
            "older than one deployed"
        );
        // Attempt 4 replaces attempt 3, which is canceled.
        tm.admit_attempt(&attempt_id(4)).expect("a newer attempt");
        let held = lock(&tm.inner.tasks)
            .get(&tasks::key(&attempt_id(3)))
            .map(|e| e.final_report.as_ref().map(|r| r.state));
        assert_eq!(
            held,
            Some(Some(pb::ExecutionStateProto::Canceled as i32)),
            "the replaced attempt ended CANCELED"
        );
        // The job ended: its attempts are forgotten.
        tm.forget_attempts("job1");
        assert!(lock(&tm.inner.attempts).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 11, scenario 2: once a JobManager of a newer leader epoch has spoken, calls of an
    /// older one are refused.
    #[tokio::test]
    async fn calls_from_an_older_leader_epoch_are_refused() {
        let dir = std::env::temp_dir().join(format!("floe-tm-test4-{}", std::process::id()));
        let tm = taskmanager(&dir);
        let call = |epoch: u64| {
            let mut request = tonic::Request::new(pb::ReleasePartitionsRequest { job_id: "j".into() });
            request.metadata_mut().insert(
                floe_proto::fencing::LEADER_EPOCH_HEADER,
                tonic::metadata::MetadataValue::from(epoch),
            );
            request
        };
        assert!(tm.release_partitions(call(3)).await.is_ok());
        let refused = tm.release_partitions(call(2)).await.expect_err("older epoch");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(
            refused.message().contains("leader epoch 3"),
            "{}",
            refused.message()
        );
        let cancel = {
            let mut r = tonic::Request::new(deployment("x").id.expect("id"));
            r.metadata_mut().insert(
                floe_proto::fencing::LEADER_EPOCH_HEADER,
                tonic::metadata::MetadataValue::from(1u64),
            );
            r
        };
        assert!(tm.cancel_task(cancel).await.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A checkpoint's completion reaches only the tasks the notifying JobManager deployed: a task
    /// of a fenced JobManager (here still held, as before the heartbeat that drops it) must not
    /// commit parts it pre-committed for a checkpoint its JobManager never logged.
    #[tokio::test]
    async fn a_checkpoint_completion_reaches_only_tasks_of_the_notifying_epoch() {
        let dir = std::env::temp_dir().join(format!("floe-tm-test-notify-{}", std::process::id()));
        let tm = taskmanager(&dir);
        let mut receivers = Vec::new();
        for epoch in [1u64, 2] {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let id = pb::ExecutionAttemptId {
                attempt: floe_scheduler::execution_graph::first_attempt_of_epoch(epoch),
                ..deployment("x").id.expect("id")
            };
            hold_running(&tm, &id, Some(tx));
            receivers.push(rx);
        }
        let mut notify = tonic::Request::new(pb::CheckpointCompleteRequest {
            job_id: "job1".into(),
            checkpoint: 9,
        });
        notify
            .metadata_mut()
            .insert(floe_proto::fencing::LEADER_EPOCH_HEADER, 2u64.into());
        tm.notify_checkpoint_complete(notify).await.expect("admitted");
        assert!(
            receivers[0].try_recv().is_err(),
            "the task of epoch 1 was told to commit"
        );
        assert!(matches!(
            receivers[1].try_recv(),
            Ok(floe_datastream::checkpoint::Control::Complete(9))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
