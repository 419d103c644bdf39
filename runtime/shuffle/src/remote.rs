//! Remote blocking partitions (`shuffle.remote.enabled`): written like a local blocking partition,
//! then, when the producer finishes, uploaded to object storage as one object per subpartition
//! (`{job}/r{result}-p{partition}-a{attempt}/sp-{n}`, buffers framed by a u32 length) and deleted
//! locally. Consumers read them from storage, not from the TaskManager, so a lost TaskManager does not
//! lose them. Uploads and reads hold one subpartition in memory at a time.

use std::collections::{BTreeMap, VecDeque};
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
            let entries = index.entries[subpartition as usize].clone();
            let path = data_path.clone();
            let framed = tokio::task::spawn_blocking(move || -> std::io::Result<Bytes> {
                use std::os::unix::fs::FileExt;
                let file = std::fs::File::open(&path)?;
                let total: u64 = entries.iter().map(|(_, len)| len + 4).sum();
                let mut out = BytesMut::with_capacity(usize::try_from(total).map_err(std::io::Error::other)?);
                for (offset, len) in entries {
                    let len = usize::try_from(len).map_err(std::io::Error::other)?;
                    let mut buffer = vec![0; len];
                    file.read_exact_at(&mut buffer, offset)?;
                    out.put_u32_le(u32::try_from(len).map_err(std::io::Error::other)?);
                    out.put_slice(&buffer);
                }
                Ok(out.freeze())
            })
            .await
            .map_err(|e| Error::io(&data_path, std::io::Error::other(e)))?
            .map_err(|e| Error::io(&data_path, e))?;
            store
                .put(&object_path(&id, subpartition), framed)
                .await
                .map_err(|e| storage_error(&id, e))?;
        }
        // The data lives in storage now; the local copy is not served to anyone.
        let _ = std::fs::remove_file(&data_path);
        let _ = std::fs::remove_file(data_path.with_extension("index"));
        Ok(stats)
    }
}

/// Reads one subpartition of a remote partition: its buffers, in emit order.
pub(crate) async fn read_subpartition(
    store: &ObjectStore,
    id: &ResultPartitionId,
    subpartition: u32,
) -> Result<VecDeque<Bytes>> {
    let path = object_path(id, subpartition);
    let object = store.get(&path).await.map_err(|e| storage_error(id, e))?;
    let mut buffers = VecDeque::new();
    let mut at = 0usize;
    while at < object.len() {
        let corrupt = || {
            storage_error(
                id,
                floe_storage::Error::Corrupt {
                    url: store.url_of(&path),
                    reason: format!("truncated buffer frame at byte {at} of {}", object.len()),
                },
            )
        };
        let header = object.get(at..at + 4).ok_or_else(corrupt)?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let start = at + 4;
        if start + len > object.len() {
            return Err(corrupt());
        }
        buffers.push_back(object.slice(start..start + len));
        at = start + len;
    }
    Ok(buffers)
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

    fn id() -> ResultPartitionId {
        ResultPartitionId {
            job_id: "job1".into(),
            result: 0,
            partition: 1,
            attempt: 0,
        }
    }

    #[tokio::test]
    async fn a_remote_partition_is_read_from_storage_after_its_producer_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(
            &format!("file://{}/storage", dir.path().display()),
            &BTreeMap::new(),
        )
        .unwrap()
        .scoped("shuffle");
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
        let e = gate.next_buffer().await;
        let e = match e {
            Err(e) => e.to_string(),
            Ok(_) => gate.next_buffer().await.map(|_| ()).unwrap_err().to_string(),
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
