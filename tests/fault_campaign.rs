//! The fault-injection campaign (issue 11): Floe's promise is that any process may die or stall at
//! any moment and the committed output is still exactly the fault-free output. Each run starts a
//! local cluster in application mode (a JobManager with an operation log, two TaskManagers, real
//! processes on loopback), runs one of the jobs below, and injects a random schedule of faults:
//!
//! - SIGKILL of a TaskManager, restarted under its id after a random delay (a pod's container
//!   restarting), or of the JobManager, restarted on its ports (a new leader epoch);
//! - SIGSTOP and, after 0.3 to 4 s, SIGCONT of a TaskManager or the JobManager (a GC-like pause,
//!   often past the 2 s heartbeat timeout);
//! - network partitions, healed after 0.3 to 4 s: between the two TaskManagers, between the
//!   JobManager and one TaskManager, and a JobManager cut off from everything while a replacement
//!   takes over at its Service address (Kubernetes replacing a pod on an unreachable node): two
//!   JobManagers live at once, the old one fenced but not yet aware of it; half the time the old
//!   host stays cut off until the job ended (a node that does not come back: nothing ever resets
//!   the TaskManagers' connections to the old JobManager);
//! - for a share of runs, object-store faults in every process (`floe.testing.object-store.*`:
//!   failed, lost-answer and delayed writes and reads of checkpoints, log appends, remote shuffle
//!   and sink files) and checkpoints that time out mid-alignment.
//!
//! Like a supervisor (Kubernetes restarts a pod whose container exits), the harness restarts any
//! process that exits on its own. After the run it checks the history: the job FINISHED (no hang
//! within 120 s); the committed output equals the fault-free output as a multiset (streaming: every
//! running count of every word exactly once; batch: exact final counts), with no in-progress file
//! left; every TaskManager reports no execution left running; no JobManager that was taken over
//! is still running; and, from every TaskManager's history (`FLOE_TESTING_HISTORY`), no task of a
//! fenced JobManager acted after the new epoch began: every deployment and every checkpoint
//! completion a TaskManager delivered came from the newest leader epoch it had seen, to a task of
//! that epoch. Jobs: the streaming `pipeline` with a
//! keyed reduce or sum (heap and RocksDB state, `file://` and `s3://` job storage), streaming
//! WordCount over a file, and the `pipeline` as a multi-stage batch job with local blocking or
//! remote shuffle.
//!
//! It prints a table: runs, faults injected by kind, exact outputs, hangs, recovery time (fault to
//! every subtask running again after a restart; median and max).
//!
//! `FLOE_CAMPAIGN_RUNS` (default 3: the short fixed-seed subset `cargo test` runs) and
//! `FLOE_CAMPAIGN_SEED` (default 1): run `r` uses seed `SEED + r`, so any run is reproduced alone
//! with `FLOE_CAMPAIGN_RUNS=1 FLOE_CAMPAIGN_SEED=<its seed>`. The full campaign:
//! `FLOE_CAMPAIGN_RUNS=200 cargo test --workspace --test fault_campaign -- --nocapture`.
//!
//! The processes run on hosts of their own (network namespaces, `common::netns`: needs root), so
//! partitions are real dropped packets. Where namespaces cannot be made or `moto_server` is
//! missing, the campaign is reported ignored with `SKIPPED` and why (unless `FLOE_REQUIRE_NETNS` /
//! `FLOE_REQUIRE_MOTO`: CI, where it then fails).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::netns::Network;
use common::*;
use floe::local_cluster::{ClusterSpec, JOBMANAGER_RPC_PORT, LocalCluster, Placement};
use floe::verify::Rng;
use floe_storage::testing::MotoServer;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// Streaming `pipeline`: generator -> map -> keyed aggregation -> exactly-once file sink.
    Pipeline { rocksdb: bool, sum: bool, s3: bool },
    /// Streaming WordCount over a file.
    WordCount,
    /// `pipeline` in BATCH mode, every exchange blocking: local disk or remote (object storage).
    Batch { remote: bool },
}

impl Job {
    fn pick(rng: &mut Rng) -> Job {
        match rng.below(6) {
            0..=2 => Job::Pipeline {
                rocksdb: rng.chance(0.5),
                sum: rng.chance(0.5),
                s3: rng.chance(0.5),
            },
            3 => Job::WordCount,
            _ => Job::Batch {
                remote: rng.chance(0.5),
            },
        }
    }

    fn name(&self) -> String {
        match self {
            Job::Pipeline { rocksdb, sum, s3 } => format!(
                "stream-{}-{}-{}",
                if *sum { "sum" } else { "reduce" },
                if *rocksdb { "rocksdb" } else { "heap" },
                if *s3 { "s3" } else { "file" }
            ),
            Job::WordCount => "stream-wordcount".into(),
            Job::Batch { remote } => format!("batch-{}", if *remote { "remote" } else { "local" }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Fault {
    KillTaskManager,
    PauseTaskManager,
    KillJobManager,
    PauseJobManager,
    /// Per run: object-store failures and delays in every process.
    ObjectStore,
    /// Per run: a 200 ms checkpoint timeout, so alignments are aborted mid-way.
    CheckpointTimeout,
    /// The two TaskManagers cannot reach each other.
    PartitionTaskManagers,
    /// The JobManager and one TaskManager cannot reach each other.
    PartitionJobManager,
    /// The JobManager is cut off from everything and a replacement takes over its Service.
    TakeOverJobManager,
    /// After a takeover, the old JobManager's host stays cut off until the job ended.
    OldJobManagerHostLost,
}

/// Hosts of the campaign's network: two for JobManagers (a replacement goes to the other one),
/// then the TaskManagers.
const JOBMANAGER_HOSTS: [usize; 2] = [0, 1];
const TASKMANAGER_HOSTS: [usize; 2] = [2, 3];

const SEED: u64 = 42;
const PIPELINE_RECORDS: u64 = 30_000;
const PIPELINE_RATE: u64 = 5_000;
const BATCH_RECORDS: u64 = 200_000;
/// Lines per second of the batch job's generator: it runs about 5 s, so faults meet every stage.
const BATCH_RATE: u64 = 40_000;

/// The inputs every run shares: the WordCount input and the S3 server.
struct Shared {
    words: PathBuf,
    word_counts: HashMap<String, u64>,
    moto: Option<Arc<MotoServer>>,
    /// `None`: loopback, no partitions.
    network: Option<Network>,
}

#[derive(Debug, Default)]
struct Report {
    seed: u64,
    job: String,
    faults: Vec<Fault>,
    /// Processes that exited on their own and were restarted by the harness.
    exits: usize,
    exact: bool,
    hang: bool,
    recoveries: Vec<Duration>,
    problems: Vec<String>,
    duration: Duration,
    history: HistoryCheck,
}

/// What the TaskManagers' histories say about fencing.
#[derive(Debug, Default, Clone, Copy)]
struct HistoryCheck {
    /// Leader epochs that took over a TaskManager (after its first).
    epoch_changes: usize,
    /// Calls and answers of fenced JobManagers refused.
    refused: usize,
    /// Deployments and checkpoint completions delivered.
    acts: usize,
    /// Of those, from an older epoch than the newest seen, or to a task of another epoch.
    stale_acts: usize,
}

/// Reads every history file in `dir`; a problem for each act of a fenced JobManager.
fn check_history(dir: &Path, problems: &mut Vec<String>) -> HistoryCheck {
    let mut check = HistoryCheck::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        problems.push(format!("no TaskManager history in {}", dir.display()));
        return check;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let mut newest = 0u64;
        let mut seen_epoch = false;
        for line in std::fs::read_to_string(entry.path()).unwrap_or_default().lines() {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                problems.push(format!("{name}: unreadable history line {line:?}"));
                continue;
            };
            let number = |field: &str| -> u64 {
                match &event[field] {
                    Value::String(s) => s.parse().unwrap_or(u64::MAX),
                    v => v.as_u64().unwrap_or(u64::MAX),
                }
            };
            match event["event"].as_str() {
                Some("epoch") => {
                    let epoch = number("epoch");
                    if epoch <= newest && seen_epoch {
                        problems.push(format!("{name}: leader epoch went from {newest} to {epoch}"));
                    }
                    check.epoch_changes += usize::from(seen_epoch);
                    seen_epoch = true;
                    newest = newest.max(epoch);
                }
                Some("refused") => check.refused += 1,
                Some(act @ ("deploy" | "commit")) => {
                    check.acts += 1;
                    let (call, attempt) = (number("call_epoch"), number("attempt"));
                    if call != newest || attempt >> 32 != call {
                        check.stale_acts += 1;
                        problems.push(format!(
                            "{name}: {act} of attempt {attempt} (epoch {}) by the JobManager of epoch {call} after epoch {newest} began",
                            attempt >> 32
                        ));
                    }
                }
                _ => problems.push(format!("{name}: unknown history event {line:?}")),
            }
        }
    }
    check
}

fn kill(signal: &str, pid: u32) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// `GET path` of the JobManager's REST API, `None` while it does not answer.
fn rest(cluster: &LocalCluster, path: &str) -> Option<Value> {
    match try_http("GET", &cluster.rest_address, path) {
        Some((200, v)) => Some(v),
        _ => None,
    }
}

/// The one job the JobManager runs.
fn job_details(cluster: &LocalCluster) -> Option<Value> {
    let list = rest(cluster, "/jobs")?;
    let id = list["jobs"].get(0)?["id"].as_str()?.to_string();
    rest(cluster, &format!("/jobs/{id}")).filter(|j| j["vertices"].is_array())
}

fn all_subtasks_running(job: &Value) -> bool {
    job["state"] == "RUNNING"
        && job["vertices"].as_array().is_some_and(|vs| {
            vs.iter().all(|v| {
                v["subtasks"].as_array().is_some_and(|ss| {
                    ss.iter()
                        .all(|s| s["status"] == "RUNNING" || s["status"] == "FINISHED")
                })
            })
        })
}

/// Restarts what exited on its own, as a supervisor would; returns how many.
fn supervise(cluster: &mut LocalCluster) -> usize {
    let restarted = cluster.restart_exited();
    for (name, outcome) in &restarted {
        if let Err(e) = outcome {
            eprintln!("  restart of {name} failed (will retry): {e:#}");
        }
    }
    restarted.len()
}

/// Sleeps `d` while supervising.
fn pause(cluster: &mut LocalCluster, d: Duration, exits: &mut usize) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        *exits += supervise(cluster);
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
}

fn manifest(dir: &Path, job: Job, shared: &Shared, conf: &BTreeMap<String, String>) -> PathBuf {
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let (name, args, mode, parallelism) = match job {
        Job::Pipeline { sum, .. } => (
            "pipeline",
            vec![
                "--output".to_string(),
                out.into(),
                "--records".into(),
                PIPELINE_RECORDS.to_string(),
                "--rate".into(),
                PIPELINE_RATE.to_string(),
                "--seed".into(),
                SEED.to_string(),
                "--aggregate".into(),
                if sum { "sum" } else { "reduce" }.into(),
            ],
            "streaming",
            2,
        ),
        Job::WordCount => (
            "wordcount",
            vec![
                "--input".to_string(),
                shared.words.display().to_string(),
                "--output".into(),
                out.into(),
            ],
            "streaming",
            2,
        ),
        Job::Batch { .. } => (
            "pipeline",
            vec![
                "--output".to_string(),
                out.into(),
                "--records".into(),
                BATCH_RECORDS.to_string(),
                "--seed".into(),
                SEED.to_string(),
                "--reduce-parallelism".into(),
                "3".into(),
                "--rate".into(),
                BATCH_RATE.to_string(),
            ],
            "batch",
            4,
        ),
    };
    let storage = match (job, &shared.moto) {
        (Job::Pipeline { s3: true, .. }, Some(moto)) => moto.url(&dir.file_name().unwrap().to_string_lossy()),
        _ => format!("file://{}", dir.join("storage").display()),
    };
    let mut text = format!(
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: campaign }}\nspec:\n  job:\n    name: {name}\n    args: {}\n    parallelism: {parallelism}\n    mode: {mode}\n  taskManager: {{ replicas: 2, slots: 2 }}\n  storage: {{ url: {storage:?} }}\n  configuration:\n",
        serde_json::to_string(&args).unwrap()
    );
    for (k, v) in conf {
        text.push_str(&format!("    {k}: {v:?}\n"));
    }
    let path = dir.join("job.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Every committed line of the output directory; a problem for in-progress leftovers.
fn committed(dir: &Path, problems: &mut Vec<String>) -> Vec<(String, u64)> {
    let mut lines = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        problems.push(format!("no output directory {}", dir.display()));
        return lines;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.contains("inprogress") {
            problems.push(format!("in-progress file {name} left after the job finished"));
            continue;
        }
        if !name.starts_with("part-") {
            continue;
        }
        for line in std::fs::read_to_string(entry.path()).unwrap_or_default().lines() {
            match line
                .rsplit_once('\t')
                .and_then(|(w, c)| Some((w.to_string(), c.parse().ok()?)))
            {
                Some(pair) => lines.push(pair),
                None => problems.push(format!("malformed output line {line:?} in {name}")),
            }
        }
    }
    lines
}

/// Every running count of every word, once: what a fault-free streaming run commits.
fn every_update(counts: &HashMap<String, u64>) -> Vec<(String, u64)> {
    let mut lines: Vec<(String, u64)> = counts
        .iter()
        .flat_map(|(w, &n)| (1..=n).map(move |c| (w.clone(), c)))
        .collect();
    lines.sort();
    lines
}

fn check_output(job: Job, dir: &Path, shared: &Shared, problems: &mut Vec<String>) -> bool {
    let mut got = committed(&dir.join("out"), problems);
    got.sort();
    let expected = match job {
        Job::Pipeline { .. } => every_update(&pipeline_reference(SEED, PIPELINE_RECORDS)),
        Job::WordCount => every_update(&shared.word_counts),
        Job::Batch { .. } => {
            let mut lines: Vec<(String, u64)> = pipeline_reference(SEED, BATCH_RECORDS).into_iter().collect();
            lines.sort();
            lines
        }
    };
    if got == expected {
        return true;
    }
    let dupes = got.windows(2).filter(|w| w[0] == w[1]).count();
    let missing = {
        let mut have: HashMap<&(String, u64), i64> = HashMap::new();
        for l in &got {
            *have.entry(l).or_insert(0) += 1;
        }
        expected
            .iter()
            .filter(|l| match have.get_mut(l) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    false
                }
                _ => true,
            })
            .count()
    };
    problems.push(format!(
        "output differs from the fault-free run: {} lines, expected {} ({dupes} duplicated, {missing} missing)",
        got.len(),
        expected.len()
    ));
    false
}

fn run(seed: u64, shared: &Shared) -> Report {
    let mut rng = Rng::new(seed);
    let job = Job::pick(&mut rng);
    let mut report = Report {
        seed,
        job: job.name(),
        ..Report::default()
    };
    let started = Instant::now();
    let dir = scratch(&format!("campaign-{seed}"));
    let mut conf: BTreeMap<String, String> = [
        ("restart-strategy.fixed-delay.attempts", "1000"),
        ("restart-strategy.fixed-delay.delay", "200 ms"),
        // A JobManager that was taken over looks for its successor every second.
        ("high-availability.kubernetes.leader-election.retry-period", "1 s"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    if let Job::Pipeline { rocksdb, .. } = job {
        conf.insert(
            "state.backend.type".into(),
            if rocksdb { "rocksdb" } else { "hashmap" }.into(),
        );
    }
    if matches!(job, Job::Pipeline { .. } | Job::WordCount) {
        conf.insert("execution.checkpointing.interval".into(), "500 ms".into());
        conf.insert("execution.checkpointing.num-retained".into(), "2".into());
        if rng.chance(0.2) {
            report.faults.push(Fault::CheckpointTimeout);
            conf.insert("execution.checkpointing.timeout".into(), "200 ms".into());
        }
    }
    if let Job::Batch { remote } = job {
        conf.insert(
            "execution.batch-shuffle-mode".into(),
            "ALL_EXCHANGES_BLOCKING".into(),
        );
        if remote {
            conf.insert("shuffle.remote.enabled".into(), "true".into());
        }
    }
    if let (Job::Pipeline { s3: true, .. }, Some(moto)) = (job, &shared.moto) {
        conf.extend(moto.conf());
    }
    if rng.chance(0.3) {
        report.faults.push(Fault::ObjectStore);
        conf.insert(floe_storage::faults::FAILURE_RATE_KEY.into(), "0.03".into());
        conf.insert(floe_storage::faults::AMBIGUOUS_RATE_KEY.into(), "0.5".into());
        conf.insert(floe_storage::faults::MAX_DELAY_KEY.into(), "30".into());
        conf.insert(floe_storage::faults::SEED_KEY.into(), seed.to_string());
    }
    let history = dir.join("history");
    let placement = shared.network.as_ref().map(|net| {
        net.heal();
        net.point_service(JOBMANAGER_RPC_PORT, JOBMANAGER_HOSTS[0]);
        Placement {
            jobmanager: net.host(JOBMANAGER_HOSTS[0]),
            taskmanagers: TASKMANAGER_HOSTS.iter().map(|&h| net.host(h)).collect(),
            jobmanager_service: Some(format!("{}:{JOBMANAGER_RPC_PORT}", net.service_ip())),
        }
    });
    let spec = ClusterSpec {
        exe: FLOE.into(),
        taskmanagers: 2,
        slots: 2,
        work_dir: dir.join("work"),
        heartbeat_timeout: Duration::from_secs(2),
        job_file: Some(manifest(&dir, job, shared, &conf)),
        placement,
        env: vec![(
            floe_taskmanager::history::HISTORY_DIR_ENV.to_string(),
            history.display().to_string(),
        )],
        properties: Vec::new(),
    };
    let mut jobmanager_host = 0;
    let mut taken_over = false;
    // A host cut off for the rest of the run (a node that does not come back while the job runs).
    let mut lost_host: Option<usize> = None;
    // A JobManager may exit at start (an object-store fault while it takes its leader epoch):
    // started again, as its pod would be.
    let mut started_cluster = Err(anyhow::anyhow!("not started"));
    for _ in 0..5 {
        started_cluster = LocalCluster::start(&spec);
        if started_cluster.is_ok() {
            break;
        }
        report.exits += 1;
    }
    let mut cluster = match started_cluster {
        Ok(c) => c,
        Err(e) => {
            report
                .problems
                .push(format!("the cluster did not start in 5 tries: {e:#}"));
            report.hang = true;
            return report;
        }
    };
    // The job runs (or already ended).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !job_details(&cluster).is_some_and(|j| j["state"] != "CREATED") && Instant::now() < deadline {
        pause(&mut cluster, Duration::from_millis(50), &mut report.exits);
    }
    let injected = 1 + rng.below(3);
    for _ in 0..injected {
        pause(&mut cluster, rng.millis(100, 1_500), &mut report.exits);
        let before = job_details(&cluster);
        if before.as_ref().is_some_and(|j| j["state"] != "RUNNING") {
            break; // ended: nothing left to disturb
        }
        let restarts_before = before.as_ref().and_then(|j| j["restarts"].as_u64()).unwrap_or(0);
        let t0 = Instant::now();
        let kinds = if shared.network.is_some() { 7 } else { 4 };
        let fault = match rng.below(kinds) {
            0 => Fault::KillTaskManager,
            1 => Fault::PauseTaskManager,
            2 => Fault::KillJobManager,
            3 => Fault::PauseJobManager,
            4 => Fault::PartitionTaskManagers,
            // One takeover a run: a second replacement would meet the first one's host.
            5 if !taken_over => Fault::TakeOverJobManager,
            _ => Fault::PartitionJobManager,
        };
        let tm = rng.below(2) as usize;
        let (hold, delay) = (rng.millis(300, 4_000), rng.millis(0, 1_500));
        let mut jm_restarted = false;
        match fault {
            Fault::KillTaskManager => {
                kill("-KILL", cluster.taskmanager_pids()[tm]);
                // Down for a while (a pod being rescheduled), then back under its id.
                std::thread::sleep(delay);
                // One that cannot register yet is started again by `supervise`.
                if cluster.restart_taskmanager(tm).is_err() {
                    report.exits += 1;
                }
            }
            Fault::PauseTaskManager => {
                let pid = cluster.taskmanager_pids()[tm];
                kill("-STOP", pid);
                std::thread::sleep(hold);
                kill("-CONT", pid);
            }
            Fault::KillJobManager => {
                if let Some(pid) = cluster.jobmanager_pid() {
                    kill("-KILL", pid);
                }
                std::thread::sleep(delay);
                // One that exits at start (an object-store fault) is started again by `supervise`.
                if cluster.exited().iter().any(|n| n == "jobmanager") && cluster.restart_jobmanager().is_err()
                {
                    report.exits += 1;
                }
                jm_restarted = true;
            }
            Fault::PauseJobManager => {
                if let Some(pid) = cluster.jobmanager_pid() {
                    kill("-STOP", pid);
                    std::thread::sleep(hold);
                    kill("-CONT", pid);
                }
            }
            Fault::PartitionTaskManagers | Fault::PartitionJobManager => {
                let net = shared.network.as_ref().unwrap();
                match fault {
                    Fault::PartitionTaskManagers => net.cut(TASKMANAGER_HOSTS[0], TASKMANAGER_HOSTS[1]),
                    _ => net.cut(JOBMANAGER_HOSTS[jobmanager_host], TASKMANAGER_HOSTS[tm]),
                }
                pause(&mut cluster, hold, &mut report.exits);
                net.heal();
                if let Some(host) = lost_host {
                    net.isolate(host);
                }
            }
            Fault::TakeOverJobManager => {
                let net = shared.network.as_ref().unwrap();
                let old_host = JOBMANAGER_HOSTS[jobmanager_host];
                net.isolate(old_host);
                // The old one is unreachable, not dead: after a while its replacement starts on
                // another host and the Service moves to it.
                std::thread::sleep(delay);
                jobmanager_host = 1 - jobmanager_host;
                net.point_service(JOBMANAGER_RPC_PORT, JOBMANAGER_HOSTS[jobmanager_host]);
                if cluster
                    .take_over_jobmanager(net.host(JOBMANAGER_HOSTS[jobmanager_host]))
                    .is_err()
                {
                    report.exits += 1; // started again by `supervise`
                }
                taken_over = true;
                pause(&mut cluster, hold, &mut report.exits);
                // Half the time the old host comes back while the job runs (the old JobManager
                // may then call the TaskManagers); otherwise only after the end, so nothing
                // (no reset, no answer) ever breaks the TaskManagers' connections to it.
                if rng.chance(0.5) {
                    net.heal();
                } else {
                    lost_host = Some(old_host);
                    report.faults.push(Fault::OldJobManagerHostLost);
                }
                jm_restarted = true;
            }
            Fault::ObjectStore | Fault::CheckpointTimeout | Fault::OldJobManagerHostLost => {
                unreachable!("not drawn here")
            }
        }
        report.faults.push(fault);
        // Recovery: every subtask running again after a restart the fault caused. A pause
        // shorter than the heartbeat timeout may cause none: watch until a restart would have
        // shown (the pause, the 2 s timeout and a margin), 30 s after a kill.
        let watch_until = match fault {
            Fault::PauseTaskManager
            | Fault::PauseJobManager
            | Fault::PartitionTaskManagers
            | Fault::PartitionJobManager => t0 + hold + Duration::from_secs(4),
            _ => t0 + Duration::from_secs(30),
        };
        while Instant::now() < watch_until {
            report.exits += supervise(&mut cluster);
            if let Some(j) = job_details(&cluster) {
                if matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED")) {
                    break;
                }
                let restarted = jm_restarted || j["restarts"].as_u64().unwrap_or(0) > restarts_before;
                if restarted && all_subtasks_running(&j) {
                    report.recoveries.push(t0.elapsed());
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The end.
    let end = loop {
        report.exits += supervise(&mut cluster);
        let j = job_details(&cluster);
        if let Some(j) = j.filter(|j| matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED")))
        {
            break Some(j);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    match end {
        None => {
            report.hang = true;
            let last = job_details(&cluster).map(|j| j["state"].clone());
            report
                .problems
                .push(format!("no end within 120 s (last state {last:?})"));
        }
        Some(j) if j["state"] != "FINISHED" => {
            report
                .problems
                .push(format!("job {}: {}", j["state"], j["failure-cause"]));
        }
        Some(_) => {
            report.exact = check_output(job, &dir, shared, &mut report.problems);
            // Nothing left running: within three heartbeats every TaskManager holds no execution.
            let until = Instant::now() + Duration::from_secs(4);
            loop {
                let running: Vec<String> = rest(&cluster, "/taskmanagers")
                    .map(|t| {
                        t["taskmanagers"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter(|tm| tm["executions-running"].as_u64() != Some(0))
                            .map(|tm| format!("{} runs {}", tm["id"], tm["executions-running"]))
                            .collect()
                    })
                    .unwrap_or_else(|| vec!["the JobManager does not answer".into()]);
                if running.is_empty() {
                    break;
                }
                if Instant::now() > until {
                    report
                        .problems
                        .push(format!("left running after the end: {running:?}"));
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    // The lost host comes back. A JobManager that was taken over must notice it was fenced and
    // end (it checks its leadership every heartbeat interval).
    if let (Some(net), Some(_)) = (&shared.network, lost_host) {
        net.heal();
    }
    // Within a storage call's timeout (a call stuck on a connection the partition killed) plus
    // a retry period and the retries.
    let until = Instant::now() + floe_storage::CALL_TIMEOUT + Duration::from_secs(10);
    while !cluster.old_jobmanager_pids().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    if !cluster.old_jobmanager_pids().is_empty() {
        report
            .problems
            .push("a JobManager that was taken over still runs 20 s after the end".into());
    }
    cluster.shutdown();
    report.history = check_history(&history, &mut report.problems);
    report.duration = started.elapsed();
    if report.problems.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        report
            .problems
            .push(format!("logs kept in {}", dir.join("work/logs").display()));
    }
    report
}

fn median(mut v: Vec<Duration>) -> Option<Duration> {
    v.sort();
    v.get(v.len() / 2).copied()
}

fn print_table(reports: &[Report]) {
    let mut faults: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
    for r in reports {
        for f in &r.faults {
            *faults.entry(*f).or_insert(0) += 1;
        }
        *jobs.entry(r.job.clone()).or_insert(0) += 1;
    }
    let recoveries: Vec<Duration> = reports.iter().flat_map(|r| r.recoveries.clone()).collect();
    let max = recoveries.iter().max().copied();
    println!("\nfault campaign");
    println!("  runs                       {}", reports.len());
    for (job, n) in &jobs {
        println!("    {job:<26} {n}");
    }
    println!("  faults injected            {}", faults.values().sum::<usize>());
    for (fault, n) in &faults {
        println!("    {:<26} {n}", format!("{fault:?}"));
    }
    println!(
        "  processes that exited     {}",
        reports.iter().map(|r| r.exits).sum::<usize>()
    );
    let history = reports.iter().fold(HistoryCheck::default(), |a, r| HistoryCheck {
        epoch_changes: a.epoch_changes + r.history.epoch_changes,
        refused: a.refused + r.history.refused,
        acts: a.acts + r.history.acts,
        stale_acts: a.stale_acts + r.history.stale_acts,
    });
    println!(
        "  fencing history            {} epoch changes seen by TaskManagers, {} calls of fenced JobManagers refused, {} deployments and commits delivered, {} by or to a fenced epoch",
        history.epoch_changes, history.refused, history.acts, history.stale_acts
    );
    println!(
        "  exact outputs              {} of {}",
        reports.iter().filter(|r| r.exact).count(),
        reports.len()
    );
    println!(
        "  hangs                      {}",
        reports.iter().filter(|r| r.hang).count()
    );
    println!(
        "  recovery time              median {:?}, max {:?} ({} restarts measured)",
        median(recoveries.clone()).map(|d| d.as_millis()),
        max.map(|d| d.as_millis()),
        recoveries.len()
    );
    println!(
        "  run time                   median {:?} ms",
        median(reports.iter().map(|r| r.duration).collect()).map(|d| d.as_millis())
    );
}

fn campaign() -> Result<(), Failed> {
    let runs: u64 = std::env::var("FLOE_CAMPAIGN_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("FLOE_CAMPAIGN_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let words = std::env::temp_dir().join(format!("floe-campaign-words-{}.txt", std::process::id()));
    floe::generate::write_words(&words, 12 << 20, 77).unwrap();
    let network = match Network::create(4) {
        Ok(net) => Some(net),
        Err(why) if std::env::var_os("FLOE_REQUIRE_NETNS").is_some() => {
            return Err(format!("network namespaces are required (FLOE_REQUIRE_NETNS): {why}").into());
        }
        Err(why) => {
            eprintln!("SKIPPED: network partitions (the campaign runs on loopback): {why}");
            None
        }
    };
    // The hosts reach the test process at the network's gateway address.
    let moto_host = network.as_ref().map_or("127.0.0.1".to_string(), Network::gateway);
    let shared = Shared {
        word_counts: reference_count(&words),
        words,
        moto: MotoServer::for_tests_on(
            "the fault campaign's s3:// runs (they use file://)",
            "campaign",
            &moto_host,
        ),
        network,
    };
    let mut reports = Vec::new();
    for r in 0..runs {
        let report = run(seed + r, &shared);
        let verdict = if report.problems.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "run {:>3} seed {:>4} {:<26} faults {:?}: {verdict} in {} ms",
            r,
            report.seed,
            report.job,
            report.faults,
            report.duration.as_millis()
        );
        for p in &report.problems {
            println!("    {p}");
        }
        reports.push(report);
    }
    print_table(&reports);
    let _ = std::fs::remove_file(&shared.words);
    let failed: Vec<u64> = reports
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| r.seed)
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {runs} runs failed (seeds {failed:?}); see above",
            failed.len()
        )
        .into())
    }
}

fn main() {
    let args = Arguments::from_args();
    // What the campaign needs beyond the build: `moto_server` (.ci/setup installs it) and network
    // namespaces (root). Missing, the campaign is reported ignored, never passed on a weaker run;
    // CI sets FLOE_REQUIRE_MOTO and FLOE_REQUIRE_NETNS, and the campaign then fails instead.
    let mut missing = Vec::new();
    if !MotoServer::available() && std::env::var_os("FLOE_REQUIRE_MOTO").is_none() {
        missing.push("moto_server (pip install \"moto[server]\", or .ci/setup)".to_string());
    }
    if std::env::var_os("FLOE_REQUIRE_NETNS").is_none()
        && let Err(why) = Network::create(1)
    {
        missing.push(format!("network namespaces ({why})"));
    }
    if !missing.is_empty() {
        eprintln!("SKIPPED fault_campaign: missing {}", missing.join(", "));
    }
    let trial = Trial::test("fault_campaign", campaign).with_ignored_flag(!missing.is_empty());
    libtest_mimic::run(&args, vec![trial]).exit();
}
