//! OpenMetrics gauges under the names and labels Flink's Prometheus reporter gives its metrics
//! (`flink_taskmanager_job_task_numRecordsIn{job_id=.., task_name=.., subtask_index=..}`). Like
//! Flink's reporter, every figure is a gauge (a count such as `numRecordsIn` too, so the name stays
//! Flink's, without the `_total` OpenMetrics gives counters).

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A figure's labels, in the order they are printed.
pub type Labels = Vec<(String, String)>;
type Figures = Family<Labels, Gauge<f64, AtomicU64>>;

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Gauges by name, each a family over labels, registered in the order first used: built for one
/// scrape, then encoded.
#[derive(Debug, Default)]
pub struct Gauges {
    families: Vec<(Cow<'static, str>, Cow<'static, str>, Figures)>,
}

impl Gauges {
    /// Sets gauge `name` (described by `help` when first used) at `labels` to `value`.
    /// Names are Flink's (`&'static str`) or made at run time (a user metric's).
    pub fn set(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        help: impl Into<Cow<'static, str>>,
        labels: &Labels,
        value: f64,
    ) {
        let name = name.into();
        let family = match self.families.iter().position(|(n, _, _)| *n == name) {
            Some(i) => &self.families[i].2,
            None => {
                self.families.push((name, help.into(), Figures::default()));
                &self.families.last().expect("just pushed").2
            }
        };
        family.get_or_create(labels).set(value);
    }

    /// The OpenMetrics text of every gauge set.
    pub fn encode(self) -> String {
        let mut registry = Registry::default();
        for (name, help, family) in self.families {
            registry.register(name, help, family);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// A task's figures that both the JobManager (as its TaskManager last reported them) and the
/// TaskManager (live) export, under one set of names and helps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFigures {
    pub records_in: u64,
    pub records_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// How full the task's input and output buffers are (0..1); none for a task without any.
    pub in_pool_usage: Option<f64>,
    pub out_pool_usage: Option<f64>,
    /// The task's event time (ms since the epoch), once it has one.
    pub current_watermark: Option<i64>,
    /// Records a source knows are due but has not read, when it knows.
    pub pending_records: Option<u64>,
}

impl TaskFigures {
    /// Sets the task's gauges at `labels` (a task's: job, task, subtask, TaskManager).
    pub fn set(&self, g: &mut Gauges, labels: &Labels) {
        let counts = [
            (
                "flink_taskmanager_job_task_numRecordsIn",
                "Records the task read",
                self.records_in,
            ),
            (
                "flink_taskmanager_job_task_numRecordsOut",
                "Records the task wrote",
                self.records_out,
            ),
            (
                "flink_taskmanager_job_task_numBytesIn",
                "Bytes of the buffers the task read from its input gates",
                self.bytes_in,
            ),
            (
                "flink_taskmanager_job_task_numBytesOut",
                "Bytes of the buffers the task wrote to its result partitions",
                self.bytes_out,
            ),
        ];
        for (name, help, value) in counts {
            g.set(name, help, labels, value as f64);
        }
        let known = [
            (
                "flink_taskmanager_job_task_buffers_inPoolUsage",
                "How full the task's input buffers are (0..1)",
                self.in_pool_usage,
            ),
            (
                "flink_taskmanager_job_task_buffers_outPoolUsage",
                "How full the task's output buffers are (0..1)",
                self.out_pool_usage,
            ),
            (
                "flink_taskmanager_job_task_currentInputWatermark",
                "The task's event time (ms since the epoch)",
                self.current_watermark.map(|w| w as f64),
            ),
            (
                "flink_taskmanager_job_task_pendingRecords",
                "Records a source knows are due but has not read",
                self.pending_records.map(|p| p as f64),
            ),
        ];
        for (name, help, value) in known {
            if let Some(v) = value {
                g.set(name, help, labels, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_figures_are_gauges_under_flinks_names_and_unknown_ones_are_left_out() {
        let mut g = Gauges::default();
        let task = labels(&[("task_name", "Map"), ("subtask_index", "1")]);
        TaskFigures {
            records_in: 7,
            bytes_out: 4096,
            out_pool_usage: Some(0.5),
            ..TaskFigures::default()
        }
        .set(&mut g, &task);
        let text = g.encode();
        assert!(
            text.contains("# TYPE flink_taskmanager_job_task_numRecordsIn gauge"),
            "{text}"
        );
        assert!(
            text.contains(
                "flink_taskmanager_job_task_numRecordsIn{task_name=\"Map\",subtask_index=\"1\"} 7.0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "flink_taskmanager_job_task_numBytesOut{task_name=\"Map\",subtask_index=\"1\"} 4096.0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "flink_taskmanager_job_task_buffers_outPoolUsage{task_name=\"Map\",subtask_index=\"1\"} 0.5"
            ),
            "{text}"
        );
        assert!(!text.contains("inPoolUsage"), "{text}");
        assert!(!text.contains("currentInputWatermark"), "{text}");
        assert!(!text.contains("pendingRecords"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
