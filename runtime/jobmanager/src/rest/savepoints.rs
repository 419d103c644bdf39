//! Savepoints in Flink's REST shape: `POST /jobs/{id}/savepoints` (`target-directory`,
//! `cancel-job`) and `POST /jobs/{id}/stop` (`targetDirectory`, `drain`) answer
//! `202 {"request-id": ...}`; `GET /jobs/{id}/savepoints/{trigger}` answers
//! `{"status": {"id": "IN_PROGRESS" | "COMPLETED"}, "operation": {"location": ...} |
//! {"failure-cause": {...}}}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::not_found;
use crate::job::SavepointStatus;
use crate::server::{JobManager, SavepointRefused};

fn errors(code: StatusCode, message: String) -> Response {
    (code, Json(json!({ "errors": [message] }))).into_response()
}

/// The body's JSON object (an empty body is `{}`); `Err` says what is wrong (answered 400).
fn body_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(other) => Err(format!("request body: expected a JSON object, got {other}")),
        Err(e) => Err(format!("request body: not JSON: {e}")),
    }
}

fn string_field(o: &serde_json::Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "{name}: expected a string (a directory URL), got {other}"
        )),
    }
}

fn bool_field(o: &serde_json::Map<String, Value>, name: &str) -> Result<bool, String> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("{name}: expected true or false, got {other}")),
    }
}

fn trigger(jm: &JobManager, id: &str, target: Option<String>, stop: bool, drain: bool) -> Response {
    if let Some(ended) = jm.state().ended.get(id) {
        let message = format!("job {id} already ended ({})", ended.status);
        return errors(StatusCode::CONFLICT, message);
    }
    match jm.trigger_savepoint(id, target.as_deref(), stop, drain) {
        Ok(trigger) => (StatusCode::ACCEPTED, Json(json!({ "request-id": trigger }))).into_response(),
        Err(SavepointRefused::UnknownJob(id)) => not_found(format!("job {id} not found")),
        Err(SavepointRefused::NoDirectory(m)) => errors(StatusCode::BAD_REQUEST, m),
        Err(SavepointRefused::Conflict(m)) => errors(StatusCode::CONFLICT, m),
    }
}

/// `POST /jobs/{id}/savepoints`: `{"target-directory": URL, "cancel-job": bool}`.
pub(super) async fn trigger_savepoint(
    State(jm): State<JobManager>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let fields = body_object(&body).and_then(|o| {
        Ok((
            string_field(&o, "target-directory")?,
            bool_field(&o, "cancel-job")?,
        ))
    });
    match fields {
        Ok((target, cancel)) => trigger(&jm, &id, target, cancel, false),
        Err(message) => errors(StatusCode::BAD_REQUEST, message),
    }
}

/// `POST /jobs/{id}/stop`: `{"targetDirectory": URL, "drain": bool}`.
pub(super) async fn stop_with_savepoint(
    State(jm): State<JobManager>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let fields =
        body_object(&body).and_then(|o| Ok((string_field(&o, "targetDirectory")?, bool_field(&o, "drain")?)));
    match fields {
        Ok((target, drain)) => trigger(&jm, &id, target, true, drain),
        Err(message) => errors(StatusCode::BAD_REQUEST, message),
    }
}

/// `POST /jobs/{id}/checkpoints` (Flink's manual checkpoint): `202 {"request-id": ...}`; the
/// checkpoint shows in `GET /jobs/{id}/checkpoints` once taken. 409 when the job does not run or
/// takes no checkpoints.
pub(super) async fn trigger_checkpoint(State(jm): State<JobManager>, Path(id): Path<String>) -> Response {
    if let Some(ended) = jm.state().ended.get(&id) {
        let message = format!("job {id} already ended ({})", ended.status);
        return errors(StatusCode::CONFLICT, message);
    }
    match jm.trigger_checkpoint(&id) {
        Ok(trigger) => (StatusCode::ACCEPTED, Json(json!({ "request-id": trigger }))).into_response(),
        Err(SavepointRefused::UnknownJob(id)) => not_found(format!("job {id} not found")),
        Err(SavepointRefused::NoDirectory(m) | SavepointRefused::Conflict(m)) => {
            errors(StatusCode::CONFLICT, m)
        }
    }
}

/// `POST /savepoint-disposal`: `{"savepoint-path": URL}` (Flink's savepoint disposal; the
/// directory or its `_metadata`). Answers once the savepoint is gone, `200 {"status": {"id":
/// "COMPLETED"}, "operation": {"location": URL}}` (Flink answers a trigger id to poll; deleting
/// a savepoint's objects is quick), or 400 naming why not (not a savepoint: nothing deleted).
pub(super) async fn dispose_savepoint(State(jm): State<JobManager>, body: axum::body::Bytes) -> Response {
    let path = match body_object(&body).and_then(|o| string_field(&o, "savepoint-path")) {
        Ok(Some(path)) => path,
        Ok(None) => {
            let message = "savepoint-path: missing (the savepoint's directory or its _metadata)";
            return errors(StatusCode::BAD_REQUEST, message.to_string());
        }
        Err(message) => return errors(StatusCode::BAD_REQUEST, message),
    };
    match jm.dispose_savepoint(&path).await {
        Ok(location) => Json(json!({
            "status": { "id": "COMPLETED" },
            "operation": { "location": location },
        }))
        .into_response(),
        Err(message) => errors(StatusCode::BAD_REQUEST, message),
    }
}

/// `GET /jobs/{id}/savepoints/{trigger}`.
pub(super) async fn savepoint_status(
    State(jm): State<JobManager>,
    Path((id, trigger)): Path<(String, String)>,
) -> Response {
    match jm.savepoint_status(&id, &trigger) {
        Err(_) => not_found(format!("job {id} not found")),
        Ok(None) => not_found(format!("no savepoint {trigger} of job {id}")),
        Ok(Some(status)) => Json(status_json(&status)).into_response(),
    }
}

fn status_json(status: &SavepointStatus) -> Value {
    match status {
        SavepointStatus::InProgress => json!({ "status": { "id": "IN_PROGRESS" } }),
        SavepointStatus::Completed { location } => json!({
            "status": { "id": "COMPLETED" },
            "operation": { "location": location },
        }),
        SavepointStatus::Failed { cause } => json!({
            "status": { "id": "COMPLETED" },
            "operation": { "failure-cause": { "class": "SavepointFailed", "stack-trace": cause } },
        }),
    }
}
