//! JobManager and TaskManager processes a test starts itself (application mode, REST polled).
#![allow(clippy::unwrap_used)] // a panic is the failure report

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `PUT /jobs/{id}/resource-requirements` with bounds [1, `upper`] for every vertex; the answer.
pub fn put_upper_bound(rest: &str, id: &str, vertices: &[String], upper: u32) -> (u16, serde_json::Value) {
    let body: serde_json::Map<String, serde_json::Value> = vertices
        .iter()
        .map(|v| {
            (
                v.clone(),
                serde_json::json!({ "parallelism": { "lowerBound": 1, "upperBound": upper } }),
            )
        })
        .collect();
    super::http_with_body(
        "PUT",
        rest,
        &format!("/jobs/{id}/resource-requirements"),
        &serde_json::Value::Object(body).to_string(),
    )
}

/// The ids of a job's vertices, as `GET /jobs/{id}` lists them.
pub fn vertex_ids(job: &serde_json::Value) -> Vec<String> {
    job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// A child process killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `floe jobmanager --job-file` on free ports; returns it with its (rpc, rest) addresses. Its
/// stderr goes to `log`.
pub fn jobmanager(manifest: &Path, log: &Path) -> (Proc, String, String) {
    jobmanager_with(manifest, log, &[])
}

/// [`jobmanager`] with more command-line arguments (`--heartbeat-timeout-ms 2000`).
pub fn jobmanager_with(manifest: &Path, log: &Path, extra: &[&str]) -> (Proc, String, String) {
    jobmanager_at("127.0.0.1:0", manifest, log, extra)
}

/// [`jobmanager_with`] with its RPC endpoint at `rpc` (TaskManagers may be waiting for it there).
pub fn jobmanager_at(rpc: &str, manifest: &Path, log: &Path, extra: &[&str]) -> (Proc, String, String) {
    let mut child = Command::new(super::FLOE)
        .args([
            "jobmanager",
            "--rpc-address",
            rpc,
            "--rest-address",
            "127.0.0.1:0",
        ])
        .args(extra)
        .arg("--job-file")
        .arg(manifest)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "floe jobmanager listening rpc=127.0.0.1:X rest=127.0.0.1:Y"
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or_else(|| {
                panic!(
                    "no {k} in {line:?}: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .to_string()
    };
    let (rpc, rest) = (field("rpc="), field("rest="));
    (Proc(child), rpc, rest)
}

pub fn taskmanager(rpc: &str, slots: u32) -> Proc {
    Proc(
        Command::new(super::FLOE)
            .args(["taskmanager", "--jobmanager", rpc, "--slots", &slots.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The only job a JobManager lists, with its details, once `pred` holds.
pub fn wait_job(
    rest: &str,
    timeout: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let (_, list) = super::http("GET", rest, "/jobs");
        if let Some(id) = list["jobs"].get(0).and_then(|j| j["id"].as_str()) {
            let (_, job) = super::http("GET", rest, &format!("/jobs/{id}"));
            if pred(&job) {
                return job;
            }
        }
        assert!(
            started.elapsed() < timeout,
            "job not as expected after {timeout:?}: {list}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
