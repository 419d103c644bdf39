//! The Kafka connector against a Kafka-protocol broker on loopback (issue 15), on real JobManager
//! and TaskManager processes: topics filled and read back with plain librdkafka clients, results
//! compared with references computed here.
//!
//! - `bounded_wordcount_through_floe_run`: `kafka-wordcount --bounded true` by `floe run -f`
//!   finishes at the offsets current at its start, its counts the reference's.
//! - `wordcount_to_files_exactly_once_across_a_taskmanager_kill`: an unbounded WordCount from a
//!   topic filled while it runs; a TaskManager SIGKILLed after two checkpoints; the committed
//!   files hold every running count of every word exactly once.
//! - `keyed_count_topic_to_topic_exactly_once_across_a_kill`: the same kill with the exactly-once
//!   Kafka sink; a `read_committed` consumer sees every running count of every key exactly once.
//! - `new_topics_matching_the_pattern_are_read`: a topic created while the job runs is read.
//! - `files_to_kafka_with_each_guarantee`: `files-to-kafka` exactly-once and at-least-once; every
//!   line once, keyed by its first field.
//! - `starting_offsets_latest_then_committed`: `latest` reads only what comes after the start;
//!   the offsets committed to the group for monitoring start a later job from `committed`.
//! - `bad_input_*`: an unknown topic, an unreachable broker, a record that does not deserialize:
//!   the job fails with a message naming it, after its restart strategy, and nothing is
//!   committed twice.
//!
//! Ignored with SKIPPED where no broker is installed (`.ci/setup` installs it), unless
//! `FLOE_REQUIRE_KAFKA` is set.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::kafka::{Broker, broker_or_skip};
use common::*;
use floe::local_cluster::{ClusterSpec, LocalCluster};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

fn cluster(dir: &Path, taskmanagers: u32) -> LocalCluster {
    LocalCluster::start(&ClusterSpec {
        exe: FLOE.into(),
        taskmanagers,
        slots: 2,
        work_dir: dir.join("work"),
        heartbeat_timeout: Duration::from_secs(2),
        job_file: None,
        placement: None,
        env: Vec::new(),
        properties: Vec::new(),
    })
    .unwrap()
}

fn streaming_conf(dir: &Path, restart_attempts: Option<u32>) -> BTreeMap<String, String> {
    let mut conf: BTreeMap<String, String> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "1 s"),
        ("restart-strategy.fixed-delay.delay", "200 ms"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    conf.insert(
        "floe.job-storage.url".into(),
        format!("file://{}", dir.join("storage").display()),
    );
    if let Some(n) = restart_attempts {
        conf.insert("restart-strategy.type".into(), "fixed-delay".into());
        conf.insert("restart-strategy.fixed-delay.attempts".into(), n.to_string());
    }
    conf
}

fn get(cluster: &LocalCluster, path: &str) -> Value {
    let (status, body) = http("GET", &cluster.rest_address, path);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

fn ended(cluster: &LocalCluster, id: &str, timeout: Duration) -> Value {
    wait_for("the job to end", timeout, || {
        let j = get(cluster, &format!("/jobs/{id}"));
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED")).then_some(j)
    })
}

/// Seeded lines of words (the WordCount generator's), keyed by line number.
fn lines(n: u64, seed: u64) -> Vec<(Option<String>, String)> {
    let (cdf, words) = floe_datastream::generator_vocabulary();
    (0..n)
        .map(|i| {
            (
                Some(i.to_string()),
                floe_datastream::generator_line(seed, i, &cdf, &words),
            )
        })
        .collect()
}

/// Every running count a STREAMING WordCount writes for these lines: `(word, 1..=n)` per word.
fn running_counts(values: impl Iterator<Item = String>) -> Vec<(String, u64)> {
    let mut totals: HashMap<String, u64> = HashMap::new();
    for v in values {
        floe_datastream::tokenize(&v, |w| *totals.entry(w.to_string()).or_insert(0) += 1);
    }
    let mut out: Vec<(String, u64)> = totals
        .into_iter()
        .flat_map(|(w, n)| (1..=n).map(move |c| (w.clone(), c)))
        .collect();
    out.sort();
    out
}

/// The lines of the committed part files (in-progress ones are not output yet).
fn committed(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with("part-") {
            out.extend(
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .lines()
                    .map(str::to_string),
            );
        }
    }
    out
}

fn counts(lines: Vec<String>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = lines
        .iter()
        .map(|l| {
            let (w, c) = l.rsplit_once('\t').unwrap_or_else(|| panic!("bad line {l:?}"));
            (w.to_string(), c.parse().unwrap())
        })
        .collect();
    out.sort();
    out
}

fn kill_taskmanager_of(cluster: &LocalCluster, id: &str, vertex: &str) {
    let job = get(cluster, &format!("/jobs/{id}"));
    let v = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == vertex)
        .unwrap_or_else(|| panic!("no {vertex} vertex: {job}"));
    let victim = v["subtasks"][0]["taskmanager-id"].as_str().unwrap();
    kill_taskmanager(cluster, victim);
}

fn two_checkpoints(cluster: &LocalCluster, id: &str) {
    wait_for("two completed checkpoints", Duration::from_secs(60), || {
        let c = get(cluster, &format!("/jobs/{id}/checkpoints"));
        (c["counts"]["completed"].as_u64().unwrap_or(0) >= 2).then_some(())
    });
}

fn args(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| [format!("--{k}"), v.to_string()])
        .collect()
}

fn bounded_wordcount_through_floe_run(broker: &Broker, dir: &Path) -> Result<(), Failed> {
    broker.create_topic("bounded-words", 3);
    let input = lines(20_000, 7);
    broker.produce("bounded-words", &input);
    let out = dir.join("out");
    let manifest = dir.join("kafka-wordcount.yaml");
    let job_args = args(&[
        ("bootstrap-servers", &broker.bootstrap),
        ("topic", "bounded-words"),
        ("output", out.to_str().unwrap()),
        ("bounded", "true"),
    ]);
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: kafka-wordcount }}\nspec:\n  \
             image: ghcr.io/floe-dev/floe-worker:0.1.0\n  job:\n    name: kafka-wordcount\n    args: {job_args:?}\n    \
             parallelism: 2\n    mode: streaming\n    state: running\n    upgradeMode: stateless\n  \
             taskManager: {{ replicas: 2, slots: 1 }}\n  storage: {{ url: \"file://{}\" }}\n  configuration:\n    \
             execution.checkpointing.interval: \"1 s\"\n",
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let stdout = floe_run_ok(&manifest, &dir.join("run"))?;
    if !stdout.contains(" FINISHED in ") {
        return Err(format!("did not finish: {stdout}").into());
    }
    let got = counts(committed(&out));
    let expected = running_counts(input.into_iter().map(|(_, v)| v));
    if got != expected {
        return Err(format!("{} count lines, expected {}", got.len(), expected.len()).into());
    }
    Ok(())
}

fn wordcount_to_files_exactly_once_across_a_taskmanager_kill(
    broker: &Broker,
    dir: &Path,
) -> Result<(), Failed> {
    broker.create_topic("words", 2);
    let cluster = cluster(dir, 3);
    let out = dir.join("out");
    let id = submit_job(
        &cluster.rpc_address,
        "kafka-wordcount",
        args(&[
            ("bootstrap-servers", &broker.bootstrap),
            ("topic", "words"),
            ("output", out.to_str().unwrap()),
        ]),
        streaming_conf(dir, None),
    );
    // 30,000 lines over about 6 s, while the job runs and after the kill.
    let input = lines(30_000, 11);
    let feeder = {
        let (bootstrap, input) = (broker.bootstrap.clone(), input.clone());
        std::thread::spawn(move || {
            let b = Broker::attach(&bootstrap);
            for chunk in input.chunks(500) {
                b.produce("words", chunk);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    two_checkpoints(&cluster, &id);
    kill_taskmanager_of(&cluster, &id, "reduce");
    feeder.join().unwrap();
    let expected = running_counts(input.into_iter().map(|(_, v)| v));
    // Committed at each checkpoint: wait until all are in (or more: duplicates).
    wait_for("every count committed", Duration::from_secs(120), || {
        (committed(&out).len() >= expected.len()).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let job = get(&cluster, &format!("/jobs/{id}"));
    let got = counts(committed(&out));
    if got != expected {
        let dupes = got.windows(2).filter(|w| w[0] == w[1]).count();
        return Err(format!(
            "{} count lines, expected {} ({dupes} duplicates); job {}",
            got.len(),
            expected.len(),
            job["state"]
        )
        .into());
    }
    let restarted = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["subtasks"].as_array().unwrap().iter())
        .any(|s| s["attempt"].as_u64().unwrap_or(0) > 0);
    if !restarted {
        return Err(format!("the job did not restart after the kill: {job}").into());
    }
    Ok(())
}

fn keyed_count_topic_to_topic_exactly_once_across_a_kill(broker: &Broker, dir: &Path) -> Result<(), Failed> {
    broker.create_topic("clicks", 2);
    broker.create_topic("click-counts", 2);
    let cluster = cluster(dir, 3);
    let id = submit_job(
        &cluster.rpc_address,
        "kafka-keyed-count",
        args(&[
            ("bootstrap-servers", &broker.bootstrap),
            ("topic", "clicks"),
            ("output-topic", "click-counts"),
            ("delivery-guarantee", "exactly-once"),
            ("transactional-id-prefix", "test-keyed-count"),
        ]),
        streaming_conf(dir, None),
    );
    let input: Vec<(Option<String>, String)> = (0..20_000u64)
        .map(|i| (Some(format!("user{}", (i * 7919) % 257)), format!("click {i}")))
        .collect();
    let feeder = {
        let (bootstrap, input) = (broker.bootstrap.clone(), input.clone());
        std::thread::spawn(move || {
            let b = Broker::attach(&bootstrap);
            for chunk in input.chunks(400) {
                b.produce("clicks", chunk);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    two_checkpoints(&cluster, &id);
    // Right after both sink subtasks committed checkpoint 2's transaction (their markers say
    // so), not during a transaction: the broker (nisshi 0.7.0-pre.2) mishandles a transaction
    // its producer died in (a read_committed consumer is handed its aborted records, or stops
    // at it for good), which Kafka does not. The restore then finds checkpoint 2 written and
    // skips it, and writes what came after.
    wait_for(
        "checkpoint 2 committed by both sink subtasks",
        Duration::from_secs(60),
        || {
            (0..2)
                .all(|s| {
                    broker.committed(&format!("test-keyed-count-{s}-commits"), "click-counts") >= Some(2)
                })
                .then_some(())
        },
    );
    kill_taskmanager_of(&cluster, &id, "reduce");
    feeder.join().unwrap();
    let mut totals: HashMap<String, u64> = HashMap::new();
    for (k, _) in &input {
        *totals.entry(k.clone().unwrap()).or_insert(0) += 1;
    }
    let mut expected: Vec<(String, u64)> = totals
        .iter()
        .flat_map(|(k, n)| (1..=*n).map(move |c| (k.clone(), c)))
        .collect();
    expected.sort();
    let read = || {
        counts(
            broker
                .read_committed("click-counts")
                .into_iter()
                .map(|(_, key, value)| {
                    assert_eq!(
                        Some(value.split('\t').next().unwrap().to_string()),
                        key,
                        "keyed by key"
                    );
                    value
                })
                .collect(),
        )
    };
    let mut seen = 0;
    if poll(Duration::from_secs(120), || {
        seen = read().len();
        (seen >= expected.len()).then_some(())
    })
    .is_none()
    {
        // What the sink subtasks marked last tells whether their transactions still commit.
        let marks: Vec<Option<i64>> = (0..2)
            .map(|s| broker.committed(&format!("test-keyed-count-{s}-commits"), "click-counts"))
            .collect();
        return Err(format!(
            "after 120 s read_committed sees {seen} of {} counts; checkpoints marked by the sink subtasks: {marks:?} (logs in {})",
            expected.len(),
            dir.display()
        )
        .into());
    }
    std::thread::sleep(Duration::from_secs(2));
    let got = read();
    if got != expected {
        let dupes = got.windows(2).filter(|w| w[0] == w[1]).count();
        return Err(format!(
            "read_committed saw {} counts, expected {} ({dupes} duplicates)",
            got.len(),
            expected.len()
        )
        .into());
    }
    Ok(())
}

/// `files-to-kafka`, the manifest-only way in: lines of a file to a topic, once with each
/// guarantee that promises delivery; a read_committed consumer sees every line once, keyed by its
/// first field.
fn files_to_kafka_with_each_guarantee(broker: &Broker, dir: &Path) -> Result<(), Failed> {
    let input = dir.join("lines.txt");
    let lines: Vec<String> = (0..5_000).map(|i| format!("user{}\tline {i}", i % 37)).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    for guarantee in ["exactly-once", "at-least-once"] {
        let topic = format!("from-files-{guarantee}");
        broker.create_topic(&topic, 2);
        let cluster = cluster(dir, 1);
        let id = submit_job(
            &cluster.rpc_address,
            "files-to-kafka",
            args(&[
                ("input", input.to_str().unwrap()),
                ("bootstrap-servers", &broker.bootstrap),
                ("output-topic", &topic),
                ("delivery-guarantee", guarantee),
                ("key", "first-field"),
            ]),
            streaming_conf(dir, None),
        );
        let job = ended(&cluster, &id, Duration::from_secs(60));
        if job["state"] != "FINISHED" {
            return Err(format!("{guarantee}: {job}").into());
        }
        let read = broker.read_committed(&topic);
        for (_, key, value) in &read {
            if key.as_deref() != value.split('\t').next() {
                return Err(format!("{guarantee}: record {value:?} keyed {key:?}").into());
            }
        }
        let mut got: Vec<String> = read.into_iter().map(|(_, _, v)| v).collect();
        got.sort();
        let mut expected = lines.clone();
        expected.sort();
        if got != expected {
            return Err(format!(
                "{guarantee}: read {} lines, expected {}",
                got.len(),
                expected.len()
            )
            .into());
        }
    }
    Ok(())
}

fn new_topics_matching_the_pattern_are_read(broker: &Broker, dir: &Path) -> Result<(), Failed> {
    broker.create_topic("events-a", 2);
    let cluster = cluster(dir, 1);
    let out = dir.join("out");
    let _id = submit_job(
        &cluster.rpc_address,
        "kafka-to-files",
        args(&[
            ("bootstrap-servers", &broker.bootstrap),
            ("topic-pattern", "events-.*"),
            ("output", out.to_str().unwrap()),
            ("partition-discovery-interval-ms", "300"),
        ]),
        streaming_conf(dir, None),
    );
    let first: Vec<(Option<String>, String)> = (0..100).map(|i| (None, format!("a-{i}"))).collect();
    broker.produce("events-a", &first);
    wait_for("events-a read", Duration::from_secs(60), || {
        (committed(&out).len() >= 100).then_some(())
    });
    broker.create_topic("events-b", 3);
    let second: Vec<(Option<String>, String)> = (0..100).map(|i| (None, format!("b-{i}"))).collect();
    broker.produce("events-b", &second);
    wait_for("events-b read", Duration::from_secs(60), || {
        (committed(&out).len() >= 200).then_some(())
    });
    let mut got = committed(&out);
    got.sort();
    let mut expected: Vec<String> = first.into_iter().chain(second).map(|(_, v)| v).collect();
    expected.sort();
    if got != expected {
        return Err(format!("read {} values, expected {}", got.len(), expected.len()).into());
    }
    Ok(())
}

/// Starting offsets: `latest` reads only what comes after the start; the source commits its
/// offsets to `--group-id` at its checkpoints (for monitoring), and a later job started from
/// `committed` reads on from there.
fn starting_offsets_latest_then_committed(broker: &Broker, dir: &Path) -> Result<(), Failed> {
    broker.create_topic("start", 2);
    let batch = |tag: &str, n: usize| -> Vec<(Option<String>, String)> {
        (0..n).map(|i| (None, format!("{tag}-{i}"))).collect()
    };
    let values = |b: Vec<(Option<String>, String)>| -> Vec<String> {
        let mut v: Vec<String> = b.into_iter().map(|(_, v)| v).collect();
        v.sort();
        v
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    broker.produce("start", &batch("before", 100));
    let out1 = dir.join("out1");
    {
        let cluster = cluster(dir, 1);
        let id = submit_job(
            &cluster.rpc_address,
            "kafka-to-files",
            args(&[
                ("bootstrap-servers", &broker.bootstrap),
                ("topic", "start"),
                ("output", out1.to_str().unwrap()),
                ("starting-offsets", "latest"),
                ("group-id", "monitoring"),
            ]),
            streaming_conf(&dir.join("job1"), None),
        );
        // Started (its offsets resolved) once a checkpoint completed.
        wait_for("a checkpoint", Duration::from_secs(60), || {
            let c = get(&cluster, &format!("/jobs/{id}/checkpoints"));
            (c["counts"]["completed"].as_u64().unwrap_or(0) >= 1).then_some(())
        });
        broker.produce("start", &batch("after", 50));
        wait_for("the records after the start", Duration::from_secs(60), || {
            (committed(&out1).len() >= 50).then_some(())
        });
        // The group's offsets follow the checkpoints: 150 records in all, read to the end.
        wait_for("the group's offsets", Duration::from_secs(60), || {
            let total: i64 = (0..2)
                .filter_map(|p| broker.committed_on("monitoring", "start", p))
                .sum();
            (total == 150).then_some(())
        });
    }
    if sorted(committed(&out1)) != values(batch("after", 50)) {
        return Err(format!("latest: read {:?}", committed(&out1)).into());
    }
    broker.produce("start", &batch("later", 30));
    let out2 = dir.join("out2");
    let cluster = cluster(dir, 1);
    let _id = submit_job(
        &cluster.rpc_address,
        "kafka-to-files",
        args(&[
            ("bootstrap-servers", &broker.bootstrap),
            ("topic", "start"),
            ("output", out2.to_str().unwrap()),
            ("starting-offsets", "committed"),
            ("group-id", "monitoring"),
        ]),
        streaming_conf(&dir.join("job2"), None),
    );
    wait_for(
        "the records after the committed offsets",
        Duration::from_secs(60),
        || (committed(&out2).len() >= 30).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(1));
    if sorted(committed(&out2)) != values(batch("later", 30)) {
        return Err(format!(
            "committed: read {} records, expected the 30 later ones",
            committed(&out2).len()
        )
        .into());
    }
    Ok(())
}

/// Runs `kafka-to-files` with these arguments and a fixed-delay restart strategy of two attempts
/// until it ends; returns the job's details and the committed lines.
fn failing_job(broker_servers: &str, dir: &Path, extra: &[(&str, &str)]) -> (Value, Vec<String>) {
    let cluster = cluster(dir, 1);
    let out = dir.join("out");
    let mut pairs = vec![
        ("bootstrap-servers", broker_servers),
        ("output", out.to_str().unwrap()),
    ];
    pairs.extend_from_slice(extra);
    let id = submit_job(
        &cluster.rpc_address,
        "kafka-to-files",
        args(&pairs),
        streaming_conf(dir, Some(2)),
    );
    let job = ended(&cluster, &id, Duration::from_secs(120));
    (job, committed(&out))
}

fn failure(job: &Value) -> String {
    job["failure-cause"].to_string()
}

fn bad_input_unknown_topic(broker: &Broker, dir: &Path) -> Result<(), Failed> {
    let (job, _) = failing_job(&broker.bootstrap, dir, &[("topic", "no-such-topic")]);
    let cause = failure(&job);
    if job["state"] != "FAILED" || !cause.contains("topic \\\"no-such-topic\\\" does not exist") {
        return Err(format!("expected FAILED naming the topic: {job}").into());
    }
    Ok(())
}

fn bad_input_unreachable_broker(_: &Broker, dir: &Path) -> Result<(), Failed> {
    let (job, _) = failing_job("127.0.0.1:1", dir, &[("topic", "t")]);
    let cause = failure(&job);
    if job["state"] != "FAILED" || !cause.contains("cannot reach the Kafka brokers at 127.0.0.1:1") {
        return Err(format!("expected FAILED naming the brokers: {job}").into());
    }
    Ok(())
}

fn bad_input_record_that_does_not_deserialize(broker: &Broker, dir: &Path) -> Result<(), Failed> {
    broker.create_topic("dirty", 1);
    let good: Vec<(Option<String>, String)> = (0..50).map(|i| (None, format!("line {i}"))).collect();
    broker.produce("dirty", &good);
    let producer = broker.producer();
    use rdkafka::producer::Producer;
    producer
        .send(rdkafka::producer::BaseRecord::<(), [u8]>::to("dirty").payload(&b"bad \xff byte"[..]))
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
    let (job, lines) = failing_job(&broker.bootstrap, dir, &[("topic", "dirty"), ("bounded", "true")]);
    let cause = failure(&job);
    if job["state"] != "FAILED"
        || !cause.contains("topic dirty partition 0 offset 50 does not deserialize: value is not UTF-8")
    {
        return Err(format!("expected FAILED naming the record: {job}").into());
    }
    let restarts = job["restarts"].as_u64().unwrap_or(0);
    if restarts != 2 {
        return Err(
            format!("the restart strategy (2 attempts) was not applied: {restarts} restarts; {job}").into(),
        );
    }
    let mut sorted = lines.clone();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != lines.len() {
        return Err(format!("a line committed twice: {lines:?}").into());
    }
    Ok(())
}

type Case = fn(&Broker, &Path) -> Result<(), Failed>;

fn main() {
    let args = Arguments::from_args();
    let cases: [(&str, Case); 9] = [
        (
            "bounded_wordcount_through_floe_run",
            bounded_wordcount_through_floe_run,
        ),
        (
            "wordcount_to_files_exactly_once_across_a_taskmanager_kill",
            wordcount_to_files_exactly_once_across_a_taskmanager_kill,
        ),
        (
            "keyed_count_topic_to_topic_exactly_once_across_a_kill",
            keyed_count_topic_to_topic_exactly_once_across_a_kill,
        ),
        (
            "new_topics_matching_the_pattern_are_read",
            new_topics_matching_the_pattern_are_read,
        ),
        (
            "files_to_kafka_with_each_guarantee",
            files_to_kafka_with_each_guarantee,
        ),
        (
            "starting_offsets_latest_then_committed",
            starting_offsets_latest_then_committed,
        ),
        ("bad_input_unknown_topic", bad_input_unknown_topic),
        ("bad_input_unreachable_broker", bad_input_unreachable_broker),
        (
            "bad_input_record_that_does_not_deserialize",
            bad_input_record_that_does_not_deserialize,
        ),
    ];
    let binary: Option<PathBuf> = broker_or_skip("Kafka connector tests");
    let trials = cases
        .into_iter()
        .map(|(name, case)| match binary.clone() {
            Some(binary) => Trial::test(name, move || {
                let dir = scratch(&format!("kafka-{name}"));
                let broker = Broker::start(&binary, &dir.join("broker.log"));
                let result = case(&broker, &dir);
                drop(broker);
                if result.is_ok() {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                result
            }),
            None => Trial::test(name, || Ok(())).with_ignored_flag(true),
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
