//! Savepoints the operator takes of a job (the Flink Kubernetes Operator's), decided by pure
//! functions over the FlinkJob and what its JobManager says:
//!
//! - **UPGRADE**: in `upgradeMode: savepoint`, a spec change first stops the running job with a
//!   savepoint; the new deployment starts from it (`status.deployed.savepoint`, written into its
//!   JobManager's manifest as `execution.state-recovery.path`). Nothing new is applied until
//!   the savepoint completed, so the old job runs on unchanged if it fails (it is tried again).
//! - **SUSPEND**: `spec.job.state: suspended` in savepoint mode stops the job with a savepoint
//!   before the Deployments go to zero; the resume starts from it.
//! - **MANUAL**: a new `spec.job.savepointTriggerNonce` takes a savepoint; the job runs on.
//! - **PERIODIC**: every `kubernetes.operator.periodic.savepoint.interval`.
//!
//! Completed savepoints go to `status.jobStatus.savepointInfo` (the last one and a history).
//! A savepoint leaves the history when more than `kubernetes.operator.savepoint.history.max.count`
//! (10) are newer, or when it is older than `kubernetes.operator.savepoint.history.max.age`, and
//! is then disposed of through the JobManager (its files deleted), unless
//! `kubernetes.operator.savepoint.cleanup.enabled` is `false` ([`expired`]).

use floe_manifest::{
    DesiredState, FlinkJob, JobStatusInfo, PERIODIC_SAVEPOINT_INTERVAL_KEY, SAVEPOINT_CLEANUP_KEY,
    SAVEPOINT_DISPOSE_ON_DELETE_KEY, SAVEPOINT_HISTORY_MAX_AGE_KEY, SAVEPOINT_HISTORY_MAX_COUNT_KEY,
    SavepointInfo, SavepointRecord, UpgradeMode,
};

use crate::resources;
use crate::status::{Observed, lifecycle};

/// Why a savepoint is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerType {
    Upgrade,
    Suspend,
    Manual,
    Periodic,
}

impl TriggerType {
    pub fn name(self) -> &'static str {
        match self {
            TriggerType::Upgrade => "UPGRADE",
            TriggerType::Suspend => "SUSPEND",
            TriggerType::Manual => "MANUAL",
            TriggerType::Periodic => "PERIODIC",
        }
    }

    fn parse(name: &str) -> Option<TriggerType> {
        [
            TriggerType::Upgrade,
            TriggerType::Suspend,
            TriggerType::Manual,
            TriggerType::Periodic,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }

    /// An upgrade's and a suspend's savepoint stop the job; the others let it run on.
    pub fn stops(self) -> bool {
        matches!(self, TriggerType::Upgrade | TriggerType::Suspend)
    }
}

/// What to do about savepoints in this reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing: reconcile as usual.
    None,
    /// Trigger a savepoint of the running job.
    Trigger { job_id: String, kind: TriggerType },
    /// Ask how the savepoint in flight stands.
    Poll {
        job_id: String,
        trigger: String,
        kind: TriggerType,
    },
    /// The savepoint in flight had no answer within [`TRIGGER_TIMEOUT_MS`]: it failed.
    Expired {
        job_id: String,
        trigger: String,
        kind: TriggerType,
    },
}

fn job_status(job: &FlinkJob) -> Option<&JobStatusInfo> {
    job.status.as_ref()?.job_status.as_ref()
}

fn info(job: &FlinkJob) -> SavepointInfo {
    job_status(job)
        .and_then(|j| j.savepoint_info.clone())
        .unwrap_or_default()
}

/// Whether this reconcile would deploy a new generation (a changed spec) of a deployed job.
pub fn upgrading(job: &FlinkJob) -> bool {
    let Some(status) = &job.status else {
        return false;
    };
    job.spec.job.state == DesiredState::Running
        && status.lifecycle_state.as_deref() != Some(lifecycle::SUSPENDED)
        && status
            .deployed
            .as_ref()
            .is_some_and(|d| Some(d.generation) != resources::deployed_generation(job))
}

/// Whether the spec asks for a stop with a savepoint: an upgrade or a suspend in savepoint mode.
pub fn stop_wanted(job: &FlinkJob) -> bool {
    let suspending = job.spec.job.state == DesiredState::Suspended
        && job.status.as_ref().and_then(|s| s.lifecycle_state.as_deref()) != Some(lifecycle::SUSPENDED);
    job.spec.job.upgrade_mode == UpgradeMode::Savepoint && (suspending || upgrading(job))
}

/// How long the operator waits for a savepoint it triggered before it gives up on it (the
/// JobManager fails one whose checkpoint does not complete within its 10 min timeout).
pub const TRIGGER_TIMEOUT_MS: i64 = 15 * 60_000;

/// The savepoint step for `job` after observing `observed` at `now_ms`.
pub fn next_step(job: &FlinkJob, observed: &Observed, now_ms: i64) -> Step {
    let info = info(job);
    if let (Some(trigger), Some(kind)) = (
        info.trigger_id.clone(),
        info.trigger_type.as_deref().and_then(TriggerType::parse),
    ) && let Some(job_id) = job_status(job).and_then(|j| j.job_id.clone())
    {
        let age = now_ms.saturating_sub(info.trigger_timestamp.unwrap_or(now_ms));
        if age > TRIGGER_TIMEOUT_MS {
            return Step::Expired {
                job_id,
                trigger,
                kind,
            };
        }
        return Step::Poll {
            job_id,
            trigger,
            kind,
        };
    }
    let Observed::Job(running) = observed else {
        return Step::None;
    };
    if running.state != "RUNNING" {
        return Step::None;
    }
    let trigger = |kind| Step::Trigger {
        job_id: running.id.clone(),
        kind,
    };
    if stop_wanted(job) {
        let kind = match job.spec.job.state {
            DesiredState::Suspended => TriggerType::Suspend,
            DesiredState::Running => TriggerType::Upgrade,
        };
        return trigger(kind);
    }
    if job.spec.job.state == DesiredState::Suspended {
        return Step::None;
    }
    if let Some(nonce) = job.spec.job.savepoint_trigger_nonce
        && info.trigger_nonce != Some(nonce)
    {
        return trigger(TriggerType::Manual);
    }
    let interval = job
        .spec
        .configuration
        .get(PERIODIC_SAVEPOINT_INTERVAL_KEY)
        .and_then(|v| floe_manifest::parse_duration(v))
        .filter(|d| !d.is_zero());
    if let Some(interval) = interval {
        let since = info
            .last_periodic_savepoint_timestamp
            .or(running.start_time_ms.map(|t| t as i64))
            .unwrap_or(now_ms);
        if now_ms.saturating_sub(since) >= interval.as_millis() as i64 {
            return trigger(TriggerType::Periodic);
        }
    }
    Step::None
}

fn update(status: &mut JobStatusInfo, f: impl FnOnce(&mut SavepointInfo)) {
    let mut info = status.savepoint_info.take().unwrap_or_default();
    f(&mut info);
    status.savepoint_info = Some(info);
}

/// A savepoint was triggered: it is the one in flight.
pub fn triggered(
    job: &FlinkJob,
    status: &mut JobStatusInfo,
    trigger: String,
    kind: TriggerType,
    now_ms: i64,
) {
    attempted(job, status, kind, now_ms);
    update(status, |info| {
        info.trigger_id = Some(trigger);
        info.trigger_timestamp = Some(now_ms);
        info.trigger_type = Some(kind.name().into());
    });
}

/// A savepoint was tried, triggered or not: a nonce is acted on once, and the next periodic one
/// is an interval later (Flink's operator does not retry either).
pub fn attempted(job: &FlinkJob, status: &mut JobStatusInfo, kind: TriggerType, now_ms: i64) {
    update(status, |info| match kind {
        TriggerType::Manual => info.trigger_nonce = job.spec.job.savepoint_trigger_nonce,
        TriggerType::Periodic => info.last_periodic_savepoint_timestamp = Some(now_ms),
        TriggerType::Upgrade | TriggerType::Suspend => {}
    });
}

/// The savepoint in flight completed at `location`: the last one, in the history; a stop's is
/// what the next deployment starts from.
pub fn completed(status: &mut JobStatusInfo, kind: TriggerType, location: String, now_ms: i64) {
    if kind.stops() {
        status.upgrade_savepoint_path = Some(location.clone());
    }
    update(status, |info| {
        let record = SavepointRecord {
            time_stamp: now_ms,
            location,
            trigger_type: kind.name().into(),
            trigger_nonce: (kind == TriggerType::Manual)
                .then_some(info.trigger_nonce)
                .flatten(),
        };
        info.trigger_id = None;
        info.trigger_timestamp = None;
        info.trigger_type = None;
        info.savepoint_history.push(record.clone());
        info.last_savepoint = Some(record);
    });
}

/// How many savepoints the history keeps.
fn history_max_count(job: &FlinkJob) -> usize {
    job.spec
        .configuration
        .get(SAVEPOINT_HISTORY_MAX_COUNT_KEY)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(10)
        .max(1)
}

/// Whether a savepoint leaving the history is disposed of (Flink's default) or only forgotten.
pub fn cleanup_enabled(job: &FlinkJob) -> bool {
    job.spec
        .configuration
        .get(SAVEPOINT_CLEANUP_KEY)
        .map(|v| v.trim())
        != Some("false")
}

/// The savepoints (locations) that leave the history at `now_ms`: the oldest beyond
/// `...history.max.count`, and those older than `...history.max.age`. Never the last savepoint,
/// nor one a deployment starts or is about to start from (Flink's operator keeps those too).
pub fn expired(job: &FlinkJob, now_ms: i64) -> Vec<String> {
    let Some(status) = job_status(job) else {
        return Vec::new();
    };
    let info = info(job);
    let max_age_ms = job
        .spec
        .configuration
        .get(SAVEPOINT_HISTORY_MAX_AGE_KEY)
        .and_then(|v| floe_manifest::parse_duration(v))
        .map(|d| d.as_millis() as i64);
    let in_use: Vec<&str> = [
        info.last_savepoint.as_ref().map(|r| r.location.as_str()),
        status.upgrade_savepoint_path.as_deref(),
        job.status
            .as_ref()
            .and_then(|s| s.deployed.as_ref())
            .and_then(|d| d.savepoint.as_deref()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let history = &info.savepoint_history;
    let excess = history.len().saturating_sub(history_max_count(job));
    history
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            *i < excess || max_age_ms.is_some_and(|age| now_ms.saturating_sub(r.time_stamp) > age)
        })
        .map(|(_, r)| r.location.clone())
        .filter(|l| !in_use.contains(&l.as_str()))
        .collect()
}

/// The `checkpointTriggerNonce` to act on now: a new one, while the job runs (acted on once,
/// triggered or not, as the savepoint nonce).
pub fn checkpoint_nonce_due(job: &FlinkJob, observed: &Observed) -> Option<(String, i64)> {
    let nonce = job.spec.job.checkpoint_trigger_nonce?;
    let Observed::Job(running) = observed else {
        return None;
    };
    let acted = job_status(job)
        .and_then(|s| s.checkpoint_info.as_ref())
        .and_then(|c| c.trigger_nonce);
    (running.state == "RUNNING" && acted != Some(nonce)).then(|| (running.id.clone(), nonce))
}

/// The savepoints to dispose of when the FlinkJob is deleted: every one in its history and the
/// last one, with `kubernetes.operator.savepoint.dispose-on-delete: "true"`; none otherwise
/// (Flink's default keeps them).
pub fn on_delete(job: &FlinkJob) -> Vec<String> {
    if job
        .spec
        .configuration
        .get(SAVEPOINT_DISPOSE_ON_DELETE_KEY)
        .map(|v| v.trim())
        != Some("true")
    {
        return Vec::new();
    }
    let info = info(job);
    let mut all: Vec<String> = info
        .savepoint_history
        .iter()
        .chain(info.last_savepoint.as_ref())
        .map(|r| r.location.clone())
        .collect();
    all.sort();
    all.dedup();
    all
}

/// `location` left the history (disposed of, or forgotten without cleanup).
pub fn forget(status: &mut JobStatusInfo, location: &str) {
    update(status, |info| {
        info.savepoint_history.retain(|r| r.location != location)
    });
}

/// The savepoint in flight failed (or could not be triggered): none is in flight.
pub fn failed(status: &mut JobStatusInfo) {
    update(status, |info| {
        info.trigger_id = None;
        info.trigger_timestamp = None;
        info.trigger_type = None;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_manifest::FlinkJobStatus;

    fn record(t: i64, location: &str) -> SavepointRecord {
        SavepointRecord {
            time_stamp: t,
            location: location.into(),
            trigger_type: "PERIODIC".into(),
            trigger_nonce: None,
        }
    }

    /// Issue 32 (parity): the history keeps the newest `max.count` and those younger than
    /// `max.age`; the last savepoint and one a deployment starts from never leave it.
    #[test]
    fn the_history_keeps_the_newest_and_never_what_is_in_use() {
        let mut job = crate::resources::testing::example();
        job.spec
            .configuration
            .insert(SAVEPOINT_HISTORY_MAX_COUNT_KEY.into(), "2".into());
        let history: Vec<SavepointRecord> = (1..=5).map(|i| record(i * 1_000, &format!("sp-{i}"))).collect();
        let status = JobStatusInfo {
            savepoint_info: Some(SavepointInfo {
                savepoint_history: history.clone(),
                last_savepoint: Some(history[4].clone()),
                ..SavepointInfo::default()
            }),
            upgrade_savepoint_path: Some("sp-1".into()),
            ..JobStatusInfo::default()
        };
        job.status = Some(FlinkJobStatus {
            job_status: Some(status),
            ..FlinkJobStatus::default()
        });
        // sp-1 is what the next deployment starts from; sp-4 and sp-5 are the newest two.
        assert_eq!(expired(&job, 6_000), ["sp-2", "sp-3"]);
        job.spec
            .configuration
            .insert(SAVEPOINT_HISTORY_MAX_AGE_KEY.into(), "1 s".into());
        // Older than 1 s at 5.5 s: sp-1 to sp-4 (sp-1 in use); sp-5 is the last savepoint.
        assert_eq!(expired(&job, 5_500), ["sp-2", "sp-3", "sp-4"]);
        let mut status = job.status.clone().unwrap().job_status.unwrap();
        forget(&mut status, "sp-2");
        let left: Vec<String> = status
            .savepoint_info
            .unwrap()
            .savepoint_history
            .into_iter()
            .map(|r| r.location)
            .collect();
        assert_eq!(left, ["sp-1", "sp-3", "sp-4", "sp-5"]);
        assert!(cleanup_enabled(&job));
        job.spec
            .configuration
            .insert(SAVEPOINT_CLEANUP_KEY.into(), "false".into());
        assert!(!cleanup_enabled(&job));
    }
}
