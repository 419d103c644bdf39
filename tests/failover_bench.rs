//! Benchmark (prints figures; not part of `cargo test`): JobManager failover time for a batch job with
//! 1,000 finished tasks in its operation log. A local cluster in application mode runs the `pipeline`
//! job with 1,000 source subtasks and remote shuffle; once the first stage finished, the JobManager is
//! killed (SIGKILL) and started again. Printed: the first JobManager's time from process start to the
//! job RUNNING (the baseline, same run), the new one's time from process start to the job RUNNING
//! again with the 1,000 finished executions restored from the log, and the ratio.
//!
//! `cargo test --workspace --test failover_bench` (dev profile and the workspace feature set, so RocksDB is not built again);
//! `FLOE_BENCH_TASKS` sets the number of first-stage tasks (default 1000).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use floe::local_cluster::{ClusterSpec, LocalCluster};
use serde_json::Value;

fn job(rest: &str) -> Option<Value> {
    let (_, list) = common::try_http("GET", rest, "/jobs")?;
    let id = list["jobs"].get(0)?["id"].as_str()?.to_string();
    let (_, job) = common::try_http("GET", rest, &format!("/jobs/{id}"))?;
    job["vertices"].is_array().then_some(job)
}

fn first_stage_finished(j: &Value) -> usize {
    j["vertices"][0]["subtasks"]
        .as_array()
        .map_or(0, |s| s.iter().filter(|t| t["status"] == "FINISHED").count())
}

fn wait(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<Value>) -> Value {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() {
    let tasks: u32 = std::env::var("FLOE_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = common::scratch("failover-bench");
    let manifest = dir.join("job.yaml");
    let slots = tasks.div_ceil(2);
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: failover }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{}\", \"--source-parallelism\", \"{tasks}\", \"--map-parallelism\", \"{tasks}\", \"--reduce-parallelism\", \"1\", \"--sink-delay-us\", \"2000\"]\n    parallelism: 1\n    mode: batch\n  taskManager: {{ replicas: 2, slots: {slots} }}\n  storage: {{ url: \"file://{}\" }}\n  configuration:\n    execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING\n    shuffle.remote.enabled: \"true\"\n",
            dir.join("out").display(),
            tasks * 20,
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let spec = ClusterSpec {
        exe: common::FLOE.into(),
        taskmanagers: 2,
        slots,
        work_dir: dir.join("work"),
        heartbeat_timeout: Duration::from_secs(10),
        job_file: Some(manifest),
        placement: None,
        env: Vec::new(),
        properties: Vec::new(),
    };
    let started = Instant::now();
    let mut cluster = LocalCluster::start(&spec).unwrap();
    let rest = cluster.rest_address.clone();
    wait("the job to run", Duration::from_secs(120), || {
        job(&rest).filter(|j| j["state"] == "RUNNING")
    });
    let first_start = started.elapsed().as_secs_f64();
    let before = wait("the first stage to finish", Duration::from_secs(600), || {
        job(&rest).filter(|j| first_stage_finished(j) == tasks as usize)
    });
    assert_eq!(
        before["state"], "RUNNING",
        "the job must still run when the JobManager dies"
    );

    let pid = cluster.jobmanager_pid().unwrap();
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    wait("the JobManager to exit", Duration::from_secs(10), || {
        cluster.jobmanager_exited().map(|_| Value::Null)
    });
    let restarted = Instant::now();
    cluster.restart_jobmanager().unwrap();
    let after = wait("the job to run again", Duration::from_secs(120), || {
        job(&rest).filter(|j| j["state"] == "RUNNING" && first_stage_finished(j) == tasks as usize)
    });
    let failover = restarted.elapsed().as_secs_f64();
    let restored = after["vertices"][0]["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["restored-from-operation-log"] == true)
        .count();
    println!(
        "first-stage tasks finished in the log: {tasks} ({restored} restored from the log, not run again)"
    );
    println!("first JobManager: process start to job RUNNING: {first_start:.2} s (baseline)");
    println!("new JobManager:   process start to job RUNNING again: {failover:.2} s");
    println!("failover / first start: {:.2}", failover / first_start);
    cluster.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
