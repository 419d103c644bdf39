//! The job autoscaler: the algorithm of the Flink Kubernetes Operator's autoscaler (FLIP-271), run
//! inside the JobManager. Pure: the JobManager feeds it each vertex's cumulative counters with the
//! time they were read and asks it, now and then, for a decision; no clock is read here.
//!
//! For each vertex, over the metrics window: the **true processing rate** (records in per second
//! divided by the fraction of time the vertex was busy: what it would do if it never waited), and
//! the **target rate** (for a source, the rate records arrive at: what it read plus the growth of
//! what is due but not read yet, its pending records; downstream, the upstream target rates times
//! each upstream vertex's output ratio). A vertex scales when its true processing rate is outside
//! `[target / (utilization + boundary), target / (utilization - boundary)]`, to
//! `ceil(parallelism * capacity / true processing rate)` with `capacity = (target + catch-up rate)
//! / utilization`; bounded by the scale factors and the vertex bounds, aligned to its key groups.
//! Stabilization after every (re)start, a full window before any decision, and a scale-down that
//! waits `scale-down.interval` (taking the highest parallelism asked for meanwhile) keep it from
//! flapping.

use std::collections::VecDeque;

use crate::job_graph::{JobGraph, Partitioner, VertexIndex};

/// Flink's `job.autoscaler.*` keys, in milliseconds where they are durations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoscalerConfig {
    /// `job.autoscaler.stabilization.interval` (Flink: 5 min): no metrics are taken this long after
    /// the job started or rescaled.
    pub stabilization_ms: u64,
    /// `job.autoscaler.metrics.window` (Flink: 15 min): rates are averages over this window.
    pub window_ms: u64,
    /// `job.autoscaler.target.utilization` (0.7) and `.target.utilization.boundary` (0.3).
    pub target_utilization: f64,
    pub utilization_boundary: f64,
    /// `job.autoscaler.scale-down.interval` (Flink: 1 h): how long a scale-down is held back.
    pub scale_down_interval_ms: u64,
    /// `job.autoscaler.scale-up.max-factor` (100000) and `.scale-down.max-factor` (0.6): one
    /// decision goes at most to `p * (1 + up)` and at least to `p * (1 - down)`.
    pub scale_up_max_factor: f64,
    pub scale_down_max_factor: f64,
    /// `job.autoscaler.metrics.busy-time.aggregator` (MAX).
    pub busy_time_aggregator: BusyTimeAggregator,
    /// `job.autoscaler.vertex.min-parallelism` (1) and `.max-parallelism` (200).
    pub vertex_min_parallelism: u32,
    pub vertex_max_parallelism: u32,
    /// `job.autoscaler.catch-up.duration` (Flink: 30 min): pending records are to be caught up
    /// within it; `job.autoscaler.restart.time` (Flink: 5 min): what a rescale is assumed to cost,
    /// records that pile up meanwhile also to be caught up.
    pub catch_up_ms: u64,
    pub restart_ms: u64,
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        AutoscalerConfig {
            stabilization_ms: 5 * 60_000,
            window_ms: 15 * 60_000,
            target_utilization: 0.7,
            utilization_boundary: 0.3,
            scale_down_interval_ms: 60 * 60_000,
            scale_up_max_factor: 100_000.0,
            scale_down_max_factor: 0.6,
            busy_time_aggregator: BusyTimeAggregator::Max,
            vertex_min_parallelism: 1,
            vertex_max_parallelism: 200,
            catch_up_ms: 30 * 60_000,
            restart_ms: 5 * 60_000,
        }
    }
}

/// One vertex's counters, cumulative since its subtasks began to run: records summed over them,
/// and each subtask's running time with the parts of it spent waiting for input (idle) and for
/// output buffers (backpressured); the rest is busy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VertexCounters {
    pub records_in: u64,
    pub records_out: u64,
    pub subtasks: Vec<SubtaskTime>,
    /// A source's records due but not read (its lag); `None` when it does not know.
    pub pending_records: Option<u64>,
}

/// A subtask's time, in nanoseconds, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubtaskTime {
    pub running_ns: u64,
    pub idle_ns: u64,
    pub backpressured_ns: u64,
}

/// `job.autoscaler.metrics.busy-time.aggregator`: how the subtasks' busy time makes the vertex's.
/// Flink's default is the busiest subtask: with skewed keys the hottest subtask limits the vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BusyTimeAggregator {
    #[default]
    Max,
    Avg,
    Min,
}

/// What the window says about one vertex, and what the autoscaler makes of it.
#[derive(Debug, Clone, PartialEq)]
pub struct VertexEvaluation {
    pub id: String,
    pub parallelism: u32,
    /// Per subtask and second over the window (Flink's `busyTimeMsPerSecond` and friends): busy
    /// time as the aggregator takes it (the busiest subtask's, by default), the others averaged.
    pub busy_ms_per_second: f64,
    pub backpressured_ms_per_second: f64,
    pub idle_ms_per_second: f64,
    /// Records per second over the window, the whole vertex.
    pub records_in_per_second: f64,
    pub records_out_per_second: f64,
    /// Records per second the vertex would take if it were always busy; `None`: it took none.
    pub true_processing_rate: Option<f64>,
    /// Records per second it must take to keep up, and to also catch up what is pending.
    pub target_rate: f64,
    pub catch_up_rate: f64,
    pub pending_records: Option<u64>,
    /// The parallelism this evaluation asks for (a held-back scale-down: still the current one).
    pub proposed: u32,
    pub reason: String,
}

/// One evaluation of the whole job.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub at_ms: u64,
    /// The window the rates are averaged over.
    pub window_ms: u64,
    pub vertices: Vec<VertexEvaluation>,
}

impl Evaluation {
    /// Whether this evaluation changes any vertex's parallelism.
    pub fn rescales(&self) -> bool {
        self.vertices.iter().any(|v| v.proposed != v.parallelism)
    }
}

/// Every vertex's counters, and when they were read (ms).
type Sample = (u64, Vec<VertexCounters>);

/// Where the autoscaler is with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Metrics are not taken until this time (ms), after a start or rescale.
    Stabilizing { until_ms: u64 },
    /// Taking metrics until the window is full.
    Collecting,
    /// The window is full: every evaluation may decide.
    Evaluating,
}

/// The autoscaler of one job.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    pub config: AutoscalerConfig,
    started_ms: u64,
    samples: VecDeque<Sample>,
    /// Per vertex: since when a scale-down has been asked for, and the highest parallelism asked
    /// for since.
    scale_down: Vec<Option<(u64, u32)>>,
    /// The newest evaluation, for the REST API.
    pub last: Option<Evaluation>,
}

impl Autoscaler {
    pub fn new(config: AutoscalerConfig, now_ms: u64) -> Self {
        Autoscaler {
            config,
            started_ms: now_ms,
            samples: VecDeque::new(),
            scale_down: Vec::new(),
            last: None,
        }
    }

    /// The job (re)started now, at a new parallelism or after a failure: what was measured
    /// before says nothing about it; stabilization starts again.
    pub fn restarted(&mut self, now_ms: u64) {
        self.started_ms = now_ms;
        self.samples.clear();
        self.scale_down.clear();
    }

    pub fn phase(&self, now_ms: u64) -> Phase {
        let until_ms = self.started_ms + self.config.stabilization_ms;
        if now_ms < until_ms {
            Phase::Stabilizing { until_ms }
        } else if self.window().is_some() {
            Phase::Evaluating
        } else {
            Phase::Collecting
        }
    }

    /// Counters read at `now_ms`, one per vertex. Ignored while stabilizing; a counter that went
    /// backwards (a subtask restarted) starts the window again.
    pub fn observe(&mut self, now_ms: u64, counters: Vec<VertexCounters>) {
        if matches!(self.phase(now_ms), Phase::Stabilizing { .. }) {
            return;
        }
        if let Some((at, last)) = self.samples.back() {
            let backwards = last.len() != counters.len()
                || last.iter().zip(&counters).any(|(a, b)| {
                    b.records_in < a.records_in
                        || b.records_out < a.records_out
                        || a.subtasks.len() != b.subtasks.len()
                        || a.subtasks
                            .iter()
                            .zip(&b.subtasks)
                            .any(|(x, y)| y.running_ns < x.running_ns)
                });
            if backwards {
                self.samples.clear();
            } else if now_ms <= *at {
                return;
            }
        }
        self.samples.push_back((now_ms, counters));
        // Keep the newest sample at or before the window's start, and everything after it.
        while self.samples.len() > 2 && self.samples[1].0 + self.config.window_ms <= now_ms {
            self.samples.pop_front();
        }
    }

    /// The window's first and last samples, once it spans `metrics.window`.
    fn window(&self) -> Option<(&Sample, &Sample)> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        (last.0 >= first.0 + self.config.window_ms.max(1)).then_some((first, last))
    }

    /// Evaluates the window against `job` (its vertices at their current parallelism). `None`
    /// while stabilizing or collecting; otherwise the evaluation, kept in [`Autoscaler::last`];
    /// it rescales when [`Evaluation::rescales`].
    pub fn evaluate(&mut self, job: &JobGraph, now_ms: u64) -> Option<Evaluation> {
        let (first, last) = self.window()?;
        let n = job.vertices().len();
        if first.1.len() != n || last.1.len() != n {
            return None;
        }
        let window_ms = last.0 - first.0;
        let seconds = window_ms as f64 / 1000.0;
        let c = self.config;
        let mut evals: Vec<VertexEvaluation> = Vec::with_capacity(n);
        // Vertices are in topological order: every input's target rate is known before its
        // consumer's.
        let mut out_ratio = vec![0.0f64; n];
        for (i, v) in job.vertices().iter().enumerate() {
            let (a, b) = (&first.1[i], &last.1[i]);
            let (busy_f, idle_f, bp_f) = time_shares(a, b, c.busy_time_aggregator);
            let in_rate = b.records_in.saturating_sub(a.records_in) as f64 / seconds;
            let out_rate = b.records_out.saturating_sub(a.records_out) as f64 / seconds;
            // Records came but the vertex was never measurably busy: it could take any rate.
            let true_rate = (in_rate > 0.0).then(|| {
                if busy_f > 0.0 {
                    in_rate / busy_f
                } else {
                    f64::INFINITY
                }
            });
            let outputs = job.outputs(VertexIndex(i as u32)).len().max(1) as f64;
            out_ratio[i] = if in_rate > 0.0 {
                out_rate / in_rate / outputs
            } else {
                0.0
            };
            let inputs = job.inputs(VertexIndex(i as u32));
            let catch_up_s = (c.catch_up_ms as f64 / 1000.0).max(f64::MIN_POSITIVE);
            let (target, catch_up) = if inputs.is_empty() {
                let lag_growth = match (a.pending_records, b.pending_records) {
                    (Some(x), Some(y)) => (y as f64 - x as f64) / seconds,
                    _ => 0.0,
                };
                let target = (in_rate + lag_growth).max(0.0);
                let lag = b.pending_records.unwrap_or(0) as f64;
                // What is pending, and what a rescale's restart lets pile up, caught up within the
                // catch-up duration.
                let catch_up = (lag + target * c.restart_ms as f64 / 1000.0) / catch_up_s;
                (target, catch_up)
            } else {
                inputs.iter().fold((0.0, 0.0), |(t, k), r| {
                    let up = job.data_set(*r).producer.0 as usize;
                    (
                        t + evals[up].target_rate * out_ratio[up],
                        k + evals[up].catch_up_rate * out_ratio[up],
                    )
                })
            };
            let (proposed, reason) = self.propose(job, i, true_rate, target, catch_up);
            evals.push(VertexEvaluation {
                id: v.id.clone(),
                parallelism: v.parallelism,
                busy_ms_per_second: busy_f * 1000.0,
                backpressured_ms_per_second: bp_f * 1000.0,
                idle_ms_per_second: idle_f * 1000.0,
                records_in_per_second: in_rate,
                records_out_per_second: out_rate,
                true_processing_rate: true_rate,
                target_rate: target,
                catch_up_rate: catch_up,
                pending_records: b.pending_records,
                proposed,
                reason,
            });
        }
        align_forward(job, &mut evals);
        self.hold_scale_downs(now_ms, &mut evals);
        let evaluation = Evaluation {
            at_ms: now_ms,
            window_ms,
            vertices: evals,
        };
        self.last = Some(evaluation.clone());
        Some(evaluation)
    }

    /// The parallelism one vertex needs, and why.
    fn propose(
        &self,
        job: &JobGraph,
        i: usize,
        true_rate: Option<f64>,
        target: f64,
        catch_up: f64,
    ) -> (u32, String) {
        let c = &self.config;
        let v = &job.vertices()[i];
        let p = v.parallelism;
        let Some(true_rate) = true_rate else {
            return (p, "no records in the window: kept".into());
        };
        let capacity_at = |u: f64| (target + catch_up) / u.max(f64::MIN_POSITIVE);
        let (up_at, down_at) = (
            (c.target_utilization + c.utilization_boundary).min(1.0),
            (c.target_utilization - c.utilization_boundary).max(0.0),
        );
        let scale_up_threshold = capacity_at(up_at);
        let scale_down_threshold = if down_at > 0.0 {
            capacity_at(down_at)
        } else {
            f64::INFINITY
        };
        if true_rate >= scale_up_threshold && true_rate <= scale_down_threshold {
            return (
                p,
                format!(
                    "true processing rate {} is within [{}, {}] (target rate {} at utilization {} \
                     +/- {}): kept",
                    per_s(true_rate),
                    per_s(scale_up_threshold),
                    per_s(scale_down_threshold),
                    per_s(target + catch_up),
                    c.target_utilization,
                    c.utilization_boundary
                ),
            );
        }
        let capacity = capacity_at(c.target_utilization);
        let wanted = (f64::from(p) * capacity / true_rate).ceil();
        let highest = (f64::from(p) * (1.0 + c.scale_up_max_factor)).floor();
        let lowest = (f64::from(p) * (1.0 - c.scale_down_max_factor)).ceil().max(1.0);
        let mut q = wanted.clamp(lowest, highest.max(lowest)) as u32;
        let upper = c.vertex_max_parallelism.min(v.max_parallelism).max(1);
        let lower = c.vertex_min_parallelism.clamp(1, upper);
        q = q.clamp(lower, upper);
        let keyed = job
            .inputs(VertexIndex(i as u32))
            .iter()
            .any(|r| job.data_set(*r).partitioner == Partitioner::Hash);
        let mut aligned = String::new();
        if keyed {
            let a = align_to_key_groups(q, v.max_parallelism, upper);
            if a != q {
                aligned = format!(", {a} to spread {} key groups evenly", v.max_parallelism);
                q = a;
            }
        }
        let direction = match q.cmp(&p) {
            std::cmp::Ordering::Greater => "scale up".to_string(),
            std::cmp::Ordering::Less => "scale down".to_string(),
            std::cmp::Ordering::Equal => format!("kept at {p} (the vertex bounds)"),
        };
        (
            q,
            format!(
                "{direction}: true processing rate {} against target {} (catch-up {}) at \
                 utilization {}: ceil({p} x {} / {}) = {}{aligned}",
                per_s(true_rate),
                per_s(target),
                per_s(catch_up),
                c.target_utilization,
                per_s(capacity),
                per_s(true_rate),
                wanted as u64,
            ),
        )
    }

    /// A scale-down waits `scale-down.interval` from when it was first asked for, then takes the
    /// highest parallelism asked for meanwhile; anything else forgets a pending scale-down.
    fn hold_scale_downs(&mut self, now_ms: u64, evals: &mut [VertexEvaluation]) {
        self.scale_down.resize(evals.len(), None);
        for (i, e) in evals.iter_mut().enumerate() {
            if e.proposed >= e.parallelism {
                self.scale_down[i] = None;
                continue;
            }
            let (since, highest) = match self.scale_down[i] {
                Some((since, h)) => (since, h.max(e.proposed)),
                None => (now_ms, e.proposed),
            };
            self.scale_down[i] = Some((since, highest));
            let due = since + self.config.scale_down_interval_ms;
            if now_ms >= due {
                e.proposed = highest;
            } else {
                e.reason = format!(
                    "{}; held back until {} ms from now (scale-down.interval), highest asked for {highest}",
                    e.reason,
                    due - now_ms
                );
                e.proposed = e.parallelism;
            }
        }
    }
}

/// The vertex's busy, idle and backpressured shares of its running time over the window: busy
/// aggregated over subtasks as configured, idle and backpressured averaged.
fn time_shares(a: &VertexCounters, b: &VertexCounters, aggregator: BusyTimeAggregator) -> (f64, f64, f64) {
    let mut busy: Vec<f64> = Vec::with_capacity(b.subtasks.len());
    let (mut idle, mut bp) = (0.0, 0.0);
    for (x, y) in a.subtasks.iter().zip(&b.subtasks) {
        let running = y.running_ns.saturating_sub(x.running_ns) as f64;
        if running <= 0.0 {
            continue;
        }
        let i = (y.idle_ns.saturating_sub(x.idle_ns) as f64 / running).clamp(0.0, 1.0);
        let p = (y.backpressured_ns.saturating_sub(x.backpressured_ns) as f64 / running).clamp(0.0, 1.0);
        idle += i;
        bp += p;
        busy.push((1.0 - i - p).max(0.0));
    }
    if busy.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let n = busy.len() as f64;
    let busy = match aggregator {
        BusyTimeAggregator::Max => busy.iter().copied().fold(0.0, f64::max),
        BusyTimeAggregator::Min => busy.iter().copied().fold(1.0, f64::min),
        BusyTimeAggregator::Avg => busy.iter().sum::<f64>() / n,
    };
    (busy, idle / n, bp / n)
}

/// The smallest parallelism from `p` up to `upper` (and half the key groups) that divides the key
/// groups evenly, else `p` (Flink's `EVENLY_SPREAD`).
fn align_to_key_groups(p: u32, key_groups: u32, upper: u32) -> u32 {
    (p..=upper.min(key_groups / 2))
        .find(|q| key_groups.is_multiple_of(*q))
        .unwrap_or(p)
}

/// Vertices joined by a forward edge need one parallelism: the higher one asked for.
fn align_forward(job: &JobGraph, evals: &mut [VertexEvaluation]) {
    // Forward chains are short; settle them by repeating until nothing changes.
    loop {
        let mut changed = false;
        for ds in job.data_sets() {
            if ds.partitioner != Partitioner::Forward {
                continue;
            }
            let (a, b) = (ds.producer.0 as usize, ds.consumer.0 as usize);
            let p = evals[a].proposed.max(evals[b].proposed);
            for i in [a, b] {
                if evals[i].proposed != p {
                    evals[i].proposed = p;
                    evals[i].reason = format!(
                        "{}; {p} as the vertex it is forward-connected to",
                        evals[i].reason
                    );
                    changed = true;
                }
            }
        }
        if !changed {
            return;
        }
    }
}

fn per_s(rate: f64) -> String {
    if rate.is_infinite() {
        "unbounded".into()
    } else {
        format!("{rate:.1}/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// source(1) -> hash -> slow(1): the source reads `rate` lines a second and the slow vertex
    /// is busy `busy` of its time.
    fn job(slow_p: u32) -> JobGraph {
        JobGraph::test()
            .vertex("source", 1)
            .vertex("slow", slow_p)
            .edge("source", "slow", Partitioner::Hash)
            .build()
            .expect("job")
    }

    fn config() -> AutoscalerConfig {
        AutoscalerConfig {
            stabilization_ms: 1_000,
            window_ms: 10_000,
            scale_down_interval_ms: 20_000,
            catch_up_ms: 60_000,
            restart_ms: 0,
            ..AutoscalerConfig::default()
        }
    }

    /// Counters after `t` seconds of a source reading `rate`/s with `lag` pending and a consumer
    /// of `p` subtasks each busy `busy` of the time, each record passed on one for one.
    fn counters(t: f64, rate: f64, lag: u64, p: u32, busy: f64) -> Vec<VertexCounters> {
        skewed(t, rate, lag, &vec![busy; p as usize])
    }

    /// As [`counters`], each consumer subtask busy as `busy` says.
    fn skewed(t: f64, rate: f64, lag: u64, busy: &[f64]) -> Vec<VertexCounters> {
        let ns = (t * 1e9) as u64;
        let records = (rate * t) as u64;
        vec![
            VertexCounters {
                records_in: records,
                records_out: records,
                subtasks: vec![SubtaskTime {
                    running_ns: ns,
                    idle_ns: ns / 2,
                    backpressured_ns: 0,
                }],
                pending_records: Some(lag),
            },
            VertexCounters {
                records_in: records,
                records_out: records,
                subtasks: busy
                    .iter()
                    .map(|b| SubtaskTime {
                        running_ns: ns,
                        idle_ns: ((1.0 - b) * ns as f64) as u64,
                        backpressured_ns: 0,
                    })
                    .collect(),
                pending_records: None,
            },
        ]
    }

    fn run(a: &mut Autoscaler, from_s: u64, to_s: u64, f: impl Fn(f64) -> Vec<VertexCounters>) {
        for s in from_s..=to_s {
            a.observe(s * 1000, f(s as f64));
        }
    }

    #[test]
    fn nothing_is_decided_while_stabilizing_or_before_the_window_is_full() {
        let job = job(1);
        let mut a = Autoscaler::new(config(), 0);
        assert_eq!(a.phase(500), Phase::Stabilizing { until_ms: 1_000 });
        run(&mut a, 0, 8, |t| counters(t, 1000.0, 0, 1, 1.0));
        assert_eq!(a.phase(8_000), Phase::Collecting);
        assert!(a.evaluate(&job, 8_000).is_none());
        run(&mut a, 9, 12, |t| counters(t, 1000.0, 0, 1, 1.0));
        assert_eq!(a.phase(12_000), Phase::Evaluating);
        assert!(a.evaluate(&job, 12_000).is_some());
    }

    #[test]
    fn a_busy_vertex_behind_a_growing_lag_scales_up_to_meet_the_arrival_rate() {
        // The source reads 1,000/s but 3,000/s arrive (its lag grows by 2,000/s); the consumer is
        // busy all the time at 1,000/s: it needs 3,000 / 0.7 / 1,000 = 4.3 -> 5 subtasks, 8 to
        // spread 128 key groups evenly.
        let job = job(1);
        let mut a = Autoscaler::new(
            AutoscalerConfig {
                catch_up_ms: u64::MAX / 4,
                ..config()
            },
            0,
        );
        run(&mut a, 1, 11, |t| {
            counters(t, 1000.0, (2000.0 * t) as u64, 1, 1.0)
        });
        let e = a.evaluate(&job, 11_000).expect("evaluated");
        let slow = &e.vertices[1];
        assert!((slow.target_rate - 3000.0).abs() < 1.0, "{slow:?}");
        assert!((slow.true_processing_rate.expect("rate") - 1000.0).abs() < 1.0);
        assert_eq!(slow.proposed, 8, "{}", slow.reason);
        assert!(
            slow.reason.contains("ceil(1 x 4285.7/s / 1000.0/s) = 5"),
            "{}",
            slow.reason
        );
        assert!(
            slow.reason.contains("8 to spread 128 key groups evenly"),
            "{}",
            slow.reason
        );
        assert!(e.rescales());
        // The source, idle half the time at 1,000/s, could do 2,000/s: 3,000/s needs it at 3.
        assert_eq!(e.vertices[0].proposed, 3, "{}", e.vertices[0].reason);
    }

    #[test]
    fn within_the_utilization_boundary_nothing_changes() {
        // 4 subtasks, each busy 50% for 1,000/s in all: true rate 2,000/s; target 1,000/s; the
        // boundary is [1,000 / 1.0, 1,000 / 0.4] = [1,000, 2,500].
        let job = job(4);
        let mut a = Autoscaler::new(config(), 0);
        run(&mut a, 1, 11, |t| counters(t, 1000.0, 0, 4, 0.5));
        let e = a.evaluate(&job, 11_000).expect("evaluated");
        assert_eq!(e.vertices[1].proposed, 4, "{}", e.vertices[1].reason);
        assert!(
            e.vertices[1].reason.contains("within"),
            "{}",
            e.vertices[1].reason
        );
    }

    #[test]
    fn a_scale_down_waits_for_the_scale_down_interval_and_is_bounded_by_its_factor() {
        // 8 subtasks busy 5% for 400/s: true rate 8,000/s, far above 400 / 0.4: wants
        // ceil(8 x 571 / 8000) = 1, limited by scale-down.max-factor 0.6 to ceil(8 x 0.4) = 4.
        let job = job(8);
        let mut a = Autoscaler::new(config(), 0);
        run(&mut a, 1, 11, |t| counters(t, 400.0, 0, 8, 0.05));
        let e = a.evaluate(&job, 11_000).expect("evaluated");
        assert_eq!(e.vertices[1].proposed, 8, "held back: {}", e.vertices[1].reason);
        assert!(
            e.vertices[1].reason.contains("held back"),
            "{}",
            e.vertices[1].reason
        );
        assert!(!e.rescales());
        run(&mut a, 12, 31, |t| counters(t, 400.0, 0, 8, 0.05));
        let e = a.evaluate(&job, 31_000).expect("evaluated");
        assert_eq!(e.vertices[1].proposed, 4, "{}", e.vertices[1].reason);
        assert!(e.rescales());
    }

    #[test]
    fn a_restart_clears_the_window_and_stabilizes_again() {
        let job = job(1);
        let mut a = Autoscaler::new(config(), 0);
        run(&mut a, 1, 11, |t| counters(t, 1000.0, 0, 1, 1.0));
        assert!(a.evaluate(&job, 11_000).is_some());
        a.restarted(11_000);
        assert_eq!(a.phase(11_500), Phase::Stabilizing { until_ms: 12_000 });
        // Counters start from 0 again; before the window fills nothing is decided.
        run(&mut a, 12, 20, |t| counters(t - 12.0, 1000.0, 0, 1, 1.0));
        assert!(a.evaluate(&job, 20_000).is_none());
        // A counter going backwards (a subtask restarted) starts the window again too.
        a.observe(21_000, counters(0.5, 1000.0, 0, 1, 1.0));
        run(&mut a, 22, 30, |t| counters(t - 20.0, 1000.0, 0, 1, 1.0));
        assert!(a.evaluate(&job, 30_000).is_none());
    }

    #[test]
    fn the_busiest_subtask_sets_the_vertex_busy_time_by_default() {
        // Two subtasks, one busy all the time (a hot key), one 20%: 1,000/s in all, 1,100/s
        // arriving (the lag grows by 100/s). By the average (60%) the vertex could take 1,667/s,
        // within the boundary; by the busiest, 1,000/s: too little.
        let job = job(2);
        let mut a = Autoscaler::new(config(), 0);
        run(&mut a, 1, 11, |t| {
            skewed(t, 1000.0, (100.0 * t) as u64, &[1.0, 0.2])
        });
        let e = a.evaluate(&job, 11_000).expect("evaluated");
        assert_eq!(e.vertices[1].busy_ms_per_second, 1000.0);
        assert!((e.vertices[1].idle_ms_per_second - 400.0).abs() < 1.0);
        assert!(e.vertices[1].proposed > 2, "{}", e.vertices[1].reason);
        let mut avg = Autoscaler::new(
            AutoscalerConfig {
                busy_time_aggregator: BusyTimeAggregator::Avg,
                ..config()
            },
            0,
        );
        run(&mut avg, 1, 11, |t| {
            skewed(t, 1000.0, (100.0 * t) as u64, &[1.0, 0.2])
        });
        let e = avg.evaluate(&job, 11_000).expect("evaluated");
        assert_eq!(e.vertices[1].proposed, 2, "{}", e.vertices[1].reason);
    }

    #[test]
    fn a_vertex_never_busy_goes_to_its_lowest_parallelism() {
        // 4 subtasks that took 1,000/s without a measurable busy moment: any parallelism would
        // do; the scale-down factor bounds the step (0.6: to ceil(4 x 0.4) = 2).
        let job = job(4);
        let mut a = Autoscaler::new(
            AutoscalerConfig {
                scale_down_interval_ms: 0,
                ..config()
            },
            0,
        );
        run(&mut a, 1, 11, |t| counters(t, 1000.0, 0, 4, 0.0));
        let e = a.evaluate(&job, 11_000).expect("evaluated");
        assert_eq!(e.vertices[1].true_processing_rate, Some(f64::INFINITY));
        assert_eq!(e.vertices[1].proposed, 2, "{}", e.vertices[1].reason);
        assert!(
            e.vertices[1].reason.contains("unbounded"),
            "{}",
            e.vertices[1].reason
        );
        // The source, at 1 already: kept, and the reason says why.
        assert_eq!(e.vertices[0].proposed, 1);
    }

    #[test]
    fn key_group_alignment_takes_the_next_divisor() {
        assert_eq!(align_to_key_groups(3, 128, 200), 4);
        assert_eq!(align_to_key_groups(5, 128, 200), 8);
        assert_eq!(align_to_key_groups(4, 128, 200), 4);
        // No divisor up to half the key groups: as asked.
        assert_eq!(align_to_key_groups(7, 10, 200), 7);
        // Never above the upper bound.
        assert_eq!(align_to_key_groups(5, 128, 6), 5);
    }
}
