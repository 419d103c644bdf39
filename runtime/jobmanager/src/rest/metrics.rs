//! `GET /metrics`: the JobManager's figures in the OpenMetrics text format, under the names and
//! labels Flink's Prometheus reporter gives them (`flink_jobmanager_job_numRestarts{job_id=..,
//! job_name=..}`, `flink_taskmanager_job_task_numRecordsIn{.., task_name=.., subtask_index=..,
//! tm_id=..}`), so a Flink user's dashboards and alerts read Floe's. Like Flink's reporter, every
//! figure is a gauge (a counter such as `numRecordsIn` too, so the name stays Flink's, without the
//! `_total` OpenMetrics gives counters). The task figures are what the TaskManagers last reported
//! in their heartbeats; the rates are over the last few seconds.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::server::{JobManager, now_ms};

type Labels = Vec<(String, String)>;
type Figures = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Gauges by name, each a family over labels, registered in the order first used.
#[derive(Default)]
struct Gauges {
    families: Vec<(&'static str, &'static str, Figures)>,
}

impl Gauges {
    fn set(&mut self, name: &'static str, help: &'static str, labels: &Labels, value: f64) {
        let family = match self.families.iter().position(|(n, _, _)| *n == name) {
            Some(i) => &self.families[i].2,
            None => {
                self.families.push((name, help, Figures::default()));
                &self.families.last().expect("just pushed").2
            }
        };
        family.get_or_create(labels).set(value);
    }

    fn encode(self) -> String {
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

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The figures of every job this JobManager runs or ran, and of its TaskManagers.
pub fn render(jm: &JobManager) -> String {
    let state = jm.state();
    let mut g = Gauges::default();
    let tms = labels(&[]);
    g.set(
        "flink_jobmanager_numRegisteredTaskManagers",
        "TaskManagers registered with this JobManager",
        &tms,
        state.taskmanagers.len() as f64,
    );
    g.set(
        "flink_jobmanager_taskSlotsTotal",
        "Slots the registered TaskManagers offer",
        &tms,
        state.taskmanagers.values().map(|t| f64::from(t.slots)).sum(),
    );
    for tm in state.taskmanagers.values() {
        let l = labels(&[("tm_id", &tm.id)]);
        g.set(
            "flink_taskmanager_Status_Shuffle_Memory_Used",
            "Bytes of shuffle buffers the TaskManager holds (last heartbeat)",
            &l,
            tm.buffered_bytes as f64,
        );
        g.set(
            "flink_taskmanager_Status_Process_Memory_RSS",
            "Resident memory of the TaskManager process in bytes (last heartbeat)",
            &l,
            tm.rss_bytes as f64,
        );
        g.set(
            "flink_taskmanager_Status_TaskSlotsTotal",
            "Slots the TaskManager offers",
            &l,
            f64::from(tm.slots),
        );
    }
    let now = now_ms();
    for (id, job) in &state.jobs {
        let m = &job.master;
        let jl = labels(&[("job_id", id), ("job_name", &m.args.name)]);
        let uptime = match job.end_time_ms {
            // Flink: -1 once the job reached a terminal state.
            Some(_) => -1.0,
            None => now.saturating_sub(job.start_time_ms) as f64,
        };
        g.set(
            "flink_jobmanager_job_uptime",
            "Milliseconds the job has been running; -1 once it ended",
            &jl,
            uptime,
        );
        g.set(
            "flink_jobmanager_job_numRestarts",
            "Restarts of the job since it was submitted",
            &jl,
            f64::from(m.restarts),
        );
        if let Some(c) = m.checkpoints.as_ref() {
            g.set(
                "flink_jobmanager_job_numberOfCompletedCheckpoints",
                "Checkpoints completed",
                &jl,
                c.counts.completed as f64,
            );
            g.set(
                "flink_jobmanager_job_numberOfFailedCheckpoints",
                "Checkpoints that failed",
                &jl,
                c.counts.failed as f64,
            );
            g.set(
                "flink_jobmanager_job_totalNumberOfCheckpoints",
                "Checkpoints triggered",
                &jl,
                c.counts.triggered as f64,
            );
            g.set(
                "flink_jobmanager_job_numberOfInProgressCheckpoints",
                "Checkpoints in progress",
                &jl,
                f64::from(u8::from(c.pending().is_some())),
            );
            if let Some(l) = &c.latest {
                g.set(
                    "flink_jobmanager_job_lastCheckpointDuration",
                    "Milliseconds the last completed checkpoint took, trigger to completion",
                    &jl,
                    l.completed_ms.saturating_sub(l.triggered_ms) as f64,
                );
                g.set(
                    "flink_jobmanager_job_lastCheckpointSize",
                    "Bytes the last completed checkpoint uploaded",
                    &jl,
                    l.uploaded_bytes() as f64,
                );
                g.set(
                    "flink_jobmanager_job_lastCheckpointFullSize",
                    "Bytes of state the last completed checkpoint holds",
                    &jl,
                    l.state_bytes() as f64,
                );
            }
        }
        let graph = &m.graph;
        for ejv in graph.job_vertices() {
            let v = graph.job_graph().vertex(ejv.index);
            for ev in &ejv.subtasks {
                let global = graph.global_index(ev.id);
                let tm = m.location[global].as_ref().map_or("", |s| s.taskmanager.as_str());
                let subtask = ev.id.subtask.to_string();
                let tl = labels(&[
                    ("job_id", id),
                    ("job_name", &m.args.name),
                    ("task_id", &v.id),
                    ("task_name", &v.name),
                    ("subtask_index", &subtask),
                    ("tm_id", tm),
                ]);
                let counters = &m.counters[global];
                g.set(
                    "flink_taskmanager_job_task_numRecordsIn",
                    "Records the task read",
                    &tl,
                    counters.records_in as f64,
                );
                g.set(
                    "flink_taskmanager_job_task_numRecordsOut",
                    "Records the task wrote",
                    &tl,
                    counters.records_out as f64,
                );
                g.set(
                    "flink_taskmanager_job_task_numBytesIn",
                    "Bytes of the buffers the task read from its input gates",
                    &tl,
                    counters.bytes_in as f64,
                );
                g.set(
                    "flink_taskmanager_job_task_numBytesOut",
                    "Bytes of the buffers the task wrote to its result partitions",
                    &tl,
                    counters.bytes_out as f64,
                );
                if let Some(w) = counters.current_watermark {
                    g.set(
                        "flink_taskmanager_job_task_currentInputWatermark",
                        "The task's event time (ms since the epoch)",
                        &tl,
                        w as f64,
                    );
                }
                for (name, help, usage) in [
                    (
                        "flink_taskmanager_job_task_buffers_inPoolUsage",
                        "How full the task's input buffers are (0..1)",
                        counters.in_pool_usage,
                    ),
                    (
                        "flink_taskmanager_job_task_buffers_outPoolUsage",
                        "How full the task's output buffers are (0..1)",
                        counters.out_pool_usage,
                    ),
                ] {
                    if let Some(u) = usage {
                        g.set(name, help, &tl, u);
                    }
                }
                if let Some(p) = counters.pending_records {
                    g.set(
                        "flink_taskmanager_job_task_pendingRecords",
                        "Records a source knows are due but has not read",
                        &tl,
                        p as f64,
                    );
                }
                if let Some(r) = m.task_rates(global) {
                    g.set(
                        "flink_taskmanager_job_task_numRecordsInPerSecond",
                        "Records read per second",
                        &tl,
                        r.records_in_per_second,
                    );
                    g.set(
                        "flink_taskmanager_job_task_numRecordsOutPerSecond",
                        "Records written per second",
                        &tl,
                        r.records_out_per_second,
                    );
                    g.set(
                        "flink_taskmanager_job_task_numBytesInPerSecond",
                        "Bytes read per second",
                        &tl,
                        r.bytes_in_per_second,
                    );
                    g.set(
                        "flink_taskmanager_job_task_numBytesOutPerSecond",
                        "Bytes written per second",
                        &tl,
                        r.bytes_out_per_second,
                    );
                    g.set(
                        "flink_taskmanager_job_task_busyTimeMsPerSecond",
                        "Milliseconds per second the task worked (neither idle nor backpressured)",
                        &tl,
                        r.busy_ms_per_second,
                    );
                    g.set(
                        "flink_taskmanager_job_task_backPressuredTimeMsPerSecond",
                        "Milliseconds per second the task waited for output buffers",
                        &tl,
                        r.backpressured_ms_per_second,
                    );
                    g.set(
                        "flink_taskmanager_job_task_idleTimeMsPerSecond",
                        "Milliseconds per second the task waited for input",
                        &tl,
                        r.idle_ms_per_second,
                    );
                }
            }
        }
    }
    drop(state);
    g.encode()
}

pub(super) async fn metrics(State(jm): State<JobManager>) -> Response {
    ([(CONTENT_TYPE, OPENMETRICS)], render(&jm)).into_response()
}
