//! `GET /metrics` on the JobManager's REST port (issue 16), on real processes: the text parses
//! with the Prometheus project's own OpenMetrics parser (Python `prometheus_client`, installed by
//! `.ci/setup`), its figures carry Flink's names and labels and equal what the REST API says of
//! the same job, and a pipeline whose sink is slow shows it: its source backpressured, its sink
//! busy.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use serde_json::Value;

/// One sample: its name, labels and value.
type Sample = (String, BTreeMap<String, String>, f64);

/// `GET path` as text: (content type, body).
fn get_text(address: &str, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or_default()
        .to_string();
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    (content_type, body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
}

/// Parses OpenMetrics text with `prometheus_client.openmetrics.parser` (which refuses anything
/// that is not OpenMetrics, e.g. a missing `# EOF`).
fn parse(text: &str) -> Vec<Sample> {
    let script = "import sys, json\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        out = []\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in family.samples:\n\
        \x20       out.append([s.name, s.labels, s.value])\n\
        print(json.dumps(out))\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "not OpenMetrics (or prometheus_client is missing: run .ci/setup): {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
}

fn job(rest: &str, id: &str) -> Value {
    http("GET", rest, &format!("/jobs/{id}")).1
}

fn conf(dir: &std::path::Path) -> Vec<(String, String)> {
    [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "500 ms"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into_iter()
    .chain([(
        "floe.job-storage.url".to_string(),
        format!("file://{}", dir.join("storage").display()),
    )])
    .collect()
}

#[test]
fn metrics_parse_as_openmetrics_and_equal_the_rest_api() {
    let (cluster, dir) = local_cluster("metrics-match", 2, 2);
    let args: Vec<String> = [
        "--output",
        dir.join("out").to_str().unwrap(),
        "--records",
        "160000",
        "--rate",
        "20000",
    ]
    .map(String::from)
    .to_vec();
    let id = submit_job(&cluster.rpc_address, "pipeline", args, conf(&dir));
    // While it runs (about 8 s): a live uptime, and the rates once two heartbeats are in.
    let running = wait_for("rates while running", Duration::from_secs(60), || {
        let (content_type, text) = get_text(&cluster.rest_address, "/metrics");
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        let samples = parse(&text);
        value(
            &samples,
            "flink_taskmanager_job_task_numRecordsInPerSecond",
            &[("job_id", &id)],
        )
        .map(|_| samples)
    });
    let uptime = value(&running, "flink_jobmanager_job_uptime", &[("job_id", &id)]).unwrap();
    assert!(uptime > 0.0, "uptime of a running job: {uptime}");
    let end = wait_for("the job to finish", Duration::from_secs(120), || {
        let j = job(&cluster.rest_address, &id);
        (j["state"] == "FINISHED").then_some(j)
    });
    let (_, text) = get_text(&cluster.rest_address, "/metrics");
    let samples = parse(&text);
    let job_labels = [("job_id", id.as_str()), ("job_name", "pipeline")];
    assert_eq!(
        value(&samples, "flink_jobmanager_job_uptime", &job_labels),
        Some(-1.0),
        "ended"
    );
    assert_eq!(
        value(&samples, "flink_jobmanager_job_numRestarts", &job_labels),
        end["restarts"].as_f64()
    );
    let checkpoints = http("GET", &cluster.rest_address, &format!("/jobs/{id}/checkpoints")).1;
    assert_eq!(
        value(
            &samples,
            "flink_jobmanager_job_numberOfCompletedCheckpoints",
            &job_labels
        ),
        checkpoints["counts"]["completed"].as_f64()
    );
    assert!(
        checkpoints["counts"]["completed"].as_u64().unwrap() >= 1,
        "{checkpoints}"
    );
    assert_eq!(
        value(&samples, "flink_jobmanager_job_lastCheckpointSize", &job_labels),
        checkpoints["latest"]["completed"]["checkpointed_size"].as_f64()
    );
    assert_eq!(
        value(&samples, "flink_jobmanager_numRegisteredTaskManagers", &[]),
        Some(2.0)
    );
    assert_eq!(value(&samples, "flink_jobmanager_taskSlotsTotal", &[]), Some(4.0));
    let mut subtasks = 0;
    for v in end["vertices"].as_array().unwrap() {
        for s in v["subtasks"].as_array().unwrap() {
            let subtask = s["subtask"].to_string();
            let labels = [
                ("job_id", id.as_str()),
                ("task_id", v["id"].as_str().unwrap()),
                ("task_name", v["name"].as_str().unwrap()),
                ("subtask_index", subtask.as_str()),
                ("tm_id", s["taskmanager-id"].as_str().unwrap()),
            ];
            assert_eq!(
                value(&samples, "flink_taskmanager_job_task_numRecordsIn", &labels),
                s["records-in"].as_f64(),
                "{labels:?}"
            );
            assert_eq!(
                value(&samples, "flink_taskmanager_job_task_numRecordsOut", &labels),
                s["records-out"].as_f64(),
                "{labels:?}"
            );
            assert_eq!(
                value(&samples, "flink_taskmanager_job_task_numBytesIn", &labels),
                s["bytes-in"].as_f64(),
                "{labels:?}"
            );
            assert_eq!(
                value(&samples, "flink_taskmanager_job_task_numBytesOut", &labels),
                s["bytes-out"].as_f64(),
                "{labels:?}"
            );
            subtasks += 1;
        }
    }
    assert_eq!(subtasks, 6, "source, map and reduce at parallelism 2");
    let read: f64 = samples
        .iter()
        .filter(|(n, l, _)| n == "flink_taskmanager_job_task_numRecordsOut" && l["task_id"] == "source")
        .map(|s| s.2)
        .sum();
    assert_eq!(
        read, 160_000.0,
        "the sources' records out are the lines generated"
    );
    // Every byte a vertex wrote into the shuffle, the next one read: source -> map -> reduce.
    let bytes = |name: &str, task: &str| -> f64 {
        samples
            .iter()
            .filter(|(n, l, _)| n == name && l["task_id"] == task && l["job_id"] == id)
            .map(|s| s.2)
            .sum()
    };
    let (source_out, map_in) = (
        bytes("flink_taskmanager_job_task_numBytesOut", "source"),
        bytes("flink_taskmanager_job_task_numBytesIn", "map"),
    );
    assert!(source_out > 160_000.0, "at least a byte per line: {source_out}");
    assert_eq!(
        source_out, map_in,
        "the source's bytes out are the map's bytes in"
    );
    assert_eq!(
        bytes("flink_taskmanager_job_task_numBytesOut", "map"),
        bytes("flink_taskmanager_job_task_numBytesIn", "reduce"),
        "the map's bytes out are the reduce's bytes in"
    );
    assert_eq!(bytes("flink_taskmanager_job_task_numBytesIn", "source"), 0.0);
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_slow_sink_shows_as_backpressure_at_the_source_and_busy_time_at_the_sink() {
    let (cluster, dir) = local_cluster("metrics-backpressure", 1, 3);
    let args: Vec<String> = [
        "--output",
        dir.join("out").to_str().unwrap(),
        "--records",
        "0",
        "--sink-delay-us",
        "2000",
        "--source-parallelism",
        "1",
        "--map-parallelism",
        "1",
        "--reduce-parallelism",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let id = submit_job(&cluster.rpc_address, "pipeline", args, conf(&dir));
    // Rates over a few seconds once the buffers between them are full.
    std::thread::sleep(Duration::from_secs(6));
    let samples = wait_for("the rates", Duration::from_secs(60), || {
        let samples = parse(&get_text(&cluster.rest_address, "/metrics").1);
        let source = value(
            &samples,
            "flink_taskmanager_job_task_backPressuredTimeMsPerSecond",
            &[("job_id", &id), ("task_id", "source")],
        )?;
        let sink = value(
            &samples,
            "flink_taskmanager_job_task_busyTimeMsPerSecond",
            &[("job_id", &id), ("task_id", "reduce")],
        )?;
        (source > 500.0 && sink > 500.0).then_some(samples)
    });
    let source_busy = value(
        &samples,
        "flink_taskmanager_job_task_busyTimeMsPerSecond",
        &[("job_id", &id), ("task_id", "source")],
    )
    .unwrap();
    assert!(
        source_busy < 500.0,
        "the source mostly waits for buffers: busy {source_busy}"
    );
    // Flink's buffer usage says where it backs up: the queues out of the source are full, and the
    // slow reduce holds input buffers. Its channels are local (one TaskManager): their stream runs
    // on the task's own thread, so while the task works through one buffer only the other of its
    // two credits' buffers can wait (0.5), and none for the instant it asks for the next; the
    // figures are of the last heartbeat, so they are waited for.
    let usage = |samples: &[Sample], name: &str, task: &str| {
        value(samples, name, &[("job_id", &id), ("task_id", task)]).unwrap_or(-1.0)
    };
    let (source_out, reduce_in) = wait_for(
        "buffer usage of the backed-up pipeline",
        Duration::from_secs(60),
        || {
            let samples = parse(&get_text(&cluster.rest_address, "/metrics").1);
            let source_out = usage(
                &samples,
                "flink_taskmanager_job_task_buffers_outPoolUsage",
                "source",
            );
            let reduce_in = usage(
                &samples,
                "flink_taskmanager_job_task_buffers_inPoolUsage",
                "reduce",
            );
            let map_in = usage(&samples, "flink_taskmanager_job_task_buffers_inPoolUsage", "map");
            assert!((0.0..=1.0).contains(&map_in), "a ratio: {map_in}");
            (source_out > 0.9 && reduce_in >= 0.5).then_some((source_out, reduce_in))
        },
    );
    eprintln!("buffers: source outPoolUsage {source_out}, reduce inPoolUsage {reduce_in}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TaskManager's own `/metrics` (`--metrics-address`): the tasks it runs now, with Flink's
/// names and labels and the cumulative task times, its slots, and its managed memory (issue 33:
/// the budget `taskmanager.memory.managed.size` gives the RocksDB instances of its stateful
/// tasks, and what they use of it).
#[test]
fn a_taskmanager_serves_its_own_tasks_metrics() {
    let dir = scratch("metrics-taskmanager");
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: tm-metrics }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"0\", \"--rate\", \"5000\"]\n    parallelism: 1\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 3 }}\n  storage: {{ url: \"file://{}\" }}\n  configuration:\n    state.backend.type: rocksdb\n    execution.checkpointing.interval: \"500 ms\"\n",
            dir.join("out").display(),
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let (_jm, rpc, _rest) = processes::jobmanager_with(&manifest, &dir.join("jm.log"), &[]);
    let (_tm, address) =
        taskmanager_with_metrics(&rpc, "tm-metrics", &["-Dtaskmanager.memory.managed.size=64mb"]);
    // The reduce's RocksDB instance charges its memtable to the managed budget as it writes.
    let samples = wait_for(
        "the source's records and managed memory in use",
        Duration::from_secs(60),
        || {
            let samples = parse(&get_text(&address, "/metrics").1);
            let used = value(
                &samples,
                "flink_taskmanager_Status_Flink_Memory_Managed_Used",
                &[("tm_id", "tm-metrics")],
            );
            value(
                &samples,
                "flink_taskmanager_job_task_numRecordsOut",
                &[
                    ("task_id", "source"),
                    ("tm_id", "tm-metrics"),
                    ("subtask_index", "0"),
                ],
            )
            .filter(|n| *n > 0.0 && used.is_some_and(|u| u > 0.0))
            .map(|_| samples)
        },
    );
    assert_eq!(
        value(
            &samples,
            "flink_taskmanager_Status_TaskSlotsTotal",
            &[("tm_id", "tm-metrics")]
        ),
        Some(3.0)
    );
    let tm = |name| value(&samples, name, &[("tm_id", "tm-metrics")]);
    assert_eq!(
        tm("flink_taskmanager_Status_Flink_Memory_Managed_Total"),
        Some(64.0 * 1024.0 * 1024.0)
    );
    let used = tm("flink_taskmanager_Status_Flink_Memory_Managed_Used").unwrap_or(0.0);
    assert!(used <= 64.0 * 1024.0 * 1024.0, "managed memory used: {used}");
    for task in ["source", "map", "reduce"] {
        for name in [
            "flink_taskmanager_job_task_numRecordsIn",
            "flink_taskmanager_job_task_accumulateBusyTimeMs",
            "flink_taskmanager_job_task_accumulateIdleTimeMs",
            "flink_taskmanager_job_task_accumulateBackPressuredTimeMs",
        ] {
            assert!(
                value(&samples, name, &[("task_id", task)]).is_some_and(|v| v >= 0.0),
                "{name} of {task}"
            );
        }
    }
    // A source at 5,000 lines/s on a fast pipeline mostly waits for its schedule, not for buffers.
    let source = |name| value(&samples, name, &[("task_id", "source")]).unwrap();
    assert!(
        source("flink_taskmanager_job_task_accumulateBackPressuredTimeMs")
            < source("flink_taskmanager_job_task_accumulateBusyTimeMs")
                + source("flink_taskmanager_job_task_accumulateIdleTimeMs")
                + 1.0,
        "{samples:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TaskManager of 3 slots serving its own `/metrics`: the process, and that address.
fn taskmanager_with_metrics(rpc: &str, id: &str, extra: &[&str]) -> (processes::Proc, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(FLOE)
        .args(["taskmanager", "--jobmanager", rpc, "--slots", "3", "--id", id])
        .args(["--metrics-address", "127.0.0.1:0"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let tm = processes::Proc(child);
    let address = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("metrics="))
        .unwrap_or_else(|| panic!("no metrics address in {line:?}"))
        .to_string();
    (tm, address)
}

/// Issue 34, item 2: the metrics a job's functions register in `open` (the `enrich` job's
/// counters, meter, histogram and gauge) are in the TaskManager's `/metrics` under Flink's
/// operator scope and labels, parse as OpenMetrics, and move with the job: the lookups count up
/// between two scrapes, the meter's rate is that of the lookups, the histogram's quantiles are
/// ordered and within a line's 1..=12 words, the gauge is the table's size.
#[test]
fn the_metrics_a_function_registers_are_served_under_flinks_operator_scope() {
    let dir = scratch("metrics-user");
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: user-metrics }}\nspec:\n  job:\n    name: enrich\n    args: [\"--output\", \"{}\", \"--records\", \"0\", \"--rate\", \"2000\"]\n    parallelism: 1\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 3 }}\n  storage: {{ url: \"file://{}\" }}\n",
            dir.join("out").display(),
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let (_jm, rpc, _rest) = processes::jobmanager_with(&manifest, &dir.join("jm.log"), &[]);
    let (_tm, address) = taskmanager_with_metrics(&rpc, "tm-user", &[]);
    let scope = "flink_taskmanager_job_task_operator_enrich_";
    let at = [
        ("operator_name", "Enrich"),
        ("tm_id", "tm-user"),
        ("subtask_index", "0"),
    ];
    let lookups = |samples: &[Sample]| value(samples, &format!("{scope}lookups"), &at);
    let first = wait_for("the enrich function's lookups", Duration::from_secs(60), || {
        let samples = parse(&get_text(&address, "/metrics").1);
        lookups(&samples).filter(|n| *n > 0.0).map(|_| samples)
    });
    let second = wait_for("more lookups", Duration::from_secs(60), || {
        let samples = parse(&get_text(&address, "/metrics").1);
        lookups(&samples)
            .filter(|n| *n > lookups(&first).unwrap())
            .map(|_| samples)
    });
    let get = |name: &str, extra: &[(&str, &str)]| {
        let labels: Vec<(&str, &str)> = at.iter().chain(extra).copied().collect();
        value(&second, &format!("{scope}{name}"), &labels).unwrap_or_else(|| panic!("{name} {extra:?}"))
    };
    assert_eq!(get("misses", &[]), 0.0);
    let (_, words) = floe_datastream::generator_vocabulary();
    assert_eq!(get("tableSize", &[]), words.len() as f64);
    // The task's labels are Flink's: job, task, subtask, TaskManager (and the operator's name).
    let sample = second
        .iter()
        .find(|(n, _, _)| n == &format!("{scope}lookups"))
        .unwrap();
    for label in [
        "job_id",
        "task_id",
        "task_name",
        "subtask_index",
        "tm_id",
        "operator_name",
    ] {
        assert!(sample.1.contains_key(label), "{label} in {sample:?}");
    }
    // 2,000 lines a second of 1..=12 words are 2,000..=24,000 lookups a second; the meter counts
    // from its `open`, just before the first line (loosely bounded: the machine is shared).
    let rate = get("lookupsPerSecond", &[]);
    assert!((1000.0..=30_000.0).contains(&rate), "lookups per second: {rate}");
    let quantiles: Vec<f64> = ["0.5", "0.75", "0.95", "0.98", "0.99", "0.999"]
        .iter()
        .map(|q| get("wordsPerLine", &[("quantile", q)]))
        .collect();
    assert!(quantiles.windows(2).all(|w| w[0] <= w[1]), "{quantiles:?}");
    assert!(
        quantiles.iter().all(|q| (1.0..=12.0).contains(q)),
        "{quantiles:?}"
    );
    assert!(get("wordsPerLine_count", &[]) > 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}
