//! Uninstalling the operator while FlinkJobs remain (issue 13, item 11; issue 32, blocker 3). Each
//! FlinkJob carries the operator's finalizer (`floe.dev/cleanup`: its job is cancelled before it
//! goes). With no operator left to remove it, deleting such a FlinkJob, or the namespace around it,
//! would wait forever. The chart's pre-delete hook runs `floe-operator release-finalizers`: every
//! FlinkJob loses the finalizer (only it: other finalizers stay), so it can be deleted later like any
//! object, its JobManager and TaskManagers going with it through their owner references.
//!
//! The operator must be stopped first: while it runs, its controller adds the finalizer back to
//! every FlinkJob it sees without one, within milliseconds of the hook removing it. So the hook
//! scales the operator's Deployment to zero and waits until none of its pods is left (a terminating
//! pod still reconciles), and only then releases the finalizers, re-reading a FlinkJob and trying
//! again when its patch meets a newer version (a conflict).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::controller::{FINALIZER, flinkjob_resource};

/// How often a patch that meets a newer version of its FlinkJob is tried again.
const CONFLICT_ATTEMPTS: usize = 10;

/// Why an uninstall could not release the finalizers.
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the operator Deployment {0} has no selector labels: its pods cannot be found")]
    NoSelector(String),
    #[error(
        "the operator's pods {pods:?} were still there {waited_s} s after {deployment} was scaled to \
         0 replicas; while one runs it adds the finalizers back, so none were released"
    )]
    OperatorStillRunning {
        deployment: String,
        pods: Vec<String>,
        waited_s: u64,
    },
    #[error("FlinkJob {0} changed on every one of {1} attempts to release its finalizer")]
    KeptChanging(String, usize),
}

/// The operator's Deployment (the chart passes its name and namespace to the hook).
#[derive(Debug, Clone)]
pub struct OperatorDeployment {
    pub namespace: String,
    pub name: String,
}

/// Scales the operator's Deployment to zero and waits until none of its pods is left, polling
/// every `poll` for at most `timeout`. A Deployment that is already gone has nothing to stop.
pub async fn stop_operator(
    client: &Client,
    operator: &OperatorDeployment,
    timeout: Duration,
    poll: Duration,
) -> Result<(), UninstallError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &operator.namespace);
    let qualified = format!("{}/{}", operator.namespace, operator.name);
    let scale = serde_json::json!({ "spec": { "replicas": 0 } });
    let deployment = match deployments
        .patch(&operator.name, &PatchParams::default(), &Patch::Merge(&scale))
        .await
    {
        Ok(deployment) => deployment,
        Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let labels = deployment
        .spec
        .and_then(|s| s.selector.match_labels)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| UninstallError::NoSelector(qualified.clone()))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &operator.namespace);
    let list = ListParams::default().labels(&crate::resources::label_selector(&labels));
    let started = Instant::now();
    loop {
        let left: Vec<String> = pods.list(&list).await?.iter().map(|p| p.name_any()).collect();
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(UninstallError::OperatorStillRunning {
                deployment: qualified,
                pods: left,
                waited_s: started.elapsed().as_secs(),
            });
        }
        tokio::time::sleep(poll).await;
    }
}

/// The finalizers `object` keeps once the operator's is released, if it has the operator's.
pub fn without_operator_finalizer(object: &DynamicObject) -> Option<Vec<String>> {
    let finalizers = object.finalizers();
    finalizers
        .iter()
        .any(|f| f == FINALIZER)
        .then(|| finalizers.iter().filter(|f| *f != FINALIZER).cloned().collect())
}

/// Removes the operator's finalizer from every FlinkJob in the cluster; the FlinkJobs released.
/// Stop the operator first ([`stop_operator`]): a running one adds the finalizer back.
pub async fn release_finalizers(client: Client) -> Result<Vec<String>, UninstallError> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &flinkjob_resource());
    let mut released = Vec::new();
    for listed in all.list(&ListParams::default()).await? {
        let namespace = listed.namespace().unwrap_or_default();
        let name = listed.name_any();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &flinkjob_resource());
        let mut object = listed;
        let mut attempts = 0;
        while let Some(keep) = without_operator_finalizer(&object) {
            // The resource version makes the patch refuse a list changed meanwhile: read it again
            // and retry rather than clobber another writer's finalizers.
            let patch = serde_json::json!({
                "metadata": { "finalizers": keep, "resourceVersion": object.resource_version() }
            });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    released.push(format!("{namespace}/{name}"));
                    break;
                }
                Err(kube::Error::Api(status)) if status.is_conflict() => {
                    attempts += 1;
                    if attempts >= CONFLICT_ATTEMPTS {
                        return Err(UninstallError::KeptChanging(
                            format!("{namespace}/{name}"),
                            CONFLICT_ATTEMPTS,
                        ));
                    }
                    match api.get_opt(&name).await? {
                        Some(newer) => object = newer,
                        None => break,
                    }
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(released)
}

/// What the chart's pre-delete hook does: stops the operator (when its Deployment is named), then
/// releases every FlinkJob's finalizer.
pub async fn uninstall(
    client: Client,
    operator: Option<&OperatorDeployment>,
    timeout: Duration,
) -> Result<Vec<String>, UninstallError> {
    if let Some(operator) = operator {
        stop_operator(&client, operator, timeout, Duration::from_millis(500)).await?;
    }
    release_finalizers(client).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(finalizers: &[&str]) -> DynamicObject {
        let mut o = DynamicObject::new("wordcount", &flinkjob_resource()).within("jobs");
        o.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        o
    }

    #[test]
    fn only_the_operators_finalizer_is_released() {
        assert_eq!(
            without_operator_finalizer(&object(&[FINALIZER, "example.com/backup"])),
            Some(vec!["example.com/backup".to_string()])
        );
        assert_eq!(without_operator_finalizer(&object(&[FINALIZER])), Some(vec![]));
        assert_eq!(without_operator_finalizer(&object(&["example.com/backup"])), None);
        assert_eq!(without_operator_finalizer(&object(&[])), None);
    }
}
