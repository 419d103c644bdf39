//! The FlinkJob's status from what the operator observed, by pure functions: no clock (the time is an
//! argument) and no I/O, so every case is a unit test.

use floe_manifest::{
    AutoscalerStatus, DeployedSpec, DesiredState, FlinkJob, FlinkJobStatus, JobStatusInfo, UpgradeMode,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::jobmanager_api::{AutoscalerDecision, JobOverview};
use crate::resources::{self, Component, selector_string};

/// The condition that says whether the job runs (always written).
pub const READY: &str = "Ready";
/// The condition that says the TaskManagers cannot hold the job (written only then).
pub const SLOTS_SUFFICIENT: &str = "SlotsSufficient";
/// Its reason, also the reason of the Warning event the operator publishes with it.
pub const INSUFFICIENT_SLOTS: &str = "InsufficientSlots";

/// Lifecycle states, the flink-kubernetes-operator's names.
pub mod lifecycle {
    pub const CREATED: &str = "CREATED";
    pub const DEPLOYED: &str = "DEPLOYED";
    pub const STABLE: &str = "STABLE";
    pub const SUSPENDED: &str = "SUSPENDED";
    pub const FAILED: &str = "FAILED";
    pub const ROLLED_BACK: &str = "ROLLED_BACK";
}

/// What the operator saw of the job's JobManager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// The spec is invalid: nothing was applied. Carries the validation message (naming the field).
    InvalidSpec(String),
    /// Suspended: the Deployments are at zero; the job was cancelled if it ran.
    Suspended {
        cancelled: Option<JobOverview>,
    },
    /// The JobManager did not answer (it may be starting).
    Unreachable(String),
    /// The job's pods do not run (an image that cannot be pulled, a crash loop, a quota): the
    /// reason and what happened (`workloads::problem`).
    PodsFailing {
        reason: String,
        message: String,
    },
    /// The objects could not be applied (an admission webhook, a quota on objects, RBAC).
    ApplyFailed(String),
    /// The JobManager answers but has no job yet.
    NoJob,
    Job(JobOverview),
}

fn condition(status: bool, reason: &str, message: String, generation: Option<i64>) -> Condition {
    typed_condition(READY, status, reason, message, generation)
}

fn typed_condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// Why the TaskManagers of `job` cannot hold it, if they cannot: with slot sharing a job needs as
/// many slots as its parallelism, and `spec.taskManager` offers replicas x slots. `None` when they
/// suffice, for `parallelism: auto` (decided at run time), and under the adaptive scheduler
/// (`jobmanager.scheduler: adaptive`), which runs a job at the parallelism its slots allow.
pub fn insufficient_slots(job: &FlinkJob) -> Option<String> {
    let floe_manifest::Parallelism::Fixed(parallelism) = job.spec.job.parallelism else {
        return None;
    };
    let adaptive = job
        .spec
        .configuration
        .get("jobmanager.scheduler")
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("adaptive"));
    let tm = &job.spec.task_manager;
    let offered = job.total_slots();
    (!adaptive && parallelism > offered).then(|| {
        format!(
            "parallelism {parallelism} needs {parallelism} slots but spec.taskManager offers {} x {} = {offered}: \
             raise spec.taskManager.replicas or spec.taskManager.slots, or lower spec.job.parallelism",
            tm.replicas, tm.slots
        )
    })
}

/// The condition type saying whether the TaskManagers asked for all run.
pub const TASKMANAGERS_RUNNING: &str = "TaskManagersRunning";

/// Records in `status` why TaskManagers asked for do not run (issue 32, item 14: a quota, no node
/// that fits, an image that cannot be pulled): a `TaskManagersRunning=False` condition with the
/// reason and what happened, naming the pod or Deployment. The job may run meanwhile on fewer
/// slots, or wait for them; without this the status said nothing of why. Returns the message
/// when it is new (worth a Warning event).
pub fn taskmanagers_not_running(
    previous: Option<&FlinkJobStatus>,
    status: &mut FlinkJobStatus,
    problem: &crate::workloads::Problem,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<String> {
    let before = previous.map(|p| p.conditions.as_slice()).unwrap_or_default();
    let condition = typed_condition(
        TASKMANAGERS_RUNNING,
        false,
        &problem.reason,
        problem.message.clone(),
        generation,
    );
    status
        .conditions
        .push(keep_transition_time(before, condition, now));
    let known = before
        .iter()
        .any(|c| c.type_ == TASKMANAGERS_RUNNING && c.status == "False" && c.message == problem.message);
    (!known).then(|| problem.message.clone())
}

/// Whether `after` reports insufficient slots that `before` did not (worth an event).
pub fn slots_newly_insufficient(before: Option<&FlinkJobStatus>, after: &FlinkJobStatus) -> Option<String> {
    let find = |s: &FlinkJobStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == SLOTS_SUFFICIENT && c.status == "False")
            .map(|c| c.message.clone())
    };
    let now = find(after)?;
    (before.and_then(find).as_ref() != Some(&now)).then_some(now)
}

/// The reason of the event for each rescale the job's autoscaler decided.
pub const AUTOSCALER_RESCALE: &str = "AutoscalerRescale";
/// The reason of the event when the operator changes the TaskManagers for the autoscaler.
pub const AUTOSCALER_TASKMANAGERS: &str = "AutoscalerTaskManagers";

/// A duration of the job's configuration (`key`), else `default_s` seconds.
fn configured_duration(job: &FlinkJob, key: &str, default_s: u64) -> std::time::Duration {
    job.spec
        .configuration
        .get(key)
        .and_then(|v| floe_manifest::parse_duration(v))
        .unwrap_or(std::time::Duration::from_secs(default_s))
}

/// `kubernetes.operator.deployment.rollback.enabled`.
fn rollback_enabled(job: &FlinkJob) -> bool {
    job.spec
        .configuration
        .get(floe_manifest::ROLLBACK_ENABLED_KEY)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether the job of the deployed spec ended (FINISHED, FAILED, CANCELED): the JobManager says
/// so, or, while it does not answer (restarting, or shut down after its TTL), the last status of
/// this same deployment did. A new deployment (a changed spec, a resume, an upgrade) has not.
pub fn job_ended(job: &FlinkJob, observed: &Observed) -> bool {
    let Some(previous) = job.status.as_ref() else {
        return false;
    };
    let same_deployment = previous
        .deployed
        .as_ref()
        .is_some_and(|d| Some(d.generation) == resources::deployed_generation(job));
    if !same_deployment || job.spec.job.state == DesiredState::Suspended {
        return false;
    }
    // A failed upgrade may be rolled back (a deployment of the stable spec, which needs its
    // TaskManagers): with rollback on, a FAILED job keeps them.
    let rollback = previous.rolled_back_generation.is_some() || rollback_enabled(job);
    let ended = |state: &str| match state {
        "FINISHED" | "CANCELED" => true,
        "FAILED" => !rollback,
        _ => false,
    };
    match observed {
        Observed::Job(j) => ended(&j.state),
        Observed::Unreachable(_) | Observed::NoJob | Observed::PodsFailing { .. } => {
            previous.job_status.as_ref().is_some_and(|s| ended(&s.state))
        }
        Observed::InvalidSpec(_) | Observed::Suspended { .. } | Observed::ApplyFailed(_) => false,
    }
}

/// Why the spec cannot be deployed where the last one ran (issue 32, item 7): a `last-state`
/// upgrade starts from the job's operation log and latest checkpoint in `spec.storage`; moved to
/// other storage, it would find nothing there and silently start the job over. A `savepoint` or
/// `stateless` upgrade may move it (the savepoint lies in `state.savepoints.dir`).
pub fn storage_moved(job: &FlinkJob) -> Option<String> {
    if job.spec.job.upgrade_mode != UpgradeMode::LastState {
        return None;
    }
    let recorded = job.status.as_ref()?.deployed.as_ref()?;
    let before = recorded.storage.as_deref()?;
    let now = job.spec.storage.as_ref().map(|s| s.url.as_str());
    let new_deployment = Some(recorded.generation) != resources::deployed_generation(job);
    (new_deployment && now != Some(before)).then(|| {
        format!(
            "spec.storage.url: the job runs with its state in {before:?}; a last-state upgrade starts              from there and would find nothing in {}: put spec.storage back, or upgrade with              spec.job.upgradeMode savepoint (its savepoint moves the state) or stateless",
            now.map_or_else(|| "no storage".to_string(), |u| format!("{u:?}"))
        )
    })
}

/// What the JobManager says, of this deployment's job only (issue 32, item 5): a job that started
/// before the deployed generation was applied is its predecessor's, seen on the old JobManager
/// while the Deployment's Recreate strategy stops it, or restored from the operation log by the
/// new one before it submits its own job. Its end (FINISHED after an upgrade's
/// stop-with-savepoint) must not end this deployment: no TaskManagers scaled to zero, no shutdown
/// TTL counted from the old job's end, no Ready=True. Seen as no job yet. The rule is the one
/// [`compute`] uses for a deployment whose job runs. A status written before deployments
/// recorded their time filters nothing.
pub fn of_this_deployment(job: &FlinkJob, observed: Observed, now_ms: i64) -> Observed {
    let Observed::Job(j) = &observed else {
        return observed;
    };
    let recorded = job.status.as_ref().and_then(|s| s.deployed.as_ref());
    let since = match recorded {
        Some(d) if Some(d.generation) == resources::deployed_generation(job) => d.time,
        // Deployed by this reconcile.
        Some(_) => Some(now_ms),
        None => None,
    };
    match (since, j.start_time_ms) {
        (Some(since), Some(start)) if (start as i64) < since => Observed::NoJob,
        _ => observed,
    }
}

/// The JobManagers to run: one, but none once the job ended longer than
/// `kubernetes.operator.jm-deployment.shutdown-ttl` (1 d) ago: until then it serves the ended
/// job's REST API, as in Flink's operator; the status keeps the job's last state after.
pub fn jobmanager_replicas(job: &FlinkJob, observed: &Observed, now_ms: i64) -> i32 {
    if !job_ended(job, observed) {
        return 1;
    }
    let ended = match observed {
        Observed::Job(j) => j.end_time_ms.map(|t| t as i64),
        _ => None,
    }
    .or_else(|| {
        job.status
            .as_ref()
            .and_then(|s| s.job_status.as_ref())
            .and_then(|j| j.end_time.as_deref())
            .and_then(|t| t.parse().ok())
    });
    let ttl = configured_duration(job, floe_manifest::JM_SHUTDOWN_TTL_KEY, 86_400);
    match ended {
        Some(end) if now_ms.saturating_sub(end) >= ttl.as_millis() as i64 => 0,
        _ => 1,
    }
}

/// The job as the last status saw it, for a status computed while its JobManager, the job having
/// ended, does not answer.
fn last_seen(previous: &FlinkJobStatus) -> Option<JobOverview> {
    let s = previous.job_status.as_ref()?;
    Some(JobOverview {
        id: s.job_id.clone().unwrap_or_default(),
        name: s.job_name.clone().unwrap_or_default(),
        state: s.state.clone(),
        start_time_ms: s.start_time.as_deref().and_then(|t| t.parse().ok()),
        end_time_ms: s.end_time.as_deref().and_then(|t| t.parse().ok()),
        failure: previous.error.clone(),
        parallelism: s.parallelism,
        slots_wanted: None,
        autoscaler_decisions: Vec::new(),
    })
}

/// The status to write for `job` after observing `observed` at `now`.
pub fn compute(job: &FlinkJob, observed: &Observed, now: Timestamp) -> FlinkJobStatus {
    let previous = job.status.clone().unwrap_or_default();
    // An ended job stays as it ended while its JobManager does not answer (shut down after its
    // TTL, or restarting): not RECONCILING.
    let seen_last;
    let observed = match last_seen(&previous) {
        Some(j) if !matches!(observed, Observed::Job(_)) && job_ended(job, observed) => {
            seen_last = Observed::Job(j);
            &seen_last
        }
        _ => observed,
    };
    let generation = job.metadata.generation;
    let name = Some(job.spec.job.name.clone());
    let previous_id = previous.job_status.as_ref().and_then(|s| s.job_id.clone());
    let info = |state: &str| JobStatusInfo {
        job_name: name.clone(),
        job_id: previous_id.clone(),
        state: state.into(),
        start_time: previous.job_status.as_ref().and_then(|s| s.start_time.clone()),
        parallelism: previous.job_status.as_ref().and_then(|s| s.parallelism),
        ..JobStatusInfo::default()
    };
    let from_job = |j: &JobOverview| JobStatusInfo {
        job_name: Some(j.name.clone()),
        job_id: Some(j.id.clone()),
        state: j.state.clone(),
        start_time: j.start_time_ms.map(|t| t.to_string()),
        end_time: j.end_time_ms.map(|t| t.to_string()),
        parallelism: j.parallelism,
        ..JobStatusInfo::default()
    };
    let (job_status, lifecycle, ready, error) = match observed {
        Observed::InvalidSpec(message) => (
            previous.job_status.clone(),
            lifecycle::FAILED,
            condition(false, "InvalidSpec", message.clone(), generation),
            Some(message.clone()),
        ),
        Observed::Suspended { cancelled } => (
            Some(JobStatusInfo {
                state: "SUSPENDED".into(),
                ..cancelled
                    .as_ref()
                    .map(from_job)
                    .unwrap_or_else(|| info("SUSPENDED"))
            }),
            lifecycle::SUSPENDED,
            condition(
                false,
                "Suspended",
                "spec.job.state is suspended: the job is cancelled and its Deployments are at zero".into(),
                generation,
            ),
            None,
        ),
        Observed::Unreachable(message) => (
            Some(info("RECONCILING")),
            lifecycle::DEPLOYED,
            condition(false, "JobManagerUnreachable", message.clone(), generation),
            None,
        ),
        Observed::PodsFailing { reason, message } => (
            Some(info("RECONCILING")),
            lifecycle::DEPLOYED,
            condition(false, reason, message.clone(), generation),
            Some(message.clone()),
        ),
        Observed::ApplyFailed(message) => (
            previous.job_status.clone().or_else(|| Some(info("RECONCILING"))),
            lifecycle::DEPLOYED,
            condition(false, "ApplyFailed", message.clone(), generation),
            Some(message.clone()),
        ),
        Observed::NoJob => (
            Some(info("RECONCILING")),
            lifecycle::DEPLOYED,
            condition(
                false,
                "Deploying",
                "the JobManager is up and has not submitted the job yet".into(),
                generation,
            ),
            None,
        ),
        Observed::Job(j) => {
            let (lifecycle, ready, reason) = match j.state.as_str() {
                "RUNNING" => (lifecycle::STABLE, true, "JobRunning"),
                "FINISHED" => (lifecycle::STABLE, true, "JobFinished"),
                "FAILED" => (lifecycle::FAILED, false, "JobFailed"),
                "CANCELED" | "CANCELLING" => (lifecycle::DEPLOYED, false, "JobCanceled"),
                _ => (lifecycle::DEPLOYED, false, "JobStarting"),
            };
            let message = match &j.failure {
                Some(f) => format!("job {} is {}: {f}", j.id, j.state),
                None => format!("job {} is {}", j.id, j.state),
            };
            (
                Some(from_job(j)),
                lifecycle,
                condition(ready, reason, message, generation),
                j.failure.clone(),
            )
        }
    };
    // A new deployment (a changed spec, a resume) takes the savepoint taken for it, in
    // `savepoint` mode; otherwise none (its JobManager starts it empty or, in `last-state` mode and
    // as `savepoint` mode's fallback, from its predecessor's latest checkpoint). The same
    // deployment keeps what it started from.
    let generation_now = resources::deployed_generation(job).unwrap_or(0);
    let recorded = previous.deployed.as_ref();
    let new_deployment = recorded.is_some_and(|d| d.generation != generation_now);
    let upgrade_path = previous
        .job_status
        .as_ref()
        .and_then(|p| p.upgrade_savepoint_path.clone());
    let (deployed_savepoint, upgrade_path) = match (new_deployment, job.spec.job.upgrade_mode) {
        (true, UpgradeMode::Savepoint) => (upgrade_path, None),
        (true, _) => (None, None),
        (false, _) => (recorded.and_then(|d| d.savepoint.clone()), upgrade_path),
    };
    // Savepoints and asked-for checkpoints are the controller's to record (it triggers and polls
    // them): carried over.
    let job_status = job_status.map(|s| JobStatusInfo {
        savepoint_info: previous
            .job_status
            .as_ref()
            .and_then(|p| p.savepoint_info.clone()),
        checkpoint_info: previous
            .job_status
            .as_ref()
            .and_then(|p| p.checkpoint_info.clone()),
        upgrade_savepoint_path: upgrade_path,
        ..s
    });
    let replicas = taskmanager_replicas(job, observed);
    let task_managers = match (observed, job.spec.job.state) {
        (Observed::InvalidSpec(_), _) => previous.task_managers,
        (_, DesiredState::Suspended) => Some(0),
        _ => Some(replicas),
    };
    let autoscaler = job.spec.autoscaler_enabled().then(|| {
        let before = previous.autoscaler.clone().unwrap_or_default();
        let (wanted, newest) = match observed {
            Observed::Job(j) => (
                j.slots_wanted,
                j.autoscaler_decisions.iter().map(|d| d.time_ms).max(),
            ),
            _ => (None, None),
        };
        AutoscalerStatus {
            slots_wanted: wanted.or(before.slots_wanted),
            task_managers: Some(replicas),
            last_decision_time: newest.max(before.last_decision_time),
        }
    });
    let now_ms = now.as_millisecond();
    let deployed_time = match (new_deployment, recorded) {
        (false, Some(d)) => d.time.or(Some(now_ms)),
        _ => Some(now_ms),
    };
    // The job of this deployment runs (not the one before it, still up until Recreate stops it).
    let runs = matches!(observed, Observed::Job(j) if j.state == "RUNNING"
        && j.start_time_ms.is_some_and(|t| t as i64 >= deployed_time.unwrap_or(0)));
    let rollback = rollback(job, &previous, generation_now, deployed_time, runs, now_ms);
    let (lifecycle, ready) = match &rollback {
        Rollback::RolledBack { message, .. } => (
            lifecycle::ROLLED_BACK,
            condition(false, "RolledBack", message.clone(), generation),
        ),
        _ => (lifecycle, ready),
    };
    let last_stable_spec = match (&rollback, runs && !new_deployment) {
        (Rollback::None, true) => Some(floe_manifest::StableSpec {
            generation: generation_now,
            spec: serde_json::to_string(&job.spec).unwrap_or_default(),
            savepoint: deployed_savepoint.clone(),
        }),
        _ => previous.last_stable_spec.clone(),
    };
    let mut conditions = vec![keep_transition_time(&previous.conditions, ready, now)];
    let running = !matches!(observed, Observed::InvalidSpec(_) | Observed::Suspended { .. });
    if let Some(message) = insufficient_slots(job).filter(|_| running) {
        let slots = typed_condition(SLOTS_SUFFICIENT, false, INSUFFICIENT_SLOTS, message, generation);
        conditions.push(keep_transition_time(&previous.conditions, slots, now));
    }
    FlinkJobStatus {
        job_status,
        lifecycle_state: Some(lifecycle.into()),
        conditions,
        observed_generation: generation,
        task_managers,
        task_manager_selector: Some(selector_string(job, Component::TaskManager)),
        error,
        autoscaler,
        deployed: match observed {
            // Nothing was applied: what runs is what ran (a spec refused for moving its storage
            // must not become the deployed one by being written here).
            Observed::InvalidSpec(_) if previous.deployed.is_some() => previous.deployed.clone(),
            _ => Some(DeployedSpec {
                generation: generation_now,
                spec_hash: resources::spec_hash(job),
                savepoint: deployed_savepoint,
                time: deployed_time,
                storage: job.spec.storage.as_ref().map(|s| s.url.clone()),
            }),
        },
        last_stable_spec,
        rolled_back_generation: match rollback {
            Rollback::RolledBack { generation, .. } => Some(generation),
            Rollback::None => None,
        },
    }
}

/// Whether the deployed generation runs as the last stable spec instead.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rollback {
    None,
    RolledBack { generation: i64, message: String },
}

/// Flink's rollback (`kubernetes.operator.deployment.rollback.enabled`): a deployment that is not
/// the last stable one and whose job does not run `kubernetes.operator.deployment.readiness.timeout`
/// (5 min) after it was applied is rolled back to `lastStableSpec`, which then runs until the spec
/// changes again.
fn rollback(
    job: &FlinkJob,
    previous: &FlinkJobStatus,
    generation_now: i64,
    deployed_time: Option<i64>,
    runs: bool,
    now_ms: i64,
) -> Rollback {
    let Some(stable) = previous.last_stable_spec.as_ref() else {
        return Rollback::None;
    };
    let timeout = configured_duration(job, floe_manifest::READINESS_TIMEOUT_KEY, 300);
    let message = |generation| {
        format!(
            "the job of generation {generation} did not run within {}s of its deployment ({}): rolled back \
             to generation {} (lastStableSpec), its savepoint {}",
            timeout.as_secs(),
            floe_manifest::READINESS_TIMEOUT_KEY,
            stable.generation,
            previous
                .deployed
                .as_ref()
                .and_then(|d| d.savepoint.as_deref())
                .unwrap_or("(none: the last state)")
        )
    };
    if previous.rolled_back_generation == Some(generation_now) {
        return Rollback::RolledBack {
            generation: generation_now,
            message: message(generation_now),
        };
    }
    let enabled = rollback_enabled(job);
    let waited = now_ms.saturating_sub(deployed_time.unwrap_or(now_ms));
    if !enabled
        || runs
        || stable.generation == generation_now
        || job.spec.job.state == DesiredState::Suspended
        || waited < timeout.as_millis() as i64
    {
        return Rollback::None;
    }
    Rollback::RolledBack {
        generation: generation_now,
        message: message(generation_now),
    }
}

/// The spec to deploy: the last stable one while the deployed generation is rolled back (see
/// [`compute`]), else the FlinkJob's.
pub fn spec_to_deploy(job: &FlinkJob, status: &FlinkJobStatus) -> floe_manifest::FlinkJobSpec {
    let stable = status
        .last_stable_spec
        .as_ref()
        .filter(|_| status.rolled_back_generation.is_some())
        .and_then(|s| serde_json::from_str(&s.spec).ok());
    stable.unwrap_or_else(|| job.spec.clone())
}

/// The TaskManagers to run: none once the job ended; else `spec.taskManager.replicas`; with the
/// autoscaler and `maxReplicas`,
/// enough for the slots the job wants, within `replicas..=maxReplicas` (Flink's operator raises
/// the TaskManagers a rescale needs and lowers them after a scale-down). While the JobManager
/// does not say what it wants, what the operator ran last.
pub fn taskmanager_replicas(job: &FlinkJob, observed: &Observed) -> i32 {
    // An ended job's TaskManagers have nothing left to run: their resources go back.
    if job_ended(job, observed) {
        return 0;
    }
    let tm = &job.spec.task_manager;
    let floor = i32::try_from(tm.replicas).unwrap_or(i32::MAX);
    let Some(max) = tm.max_replicas.filter(|_| job.spec.autoscales_taskmanagers()) else {
        return floor;
    };
    let wanted = match observed {
        Observed::Job(j) if !j.is_terminal() => j.slots_wanted,
        _ => None,
    };
    match wanted {
        Some(slots) => {
            let replicas = slots.div_ceil(tm.slots.max(1)).clamp(tm.replicas, max);
            i32::try_from(replicas).unwrap_or(i32::MAX)
        }
        None => job
            .status
            .as_ref()
            .and_then(|s| s.autoscaler.as_ref())
            .and_then(|a| a.task_managers)
            .unwrap_or(floor),
    }
}

/// The autoscaler's decisions the operator has not reported as events yet.
pub fn new_autoscaler_decisions<'a>(job: &FlinkJob, observed: &'a Observed) -> Vec<&'a AutoscalerDecision> {
    let Observed::Job(j) = observed else {
        return Vec::new();
    };
    let seen = job
        .status
        .as_ref()
        .and_then(|s| s.autoscaler.as_ref())
        .and_then(|a| a.last_decision_time);
    j.autoscaler_decisions
        .iter()
        .filter(|d| seen.is_none_or(|t| d.time_ms > t))
        .collect()
}

/// A condition's `lastTransitionTime` moves only when its status does.
fn keep_transition_time(previous: &[Condition], mut c: Condition, now: Timestamp) -> Condition {
    c.last_transition_time = match previous.iter().find(|p| p.type_ == c.type_) {
        Some(p) if p.status == c.status => p.last_transition_time.clone(),
        _ => Time(now),
    };
    c
}

/// A short line for an Event when the job's state changed between two statuses.
pub fn state_change(before: Option<&FlinkJobStatus>, after: &FlinkJobStatus) -> Option<String> {
    let state = |s: Option<&FlinkJobStatus>| s.and_then(|s| s.job_status.as_ref()).map(|j| j.state.clone());
    let (old, new) = (state(before), state(Some(after)));
    (old != new).then(|| {
        format!(
            "job state {} -> {}",
            old.as_deref().unwrap_or("none"),
            new.as_deref().unwrap_or("none")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> FlinkJob {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/kubernetes/wordcount.yaml"
        ))
        .unwrap();
        let mut job = FlinkJob::from_yaml(&text).unwrap();
        job.metadata.generation = Some(3);
        job
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    /// Issue 32, item 7: a last-state upgrade that moves `spec.storage` would find no operation
    /// log and start the job over. It is refused, naming the field, and the deployment recorded
    /// stays the one that runs (the next reconcile refuses it again).
    #[test]
    fn a_last_state_upgrade_that_moves_the_storage_is_refused_and_the_deployment_stays() {
        let mut job = job();
        job.spec.job.upgrade_mode = UpgradeMode::LastState;
        let before = job.spec.storage.as_ref().unwrap().url.clone();
        job.status = Some(compute(
            &job,
            &Observed::Job(running("RUNNING")),
            at(1_700_000_100),
        ));
        assert_eq!(storage_moved(&job), None, "nothing moved");

        let mut moved = job.clone();
        moved.metadata.generation = Some(4);
        moved.spec.storage.as_mut().unwrap().url = "s3://other-bucket/jobs".into();
        let message = storage_moved(&moved).expect("a move of last-state storage is refused");
        assert!(message.starts_with("spec.storage.url"), "{message}");
        assert!(
            message.contains(&before) && message.contains("s3://other-bucket/jobs"),
            "{message}"
        );
        let refused = compute(&moved, &Observed::InvalidSpec(message), at(1_700_000_200));
        assert_eq!(
            refused.deployed,
            job.status.as_ref().unwrap().deployed,
            "nothing was deployed"
        );
        assert_eq!(refused.lifecycle_state.as_deref(), Some(lifecycle::FAILED));
        moved.status = Some(refused);
        assert!(
            storage_moved(&moved).is_some(),
            "refused again on the next reconcile"
        );

        // A savepoint or stateless upgrade may move it; a scale moves nothing.
        for mode in [UpgradeMode::Savepoint, UpgradeMode::Stateless] {
            let mut other = moved.clone();
            other.spec.job.upgrade_mode = mode;
            assert_eq!(storage_moved(&other), None, "{mode:?}");
        }
        let mut scaled = job.clone();
        scaled.metadata.generation = Some(5);
        scaled.spec.task_manager.replicas += 2;
        assert_eq!(storage_moved(&scaled), None);
    }

    fn running(state: &str) -> JobOverview {
        JobOverview {
            id: "j1".into(),
            name: "wordcount".into(),
            state: state.into(),
            start_time_ms: Some(1_700_000_000_000),
            end_time_ms: None,
            failure: None,
            parallelism: Some(4),
            slots_wanted: None,
            autoscaler_decisions: Vec::new(),
        }
    }

    #[test]
    fn a_running_job_is_ready_and_stable() {
        let s = compute(&job(), &Observed::Job(running("RUNNING")), at(100));
        let js = s.job_status.as_ref().unwrap();
        assert_eq!(js.state, "RUNNING");
        assert_eq!(js.job_id.as_deref(), Some("j1"));
        assert_eq!(js.start_time.as_deref(), Some("1700000000000"));
        assert_eq!(s.lifecycle_state.as_deref(), Some("STABLE"));
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.task_managers, Some(2));
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.conditions[0].reason, "JobRunning");
        assert!(
            s.task_manager_selector
                .unwrap()
                .contains("app.kubernetes.io/component=taskmanager")
        );
    }

    #[test]
    fn an_invalid_spec_is_not_ready_with_the_field_in_the_message() {
        let msg = "invalid manifest: spec.taskManager.replicas: expected at least 1".to_string();
        let s = compute(&job(), &Observed::InvalidSpec(msg.clone()), at(100));
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "InvalidSpec");
        assert_eq!(s.conditions[0].message, msg);
        assert_eq!(s.error, Some(msg));
        assert_eq!(s.lifecycle_state.as_deref(), Some("FAILED"));
    }

    #[test]
    fn a_failed_job_carries_its_cause() {
        let mut j = running("FAILED");
        j.failure = Some("cannot open /data/in.txt".into());
        let s = compute(&job(), &Observed::Job(j), at(100));
        assert_eq!(s.lifecycle_state.as_deref(), Some("FAILED"));
        assert_eq!(s.error.as_deref(), Some("cannot open /data/in.txt"));
        assert!(s.conditions[0].message.contains("cannot open /data/in.txt"));
    }

    #[test]
    fn suspended_reports_zero_taskmanagers_and_keeps_the_job_id() {
        let mut j = job();
        j.spec.job.state = DesiredState::Suspended;
        let s = compute(
            &j,
            &Observed::Suspended {
                cancelled: Some(running("CANCELED")),
            },
            at(100),
        );
        assert_eq!(s.job_status.as_ref().unwrap().state, "SUSPENDED");
        assert_eq!(s.job_status.as_ref().unwrap().job_id.as_deref(), Some("j1"));
        assert_eq!(s.task_managers, Some(0));
        assert_eq!(s.lifecycle_state.as_deref(), Some("SUSPENDED"));
    }

    #[test]
    fn a_parallelism_above_replicas_times_slots_is_a_condition_naming_the_fields() {
        let mut j = job();
        j.spec.job.parallelism = floe_manifest::Parallelism::Fixed(8);
        j.spec.task_manager.replicas = 1;
        j.spec.task_manager.slots = 2;
        let s = compute(&j, &Observed::NoJob, at(100));
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == SLOTS_SUFFICIENT)
            .expect("condition");
        assert_eq!(c.status, "False");
        assert_eq!(c.reason, "InsufficientSlots");
        assert_eq!(
            c.message,
            "parallelism 8 needs 8 slots but spec.taskManager offers 1 x 2 = 2: raise \
             spec.taskManager.replicas or spec.taskManager.slots, or lower spec.job.parallelism"
        );
        // Worth an event the first time only.
        assert_eq!(
            slots_newly_insufficient(None, &s).as_deref(),
            Some(c.message.as_str())
        );
        assert_eq!(slots_newly_insufficient(Some(&s), &s), None);
        // Enough slots, `auto`, or the adaptive scheduler: no such condition.
        let fixes: [fn(&mut FlinkJob); 3] = [
            |j| j.spec.task_manager.replicas = 4,
            |j| j.spec.job.parallelism = floe_manifest::Parallelism::Auto,
            |j| {
                j.spec
                    .configuration
                    .insert("jobmanager.scheduler".into(), "adaptive".into());
            },
        ];
        for fix in fixes {
            let mut fixed = j.clone();
            fix(&mut fixed);
            let s = compute(&fixed, &Observed::NoJob, at(100));
            assert!(
                s.conditions.iter().all(|c| c.type_ != SLOTS_SUFFICIENT),
                "{:?}",
                s.conditions
            );
        }
    }

    #[test]
    fn transition_time_moves_only_when_the_condition_status_does() {
        let mut j = job();
        let first = compute(&j, &Observed::NoJob, at(100));
        assert_eq!(first.conditions[0].last_transition_time, Time(at(100)));
        j.status = Some(first);
        let still_not_ready = compute(&j, &Observed::Unreachable("x".into()), at(200));
        assert_eq!(still_not_ready.conditions[0].last_transition_time, Time(at(100)));
        j.status = Some(still_not_ready);
        let ready = compute(&j, &Observed::Job(running("RUNNING")), at(300));
        assert_eq!(ready.conditions[0].last_transition_time, Time(at(300)));
        assert_eq!(
            state_change(j.status.as_ref(), &ready).as_deref(),
            Some("job state RECONCILING -> RUNNING")
        );
        assert_eq!(state_change(Some(&ready), &ready), None);
    }
}
