//! Savepoints through the JobManager (the REST API's `POST /jobs/{id}/savepoints` and `/stop`):
//! where a savepoint goes, and its trigger id.

use super::{JobManager, new_id, now_ms};
use crate::error::{Error, Result};
use crate::job::{SAVEPOINT_DIR_KEY, SavepointRequest, SavepointStatus};

/// Why a savepoint was refused.
#[derive(Debug)]
pub enum SavepointRefused {
    UnknownJob(String),
    /// No target directory (none given, no `state.savepoints.dir`, no job storage), or one that
    /// cannot be opened (a scheme Floe does not know).
    NoDirectory(String),
    /// The job cannot take one now (not running, no checkpoints, one in flight).
    Conflict(String),
}

impl JobManager {
    /// Asks job `job_id` for a savepoint in `target` (else `state.savepoints.dir`, else the job
    /// storage's `savepoints/`), stopping the job with it if `stop`. Returns the trigger id.
    ///
    /// The directory is a location as every location argument takes it (Flink accepts plain
    /// paths): a storage URL, or a plain path, which is a local directory (`/data/savepoints` is
    /// `file:///data/savepoints`; a relative one is taken against this process's working
    /// directory). One that cannot be opened is refused here, naming it, rather than failing the
    /// savepoint (and a stop's job over) once it is taken.
    pub fn trigger_savepoint(
        &self,
        job_id: &str,
        target: Option<&str>,
        stop: bool,
        drain: bool,
    ) -> std::result::Result<String, SavepointRefused> {
        let mut state = self.state();
        let job = state
            .jobs
            .get_mut(job_id)
            .ok_or_else(|| SavepointRefused::UnknownJob(job_id.to_string()))?;
        let conf = &job.master.args.configuration;
        let base = match target.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => t.to_string(),
            None => match (
                conf.get(SAVEPOINT_DIR_KEY),
                conf.get(floe_storage::JOB_STORAGE_KEY),
            ) {
                (Some(dir), _) => dir.clone(),
                (None, Some(storage)) => format!("{}/savepoints", storage.trim_end_matches('/')),
                (None, None) => {
                    return Err(SavepointRefused::NoDirectory(format!(
                        "no savepoint directory: give target-directory, or set {SAVEPOINT_DIR_KEY}"
                    )));
                }
            },
        };
        let base = floe_datastream::location_url(&base)
            .map_err(|e| SavepointRefused::NoDirectory(format!("savepoint directory {base:?}: {e}")))?;
        if let Err(e) = floe_storage::ObjectStore::open(&base, conf) {
            return Err(SavepointRefused::NoDirectory(format!("savepoint directory: {e}")));
        }
        let trigger = new_id(now_ms());
        let random = u64::from_str_radix(&trigger[..12], 16).unwrap_or(0);
        let directory = format!(
            "{}/{}",
            base.trim_end_matches('/'),
            floe_checkpoint::savepoint::directory_name(job_id, random)
        );
        job.master
            .request_savepoint(SavepointRequest {
                trigger: trigger.clone(),
                directory,
                stop,
                drain,
                requested_ms: now_ms(),
            })
            .map_err(SavepointRefused::Conflict)?;
        Ok(trigger)
    }

    /// Asks job `job_id` for a checkpoint now (Flink's `POST /jobs/{id}/checkpoints`); the trigger
    /// id answered. What became of it shows in `GET /jobs/{id}/checkpoints`.
    pub fn trigger_checkpoint(&self, job_id: &str) -> std::result::Result<String, SavepointRefused> {
        let mut state = self.state();
        let job = state
            .jobs
            .get_mut(job_id)
            .ok_or_else(|| SavepointRefused::UnknownJob(job_id.to_string()))?;
        job.master
            .request_checkpoint()
            .map_err(SavepointRefused::Conflict)?;
        Ok(new_id(now_ms()))
    }

    /// Disposes of the savepoint at `location` ([`floe_checkpoint::savepoint::dispose`]), opened
    /// with the configuration of the job this JobManager runs (its object store's endpoint and
    /// options). Returns the savepoint directory's URL.
    pub async fn dispose_savepoint(&self, location: &str) -> std::result::Result<String, String> {
        let conf = self
            .state()
            .jobs
            .values()
            .next()
            .map(|j| j.master.args.configuration.clone())
            .unwrap_or_default();
        let url = floe_datastream::location_url(location)
            .map_err(|e| format!("savepoint-path {location:?}: {e}"))?;
        let disposed = floe_checkpoint::savepoint::dispose(&url, &conf)
            .await
            .map_err(|e| format!("savepoint {url} not disposed of: {e}"))?;
        tracing::info!(savepoint = %disposed, "savepoint disposed of");
        Ok(disposed)
    }

    /// What became of savepoint `trigger` of job `job_id`, for a client: an outcome answered
    /// counts as fetched ([`crate::job::JobMaster::fetch_savepoint_status`]).
    pub fn savepoint_status(&self, job_id: &str, trigger: &str) -> Result<Option<SavepointStatus>> {
        let mut state = self.state();
        let job = state
            .jobs
            .get_mut(job_id)
            .ok_or_else(|| Error::UnknownJob(job_id.to_string()))?;
        Ok(job.master.fetch_savepoint_status(trigger))
    }
}
