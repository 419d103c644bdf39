//! What the JobManager writes to its operation log (`floe-oplog`), and how a new JobManager resumes
//! from it. Today's vocabulary is job-level: a job submitted (with everything needed to build it
//! again) and its status changes. A job the log shows ended is restored as ended and never run again;
//! one that had not ended is submitted again under its id. The JobManager compacts the log as it
//! appends ([`COMPACT_EVERY`]): a snapshot ([`compact`]) stands for everything before it.

use std::collections::BTreeMap;
use std::time::Duration;

use floe_datastream::JobArgs;
use floe_oplog::OperationLog;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job::FinishedExecution;
use crate::server::{EndedJob, JobManager, now_ms};

/// One logged event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    JobSubmitted {
        job_id: String,
        name: String,
        args: Vec<String>,
        configuration: BTreeMap<String, String>,
        /// The deployment it was submitted for: the FlinkJob's uid and generation (see
        /// [`Application::deployment`]).
        #[serde(default)]
        deployment: String,
        time_ms: u64,
    },
    JobStatusChanged {
        job_id: String,
        status: String,
        failure: Option<String>,
        time_ms: u64,
    },
    /// An execution finished, with the bytes per subpartition of each partition it produced (remote
    /// partitions: their data is in the job storage).
    ExecutionFinished {
        job_id: String,
        vertex: u32,
        subtask: u32,
        attempt: u64,
        produced: Vec<Vec<u64>>,
        time_ms: u64,
    },
    /// A vertex of a submitted job was initialized with this parallelism. A JobManager that takes
    /// over compares it with the graph it builds: finished executions of a changed graph are not
    /// reused.
    VertexInitialized {
        job_id: String,
        vertex: u32,
        id: String,
        parallelism: u32,
        time_ms: u64,
    },
    /// The adaptive batch scheduler decided a vertex's parallelism (logged before it takes effect).
    ParallelismDecided {
        job_id: String,
        decision: crate::job::VertexDecision,
    },
    /// A checkpoint's metadata was written (`checkpoints/{job}/chk-{n}/_metadata`) and the
    /// checkpoint is complete: a restarted JobManager resumes the job from the newest readable
    /// one the log records, never from metadata the log does not record.
    CheckpointCompleted {
        job_id: String,
        checkpoint: u64,
        time_ms: u64,
    },
}

/// A job as the log tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedJob {
    pub id: String,
    pub args: JobArgs,
    pub deployment: String,
    /// Executions that finished, latest report per execution.
    pub finished: Vec<FinishedExecution>,
    pub status: Option<String>,
    pub failure: Option<String>,
    pub submitted_ms: u64,
    pub changed_ms: u64,
    /// The latest checkpoint the log saw complete.
    pub checkpoint: Option<u64>,
    /// Every checkpoint the log saw complete, in log order: the only ones a restore may use.
    pub checkpoints: Vec<u64>,
    /// (vertex id, parallelism) by vertex index, as initialized.
    pub vertices: BTreeMap<u32, (String, u32)>,
    /// Parallelism decided at run time, in log order.
    pub decisions: Vec<crate::job::VertexDecision>,
}

impl LoggedJob {
    pub fn has_ended(&self) -> bool {
        matches!(self.status.as_deref(), Some("FINISHED" | "FAILED" | "CANCELED"))
    }
}

/// Folds events into jobs, in submission order.
pub fn jobs_of(events: &[Event]) -> Vec<LoggedJob> {
    let mut jobs: Vec<LoggedJob> = Vec::new();
    for e in events {
        match e {
            Event::JobSubmitted {
                job_id,
                name,
                args,
                configuration,
                deployment,
                time_ms,
            } => jobs.push(LoggedJob {
                id: job_id.clone(),
                deployment: deployment.clone(),
                finished: Vec::new(),
                args: JobArgs {
                    name: name.clone(),
                    args: args.clone(),
                    configuration: configuration.clone(),
                },
                status: None,
                failure: None,
                submitted_ms: *time_ms,
                changed_ms: *time_ms,
                checkpoint: None,
                checkpoints: Vec::new(),
                vertices: BTreeMap::new(),
                decisions: Vec::new(),
            }),
            Event::JobStatusChanged {
                job_id,
                status,
                failure,
                time_ms,
            } => {
                if let Some(j) = jobs.iter_mut().find(|j| &j.id == job_id) {
                    j.status = Some(status.clone());
                    j.failure = failure.clone();
                    j.changed_ms = *time_ms;
                }
            }
            Event::ExecutionFinished {
                job_id,
                vertex,
                subtask,
                attempt,
                produced,
                ..
            } => {
                if let Some(j) = jobs.iter_mut().find(|j| &j.id == job_id) {
                    j.finished
                        .retain(|f| (f.vertex, f.subtask) != (*vertex, *subtask));
                    j.finished.push(FinishedExecution {
                        vertex: *vertex,
                        subtask: *subtask,
                        attempt: *attempt,
                        produced: produced.clone(),
                    });
                }
            }
            Event::VertexInitialized {
                job_id,
                vertex,
                id,
                parallelism,
                ..
            } => {
                if let Some(j) = jobs.iter_mut().find(|j| &j.id == job_id) {
                    j.vertices.insert(*vertex, (id.clone(), *parallelism));
                }
            }
            Event::ParallelismDecided { job_id, decision } => {
                if let Some(j) = jobs.iter_mut().find(|j| &j.id == job_id) {
                    j.decisions.push(decision.clone());
                }
            }
            Event::CheckpointCompleted {
                job_id, checkpoint, ..
            } => {
                if let Some(j) = jobs.iter_mut().find(|j| &j.id == job_id) {
                    j.checkpoint = Some(*checkpoint);
                    j.checkpoints.push(*checkpoint);
                }
            }
        }
    }
    jobs
}

/// A JobManager compacts its operation log once this many entries follow the last snapshot: a
/// takeover reads at most about this many entries after the snapshot, whatever the job's age.
pub const COMPACT_EVERY: u64 = 1000;

/// A snapshot keeps at least this many of each job's latest completed checkpoints (and at least
/// `execution.checkpointing.num-retained`): older ones were subsumed and deleted, no restore can use
/// them.
pub const KEPT_CHECKPOINTS: usize = 16;

impl Event {
    fn job_id(&self) -> &str {
        match self {
            Event::JobSubmitted { job_id, .. }
            | Event::JobStatusChanged { job_id, .. }
            | Event::ExecutionFinished { job_id, .. }
            | Event::VertexInitialized { job_id, .. }
            | Event::ParallelismDecided { job_id, .. }
            | Event::CheckpointCompleted { job_id, .. } => job_id,
        }
    }
}

/// How many of a job's latest checkpoints a snapshot keeps.
pub fn kept_checkpoints(configuration: &BTreeMap<String, String>) -> usize {
    let retained = configuration
        .get("execution.checkpointing.num-retained")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(1);
    retained.max(KEPT_CHECKPOINTS)
}

/// What a snapshot of the operation log holds in place of `events`: the events [`jobs_of`] folds into
/// the same jobs, in their order (a subsequence, each event as logged). Dropped: events no job takes
/// (before their job's submission), each status change but a job's last, each report of an
/// execution or initialization of a vertex a later one replaces, and all but the latest
/// [`kept_checkpoints`] completed checkpoints of a job, except its highest one (the job's lineage
/// continues checkpoint ids above it: [`lineage_checkpoint_floor`]). So `jobs_of(compact(events))`
/// is `jobs_of(events)` but for each job's `checkpoints`, bounded so; and compacting a snapshot and
/// the events after it is compacting the whole.
pub fn compact(events: &[Event]) -> Vec<Event> {
    // Forward: which events a job takes (its submission came first; a second submission under the
    // same id makes a job no later event reaches: jobs_of applies events to the first), each job's
    // checkpoint bound, and where its highest checkpoint (the last logged of that id) is.
    let mut bound: BTreeMap<&str, usize> = BTreeMap::new();
    let mut highest: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
    let mut taken = vec![false; events.len()];
    for (i, e) in events.iter().enumerate() {
        if let Event::JobSubmitted {
            job_id,
            configuration,
            ..
        } = e
        {
            bound
                .entry(job_id.as_str())
                .or_insert_with(|| kept_checkpoints(configuration));
            taken[i] = true;
            continue;
        }
        taken[i] = bound.contains_key(e.job_id());
        if let (
            true,
            Event::CheckpointCompleted {
                job_id, checkpoint, ..
            },
        ) = (taken[i], e)
        {
            let h = highest.entry(job_id.as_str()).or_insert((*checkpoint, i));
            if *checkpoint >= h.0 {
                *h = (*checkpoint, i);
            }
        }
    }
    // Backward: the last event of each kind that a later one does not replace.
    let mut status: std::collections::BTreeSet<&str> = Default::default();
    let mut finished: std::collections::BTreeSet<(&str, u32, u32)> = Default::default();
    let mut vertices: std::collections::BTreeSet<(&str, u32)> = Default::default();
    let mut checkpoints: BTreeMap<&str, usize> = BTreeMap::new();
    let mut keep = vec![false; events.len()];
    for (i, e) in events.iter().enumerate().rev() {
        if !taken[i] {
            continue;
        }
        keep[i] = match e {
            Event::JobSubmitted { .. } | Event::ParallelismDecided { .. } => true,
            Event::JobStatusChanged { job_id, .. } => status.insert(job_id.as_str()),
            Event::ExecutionFinished {
                job_id,
                vertex,
                subtask,
                ..
            } => finished.insert((job_id.as_str(), *vertex, *subtask)),
            Event::VertexInitialized { job_id, vertex, .. } => vertices.insert((job_id.as_str(), *vertex)),
            Event::CheckpointCompleted { job_id, .. } => {
                let kept = checkpoints.entry(job_id.as_str()).or_insert(0);
                *kept += 1;
                *kept <= bound.get(job_id.as_str()).copied().unwrap_or(KEPT_CHECKPOINTS)
            }
        };
    }
    for (_, at) in highest.values() {
        keep[*at] = true;
    }
    events
        .iter()
        .zip(keep)
        .filter(|(_, keep)| *keep)
        .map(|(e, _)| e.clone())
        .collect()
}

/// The FlinkJob uid a deployment (`{uid}/{generation}...`) belongs to; `None` for a job submitted
/// without one.
fn uid_of(deployment: &str) -> Option<&str> {
    deployment
        .split_once('/')
        .map(|(u, _)| u)
        .filter(|u| !u.is_empty())
}

/// The highest checkpoint id any job of the lineage of `deployment` (the jobs of its FlinkJob uid)
/// other than `except` completed, as the log tells; 0 without one. A job continues its checkpoint
/// ids above it: ids never repeat across the redeploys, upgrades and savepoint restores of one
/// FlinkJob, so nothing keyed by a checkpoint id (a sink's commit marker, a checkpoint's
/// directory) can take one run's checkpoint for another's, even one started from a savepoint
/// older than checkpoints its predecessors completed.
pub fn lineage_checkpoint_floor(jobs: &[LoggedJob], deployment: &str, except: &str) -> u64 {
    let Some(uid) = uid_of(deployment) else {
        return 0;
    };
    jobs.iter()
        .filter(|j| j.id != except && uid_of(&j.deployment) == Some(uid))
        .flat_map(|j| j.checkpoints.iter().copied())
        .max()
        .unwrap_or(0)
}

/// What to run: the job of the manifest, and which deployment of the FlinkJob this is.
#[derive(Debug, Clone)]
pub struct Application {
    pub job: JobArgs,
    /// `{uid}/{generation}` of the FlinkJob: a logged job of another deployment (a changed spec, a
    /// resume after suspend, a FlinkJob deleted and created again, another `floe run`) is history,
    /// and this deployment's job is submitted anew.
    pub deployment: String,
    /// `upgradeMode: last-state`: a new deployment's job starts from the latest checkpoint of the
    /// deployment before it (or from what that one started from, if it took none).
    pub last_state: bool,
    /// `spec.job.initialSavepointPath`: the savepoint the FlinkJob's first deployment starts from
    /// (the first of its uid the log knows).
    pub initial_savepoint: Option<String>,
}

impl Application {
    /// `{uid}/{generation}`, and `@{savepoint}` when the manifest names the savepoint the
    /// deployment starts from: a deployment started from another savepoint (the operator stopped
    /// the job again, say after it lost track of an upgrade) is a new one, whose job runs anew.
    pub fn deployment(uid: Option<&str>, generation: Option<i64>, savepoint: Option<&str>) -> String {
        let base = format!("{}/{}", uid.unwrap_or("-"), generation.unwrap_or(0));
        match savepoint {
            Some(s) => format!("{base}@{s}"),
            None => base,
        }
    }
}

/// Resumes what the log knows: an ended job is restored as ended, an unfinished one of the current
/// deployment runs again under its id (its executions whose results are in object storage are not
/// run again), one of another deployment is superseded. Then submits the application's job if the
/// log has none of its deployment, logging it first. From then on the JobManager appends to `log`
/// itself.
pub async fn resume(
    jm: &JobManager,
    mut log: OperationLog,
    replayed: &[Event],
    application: Option<Application>,
) -> Result<()> {
    // Attempt numbers and the fencing token of every TaskManager call come from the epoch.
    jm.set_leader_epoch(log.epoch());
    let logged = jobs_of(replayed);
    let mut history = compact(replayed);
    let deployment = application.as_ref().map(|a| a.deployment.clone());
    let is_current = |j: &LoggedJob| deployment.as_ref().is_none_or(|d| &j.deployment == d);
    let mut known = BTreeMap::new();
    for j in &logged {
        if j.has_ended() || !is_current(j) {
            let (status, failure) = if j.has_ended() {
                (j.status.clone().unwrap_or_default(), j.failure.clone())
            } else {
                (
                    "CANCELED".to_string(),
                    Some(format!(
                        "superseded by deployment {}",
                        deployment.clone().unwrap_or_default()
                    )),
                )
            };
            jm.restore_ended(
                j.id.clone(),
                EndedJob {
                    name: j.args.name.clone(),
                    status,
                    failure,
                    start_time_ms: j.submitted_ms,
                    end_time_ms: j.changed_ms,
                },
            );
        } else {
            jm.submit_resumed(
                j.args.clone(),
                j.id.clone(),
                j.checkpoints.clone(),
                &j.decisions,
                lineage_checkpoint_floor(&logged, &j.deployment, &j.id),
            )?;
            // Finished executions are reused only for the graph they ran in.
            let now: BTreeMap<u32, (String, u32)> = jm
                .vertex_parallelism(&j.id)
                .into_iter()
                .enumerate()
                .map(|(i, v)| (i as u32, v))
                .collect();
            let changed = j.vertices.iter().find(|(i, v)| now.get(i) != Some(v));
            let finished: &[crate::job::FinishedExecution] = match changed {
                Some((i, (id, p))) => {
                    tracing::warn!(
                        job = %j.id,
                        "vertex {i} ({id}) was initialized with parallelism {p}, the graph built now differs \
                         ({:?}): running every task again",
                        now.get(i)
                    );
                    &[]
                }
                None => &j.finished,
            };
            let restored = jm.restore_finished(&j.id, finished);
            tracing::info!(
                job = %j.id,
                restored,
                logged = j.finished.len(),
                "the operation log shows this job did not end: running it again; finished executions \
                 whose results are in object storage are not run again"
            );
        }
        if let Some(s) = &j.status {
            known.insert(j.id.clone(), logged_as(s, j.failure.as_deref()));
        }
    }
    let has_current = logged.iter().any(is_current);
    if let Some(mut app) = application.filter(|_| !has_current) {
        // What the job starts from goes into its logged configuration, so a JobManager that takes
        // over restores the same. An explicit key (the operator's savepoint of an upgrade) wins.
        let recovery_set = [crate::job::RECOVERY_PATH_KEY, "execution.savepoint.path"]
            .iter()
            .any(|k| app.job.configuration.contains_key(*k));
        let predecessor = logged
            .iter()
            .rev()
            .find(|j| uid_of(&j.deployment) == uid_of(&app.deployment));
        let start_from = match (recovery_set, predecessor) {
            (true, _) => None,
            (false, Some(previous)) if app.last_state => {
                let path = last_state(previous, &app.job.configuration).await?;
                if let Some(path) = &path {
                    tracing::info!(
                        path,
                        "last-state upgrade: the new deployment's job starts from its predecessor's state"
                    );
                }
                path
            }
            (false, Some(_)) => None,
            (false, None) => app.initial_savepoint.clone(),
        };
        if let Some(path) = start_from {
            app.job
                .configuration
                .insert(crate::job::RECOVERY_PATH_KEY.into(), path);
        }
        if let Some(runs) = superseded_runs(&logged, &app.deployment) {
            app.job
                .configuration
                .insert(floe_datastream::SUPERSEDED_RUNS_KEY.into(), runs);
        }
        if let Some(runs) = runs_latest_checkpoint(&logged, &app.deployment) {
            app.job
                .configuration
                .insert(floe_datastream::RUNS_LATEST_CHECKPOINT_KEY.into(), runs);
        }
        // A job that cannot be built is refused before it reaches the log.
        let vertices = jm.check(&app.job)?;
        let id = JobManager::new_job_id();
        // Logged before it runs: a JobManager that dies right after still knows the job.
        let mut events = vec![Event::JobSubmitted {
            job_id: id.clone(),
            name: app.job.name.clone(),
            args: app.job.args.clone(),
            configuration: app.job.configuration.clone(),
            deployment: app.deployment.clone(),
            time_ms: now_ms(),
        }];
        events.extend(
            vertices
                .into_iter()
                .enumerate()
                .map(|(i, (vertex_id, parallelism))| Event::VertexInitialized {
                    job_id: id.clone(),
                    vertex: i as u32,
                    id: vertex_id,
                    parallelism,
                    time_ms: now_ms(),
                }),
        );
        log.append(&events).await?;
        history.extend(events);
        let floor = lineage_checkpoint_floor(&logged, &app.deployment, &id);
        jm.submit_resumed(app.job, id, Vec::new(), &[], floor)?;
    }
    jm.attach_log(log, known, history).await;
    Ok(())
}

/// The earlier runs of `deployment`'s FlinkJob that completed no checkpoint, newest last and
/// comma-separated (`None`: none): what they left in progress in the file sinks' directories no
/// restore will ever commit, and the new run's sinks remove it at their end (see
/// `SUPERSEDED_RUNS_KEY`). The last 64 of them: a run that reached its end or a stop removed
/// those before it.
fn superseded_runs(logged: &[LoggedJob], deployment: &str) -> Option<String> {
    last_runs(logged, deployment, |j| {
        j.checkpoints.is_empty().then(|| j.id.clone())
    })
}

/// What `describe` says of each earlier run of `deployment`'s FlinkJob (its uid; none without
/// one), oldest first: the last 64 of them, comma-separated (`None`: nothing to say).
fn last_runs(
    logged: &[LoggedJob],
    deployment: &str,
    describe: impl Fn(&LoggedJob) -> Option<String>,
) -> Option<String> {
    let uid = uid_of(deployment)?;
    let runs: Vec<String> = logged
        .iter()
        .filter(|j| uid_of(&j.deployment) == Some(uid))
        .filter_map(describe)
        .collect();
    (!runs.is_empty()).then(|| runs[runs.len().saturating_sub(64)..].join(","))
}

/// The latest checkpoint each earlier run of `deployment`'s FlinkJob completed, as
/// `{run}:{checkpoint}`, newest run last and comma-separated (`None`: no run has one): a file sink
/// that restores one of them removes what that run left in progress only if it is that run's
/// latest (see `RUNS_LATEST_CHECKPOINT_KEY`). The last 64 runs: an older run's parts then stay
/// (hidden garbage, never a loss).
fn runs_latest_checkpoint(logged: &[LoggedJob], deployment: &str) -> Option<String> {
    last_runs(logged, deployment, |j| {
        Some(format!("{}:{}", j.id, j.checkpoints.iter().max()?))
    })
}

/// What a `last-state` deployment starts from: the latest readable checkpoint the log vouches
/// for of the deployment before it, else what that one started from; `None` after a deployment
/// that had no state. Vouched checkpoints none of which
/// reads back are an error: starting empty would lose the job's state.
async fn last_state(previous: &LoggedJob, conf: &BTreeMap<String, String>) -> Result<Option<String>> {
    let storage = conf.get(floe_storage::JOB_STORAGE_KEY);
    if let Some(url) = storage
        && !previous.checkpoints.is_empty()
    {
        let store = floe_storage::ObjectStore::open(url, conf).map_err(|e| Error::Config {
            key: floe_storage::JOB_STORAGE_KEY.into(),
            message: e.to_string(),
        })?;
        let latest = floe_checkpoint::CheckpointStore::new(store)
            .latest(&previous.id, &previous.checkpoints)
            .await
            .map_err(|e| Error::Config {
                key: "spec.job.upgradeMode".into(),
                message: format!(
                    "last-state: the previous deployment's checkpoints do not read back ({e}); starting empty would lose its state"
                ),
            })?;
        if let Some(c) = latest.checkpoint {
            return Ok(Some(format!(
                "{}/checkpoints/{}/chk-{}",
                url.trim_end_matches('/'),
                previous.id,
                c.id
            )));
        }
    }
    Ok(previous
        .args
        .configuration
        .get(crate::job::RECOVERY_PATH_KEY)
        .cloned())
}

/// Appends every job status change (seen within 100 ms; a terminal one is also logged before a client
/// is told about it) until a log write is refused (this JobManager was fenced); returns that error.
pub async fn record_status_changes(jm: JobManager) -> Error {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if let Err(e) = jm.log_status_changes().await {
            match jm.fatal() {
                Some(_) => return e,
                None => tracing::warn!("operation log write failed, retrying: {e}"),
            }
        }
    }
}

/// How a job's logged status is remembered: its status and failure (a failing job's cause can
/// change once, when the failure it was failed for only followed its input's).
pub(crate) fn logged_as(status: &str, failure: Option<&str>) -> String {
    format!("{status}\n{}", failure.unwrap_or_default())
}

/// The status changes not logged yet, as events.
pub(crate) fn status_events(jm: &JobManager, logged: &BTreeMap<String, String>) -> Vec<Event> {
    jm.job_statuses()
        .into_iter()
        .filter(|s| logged.get(&s.job_id) != Some(&logged_as(s.status.name(), s.failure.as_deref())))
        .map(|s| Event::JobStatusChanged {
            job_id: s.job_id,
            status: s.status.name().to_string(),
            failure: s.failure,
            time_ms: now_ms(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31, item 1: a job of a FlinkJob continues checkpoint ids above every id another job
    /// of the same FlinkJob (uid) completed, whatever deployment or savepoint it starts from.
    #[test]
    fn checkpoint_ids_continue_across_a_flinkjobs_deployments() {
        let submitted = |id: &str, deployment: &str| Event::JobSubmitted {
            job_id: id.into(),
            name: "pipeline".into(),
            args: vec![],
            configuration: BTreeMap::new(),
            deployment: deployment.into(),
            time_ms: 1,
        };
        let completed = |id: &str, checkpoint| Event::CheckpointCompleted {
            job_id: id.into(),
            checkpoint,
            time_ms: 2,
        };
        let jobs = jobs_of(&[
            submitted("a", "uid1/1#x"),
            completed("a", 5),
            completed("a", 9),
            submitted("b", "uid1/2@file:///sp/savepoint-3#y"),
            completed("b", 12),
            submitted("other", "uid2/1#x"),
            completed("other", 40),
            submitted("plain", ""),
            completed("plain", 70),
        ]);
        // A third deployment of uid1, from a savepoint older than both: above 12.
        assert_eq!(
            lineage_checkpoint_floor(&jobs, "uid1/3@file:///sp/savepoint-3#z", "new"),
            12
        );
        // Job b, resumed by a JobManager that took over: above what a completed, not its own 12.
        assert_eq!(
            lineage_checkpoint_floor(&jobs, "uid1/2@file:///sp/savepoint-3#y", "b"),
            9
        );
        assert_eq!(lineage_checkpoint_floor(&jobs, "uid2/1#x", "new"), 40);
        // No FlinkJob, no lineage.
        assert_eq!(lineage_checkpoint_floor(&jobs, "", "new"), 0);
    }

    #[test]
    fn the_last_status_of_each_job_wins() {
        let submitted = |id: &str| Event::JobSubmitted {
            job_id: id.into(),
            name: "wordcount".into(),
            args: vec![],
            configuration: BTreeMap::new(),
            deployment: String::new(),
            time_ms: 1,
        };
        let status = |id: &str, s: &str, t| Event::JobStatusChanged {
            job_id: id.into(),
            status: s.into(),
            failure: None,
            time_ms: t,
        };
        let jobs = jobs_of(&[
            submitted("a"),
            status("a", "RUNNING", 2),
            submitted("b"),
            Event::VertexInitialized {
                job_id: "b".into(),
                vertex: 0,
                id: "source".into(),
                parallelism: 4,
                time_ms: 2,
            },
            status("a", "FINISHED", 3),
            status("b", "RUNNING", 4),
            Event::CheckpointCompleted {
                job_id: "b".into(),
                checkpoint: 7,
                time_ms: 5,
            },
        ]);
        assert_eq!(jobs[1].vertices.get(&0), Some(&("source".to_string(), 4)));
        assert_eq!(jobs[1].checkpoint, Some(7));
        assert_eq!(jobs[1].checkpoints, vec![7]);
        assert!(jobs[0].vertices.is_empty());
        assert_eq!(jobs.len(), 2);
        assert!(jobs[0].has_ended());
        assert_eq!((jobs[0].submitted_ms, jobs[0].changed_ms), (1, 3));
        assert!(!jobs[1].has_ended());
        assert_eq!(jobs[1].status.as_deref(), Some("RUNNING"));
    }

    fn submitted(id: &str, deployment: &str, configuration: BTreeMap<String, String>) -> Event {
        Event::JobSubmitted {
            job_id: id.into(),
            name: "pipeline".into(),
            args: vec![],
            configuration,
            deployment: deployment.into(),
            time_ms: 1,
        }
    }

    fn completed(id: &str, checkpoint: u64) -> Event {
        Event::CheckpointCompleted {
            job_id: id.into(),
            checkpoint,
            time_ms: checkpoint,
        }
    }

    fn status(id: &str, status: &str) -> Event {
        Event::JobStatusChanged {
            job_id: id.into(),
            status: status.into(),
            failure: None,
            time_ms: 3,
        }
    }

    /// The jobs as a compacted log folds them: each job's checkpoints bounded to its latest
    /// [`kept_checkpoints`], and its highest one before them when they do not hold it.
    fn bounded(mut jobs: Vec<LoggedJob>) -> Vec<LoggedJob> {
        for j in &mut jobs {
            let n = kept_checkpoints(&j.args.configuration);
            let latest = j.checkpoints[j.checkpoints.len().saturating_sub(n)..].to_vec();
            j.checkpoints = match j.checkpoints.iter().max() {
                Some(m) if !latest.contains(m) => [vec![*m], latest].concat(),
                _ => latest,
            };
        }
        jobs
    }

    /// Issue item 8: a snapshot of a long-running job's log is a few events, and folds into the
    /// same job, its latest 16 checkpoints and its lineage's checkpoint floor.
    #[test]
    fn a_snapshot_folds_into_the_same_jobs_with_their_latest_checkpoints() {
        let mut events = vec![
            submitted("old", "uid1/1#x", BTreeMap::new()),
            completed("old", 90),
            status("old", "CANCELED"),
            submitted("job", "uid1/2#y", BTreeMap::new()),
            Event::VertexInitialized {
                job_id: "job".into(),
                vertex: 0,
                id: "source".into(),
                parallelism: 2,
                time_ms: 2,
            },
            status("job", "INITIALIZING"),
            status("job", "RUNNING"),
        ];
        events.extend((91..3091).map(|n| completed("job", n)));
        let snapshot = compact(&events);
        assert_eq!(
            snapshot.len(),
            2 + 1 + 1 + 1 + 1 + KEPT_CHECKPOINTS,
            "{snapshot:#?}"
        );
        let jobs = jobs_of(&snapshot);
        assert_eq!(jobs, bounded(jobs_of(&events)));
        assert_eq!(jobs[1].checkpoints, (3075..3091).collect::<Vec<u64>>());
        assert_eq!(jobs[1].checkpoint, Some(3090));
        assert_eq!(jobs[1].status.as_deref(), Some("RUNNING"));
        assert_eq!(lineage_checkpoint_floor(&jobs, "uid1/3#z", "new"), 3090);
        // More retained checkpoints than 16: as many are kept.
        let retained = BTreeMap::from([(
            "execution.checkpointing.num-retained".to_string(),
            "40".to_string(),
        )]);
        let mut events = vec![submitted("job", "uid1/2#y", retained)];
        events.extend((1..100).map(|n| completed("job", n)));
        assert_eq!(
            jobs_of(&compact(&events))[0].checkpoints,
            (60..100).collect::<Vec<u64>>()
        );
    }

    /// A small deterministic generator (xorshift64): random logs without a dependency.
    struct Random(u64);

    impl Random {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
            of[self.below(of.len() as u64) as usize]
        }
    }

    /// Any event of the vocabulary, over a few jobs: submitted twice, or reported on before their
    /// submission, with checkpoint ids out of order and repeated.
    fn random_log(r: &mut Random) -> Vec<Event> {
        let len = r.below(400);
        (0..len)
            .map(|t| {
                let job_id = r.pick(&["a", "b", "c"]).to_string();
                match r.below(10) {
                    0 => {
                        let mut conf = BTreeMap::new();
                        if r.below(4) == 0 {
                            conf.insert("execution.checkpointing.num-retained".into(), "20".into());
                        }
                        let deployment = r.pick(&["u1/1#x", "u1/2#y", "", "u2/1#z"]);
                        submitted(&job_id, deployment, conf)
                    }
                    1 => Event::JobStatusChanged {
                        job_id,
                        status: r.pick(&["RUNNING", "FAILING", "FINISHED", "FAILED"]).into(),
                        failure: (r.below(2) == 0).then(|| format!("failure {t}")),
                        time_ms: t,
                    },
                    2 | 3 => Event::ExecutionFinished {
                        job_id,
                        vertex: r.below(3) as u32,
                        subtask: r.below(3) as u32,
                        attempt: r.below(5),
                        produced: vec![vec![r.below(100)]],
                        time_ms: t,
                    },
                    4 => Event::VertexInitialized {
                        job_id,
                        vertex: r.below(3) as u32,
                        id: format!("v{}", r.below(3)),
                        parallelism: r.below(4) as u32 + 1,
                        time_ms: t,
                    },
                    5 => Event::ParallelismDecided {
                        job_id,
                        decision: crate::job::VertexDecision {
                            vertex: r.below(3) as u32,
                            parallelism: r.below(4) as u32 + 1,
                            subpartition_ranges: vec![],
                            input_bytes: None,
                            bytes_per_subtask: vec![],
                            largest_subpartition_bytes: 0,
                            reason: "decided".into(),
                            time_ms: t,
                        },
                    },
                    _ => completed(&job_id, r.below(60)),
                }
            })
            .collect()
    }

    /// Property over 2,000 random logs: a snapshot folds into the same jobs (checkpoints bounded),
    /// lineage floors included; a snapshot of a snapshot and the events after it is one of the
    /// whole log (what each compaction of a running JobManager does); compacting twice changes
    /// nothing.
    #[test]
    fn compacting_random_logs_keeps_their_jobs() {
        let mut r = Random(0x9e37_79b9_7f4a_7c15);
        for case in 0..2000 {
            let events = random_log(&mut r);
            let jobs = bounded(jobs_of(&events));
            let snapshot = compact(&events);
            assert_eq!(jobs_of(&snapshot), jobs, "case {case}: {events:#?}");
            assert_eq!(compact(&snapshot), snapshot, "case {case}");
            let split = r.below(events.len() as u64 + 1) as usize;
            let mut rolling = compact(&events[..split]);
            rolling.extend_from_slice(&events[split..]);
            assert_eq!(jobs_of(&compact(&rolling)), jobs, "case {case}, split at {split}");
            let whole = jobs_of(&events);
            for j in &whole {
                for deployment in ["u1/3#w", "u2/2#w", &j.deployment] {
                    assert_eq!(
                        lineage_checkpoint_floor(&jobs, deployment, &j.id),
                        lineage_checkpoint_floor(&whole, deployment, &j.id),
                        "case {case}"
                    );
                }
            }
        }
    }

    /// Issue 31: a new deployment names the earlier runs of its FlinkJob that completed no
    /// checkpoint (their in-progress parts are garbage its sinks remove), never one with a
    /// checkpoint (a restore of it commits its pending parts) nor another FlinkJob's run.
    #[test]
    fn a_new_deployment_names_the_earlier_runs_without_a_checkpoint() {
        let events = vec![
            submitted("killed-early", "uid1/1#x", BTreeMap::new()),
            submitted("checkpointed", "uid1/2#x", BTreeMap::new()),
            completed("checkpointed", 1),
            submitted("other-flinkjob", "uid2/1#x", BTreeMap::new()),
            submitted("failed", "uid1/3#y", BTreeMap::new()),
            status("failed", "FAILED"),
        ];
        let logged = jobs_of(&events);
        assert_eq!(
            superseded_runs(&logged, "uid1/4#y").as_deref(),
            Some("killed-early,failed")
        );
        assert_eq!(superseded_runs(&logged, "uid3/1#x"), None);
        // Without a FlinkJob uid no run is known to be of the same job.
        assert_eq!(superseded_runs(&logged, "/1#x"), None);
    }

    /// Issue 31 (review): a new deployment names the latest checkpoint of each earlier run of its
    /// FlinkJob that has one: its file sinks remove a restored run's in-progress parts only when
    /// they restore that run's latest checkpoint.
    #[test]
    fn a_new_deployment_names_each_earlier_runs_latest_checkpoint() {
        let events = vec![
            submitted("killed-early", "uid1/1#x", BTreeMap::new()),
            submitted("checkpointed", "uid1/2#x", BTreeMap::new()),
            completed("checkpointed", 3),
            completed("checkpointed", 9),
            submitted("other-flinkjob", "uid2/1#x", BTreeMap::new()),
            completed("other-flinkjob", 4),
            submitted("resumed", "uid1/3#y", BTreeMap::new()),
            completed("resumed", 12),
        ];
        let logged = jobs_of(&events);
        assert_eq!(
            runs_latest_checkpoint(&logged, "uid1/4#y").as_deref(),
            Some("checkpointed:9,resumed:12")
        );
        assert_eq!(runs_latest_checkpoint(&logged, "uid3/1#x"), None);
        assert_eq!(runs_latest_checkpoint(&logged, "/1#x"), None);
    }

    /// Issue item 8, end to end on a file system: a JobManager that appends 3,000 checkpoints keeps
    /// about 1,000 objects in its log (not one per append), and a JobManager that takes over reads
    /// the snapshot and the entries after it, resumes the same job and appends; the old one is
    /// fenced.
    #[tokio::test]
    async fn a_jobmanager_compacts_its_log_and_a_takeover_resumes_from_the_snapshot() {
        use crate::server::JobManagerConfig;
        let dir = std::env::temp_dir().join(format!("floe-jm-compaction-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = floe_storage::ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new())
            .unwrap()
            .scoped("default/job");
        // Files under the log's prefix (a directory counts for what it holds).
        fn walk(path: &std::path::Path) -> usize {
            match std::fs::read_dir(path) {
                Ok(entries) => entries.map(|e| walk(&e.unwrap().path())).sum(),
                Err(_) => 1,
            }
        }
        let count = || walk(&dir.join("default/job"));
        let new_jm = || {
            JobManager::new(
                JobManagerConfig::default(),
                floe_datastream::JobRegistry::builtin(),
            )
        };
        let a = new_jm();
        let (log, replayed) = OperationLog::acquire::<Event>(store.clone(), "jm-a")
            .await
            .unwrap();
        resume(&a, log, &replayed.events, None).await.unwrap();
        let mut events = vec![
            submitted("job", "uid1/1#x", BTreeMap::new()),
            status("job", "RUNNING"),
        ];
        events.extend((1..=3000).map(|n| completed("job", n)));
        events.push(status("job", "CANCELED"));
        for e in &events {
            a.log(std::slice::from_ref(e)).await.unwrap();
        }
        // The snapshot's deletions run on tasks of their own.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while count() > COMPACT_EVERY as usize + 3 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = count();
        assert!(
            left <= COMPACT_EVERY as usize + 3,
            "{left} objects under the log's prefix after {} appends",
            events.len()
        );
        let b = new_jm();
        let (log, replayed) = OperationLog::acquire::<Event>(store.clone(), "jm-b")
            .await
            .unwrap();
        assert!(replayed.snapshot.is_some());
        assert!(replayed.entries < COMPACT_EVERY, "{}", replayed.entries);
        let jobs = jobs_of(&replayed.events);
        // The snapshot's 16 latest checkpoints, then those appended after it.
        assert_eq!(bounded(jobs.clone()), bounded(jobs_of(&events)));
        let all: Vec<u64> = (1..=3000).collect();
        assert!(all.ends_with(&jobs[0].checkpoints) && jobs[0].checkpoints.len() >= KEPT_CHECKPOINTS);
        assert_eq!(lineage_checkpoint_floor(&jobs, "uid1/2#y", "next"), 3000);
        resume(&b, log, &replayed.events, None).await.unwrap();
        assert_eq!(
            b.state().ended.get("job").map(|j| j.status.clone()),
            Some("CANCELED".to_string())
        );
        b.log(&[submitted("next", "uid1/2#y", BTreeMap::new())])
            .await
            .unwrap();
        let e = a.log(&[completed("job", 3001)]).await.unwrap_err();
        assert!(e.to_string().contains("fenced"), "{e}");
        assert!(a.fatal().is_some());
        let (_, replayed) = OperationLog::acquire::<Event>(store, "jm-c").await.unwrap();
        let jobs = jobs_of(&replayed.events);
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].checkpoint, Some(3000));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
