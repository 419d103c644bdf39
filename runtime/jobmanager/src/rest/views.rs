//! The rest of Flink's REST shape that its web UI reads: `GET /overview`, `/jobs/overview`,
//! `/jobs/{id}/vertices/{vertex}` (subtasks with attempts, TaskManagers and metrics),
//! `/jobs/{id}/vertices/{vertex}/backpressure` (Flink's levels from the time each subtask waited
//! for output buffers), `/jobs/{id}/exceptions` (the root cause and the history),
//! `/jobs/{id}/config` and `/taskmanagers/{id}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{attempt_number, not_found};
use crate::server::{JobManager, now_ms};

/// Flink's back-pressure level of a ratio of time spent waiting for output buffers.
fn level(ratio: f64) -> &'static str {
    if ratio <= 0.10 {
        "ok"
    } else if ratio <= 0.5 {
        "low"
    } else {
        "high"
    }
}

pub(super) async fn overview(State(jm): State<JobManager>) -> Json<Value> {
    let state = jm.state();
    let slots: u32 = state.taskmanagers.values().map(|t| t.slots).sum();
    let used: usize = state
        .jobs
        .values()
        .filter(|j| j.end_time_ms.is_none())
        .map(|j| j.master.slot_tasks().len())
        .sum();
    let mut counts = [0u64; 4];
    for j in state.jobs.values() {
        let i = match j.master.status.name() {
            "FINISHED" => 1,
            "CANCELED" => 2,
            "FAILED" => 3,
            _ => 0,
        };
        counts[i] += 1;
    }
    for e in state.ended.values() {
        match e.status.as_str() {
            "FINISHED" => counts[1] += 1,
            "CANCELED" => counts[2] += 1,
            _ => counts[3] += 1,
        }
    }
    Json(json!({
        "taskmanagers": state.taskmanagers.len(),
        "slots-total": slots,
        "slots-available": (slots as usize).saturating_sub(used),
        "jobs-running": counts[0],
        "jobs-finished": counts[1],
        "jobs-cancelled": counts[2],
        "jobs-failed": counts[3],
        "flink-version": concat!("floe ", env!("CARGO_PKG_VERSION")),
    }))
}

pub(super) async fn jobs_overview(State(jm): State<JobManager>) -> Json<Value> {
    let state = jm.state();
    let now = now_ms();
    let mut jobs: Vec<Value> = state
        .jobs
        .iter()
        .map(|(id, j)| {
            let m = &j.master;
            let mut tasks = serde_json::Map::new();
            let mut total = 0;
            for e in m.graph.execution_vertices() {
                total += 1;
                let name = e.current.state.name().to_ascii_lowercase();
                let n = tasks.get(&name).and_then(Value::as_u64).unwrap_or(0);
                tasks.insert(name, json!(n + 1));
            }
            tasks.insert("total".into(), json!(total));
            json!({
                "jid": id,
                "name": m.args.name,
                "state": m.status.name(),
                "start-time": j.start_time_ms,
                "end-time": j.end_time_ms.map_or(-1, |e| e as i64),
                "duration": j.end_time_ms.unwrap_or(now).saturating_sub(j.start_time_ms),
                "tasks": tasks,
            })
        })
        .collect();
    jobs.extend(state.ended.iter().map(|(id, e)| {
        json!({
            "jid": id,
            "name": e.name,
            "state": e.status,
            "start-time": e.start_time_ms,
            "end-time": e.end_time_ms,
            "duration": e.end_time_ms.saturating_sub(e.start_time_ms),
            "tasks": { "total": 0 },
        })
    }));
    Json(json!({ "jobs": jobs }))
}

/// One vertex of a job with its subtasks; `None` when the job or vertex is unknown.
fn vertex_json(jm: &JobManager, id: &str, vertex: &str) -> Option<Value> {
    let state = jm.state();
    let job = state.jobs.get(id)?;
    let m = &job.master;
    let g = &m.graph;
    let ejv = g
        .job_vertices()
        .iter()
        .find(|e| g.job_graph().vertex(e.index).id == vertex)?;
    let v = g.job_graph().vertex(ejv.index);
    let subtasks: Vec<Value> = ejv
        .subtasks
        .iter()
        .map(|ev| {
            let global = g.global_index(ev.id);
            let counters = &m.counters[global];
            let rates = m.task_rates(global);
            json!({
                "subtask": ev.id.subtask,
                "status": ev.current.state.name(),
                "attempt": attempt_number(ev.current.attempt),
                "taskmanager-id": m.location[global].as_ref().map(|s| s.taskmanager.clone()),
                "prior-attempts": ev.prior.iter().map(|p| json!({"attempt": attempt_number(p.attempt), "status": p.state.name()})).collect::<Vec<_>>(),
                "metrics": {
                    "read-records": counters.records_in,
                    "write-records": counters.records_out,
                    "read-bytes": counters.bytes_in,
                    "write-bytes": counters.bytes_out,
                    "numRecordsInPerSecond": rates.as_ref().map(|r| r.records_in_per_second),
                    "numRecordsOutPerSecond": rates.as_ref().map(|r| r.records_out_per_second),
                    "busyTimeMsPerSecond": rates.as_ref().map(|r| r.busy_ms_per_second),
                    "backPressuredTimeMsPerSecond": rates.as_ref().map(|r| r.backpressured_ms_per_second),
                    "idleTimeMsPerSecond": rates.as_ref().map(|r| r.idle_ms_per_second),
                    "currentInputWatermark": counters.current_watermark,
                    "buffers.inPoolUsage": counters.in_pool_usage,
                    "buffers.outPoolUsage": counters.out_pool_usage,
                },
            })
        })
        .collect();
    Some(json!({
        "id": v.id,
        "name": v.name,
        "parallelism": v.parallelism,
        "maxParallelism": v.max_parallelism,
        "now": now_ms(),
        "subtasks": subtasks,
    }))
}

pub(super) async fn vertex(
    State(jm): State<JobManager>,
    Path((id, vertex)): Path<(String, String)>,
) -> Response {
    match vertex_json(&jm, &id, &vertex) {
        Some(v) => Json(v).into_response(),
        None => not_found(format!("job {id} has no vertex {vertex}")),
    }
}

pub(super) async fn backpressure(
    State(jm): State<JobManager>,
    Path((id, vertex)): Path<(String, String)>,
) -> Response {
    let Some(v) = vertex_json(&jm, &id, &vertex) else {
        return not_found(format!("job {id} has no vertex {vertex}"));
    };
    let mut worst: f64 = 0.0;
    let subtasks: Vec<Value> = v["subtasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let ratio = s["metrics"]["backPressuredTimeMsPerSecond"]
                .as_f64()
                .unwrap_or(0.0)
                / 1000.0;
            let busy = s["metrics"]["busyTimeMsPerSecond"].as_f64().unwrap_or(0.0) / 1000.0;
            let idle = s["metrics"]["idleTimeMsPerSecond"].as_f64().unwrap_or(0.0) / 1000.0;
            worst = worst.max(ratio);
            json!({
                "subtask": s["subtask"],
                "attempt-number": s["attempt"],
                "backpressure-level": level(ratio),
                "ratio": ratio,
                "busyRatio": busy,
                "idleRatio": idle,
            })
        })
        .collect();
    Json(json!({
        "status": "ok",
        "backpressure-level": level(worst),
        "end-timestamp": now_ms(),
        "subtasks": subtasks,
    }))
    .into_response()
}

pub(super) async fn exceptions(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    let state = jm.state();
    if let Some(e) = state.ended.get(&id) {
        return Json(json!({
            "root-exception": e.failure,
            "timestamp": e.failure.as_ref().map(|_| e.end_time_ms),
            "exceptionHistory": { "entries": [], "truncated": false },
        }))
        .into_response();
    }
    let Some(job) = state.jobs.get(&id) else {
        return not_found(format!("job {id} not found"));
    };
    let m = &job.master;
    let entries: Vec<Value> = m
        .exceptions
        .iter()
        .rev()
        .map(|e| {
            json!({
                "exceptionName": "TaskFailure",
                "stacktrace": e.cause,
                "timestamp": e.timestamp_ms,
                "taskName": e.tasks.join(", "),
                "location": e.taskmanagers.join(", "),
            })
        })
        .collect();
    let root = m
        .failure
        .clone()
        .or_else(|| m.exceptions.back().map(|e| e.cause.clone()));
    let timestamp = m.exceptions.back().map(|e| e.timestamp_ms);
    Json(json!({
        "root-exception": root,
        "timestamp": timestamp,
        "exceptionHistory": {
            "entries": entries,
            "truncated": m.exceptions.len() >= crate::job::EXCEPTION_HISTORY,
        },
    }))
    .into_response()
}

pub(super) async fn config(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    let state = jm.state();
    let Some(job) = state.jobs.get(&id) else {
        return not_found(format!("job {id} not found"));
    };
    let args = &job.master.args;
    Json(json!({
        "jid": id,
        "name": args.name,
        "execution-config": {
            "job-parameters": args.args,
            "user-config": args.configuration,
        },
    }))
    .into_response()
}

pub(super) async fn taskmanager(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    let state = jm.state();
    let Some(tm) = state.taskmanagers.get(&id) else {
        return not_found(format!("TaskManager {id} not found"));
    };
    let tasks: Vec<Value> = state
        .jobs
        .iter()
        .flat_map(|(job, j)| {
            let m = &j.master;
            m.graph
                .execution_vertices()
                .filter(|e| {
                    m.location[m.graph.global_index(e.id)]
                        .as_ref()
                        .is_some_and(|s| s.taskmanager == id)
                        && !e.current.state.is_terminal()
                })
                .map(|e| json!({ "job": job, "task": m.graph.task_name(e.id), "status": e.current.state.name() }))
                .collect::<Vec<_>>()
        })
        .collect();
    Json(json!({
        "id": tm.id,
        "address": tm.address,
        "slotsNumber": tm.slots,
        "timeSinceLastHeartbeat": tm.last_heartbeat.elapsed().as_millis() as u64,
        "metrics": {
            "rss-bytes": tm.rss_bytes,
            "rss-peak-bytes": tm.rss_peak_bytes,
            "shuffle-buffered-bytes": tm.buffered_bytes,
            "shuffle-buffered-bytes-peak": tm.buffered_bytes_peak,
        },
        "tasks": tasks,
    }))
    .into_response()
}
