//! The `TaskExecutor` service the JobManager calls: deploy, cancel, trigger checkpoints, notify
//! their completion, release partitions. Every call passes the leader-epoch fence first.

use floe_datastream::checkpoint::Control;
use floe_proto::fencing::epoch_of;
use floe_proto::v1::task_executor_server::TaskExecutor;
use floe_proto::v1::{self as pb};
use floe_scheduler::execution_graph::epoch_of_attempt;
use tonic::{Request, Response, Status};

use crate::tasks::key;
use crate::{TaskManager, lock};

#[tonic::async_trait]
impl TaskExecutor for TaskManager {
    async fn submit_task(&self, request: Request<pb::TaskDeployment>) -> Result<Response<pb::Ack>, Status> {
        let epoch = epoch_of(&request)?;
        let deployment = request.into_inner();
        let attempt = deployment.id.as_ref().map_or(0, |id| id.attempt);
        self.admit_then(epoch, |history| {
            history.record(
                "deploy",
                serde_json::json!({"call_epoch": epoch, "attempt": attempt.to_string()}),
            );
        })?;
        if let Some(id) = &deployment.id {
            self.admit_attempt(id)?;
        }
        self.start_task(deployment)?;
        Ok(Response::new(pb::Ack {}))
    }

    async fn cancel_task(
        &self,
        request: Request<pb::ExecutionAttemptId>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.admit_call(&request)?;
        let id = request.into_inner();
        self.note_canceled(&id);
        if let Some(canceled) = self.cancel(&id) {
            self.finish(canceled);
        }
        Ok(Response::new(pb::Ack {}))
    }

    async fn trigger_checkpoint(
        &self,
        request: Request<pb::TriggerCheckpointRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.admit_call(&request)?;
        let r = request.into_inner();
        let id =
            r.id.ok_or_else(|| Status::invalid_argument("id: missing execution attempt id"))?;
        let control = match r.stop {
            true => Control::Stop {
                checkpoint: r.checkpoint,
                drain: r.drain,
            },
            false => Control::Trigger(r.checkpoint),
        };
        let sent = lock(&self.inner.tasks)
            .get(&key(&id))
            .and_then(|t| t.control.as_ref())
            .is_some_and(|c| c.send(control).is_ok());
        if !sent {
            return Err(Status::not_found(format!(
                "no running checkpointed task {}#{} attempt {} of job {}",
                id.vertex, id.subtask, id.attempt, id.job_id
            )));
        }
        Ok(Response::new(pb::Ack {}))
    }

    async fn notify_checkpoint_complete(
        &self,
        request: Request<pb::CheckpointCompleteRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        let epoch = epoch_of(&request)?;
        let r = request.into_inner();
        // Only to the tasks this JobManager deployed: a checkpoint of epoch E covers no task of
        // an older JobManager, and such a task must not commit what it pre-committed for a
        // checkpoint that never completed (its JobManager was fenced before logging it).
        self.admit_then(epoch, |history| {
            for ((job_id, _, _, attempt), task) in lock(&self.inner.tasks).iter() {
                if *job_id == r.job_id
                    && epoch_of_attempt(*attempt) == epoch
                    && let Some(control) = &task.control
                {
                    history.record(
                        "commit",
                        serde_json::json!({
                            "call_epoch": epoch,
                            "attempt": attempt.to_string(),
                            "checkpoint": r.checkpoint,
                        }),
                    );
                    let _ = control.send(Control::Complete(r.checkpoint));
                }
            }
        })?;
        Ok(Response::new(pb::Ack {}))
    }

    /// Checkpoint aborted: every task of the job hears it; the sources among them send its
    /// cancel-checkpoint marker downstream.
    async fn notify_checkpoint_aborted(
        &self,
        request: Request<pb::CheckpointAbortedRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.admit_call(&request)?;
        let r = request.into_inner();
        for ((job_id, _, _, _), task) in lock(&self.inner.tasks).iter() {
            if *job_id == r.job_id
                && let Some(control) = &task.control
            {
                let _ = control.send(Control::Abort(r.checkpoint));
            }
        }
        Ok(Response::new(pb::Ack {}))
    }

    async fn release_partitions(
        &self,
        request: Request<pb::ReleasePartitionsRequest>,
    ) -> Result<Response<pb::Ack>, Status> {
        self.admit_call(&request)?;
        let job_id = request.into_inner().job_id;
        self.inner.shuffle.release_job(&job_id);
        lock(&self.inner.jobs).remove(&job_id);
        self.forget_attempts(&job_id);
        Ok(Response::new(pb::Ack {}))
    }
}
