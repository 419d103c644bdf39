//! Streamed transfers: objects of any size move in parts of [`PART_SIZE`] (S3 multipart uploads,
//! ranged reads), with at most [`PARTS_IN_FLIGHT`] parts in flight, so a transfer holds a bounded
//! amount of memory whatever the object's size, and no single request has to carry a large body
//! under one deadline.
//!
//! Each part has its own deadline (`floe.storage.part-timeout-ms`, default
//! [`DEFAULT_PART_TIMEOUT`]): transfers go through an HTTP client whose every request (one part
//! uploaded, or one part's ranged read) must end within it, so a part that fails or stalls fails
//! with a temporary error and is sent again (opendal's concurrent tasks retry a part on a temporary
//! error; the retry layer retries the call that saw it). One slow or failing request costs one
//! part's resend, not the whole object. A deadline per part rather than per object is what makes
//! large objects possible at all: before, an upload that needed more than 10 s always failed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Error, ObjectStore, Result};

/// Bytes of one part of a streamed upload or read (S3 requires parts of at least 5 MiB but the last).
pub const PART_SIZE: usize = 8 << 20;
/// Parts of one transfer in flight at once.
pub const PARTS_IN_FLIGHT: usize = 4;
/// The configuration key of the deadline of one part (milliseconds).
pub const PART_TIMEOUT_KEY: &str = "floe.storage.part-timeout-ms";
/// The default deadline of one part: an 8 MiB part at 300 KB/s, slower than any link that can
/// carry a checkpoint.
pub const DEFAULT_PART_TIMEOUT: Duration = Duration::from_secs(30);

/// The HTTP transport of streamed transfers with part deadline `deadline`: a request that has not
/// ended by then fails (reqwest's per-request timeout, a temporary error to opendal). One client per
/// distinct deadline, shared by every store that asks for it (a client holds a connection pool).
pub(crate) fn part_transport(deadline: Duration) -> Result<opendal::HttpTransporter> {
    static TRANSPORTS: LazyLock<Mutex<HashMap<Duration, opendal::HttpTransporter>>> =
        LazyLock::new(Mutex::default);
    let mut transports = TRANSPORTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = transports.get(&deadline) {
        return Ok(t.clone());
    }
    let client = reqwest::Client::builder()
        .timeout(deadline)
        .connect_timeout(deadline.min(crate::CALL_TIMEOUT))
        .build()
        .map_err(|e| Error::InvalidConfiguration {
            key: PART_TIMEOUT_KEY.to_string(),
            reason: format!("cannot build an HTTP client with a {deadline:?} deadline: {e}"),
        })?;
    let transport =
        opendal::HttpTransporter::new(opendal_http_transport_reqwest::ReqwestTransport::new(client));
    transports.insert(deadline, transport.clone());
    Ok(transport)
}

/// The part deadline the configuration asks for.
pub(crate) fn part_timeout(conf: &std::collections::BTreeMap<String, String>) -> Result<Duration> {
    match conf.get(PART_TIMEOUT_KEY) {
        None => Ok(DEFAULT_PART_TIMEOUT),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(Error::InvalidConfiguration {
                key: PART_TIMEOUT_KEY.to_string(),
                reason: format!("expected a positive number of milliseconds, got {v:?}"),
            }),
        },
    }
}

impl ObjectStore {
    /// Writes an object piece by piece, replacing any previous one: parts of [`PART_SIZE`] go out
    /// as they fill (multipart on S3), [`PARTS_IN_FLIGHT`] at a time, so only those are held in
    /// memory. On S3 the object appears once [`ObjectWriter::close`] returned and never before; a
    /// local file (`file://`) is written in place, so a reader can see it partly written, and one
    /// abandoned must be [`ObjectWriter::abort`]ed to be removed (a writer dropped without `close`
    /// or `abort` leaves an incomplete multipart upload on S3 and a partial file on disk).
    pub async fn writer(&self, path: &str) -> Result<ObjectWriter> {
        self.open_writer(path, false).await
    }

    /// [`ObjectStore::writer`] for a conditional create: `close` fails with
    /// [`Error::AlreadyExists`] when the object exists (S3 completes the upload with
    /// `If-None-Match: *`).
    pub async fn creator(&self, path: &str) -> Result<ObjectWriter> {
        if !self.op.info().capability().write_with_if_not_exists {
            return Err(Error::NoConditionalCreate {
                url: self.url.clone(),
            });
        }
        self.open_writer(path, true).await
    }

    async fn open_writer(&self, path: &str, if_not_exists: bool) -> Result<ObjectWriter> {
        let writer = self
            .write_op(path, async {
                self.bulk
                    .writer_with(&self.full(path))
                    .chunk(PART_SIZE)
                    .concurrent(PARTS_IN_FLIGHT)
                    .if_not_exists(if_not_exists)
                    .await
                    .map_err(|e| self.io(path, e))
            })
            .await?;
        Ok(ObjectWriter {
            store: self.clone(),
            path: path.to_string(),
            writer,
            written: 0,
        })
    }

    /// Reads an object part by part ([`ObjectReader::next_part`]), [`PARTS_IN_FLIGHT`] ranged reads
    /// ahead at most.
    pub async fn reader(&self, path: &str) -> Result<ObjectReader> {
        let stream = self
            .read_op(path, async {
                let reader = self
                    .bulk
                    .reader_with(&self.full(path))
                    .chunk(PART_SIZE)
                    .concurrent(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.io(path, e))?;
                reader.into_stream(..).await.map_err(|e| self.io(path, e))
            })
            .await?;
        Ok(ObjectReader {
            store: self.clone(),
            path: path.to_string(),
            stream,
        })
    }

    /// Uploads the local file `local` as object `path` in parts; returns its size.
    pub async fn upload_file(&self, path: &str, local: &Path) -> Result<u64> {
        let local_error = |e: std::io::Error| self.local_error(path, local, "reading", e);
        let mut file = tokio::fs::File::open(local).await.map_err(local_error)?;
        let mut writer = self.writer(path).await?;
        let sent = async {
            loop {
                let mut part = Vec::with_capacity(PART_SIZE);
                let read = (&mut file)
                    .take(PART_SIZE as u64)
                    .read_to_end(&mut part)
                    .await
                    .map_err(local_error)?;
                if read == 0 {
                    return Ok(());
                }
                writer.write(part).await?;
            }
        }
        .await;
        writer.close_or_abort(sent).await
    }

    /// Downloads object `path` into the local file `local` (replaced) in parts; returns its size.
    pub async fn download_file(&self, path: &str, local: &Path) -> Result<u64> {
        let local_error = |e: std::io::Error| self.local_error(path, local, "writing", e);
        let mut reader = self.reader(path).await?;
        let mut file = tokio::fs::File::create(local).await.map_err(local_error)?;
        let mut size = 0;
        while let Some(part) = reader.next_part().await? {
            file.write_all(&part).await.map_err(local_error)?;
            size += part.len() as u64;
        }
        file.flush().await.map_err(local_error)?;
        Ok(size)
    }

    /// Copies object `from` of this store to `to` in `target` (any store, any service), part by
    /// part: the bytes pass through this process, at most a few parts at a time, whatever the size.
    pub async fn copy_to(&self, from: &str, target: &ObjectStore, to: &str) -> Result<u64> {
        let mut reader = self.reader(from).await?;
        let mut writer = target.writer(to).await?;
        let sent = async {
            while let Some(part) = reader.next_part().await? {
                writer.write(part).await?;
            }
            Ok(())
        }
        .await;
        writer.close_or_abort(sent).await
    }

    /// A local file's error during a transfer of `path`, naming both.
    fn local_error(&self, path: &str, local: &Path, doing: &str, e: std::io::Error) -> Error {
        Error::Io {
            url: self.url_of(path),
            source: opendal::Error::new(
                opendal::ErrorKind::Unexpected,
                format!("{doing} the local file {}", local.display()),
            )
            .set_source(e),
        }
    }
}

/// A streaming write of one object ([`ObjectStore::writer`], [`ObjectStore::creator`]); errors
/// name the object.
pub struct ObjectWriter {
    store: ObjectStore,
    path: String,
    writer: opendal::Writer,
    written: u64,
}

impl std::fmt::Debug for ObjectWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectWriter").field("path", &self.path).finish()
    }
}

impl ObjectWriter {
    /// Appends `bytes`; waits only while [`PARTS_IN_FLIGHT`] parts are already on their way.
    pub async fn write(&mut self, bytes: impl Into<Bytes>) -> Result<()> {
        let bytes: Bytes = bytes.into();
        let len = bytes.len() as u64;
        let (store, path, writer) = (&self.store, &self.path, &mut self.writer);
        store
            .write_op(path, async {
                writer.write(bytes).await.map_err(|e| store.io(path, e))
            })
            .await?;
        self.written += len;
        Ok(())
    }

    /// Abandons the object: the parts sent so far are discarded (an S3 multipart upload is
    /// aborted) and the object does not appear; a local file written so far is removed (the
    /// local service writes in place and cannot abort).
    pub async fn abort(mut self) -> Result<()> {
        let (store, path) = (self.store.clone(), self.path.clone());
        match self.writer.abort().await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == opendal::ErrorKind::Unsupported => store.delete(&path).await,
            Err(e) => Err(store.io(&path, e)),
        }
    }

    /// Sends what is left and completes the object; returns its size. If that fails the object
    /// is abandoned ([`ObjectWriter::abort`]): no incomplete upload or partial file is left.
    pub async fn close(mut self) -> Result<u64> {
        let store = self.store.clone();
        let closed = store
            .write_op(&self.path, async {
                self.writer
                    .close()
                    .await
                    .map(|_| ())
                    .map_err(|e| self.store.io(&self.path, e))
            })
            .await;
        match closed {
            Ok(()) => Ok(self.written),
            Err(e) => {
                self.abandon().await;
                Err(e)
            }
        }
    }

    /// Completes the object when `sent` (the writes) succeeded, else abandons it and returns the
    /// writes' error: the ending of every streamed write, so none leaves a partial object behind.
    pub async fn close_or_abort(self, sent: Result<()>) -> Result<u64> {
        match sent {
            Ok(()) => self.close().await,
            Err(e) => {
                self.abandon().await;
                Err(e)
            }
        }
    }

    /// [`ObjectWriter::abort`] after another error, which is the one reported: this one is logged.
    async fn abandon(self) {
        let url = self.store.url_of(&self.path);
        if let Err(e) = self.abort().await {
            tracing::warn!("abandoning the partly written object {url}: {e}");
        }
    }
}

/// A streaming read of one object ([`ObjectStore::reader`]); errors name the object.
pub struct ObjectReader {
    store: ObjectStore,
    path: String,
    stream: opendal::BufferStream,
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader").field("path", &self.path).finish()
    }
}

impl ObjectReader {
    /// The next piece of the object (at most [`PART_SIZE`] bytes), `None` at its end.
    pub async fn next_part(&mut self) -> Result<Option<Bytes>> {
        let (store, path, stream) = (&self.store, &self.path, &mut self.stream);
        let next = store
            .read_op(path, async {
                stream.try_next().await.map_err(|e| store.io(path, e))
            })
            .await?;
        Ok(next.map(|b| b.to_bytes()))
    }
}
