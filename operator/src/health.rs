//! What the operator's `/healthz` answers (issue 32, item 14): ok while its controller can watch
//! the cluster. A watch that keeps failing (RBAC taken away, the CRD deleted, an API server it
//! cannot reach) leaves the operator reconciling nothing while it looks healthy; its probe then
//! fails, so the pod is restarted and the failure shows. One failed watch is not a failure: the
//! watcher retries with a backoff of at most 30 s, so a failure that lasts shows as a streak of
//! errors. Errors of one FlinkJob's reconcile are that job's (its status says them), never the
//! operator's health. Pure: the caller passes the time.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Watch errors closer than this to each other are one streak (the watcher's retries).
pub const STREAK_GAP: Duration = Duration::from_secs(60);
/// A streak of watch errors this long makes the operator unhealthy.
pub const UNHEALTHY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct Streak {
    start: Option<Instant>,
    last: Option<(Instant, String)>,
}

/// The controller's watch errors, as `/healthz` judges them.
#[derive(Debug, Default)]
pub struct Health {
    streak: Mutex<Streak>,
}

impl Health {
    /// A watch of the controller failed at `at`.
    pub fn watch_failed(&self, at: Instant, error: String) {
        let mut s = self
            .streak
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let continues = s
            .last
            .as_ref()
            .is_some_and(|(t, _)| at.saturating_duration_since(*t) <= STREAK_GAP);
        if !continues {
            s.start = Some(at);
        }
        s.last = Some((at, error));
    }

    /// Ok, or why not: the watches have failed for [`UNHEALTHY_AFTER`] and still do at `now`.
    pub fn verdict(&self, now: Instant) -> Result<(), String> {
        let s = self
            .streak
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (&s.start, &s.last) {
            (Some(start), Some((last, error)))
                if now.saturating_duration_since(*last) <= STREAK_GAP
                    && now.saturating_duration_since(*start) >= UNHEALTHY_AFTER =>
            {
                Err(format!(
                    "the controller's watches have failed for {} s: {error}",
                    now.saturating_duration_since(*start).as_secs()
                ))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_streak_of_watch_errors_is_unhealthy_until_they_stop() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let health = Health::default();
        assert_eq!(health.verdict(s(0)), Ok(()));
        // One failed watch, retried: healthy.
        health.watch_failed(s(0), "401 Unauthorized".into());
        assert_eq!(health.verdict(s(10)), Ok(()));
        // Failing on every retry (30 s backoff) for a minute: unhealthy, saying why.
        health.watch_failed(s(30), "403 Forbidden: flinkjobs is forbidden".into());
        health.watch_failed(s(60), "403 Forbidden: flinkjobs is forbidden".into());
        let why = health.verdict(s(61)).unwrap_err();
        assert!(
            why.contains("failed for 61 s") && why.contains("flinkjobs is forbidden"),
            "{why}"
        );
        // The errors stopped (the watch is back): healthy once the last is a gap old.
        assert!(health.verdict(s(120)).is_err());
        assert_eq!(health.verdict(s(121)), Ok(()));
        // Errors far apart are separate failures, each retried: healthy.
        health.watch_failed(s(200), "timeout".into());
        health.watch_failed(s(290), "timeout".into());
        health.watch_failed(s(380), "timeout".into());
        assert_eq!(health.verdict(s(381)), Ok(()));
    }
}
