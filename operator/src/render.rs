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
    let replicas = resources::Replicas {
        jobmanagers: status::jobmanager_replicas(job, &observed, now.as_millisecond()),
        taskmanagers: status::taskmanager_replicas(job, &observed),
    };
    (status, resources::desired_with(&deploying, defaults, replicas))
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
            let mut docs = vec![
                serde_yaml::to_string(&desired.config_map),
                serde_yaml::to_string(&desired.jobmanager_service),
            ];
            if let Some(policy) = &desired.network_policy {
                docs.push(serde_yaml::to_string(policy));
            }
            docs.push(serde_yaml::to_string(&desired.jobmanager));
            docs.push(serde_yaml::to_string(&desired.taskmanager));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every FlinkJob in `examples/kubernetes/` is one a cluster takes (issue 13, item 1: the
    /// examples use storage every pod reaches), and renders into a NetworkPolicy and Deployments.
    #[test]
    fn every_kubernetes_example_is_valid_for_a_cluster_and_renders() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kubernetes");
        let mut flinkjobs = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in text.split("\n---\n").filter(|d| d.contains("kind: FlinkJob")) {
                let job = FlinkJob::from_yaml(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                job.validate_for_cluster()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let defaults = Defaults {
                    operator: Some(crate::resources::OperatorPods {
                        namespace: "floe-system".into(),
                        labels: [("app.kubernetes.io/name".to_string(), "floe-operator".to_string())].into(),
                    }),
                    ..Defaults::image("unused")
                };
                let objects = render_yaml(&job, &defaults, Timestamp::now(), What::Objects);
                assert_eq!(
                    objects.matches("kind: Deployment").count(),
                    2,
                    "{}",
                    path.display()
                );
                assert!(objects.contains("kind: NetworkPolicy"), "{}", path.display());
                assert!(!objects.contains("hostPath"), "{}", path.display());
                flinkjobs += 1;
            }
        }
        assert!(flinkjobs >= 2, "examples/kubernetes has FlinkJobs");
    }
}
