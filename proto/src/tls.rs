//! Mutual TLS on the internal gRPC connections (issue 13, item 12): JobManager <-> TaskManager
//! control calls and TaskManager <-> TaskManager shuffle streams. Flink's `security.ssl.internal.*`
//! keys, with PEM files where Flink takes Java keystores:
//!
//! - `security.ssl.internal.enabled`: `true` turns it on;
//! - `security.ssl.internal.keystore`: a PEM file with this process's certificate (chain) and its
//!   private key (may be two files: `security.ssl.internal.key` then names the key);
//! - `security.ssl.internal.truststore`: a PEM file with the CA certificates a peer's certificate
//!   must chain to;
//! - `security.ssl.internal.server-name` (default `floe-internal`): the name every process's
//!   certificate carries (a DNS subject alternative name) and every connection verifies. Peers are
//!   reached at pod IPs, which no certificate names; one shared name, as in Flink's internal SSL
//!   (one certificate for every process of a job), is what is checked.
//!
//! Both sides present and verify certificates: a server refuses a client without one the CA signed,
//! so only the job's own processes reach its RPC and shuffle ports. The setting is process-wide
//! ([`install`] once at start); [`crate::channel::endpoint`] and the servers read it.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

pub const ENABLED_KEY: &str = "security.ssl.internal.enabled";
pub const KEYSTORE_KEY: &str = "security.ssl.internal.keystore";
pub const KEY_KEY: &str = "security.ssl.internal.key";
pub const TRUSTSTORE_KEY: &str = "security.ssl.internal.truststore";
pub const SERVER_NAME_KEY: &str = "security.ssl.internal.server-name";
/// The name internal certificates carry unless `security.ssl.internal.server-name` says otherwise.
pub const DEFAULT_SERVER_NAME: &str = "floe-internal";

/// Why internal TLS could not be set up; names the key and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key}: expected a file, got none: with {ENABLED_KEY} set it names the PEM {what}")]
    Missing { key: &'static str, what: &'static str },
    #[error("{key}: cannot read {path}: {cause}")]
    Unreadable {
        key: &'static str,
        path: String,
        cause: std::io::Error,
    },
    #[error("{key}: {path} holds no PEM {what}")]
    NotPem {
        key: &'static str,
        path: String,
        what: &'static str,
    },
    #[error("{ENABLED_KEY}: expected true or false, got {0:?}")]
    Enabled(String),
    #[error("internal TLS was already set up differently in this process")]
    Conflict,
}

/// The process's internal TLS: its identity, the CA it trusts, the name it verifies.
#[derive(Debug, Clone)]
pub struct InternalTls {
    identity: Identity,
    ca: Certificate,
    server_name: String,
}

static INSTALLED: OnceLock<InternalTls> = OnceLock::new();

fn read(key: &'static str, path: &str, what: &'static str, marker: &str) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|cause| TlsError::Unreadable {
        key,
        path: path.to_string(),
        cause,
    })?;
    if !String::from_utf8_lossy(&bytes).contains(marker) {
        return Err(TlsError::NotPem {
            key,
            path: path.to_string(),
            what,
        });
    }
    Ok(bytes)
}

impl InternalTls {
    /// The internal TLS `conf` asks for: `None` when `security.ssl.internal.enabled` is not true.
    pub fn from_conf(conf: &BTreeMap<String, String>) -> Result<Option<InternalTls>, TlsError> {
        match conf.get(ENABLED_KEY).map(|v| v.trim().to_ascii_lowercase()) {
            None => return Ok(None),
            Some(v) if v == "false" => return Ok(None),
            Some(v) if v == "true" => {}
            Some(v) => return Err(TlsError::Enabled(v)),
        }
        let path = |key: &'static str, what: &'static str| {
            conf.get(key)
                .filter(|p| !p.trim().is_empty())
                .cloned()
                .ok_or(TlsError::Missing { key, what })
        };
        let keystore = path(KEYSTORE_KEY, "certificate and private key")?;
        let certificate = read(
            KEYSTORE_KEY,
            &keystore,
            "certificate",
            "-----BEGIN CERTIFICATE-----",
        )?;
        let (key_name, key_path) = match conf.get(KEY_KEY).filter(|p| !p.trim().is_empty()) {
            Some(p) => (KEY_KEY, p.clone()),
            None => (KEYSTORE_KEY, keystore),
        };
        let key = read(key_name, &key_path, "private key", "PRIVATE KEY-----")?;
        let truststore = path(TRUSTSTORE_KEY, "CA certificates")?;
        let ca = read(
            TRUSTSTORE_KEY,
            &truststore,
            "certificate",
            "-----BEGIN CERTIFICATE-----",
        )?;
        Ok(Some(InternalTls {
            identity: Identity::from_pem(certificate, key),
            ca: Certificate::from_pem(ca),
            server_name: conf
                .get(SERVER_NAME_KEY)
                .cloned()
                .unwrap_or_else(|| DEFAULT_SERVER_NAME.to_string()),
        }))
    }

    /// What a client presents and verifies.
    pub fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
            .domain_name(self.server_name.clone())
    }

    /// What a server presents, and the CA its clients' certificates must chain to.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(self.identity.clone())
            .client_ca_root(self.ca.clone())
    }
}

/// Sets up this process's internal TLS from `conf` (nothing when it is not enabled). Once per
/// process: a second call with TLS is refused.
pub fn install(conf: &BTreeMap<String, String>) -> Result<(), TlsError> {
    let Some(tls) = InternalTls::from_conf(conf)? else {
        return Ok(());
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    INSTALLED.set(tls).map_err(|_| TlsError::Conflict)
}

/// The internal TLS of this process, if [`install`] set it up.
pub fn installed() -> Option<&'static InternalTls> {
    INSTALLED.get()
}

/// A gRPC server builder that serves over mutual TLS when the process set it up.
pub fn server_builder() -> Result<tonic::transport::Server, tonic::transport::Error> {
    let builder = tonic::transport::Server::builder();
    match installed() {
        Some(tls) => {
            tracing::info!(server_name = %tls.server_name, "internal RPC over mutual TLS");
            builder.tls_config(tls.server())
        }
        None => Ok(builder),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_name_the_key() {
        let conf = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(InternalTls::from_conf(&conf(&[])).unwrap().is_none());
        assert!(
            InternalTls::from_conf(&conf(&[(ENABLED_KEY, "false")]))
                .unwrap()
                .is_none()
        );
        let e = InternalTls::from_conf(&conf(&[(ENABLED_KEY, "yes")])).unwrap_err();
        assert!(e.to_string().contains("expected true or false"), "{e}");
        let e = InternalTls::from_conf(&conf(&[(ENABLED_KEY, "true")])).unwrap_err();
        assert!(e.to_string().starts_with(KEYSTORE_KEY), "{e}");
        let e = InternalTls::from_conf(&conf(&[
            (ENABLED_KEY, "true"),
            (KEYSTORE_KEY, "/nonexistent/internal.pem"),
        ]))
        .unwrap_err();
        assert!(
            e.to_string().contains("cannot read /nonexistent/internal.pem"),
            "{e}"
        );
        let not_pem = std::env::temp_dir().join(format!("floe-not-pem-{}", std::process::id()));
        std::fs::write(&not_pem, "hello").unwrap();
        let e = InternalTls::from_conf(&conf(&[
            (ENABLED_KEY, "true"),
            (KEYSTORE_KEY, not_pem.to_str().unwrap()),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
        let _ = std::fs::remove_file(not_pem);
    }
}
