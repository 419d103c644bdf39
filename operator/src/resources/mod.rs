//! The objects a FlinkJob becomes, built by pure functions from the resource alone: a ConfigMap with
//! the job's manifest (`manifest`), the JobManager Deployment and Service and the TaskManager
//! Deployment (`pods`), and a NetworkPolicy that lets only the job's own pods and the operator in
//! (`network`). Every object carries the FlinkJob as its controller owner, so deleting the FlinkJob
//! deletes them all (Kubernetes' garbage collector does it, not the operator). Golden files in
//! `operator/tests/golden` pin the output.

use std::collections::BTreeMap;

use floe_manifest::FlinkJob;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

mod manifest;
mod network;
mod pod_template;
mod pods;
#[cfg(test)]
pub(crate) mod testing;

pub use manifest::{MANIFEST_FILE, config_map, deployed_generation, manifest_yaml, spec_hash};
pub use network::{network_policy, network_policy_name, parse_labels};
pub use pod_template::MAIN_CONTAINER;
pub use pods::WORK_DIR;

/// JobManager RPC port (Flink's `jobmanager.rpc.port`).
pub const RPC_PORT: i32 = 6123;
/// JobManager REST port (Flink's `rest.port`).
pub const REST_PORT: i32 = 8081;
/// TaskManager data port (gRPC TaskExecutor and Shuffle services).
pub const TASKMANAGER_PORT: i32 = 6121;
/// A TaskManager's own `/metrics` (Flink's Prometheus reporter port).
pub const TASKMANAGER_METRICS_PORT: i32 = 9249;
/// Where the ConfigMap with the job's manifest is mounted.
pub const CONFIG_DIR: &str = "/etc/floe";
/// The label every object of a job carries; its value is the FlinkJob's name.
pub const JOB_LABEL: &str = "floe.dev/job";
pub const MANAGER: &str = "floe-operator";
/// Changes whenever the ConfigMap's content does, so pods restart on a new spec.
pub const CONFIG_HASH_ANNOTATION: &str = "floe.dev/config-hash";
/// The user the images run as (distroless "nonroot").
pub const RUN_AS_USER: i64 = 65532;

/// What the operator brings that the FlinkJob may leave out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    /// Worker image for FlinkJobs without `spec.image`.
    pub image: String,
    /// Where the operator runs, for the NetworkPolicy that lets it reach a job's REST API: its
    /// namespace and its pods' labels. `None`: no NetworkPolicy is made (the operator was started
    /// without `--network-policies`).
    pub operator: Option<OperatorPods>,
    /// Who scrapes the jobs' metrics (a Prometheus): the NetworkPolicy lets these pods reach the
    /// JobManager's REST port (its `/metrics`) and the TaskManagers' metrics port.
    pub metrics_scrapers: Option<OperatorPods>,
}

impl Defaults {
    /// The worker image, and no NetworkPolicies.
    pub fn image(image: impl Into<String>) -> Defaults {
        Defaults {
            image: image.into(),
            operator: None,
            metrics_scrapers: None,
        }
    }
}

/// Pods in a namespace, as a NetworkPolicy selects them: the operator's, a Prometheus's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorPods {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}
/// The two processes of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    JobManager,
    TaskManager,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::JobManager => "jobmanager",
            Component::TaskManager => "taskmanager",
        }
    }
}

/// Everything a FlinkJob becomes, in the order it is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub config_map: ConfigMap,
    pub jobmanager_service: Service,
    pub jobmanager: Deployment,
    pub taskmanager: Deployment,
    /// With [`Defaults::operator`]: only the job's pods and the operator reach the job's ports.
    pub network_policy: Option<NetworkPolicy>,
}

/// `<job>-jobmanager`, `<job>-taskmanager`.
pub fn object_name(job: &FlinkJob, component: Component) -> String {
    format!("{}-{}", job.name(), component.name())
}

pub fn config_map_name(job: &FlinkJob) -> String {
    format!("{}-config", job.name())
}

/// Host and port TaskManagers and the operator reach the JobManager at, inside the cluster.
pub fn jobmanager_host(job: &FlinkJob) -> String {
    let ns = job.metadata.namespace.as_deref().unwrap_or("default");
    format!("{}.{ns}.svc", object_name(job, Component::JobManager))
}

/// The selector of one component's pods (also the scale subresource's selector for TaskManagers).
pub fn selector_labels(job: &FlinkJob, component: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "floe".into()),
        ("app.kubernetes.io/instance".into(), job.name().into()),
        ("app.kubernetes.io/component".into(), component.name().into()),
        (JOB_LABEL.into(), job.name().into()),
    ])
}

/// `key=value,...` for the scale subresource's `status.taskManagerSelector`.
pub fn selector_string(job: &FlinkJob, component: Component) -> String {
    label_selector(&selector_labels(job, component))
}

/// Labels as a label selector: `key=value,...`.
pub fn label_selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn labels(job: &FlinkJob, component: Option<Component>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("app.kubernetes.io/name".into(), "floe".into()),
        ("app.kubernetes.io/instance".into(), job.name().into()),
        ("app.kubernetes.io/managed-by".into(), MANAGER.into()),
        ("app.kubernetes.io/part-of".into(), "floe".into()),
        (JOB_LABEL.into(), job.name().into()),
    ]);
    if let Some(c) = component {
        labels.insert("app.kubernetes.io/component".into(), c.name().into());
    }
    labels
}

fn owner(job: &FlinkJob) -> Vec<OwnerReference> {
    // A FlinkJob read from the API server always has a uid; one built in a test without it still gets
    // a reference naming it, which the API server would refuse rather than leave an orphan.
    let reference = job.controller_owner_ref(&()).unwrap_or_else(|| OwnerReference {
        api_version: FlinkJob::api_version(&()).into_owned(),
        kind: FlinkJob::kind(&()).into_owned(),
        name: job.name().into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
        ..OwnerReference::default()
    });
    vec![reference]
}

fn meta(job: &FlinkJob, name: String, component: Option<Component>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: job.metadata.namespace.clone(),
        labels: Some(labels(job, component)),
        owner_references: Some(owner(job)),
        ..ObjectMeta::default()
    }
}

pub fn jobmanager_service(job: &FlinkJob) -> Service {
    let port = |name: &str, port: i32| ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::String(name.into())),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    };
    Service {
        metadata: meta(
            job,
            object_name(job, Component::JobManager),
            Some(Component::JobManager),
        ),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(job, Component::JobManager)),
            ports: Some(vec![port("rpc", RPC_PORT), port("rest", REST_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// How many pods of each component a job runs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    /// 1; 0 once an ended job's JobManager outlived its TTL.
    pub jobmanagers: i32,
    /// `spec.taskManager.replicas`, what the autoscaler's slots need, or 0 once the job ended.
    pub taskmanagers: i32,
}

/// Everything a FlinkJob becomes. `spec.job.state: suspended` keeps every object but scales both
/// Deployments to zero.
pub fn desired(job: &FlinkJob, defaults: &Defaults) -> Desired {
    let replicas = Replicas {
        jobmanagers: 1,
        taskmanagers: i32::try_from(job.spec.task_manager.replicas).unwrap_or(i32::MAX),
    };
    desired_with(job, defaults, replicas)
}

/// [`desired`] with the replicas the job's state asks for (see [`Replicas`]).
pub fn desired_with(job: &FlinkJob, defaults: &Defaults, replicas: Replicas) -> Desired {
    Desired {
        config_map: config_map(job),
        jobmanager_service: jobmanager_service(job),
        jobmanager: pods::deployment(job, defaults, Component::JobManager, replicas.jobmanagers),
        taskmanager: pods::deployment(job, defaults, Component::TaskManager, replicas.taskmanagers),
        network_policy: defaults
            .operator
            .as_ref()
            .map(|operator| network_policy(job, operator, defaults.metrics_scrapers.as_ref())),
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{defaults, example, golden};
    use super::*;

    #[test]
    fn the_example_becomes_the_golden_objects() {
        let d = desired(&example(), &defaults());
        golden("configmap", &d.config_map);
        golden("jobmanager-service", &d.jobmanager_service);
        golden("jobmanager-deployment", &d.jobmanager);
        golden("taskmanager-deployment", &d.taskmanager);
    }

    #[test]
    fn every_object_is_owned_by_the_flinkjob_and_labelled() {
        let job = example();
        let d = desired(&job, &defaults());
        let metas = [
            &d.config_map.metadata,
            &d.jobmanager_service.metadata,
            &d.jobmanager.metadata,
            &d.taskmanager.metadata,
        ];
        for m in metas {
            let owners = m.owner_references.as_ref().unwrap();
            assert_eq!(owners.len(), 1);
            assert_eq!(owners[0].kind, "FlinkJob");
            assert_eq!(owners[0].name, "wordcount");
            assert_eq!(owners[0].uid, "8b7a1c2e-0000-4000-8000-000000000001");
            assert_eq!(owners[0].controller, Some(true));
            assert_eq!(m.namespace.as_deref(), Some("jobs"));
            let labels = m.labels.as_ref().unwrap();
            assert_eq!(labels[JOB_LABEL], "wordcount");
            assert_eq!(labels["app.kubernetes.io/managed-by"], "floe-operator");
        }
    }

    #[test]
    fn suspended_scales_both_deployments_to_zero_and_keeps_the_rest() {
        let mut job = example();
        job.spec.job.state = floe_manifest::DesiredState::Suspended;
        let d = desired(&job, &defaults());
        assert_eq!(d.jobmanager.spec.unwrap().replicas, Some(0));
        assert_eq!(d.taskmanager.spec.unwrap().replicas, Some(0));
        assert!(d.jobmanager_service.spec.is_some());
    }
}
