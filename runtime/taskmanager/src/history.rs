//! The TaskManager's side of the fault campaign's history (test-only, off unless
//! `FLOE_TESTING_HISTORY` names a directory): one JSON line per fencing fact, in the order this
//! process saw them. The campaign checks from it that no JobManager of an older leader epoch acted
//! here once a newer one had spoken: every deployment and every checkpoint-completion delivered to
//! a task came from the newest epoch seen, for a task that epoch deployed.
//!
//! Lines: `{"t": unix-nanos, "event": "epoch", "epoch": E}` (a newer JobManager spoke),
//! `{"event": "refused", "epoch": e, "newest": E}` (a fenced JobManager's call or answer),
//! `{"event": "deploy" | "commit", "call_epoch": E, "attempt": a}` (acts of the JobManager of
//! epoch E on execution attempt a).

use std::io::Write;
use std::sync::{Mutex, MutexGuard};

/// Environment variable naming the directory the history files go to.
pub const HISTORY_DIR_ENV: &str = "FLOE_TESTING_HISTORY";

/// The history file, if any. Its lock also orders the fence: admissions and the acts they let
/// through are recorded as they happened (see [`crate::TaskManager::admit_then`]).
#[derive(Debug, Default)]
pub(crate) struct History {
    file: Mutex<Option<std::fs::File>>,
}

/// The history, locked.
pub(crate) struct HistoryGuard<'a>(MutexGuard<'a, Option<std::fs::File>>);

impl History {
    /// `{dir}/{taskmanager}-{instance}.jsonl` when [`HISTORY_DIR_ENV`] is set.
    pub(crate) fn from_env(taskmanager: &str, instance: &str) -> History {
        let Some(dir) = std::env::var_os(HISTORY_DIR_ENV) else {
            return History::default();
        };
        let path = std::path::Path::new(&dir).join(format!("{taskmanager}-{instance}.jsonl"));
        let file = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(&path));
        match file {
            Ok(f) => History {
                file: Mutex::new(Some(f)),
            },
            Err(e) => {
                tracing::warn!("history file {}: {e}", path.display());
                History::default()
            }
        }
    }

    pub(crate) fn lock(&self) -> HistoryGuard<'_> {
        HistoryGuard(crate::lock(&self.file))
    }
}

impl HistoryGuard<'_> {
    pub(crate) fn record(&mut self, event: &str, fields: serde_json::Value) {
        let Some(file) = self.0.as_mut() else { return };
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut line = serde_json::json!({"t": t.to_string(), "event": event});
        if let (Some(line), serde_json::Value::Object(fields)) = (line.as_object_mut(), fields) {
            line.extend(fields);
        }
        let _ = writeln!(file, "{line}");
    }
}
