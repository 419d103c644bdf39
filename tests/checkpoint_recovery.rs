//! Exactly-once recovery of a streaming job from its checkpoints, on real processes: the `pipeline`
//! job (seeded generator -> map -> keyed reduce -> file sink) checkpoints every second; a TaskManager
//! running the keyed reduce is killed with SIGKILL after the second completed checkpoint; the job
//! restarts from the latest checkpoint and the committed output equals the fault-free output line for
//! line: every running count of every word exactly once (no duplicate, no loss). For the in-memory and
//! the RocksDB state backend, with the checkpoints on `file://` and on `s3://` (a local moto server;
//! reported as ignored with `SKIPPED` where `moto_server` is missing, unless `FLOE_REQUIRE_MOTO` is set).
//! The `_grouped_sum` cases run the job with `sum`, whose records are grouped by key per batch before
//! the exchange: the barrier must still split the input exactly. `taskmanager_restarted_under_its_id`
//! kills the only TaskManager and starts a new process under its id at once (a container restart):
//! the JobManager must treat the new registration as the loss of the old process.
//! `*_event_time_windows_*`: Nexmark q5, q11 (event-time windows and timers), q4 and q8 (two inputs)
//! through the same kill. `three_taskmanager_kills_*`: a longer run loses three TaskManagers one
//! after the other under the default restart strategy of a checkpointing job (exponential-delay);
//! `a_taskmanager_sigterm_costs_one_restart`: a TaskManager stopped with SIGTERM is one failure.
//! `*_map_state_job_*` (issue 33): the `map-state` job's per-entry map and list state, and a
//! process window's contents, on either backend, checkpointing while it runs, end with each key's
//! entries and checksum as computed here.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use floe::local_cluster::LocalCluster;
use floe_storage::testing::MotoServer;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

const SEED: u64 = 42;
const RECORDS: u64 = 30_000;
/// Lines per second: the job runs about 6 s, so several checkpoints complete before it ends.
const RATE: u64 = 5_000;

/// Every line a fault-free run of `records` lines commits: for each word, its running counts 1..=total.
fn expected_lines(records: u64) -> Vec<(String, u64)> {
    let mut lines: Vec<(String, u64)> = pipeline_reference(SEED, records)
        .into_iter()
        .flat_map(|(w, total)| (1..=total).map(move |c| (w.clone(), c)))
        .collect();
    lines.sort();
    lines
}

/// How the TaskManager running `reduce#0` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL: its heartbeats stop.
    Kill,
    /// SIGKILL and a new process under the same id at once (a pod's container restarting): its
    /// heartbeats go on, from a process that runs none of its tasks. Issue 11, scenario 3: the
    /// only TaskManager, so no other task fails to reveal the loss.
    RestartUnderSameId,
}

/// `aggregate`: the keyed aggregation, `reduce` (per record) or `sum` (records grouped by key per
/// batch before the exchange, every update still emitted).
fn recover(
    backend: &str,
    aggregate: &str,
    storage: &str,
    s3: Option<&MotoServer>,
    fault: Fault,
) -> Result<(), Failed> {
    let name = format!(
        "recover-{backend}-{aggregate}-{}-{fault:?}",
        if s3.is_some() { "s3" } else { "file" }
    );
    let dir = scratch(&name);
    let cluster = cluster_in(&dir, if fault == Fault::Kill { 3 } else { 1 }, 2);
    let out = dir.join("out");
    let mut conf: BTreeMap<String, String> = s3.map(MotoServer::conf).unwrap_or_default();
    conf.extend(
        [
            ("execution.runtime-mode", "STREAMING"),
            ("parallelism.default", "2"),
            ("execution.checkpointing.interval", "1 s"),
            ("execution.checkpointing.num-retained", "2"),
            ("state.backend.type", backend),
            ("restart-strategy.fixed-delay.delay", "200 ms"),
            ("floe.job-storage.url", storage),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let args = [
        "--output",
        out.to_str().unwrap(),
        "--records",
        &RECORDS.to_string(),
        "--rate",
        &RATE.to_string(),
        "--seed",
        &SEED.to_string(),
        "--aggregate",
        aggregate,
    ]
    .map(String::from)
    .to_vec();
    let id = submit_job(&cluster.rpc_address, "pipeline", args, conf);

    // After the second completed checkpoint: kill the TaskManager running reduce#0.
    let at_kill = wait_for("two completed checkpoints", Duration::from_secs(60), || {
        let c = get(&cluster, &format!("/jobs/{id}/checkpoints"));
        (c["counts"]["completed"].as_u64().unwrap_or(0) >= 2).then_some(c)
    });
    if let Some(dir) = storage.strip_prefix("file://") {
        plant_uploads_never_acknowledged(Path::new(dir), &id);
    }
    let job = get(&cluster, &format!("/jobs/{id}"));
    assert_eq!(
        job["state"], "RUNNING",
        "the job must still run when the TaskManager dies: {job}"
    );
    let reduce = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "reduce")
        .unwrap_or_else(|| panic!("no reduce vertex: {job}"));
    let victim = reduce["subtasks"][0]["taskmanager-id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_taskmanager(&cluster, &victim);
    let _restarted = (fault == Fault::RestartUnderSameId).then(|| {
        let child = std::process::Command::new(FLOE)
            .args([
                "taskmanager",
                "--jobmanager",
                &cluster.rpc_address,
                "--slots",
                "2",
                "--id",
            ])
            .arg(&victim)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        KillOnDrop(child)
    });

    let end = wait_for("the job to end", Duration::from_secs(120), || {
        let j = get(&cluster, &format!("/jobs/{id}"));
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED")).then_some(j)
    });
    assert_eq!(
        end["state"],
        "FINISHED",
        "{}",
        serde_json::to_string_pretty(&end).unwrap()
    );
    assert!(
        any_restarted(&end),
        "the job recovered without new attempts? {end}"
    );

    let mut got = output_lines(&out);
    got.sort();
    let expected = expected_lines(RECORDS);
    if got != expected {
        let dupes = got.windows(2).filter(|w| w[0] == w[1]).count();
        return Err(format!(
            "output differs from the fault-free run: {} lines, expected {} ({dupes} duplicates); \
             checkpoints at the kill: {at_kill}",
            got.len(),
            expected.len()
        )
        .into());
    }
    if let Some(dir) = storage.strip_prefix("file://") {
        covered_by_the_last_checkpoint(std::path::Path::new(dir), &id, &out)?;
        only_retained_checkpoints_left(Path::new(dir), &id)?;
    }
    let after = get(&cluster, &format!("/jobs/{id}/checkpoints"));
    let restored = after["latest"]["restored"]["id"].as_u64();
    assert!(
        restored.is_some_and(|r| r >= 2),
        "the restart restores the latest checkpoint (2 had completed at the kill): {after}"
    );
    eprintln!(
        "{name}: {} lines exactly once; checkpoints {}; the last: {}",
        got.len(),
        after["counts"],
        after["latest"]["completed"]
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Events of the Nexmark run and its rate: about 6 s, several checkpoints.
const NEXMARK_EVENTS: u64 = 200_000;
const NEXMARK_RATE: u64 = 35_000;

/// Event time under a fault (issue 14): Nexmark q5 (sliding event-time windows per auction, then
/// a keyed process function whose event-time timers pick each window's hottest auctions), q11
/// (session windows per bidder, merging), q4 (a keyed co-process join of two inputs, barriers
/// aligned across both) or q8 (a window co-group over the union of two inputs) checkpoints every
/// second; after the second checkpoint the TaskManager running `window#0` is
/// killed with SIGKILL; the job restores windows, timers and the source's splits, and the
/// committed output equals the query's definition over the same events, row for row.
fn windows_survive_a_kill(backend: &str, query: &str) -> Result<(), Failed> {
    let name = format!("nexmark-{query}-{backend}");
    let dir = scratch(&name);
    let cluster = cluster_in(&dir, 3, 2);
    let out = dir.join("out");
    let storage = format!("file://{}", dir.join("storage").display());
    let conf: BTreeMap<String, String> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "1 s"),
        ("state.backend.type", backend),
        ("restart-strategy.fixed-delay.delay", "200 ms"),
        ("floe.job-storage.url", storage.as_str()),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let args = [
        "--query",
        query,
        "--events",
        &NEXMARK_EVENTS.to_string(),
        "--rate",
        &NEXMARK_RATE.to_string(),
        "--output",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let id = submit_job(&cluster.rpc_address, "nexmark", args, conf);
    wait_for("two completed checkpoints", Duration::from_secs(60), || {
        let c = get(&cluster, &format!("/jobs/{id}/checkpoints"));
        (c["counts"]["completed"].as_u64().unwrap_or(0) >= 2).then_some(c)
    });
    // Event time is visible: every window subtask has a watermark, at least the first event's
    // time less the suite's 4 s delay.
    // The killed vertex: the window (fed by a union of two inputs in q8), or q4's two-input
    // co-process function.
    let vertex = if query == "q4" { "co-process" } else { "window" };
    let watermarks = wait_for("the vertex's watermarks", Duration::from_secs(10), || {
        let w = get(&cluster, &format!("/jobs/{id}/vertices/{vertex}/watermarks"));
        (w.as_array().map_or(0, Vec::len) == 2).then_some(w)
    });
    for w in watermarks.as_array().unwrap() {
        let ms: i64 = w["value"].as_str().unwrap().parse().unwrap();
        let first = floe_datastream::nexmark::BASE_TIME - floe_datastream::nexmark::WATERMARK_DELAY_MS;
        assert!(ms >= first - 1, "{watermarks}");
    }
    let job = get(&cluster, &format!("/jobs/{id}"));
    assert_eq!(job["state"], "RUNNING", "{job}");
    let window = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == vertex)
        .unwrap_or_else(|| panic!("no {vertex} vertex: {job}"));
    assert!(window["watermark"].as_i64().is_some(), "{window}");
    // The generator's events are in time order per split: nothing is late.
    for s in window["subtasks"].as_array().unwrap() {
        assert_eq!(s["numLateRecordsDropped"], 0, "{s}");
    }
    let victim = window["subtasks"][0]["taskmanager-id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_taskmanager(&cluster, &victim);
    let end = wait_for("the job to end", Duration::from_secs(120), || {
        let j = get(&cluster, &format!("/jobs/{id}"));
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED")).then_some(j)
    });
    assert_eq!(
        end["state"],
        "FINISHED",
        "{}",
        serde_json::to_string_pretty(&end).unwrap()
    );
    assert!(
        any_restarted(&end),
        "the job recovered without new attempts? {end}"
    );
    let config = floe_datastream::nexmark::NexmarkConfig::default();
    let events = floe_datastream::nexmark::events(&config, NEXMARK_EVENTS);
    let expected = floe_datastream::nexmark::reference(query, &events).unwrap();
    // Committed parts in the order each subtask wrote them (`part-{run}-{subtask}-{n}-{writer}`,
    // one run here): q4's changelog is ordered per key, and a key is one subtask's.
    let mut parts: Vec<((u64, u64), std::path::PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(rest) = name.strip_prefix("part-") {
            let mut n = rest
                .split('-')
                .skip(1)
                .map(|x| x.parse::<u64>().unwrap_or(u64::MAX));
            parts.push(((n.next().unwrap(), n.next().unwrap_or(0)), path));
        }
    }
    parts.sort();
    let mut got: Vec<String> = Vec::new();
    for (_, path) in parts {
        got.extend(std::fs::read_to_string(path).unwrap().lines().map(String::from));
    }
    // q4's changelog, replayed twice after the kill, would retract or add a row twice.
    let got = floe_datastream::nexmark::output_table(query, got)?;
    if got != expected {
        let dupes = got.windows(2).filter(|w| w[0] == w[1]).count();
        return Err(format!(
            "{query}'s output differs from its definition: {} rows, expected {} ({dupes} duplicates)",
            got.len(),
            expected.len()
        )
        .into());
    }
    eprintln!("{name}: {} rows exactly once after the kill", got.len());
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Issue 11, scenario 7 (Flink's final checkpoint): every part a sink committed is covered by the
/// job's last completed checkpoint (numbered below the `next_part` its sink state records), so no
/// output was committed outside a checkpoint at end of input, where a later restore of an earlier
/// checkpoint would have to retract it.
fn covered_by_the_last_checkpoint(
    storage: &std::path::Path,
    job_id: &str,
    out: &std::path::Path,
) -> Result<(), Failed> {
    let dir = storage.join("checkpoints").join(job_id);
    let last = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let n: u64 = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
            e.path().join("_metadata").exists().then_some(n)
        })
        .max()
        .expect("a completed checkpoint");
    let bytes = std::fs::read(dir.join(format!("chk-{last}/_metadata"))).unwrap();
    // The 17-byte FLOE1 envelope header, then JSON.
    let metadata: Value = serde_json::from_slice(&bytes[17..]).unwrap();
    let mut next_part: BTreeMap<String, u64> = BTreeMap::new();
    for (task, snapshot) in metadata["tasks"].as_object().unwrap() {
        if let Some(sink) = snapshot["sink"].as_str() {
            let state: Value = serde_json::from_str(sink).unwrap();
            let subtask = task.rsplit('#').next().unwrap().to_string();
            next_part.insert(subtask, state["next_part"].as_u64().unwrap());
        }
    }
    for entry in std::fs::read_dir(out).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("part-") else {
            continue;
        };
        // `part-{run}-{subtask}-{n}-{writer}`.
        let mut fields = rest.split('-').skip(1);
        let (subtask, n) = (
            fields.next().unwrap(),
            fields.next().unwrap().parse::<u64>().unwrap(),
        );
        let covered = next_part.get(subtask).is_some_and(|next| n < *next);
        if !covered {
            return Err(format!(
                "{name} was committed outside a checkpoint: the last one ({last}) records next parts {next_part:?}"
            )
            .into());
        }
    }
    Ok(())
}

/// What a killed TaskManager leaves of a checkpoint that never completes (issue 31, item 11): a
/// task's upload into a checkpoint directory that never gets its `_metadata`, and a shared state
/// file no acknowledgement ever named. Nothing the running job does would remove them.
fn plant_uploads_never_acknowledged(storage: &Path, job_id: &str) {
    let dir = storage.join("checkpoints").join(job_id);
    for (path, body) in [
        ("chk-99999/0-0-1", "state of a checkpoint that never completed"),
        (
            "shared/9-9/never-acknowledged.sst",
            "an SST file never acknowledged",
        ),
    ] {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
}

/// Once the job ended, its storage holds exactly its retained checkpoints (`num-retained` 2):
/// each `chk-{n}` left has its `_metadata`, and every shared file left is one of theirs. The
/// JobManager sweeps after the job ends, so this waits for the planted uploads to go.
fn only_retained_checkpoints_left(storage: &Path, job_id: &str) -> Result<(), Failed> {
    let dir = storage.join("checkpoints").join(job_id);
    let planted = [
        dir.join("chk-99999"),
        dir.join("shared/9-9/never-acknowledged.sst"),
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while planted.iter().any(|p| p.exists()) {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "30 s after the job ended, uploads of a checkpoint that never completed are still there: {planted:?}"
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut checkpoints = Vec::new();
    let mut referenced = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "shared" {
            continue;
        }
        let metadata = entry.path().join("_metadata");
        if !metadata.exists() {
            return Err(format!("{name} is left without metadata after the job ended").into());
        }
        let bytes = std::fs::read(metadata).unwrap();
        // The 17-byte FLOE1 envelope header, then JSON.
        let metadata: Value = serde_json::from_slice(&bytes[17..]).unwrap();
        for snapshot in metadata["tasks"].as_object().unwrap().values() {
            for file in snapshot["files"].as_array().into_iter().flatten() {
                referenced.insert(file.as_str().unwrap().to_string());
            }
        }
        checkpoints.push(name);
    }
    if !(1..=2).contains(&checkpoints.len()) {
        return Err(
            format!("the ended job keeps {checkpoints:?}, expected its 1-2 retained checkpoints").into(),
        );
    }
    let shared = dir.join("shared");
    let mut stack = vec![shared.clone()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let relative = path.strip_prefix(storage).unwrap().to_string_lossy().into_owned();
            if !referenced.contains(&relative) {
                return Err(format!(
                    "{relative} is left after the job ended, and no retained checkpoint ({checkpoints:?}) references it"
                )
                .into());
            }
        }
    }
    Ok(())
}

/// The restart budget resets (Flink 2's default for a checkpointing job, exponential-delay): the
/// `pipeline` job, with no restart strategy configured, loses three TaskManagers to SIGKILL one
/// after the other, each once the job runs again and completed two checkpoints since the kill
/// before. Each kill is one failure although the JobManager hears of it twice (a task elsewhere
/// fails reading from the dead TaskManager, then the restart's deployment cannot reach it). The
/// job FINISHES and its committed output equals the fault-free output line for line.
/// A local cluster of `taskmanagers` x 2 slots running the checkpointing `pipeline` job over
/// `records` lines (a checkpoint a second, `extra` configuration on top); the cluster, the output
/// directory and the job id.
fn pipeline_job(
    dir: &Path,
    taskmanagers: u32,
    records: u64,
    extra: &[(&str, &str)],
) -> (LocalCluster, std::path::PathBuf, String) {
    let cluster = cluster_in(dir, taskmanagers, 2);
    let out = dir.join("out");
    let storage = format!("file://{}", dir.join("storage").display());
    let mut conf: BTreeMap<String, String> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "1 s"),
        ("floe.job-storage.url", storage.as_str()),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    conf.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let args = [
        "--output",
        out.to_str().unwrap(),
        "--records",
        &records.to_string(),
        "--rate",
        &RATE.to_string(),
        "--seed",
        &SEED.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let id = submit_job(&cluster.rpc_address, "pipeline", args, conf);
    (cluster, out, id)
}

/// The TaskManager running `reduce#0`.
fn reduce_taskmanager(job: &Value) -> String {
    job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "reduce")
        .and_then(|v| v["subtasks"][0]["taskmanager-id"].as_str())
        .unwrap_or_else(|| panic!("no reduce#0 placement: {job}"))
        .to_string()
}

/// The committed output equals the fault-free output of `records` lines, every part covered by
/// the job's last checkpoint; the number of lines.
fn exactly_the_fault_free_output(
    dir: &Path,
    out: &Path,
    id: &str,
    records: u64,
    after: &str,
) -> Result<usize, Failed> {
    let mut got = output_lines(out);
    got.sort();
    let expected = expected_lines(records);
    if got != expected {
        let dupes = got.windows(2).filter(|w| w[0] == w[1]).count();
        return Err(format!(
            "output differs from the fault-free run after {after}: {} lines, expected {} ({dupes} duplicates)",
            got.len(),
            expected.len()
        )
        .into());
    }
    covered_by_the_last_checkpoint(&dir.join("storage"), id, out)?;
    Ok(got.len())
}

fn three_kills_spaced_over_the_run() -> Result<(), Failed> {
    /// About 16 s of input at RATE: the third kill comes well before the end.
    const RECORDS_LONG: u64 = 80_000;
    let dir = scratch("three-kills");
    let (cluster, out, id) = pipeline_job(&dir, 4, RECORDS_LONG, &[]);
    let mut killed: Vec<String> = Vec::new();
    let mut completed_before = 0;
    for kill in 1..=3 {
        let ready = wait_for(
            &format!("the job running with two new checkpoints before kill {kill}"),
            Duration::from_secs(90),
            || {
                let job = get(&cluster, &format!("/jobs/{id}"));
                if matches!(job["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED")) {
                    return Some(Err(job));
                }
                let completed = get(&cluster, &format!("/jobs/{id}/checkpoints"))["counts"]["completed"]
                    .as_u64()
                    .unwrap_or(0);
                let all_running = job["vertices"]
                    .as_array()?
                    .iter()
                    .flat_map(|v| v["subtasks"].as_array().into_iter().flatten())
                    .all(|s| s["status"] == "RUNNING");
                (job["state"] == "RUNNING" && all_running && completed >= completed_before + 2)
                    .then_some(Ok((job, completed)))
            },
        );
        let (job, completed) = ready.map_err(|job| {
            format!(
                "the job ended before kill {kill}: {}",
                serde_json::to_string_pretty(&job).unwrap()
            )
        })?;
        let victim = reduce_taskmanager(&job);
        assert!(!killed.contains(&victim), "{victim} was killed already: {job}");
        kill_taskmanager(&cluster, &victim);
        eprintln!("kill {kill}: {victim} (after {completed} completed checkpoints)");
        killed.push(victim);
        completed_before = completed;
    }
    let end = ended(&cluster, &id, Duration::from_secs(180));
    assert_eq!(
        end["state"],
        "FINISHED",
        "{}",
        serde_json::to_string_pretty(&end).unwrap()
    );
    let restarts = end["restarts"].as_u64().unwrap_or(0);
    assert!(restarts >= 3, "three kills, {restarts} restarts: {end}");
    let lines = exactly_the_fault_free_output(&dir, &out, &id, RECORDS_LONG, "three kills")?;
    eprintln!(
        "three kills ({}): {} lines exactly once, {restarts} restarts",
        killed.join(", "),
        lines
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// "A TaskManager's SIGTERM (an eviction, a scale-down) counts as one failure, not two": with one
/// restart allowed (`fixed-delay`, 1 attempt, 500 ms), the TaskManager running `reduce#0` gets
/// SIGTERM after the second checkpoint. It reports each of its tasks failed as it stops (the
/// failure counted); the restart, due before its heartbeat times out, sends attempts to its slots
/// and cannot reach it (its loss: the same failure, not a second one). The job FINISHES with the
/// fault-free output.
fn sigterm_costs_one_restart() -> Result<(), Failed> {
    let dir = scratch("sigterm-one-restart");
    let (cluster, out, id) = pipeline_job(
        &dir,
        3,
        RECORDS,
        &[
            ("restart-strategy.type", "fixed-delay"),
            ("restart-strategy.fixed-delay.attempts", "1"),
            ("restart-strategy.fixed-delay.delay", "500 ms"),
        ],
    );
    wait_for("two completed checkpoints", Duration::from_secs(60), || {
        let c = get(&cluster, &format!("/jobs/{id}/checkpoints"));
        (c["counts"]["completed"].as_u64().unwrap_or(0) >= 2).then_some(c)
    });
    let job = get(&cluster, &format!("/jobs/{id}"));
    assert_eq!(job["state"], "RUNNING", "{job}");
    let victim = reduce_taskmanager(&job);
    let index: usize = victim.strip_prefix("taskmanager-").unwrap().parse().unwrap();
    let pid = cluster.taskmanager_pids()[index];
    let terminated = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let end = ended(&cluster, &id, Duration::from_secs(120));
    let exceptions = get(&cluster, &format!("/jobs/{id}/exceptions"));
    assert_eq!(
        end["state"],
        "FINISHED",
        "one SIGTERM, one restart allowed: {}\nexceptions: {}",
        serde_json::to_string_pretty(&end).unwrap(),
        serde_json::to_string_pretty(&exceptions).unwrap()
    );
    let lines = exactly_the_fault_free_output(&dir, &out, &id, RECORDS, "SIGTERM")?;
    eprintln!(
        "SIGTERM to {victim}: {} lines exactly once, {} failovers, one restart counted",
        lines, end["restarts"]
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A child process killed on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 33: the `map-state` job's per-entry state (a map per key: a `get` and a `put` per
/// record; a list per key: an append per record; or one window per key holding every record, as
/// per-entry contents on RocksDB) on either backend, checkpointing every 100 ms
/// while it runs at parallelism 2: each key's entries and checksum equal the reference computed
/// here from the records.
fn map_state_matches_the_reference(backend: &str, state: &str) -> Result<(), Failed> {
    let name = format!("map-state-{state}-{backend}");
    let dir = scratch(&name);
    let cluster = cluster_in(&dir, 1, 2);
    let out = dir.join("out");
    let storage = format!("file://{}", dir.join("storage").display());
    let conf: BTreeMap<String, String> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "100 ms"),
        ("state.backend.type", backend),
        ("floe.job-storage.url", storage.as_str()),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let (keys, entries, records) = (37u64, 300u64, 60_000u64);
    let args: Vec<String> = [
        "--output",
        out.to_str().unwrap(),
        "--keys",
        &keys.to_string(),
        "--entries-per-key",
        &entries.to_string(),
        "--records",
        &records.to_string(),
        "--state",
        state,
    ]
    .map(String::from)
    .to_vec();
    let id = submit_job(&cluster.rpc_address, "map-state", args, conf);
    let end = ended(&cluster, &id, Duration::from_secs(180));
    assert_eq!(end["state"], "FINISHED", "{end}");
    let completed = get(&cluster, &format!("/jobs/{id}/checkpoints"))["counts"]["completed"]
        .as_u64()
        .unwrap_or(0);
    // The reference: each key's entries (map: entry -> sum of its records; list: its records).
    let mut expected: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut sums: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for n in 0..records {
        let key = n % keys;
        // A list and a window hold every record of their key.
        if state != "map" {
            let e = expected.entry(key).or_default();
            e.0 += 1;
            e.1 = e.1.wrapping_add(floe_datastream::map_state_entry_checksum(0, n));
        } else {
            let s = sums.entry((key, (n / keys) % entries)).or_default();
            *s = s.wrapping_add(n);
        }
    }
    for ((key, entry), sum) in sums {
        let e = expected.entry(key).or_default();
        e.0 += 1;
        e.1 =
            e.1.wrapping_add(floe_datastream::map_state_entry_checksum(entry, sum));
    }
    let mut got: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with("part-") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let f: Vec<u64> = line.split('\t').map(|v| v.parse().unwrap()).collect();
            if got.insert(f[0], (f[1], f[2])).is_some() {
                return Err(format!("{name}: key {} written twice", f[0]).into());
            }
        }
    }
    if got != expected {
        return Err(format!(
            "{name}: {} keys differ from the reference",
            expected.iter().filter(|(k, v)| got.get(k) != Some(v)).count()
        )
        .into());
    }
    eprintln!("{name}: {keys} keys as the reference; {completed} checkpoints completed during the run");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let moto = MotoServer::for_tests("checkpoint recovery on s3://", "floe-checkpoints");
    let mut trials = Vec::new();
    for backend in ["hashmap", "rocksdb"] {
        trials.push(Trial::test(format!("{backend}_file_storage"), move || {
            let storage = format!("file://{}", scratch(&format!("storage-{backend}")).display());
            recover(backend, "reduce", &storage, None, Fault::Kill)
        }));
        trials.push(Trial::test(
            format!("{backend}_file_storage_grouped_sum"),
            move || {
                let storage = format!("file://{}", scratch(&format!("storage-{backend}-sum")).display());
                recover(backend, "sum", &storage, None, Fault::Kill)
            },
        ));
        let test = format!("{backend}_s3_storage");
        match &moto {
            Some(server) => {
                let server: Arc<MotoServer> = server.clone();
                trials.push(Trial::test(test, move || {
                    recover(
                        backend,
                        "reduce",
                        &server.url(&format!("jobs-{backend}")),
                        Some(&server),
                        Fault::Kill,
                    )
                }));
            }
            None => trials.push(Trial::test(test, || Ok(())).with_ignored_flag(true)),
        }
    }
    for backend in ["hashmap", "rocksdb"] {
        for query in ["q5", "q11", "q4", "q8"] {
            trials.push(Trial::test(
                format!("{backend}_event_time_windows_{query}"),
                move || windows_survive_a_kill(backend, query),
            ));
        }
    }
    for backend in ["hashmap", "rocksdb"] {
        for state in ["map", "list", "window"] {
            trials.push(Trial::test(
                format!("{backend}_map_state_job_{state}"),
                move || map_state_matches_the_reference(backend, state),
            ));
        }
    }
    trials.push(Trial::test(
        "three_taskmanager_kills_finish_with_the_default_restart_strategy",
        three_kills_spaced_over_the_run,
    ));
    trials.push(Trial::test(
        "a_taskmanager_sigterm_costs_one_restart",
        sigterm_costs_one_restart,
    ));
    trials.push(Trial::test("taskmanager_restarted_under_its_id", || {
        let storage = format!("file://{}", scratch("storage-restart-same-id").display());
        recover("hashmap", "reduce", &storage, None, Fault::RestartUnderSameId)
    }));
    libtest_mimic::run(&args, trials).exit();
}
