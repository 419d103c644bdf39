//! Deployment: a task from its `TaskDeployment` (the job built from the registry and checked by
//! graph fingerprint, shuffle writers and gates, keyed state fresh or restored), run in the
//! background with every state change reported.

use std::collections::BTreeMap;
use std::sync::Arc;

use floe_checkpoint::{SubtaskRestore, TaskSnapshot};
use floe_datastream::checkpoint::{Checkpointing, KeyedStateInit, TaskRestore};
use floe_datastream::{
    BufferPools, BuiltJob, CheckpointConfig, JobArgs, StateBackendKind, TaskContext, TaskMetrics,
};
use floe_proto::v1::{self as pb};
use floe_scheduler::ExecutionState;
use floe_shuffle::{InputChannelSpec, PartitionKind};
use floe_state::HashMapStateBackend;
use floe_storage::ObjectStore;
use tokio::sync::mpsc;
use tonic::Status;

use crate::tasks::{TaskEntry, key};
use crate::thread::TaskThread;
use crate::{TaskManager, lock};

/// Why a task failed, as its final report carries it.
struct Failure {
    message: String,
    /// The input partition it could not read: failover produces it again.
    unavailable: Option<floe_shuffle::ResultPartitionId>,
    /// No restart can fix it: the job fails at once.
    non_recoverable: bool,
    /// A producer it read from stopped: that producer's failure is the cause.
    input_failed: bool,
}

/// How long a failed task keeps its outputs (unfinished) while its failure report goes to the
/// JobManager: its consumers, whose input ends when the outputs go, then fail after the
/// JobManager heard this task's own failure, which names the job's failure (a JobManager that
/// does not answer in time only loses that order: `input_failed` still lets the producer's
/// failure replace a consumer's as the cause).
const OUTPUTS_HELD_FOR_THE_REPORT: std::time::Duration = std::time::Duration::from_secs(5);

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

/// The keyed state a checkpointing task starts with: restored from the snapshots holding its
/// key groups (its own, or several after a rescale: the backend keeps only its range), or fresh.
async fn keyed_state(
    backend: StateBackendKind,
    dir: &std::path::Path,
    store: ObjectStore,
    restore: Option<&(u64, SubtaskRestore)>,
    key_groups: std::ops::Range<u32>,
    configuration: &std::collections::BTreeMap<String, String>,
    memory: Option<&crate::memory::StateMemory>,
) -> Result<Option<KeyedStateInit>, floe_state::Error> {
    let snapshots: Vec<TaskSnapshot> = restore.map(|(_, r)| r.keyed.clone()).unwrap_or_default();
    // A savepoint's files are in its own directory, not the job storage.
    let foreign = restore.and_then(|(_, r)| r.storage.as_deref());
    let store = match foreign {
        Some(url) => ObjectStore::open(url, configuration)?,
        None => store,
    };
    Ok(Some(match backend {
        StateBackendKind::HashMap => {
            KeyedStateInit::Heap(HashMapStateBackend::restore(&store, &snapshots, key_groups).await?)
        }
        #[cfg(feature = "rocksdb")]
        StateBackendKind::RocksDb => {
            use floe_state_rocksdb::RocksDbStateBackend;
            let with_files: Vec<TaskSnapshot> =
                snapshots.into_iter().filter(|s| !s.files.is_empty()).collect();
            let db = if with_files.is_empty() {
                RocksDbStateBackend::open_sharing(dir, key_groups, memory)?
            } else {
                let db = RocksDbStateBackend::restore_sharing(dir, &store, &with_files, key_groups, memory)
                    .await?;
                if foreign.is_some() {
                    db.disown_restored_files();
                }
                db
            };
            KeyedStateInit::Backend(Box::new(db))
        }
        #[cfg(not(feature = "rocksdb"))]
        StateBackendKind::RocksDb => {
            let _ = (dir, memory);
            return Err(floe_state::Error::Backend {
                backend: "rocksdb".into(),
                message: "state.backend.type: rocksdb, but this floe was built without the rocksdb feature"
                    .into(),
            });
        }
    }))
}

impl TaskManager {
    pub(crate) fn job(&self, args: &JobArgs, job_id: &str) -> Result<Arc<BuiltJob>, String> {
        if let Some(j) = lock(&self.inner.jobs).get(job_id) {
            return Ok(j.clone());
        }
        let built = Arc::new(self.inner.registry.build(args).map_err(|e| e.to_string())?);
        lock(&self.inner.jobs).insert(job_id.to_string(), built.clone());
        Ok(built)
    }

    /// Sets up one task and runs it in the background, reporting its states.
    pub(crate) fn start_task(&self, d: pb::TaskDeployment) -> Result<(), Status> {
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
        let graph_parallelism = built
            .job_graph()
            .vertices()
            .get(id.vertex as usize)
            .map(|v| v.parallelism)
            .ok_or_else(|| Status::invalid_argument(format!("id.vertex: job has no vertex {}", id.vertex)))?;
        // Decided at run time (adaptive batch): the JobManager says how many subtasks there are.
        let parallelism = match d.parallelism {
            0 => graph_parallelism,
            p => p,
        };
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
        let inputs: Vec<Box<dyn floe_shuffle::InputGate>> = d
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
        let pools = BufferPools {
            outputs: outputs.iter().filter_map(|w| w.pool_usage()).collect(),
            inputs: inputs.iter().filter_map(|g| g.pool_usage()).collect(),
        };
        let _ = metrics.pools.set(pools);
        let configuration = args.configuration.clone();
        let checkpoints = CheckpointConfig::from_configuration(&configuration)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let restore = if d.restore_checkpoint > 0 {
            let snapshot: SubtaskRestore = serde_json::from_str(&d.restore_snapshot_json).map_err(|e| {
                Status::invalid_argument(format!(
                    "restore_snapshot_json: not a subtask restore of checkpoint {}: {e}",
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
            job_id: id.job_id.clone(),
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
            restore: restore.as_ref().map(|(checkpoint, r)| TaskRestore {
                checkpoint: *checkpoint,
                sources: r.positions.clone(),
                sinks: r.sinks.clone(),
                broadcast: r.broadcast.clone(),
                in_flight: r.in_flight.clone(),
                schemas: r.keyed.iter().flat_map(|s| s.schemas.clone()).collect(),
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
        let failed = (self.clone(), id.clone(), metrics.clone());
        let memory = self.inner.state_memory.clone();
        let body = async move {
            this.report(&task_id, ExecutionState::Initializing).await;
            // Keyed state first (a restore downloads it), then the chain.
            let state = match checkpoints.as_ref().filter(|_| keyed) {
                Some(config) => match job_storage(&ctx.configuration) {
                    Ok(storage) => keyed_state(
                        config.backend,
                        &state_dir,
                        storage,
                        restore.as_ref(),
                        key_groups,
                        &ctx.configuration,
                        memory.as_ref(),
                    )
                    .await
                    .map_err(|e| e.to_string()),
                    Err(status) => Err(status.message().to_string()),
                },
                None => Ok(None),
            };
            let created = state.map_err(|e| (e, false)).and_then(|state| {
                ctx.keyed_state = state;
                built
                    .create_task(task_id.vertex, ctx)
                    .map_err(|e| (format!("cannot create task: {e}"), e.is_non_recoverable()))
            });
            let mut held = None;
            let outcome = match created {
                Ok(task) => {
                    this.report(&task_id, ExecutionState::Running).await;
                    task.run_holding_outputs().await.map_err(|f| {
                        let e = f.error;
                        held = Some(f.outputs);
                        Failure {
                            message: e.to_string(),
                            unavailable: e.unavailable_partition().cloned(),
                            non_recoverable: e.is_non_recoverable(),
                            input_failed: e.is_input_failure(),
                        }
                    })
                }
                Err((message, non_recoverable)) => Err(Failure {
                    message,
                    unavailable: None,
                    non_recoverable,
                    input_failed: false,
                }),
            };
            let _ = std::fs::remove_dir_all(&state_dir);
            let final_report = match outcome {
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
                    this.update(
                        &task_id,
                        ExecutionState::Finished,
                        String::new(),
                        produced,
                        Some(&task_metrics),
                    )
                }
                Err(failure) => {
                    tracing::warn!(task = ?task_id, non_recoverable = failure.non_recoverable, "task failed: {}", failure.message);
                    let mut report = this.update(
                        &task_id,
                        ExecutionState::Failed,
                        failure.message,
                        Vec::new(),
                        Some(&task_metrics),
                    );
                    report.unavailable_partitions = failure.unavailable.into_iter().map(Into::into).collect();
                    report.non_recoverable = failure.non_recoverable;
                    report.input_failed = failure.input_failed;
                    report
                }
            };
            let delivered = this.finish_heard(final_report);
            if let Some(outputs) = held {
                // The failure reaches the JobManager before the consumers see the outputs end.
                let _ = tokio::time::timeout(OUTPUTS_HELD_FOR_THE_REPORT, delivered).await;
                drop(outputs);
            }
        };
        let on_panic = move |error: String| {
            let (this, id, metrics) = failed;
            tracing::warn!(task = ?id, "task failed: {error}");
            this.finish(this.update(&id, ExecutionState::Failed, error, Vec::new(), Some(&metrics)));
        };
        // The entry is in the table before the thread can report (it takes this lock first).
        let mut tasks = lock(&self.inner.tasks);
        let thread = TaskThread::spawn(format!("task {}#{}", id.vertex, id.subtask), body, on_panic)
            .map_err(|e| Status::resource_exhausted(format!("cannot start a task thread: {e}")))?;
        tasks.insert(
            key(&id),
            TaskEntry {
                abort: thread,
                metrics,
                control,
                state: ExecutionState::Deploying,
                final_report: None,
            },
        );
        Ok(())
    }
}
