//! Where a job's durable data lives (`spec.storage`), and what a cluster needs of it that a laptop
//! does not. `floe run` keeps job storage in its work directory whatever the manifest says; in a
//! cluster every pod of the job must reach the same storage, as the pods' user (65532), on any node,
//! without a credential ever landing in the job's ConfigMap. [`FlinkJob::validate_for_cluster`]
//! refuses what cannot work there, naming the field.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{FlinkJob, Result, field_error};

/// `spec.storage`: object storage, or a directory on a PersistentVolumeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageSpec {
    /// `s3://bucket/prefix` (AWS S3 or any S3-compatible store: MinIO, Ceph, Google Cloud
    /// Storage's XML API), or `file:///dir`: in a cluster, a directory on the PersistentVolumeClaim
    /// `persistentVolumeClaim` names, which the operator mounts at `/dir` in every pod.
    pub url: String,
    /// The name of a Secret in the FlinkJob's namespace whose keys become environment variables of
    /// the job's pods: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, and where needed
    /// `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`. The credentials stay in the Secret:
    /// they are never copied into the job's ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// The name of a PersistentVolumeClaim in the FlinkJob's namespace that holds a `file://`
    /// URL's directory. Pods of one job may run on several nodes: the claim needs the
    /// `ReadWriteMany` access mode there (`ReadWriteOnce` holds only on a one-node cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<String>,
}

/// The S3 settings of the configuration that would carry a credential into the ConfigMap.
const CREDENTIAL_KEYS: [&str; 3] = ["s3.access-key", "s3.secret-key", "s3.session-token"];
/// Environment variables that hold a credential: a pod template may take them from a Secret
/// (`valueFrom`), never as a literal value.
const CREDENTIAL_ENV: [&str; 3] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

impl StorageSpec {
    /// What holds anywhere a manifest runs: the URL opens, and the Secret and claim go with the
    /// URLs they serve.
    pub(crate) fn validate(&self) -> Result<()> {
        validate_url("spec.storage.url", &self.url)?;
        if let Some(secret) = &self.credentials_secret {
            check_object_name("spec.storage.credentialsSecret", secret)?;
            if !self.url.starts_with("s3://") {
                return field_error(
                    "spec.storage.credentialsSecret",
                    format!(
                        "holds credentials for s3:// storage, but spec.storage.url is {:?}",
                        self.url
                    ),
                );
            }
        }
        if let Some(claim) = &self.persistent_volume_claim {
            check_object_name("spec.storage.persistentVolumeClaim", claim)?;
            if !self.url.starts_with("file://") {
                return field_error(
                    "spec.storage.persistentVolumeClaim",
                    format!(
                        "holds a file:// directory (spec.storage.url: file:///mnt/floe), but spec.storage.url is {:?}",
                        self.url
                    ),
                );
            }
        }
        Ok(())
    }

    /// The directory of a `file://` URL (`/var/lib/floe`), `None` for object storage.
    pub fn directory(&self) -> Option<&str> {
        let path = self.url.strip_prefix("file://")?;
        path.starts_with('/').then(|| path.trim_end_matches('/'))
    }
}

impl FlinkJob {
    /// [`FlinkJob::validate`] plus what a cluster needs (the operator's check): storage every pod
    /// reaches on any node (`s3://`, or `file://` on a PersistentVolumeClaim; not a node's directory,
    /// not `memory://`), no credential written in clear into the spec (the spec is copied into
    /// the job's ConfigMap), internal TLS files from a mounted Secret.
    pub fn validate_for_cluster(&self) -> Result<()> {
        self.validate()?;
        self.validate_secrets_for_cluster()?;
        let spec = &self.spec;
        if let Some(storage) = &spec.storage {
            if storage.url.starts_with("memory://") {
                return field_error(
                    "spec.storage.url",
                    "memory:// storage lives in one process, and a job's JobManager and TaskManagers are \
                     pods of their own: use s3://, or file:// on spec.storage.persistentVolumeClaim",
                );
            }
            if storage.directory().is_some() && storage.persistent_volume_claim.is_none() {
                return field_error(
                    "spec.storage.url",
                    format!(
                        "{:?} in a cluster needs spec.storage.persistentVolumeClaim: a node's own directory \
                         is neither shared with pods on other nodes nor writable by the pods' user \
                         (65532); use s3://, or name a PersistentVolumeClaim (ReadWriteMany when the \
                         job's pods may run on several nodes)",
                        storage.url
                    ),
                );
            }
        }
        self.validate_savepoint_dir_for_cluster()?;
        for key in CREDENTIAL_KEYS {
            if spec.configuration.contains_key(key) {
                return field_error(
                    format!("spec.configuration[{key}]"),
                    "a credential here is written in clear into the job's ConfigMap: put it in a Secret \
                     (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and name the Secret in \
                     spec.storage.credentialsSecret",
                );
            }
        }
        let env = spec.pod_template.iter().flat_map(|t| t.env.iter());
        for (i, var) in env.enumerate() {
            if CREDENTIAL_ENV.contains(&var.name.as_str()) && var.value.is_some() {
                return field_error(
                    format!("spec.podTemplate.env[{i}] ({})", var.name),
                    "a credential as a literal value is written in clear into the job's ConfigMap: take it \
                     from a Secret (valueFrom.secretKeyRef), or name the Secret in \
                     spec.storage.credentialsSecret",
                );
            }
        }
        Ok(())
    }
}

impl FlinkJob {
    /// `state.savepoints.dir` where every pod, and the next deployment, finds it: a savepoint in
    /// a pod's own directory or in `memory://` is gone with the pod, and an upgrade or resume
    /// from it then fails (issue 32, item 7). A `file://` directory must lie on the storage's
    /// PersistentVolumeClaim (under `spec.storage.url`'s directory), the one volume the pods share.
    fn validate_savepoint_dir_for_cluster(&self) -> Result<()> {
        let key = crate::SAVEPOINT_DIR_KEY;
        let Some(dir) = self.spec.configuration.get(key) else {
            return Ok(());
        };
        let field = format!("spec.configuration[{key}]");
        if dir.starts_with("memory://") {
            return field_error(
                field,
                "memory:// lives in one process: a savepoint there is gone with the JobManager's pod;                  use s3://, or a file:// directory under spec.storage.url on its PersistentVolumeClaim",
            );
        }
        // A plain path is a local directory, as `file://` is.
        let path = match dir.strip_prefix("file://") {
            Some(path) => path,
            None if !dir.contains("://") => dir.as_str(),
            None => return Ok(()),
        };
        let path = path.trim_end_matches('/');
        let mounted = self
            .spec
            .storage
            .as_ref()
            .filter(|s| s.persistent_volume_claim.is_some())
            .and_then(StorageSpec::directory);
        // A relative path is under the pods' working directory: the claim's, when there is one.
        if !path.starts_with('/') && mounted.is_some() {
            return Ok(());
        }
        match mounted {
            Some(root) if path == root || path.starts_with(&format!("{root}/")) => Ok(()),
            Some(root) => field_error(
                field,
                format!(
                    "{dir:?} is not on the job's PersistentVolumeClaim, mounted at {root:?}                      (spec.storage.url): a savepoint elsewhere stays in one pod's file system; use a                      directory under it, like file://{root}/savepoints, or s3://"
                ),
            ),
            None => field_error(
                field,
                format!(
                    "{dir:?} in a cluster is a directory of one pod's own file system: a savepoint                      there is gone with the pod; use s3://, or a directory under spec.storage.url on                      its spec.storage.persistentVolumeClaim"
                ),
            ),
        }
    }
}

/// A Secret's or claim's name: a DNS subdomain (lowercase letters, digits, '-' and '.').
fn check_object_name(field: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        field_error(
            field,
            format!(
                "expected the name of an object in the FlinkJob's namespace (lowercase letters, digits, \
                 '-' and '.'), got {name:?}"
            ),
        )
    }
}

/// A URL of object storage Floe can open, at `field`: `s3://` (any S3-compatible store), `file://`
/// with an absolute directory other than the root, `memory://` (one process, tests). `gs://` and
/// other schemes are refused with what to use instead, here rather than in a crash loop.
pub(crate) fn validate_url(field: &str, url: &str) -> Result<()> {
    if url.starts_with("s3://") || url.starts_with("memory://") {
        return Ok(());
    }
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return field_error(
                field,
                format!("expected an absolute path after file:// (file:///var/lib/floe), got {url:?}"),
            );
        }
        if path.trim_end_matches('/').is_empty() {
            return field_error(
                field,
                format!(
                    "{url:?} is the root of the file system: expected a directory for the job's \
                     storage, like file:///var/lib/floe"
                ),
            );
        }
        return Ok(());
    }
    let scheme = url.split_once("://").map_or(url, |(s, _)| s);
    field_error(
        field,
        format!(
            "expected an s3:// or file:// URL, got {url:?}: the {scheme:?} scheme cannot be opened \
             (for Google Cloud Storage use s3:// with its S3-compatible endpoint, \
             s3.endpoint: https://storage.googleapis.com)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = r#"
apiVersion: floe.dev/v1alpha1
kind: FlinkJob
metadata: { name: wordcount }
spec:
  job: { name: wordcount, args: [] }
  taskManager: { replicas: 1, slots: 1 }
"#;

    fn with_storage(storage: &str) -> String {
        format!("{JOB}  storage: {storage}\n")
    }

    fn cluster_error(text: &str) -> String {
        FlinkJob::from_yaml(text)
            .and_then(|job| job.validate_for_cluster())
            .unwrap_err()
            .to_string()
    }

    /// Issue 32, item 7: the savepoint directory is checked like the storage URL, and in a cluster
    /// it must be where every pod and the next deployment find it.
    #[test]
    fn the_savepoint_directory_is_checked_like_the_storage_url() {
        let with = |storage: &str, dir: &str| {
            format!("{JOB}  configuration: {{ state.savepoints.dir: \"{dir}\" }}\n  storage: {storage}\n")
        };
        let claimed = r#"{ url: "file:///mnt/floe", persistentVolumeClaim: floe-jobs }"#;
        let s3 = r#"{ url: "s3://jobs/prod" }"#;
        for (storage, dir) in [
            (claimed, "file:///mnt/floe/savepoints"),
            (claimed, "file:///mnt/floe"),
            (claimed, "/mnt/floe/savepoints"),
            (claimed, "savepoints"),
            (claimed, "s3://jobs/savepoints"),
            (s3, "s3://jobs/savepoints"),
        ] {
            let job = FlinkJob::from_yaml(&with(storage, dir)).unwrap();
            assert!(job.validate_for_cluster().is_ok(), "{dir} with {storage}");
        }
        // Anywhere: a scheme that cannot be opened, named with the field.
        let err = FlinkJob::from_yaml(&with(s3, "gs://jobs/savepoints"))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.configuration[state.savepoints.dir]"), "{err}");
        assert!(err.contains("s3:// or file://"), "{err}");
        // In a cluster: a pod's own directory (beside the claim, or with s3:// storage), memory://.
        for (storage, dir, says) in [
            (
                claimed,
                "file:///mnt/floe-savepoints",
                "not on the job's PersistentVolumeClaim",
            ),
            (s3, "file:///var/savepoints", "one pod's own file system"),
            (s3, "/var/savepoints", "one pod's own file system"),
            (s3, "savepoints", "one pod's own file system"),
            (
                claimed,
                "/var/savepoints",
                "not on the job's PersistentVolumeClaim",
            ),
            (s3, "memory://savepoints", "memory:// lives in one process"),
        ] {
            let err = cluster_error(&with(storage, dir));
            assert!(err.contains("spec.configuration[state.savepoints.dir]"), "{err}");
            assert!(err.contains(says), "{dir}: {err}");
        }
    }

    /// Issue 13, item 1: in a cluster, job storage is object storage or a claim the spec names.
    #[test]
    fn a_cluster_takes_s3_or_a_claimed_directory_and_refuses_a_nodes_directory() {
        for good in [
            r#"{ url: "s3://jobs/prod", credentialsSecret: s3-credentials }"#,
            r#"{ url: "s3://jobs/prod" }"#,
            r#"{ url: "file:///mnt/floe", persistentVolumeClaim: floe-jobs }"#,
        ] {
            let job = FlinkJob::from_yaml(&with_storage(good)).unwrap();
            job.validate_for_cluster()
                .unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        let e = cluster_error(&with_storage(r#"{ url: "file:///var/lib/floe" }"#));
        assert!(
            e.starts_with(
                "invalid manifest: spec.storage.url: \"file:///var/lib/floe\" in a cluster needs \
                 spec.storage.persistentVolumeClaim"
            ),
            "{e}"
        );
        assert!(e.contains("65532"), "{e}");
        // The same manifest runs under `floe run`, which keeps its own storage.
        assert!(FlinkJob::from_yaml(&with_storage(r#"{ url: "file:///var/lib/floe" }"#)).is_ok());
        let e = cluster_error(&with_storage(r#"{ url: "memory://jobs" }"#));
        assert!(
            e.contains("spec.storage.url: memory:// storage lives in one process"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_and_a_claim_go_with_their_schemes_and_are_object_names() {
        let e = cluster_error(&with_storage(
            r#"{ url: "s3://jobs", persistentVolumeClaim: floe-jobs }"#,
        ));
        assert!(
            e.contains("spec.storage.persistentVolumeClaim: holds a file:// directory"),
            "{e}"
        );
        let e = cluster_error(&with_storage(
            r#"{ url: "file:///mnt/floe", persistentVolumeClaim: floe-jobs, credentialsSecret: s3 }"#,
        ));
        assert!(
            e.contains("spec.storage.credentialsSecret: holds credentials for s3:// storage"),
            "{e}"
        );
        let e = cluster_error(&with_storage(
            r#"{ url: "s3://jobs", credentialsSecret: My_Secret }"#,
        ));
        assert!(
            e.contains("spec.storage.credentialsSecret: expected the name of an object"),
            "{e}"
        );
        let e = cluster_error(&with_storage(r#"{ url: "s3://jobs", secret: s3 }"#));
        assert!(e.contains("unknown field `secret`"), "{e}");
    }

    /// The spec is copied into the job's ConfigMap: a credential in it would be readable by anyone
    /// who may read ConfigMaps.
    #[test]
    fn credentials_in_clear_are_refused_in_a_cluster() {
        let text = format!(
            "{}  configuration:\n    s3.secret-key: hunter2\n",
            with_storage(r#"{ url: "s3://jobs" }"#)
        );
        let e = cluster_error(&text);
        assert!(
            e.contains("spec.configuration[s3.secret-key]: a credential here is written in clear"),
            "{e}"
        );
        assert!(e.contains("spec.storage.credentialsSecret"), "{e}");
        let env = |var: &str| {
            format!(
                "{}  podTemplate:\n    env:\n    - {{ name: AWS_REGION, value: eu-west-1 }}\n    - {var}\n",
                with_storage(r#"{ url: "s3://jobs" }"#)
            )
        };
        let e = cluster_error(&env("{ name: AWS_SECRET_ACCESS_KEY, value: hunter2 }"));
        assert!(
            e.contains("spec.podTemplate.env[1] (AWS_SECRET_ACCESS_KEY): a credential as a literal value"),
            "{e}"
        );
        let from_secret =
            env("{ name: AWS_SECRET_ACCESS_KEY, valueFrom: { secretKeyRef: { name: s3, key: secret } } }");
        FlinkJob::from_yaml(&from_secret)
            .unwrap()
            .validate_for_cluster()
            .unwrap();
    }
}
