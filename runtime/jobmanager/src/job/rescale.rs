//! Rescaling a running streaming job (Flink's adaptive scheduler, FLIP-160, driven by the
//! resource requirements of FLIP-291): the job's per-vertex parallelism bounds change, it stops,
//! and every vertex starts again at the parallelism its bounds and the slots allow, restored from
//! the latest completed checkpoint with its state redistributed by key groups
//! ([`floe_checkpoint::redistribute`], the same mechanism a restart uses).

use std::collections::BTreeMap;
use std::time::Duration;

use floe_scheduler::job_graph::{Partitioner, VertexIndex};
use floe_scheduler::{ExecutionGraph, JobStatus, PipelinedRegionSchedulingStrategy, PipelinedRegions, slots};

use super::{Action, JobMaster, RestartDecision, SlotRef, TaskCounters, checkpoint_tasks};
use crate::error::{Error, Result};

/// A vertex's parallelism bounds (Flink's `JobVertexResourceRequirements.Parallelism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelismBounds {
    pub lower: u32,
    pub upper: u32,
}

/// The last rescale, for the REST API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescale {
    /// When the job stopped to rescale, and when its new tasks were deployed (ms since the epoch).
    pub requested_ms: u64,
    pub deployed_ms: u64,
    /// Parallelism per vertex before and after.
    pub from: Vec<u32>,
    pub to: Vec<u32>,
    /// The checkpoint the new tasks restore from (`None`: none was completed; from the start).
    pub checkpoint: Option<u64>,
}

impl JobMaster {
    /// Each vertex's bounds (by vertex id): as set, else 1 up to its declared parallelism.
    pub fn resource_requirements(&self) -> BTreeMap<String, ParallelismBounds> {
        self.graph
            .job_graph()
            .vertices()
            .iter()
            .enumerate()
            .map(|(i, v)| (v.id.clone(), self.bounds(i)))
            .collect()
    }

    /// New bounds for some vertices (the others keep theirs). Each vertex runs at its upper bound
    /// if the job's slots and the `free` ones allow, else at what they allow, never below its
    /// lower bound; vertices joined by forward edges need the same parallelism. When that changes
    /// any vertex's parallelism the job rescales: its tasks are cancelled now and started again
    /// (the returned actions) at the new parallelism, from the latest checkpoint.
    pub fn set_resource_requirements(
        &mut self,
        bounds: &BTreeMap<String, ParallelismBounds>,
        free: &[SlotRef],
        now_ms: u64,
    ) -> Result<Vec<Action>> {
        let invalid = |message: String| Error::Config {
            key: "resource-requirements".into(),
            message,
        };
        if self.status != JobStatus::Running {
            return Err(invalid(format!("the job is {}, not RUNNING", self.status)));
        }
        if self.checkpoints.is_none() {
            return Err(invalid(
                "rescaling moves the job's state through a checkpoint: the job needs \
                 execution.checkpointing.interval"
                    .into(),
            ));
        }
        if self.pending_rescale.is_some() {
            return Err(invalid("a rescale is already under way".into()));
        }
        let job = self.graph.job_graph();
        let mut next = self.requirements.clone();
        for (id, b) in bounds {
            let index = job
                .vertex_index(id)
                .ok_or_else(|| invalid(format!("{id}: no such vertex; the job has {}", vertex_ids(self))))?;
            let max = job.vertex(index).max_parallelism;
            if b.lower == 0 || b.lower > b.upper || b.upper > max {
                return Err(invalid(format!(
                    "{id}: parallelism bounds [{}, {}] must satisfy 1 <= lowerBound <= upperBound <= the \
                     vertex's max parallelism {max}",
                    b.lower, b.upper
                )));
            }
            next.insert(index.0, *b);
        }
        // Slots the job could hold: its own and the free ones (one slot sharing group).
        let available = (self.slot_of_group.len()
            + free.iter().filter(|s| !self.slot_of_group.contains(s)).count()) as u32;
        let mut target = Vec::with_capacity(job.vertices().len());
        for i in 0..job.vertices().len() {
            let b = next.get(&(i as u32)).copied().unwrap_or(self.bounds(i));
            let p = b.upper.min(available);
            if p < b.lower {
                return Err(Error::Scheduling(floe_scheduler::Error::NotEnoughSlots {
                    needed: b.lower as usize,
                    available: available as usize,
                }));
            }
            target.push(p);
        }
        for ds in job.data_sets() {
            let (a, b) = (target[ds.producer.0 as usize], target[ds.consumer.0 as usize]);
            if ds.partitioner == Partitioner::Forward && a != b {
                return Err(invalid(format!(
                    "edge {}->{} is forward: both ends need one parallelism, the bounds give {a} and {b}",
                    job.vertex(ds.producer).id,
                    job.vertex(ds.consumer).id
                )));
            }
        }
        self.requirements = next;
        if self.current_parallelism() == target {
            return Ok(Vec::new());
        }
        Ok(self.begin_rescale(target, now_ms, Duration::from_millis(100)))
    }

    fn current_parallelism(&self) -> Vec<u32> {
        self.graph.job_vertices().iter().map(|v| v.parallelism).collect()
    }

    /// A vertex's bounds: as the resource requirements set them, else 1 up to its declared
    /// parallelism.
    fn bounds(&self, vertex: usize) -> ParallelismBounds {
        self.requirements
            .get(&(vertex as u32))
            .copied()
            .unwrap_or(ParallelismBounds {
                lower: 1,
                upper: self.declared[vertex],
            })
    }

    /// Each vertex's parallelism with `available` slots: its upper bound, or fewer (one slot
    /// sharing group: a slot runs one subtask of each vertex), at least 1.
    pub(super) fn target_parallelism(&self, available: u32) -> Vec<u32> {
        (0..self.declared.len())
            .map(|i| self.bounds(i).upper.min(available).max(1))
            .collect()
    }

    /// Stops the job to start it again at `target` after `delay`.
    fn begin_rescale(&mut self, target: Vec<u32>, now_ms: u64, delay: Duration) -> Vec<Action> {
        tracing::info!(job = %self.id, from = ?self.current_parallelism(), to = ?target, "rescaling");
        if let Some(c) = self.checkpoints.as_mut() {
            c.abort(None, "the job rescales", now_ms);
        }
        let mut actions = self.cancel_all();
        self.pending_rescale = Some((target, now_ms));
        // The new tasks start once the cancellations are under way, as a restart's would.
        actions.push(Action::RestartAfter {
            job_id: self.id.clone(),
            delay,
            vertices: Vec::new(),
        });
        actions
    }

    /// The adaptive scheduler, when slots came: scale up to what the job's slots and the `free`
    /// ones allow, by at least `min-parallelism-increase`, no sooner than `scaling-interval.min`
    /// after the job started or last rescaled.
    pub fn maybe_scale_up(&mut self, free: &[SlotRef], now_ms: u64) -> Vec<Action> {
        let Some(adaptive) = self.adaptive_scheduler else {
            return Vec::new();
        };
        if self.status != JobStatus::Running
            || self.pending_rescale.is_some()
            || now_ms < self.last_scaled_ms + adaptive.scaling_interval_min.as_millis() as u64
        {
            return Vec::new();
        }
        let held: Vec<&SlotRef> = self.held_slots().collect();
        let available = (held.len() + free.iter().filter(|s| !held.contains(s)).count()) as u32;
        let target = self.target_parallelism(available);
        let current = self.current_parallelism();
        let increase = target
            .iter()
            .zip(&current)
            .map(|(t, c)| t.saturating_sub(*c))
            .max()
            .unwrap_or(0);
        if increase < adaptive.min_parallelism_increase || target.iter().zip(&current).any(|(t, c)| t < c) {
            return Vec::new();
        }
        self.begin_rescale(target, now_ms, Duration::from_millis(100))
    }

    /// Reactive: a TaskManager of an adaptive-scheduled job is lost. The job goes on at the
    /// parallelism the slots left allow (one restart, as for any failure; none when the loss
    /// `joins` the failure its going away caused already) instead of waiting for a replacement.
    /// `None`: not adaptive, no slot left, or the restart strategy allows no restart (the default
    /// failover takes it).
    pub(super) fn rescale_after_loss(
        &mut self,
        tm: &str,
        free: &[SlotRef],
        joins: bool,
    ) -> Option<Vec<Action>> {
        self.adaptive_scheduler?;
        if self.status != JobStatus::Running {
            return None;
        }
        // Decided on a copy: kept only if the job rescales.
        let mut restart = self.restart.clone();
        let RestartDecision::Restart { delay, counted } =
            restart.on_failure(super::history_now_ms(), joins, super::restart::draw_jitter())
        else {
            return None;
        };
        let mut survivors: Vec<SlotRef> = Vec::new();
        for s in self.slot_of_group.iter().filter(|s| s.taskmanager != tm) {
            if !survivors.contains(s) {
                survivors.push(s.clone());
            }
        }
        let spare = free
            .iter()
            .filter(|s| s.taskmanager != tm && !survivors.contains(s))
            .count();
        let available = (survivors.len() + spare) as u32;
        let target = self.target_parallelism(available);
        let below = (0..self.declared.len()).any(|i| target[i] < self.bounds(i).lower);
        if available == 0 || below {
            return None;
        }
        self.restart = restart;
        let taskmanagers = std::iter::once(tm.to_string()).collect();
        if counted {
            self.episode.begin(taskmanagers);
        } else {
            self.episode.join(taskmanagers, Some(tm));
        }
        self.restarts += 1;
        self.slot_of_group = survivors;
        tracing::warn!(job = %self.id, "TaskManager {tm} was lost: the job goes on at the parallelism its slots allow");
        let requested = self.last_scaled_ms;
        Some(self.begin_rescale(target, requested, delay))
    }

    /// The adaptive scheduler waits, up to the resource stabilization timeout since submission,
    /// for the slots its upper bounds want before it starts with fewer.
    pub fn waits_for_more_slots(&self, free: usize, waited: Duration) -> bool {
        let Some(adaptive) = self.adaptive_scheduler else {
            return false;
        };
        let wanted = self.target_parallelism(u32::MAX).into_iter().max().unwrap_or(1) as usize;
        free > 0 && free < wanted && waited < adaptive.stabilization
    }

    /// The job started (or rescaled) now: the scaling interval counts from here.
    pub fn mark_scaled(&mut self, now_ms: u64) {
        self.last_scaled_ms = now_ms;
        self.autoscaler_restarted(now_ms);
    }

    /// Rebuilds the graph at `target` parallelism per vertex, deploying nothing: attempt numbers
    /// go on; regions, slot sharing groups and the checkpoint coordinator's tasks follow.
    pub(super) fn regraph(&mut self, target: &[u32]) -> Result<()> {
        let mut job = self.graph.job_graph().clone();
        for (i, &p) in target.iter().enumerate() {
            job.set_parallelism(VertexIndex(i as u32), p)?;
        }
        let next_attempt = self
            .graph
            .execution_vertices()
            .flat_map(|e| std::iter::once(e.current.attempt).chain(e.prior.iter().map(|p| p.attempt)))
            .max()
            .map_or(0, |a| a + 1);
        self.finished_records += self.counters.iter().map(|c| c.records_in).sum::<u64>();
        self.graph = ExecutionGraph::with_first_attempt(job, next_attempt);
        self.regions = PipelinedRegions::compute(&self.graph);
        self.strategy = PipelinedRegionSchedulingStrategy::new(&self.graph, &self.regions);
        self.group_of_task = super::group_of_task(&self.graph);
        let n = self.graph.task_count();
        self.location = vec![None; n];
        self.counters = vec![TaskCounters::default(); n];
        self.unplaced.clear();
        self.missing_once.clear();
        let (tasks, sources) = checkpoint_tasks(&self.graph);
        if let Some(c) = self.checkpoints.as_mut() {
            c.set_tasks(tasks, sources, super::history_now_ms());
        }
        Ok(())
    }

    /// The rescale's restart: the graph at the new parallelism, slots taken or given back, every
    /// task deployed restoring from the latest checkpoint.
    pub(super) fn apply_rescale(
        &mut self,
        target: Vec<u32>,
        requested_ms: u64,
        free: &[SlotRef],
        now_ms: u64,
    ) -> Vec<Action> {
        let from = self.current_parallelism();
        if let Err(e) = self.regraph(&target) {
            tracing::error!(job = %self.id, "cannot rescale: {e}");
            return Vec::new();
        }
        let groups = slots::execution_slot_sharing_groups(&self.graph).len();
        // Slots: the first ones the job holds, then free ones; extra ones go back to the pool.
        let spare: Vec<SlotRef> = free
            .iter()
            .filter(|s| !self.slot_of_group.contains(s))
            .cloned()
            .collect();
        self.slot_of_group.truncate(groups);
        let missing = groups.saturating_sub(self.slot_of_group.len());
        self.slot_of_group.extend(spare.into_iter().take(missing));
        // Slots that went away since the request: the groups share the ones the job has.
        self.share_slots(groups);
        let mut checkpoint = None;
        if let Some(c) = self.checkpoints.as_mut() {
            c.restarting();
            checkpoint = c.latest.as_ref().map(|l| l.id);
        }
        self.last_scaled_ms = now_ms;
        self.autoscaler_restarted(now_ms);
        self.last_rescale = Some(Rescale {
            requested_ms,
            deployed_ms: now_ms,
            from,
            to: target,
            checkpoint,
        });
        let deploy = self.strategy.start_scheduling(&self.graph, &self.regions);
        self.deploy(&deploy)
    }
}

fn vertex_ids(job: &JobMaster) -> String {
    job.graph
        .job_graph()
        .vertices()
        .iter()
        .map(|v| v.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
