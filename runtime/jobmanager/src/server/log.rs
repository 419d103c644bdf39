//! The operation log as the JobManager uses it: attaching the log, appending events before acting on
//! them, and stopping at once when an append is refused (fenced by a newer leader).

use super::*;

impl JobManager {
    /// From now on, events are appended to `log` before they are acted on. `history`: what the log
    /// holds (the replayed events, compacted or not, and those appended since).
    pub async fn attach_log(
        &self,
        log: floe_oplog::OperationLog,
        logged_status: BTreeMap<String, String>,
        history: Vec<crate::oplog::Event>,
    ) {
        let mut guard = self.inner.oplog.lock().await;
        let state = guard.insert(LogState {
            log,
            logged_status,
            history,
        });
        // A log replayed from many entries (one written before compaction) is compacted at once.
        self.compact_log(state).await;
    }

    /// Logs every job status change not logged yet (a no-op without a log).
    pub async fn log_status_changes(&self) -> Result<()> {
        let mut guard = self.inner.oplog.lock().await;
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        let events = crate::oplog::status_events(self, &state.logged_status);
        if events.is_empty() {
            return Ok(());
        }
        self.append(state, &events).await?;
        for e in events {
            if let crate::oplog::Event::JobStatusChanged {
                job_id,
                status,
                failure,
                ..
            } = e
            {
                let logged = crate::oplog::logged_as(&status, failure.as_deref());
                state.logged_status.insert(job_id, logged);
            }
        }
        Ok(())
    }

    pub(super) async fn append(&self, state: &mut LogState, events: &[crate::oplog::Event]) -> Result<()> {
        if let Some(why) = self.fatal() {
            return Err(Error::Stopped(why));
        }
        match state.log.append(events).await {
            Ok(()) => {
                state.history.extend_from_slice(events);
                self.compact_log(state).await;
                Ok(())
            }
            Err(e) => {
                if !e.is_retryable() {
                    self.stop(e.to_string());
                }
                Err(e.into())
            }
        }
    }

    /// Compacts the log once [`crate::oplog::COMPACT_EVERY`] entries follow its last snapshot, so
    /// that it does not grow with every append and a JobManager taking over reads a snapshot and at
    /// most that many entries. The snapshot (two small objects) is written here, in turn with the
    /// appends; what it covers is deleted on a task of its own, while the job goes on. Refused like
    /// an append when a newer JobManager leads: then this one stops.
    async fn compact_log(&self, state: &mut LogState) {
        if state.log.appends_since_snapshot() < crate::oplog::COMPACT_EVERY {
            return;
        }
        let snapshot = crate::oplog::compact(&state.history);
        match state.log.compact(&snapshot).await {
            Ok(compaction) => {
                state.history = snapshot;
                tokio::spawn(async move {
                    if let Err(e) = compaction.run().await {
                        tracing::warn!(
                            "could not delete the operation log entries a snapshot covers (the next \
                             leader's compaction deletes those of the epochs before its own): {e}"
                        );
                    }
                });
            }
            Err(e) if e.is_retryable() => {
                tracing::warn!("could not compact the operation log, trying again at the next append: {e}");
            }
            Err(e) => self.stop(e.to_string()),
        }
    }

    /// Stops this JobManager when a newer one took the leadership of its operation log (a no-op
    /// without a log); returns whether it is stopped. A storage error leaves the question to the
    /// next check.
    pub async fn check_leadership(&self) -> bool {
        if self.fatal().is_some() {
            return true;
        }
        let superseded = {
            let guard = self.inner.oplog.lock().await;
            match guard.as_ref() {
                Some(state) => state.log.superseded().await,
                None => return false,
            }
        };
        match superseded {
            Ok(true) => {
                self.stop(format!(
                    "fenced: a newer JobManager took leader epoch {} of the job's operation log",
                    self.leader_epoch() + 1
                ));
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::debug!("could not check the leadership: {e}");
                false
            }
        }
    }

    /// This JobManager must not act any more (a log write was refused: a newer JobManager leads).
    /// From now on it performs no action and writes nothing; [`JobManager::fenced`] returns.
    pub(super) fn stop(&self, why: String) {
        tracing::error!("stopping: {why}");
        self.inner
            .fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        self.inner.fatal_set.notify_waiters();
    }

    /// Returns (with the reason) once this JobManager must stop: the process should exit.
    pub async fn fenced(&self) -> String {
        loop {
            // Registered before the check, so a `stop` in between is not missed.
            let notified = self.inner.fatal_set.notified();
            if let Some(why) = self.fatal() {
                return why;
            }
            notified.await;
        }
    }

    /// The leader epoch this JobManager holds (0 without an operation log).
    pub fn leader_epoch(&self) -> u64 {
        self.inner
            .leader_epoch
            .0
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Takes leader epoch `epoch` of the operation log: before any job is submitted (attempt
    /// numbers start from it) or any TaskManager is called (it is their fencing token).
    pub fn set_leader_epoch(&self, epoch: u64) {
        self.inner
            .leader_epoch
            .0
            .store(epoch, std::sync::atomic::Ordering::Release);
    }

    /// Appends events to the operation log (a no-op without one). A refused write (fenced) is
    /// remembered: [`JobManager::fatal`] then says why this JobManager must stop.
    pub async fn log(&self, events: &[crate::oplog::Event]) -> Result<()> {
        let mut guard = self.inner.oplog.lock().await;
        let Some(state) = guard.as_mut() else {
            return Ok(());
        };
        self.append(state, events).await
    }

    /// Why this JobManager must stop, if a log write was refused.
    pub fn fatal(&self) -> Option<String> {
        self.inner.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
