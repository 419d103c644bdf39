//! Object storage behind one wrapper: everything that must outlive a pod (the JobManager's operation
//! log, checkpoints, remote shuffle data) goes through [`ObjectStore`], opendal underneath.
//!
//! Read [`ObjectStore`] first. URLs: `file:///dir` (local disk, the default), `s3://bucket/prefix`
//! (endpoint, region and keys from configuration or the usual AWS environment variables), and
//! `memory://` (tests). Transient errors are retried with exponential backoff (opendal's RetryLayer);
//! every error names the object it concerns. [`ObjectStore::create`] is a conditional create (it fails
//! with [`Error::AlreadyExists`] when the object exists): fencing rests on it. [`envelope`] frames
//! objects with a length and a checksum, so a truncated or corrupt object is an error naming it.

pub mod envelope;
pub mod faults;
#[cfg(feature = "testing")]
pub mod faulty_proxy;
mod stream;
#[cfg(feature = "testing")]
pub mod testing;

pub use stream::{
    DEFAULT_PART_TIMEOUT, ObjectReader, ObjectWriter, PART_SIZE, PART_TIMEOUT_KEY, PARTS_IN_FLIGHT,
};

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::{ErrorKind, Operator, services};

/// The configuration key of a job's storage URL.
pub const JOB_STORAGE_KEY: &str = "floe.job-storage.url";

/// Why a storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid storage URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("object {url} does not exist")]
    NotFound { url: String },
    /// A conditional create found the object there: someone else created it first.
    #[error("object {url} already exists")]
    AlreadyExists { url: String },
    #[error("object {url} is corrupt: {reason}")]
    Corrupt { url: String, reason: String },
    /// What the store said, after retries for transient errors.
    #[error("storage operation on {url} failed: {source}")]
    Io {
        url: String,
        #[source]
        source: opendal::Error,
    },
    #[error("storage {url} cannot make conditional creates, which fencing needs")]
    NoConditionalCreate { url: String },
    #[error("{key}: {reason}")]
    InvalidConfiguration { key: String, reason: String },
}

impl Error {
    /// Whether trying again later may succeed (the store was unavailable), as opposed to an answer
    /// that will not change (missing, corrupt, already there).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.is_temporary())
    }

    /// Whether no retry, however late, can succeed: the URL or configuration is wrong, or the store
    /// answered that the object, bucket or access is not there.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::InvalidUrl { .. }
            | Error::InvalidConfiguration { .. }
            | Error::NoConditionalCreate { .. } => true,
            Error::Io { source, .. } => is_permanent_kind(source.kind()),
            _ => false,
        }
    }
}

/// opendal error kinds that describe the request rather than the store's health.
pub fn is_permanent_kind(kind: opendal::ErrorKind) -> bool {
    matches!(
        kind,
        opendal::ErrorKind::NotFound
            | opendal::ErrorKind::PermissionDenied
            | opendal::ErrorKind::IsADirectory
            | opendal::ErrorKind::NotADirectory
            | opendal::ErrorKind::ConfigInvalid
    )
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The most a storage call without a body to move (stat, delete, list, a create) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most one read or write of a call's body may wait for the store.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The process-wide HTTP client opendal's S3 service uses, over rustls with ring as its crypto
/// provider (first call wins; cheap after). A process that installed another provider keeps it.
fn install_http_client() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        opendal_http_transport_reqwest::install_default();
    });
}

/// Runs an idempotent storage operation (a read, or a write that replaces its object), trying again
/// on a retryable error, up to 5 more times with doubling delays from 100 ms: a store that was
/// unavailable for a moment beyond the retry layer fails the call only if it stays so for seconds.
pub async fn with_retries<T, F, Fut>(what: &str, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(100);
    for _ in 0..5 {
        match op().await {
            Err(e) if e.is_retryable() => {
                tracing::warn!("{what} failed, trying again in {} ms: {e}", delay.as_millis());
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            outcome => return outcome,
        }
    }
    op().await
}

/// Looks a setting up in the configuration, then in the environment.
fn setting(conf: &BTreeMap<String, String>, key: &str, env: &[&str]) -> Option<String> {
    conf.get(key)
        .cloned()
        .or_else(|| env.iter().find_map(|e| std::env::var(e).ok()))
        .filter(|v| !v.is_empty())
}

/// A bucket or directory, and a prefix inside it that every path is relative to.
#[derive(Debug, Clone)]
pub struct ObjectStore {
    /// Calls that end quickly or fail: every request bounded by [`CALL_TIMEOUT`] / [`IO_TIMEOUT`].
    op: Operator,
    /// Streamed transfers ([`stream`]): the same store, each part bounded by the part deadline.
    bulk: Operator,
    /// Prefix inside the operator's root: empty or ending with `/`, no leading `/`.
    prefix: String,
    /// The URL of the prefix, for messages (`s3://bucket/prefix/`).
    url: String,
    /// Injected faults ([`faults`]), shared by the store's scoped views.
    faults: Option<std::sync::Arc<faults::Faults>>,
}

fn normalize_prefix(p: &str) -> String {
    let p = p.trim_matches('/');
    if p.is_empty() {
        String::new()
    } else {
        format!("{p}/")
    }
}

impl ObjectStore {
    /// The job storage a job's configuration names (`floe.job-storage.url`, set from the
    /// FlinkJob's `spec.storage.url`): checkpoints, the operation log and remote partitions live
    /// there. `None` when the configuration has none.
    pub fn job_storage(conf: &BTreeMap<String, String>) -> Result<Option<ObjectStore>> {
        match conf.get(JOB_STORAGE_KEY) {
            Some(url) => ObjectStore::open(url, conf).map(Some),
            None => Ok(None),
        }
    }

    /// Opens a storage URL. `conf` may carry `s3.endpoint`, `s3.region`, `s3.access-key`,
    /// `s3.secret-key` (else `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, and `AWS_SESSION_TOKEN` for temporary credentials: in a cluster
    /// they come from the Secret `spec.storage.credentialsSecret` names).
    pub fn open(url: &str, conf: &BTreeMap<String, String>) -> Result<ObjectStore> {
        install_http_client();
        let invalid = |reason: &str| Error::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let io = |source| Error::Io {
            url: url.to_string(),
            source,
        };
        let (op, prefix, base) = if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid("expected s3://bucket/prefix"));
            }
            let mut b = services::S3::default().bucket(bucket).root("/");
            if let Some(v) = setting(conf, "s3.endpoint", &["AWS_ENDPOINT_URL", "S3_ENDPOINT"]) {
                b = b.endpoint(&v);
            }
            let region = setting(conf, "s3.region", &["AWS_REGION", "AWS_DEFAULT_REGION"])
                .unwrap_or_else(|| "us-east-1".to_string());
            b = b.region(&region);
            if let Some(v) = setting(conf, "s3.access-key", &["AWS_ACCESS_KEY_ID"]) {
                b = b.access_key_id(&v);
            }
            if let Some(v) = setting(conf, "s3.secret-key", &["AWS_SECRET_ACCESS_KEY"]) {
                b = b.secret_access_key(&v);
            }
            if let Some(v) = setting(conf, "s3.session-token", &["AWS_SESSION_TOKEN"]) {
                b = b.session_token(&v);
            }
            (
                Operator::new(b).map_err(io)?,
                prefix.to_string(),
                format!("s3://{bucket}/"),
            )
        } else if let Some(rest) = url.strip_prefix("memory://") {
            (
                Operator::new(services::Memory::default()).map_err(io)?,
                rest.to_string(),
                "memory://".to_string(),
            )
        } else if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(invalid("expected an absolute path: file:///dir"));
            }
            (
                Operator::new(services::Fs::default().root("/")).map_err(io)?,
                path.to_string(),
                "file:///".to_string(),
            )
        } else {
            return Err(invalid("expected file:///dir, s3://bucket/prefix or memory://"));
        };
        // Every call is bounded in time, inside the retry layer: across a network partition a
        // request on a dead connection gets no answer and no reset, and without a bound it would
        // wait as long as TCP retransmits (minutes) while its caller holds what it holds (the
        // JobManager's operation log, a checkpoint upload). Timed-out calls count as temporary.
        let layered = |op: Operator, io_timeout| {
            op.layer(
                TimeoutLayer::new()
                    .with_timeout(CALL_TIMEOUT)
                    .with_io_timeout(io_timeout),
            )
            .layer(
                RetryLayer::new()
                    .with_max_times(5)
                    .with_min_delay(Duration::from_millis(50))
                    .with_max_delay(Duration::from_secs(2))
                    .with_jitter(),
            )
        };
        // A part is a body of up to PART_SIZE: it gets the part deadline, not IO_TIMEOUT, and over
        // HTTP each of its requests does too (see `stream`).
        let part_deadline = stream::part_timeout(conf)?;
        let bulk_base = if url.starts_with("s3://") {
            let transport = stream::part_transport(part_deadline)?;
            op.clone()
                .with_context(op.context().with_http_transport(transport))
        } else {
            op.clone()
        };
        let bulk = layered(bulk_base, part_deadline);
        let op = layered(op, IO_TIMEOUT);
        let prefix = normalize_prefix(&prefix);
        let url = format!("{base}{prefix}");
        let faults = faults::Faults::from_configuration(conf)?.map(std::sync::Arc::new);
        Ok(ObjectStore {
            op,
            bulk,
            prefix,
            url,
            faults,
        })
    }

    /// The store under `path` (`{url}/{path}/`): a job's directory, a checkpoint's.
    pub fn scoped(&self, path: &str) -> ObjectStore {
        let prefix = normalize_prefix(&format!("{}{}", self.prefix, path.trim_matches('/')));
        let url = format!("{}{}", self.url.trim_end_matches(&self.prefix), prefix);
        ObjectStore {
            op: self.op.clone(),
            bulk: self.bulk.clone(),
            prefix,
            url,
            faults: self.faults.clone(),
        }
    }

    /// The URL of this store's prefix.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of an object, for messages.
    pub fn url_of(&self, path: &str) -> String {
        format!("{}{}", self.url, path.trim_start_matches('/'))
    }

    fn full(&self, path: &str) -> String {
        format!("{}{}", self.prefix, path.trim_start_matches('/'))
    }

    /// Runs a read through the injected faults, if any.
    async fn read_op<T>(&self, path: &str, op: impl Future<Output = Result<T>>) -> Result<T> {
        if let Some(f) = &self.faults
            && f.before(false).await != faults::Outcome::Proceed
        {
            return Err(faults::injected(self.url_of(path), false));
        }
        op.await
    }

    /// Runs a write through the injected faults, if any: it may fail before or after it happened.
    async fn write_op<T>(&self, path: &str, op: impl Future<Output = Result<T>>) -> Result<T> {
        match &self.faults {
            None => op.await,
            Some(f) => match f.before(true).await {
                faults::Outcome::Proceed => op.await,
                faults::Outcome::Fail => Err(faults::injected(self.url_of(path), false)),
                faults::Outcome::FailAfter => {
                    op.await?;
                    Err(faults::injected(self.url_of(path), true))
                }
            },
        }
    }

    fn io(&self, path: &str, source: opendal::Error) -> Error {
        match source.kind() {
            ErrorKind::NotFound => Error::NotFound {
                url: self.url_of(path),
            },
            ErrorKind::ConditionNotMatch | ErrorKind::AlreadyExists => Error::AlreadyExists {
                url: self.url_of(path),
            },
            _ => Error::Io {
                url: self.url_of(path),
                source,
            },
        }
    }

    /// Writes an object, replacing any previous one. A body larger than a part goes in parts
    /// ([`ObjectStore::writer`]), never in one request under one deadline.
    pub async fn put(&self, path: &str, bytes: impl Into<Bytes>) -> Result<()> {
        let bytes: Bytes = bytes.into();
        if bytes.len() > PART_SIZE {
            return self.write_in_parts(self.writer(path).await?, bytes).await;
        }
        self.write_op(path, async {
            self.op
                .write(&self.full(path), bytes)
                .await
                .map(|_| ())
                .map_err(|e| self.io(path, e))
        })
        .await
    }

    /// Creates an object only if none exists at `path`; [`Error::AlreadyExists`] otherwise. On S3 this
    /// is `If-None-Match: *` (on the completion of an upload in parts when the body is larger than
    /// a part), on a file system an exclusive create.
    pub async fn create(&self, path: &str, bytes: impl Into<Bytes>) -> Result<()> {
        if !self.op.info().capability().write_with_if_not_exists {
            return Err(Error::NoConditionalCreate {
                url: self.url.clone(),
            });
        }
        let bytes: Bytes = bytes.into();
        if bytes.len() > PART_SIZE {
            return self.write_in_parts(self.creator(path).await?, bytes).await;
        }
        self.write_op(path, async {
            self.op
                .write_with(&self.full(path), bytes)
                .if_not_exists(true)
                .await
                .map(|_| ())
                .map_err(|e| self.io(path, e))
        })
        .await
    }

    /// Reads a whole object; [`Error::NotFound`] names it when it is missing.
    pub async fn get(&self, path: &str) -> Result<Bytes> {
        self.read_op(path, async {
            self.op
                .read(&self.full(path))
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| self.io(path, e))
        })
        .await
    }

    /// Reads bytes `range` of an object (fewer at its end).
    pub async fn get_range(&self, path: &str, range: std::ops::Range<u64>) -> Result<Bytes> {
        self.read_op(path, async {
            self.op
                .read_with(&self.full(path))
                .range(range)
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| self.io(path, e))
        })
        .await
    }

    /// An object's size in bytes; [`Error::NotFound`] names it when it is missing.
    pub async fn size(&self, path: &str) -> Result<u64> {
        self.read_op(path, async {
            self.op
                .stat(&self.full(path))
                .await
                .map(|m| m.content_length())
                .map_err(|e| self.io(path, e))
        })
        .await
    }

    /// Reads an object, or `None` when it is missing.
    pub async fn get_opt(&self, path: &str) -> Result<Option<Bytes>> {
        match self.get(path).await {
            Ok(b) => Ok(Some(b)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Names directly under `dir` (relative to it, sorted); sub-directories end with `/`.
    pub async fn list(&self, dir: &str) -> Result<Vec<String>> {
        let dir_path = normalize_prefix(dir);
        let full = self.full(&dir_path);
        let listed = self
            .read_op(&dir_path, async { Ok(self.op.list(&full).await) })
            .await?;
        let entries = match listed {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io(&dir_path, e)),
        };
        let mut names: Vec<String> = entries
            .into_iter()
            .filter_map(|e| e.path().strip_prefix(&full).map(str::to_string))
            .filter(|n| !n.is_empty())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Objects under `dir` at any depth (paths relative to it, sorted), each with when it was
    /// last written as the store tells (S3's Last-Modified, a file's modification time; `None`
    /// where it tells nothing, even asked for one object).
    pub async fn list_all_with_times(
        &self,
        dir: &str,
    ) -> Result<Vec<(String, Option<std::time::SystemTime>)>> {
        let dir_path = normalize_prefix(dir);
        let full = self.full(&dir_path);
        let listed = self
            .read_op(&dir_path, async {
                Ok(self.op.list_with(&full).recursive(true).await)
            })
            .await?;
        let entries = match listed {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io(&dir_path, e)),
        };
        let mut objects = Vec::new();
        for e in entries {
            let Some(name) = e
                .path()
                .strip_prefix(&full)
                .filter(|n| !n.is_empty() && !n.ends_with('/'))
            else {
                continue;
            };
            let time = match e.metadata().last_modified() {
                Some(t) => Some(t),
                // Listings that leave it out (some stores): ask the object.
                None => match self.op.stat(e.path()).await {
                    Ok(meta) => meta.last_modified(),
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(self.io(&format!("{dir_path}{name}"), e)),
                },
            };
            objects.push((name.to_string(), time.map(std::time::SystemTime::from)));
        }
        objects.sort();
        Ok(objects)
    }

    /// Deletes an object; a missing one is not an error.
    pub async fn delete(&self, path: &str) -> Result<()> {
        self.write_op(path, async {
            self.op
                .delete(&self.full(path))
                .await
                .map_err(|e| self.io(path, e))
        })
        .await
    }

    /// Deletes objects, in batches where the store has them (S3's DeleteObjects, 1,000 a request);
    /// missing ones are not an error.
    pub async fn delete_many(&self, paths: &[String]) -> Result<()> {
        let Some(first) = paths.first() else {
            return Ok(());
        };
        let full: Vec<String> = paths.iter().map(|p| self.full(p)).collect();
        self.write_op(first, async {
            self.op.delete_iter(full).await.map_err(|e| self.io(first, e))
        })
        .await
    }

    /// Deletes everything under `dir`.
    pub async fn delete_all(&self, dir: &str) -> Result<()> {
        let dir_path = normalize_prefix(dir);
        self.write_op(&dir_path, async {
            self.op
                .delete_with(&self.full(&dir_path))
                .recursive(true)
                .await
                .map_err(|e| self.io(&dir_path, e))
        })
        .await
    }

    /// [`ObjectStore::create`] of [`envelope::seal`]`(payload)`, without copying the payload into
    /// the frame: a heap snapshot of gigabytes is not held twice.
    pub async fn create_sealed(&self, path: &str, payload: Bytes) -> Result<()> {
        if payload.len() + envelope::HEADER <= PART_SIZE {
            return self.create(path, envelope::seal(&payload)).await;
        }
        let mut writer = self.creator(path).await?;
        if let Err(e) = writer.write(envelope::header(&payload).to_vec()).await {
            return writer.close_or_abort(Err(e)).await.map(|_| ());
        }
        self.write_in_parts(writer, payload).await
    }

    /// Sends `bytes` through `writer` a part at a time (slices of one buffer: no copy).
    async fn write_in_parts(&self, mut writer: ObjectWriter, bytes: Bytes) -> Result<()> {
        let sent = async {
            let mut at = 0;
            while at < bytes.len() {
                let end = (at + PART_SIZE).min(bytes.len());
                writer.write(bytes.slice(at..end)).await?;
                at = end;
            }
            Ok(())
        }
        .await;
        writer.close_or_abort(sent).await.map(|_| ())
    }

    /// The opendal operator and the full path of `path`, for streaming reads and writes.
    pub fn raw(&self, path: &str) -> (Operator, String) {
        (self.op.clone(), self.full(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_store(name: &str) -> ObjectStore {
        let dir = std::env::temp_dir().join(format!("floe-storage-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap()
    }

    #[tokio::test]
    async fn put_get_list_delete_and_conditional_create_on_disk() {
        let store = temp_store("basic").scoped("ns/job");
        assert!(store.url().ends_with("/ns/job/"), "{}", store.url());
        store.put("a/1", "one").await.unwrap();
        store.put("a/2", "two").await.unwrap();
        store.put("b", "bee").await.unwrap();
        assert_eq!(store.get("a/1").await.unwrap(), "one");
        assert_eq!(store.list("a").await.unwrap(), ["1", "2"]);
        assert_eq!(store.list("").await.unwrap(), ["a/", "b"]);
        assert_eq!(store.list("missing").await.unwrap(), Vec::<String>::new());
        store.create("leader/1", "me").await.unwrap();
        let e = store.create("leader/1", "you").await.unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        assert!(e.to_string().ends_with("/ns/job/leader/1 already exists"), "{e}");
        assert_eq!(
            store.get("leader/1").await.unwrap(),
            "me",
            "the first create wins"
        );
        store.delete("a/1").await.unwrap();
        let e = store.get("a/1").await.unwrap_err();
        assert!(
            matches!(e, Error::NotFound { .. }) && e.to_string().contains("/ns/job/a/1"),
            "{e}"
        );
        assert!(!e.is_retryable());
        assert_eq!(store.get_opt("a/1").await.unwrap(), None);
        store.put("a/3", "three").await.unwrap();
        // A missing one among them is not an error.
        store
            .delete_many(&["a/1".to_string(), "a/2".to_string()])
            .await
            .unwrap();
        assert_eq!(store.list("a").await.unwrap(), ["3"]);
        store.delete_all("a").await.unwrap();
        assert_eq!(store.list("").await.unwrap(), ["b", "leader/"]);
    }

    #[test]
    fn bad_urls_say_what_was_expected() {
        let e = ObjectStore::open("ftp://x", &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid storage URL \"ftp://x\": expected file:///dir, s3://bucket/prefix or memory://"
        );
        let e = ObjectStore::open("s3:///prefix", &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected s3://bucket/prefix"), "{e}");
        let e = ObjectStore::open("file://relative", &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("absolute path"), "{e}");
    }
}
