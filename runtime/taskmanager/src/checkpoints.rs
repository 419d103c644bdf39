//! Checkpoint upload: each snapshot a task hands over is uploaded to the job storage (keyed state
//! under `checkpoints/{job}/chk-{n}/{vertex}-{subtask}-{attempt}`, shared files under `shared/`)
//! and acknowledged to the JobManager, or the checkpoint is declined when the upload fails.

use floe_checkpoint::TaskSnapshot;
use floe_datastream::checkpoint::ChainSnapshot;
use floe_proto::v1::{self as pb};
use floe_state::SnapshotTarget;
use floe_storage::ObjectStore;
use tokio::sync::mpsc;

use crate::TaskManager;

impl TaskManager {
    /// Uploads each snapshot the task hands over and acknowledges it to the JobManager (or declines
    /// the checkpoint when the upload fails).
    pub(crate) fn spawn_uploader(
        &self,
        id: pb::ExecutionAttemptId,
        storage: ObjectStore,
        mut snapshots: mpsc::UnboundedReceiver<ChainSnapshot>,
    ) {
        let this = self.clone();
        tokio::spawn(async move {
            let task = format!("{}-{}", id.vertex, id.subtask);
            while let Some(snapshot) = snapshots.recv().await {
                let checkpoint = snapshot.checkpoint;
                let target = SnapshotTarget {
                    store: storage.clone(),
                    // The attempt too: two lineages of the job never write the same object.
                    dir: format!("checkpoints/{}/chk-{checkpoint}/{task}-{}", id.job_id, id.attempt),
                    shared: format!("checkpoints/{}/shared/{task}", id.job_id),
                };
                let uploaded = match snapshot.keyed {
                    Some(keyed) => keyed.upload(&target).await,
                    None => Ok(TaskSnapshot::default()),
                };
                let mut jobmanager = this.inner.jobmanager.clone();
                let sent = match uploaded {
                    Ok(mut task_snapshot) => {
                        task_snapshot.position = snapshot.source;
                        task_snapshot.sink = snapshot.sink;
                        task_snapshot.broadcast = snapshot.broadcast;
                        task_snapshot.in_flight = snapshot.in_flight;
                        jobmanager
                            .acknowledge_checkpoint(pb::AcknowledgeCheckpointRequest {
                                id: Some(id.clone()),
                                checkpoint,
                                snapshot_json: serde_json::to_string(&task_snapshot).unwrap_or_default(),
                                taskmanager_id: this.inner.id.clone(),
                            })
                            .await
                    }
                    Err(e) => {
                        tracing::warn!(task, checkpoint, "snapshot upload failed: {e}");
                        jobmanager
                            .decline_checkpoint(pb::DeclineCheckpointRequest {
                                id: Some(id.clone()),
                                checkpoint,
                                reason: e.to_string(),
                            })
                            .await
                    }
                };
                if let Err(e) = sent {
                    tracing::warn!(
                        task,
                        checkpoint,
                        "could not reach the JobManager about a checkpoint: {e}"
                    );
                }
            }
        });
    }
}
