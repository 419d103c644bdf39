//! `floe run -f MANIFEST`: a local cluster, the job submitted to it, a progress line while it runs, the
//! final status, and the exit code (0 only for FINISHED).

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use floe_manifest::FlinkJob;
use floe_proto::v1::job_manager_client::JobManagerClient;
use floe_proto::v1::{GetJobStatusRequest, JobStatusResponse};

use crate::local_cluster::{ClusterSpec, LocalCluster};

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    pub status: String,
    pub failure: String,
    /// With `keep_ui`: the local cluster, still serving the web UI; dropping it stops it.
    pub kept: Option<LocalCluster>,
}

/// Reads and validates a manifest file.
pub fn load_manifest(path: &Path) -> anyhow::Result<FlinkJob> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    FlinkJob::from_yaml(&text).with_context(|| path.display().to_string())
}

/// Where the job writes, from its `--output` argument.
pub fn output_location(job: &FlinkJob) -> Option<&str> {
    let args = &job.spec.job.args;
    args.iter()
        .position(|a| a == "--output")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn human(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=9_999_999 => format!("{:.1}K", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

fn progress_line(s: &JobStatusResponse, elapsed: Duration) -> String {
    const WIDTH: usize = 24;
    let total = s.tasks_total.max(1) as usize;
    let done = (s.tasks_finished as usize * WIDTH) / total;
    format!(
        "[{}{}] {}/{} tasks  {} records  {:.1}s  {}",
        "#".repeat(done),
        ".".repeat(WIDTH - done),
        s.tasks_finished,
        s.tasks_total,
        human(s.records_processed),
        elapsed.as_secs_f64(),
        s.status
    )
}

/// The manifest the local JobManager runs in application mode: job storage in the work directory
/// (the manifest's `spec.storage` is the cluster's; a laptop keeps its own), and a uid naming this run,
/// so a JobManager restarted during the run resumes this run's job and a new `floe run` starts anew.
fn local_manifest(job: &FlinkJob, work_dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let work_dir = std::path::absolute(work_dir).context("work directory")?;
    let storage = work_dir.join("storage");
    std::fs::create_dir_all(&storage).with_context(|| format!("cannot create {}", storage.display()))?;
    let mut local = job.clone();
    local.spec.storage = Some(floe_manifest::StorageSpec {
        url: format!("file://{}", storage.display()),
        credentials_secret: None,
        persistent_volume_claim: None,
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    local.metadata.uid = Some(format!("floe-run-{}-{nanos}", std::process::id()));
    local.status = None;
    let path = work_dir.join("flinkjob.yaml");
    std::fs::write(&path, serde_yaml::to_string(&local)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Refuses, before any process starts, a job the JobManager would refuse (its graph, its
/// configuration) or that the cluster `floe run` would start cannot hold (with `floe plan`'s
/// message, at once rather than after the JobManager's `slot.request.timeout`).
pub fn preflight(job: &FlinkJob, registry: &floe_datastream::JobRegistry) -> anyhow::Result<()> {
    let planned = crate::plan_cmd::manifest_job(job, registry, None)?;
    floe_jobmanager::job::validate_configuration(&planned.configuration)?;
    for finding in floe_config::check(job.spec.configuration.keys().map(String::as_str)) {
        eprintln!("warning: spec.configuration: {finding}");
    }
    if let Err(e) = floe_scheduler::Plan::new(planned.graph, Some(&planned.offer)) {
        let tm = &job.spec.task_manager;
        anyhow::bail!(
            "{e} (spec.taskManager: {} TaskManager(s) x {} slots): raise spec.taskManager.replicas or \
             spec.taskManager.slots, or lower the job's parallelism",
            tm.replicas,
            tm.slots
        );
    }
    Ok(())
}

/// How many times `floe run` restarts a JobManager that died, as a Deployment would.
const JOBMANAGER_RESTARTS: u32 = 3;

/// How long `floe run` keeps the cluster up after the job ended for savepoint outcomes no client
/// has fetched yet: a `floe stop` ends the job as its savepoint completes, and polls for that
/// outcome (every 200 ms) at the JobManager this process would otherwise stop at once.
const SAVEPOINT_OUTCOME_GRACE: Duration = Duration::from_secs(5);
/// Once the outcomes were fetched: time for the answer to reach the client before the
/// JobManager goes (it counts as fetched when the answer is made, not when it arrives).
const ANSWER_DELIVERY: Duration = Duration::from_millis(500);

/// Waits (at most [`SAVEPOINT_OUTCOME_GRACE`]) until no savepoint outcome of the ended job `last`
/// describes is left unfetched, so the client of a stop with a savepoint learns it.
async fn await_savepoint_outcomes(
    client: &mut JobManagerClient<tonic::transport::Channel>,
    last: &JobStatusResponse,
) {
    if last.savepoint_results_unfetched == 0 {
        return;
    }
    let deadline = Instant::now() + SAVEPOINT_OUTCOME_GRACE;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let request = GetJobStatusRequest {
            job_id: last.job_id.clone(),
        };
        match client.get_job_status(request).await {
            Ok(s) if s.get_ref().savepoint_results_unfetched > 0 => {}
            Ok(_) => {
                tokio::time::sleep(ANSWER_DELIVERY).await;
                return;
            }
            Err(_) => return,
        }
    }
}

/// Runs a manifest on a fresh local cluster and returns how the job ended. The JobManager runs the
/// job in application mode with an operation log in the work directory; if it dies, it is started
/// again on the same ports and resumes the job from the log.
///
/// The JobManager's web UI is at the URL printed first; with `keep_ui` the cluster is handed back
/// still up after the job ended, for a look at it (the caller waits for Ctrl-C).
pub async fn run(job: &FlinkJob, work_dir: &Path, keep_ui: bool) -> anyhow::Result<RunOutcome> {
    floe_proto::tls::install(&job.spec.configuration)?;
    let spec = ClusterSpec {
        exe: std::env::current_exe().context("cannot find the floe binary")?,
        taskmanagers: job.spec.task_manager.replicas,
        slots: job.spec.task_manager.slots,
        work_dir: work_dir.to_path_buf(),
        heartbeat_timeout: floe_jobmanager::job::duration_setting(
            &job.spec.configuration,
            "heartbeat.timeout",
        )?
        .unwrap_or(Duration::from_secs(10)),
        job_file: Some(local_manifest(job, work_dir)?),
        placement: None,
        env: Vec::new(),
        properties: floe_config::process_properties(&job.spec.configuration),
    };
    let started = Instant::now();
    let mut cluster = tokio::task::spawn_blocking(move || LocalCluster::start(&spec)).await??;
    eprintln!(
        "Local cluster: JobManager rpc {}, {} TaskManager(s) x {} slots (logs: {})",
        cluster.rpc_address,
        job.spec.task_manager.replicas,
        job.spec.task_manager.slots,
        cluster.log_dir.display()
    );
    let ui = format!("http://{}/", cluster.rest_address);
    eprintln!("Web UI: {ui} (REST API and /metrics on the same port)");
    // Over the job's internal TLS, when its configuration asks for it, as the processes talk.
    let endpoint = floe_proto::channel::endpoint(
        &cluster.rpc_address,
        Duration::from_secs(5),
        floe_proto::channel::CONTROL_KEEP_ALIVE,
    )
    .context("the local JobManager's address")?;
    let mut client = JobManagerClient::new(
        endpoint
            .connect()
            .await
            .context("cannot reach the local JobManager")?,
    );
    let tty = std::io::stderr().is_terminal();
    let mut last_print = Instant::now() - Duration::from_secs(60);
    let mut job_id = String::new();
    let mut restarts = 0;
    let status = loop {
        let s = match client
            .get_job_status(GetJobStatusRequest {
                job_id: job_id.clone(),
            })
            .await
        {
            Ok(s) => s.into_inner(),
            Err(status) => {
                let Some(exit) = cluster.jobmanager_exited() else {
                    // Alive but not answering yet (starting): ask again.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if restarts == JOBMANAGER_RESTARTS {
                    anyhow::bail!(
                        "the JobManager died {} times ({exit}); last answer: {}; logs in {}",
                        restarts + 1,
                        status.message(),
                        cluster.log_dir.display()
                    );
                }
                restarts += 1;
                eprintln!(
                    "\nJobManager {exit}; starting it again on the same ports (it resumes the job from its log)"
                );
                tokio::task::block_in_place(|| cluster.restart_jobmanager())?;
                client = JobManagerClient::new(
                    endpoint
                        .connect()
                        .await
                        .context("cannot reach the restarted JobManager")?,
                );
                continue;
            }
        };
        if job_id.is_empty() {
            job_id = s.job_id.clone();
            eprintln!("Submitted job {} ({job_id})", job.spec.job.name);
        }
        let terminal = matches!(s.status.as_str(), "FINISHED" | "FAILED" | "CANCELED");
        // On a terminal a line redrawn in place; in a log one line every few seconds.
        if tty {
            eprint!("\r{}\x1b[K", progress_line(&s, started.elapsed()));
            let _ = std::io::stderr().flush();
        } else if terminal || last_print.elapsed() > Duration::from_secs(5) {
            eprintln!("{}", progress_line(&s, started.elapsed()));
            last_print = Instant::now();
        }
        if terminal {
            if tty {
                eprintln!();
            }
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "Job {} ({}) {} in {:.2}s: {}/{} tasks, {} records",
        job.spec.job.name,
        job_id,
        status.status,
        started.elapsed().as_secs_f64(),
        status.tasks_finished,
        status.tasks_total,
        status.records_processed
    );
    if !status.failure.is_empty() {
        println!("Cause: {}", status.failure);
    }
    println!(
        "Peak memory: {:.1} MiB (JobManager and TaskManagers, resident)",
        status.cluster_peak_rss_bytes as f64 / 1048576.0
    );
    if let Some(out) = output_location(job).filter(|_| status.status == "FINISHED") {
        println!("Output: {out}");
    }
    // Stdout is read by scripts waiting for the summary above: hand it over now.
    let _ = std::io::stdout().flush();
    let kept = if keep_ui {
        eprintln!("Web UI still at {ui} (--keep-ui); Ctrl-C stops the local cluster");
        Some(cluster)
    } else {
        await_savepoint_outcomes(&mut client, &status).await;
        drop(cluster);
        None
    };
    Ok(RunOutcome {
        status: status.status,
        failure: status.failure,
        kept,
    })
}
