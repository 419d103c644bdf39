//! Uninstalling the operator while FlinkJobs remain (issue 13, item 11). Each FlinkJob carries the
//! operator's finalizer (`floe.dev/cleanup`: its job is cancelled before it goes). With no operator
//! left to remove it, deleting such a FlinkJob, or the namespace around it, would wait forever.
//! The chart's pre-delete hook runs `floe-operator release-finalizers`: every FlinkJob loses the
//! finalizer (only it: other finalizers stay), so it can be deleted later like any object, its
//! JobManager and TaskManagers going with it through their owner references.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::controller::{FINALIZER, flinkjob_resource};

/// The finalizers `object` keeps once the operator's is released, if it has the operator's.
pub fn without_operator_finalizer(object: &DynamicObject) -> Option<Vec<String>> {
    let finalizers = object.finalizers();
    finalizers
        .iter()
        .any(|f| f == FINALIZER)
        .then(|| finalizers.iter().filter(|f| *f != FINALIZER).cloned().collect())
}

/// Removes the operator's finalizer from every FlinkJob in the cluster; the FlinkJobs released.
pub async fn release_finalizers(client: Client) -> kube::Result<Vec<String>> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &flinkjob_resource());
    let mut released = Vec::new();
    for object in all.list(&ListParams::default()).await? {
        let Some(keep) = without_operator_finalizer(&object) else {
            continue;
        };
        let namespace = object.namespace().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &flinkjob_resource());
        // The resource version makes the patch refuse a list changed meanwhile (retry, not clobber).
        let patch = serde_json::json!({
            "metadata": { "finalizers": keep, "resourceVersion": object.resource_version() }
        });
        api.patch(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        released.push(format!("{namespace}/{}", object.name_any()));
    }
    Ok(released)
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
