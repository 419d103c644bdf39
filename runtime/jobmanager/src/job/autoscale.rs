//! The job autoscaler's place in a job (`job.autoscaler.enabled`): every second the job's
//! counters, summed per vertex, go into [`floe_scheduler::autoscaler::Autoscaler`]'s window; an
//! evaluation that changes a vertex's parallelism becomes that vertex's resource requirements
//! (upper bound = the parallelism it needs), so the adaptive scheduler rescales the job in place,
//! or runs it at the slots it has and scales up when the ones it asked for come. What it wants
//! beyond the slots it has is [`JobMaster::slots_wanted`], which the operator turns into
//! TaskManager replicas.

use std::collections::BTreeMap;

use floe_scheduler::ExecutionState;
use floe_scheduler::JobStatus;
use floe_scheduler::autoscaler::{Autoscaler, Evaluation, SubtaskTime, VertexCounters};

use super::{Action, JobMaster, ParallelismBounds, SlotRef};

/// How often the window takes the job's counters (heartbeats bring them about this often).
const SAMPLE_INTERVAL_MS: u64 = 1_000;

/// How far apart the samples behind the REST API's per-second rates are.
const RATE_INTERVAL_MS: u64 = 3_000;

/// Decisions kept for the REST API.
const DECISION_HISTORY: usize = 20;

/// One rescale the autoscaler asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingDecision {
    pub at_ms: u64,
    /// Parallelism per vertex before, and what the autoscaler asked for.
    pub from: Vec<u32>,
    pub to: Vec<u32>,
    /// The evaluation it came from (rates, busy time, reasons per vertex).
    pub evaluation: Evaluation,
}

/// A subtask's per-second rates (Flink's `numRecordsInPerSecond`, `busyTimeMsPerSecond`, ...).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskRates {
    pub records_in_per_second: f64,
    pub records_out_per_second: f64,
    pub bytes_in_per_second: f64,
    pub bytes_out_per_second: f64,
    pub busy_ms_per_second: f64,
    pub backpressured_ms_per_second: f64,
    pub idle_ms_per_second: f64,
}

/// A job's autoscaler and what it decided.
#[derive(Debug, Clone)]
pub struct JobAutoscaler {
    pub autoscaler: Autoscaler,
    pub decisions: Vec<ScalingDecision>,
    last_sample_ms: u64,
}

impl JobAutoscaler {
    pub fn new(autoscaler: Autoscaler) -> Self {
        JobAutoscaler {
            autoscaler,
            decisions: Vec::new(),
            last_sample_ms: 0,
        }
    }
}

impl JobMaster {
    /// The autoscaler's turn (the JobManager's monitor calls it often; it samples once a
    /// second). Only a job whose every task runs is measured: deploying and restoring tasks say
    /// nothing about the load.
    pub fn autoscale(&mut self, free: &[SlotRef], now_ms: u64) -> Vec<Action> {
        self.sample_rates(now_ms);
        let due = self
            .autoscaler
            .as_ref()
            .is_some_and(|a| now_ms >= a.last_sample_ms + SAMPLE_INTERVAL_MS);
        if !due || self.status != JobStatus::Running || self.pending_rescale.is_some() {
            return Vec::new();
        }
        let running = self
            .graph
            .execution_vertices()
            .all(|e| e.current.state == ExecutionState::Running);
        let counters = self.vertex_counters();
        let Some(a) = self.autoscaler.as_mut() else {
            return Vec::new();
        };
        if !running {
            return Vec::new();
        }
        a.last_sample_ms = now_ms;
        a.autoscaler.observe(now_ms, counters);
        let Some(evaluation) = a.autoscaler.evaluate(self.graph.job_graph(), now_ms) else {
            return Vec::new();
        };
        if !evaluation.rescales() {
            return Vec::new();
        }
        let mut bounds = BTreeMap::new();
        for v in &evaluation.vertices {
            bounds.insert(
                v.id.clone(),
                ParallelismBounds {
                    lower: 1,
                    upper: v.proposed,
                },
            );
        }
        // The same request as the last one (the slots it wants have not come): nothing new.
        if self.requirements_equal(&bounds) {
            return Vec::new();
        }
        let from: Vec<u32> = evaluation.vertices.iter().map(|v| v.parallelism).collect();
        let to: Vec<u32> = evaluation.vertices.iter().map(|v| v.proposed).collect();
        tracing::info!(job = %self.id, ?from, ?to, "the autoscaler rescales the job");
        let actions = match self.set_resource_requirements(&bounds, free, now_ms) {
            Ok(actions) => actions,
            Err(e) => {
                tracing::warn!(job = %self.id, "the autoscaler's request was refused: {e}");
                return Vec::new();
            }
        };
        if let Some(a) = self.autoscaler.as_mut() {
            a.decisions.push(ScalingDecision {
                at_ms: now_ms,
                from,
                to,
                evaluation,
            });
            if a.decisions.len() > DECISION_HISTORY {
                a.decisions.remove(0);
            }
            // What it measured is of the old parallelism; a rescale restarts the clock when it
            // deploys, and a request the slots cannot meet yet waits for them with a clean slate.
            a.autoscaler.restarted(now_ms);
        }
        actions
    }

    /// Whether `bounds` are exactly the requirements set now.
    fn requirements_equal(&self, bounds: &BTreeMap<String, ParallelismBounds>) -> bool {
        let current = self.resource_requirements();
        bounds.iter().all(|(id, b)| current.get(id) == Some(b))
    }

    /// The slots the job would use if it had them: its largest upper bound (one slot sharing
    /// group); the operator raises TaskManager replicas to give it that many.
    pub fn slots_wanted(&self) -> u32 {
        self.resource_requirements()
            .values()
            .map(|b| b.upper)
            .max()
            .unwrap_or(1)
    }

    /// Takes the tasks' counters for [`JobMaster::task_rates`] every few seconds.
    pub fn sample_rates(&mut self, now_ms: u64) {
        let (_, newer) = &self.rate_samples;
        if newer.0 + RATE_INTERVAL_MS > now_ms && newer.1.len() == self.counters.len() {
            return;
        }
        let older = std::mem::replace(&mut self.rate_samples.1, (now_ms, self.counters.clone()));
        self.rate_samples.0 = older;
    }

    /// A subtask's rates between the last two samples (Flink's per-second metrics): records in and
    /// out per second, and per second of running time the milliseconds busy, backpressured and
    /// idle; `None` until two samples of the current tasks exist.
    pub fn task_rates(&self, global: usize) -> Option<TaskRates> {
        let ((t0, a), (t1, b)) = &self.rate_samples;
        let (a, b) = (a.get(global)?, b.get(global)?);
        let seconds = t1.checked_sub(*t0).filter(|d| *d > 0)? as f64 / 1000.0;
        let running = b.running_ns.checked_sub(a.running_ns).filter(|d| *d > 0)? as f64;
        let per_s = |x: u64, y: u64| y.saturating_sub(x) as f64 / seconds;
        let share = |x: u64, y: u64| (y.saturating_sub(x) as f64 / running).min(1.0) * 1000.0;
        let idle = share(a.idle_ns, b.idle_ns);
        let backpressured = share(a.backpressured_ns, b.backpressured_ns);
        Some(TaskRates {
            records_in_per_second: per_s(a.records_in, b.records_in),
            records_out_per_second: per_s(a.records_out, b.records_out),
            bytes_in_per_second: per_s(a.bytes_in, b.bytes_in),
            bytes_out_per_second: per_s(a.bytes_out, b.bytes_out),
            busy_ms_per_second: (1000.0 - idle - backpressured).max(0.0),
            backpressured_ms_per_second: backpressured,
            idle_ms_per_second: idle,
        })
    }

    /// Each vertex's counters over its current subtasks.
    pub(super) fn vertex_counters(&self) -> Vec<VertexCounters> {
        let mut out = vec![VertexCounters::default(); self.graph.job_vertices().len()];
        for e in self.graph.execution_vertices() {
            let c = self.counters[self.graph.global_index(e.id)];
            let v = &mut out[e.id.vertex.0 as usize];
            v.records_in += c.records_in;
            v.records_out += c.records_out;
            v.subtasks.push(SubtaskTime {
                running_ns: c.running_ns,
                idle_ns: c.idle_ns,
                backpressured_ns: c.backpressured_ns,
            });
            if let Some(p) = c.pending_records {
                v.pending_records = Some(v.pending_records.unwrap_or(0) + p);
            }
        }
        out
    }

    /// The job (re)started its tasks at `now_ms`: the autoscaler stabilizes again.
    pub(super) fn autoscaler_restarted(&mut self, now_ms: u64) {
        if let Some(a) = self.autoscaler.as_mut() {
            a.autoscaler.restarted(now_ms);
        }
    }
}
