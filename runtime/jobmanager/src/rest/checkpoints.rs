//! Flink's checkpoint statistics, in its shape: `GET /jobs/{id}/checkpoints` (counts, the latest
//! completed checkpoint and the recent history) and `GET /jobs/{id}/checkpoints/details/{checkpoint}`
//! (one checkpoint of the history, per vertex and per subtask: what each acknowledged, when).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::not_found;
use crate::checkpoint_history::{CheckpointStats, CheckpointStatus};
use crate::server::JobManager;

/// Where a completed checkpoint's metadata is, relative to the job storage.
fn external_path(job: &str, id: u64) -> String {
    format!("checkpoints/{job}/chk-{id}")
}

/// One entry of the history (Flink's `history[]` fields).
fn summary(job: &str, e: &CheckpointStats) -> Value {
    let latest_ack = e.latest_ack_ms();
    let end = e.ended_ms.or(latest_ack).unwrap_or(e.triggered_ms);
    json!({
        "id": e.id,
        "status": e.status.name(),
        "is_savepoint": e.savepoint,
        "trigger_timestamp": e.triggered_ms,
        "latest_ack_timestamp": latest_ack,
        "end_to_end_duration": end.saturating_sub(e.triggered_ms),
        "state_size": e.state_size(),
        "checkpointed_size": e.checkpointed_size(),
        "num_subtasks": e.num_subtasks,
        "num_acknowledged_subtasks": e.acks.len(),
        "external_path": (e.status == CheckpointStatus::Completed).then(|| external_path(job, e.id)),
        "failure_message": e.failure,
        "failure_timestamp": (e.status == CheckpointStatus::Failed).then_some(e.ended_ms).flatten(),
    })
}

pub(super) async fn checkpoints(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    let state = jm.state();
    let Some(job) = state.jobs.get(&id) else {
        return not_found(format!("job {id} not found"));
    };
    let Some(c) = job.master.checkpoints.as_ref() else {
        return Json(json!({
            "counts": { "triggered": 0, "in_progress": 0, "completed": 0, "failed": 0 },
            "latest": { "completed": null },
            "history": [],
            "enabled": false,
        }))
        .into_response();
    };
    // `state_size` is all the state, `checkpointed_size` what this checkpoint uploaded.
    let latest = c.latest.as_ref().map(|l| {
        json!({
            "id": l.id,
            "trigger_timestamp": l.triggered_ms,
            "latest_ack_timestamp": l.completed_ms,
            "end_to_end_duration": l.completed_ms.saturating_sub(l.triggered_ms),
            "state_size": l.state_bytes(),
            "checkpointed_size": l.uploaded_bytes(),
            "external_path": external_path(&l.job_id, l.id),
        })
    });
    Json(json!({
        "enabled": true,
        "interval": c.config.interval.as_millis() as u64,
        "counts": {
            "triggered": c.counts.triggered,
            "in_progress": u64::from(c.pending().is_some()),
            "completed": c.counts.completed,
            "failed": c.counts.failed,
        },
        "latest": {
            "completed": latest,
            "restored": c.restored.map(|id| json!({
                "id": id,
                "is_savepoint": c.restored_savepoint.is_some(),
                "external_path": c.restored_savepoint,
            })),
        },
        // Newest first, as Flink lists it.
        "history": c.history.entries().rev().map(|e| summary(&id, e)).collect::<Vec<_>>(),
    }))
    .into_response()
}

pub(super) async fn details(
    State(jm): State<JobManager>,
    Path((id, checkpoint)): Path<(String, String)>,
) -> Response {
    let state = jm.state();
    let Some(job) = state.jobs.get(&id) else {
        return not_found(format!("job {id} not found"));
    };
    let entry = checkpoint
        .parse::<u64>()
        .ok()
        .and_then(|n| job.master.checkpoints.as_ref().and_then(|c| c.history.get(n)));
    let Some(e) = entry else {
        return not_found(format!(
            "job {id} has no checkpoint {checkpoint} in its history (the newest {} are kept)",
            crate::checkpoint_history::HISTORY_SIZE
        ));
    };
    let g = &job.master.graph;
    let mut tasks = serde_json::Map::new();
    for ejv in g.job_vertices() {
        let vertex = &g.job_graph().vertex(ejv.index).id;
        let prefix = format!("{vertex}#");
        let acks: BTreeMap<u32, _> = e
            .acks
            .iter()
            .filter_map(|(task, a)| Some((task.strip_prefix(&prefix)?.parse().ok()?, a)))
            .collect();
        let latest_ack = acks.values().map(|a| a.ack_ms).max();
        let subtasks: Vec<Value> = (0..ejv.subtasks.len() as u32)
            .map(|i| match acks.get(&i) {
                Some(a) => json!({
                    "index": i,
                    "status": "completed",
                    "ack_timestamp": a.ack_ms,
                    "end_to_end_duration": a.ack_ms.saturating_sub(e.triggered_ms),
                    "state_size": a.state_size,
                    "checkpointed_size": a.checkpointed_size,
                }),
                None => json!({ "index": i, "status": "pending_or_failed" }),
            })
            .collect();
        let status = if acks.len() == ejv.subtasks.len() {
            "COMPLETED"
        } else {
            e.status.name()
        };
        tasks.insert(
            vertex.clone(),
            json!({
                "id": vertex,
                "status": status,
                "latest_ack_timestamp": latest_ack,
                "end_to_end_duration": latest_ack.map(|t| t.saturating_sub(e.triggered_ms)),
                "state_size": acks.values().map(|a| a.state_size).sum::<u64>(),
                "checkpointed_size": acks.values().map(|a| a.checkpointed_size).sum::<u64>(),
                "num_subtasks": ejv.subtasks.len(),
                "num_acknowledged_subtasks": acks.len(),
                "subtasks": subtasks,
            }),
        );
    }
    let mut body = summary(&id, e);
    body["tasks"] = Value::Object(tasks);
    Json(body).into_response()
}
