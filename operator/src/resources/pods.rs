//! The JobManager and TaskManager Deployments: one container each, running the worker image as
//! `floe jobmanager` or `floe taskmanager`, non-root on a read-only root file system (Pod Security
//! "restricted"), with a writable working directory, the job's storage where it is a volume, and
//! the storage credentials from the Secret the spec names.

use std::collections::BTreeMap;

use floe_manifest::{DesiredState, FlinkJob, Resources};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource,
    EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, PersistentVolumeClaimVolumeSource,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    SecretEnvSource, SecretVolumeSource, SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::manifest::{MANIFEST_FILE, pod_template_hash};
use super::{
    CONFIG_DIR, CONFIG_HASH_ANNOTATION, Component, Defaults, REST_PORT, RPC_PORT, RUN_AS_USER,
    TASKMANAGER_METRICS_PORT, TASKMANAGER_PORT, config_map_name, jobmanager_host, labels, meta, object_name,
    selector_labels,
};

/// The address every process binds: all interfaces, IPv6 and IPv4 (a dual-stack socket; the
/// processes bind IPv4 alone where the kernel has no IPv6, and bracket an IPv6 pod IP they
/// advertise), so a job runs in IPv4, IPv6 and dual-stack clusters alike.
fn any_address(port: i32) -> String {
    format!("[::]:{port}")
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

/// The pods' working directory when the job's storage is not a `file://` directory: an
/// `emptyDir` (relative paths in a job's arguments land there).
pub const WORK_DIR: &str = "/var/run/floe/work";

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

/// The pod security context: the spec's (`spec.podTemplate.securityContext`, e.g. empty on
/// OpenShift, whose restricted SCC assigns the user and group itself), else the images' non-root
/// user with the runtime's default seccomp profile (Pod Security "restricted"). The fsGroup makes
/// a claimed storage volume writable by that user.
fn pod_security_context(template: &floe_manifest::PodTemplate) -> PodSecurityContext {
    if let Some(context) = template.security_context.clone() {
        return context;
    }
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_USER),
        fs_group: Some(RUN_AS_USER),
        // The kubelet chowns a volume's files to fsGroup only when its root is not already so: a
        // PersistentVolumeClaim with millions of checkpoint files would otherwise be walked at
        // every pod start (minutes, before the JobManager can even start).
        fs_group_change_policy: Some("OnRootMismatch".into()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// The volumes and mounts of a component's pod: `/tmp`, the manifest (JobManager), and a
/// writable working directory: the job's `file://` storage directory on its claim, else an
/// `emptyDir`. Returns them with the working directory.
fn volumes(job: &FlinkJob, component: Component) -> (Vec<Volume>, Vec<VolumeMount>, String) {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let mut add = |name: &str, path: &str, read_only: bool, volume: Volume| {
        volumes.push(Volume {
            name: name.into(),
            ..volume
        });
        mounts.push(VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            read_only: read_only.then_some(true),
            ..VolumeMount::default()
        });
    };
    let empty_dir = || Volume {
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    add("tmp", "/tmp", false, empty_dir());
    if component == Component::JobManager {
        let config = Volume {
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name(job),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        };
        add("config", CONFIG_DIR, true, config);
    }
    // Flink's `kubernetes.secrets`: each Secret read-only at its path (internal TLS keys, ...).
    let secrets = floe_manifest::kubernetes_secrets(&job.spec.configuration).unwrap_or_default();
    for (i, mount) in secrets.into_iter().enumerate() {
        let secret = Volume {
            secret: Some(SecretVolumeSource {
                secret_name: Some(mount.secret),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
        add(&format!("secret-{i}"), &mount.path, true, secret);
    }
    let storage = job.spec.storage.as_ref();
    let claimed = storage.and_then(|s| Some((s.directory()?, s.persistent_volume_claim.as_ref()?)));
    let work_dir = match claimed {
        // Validated for a cluster: a file:// directory is always on a claim (a node's own
        // directory is neither shared across nodes nor writable by the pods' user).
        Some((dir, claim)) => {
            let volume = Volume {
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: None,
                }),
                ..Volume::default()
            };
            add("storage", dir, false, volume);
            dir.to_string()
        }
        None => {
            add("work", WORK_DIR, false, empty_dir());
            WORK_DIR.to_string()
        }
    };
    (volumes, mounts, work_dir)
}

/// `ours` with the component's pod template merged in ([`super::pod_template`]). The spec's
/// validation refuses a template that is no pod template, so this cannot fail for a validated
/// spec; were it to, the pod stays the operator's and the error is logged.
fn with_template(
    ours: PodTemplateSpec,
    template: &floe_manifest::PodTemplate,
    component: Component,
) -> PodTemplateSpec {
    match super::pod_template::apply(ours.clone(), template, component) {
        Ok(merged) => merged,
        Err(e) => {
            tracing::error!(component = component.name(), "pod template not applied: {e}");
            ours
        }
    }
}

/// A component's Deployment with `replicas` pods (none while the job is suspended).
pub(super) fn deployment(
    job: &FlinkJob,
    defaults: &Defaults,
    component: Component,
    replicas: i32,
) -> Deployment {
    let spec = &job.spec;
    let running = spec.job.state == DesiredState::Running;
    let template = super::pod_template::effective(job, component);
    let (args, ports, process_resources) = match component {
        Component::JobManager => (
            vec![
                "jobmanager".to_string(),
                "--rpc-address".into(),
                any_address(RPC_PORT),
                "--rest-address".into(),
                any_address(REST_PORT),
                "--job-file".into(),
                format!("{CONFIG_DIR}/{MANIFEST_FILE}"),
                // TaskManager pods may take minutes to be scheduled and pull their image.
                "--slot-request-timeout-s".into(),
                "600".into(),
                // One JSON object a line, for the cluster's log collector.
                "--log-format".into(),
                "json".into(),
            ],
            vec![("rpc", RPC_PORT), ("rest", REST_PORT)],
            spec.job_manager.as_ref().and_then(|p| p.resources.as_ref()),
        ),
        Component::TaskManager => (
            vec![
                "taskmanager".to_string(),
                "--jobmanager".into(),
                format!("{}:{RPC_PORT}", jobmanager_host(job)),
                "--slots".into(),
                spec.task_manager.slots.to_string(),
                "--bind".into(),
                any_address(TASKMANAGER_PORT),
                // Peers reach a TaskManager at its pod IP (bracketed by the TaskManager when it
                // is an IPv6 address); the id is the pod name, as in Flink.
                "--advertise-host".into(),
                "$(POD_IP)".into(),
                "--id".into(),
                "$(POD_NAME)".into(),
                "--data-dir".into(),
                "/tmp/floe".into(),
                // One JSON object a line, for the cluster's log collector.
                "--log-format".into(),
                "json".into(),
                "--metrics-address".into(),
                any_address(TASKMANAGER_METRICS_PORT),
            ]
            .into_iter()
            // The JobManager reads its configuration from the manifest; a TaskManager gets the
            // keys it reads itself (internal TLS, managed memory) as Flink's dynamic properties.
            .chain(
                floe_config::process_properties(&spec.configuration)
                    .into_iter()
                    .map(|(k, v)| format!("-D{k}={v}")),
            )
            .collect(),
            vec![("data", TASKMANAGER_PORT), ("metrics", TASKMANAGER_METRICS_PORT)],
            spec.task_manager.resources.as_ref(),
        ),
    };
    let mut env = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
    ];
    env.extend(template.env.iter().cloned());
    // Storage credentials reach the processes as the environment the storage layer reads
    // (AWS_ACCESS_KEY_ID, ...), straight from the Secret: never through the ConfigMap.
    let env_from = spec
        .storage
        .as_ref()
        .and_then(|s| s.credentials_secret.clone())
        .map(|name| {
            vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name,
                    optional: Some(false),
                }),
                ..EnvFromSource::default()
            }]
        });
    let (volumes, mounts, work_dir) = volumes(job, component);
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
        env_from,
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
        working_dir: Some(work_dir),
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
    let mut annotations = BTreeMap::new();
    // Prometheus's annotation-based discovery finds each pod's `/metrics` (Flink's metric names):
    // the JobManager's on its REST port, a TaskManager's on its metrics port. A pod template's
    // annotations override these.
    let metrics_port = match component {
        Component::JobManager => REST_PORT,
        Component::TaskManager => TASKMANAGER_METRICS_PORT,
    };
    annotations.extend([
        ("prometheus.io/scrape".to_string(), "true".to_string()),
        ("prometheus.io/port".to_string(), metrics_port.to_string()),
        ("prometheus.io/path".to_string(), "/metrics".to_string()),
    ]);
    annotations.extend(template.annotations.clone());
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), pod_template_hash(job));
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
            template: with_template(
                PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(pod_labels),
                        annotations: Some(annotations),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        service_account_name: template.service_account_name.clone(),
                        containers: vec![container],
                        volumes: Some(volumes),
                        security_context: Some(pod_security_context(&template)),
                        ..PodSpec::default()
                    }),
                },
                &template,
                component,
            ),
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::desired;
    use super::super::testing::{container, defaults, example, golden};
    use super::*;

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
        assert_eq!(c.image.as_deref(), Some("ghcr.io/floe-dev/floe-worker:0.1.0"));
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
        assert_eq!(c.image.as_deref(), Some("ghcr.io/floe-dev/floe-worker:default"));
    }

    /// The volume a pod mounts at `path`, with the mount.
    fn mounted<'a>(d: &'a Deployment, path: &str) -> Option<(&'a VolumeMount, &'a Volume)> {
        let pod = d.spec.as_ref()?.template.spec.as_ref()?;
        let mount = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == path)?;
        let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name)?;
        Some((mount, volume))
    }

    /// Issue 13, items 8 and 11: with s3:// storage (no volume) the pods still get a writable
    /// working directory under their read-only root; the JobManager has a startup probe so a long
    /// log replay is not killed by liveness.
    #[test]
    fn pods_always_get_a_writable_working_directory_and_the_jobmanager_a_startup_probe() {
        let job = example();
        assert!(job.spec.storage.as_ref().unwrap().url.starts_with("s3://"));
        let d = desired(&job, &defaults());
        for deployment in [&d.jobmanager, &d.taskmanager] {
            let c = container(deployment);
            assert_eq!(c.working_dir.as_deref(), Some(WORK_DIR));
            let (mount, volume) = mounted(deployment, WORK_DIR).expect("the working directory is mounted");
            assert_ne!(mount.read_only, Some(true));
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
    }

    /// Issue 13, item 1: the credentials reach every pod from the Secret the spec names (the
    /// ConfigMap's manifest holds its name only); file:// storage is the claim the spec names,
    /// mounted at the URL's directory, which is the pods' working directory; no pod mounts a node's
    /// directory.
    #[test]
    fn storage_credentials_come_from_the_secret_and_a_file_url_from_its_claim() {
        let job = example();
        let d = desired(&job, &defaults());
        for deployment in [&d.jobmanager, &d.taskmanager] {
            let from = container(deployment)
                .env_from
                .clone()
                .expect("env from the Secret");
            assert_eq!(from.len(), 1);
            let secret = from[0].secret_ref.as_ref().unwrap();
            assert_eq!(secret.name, "floe-s3");
            assert_eq!(secret.optional, Some(false));
        }
        let manifest = &d.config_map.data.as_ref().unwrap()[MANIFEST_FILE];
        assert!(manifest.contains("credentialsSecret: floe-s3"), "{manifest}");
        assert!(!manifest.contains("AWS_SECRET_ACCESS_KEY"), "{manifest}");

        let mut claimed = example();
        claimed.spec.storage = Some(floe_manifest::StorageSpec {
            url: "file:///mnt/floe".into(),
            credentials_secret: None,
            persistent_volume_claim: Some("floe-jobs".into()),
        });
        claimed.validate_for_cluster().unwrap();
        let d = desired(&claimed, &defaults());
        for deployment in [&d.jobmanager, &d.taskmanager] {
            let c = container(deployment);
            assert_eq!(c.working_dir.as_deref(), Some("/mnt/floe"));
            assert_eq!(c.env_from, None);
            let (mount, volume) = mounted(deployment, "/mnt/floe").expect("the claim is mounted");
            assert_ne!(mount.read_only, Some(true));
            let claim = volume.persistent_volume_claim.as_ref().expect("a claim");
            assert_eq!(claim.claim_name, "floe-jobs");
            let pod = deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
            for v in pod.volumes.iter().flatten() {
                assert!(v.host_path.is_none(), "{v:?}");
            }
            // The claim is writable by the pods' user through the fsGroup.
            assert_eq!(pod.security_context.as_ref().unwrap().fs_group, Some(RUN_AS_USER));
        }
    }

    /// Issue 13, item 11: the pods are Pod Security "restricted" by default; a spec may give its
    /// own pod security context (OpenShift's restricted SCC assigns the user and group itself).
    #[test]
    fn the_pod_security_context_is_restricted_unless_the_spec_gives_its_own() {
        let d = desired(&example(), &defaults());
        let pod = d.taskmanager.spec.unwrap().template.spec.unwrap();
        let context = pod.security_context.unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        assert_eq!(context.run_as_user, Some(RUN_AS_USER));
        assert_eq!(context.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let c = &pod.containers[0].security_context.clone().unwrap();
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(
            c.capabilities.clone().unwrap().drop,
            Some(vec!["ALL".to_string()])
        );

        let mut openshift = example();
        openshift.spec.pod_template = Some(floe_manifest::PodTemplate {
            security_context: Some(PodSecurityContext::default()),
            ..floe_manifest::PodTemplate::default()
        });
        let d = desired(&openshift, &defaults());
        for deployment in [d.jobmanager, d.taskmanager] {
            let pod = deployment.spec.unwrap().template.spec.unwrap();
            assert_eq!(pod.security_context, Some(PodSecurityContext::default()));
            // The container's own context stays restricted: it needs no user.
            let c = pod.containers[0].security_context.clone().unwrap();
            assert_eq!(c.read_only_root_filesystem, Some(true));
        }
    }

    /// Issue 13, item 11: the processes bind every interface, IPv6 too (floe_proto::net brackets
    /// an IPv6 pod IP a TaskManager advertises).
    #[test]
    fn processes_bind_ipv6_and_ipv4() {
        let d = desired(&example(), &defaults());
        let jm = container(&d.jobmanager).args.clone().unwrap().join(" ");
        assert!(
            jm.contains("--rpc-address [::]:6123 --rest-address [::]:8081"),
            "{jm}"
        );
        let tm = container(&d.taskmanager).args.clone().unwrap().join(" ");
        assert!(tm.contains("--bind [::]:6121"), "{tm}");
    }

    /// Issue 13, item 12: internal TLS keys come from a Secret both pods mount read-only
    /// (Flink's `kubernetes.secrets`); the TaskManagers get the `security.ssl.internal.*` keys as
    /// dynamic properties, the JobManager reads them in its manifest.
    #[test]
    fn kubernetes_secrets_are_mounted_and_taskmanagers_get_the_internal_tls_keys() {
        let mut job = example();
        for (k, v) in [
            ("kubernetes.secrets", "floe-internal-tls:/etc/floe/tls"),
            ("security.ssl.internal.enabled", "true"),
            ("security.ssl.internal.keystore", "/etc/floe/tls/tls.crt"),
            ("security.ssl.internal.key", "/etc/floe/tls/tls.key"),
            ("security.ssl.internal.truststore", "/etc/floe/tls/ca.crt"),
        ] {
            job.spec.configuration.insert(k.into(), v.into());
        }
        job.validate_for_cluster().unwrap();
        let d = desired(&job, &defaults());
        for deployment in [&d.jobmanager, &d.taskmanager] {
            let (mount, volume) = mounted(deployment, "/etc/floe/tls").expect("the Secret is mounted");
            assert_eq!(mount.read_only, Some(true));
            let secret = volume.secret.as_ref().unwrap();
            assert_eq!(secret.secret_name.as_deref(), Some("floe-internal-tls"));
        }
        let tm = container(&d.taskmanager).args.clone().unwrap();
        for key in [
            "enabled=true",
            "keystore=/etc/floe/tls/tls.crt",
            "truststore=/etc/floe/tls/ca.crt",
        ] {
            assert!(
                tm.contains(&format!("-Dsecurity.ssl.internal.{key}")),
                "{key}: {tm:?}"
            );
        }
        let manifest = &d.config_map.data.as_ref().unwrap()[MANIFEST_FILE];
        assert!(
            manifest.contains("security.ssl.internal.keystore: /etc/floe/tls/tls.crt"),
            "{manifest}"
        );
        assert!(!manifest.contains("BEGIN"), "no key material in the ConfigMap");
    }

    /// Issue 34, item 9: the managed memory keys a TaskManager reads from its own properties
    /// reach it from `spec.configuration` (before, only the TLS keys did, and a job's
    /// `taskmanager.memory.managed.size` changed nothing); job keys stay in the manifest.
    #[test]
    fn taskmanagers_get_the_managed_memory_keys_of_the_configuration() {
        let mut job = example();
        for (k, v) in [
            ("taskmanager.memory.managed.size", "512m"),
            ("state.backend.rocksdb.memory.managed", "true"),
            ("execution.checkpointing.interval", "10 s"),
        ] {
            job.spec.configuration.insert(k.into(), v.into());
        }
        let d = desired(&job, &defaults());
        let tm = container(&d.taskmanager).args.clone().unwrap();
        assert!(
            tm.contains(&"-Dtaskmanager.memory.managed.size=512m".to_string()),
            "{tm:?}"
        );
        assert!(
            tm.contains(&"-Dstate.backend.rocksdb.memory.managed=true".to_string()),
            "{tm:?}"
        );
        assert!(!tm.iter().any(|a| a.contains("checkpointing")), "{tm:?}");
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
            security_context: None,
            ..floe_manifest::PodTemplate::default()
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

    /// Issue 32, item 12: a full pod template (Flink's `podTemplate`) and a TaskManager's own,
    /// merged as the Flink operator merges them, with what runs the process kept the operator's.
    #[test]
    fn full_pod_templates_merge_with_the_operators_pods() {
        let mut job = example();
        job.spec.task_manager.resources = None;
        let common: floe_manifest::PodTemplate = serde_yaml::from_str(
            r#"
metadata:
  labels: { team: data, floe.dev/job: not-this }
  annotations: { prometheus.io/scrape: "false" }
spec:
  nodeSelector: { pool: jobs, zone: a }
  tolerations:
  - { key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 30 }
  imagePullSecrets: [{ name: registry }]
  volumes:
  - { name: cache, emptyDir: {} }
  - { name: tmp, hostPath: { path: /var/evil } }
  securityContext: { runAsNonRoot: true, runAsUser: 1000 }
  containers:
  - name: flink-main-container
    image: not/this
    args: [not-these]
    resources: { limits: { memory: 3Gi } }
    volumeMounts: [{ name: cache, mountPath: /cache }]
    env: [{ name: EXTRA, value: "1" }, { name: POD_NAME, value: not-this }]
  - { name: log-shipper, image: "fluent-bit:3" }
"#,
        )
        .unwrap();
        let tm_only: floe_manifest::PodTemplate = serde_yaml::from_str(
            r#"
spec:
  nodeSelector: { pool: taskmanagers }
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 1
        podAffinityTerm: { topologyKey: kubernetes.io/hostname, labelSelector: { matchLabels: { team: data } } }
"#,
        )
        .unwrap();
        job.spec.pod_template = Some(common);
        job.spec.task_manager.pod_template = Some(tm_only);
        job.spec.validate().unwrap();
        let d = desired(&job, &defaults());
        let pod = |deployment: &Deployment| deployment.spec.as_ref().unwrap().template.clone();
        let (jm, tm) = (pod(&d.jobmanager), pod(&d.taskmanager));
        let (jm_spec, tm_spec) = (jm.spec.clone().unwrap(), tm.spec.clone().unwrap());
        // The TaskManager's own template wins over the common one, key by key.
        assert_eq!(
            tm_spec.node_selector,
            Some(BTreeMap::from([
                ("pool".into(), "taskmanagers".into()),
                ("zone".into(), "a".into())
            ]))
        );
        assert_eq!(jm_spec.node_selector.as_ref().unwrap()["pool"], "jobs");
        assert!(tm_spec.affinity.is_some() && jm_spec.affinity.is_none());
        for spec in [&jm_spec, &tm_spec] {
            assert_eq!(spec.tolerations.as_ref().unwrap()[0].toleration_seconds, Some(30));
            assert_eq!(spec.image_pull_secrets.as_ref().unwrap()[0].name, "registry");
            // The template's security context replaces the operator's default (no fsGroup).
            let context = spec.security_context.as_ref().unwrap();
            assert_eq!((context.run_as_user, context.fs_group), (Some(1000), None));
            // The operator's volume keeps its name's source; the template's own is added.
            let volumes = spec.volumes.as_ref().unwrap();
            let tmp = volumes.iter().find(|v| v.name == "tmp").unwrap();
            assert!(tmp.empty_dir.is_some() && tmp.host_path.is_none(), "{tmp:?}");
            assert!(volumes.iter().any(|v| v.name == "cache"));
            // The main container first, the sidecar after it.
            let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names[1], "log-shipper");
        }
        let main = &tm_spec.containers[0];
        assert_eq!(main.name, "taskmanager");
        assert_eq!(main.image.as_deref(), Some("ghcr.io/floe-dev/floe-worker:0.1.0"));
        assert_eq!(main.args.as_ref().unwrap()[0], "taskmanager");
        let mounts: Vec<&str> = main
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert!(
            mounts.contains(&"/cache") && mounts.contains(&"/tmp"),
            "{mounts:?}"
        );
        let env = main.env.as_ref().unwrap();
        assert!(env.iter().any(|e| e.name == "EXTRA"));
        let pod_name = env.iter().find(|e| e.name == "POD_NAME").unwrap();
        assert!(
            pod_name.value_from.is_some() && pod_name.value.is_none(),
            "the operator's POD_NAME stays whole: {pod_name:?}"
        );
        // Resources: the template's where the spec sets none (TaskManager), the spec's otherwise.
        let limit = |c: &k8s_openapi::api::core::v1::Container| {
            c.resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"]
                .0
                .clone()
        };
        assert_eq!(limit(main), "3Gi");
        assert_eq!(limit(&jm_spec.containers[0]), "1Gi");
        // The main container stays locked down unless the template says otherwise.
        assert_eq!(
            main.security_context.as_ref().unwrap().read_only_root_filesystem,
            Some(true)
        );
        let meta = tm.metadata.unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels["team"], "data");
        assert_eq!(
            labels["floe.dev/job"], "wordcount",
            "the selector's labels stay the operator's"
        );
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations["prometheus.io/scrape"], "false");
        assert!(annotations.contains_key(super::super::CONFIG_HASH_ANNOTATION));
        golden("taskmanager-deployment-pod-template", &d.taskmanager);
    }

    /// A template Kubernetes would refuse is an `InvalidSpec` naming the field.
    #[test]
    fn a_bad_pod_template_is_refused_naming_the_field() {
        let check = |field: &str, yaml: &str| {
            let mut job = example();
            let template: floe_manifest::PodTemplate = serde_yaml::from_str(yaml).unwrap();
            match field {
                "spec.podTemplate" => job.spec.pod_template = Some(template),
                _ => job.spec.task_manager.pod_template = Some(template),
            }
            job.spec.validate().unwrap_err().to_string()
        };
        let e = check("spec.podTemplate", "spec: { tolerations: oops }");
        assert!(
            e.contains("spec.podTemplate.spec") && e.contains("expected a Kubernetes pod spec"),
            "{e}"
        );
        let e = check(
            "spec.taskManager.podTemplate",
            "spec: { containers: [{ image: x }] }",
        );
        assert!(
            e.contains("spec.taskManager.podTemplate.spec.containers[0].name"),
            "{e}"
        );
        let e = check("spec.podTemplate", "metadata: { labels: [a] }");
        assert!(e.contains("spec.podTemplate.metadata"), "{e}");
        let e = check("spec.podTemplate", "spec: { nodeSelecter: { pool: a } }");
        assert!(
            e.contains("spec.podTemplate.spec.nodeSelecter") && e.contains("unknown field"),
            "{e}"
        );
        let e = check(
            "spec.taskManager.podTemplate",
            "spec: { containers: [{ name: flink-main-container, volumeMount: [] }] }",
        );
        assert!(
            e.contains("spec.taskManager.podTemplate.spec.containers[0].volumeMount"),
            "{e}"
        );
    }
}
