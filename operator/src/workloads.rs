//! Why a job's pods do not run, read from its Deployments' conditions and its pods' states (issue
//! 13, part 1, item 9): an image that cannot be pulled, a crash loop, a pod no node can take, a
//! quota or an admission webhook that refuses the pods. Without this a JobManager that never comes
//! up shows as `JobManagerUnreachable` forever. Pure: the controller lists the objects.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;

/// Container waiting reasons that mean the container will not start without a change.
const WAITING_PROBLEMS: [&str; 7] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// A reason (the condition's and the event's) and what happened, naming the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub reason: String,
    pub message: String,
}

/// The first problem among the Deployments and pods, if any: a container that will not start,
/// then a pod that cannot be scheduled, then a Deployment that cannot create its pods or stopped
/// progressing.
pub fn problem(deployments: &[Deployment], pods: &[Pod]) -> Option<Problem> {
    pods.iter()
        .find_map(container_problem)
        .or_else(|| pods.iter().find_map(scheduling_problem))
        .or_else(|| deployments.iter().find_map(deployment_problem))
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("?")
}

fn container_problem(pod: &Pod) -> Option<Problem> {
    let status = pod.status.as_ref()?;
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in containers {
        let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let Some(reason) = waiting.reason.as_deref().filter(|r| WAITING_PROBLEMS.contains(r)) else {
            continue;
        };
        let mut message = format!("pod {} container {}: {reason}", name_of(&pod.metadata), c.name);
        if let Some(m) = waiting.message.as_deref().filter(|m| !m.is_empty()) {
            message.push_str(&format!(": {m}"));
        }
        if let Some(last) = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
            message.push_str(&format!(
                " (last exit code {}{}, {} restarts)",
                last.exit_code,
                last.reason
                    .as_deref()
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default(),
                c.restart_count
            ));
        }
        return Some(Problem {
            reason: reason.to_string(),
            message,
        });
    }
    None
}

fn scheduling_problem(pod: &Pod) -> Option<Problem> {
    let condition = pod.status.as_ref()?.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
    })?;
    Some(Problem {
        reason: "Unschedulable".into(),
        message: format!(
            "pod {} cannot be scheduled: {}",
            name_of(&pod.metadata),
            condition.message.as_deref().unwrap_or("no node fits it")
        ),
    })
}

fn deployment_problem(deployment: &Deployment) -> Option<Problem> {
    let conditions = deployment.status.as_ref()?.conditions.iter().flatten();
    for c in conditions {
        let failing = match c.type_.as_str() {
            "ReplicaFailure" => c.status == "True",
            "Progressing" => c.status == "False",
            _ => false,
        };
        if failing {
            return Some(Problem {
                reason: c.reason.clone().unwrap_or_else(|| c.type_.clone()),
                message: format!(
                    "Deployment {}: {}",
                    name_of(&deployment.metadata),
                    c.message.as_deref().unwrap_or(&c.type_)
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "wordcount-jobmanager-7d9f" },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_named_with_its_pod() {
        let p = pod(serde_json::json!({ "containerStatuses": [{
            "name": "floe", "image": "ghcr.io/floe-dev/floe-worker:0.1.0", "imageID": "", "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": "ImagePullBackOff", "message": "Back-off pulling image \"ghcr.io/floe-dev/floe-worker:0.1.0\"" } }
        }]}));
        assert_eq!(
            problem(&[], &[p]),
            Some(Problem {
                reason: "ImagePullBackOff".into(),
                message: "pod wordcount-jobmanager-7d9f container floe: ImagePullBackOff: Back-off pulling image \"ghcr.io/floe-dev/floe-worker:0.1.0\"".into()
            })
        );
    }

    #[test]
    fn a_crash_loop_says_how_the_container_last_ended() {
        let p = pod(serde_json::json!({ "containerStatuses": [{
            "name": "floe", "image": "i", "imageID": "", "ready": false, "restartCount": 4,
            "state": { "waiting": { "reason": "CrashLoopBackOff" } },
            "lastState": { "terminated": { "exitCode": 2, "reason": "Error" } }
        }]}));
        let found = problem(&[], &[p]).unwrap();
        assert_eq!(found.reason, "CrashLoopBackOff");
        assert!(
            found
                .message
                .ends_with("CrashLoopBackOff (last exit code 2, Error, 4 restarts)"),
            "{}",
            found.message
        );
    }

    #[test]
    fn a_quota_refusal_and_an_unschedulable_pod_are_named() {
        let quota: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "wordcount-taskmanager" },
            "status": { "conditions": [
                { "type": "Available", "status": "False" },
                { "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                  "message": "pods \"wordcount-taskmanager-x\" is forbidden: exceeded quota: compute, requested: cpu=2" }
            ]}
        }))
        .unwrap();
        let found = problem(std::slice::from_ref(&quota), &[]).unwrap();
        assert_eq!(found.reason, "FailedCreate");
        assert!(
            found
                .message
                .starts_with("Deployment wordcount-taskmanager: pods")
                && found.message.contains("exceeded quota")
        );
        let pending = pod(serde_json::json!({ "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient memory."
        }]}));
        let found = problem(&[quota], &[pending]).unwrap();
        assert_eq!(found.reason, "Unschedulable", "a pod's problem comes first");
        assert!(found.message.contains("3 Insufficient memory"));
        // Pods that are starting or run are no problem.
        let starting = pod(serde_json::json!({ "containerStatuses": [{
            "name": "floe", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": "ContainerCreating" } }
        }]}));
        assert_eq!(problem(&[], &[starting]), None);
    }
}
