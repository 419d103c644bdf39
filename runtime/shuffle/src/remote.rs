//! Remote blocking partitions (`shuffle.remote.enabled`): written like a local blocking partition,
//! then, when the producer finishes, uploaded to object storage as one object per subpartition
//! (`{job}/r{result}-p{partition}-a{attempt}/sp-{n}`, buffers framed by a u32 length) and deleted
//! locally. Consumers read them from storage, not from the TaskManager, so a lost TaskManager does not
//! lose them. Uploads stream each subpartition in pieces of about one buffer; reads fetch ranges of
//! one buffer's size and hand out the frames they hold ([`RemoteSubpartitionReader`]), so neither
//! holds a whole subpartition in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use floe_storage::ObjectStore;

use crate::partition::{BlockingPartition, BlockingWriter};
use crate::{Error, PartitionStats, PartitionWriter, Result, ResultPartitionId};

/// Configuration key of the job's storage prefix (`{storage.url}/{namespace}/{job-name}`), set from the
/// manifest's `spec.storage`.
pub use floe_storage::JOB_STORAGE_KEY;
/// Configuration key that turns blocking partitions into remote ones.
pub const REMOTE_SHUFFLE_KEY: &str = "shuffle.remote.enabled";

/// Whether a job's configuration asks for remote blocking partitions; an error when it does without
/// job storage, or with a value that is not a boolean.
pub fn remote_shuffle_enabled(conf: &BTreeMap<String, String>) -> Result<bool> {
    let config = |message: String| Error::Config {
        key: REMOTE_SHUFFLE_KEY.into(),
        message,
    };
    let enabled = match conf
        .get(REMOTE_SHUFFLE_KEY)
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => false,
        Some(v) if v == "true" => true,
        Some(v) if v == "false" => false,
        Some(v) => return Err(config(format!("expected true or false, got {v:?}"))),
    };
    if enabled && !conf.contains_key(JOB_STORAGE_KEY) {
        return Err(config(
            "remote partitions need job storage: set spec.storage.url".into(),
        ));
    }
    Ok(enabled)
}

/// The `shuffle/` prefix of the job's storage when remote shuffle is on.
pub fn remote_storage(conf: &BTreeMap<String, String>) -> Result<Option<ObjectStore>> {
    if !remote_shuffle_enabled(conf)? {
        return Ok(None);
    }
    let url = conf.get(JOB_STORAGE_KEY).map(String::as_str).unwrap_or_default();
    let store = ObjectStore::open(url, conf).map_err(|source| Error::Storage {
        partition: format!("(job storage {url})"),
        source: Box::new(source),
    })?;
    Ok(Some(store.scoped("shuffle")))
}

/// Where a remote partition's subpartition lives, relative to the job storage's `shuffle/` prefix.
pub(crate) fn object_path(id: &ResultPartitionId, subpartition: u32) -> String {
    format!(
        "{}/r{}-p{}-a{}/sp-{subpartition}",
        id.job_id, id.result, id.partition, id.attempt
    )
}

fn storage_error(id: &ResultPartitionId, source: floe_storage::Error) -> Error {
    Error::Storage {
        partition: id.to_string(),
        source: Box::new(source),
    }
}

/// Producer of a remote partition: a local blocking writer, uploaded at `finish`.
pub(crate) struct RemoteWriter {
    pub(crate) id: ResultPartitionId,
    pub(crate) local: BlockingWriter,
    pub(crate) partition: Arc<BlockingPartition>,
    pub(crate) store: ObjectStore,
    pub(crate) num_subpartitions: u32,
}

impl std::fmt::Debug for RemoteWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteWriter")
            .field("id", &self.id)
            .field("store", &self.store.url())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl PartitionWriter for RemoteWriter {
    fn num_subpartitions(&self) -> u32 {
        self.num_subpartitions
    }

    async fn emit(&mut self, subpartition: u32, buffer: Bytes) -> Result<()> {
        self.local.emit(subpartition, buffer).await
    }

    async fn finish(self: Box<Self>) -> Result<PartitionStats> {
        let RemoteWriter {
            id,
            local,
            partition,
            store,
            num_subpartitions,
        } = *self;
        let stats = Box::new(local).finish().await?;
        let index = partition.finished().await?;
        let data_path = index.data_path.clone();
        for subpartition in 0..num_subpartitions {
            let entries = &index.entries[subpartition as usize];
            // The local file stays until every subpartition is up, so a failed upload starts over.
            floe_storage::with_retries("uploading a remote partition", || {
                upload_subpartition(&store, &id, subpartition, &data_path, entries)
            })
            .await
            .map_err(|e| storage_error(&id, e))?;
        }
        // The data lives in storage now; the local copy is not served to anyone.
        let _ = std::fs::remove_file(&data_path);
        let _ = std::fs::remove_file(data_path.with_extension("index"));
        Ok(stats)
    }
}

/// Uploads one subpartition from the local data file, in pieces of about [`UPLOAD_PIECE`] bytes
/// (at least one frame), read off the async workers. Replaces the object: safe to try again.
async fn upload_subpartition(
    store: &ObjectStore,
    id: &ResultPartitionId,
    subpartition: u32,
    data_path: &std::path::Path,
    entries: &[(u64, u64)],
) -> floe_storage::Result<()> {
    let mut object = store.writer(&object_path(id, subpartition)).await?;
    let sent = async {
        let mut at = 0;
        while at < entries.len() {
            let mut end = at + 1;
            let mut bytes = entries[at].1 + 4;
            while end < entries.len() && bytes + entries[end].1 + 4 <= UPLOAD_PIECE {
                bytes += entries[end].1 + 4;
                end += 1;
            }
            let piece = entries[at..end].to_vec();
            let file_path = data_path.to_path_buf();
            let read = tokio::task::spawn_blocking(move || -> std::io::Result<Bytes> {
                use std::os::unix::fs::FileExt;
                let file = std::fs::File::open(&file_path)?;
                let mut out = BytesMut::with_capacity(usize::try_from(bytes).map_err(std::io::Error::other)?);
                for (offset, len) in piece {
                    let len = usize::try_from(len).map_err(std::io::Error::other)?;
                    let mut buffer = vec![0; len];
                    file.read_exact_at(&mut buffer, offset)?;
                    out.put_u32_le(u32::try_from(len).map_err(std::io::Error::other)?);
                    out.put_slice(&buffer);
                }
                Ok(out.freeze())
            })
            .await;
            // The local file is unreadable: not a storage fault, and trying again will not help.
            let framed = read.map_err(std::io::Error::other).and_then(|r| r).map_err(|e| {
                floe_storage::Error::Corrupt {
                    url: format!("file://{}", data_path.display()),
                    reason: format!("cannot read the partition's local data: {e}"),
                }
            })?;
            object.write(framed).await?;
            at = end;
        }
        Ok(())
    }
    .await;
    object.close_or_abort(sent).await.map(|_| ())
}

/// Bytes of frames an upload writes at a time.
const UPLOAD_PIECE: u64 = 1 << 20;

/// Reads one subpartition of a remote partition, its buffers in emit order, by ranged reads of
/// `chunk` bytes: it holds one chunk, plus the part of a frame larger than a chunk read so far.
/// Buffers handed out are slices of the chunk they came in (no copy).
#[derive(Debug)]
pub(crate) struct RemoteSubpartitionReader {
    store: ObjectStore,
    id: ResultPartitionId,
    path: String,
    size: Option<u64>,
    /// Next byte of the object to fetch.
    fetched: u64,
    chunk: u64,
    /// Fetched bytes not handed out yet (starts at a frame boundary).
    rest: Bytes,
}

impl RemoteSubpartitionReader {
    pub(crate) fn new(store: ObjectStore, id: ResultPartitionId, subpartition: u32, chunk: usize) -> Self {
        RemoteSubpartitionReader {
            path: object_path(&id, subpartition),
            store,
            id,
            size: None,
            fetched: 0,
            chunk: chunk.max(8) as u64,
            rest: Bytes::new(),
        }
    }

    /// Bytes held now (for tests of the bound).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.rest.len()
    }

    fn corrupt(&self, reason: String) -> Error {
        storage_error(
            &self.id,
            floe_storage::Error::Corrupt {
                url: self.store.url_of(&self.path),
                reason,
            },
        )
    }

    /// Fetches the next chunk (or, for a frame larger than one, what completes it) onto `rest`.
    async fn fetch(&mut self, at_least: u64) -> Result<bool> {
        let size = match self.size {
            Some(size) => size,
            None => {
                let (store, path) = (&self.store, &self.path);
                let size =
                    floe_storage::with_retries("reading a remote partition's size", || store.size(path))
                        .await
                        .map_err(|e| storage_error(&self.id, e))?;
                *self.size.insert(size)
            }
        };
        if self.fetched >= size {
            return Ok(false);
        }
        let end = (self.fetched + self.chunk.max(at_least)).min(size);
        let (store, path, start) = (&self.store, &self.path, self.fetched);
        let bytes =
            floe_storage::with_retries("reading a remote partition", || store.get_range(path, start..end))
                .await
                .map_err(|e| storage_error(&self.id, e))?;
        if bytes.is_empty() {
            return Err(self.corrupt(format!("no bytes at {} of {size}", self.fetched)));
        }
        self.fetched += bytes.len() as u64;
        self.rest = if self.rest.is_empty() {
            bytes
        } else {
            let mut joined = BytesMut::with_capacity(self.rest.len() + bytes.len());
            joined.put_slice(&self.rest);
            joined.put_slice(&bytes);
            joined.freeze()
        };
        Ok(true)
    }

    /// The next buffer, or `None` at the end of the subpartition.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>> {
        loop {
            if self.rest.len() >= 4 {
                let len =
                    u32::from_le_bytes([self.rest[0], self.rest[1], self.rest[2], self.rest[3]]) as usize;
                if self.rest.len() >= 4 + len {
                    let frame = self.rest.slice(4..4 + len);
                    self.rest = self.rest.slice(4 + len..);
                    return Ok(Some(frame));
                }
                let missing = (4 + len - self.rest.len()) as u64;
                if !self.fetch(missing).await? {
                    return Err(self.corrupt(format!(
                        "truncated buffer frame: {} of {} bytes at the end",
                        self.rest.len(),
                        4 + len
                    )));
                }
                continue;
            }
            if !self.fetch(4).await? {
                if self.rest.is_empty() {
                    return Ok(None);
                }
                return Err(self.corrupt(format!(
                    "truncated buffer frame header: {} bytes at the end",
                    self.rest.len()
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::{ShuffleMaster, TaskManagerShuffleMaster};
    use crate::{InputChannelSpec, OBJECT_STORAGE_ADDRESS, PartitionKind, ShuffleConfig, ShuffleEnvironment};

    fn env(dir: &std::path::Path) -> ShuffleEnvironment {
        ShuffleEnvironment::new(ShuffleConfig {
            data_dir: dir.to_path_buf(),
            ..ShuffleConfig::default()
        })
        .unwrap()
    }

    /// The `shuffle/` prefix of job storage under `dir`.
    fn shuffle_store(dir: &std::path::Path) -> ObjectStore {
        ObjectStore::open(&format!("file://{}/storage", dir.display()), &BTreeMap::new())
            .unwrap()
            .scoped("shuffle")
    }

    fn id() -> ResultPartitionId {
        ResultPartitionId {
            job_id: "job1".into(),
            result: 0,
            partition: 1,
            attempt: 0,
        }
    }

    /// Issue 11, scenario 9: a remote subpartition is read in ranges, not whole: every buffer comes
    /// back in order, and the reader never holds more than a range plus one buffer larger than it.
    #[tokio::test]
    async fn a_remote_subpartition_is_read_in_bounded_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let store = shuffle_store(dir.path());
        let producer = env(&dir.path().join("tm-a"));
        let mut writer = producer.create_remote_writer(id(), 1, store.clone()).unwrap();
        let mut sent = Vec::new();
        for i in 0..300usize {
            // Mostly small buffers, and one much larger than a range.
            let len = if i == 150 { 5000 } else { 1 + (i * 37) % 200 };
            let buffer = Bytes::from((0..len).map(|k| (i + k) as u8).collect::<Vec<u8>>());
            writer.emit(0, buffer.clone()).await.unwrap();
            sent.push(buffer);
        }
        let total: u64 = sent.iter().map(|b| b.len() as u64).sum();
        assert_eq!(writer.finish().await.unwrap().bytes_per_subpartition, [total]);
        let chunk = 64;
        let mut reader = RemoteSubpartitionReader::new(store, id(), 0, chunk);
        let mut got = Vec::new();
        let mut held = 0;
        while let Some(buffer) = reader.next().await.unwrap() {
            held = held.max(reader.held_bytes());
            got.push(buffer);
        }
        assert_eq!(got, sent);
        assert!(held <= chunk + 5004, "held {held} bytes at once");
    }

    /// The campaign's seed 1001: a storage failure past the store's retry layer failed the whole
    /// upload or read, the task restarted into the next one, and the job never ended. Uploads and
    /// ranged reads now try again: with one call in ten failing (injected above the retry layer),
    /// a partition read in about a hundred ranges still comes back whole.
    #[tokio::test]
    async fn a_remote_partition_is_written_and_read_through_storage_that_fails_now_and_then() {
        let dir = tempfile::tempdir().unwrap();
        let faulty: BTreeMap<String, String> = [
            (floe_storage::faults::FAILURE_RATE_KEY, "0.1"),
            (floe_storage::faults::SEED_KEY, "1001"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let store = ObjectStore::open(&format!("file://{}/storage", dir.path().display()), &faulty)
            .unwrap()
            .scoped("shuffle");
        let producer = env(&dir.path().join("tm-a"));
        let mut writer = producer.create_remote_writer(id(), 1, store.clone()).unwrap();
        let sent: Vec<Bytes> = (0..200u32).map(|i| Bytes::from(vec![i as u8; 32])).collect();
        for b in &sent {
            writer.emit(0, b.clone()).await.unwrap();
        }
        writer.finish().await.expect("the upload tries again");
        let mut reader = RemoteSubpartitionReader::new(store, id(), 0, 64);
        let mut got = Vec::new();
        while let Some(buffer) = reader.next().await.expect("each range read tries again") {
            got.push(buffer);
        }
        assert_eq!(got, sent);
    }

    #[tokio::test]
    async fn a_remote_partition_is_read_from_storage_after_its_producer_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = shuffle_store(dir.path());
        let producer = env(&dir.path().join("tm-a"));
        let mut writer = producer.create_remote_writer(id(), 2, store.clone()).unwrap();
        for i in 0..5u8 {
            writer
                .emit(u32::from(i % 2), Bytes::from(vec![i; 10 + usize::from(i)]))
                .await
                .unwrap();
        }
        let stats = writer.finish().await.unwrap();
        assert_eq!(stats.bytes_per_subpartition, [10 + 12 + 14, 11 + 13]);
        // The producer's TaskManager is gone: its directory with it.
        drop(producer);
        std::fs::remove_dir_all(dir.path().join("tm-a")).unwrap();

        let consumer = env(&dir.path().join("tm-b"));
        let channel = |sp: u32| InputChannelSpec {
            partition: id(),
            address: OBJECT_STORAGE_ADDRESS.into(),
            subpartitions: sp..sp + 1,
        };
        let mut gate = consumer.create_input_gate_with_storage(vec![channel(1)], Some(store.clone()));
        let mut got = Vec::new();
        while let Some(b) = gate.next_buffer().await.unwrap() {
            got.push(b);
        }
        assert_eq!(got, [Bytes::from(vec![1u8; 11]), Bytes::from(vec![3u8; 13])]);

        // Without storage the gate fails, naming the partition.
        let mut gate = consumer.create_input_gate(vec![channel(0)]);
        let e = gate.next_buffer().await.unwrap_err().to_string();
        assert!(e.contains("job1/r0-p1-a0") && e.contains("no storage"), "{e}");

        // A truncated object is an error naming it.
        let path = object_path(&id(), 0);
        let whole = store.get(&path).await.unwrap();
        store.put(&path, whole.slice(..whole.len() - 3)).await.unwrap();
        let mut gate = consumer.create_input_gate_with_storage(vec![channel(0)], Some(store.clone()));
        // Read in ranges: the buffers before the damage come first, then the error.
        let e = loop {
            match gate.next_buffer().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("a truncated object was read to its end"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(e.contains("truncated") && e.contains("sp-0"), "{e}");
    }

    #[test]
    fn a_finished_remote_partition_survives_its_taskmanager() {
        let mut master = TaskManagerShuffleMaster::new();
        let remote = id();
        let local = ResultPartitionId { partition: 2, ..id() };
        master.register_partition(
            remote.clone(),
            "tm-a".into(),
            OBJECT_STORAGE_ADDRESS.into(),
            PartitionKind::Remote,
        );
        master.register_partition(
            local.clone(),
            "tm-a".into(),
            "10.0.0.1:6121".into(),
            PartitionKind::Blocking,
        );
        for p in [&remote, &local] {
            master.mark_finished(p, PartitionStats::default());
        }
        assert_eq!(master.taskmanager_lost("tm-a"), std::slice::from_ref(&local));
        assert!(master.is_available(&remote));
        assert_eq!(master.location(&remote), Some(OBJECT_STORAGE_ADDRESS));
        assert!(!master.is_available(&local));
        assert_eq!(
            master.release_job("job1"),
            Vec::<String>::new(),
            "no TaskManager holds remote data"
        );
    }
}
