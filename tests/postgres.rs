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
    let mut all = vec!["--connection".to_string(), pg.connection()];
    for (k, v) in args {
        all.push(format!("--{k}"));
        all.push(v.clone());
    }
    submit_job(
        &cluster.rpc_address,
        "words-to-postgres",
        all,
        conf(dir, restarts),
    )
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
    let job = get(&cluster, &format!("/jobs/{id}"));
    // The sink is chained to the keyed sum: the job's last vertex.
    let sink_vertex = job["vertices"].as_array().unwrap().last().unwrap().clone();
    let victim = sink_vertex["subtasks"][0]["taskmanager-id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_taskmanager(&cluster, &victim);
    let end = ended(&cluster, &id, Duration::from_secs(180));
    if end["state"] != "FINISHED" {
        return Err(format!("expected FINISHED after the kill: {end}").into());
    }
    if !any_restarted(&end) {
        return Err(format!("the job recovered without new attempts? {end}").into());
    }
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
    ];
    let bin: Option<PathBuf> = server_or_skip("PostgreSQL sink tests");
    let trials = cases
        .into_iter()
        .map(|(name, case)| match bin.clone() {
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
