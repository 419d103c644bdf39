//! Floe's TaskManager: offers slots to a JobManager, runs the operator chains it is given (built from
//! the job registry, the same way the JobManager built them, checked by graph fingerprint), moves data
//! through the [`floe_shuffle::ShuffleEnvironment`], and reports every state change.
//!
//! Read [`TaskManager`] first; [`run`] is the whole process.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floe_checkpoint::TaskSnapshot;
use floe_datastream::checkpoint::{ChainSnapshot, Checkpointing, Control, KeyedStateInit, TaskRestore};
use floe_datastream::{
    BuiltJob, CheckpointConfig, JobArgs, JobRegistry, StateBackendKind, TaskContext, TaskMetrics,
};
use floe_proto::v1::job_manager_client::JobManagerClient;
use floe_proto::v1::task_executor_server::{TaskExecutor, TaskExecutorServer};
use floe_proto::v1::{self as pb};
use floe_scheduler::ExecutionState;
use floe_shuffle::{InputChannelSpec, PartitionKind, ShuffleConfig, ShuffleEnvironment};
use floe_state::{HashMapStateBackend, SnapshotTarget};
use floe_storage::ObjectStore;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// What can stop a TaskManager.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot bind {address}: {source}")]
    Bind {
        address: String,
        #[source]
        source: std::io::Error,
    },
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
    /// How long to keep trying to reach the JobManager at start.
    pub registration_timeout: Duration,
}

/// Task identity as the map key.
type AttemptKey = (String, u32, u32, u32);

fn key(id: &pb::ExecutionAttemptId) -> AttemptKey {
    (id.job_id.clone(), id.vertex, id.subtask, id.attempt)
}

#[derive(Debug)]
struct RunningTask {
    abort: AbortHandle,
    metrics: Arc<TaskMetrics>,
    /// Checkpointing tasks: barrier triggers and completions go here.
    control: Option<mpsc::UnboundedSender<Control>>,
}

/// The TaskManager's shared state.
#[derive(Debug, Clone)]
pub struct TaskManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    jobmanager: JobManagerClient<Channel>,
    shuffle: ShuffleEnvironment,
    registry: JobRegistry,
    jobs: Mutex<HashMap<String, Arc<BuiltJob>>>,
    tasks: Mutex<HashMap<AttemptKey, RunningTask>>,
    /// Local scratch space: blocking partitions, RocksDB instances.
    data_dir: PathBuf,
}

/// The job storage checkpoints go to; checkpointing without one is a configuration error.
fn job_storage(conf: &BTreeMap<String, String>) -> Result<ObjectStore, Status> {
    match ObjectStore::job_storage(conf) {
        Ok(Some(store)) => Ok(store),
        Ok(None) => Err(Status::invalid_argument(format!(
            "{}: checkpointing (execution.checkpointing.interval) needs job storage; set spec.storage.url \
             (or {})",
            floe_storage::JOB_STORAGE_KEY,
            floe_storage::JOB_STORAGE_KEY
        ))),
        Err(e) => Err(Status::invalid_argument(e.to_string())),
    }
}

/// The keyed state a checkpointing task starts with: restored from its snapshot, or fresh.
async fn keyed_state(
    backend: StateBackendKind,
    dir: &std::path::Path,
    store: ObjectStore,
    restore: Option<&(u64, TaskSnapshot)>,
    key_groups: std::ops::Range<u32>,
) -> Result<Option<KeyedStateInit>, floe_state::Error> {
    let snapshots: Vec<TaskSnapshot> = restore.map(|(_, s)| s.clone()).into_iter().collect();
    Ok(Some(match backend {
        StateBackendKind::HashMap => {
            KeyedStateInit::Heap(HashMapStateBackend::restore(&store, &snapshots, key_groups).await?)
        }
        #[cfg(feature = "rocksdb")]
        StateBackendKind::RocksDb => {
            use floe_state_rocksdb::RocksDbStateBackend;
            let db = match restore {
                Some((_, s)) if !s.files.is_empty() => {
                    RocksDbStateBackend::restore(dir, &store, std::slice::from_ref(s), key_groups).await?
                }
                _ => RocksDbStateBackend::open(dir, key_groups)?,
            };
            KeyedStateInit::Backend(Box::new(db))
        }
        #[cfg(not(feature = "rocksdb"))]
        StateBackendKind::RocksDb => {
            let _ = dir;
            return Err(floe_state::Error::Backend {
                backend: "rocksdb".into(),
                message: "state.backend.type: rocksdb, but this floe was built without the rocksdb feature"
                    .into(),
            });
        }
    }))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

impl TaskManager {
    fn job(&self, args: &JobArgs, job_id: &str) -> Result<Arc<BuiltJob>, String> {
        if let Some(j) = lock(&self.inner.jobs).get(job_id) {
            return Ok(j.clone());
        }
        let built = Arc::new(self.inner.registry.build(args).map_err(|e| e.to_string())?);
        lock(&self.inner.jobs).insert(job_id.to_string(), built.clone());
        Ok(built)
    }

    async fn report(
        &self,
        id: &pb::ExecutionAttemptId,
        state: ExecutionState,
        error: String,
        produced: Vec<pb::PartitionStats>,
        metrics: Option<&TaskMetrics>,
    ) {
        let update = pb::TaskExecutionStateUpdate {
            taskmanager_id: self.inner.id.clone(),
            id: Some(id.clone()),
            state: pb::ExecutionStateProto::from(state) as i32,
            error,
            produced,
            metrics: metrics.map(|m| pb::TaskMetrics {
                id: Some(id.clone()),
                records_in: m.records_in.load(Ordering::Relaxed),
                records_out: m.records_out.load(Ordering::Relaxed),
            }),
        };
        // A lost report would leave the JobManager waiting forever: retry for a while.
        for attempt in 0..20 {
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

    /// Sets up one task and runs it in the background, reporting its states.
    fn start_task(&self, d: pb::TaskDeployment) -> Result<(), Status> {
        let id =
            d.id.clone()
                .ok_or_else(|| Status::invalid_argument("id: missing execution attempt id"))?;
        let args = JobArgs {
            name: d.job_name.clone(),
            args: d.args.clone(),
            configuration: d.configuration.clone().into_iter().collect::<BTreeMap<_, _>>(),
        };
        let built = self
            .job(&args, &id.job_id)
            .map_err(|e| Status::invalid_argument(format!("cannot build job '{}': {e}", args.name)))?;
        let fingerprint = built.fingerprint();
        if fingerprint != d.graph_fingerprint {
            return Err(Status::failed_precondition(format!(
                "graph fingerprint mismatch for job '{}': this TaskManager built {fingerprint}, the JobManager {}; \
                 are they running different builds?",
                args.name, d.graph_fingerprint
            )));
        }
        let parallelism = built
            .job_graph()
            .vertices()
            .get(id.vertex as usize)
            .map(|v| v.parallelism)
            .ok_or_else(|| Status::invalid_argument(format!("id.vertex: job has no vertex {}", id.vertex)))?;
        built
            .check_task(
                id.vertex,
                id.subtask,
                parallelism,
                d.inputs.len(),
                d.outputs.len(),
            )
            .map_err(|e| Status::invalid_argument(format!("cannot create task: {e}")))?;
        // Remote blocking partitions: written to and read from the job storage's `shuffle/` prefix.
        let remote = floe_shuffle::remote_storage(&args.configuration)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let mut outputs = Vec::with_capacity(d.outputs.len());
        for o in &d.outputs {
            let partition = o
                .partition
                .clone()
                .ok_or_else(|| Status::invalid_argument("outputs.partition: missing"))?;
            let kind = if o.blocking {
                PartitionKind::Blocking
            } else {
                PartitionKind::Pipelined
            };
            let writer = match (&remote, kind) {
                (Some(store), PartitionKind::Blocking) => self.inner.shuffle.create_remote_writer(
                    partition.into(),
                    o.num_subpartitions,
                    store.clone(),
                ),
                _ => self
                    .inner
                    .shuffle
                    .create_writer(partition.into(), o.num_subpartitions, kind),
            }
            .map_err(|e| Status::internal(e.to_string()))?;
            outputs.push(writer);
        }
        let inputs = d
            .inputs
            .iter()
            .map(|gate| {
                let channels = gate
                    .channels
                    .iter()
                    .filter_map(|c| {
                        Some(InputChannelSpec {
                            partition: c.partition.clone()?.into(),
                            address: c.address.clone(),
                            subpartitions: c.subpartition_start..c.subpartition_end,
                        })
                    })
                    .collect();
                self.inner
                    .shuffle
                    .create_input_gate_with_storage(channels, remote.clone())
            })
            .collect();
        let metrics = Arc::new(TaskMetrics::default());
        let configuration = args.configuration.clone();
        let checkpoints = CheckpointConfig::from_configuration(&configuration)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let restore = if d.restore_checkpoint > 0 {
            let snapshot: TaskSnapshot = serde_json::from_str(&d.restore_snapshot_json).map_err(|e| {
                Status::invalid_argument(format!(
                    "restore_snapshot_json: not a task snapshot of checkpoint {}: {e}",
                    d.restore_checkpoint
                ))
            })?;
            Some((d.restore_checkpoint, snapshot))
        } else {
            None
        };
        let (control, checkpointing) = match &checkpoints {
            Some(_) => {
                let (control_tx, control_rx) = mpsc::unbounded_channel();
                let (snapshots_tx, snapshots_rx) = mpsc::unbounded_channel();
                let storage = job_storage(&configuration)?;
                self.spawn_uploader(id.clone(), storage, snapshots_rx);
                (
                    Some(control_tx),
                    Some(Checkpointing {
                        control: control_rx,
                        snapshots: snapshots_tx,
                    }),
                )
            }
            None => (None, None),
        };
        let mut ctx = TaskContext {
            subtask: id.subtask,
            parallelism,
            attempt: id.attempt,
            inputs,
            outputs,
            metrics: metrics.clone(),
            buffer_timeout: built.buffer_timeout(),
            buffer_size: built.buffer_size(),
            configuration,
            checkpointing,
            restore: restore.as_ref().map(|(checkpoint, s)| TaskRestore {
                checkpoint: *checkpoint,
                source: s.position.clone(),
                sink: s.sink.clone(),
            }),
            keyed_state: None,
        };
        let state_dir = self
            .inner
            .data_dir
            .join("state")
            .join(&id.job_id)
            .join(format!("{}-{}-{}", id.vertex, id.subtask, id.attempt));
        let (_, key_groups) = built.key_groups(id.vertex, id.subtask, parallelism);
        let keyed = built.is_keyed(id.vertex);
        let this = self.clone();
        let task_id = id.clone();
        let task_metrics = metrics.clone();
        let handle = tokio::spawn(async move {
            this.report(
                &task_id,
                ExecutionState::Initializing,
                String::new(),
                Vec::new(),
                None,
            )
            .await;
            // Keyed state first (a restore downloads it), then the chain.
            let state = match checkpoints.as_ref().filter(|_| keyed) {
                Some(config) => match job_storage(&ctx.configuration) {
                    Ok(storage) => {
                        keyed_state(config.backend, &state_dir, storage, restore.as_ref(), key_groups)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    Err(status) => Err(status.message().to_string()),
                },
                None => Ok(None),
            };
            let created = state.and_then(|state| {
                ctx.keyed_state = state;
                built
                    .create_task(task_id.vertex, ctx)
                    .map_err(|e| format!("cannot create task: {e}"))
            });
            let outcome = match created {
                Ok(task) => {
                    this.report(&task_id, ExecutionState::Running, String::new(), Vec::new(), None)
                        .await;
                    task.run().await.map_err(|e| e.to_string())
                }
                Err(e) => Err(e),
            };
            lock(&this.inner.tasks).remove(&key(&task_id));
            let _ = std::fs::remove_dir_all(&state_dir);
            match outcome {
                Ok(stats) => {
                    let produced = stats
                        .iter()
                        .enumerate()
                        .map(|(i, s)| pb::PartitionStats {
                            result: i as u32,
                            partition: task_id.subtask,
                            bytes_per_subpartition: s.bytes_per_subpartition.clone(),
                        })
                        .collect();
                    this.report(
                        &task_id,
                        ExecutionState::Finished,
                        String::new(),
                        produced,
                        Some(&task_metrics),
                    )
                    .await;
                }
                Err(e) => {
                    tracing::warn!(task = ?task_id, "task failed: {e}");
                    this.report(
                        &task_id,
                        ExecutionState::Failed,
                        e,
                        Vec::new(),
                        Some(&task_metrics),
                    )
                    .await;
                }
            }
        });
        lock(&self.inner.tasks).insert(
            key(&id),
            RunningTask {
                abort: handle.abort_handle(),
                metrics,
                control,
            },
        );
        Ok(())
    }

    /// Uploads each snapshot the task hands over and acknowledges it to the JobManager (or declines
    /// the checkpoint when the upload fails).
    fn spawn_uploader(
        &self,
        id: pb::ExecutionAttemptId,
        storage: ObjectStore,
        mut snapshots: mpsc::UnboundedReceiver<ChainSnapshot>,
    ) {
        let this = self.clone();
        tokio::spawn(async move {
            let task = format!("{}-{}", id.vertex, id.subtask);
            while let Some(snapshot) = snapshots.recv().await {
                let checkpoint = snapshot.checkpoint;
                let target = SnapshotTarget {
                    store: storage.clone(),
                    dir: format!("checkpoints/{}/chk-{checkpoint}/{task}", id.job_id),
                    shared: format!("checkpoints/{}/shared/{task}", id.job_id),
                };
                let uploaded = match snapshot.keyed {
                    Some(keyed) => keyed.upload(&target).await,
                    None => Ok(TaskSnapshot::default()),
                };
                let mut jobmanager = this.inner.jobmanager.clone();
                let sent = match uploaded {
                    Ok(mut task_snapshot) => {
                        task_snapshot.position = snapshot.source;
                        task_snapshot.sink = snapshot.sink;
                        jobmanager
                            .acknowledge_checkpoint(pb::AcknowledgeCheckpointRequest {
                                id: Some(id.clone()),
                                checkpoint,
                                snapshot_json: serde_json::to_string(&task_snapshot).unwrap_or_default(),
                                taskmanager_id: this.inner.id.clone(),
                            })
                            .await
                    }
                    Err(e) => {
                        tracing::warn!(task, checkpoint, "snapshot upload failed: {e}");
                        jobmanager
                            .decline_checkpoint(pb::DeclineCheckpointRequest {
                                id: Some(id.clone()),
                                checkpoint,
                                reason: e.to_string(),
                            })
                            .await
                    }
                };
                if let Err(e) = sent {
                    tracing::warn!(
                        task,
                        checkpoint,
                        "could not reach the JobManager about a checkpoint: {e}"
                    );
                }
            }
        });
    }

    fn metrics(&self) -> Vec<pb::TaskMetrics> {
        lock(&self.inner.tasks)
            .iter()
            .map(|((job_id, vertex, subtask, attempt), t)| pb::TaskMetrics {
                id: Some(pb::ExecutionAttemptId {
                    job_id: job_id.clone(),
                    vertex: *vertex,
                    subtask: *subtask,
                    attempt: *attempt,
                }),
                records_in: t.metrics.records_in.load(Ordering::Relaxed),
                records_out: t.metrics.records_out.load(Ordering::Relaxed),
            })
            .collect()
    }
}

#[tonic::async_trait]
impl TaskExecutor for TaskManager {
    async fn submit_task(&self, request: Request<pb::TaskDeployment>) -> Result<Response<pb::Ack>, Status> {
        self.start_task(request.into_inner())?;
        Ok(Response::new(pb::Ack {}))
    }

    async fn cancel_task(
        &self,
        request: Request<pb::ExecutionAttemptId>,
    ) -> Result<Response<pb::Ack>, Status> {
        let id = request.into_inner();
        let task = lock(&self.inner.tasks).remove(&key(&id));
        if let Some(task) = task {
            task.abort.abort();
            let this = self.clone();
            tokio::spawn(async move {
                this.report(
                    &id,
                    ExecutionState::Canceled,
                    String::new(),
                    Vec::new(),
                    Some(&task.metrics),
                )
                .await;
            });
        }
        Ok(Response::new(pb::Ack {}))
    }

    async fn trigger_checkpoint(
        &self,
        request: Request<pb::TriggerCheckpointRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        let r = request.into_inner();
        let id =
            r.id.ok_or_else(|| Status::invalid_argument("id: missing execution attempt id"))?;
        let sent = lock(&self.inner.tasks)
            .get(&key(&id))
            .and_then(|t| t.control.as_ref())
            .is_some_and(|c| c.send(Control::Trigger(r.checkpoint)).is_ok());
        if !sent {
            return Err(Status::not_found(format!(
                "no running checkpointed task {}#{} attempt {} of job {}",
                id.vertex, id.subtask, id.attempt, id.job_id
            )));
        }
        Ok(Response::new(pb::Ack {}))
    }

    async fn notify_checkpoint_complete(
        &self,
        request: Request<pb::CheckpointCompleteRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        let r = request.into_inner();
        for ((job_id, ..), task) in lock(&self.inner.tasks).iter() {
            if *job_id == r.job_id
                && let Some(control) = &task.control
            {
                let _ = control.send(Control::Complete(r.checkpoint));
            }
        }
        Ok(Response::new(pb::Ack {}))
    }

    async fn release_partitions(
        &self,
        request: Request<pb::ReleasePartitionsRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        let job_id = request.into_inner().job_id;
        self.inner.shuffle.release_job(&job_id);
        lock(&self.inner.jobs).remove(&job_id);
        Ok(Response::new(pb::Ack {}))
    }
}

async fn connect(address: &str, timeout: Duration) -> Result<JobManagerClient<Channel>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let endpoint = Channel::from_shared(format!("http://{address}"))
        .map_err(|e| Error::JobManagerUnreachable {
            address: address.into(),
            message: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(2));
    loop {
        match endpoint.connect().await {
            Ok(ch) => return Ok(JobManagerClient::new(ch)),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(Error::JobManagerUnreachable {
                    address: address.into(),
                    message: e.to_string(),
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

impl TaskManager {
    /// Aborts every task and releases every job's partitions: what a TaskManager does when the
    /// JobManager it worked for no longer knows it. A restarted job's attempts may reuse attempt
    /// numbers, so nothing of the old run may linger.
    /// The registration request, with the finished partitions held right now.
    fn registration(&self, base: &pb::RegisterTaskManagerRequest) -> pb::RegisterTaskManagerRequest {
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

    fn forget_all(&self) {
        let tasks: Vec<RunningTask> = lock(&self.inner.tasks).drain().map(|(_, t)| t).collect();
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
}

/// Runs a TaskManager until its server stops: serve, register, heartbeat.
pub async fn run(config: TaskManagerConfig) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|source| Error::Bind {
            address: config.bind.to_string(),
            source,
        })?;
    let local = listener.local_addr().map_err(|e| Error::Serve(e.to_string()))?;
    let address = match &config.advertise_host {
        Some(host) => format!("{host}:{}", local.port()),
        None => local.to_string(),
    };
    let shuffle = ShuffleEnvironment::new(ShuffleConfig {
        data_dir: config.data_dir.clone(),
        ..ShuffleConfig::default()
    })?;
    shuffle.set_local_address(&address);
    let jobmanager = connect(&config.jobmanager, config.registration_timeout).await?;
    let tm = TaskManager {
        inner: Arc::new(Inner {
            id: config.id.clone(),
            jobmanager,
            shuffle: shuffle.clone(),
            registry: JobRegistry::builtin(),
            jobs: Mutex::new(HashMap::new()),
            tasks: Mutex::new(HashMap::new()),
            data_dir: config.data_dir.clone(),
        }),
    };
    let server = tonic::transport::Server::builder()
        .add_service(TaskExecutorServer::new(tm.clone()).max_decoding_message_size(64 << 20))
        .add_service(shuffle.service())
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let server = tokio::spawn(server);
    let register = pb::RegisterTaskManagerRequest {
        taskmanager_id: config.id.clone(),
        address: address.clone(),
        slots: config.slots,
        ..Default::default()
    };
    let response = tm
        .inner
        .jobmanager
        .clone()
        .register_task_manager(register.clone())
        .await
        .map_err(|s| Error::Refused(s.message().to_string()))?
        .into_inner();
    println!(
        "floe taskmanager {} listening {address} slots={}",
        config.id, config.slots
    );
    tracing::info!(id = %config.id, %address, "registered with JobManager {}", response.jobmanager_id);
    let interval = Duration::from_millis(response.heartbeat_interval_ms.max(100));
    let beat = tm.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            let (rss, rss_peak) = rss_bytes();
            let request = pb::HeartbeatRequest {
                taskmanager_id: beat.inner.id.clone(),
                metrics: beat.metrics(),
                buffered_bytes: beat.inner.shuffle.buffered_bytes(),
                buffered_bytes_peak: beat.inner.shuffle.peak_buffered_bytes(),
                rss_bytes: rss,
                rss_peak_bytes: rss_peak,
            };
            match beat.inner.jobmanager.clone().heartbeat(request).await {
                Ok(r) if !r.get_ref().known => {
                    // A new JobManager (the old one died) or one that declared this TaskManager lost:
                    // either way nobody tracks the tasks running here any more.
                    tracing::warn!(
                        "JobManager does not know this TaskManager; dropping its tasks and registering again"
                    );
                    beat.forget_all();
                    let _ = beat
                        .inner
                        .jobmanager
                        .clone()
                        .register_task_manager(beat.registration(&register))
                        .await;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("heartbeat failed: {e}"),
            }
        }
    });
    server
        .await
        .map_err(|e| Error::Serve(e.to_string()))?
        .map_err(|e| Error::Serve(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
                jobmanager: JobManagerClient::new(channel),
                shuffle,
                registry: JobRegistry::builtin(),
                jobs: Mutex::new(HashMap::new()),
                tasks: Mutex::new(HashMap::new()),
                data_dir: dir.to_path_buf(),
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
}
