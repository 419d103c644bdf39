//! The command-line client in the style of Flink's `flink` CLI: `floe list`, `floe info JOB`,
//! `floe cancel JOB`, `floe savepoint JOB [DIR]`, `floe stop JOB [--savepoint-path DIR]` against
//! a JobManager's REST API (`--jobmanager http://host:port`); text for people by default,
//! `--output json` for scripts (the REST API's own answers).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// Output format of the client commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// A JobManager's REST endpoint.
#[derive(Debug, Clone)]
pub struct Client {
    /// `host:port`.
    address: String,
}

impl Client {
    /// `http://host:port` or `host:port`; refuses anything else, naming it.
    pub fn new(jobmanager: &str) -> anyhow::Result<Client> {
        let rest = jobmanager.strip_prefix("http://").unwrap_or(jobmanager);
        let address = rest.trim_end_matches('/');
        if address.is_empty()
            || address.contains('/')
            || !address.contains(':')
            || jobmanager.starts_with("https://")
        {
            bail!(
                "--jobmanager: expected http://HOST:PORT (the JobManager's REST address), got {jobmanager:?}"
            );
        }
        Ok(Client {
            address: address.to_string(),
        })
    }

    /// One request; the status and the JSON body.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, Value)> {
        let mut stream = std::net::TcpStream::connect(&self.address)
            .with_context(|| format!("cannot reach the JobManager at http://{}", self.address))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.address,
            body.len()
        )?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let text = String::from_utf8_lossy(&response);
        let (head, rest) = text
            .split_once("\r\n\r\n")
            .with_context(|| format!("no HTTP answer from http://{}", self.address))?;
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("not an HTTP answer from http://{}: {head}", self.address))?;
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            dechunk(rest)
        } else {
            rest.to_string()
        };
        let value = if body.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&body).with_context(|| format!("{method} {path}: not JSON: {body}"))?
        };
        Ok((status, value))
    }

    /// A request that must answer 2xx; otherwise the REST API's `errors` as the error.
    fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let (status, value) = self.request(method, path, body)?;
        if (200..300).contains(&status) {
            return Ok(value);
        }
        let errors = value["errors"]
            .as_array()
            .map(|e| e.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "))
            .unwrap_or_else(|| value.to_string());
        bail!("{errors} (HTTP {status})")
    }

    /// `floe list`: every job with its state.
    pub fn list(&self, output: Output) -> anyhow::Result<String> {
        let jobs = self.ok("GET", "/jobs", None)?;
        let list = jobs["jobs"].as_array().cloned().unwrap_or_default();
        let mut rows = Vec::new();
        for j in &list {
            let id = j["id"].as_str().unwrap_or_default();
            let details = self.ok("GET", &format!("/jobs/{id}"), None)?;
            rows.push(details);
        }
        Ok(match output {
            Output::Json => format!("{:#}\n", json!({ "jobs": rows })),
            Output::Text => {
                if rows.is_empty() {
                    return Ok("No jobs.\n".into());
                }
                let mut out = format!(
                    "{:<32}  {:<10}  {:>9}  {}\n",
                    "JOB ID", "STATE", "RESTARTS", "NAME"
                );
                for d in &rows {
                    out.push_str(&format!(
                        "{:<32}  {:<10}  {:>9}  {}\n",
                        d["jid"].as_str().unwrap_or_default(),
                        d["state"].as_str().unwrap_or_default(),
                        d["restarts"].as_u64().unwrap_or(0),
                        d["name"].as_str().unwrap_or_default()
                    ));
                }
                out
            }
        })
    }

    /// `floe info JOB`: its state, vertices and subtasks, checkpoints.
    pub fn info(&self, job: &str, output: Output) -> anyhow::Result<String> {
        let details = self.ok("GET", &format!("/jobs/{job}"), None)?;
        let checkpoints = self.ok("GET", &format!("/jobs/{job}/checkpoints"), None)?;
        Ok(match output {
            Output::Json => format!("{:#}\n", json!({ "job": details, "checkpoints": checkpoints })),
            Output::Text => {
                let mut out = format!(
                    "{} ({}): {}, {} restarts, running {:.1} s\n",
                    details["name"].as_str().unwrap_or_default(),
                    details["jid"].as_str().unwrap_or_default(),
                    details["state"].as_str().unwrap_or_default(),
                    details["restarts"].as_u64().unwrap_or(0),
                    details["duration"].as_f64().unwrap_or(0.0) / 1000.0
                );
                if let Some(cause) = details["failure-cause"].as_str() {
                    out.push_str(&format!("Failure: {cause}\n"));
                }
                for v in details["vertices"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "  {} (parallelism {})\n",
                        v["name"].as_str().unwrap_or_default(),
                        v["parallelism"]
                    ));
                    for s in v["subtasks"].as_array().into_iter().flatten() {
                        out.push_str(&format!(
                            "    #{} {:<10} attempt {} on {}  in {} out {}\n",
                            s["subtask"],
                            s["status"].as_str().unwrap_or_default(),
                            s["attempt"],
                            s["taskmanager-id"].as_str().unwrap_or("-"),
                            s["records-in"],
                            s["records-out"]
                        ));
                    }
                }
                if checkpoints["enabled"] == true {
                    out.push_str(&format!(
                        "Checkpoints: {} completed, {} failed; latest {}\n",
                        checkpoints["counts"]["completed"],
                        checkpoints["counts"]["failed"],
                        checkpoints["latest"]["completed"]["id"]
                    ));
                }
                out
            }
        })
    }

    /// `floe cancel JOB`: asks the JobManager to cancel it and waits until it has ended.
    pub fn cancel(&self, job: &str, output: Output) -> anyhow::Result<String> {
        self.ok("PATCH", &format!("/jobs/{job}"), None)?;
        let state = self.wait_ended(job)?;
        Ok(match output {
            Output::Json => format!("{}\n", json!({ "jid": job, "state": state })),
            Output::Text => format!("Cancelled job {job}: {state}\n"),
        })
    }

    /// `floe savepoint JOB [DIR]` (`stop`: `floe stop JOB`, a savepoint then the job stops):
    /// triggers it and waits for its location. DIR is a URL or a path, as the JobManager takes
    /// it (a plain path is a local directory); a relative path is made absolute here, against
    /// the working directory it was typed in, not the JobManager's.
    /// A savepoint of `job` into `dir`; `stop`: `Some(drain)` stops the job with it (`drain`:
    /// ending event time first, Flink's `stop --drain`).
    pub fn savepoint(
        &self,
        job: &str,
        dir: Option<&str>,
        stop: Option<bool>,
        output: Output,
    ) -> anyhow::Result<String> {
        let (id, location) = self.savepoint_location(job, dir, stop)?;
        Ok(match output {
            Output::Json => format!(
                "{}\n",
                json!({ "jid": job, "request-id": id, "location": location })
            ),
            Output::Text if stop.is_some() => format!("Savepoint completed, job {job} stopped: {location}\n"),
            Output::Text => format!("Savepoint completed: {location}\n"),
        })
    }

    /// `GET path` of the REST API: the answer, or the API's errors when it is not 2xx.
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.ok("GET", path, None)
    }

    /// [`Client::savepoint`]'s work: the trigger's request id and the savepoint's location, once
    /// it completed.
    pub fn savepoint_location(
        &self,
        job: &str,
        dir: Option<&str>,
        stop: Option<bool>,
    ) -> anyhow::Result<(String, String)> {
        let dir = dir.map(target_directory).transpose()?;
        let (path, body) = if let Some(drain) = stop {
            (
                format!("/jobs/{job}/stop"),
                json!({ "targetDirectory": dir, "drain": drain }),
            )
        } else {
            (
                format!("/jobs/{job}/savepoints"),
                json!({ "target-directory": dir, "cancel-job": false }),
            )
        };
        let trigger = self.ok("POST", &path, Some(&body))?;
        let id = trigger["request-id"]
            .as_str()
            .context("the JobManager gave no savepoint request id")?
            .to_string();
        let started = Instant::now();
        let status = loop {
            let s = self
                .ok("GET", &format!("/jobs/{job}/savepoints/{id}"), None)
                .with_context(|| {
                    format!("savepoint {id} of job {job} was triggered, but its outcome is unknown")
                })?;
            if s["status"]["id"] == "COMPLETED" {
                break s;
            }
            if started.elapsed() > Duration::from_secs(600) {
                bail!("savepoint {id} of job {job} still in progress after 600 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        if let Some(cause) = status["operation"]["failure-cause"].as_object() {
            bail!(
                "savepoint of job {job} failed: {}",
                cause
                    .get("stack-trace")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
        }
        let location = status["operation"]["location"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok((id, location))
    }

    fn wait_ended(&self, job: &str) -> anyhow::Result<String> {
        let started = Instant::now();
        loop {
            let d = self.ok("GET", &format!("/jobs/{job}"), None)?;
            let state = d["state"].as_str().unwrap_or_default().to_string();
            if matches!(state.as_str(), "CANCELED" | "FINISHED" | "FAILED") {
                return Ok(state);
            }
            if started.elapsed() > Duration::from_secs(120) {
                bail!("job {job} still {state} after 120 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A savepoint directory for the JobManager: a URL or an absolute path as given, a relative path
/// as the `file://` URL of that directory under this process's working directory.
fn target_directory(dir: &str) -> anyhow::Result<String> {
    let dir = dir.trim();
    if dir.is_empty() || dir.contains("://") || dir.starts_with('/') {
        return Ok(dir.to_string());
    }
    floe_datastream::location_url(dir).with_context(|| format!("savepoint directory {dir:?}"))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest.get(n + 2..).unwrap_or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobmanager_address_is_checked() {
        assert!(Client::new("http://127.0.0.1:8081").is_ok());
        assert!(Client::new("127.0.0.1:8081/").is_ok());
        let e = Client::new("https://jm:8081").unwrap_err().to_string();
        assert!(e.contains("--jobmanager: expected http://HOST:PORT"), "{e}");
        assert!(Client::new("jm").is_err());
        assert!(Client::new("http://jm:8081/jobs").is_err());
    }

    #[test]
    fn a_relative_savepoint_directory_is_taken_here() {
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            target_directory("savepoints/a").unwrap(),
            format!("file://{}", here.join("savepoints/a").display())
        );
        for as_given in [
            "/data/savepoints",
            "file:///data/savepoints",
            "s3://bucket/savepoints",
        ] {
            assert_eq!(target_directory(as_given).unwrap(), as_given);
        }
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
