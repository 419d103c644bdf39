//! User-defined metrics (Flink's `getRuntimeContext().getMetricGroup()`): a function registers a
//! [`Counter`], a gauge, a [`Histogram`] or a [`Meter`] in its `open`, keeps the handle and
//! updates it per record; the TaskManager's `/metrics` reads every registered metric when it is
//! scraped and prints it under Flink's operator scope
//! (`flink_taskmanager_job_task_operator_<group>_<name>` with the labels `job_id`, `task_id`,
//! `task_name`, `subtask_index`, `tm_id`, `operator_name`), as Flink's Prometheus reporter does.
//!
//! The handles are cheap to update from the task thread (an atomic add; a histogram takes an
//! uncontended lock) and are read by the scrape from another thread: nothing here is on the
//! per-record path unless the function puts it there.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A count that goes up (and down), Flink's `Counter`.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<AtomicI64>);

impl Counter {
    pub fn inc(&self) {
        self.inc_by(1)
    }
    pub fn inc_by(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.inc_by(-1)
    }
    pub fn dec_by(&self, n: i64) {
        self.inc_by(-n)
    }
    pub fn count(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The quantiles a histogram reports, as Flink's Prometheus reporter does for its summaries.
pub const HISTOGRAM_QUANTILES: [f64; 6] = [0.5, 0.75, 0.95, 0.98, 0.99, 0.999];

/// The distribution of the last `window` values, Flink's `DescriptiveStatisticsHistogram`: its
/// quantiles over those values and the count of every value ever recorded.
#[derive(Debug, Clone)]
pub struct Histogram(Arc<Mutex<Reservoir>>);

#[derive(Debug)]
struct Reservoir {
    window: usize,
    values: VecDeque<i64>,
    count: u64,
}

impl Histogram {
    /// A histogram over the last `window` values (at least 1).
    pub fn new(window: usize) -> Self {
        let window = window.max(1);
        Histogram(Arc::new(Mutex::new(Reservoir {
            window,
            values: VecDeque::with_capacity(window.min(4096)),
            count: 0,
        })))
    }

    pub fn update(&self, value: i64) {
        let mut r = lock(&self.0);
        if r.values.len() == r.window {
            r.values.pop_front();
        }
        r.values.push_back(value);
        r.count += 1;
    }

    /// How many values were recorded in all.
    pub fn count(&self) -> u64 {
        lock(&self.0).count
    }

    /// The `q` quantile (0..=1) of the values in the window, by nearest rank: the smallest value
    /// that at least `q` of them are at or below; `None` before the first value.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        let mut values: Vec<i64> = lock(&self.0).values.iter().copied().collect();
        values.sort_unstable();
        quantile_of_sorted(&values, q)
    }

    /// The quantiles of [`HISTOGRAM_QUANTILES`] (one sort), and the count.
    pub fn statistics(&self) -> (Vec<(f64, i64)>, u64) {
        let (mut values, count) = {
            let r = lock(&self.0);
            (r.values.iter().copied().collect::<Vec<_>>(), r.count)
        };
        values.sort_unstable();
        let quantiles = HISTOGRAM_QUANTILES
            .iter()
            .filter_map(|&q| quantile_of_sorted(&values, q).map(|v| (q, v)))
            .collect();
        (quantiles, count)
    }
}

/// Nearest rank: the value at rank ceil(q * n) (1-based), the first for q = 0.
pub fn quantile_of_sorted(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Flink's `MeterView` time span: a meter's rate is over the last minute.
pub const METER_SPAN: Duration = Duration::from_secs(60);

/// Events per second (Flink's `Meter`, as its `MeterView`): the count's growth over the last
/// [`METER_SPAN`], measured when it is read; before a full span has passed, since the meter was
/// made.
#[derive(Debug, Clone)]
pub struct Meter(Arc<MeterInner>);

#[derive(Debug)]
struct MeterInner {
    count: AtomicU64,
    /// (when, count then): a sample per read, the oldest within the span kept.
    samples: Mutex<VecDeque<(Instant, u64)>>,
}

impl Default for Meter {
    fn default() -> Self {
        Meter(Arc::new(MeterInner {
            count: AtomicU64::new(0),
            samples: Mutex::new(VecDeque::from([(Instant::now(), 0)])),
        }))
    }
}

impl Meter {
    pub fn mark_event(&self) {
        self.mark_events(1)
    }
    pub fn mark_events(&self, n: u64) {
        self.0.count.fetch_add(n, Ordering::Relaxed);
    }
    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }

    /// Events per second over the last [`METER_SPAN`] (since the meter was made, before that).
    pub fn rate(&self) -> f64 {
        let now = Instant::now();
        let count = self.count();
        let mut samples = lock(&self.0.samples);
        // Keep the newest sample at least a span old (the rate's base), and all after it.
        while samples.len() > 1 && now.duration_since(samples[1].0) >= METER_SPAN {
            samples.pop_front();
        }
        let (since, base) = samples[0];
        samples.push_back((now, count));
        let seconds = now.duration_since(since).as_secs_f64();
        if seconds <= 0.0 {
            0.0
        } else {
            count.saturating_sub(base) as f64 / seconds
        }
    }
}

/// A gauge: a value read from the function when the metrics are.
pub type Gauge = Arc<dyn Fn() -> f64 + Send + Sync>;

/// One registered metric.
#[derive(Clone)]
pub enum Metric {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    Meter(Meter),
}

impl std::fmt::Debug for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Metric::Counter(c) => f.debug_tuple("Counter").field(&c.count()).finish(),
            Metric::Gauge(_) => f.write_str("Gauge"),
            Metric::Histogram(h) => f.debug_tuple("Histogram").field(&h.count()).finish(),
            Metric::Meter(m) => f.debug_tuple("Meter").field(&m.count()).finish(),
        }
    }
}

impl Metric {
    fn kind(&self) -> &'static str {
        match self {
            Metric::Counter(_) => "counter",
            Metric::Gauge(_) => "gauge",
            Metric::Histogram(_) => "histogram",
            Metric::Meter(_) => "meter",
        }
    }
}

/// A metric as registered: the operator whose function registered it, the groups under it, its
/// name.
#[derive(Debug, Clone)]
pub struct Registered {
    pub operator: String,
    pub groups: Vec<String>,
    pub name: String,
    pub metric: Metric,
}

impl Registered {
    /// Its name under Flink's operator scope as the Prometheus reporter prints it:
    /// `flink_taskmanager_job_task_operator_` then the groups and the name joined by `_`, every
    /// character outside `[A-Za-z0-9_:]` replaced by `_`.
    pub fn scoped_name(&self) -> String {
        let mut out = String::from("flink_taskmanager_job_task_operator");
        for part in self.groups.iter().chain(std::iter::once(&self.name)) {
            out.push('_');
            out.extend(part.chars().map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                    c
                } else {
                    '_'
                }
            }));
        }
        out
    }
}

/// The metrics the functions of one task registered (part of its [`crate::TaskMetrics`]).
#[derive(Debug, Default)]
pub struct UserMetrics {
    registered: Mutex<Vec<Registered>>,
}

impl UserMetrics {
    /// Every metric registered so far.
    pub fn registered(&self) -> Vec<Registered> {
        lock(&self.registered).clone()
    }

    /// Registers `metric`; a second registration of a name in the same operator and groups gives
    /// the first's handle back when it is of the same kind (so an `open` that runs twice counts on
    /// in one metric), else the new one is kept out of `/metrics` with a warning, as Flink does.
    fn register(&self, operator: &str, groups: &[String], name: &str, metric: Metric) -> Metric {
        let mut registered = lock(&self.registered);
        if let Some(old) = registered
            .iter()
            .find(|r| r.operator == operator && r.groups == groups && r.name == name)
        {
            if old.metric.kind() == metric.kind() {
                return old.metric.clone();
            }
            tracing::warn!(
                operator,
                name,
                "a {} is registered under the name of a {}: it is not reported",
                metric.kind(),
                old.metric.kind()
            );
            return metric;
        }
        registered.push(Registered {
            operator: operator.to_string(),
            groups: groups.to_vec(),
            name: name.to_string(),
            metric: metric.clone(),
        });
        metric
    }
}

/// Where a function registers its metrics (Flink's `MetricGroup`): the scope of its operator in
/// its task, and groups added under it.
#[derive(Debug, Clone)]
pub struct MetricGroup {
    registry: Arc<UserMetrics>,
    operator: String,
    groups: Vec<String>,
}

impl MetricGroup {
    pub(crate) fn new(registry: Arc<UserMetrics>, operator: &str) -> Self {
        MetricGroup {
            registry,
            operator: operator.to_string(),
            groups: Vec::new(),
        }
    }

    /// A group under this one: its metrics' names carry `name` (`..._operator_<name>_<metric>`).
    pub fn add_group(&self, name: &str) -> MetricGroup {
        let mut group = self.clone();
        group.groups.push(name.to_string());
        group
    }

    pub fn counter(&self, name: &str) -> Counter {
        match self.register(name, Metric::Counter(Counter::default())) {
            Metric::Counter(c) => c,
            _ => Counter::default(),
        }
    }

    /// A gauge whose value `read` gives when the metrics are read (on another thread).
    pub fn gauge(&self, name: &str, read: impl Fn() -> f64 + Send + Sync + 'static) {
        self.register(name, Metric::Gauge(Arc::new(read)));
    }

    /// A histogram over the last `window` values.
    pub fn histogram(&self, name: &str, window: usize) -> Histogram {
        match self.register(name, Metric::Histogram(Histogram::new(window))) {
            Metric::Histogram(h) => h,
            _ => Histogram::new(window),
        }
    }

    pub fn meter(&self, name: &str) -> Meter {
        match self.register(name, Metric::Meter(Meter::default())) {
            Metric::Meter(m) => m,
            _ => Meter::default(),
        }
    }

    fn register(&self, name: &str, metric: Metric) -> Metric {
        self.registry.register(&self.operator, &self.groups, name, metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank_over_the_window() {
        let h = Histogram::new(100);
        for v in (1..=200).rev() {
            h.update(v);
        }
        // The window holds the last 100 values: 100 down to 1.
        assert_eq!(h.count(), 200);
        assert_eq!(h.quantile(0.5), Some(50));
        assert_eq!(h.quantile(0.99), Some(99));
        assert_eq!(h.quantile(0.999), Some(100));
        assert_eq!(h.quantile(0.0), Some(1));
        let (q, count) = h.statistics();
        assert_eq!(count, 200);
        assert_eq!(
            q,
            vec![
                (0.5, 50),
                (0.75, 75),
                (0.95, 95),
                (0.98, 98),
                (0.99, 99),
                (0.999, 100)
            ]
        );
        assert_eq!(Histogram::new(4).quantile(0.5), None);
    }

    #[test]
    fn a_name_registered_twice_is_one_metric_and_names_are_scoped_as_flinks_reporter_does() {
        let registry = Arc::new(UserMetrics::default());
        let group = MetricGroup::new(registry.clone(), "Map");
        let a = group.add_group("lookups").counter("hits.total");
        let b = group.add_group("lookups").counter("hits.total");
        a.inc_by(3);
        b.inc();
        assert_eq!(a.count(), 4);
        // Another kind under a taken name is not reported.
        group.add_group("lookups").meter("hits.total").mark_event();
        let registered = registry.registered();
        assert_eq!(registered.len(), 1);
        assert_eq!(
            registered[0].scoped_name(),
            "flink_taskmanager_job_task_operator_lookups_hits_total"
        );
        assert_eq!(registered[0].operator, "Map");
    }

    #[test]
    fn a_meter_rates_its_events_since_it_was_made() {
        let m = Meter::default();
        std::thread::sleep(Duration::from_millis(200));
        m.mark_events(100);
        let rate = m.rate();
        // 100 events over at least 0.2 s: at most 500 per second, and well above 0.
        assert!(rate > 0.0 && rate <= 500.0, "{rate}");
        assert_eq!(m.count(), 100);
    }
}
