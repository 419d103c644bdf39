//! The FlinkJob manifest (DESIGN.md "One unit"): the same YAML runs under `floe run -f` and under the
//! operator. Read [`FlinkJob`] first; [`FlinkJob::from_yaml`] parses and validates, and every error
//! names the field that is wrong and what was expected.

use std::collections::BTreeMap;
use std::fmt;

use floe_scheduler::BatchShuffleMode;
use serde::{Deserialize, Deserializer, Serialize};

pub const API_VERSION: &str = "floe.dev/v1alpha1";
pub const KIND: &str = "FlinkJob";

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// YAML that does not fit the schema; serde_yaml's message carries the field path and line.
    #[error("invalid manifest: {0}")]
    Syntax(String),
    #[error("invalid manifest: {field}: {message}")]
    Field { field: &'static str, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A FlinkJob resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlinkJob {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: FlinkJobSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_yaml::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_yaml::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlinkJobSpec {
    /// Worker image; used by the operator only.
    #[serde(default)]
    pub image: Option<String>,
    pub job: JobSpec,
    #[serde(default)]
    pub job_manager: Option<ProcessSpec>,
    pub task_manager: TaskManagerSpec,
    #[serde(default)]
    pub storage: Option<StorageSpec>,
    /// Flink-style configuration keys.
    #[serde(default)]
    pub configuration: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobSpec {
    /// A job registered in the worker binary.
    pub name: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub parallelism: Parallelism,
    #[serde(default)]
    pub mode: RuntimeMode,
    #[serde(default)]
    pub state: DesiredState,
    #[serde(default)]
    pub upgrade_mode: UpgradeMode,
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
        match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom("parallelism: expected a positive integer or \"auto\""))?
        {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesiredState {
    #[default]
    Running,
    Suspended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpgradeMode {
    #[default]
    Stateless,
    Savepoint,
    LastState,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessSpec {
    #[serde(default)]
    pub resources: Option<Resources>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskManagerSpec {
    pub replicas: u32,
    pub slots: u32,
    #[serde(default)]
    pub resources: Option<Resources>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSpec {
    pub url: String,
}

impl FlinkJob {
    /// Parses and validates a manifest.
    pub fn from_yaml(text: &str) -> Result<FlinkJob> {
        let job: FlinkJob = serde_yaml::from_str(text).map_err(|e| Error::Syntax(e.to_string()))?;
        job.validate()?;
        Ok(job)
    }

    /// Checks what the schema cannot: names, kinds and numbers in range.
    pub fn validate(&self) -> Result<()> {
        let field = |field: &'static str, message: String| Err(Error::Field { field, message });
        if self.api_version != API_VERSION {
            return field(
                "apiVersion",
                format!("expected {API_VERSION:?}, got {:?}", self.api_version),
            );
        }
        if self.kind != KIND {
            return field("kind", format!("expected {KIND:?}, got {:?}", self.kind));
        }
        let name = &self.metadata.name;
        let dns_label = !name.is_empty()
            && name.len() <= 63
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        if !dns_label {
            return field(
                "metadata.name",
                format!("expected a DNS label (lowercase letters, digits, '-', at most 63), got {name:?}"),
            );
        }
        if self.spec.job.name.trim().is_empty() {
            return field(
                "spec.job.name",
                "expected the name of a registered job, got an empty string".into(),
            );
        }
        if self.spec.task_manager.replicas == 0 {
            return field("spec.taskManager.replicas", "expected at least 1".into());
        }
        if self.spec.task_manager.slots == 0 {
            return field("spec.taskManager.slots", "expected at least 1".into());
        }
        if let Some(Err(e)) = self
            .spec
            .configuration
            .get("execution.batch-shuffle-mode")
            .map(|m| m.parse::<BatchShuffleMode>())
        {
            return field("spec.configuration[execution.batch-shuffle-mode]", e.to_string());
        }
        if let Some(storage) = &self.spec.storage {
            let known = ["file://", "s3://", "gs://", "memory://"];
            if !known.iter().any(|p| storage.url.starts_with(p)) {
                return field(
                    "spec.storage.url",
                    format!("expected file://, s3:// or gs:// URL, got {:?}", storage.url),
                );
            }
        }
        Ok(())
    }

    /// Total slots the manifest's TaskManagers offer.
    pub fn total_slots(&self) -> u32 {
        self.spec
            .task_manager
            .replicas
            .saturating_mul(self.spec.task_manager.slots)
    }

    /// The configuration a job is submitted with: the manifest's keys plus runtime mode and parallelism
    /// from `spec.job` (the manifest's explicit keys win for anything else).
    pub fn job_configuration(&self) -> BTreeMap<String, String> {
        let mut conf = self.spec.configuration.clone();
        let mode = match self.spec.job.mode {
            // Built-in sources are bounded files or bounded generators: AUTOMATIC resolves to BATCH
            // unless the job says otherwise when it is built.
            RuntimeMode::Automatic => RuntimeMode::Automatic.flink_name(),
            m => m.flink_name(),
        };
        conf.insert("execution.runtime-mode".into(), mode.into());
        match self.spec.job.parallelism {
            Parallelism::Fixed(n) => {
                conf.insert("parallelism.default".into(), n.to_string());
            }
            Parallelism::Auto => {
                conf.insert("parallelism.default".into(), "-1".into());
            }
        }
        conf
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
  image: floe/worker:0.1.0
  job:
    name: wordcount
    args: ["--input", "data/words.txt", "--output", "out/wordcount"]
    parallelism: 4
    mode: batch
  taskManager: { replicas: 2, slots: 2 }
  configuration:
    execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING
"#;

    #[test]
    fn parses_the_design_example() {
        let job = FlinkJob::from_yaml(GOOD).unwrap();
        assert_eq!(job.spec.job.parallelism, Parallelism::Fixed(4));
        assert_eq!(job.spec.job.mode, RuntimeMode::Batch);
        assert_eq!(job.total_slots(), 4);
        let conf = job.job_configuration();
        assert_eq!(conf["execution.runtime-mode"], "BATCH");
        assert_eq!(conf["parallelism.default"], "4");
    }

    fn err(text: &str) -> String {
        FlinkJob::from_yaml(text).unwrap_err().to_string()
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
    }
}
