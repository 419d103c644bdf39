//! What the operator asks a job's JobManager over its REST API (the shape of Flink's): which job it
//! runs and in which state (`GET /jobs`, `GET /jobs/{id}`), to cancel it (`PATCH /jobs/{id}`), and
//! savepoints (`POST /jobs/{id}/savepoints`, `POST /jobs/{id}/stop`,
//! `GET /jobs/{id}/savepoints/{trigger}`).
//! [`JobManagerApi`] is the boundary; [`RestClient`] is the HTTP implementation.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

/// Why the JobManager could not answer. Always retryable: the JobManager may still be starting.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error("JobManager at {url} is unreachable: {message}")]
    Unreachable { url: String, message: String },
    #[error("JobManager at {url} answered {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("JobManager at {url} sent a body that is not the REST API's: {message}")]
    Body { url: String, message: String },
}

/// A job as the JobManager reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOverview {
    pub id: String,
    pub name: String,
    /// Flink's job status name: CREATED, RUNNING, FINISHED, FAILED, CANCELLING, CANCELED, ...
    pub state: String,
    pub start_time_ms: Option<u64>,
    /// When the job reached its terminal state (Flink's `end-time`; none while it runs).
    pub end_time_ms: Option<u64>,
    pub failure: Option<String>,
    /// The highest parallelism of its vertices now (the adaptive scheduler changes it with the
    /// TaskManagers the job has).
    pub parallelism: Option<u32>,
    /// The slots the job would use if it had them (`slots-wanted`: what the autoscaler asked for).
    pub slots_wanted: Option<u32>,
    /// The autoscaler's rescale decisions, oldest first.
    pub autoscaler_decisions: Vec<AutoscalerDecision>,
}

/// One rescale the job's autoscaler asked for, as an event tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoscalerDecision {
    /// When it was made (ms since the epoch).
    pub time_ms: u64,
    /// `vertex: from -> to (reason)` for each vertex it changes.
    pub summary: String,
}

/// Where a savepoint the operator triggered stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavepointState {
    InProgress,
    Completed { location: String },
    Failed { cause: String },
}

impl JobOverview {
    pub fn is_terminal(&self) -> bool {
        matches!(self.state.as_str(), "FINISHED" | "FAILED" | "CANCELED")
    }
}

/// The JobManager's REST API as the operator uses it. `base` is `http://host:port`.
#[async_trait]
pub trait JobManagerApi: Send + Sync + std::fmt::Debug {
    /// The job the JobManager runs (the newest one, if it ever ran several), or `None` before the
    /// job is submitted.
    async fn current_job(&self, base: &str) -> Result<Option<JobOverview>, RestError>;
    /// Asks the JobManager to cancel a job; a job already ended is not an error.
    async fn cancel(&self, base: &str, job_id: &str) -> Result<(), RestError>;
    /// Triggers a savepoint of the job into its default directory (`state.savepoints.dir`, else
    /// its job storage's `savepoints/`); `stop`: stop the job with it. Returns the trigger id.
    async fn trigger_savepoint(&self, base: &str, job_id: &str, stop: bool) -> Result<String, RestError>;
    /// What became of a savepoint trigger; a trigger the JobManager does not know (it restarted)
    /// is failed.
    async fn savepoint_state(
        &self,
        base: &str,
        job_id: &str,
        trigger: &str,
    ) -> Result<SavepointState, RestError>;
    /// Asks the JobManager for a checkpoint of the job now (Flink's `POST /jobs/{id}/checkpoints`).
    async fn trigger_checkpoint(&self, base: &str, job_id: &str) -> Result<(), RestError>;
    /// Disposes of the savepoint at `location` (Flink's `POST /savepoint-disposal`): its files are
    /// deleted once the JobManager answers.
    async fn dispose_savepoint(&self, base: &str, location: &str) -> Result<(), RestError>;
}

/// HTTP/1 client of the REST API.
#[derive(Debug, Clone)]
pub struct RestClient {
    http: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Default for RestClient {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        RestClient {
            http: Client::builder(TokioExecutor::new()).build(connector),
            timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Deserialize)]
struct JobsList {
    jobs: Vec<JobsListEntry>,
}

#[derive(Deserialize)]
struct JobsListEntry {
    id: String,
}

#[derive(Deserialize)]
struct JobDetails {
    jid: String,
    name: String,
    state: String,
    #[serde(rename = "start-time")]
    start_time: Option<u64>,
    /// -1 while the job runs, as in Flink.
    #[serde(rename = "end-time", default)]
    end_time: Option<i64>,
    #[serde(rename = "failure-cause")]
    failure_cause: Option<String>,
    #[serde(default)]
    vertices: Vec<VertexDetails>,
    #[serde(rename = "slots-wanted", default)]
    slots_wanted: Option<u32>,
    #[serde(default)]
    autoscaler: Option<AutoscalerDetails>,
}

#[derive(Deserialize)]
struct VertexDetails {
    parallelism: u32,
}

#[derive(Deserialize)]
struct AutoscalerDetails {
    #[serde(default)]
    decisions: Vec<DecisionDetails>,
}

#[derive(Deserialize)]
struct DecisionDetails {
    time: u64,
    evaluation: EvaluationDetails,
}

#[derive(Deserialize)]
struct EvaluationDetails {
    vertices: Vec<EvaluatedVertex>,
}

#[derive(Deserialize)]
struct EvaluatedVertex {
    id: String,
    parallelism: u32,
    #[serde(rename = "proposed-parallelism")]
    proposed: u32,
    reason: String,
}

impl DecisionDetails {
    fn summary(&self) -> AutoscalerDecision {
        let changes: Vec<String> = self
            .evaluation
            .vertices
            .iter()
            .filter(|v| v.proposed != v.parallelism)
            .map(|v| format!("{}: {} -> {} ({})", v.id, v.parallelism, v.proposed, v.reason))
            .collect();
        AutoscalerDecision {
            time_ms: self.time,
            summary: changes.join("; "),
        }
    }
}

#[derive(Deserialize)]
struct Triggered {
    #[serde(rename = "request-id")]
    request_id: String,
}

#[derive(Deserialize)]
struct SavepointAnswer {
    status: SavepointAnswerStatus,
    #[serde(default)]
    operation: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct SavepointAnswerStatus {
    id: String,
}

impl RestClient {
    async fn call(&self, method: http::Method, url: &str) -> Result<(u16, Bytes), RestError> {
        self.call_with(method, url, Bytes::new()).await
    }

    async fn call_with(
        &self,
        method: http::Method,
        url: &str,
        body: Bytes,
    ) -> Result<(u16, Bytes), RestError> {
        let unreachable = |message: String| RestError::Unreachable {
            url: url.to_string(),
            message,
        };
        let request = http::Request::builder()
            .method(method)
            .uri(url)
            .header("accept", "application/json")
            .header("content-type", "application/json")
            .body(Full::new(body))
            .map_err(|e| unreachable(e.to_string()))?;
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| unreachable(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| unreachable(format!("{e:#}")))?;
        let status = response.status().as_u16();
        let body = tokio::time::timeout(self.timeout, response.into_body().collect())
            .await
            .map_err(|_| unreachable(format!("no body within {:?}", self.timeout)))?
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok((status, body))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, RestError> {
        let (status, body) = self.call(http::Method::GET, url).await?;
        expect_json(url, status, 200, &body)
    }
}

/// The answer to `url` as a `T` when its status is `expected`; else the status error, or the body
/// error when it is not the REST API's.
fn expect_json<T: serde::de::DeserializeOwned>(
    url: &str,
    status: u16,
    expected: u16,
    body: &[u8],
) -> Result<T, RestError> {
    if status != expected {
        return Err(RestError::Status {
            url: url.into(),
            status,
            body: String::from_utf8_lossy(body).into_owned(),
        });
    }
    serde_json::from_slice(body).map_err(|e| RestError::Body {
        url: url.into(),
        message: e.to_string(),
    })
}

#[async_trait]
impl JobManagerApi for RestClient {
    async fn current_job(&self, base: &str) -> Result<Option<JobOverview>, RestError> {
        let list: JobsList = self.get_json(&format!("{base}/jobs")).await?;
        let mut newest: Option<JobOverview> = None;
        for entry in list.jobs {
            let d: JobDetails = self.get_json(&format!("{base}/jobs/{}", entry.id)).await?;
            let overview = JobOverview {
                id: d.jid,
                name: d.name,
                state: d.state,
                start_time_ms: d.start_time,
                end_time_ms: d.end_time.and_then(|t| u64::try_from(t).ok()),
                failure: d.failure_cause.filter(|f| !f.is_empty()),
                parallelism: d.vertices.iter().map(|v| v.parallelism).max(),
                slots_wanted: d.slots_wanted,
                autoscaler_decisions: d
                    .autoscaler
                    .map(|a| a.decisions.iter().map(DecisionDetails::summary).collect())
                    .unwrap_or_default(),
            };
            if newest
                .as_ref()
                .is_none_or(|n| overview.start_time_ms >= n.start_time_ms)
            {
                newest = Some(overview);
            }
        }
        Ok(newest)
    }

    async fn trigger_savepoint(&self, base: &str, job_id: &str, stop: bool) -> Result<String, RestError> {
        let (url, body) = match stop {
            true => (format!("{base}/jobs/{job_id}/stop"), r#"{"drain": false}"#),
            false => (
                format!("{base}/jobs/{job_id}/savepoints"),
                r#"{"cancel-job": false}"#,
            ),
        };
        let (status, answer) = self
            .call_with(http::Method::POST, &url, Bytes::from_static(body.as_bytes()))
            .await?;
        let triggered: Triggered = expect_json(&url, status, 202, &answer)?;
        Ok(triggered.request_id)
    }

    async fn savepoint_state(
        &self,
        base: &str,
        job_id: &str,
        trigger: &str,
    ) -> Result<SavepointState, RestError> {
        let url = format!("{base}/jobs/{job_id}/savepoints/{trigger}");
        let (status, body) = self.call(http::Method::GET, &url).await?;
        if status == 404 {
            return Ok(SavepointState::Failed {
                cause: format!(
                    "the JobManager does not know savepoint {trigger}: {}",
                    String::from_utf8_lossy(&body)
                ),
            });
        }
        let answer: SavepointAnswer = expect_json(&url, status, 200, &body)?;
        if answer.status.id != "COMPLETED" {
            return Ok(SavepointState::InProgress);
        }
        let operation = answer.operation.unwrap_or_default();
        Ok(match operation["location"].as_str() {
            Some(location) => SavepointState::Completed {
                location: location.to_string(),
            },
            None => SavepointState::Failed {
                cause: operation["failure-cause"]["stack-trace"]
                    .as_str()
                    .unwrap_or("the savepoint failed")
                    .to_string(),
            },
        })
    }

    async fn trigger_checkpoint(&self, base: &str, job_id: &str) -> Result<(), RestError> {
        let url = format!("{base}/jobs/{job_id}/checkpoints");
        let (status, answer) = self
            .call_with(http::Method::POST, &url, Bytes::from_static(b"{}"))
            .await?;
        let _: serde_json::Value = expect_json(&url, status, 202, &answer)?;
        Ok(())
    }

    async fn dispose_savepoint(&self, base: &str, location: &str) -> Result<(), RestError> {
        let url = format!("{base}/savepoint-disposal");
        let body = serde_json::json!({ "savepoint-path": location }).to_string();
        let (status, answer) = self
            .call_with(http::Method::POST, &url, Bytes::from(body))
            .await?;
        let _: serde_json::Value = expect_json(&url, status, 200, &answer)?;
        Ok(())
    }

    async fn cancel(&self, base: &str, job_id: &str) -> Result<(), RestError> {
        let url = format!("{base}/jobs/{job_id}");
        let (status, body) = self.call(http::Method::PATCH, &url).await?;
        // 409: the job already ended, which is what cancelling wants.
        if matches!(status, 200 | 202 | 409) {
            return Ok(());
        }
        Err(RestError::Status {
            url,
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use floe_jobmanager::{JobManager, JobManagerConfig};

    /// A real JobManager on loopback (no TaskManagers: its job waits for slots in CREATED).
    async fn start_jobmanager() -> (String, JobManager) {
        let rest = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let rpc = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = JobManagerConfig {
            rpc_address: rpc.local_addr().unwrap(),
            rest_address: rest.local_addr().unwrap(),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(10),
            slot_request_timeout: Duration::from_secs(60),
            ..JobManagerConfig::default()
        };
        drop((rest, rpc));
        let base = format!("http://{}", config.rest_address);
        let jm = JobManager::new(config, floe_datastream::JobRegistry::builtin());
        tokio::spawn(jm.clone().serve());
        (base, jm)
    }

    #[tokio::test]
    async fn reads_and_cancels_a_job_on_a_real_jobmanager() {
        let (base, jm) = start_jobmanager().await;
        let client = RestClient::default();
        // The JobManager may take a moment to bind.
        let mut first = Err(RestError::Unreachable {
            url: base.clone(),
            message: "not tried".into(),
        });
        for _ in 0..100 {
            first = client.current_job(&base).await;
            if first.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(first.unwrap(), None, "no job submitted yet");
        let id = jm
            .submit(floe_datastream::JobArgs {
                name: "wordcount".into(),
                args: vec![
                    "--input".into(),
                    "/nonexistent/in.txt".into(),
                    "--output".into(),
                    "/nonexistent/out".into(),
                ],
                configuration: Default::default(),
            })
            .unwrap();
        let job = client.current_job(&base).await.unwrap().unwrap();
        assert_eq!(job.id, id);
        assert_eq!(job.name, "wordcount");
        assert_eq!(job.state, "CREATED");
        assert!(job.start_time_ms.is_some());
        // A checkpoint asked of a job that does not run is refused, saying why.
        let e = client
            .trigger_checkpoint(&base, &id)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("answered 409") && e.contains("not RUNNING"), "{e}");
        client.cancel(&base, &id).await.unwrap();
        let job = client.current_job(&base).await.unwrap().unwrap();
        assert_eq!(job.state, "CANCELED");
        assert!(job.is_terminal());
        // Cancelling an ended job is not an error; an unknown one is.
        client.cancel(&base, &id).await.unwrap();
        let e = client.cancel(&base, "nope").await.unwrap_err().to_string();
        assert!(
            e.contains("answered 404") && e.contains("job nope not found"),
            "{e}"
        );
        // Savepoint disposal refuses a directory that holds no savepoint, deleting nothing.
        let dir = std::env::temp_dir().join(format!("floe-disposal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep"), "x").unwrap();
        let e = client
            .dispose_savepoint(&base, &dir.display().to_string())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("answered 400") && e.contains("not a savepoint"), "{e}");
        assert!(dir.join("keep").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn an_unreachable_jobmanager_is_an_error_naming_the_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let base = format!("http://127.0.0.1:{port}");
        let e = RestClient::default()
            .current_job(&base)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("JobManager at {base}/jobs is unreachable")),
            "{e}"
        );
    }
}
