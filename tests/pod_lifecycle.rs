//! What the processes of a job's pods do at start and stop (issue 13, items 6 and 10), with real
//! processes: a TaskManager that starts before its JobManager keeps trying to register (Kubernetes
//! starts pods in any order) and works once the JobManager comes; SIGTERM (what Kubernetes sends
//! first, to PID 1, on every suspend, upgrade and delete) makes a TaskManager fail its tasks at
//! once, reported to the JobManager so the job fails over without waiting for a heartbeat timeout,
//! and makes a JobManager stop; both exit 0 within seconds instead of waiting for the SIGKILL.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::processes::{Proc, jobmanager_at, jobmanager_with, taskmanager, wait_job};

fn manifest(dir: &std::path::Path, records: u64) -> std::path::PathBuf {
    let path = dir.join("job.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pods }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{records}\", \"--rate\", \"2000\"]\n    parallelism: 2\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 2 }}\n  configuration:\n    restart-strategy.fixed-delay.delay: \"100 ms\"\n",
            dir.join("out").display()
        ),
    )
    .unwrap();
    path
}

fn sigterm(p: &Proc) {
    let status = Command::new("kill")
        .args(["-TERM", &p.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits up to `within` for the process to exit; its exit code.
fn exits(p: &mut Proc, within: Duration) -> Option<i32> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Some(status) = p.0.try_wait().unwrap() {
            return Some(status.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn a_taskmanager_started_before_its_jobmanager_waits_for_it_and_registers() {
    let dir = common::scratch("pods-order");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rpc = format!("127.0.0.1:{port}");
    let mut tm = taskmanager(&rpc, 2);
    // Nothing listens yet: the TaskManager keeps trying (with backoff) instead of exiting.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(exits(&mut tm, Duration::ZERO), None, "the TaskManager gave up");
    let (_jm, _, rest) = jobmanager_at(&rpc, &manifest(&dir, 2_000), &dir.join("jm.log"), &[]);
    let done = wait_job(&rest, Duration::from_secs(60), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED"))
    });
    assert_eq!(done["state"], "FINISHED", "{done}");
    let (_, tms) = common::http("GET", &rest, "/taskmanagers");
    assert_eq!(tms["taskmanagers"].as_array().unwrap().len(), 1, "{tms}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_fails_a_taskmanagers_tasks_at_once_and_stops_a_jobmanager() {
    let dir = common::scratch("pods-sigterm");
    // Heartbeats would take a minute to notice the TaskManager gone: a failover within seconds is
    // the TaskManager's own report.
    let (jm, rpc, rest) = jobmanager_with(
        &manifest(&dir, 0),
        &dir.join("jm.log"),
        &["--heartbeat-timeout-ms", "60000"],
    );
    let mut jm = jm;
    let mut first = taskmanager(&rpc, 2);
    let running = wait_job(&rest, Duration::from_secs(30), |j| j["state"] == "RUNNING");
    assert_eq!(running["restarts"], 0);
    let _second = taskmanager(&rpc, 2);
    let started = Instant::now();
    sigterm(&first);
    assert_eq!(
        exits(&mut first, Duration::from_secs(8)),
        Some(0),
        "the TaskManager exits 0"
    );
    let exited = started.elapsed();
    let failed_over = wait_job(&rest, Duration::from_secs(20), |j| {
        j["restarts"].as_u64().unwrap_or(0) >= 1 || j["state"] != "RUNNING"
    });
    let over = started.elapsed();
    assert_eq!(failed_over["state"], "RUNNING", "{failed_over}");
    let cause = std::fs::read_to_string(dir.join("jm.log")).unwrap_or_default();
    assert!(
        cause.contains("the TaskManager is shutting down (SIGTERM)"),
        "the failure names the shutdown: {cause}"
    );
    println!("TaskManager exited {exited:?} after SIGTERM; the job failed over {over:?} after it");
    let back = wait_job(&rest, Duration::from_secs(30), |j| {
        j["vertices"].as_array().unwrap().iter().all(|v| {
            v["subtasks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["status"] == "RUNNING")
        })
    });
    assert_eq!(back["state"], "RUNNING");
    let started = Instant::now();
    sigterm(&jm);
    assert_eq!(
        exits(&mut jm, Duration::from_secs(5)),
        Some(0),
        "the JobManager exits 0"
    );
    println!("JobManager exited {:?} after SIGTERM", started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 16: with `--log-format json` (the operator's pods run so) every log line is one JSON
/// object with Flink-like fields a log collector indexes: time, level, target, message.
#[test]
fn processes_in_pods_log_one_json_object_a_line() {
    let dir = common::scratch("pods-json-logs");
    let manifest = manifest(&dir, 2_000);
    let log = dir.join("jobmanager.log");
    let (jm, rpc, _rest) = jobmanager_with(&manifest, &log, &["--log-format", "json"]);
    let tm_log = dir.join("taskmanager.log");
    let mut tm = Proc(
        Command::new(common::FLOE)
            .args([
                "taskmanager",
                "--jobmanager",
                &rpc,
                "--slots",
                "2",
                "--log-format",
                "json",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&tm_log).unwrap())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while !std::fs::read_to_string(&tm_log)
        .unwrap()
        .contains("registered with JobManager")
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the TaskManager did not register"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sigterm(&tm);
    assert_eq!(exits(&mut tm, Duration::from_secs(10)), Some(0));
    drop(jm);
    for path in [&log, &tm_log] {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(!text.trim().is_empty(), "{} logged nothing", path.display());
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not a JSON line ({e}): {line}", path.display()));
            for field in ["timestamp", "level", "target"] {
                assert!(v[field].is_string(), "{field} in {line}");
            }
            assert!(v["fields"]["message"].is_string(), "a message in {line}");
        }
    }
    let registered = std::fs::read_to_string(&tm_log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| {
            v["fields"]["message"]
                .as_str()
                .unwrap()
                .starts_with("registered with JobManager")
        })
        .unwrap();
    assert_eq!(registered["level"], "INFO", "{registered}");
    let _ = std::fs::remove_dir_all(&dir);
}
