//! The REST views Flink's web UI reads (issue 16), on real processes: a streaming job survives a
//! TaskManager SIGKILL and finishes; `/overview`, `/jobs/overview`, `/jobs/{id}/vertices/{v}`,
//! its `/backpressure`, `/jobs/{id}/exceptions` (the loss, naming the TaskManager), `/config` and
//! `/taskmanagers/{id}` then say so, in Flink's shape.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn get(rest: &str, path: &str) -> Value {
    let (status, body) = http("GET", rest, path);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

#[test]
fn the_views_of_flinks_web_ui_describe_a_job_that_lost_a_taskmanager() {
    let (cluster, dir) = local_cluster("rest-views", 3, 2);
    let rest = cluster.rest_address.clone();
    let args: Vec<String> = [
        "--output",
        dir.join("out").to_str().unwrap(),
        "--records",
        "40000",
        "--rate",
        "8000",
    ]
    .map(String::from)
    .to_vec();
    let conf: Vec<(String, String)> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "500 ms"),
        ("restart-strategy.fixed-delay.delay", "200 ms"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into_iter()
    .chain([(
        "floe.job-storage.url".to_string(),
        format!("file://{}", dir.join("storage").display()),
    )])
    .collect();
    let id = submit_job(&cluster.rpc_address, "pipeline", args, conf);
    wait_for("two checkpoints", Duration::from_secs(60), || {
        let c = get(&rest, &format!("/jobs/{id}/checkpoints"));
        (c["counts"]["completed"].as_u64().unwrap_or(0) >= 2).then_some(())
    });
    // The checkpoint history: newest first, each completed one acknowledged by all six subtasks,
    // and per vertex in its details.
    let c = get(&rest, &format!("/jobs/{id}/checkpoints"));
    let history = c["history"].as_array().unwrap();
    let completed: Vec<&Value> = history.iter().filter(|h| h["status"] == "COMPLETED").collect();
    assert!(completed.len() >= 2, "{c}");
    let ids: Vec<u64> = history.iter().map(|h| h["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    for h in &completed {
        assert_eq!(h["num_subtasks"], 6, "{h}");
        assert_eq!(h["num_acknowledged_subtasks"], 6, "{h}");
        assert!(h["end_to_end_duration"].as_u64().is_some(), "{h}");
    }
    let latest = &c["latest"]["completed"];
    let same = completed.iter().find(|h| h["id"] == latest["id"]).unwrap();
    assert_eq!(same["checkpointed_size"], latest["checkpointed_size"], "{c}");
    assert_eq!(same["state_size"], latest["state_size"], "{c}");
    let details = get(&rest, &format!("/jobs/{id}/checkpoints/details/{}", latest["id"]));
    for vertex in ["source", "map", "reduce"] {
        let t = &details["tasks"][vertex];
        assert_eq!(t["num_acknowledged_subtasks"], 2, "{vertex}: {details}");
        assert_eq!(t["subtasks"].as_array().unwrap().len(), 2, "{details}");
    }
    let sizes: u64 = ["source", "map", "reduce"]
        .iter()
        .map(|v| details["tasks"][v]["state_size"].as_u64().unwrap())
        .sum();
    assert_eq!(sizes, latest["state_size"].as_u64().unwrap(), "{details}");
    let (status, _) = http("GET", &rest, &format!("/jobs/{id}/checkpoints/details/999999"));
    assert_eq!(status, 404);

    let reduce = get(&rest, &format!("/jobs/{id}/vertices/reduce"));
    assert_eq!(reduce["parallelism"], 2, "{reduce}");
    let victim = reduce["subtasks"][0]["taskmanager-id"]
        .as_str()
        .unwrap()
        .to_string();
    let live = get(&rest, &format!("/taskmanagers/{victim}"));
    assert_eq!(live["slotsNumber"], 2, "{live}");
    assert!(
        live["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["task"] == "reduce#0"),
        "{live}"
    );
    kill_taskmanager(&cluster, &victim);
    let end = wait_for("the job to end", Duration::from_secs(120), || {
        let j = get(&rest, &format!("/jobs/{id}"));
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED")).then_some(j)
    });
    assert_eq!(end["state"], "FINISHED", "{end}");

    let overview = get(&rest, "/overview");
    assert_eq!(overview["jobs-finished"], 1, "{overview}");
    assert_eq!(overview["jobs-running"], 0, "{overview}");
    assert_eq!(overview["taskmanagers"], 2, "the lost one is gone: {overview}");
    assert_eq!(overview["slots-total"], 4, "{overview}");

    let jobs = get(&rest, "/jobs/overview");
    let listed = &jobs["jobs"][0];
    assert_eq!(listed["jid"], id.as_str());
    assert_eq!(listed["state"], "FINISHED");
    assert_eq!(listed["tasks"]["total"], 6, "{listed}");
    assert_eq!(listed["tasks"]["finished"], 6, "{listed}");

    let reduce = get(&rest, &format!("/jobs/{id}/vertices/reduce"));
    let details: Vec<&Value> = end["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "reduce")
        .unwrap()["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    for (s, d) in reduce["subtasks"].as_array().unwrap().iter().zip(details) {
        assert_eq!(s["status"], "FINISHED");
        assert_eq!(s["metrics"]["read-records"], d["records-in"], "{s}");
        assert_eq!(s["taskmanager-id"], d["taskmanager-id"]);
    }
    assert!(
        !reduce["subtasks"][0]["prior-attempts"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the restarted subtask shows its earlier attempt: {reduce}"
    );

    let pressure = get(&rest, &format!("/jobs/{id}/vertices/source/backpressure"));
    assert_eq!(pressure["status"], "ok");
    for s in pressure["subtasks"].as_array().unwrap() {
        assert!(
            matches!(s["backpressure-level"].as_str(), Some("ok" | "low" | "high")),
            "{s}"
        );
        assert!((0.0..=1.0).contains(&s["ratio"].as_f64().unwrap()), "{s}");
    }

    let exceptions = get(&rest, &format!("/jobs/{id}/exceptions"));
    let entries = exceptions["exceptionHistory"]["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "{exceptions}");
    let loss = &entries[entries.len() - 1];
    assert!(
        loss["stacktrace"].as_str().unwrap().contains(&victim)
            || loss["location"].as_str().unwrap().contains(&victim),
        "the failure names the lost TaskManager {victim}: {exceptions}"
    );
    assert!(loss["timestamp"].as_u64().unwrap() > 0);

    let config = get(&rest, &format!("/jobs/{id}/config"));
    assert_eq!(
        config["execution-config"]["user-config"]["execution.checkpointing.interval"],
        "500 ms"
    );
    assert_eq!(config["execution-config"]["job-parameters"][0], "--output");

    let (status, missing) = http("GET", &rest, &format!("/jobs/{id}/vertices/nope"));
    assert_eq!(status, 404);
    assert_eq!(missing["errors"][0], format!("job {id} has no vertex nope"));
    let (status, _) = http("GET", &rest, &format!("/taskmanagers/{victim}"));
    assert_eq!(status, 404, "the lost TaskManager is gone");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
