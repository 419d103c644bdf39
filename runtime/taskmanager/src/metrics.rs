//! A TaskManager's own `/metrics` (`--metrics-address`; Flink's Prometheus reporter port is 9249):
//! the tasks it runs now, with Flink's names and labels, read from the tasks' live counters, and
//! the process's slots, memory and shuffle buffers. Flink's cumulative task times
//! (`accumulateBusyTimeMs`, `accumulateBackPressuredTimeMs`, `accumulateIdleTimeMs`) give rates
//! in Prometheus (`rate(...)`); the per-second figures are the JobManager's `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::{TaskManager, lock, rss_bytes};

type Labels = Vec<(String, String)>;
type Figures = Family<Labels, Gauge<f64, AtomicU64>>;

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn family<'a>(
    families: &'a mut Vec<(&'static str, &'static str, Figures)>,
    name: &'static str,
    help: &'static str,
) -> &'a Figures {
    let i = match families.iter().position(|(n, _, _)| *n == name) {
        Some(i) => i,
        None => {
            families.push((name, help, Figures::default()));
            families.len() - 1
        }
    };
    &families[i].2
}

impl TaskManager {
    /// The OpenMetrics text of this TaskManager now.
    pub fn render_metrics(&self) -> String {
        let mut families = Vec::new();
        let tm = vec![("tm_id".to_string(), self.inner.id.clone())];
        let (rss, _) = rss_bytes();
        family(
            &mut families,
            "flink_taskmanager_Status_TaskSlotsTotal",
            "Slots this TaskManager offers",
        )
        .get_or_create(&tm)
        .set(f64::from(self.inner.slots));
        family(
            &mut families,
            "flink_taskmanager_Status_Process_Memory_RSS",
            "Resident memory in bytes",
        )
        .get_or_create(&tm)
        .set(rss as f64);
        family(
            &mut families,
            "flink_taskmanager_Status_Shuffle_Memory_Used",
            "Bytes of shuffle buffers held",
        )
        .get_or_create(&tm)
        .set(self.inner.shuffle.buffered_bytes() as f64);
        let jobs = lock(&self.inner.jobs).clone();
        for ((job_id, vertex, subtask, _attempt), entry) in lock(&self.inner.tasks).iter() {
            if entry.final_report.is_some() {
                continue;
            }
            let (task_id, task_name) = jobs
                .get(job_id)
                .and_then(|b| {
                    b.job_graph()
                        .vertices()
                        .get(*vertex as usize)
                        .map(|v| (v.id.clone(), v.name.clone()))
                })
                .unwrap_or_else(|| (vertex.to_string(), vertex.to_string()));
            let labels: Labels = [
                ("job_id", job_id.clone()),
                ("task_id", task_id),
                ("task_name", task_name),
                ("subtask_index", subtask.to_string()),
                ("tm_id", self.inner.id.clone()),
            ]
            .map(|(k, v)| (k.to_string(), v))
            .into();
            let m = &entry.metrics;
            let ms = |ns: u64| ns as f64 / 1e6;
            let idle = m.idle_ns.load(Ordering::Relaxed);
            let backpressured = m.backpressured_ns.load(Ordering::Relaxed);
            let running = m.running_ns();
            let figures = [
                (
                    "flink_taskmanager_job_task_numRecordsIn",
                    "Records the task read",
                    m.records_in.load(Ordering::Relaxed) as f64,
                ),
                (
                    "flink_taskmanager_job_task_numRecordsOut",
                    "Records the task wrote",
                    m.records_out.load(Ordering::Relaxed) as f64,
                ),
                (
                    "flink_taskmanager_job_task_numBytesIn",
                    "Bytes of the buffers the task read from its input gates",
                    m.bytes_in.load(Ordering::Relaxed) as f64,
                ),
                (
                    "flink_taskmanager_job_task_numBytesOut",
                    "Bytes of the buffers the task wrote to its result partitions",
                    m.bytes_out.load(Ordering::Relaxed) as f64,
                ),
                (
                    "flink_taskmanager_job_task_accumulateIdleTimeMs",
                    "Milliseconds the task waited for input",
                    ms(idle),
                ),
                (
                    "flink_taskmanager_job_task_accumulateBackPressuredTimeMs",
                    "Milliseconds the task waited for output buffers",
                    ms(backpressured),
                ),
                (
                    "flink_taskmanager_job_task_accumulateBusyTimeMs",
                    "Milliseconds the task worked",
                    ms(running.saturating_sub(idle).saturating_sub(backpressured)),
                ),
            ];
            for (name, help, value) in figures {
                family(&mut families, name, help)
                    .get_or_create(&labels)
                    .set(value);
            }
            let pools = m.pools.get();
            for (name, help, usage) in [
                (
                    "flink_taskmanager_job_task_buffers_inPoolUsage",
                    "How full the task's input buffers are (0..1)",
                    pools.and_then(|p| p.in_usage()),
                ),
                (
                    "flink_taskmanager_job_task_buffers_outPoolUsage",
                    "How full the task's output buffers are (0..1)",
                    pools.and_then(|p| p.out_usage()),
                ),
            ] {
                if let Some(u) = usage {
                    family(&mut families, name, help).get_or_create(&labels).set(u);
                }
            }
            if let Some(w) = m.current_watermark() {
                family(
                    &mut families,
                    "flink_taskmanager_job_task_currentInputWatermark",
                    "The task's event time",
                )
                .get_or_create(&labels)
                .set(w as f64);
            }
        }
        let mut registry = Registry::default();
        for (name, help, f) in families {
            registry.register(name, help, f);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }

    /// Serves `/metrics` on `listener` until the process ends.
    pub(crate) fn serve_metrics(&self, listener: tokio::net::TcpListener) {
        let tm = self.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let tm = tm.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, OPENMETRICS)],
                        tm.render_metrics(),
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
}
