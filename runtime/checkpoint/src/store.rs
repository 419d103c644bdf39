//! Completed checkpoints in object storage: `checkpoints/{job-id}/chk-{n}/_metadata` under the job
//! storage, written once (conditional create) when every task acknowledged. A missing `_metadata`
//! means the checkpoint never completed; a damaged one is an error naming the object, and restoring
//! falls back to the previous checkpoint where one exists.

use floe_storage::{ObjectStore, envelope};

use crate::{CompletedCheckpoint, Error, Result};

/// Where a job's checkpoints live.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    store: ObjectStore,
}

/// What [`CheckpointStore::latest`] found.
#[derive(Debug)]
pub struct Latest {
    /// The newest checkpoint whose metadata reads back whole.
    pub checkpoint: Option<CompletedCheckpoint>,
    /// Newer checkpoints passed over, with why (damaged metadata names the object).
    pub skipped: Vec<Error>,
}

fn dir(job_id: &str, id: u64) -> String {
    format!("checkpoints/{job_id}/chk-{id}")
}

/// The checkpoint id of a listed `chk-{id}/` directory name (`None`: another entry).
fn checkpoint_id(name: &str) -> Option<u64> {
    name.strip_prefix("chk-")?.strip_suffix('/')?.parse().ok()
}

impl CheckpointStore {
    /// `store` is the job storage (`{storage.url}/{namespace}/{job-name}`).
    pub fn new(store: ObjectStore) -> Self {
        CheckpointStore { store }
    }

    /// Writes a completed checkpoint's metadata; it is then the job's latest.
    pub async fn write(&self, checkpoint: &CompletedCheckpoint) -> Result<()> {
        let body = serde_json::to_vec(checkpoint).unwrap_or_default();
        let path = format!("{}/_metadata", dir(&checkpoint.job_id, checkpoint.id));
        self.store.create(&path, envelope::seal(&body)).await?;
        Ok(())
    }

    /// Reads one checkpoint's metadata.
    pub async fn load(&self, job_id: &str, id: u64) -> Result<CompletedCheckpoint> {
        let path = format!("{}/_metadata", dir(job_id, id));
        let url = self.store.url_of(&path);
        let bytes = self.store.get(&path).await?;
        let checkpoint: CompletedCheckpoint = crate::open_metadata(&url, &bytes, "checkpoint metadata")?;
        let corrupt = |reason: String| Error::CorruptMetadata {
            url: url.clone(),
            reason,
        };
        if checkpoint.id != id || checkpoint.job_id != job_id {
            return Err(corrupt(format!(
                "it describes checkpoint {} of job {}",
                checkpoint.id, checkpoint.job_id
            )));
        }
        Ok(checkpoint)
    }

    /// The newest checkpoint to restore from among `vouched`: the checkpoints the operation log
    /// records as completed. Metadata the log does not vouch for is never restored (a JobManager
    /// fenced after writing `_metadata` but before its log append was refused wrote it). A vouched
    /// checkpoint whose metadata is missing or damaged is passed over and named in
    /// [`Latest::skipped`]; an error only when checkpoints are vouched for and none reads back
    /// (starting empty would lose the job's state).
    pub async fn latest(&self, job_id: &str, vouched: &[u64]) -> Result<Latest> {
        let mut ids = vouched.to_vec();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.dedup();
        let mut skipped = Vec::new();
        for id in ids {
            match self.load(job_id, id).await {
                Ok(checkpoint) => {
                    for e in &skipped {
                        tracing::warn!(job = job_id, "restoring from checkpoint {id}, passing over: {e}");
                    }
                    return Ok(Latest {
                        checkpoint: Some(checkpoint),
                        skipped,
                    });
                }
                Err(e) => skipped.push(e),
            }
        }
        match skipped.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(Latest {
                checkpoint: None,
                skipped: Vec::new(),
            }),
        }
    }

    /// Claims checkpoint id `id` for the JobManager `holder` before its barriers go out: `false` when
    /// another JobManager claimed it first. A JobManager that took over and a fenced one that has
    /// not noticed yet count checkpoint ids independently; the claim (a conditional create) keeps
    /// them from ever using the same id, so no two lineages write into one `chk-{id}`.
    pub async fn claim(&self, job_id: &str, id: u64, holder: &str) -> Result<bool> {
        let path = format!("{}/_claim", dir(job_id, id));
        match self.store.create(&path, holder.as_bytes().to_vec()).await {
            Ok(()) => Ok(true),
            Err(floe_storage::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes every `chk-{n}` with `n < below`: what retention deletes one by one misses
    /// (an aborted checkpoint's claim and the state tasks uploaded before the abort, a delete that
    /// failed). `below` is the oldest retained checkpoint, so nothing a restore may read goes;
    /// shared state files are not under `chk-{n}` and stay. Returns the ids deleted.
    pub async fn delete_older_than(&self, job_id: &str, below: u64) -> Result<Vec<u64>> {
        self.delete_where(job_id, |id| id < below).await
    }

    /// Deletes every `chk-{n}` of the job for which `doomed(n)` holds; returns their ids.
    async fn delete_where(&self, job_id: &str, doomed: impl Fn(u64) -> bool) -> Result<Vec<u64>> {
        let mut deleted = Vec::new();
        for name in self.store.list(&format!("checkpoints/{job_id}")).await? {
            if let Some(id) = checkpoint_id(&name)
                && doomed(id)
            {
                self.delete(job_id, id).await?;
                deleted.push(id);
            }
        }
        Ok(deleted)
    }

    /// Shared state objects (`checkpoints/{job}/shared/...`, paths relative to the job storage)
    /// that no checkpoint whose metadata is in the store references and that were last written
    /// before `before`: uploads that were never acknowledged (a TaskManager that died between
    /// its upload and its acknowledgement), and acknowledged ones a JobManager that failed over
    /// forgot. Retention deletes what subsumed checkpoints referenced; nothing else ever named
    /// these.
    ///
    /// `before` is the trigger time of the latest completed checkpoint, less a margin for the
    /// store's clock. A live state backend names each SST file by its instance and file name and
    /// uploads it once, so an object it may still name is either in that checkpoint (its file
    /// existed at the snapshot) or was written after the trigger (a file created since, an
    /// upload for a checkpoint in flight); an instance that is gone is only named again by a
    /// restore, of a checkpoint whose metadata is here. Metadata that does not read back stops
    /// the sweep (an error): what it references is unknown.
    ///
    /// `latest` is that latest completed checkpoint, whose files are kept whatever the listing
    /// finds: the argument rests on it, and retention may delete its metadata while the sweep
    /// runs (a newer checkpoint completed meanwhile, which reuses those files).
    pub async fn unreferenced_shared(
        &self,
        latest: &CompletedCheckpoint,
        before: std::time::SystemTime,
    ) -> Result<Vec<String>> {
        let job_id = latest.job_id.as_str();
        let mut referenced: std::collections::BTreeSet<String> = latest
            .tasks
            .values()
            .flat_map(|t| t.files.iter().cloned())
            .collect();
        for name in self.store.list(&format!("checkpoints/{job_id}")).await? {
            let Some(id) = checkpoint_id(&name) else {
                continue;
            };
            match self.load(job_id, id).await {
                Ok(checkpoint) => {
                    referenced.extend(checkpoint.tasks.into_values().flat_map(|t| t.files));
                }
                // Never completed, or deleted meanwhile by retention (what a newer checkpoint
                // may still use of it is in `latest`).
                Err(Error::Storage(floe_storage::Error::NotFound { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        let shared = format!("checkpoints/{job_id}/shared");
        Ok(self
            .store
            .list_all_with_times(&shared)
            .await?
            .into_iter()
            .filter(|(_, written)| written.is_some_and(|w| w < before))
            .map(|(name, _)| format!("{shared}/{name}"))
            .filter(|path| !referenced.contains(path))
            .collect())
    }

    /// The final sweep of a job that ended: deletes every `chk-{n}` that is not in `retained` (an
    /// aborted checkpoint's claim and uploads, one retention missed) and every shared state object
    /// no retained checkpoint references. No time margin is needed, unlike
    /// [`CheckpointStore::unreferenced_shared`]: an ended job's tasks upload nothing more, and
    /// only a restore of a retained checkpoint names its files again. Returns the checkpoint ids
    /// and the number of shared objects deleted.
    pub async fn sweep_ended(
        &self,
        job_id: &str,
        retained: &[std::sync::Arc<CompletedCheckpoint>],
    ) -> Result<(Vec<u64>, usize)> {
        let kept: std::collections::BTreeSet<u64> = retained.iter().map(|c| c.id).collect();
        let referenced: std::collections::BTreeSet<&str> = retained
            .iter()
            .flat_map(|c| c.tasks.values())
            .flat_map(|t| t.files.iter().map(String::as_str))
            .collect();
        let deleted = self.delete_where(job_id, |id| !kept.contains(&id)).await?;
        let shared = format!("checkpoints/{job_id}/shared");
        let doomed: Vec<String> = self
            .store
            .list_all_with_times(&shared)
            .await?
            .into_iter()
            .map(|(name, _)| format!("{shared}/{name}"))
            .filter(|path| !referenced.contains(path.as_str()))
            .collect();
        if !doomed.is_empty() {
            self.store.delete_many(&doomed).await?;
        }
        Ok((deleted, doomed.len()))
    }

    /// Deletes a checkpoint that fell out of retention.
    pub async fn delete(&self, job_id: &str, id: u64) -> Result<()> {
        self.store.delete_all(&dir(job_id, id)).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::TaskSnapshot;

    fn checkpoint(id: u64) -> CompletedCheckpoint {
        CompletedCheckpoint {
            max_parallelism: BTreeMap::new(),
            operators: BTreeMap::new(),
            job_id: "job1".into(),
            id,
            triggered_ms: id * 1000,
            completed_ms: id * 1000 + 50,
            tasks: BTreeMap::from([(
                "count#0".to_string(),
                TaskSnapshot {
                    files: vec![format!("chk-{id}/count-0.state")],
                    uploaded_bytes: 100 * id,
                    state_bytes: 1000,
                    position: Some(format!("line {id}")),
                    sink: None,
                    broadcast: None,
                    in_flight: None,
                    schemas: BTreeMap::new(),
                },
            )]),
        }
    }

    fn store(name: &str) -> (CheckpointStore, ObjectStore, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("floe-checkpoint-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let objects = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new())
            .unwrap()
            .scoped("default/job");
        (CheckpointStore::new(objects.clone()), objects, dir)
    }

    #[tokio::test]
    async fn the_latest_vouched_readable_checkpoint_is_restored_and_damage_is_named() {
        let (checkpoints, objects, dir) = store("latest");
        assert!(
            checkpoints
                .latest("job1", &[])
                .await
                .unwrap()
                .checkpoint
                .is_none()
        );
        for id in 1..=4 {
            checkpoints.write(&checkpoint(id)).await.unwrap();
        }
        // Written once: a second write of the same checkpoint is refused.
        assert!(checkpoints.write(&checkpoint(3)).await.is_err());
        // 4's metadata was written, but the log never recorded it complete (its JobManager was
        // fenced before the append): never restored. 5 started but never completed.
        objects
            .put("checkpoints/job1/chk-5/count-0.state", "partial")
            .await
            .unwrap();
        let vouched = [1, 2, 3];
        let latest = checkpoints.latest("job1", &vouched).await.unwrap();
        assert_eq!(latest.checkpoint, Some(checkpoint(3)));
        assert!(latest.skipped.is_empty());
        assert!(
            checkpoints
                .latest("job1", &[])
                .await
                .unwrap()
                .checkpoint
                .is_none()
        );

        // Truncate 3's metadata: 2 is restored, and the damage is reported naming the object.
        let meta = "checkpoints/job1/chk-3/_metadata";
        let whole = objects.get(meta).await.unwrap();
        objects.put(meta, whole.slice(..whole.len() - 5)).await.unwrap();
        let latest = checkpoints.latest("job1", &vouched).await.unwrap();
        assert_eq!(latest.checkpoint.map(|c| c.id), Some(2));
        let e = latest.skipped[0].to_string();
        assert!(
            e.starts_with(&format!(
                "checkpoint metadata {} is corrupt: truncated",
                objects.url_of(meta)
            )),
            "{e}"
        );

        // Retention deletes the oldest.
        checkpoints.delete("job1", 1).await.unwrap();
        assert!(matches!(
            checkpoints.load("job1", 1).await,
            Err(Error::Storage(floe_storage::Error::NotFound { .. }))
        ));

        // Nothing vouched for reads back: an error naming the damaged object rather than a silent
        // fresh start (4 is readable but was never vouched for).
        checkpoints.delete("job1", 2).await.unwrap();
        let e = checkpoints
            .latest("job1", &vouched)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("chk-3/_metadata") && e.contains("corrupt"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn checkpoints_older_than_the_oldest_retained_go_with_their_claims_and_uploads() {
        let (checkpoints, objects, dir) = store("older");
        // 3 and 4 were aborted: a claim and a task's upload, no metadata.
        for id in [3, 4] {
            assert!(checkpoints.claim("job1", id, "epoch 1").await.unwrap());
            objects
                .put(&format!("checkpoints/job1/chk-{id}/0-0-1"), b"state".to_vec())
                .await
                .unwrap();
        }
        objects
            .put("checkpoints/job1/shared/0-0/1.sst", b"sst".to_vec())
            .await
            .unwrap();
        for id in [5, 6] {
            checkpoints.write(&checkpoint(id)).await.unwrap();
        }
        assert_eq!(
            checkpoints.delete_older_than("job1", 5).await.unwrap(),
            vec![3, 4]
        );
        assert_eq!(
            objects.list("checkpoints/job1").await.unwrap(),
            vec!["chk-5/", "chk-6/", "shared/"]
        );
        assert_eq!(checkpoints.load("job1", 5).await.unwrap().id, 5);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Issue 31, item 11: shared objects that no checkpoint in the store references are swept
    /// once they are older than the cutoff: an upload never acknowledged, a file of a checkpoint
    /// whose metadata is gone. Never one a checkpoint references, nor a recent upload (a
    /// checkpoint in flight), nor anything when metadata is damaged.
    #[tokio::test]
    async fn the_sweep_finds_old_shared_objects_no_checkpoint_references() {
        let (checkpoints, objects, dir) = store("sweep");
        let referenced = "checkpoints/job1/shared/0-0/i1~1.sst";
        let mut c = checkpoint(5);
        c.tasks
            .get_mut("count#0")
            .unwrap()
            .files
            .push(referenced.to_string());
        checkpoints.write(&c).await.unwrap();
        // The latest completed checkpoint, whose metadata retention deleted during the sweep.
        let latest_file = "checkpoints/job1/shared/0-0/i1~4.sst";
        let mut latest = checkpoint(8);
        latest
            .tasks
            .get_mut("count#0")
            .unwrap()
            .files
            .push(latest_file.to_string());
        // 6 never completed: its upload has no metadata naming it.
        let orphan = "checkpoints/job1/shared/0-0/i1~2.sst";
        let dead = "checkpoints/job1/shared/1-0/i0~7.sst";
        let recent = "checkpoints/job1/shared/0-0/i1~3.sst";
        for path in [referenced, orphan, dead, recent, latest_file] {
            objects.put(path, b"sst".to_vec()).await.unwrap();
        }
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for path in [referenced, orphan, dead, latest_file] {
            std::fs::File::options()
                .write(true)
                .open(dir.join("default/job").join(path))
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        let cutoff = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        assert_eq!(
            checkpoints.unreferenced_shared(&latest, cutoff).await.unwrap(),
            vec![orphan.to_string(), dead.to_string()]
        );
        // Damaged metadata: nothing is known to be unreferenced.
        let meta = "checkpoints/job1/chk-5/_metadata";
        let whole = objects.get(meta).await.unwrap();
        objects.put(meta, whole.slice(..whole.len() - 5)).await.unwrap();
        assert!(checkpoints.unreferenced_shared(&latest, cutoff).await.is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Issue 31, item 11: when a job ends, its storage keeps exactly its retained checkpoints:
    /// an aborted checkpoint's directory, a checkpoint retention missed and shared uploads never
    /// acknowledged go, however recent; what a retained checkpoint references stays.
    #[tokio::test]
    async fn the_sweep_of_an_ended_job_keeps_exactly_the_retained_checkpoints() {
        let (checkpoints, objects, dir) = store("ended");
        let mut kept = Vec::new();
        for id in [4, 5] {
            let mut c = checkpoint(id);
            c.tasks
                .get_mut("count#0")
                .unwrap()
                .files
                .push(format!("checkpoints/job1/shared/0-0/i1~{id}.sst"));
            checkpoints.write(&c).await.unwrap();
            kept.push(std::sync::Arc::new(c));
        }
        // 3 fell out of retention but its delete failed; 6 was aborted (a claim and an upload).
        checkpoints.write(&checkpoint(3)).await.unwrap();
        assert!(checkpoints.claim("job1", 6, "epoch 1").await.unwrap());
        objects
            .put("checkpoints/job1/chk-6/0-0-1", b"state".to_vec())
            .await
            .unwrap();
        for path in [
            "checkpoints/job1/shared/0-0/i1~4.sst",
            "checkpoints/job1/shared/0-0/i1~5.sst",
            "checkpoints/job1/shared/0-0/i1~6.sst",
            "checkpoints/job1/shared/1-0/i0~2.sst",
        ] {
            objects.put(path, b"sst".to_vec()).await.unwrap();
        }
        let (deleted, swept) = checkpoints.sweep_ended("job1", &kept).await.unwrap();
        assert_eq!((deleted, swept), (vec![3, 6], 2));
        assert_eq!(
            objects.list("checkpoints/job1").await.unwrap(),
            vec!["chk-4/", "chk-5/", "shared/"]
        );
        let mut shared: Vec<String> = objects
            .list_all_with_times("checkpoints/job1/shared")
            .await
            .unwrap()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        shared.sort();
        assert_eq!(shared, vec!["0-0/i1~4.sst", "0-0/i1~5.sst"]);
        for c in &kept {
            assert_eq!(checkpoints.load("job1", c.id).await.unwrap(), **c);
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_checkpoint_id_is_claimed_by_one_jobmanager_only() {
        let (checkpoints, _, dir) = store("claim");
        assert!(checkpoints.claim("job1", 7, "epoch 2").await.unwrap());
        assert!(
            !checkpoints.claim("job1", 7, "epoch 1").await.unwrap(),
            "a fenced JobManager counting on its own never reuses the id"
        );
        assert!(checkpoints.claim("job1", 8, "epoch 1").await.unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
