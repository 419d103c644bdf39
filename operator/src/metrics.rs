//! The operator's own metrics, in the style of kube-rs's `controller-rs`: reconciliations, failures
//! by reason and a histogram of how long a reconcile takes, served on `/metrics` of the health
//! port in the OpenMetrics text format (the Prometheus project's `prometheus-client`).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use floe_telemetry::metrics::OPENMETRICS;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// Why: `Kube`, `Finalizer` or `NoNamespace` (the reconcile error's kind).
    pub reason: String,
}

/// The operator's counters and histogram, registered once.
pub struct Metrics {
    registry: Registry,
    pub reconciliations: Counter,
    pub failures: Family<FailureLabels, Counter>,
    pub duration: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("reconciliations", &self.reconciliations.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let reconciliations = Counter::default();
        let failures = Family::<FailureLabels, Counter>::default();
        // 1 ms to about 16 s: a reconcile is a few API calls, a slow one waits on a JobManager.
        let duration = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.001, 2.0, 15,
        ));
        let mut registry = Registry::with_prefix("floe_operator");
        registry.register(
            "reconciliations",
            "Reconciles of FlinkJobs started",
            reconciliations.clone(),
        );
        registry.register(
            "reconcile_failures",
            "Reconciles that failed, by reason",
            failures.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "How long a reconcile took",
            prometheus_client::registry::Unit::Seconds,
            duration.clone(),
        );
        Metrics {
            registry,
            reconciliations,
            failures,
            duration,
        }
    }
}

impl Metrics {
    pub fn shared() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// A reconcile that took `took`.
    pub fn reconciled(&self, took: Duration) {
        self.reconciliations.inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// A reconcile that failed for `reason`.
    pub fn failed(&self, reason: &str) {
        self.failures
            .get_or_create(&FailureLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_failures_and_durations_are_counted() {
        let m = Metrics::default();
        m.reconciled(Duration::from_millis(3));
        m.reconciled(Duration::from_millis(40));
        m.failed("Kube");
        let text = m.encode();
        assert!(text.contains("floe_operator_reconciliations_total 2\n"), "{text}");
        assert!(
            text.contains("floe_operator_reconcile_failures_total{reason=\"Kube\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("floe_operator_reconcile_duration_seconds_count 2\n"),
            "{text}"
        );
        assert!(
            text.contains("floe_operator_reconcile_duration_seconds_bucket{le=\"0.004\"} 1\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
