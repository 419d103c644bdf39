//! The FlinkJob manifest (DESIGN.md "One unit"): the same YAML runs under `floe run -f` and under the
//! operator. Read [`FlinkJobSpec`] first: kube's `CustomResource` derive makes the [`FlinkJob`] resource
//! around it, and the CRD (`crds/flinkjob.yaml`) is generated from these types. [`FlinkJob::from_yaml`]
//! parses and validates a file, and [`FlinkJob::validate_for_cluster`] is what the operator runs; every error
//! names the field that is wrong and what was expected.
//!
//! This crate depends on kube's derive only (no client, no controller), so the `floe` binary reads the
//! same type without pulling in the operator.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use floe_scheduler::BatchShuffleMode;
use k8s_openapi::api::core::v1::{EnvVar, PodSecurityContext};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};

mod secrets;
mod storage;
pub use secrets::{KUBERNETES_SECRETS_KEY, SecretMount, kubernetes_secrets};
pub use storage::StorageSpec;

pub const GROUP: &str = "floe.dev";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "floe.dev/v1alpha1";
pub const KIND: &str = "FlinkJob";
/// Longest `metadata.name`: the operator names objects `<name>-taskmanager`, and a Service name is a
/// DNS label of at most 63 characters.
pub const MAX_NAME_LEN: usize = 45;

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// YAML that does not fit the schema; serde_yaml's message carries the field path and line.
    #[error("invalid manifest: {0}")]
    Syntax(String),
    #[error("invalid manifest: {field}: {message}")]
    Field { field: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn field_error<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T> {
    Err(Error::Field {
        field: field.into(),
        message: message.into(),
    })
}

/// What a FlinkJob asks for: the job, the processes that run it, where its durable data lives, and
/// Flink-style configuration.
// Several printer columns share `type_ = "string"`, which clippy takes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "floe.dev",
    version = "v1alpha1",
    kind = "FlinkJob",
    shortname = "fj",
    namespaced,
    status = "FlinkJobStatus",
    derive = "PartialEq",
    doc = "A Floe job: one JobManager and its TaskManagers running a job registered in the worker image.",
    scale(
        spec_replicas_path = ".spec.taskManager.replicas",
        status_replicas_path = ".status.taskManagers",
        label_selector_path = ".status.taskManagerSelector"
    ),
    printcolumn(name = "Job State", type_ = "string", json_path = ".status.jobStatus.state"),
    printcolumn(name = "Lifecycle", type_ = "string", json_path = ".status.lifecycleState"),
    printcolumn(name = "Parallelism", type_ = "string", json_path = ".spec.job.parallelism"),
    printcolumn(
        name = "TaskManagers",
        type_ = "integer",
        json_path = ".spec.taskManager.replicas"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlinkJobSpec {
    /// Worker image (the `floe` binary); used by the operator only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub job: JobSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_manager: Option<ProcessSpec>,
    pub task_manager: TaskManagerSpec,
    /// Where checkpoints, shuffle data and the JobManager's log live (`file://`, `s3://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    /// Flink-style configuration keys (`execution.batch-shuffle-mode`, `heartbeat.timeout`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub configuration: BTreeMap<String, String>,
    /// Additions to every pod the operator creates for this job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplate>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobSpec {
    /// A job registered in the worker binary (`wordcount`, `pipeline`).
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default)]
    pub parallelism: Parallelism,
    #[serde(default)]
    pub mode: RuntimeMode,
    /// `suspended` cancels the job and scales its processes to zero; `running` starts it again.
    #[serde(default)]
    pub state: DesiredState,
    /// How a spec change is rolled out (Flink Kubernetes Operator's): `stateless` starts the new
    /// job empty, `savepoint` stops the job with a savepoint and starts the new one from it,
    /// `last-state` starts it from the job's latest checkpoint.
    #[serde(default)]
    pub upgrade_mode: UpgradeMode,
    /// A savepoint (its directory, or its `_metadata`) the job's first deployment starts from
    /// (Flink's `execution.state-recovery.path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_savepoint_path: Option<String>,
    /// Start although the savepoint holds state of an operator the job no longer has (Flink's
    /// `execution.state-recovery.ignore-unclaimed-state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_non_restored_state: Option<bool>,
    /// Change it to take a savepoint of the running job now (the job runs on: no upgrade).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint_trigger_nonce: Option<i64>,
    /// Change it to take a checkpoint of the running job now (Flink Kubernetes Operator's
    /// `checkpointTriggerNonce`; the job runs on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_trigger_nonce: Option<i64>,
    /// Change it to restart the job: a new deployment of the same spec, carried through as the
    /// upgrade mode says (Flink Kubernetes Operator's `restartNonce`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_nonce: Option<i64>,
}

/// A fixed parallelism, or `auto` (adaptive batch parallelism).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    Fixed(u32),
    Auto,
}

impl Default for Parallelism {
    fn default() -> Self {
        Parallelism::Fixed(1)
    }
}

impl JsonSchema for Parallelism {
    fn schema_name() -> Cow<'static, str> {
        "Parallelism".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // Structural schemas allow a number-or-string only through this extension.
        // The API server refuses what the deserializer would (issue 13, part 1, item 4): `0`,
        // `"4"`, any other string.
        json_schema!({
            "description": "A positive integer, or \"auto\" for adaptive batch parallelism.",
            "x-kubernetes-int-or-string": true,
            "x-kubernetes-validations": [{
                "rule": "type(self) == int ? (self >= 1 && self <= 4294967295) : self == 'auto'",
                "message": "expected a positive integer or \"auto\""
            }]
        })
    }
}

impl Serialize for Parallelism {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Parallelism::Fixed(n) => s.serialize_u32(*n),
            Parallelism::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Parallelism {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        // `null` (the schema lets a defaulted field be null) is the default, as a missing field.
        let Some(raw) = Option::<Raw>::deserialize(d)
            .map_err(|_| serde::de::Error::custom("parallelism: expected a positive integer or \"auto\""))?
        else {
            return Ok(Parallelism::default());
        };
        match raw {
            Raw::N(n) if n >= 1 && n <= u32::MAX as u64 => Ok(Parallelism::Fixed(n as u32)),
            Raw::S(s) if s == "auto" => Ok(Parallelism::Auto),
            Raw::N(n) => Err(serde::de::Error::custom(format!(
                "parallelism: expected a positive integer or \"auto\", got {n}"
            ))),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "parallelism: expected a positive integer or \"auto\", got {s:?}"
            ))),
        }
    }
}

impl fmt::Display for Parallelism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parallelism::Fixed(n) => write!(f, "{n}"),
            Parallelism::Auto => f.write_str("auto"),
        }
    }
}

/// Flink's `execution.runtime-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    Batch,
    #[default]
    Streaming,
    /// BATCH when every source is bounded (all built-in file sources are), else STREAMING.
    Automatic,
}

impl RuntimeMode {
    /// The value of `execution.runtime-mode`.
    pub fn flink_name(self) -> &'static str {
        match self {
            RuntimeMode::Batch => "BATCH",
            RuntimeMode::Streaming => "STREAMING",
            RuntimeMode::Automatic => "AUTOMATIC",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DesiredState {
    #[default]
    Running,
    Suspended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UpgradeMode {
    #[default]
    Stateless,
    Savepoint,
    LastState,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// This process's pods only: merged over `spec.podTemplate` (Flink's
    /// `jobManager.podTemplate` / `taskManager.podTemplate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplate>,
}

/// Requested (and limited) CPU and memory of each process, as Kubernetes quantities.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskManagerSpec {
    /// TaskManagers to run; with the autoscaler and `maxReplicas`, the fewest.
    #[schemars(range(min = 1, max = 2147483647))]
    pub replicas: u32,
    /// With `job.autoscaler.enabled`, the most TaskManagers the operator may run for the slots the
    /// job wants (it raises the replicas up to here and lowers them back to `replicas`). Unset:
    /// the replicas stay as `replicas` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub max_replicas: Option<u32>,
    #[schemars(range(min = 1))]
    pub slots: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// The TaskManager pods only: merged over `spec.podTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplate>,
}

/// Pod-template-style additions the operator applies to the JobManager and TaskManager pods.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTemplate {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// The pods' security context, instead of the operator's (non-root user 65532, fsGroup 65532,
    /// the runtime's default seccomp profile). On OpenShift give `{}`: its restricted SCC assigns
    /// the user and group itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// A Kubernetes `PodTemplateSpec`'s `metadata` (labels, annotations), as in Flink's
    /// `podTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub metadata: Option<serde_json::Value>,
    /// A Kubernetes `PodTemplateSpec`'s `spec`, as in Flink's `podTemplate`: node selector,
    /// tolerations, affinity, volumes, image pull secrets, init and sidecar containers, and the
    /// main container (named `flink-main-container` as in Flink, or `jobmanager` /
    /// `taskmanager`) with its mounts, environment and resources. The operator's pod is merged
    /// over it (objects key by key, lists of named items by name): the operator keeps what runs
    /// the process (the main container's image, arguments, ports, probes, working directory, and
    /// its own volumes, mounts and labels); everything else the template gives is kept, and its
    /// security contexts and annotations replace the operator's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub spec: Option<serde_json::Value>,
}

/// A schema that takes any object, as Kubernetes types a `PodTemplateSpec` inside a CRD that does
/// not embed its whole schema (it is checked when the spec is validated instead).
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

impl PodTemplate {
    /// What Kubernetes would refuse of the template at `field` (`spec.podTemplate`): metadata that
    /// is no `ObjectMeta`, a spec that is no `PodSpec`, or a container without a name (the
    /// operator merges containers by name).
    pub fn validate(&self, field: &str) -> Result<()> {
        use k8s_openapi::api::core::v1::PodSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        if let Some(metadata) = &self.metadata {
            let field = format!("{field}.metadata");
            match serde_json::from_value::<ObjectMeta>(metadata.clone()) {
                Err(e) => {
                    return field_error(
                        &field,
                        format!("expected a pod template's metadata (labels, annotations): {e}"),
                    );
                }
                Ok(read) => unknown_field(&field, metadata, &read)?,
            }
        }
        let Some(spec) = &self.spec else {
            return Ok(());
        };
        let Some(object) = spec.as_object() else {
            return field_error(format!("{field}.spec"), "expected a pod spec (an object)");
        };
        for list in ["containers", "initContainers"] {
            for (i, c) in object
                .get(list)
                .and_then(|l| l.as_array())
                .into_iter()
                .flatten()
                .enumerate()
            {
                if c.get("name").and_then(|n| n.as_str()).is_none_or(str::is_empty) {
                    return field_error(
                        format!("{field}.spec.{list}[{i}].name"),
                        "expected a container name (flink-main-container for the main container)",
                    );
                }
            }
        }
        // A template need not name any container: it is a pod spec once the operator's is in.
        let mut complete = object.clone();
        complete
            .entry("containers")
            .or_insert_with(|| serde_json::json!([]));
        let complete = serde_json::Value::Object(complete);
        match serde_json::from_value::<PodSpec>(complete.clone()) {
            Err(e) => field_error(
                format!("{field}.spec"),
                format!("expected a Kubernetes pod spec: {e}"),
            ),
            Ok(read) => unknown_field(&format!("{field}.spec"), &complete, &read),
        }
    }
}

/// Refuses a field of `given` that reading it as `read`'s type dropped (a misspelt `nodeSelecter`
/// would otherwise vanish without a word, as the API server's strict field validation refuses it).
fn unknown_field(field: &str, given: &serde_json::Value, read: &impl Serialize) -> Result<()> {
    fn dropped(given: &serde_json::Value, kept: &serde_json::Value, path: &str) -> Option<String> {
        use serde_json::Value;
        match (given, kept) {
            (Value::Object(g), Value::Object(k)) => g.iter().find_map(|(key, v)| match k.get(key) {
                None if !v.is_null() => Some(format!("{path}.{key}")),
                None => None,
                Some(kv) => dropped(v, kv, &format!("{path}.{key}")),
            }),
            (Value::Array(g), Value::Array(k)) => g
                .iter()
                .zip(k)
                .enumerate()
                .find_map(|(i, (gv, kv))| dropped(gv, kv, &format!("{path}[{i}]"))),
            _ => None,
        }
    }
    let kept = serde_json::to_value(read).unwrap_or_default();
    match dropped(given, &kept, field) {
        Some(path) => field_error(path, "unknown field: Kubernetes has no field of that name there"),
        None => Ok(()),
    }
}

/// What the operator observed, in the shape of the flink-kubernetes-operator's FlinkDeployment status.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlinkJobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_status: Option<JobStatusInfo>,
    /// CREATED, DEPLOYED, STABLE, SUSPENDED or FAILED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// TaskManagers asked of the TaskManager Deployment (the scale subresource's status replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_managers: Option<i32>,
    /// Label selector of the TaskManager pods (the scale subresource's selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_manager_selector: Option<String>,
    /// The last error: an invalid spec or the job's failure cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the job autoscaler asked for, as the operator acted on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<AutoscalerStatus>,
    /// The spec the running job was deployed from: a scale changes `metadata.generation` but not
    /// this, so a restarted JobManager resumes the job instead of running it anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed: Option<DeployedSpec>,
    /// The last spec whose job ran: what a rollback deploys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stable_spec: Option<StableSpec>,
    /// The generation whose upgrade was rolled back to `lastStableSpec`: the stable spec runs
    /// until the spec changes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_generation: Option<i64>,
}

/// The FlinkJob generation a job was deployed at, and the hash of what defines the job then.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployedSpec {
    pub generation: i64,
    pub spec_hash: String,
    /// The savepoint this deployment's job started from (a `savepoint`-mode upgrade's or resume's):
    /// its JobManager's manifest names it, so a restarted JobManager starts from the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<String>,
    /// When this deployment was first applied (ms since the epoch): the readiness timeout of a
    /// rollback counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<i64>,
    /// Its `spec.storage.url` (its operation log and checkpoints): a `last-state` upgrade starts
    /// from what is there, so it must not move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

/// The last spec whose job ran (Flink Kubernetes Operator's `lastStableSpec`): what a rollback
/// deploys.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StableSpec {
    pub generation: i64,
    /// The spec, as JSON.
    pub spec: String,
    /// The savepoint that deployment started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<String>,
}

/// The job autoscaler as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerStatus {
    /// The slots the job wants (its JobManager's `slots-wanted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_wanted: Option<u32>,
    /// The TaskManager replicas the operator runs for them (within `replicas`..`maxReplicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_managers: Option<i32>,
    /// When the newest rescale decision the operator has reported as an event was made (ms since
    /// the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision_time: Option<u64>,
}

/// The job as the JobManager reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatusInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Flink's job status: CREATED, RUNNING, FINISHED, FAILED, CANCELED, ...
    pub state: String,
    /// Milliseconds since the epoch, as Flink's operator writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When the job reached FINISHED, FAILED or CANCELED (milliseconds since the epoch): its
    /// TaskManagers are released then, its JobManager after
    /// `kubernetes.operator.jm-deployment.shutdown-ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// The job's parallelism now (the highest of its vertices'): with
    /// `jobmanager.scheduler: adaptive` it follows the TaskManagers `kubectl scale` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// Savepoints taken of the job by the operator (Flink Kubernetes Operator's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint_info: Option<SavepointInfo>,
    /// The savepoint the next deployment of the job starts from (taken by a `savepoint`-mode
    /// upgrade or suspend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_savepoint_path: Option<String>,
    /// Checkpoints the operator asked for (`checkpointTriggerNonce`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_info: Option<CheckpointInfo>,
}

/// Checkpoints the operator asked the JobManager for (Flink Kubernetes Operator's shape).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointInfo {
    /// The `checkpointTriggerNonce` acted on last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_nonce: Option<i64>,
    /// When that trigger was sent (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_timestamp: Option<i64>,
}

/// Savepoints of a job, as the Flink Kubernetes Operator reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavepointInfo {
    /// The newest savepoint completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_savepoint: Option<SavepointRecord>,
    /// The savepoint in flight: the JobManager's trigger id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<String>,
    /// When it was triggered (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_timestamp: Option<i64>,
    /// Why: UPGRADE, SUSPEND, MANUAL (`savepointTriggerNonce`) or PERIODIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_type: Option<String>,
    /// The `savepointTriggerNonce` a MANUAL trigger answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_nonce: Option<i64>,
    /// When the operator last triggered a periodic savepoint (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_periodic_savepoint_timestamp: Option<i64>,
    /// Completed savepoints, oldest first, at most
    /// `kubernetes.operator.savepoint.history.max.count` (10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub savepoint_history: Vec<SavepointRecord>,
}

/// One completed savepoint.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavepointRecord {
    /// When it completed (ms since the epoch).
    pub time_stamp: i64,
    pub location: String,
    pub trigger_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_nonce: Option<i64>,
}

/// A manifest file: the resource plus the two fields a file carries that the resource type leaves to
/// the API server (`apiVersion`, `kind`), with unknown fields refused.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: FlinkJobSpec,
    #[serde(default)]
    status: Option<FlinkJobStatus>,
}

impl FlinkJob {
    /// Parses and validates a manifest.
    pub fn from_yaml(text: &str) -> Result<FlinkJob> {
        let doc: Document = serde_yaml::from_str(text).map_err(|e| Error::Syntax(e.to_string()))?;
        if doc.api_version != API_VERSION {
            return field_error(
                "apiVersion",
                format!("expected {API_VERSION:?}, got {:?}", doc.api_version),
            );
        }
        if doc.kind != KIND {
            return field_error("kind", format!("expected {KIND:?}, got {:?}", doc.kind));
        }
        let job = FlinkJob {
            metadata: doc.metadata,
            spec: doc.spec,
            status: doc.status,
        };
        job.validate()?;
        Ok(job)
    }

    /// The resource's name (validated manifests always have one).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Checks the name and the spec.
    pub fn validate(&self) -> Result<()> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        let dns_label = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-');
        if !dns_label {
            return field_error(
                "metadata.name",
                format!(
                    "expected a DNS label (lowercase letters, digits and '-', starting with a letter, \
                     at most {MAX_NAME_LEN} characters), got {name:?}"
                ),
            );
        }
        self.spec.validate()
    }

    /// Total slots the manifest's TaskManagers offer.
    pub fn total_slots(&self) -> u32 {
        self.spec
            .task_manager
            .replicas
            .saturating_mul(self.spec.task_manager.slots)
    }

    /// The configuration a job is submitted with (see [`FlinkJobSpec::job_configuration`]), plus
    /// `floe.job-storage.url` when the manifest has storage.
    pub fn job_configuration(&self) -> BTreeMap<String, String> {
        let mut conf = self.spec.job_configuration();
        let namespace = self.metadata.namespace.as_deref().unwrap_or("default");
        if let Some(url) = self.spec.job_storage_url(namespace, self.name()) {
            conf.insert("floe.job-storage.url".into(), url);
        }
        conf
    }
}

/// A Kubernetes quantity (`500m`, `1`, `1.5`, `2Gi`, `512M`).
fn is_quantity(q: &str) -> bool {
    const SUFFIXES: [&str; 14] = [
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    let digits_end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(digits_end);
    !number.is_empty()
        && number.parse::<f64>().is_ok()
        && SUFFIXES.contains(&suffix)
        && number.parse::<f64>().is_ok_and(|n| n > 0.0)
}

fn validate_resources(prefix: &str, resources: &Option<Resources>) -> Result<()> {
    let Some(r) = resources else { return Ok(()) };
    for (name, value) in [("cpu", &r.cpu), ("memory", &r.memory)] {
        if let Some(v) = value
            && !is_quantity(v)
        {
            return field_error(
                format!("{prefix}.resources.{name}"),
                format!("expected a Kubernetes quantity such as \"500m\", \"1\" or \"2Gi\", got {v:?}"),
            );
        }
    }
    Ok(())
}

pub use floe_scheduler::parse_duration;

/// FNV-1a of `text` as 16 hex digits: stable across processes and Rust versions, unlike
/// `DefaultHasher` (the operator's spec hash, the JobManager's deployment identity).
pub fn stable_hash(text: &str) -> String {
    use std::hash::{Hash, Hasher};
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100000001b3);
            }
        }
    }
    let mut h = Fnv(0xcbf29ce484222325);
    text.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Rolls an upgrade that does not become stable back to the last stable spec (Flink Kubernetes
/// Operator's key; default false).
pub const ROLLBACK_ENABLED_KEY: &str = "kubernetes.operator.deployment.rollback.enabled";
/// How long an upgraded deployment has to run its job before it is rolled back (default 5 min).
pub const READINESS_TIMEOUT_KEY: &str = "kubernetes.operator.deployment.readiness.timeout";

/// How often the operator takes a savepoint of a running job (Flink Kubernetes Operator's key;
/// unset or 0: never).
pub const PERIODIC_SAVEPOINT_INTERVAL_KEY: &str = "kubernetes.operator.periodic.savepoint.interval";
/// How long the JobManager of an ended job (FINISHED, FAILED, CANCELED) stays up to serve its
/// REST API before the operator scales it to zero (Flink Kubernetes Operator's key; default
/// 1 d). The status keeps the job's last state either way.
pub const JM_SHUTDOWN_TTL_KEY: &str = "kubernetes.operator.jm-deployment.shutdown-ttl";
/// How many completed savepoints `status.jobStatus.savepointInfo.savepointHistory` keeps.
pub const SAVEPOINT_HISTORY_MAX_COUNT_KEY: &str = "kubernetes.operator.savepoint.history.max.count";
/// How long a completed savepoint stays in the history (unset: no limit).
pub const SAVEPOINT_HISTORY_MAX_AGE_KEY: &str = "kubernetes.operator.savepoint.history.max.age";
/// Whether a savepoint that leaves the history is disposed of (its files deleted; Flink's
/// default, `true`), or only forgotten.
pub const SAVEPOINT_CLEANUP_KEY: &str = "kubernetes.operator.savepoint.cleanup.enabled";
/// Whether deleting the FlinkJob disposes of the savepoints in its history (Flink's default,
/// `false`, keeps them).
pub const SAVEPOINT_DISPOSE_ON_DELETE_KEY: &str = "kubernetes.operator.savepoint.dispose-on-delete";

/// Where savepoints go when a trigger names no directory (Flink's key): the operator's upgrade,
/// suspend and periodic savepoints.
pub const SAVEPOINT_DIR_KEY: &str = "state.savepoints.dir";

/// Flink's key for the savepoint a job starts from (`spec.job.initialSavepointPath`).
pub const RECOVERY_PATH_KEY: &str = "execution.state-recovery.path";
/// Flink's key for starting without a savepoint's unclaimed state (`allowNonRestoredState`).
pub const IGNORE_UNCLAIMED_KEY: &str = "execution.state-recovery.ignore-unclaimed-state";

/// The most TaskManagers a FlinkJob can ask for: its TaskManager Deployment's `replicas` is an
/// int32.
pub const MAX_REPLICAS: u32 = i32::MAX as u32;

impl FlinkJobSpec {
    /// Whether the job autoscaler runs (`job.autoscaler.enabled: true` in the configuration).
    pub fn autoscaler_enabled(&self) -> bool {
        self.configuration
            .get("job.autoscaler.enabled")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// Whether the operator raises and lowers the TaskManagers for the slots the autoscaler
    /// wants: it runs, and `spec.taskManager.maxReplicas` bounds it.
    pub fn autoscales_taskmanagers(&self) -> bool {
        self.autoscaler_enabled() && self.task_manager.max_replicas.is_some()
    }

    /// Checks what the schema cannot: names, numbers and values in range. Field names are the
    /// manifest's (`spec.taskManager.replicas`), so the message tells a user what to edit.
    pub fn validate(&self) -> Result<()> {
        if self.job.name.trim().is_empty() {
            return field_error(
                "spec.job.name",
                "expected the name of a registered job, got an empty string",
            );
        }
        if let Some(image) = &self.image
            && image.trim().is_empty()
        {
            return field_error("spec.image", "expected an image reference, got an empty string");
        }
        if self.task_manager.replicas == 0 {
            return field_error("spec.taskManager.replicas", "expected at least 1");
        }
        if self.task_manager.replicas > MAX_REPLICAS {
            return field_error(
                "spec.taskManager.replicas",
                format!(
                    "expected at most {MAX_REPLICAS} (a Deployment's replicas is a 32-bit integer), got {}",
                    self.task_manager.replicas
                ),
            );
        }
        if let Some(max) = self.task_manager.max_replicas
            && (max < self.task_manager.replicas || max > MAX_REPLICAS)
        {
            return field_error(
                "spec.taskManager.maxReplicas",
                format!(
                    "expected from spec.taskManager.replicas ({}) to {MAX_REPLICAS}, got {max}",
                    self.task_manager.replicas
                ),
            );
        }
        if self.task_manager.slots == 0 {
            return field_error("spec.taskManager.slots", "expected at least 1");
        }
        validate_resources("spec.taskManager", &self.task_manager.resources)?;
        if let Some(jm) = &self.job_manager {
            validate_resources("spec.jobManager", &jm.resources)?;
        }
        let templates = [
            ("spec.podTemplate", self.pod_template.as_ref()),
            (
                "spec.jobManager.podTemplate",
                self.job_manager.as_ref().and_then(|j| j.pod_template.as_ref()),
            ),
            (
                "spec.taskManager.podTemplate",
                self.task_manager.pod_template.as_ref(),
            ),
        ];
        for (field, template) in templates {
            if let Some(t) = template {
                t.validate(field)?;
            }
        }
        if let Some(Err(e)) = self
            .configuration
            .get("execution.batch-shuffle-mode")
            .map(|m| m.parse::<BatchShuffleMode>())
        {
            return field_error("spec.configuration[execution.batch-shuffle-mode]", e.to_string());
        }
        if let Some(storage) = &self.storage {
            storage.validate()?;
        }
        // A URL must open; a plain path is a local directory (as Flink takes one).
        if let Some(dir) = self
            .configuration
            .get(SAVEPOINT_DIR_KEY)
            .filter(|d| d.contains("://"))
        {
            storage::validate_url(&format!("spec.configuration[{SAVEPOINT_DIR_KEY}]"), dir)?;
        }
        let checkpoints = self.storage.is_some()
            && self
                .configuration
                .contains_key("execution.checkpointing.interval");
        if matches!(
            self.job.upgrade_mode,
            UpgradeMode::Savepoint | UpgradeMode::LastState
        ) && !checkpoints
        {
            let mode = match self.job.upgrade_mode {
                UpgradeMode::Savepoint => "savepoint",
                _ => "last-state",
            };
            return field_error(
                "spec.job.upgradeMode",
                format!(
                    "{mode} carries the job's state through savepoints and checkpoints: set spec.storage \
                     and spec.configuration[execution.checkpointing.interval] (a STREAMING job), or use stateless"
                ),
            );
        }
        if let Some(v) = self.configuration.get(PERIODIC_SAVEPOINT_INTERVAL_KEY)
            && parse_duration(v).is_none()
        {
            return field_error(
                format!("spec.configuration[{PERIODIC_SAVEPOINT_INTERVAL_KEY}]"),
                format!("expected a duration such as \"1 h\" or \"10 min\", got {v:?}"),
            );
        }
        if let Some(v) = self.configuration.get(JM_SHUTDOWN_TTL_KEY)
            && parse_duration(v).is_none()
        {
            return field_error(
                format!("spec.configuration[{JM_SHUTDOWN_TTL_KEY}]"),
                format!("expected a duration such as \"1 d\" or \"10 min\", got {v:?}"),
            );
        }
        if let Some(v) = self.configuration.get(SAVEPOINT_HISTORY_MAX_COUNT_KEY)
            && !v.trim().parse::<u32>().is_ok_and(|n| n > 0)
        {
            return field_error(
                format!("spec.configuration[{SAVEPOINT_HISTORY_MAX_COUNT_KEY}]"),
                format!("expected a positive integer, got {v:?}"),
            );
        }
        if let Some(v) = self.configuration.get(SAVEPOINT_HISTORY_MAX_AGE_KEY)
            && parse_duration(v).is_none_or(|d| d.is_zero())
        {
            return field_error(
                format!("spec.configuration[{SAVEPOINT_HISTORY_MAX_AGE_KEY}]"),
                format!("expected a positive duration such as \"7 d\" or \"24 h\", got {v:?}"),
            );
        }
        for key in [SAVEPOINT_CLEANUP_KEY, SAVEPOINT_DISPOSE_ON_DELETE_KEY] {
            if let Some(v) = self.configuration.get(key)
                && !matches!(v.trim(), "true" | "false")
            {
                return field_error(
                    format!("spec.configuration[{key}]"),
                    format!("expected true or false, got {v:?}"),
                );
            }
        }
        if let Some(path) = &self.job.initial_savepoint_path {
            storage::validate_url("spec.job.initialSavepointPath", path)?;
            if self.storage.is_none()
                || !self
                    .configuration
                    .contains_key("execution.checkpointing.interval")
            {
                return field_error(
                    "spec.job.initialSavepointPath",
                    "a job restores a savepoint's state through its checkpoints: set spec.storage and spec.configuration[execution.checkpointing.interval]",
                );
            }
        }
        Ok(())
    }

    /// The configuration a job is submitted with: the manifest's keys plus runtime mode and parallelism
    /// from `spec.job` (the manifest's explicit keys win for anything else).
    pub fn job_configuration(&self) -> BTreeMap<String, String> {
        let mut conf = self.configuration.clone();
        conf.insert("execution.runtime-mode".into(), self.job.mode.flink_name().into());
        let parallelism = match self.job.parallelism {
            Parallelism::Fixed(n) => n.to_string(),
            Parallelism::Auto => "-1".into(),
        };
        conf.insert("parallelism.default".into(), parallelism);
        // `initialSavepointPath` is not here: it applies to the FlinkJob's first deployment only,
        // which the JobManager tells from its operation log.
        if let Some(allow) = self.job.allow_non_restored_state {
            conf.entry(IGNORE_UNCLAIMED_KEY.into())
                .or_insert_with(|| allow.to_string());
        }
        conf
    }

    /// The job's storage prefix, `{storage.url}/{namespace}/{name}`: where its operation log,
    /// checkpoints and remote partitions live.
    pub fn job_storage_url(&self, namespace: &str, name: &str) -> Option<String> {
        let url = &self.storage.as_ref()?.url;
        Some(format!("{}/{namespace}/{name}", url.trim_end_matches('/')))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: floe.dev/v1alpha1
kind: FlinkJob
metadata: { name: wordcount }
spec:
  image: ghcr.io/floe-dev/floe-worker:0.1.0
  job:
    name: wordcount
    args: ["--input", "data/words.txt", "--output", "out/wordcount"]
    parallelism: 4
    mode: batch
  taskManager: { replicas: 2, slots: 2, resources: { cpu: "1", memory: 2Gi } }
  configuration:
    execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING
"#;

    #[test]
    fn parses_the_design_example() {
        let job = FlinkJob::from_yaml(GOOD).unwrap();
        assert_eq!(job.name(), "wordcount");
        assert_eq!(job.spec.job.parallelism, Parallelism::Fixed(4));
        assert_eq!(job.spec.job.mode, RuntimeMode::Batch);
        assert_eq!(job.total_slots(), 4);
        let conf = job.job_configuration();
        assert_eq!(conf["execution.runtime-mode"], "BATCH");
        assert_eq!(conf["parallelism.default"], "4");
    }

    #[test]
    fn a_resource_round_trips_through_json_as_the_api_server_returns_it() {
        let job = FlinkJob::from_yaml(GOOD).unwrap();
        let json = serde_json::to_value(&job).unwrap();
        assert_eq!(json["apiVersion"], "floe.dev/v1alpha1");
        assert_eq!(json["kind"], "FlinkJob");
        assert_eq!(json["spec"]["taskManager"]["replicas"], 2);
        assert_eq!(json["spec"]["job"]["parallelism"], 4);
        let back: FlinkJob = serde_json::from_value(json).unwrap();
        assert_eq!(back, job);
    }

    fn err(text: &str) -> String {
        FlinkJob::from_yaml(text).unwrap_err().to_string()
    }

    /// What the schema lets through, the types read the same way: `null` for a defaulted
    /// parallelism is its default; `0` and `"4"` are refused naming it.
    #[test]
    fn a_null_parallelism_is_the_default_and_others_are_refused() {
        let job = FlinkJob::from_yaml(&GOOD.replace("parallelism: 4", "parallelism: null")).unwrap();
        assert_eq!(job.spec.job.parallelism, Parallelism::Fixed(1));
        for bad in ["0", "\"4\""] {
            let e = err(&GOOD.replace("parallelism: 4", &format!("parallelism: {bad}")));
            assert!(
                e.contains("parallelism: expected a positive integer or \"auto\""),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn errors_name_the_field() {
        let e = err(&GOOD.replace("replicas: 2", "replicas: two"));
        assert!(e.contains("spec.taskManager.replicas"), "{e}");
        let e = err(&GOOD.replace("parallelism: 4", "parallelism: lots"));
        assert!(
            e.contains("spec.job: parallelism: expected a positive integer or \"auto\", got \"lots\""),
            "{e}"
        );
        let e = err(&GOOD.replace("mode: batch", "mode: fast"));
        assert!(
            e.contains("spec.job.mode") && e.contains("unknown variant `fast`"),
            "{e}"
        );
        let e = err(&GOOD.replace("kind: FlinkJob", "kind: Deployment"));
        assert_eq!(
            e,
            "invalid manifest: kind: expected \"FlinkJob\", got \"Deployment\""
        );
        let e = err(&GOOD.replace("replicas: 2", "replicas: 0"));
        assert_eq!(
            e,
            "invalid manifest: spec.taskManager.replicas: expected at least 1"
        );
        let e = err(&GOOD.replace("ALL_EXCHANGES_BLOCKING", "SOMETIMES"));
        assert!(
            e.contains("spec.configuration[execution.batch-shuffle-mode]"),
            "{e}"
        );
        let e = err(&GOOD.replace("  taskManager:", "  taskManagers:"));
        assert!(e.contains("unknown field `taskManagers`"), "{e}");
        let e = err(&GOOD.replace("name: wordcount }", "name: Word_Count }"));
        assert!(e.contains("metadata.name"), "{e}");
        let e = err(&GOOD.replace("memory: 2Gi", "memory: lots"));
        assert_eq!(
            e,
            "invalid manifest: spec.taskManager.resources.memory: expected a Kubernetes quantity such \
             as \"500m\", \"1\" or \"2Gi\", got \"lots\""
        );
    }

    /// Issue 13, item 1: storage a pod cannot use is refused at validation (an `InvalidSpec`), not
    /// in a crash loop.
    #[test]
    fn storage_urls_the_storage_layer_cannot_open_are_refused() {
        let with = |url: &str| {
            GOOD.replace(
                "  configuration:",
                &format!("  storage: {{ url: \"{url}\" }}\n  configuration:"),
            )
        };
        for good in ["s3://bucket/jobs", "file:///var/lib/floe", "file:///data/"] {
            assert!(FlinkJob::from_yaml(&with(good)).is_ok(), "{good}");
        }
        let e = err(&with("gs://bucket/jobs"));
        assert!(
            e.contains("spec.storage.url: expected an s3:// or file:// URL"),
            "{e}"
        );
        assert!(e.contains("the \"gs\" scheme cannot be opened"), "{e}");
        assert!(e.contains("storage.googleapis.com"), "{e}");
        let e = err(&with("file:///"));
        assert!(
            e.contains("spec.storage.url: \"file:///\" is the root of the file system"),
            "{e}"
        );
        let e = err(&with("file://var/lib"));
        assert!(e.contains("expected an absolute path after file://"), "{e}");
        let e = err(&with("/var/lib/floe"));
        assert!(e.contains("expected an s3:// or file:// URL"), "{e}");
    }

    #[test]
    fn quantities() {
        for q in ["1", "500m", "0.5", "2Gi", "512Mi", "1G"] {
            assert!(is_quantity(q), "{q}");
        }
        for q in ["", "Gi", "2 Gi", "-1", "1.2.3", "2gb", "0"] {
            assert!(!is_quantity(q), "{q}");
        }
    }
}
