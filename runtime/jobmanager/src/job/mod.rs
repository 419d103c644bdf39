//! One job on the JobManager (Flink's JobMaster + DefaultScheduler): the scheduling core's graph,
//! regions and strategy, the executions' locations, and the reactions to events. Synchronous: every
//! event returns the [`Action`]s to carry out (deploy, cancel, release, restart later), which the async
//! driver in `server.rs` performs. That keeps this file testable without processes or clocks.

use std::collections::BTreeMap;
use std::time::Duration;

use floe_datastream::JobArgs;
use floe_scheduler::execution_graph::ExecutionVertexId;
use floe_scheduler::slots::{self, SlotId};
use floe_scheduler::{
    ExecutionGraph, ExecutionState, JobGraph, JobStatus, PartitionId, PipelinedRegionSchedulingStrategy,
    PipelinedRegions, failover,
};
use floe_shuffle::{
    InputChannelSpec, PartitionKind, PartitionStats, ResultPartitionId, ShuffleMaster,
    TaskManagerShuffleMaster,
};

use crate::checkpoints::{JobCheckpoints, Subsumed};
use crate::error::{Error, Result};
use floe_checkpoint::{CompletedCheckpoint, TaskSnapshot};

mod adaptive;
mod autoscale;
mod checkpoint;
mod config;
mod reports;
mod rescale;
mod restart;
mod savepoint;

pub use adaptive::VertexDecision;
pub use autoscale::{JobAutoscaler, ScalingDecision, TaskRates};
pub use checkpoint::CheckpointTrigger;
use config::checkpoint_config;
pub use config::{
    ADAPTIVE_PREFIX, AUTOSCALER_PREFIX, AdaptiveScheduler, ExponentialDelay, RESTART_STRATEGY_KEY,
    RestartStrategy, SCHEDULER_KEY, SLOT_REQUEST_TIMEOUT_KEY, adaptive_decider, adaptive_scheduler,
    duration_setting, no_resource_available, parse_duration, validate_configuration,
};
pub use rescale::{ParallelismBounds, Rescale};
pub use restart::{FailureEpisode, RestartBackoff, RestartDecision};
pub use savepoint::{
    IGNORE_UNCLAIMED_KEY, RECOVERY_PATH_KEY, SAVEPOINT_DIR_KEY, SavepointRequest, SavepointStatus,
    Savepoints, StateRecovery, state_recovery,
};

/// How long a restart waits for slots when a lost TaskManager left none (Flink's
/// `slot.request.timeout` for a restart; the JobManager's initial wait is configured separately).
const SLOT_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// One attempt of one subtask of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptId {
    pub job_id: String,
    pub vertex: ExecutionVertexId,
    pub attempt: u64,
}

/// A TaskManager slot a job placed an execution slot sharing group in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRef {
    pub taskmanager: String,
    pub address: String,
    pub slot: u32,
}

/// One output of a deployed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSpec {
    pub partition: ResultPartitionId,
    pub num_subpartitions: u32,
    pub kind: PartitionKind,
}

/// Everything a TaskManager needs to run one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub id: AttemptId,
    pub job: JobArgs,
    pub fingerprint: String,
    /// Per vertex input, in input order: the channels to read.
    pub inputs: Vec<Vec<InputChannelSpec>>,
    /// Per vertex output, in output order.
    pub outputs: Vec<OutputSpec>,
    /// The checkpoint this attempt restores from, and its snapshot in it.
    pub restore: Option<(u64, floe_checkpoint::SubtaskRestore)>,
    /// Subtasks of its vertex (decided at run time, or the graph's).
    pub parallelism: u32,
}

/// What the driver must do after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Deploy {
        taskmanager: String,
        address: String,
        deployment: Box<Deployment>,
    },
    Cancel {
        address: String,
        id: AttemptId,
    },
    Release {
        job_id: String,
        addresses: Vec<String>,
    },
    /// Call [`JobMaster::restart`] with these subtasks after the delay.
    RestartAfter {
        job_id: String,
        delay: Duration,
        vertices: Vec<ExecutionVertexId>,
    },
    /// Every task acknowledged (or finished with its end state): write the metadata, log it, then
    /// [`JobMaster::checkpoint_completed`]. Its completion time is the server's clock.
    CompleteCheckpoint(Box<CompletedCheckpoint>),
    /// Parallelism decided for vertices of an adaptive batch job: stamp, log, then
    /// [`JobMaster::apply_decisions`].
    DecideParallelism {
        job_id: String,
        decisions: Vec<VertexDecision>,
    },
}

/// Per-subtask counters reported by TaskManagers, cumulative since the attempt began to run:
/// records, and nanoseconds waiting for input (idle), for output buffers (backpressured) and
/// running in all; a source's pending records when it knows them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TaskCounters {
    pub records_in: u64,
    pub records_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub idle_ns: u64,
    pub backpressured_ns: u64,
    pub running_ns: u64,
    pub pending_records: Option<u64>,
    /// The subtask's current watermark (event-time jobs), once it has one.
    pub current_watermark: Option<i64>,
    /// Records its window operator dropped as late (Flink's `numLateRecordsDropped`).
    pub late_records_dropped: u64,
    /// How full its input and output buffers were at the last report (0..1).
    pub in_pool_usage: Option<f64>,
    pub out_pool_usage: Option<f64>,
}

/// The wall clock (ms since the epoch) for the times people read in the exception and checkpoint
/// histories, where the job's caller gave it no `now`: no decision depends on it.
pub(crate) fn history_now_ms() -> u64 {
    crate::server::now_ms()
}

/// Failures `GET /jobs/{id}/exceptions` keeps.
pub const EXCEPTION_HISTORY: usize = 64;

/// One failure of a job (Flink's exception history entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobException {
    pub timestamp_ms: u64,
    pub cause: String,
    /// The tasks that failed together (`vertex#subtask`).
    pub tasks: Vec<String>,
    /// Where they ran.
    pub taskmanagers: Vec<String>,
}

/// One job's scheduling state and its reactions to events.
#[derive(Debug)]
pub struct JobMaster {
    pub id: String,
    pub args: JobArgs,
    pub fingerprint: String,
    pub status: JobStatus,
    pub failure: Option<String>,
    /// The failures the job went through, oldest first (the last [`EXCEPTION_HISTORY`]): what
    /// `GET /jobs/{id}/exceptions` shows.
    pub exceptions: std::collections::VecDeque<JobException>,
    pub graph: ExecutionGraph,
    pub regions: PipelinedRegions,
    strategy: PipelinedRegionSchedulingStrategy,
    /// The restart strategy and the failures it counted.
    restart: RestartBackoff,
    /// Which later failures are part of the latest counted one (a TaskManager going away).
    episode: FailureEpisode,
    /// Failovers so far (every restart of some tasks, counted by the restart strategy or not).
    pub restarts: u32,
    shuffle: TaskManagerShuffleMaster,
    /// Execution slot sharing group of each subtask (by global index) and the slot each group is in.
    group_of_task: Vec<u32>,
    pub slot_of_group: Vec<SlotRef>,
    /// TaskManager of each subtask's current attempt, by global index.
    pub location: Vec<Option<SlotRef>>,
    pub counters: Vec<TaskCounters>,
    /// Counters of attempts that ended, so progress never goes backwards across restarts.
    pub finished_records: u64,
    /// `shuffle.remote.enabled`: blocking partitions go to object storage and outlive TaskManagers.
    pub remote_shuffle: bool,
    /// Executions an earlier JobManager saw finish, with what they produced (from the operation log);
    /// when scheduling reaches them they are marked finished instead of deployed.
    restored: BTreeMap<ExecutionVertexId, (u64, Vec<PartitionStats>)>,
    /// Executions marked finished from the log rather than run by this JobManager.
    pub restored_finished: std::collections::BTreeSet<ExecutionVertexId>,
    /// STREAMING with `execution.checkpointing.interval`.
    pub checkpoints: Option<JobCheckpoints>,
    /// The checkpoints the operation log records as completed: the only ones a restore may use.
    pub vouched_checkpoints: Vec<u64>,
    /// Executions the log shows finished whose partitions are on TaskManager disks: restored when a
    /// TaskManager reports holding them, until `holders_deadline_ms`.
    awaiting_holders: Vec<FinishedExecution>,
    holders_deadline_ms: u64,
    /// Where restored executions' local partitions are: (TaskManager, address).
    holders: BTreeMap<ExecutionVertexId, (String, String)>,
    /// The last checkpoint triggered and the restart count then: a checkpoint completing after a
    /// restart describes attempts that no longer run and must not become the latest.
    checkpoint_lineage: (u64, u32),
    /// Attempts deployed to a TaskManager that its last heartbeat did not list: failed if the next
    /// one does not list them either (one miss may be a heartbeat sent just before the deployment
    /// arrived).
    missing_once: std::collections::BTreeSet<(ExecutionVertexId, u64)>,
    /// A checkpoint whose completing log append is in flight (see `begin_checkpoint_completion`).
    checkpoint_completing: Option<u64>,
    /// Slot sharing groups whose TaskManager was lost when no other slot was free: placed again
    /// at the restart.
    unplaced: std::collections::BTreeSet<usize>,
    /// Attempts whose final report is being or was applied (see `claim_final_report`).
    final_reports: std::collections::BTreeSet<(ExecutionVertexId, u64)>,
    /// Restarts postponed in a row for want of slots.
    slot_waits: u32,
    /// The job's `slot.request.timeout`, if its configuration sets one (else the JobManager's).
    pub slot_request_timeout: Option<Duration>,
    /// The current attempt whose failure, about to be applied, no restart can fix.
    not_recoverable: Option<AttemptId>,
    /// The current attempt whose failure, about to be applied, followed its input's: a producer
    /// it read from stopped (that producer's own failure is the cause).
    followed_input: Option<AttemptId>,
    /// The job is failing for a failure that followed its input's, with why it was not restarted:
    /// the producer's own failure, when it arrives, becomes the job's failure instead (a consumer
    /// may notice a producer's end before the producer's report reaches the JobManager).
    failure_followed_input: Option<String>,
    /// Adaptive batch scheduling: the decider, when some vertex's parallelism is decided at run time.
    decider: Option<floe_scheduler::adaptive::AdaptiveBatchParallelismDecider>,
    /// Decisions applied, by vertex index.
    decisions: BTreeMap<u32, VertexDecision>,
    /// Each vertex's operators that own its state (by uid, from the built job): checkpoints record
    /// them and restores map state by them. Empty: by vertex id.
    pub state_owners: BTreeMap<String, floe_checkpoint::StateOwners>,
    /// Vertices whose decision is being logged.
    deciding: std::collections::BTreeSet<u32>,
    /// Input bytes of sources decided at run time (`None`: unknown), once measured.
    source_bytes: BTreeMap<u32, Option<u64>>,
    /// Parallelism bounds set through the resource requirements, by vertex index.
    requirements: BTreeMap<u32, ParallelismBounds>,
    /// A rescale whose restart is due: the parallelism per vertex, and when it was asked for.
    pending_rescale: Option<(Vec<u32>, u64)>,
    pub last_rescale: Option<Rescale>,
    /// `jobmanager.scheduler: adaptive`.
    pub adaptive_scheduler: Option<AdaptiveScheduler>,
    /// Each vertex's parallelism as the job declares it: its upper bound unless the resource
    /// requirements say otherwise.
    declared: Vec<u32>,
    /// When the job last started or rescaled (the adaptive scheduler's scaling interval).
    last_scaled_ms: u64,
    /// `job.autoscaler.enabled`: the autoscaler and its decisions.
    pub autoscaler: Option<JobAutoscaler>,
    /// The tasks' counters at two times a few seconds apart, for per-second rates.
    rate_samples: ((u64, Vec<TaskCounters>), (u64, Vec<TaskCounters>)),
    /// Savepoints asked for through the REST API.
    pub savepoints: Savepoints,
}

/// The execution slot sharing group of each subtask, by global index.
fn group_of_task(graph: &ExecutionGraph) -> Vec<u32> {
    let mut of_task = vec![0u32; graph.task_count()];
    for (g, group) in slots::execution_slot_sharing_groups(graph).iter().enumerate() {
        for &t in &group.tasks {
            of_task[graph.global_index(t)] = g as u32;
        }
    }
    of_task
}

/// Every task's name, and the sources' (tasks that read no input): who acknowledges checkpoints and
/// who gets their barriers.
fn checkpoint_tasks(graph: &ExecutionGraph) -> (Vec<String>, Vec<String>) {
    let tasks = graph
        .execution_vertices()
        .map(|e| graph.task_name(e.id))
        .collect();
    let sources = graph
        .execution_vertices()
        .filter(|e| e.consumed.is_empty())
        .map(|e| graph.task_name(e.id))
        .collect();
    (tasks, sources)
}

/// One execution that finished under an earlier JobManager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedExecution {
    pub vertex: u32,
    pub subtask: u32,
    pub attempt: u64,
    /// Bytes per subpartition of each produced partition, in produced order.
    pub produced: Vec<Vec<u64>>,
}

impl JobMaster {
    /// A job in CREATED, not yet placed, whose subtasks' first attempts are numbered `first_attempt`
    /// ([`floe_scheduler::execution_graph::first_attempt_of_epoch`] of this JobManager's epoch).
    pub fn new(
        id: String,
        args: JobArgs,
        job_graph: JobGraph,
        fingerprint: String,
        first_attempt: u64,
    ) -> Result<Self> {
        validate_configuration(&args.configuration)?;
        // Keys Floe does not read run the job as if unset: said where the job's logs are.
        for finding in floe_config::check(args.configuration.keys().map(String::as_str)) {
            tracing::warn!(job = %id, "{finding}");
        }
        let restart = RestartBackoff::new(RestartStrategy::from_configuration(&args.configuration)?);
        let slot_request_timeout = duration_setting(&args.configuration, SLOT_REQUEST_TIMEOUT_KEY)?;
        let remote_shuffle =
            floe_shuffle::remote_shuffle_enabled(&args.configuration).map_err(|e| match e {
                floe_shuffle::Error::Config { key, message } => Error::Config { key, message },
                other => Error::Config {
                    key: floe_shuffle::REMOTE_SHUFFLE_KEY.into(),
                    message: other.to_string(),
                },
            })?;
        let decider = if job_graph.is_adaptive() {
            job_graph.check_adaptive()?;
            Some(adaptive_decider(&args.configuration)?)
        } else {
            None
        };
        // Checked with the rest by `validate_configuration` above (it needs checkpointing).
        let adaptive_scheduler = adaptive_scheduler(&args.configuration)?;
        let autoscaler = config::autoscaler(&args.configuration)?
            .map(|c| JobAutoscaler::new(floe_scheduler::autoscaler::Autoscaler::new(c, 0)));
        let declared = job_graph.vertices().iter().map(|v| v.parallelism).collect();
        let graph = ExecutionGraph::with_first_attempt(job_graph, first_attempt);
        let regions = PipelinedRegions::compute(&graph);
        let strategy = PipelinedRegionSchedulingStrategy::new(&graph, &regions);
        let group_of_task = group_of_task(&graph);
        let n = graph.task_count();
        let checkpoint_config = checkpoint_config(&args.configuration)?;
        if checkpoint_config.is_some() && !args.configuration.contains_key(floe_storage::JOB_STORAGE_KEY) {
            return Err(Error::Config {
                key: floe_datastream::checkpoint::CHECKPOINT_INTERVAL_KEY.into(),
                message: format!(
                    "checkpoints need job storage: set spec.storage.url (or {})",
                    floe_storage::JOB_STORAGE_KEY
                ),
            });
        }
        let checkpoints = checkpoint_config.map(|config| {
            let (tasks, sources) = checkpoint_tasks(&graph);
            JobCheckpoints::new(&id, config, tasks, sources)
        });
        Ok(JobMaster {
            id,
            args,
            fingerprint,
            status: JobStatus::Created,
            failure: None,
            graph,
            regions,
            strategy,
            restart,
            episode: FailureEpisode::default(),
            restarts: 0,
            exceptions: std::collections::VecDeque::new(),
            shuffle: TaskManagerShuffleMaster::default(),
            group_of_task,
            slot_of_group: Vec::new(),
            location: vec![None; n],
            counters: vec![TaskCounters::default(); n],
            finished_records: 0,
            remote_shuffle,
            restored: BTreeMap::new(),
            restored_finished: std::collections::BTreeSet::new(),
            checkpoints,
            vouched_checkpoints: Vec::new(),
            awaiting_holders: Vec::new(),
            holders_deadline_ms: 0,
            holders: BTreeMap::new(),
            checkpoint_lineage: (0, 0),
            state_owners: BTreeMap::new(),
            missing_once: std::collections::BTreeSet::new(),
            checkpoint_completing: None,
            unplaced: std::collections::BTreeSet::new(),
            final_reports: std::collections::BTreeSet::new(),
            slot_waits: 0,
            slot_request_timeout,
            not_recoverable: None,
            followed_input: None,
            failure_followed_input: None,
            decider,
            decisions: BTreeMap::new(),
            deciding: std::collections::BTreeSet::new(),
            source_bytes: BTreeMap::new(),
            requirements: BTreeMap::new(),
            pending_rescale: None,
            last_rescale: None,
            adaptive_scheduler,
            declared,
            last_scaled_ms: 0,
            autoscaler,
            rate_samples: Default::default(),
            savepoints: Savepoints::default(),
        })
    }

    /// A checkpointing job starts once its job storage was read for an earlier checkpoint; a resumed
    /// one with local partitions once TaskManagers reported them all or the reconnect window closed.
    pub fn ready_to_start(&self, now_ms: u64) -> bool {
        let holders_known = self.awaiting_holders.is_empty() || now_ms >= self.holders_deadline_ms;
        let sources_measured = self
            .undecided_sources()
            .iter()
            .all(|v| self.source_bytes.contains_key(v));
        holders_known && sources_measured && self.checkpoints.as_ref().is_none_or(|c| c.ready)
    }

    /// A TaskManager (re)registered holding these finished partitions: executions the log shows
    /// finished whose every partition it holds (same attempt) are not run again.
    pub fn partitions_held(
        &mut self,
        taskmanager: &str,
        address: &str,
        held: &[(ResultPartitionId, PartitionStats)],
    ) {
        if self.status != JobStatus::Created || self.awaiting_holders.is_empty() {
            return;
        }
        let held: BTreeMap<&ResultPartitionId, &PartitionStats> =
            held.iter().map(|(id, s)| (id, s)).collect();
        let mut still = Vec::new();
        for f in std::mem::take(&mut self.awaiting_holders) {
            let v = ExecutionVertexId::new(f.vertex, f.subtask);
            let ids: Vec<ResultPartitionId> = self
                .graph
                .produced_partitions(v)
                .map(|p| ResultPartitionId {
                    job_id: self.id.clone(),
                    result: p.result.0,
                    partition: p.partition,
                    attempt: f.attempt,
                })
                .collect();
            let stats: Option<Vec<PartitionStats>> =
                ids.iter().map(|id| held.get(id).map(|s| (*s).clone())).collect();
            match stats {
                Some(stats) if !ids.is_empty() && self.graph.restore_attempt(v, f.attempt).is_ok() => {
                    self.restored.insert(v, (f.attempt, stats));
                    self.holders
                        .insert(v, (taskmanager.to_string(), address.to_string()));
                }
                _ => still.push(f),
            }
        }
        self.awaiting_holders = still;
    }

    /// Takes over executions that finished under an earlier JobManager: they will not run again.
    /// With remote shuffle their partitions outlive every process and are restored now; local ones
    /// as TaskManagers report holding them. A restored subtask keeps its logged attempt number (its
    /// partitions are named by it); the others run under this JobManager's attempt numbers.
    pub fn restore_finished(&mut self, finished: &[FinishedExecution], holders_deadline_ms: u64) -> usize {
        if !self.remote_shuffle {
            self.awaiting_holders = finished
                .iter()
                .filter(|f| {
                    let v = ExecutionVertexId::new(f.vertex, f.subtask);
                    self.graph.contains(v) && self.graph.produced_partitions(v).next().is_some()
                })
                .cloned()
                .collect();
            self.holders_deadline_ms = holders_deadline_ms;
            return 0;
        }
        for f in finished {
            let v = ExecutionVertexId::new(f.vertex, f.subtask);
            if self.graph.restore_attempt(v, f.attempt).is_ok() {
                let stats = f
                    .produced
                    .iter()
                    .map(|b| PartitionStats {
                        bytes_per_subpartition: b.clone(),
                    })
                    .collect();
                self.restored.insert(v, (f.attempt, stats));
            }
        }
        self.restored.len()
    }

    /// Whether the subtask's results are blocking (kept after it finished, so worth logging).
    pub fn produces_blocking(&self, v: ExecutionVertexId) -> bool {
        self.graph
            .produced_partitions(v)
            .any(|p| self.graph.result(p.result).partition_type.is_blocking())
    }

    /// Gives the job a slot for each of its first `groups` execution slot sharing groups: slots
    /// it lacks (its cluster is smaller than when it was decided or asked for) are shared, round
    /// robin, with the ones it has.
    fn share_slots(&mut self, groups: usize) {
        let have = self.slot_of_group.len();
        if have == 0 {
            return;
        }
        for k in have..groups {
            let slot = self.slot_of_group[k % have].clone();
            self.slot_of_group.push(slot);
        }
    }

    /// Slots the job needs (slot sharing).
    pub fn slots_needed(&self) -> usize {
        self.group_of_task
            .iter()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1)
    }

    /// Places the job on free slots and starts it (CREATED → RUNNING, source regions deployed).
    /// `free` lists free slots TaskManager by TaskManager.
    pub fn start(&mut self, free: &[SlotRef]) -> Result<Vec<Action>> {
        // The adaptive scheduler runs the job at what the free slots allow.
        if self.adaptive_scheduler.is_some() && !free.is_empty() {
            let target = self.target_parallelism(free.len() as u32);
            let current: Vec<u32> = self.graph.job_vertices().iter().map(|v| v.parallelism).collect();
            if target != current {
                self.regraph(&target)?;
            }
        }
        let needed = self.slots_needed();
        if free.len() < needed {
            return Err(floe_scheduler::Error::NotEnoughSlots {
                needed,
                available: free.len(),
            }
            .into());
        }
        // Adaptive batch: a job whose every vertex is decided at run time starts on one slot and
        // takes more as its decisions need them (never more than it can hold).
        let take = match self.decider {
            Some(_) => needed.max(1),
            None => needed,
        };
        if take > free.len() {
            return Err(floe_scheduler::Error::NotEnoughSlots {
                needed: 1,
                available: 0,
            }
            .into());
        }
        self.slot_of_group = free[..take].to_vec();
        self.status = self.status.transition(JobStatus::Running)?;
        let deploy = self.strategy.start_scheduling(&self.graph, &self.regions);
        let mut actions = self.deploy(&deploy);
        actions.extend(self.propose_decisions(&free[take..]));
        Ok(actions)
    }

    /// Total number of subtasks and those whose current attempt finished.
    pub fn progress(&self) -> (usize, usize) {
        let finished = self
            .graph
            .execution_vertices()
            .filter(|v| v.current.state == ExecutionState::Finished)
            .count();
        (self.graph.task_count(), finished)
    }

    /// Records processed so far, over all attempts: what every subtask read (sources count the
    /// records they read from outside).
    pub fn records_processed(&self) -> u64 {
        self.finished_records + self.counters.iter().map(|c| c.records_in).sum::<u64>()
    }

    fn attempt_id(&self, v: ExecutionVertexId) -> AttemptId {
        AttemptId {
            job_id: self.id.clone(),
            vertex: v,
            attempt: self
                .graph
                .execution_vertex(v)
                .map(|e| e.current.attempt)
                .unwrap_or(0),
        }
    }

    fn partition_id(&self, p: PartitionId) -> ResultPartitionId {
        let producer = self.graph.producer_of(p);
        ResultPartitionId {
            job_id: self.id.clone(),
            result: p.result.0,
            partition: p.partition,
            attempt: self.attempt_id(producer).attempt,
        }
    }

    /// Moves subtasks to DEPLOYING and describes their deployments. Outputs of the whole batch are
    /// registered first, so pipelined consumers in the same region find their producers.
    fn deploy(&mut self, vertices: &[ExecutionVertexId]) -> Vec<Action> {
        for &v in vertices {
            let global = self.graph.global_index(v);
            let slot = self.slot_of_group[self.group_of_task[global] as usize].clone();
            for state in [ExecutionState::Scheduled, ExecutionState::Deploying] {
                if let Err(e) = self.graph.transition(v, state) {
                    tracing::error!("deploy {}: {e}", self.graph.task_name(v));
                }
            }
            // A restored execution's local partitions are where the TaskManager that holds them is.
            let (holder, holder_address) = match self.holders.get(&v) {
                Some((tm, address)) => (tm.clone(), address.clone()),
                None => (slot.taskmanager.clone(), slot.address.clone()),
            };
            for p in self.graph.produced_partitions(v).collect::<Vec<_>>() {
                let kind = self.partition_kind(p.result);
                let address = match kind {
                    PartitionKind::Remote => floe_shuffle::OBJECT_STORAGE_ADDRESS.to_string(),
                    _ => holder_address.clone(),
                };
                let id = self.partition_id(p);
                self.shuffle.register_partition(id, holder.clone(), address, kind);
            }
            self.location[global] = Some(slot);
            self.counters[global] = TaskCounters::default();
        }
        let (restored, to_deploy): (Vec<ExecutionVertexId>, Vec<ExecutionVertexId>) =
            vertices.iter().partition(|v| self.restored.contains_key(v));
        let mut actions: Vec<Action> = to_deploy
            .iter()
            .map(|&v| {
                let slot = self.location[self.graph.global_index(v)]
                    .clone()
                    .unwrap_or_else(|| self.slot_of_group[0].clone());
                Action::Deploy {
                    taskmanager: slot.taskmanager,
                    address: slot.address,
                    deployment: Box::new(self.deployment(v)),
                }
            })
            .collect();
        // Finished under an earlier JobManager: report the finish it logged, as its TaskManager did.
        for v in restored {
            let Some((_, produced)) = self.restored.remove(&v) else {
                continue;
            };
            self.restored_finished.insert(v);
            let id = self.attempt_id(v);
            for state in [ExecutionState::Initializing, ExecutionState::Running] {
                let _ = self.graph.transition(v, state);
            }
            actions.extend(self.on_task_state(&id, ExecutionState::Finished, None, produced, None));
        }
        actions
    }

    /// How a result's partitions are exchanged: pipelined, or blocking on the TaskManager, or
    /// blocking in object storage when remote shuffle is on.
    fn partition_kind(&self, result: floe_scheduler::job_graph::ResultIndex) -> PartitionKind {
        match (
            self.graph.result(result).partition_type.is_blocking(),
            self.remote_shuffle,
        ) {
            (false, _) => PartitionKind::Pipelined,
            (true, false) => PartitionKind::Blocking,
            (true, true) => PartitionKind::Remote,
        }
    }

    fn deployment(&self, v: ExecutionVertexId) -> Deployment {
        let ev = self.graph.execution_vertex(v).expect("known vertex");
        let inputs = ev
            .consumed
            .iter()
            .map(|&g| {
                let group = self.graph.group(g);
                let subpartitions = self.graph.consumed_subpartitions(v, g);
                group
                    .partitions
                    .clone()
                    .map(|p| {
                        let id = self.partition_id(PartitionId {
                            result: group.result,
                            partition: p,
                        });
                        let address = self.shuffle.location(&id).unwrap_or_default().to_string();
                        InputChannelSpec {
                            partition: id,
                            address,
                            subpartitions: subpartitions.clone(),
                        }
                    })
                    .collect()
            })
            .collect();
        let outputs = self
            .graph
            .produced_partitions(v)
            .map(|p| OutputSpec {
                partition: self.partition_id(p),
                num_subpartitions: self.graph.num_subpartitions(p),
                kind: self.partition_kind(p.result),
            })
            .collect();
        Deployment {
            id: self.attempt_id(v),
            job: self.args.clone(),
            fingerprint: self.fingerprint.clone(),
            inputs,
            outputs,
            restore: self.checkpoints.as_ref().and_then(|c| {
                let vertex = self.graph.job_graph().vertex(v.vertex);
                let parallelism = self.graph.job_vertex(v.vertex).parallelism;
                let owners = self.state_owners.get(&vertex.id);
                c.restore_for(&vertex.id, owners, v.subtask, parallelism, vertex.max_parallelism)
            }),
            parallelism: self.graph.job_vertex(v.vertex).parallelism,
        }
    }

    fn is_current(&self, id: &AttemptId) -> bool {
        id.job_id == self.id
            && self
                .graph
                .execution_vertex(id.vertex)
                .map(|e| e.current.attempt == id.attempt)
                .unwrap_or(false)
    }

    /// The TaskManager this JobMaster deployed `id` to, if `id` is the current attempt and deployed.
    pub fn deployed_on(&self, id: &AttemptId) -> Option<&str> {
        if !self.is_current(id) {
            return None;
        }
        self.location[self.graph.global_index(id.vertex)]
            .as_ref()
            .map(|slot| slot.taskmanager.as_str())
    }

    /// A TaskManager reported a state change. Reports about earlier attempts are ignored.
    pub fn on_task_state(
        &mut self,
        id: &AttemptId,
        state: ExecutionState,
        error: Option<String>,
        produced: Vec<PartitionStats>,
        counters: Option<TaskCounters>,
    ) -> Vec<Action> {
        if !self.is_current(id) {
            return Vec::new();
        }
        let v = id.vertex;
        let global = self.graph.global_index(v);
        if let Some(c) = counters {
            self.counters[global] = c;
        }
        let current = self
            .graph
            .execution_vertex(v)
            .map(|e| e.current.state)
            .unwrap_or(ExecutionState::Failed);
        if state == ExecutionState::Failed {
            self.prefer_root_cause(id, error.as_deref());
        }
        if current.is_terminal() {
            return Vec::new();
        }
        match state {
            ExecutionState::Initializing | ExecutionState::Running => {
                if let Err(e) = self.graph.transition(v, state) {
                    tracing::warn!("{e}");
                }
                Vec::new()
            }
            ExecutionState::Finished => {
                if let Err(e) = self.graph.transition(v, ExecutionState::Finished) {
                    return self.on_failure(&[v], format!("bad report: {e}"));
                }
                // Its inputs ended: the pending checkpoint's barrier will not reach it. Its end
                // state stands for its acknowledgement (FLIP-147).
                let task = self.graph.task_name(v);
                let mut completed = None;
                if let Some(c) = self.checkpoints.as_mut() {
                    completed = c.task_finished(&task, history_now_ms());
                }
                let partitions: Vec<PartitionId> = self.graph.produced_partitions(v).collect();
                for (p, stats) in partitions.iter().zip(
                    produced
                        .into_iter()
                        .chain(std::iter::repeat_with(PartitionStats::default)),
                ) {
                    let rid = self.partition_id(*p);
                    self.shuffle.mark_finished(&rid, stats);
                }
                if self.status != JobStatus::Running {
                    return self.maybe_terminal();
                }
                let next = self.strategy.on_execution_finished(&self.graph, &self.regions, v);
                let mut actions = self.deploy(&next);
                actions.extend(
                    completed.map(|c| Action::CompleteCheckpoint(Box::new(self.with_vertex_metadata(c)))),
                );
                if self.fully_decided()
                    && self
                        .graph
                        .execution_vertices()
                        .all(|e| e.current.state == ExecutionState::Finished)
                {
                    self.status = JobStatus::Finished;
                    actions.extend(self.release());
                }
                actions
            }
            ExecutionState::Canceled => {
                let _ = self.graph.transition(v, ExecutionState::Canceled);
                self.maybe_terminal()
            }
            ExecutionState::Failed => {
                let cause = error.unwrap_or_else(|| "task failed".into());
                let cause = format!("{} failed: {cause}", self.graph.task_name(v));
                let recoverable = self.not_recoverable.take().as_ref() != Some(id);
                let followed_input = self.followed_input.take().as_ref() == Some(id);
                self.on_failure_of(&[v], cause, recoverable, followed_input)
            }
            _ => Vec::new(),
        }
    }

    /// Live counters from a heartbeat (ignored for attempts that are not current).
    pub fn update_counters(&mut self, id: &AttemptId, counters: TaskCounters) {
        if self.is_current(id) {
            let global = self.graph.global_index(id.vertex);
            if !self
                .graph
                .execution_vertex(id.vertex)
                .map(|e| e.current.state.is_terminal())
                .unwrap_or(true)
            {
                self.counters[global] = counters;
            }
        }
    }

    /// A TaskManager is gone: executions there fail, its partitions are unavailable, and its slots are
    /// replaced by free ones (or shared with surviving slots when none is free).
    /// A TaskManager whose tasks' failures the restart strategy counted already (it reported
    /// them failed as it shut down, or their consumers failed when it died) is not counted again.
    pub fn on_taskmanager_lost(&mut self, tm: &str, free: &[SlotRef]) -> Vec<Action> {
        let lost = self.shuffle.taskmanager_lost(tm);
        let lost_producers = self.partitions_gone(&lost);
        let running_there: Vec<(ExecutionVertexId, u64, ExecutionState)> = self
            .graph
            .execution_vertices()
            .filter(|e| !e.current.state.is_terminal())
            .filter(|e| {
                self.location[self.graph.global_index(e.id)]
                    .as_ref()
                    .is_some_and(|s| s.taskmanager == tm)
            })
            .map(|e| (e.id, e.current.attempt, e.current.state))
            .collect();
        let joins = self.episode.joins_loss(tm, &running_there);
        if let Some(actions) = self.rescale_after_loss(tm, free, joins) {
            return actions;
        }
        let survivors: Vec<SlotRef> = self
            .slot_of_group
            .iter()
            .filter(|s| s.taskmanager != tm)
            .cloned()
            .collect();
        let mut spare = free
            .iter()
            .filter(|s| s.taskmanager != tm)
            .cloned()
            .collect::<Vec<_>>()
            .into_iter();
        let mut k = 0;
        for (group, slot) in self.slot_of_group.iter_mut().enumerate() {
            if slot.taskmanager == tm {
                *slot = match spare.next() {
                    Some(s) => s,
                    None if !survivors.is_empty() => {
                        k += 1;
                        survivors[(k - 1) % survivors.len()].clone()
                    }
                    // No slot anywhere now: placed again when the restart comes (a TaskManager
                    // may have registered by then, such as this one's restarted process).
                    None => {
                        self.unplaced.insert(group);
                        slot.clone()
                    }
                };
            }
        }
        let mut victims: Vec<ExecutionVertexId> = running_there.iter().map(|(v, _, _)| *v).collect();
        // Finished producers whose output went with the TaskManager and is still to be read: they
        // run again (with their consumers), as Flink restarts the producer of a lost partition.
        victims.extend(lost_producers);
        if victims.is_empty() {
            return Vec::new();
        }
        // One lost TaskManager is one failure for the restart strategy, however many tasks it ran,
        // and none when it joins the failure its going away caused already.
        self.fail_over(
            &victims,
            format!("TaskManager {tm} was lost (heartbeat timed out)"),
            true,
            joins,
            Some(tm),
            false,
        )
    }

    /// Partitions whose data is gone: no consumer is scheduled on them until produced again.
    /// Returns the finished producers among them that some unfinished consumer still needs.
    pub(crate) fn partitions_gone(&mut self, lost: &[ResultPartitionId]) -> Vec<ExecutionVertexId> {
        let mut gone = Vec::new();
        for id in lost.iter().filter(|p| p.job_id == self.id) {
            let p = PartitionId {
                result: floe_scheduler::job_graph::ResultIndex(id.result),
                partition: id.partition,
            };
            let current = self.partition_id(p);
            if current.attempt == id.attempt && self.graph.results().len() > id.result as usize {
                gone.push(p);
            }
        }
        self.strategy.partitions_lost(&self.graph, &gone);
        let mut producers = Vec::new();
        for p in gone {
            let producer = self.graph.producer_of(p);
            let finished = self
                .graph
                .execution_vertex(producer)
                .is_ok_and(|e| e.current.state == ExecutionState::Finished);
            let group = self.graph.group(self.graph.group_of(p));
            let needed = group.consumers.clone().any(|c| {
                self.graph
                    .execution_vertex(ExecutionVertexId {
                        vertex: group.consumer,
                        subtask: c,
                    })
                    .is_ok_and(|e| e.current.state != ExecutionState::Finished)
            });
            if finished && needed && !producers.contains(&producer) {
                producers.push(producer);
            }
        }
        producers
    }

    /// The TaskManager said attempt `id` failed for a reason no restart can fix (Flink's
    /// non-recoverable errors): its failure report, applied next, fails the whole job.
    pub fn next_failure_is_not_recoverable(&mut self, id: &AttemptId) {
        if self.is_current(id) {
            self.not_recoverable = Some(id.clone());
        }
    }

    /// A job failing (or failed) for a failure that only followed its input's takes the first
    /// failure of a task's own that is reported after it: the producer's, whose report came late
    /// (its task was cancelled by then, so the report changes nothing else).
    fn prefer_root_cause(&mut self, id: &AttemptId, error: Option<&str>) {
        if self.followed_input.as_ref() == Some(id)
            || !matches!(self.status, JobStatus::Failing | JobStatus::Failed)
        {
            return;
        }
        if let Some(why) = self.failure_followed_input.take() {
            let task = self.graph.task_name(id.vertex);
            self.failure = Some(format!(
                "{task} failed: {} ({why})",
                error.unwrap_or("task failed")
            ));
        }
    }

    /// The TaskManager marked the next failure of `id` as following its input's (a producer it
    /// read from stopped): not the job's cause when the producer's own failure comes.
    pub fn next_failure_followed_its_input(&mut self, id: &AttemptId) {
        if self.is_current(id) {
            self.followed_input = Some(id.clone());
        }
    }

    /// Region failover for executions that failed together, or the end of the job when the restart
    /// strategy is exhausted.
    fn on_failure(&mut self, failed: &[ExecutionVertexId], cause: String) -> Vec<Action> {
        self.on_failure_of(failed, cause, true, false)
    }

    /// [`JobMaster::on_failure`]; a failure that is not `recoverable` ends the job at once;
    /// `followed_input`: the failure followed its input's (see [`JobMaster::fail_over`]).
    fn on_failure_of(
        &mut self,
        failed: &[ExecutionVertexId],
        cause: String,
        recoverable: bool,
        followed_input: bool,
    ) -> Vec<Action> {
        let joins = self.episode.joins_tasks(&self.taskmanagers_of(failed));
        self.fail_over(failed, cause, recoverable, joins, None, followed_input)
    }

    /// Where these executions' current attempts run (or ran).
    fn taskmanagers_of(&self, executions: &[ExecutionVertexId]) -> std::collections::BTreeSet<String> {
        executions
            .iter()
            .filter_map(|&v| self.location[self.graph.global_index(v)].as_ref())
            .map(|s| s.taskmanager.clone())
            .collect()
    }

    /// The failover of executions that failed together. `joins`: the failure is part of the
    /// restart strategy's latest counted one ([`FailureEpisode`]); `lost`: the TaskManager whose
    /// loss it is; `followed_input`: a task's failure that followed its input's (a producer it
    /// read stopped), which gives way to the producer's own as the job's failure if that comes.
    fn fail_over(
        &mut self,
        failed: &[ExecutionVertexId],
        cause: String,
        recoverable: bool,
        joins: bool,
        lost: Option<&str>,
        followed_input: bool,
    ) -> Vec<Action> {
        if let Some(c) = self.checkpoints.as_mut() {
            c.abort(None, &cause, history_now_ms());
        }
        for &v in failed {
            let _ = self.graph.transition(v, ExecutionState::Failed);
            let global = self.graph.global_index(v);
            self.finished_records += self.counters[global].records_in;
            self.counters[global] = TaskCounters::default();
        }
        if self.status != JobStatus::Running {
            return self.maybe_terminal();
        }
        tracing::warn!(job = %self.id, "{cause}");
        if self.exceptions.len() == EXCEPTION_HISTORY {
            self.exceptions.pop_front();
        }
        self.exceptions.push_back(JobException {
            timestamp_ms: history_now_ms(),
            cause: cause.clone(),
            tasks: failed.iter().map(|&v| self.graph.task_name(v)).collect(),
            taskmanagers: failed
                .iter()
                .filter_map(|&v| self.location[self.graph.global_index(v)].as_ref())
                .map(|s| s.taskmanager.clone())
                .collect(),
        });
        let decision = if recoverable {
            self.restart
                .on_failure(history_now_ms(), joins, restart::draw_jitter())
        } else {
            RestartDecision::Fail("not recoverable: the job failed without restarting".into())
        };
        let delay = match decision {
            RestartDecision::Restart { delay, counted } => {
                let taskmanagers = self.taskmanagers_of(failed);
                if counted {
                    self.episode.begin(taskmanagers);
                } else {
                    tracing::info!(job = %self.id, "the failure is part of the one being restarted: not counted again");
                    self.episode.join(taskmanagers, lost);
                }
                delay
            }
            RestartDecision::Fail(why) => {
                self.failure = Some(format!("{cause} ({why})"));
                self.failure_followed_input = followed_input.then_some(why);
                self.status = JobStatus::Failing;
                let mut actions = self.cancel_all();
                actions.extend(self.maybe_terminal());
                return actions;
            }
        };
        self.restarts += 1;
        let shuffle = &self.shuffle;
        let graph = &self.graph;
        let id = &self.id;
        // A partition is lost when it was produced and its data is gone (its TaskManager died), or its
        // producer failed. One whose producer is still on its way will be produced: not lost.
        let is_available = |p: PartitionId| {
            let Ok(producer) = graph.execution_vertex(graph.producer_of(p)) else {
                return false;
            };
            match producer.current.state {
                ExecutionState::Finished => shuffle.is_available(&ResultPartitionId {
                    job_id: id.clone(),
                    result: p.result.0,
                    partition: p.partition,
                    attempt: producer.current.attempt,
                }),
                state => !state.is_terminal(),
            }
        };
        let restart: Vec<ExecutionVertexId> = failed
            .iter()
            .flat_map(|&v| failover::tasks_to_restart(graph, &self.regions, v, is_available))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut actions = Vec::new();
        for &r in &restart {
            actions.extend(self.cancel_execution(r));
        }
        actions.push(Action::RestartAfter {
            job_id: self.id.clone(),
            delay,
            vertices: restart,
        });
        actions
    }

    /// Stops one execution: deployed ones are told to cancel; the JobManager does not wait for the
    /// report (a later report of the old attempt is ignored).
    fn cancel_execution(&mut self, v: ExecutionVertexId) -> Vec<Action> {
        let state = match self.graph.execution_vertex(v) {
            Ok(e) => e.current.state,
            Err(_) => return Vec::new(),
        };
        if state.is_terminal() {
            return Vec::new();
        }
        let mut actions = Vec::new();
        let global = self.graph.global_index(v);
        if matches!(
            state,
            ExecutionState::Deploying | ExecutionState::Initializing | ExecutionState::Running
        ) {
            let _ = self.graph.transition(v, ExecutionState::Canceling);
            if let Some(slot) = &self.location[global] {
                actions.push(Action::Cancel {
                    address: slot.address.clone(),
                    id: self.attempt_id(v),
                });
            }
        }
        let _ = self.graph.transition(v, ExecutionState::Canceled);
        self.finished_records += self.counters[global].records_in;
        self.counters[global] = TaskCounters::default();
        actions
    }

    fn cancel_all(&mut self) -> Vec<Action> {
        let live: Vec<ExecutionVertexId> = self
            .graph
            .execution_vertices()
            .filter(|e| !e.current.state.is_terminal())
            .map(|e| e.id)
            .collect();
        live.into_iter().flat_map(|v| self.cancel_execution(v)).collect()
    }

    /// The restart delay passed: new attempts for the subtasks, deployed as their inputs allow.
    pub fn restart(&mut self, vertices: &[ExecutionVertexId], free: &[SlotRef], now_ms: u64) -> Vec<Action> {
        if self.status != JobStatus::Running {
            return Vec::new();
        }
        if self.pending_rescale.is_some() {
            // As a restart: a checkpoint being logged is the one to restore from.
            if self.checkpoint_completing.is_some() {
                return vec![Action::RestartAfter {
                    job_id: self.id.clone(),
                    delay: Duration::from_millis(20),
                    vertices: vertices.to_vec(),
                }];
            }
            if let Some((target, requested_ms)) = self.pending_rescale.take() {
                self.episode.restarted(std::iter::empty());
                return self.apply_rescale(target, requested_ms, free, now_ms);
            }
        }
        // Slots of a lost TaskManager that had no replacement then: place them now, or wait.
        if !self.unplaced.is_empty() {
            if free.len() < self.unplaced.len() {
                let wait = self
                    .restart
                    .strategy()
                    .retry_delay()
                    .max(Duration::from_millis(100));
                self.slot_waits += 1;
                let limit = self.slot_request_timeout.unwrap_or(SLOT_WAIT_LIMIT);
                if wait * self.slot_waits > limit {
                    // Flink's NoResourceAvailableException after `slot.request.timeout`.
                    self.failure = Some(no_resource_available(self.unplaced.len(), free.len(), limit));
                    self.status = JobStatus::Failing;
                    let mut actions = self.cancel_all();
                    actions.extend(self.maybe_terminal());
                    return actions;
                }
                tracing::info!(job = %self.id, needed = self.unplaced.len(), free = free.len(), "restart waits for slots");
                return vec![Action::RestartAfter {
                    job_id: self.id.clone(),
                    delay: wait,
                    vertices: vertices.to_vec(),
                }];
            }
            self.slot_waits = 0;
            for (group, slot) in std::mem::take(&mut self.unplaced).into_iter().zip(free) {
                self.slot_of_group[group] = slot.clone();
            }
        }
        // A checkpoint is being logged: once logged it is the one to restore from, so the new
        // attempts wait for it rather than restore from the one before.
        if self.checkpoint_completing.is_some() {
            return vec![Action::RestartAfter {
                job_id: self.id.clone(),
                delay: Duration::from_millis(20),
                vertices: vertices.to_vec(),
            }];
        }
        if let Some(c) = self.checkpoints.as_mut() {
            c.restarting();
        }
        let mut fresh = Vec::new();
        for &v in vertices {
            match self.graph.new_attempt(v) {
                Ok(_) => fresh.push(v),
                Err(e) => tracing::warn!("restart {}: {e}", self.graph.task_name(v)),
            }
        }
        let attempts: Vec<(ExecutionVertexId, u64)> =
            fresh.iter().map(|&v| (v, self.attempt_id(v).attempt)).collect();
        self.episode.restarted(attempts);
        let next = self.strategy.restart(&self.graph, &self.regions, &fresh);
        self.deploy(&next)
    }

    /// A user's cancel (PATCH /jobs/{id}).
    pub fn cancel(&mut self) -> Result<Vec<Action>> {
        self.status = self.status.transition(JobStatus::Cancelling)?;
        if let Some(c) = self.checkpoints.as_mut() {
            c.abort(None, "the job was cancelled", history_now_ms());
        }
        let mut actions = self.cancel_all();
        actions.extend(self.maybe_terminal());
        Ok(actions)
    }

    /// Failing and cancelling end once every execution is terminal.
    fn maybe_terminal(&mut self) -> Vec<Action> {
        let all_terminal = self
            .graph
            .execution_vertices()
            .all(|e| e.current.state.is_terminal());
        if !all_terminal {
            return Vec::new();
        }
        let next = match self.status {
            JobStatus::Failing => JobStatus::Failed,
            JobStatus::Cancelling => JobStatus::Canceled,
            _ => return Vec::new(),
        };
        self.status = next;
        self.release()
    }

    fn release(&mut self) -> Vec<Action> {
        let addresses = self.shuffle.release_job(&self.id);
        vec![Action::Release {
            job_id: self.id.clone(),
            addresses,
        }]
    }

    /// Slots this job holds while it is not terminal.
    pub fn held_slots(&self) -> impl Iterator<Item = &SlotRef> {
        let live = !self.status.is_terminal();
        // A group waiting to be placed again holds nothing: its old slot may be offered anew by
        // the same TaskManager registering again.
        self.slot_of_group
            .iter()
            .enumerate()
            .filter(move |(group, _)| live && !self.unplaced.contains(group))
            .map(|(_, slot)| slot)
    }

    /// Slot placement as the scheduling core's SlotIds (TaskManagers numbered by first appearance).
    pub fn placement(&self) -> Vec<(SlotId, SlotRef)> {
        let mut tms: Vec<&str> = Vec::new();
        self.slot_of_group
            .iter()
            .map(|s| {
                let tm = tms.iter().position(|t| *t == s.taskmanager).unwrap_or_else(|| {
                    tms.push(&s.taskmanager);
                    tms.len() - 1
                });
                (
                    SlotId {
                        taskmanager: tm as u32,
                        slot: s.slot,
                    },
                    s.clone(),
                )
            })
            .collect()
    }

    /// Tasks placed in each of the job's slots, `vertex#subtask` (none before the job has slots).
    pub fn slot_tasks(&self) -> Vec<Vec<String>> {
        let mut out = vec![Vec::new(); self.slot_of_group.len()];
        for ev in self.graph.execution_vertices() {
            let group = self.group_of_task.get(self.graph.global_index(ev.id));
            if let Some(slot) = group.and_then(|&g| out.get_mut(g as usize)) {
                slot.push(self.graph.task_name(ev.id));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
