//! The job autoscaler (issue 12, part 5), with real JobManager and TaskManager processes: a
//! generator reads 300 lines a second (about 2,000 words) into a keyed sum whose every update
//! takes a millisecond (`--sink-delay-us 1000`, a slow external system), so one subtask keeps up
//! with half of it and the source falls behind (backpressured, its pending records growing). The
//! autoscaler measures busy time, backpressure and rates in the TaskManagers, asks for the
//! parallelism that meets the arrival rate at the target utilization; the job gets the 2 slots it
//! has first and says it wants more (`slots-wanted`, what the operator turns into TaskManager
//! replicas); when a second TaskManager comes (as the operator's scale-up would bring it) the
//! adaptive scheduler scales up to what was asked for, the job keeps up and is no longer
//! backpressured. Then the rate drops to 30 lines a second (`--rate-after`) and, after the
//! scale-down interval, the job goes down to one subtask. The committed output equals the
//! fault-free output exactly.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use serde_json::Value;

use common::processes::{jobmanager_with, taskmanager, wait_job};

const LINES: u64 = 9_500;
const DROP_AT: u64 = 8_000;

/// The keyed vertex: the one that reads through a hash exchange (the last of the three).
fn keyed(job: &Value) -> &Value {
    job["vertices"].as_array().unwrap().last().unwrap()
}

/// Vertex `id` of an autoscaler evaluation.
fn in_evaluation<'a>(evaluation: &'a Value, id: &str) -> Option<&'a Value> {
    evaluation["vertices"].as_array()?.iter().find(|v| v["id"] == id)
}

fn evaluated<'a>(job: &'a Value, id: &str) -> Option<&'a Value> {
    in_evaluation(&job["autoscaler"]["last-evaluation"], id)
}

#[test]
fn the_autoscaler_scales_a_backpressured_job_up_and_down_again_when_the_load_drops() {
    let dir = common::scratch("autoscaler");
    let output = dir.join("out");
    let storage = format!("file://{}", dir.join("storage").display());
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: autoscaled }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{LINES}\", \"--rate\", \"300\", \"--rate-after\", \"{DROP_AT}:30\", \"--aggregate\", \"sum\", \"--sink-delay-us\", \"1000\"]\n    parallelism: 1\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 2 }}\n  storage: {{ url: \"{storage}\" }}\n  configuration:\n    execution.checkpointing.interval: \"500 ms\"\n    jobmanager.scheduler: adaptive\n    jobmanager.adaptive-scheduler.resource-stabilization-timeout: \"1 s\"\n    jobmanager.adaptive-scheduler.scaling-interval.min: \"2 s\"\n    job.autoscaler.enabled: \"true\"\n    job.autoscaler.stabilization.interval: \"3 s\"\n    job.autoscaler.metrics.window: \"6 s\"\n    job.autoscaler.scale-down.interval: \"4 s\"\n    job.autoscaler.scale-down.max-factor: \"1.0\"\n    job.autoscaler.catch-up.duration: \"60 s\"\n    job.autoscaler.restart.time: \"1 s\"\n",
            output.display(),
        ),
    )
    .unwrap();
    let (_jm, rpc, rest) = jobmanager_with(&manifest, &dir.join("jm.log"), &[]);
    let _a = taskmanager(&rpc, 2);
    let log = || std::fs::read_to_string(dir.join("jm.log")).unwrap_or_default();
    let started = wait_job(&rest, Duration::from_secs(30), |j| j["state"] == "RUNNING");
    assert_eq!(keyed(&started)["parallelism"], 1, "{started}");
    let slow = keyed(&started)["id"].as_str().unwrap().to_string();

    // One subtask cannot keep up: the autoscaler asks for more than the 2 slots there are. The
    // job runs at 2 and says it wants more.
    let wanting = wait_job(&rest, Duration::from_secs(60), |j| {
        j["slots-wanted"].as_u64().unwrap_or(0) > 2 || j["state"] != "RUNNING"
    });
    assert_eq!(wanting["state"], "RUNNING", "{wanting}\n{}", log());
    let decision = &wanting["autoscaler"]["decisions"][0];
    let asked = decision["to"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap();
    let why = in_evaluation(&decision["evaluation"], &slow).unwrap();
    println!("first decision for {slow}: {why}");
    assert!(why["reason"].as_str().unwrap().starts_with("scale up"), "{why}");
    assert!(why["busyTimeMsPerSecond"].as_f64().unwrap() > 800.0, "{why}");
    // Upstream of it, the source and the map wait for buffers (backpressure).
    let upstream = &decision["evaluation"]["vertices"].as_array().unwrap()[..2];
    let backpressure = upstream
        .iter()
        .map(|v| v["backPressuredTimeMsPerSecond"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(backpressure > 300.0, "upstream waits for buffers: {upstream:?}");
    // At utilization 0.7, 300 lines/s of ~6.5 words against ~950 words/s per subtask: 3 (4, to
    // divide 128 key groups evenly), within what the formula allows either way.
    assert!((3..=8).contains(&asked), "asked for {asked}: {why}");
    assert_eq!(wanting["slots-wanted"], asked, "{wanting}");
    let at_two = wait_job(&rest, Duration::from_secs(30), |j| {
        keyed(j)["parallelism"] == 2 || j["state"] != "RUNNING"
    });
    assert_eq!(at_two["state"], "RUNNING", "{at_two}");

    // The operator would raise the replicas for the slots wanted: a TaskManager comes.
    let _b = taskmanager(&rpc, (asked as u32).saturating_sub(2).max(1));
    let scaled = wait_job(&rest, Duration::from_secs(60), |j| {
        keyed(j)["parallelism"] == asked || j["state"] != "RUNNING"
    });
    assert_eq!(scaled["state"], "RUNNING", "{scaled}\n{}", log());

    // At that parallelism it keeps up: the next full evaluation keeps it and the source is no
    // longer backpressured.
    let keeping = wait_job(&rest, Duration::from_secs(60), |j| {
        let fresh = j["autoscaler"]["last-evaluation"]["time"].as_u64().unwrap_or(0)
            > j["last-rescale"]["time"].as_u64().unwrap_or(u64::MAX);
        (fresh && evaluated(j, &slow).is_some_and(|v| v["parallelism"] == asked)) || j["state"] != "RUNNING"
    });
    assert_eq!(keeping["state"], "RUNNING", "{keeping}");
    let upstream = &keeping["autoscaler"]["last-evaluation"]["vertices"]
        .as_array()
        .unwrap()[..2];
    let keyed_eval = evaluated(&keeping, &slow).unwrap();
    println!("at {asked}: upstream {upstream:?}\n{slow} {keyed_eval}");
    for v in upstream {
        assert!(
            v["backPressuredTimeMsPerSecond"].as_f64().unwrap() < 200.0,
            "no longer backpressured: {v}"
        );
    }
    assert_eq!(keyed_eval["proposed-parallelism"], asked, "{keyed_eval}");

    // The rate drops: after the scale-down interval the job goes down to 1.
    let down = wait_job(&rest, Duration::from_secs(90), |j| {
        keyed(j)["parallelism"] == 1 || j["state"] != "RUNNING"
    });
    assert_eq!(down["state"], "RUNNING", "{down}\n{}", log());
    let decisions = down["autoscaler"]["decisions"].as_array().unwrap();
    let last = decisions.last().unwrap();
    let why_down = in_evaluation(&last["evaluation"], &slow).unwrap();
    println!("scale-down: {why_down}");
    assert!(
        why_down["reason"].as_str().unwrap().starts_with("scale down"),
        "{why_down}"
    );
    assert_eq!(down["slots-wanted"], 1, "{down}");

    let done = wait_job(&rest, Duration::from_secs(120), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED"))
    });
    assert_eq!(done["state"], "FINISHED", "{done}\n{}", log());
    common::assert_streaming_output(&output, &common::pipeline_reference(42, LINES));
    println!(
        "autoscaled 1 -> 2 (slots) -> {asked} -> 1 in {} decisions; output exact",
        decisions.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
