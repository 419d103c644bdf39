//! A real local cluster (JobManager and TaskManager processes on loopback) driven through its REST API:
//! the seed's slot placement, a TaskManager killed with SIGKILL in the middle of a batch job, and
//! backpressure from a deliberately slow sink.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use floe::local_cluster::LocalCluster;
use serde_json::Value;

fn cluster(name: &str, taskmanagers: u32, slots: u32) -> (LocalCluster, std::path::PathBuf) {
    local_cluster(name, taskmanagers, slots)
}

fn submit(cluster: &LocalCluster, name: &str, args: &[String], conf: &[(&str, &str)]) -> String {
    let conf = conf.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    submit_job(&cluster.rpc_address, name, args.to_vec(), conf)
}

fn job(cluster: &LocalCluster, id: &str) -> Value {
    let (status, body) = http("GET", &cluster.rest_address, &format!("/jobs/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

/// Polls the job until `pred` holds (panics with the last state after `timeout`).
fn wait_for(cluster: &LocalCluster, id: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let j = job(cluster, id);
        if pred(&j) {
            return j;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out; job is {}",
            serde_json::to_string_pretty(&j).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn subtasks(j: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for v in j["vertices"].as_array().unwrap() {
        for s in v["subtasks"].as_array().unwrap() {
            out.push((
                format!("{}#{}", v["id"].as_str().unwrap(), s["subtask"]),
                s.clone(),
            ));
        }
    }
    out
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn seed_example_placement_shows_in_the_rest_api_and_cancel_works() {
    let (cluster, dir) = cluster("seed", 2, 3);
    let out = dir.join("out");
    let id = submit(
        &cluster,
        "pipeline",
        &args(&[
            "--output",
            out.to_str().unwrap(),
            "--records",
            "0",
            "--rate",
            "200",
            "--source-parallelism",
            "4",
            "--map-parallelism",
            "4",
            "--reduce-parallelism",
            "3",
        ]),
        &[
            ("execution.runtime-mode", "STREAMING"),
            ("parallelism.default", "4"),
        ],
    );
    let j = wait_for(&cluster, &id, Duration::from_secs(30), |j| {
        subtasks(j).iter().all(|(_, s)| s["status"] == "RUNNING")
    });
    assert_eq!(j["state"], "RUNNING");
    let slots = j["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 4, "{j}");
    for (k, slot) in slots.iter().enumerate() {
        let mut expected = vec![format!("source#{k}"), format!("map#{k}")];
        if k < 3 {
            expected.push(format!("reduce#{k}"));
        }
        assert_eq!(strings(&slot["tasks"]), expected);
        // Three slots of the first TaskManager, then one of the second.
        assert_eq!(slot["taskmanager"], if k < 3 { 0 } else { 1 });
    }
    // Each running subtask is where its slot is.
    let tm_of_slot: Vec<String> = slots
        .iter()
        .map(|s| s["taskmanager-id"].as_str().unwrap().to_string())
        .collect();
    for (name, s) in subtasks(&j) {
        let k: usize = name.rsplit_once('#').unwrap().1.parse().unwrap();
        assert_eq!(s["taskmanager-id"].as_str().unwrap(), tm_of_slot[k], "{name}");
    }
    // Cancel through the REST API: every subtask ends CANCELED, and so does the job.
    let (status, _) = http("PATCH", &cluster.rest_address, &format!("/jobs/{id}"));
    assert_eq!(status, 202);
    let j = wait_for(&cluster, &id, Duration::from_secs(30), |j| {
        j["state"] == "CANCELED"
    });
    assert!(subtasks(&j).iter().all(|(_, s)| s["status"] == "CANCELED"), "{j}");
    let (status, body) = http("GET", &cluster.rest_address, "/jobs/no-such-job");
    assert_eq!(status, 404);
    assert_eq!(body["errors"][0], "job no-such-job not found");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn taskmanager_killed_mid_batch_job_restarts_only_affected_regions() {
    kill_a_taskmanager_mid_batch_job(false);
}

/// With remote shuffle the dead TaskManager's finished map output is in object storage: its
/// producers do not run again, only the tasks that were running there (and the reducers reading it).
#[test]
fn with_remote_shuffle_a_lost_taskmanagers_finished_results_are_not_produced_again() {
    kill_a_taskmanager_mid_batch_job(true);
}

fn kill_a_taskmanager_mid_batch_job(remote: bool) {
    let (cluster, dir) = cluster(if remote { "kill-remote" } else { "kill" }, 3, 2);
    let out = dir.join("out");
    let records = 300_000u64;
    let storage = format!("file://{}", dir.join("storage").display());
    let mut conf = vec![
        ("execution.runtime-mode", "BATCH"),
        ("parallelism.default", "4"),
        ("execution.batch-shuffle-mode", "ALL_EXCHANGES_BLOCKING"),
        ("restart-strategy.fixed-delay.delay", "100 ms"),
    ];
    if remote {
        conf.push(("shuffle.remote.enabled", "true"));
        conf.push(("floe.job-storage.url", &storage));
    }
    let id = submit(
        &cluster,
        "pipeline",
        &args(&[
            "--output",
            out.to_str().unwrap(),
            "--records",
            &records.to_string(),
            "--reduce-parallelism",
            "3",
            "--sink-delay-us",
            "300",
        ]),
        &conf,
    );
    // Kill the TaskManager holding the first finished map subtask: its output is lost with it.
    let snapshot = wait_for(&cluster, &id, Duration::from_secs(60), |j| {
        subtasks(j)
            .iter()
            .any(|(n, s)| n.starts_with("map#") && s["status"] == "FINISHED")
    });
    assert_eq!(
        snapshot["state"], "RUNNING",
        "the job must still be running when the TaskManager dies"
    );
    let (_, victim_task) = subtasks(&snapshot)
        .into_iter()
        .find(|(n, s)| n.starts_with("map#") && s["status"] == "FINISHED")
        .unwrap();
    let victim = victim_task["taskmanager-id"].as_str().unwrap().to_string();
    let index: usize = victim.strip_prefix("taskmanager-").unwrap().parse().unwrap();
    let pid = cluster.taskmanager_pids()[index];
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let before: BTreeMap<String, Value> = subtasks(&snapshot).into_iter().collect();
    // Tasks placed on the victim's slots, deployed yet or not (slot sharing fixes the placement).
    let victim_tasks: Vec<String> = snapshot["slots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|slot| slot["taskmanager-id"].as_str() == Some(victim.as_str()))
        .flat_map(|slot| strings(&slot["tasks"]))
        .collect();

    let end = wait_for(&cluster, &id, Duration::from_secs(120), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED"))
    });
    assert_eq!(
        end["state"],
        "FINISHED",
        "{}",
        serde_json::to_string_pretty(&end).unwrap()
    );
    assert_batch_output(&out, &common::pipeline_reference(42, records));

    let mut restarted = Vec::new();
    for (name, s) in subtasks(&end) {
        let was = &before[&name];
        let on_victim = victim_tasks.contains(&name);
        if s["attempt"].as_u64().unwrap() > 0 {
            restarted.push(name.clone());
            // Only the regions hit by the loss restart: subtasks that were on the dead TaskManager,
            // and the reducers, which consume every map's output.
            assert!(
                on_victim || name.starts_with("reduce#"),
                "{name} restarted but was not affected"
            );
            assert!(
                !s["prior-attempts"].as_array().unwrap().is_empty(),
                "{name} keeps its prior attempt"
            );
        } else if !remote {
            let lost_output = on_victim && was["status"] == "FINISHED" && name.starts_with("map#");
            assert!(
                !lost_output,
                "{name} lost its output with the TaskManager and must have run again"
            );
        }
        if remote && was["status"] == "FINISHED" {
            assert_eq!(
                s["attempt"], 0,
                "{name} finished before the loss; its output is in object storage, so it must not rerun"
            );
        }
        if !on_victim && was["status"] == "FINISHED" {
            assert_eq!(
                s["attempt"], 0,
                "{name} finished on a surviving TaskManager and must not rerun"
            );
        }
    }
    if remote {
        // Objects were written and, once the job ended, deleted.
        let shuffle = dir.join("storage/shuffle");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_dir(&shuffle).map(|d| d.count()).unwrap_or(0) > 0 {
            assert!(
                Instant::now() < deadline,
                "remote partitions left in {}",
                shuffle.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    } else {
        assert!(
            restarted
                .iter()
                .any(|n| before[n]["taskmanager-id"].as_str() == Some(victim.as_str())),
            "{restarted:?}"
        );
        assert!(end["restarts"].as_u64().unwrap() >= 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn counters(j: &Value, vertex: &str, field: &str) -> u64 {
    j["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["id"] == vertex)
        .flat_map(|v| {
            v["subtasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s[field].as_u64().unwrap())
        })
        .sum()
}

#[test]
fn slow_sink_backpressures_the_source_within_the_buffer_budget() {
    let (cluster, dir) = cluster("backpressure", 2, 1);
    let out = dir.join("out");
    let id = submit(
        &cluster,
        "pipeline",
        &args(&[
            "--output",
            out.to_str().unwrap(),
            "--records",
            "0",
            "--sink-delay-us",
            "200",
        ]),
        &[
            ("execution.runtime-mode", "STREAMING"),
            ("parallelism.default", "2"),
        ],
    );
    wait_for(&cluster, &id, Duration::from_secs(30), |j| {
        subtasks(j).iter().all(|(_, s)| s["status"] == "RUNNING")
    });
    // Words the map produced that the reducers have not read yet, sampled twice 3 s apart (after a
    // heartbeat has carried fresh counters each time).
    let in_flight = || {
        std::thread::sleep(Duration::from_millis(3200));
        let j = job(&cluster, &id);
        let (produced, reduced) = (
            counters(&j, "map", "records-out"),
            counters(&j, "reduce", "records-in"),
        );
        (produced, reduced, produced.saturating_sub(reduced))
    };
    let (p1, r1, first) = in_flight();
    let (p2, r2, second) = in_flight();
    let (_, tms) = http("GET", &cluster.rest_address, "/taskmanagers");
    // Per TaskManager (one slot: source k, map k, reduce k): pipelined subpartitions produced are
    // source->map (1, forward) and map->reduce (2); streams consumed are map<-source (1) and
    // reduce<-map (2).
    let budget = floe_shuffle::ShuffleConfig::default().memory_bound(3, 3);
    for tm in tms["taskmanagers"].as_array().unwrap() {
        let peak = tm["buffered-bytes-peak"].as_u64().unwrap();
        assert!(peak > 0, "the shuffle was used: {tm}");
        assert!(
            peak <= budget,
            "TaskManager {} buffered {peak} bytes, budget {budget}",
            tm["id"]
        );
    }
    assert!(r2 > r1, "the slow sink makes progress ({r1} then {r2})");
    // Backpressure reached the source: what is in flight fits in the buffers. Bound: both
    // TaskManagers' shuffle budgets plus, per task, its output buffers and the output of the input
    // buffer it is working on (4 x 32 KiB), at the smallest record size (3 bytes: ("a", 1)).
    let limit = (2 * budget + 6 * 4 * 32 * 1024) / 3;
    assert!(
        second <= limit,
        "{second} words in flight (produced {p2}, reduced {r2}), limit {limit}"
    );
    // And it does not grow: the producer only moves as fast as the sink (an unthrottled generator
    // makes millions of words a second).
    assert!(
        second <= first + 50_000,
        "in flight grew from {first} to {second}: produced {p1} -> {p2}, reduced {r1} -> {r2}"
    );
    let (status, _) = http("PATCH", &cluster.rest_address, &format!("/jobs/{id}"));
    assert_eq!(status, 202);
    wait_for(&cluster, &id, Duration::from_secs(30), |j| {
        j["state"] == "CANCELED"
    });
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// Issue 11, scenario 11: a user function that blocks its thread (here a sink that sleeps 10 ms per
/// record, as a synchronous client call would) delays only its own task. Both subtasks block at
/// once for seconds on end, longer than the 2 s heartbeat timeout; the TaskManager's heartbeats
/// must go on regardless, so it is never declared lost: the job finishes with every subtask on its
/// first attempt and the output complete.
#[test]
fn a_blocking_user_function_does_not_starve_the_heartbeats() {
    let (cluster, dir) = cluster("blocking-sink", 1, 2);
    let out = dir.join("out");
    let records = 200;
    let id = submit(
        &cluster,
        "pipeline",
        &args(&[
            "--output",
            out.to_str().unwrap(),
            "--records",
            &records.to_string(),
            "--sink-delay-us",
            "10000",
        ]),
        &[
            ("execution.runtime-mode", "STREAMING"),
            ("parallelism.default", "2"),
        ],
    );
    let end = wait_for(&cluster, &id, Duration::from_secs(120), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED"))
    });
    assert_eq!(end["state"], "FINISHED", "{end}");
    let restarted: Vec<String> = subtasks(&end)
        .into_iter()
        .filter(|(_, s)| s["attempt"].as_u64() != Some(0))
        .map(|(name, s)| format!("{name} attempt {}", s["attempt"]))
        .collect();
    assert!(
        restarted.is_empty(),
        "the TaskManager was declared lost while its tasks blocked: {restarted:?}"
    );
    assert_streaming_output(&out, &pipeline_reference(42, records));
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
