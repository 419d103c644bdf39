//! `floe-operator render`: what a reconcile would apply for a FlinkJob, without a cluster. The
//! status the FlinkJob carries is taken as the operator's last one and its JobManager as not
//! answering yet (a reconcile right after an apply), so a manifest with `status` shows what the
//! next deployment is: its generation, the savepoint it starts from. Pure: the objects come from
//! the same functions the controller applies them with.

use floe_manifest::{FlinkJob, FlinkJobStatus};
use k8s_openapi::jiff::Timestamp;

use crate::resources::{self, Defaults, Desired};
use crate::status::{self, Observed};

/// The status a reconcile of `job` would write now, and the objects it would apply.
pub fn render(job: &FlinkJob, defaults: &Defaults, now: Timestamp) -> (FlinkJobStatus, Desired) {
    let observed = Observed::Unreachable("not asked: rendered without a cluster".into());
    let status = status::compute(job, &observed, now);
    let mut deploying = job.clone();
    deploying.spec = status::spec_to_deploy(job, &status);
    deploying.status = Some(status.clone());
    let taskmanagers = status::taskmanager_replicas(job, &observed);
    (
        status,
        resources::desired_with(&deploying, defaults, taskmanagers),
    )
}

/// `render`'s output: the JobManager's manifest alone, the status alone (JSON, to feed back as
/// the next `status:`), or every object as a YAML stream.
pub fn render_yaml(job: &FlinkJob, defaults: &Defaults, now: Timestamp, what: What) -> String {
    let (status, desired) = render(job, defaults, now);
    match what {
        What::Manifest => desired
            .config_map
            .data
            .as_ref()
            .and_then(|d| d.get(resources::MANIFEST_FILE))
            .cloned()
            .unwrap_or_default(),
        What::Status => serde_json::to_string(&status).unwrap_or_default(),
        What::Objects => {
            let docs = [
                serde_yaml::to_string(&desired.config_map),
                serde_yaml::to_string(&desired.jobmanager_service),
                serde_yaml::to_string(&desired.jobmanager),
                serde_yaml::to_string(&desired.taskmanager),
            ];
            docs.into_iter()
                .map(|d| format!("---\n{}", d.unwrap_or_default()))
                .collect()
        }
    }
}

/// What `render` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Objects,
    Manifest,
    Status,
}
