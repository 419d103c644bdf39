//! Secrets a job's pods mount (Flink's `kubernetes.secrets: name:/path,...`), and the internal
//! TLS files that must come from one of them (issue 13, item 12). A Secret holds what must not be
//! in the ConfigMap: internal TLS keys, or whatever a job's own code reads.

use std::collections::BTreeMap;

use crate::{FlinkJob, Result, field_error};

/// Flink's key: `name:/mount/path,name2:/other/path`.
pub const KUBERNETES_SECRETS_KEY: &str = "kubernetes.secrets";
/// The internal TLS keys that name files.
const TLS_FILE_KEYS: [&str; 3] = [
    "security.ssl.internal.keystore",
    "security.ssl.internal.key",
    "security.ssl.internal.truststore",
];

/// One Secret mounted into every pod of the job, read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMount {
    pub secret: String,
    pub path: String,
}

/// The Secrets `kubernetes.secrets` names, or an error naming the entry that is not
/// `name:/absolute/path`.
pub fn kubernetes_secrets(conf: &BTreeMap<String, String>) -> Result<Vec<SecretMount>> {
    let Some(value) = conf.get(KUBERNETES_SECRETS_KEY) else {
        return Ok(Vec::new());
    };
    let field = format!("spec.configuration[{KUBERNETES_SECRETS_KEY}]");
    let mut mounts = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once(':') {
            Some((secret, path))
                if !secret.is_empty()
                    && secret
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                    && path.starts_with('/')
                    && path.len() > 1 =>
            {
                mounts.push(SecretMount {
                    secret: secret.to_string(),
                    path: path.trim_end_matches('/').to_string(),
                });
            }
            _ => {
                return field_error(
                    field,
                    format!(
                        "expected secret-name:/absolute/mount/path entries separated by commas, got {entry:?}"
                    ),
                );
            }
        }
    }
    Ok(mounts)
}

impl FlinkJob {
    /// In a cluster the internal TLS files come from a mounted Secret: each
    /// `security.ssl.internal.*` file is under a `kubernetes.secrets` mount.
    pub(crate) fn validate_secrets_for_cluster(&self) -> Result<()> {
        let conf = &self.spec.configuration;
        let mounts = kubernetes_secrets(conf)?;
        let enabled = conf
            .get("security.ssl.internal.enabled")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if !enabled {
            return Ok(());
        }
        for key in TLS_FILE_KEYS {
            let Some(path) = conf.get(key) else { continue };
            let mounted = mounts.iter().any(|m| path.starts_with(&format!("{}/", m.path)));
            if !mounted {
                return field_error(
                    format!("spec.configuration[{key}]"),
                    format!(
                        "{path:?} is not in a Secret the pods mount: name the Secret in \
                         spec.configuration[{KUBERNETES_SECRETS_KEY}] (secret-name:/mount/path) and \
                         point here under that path"
                    ),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(conf: &str) -> FlinkJob {
        FlinkJob::from_yaml(&format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: j }}\nspec:\n  job: {{ name: wordcount }}\n  taskManager: {{ replicas: 1, slots: 1 }}\n  configuration:\n{conf}"
        ))
        .unwrap()
    }

    #[test]
    fn secrets_parse_and_internal_tls_files_must_be_in_one() {
        let tls = "    security.ssl.internal.enabled: \"true\"\n    security.ssl.internal.keystore: /etc/floe/tls/tls.crt\n    security.ssl.internal.key: /etc/floe/tls/tls.key\n    security.ssl.internal.truststore: /etc/floe/tls/ca.crt\n";
        let ok = job(&format!(
            "    kubernetes.secrets: \"floe-internal-tls:/etc/floe/tls, other:/opt/x\"\n{tls}"
        ));
        ok.validate_for_cluster().unwrap();
        assert_eq!(
            kubernetes_secrets(&ok.spec.configuration).unwrap(),
            vec![
                SecretMount {
                    secret: "floe-internal-tls".into(),
                    path: "/etc/floe/tls".into()
                },
                SecretMount {
                    secret: "other".into(),
                    path: "/opt/x".into()
                },
            ]
        );
        let e = job(tls).validate_for_cluster().unwrap_err().to_string();
        assert!(
            e.contains("spec.configuration[security.ssl.internal.keystore]: \"/etc/floe/tls/tls.crt\" is not in a Secret"),
            "{e}"
        );
        let e = job("    kubernetes.secrets: \"tls\"\n")
            .validate_for_cluster()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.configuration[kubernetes.secrets]: expected secret-name:/absolute/mount/path"),
            "{e}"
        );
    }
}
