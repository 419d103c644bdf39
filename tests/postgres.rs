//! The PostgreSQL sink (issue 34, item 5) against a real server (`common::postgres`): the built-in
//! `words-to-postgres` job upserts word counts as they change, and the table must end equal to a
//! count of the generator's lines made here.
//!
//! - `upserts_leave_the_final_counts`: a checkpointed STREAMING run, rows written in small
//!   batches (many statements per key), no fault.
//! - `upserts_equal_the_fault_free_result_across_a_taskmanager_kill`: the TaskManager running the
//!   sink's first subtask is SIGKILLed after two checkpoints; the restore replays what came after
//!   the restored checkpoint, and its upserts rewrite the same rows: the table equals the
//!   fault-free result, not one count off.
//! - `a_missing_table_fails_the_job_naming_it`.
//! - `exactly_once_appends_equal_the_fault_free_result_across_a_taskmanager_kill`: the
//!   transactional mode appends a row per count change (no key, so a replayed row would be a
//!   second row): after a TaskManager kill the table holds each word's counts 1..n once each,
//!   and every row came with a completed checkpoint's marker.
//! - `the_kafka_to_postgres_example_writes_every_word_s_count`: `examples/kafka-to-postgres.yaml`
//!   through `floe run -f`, against a Kafka broker (`common::kafka`) and the server.
//! - `exactly_once_without_checkpoints_commits_once_at_the_end`: BATCH (each word's final count
//!   appended once), one transaction per subtask, committed at the end of its input.
//!
//! The server is Debian's `postgresql` (`.ci/setup` installs it); without it the tests say
//! SKIPPED, unless `FLOE_REQUIRE_POSTGRES` is set (CI), where they fail.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::postgres::{Postgres, server_or_skip};
use common::*;
use floe::local_cluster::LocalCluster;
use libtest_mimic::{Arguments, Failed, Trial};

const SEED: u64 = 7;

fn conf(dir: &Path, restarts: bool) -> BTreeMap<String, String> {
    // Without restarts: a fixed-delay strategy of no attempts.
    streaming_conf(dir, (!restarts).then_some(0))
}

fn submit(
    cluster: &LocalCluster,
    pg: &Postgres,
    dir: &Path,
    args: &[(&str, String)],
    restarts: bool,
) -> String {
    submit_with(cluster, pg, args, conf(dir, restarts))
}

fn submit_with(
    cluster: &LocalCluster,
    pg: &Postgres,
    args: &[(&str, String)],
    conf: BTreeMap<String, String>,
) -> String {
    let mut all = vec!["--connection".to_string(), pg.connection()];
    for (k, v) in args {
        all.push(format!("--{k}"));
        all.push(v.clone());
    }
    submit_job(&cluster.rpc_address, "words-to-postgres", all, conf)
}

fn create_table(pg: &Postgres) {
    pg.sql("CREATE TABLE word_counts (word text PRIMARY KEY, count bigint NOT NULL)");
}

/// The table as `word -> count`.
fn table(pg: &Postgres) -> HashMap<String, u64> {
    pg.sql("SELECT word, count FROM word_counts")
        .lines()
        .map(|l| {
            let (w, n) = l.split_once('\t').unwrap();
            (w.to_string(), n.parse().unwrap())
        })
        .collect()
}

/// `got` equals `want`, or what differs.
fn compare(got: &HashMap<String, u64>, want: &HashMap<String, u64>) -> Result<(), Failed> {
    if got == want {
        return Ok(());
    }
    let wrong: Vec<String> = want
        .iter()
        .filter(|(w, n)| got.get(*w) != Some(n))
        .take(5)
        .map(|(w, n)| format!("{w}: {:?}, expected {n}", got.get(w)))
        .collect();
    Err(format!(
        "the table has {} words, expected {}; differing, e.g.: {wrong:?}",
        got.len(),
        want.len()
    )
    .into())
}

fn upserts_leave_the_final_counts(pg: &Postgres, dir: &Path) -> Result<(), Failed> {
    create_table(pg);
    let records = 20_000;
    let cluster = cluster_in(dir, 1, 2);
    let args = [
        ("records", records.to_string()),
        ("rate", "10000".into()),
        ("seed", SEED.to_string()),
        ("batch-rows", "50".into()),
    ];
    let id = submit(&cluster, pg, dir, &args, false);
    let job = ended(&cluster, &id, Duration::from_secs(180));
    if job["state"] != "FINISHED" {
        return Err(format!("expected FINISHED: {job}").into());
    }
    compare(&table(pg), &pipeline_reference(SEED, records))
}

/// SIGKILLs the TaskManager running the sink's first subtask (the sink is chained to the keyed
/// sum: the job's last vertex); the job must then finish, with new attempts.
fn kill_the_sink_s_taskmanager(cluster: &LocalCluster, id: &str) -> Result<(), Failed> {
    let job = get(cluster, &format!("/jobs/{id}"));
    let sink_vertex = job["vertices"].as_array().unwrap().last().unwrap().clone();
    let victim = sink_vertex["subtasks"][0]["taskmanager-id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_taskmanager(cluster, &victim);
    let end = ended(cluster, id, Duration::from_secs(180));
    if end["state"] != "FINISHED" {
        return Err(format!("expected FINISHED after the kill: {end}").into());
    }
    if !any_restarted(&end) {
        return Err(format!("the job recovered without new attempts? {end}").into());
    }
    Ok(())
}

fn upserts_equal_the_fault_free_result_across_a_taskmanager_kill(
    pg: &Postgres,
    dir: &Path,
) -> Result<(), Failed> {
    create_table(pg);
    let records = 80_000;
    let cluster = cluster_in(dir, 3, 2);
    let args = [
        ("records", records.to_string()),
        ("rate", "10000".into()),
        ("seed", SEED.to_string()),
    ];
    let id = submit(&cluster, pg, dir, &args, true);
    wait_for("two completed checkpoints", Duration::from_secs(60), || {
        let c = get(&cluster, &format!("/jobs/{id}/checkpoints"));
        (c["counts"]["completed"].as_u64().unwrap_or(0) >= 2).then_some(c)
    });
    let rows_at_kill = table(pg).len();
    kill_the_sink_s_taskmanager(&cluster, &id)?;
    if rows_at_kill == 0 {
        return Err("no row was written before the kill: the kill proved nothing".into());
    }
    compare(&table(pg), &pipeline_reference(SEED, records))
}

fn a_missing_table_fails_the_job_naming_it(pg: &Postgres, dir: &Path) -> Result<(), Failed> {
    let cluster = cluster_in(dir, 1, 2);
    let args = [("records", "1000".to_string()), ("table", "no_such_table".into())];
    let id = submit(&cluster, pg, dir, &args, false);
    let job = ended(&cluster, &id, Duration::from_secs(180));
    let cause = job["failure-cause"].to_string();
    if job["state"] != "FAILED" || !cause.contains("relation \\\"no_such_table\\\" does not exist") {
        return Err(format!("expected FAILED naming the table: {job}").into());
    }
    Ok(())
}

fn create_events_table(pg: &Postgres) {
    pg.sql("CREATE TABLE word_events (word text NOT NULL, count bigint NOT NULL)");
}

/// The events table as `(word, count) -> rows`.
fn events(pg: &Postgres) -> BTreeMap<(String, u64), u64> {
    let mut rows = BTreeMap::new();
    for l in pg.sql("SELECT word, count FROM word_events").lines() {
        let (w, n) = l.split_once('\t').unwrap();
        *rows.entry((w.to_string(), n.parse().unwrap())).or_insert(0) += 1;
    }
    rows
}

/// A fault-free append's rows: each word's running counts 1..=n, once each.
fn events_reference(seed: u64, records: u64) -> BTreeMap<(String, u64), u64> {
    let mut rows = BTreeMap::new();
    for (w, n) in pipeline_reference(seed, records) {
        for k in 1..=n {
            rows.insert((w.clone(), k), 1);
        }
    }
    rows
}

/// `got` equals `want`, or how it differs (rows missing, repeated or foreign).
fn compare_events(
    got: &BTreeMap<(String, u64), u64>,
    want: &BTreeMap<(String, u64), u64>,
) -> Result<(), Failed> {
    if got == want {
        return Ok(());
    }
    let missing = want.keys().filter(|k| !got.contains_key(*k)).count();
    let repeated: Vec<_> = got.iter().filter(|(_, n)| **n > 1).take(5).collect();
    let foreign = got.keys().filter(|k| !want.contains_key(*k)).count();
    Err(format!(
        "{} rows, expected {}: {missing} missing, {} repeated (e.g. {repeated:?}), {foreign} not in the reference",
        got.values().sum::<u64>(),
        want.len(),
        got.values().filter(|n| **n > 1).count()
    )
    .into())
}

fn exactly_once_appends_equal_the_fault_free_result_across_a_taskmanager_kill(
    pg: &Postgres,
    dir: &Path,
) -> Result<(), Failed> {
    create_events_table(pg);
    let records = 60_000;
    let cluster = cluster_in(dir, 3, 2);
    let args = [
        ("table", "word_events".to_string()),
        ("mode", "append".into()),
        ("delivery-guarantee", "exactly-once".into()),
        ("records", records.to_string()),
        ("rate", "10000".into()),
        ("seed", SEED.to_string()),
    ];
    let id = submit(&cluster, pg, dir, &args, true);
    // Rows are visible once a checkpoint's transaction committed: wait for some.
    wait_for("committed rows", Duration::from_secs(60), || {
        (pg.sql("SELECT count(*) FROM word_events").trim() != "0").then_some(())
    });
    kill_the_sink_s_taskmanager(&cluster, &id)?;
    compare_events(&events(pg), &events_reference(SEED, records))?;
    // Every subtask's marker row: the run's, a checkpoint past the first.
    let markers = pg.sql("SELECT sink, run, subtask, checkpoint FROM floe_sink_commits ORDER BY subtask");
    let rows: Vec<Vec<&str>> = markers.lines().map(|l| l.split('\t').collect()).collect();
    if rows.len() != 2
        || rows
            .iter()
            .any(|r| r[0] != "word_events" || r[1] != id || r[3].parse::<u64>().unwrap_or(0) < 2)
    {
        return Err(format!("expected a marker per subtask of run {id}: {markers}").into());
    }
    // Nothing is left in the write-ahead log once every checkpoint was written.
    let left: Vec<_> = walk(&dir.join("storage").join("postgres-sink"));
    if !left.is_empty() {
        return Err(format!("write-ahead objects left: {left:?}").into());
    }
    Ok(())
}

/// Files under `dir` (none when it does not exist).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    files
}

fn exactly_once_without_checkpoints_commits_once_at_the_end(pg: &Postgres, dir: &Path) -> Result<(), Failed> {
    create_events_table(pg);
    let records = 20_000;
    let cluster = cluster_in(dir, 1, 2);
    let args = [
        ("table", "word_events".to_string()),
        ("mode", "append".into()),
        ("delivery-guarantee", "exactly-once".into()),
        ("records", records.to_string()),
        ("seed", SEED.to_string()),
        ("batch-rows", "100".into()),
    ];
    let mut conf = conf(dir, false);
    conf.remove("execution.checkpointing.interval");
    conf.insert("execution.runtime-mode".into(), "BATCH".into());
    let id = submit_with(&cluster, pg, &args, conf);
    let job = ended(&cluster, &id, Duration::from_secs(180));
    if job["state"] != "FINISHED" {
        return Err(format!("expected FINISHED: {job}").into());
    }
    // BATCH: the keyed sum gives each word's final count once.
    let want = pipeline_reference(SEED, records)
        .into_iter()
        .map(|(w, n)| ((w, n), 1))
        .collect();
    compare_events(&events(pg), &want)
}

fn the_kafka_to_postgres_example_writes_every_word_s_count(pg: &Postgres, dir: &Path) -> Result<(), Failed> {
    let binary = common::kafka::broker_binary().ok_or("no Kafka broker")?;
    let broker = common::kafka::Broker::start(&binary, &dir.join("broker.log"));
    broker.create_topic("lines", 2);
    let records = 10_000;
    let (cdf, words) = floe_datastream::generator_vocabulary();
    let lines: Vec<(Option<String>, String)> = (0..records)
        .map(|i| (None, floe_datastream::generator_line(SEED, i, &cdf, &words)))
        .collect();
    broker.produce("lines", &lines);
    create_table(pg);
    // The example as it is, but for the broker's and the server's addresses.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example = std::fs::read_to_string(repo.join("examples/kafka-to-postgres.yaml")).unwrap();
    let (servers, connection) = ("127.0.0.1:9092", "host=127.0.0.1 port=5432 user=floe dbname=app");
    assert!(example.contains(servers) && example.contains(connection));
    let manifest = dir.join("kafka-to-postgres.yaml");
    std::fs::write(
        &manifest,
        example
            .replace(servers, &broker.bootstrap)
            .replace(connection, &pg.connection()),
    )
    .unwrap();
    let stdout = floe_run_ok(&manifest, &dir.join("run"))?;
    if !stdout.contains(" FINISHED in ") {
        return Err(format!("did not finish: {stdout}").into());
    }
    compare(&table(pg), &pipeline_reference(SEED, records))?;
    let markers = pg.sql("SELECT count(*) FROM floe_sink_commits");
    if markers.trim() != "2" {
        return Err(format!("expected a marker row per subtask: {markers}").into());
    }
    Ok(())
}

type Case = fn(&Postgres, &Path) -> Result<(), Failed>;

fn main() {
    let args = Arguments::from_args();
    let cases: Vec<(&str, Case)> = vec![
        ("upserts_leave_the_final_counts", upserts_leave_the_final_counts),
        (
            "upserts_equal_the_fault_free_result_across_a_taskmanager_kill",
            upserts_equal_the_fault_free_result_across_a_taskmanager_kill,
        ),
        (
            "a_missing_table_fails_the_job_naming_it",
            a_missing_table_fails_the_job_naming_it,
        ),
        (
            "exactly_once_appends_equal_the_fault_free_result_across_a_taskmanager_kill",
            exactly_once_appends_equal_the_fault_free_result_across_a_taskmanager_kill,
        ),
        (
            "exactly_once_without_checkpoints_commits_once_at_the_end",
            exactly_once_without_checkpoints_commits_once_at_the_end,
        ),
        (
            "the_kafka_to_postgres_example_writes_every_word_s_count",
            the_kafka_to_postgres_example_writes_every_word_s_count,
        ),
    ];
    let bin: Option<PathBuf> = server_or_skip("PostgreSQL sink tests");
    // The example also needs a Kafka broker: without one (and not required), it is ignored.
    let broker = common::kafka::broker_or_skip("the Kafka-to-PostgreSQL example");
    let trials = cases
        .into_iter()
        .map(|(name, case)| match bin.clone() {
            Some(_) if name.contains("kafka") && broker.is_none() => {
                Trial::test(name, || Ok(())).with_ignored_flag(true)
            }
            Some(bin) => Trial::test(name, move || {
                let dir = scratch(&format!("postgres-{name}"));
                let pg = Postgres::start(&bin, &dir);
                let result = case(&pg, &dir);
                drop(pg);
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
