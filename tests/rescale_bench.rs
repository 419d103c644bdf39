//! Benchmark (prints figures; not part of `cargo test`): rescale downtime of a streaming job with a
//! large RocksDB state on `file://` storage (issue 12). The built-in `keyed-state` job counts
//! records over many distinct 100-byte keys on two TaskManagers of two slots; once every key is in
//! the state and a checkpoint of it completed, the job is rescaled 2 -> 4, and once a checkpoint at
//! 4 completed, 4 -> 2, through `PUT /jobs/{id}/resource-requirements`.
//!
//! Downtime = from the last increase of the records the keyed operator read before the rescale
//! was asked for to the first record it reads after it (heartbeats every 100 ms carry the counters, so the figure is
//! good to about 0.1 s). Printed per rescale: the state size (the latest checkpoint's), the
//! downtime, and its parts: stopping and redeploying (the JobManager's `last-rescale.duration`)
//! and the rest (the new tasks downloading and opening their state until the first record).
//!
//! `cargo test --workspace --test rescale_bench -- --nocapture` (dev profile: RocksDB is not
//! built again); `FLOE_BENCH_STATE_MIB` sets the state to build (default 1024).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::processes::{jobmanager_with, put_upper_bound, taskmanager, vertex_ids, wait_job};

/// Records the keyed vertex (the last one: sum, filter and sink) read, over its current attempts.
fn keyed_records(job: &serde_json::Value) -> u64 {
    job["vertices"]
        .as_array()
        .and_then(|v| v.last())
        .and_then(|v| v["subtasks"].as_array())
        .map_or(0, |s| {
            s.iter().map(|t| t["records-in"].as_u64().unwrap_or(0)).sum()
        })
}

fn records(rest: &str, id: &str) -> u64 {
    common::try_http("GET", rest, &format!("/jobs/{id}")).map_or(0, |(_, j)| keyed_records(&j))
}

fn checkpoint(rest: &str, id: &str) -> (u64, u64) {
    let (_, c) = common::http("GET", rest, &format!("/jobs/{id}/checkpoints"));
    let latest = &c["latest"]["completed"];
    (
        latest["id"].as_u64().unwrap_or(0),
        latest["state_size"].as_u64().unwrap_or(0),
    )
}

fn wait_checkpoint_after(rest: &str, id: &str, after: u64, timeout: Duration) -> (u64, u64) {
    let started = Instant::now();
    loop {
        let c = checkpoint(rest, id);
        if c.0 > after {
            return c;
        }
        assert!(
            started.elapsed() < timeout,
            "no checkpoint after {after} within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rescales every vertex to `to`; returns (downtime, stop-and-deploy) in seconds.
fn rescale(rest: &str, id: &str, vertices: &[String], to: u32) -> (f64, f64) {
    // The last increase before the request.
    let mut last = (records(rest, id), Instant::now());
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_millis(400) {
        let r = records(rest, id);
        if r != last.0 {
            last = (r, Instant::now());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, answer) = put_upper_bound(rest, id, vertices, to);
    assert_eq!(status, 200, "{answer}");
    // The new attempts' counters start at 0: the first record the keyed operator reads after its
    // state is restored (sources read on sooner, into the shuffle's buffers).
    let started = Instant::now();
    let first = loop {
        let (_, j) = common::http("GET", rest, &format!("/jobs/{id}"));
        let rescaled = j["last-rescale"]["to"]
            .as_array()
            .is_some_and(|t| t.iter().all(|p| *p == to));
        if rescaled && keyed_records(&j) > 0 {
            break Instant::now();
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no record after the rescale"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let (_, j) = common::http("GET", rest, &format!("/jobs/{id}"));
    let stop_and_deploy = j["last-rescale"]["duration"].as_u64().unwrap_or(0) as f64 / 1000.0;
    ((first - last.1).as_secs_f64(), stop_and_deploy)
}

fn main() {
    let state_mib: u64 = std::env::var("FLOE_BENCH_STATE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    // About 64 bytes of RocksDB state per key: a 100-byte hex key (half its bits are entropy,
    // compressed), the count, the key-group prefix.
    let keys = (state_mib << 20) / 64;
    let dir = common::scratch("rescale-bench");
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: rescale-bench }}\nspec:\n  job:\n    name: keyed-state\n    args: [\"--output\", \"{}\", \"--keys\", \"{keys}\", \"--records\", \"{}\"]\n    parallelism: 2\n    mode: streaming\n  taskManager: {{ replicas: 2, slots: 2 }}\n  storage: {{ url: \"file://{}\" }}\n  configuration:\n    execution.checkpointing.interval: \"3 s\"\n    execution.checkpointing.timeout: \"10 min\"\n    state.backend.type: rocksdb\n",
            dir.join("out").display(),
            keys * 1000,
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let (_jm, rpc, rest) = jobmanager_with(
        &manifest,
        &dir.join("jm.log"),
        &["--heartbeat-interval-ms", "100"],
    );
    let _tms = (taskmanager(&rpc, 2), taskmanager(&rpc, 2));
    let job = wait_job(&rest, Duration::from_secs(60), |j| j["state"] == "RUNNING");
    let id = job["jid"].as_str().unwrap().to_string();
    let vertices = vertex_ids(&job);
    let filled = Instant::now();
    while records(&rest, &id) < keys {
        assert!(
            filled.elapsed() < Duration::from_secs(1200),
            "the state did not fill"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "{keys} keys in the state after {:.1} s",
        filled.elapsed().as_secs_f64()
    );
    let (c, _) = checkpoint(&rest, &id);
    let (_, size) = wait_checkpoint_after(&rest, &id, c, Duration::from_secs(600));
    let (up, up_stop) = rescale(&rest, &id, &vertices, 4);
    let (c, _) = checkpoint(&rest, &id);
    let (_, size4) = wait_checkpoint_after(&rest, &id, c, Duration::from_secs(600));
    let (down, down_stop) = rescale(&rest, &id, &vertices, 2);
    println!("\nrescale downtime, keyed-state with RocksDB on file:// ({keys} keys of 100 hex digits)");
    println!(
        "  2 -> 4: state {:.0} MiB, downtime {up:.2} s (stop and redeploy {up_stop:.2} s, restore until the first record {:.2} s)",
        size as f64 / 1048576.0,
        up - up_stop
    );
    println!(
        "  4 -> 2: state {:.0} MiB, downtime {down:.2} s (stop and redeploy {down_stop:.2} s, restore until the first record {:.2} s)",
        size4 as f64 / 1048576.0,
        down - down_stop
    );
    let _ = std::fs::remove_dir_all(&dir);
}
