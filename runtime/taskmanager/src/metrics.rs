//! A TaskManager's own `/metrics` (`--metrics-address`; Flink's Prometheus reporter port is 9249):
//! the tasks it runs now, with Flink's names and labels, read from the tasks' live counters, and
//! the process's slots, memory and shuffle buffers. Flink's cumulative task times
//! (`accumulateBusyTimeMs`, `accumulateBackPressuredTimeMs`, `accumulateIdleTimeMs`) give rates
//! in Prometheus (`rate(...)`); the per-second figures are the JobManager's `/metrics`.

use std::sync::atomic::Ordering;

use floe_telemetry::metrics::{Gauges, Labels, OPENMETRICS, TaskFigures, labels};

use crate::{TaskManager, lock, rss_bytes};

impl TaskManager {
    /// The OpenMetrics text of this TaskManager now.
    pub fn render_metrics(&self) -> String {
        let mut g = Gauges::default();
        let tm = labels(&[("tm_id", &self.inner.id)]);
        let (rss, _) = rss_bytes();
        g.set(
            "flink_taskmanager_Status_TaskSlotsTotal",
            "Slots this TaskManager offers",
            &tm,
            f64::from(self.inner.slots),
        );
        g.set(
            "flink_taskmanager_Status_Process_Memory_RSS",
            "Resident memory in bytes",
            &tm,
            rss as f64,
        );
        if let Some(memory) = &self.inner.state_memory {
            g.set(
                "flink_taskmanager_Status_Flink_Memory_Managed_Total",
                "Bytes of managed memory (the budget the RocksDB instances share)",
                &tm,
                memory.budget() as f64,
            );
            g.set(
                "flink_taskmanager_Status_Flink_Memory_Managed_Used",
                "Bytes of managed memory in use: cached blocks and memtables",
                &tm,
                memory.used() as f64,
            );
        }
        g.set(
            "flink_taskmanager_Status_Shuffle_Memory_Used",
            "Bytes of shuffle buffers held",
            &tm,
            self.inner.shuffle.buffered_bytes() as f64,
        );
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
            let subtask = subtask.to_string();
            let task: Labels = labels(&[
                ("job_id", job_id),
                ("task_id", &task_id),
                ("task_name", &task_name),
                ("subtask_index", &subtask),
                ("tm_id", &self.inner.id),
            ]);
            let m = &entry.metrics;
            let pools = m.pools.get();
            TaskFigures {
                records_in: m.records_in.load(Ordering::Relaxed),
                records_out: m.records_out.load(Ordering::Relaxed),
                bytes_in: m.bytes_in.load(Ordering::Relaxed),
                bytes_out: m.bytes_out.load(Ordering::Relaxed),
                in_pool_usage: pools.and_then(|p| p.in_usage()),
                out_pool_usage: pools.and_then(|p| p.out_usage()),
                current_watermark: m.current_watermark(),
                pending_records: m.pending(),
            }
            .set(&mut g, &task);
            let ms = |ns: u64| ns as f64 / 1e6;
            let idle = m.idle_ns.load(Ordering::Relaxed);
            let backpressured = m.backpressured_ns.load(Ordering::Relaxed);
            let busy = m.running_ns().saturating_sub(idle).saturating_sub(backpressured);
            for (name, help, value) in [
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
                    ms(busy),
                ),
            ] {
                g.set(name, help, &task, value);
            }
            user_metrics(&mut g, &task, &m.user);
        }
        g.encode()
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

/// The metrics a task's functions registered (`RuntimeContext::metric_group`), under Flink's
/// operator scope with the task's labels and the operator's name, as Flink's Prometheus reporter
/// prints them: a counter or gauge its value, a meter its rate, a histogram its quantiles (label
/// `quantile`) and `<name>_count`.
fn user_metrics(g: &mut Gauges, task: &Labels, user: &floe_datastream::metrics::UserMetrics) {
    use floe_datastream::metrics::Metric;
    for r in user.registered() {
        let mut labels = task.clone();
        labels.push(("operator_name".into(), r.operator.clone()));
        let name = r.scoped_name();
        match &r.metric {
            Metric::Counter(c) => g.set(
                name,
                "A counter a job's function registered",
                &labels,
                c.count() as f64,
            ),
            Metric::Gauge(read) => {
                // The job's code, on the scrape's thread: a panic in it loses this gauge only.
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read())) {
                    Ok(v) => g.set(name, "A gauge a job's function registered", &labels, v),
                    Err(_) => tracing::warn!(metric = %name, "a gauge's function panicked"),
                }
            }
            Metric::Meter(m) => g.set(
                name,
                "Events per second over the last minute (a meter a job's function registered)",
                &labels,
                m.rate(),
            ),
            Metric::Histogram(h) => {
                let (quantiles, count) = h.statistics();
                for (q, v) in quantiles {
                    let mut at = labels.clone();
                    at.push(("quantile".into(), q.to_string()));
                    g.set(
                        name.clone(),
                        "A quantile of the last values of a histogram a job's function registered",
                        &at,
                        v as f64,
                    );
                }
                g.set(
                    format!("{name}_count"),
                    "Values recorded by a histogram a job's function registered",
                    &labels,
                    count as f64,
                );
            }
        }
    }
}
