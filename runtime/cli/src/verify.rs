//! `floe verify -f JOB.yaml [--runs N] [--faults KINDS] [--lifecycle] [--seed S]`: a team proves
//! its own pipeline exactly-once before production. The job (a registered job with bounded input
//! whose `--output` is a directory of committed part files) runs once without disturbance on a
//! local cluster of real processes, then `N` times under a random schedule of faults and, with
//! `--lifecycle`, lifecycle operations; after each run its committed output must equal the
//! undisturbed run's, line for line as a multiset. It prints a table of runs, disturbances by
//! kind and exact outputs, and exits 0 only when every output was exact (1 otherwise, 2 for bad
//! input).
//!
//! The disturbances are those the fault and lifecycle campaigns inject into Floe's own jobs
//! (`tests/fault_campaign.rs`, `tests/lifecycle_campaign.rs`): a TaskManager killed (SIGKILL) or
//! terminated (SIGTERM) and restarted under its id, or paused (SIGSTOP, then SIGCONT); the
//! JobManager killed and restarted (it resumes the job from its operation log) or paused; and
//! with `--lifecycle` a stop with a savepoint and a new deployment from it, the same at another
//! parallelism (a rescale: keyed state is redistributed across the new subtasks), and a suspend
//! (every process killed) and a new deployment in `last-state` mode from the latest checkpoint.
//!
//! Two lifecycle operations are not drawn, because for a bounded job they change the output by
//! definition rather than by a fault: a stateless redeploy (the new run starts its input over, so
//! its output adds to the first run's) and a mid-run `stop --drain` (it fires every window and
//! timer as if input ended, so windowed results differ from an undisturbed run's). The lifecycle
//! campaign (`tests/lifecycle_campaign.rs`) covers both on Floe's own Kafka job, whose reference
//! accounts for them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use floe_manifest::{FlinkJob, RuntimeMode};

use crate::client::Client;
use crate::local_cluster::{ClusterSpec, LocalCluster};

/// Every random choice comes from it, so a seed replays a run's schedule (the campaigns in
/// `tests/` use it too).
pub use floe_datastream::rng::SplitMix as Rng;

/// A fault `--faults` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Fault {
    /// SIGKILL of a TaskManager, restarted under its id after up to 1 s.
    TmKill,
    /// SIGTERM of a TaskManager (an eviction, a scale-down), restarted under its id.
    TmTerm,
    /// SIGSTOP of a TaskManager for 0.3 to 3 s (a long GC pause, often past the heartbeat timeout).
    TmPause,
    /// SIGKILL of the JobManager, restarted on its ports: it resumes the job from its log.
    JmKill,
    /// SIGSTOP of the JobManager for 0.3 to 3 s.
    JmPause,
}

/// What a run does to the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Disturbance {
    Fault(Fault),
    /// Stop with a savepoint, then a new deployment from it.
    StopResume,
    /// Every process killed, then a new deployment in `last-state` mode.
    SuspendResume,
    /// Stop with a savepoint, then a new deployment from it at another parallelism (within the
    /// cluster's slots; a plain stop and resume where there are fewer than 2).
    Rescale,
}

impl std::fmt::Display for Disturbance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Disturbance::Fault(fault) => {
                let name = clap::ValueEnum::to_possible_value(fault).map(|v| v.get_name().to_string());
                f.write_str(&name.unwrap_or_default())
            }
            Disturbance::StopResume => f.write_str("stop-resume"),
            Disturbance::SuspendResume => f.write_str("suspend-resume"),
            Disturbance::Rescale => f.write_str("rescale"),
        }
    }
}

/// `floe verify`'s arguments.
#[derive(Debug, Clone)]
pub struct Options {
    pub runs: u32,
    pub faults: Vec<Fault>,
    pub lifecycle: bool,
    pub seed: u64,
    pub work_dir: PathBuf,
    /// How long one run may take before it counts as hung.
    pub timeout: Duration,
}

/// One run's outcome.
#[derive(Debug, Default)]
pub struct RunReport {
    pub seed: u64,
    pub disturbances: Vec<Disturbance>,
    pub exact: bool,
    pub problems: Vec<String>,
    pub duration: Duration,
}

/// What `floe verify` found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Committed lines of the undisturbed run.
    pub reference_lines: usize,
    pub runs: Vec<RunReport>,
}

impl Verdict {
    pub fn all_exact(&self) -> bool {
        self.runs.iter().all(|r| r.exact)
    }

    /// The table `floe verify` prints.
    pub fn table(&self) -> String {
        let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
        for d in self.runs.iter().flat_map(|r| &r.disturbances) {
            *by_kind.entry(d.to_string()).or_insert(0) += 1;
        }
        let mut out = String::new();
        out.push_str(&format!("runs                 {}\n", self.runs.len()));
        out.push_str(&format!(
            "disturbances         {}\n",
            by_kind.values().sum::<usize>()
        ));
        for (kind, n) in &by_kind {
            out.push_str(&format!("  {kind:<18} {n}\n"));
        }
        let exact = self.runs.iter().filter(|r| r.exact).count();
        out.push_str(&format!(
            "exact outputs        {exact} of {} ({} committed lines each)\n",
            self.runs.len(),
            self.reference_lines
        ));
        out.push_str(&format!("wrong outputs        {}\n", self.runs.len() - exact));
        out
    }
}

/// Refuses what `floe verify` cannot check, naming the field: output that is not a local
/// directory, and lifecycle operations on a job without checkpoints.
pub fn check_job(job: &FlinkJob, options: &Options) -> anyhow::Result<()> {
    let Some(out) = crate::run_cmd::output_location(job) else {
        bail!(
            "spec.job.args: floe verify compares the committed files of the job's --output directory, \
             and job {} has no --output argument",
            job.spec.job.name
        );
    };
    if out.contains("://") && !out.starts_with("file://") {
        bail!(
            "spec.job.args --output: floe verify reads the committed output from a local directory, got {out:?}"
        );
    }
    if options.lifecycle {
        if job.spec.job.mode != RuntimeMode::Streaming {
            bail!("--lifecycle: stops with savepoints and last-state resumes need spec.job.mode: streaming");
        }
        if !job
            .spec
            .configuration
            .contains_key("execution.checkpointing.interval")
        {
            bail!(
                "--lifecycle: spec.configuration has no execution.checkpointing.interval; savepoints and \
                 last-state resumes need checkpoints"
            );
        }
    }
    if options.runs == 0 {
        bail!("--runs: expected 1 or more");
    }
    Ok(())
}

/// Committed lines of the part files in `dir`, sorted; a problem for an in-progress file.
pub fn committed_lines(dir: &Path, problems: &mut Vec<String>) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.contains("inprogress") {
            problems.push(format!("in-progress file {name} left after the job finished"));
        } else if name.starts_with("part-") {
            match std::fs::read_to_string(entry.path()) {
                Ok(text) => lines.extend(text.lines().map(str::to_string)),
                Err(e) => problems.push(format!("cannot read {}: {e}", entry.path().display())),
            }
        }
    }
    lines.sort();
    lines
}

/// Whether `got` equals `expected` (both sorted); a problem saying how not.
pub fn compare_lines(got: &[String], expected: &[String], problems: &mut Vec<String>) -> bool {
    if got == expected {
        return true;
    }
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for l in expected {
        *counts.entry(l).or_insert(0) += 1;
    }
    for l in got {
        *counts.entry(l).or_insert(0) -= 1;
    }
    let missing: i64 = counts.values().filter(|n| **n > 0).sum();
    let extra: i64 = -counts.values().filter(|n| **n < 0).sum::<i64>();
    let example = counts.iter().find(|(_, n)| **n != 0).map(|(l, n)| {
        if *n > 0 {
            format!("{l:?} missing {n} time(s)")
        } else {
            format!("{l:?} {} time(s) too often", -n)
        }
    });
    problems.push(format!(
        "committed output differs from the undisturbed run: {} lines, expected {} ({extra} extra, {missing} missing; e.g. {})",
        got.len(),
        expected.len(),
        example.unwrap_or_default()
    ));
    false
}

/// One run of the job on its own local cluster: its deployments, its job and what exited.
struct Run<'a> {
    job: &'a FlinkJob,
    dir: PathBuf,
    uid: String,
    generation: i64,
    cluster: Option<LocalCluster>,
    client: Option<Client>,
    job_id: Option<String>,
    known: Vec<String>,
    /// The parallelism a rescale deployed (`None`: the manifest's).
    parallelism: Option<u32>,
}

const TERMINAL: [&str; 3] = ["FINISHED", "FAILED", "CANCELED"];

fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

impl Run<'_> {
    /// The manifest of this run's current deployment: output, storage and savepoints in the
    /// run's directory, a uid of its own, the generation counting deployments.
    fn manifest(
        &self,
        upgrade_mode: floe_manifest::UpgradeMode,
        savepoint: Option<&str>,
    ) -> anyhow::Result<PathBuf> {
        let mut job = self.job.clone();
        let args = &mut job.spec.job.args;
        if let Some(i) = args.iter().position(|a| a == "--output") {
            args[i + 1] = self.dir.join("out").display().to_string();
        }
        job.spec.storage = Some(floe_manifest::StorageSpec {
            url: format!("file://{}", self.dir.join("storage").display()),
            credentials_secret: None,
            persistent_volume_claim: None,
        });
        job.metadata.uid = Some(self.uid.clone());
        job.metadata.generation = Some(self.generation);
        job.spec.job.upgrade_mode = upgrade_mode;
        if let Some(p) = self.parallelism {
            job.spec.job.parallelism = floe_manifest::Parallelism::Fixed(p);
        }
        job.status = None;
        let conf = &mut job.spec.configuration;
        conf.insert(
            "state.savepoints.dir".into(),
            format!("file://{}", self.dir.join("savepoints").display()),
        );
        conf.remove(floe_jobmanager::job::RECOVERY_PATH_KEY);
        if let Some(s) = savepoint {
            conf.insert(floe_jobmanager::job::RECOVERY_PATH_KEY.into(), s.to_string());
        }
        let path = self.dir.join(format!("flinkjob-{}.yaml", self.generation));
        std::fs::write(&path, serde_yaml::to_string(&job)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    fn deploy(
        &mut self,
        upgrade_mode: floe_manifest::UpgradeMode,
        savepoint: Option<&str>,
    ) -> anyhow::Result<()> {
        if let Some(mut old) = self.cluster.take() {
            old.shutdown();
        }
        let spec = ClusterSpec {
            exe: std::env::current_exe().context("cannot find the floe binary")?,
            taskmanagers: self.job.spec.task_manager.replicas,
            slots: self.job.spec.task_manager.slots,
            work_dir: self.dir.join(format!("work-{}", self.generation)),
            heartbeat_timeout: Duration::from_secs(2),
            job_file: Some(self.manifest(upgrade_mode, savepoint)?),
            placement: None,
            env: Vec::new(),
            properties: Vec::new(),
        };
        let cluster = LocalCluster::start(&spec)?;
        self.client = Some(Client::new(&cluster.rest_address)?);
        self.cluster = Some(cluster);
        self.job_id = None;
        Ok(())
    }

    fn cluster(&mut self) -> &mut LocalCluster {
        self.cluster.as_mut().expect("deployed")
    }

    /// Restarts what exited on its own, as a supervisor would (one that fails is tried again
    /// at the next call).
    fn supervise(&mut self) {
        let _ = self.cluster().restart_exited();
    }

    fn pause(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.supervise();
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The current deployment's job and its state (`None` while the JobManager does not answer).
    fn state(&mut self) -> Option<String> {
        let client = self.client.clone()?;
        if self.job_id.is_none() {
            let list = client.get("/jobs").ok()?;
            let ids: Vec<String> = list["jobs"]
                .as_array()?
                .iter()
                .filter_map(|j| j["id"].as_str().map(str::to_string))
                .collect();
            let new = ids.iter().find(|id| !self.known.contains(id))?.clone();
            self.known.extend(ids);
            self.job_id = Some(new);
        }
        let id = self.job_id.clone()?;
        let details = client.get(&format!("/jobs/{id}")).ok()?;
        details["state"].as_str().map(str::to_string)
    }

    fn ended(&mut self) -> bool {
        self.state().is_some_and(|s| TERMINAL.contains(&s.as_str()))
    }

    /// Stops the job with a savepoint; `None` when it ended first (nothing to resume).
    fn stop(&mut self) -> anyhow::Result<Option<String>> {
        for _ in 0..5 {
            if self.ended() {
                return Ok(None);
            }
            let (client, id) = (self.client.clone().context("deployed")?, self.job_id.clone());
            let Some(id) = id else {
                self.pause(Duration::from_millis(200));
                continue;
            };
            match client.savepoint_location(&id, None, Some(false)) {
                Ok((_, location)) if !location.is_empty() => {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while !self.ended() && Instant::now() < deadline {
                        self.pause(Duration::from_millis(100));
                    }
                    return Ok(Some(location));
                }
                // Refused (the job is restarting, a checkpoint declined): tried again.
                _ => self.pause(Duration::from_millis(500)),
            }
        }
        bail!("the stop with a savepoint failed 5 times")
    }

    /// Another parallelism than the current one, in 1..=every slot of the cluster (`None`, the
    /// current one kept, when there are fewer than 2 slots).
    fn rescaled(&self, rng: &mut Rng) -> Option<u32> {
        let tm = &self.job.spec.task_manager;
        let slots = tm.replicas.max(1) * tm.slots.max(1);
        let current = self.parallelism.or(match self.job.spec.job.parallelism {
            floe_manifest::Parallelism::Fixed(p) => Some(p),
            floe_manifest::Parallelism::Auto => None,
        });
        if slots < 2 {
            return self.parallelism;
        }
        loop {
            let p = 1 + rng.below(u64::from(slots)) as u32;
            if Some(p) != current {
                return Some(p);
            }
        }
    }

    fn disturb(&mut self, d: Disturbance, rng: &mut Rng) -> anyhow::Result<()> {
        let tms = self.cluster().taskmanager_pids();
        // None while every TaskManager is down (restarted by `supervise`): a TaskManager fault
        // then has nothing to hit.
        let pick = rng.below(tms.len().max(1) as u64) as usize;
        let tm = tms.get(pick).copied();
        let (delay, hold) = (rng.millis(0, 1_000), rng.millis(300, 3_000));
        match d {
            Disturbance::Fault(f @ (Fault::TmKill | Fault::TmTerm)) => {
                if let Some(tm) = tm {
                    signal(tm, if f == Fault::TmKill { "-KILL" } else { "-TERM" });
                }
            }
            Disturbance::Fault(Fault::JmKill) => {
                if let Some(pid) = self.cluster().jobmanager_pid() {
                    signal(pid, "-KILL");
                }
            }
            Disturbance::Fault(f @ (Fault::TmPause | Fault::JmPause)) => {
                let pid = if f == Fault::TmPause {
                    tm
                } else {
                    self.cluster().jobmanager_pid()
                };
                if let Some(pid) = pid {
                    signal(pid, "-STOP");
                    std::thread::sleep(hold);
                    signal(pid, "-CONT");
                }
            }
            Disturbance::StopResume | Disturbance::Rescale => {
                if d == Disturbance::Rescale {
                    self.parallelism = self.rescaled(rng);
                }
                if let Some(savepoint) = self.stop()? {
                    self.generation += 1;
                    self.deploy(floe_manifest::UpgradeMode::Savepoint, Some(&savepoint))?;
                }
            }
            Disturbance::SuspendResume => {
                if !self.ended() {
                    self.cluster().shutdown();
                    self.generation += 1;
                    self.deploy(floe_manifest::UpgradeMode::LastState, None)?;
                }
            }
        }
        // A killed process is down for a while (a pod restarting), then back.
        std::thread::sleep(delay);
        self.supervise();
        Ok(())
    }
}

/// One run: deployed, disturbed as `rng` draws, waited for; its output compared with `expected`
/// (`None`: the undisturbed reference run, whose output is returned).
fn run_once(
    job: &FlinkJob,
    dir: &Path,
    kinds: &[Disturbance],
    rng: &mut Rng,
    timeout: Duration,
    report: &mut RunReport,
) -> anyhow::Result<Vec<String>> {
    let started = Instant::now();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut run = Run {
        job,
        dir: std::path::absolute(dir)?,
        uid: format!("floe-verify-{}-{nanos}", std::process::id()),
        generation: 1,
        cluster: None,
        client: None,
        job_id: None,
        known: Vec::new(),
        parallelism: None,
    };
    run.deploy(job.spec.job.upgrade_mode, None)?;
    let planned = if kinds.is_empty() { 0 } else { 1 + rng.below(3) };
    for _ in 0..planned {
        run.pause(rng.millis(200, 1_500));
        if run.ended() {
            break;
        }
        let d = kinds[rng.below(kinds.len() as u64) as usize];
        report.disturbances.push(d);
        run.disturb(d, rng)?;
    }
    let end = loop {
        run.supervise();
        if let Some(s) = run.state().filter(|s| TERMINAL.contains(&s.as_str())) {
            break s;
        }
        if started.elapsed() > timeout {
            bail!(
                "the job did not end within {} s (logs in {})",
                timeout.as_secs(),
                run.dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if let Some(mut c) = run.cluster.take() {
        c.shutdown();
    }
    if end != "FINISHED" {
        bail!("the job ended {end} (logs in {})", run.dir.display());
    }
    Ok(committed_lines(&run.dir.join("out"), &mut report.problems))
}

/// Runs the job undisturbed, then `options.runs` times disturbed; prints a line per run as it
/// ends. An error only when the undisturbed run fails (nothing to compare with).
pub fn verify(job: &FlinkJob, options: &Options) -> anyhow::Result<Verdict> {
    check_job(job, options)?;
    let mut kinds: Vec<Disturbance> = options.faults.iter().copied().map(Disturbance::Fault).collect();
    if options.lifecycle {
        kinds.extend([
            Disturbance::StopResume,
            Disturbance::SuspendResume,
            Disturbance::Rescale,
        ]);
    }
    let mut reference = RunReport::default();
    let started = Instant::now();
    let expected = run_once(
        job,
        &options.work_dir.join("reference"),
        &[],
        &mut Rng::new(options.seed),
        options.timeout,
        &mut reference,
    )
    .context("the undisturbed run")?;
    if !reference.problems.is_empty() {
        bail!("the undisturbed run: {}", reference.problems.join("; "));
    }
    eprintln!(
        "undisturbed run: {} committed lines in {:.1} s",
        expected.len(),
        started.elapsed().as_secs_f64()
    );
    let mut verdict = Verdict {
        reference_lines: expected.len(),
        runs: Vec::new(),
    };
    for i in 0..options.runs {
        let seed = options.seed + 1 + u64::from(i);
        let mut report = RunReport {
            seed,
            ..RunReport::default()
        };
        let started = Instant::now();
        let dir = options.work_dir.join(format!("run-{seed}"));
        match run_once(
            job,
            &dir,
            &kinds,
            &mut Rng::new(seed),
            options.timeout,
            &mut report,
        ) {
            Ok(got) => {
                report.exact =
                    report.problems.is_empty() && compare_lines(&got, &expected, &mut report.problems)
            }
            Err(e) => report.problems.push(format!("{e:#}")),
        }
        report.duration = started.elapsed();
        let names: Vec<String> = report.disturbances.iter().map(ToString::to_string).collect();
        eprintln!(
            "run {} seed {seed} [{}]: {} in {:.1} s",
            i + 1,
            names.join(", "),
            if report.exact { "exact" } else { "WRONG" },
            report.duration.as_secs_f64()
        );
        for p in &report.problems {
            eprintln!("    {p}");
        }
        if report.exact {
            let _ = std::fs::remove_dir_all(&dir);
        }
        verdict.runs.push(report);
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_compared_as_multisets_and_differences_named() {
        let lines = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
        let mut problems = Vec::new();
        assert!(compare_lines(
            &lines(&["a", "b"]),
            &lines(&["a", "b"]),
            &mut problems
        ));
        assert!(!compare_lines(
            &lines(&["a", "a", "b"]),
            &lines(&["a", "b", "c"]),
            &mut problems
        ));
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("3 lines, expected 3 (1 extra, 1 missing"),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn a_seed_replays_its_schedule() {
        let draw = |seed| {
            let mut r = Rng::new(seed);
            (0..5).map(|_| r.below(100)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
