//! The objects a FlinkJob becomes, built by pure functions from the resource alone: a ConfigMap with
//! the job's manifest, the JobManager Deployment and Service, and the TaskManager Deployment. Every
//! object carries the FlinkJob as its controller owner, so deleting the FlinkJob deletes them all
//! (Kubernetes' garbage collector does it, not the operator). Golden files in `operator/tests/golden`
//! pin the output.

use std::collections::BTreeMap;

use floe_manifest::{DesiredState, FlinkJob, Resources};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, HTTPGetAction, HostPathVolumeSource, ObjectFieldSelector, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext, Service, ServicePort,
    ServiceSpec, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

/// JobManager RPC port (Flink's `jobmanager.rpc.port`).
pub const RPC_PORT: i32 = 6123;
/// JobManager REST port (Flink's `rest.port`).
pub const REST_PORT: i32 = 8081;
/// TaskManager data port (gRPC TaskExecutor and Shuffle services).
pub const TASKMANAGER_PORT: i32 = 6121;
/// Where the ConfigMap with the job's manifest is mounted.
pub const CONFIG_DIR: &str = "/etc/floe";
pub const MANIFEST_FILE: &str = "flinkjob.yaml";
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
    selector_labels(job, component)
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

/// The manifest the JobManager reads (`floe jobmanager --job-file`): the FlinkJob without status or
/// server-set metadata, so the same file would run under `floe run -f`.
pub fn manifest_yaml(job: &FlinkJob) -> String {
    manifest_doc(job, deployed_generation(job))
}

/// The manifest as YAML with `generation` as its `metadata.generation`, and the savepoint the
/// deployment starts from (`status.deployed.savepoint`) as Flink's
/// `execution.state-recovery.path`.
fn manifest_doc(job: &FlinkJob, generation: Option<i64>) -> String {
    let mut spec = job.spec.clone();
    if let Some(savepoint) = job
        .status
        .as_ref()
        .and_then(|s| s.deployed.as_ref())
        .and_then(|d| d.savepoint.clone())
    {
        spec.configuration
            .insert(floe_manifest::RECOVERY_PATH_KEY.into(), savepoint);
    }
    let doc = serde_json::json!({
        "apiVersion": floe_manifest::API_VERSION,
        "kind": floe_manifest::KIND,
        // uid and generation tell the JobManager whether its logged job belongs to this deployment
        // (a changed spec, a resume after suspend, a FlinkJob created again under the same name
        // are new ones). The generation is the deployed one, not the FlinkJob's: a scale changes
        // the latter, and must not make a restarted JobManager run the job from scratch.
        "metadata": ObjectMeta {
            name: Some(job.name().to_string()),
            namespace: job.metadata.namespace.clone(),
            uid: job.metadata.uid.clone(),
            generation,
            ..ObjectMeta::default()
        },
        "spec": spec,
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// The manifest without what changes by scaling (replicas and their bound, suspend and resume):
/// those change the Deployments' replicas, and must not restart the JobManager (which would run
/// the job anew).
fn hashed_manifest(job: &FlinkJob) -> String {
    let mut job = job.clone();
    job.metadata.uid = None;
    job.status = None;
    // A savepoint asked for is no upgrade (a restart nonce is: it stays in).
    job.spec.job.savepoint_trigger_nonce = None;
    job.spec.task_manager.replicas = 1;
    job.spec.task_manager.max_replicas = None;
    job.spec.job.state = DesiredState::Running;
    manifest_doc(&job, None)
}

/// The hash of what defines the job (the manifest without scaling, suspend and resume).
pub fn spec_hash(job: &FlinkJob) -> String {
    config_hash(&hashed_manifest(job))
}

/// The FlinkJob generation the job was deployed at: the current one when what defines the job
/// changed since (its [`spec_hash`]) or the job resumes from suspended, else the one recorded in
/// `status.deployed`; while suspended, the recorded one (the resume deploys anew).
pub fn deployed_generation(job: &FlinkJob) -> Option<i64> {
    let current = job.metadata.generation;
    let Some(status) = &job.status else {
        return current;
    };
    let recorded = status.deployed.as_ref();
    if job.spec.job.state == DesiredState::Suspended {
        return recorded.map(|d| d.generation).or(current);
    }
    let resumed = status.lifecycle_state.as_deref() == Some(crate::status::lifecycle::SUSPENDED);
    // A stop savepoint waits for its deployment: the job it stopped is not run again, even when
    // the spec was changed back meanwhile.
    let stopped = status
        .job_status
        .as_ref()
        .is_some_and(|j| j.upgrade_savepoint_path.is_some());
    match recorded {
        Some(d) if !resumed && !stopped && d.spec_hash == spec_hash(job) => Some(d.generation),
        _ => current,
    }
}

/// The manifest's hash (stable across processes and Rust versions).
fn config_hash(text: &str) -> String {
    floe_manifest::stable_hash(text)
}

pub fn config_map(job: &FlinkJob) -> ConfigMap {
    ConfigMap {
        metadata: meta(job, config_map_name(job), None),
        data: Some(BTreeMap::from([(MANIFEST_FILE.into(), manifest_yaml(job))])),
        ..ConfigMap::default()
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

fn resources(r: Option<&Resources>) -> Option<ResourceRequirements> {
    let r = r?;
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if let Some(cpu) = &r.cpu {
        requests.insert("cpu".to_string(), Quantity(cpu.clone()));
    }
    if let Some(memory) = &r.memory {
        // Memory is not compressible: request what is limited, as Flink's operator does.
        requests.insert("memory".to_string(), Quantity(memory.clone()));
        limits.insert("memory".to_string(), Quantity(memory.clone()));
    }
    Some(ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    })
}

/// The local directory of a `file://` storage URL, mounted from the node at the same path.
/// The pods' working directory when the job's storage is not a `file://` directory: an
/// `emptyDir` (relative paths in a job's arguments land there).
pub const WORK_DIR: &str = "/var/run/floe/work";

pub fn storage_dir(job: &FlinkJob) -> Option<String> {
    let url = &job.spec.storage.as_ref()?.url;
    let path = url.strip_prefix("file://")?;
    path.starts_with('/')
        .then(|| path.trim_end_matches('/').to_string())
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn deployment(job: &FlinkJob, defaults: &Defaults, component: Component, taskmanagers: i32) -> Deployment {
    let spec = &job.spec;
    let running = spec.job.state == DesiredState::Running;
    let template = spec.pod_template.clone().unwrap_or_default();
    let (replicas, args, ports, process_resources) = match component {
        Component::JobManager => (
            1,
            vec![
                "jobmanager".to_string(),
                "--rpc-address".into(),
                format!("0.0.0.0:{RPC_PORT}"),
                "--rest-address".into(),
                format!("0.0.0.0:{REST_PORT}"),
                "--job-file".into(),
                format!("{CONFIG_DIR}/{MANIFEST_FILE}"),
                // TaskManager pods may take minutes to be scheduled and pull their image.
                "--slot-request-timeout-s".into(),
                "600".into(),
            ],
            vec![("rpc", RPC_PORT), ("rest", REST_PORT)],
            spec.job_manager.as_ref().and_then(|p| p.resources.as_ref()),
        ),
        Component::TaskManager => (
            taskmanagers,
            vec![
                "taskmanager".to_string(),
                "--jobmanager".into(),
                format!("{}:{RPC_PORT}", jobmanager_host(job)),
                "--slots".into(),
                spec.task_manager.slots.to_string(),
                "--bind".into(),
                format!("0.0.0.0:{TASKMANAGER_PORT}"),
                // Peers reach a TaskManager at its pod IP; the id is the pod name, as in Flink.
                "--advertise-host".into(),
                "$(POD_IP)".into(),
                "--id".into(),
                "$(POD_NAME)".into(),
                "--data-dir".into(),
                "/tmp/floe".into(),
            ],
            vec![("data", TASKMANAGER_PORT)],
            spec.task_manager.resources.as_ref(),
        ),
    };
    let mut env = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
    ];
    env.extend(template.env.iter().cloned());
    let mut volumes = vec![Volume {
        name: "tmp".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "tmp".into(),
        mount_path: "/tmp".into(),
        ..VolumeMount::default()
    }];
    if component == Component::JobManager {
        volumes.push(Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name(job),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let storage = storage_dir(job);
    // The working directory is always writable (the root file system is read-only): the
    // file:// storage directory, else a directory of its own.
    if storage.is_none() {
        volumes.push(Volume {
            name: "work".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "work".into(),
            mount_path: WORK_DIR.into(),
            ..VolumeMount::default()
        });
    }
    if let Some(dir) = &storage {
        // file:// storage is a directory on the node: right for one-node clusters (kind) and for a
        // shared mount at the same path on every node; s3:// needs no volume.
        volumes.push(Volume {
            name: "storage".into(),
            host_path: Some(HostPathVolumeSource {
                path: dir.clone(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "storage".into(),
            mount_path: dir.clone(),
            ..VolumeMount::default()
        });
    }
    let probe = match component {
        Component::JobManager => Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/jobs".into()),
                port: IntOrString::String("rest".into()),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        },
        Component::TaskManager => Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("data".into()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        },
    };
    let liveness = Probe {
        initial_delay_seconds: Some(10),
        period_seconds: Some(10),
        failure_threshold: Some(6),
        ..probe.clone()
    };
    let container = Container {
        name: component.name().into(),
        image: Some(spec.image.clone().unwrap_or_else(|| defaults.image.clone())),
        args: Some(args),
        ports: Some(
            ports
                .into_iter()
                .map(|(name, port)| ContainerPort {
                    name: Some(name.into()),
                    container_port: port,
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        env: Some(env),
        resources: resources(process_resources),
        // A JobManager replaying a long operation log is not killed by liveness meanwhile: the
        // liveness probe starts once the startup probe passed (up to 10 minutes).
        startup_probe: (component == Component::JobManager).then(|| Probe {
            period_seconds: Some(5),
            failure_threshold: Some(120),
            ..probe.clone()
        }),
        readiness_probe: Some(probe),
        liveness_probe: Some(liveness),
        working_dir: Some(storage.clone().unwrap_or_else(|| WORK_DIR.into())),
        volume_mounts: Some(mounts),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let mut pod_labels = template.labels.clone();
    pod_labels.extend(labels(job, Some(component)));
    let mut annotations = template.annotations.clone();
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), spec_hash(job));
    Deployment {
        metadata: meta(job, object_name(job, component), Some(component)),
        spec: Some(DeploymentSpec {
            replicas: Some(if running { replicas } else { 0 }),
            selector: LabelSelector {
                match_labels: Some(selector_labels(job, component)),
                ..LabelSelector::default()
            },
            // A job has one JobManager: never two at once during a rollout. TaskManagers are
            // recreated too: rolled one by one while the JobManager is replaced, old ones would
            // register with the new JobManager and then be killed, each costing the job a restart.
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: template.service_account_name.clone(),
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(RUN_AS_USER),
                        run_as_group: Some(RUN_AS_USER),
                        fs_group: Some(RUN_AS_USER),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// Everything a FlinkJob becomes. `spec.job.state: suspended` keeps every object but scales both
/// Deployments to zero.
pub fn desired(job: &FlinkJob, defaults: &Defaults) -> Desired {
    desired_with(
        job,
        defaults,
        i32::try_from(job.spec.task_manager.replicas).unwrap_or(i32::MAX),
    )
}

/// [`desired`] with `taskmanagers` TaskManager replicas (what the autoscaler's slots need).
pub fn desired_with(job: &FlinkJob, defaults: &Defaults, taskmanagers: i32) -> Desired {
    Desired {
        config_map: config_map(job),
        jobmanager_service: jobmanager_service(job),
        jobmanager: deployment(job, defaults, Component::JobManager, 0),
        taskmanager: deployment(job, defaults, Component::TaskManager, taskmanagers),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn example() -> FlinkJob {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/wordcount.yaml"))
                .unwrap();
        let mut job = FlinkJob::from_yaml(&text).unwrap();
        job.metadata.namespace = Some("jobs".into());
        job.metadata.uid = Some("8b7a1c2e-0000-4000-8000-000000000001".into());
        job
    }

    fn defaults() -> Defaults {
        Defaults {
            image: "floe/worker:default".into(),
        }
    }

    /// Compares with `tests/golden/NAME.yaml`; `FLOE_UPDATE_GOLDEN=1` rewrites the file.
    fn golden(name: &str, value: &impl serde::Serialize) {
        let path = format!("{}/tests/golden/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
        let actual = serde_yaml::to_string(value).unwrap();
        if std::env::var_os("FLOE_UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &actual).unwrap();
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (FLOE_UPDATE_GOLDEN=1 writes it)"));
        assert_eq!(
            actual, expected,
            "{name} differs from {path}; review and rerun with FLOE_UPDATE_GOLDEN=1"
        );
    }

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
    fn replicas_slots_and_the_jobmanager_address_reach_the_pods() {
        let job = example();
        let d = desired(&job, &defaults());
        let tm = d.taskmanager.spec.as_ref().unwrap();
        assert_eq!(tm.replicas, Some(2));
        // Issue 13: both Deployments are recreated, never rolled (no old TaskManager registers
        // with a new JobManager and is killed after).
        for spec in [tm, d.jobmanager.spec.as_ref().unwrap()] {
            let strategy = spec.strategy.as_ref().and_then(|s| s.type_.as_deref());
            assert_eq!(strategy, Some("Recreate"));
        }
        let c = &tm.template.spec.as_ref().unwrap().containers[0];
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--slots 2"), "{args}");
        assert!(
            args.contains("--jobmanager wordcount-jobmanager.jobs.svc:6123"),
            "{args}"
        );
        assert_eq!(c.image.as_deref(), Some("floe/worker:0.1.0"));
        let jm = d.jobmanager.spec.as_ref().unwrap();
        assert_eq!(jm.replicas, Some(1));
        let svc = d.jobmanager_service.spec.as_ref().unwrap();
        assert_eq!(
            svc.selector.as_ref(),
            Some(&jm.selector.match_labels.clone().unwrap())
        );
        let cm = &d.config_map.data.as_ref().unwrap()[MANIFEST_FILE];
        let parsed = FlinkJob::from_yaml(cm).unwrap();
        assert_eq!(parsed.spec, job.spec, "the JobManager reads the same spec");
    }

    #[test]
    fn a_missing_image_falls_back_to_the_operator_default() {
        let mut job = example();
        job.spec.image = None;
        let d = desired(&job, &defaults());
        let c = &d.jobmanager.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some("floe/worker:default"));
    }

    #[test]
    fn suspended_scales_both_deployments_to_zero_and_keeps_the_rest() {
        let mut job = example();
        job.spec.job.state = DesiredState::Suspended;
        let d = desired(&job, &defaults());
        assert_eq!(d.jobmanager.spec.unwrap().replicas, Some(0));
        assert_eq!(d.taskmanager.spec.unwrap().replicas, Some(0));
        assert!(d.jobmanager_service.spec.is_some());
    }

    /// Issue 13, item 5: the JobManager tells a new deployment from a restart by the manifest's
    /// generation. A scale (a new FlinkJob generation, the same spec) keeps the deployed one, so a
    /// JobManager restarted after it resumes the job from its log; a changed spec, or a resume
    /// from suspended, is deployed at the new generation (the job runs anew).
    #[test]
    fn a_scale_keeps_the_deployed_generation_and_a_spec_change_or_a_resume_takes_the_new_one() {
        let manifest_generation = |j: &FlinkJob| {
            let yaml = config_map(j).data.unwrap()[MANIFEST_FILE].clone();
            FlinkJob::from_yaml(&yaml).unwrap().metadata.generation
        };
        let mut job = example();
        job.metadata.generation = Some(1);
        let observed = crate::status::Observed::Job(crate::jobmanager_api::JobOverview {
            id: "j".into(),
            name: "wordcount".into(),
            state: "RUNNING".into(),
            start_time_ms: None,
            failure: None,
            parallelism: Some(4),
            slots_wanted: None,
            autoscaler_decisions: Vec::new(),
        });
        let status = |j: &FlinkJob| crate::status::compute(j, &observed, k8s_openapi::jiff::Timestamp::now());
        job.status = Some(status(&job));
        assert_eq!(
            job.status.as_ref().unwrap().deployed.as_ref().unwrap().generation,
            1
        );

        let mut scaled = job.clone();
        scaled.metadata.generation = Some(2);
        scaled.spec.task_manager.replicas = 4;
        scaled.spec.task_manager.max_replicas = Some(6);
        assert_eq!(
            manifest_generation(&scaled),
            Some(1),
            "a scale is not a new deployment"
        );
        scaled.status = Some(status(&scaled));
        assert_eq!(
            scaled
                .status
                .as_ref()
                .unwrap()
                .deployed
                .as_ref()
                .unwrap()
                .generation,
            1
        );

        let mut changed = scaled.clone();
        changed.metadata.generation = Some(3);
        changed.spec.job.args.push("--seed".into());
        assert_eq!(
            manifest_generation(&changed),
            Some(3),
            "a changed spec is deployed anew"
        );

        // Suspended at generation 4: still the deployed 1; resumed at 5: deployed anew.
        let mut suspended = scaled.clone();
        suspended.metadata.generation = Some(4);
        suspended.spec.job.state = DesiredState::Suspended;
        assert_eq!(manifest_generation(&suspended), Some(1));
        let suspended_status = crate::status::compute(
            &suspended,
            &crate::status::Observed::Suspended { cancelled: None },
            k8s_openapi::jiff::Timestamp::now(),
        );
        assert_eq!(suspended_status.lifecycle_state.as_deref(), Some("SUSPENDED"));
        let mut resumed = suspended.clone();
        resumed.status = Some(suspended_status);
        resumed.metadata.generation = Some(5);
        resumed.spec.job.state = DesiredState::Running;
        assert_eq!(
            manifest_generation(&resumed),
            Some(5),
            "a resume is a new deployment"
        );
    }

    /// Issue 13, items 8 and 11: with s3:// storage (no node directory) the pods still get a
    /// writable working directory under their read-only root; the JobManager has a startup probe
    /// so a long log replay is not killed by liveness.
    #[test]
    fn pods_always_get_a_writable_working_directory_and_the_jobmanager_a_startup_probe() {
        let mut job = example();
        job.spec.storage = Some(floe_manifest::StorageSpec {
            url: "s3://bucket/jobs".into(),
        });
        let d = desired(&job, &defaults());
        for deployment in [&d.jobmanager, &d.taskmanager] {
            let pod = deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
            let c = &pod.containers[0];
            assert_eq!(c.working_dir.as_deref(), Some(WORK_DIR));
            let mount = c
                .volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .find(|m| m.mount_path == WORK_DIR)
                .expect("the working directory is mounted");
            assert_ne!(mount.read_only, Some(true));
            let volume = pod
                .volumes
                .as_ref()
                .unwrap()
                .iter()
                .find(|v| v.name == mount.name)
                .unwrap();
            assert!(volume.empty_dir.is_some(), "{volume:?}");
            let root_read_only = c.security_context.as_ref().unwrap().read_only_root_filesystem;
            assert_eq!(root_read_only, Some(true));
        }
        let jm = container(&d.jobmanager);
        let startup = jm.startup_probe.as_ref().expect("a startup probe");
        assert_eq!(
            startup.failure_threshold.unwrap() * startup.period_seconds.unwrap(),
            600
        );
        // file:// storage: the working directory is the storage directory, as before.
        let d = desired(&example(), &defaults());
        assert_eq!(
            container(&d.taskmanager).working_dir.as_deref(),
            Some("/var/lib/floe")
        );
    }

    /// The one container of a Deployment's pods.
    fn container(d: &Deployment) -> &Container {
        &d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
    }

    #[test]
    fn a_spec_change_changes_the_pods_config_hash() {
        let job = example();
        let mut changed = job.clone();
        changed.spec.task_manager.slots = 3;
        let hash = |j: &FlinkJob| {
            desired(j, &defaults())
                .jobmanager
                .spec
                .unwrap()
                .template
                .metadata
                .unwrap()
                .annotations
                .unwrap()[CONFIG_HASH_ANNOTATION]
                .clone()
        };
        assert_ne!(hash(&job), hash(&changed));
        assert_eq!(hash(&job), hash(&job.clone()));
        let mut scaled = job.clone();
        scaled.spec.task_manager.replicas = 5;
        scaled.spec.job.state = DesiredState::Suspended;
        assert_eq!(
            hash(&job),
            hash(&scaled),
            "scaling must not restart the JobManager"
        );
        let mut savepoint = job.clone();
        savepoint.spec.job.savepoint_trigger_nonce = Some(7);
        assert_eq!(hash(&job), hash(&savepoint), "a savepoint nonce is no upgrade");
        let mut restart = job.clone();
        restart.spec.job.restart_nonce = Some(1);
        assert_ne!(hash(&job), hash(&restart), "a restart nonce is a new deployment");
    }

    #[test]
    fn pod_template_overrides_reach_both_pods() {
        let mut job = example();
        job.spec.pod_template = Some(floe_manifest::PodTemplate {
            labels: BTreeMap::from([("team".into(), "data".into())]),
            annotations: BTreeMap::from([("prometheus.io/scrape".into(), "true".into())]),
            env: vec![EnvVar {
                name: "AWS_REGION".into(),
                value: Some("eu-west-1".into()),
                ..EnvVar::default()
            }],
            service_account_name: Some("floe-jobs".into()),
        });
        let d = desired(&job, &defaults());
        for dep in [d.jobmanager, d.taskmanager] {
            let t = dep.spec.unwrap().template;
            let meta = t.metadata.unwrap();
            assert_eq!(meta.labels.unwrap()["team"], "data");
            assert_eq!(meta.annotations.unwrap()["prometheus.io/scrape"], "true");
            let pod = t.spec.unwrap();
            assert_eq!(pod.service_account_name.as_deref(), Some("floe-jobs"));
            let env = pod.containers[0].env.clone().unwrap();
            assert!(env.iter().any(|e| e.name == "AWS_REGION"));
        }
    }
}
