//! `floe jobmanager [--job-file MANIFEST]`: a JobManager that serves, and in application mode (as the
//! operator's JobManager pods run) submits the manifest's job itself. When the manifest has
//! `spec.storage`, the JobManager first takes the next leader epoch of the job's operation log under
//! `{storage.url}/{namespace}/{job-name}/`, resumes what the log knows (an ended job is not run again;
//! another uid or `metadata.generation` of the FlinkJob, as after a resume or in another `floe run`, is
//! a new deployment whose job is submitted anew), and records status changes; a JobManager fenced by a newer one exits with the reason.

use anyhow::Context;
use floe_datastream::JobArgs;
use floe_jobmanager::JobManager;
use floe_manifest::FlinkJob;
use floe_oplog::OperationLog;
use floe_storage::ObjectStore;

/// The job a manifest describes.
fn job_args(manifest: &FlinkJob) -> JobArgs {
    JobArgs {
        name: manifest.spec.job.name.clone(),
        args: manifest.spec.job.args.clone(),
        configuration: manifest.job_configuration(),
    }
}

/// Who holds an epoch, for the `leader/{epoch}` object: host and process.
fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{host}/pid-{}", std::process::id())
}

/// How often a leading JobManager checks that no newer one took over (Flink's key for its
/// Kubernetes leader election; default 5 s as there).
pub const LEADER_ELECTION_RETRY_PERIOD: &str = "high-availability.kubernetes.leader-election.retry-period";

fn leader_election_retry_period(
    conf: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<std::time::Duration> {
    match conf.get(LEADER_ELECTION_RETRY_PERIOD) {
        None => Ok(std::time::Duration::from_secs(5)),
        Some(v) => floe_jobmanager::job::parse_duration(v)
            .filter(|d| !d.is_zero())
            .with_context(|| {
                format!(
                    "spec.configuration.{LEADER_ELECTION_RETRY_PERIOD}: expected a positive duration such as \"5 s\", got {v:?}"
                )
            }),
    }
}

/// Serves until the server stops or, with an operation log, until this JobManager is fenced.
pub async fn serve(jm: JobManager, manifest: Option<FlinkJob>) -> anyhow::Result<()> {
    let Some(manifest) = manifest else {
        return Ok(jm.serve().await?);
    };
    let namespace = manifest.metadata.namespace.as_deref().unwrap_or("default");
    let Some(job_storage) = manifest.spec.job_storage_url(namespace, manifest.name()) else {
        let id = jm.submit(job_args(&manifest))?;
        tracing::info!(job = %id, "submitted the job of {}", manifest.name());
        return Ok(jm.serve().await?);
    };
    let store = ObjectStore::open(&job_storage, &manifest.job_configuration()).context("spec.storage.url")?;
    let (log, replayed) = OperationLog::acquire::<floe_jobmanager::oplog::Event>(store, &holder()).await?;
    tracing::info!(
        epoch = log.epoch(),
        events = replayed.events.len(),
        epochs = ?replayed.epochs,
        "leading the job's operation log"
    );
    let job = job_args(&manifest);
    // What defines the job is part of the deployment's identity: a rollback to the last stable
    // spec (same generation, another spec) is a deployment of its own. A scale changes none of it.
    let definition = serde_json::to_string(&(&job.name, &job.args, &job.configuration)).unwrap_or_default();
    let deployment = floe_jobmanager::oplog::Application::deployment(
        manifest.metadata.uid.as_deref(),
        manifest.metadata.generation,
        manifest
            .spec
            .configuration
            .get(floe_jobmanager::job::RECOVERY_PATH_KEY)
            .map(String::as_str),
    );
    let application = floe_jobmanager::oplog::Application {
        job,
        deployment: format!("{deployment}#{}", floe_manifest::stable_hash(&definition)),
        // Savepoint mode falls back to the last state when the operator brings no savepoint (the job
        // was not running at the upgrade), as Flink's operator does.
        last_state: matches!(
            manifest.spec.job.upgrade_mode,
            floe_manifest::UpgradeMode::LastState | floe_manifest::UpgradeMode::Savepoint
        ),
        initial_savepoint: manifest.spec.job.initial_savepoint_path.clone(),
    };
    floe_jobmanager::oplog::resume(&jm, log, &replayed.events, Some(application)).await?;
    // A fenced JobManager with nothing to append (waiting for slots, say) learns it was fenced
    // by looking: every retry period it checks that no newer leader epoch was taken.
    let retry = leader_election_retry_period(&manifest.job_configuration())?;
    let leadership = jm.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(retry);
        tick.tick().await;
        loop {
            tick.tick().await;
            if leadership.check_leadership().await {
                break;
            }
        }
    });
    let recorder = floe_jobmanager::oplog::record_status_changes(jm.clone());
    // Any refused log write (a status change, a finished execution, a completed checkpoint) stops
    // this JobManager at once: a newer one leads the job.
    let fenced = jm.clone();
    tokio::select! {
        served = jm.serve() => Ok(served?),
        fenced = recorder => Err(fenced.into()),
        why = fenced.fenced() => Err(anyhow::anyhow!(why)),
    }
}
