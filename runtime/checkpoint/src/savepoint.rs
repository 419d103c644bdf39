//! Savepoints (Flink's): a completed checkpoint copied out of the job storage into a directory of
//! its own, `{target}/savepoint-{job6}-{random}/`, with a `_metadata` of its own. Self-contained:
//! every state file the checkpoint used (its own and the shared incremental ones) is copied in,
//! and the metadata names them relative to the savepoint directory, so the savepoint outlives the
//! job's checkpoints (retention, a deleted FlinkJob) and can be moved or copied elsewhere.
//!
//! Layout: `_metadata` (a [`Savepoint`], sealed like checkpoint metadata) and one directory per
//! task, `{vertex}-{subtask}/`, holding its files under their last path component (RocksDB's
//! shared SSTs keep their instance prefix, so no two of one task's files share a name).

use std::collections::BTreeMap;

use floe_storage::{ObjectStore, envelope};
use serde::{Deserialize, Serialize};

use crate::{CompletedCheckpoint, Error, Result};

/// The name of a savepoint's metadata object.
pub const METADATA: &str = "_metadata";

const FORMAT: &str = "floe-savepoint-v1";

/// What a savepoint's `_metadata` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Savepoint {
    /// `floe-savepoint-v1`.
    pub format: String,
    /// The job it was taken of (its name in the registry, and its id).
    pub job_name: String,
    /// The checkpoint it was taken as, its files relative to the savepoint directory.
    pub checkpoint: CompletedCheckpoint,
    /// Each vertex's max parallelism (its number of key groups) when it was taken: keyed state
    /// restores only into the same number of key groups.
    pub max_parallelism: BTreeMap<String, u32>,
    /// Stopped with `drain` (Flink's `--drain`: the job's input was ended, not paused).
    #[serde(default)]
    pub drained: bool,
}

/// `vertex#subtask` -> `vertex-subtask` (a subtask is digits, so the last `-` splits it back).
fn task_dir(task: &str) -> String {
    task.replace('#', "-")
}

/// The checkpoint as the savepoint's metadata names it, and the copies that make it so:
/// (object in the job storage, object in the savepoint directory). Pure.
pub fn relocate(checkpoint: &CompletedCheckpoint) -> (CompletedCheckpoint, Vec<(String, String)>) {
    let mut copies = Vec::new();
    let mut relocated = checkpoint.clone();
    for (task, snapshot) in relocated.tasks.iter_mut() {
        for file in snapshot.files.iter_mut() {
            let name = file.rsplit('/').next().unwrap_or(file.as_str());
            let to = format!("{}/{name}", task_dir(task));
            copies.push((file.clone(), to.clone()));
            *file = to;
        }
    }
    (relocated, copies)
}

/// A savepoint directory name as Flink makes them: `savepoint-{first 6 of the job id}-{12 hex}`.
pub fn directory_name(job_id: &str, random: u64) -> String {
    let short: String = job_id.chars().take(6).collect();
    format!("savepoint-{short}-{:012x}", random & 0xffff_ffff_ffff)
}

/// Copies `checkpoint`'s files from `job_storage` into `target` (the savepoint directory) and
/// writes its metadata last (a conditional create: a directory whose `_metadata` exists is a
/// whole savepoint). Returns the savepoint's URL.
pub async fn write(
    job_storage: &ObjectStore,
    target: &ObjectStore,
    job_name: &str,
    checkpoint: &CompletedCheckpoint,
    max_parallelism: BTreeMap<String, u32>,
    drained: bool,
) -> Result<String> {
    let (relocated, copies) = relocate(checkpoint);
    // Part by part: a savepoint of gigabytes passes through the JobManager a few parts at a time.
    for (from, to) in copies {
        job_storage.copy_to(&from, target, &to).await?;
    }
    let savepoint = Savepoint {
        format: FORMAT.into(),
        job_name: job_name.into(),
        checkpoint: relocated,
        max_parallelism,
        drained,
    };
    let body = serde_json::to_vec(&savepoint).unwrap_or_default();
    target.create(METADATA, envelope::seal(&body)).await?;
    Ok(target.url().trim_end_matches('/').to_string())
}

/// The directory of a savepoint given as its directory or its `_metadata` object.
pub fn directory_of(location: &str) -> &str {
    let trimmed = location.trim_end_matches('/');
    trimmed
        .strip_suffix(METADATA)
        .map(|d| d.trim_end_matches('/'))
        .unwrap_or(trimmed)
}

/// Reads the savepoint in `directory` (its store: [`ObjectStore::open`] of [`directory_of`]).
pub async fn load(directory: &ObjectStore) -> Result<Savepoint> {
    let url = directory.url_of(METADATA);
    let bytes = match directory.get(METADATA).await {
        Ok(b) => b,
        Err(floe_storage::Error::NotFound { .. }) => {
            return Err(Error::CorruptMetadata {
                url,
                reason: "it does not exist: not a savepoint (or checkpoint) directory, or a savepoint \
                         that was never completed"
                    .into(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let savepoint: Savepoint = crate::open_metadata(&url, &bytes, "savepoint metadata")?;
    let corrupt = |reason: String| Error::CorruptMetadata {
        url: url.clone(),
        reason,
    };
    if savepoint.format != FORMAT {
        return Err(corrupt(format!(
            "format {:?}, this Floe reads {FORMAT:?}",
            savepoint.format
        )));
    }
    Ok(savepoint)
}

/// What a recovery path (`execution.state-recovery.path`) names, read: a savepoint, or a
/// retained checkpoint (`{job storage}/checkpoints/{job}/chk-{n}`, Flink restores those too: the
/// `last-state` upgrade does), as a savepoint whose files are relative to `storage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryPoint {
    pub savepoint: Savepoint,
    /// The URL its files are relative to: the savepoint's directory, or the checkpoint's job storage.
    pub storage: String,
}

/// `location`'s job storage, job id and checkpoint id when it is a checkpoint directory.
fn checkpoint_location(location: &str) -> Option<(&str, &str, u64)> {
    let (rest, chk) = location.rsplit_once('/')?;
    let id = chk.strip_prefix("chk-")?.parse().ok()?;
    let (rest, job) = rest.rsplit_once('/')?;
    let root = rest.strip_suffix("/checkpoints")?;
    Some((root, job, id))
}

/// Disposes of the savepoint at `location` (its directory or its `_metadata`; Flink's savepoint
/// disposal): everything under its directory is deleted. Refused unless the directory holds a
/// savepoint's `_metadata` that reads back, so no other directory is ever deleted, and for a
/// retained checkpoint (the job's own, which retention deletes). Returns the directory's URL.
pub async fn dispose(location: &str, conf: &BTreeMap<String, String>) -> Result<String> {
    let directory = directory_of(location);
    if checkpoint_location(directory).is_some() {
        return Err(Error::CorruptMetadata {
            url: directory.to_string(),
            reason: "a retained checkpoint, not a savepoint: its job's retention deletes it".into(),
        });
    }
    let store = ObjectStore::open(directory, conf)?;
    load(&store).await?;
    store.delete_all("").await?;
    Ok(store.url().trim_end_matches('/').to_string())
}

/// Reads the savepoint or retained checkpoint at `location` (its directory or its `_metadata`).
pub async fn load_recovery_point(location: &str, conf: &BTreeMap<String, String>) -> Result<RecoveryPoint> {
    let directory = directory_of(location);
    if let Some((root, job, id)) = checkpoint_location(directory) {
        let store = ObjectStore::open(root, conf)?;
        let checkpoint = crate::CheckpointStore::new(store.clone()).load(job, id).await?;
        return Ok(RecoveryPoint {
            savepoint: Savepoint {
                format: FORMAT.into(),
                job_name: String::new(),
                max_parallelism: checkpoint.max_parallelism.clone(),
                checkpoint,
                drained: false,
            },
            storage: store.url().trim_end_matches('/').to_string(),
        });
    }
    let store = ObjectStore::open(directory, conf)?;
    let savepoint = load(&store).await?;
    Ok(RecoveryPoint {
        savepoint,
        storage: store.url().trim_end_matches('/').to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskSnapshot;

    fn checkpoint() -> CompletedCheckpoint {
        let snapshot = |files: &[&str]| TaskSnapshot {
            files: files.iter().map(|f| f.to_string()).collect(),
            uploaded_bytes: 1,
            state_bytes: 2,
            position: Some("line 7".into()),
            sink: None,
            broadcast: None,
            in_flight: None,
            schemas: BTreeMap::new(),
        };
        CompletedCheckpoint {
            max_parallelism: BTreeMap::new(),
            operators: BTreeMap::new(),
            job_id: "abcdef0123".into(),
            id: 7,
            triggered_ms: 1,
            completed_ms: 2,
            tasks: BTreeMap::from([
                (
                    "sum#0".to_string(),
                    snapshot(&[
                        "checkpoints/abcdef0123/chk-7/sum-0-4/MANIFEST-000005",
                        "checkpoints/abcdef0123/shared/sum-0/1a2b~000012.sst",
                    ]),
                ),
                (
                    "sum-2#1".to_string(),
                    snapshot(&["checkpoints/abcdef0123/chk-7/sum-2-1-9/keyed-state"]),
                ),
                ("source#0".to_string(), snapshot(&[])),
            ]),
        }
    }

    #[test]
    fn every_file_moves_under_its_task_and_nothing_else_changes() {
        let original = checkpoint();
        let (relocated, copies) = relocate(&original);
        assert_eq!(
            copies,
            vec![
                (
                    "checkpoints/abcdef0123/chk-7/sum-0-4/MANIFEST-000005".to_string(),
                    "sum-0/MANIFEST-000005".to_string()
                ),
                (
                    "checkpoints/abcdef0123/shared/sum-0/1a2b~000012.sst".to_string(),
                    "sum-0/1a2b~000012.sst".to_string()
                ),
                (
                    "checkpoints/abcdef0123/chk-7/sum-2-1-9/keyed-state".to_string(),
                    "sum-2-1/keyed-state".to_string()
                ),
            ]
        );
        assert_eq!(
            relocated.tasks["sum#0"].files,
            ["sum-0/MANIFEST-000005", "sum-0/1a2b~000012.sst"]
        );
        // No file of a savepoint looks like a shared one: retention never deletes it.
        assert!(
            relocated
                .tasks
                .values()
                .flat_map(|t| &t.files)
                .all(|f| !f.contains("/shared/"))
        );
        let strip = |c: &CompletedCheckpoint| {
            let mut c = c.clone();
            c.tasks.values_mut().for_each(|t| t.files.clear());
            c
        };
        assert_eq!(strip(&relocated), strip(&original));
        assert_eq!(
            directory_name("abcdef0123", u64::MAX),
            "savepoint-abcdef-ffffffffffff"
        );
        assert_eq!(
            directory_of("s3://b/sp/savepoint-x/_metadata"),
            "s3://b/sp/savepoint-x"
        );
        assert_eq!(directory_of("file:///sp/savepoint-x/"), "file:///sp/savepoint-x");
        assert_eq!(
            checkpoint_location("s3://b/ns/job/checkpoints/abc/chk-12"),
            Some(("s3://b/ns/job", "abc", 12))
        );
        assert_eq!(checkpoint_location("s3://b/sp/savepoint-x"), None);
    }

    #[tokio::test]
    async fn a_savepoint_is_whole_without_the_job_storage_and_a_missing_one_is_named() {
        let dir = std::env::temp_dir().join(format!("floe-savepoint-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let conf = BTreeMap::new();
        let jobs = ObjectStore::open(&format!("file://{}/jobs", dir.display()), &conf).unwrap();
        let original = checkpoint();
        for (file, _) in relocate(&original).1 {
            jobs.put(&file, format!("bytes of {file}")).await.unwrap();
        }
        let target_url = format!(
            "file://{}/savepoints/{}",
            dir.display(),
            directory_name("abcdef0123", 5)
        );
        let target = ObjectStore::open(&target_url, &conf).unwrap();
        let mp = BTreeMap::from([("sum".to_string(), 128)]);
        let location = write(&jobs, &target, "pipeline", &original, mp.clone(), false)
            .await
            .unwrap();
        assert_eq!(location, target_url);
        // Written once.
        let again = write(&jobs, &target, "pipeline", &original, BTreeMap::new(), false).await;
        assert!(
            matches!(
                again,
                Err(Error::Storage(floe_storage::Error::AlreadyExists { .. }))
            ),
            "{again:?}"
        );
        // The job storage goes; the savepoint, moved elsewhere, still reads whole.
        std::fs::remove_dir_all(dir.join("jobs")).unwrap();
        let moved = dir.join("moved");
        std::fs::rename(dir.join("savepoints"), &moved).unwrap();
        let at = ObjectStore::open(
            &format!("file://{}/{}", moved.display(), directory_name("abcdef0123", 5)),
            &conf,
        )
        .unwrap();
        let read = load(&at).await.unwrap();
        assert_eq!((read.checkpoint.id, read.max_parallelism), (7, mp));
        let file = &read.checkpoint.tasks["sum#0"].files[1];
        assert_eq!(
            at.get(file).await.unwrap(),
            "bytes of checkpoints/abcdef0123/shared/sum-0/1a2b~000012.sst"
        );
        let nowhere = ObjectStore::open(&format!("file://{}/nothing", dir.display()), &conf).unwrap();
        let e = load(&nowhere).await.unwrap_err().to_string();
        assert!(
            e.contains("nothing/_metadata") && e.contains("not a savepoint"),
            "{e}"
        );
        // Disposal (issue 32): a directory that holds no savepoint is refused and left whole; the
        // savepoint goes entirely, given as its `_metadata`.
        std::fs::create_dir_all(dir.join("other")).unwrap();
        std::fs::write(dir.join("other/keep"), "x").unwrap();
        let e = dispose(&format!("file://{}/other", dir.display()), &conf)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a savepoint"), "{e}");
        assert!(dir.join("other/keep").is_file());
        let e = dispose("file:///x/jobs/checkpoints/abc/chk-3", &conf)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("a retained checkpoint"), "{e}");
        let saved = moved.join(directory_name("abcdef0123", 5));
        let disposed = dispose(&format!("file://{}/_metadata", saved.display()), &conf)
            .await
            .unwrap();
        assert_eq!(disposed, format!("file://{}", saved.display()));
        let left = std::fs::read_dir(&saved).map(|d| d.count()).unwrap_or(0);
        assert_eq!(left, 0, "nothing of the savepoint is left");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
