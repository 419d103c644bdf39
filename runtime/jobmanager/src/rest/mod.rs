//! The REST API, in the shape of Flink's: `GET /jobs`, `GET /jobs/{id}`, `PATCH /jobs/{id}` (cancel),
//! `GET /jobs/{id}/checkpoints` (counts, the latest and the history: `checkpoints.rs`),
//! `GET /jobs/{id}/vertices/{vertex}/watermarks` (each subtask's current watermark), savepoints
//! (`savepoints.rs`), plus `GET /taskmanagers` (slots and shuffle buffer use, which the
//! backpressure test reads), `GET /metrics` (OpenMetrics, Flink's names: `metrics.rs`) and the
//! views Flink's web UI reads (`views.rs`), and the web UI itself at `/` (`ui.rs`).

mod checkpoints;
mod metrics;
mod savepoints;
mod ui;
mod views;

pub use metrics::render as render_metrics;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::error::Error;
use crate::server::{EndedJob, JobEntry, JobManager, now_ms};

pub fn router(jm: JobManager) -> Router {
    Router::new()
        // The web UI (`ui.rs`).
        .route("/", get(ui::index))
        .route("/ui/app.js", get(ui::script))
        .route("/ui/app.css", get(ui::style))
        .route("/jobs", get(list_jobs))
        .route("/jobs/{id}", get(job_details).patch(cancel_job))
        .route(
            "/jobs/{id}/checkpoints",
            get(checkpoints::checkpoints).post(savepoints::trigger_checkpoint),
        )
        .route(
            "/jobs/{id}/checkpoints/details/{checkpoint}",
            get(checkpoints::details),
        )
        .route("/jobs/{id}/savepoints", post(savepoints::trigger_savepoint))
        .route(
            "/jobs/{id}/savepoints/{trigger}",
            get(savepoints::savepoint_status),
        )
        .route("/jobs/{id}/stop", post(savepoints::stop_with_savepoint))
        .route("/savepoint-disposal", post(savepoints::dispose_savepoint))
        .route(
            "/jobs/{id}/resource-requirements",
            get(resource_requirements).put(put_resource_requirements),
        )
        .route("/jobs/{id}/vertices/{vertex}/watermarks", get(watermarks))
        .route("/jobs/{id}/vertices/{vertex}", get(views::vertex))
        .route(
            "/jobs/{id}/vertices/{vertex}/backpressure",
            get(views::backpressure),
        )
        .route("/jobs/{id}/exceptions", get(views::exceptions))
        .route("/jobs/{id}/config", get(views::config))
        .route("/overview", get(views::overview))
        .route("/jobs/overview", get(views::jobs_overview))
        .route("/taskmanagers", get(taskmanagers))
        .route("/taskmanagers/{id}", get(views::taskmanager))
        // Prometheus / OpenMetrics, Flink's metric names and labels.
        .route("/metrics", get(metrics::metrics))
        // As Flink's REST API: every error answers `{"errors": [...]}` naming what was asked.
        .fallback(|method: axum::http::Method, uri: axum::http::Uri| async move {
            not_found(format!("Not found: {method} {uri}"))
        })
        .method_not_allowed_fallback(|method: axum::http::Method, uri: axum::http::Uri| async move {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(json!({ "errors": [format!("{method} is not allowed on {uri}")] })),
            )
                .into_response()
        })
        .with_state(jm)
}

fn not_found(message: String) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "errors": [message] }))).into_response()
}

async fn list_jobs(State(jm): State<JobManager>) -> Json<Value> {
    let state = jm.state();
    let jobs: Vec<Value> = state
        .jobs
        .iter()
        .map(|(id, j)| json!({ "id": id, "name": j.master.args.name, "status": j.master.status.name() }))
        .chain(
            state
                .ended
                .iter()
                .map(|(id, j)| json!({ "id": id, "name": j.name, "status": j.status })),
        )
        .collect();
    Json(json!({ "jobs": jobs }))
}

/// Flink's `GET /jobs/{id}/vertices/{vertex}/watermarks`: each subtask's
/// `{subtask}.currentInputWatermark` as a string of ms (Flink's shape); a subtask without a
/// watermark yet is left out. `vertex` is the vertex id `/jobs/{id}` lists.
async fn watermarks(State(jm): State<JobManager>, Path((id, vertex)): Path<(String, String)>) -> Response {
    let state = jm.state();
    let Some(job) = state.jobs.get(&id) else {
        return not_found(format!("job {id} not found"));
    };
    let m = &job.master;
    let g = &m.graph;
    let Some(ejv) = g
        .job_vertices()
        .iter()
        .find(|ejv| g.job_graph().vertex(ejv.index).id == vertex)
    else {
        return not_found(format!("job {id} has no vertex {vertex}"));
    };
    let values: Vec<Value> = ejv
        .subtasks
        .iter()
        .filter_map(|ev| {
            let w = m.counters[g.global_index(ev.id)].current_watermark?;
            Some(json!({ "id": format!("{}.currentInputWatermark", ev.id.subtask), "value": w.to_string() }))
        })
        .collect();
    Json(Value::Array(values)).into_response()
}

/// A job that ended under an earlier JobManager: what the operation log knows of it.
fn ended_details(id: &str, job: &EndedJob) -> Value {
    json!({
        "jid": id,
        "name": job.name,
        "state": job.status,
        "start-time": job.start_time_ms,
        "end-time": job.end_time_ms,
        "duration": job.end_time_ms.saturating_sub(job.start_time_ms),
        "failure-cause": job.failure,
        "restored-from-operation-log": true,
        "vertices": [],
        "regions": [],
        "slots": [],
    })
}

async fn job_details(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    let state = jm.state();
    match (state.jobs.get(&id), state.ended.get(&id)) {
        (Some(job), _) => Json(details(&id, job)).into_response(),
        (None, Some(ended)) => Json(ended_details(&id, ended)).into_response(),
        (None, None) => not_found(format!("job {id} not found")),
    }
}

/// Everything a person or a test checks about a job: status, every vertex with parallelism and each
/// subtask's state, attempt, prior attempts and TaskManager, the regions, and the slot placement.
pub fn details(id: &str, job: &JobEntry) -> Value {
    let m = &job.master;
    let g = &m.graph;
    let requirements = m.resource_requirements();
    let vertices: Vec<Value> = g
        .job_vertices()
        .iter()
        .map(|ejv| {
            let v = g.job_graph().vertex(ejv.index);
            let subtasks: Vec<Value> = ejv
                .subtasks
                .iter()
                .map(|ev| {
                    let global = g.global_index(ev.id);
                    let loc = m.location[global].as_ref();
                    json!({
                        "subtask": ev.id.subtask,
                        "status": ev.current.state.name(),
                        // Flink's attempt number (counted per JobManager leader epoch), and the
                        // epoch whose JobManager made the attempt.
                        "attempt": attempt_number(ev.current.attempt),
                        "attempt-leader-epoch": ev.current.attempt >> 32,
                        "prior-attempts": ev.prior.iter().map(|p| json!({"attempt": attempt_number(p.attempt), "attempt-leader-epoch": p.attempt >> 32, "status": p.state.name()})).collect::<Vec<_>>(),
                        "taskmanager-id": loc.map(|s| s.taskmanager.clone()),
                        "slot": loc.map(|s| s.slot),
                        "records-in": m.counters[global].records_in,
                        // Flink's `currentInputWatermark` (ms); absent before the first.
                        "watermark": m.counters[global].current_watermark,
                        "numLateRecordsDropped": m.counters[global].late_records_dropped,
                        "records-out": m.counters[global].records_out,
                        "bytes-in": m.counters[global].bytes_in,
                        "bytes-out": m.counters[global].bytes_out,
                        // Flink's buffers.inPoolUsage / outPoolUsage at the last report (0..1).
                        "buffers.inPoolUsage": m.counters[global].in_pool_usage,
                        "buffers.outPoolUsage": m.counters[global].out_pool_usage,
                        // Flink's task metrics, over the last few seconds.
                        "metrics": m.task_rates(global).map(|r| json!({
                            "numRecordsInPerSecond": r.records_in_per_second,
                            "numRecordsOutPerSecond": r.records_out_per_second,
                            "numBytesInPerSecond": r.bytes_in_per_second,
                            "numBytesOutPerSecond": r.bytes_out_per_second,
                            "busyTimeMsPerSecond": r.busy_ms_per_second,
                            "backPressuredTimeMsPerSecond": r.backpressured_ms_per_second,
                            "idleTimeMsPerSecond": r.idle_ms_per_second,
                            "pendingRecords": m.counters[global].pending_records,
                        })),
                        // Finished under an earlier JobManager; this one did not run it.
                        "restored-from-operation-log": m.restored_finished.contains(&ev.id),
                    })
                })
                .collect();
            // Adaptive batch: decided at run time, and why (Flink shows only the number).
            let decision = m.decisions().get(&ejv.index.0).map(|d| {
                json!({
                    "parallelism": d.parallelism,
                    "input-bytes": d.input_bytes,
                    "bytes-per-subtask": d.bytes_per_subtask,
                    "largest-subpartition-bytes": d.largest_subpartition_bytes,
                    "subpartition-ranges": d.subpartition_ranges.iter().map(|&(s, e)| [s, e]).collect::<Vec<_>>(),
                    "reason": d.reason,
                    "time": d.time_ms,
                })
            });
            json!({
                "id": v.id,
                "name": v.name,
                "parallelism": v.parallelism,
                // What its resource requirements ask for (the upper bound).
                "desired-parallelism": requirements.get(&v.id).map_or(v.parallelism, |b| b.upper),
                "max-parallelism": v.max_parallelism,
                "slot-sharing-group": v.slot_sharing_group,
                "parallelism-decided-at-run-time": g.is_dynamic(ejv.index),
                "parallelism-decision": decision,
                // The vertex's watermark: the smallest of its subtasks' (absent until each has one).
                "watermark": ejv
                    .subtasks
                    .iter()
                    .map(|ev| m.counters[g.global_index(ev.id)].current_watermark)
                    .collect::<Option<Vec<i64>>>()
                    .and_then(|w| w.into_iter().min()),
                "subtasks": subtasks,
            })
        })
        .collect();
    let regions: Vec<Value> = m
        .regions
        .regions()
        .iter()
        .map(|r| json!({ "tasks": r.vertices.iter().map(|&v| g.task_name(v)).collect::<Vec<_>>() }))
        .collect();
    let slot_tasks = m.slot_tasks();
    let slots: Vec<Value> = m
        .placement()
        .into_iter()
        .zip(slot_tasks)
        .map(|((numbered, slot), tasks)| {
            json!({
                "taskmanager": numbered.taskmanager,
                "taskmanager-id": slot.taskmanager,
                "slot": slot.slot,
                "tasks": tasks,
            })
        })
        .collect();
    let (total, finished) = m.progress();
    let end = job.end_time_ms;
    json!({
        "jid": id,
        "name": m.args.name,
        "state": m.status.name(),
        "start-time": job.start_time_ms,
        "end-time": end.map_or(-1, |e| e as i64),
        "duration": end.unwrap_or_else(|| job.start_time_ms + job.submitted.elapsed().as_millis() as u64) - job.start_time_ms,
        "restarts": m.restarts,
        "failure-cause": m.failure,
        "tasks": { "total": total, "finished": finished },
        "records-processed": m.records_processed(),
        "vertices": vertices,
        "plan": plan(id, m),
        "regions": regions,
        "slots": slots,
        // The slots the job would use if it had them (what the operator gives it replicas for).
        "slots-wanted": m.slots_wanted(),
        "autoscaler": m.autoscaler.as_ref().map(|a| autoscaler_json(a, now_ms())),
        "last-rescale": m.last_rescale.as_ref().map(|r| json!({
            "time": r.requested_ms,
            "from": r.from,
            "to": r.to,
            // From the stop to the new tasks' deployment.
            "duration": r.deployed_ms.saturating_sub(r.requested_ms),
            "restored-checkpoint": r.checkpoint,
        })),
    })
}

/// Flink's job plan: every vertex with the edges into it (its producer, how records are routed
/// and how the result is exchanged): the dataflow graph the web UI draws.
fn plan(id: &str, m: &crate::job::JobMaster) -> Value {
    use floe_scheduler::job_graph::{Partitioner, ResultPartitionType, VertexIndex};
    let jg = m.graph.job_graph();
    let nodes: Vec<Value> = jg
        .vertices()
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let inputs: Vec<Value> = jg
                .inputs(VertexIndex(i as u32))
                .iter()
                .enumerate()
                .map(|(num, &r)| {
                    let d = jg.data_set(r);
                    json!({
                        "num": num,
                        "id": jg.vertex(d.producer).id,
                        "ship_strategy": match d.partitioner {
                            Partitioner::Forward => "FORWARD",
                            Partitioner::Rebalance => "REBALANCE",
                            Partitioner::Rescale => "RESCALE",
                            Partitioner::Hash => "HASH",
                            Partitioner::Broadcast => "BROADCAST",
                        },
                        "exchange": match d.partition_type {
                            ResultPartitionType::Pipelined => "pipelined",
                            ResultPartitionType::PipelinedBounded => "pipelined_bounded",
                            ResultPartitionType::Blocking => "blocking",
                            ResultPartitionType::Hybrid => "hybrid_full",
                        },
                    })
                })
                .collect();
            json!({
                "id": v.id,
                "parallelism": v.parallelism,
                "description": v.name,
                "slot_sharing_group": v.slot_sharing_group,
                "inputs": inputs,
            })
        })
        .collect();
    json!({ "jid": id, "name": m.args.name, "nodes": nodes })
}

/// Flink's resource requirements (FLIP-291): per vertex id, `{"parallelism": {"lowerBound": l,
/// "upperBound": u}}`.
async fn resource_requirements(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    let state = jm.state();
    let Some(job) = state.jobs.get(&id) else {
        return not_found(format!("job {id} not found"));
    };
    let body: serde_json::Map<String, Value> = job
        .master
        .resource_requirements()
        .into_iter()
        .map(|(v, b)| {
            (
                v,
                json!({ "parallelism": { "lowerBound": b.lower, "upperBound": b.upper } }),
            )
        })
        .collect();
    Json(Value::Object(body)).into_response()
}

/// Sets resource requirements: the job rescales when the parallelism they give differs.
async fn put_resource_requirements(
    State(jm): State<JobManager>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let bad =
        |message: String| (StatusCode::BAD_REQUEST, Json(json!({ "errors": [message] }))).into_response();
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad(format!("request body: not JSON: {e}")),
    };
    let Some(vertices) = parsed.as_object() else {
        return bad("request body: expected {\"<vertex id>\": {\"parallelism\": {\"lowerBound\": N, \"upperBound\": N}}}".into());
    };
    let mut bounds = std::collections::BTreeMap::new();
    for (vertex, v) in vertices {
        let bound = |name: &str| {
            v["parallelism"][name]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
        };
        match (bound("lowerBound"), bound("upperBound")) {
            (Some(lower), Some(upper)) => {
                bounds.insert(vertex.clone(), crate::job::ParallelismBounds { lower, upper });
            }
            _ => {
                return bad(format!(
                    "{vertex}: expected {{\"parallelism\": {{\"lowerBound\": N, \"upperBound\": N}}}}, got {v}"
                ));
            }
        }
    }
    match jm.set_resource_requirements(&id, &bounds) {
        Ok(()) => (StatusCode::OK, Json(json!({}))).into_response(),
        Err(Error::UnknownJob(id)) => not_found(format!("job {id} not found")),
        Err(e) => (StatusCode::CONFLICT, Json(json!({ "errors": [e.to_string()] }))).into_response(),
    }
}

async fn cancel_job(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    if let Some(ended) = jm.state().ended.get(&id) {
        let message = format!("job {id} already ended ({})", ended.status);
        return (StatusCode::CONFLICT, Json(json!({ "errors": [message] }))).into_response();
    }
    match jm.cancel(&id) {
        Ok(()) => (StatusCode::ACCEPTED, Json(json!({}))).into_response(),
        Err(Error::UnknownJob(id)) => not_found(format!("job {id} not found")),
        Err(e) => (StatusCode::CONFLICT, Json(json!({ "errors": [e.to_string()] }))).into_response(),
    }
}

async fn taskmanagers(State(jm): State<JobManager>) -> Json<Value> {
    let state = jm.state();
    let tms: Vec<Value> = state
        .taskmanagers
        .values()
        .map(|tm| {
            json!({
                "id": tm.id,
                "address": tm.address,
                "slots": tm.slots,
                "buffered-bytes": tm.buffered_bytes,
                "buffered-bytes-peak": tm.buffered_bytes_peak,
                "rss-bytes": tm.rss_bytes,
                "rss-peak-bytes": tm.rss_peak_bytes,
                "last-heartbeat-ms-ago": tm.last_heartbeat.elapsed().as_millis() as u64,
                // Executions not yet ended, as of its last heartbeat.
                "executions-running": tm.running_executions,
            })
        })
        .collect();
    Json(json!({ "taskmanagers": tms }))
}

/// The attempt number within its leader epoch (attempt ids are `epoch << 32 | n`).
fn attempt_number(attempt: u64) -> u64 {
    attempt & 0xffff_ffff
}

/// The autoscaler's phase, its newest evaluation and the rescales it asked for, each vertex with
/// its rates and the reason for its parallelism.
fn autoscaler_json(a: &crate::job::JobAutoscaler, now_ms: u64) -> Value {
    use floe_scheduler::autoscaler::{Evaluation, Phase};
    let evaluation = |e: &Evaluation| {
        json!({
            "time": e.at_ms,
            "window-ms": e.window_ms,
            "vertices": e.vertices.iter().map(|v| json!({
                "id": v.id,
                "parallelism": v.parallelism,
                "proposed-parallelism": v.proposed,
                "busyTimeMsPerSecond": v.busy_ms_per_second,
                "backPressuredTimeMsPerSecond": v.backpressured_ms_per_second,
                "idleTimeMsPerSecond": v.idle_ms_per_second,
                "numRecordsInPerSecond": v.records_in_per_second,
                "numRecordsOutPerSecond": v.records_out_per_second,
                "true-processing-rate": v.true_processing_rate,
                "target-rate": v.target_rate,
                "catch-up-rate": v.catch_up_rate,
                "pendingRecords": v.pending_records,
                "reason": v.reason,
            })).collect::<Vec<_>>(),
        })
    };
    let phase = match a.autoscaler.phase(now_ms) {
        Phase::Stabilizing { .. } => "STABILIZING",
        Phase::Collecting => "COLLECTING",
        Phase::Evaluating => "EVALUATING",
    };
    json!({
        "phase": phase,
        "last-evaluation": a.autoscaler.last.as_ref().map(evaluation),
        "decisions": a.decisions.iter().map(|d| json!({
            "time": d.at_ms,
            "from": d.from,
            "to": d.to,
            "evaluation": evaluation(&d.evaluation),
        })).collect::<Vec<_>>(),
    })
}
