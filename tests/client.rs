//! The command-line client (issue 16): `floe list`, `info`, `savepoint`, `stop` and `cancel`
//! against a running local cluster's REST API, as a Flink user runs `flink list` and friends;
//! text for people, `--output json` for scripts; a wrong address or job named in the error.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn floe(args: &[&str]) -> Output {
    std::process::Command::new(FLOE).args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn submit(cluster: &floe::local_cluster::LocalCluster, dir: &std::path::Path, name: &str) -> String {
    let args: Vec<String> = [
        "--output",
        dir.join(name).to_str().unwrap(),
        "--records",
        "0",
        "--rate",
        "2000",
    ]
    .map(String::from)
    .to_vec();
    let conf: Vec<(String, String)> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "1"),
        ("execution.checkpointing.interval", "500 ms"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into_iter()
    .chain([(
        "floe.job-storage.url".to_string(),
        format!("file://{}", dir.join(format!("storage-{name}")).display()),
    )])
    .collect();
    submit_job(&cluster.rpc_address, "pipeline", args, conf)
}

fn state(rest: &str, id: &str) -> String {
    http("GET", rest, &format!("/jobs/{id}")).1["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn wait_running(rest: &str, id: &str) {
    let started = Instant::now();
    while state(rest, id) != "RUNNING" {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "job {id} not running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A checkpoint completed (a savepoint needs the job's tasks all running).
    while http("GET", rest, &format!("/jobs/{id}/checkpoints")).1["counts"]["completed"]
        .as_u64()
        .unwrap_or(0)
        < 1
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint of {id}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn list_info_savepoint_stop_and_cancel_as_flinks_cli() {
    let (cluster, dir) = local_cluster("client", 1, 2);
    let jm = format!("http://{}", cluster.rest_address);
    let first = submit(&cluster, &dir, "first");
    let second = submit(&cluster, &dir, "second");
    wait_running(&cluster.rest_address, &first);
    wait_running(&cluster.rest_address, &second);

    let list = stdout(&floe(&["list", "--jobmanager", &jm]));
    assert!(list.starts_with("JOB ID"), "{list}");
    for id in [&first, &second] {
        let row = list
            .lines()
            .find(|l| l.starts_with(id.as_str()))
            .unwrap_or_else(|| panic!("{id} in {list}"));
        assert!(row.contains("RUNNING") && row.ends_with("pipeline"), "{row}");
    }
    let json: Value =
        serde_json::from_str(&stdout(&floe(&["list", "--jobmanager", &jm, "--output", "json"]))).unwrap();
    assert_eq!(json["jobs"].as_array().unwrap().len(), 2, "{json}");

    let info = stdout(&floe(&["info", &first, "--jobmanager", &jm]));
    assert!(
        info.starts_with(&format!("pipeline ({first}): RUNNING")),
        "{info}"
    );
    assert!(
        info.contains("(parallelism 1)") && info.contains("#0 RUNNING") && info.contains("Checkpoints: "),
        "{info}"
    );

    let savepoints = format!("file://{}", dir.join("savepoints").display());
    let taken = stdout(&floe(&["savepoint", &first, &savepoints, "--jobmanager", &jm]));
    let location = taken
        .trim()
        .strip_prefix("Savepoint completed: ")
        .unwrap_or_else(|| panic!("{taken}"));
    assert!(location.starts_with(&savepoints), "{location}");
    let local = location.strip_prefix("file://").unwrap();
    assert!(
        std::path::Path::new(local).exists(),
        "the savepoint {local} exists"
    );
    assert_eq!(
        state(&cluster.rest_address, &first),
        "RUNNING",
        "a savepoint does not stop the job"
    );

    let stopped = stdout(&floe(&[
        "stop",
        &first,
        "--savepoint-path",
        &savepoints,
        "--jobmanager",
        &jm,
        "--output",
        "json",
    ]));
    let stopped: Value = serde_json::from_str(&stopped).unwrap();
    assert!(
        stopped["location"].as_str().unwrap().starts_with(&savepoints),
        "{stopped}"
    );
    let started = Instant::now();
    while state(&cluster.rest_address, &first) == "RUNNING" {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        state(&cluster.rest_address, &first),
        "FINISHED",
        "a stopped job finishes"
    );

    let cancelled = stdout(&floe(&["cancel", &second, "--jobmanager", &jm]));
    assert_eq!(cancelled.trim(), format!("Cancelled job {second}: CANCELED"));

    let unknown = floe(&["info", "no-such-job", "--jobmanager", &jm]);
    assert_eq!(unknown.status.code(), Some(1));
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(said.contains("job no-such-job not found (HTTP 404)"), "{said}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_jobmanager_is_named() {
    let bad = floe(&["list", "--jobmanager", "https://jm:8081"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--jobmanager: expected http://HOST:PORT"));
    // Nothing listens on port 1.
    let down = floe(&["list", "--jobmanager", "http://127.0.0.1:1"]);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("cannot reach the JobManager at http://127.0.0.1:1"),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
}
