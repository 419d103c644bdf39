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
use floe_telemetry::metrics::{Gauges, OPENMETRICS, TaskFigures, labels};

use crate::server::{JobManager, now_ms};

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
                TaskFigures {
                    records_in: counters.records_in,
                    records_out: counters.records_out,
                    bytes_in: counters.bytes_in,
                    bytes_out: counters.bytes_out,
                    in_pool_usage: counters.in_pool_usage,
                    out_pool_usage: counters.out_pool_usage,
                    current_watermark: counters.current_watermark,
                    pending_records: counters.pending_records,
                }
                .set(&mut g, &tl);
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
