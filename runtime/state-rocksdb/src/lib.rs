//! The RocksDB keyed state backend (`state.backend.type: rocksdb`): a task's keyed state lives in a
//! RocksDB instance on local disk, read and written on every record, so state can outgrow memory.
//! Checkpoints are incremental, as Flink's: RocksDB's own checkpoint (a flush, then hard links to the
//! immutable SST files) fixes the content synchronously; the upload sends only the SST files no
//! earlier checkpoint of this instance uploaded, into the job's shared checkpoint directory, and
//! the snapshot lists every file it needs, shared ones included.
//!
//! Keys are `key group (u32 BE) | state name length (u8) | state name | key`, so one key group's
//! entries are contiguous and a restore to a different key-group range is a range delete of the
//! largest snapshot's database plus a range copy of every other one's.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use floe_checkpoint::TaskSnapshot;
use floe_state::{Error, KeyedStateBackend, PreparedSnapshot, Result, SnapshotTarget};
use floe_storage::ObjectStore;
use rocksdb::{DB, IteratorMode, Options, WriteBatch, WriteOptions};

/// Separates a shared object's instance prefix from the SST file's local name.
const INSTANCE_SEPARATOR: char = '~';

/// SST files this instance uploaded (or restored from): local name -> (object, size).
type Uploaded = Arc<Mutex<BTreeMap<String, (String, u64)>>>;

/// One task's keyed state in RocksDB.
pub struct RocksDbStateBackend {
    db: DB,
    base: PathBuf,
    key_groups: Range<u32>,
    /// Prefix of this instance's shared objects: SST names restart in every new instance, object
    /// names must not collide with another instance's.
    instance: String,
    uploaded: Uploaded,
    write: WriteOptions,
    key: Vec<u8>,
}

impl std::fmt::Debug for RocksDbStateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbStateBackend")
            .field("base", &self.base)
            .field("key_groups", &self.key_groups)
            .field("instance", &self.instance)
            .finish()
    }
}

fn backend_error(dir: &Path, e: impl std::fmt::Display) -> Error {
    Error::Backend {
        backend: format!("rocksdb at {}", dir.display()),
        message: e.to_string(),
    }
}

/// Bytes of keys and values a rescaling restore copies per write batch.
const COPY_BATCH_BYTES: usize = 4 << 20;

fn key_group_prefix(key_group: u32) -> [u8; 4] {
    key_group.to_be_bytes()
}

/// `key group (u32 BE) | state name length (u8) | state name | key` into `out` (cleared first).
fn encode_key(out: &mut Vec<u8>, state: &str, key_group: u32, key: &[u8]) {
    out.clear();
    out.extend_from_slice(&key_group_prefix(key_group));
    let name = &state.as_bytes()[..state.len().min(255)];
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(key);
}

/// The merge operator of list state: a list value is its elements' [`floe_state::list`]
/// encodings one after another, so a merge (an append, or several merged by a compaction)
/// concatenates.
fn concat_lists(_key: &[u8], existing: Option<&[u8]>, operands: &rocksdb::MergeOperands) -> Option<Vec<u8>> {
    let size = existing.map_or(0, <[u8]>::len) + operands.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(existing.unwrap_or_default());
    for op in operands.iter() {
        out.extend_from_slice(op);
    }
    Some(out)
}

/// The key just after every key that starts with `prefix`, if there is one (a prefix of all
/// 0xff bytes has none).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The compaction filter of states with a time to live ([`floe_state::ttl`]): a value of such a
/// state whose every part expired is dropped when a compaction meets it. The key says whether the
/// state has a time to live (`key group | name length | name | ...`) and the value when it
/// expires, so the filter needs nothing from the job.
fn drop_expired(_level: u32, key: &[u8], value: &[u8]) -> rocksdb::CompactionDecision {
    let name = key.get(4).and_then(|&len| key.get(5..5 + usize::from(len)));
    let expired = name
        .and_then(floe_state::ttl::layout)
        .is_some_and(|layout| floe_state::ttl::all_expired(layout, value, now_ms()));
    if expired {
        rocksdb::CompactionDecision::Remove
    } else {
        rocksdb::CompactionDecision::Keep
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64)
}

fn options() -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    // Every database opens with it: one that holds unmerged list appends cannot be read without.
    opts.set_merge_operator_associative("floe-list-append", concat_lists);
    opts.set_compaction_filter("floe-ttl", drop_expired);
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // Flink's defaults keep RocksDB's background work small next to the task's own threads.
    opts.increase_parallelism(2);
    opts
}

/// A name unique to this process and moment.
fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:016x}", h.finish())
}

/// The local file name an uploaded object restores to.
fn local_name(object: &str) -> &str {
    let base = object.rsplit('/').next().unwrap_or(object);
    base.rsplit(INSTANCE_SEPARATOR).next().unwrap_or(base)
}

async fn download(store: &ObjectStore, snapshot: &TaskSnapshot, dir: &Path) -> Result<()> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| backend_error(dir, e))?;
    for object in &snapshot.files {
        let bytes = store.get(object).await?;
        let path = dir.join(local_name(object));
        tokio::fs::write(&path, &bytes)
            .await
            .map_err(|e| backend_error(dir, e))?;
    }
    Ok(())
}

impl RocksDbStateBackend {
    /// A fresh instance in `base` (emptied first) for `key_groups`.
    pub fn open(base: &Path, key_groups: Range<u32>) -> Result<Self> {
        let _ = std::fs::remove_dir_all(base);
        std::fs::create_dir_all(base).map_err(|e| backend_error(base, e))?;
        Self::open_db(base, key_groups, BTreeMap::new())
    }

    fn open_db(
        base: &Path,
        key_groups: Range<u32>,
        uploaded: BTreeMap<String, (String, u64)>,
    ) -> Result<Self> {
        let path = base.join("db");
        let db = DB::open(&options(), &path).map_err(|e| backend_error(&path, e))?;
        let mut write = WriteOptions::default();
        // Checkpoints, not the WAL, make state durable (as in Flink).
        write.disable_wal(true);
        Ok(RocksDbStateBackend {
            db,
            base: base.to_path_buf(),
            key_groups,
            instance: instance_id(),
            uploaded: Arc::new(Mutex::new(uploaded)),
            write,
            key: Vec::new(),
        })
    }

    /// Rebuilds `key_groups` from snapshots of disjoint key-group ranges (one vertex's subtasks at
    /// one checkpoint, as `floe_checkpoint::redistribute` picks them; Flink's RocksDB rescaling):
    /// the snapshot holding the
    /// most state becomes the database as it is (its files downloaded, the key groups outside the
    /// range deleted with two range deletes: "clipping"), and the range of every other snapshot is
    /// copied in, in write batches. One snapshot (an unchanged parallelism, or a scale-up) is
    /// clipping alone. The base's SST files count as uploaded, so the next checkpoint stays
    /// incremental. Clipping costs a download; copying also reads and writes every key, so the
    /// largest snapshot is the one not copied.
    pub async fn restore(
        base: &Path,
        store: &ObjectStore,
        snapshots: &[TaskSnapshot],
        key_groups: Range<u32>,
    ) -> Result<Self> {
        let _ = tokio::fs::remove_dir_all(base).await;
        let Some(largest) = (0..snapshots.len()).max_by_key(|&i| snapshots[i].state_bytes) else {
            std::fs::create_dir_all(base).map_err(|e| backend_error(base, e))?;
            return Self::open_db(base, key_groups, BTreeMap::new());
        };
        let first = &snapshots[largest];
        download(store, first, &base.join("db")).await?;
        let uploaded = first
            .files
            .iter()
            .filter(|o| o.ends_with(".sst"))
            .map(|o| (local_name(o).to_string(), (o.clone(), 0)))
            .collect();
        let backend = Self::open_db(base, key_groups.clone(), uploaded)?;
        let mut clip = WriteBatch::default();
        clip.delete_range(key_group_prefix(0), key_group_prefix(key_groups.start));
        clip.delete_range(key_group_prefix(key_groups.end).to_vec(), vec![0xffu8; 5]);
        backend
            .db
            .write_opt(clip, &backend.write)
            .map_err(|e| backend_error(base, e))?;
        for (i, snapshot) in snapshots.iter().enumerate() {
            if i == largest {
                continue;
            }
            let dir = base.join(format!("restore-{i}"));
            download(store, snapshot, &dir).await?;
            let source = DB::open(&options(), &dir).map_err(|e| backend_error(&dir, e))?;
            let from = key_group_prefix(key_groups.start);
            let mut batch = WriteBatch::default();
            for entry in source.iterator(IteratorMode::From(&from, rocksdb::Direction::Forward)) {
                let (k, v) = entry.map_err(|e| backend_error(&dir, e))?;
                if k.len() < 4 || u32::from_be_bytes([k[0], k[1], k[2], k[3]]) >= key_groups.end {
                    break;
                }
                batch.put(&k, &v);
                if batch.size_in_bytes() >= COPY_BATCH_BYTES {
                    let full = std::mem::take(&mut batch);
                    backend
                        .db
                        .write_opt(full, &backend.write)
                        .map_err(|e| backend_error(base, e))?;
                }
            }
            backend
                .db
                .write_opt(batch, &backend.write)
                .map_err(|e| backend_error(base, e))?;
            drop(source);
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(backend)
    }

    /// The files restored from are not the job's own (a savepoint's, Flink's `NO_CLAIM` restore
    /// mode): the next checkpoint uploads every file it needs into the job storage instead of
    /// naming the savepoint's, so the savepoint stays whole and the job's checkpoints never
    /// depend on it.
    pub fn disown_restored_files(&self) {
        self.uploaded.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Compacts the whole key space (a state that has settled: no L0 files left to merge).
    pub fn compact(&self) {
        self.db.compact_range::<&[u8], &[u8]>(None, None);
    }

    fn db_key(&mut self, state: &str, key_group: u32, key: &[u8]) {
        encode_key(&mut self.key, state, key_group, key);
    }

    fn error(&self, e: rocksdb::Error) -> Error {
        backend_error(&self.base, e)
    }
}

impl KeyedStateBackend for RocksDbStateBackend {
    fn key_groups(&self) -> Range<u32> {
        self.key_groups.clone()
    }

    fn get(&self, state: &str, key_group: u32, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut k = Vec::with_capacity(5 + state.len() + key.len());
        encode_key(&mut k, state, key_group, key);
        self.db.get(&k).map_err(|e| self.error(e))
    }

    fn put(&mut self, state: &str, key_group: u32, key: &[u8], value: &[u8]) -> Result<()> {
        self.db_key(state, key_group, key);
        self.db
            .put_opt(&self.key, value, &self.write)
            .map_err(|e| backend_error(&self.base, e))
    }

    fn delete(&mut self, state: &str, key_group: u32, key: &[u8]) -> Result<()> {
        self.db_key(state, key_group, key);
        self.db
            .delete_opt(&self.key, &self.write)
            .map_err(|e| backend_error(&self.base, e))
    }

    fn entries(&self, state: &str) -> Result<Vec<floe_state::Entry>> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        for key_group in self.key_groups.clone() {
            encode_key(&mut prefix, state, key_group, &[]);
            for entry in self
                .db
                .iterator(IteratorMode::From(&prefix, rocksdb::Direction::Forward))
            {
                let (key, value) = entry.map_err(|e| self.error(e))?;
                if !key.starts_with(&prefix) {
                    break;
                }
                out.push((key_group, key[prefix.len()..].to_vec(), value.to_vec()));
            }
        }
        Ok(out)
    }

    fn scan_prefix(
        &self,
        state: &str,
        key_group: u32,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut start = Vec::with_capacity(5 + state.len() + prefix.len());
        encode_key(&mut start, state, key_group, prefix);
        let mut read = rocksdb::ReadOptions::default();
        if let Some(end) = prefix_end(&start) {
            read.set_iterate_upper_bound(end);
        }
        let mut it = self.db.raw_iterator_opt(read);
        it.seek(&start);
        while it.valid() {
            let (Some(key), Some(value)) = (it.key(), it.value()) else {
                break;
            };
            if !key.starts_with(&start) || !f(&key[start.len()..], value) {
                break;
            }
            it.next();
        }
        it.status().map_err(|e| self.error(e))
    }

    fn delete_prefix(&mut self, state: &str, key_group: u32, prefix: &[u8]) -> Result<()> {
        // Key by key, as Flink's `MapState::clear` on RocksDB: a range tombstone per cleared key
        // would slow every later read until compaction removes it.
        let mut keys = Vec::new();
        self.scan_prefix(state, key_group, prefix, &mut |rest: &[u8], _: &[u8]| {
            keys.push(rest.to_vec());
            true
        })?;
        let mut batch = WriteBatch::default();
        let mut full = Vec::new();
        for rest in keys {
            encode_key(&mut full, state, key_group, prefix);
            full.extend_from_slice(&rest);
            batch.delete(&full);
            if batch.size_in_bytes() >= COPY_BATCH_BYTES {
                let b = std::mem::take(&mut batch);
                self.db.write_opt(b, &self.write).map_err(|e| self.error(e))?;
            }
        }
        self.db.write_opt(batch, &self.write).map_err(|e| self.error(e))
    }

    fn append(&mut self, state: &str, key_group: u32, key: &[u8], item: &[u8]) -> Result<()> {
        let mut operand = Vec::with_capacity(4 + item.len());
        floe_state::list::push(&mut operand, item);
        self.db_key(state, key_group, key);
        self.db
            .merge_opt(&self.key, &operand, &self.write)
            .map_err(|e| backend_error(&self.base, e))
    }

    fn prepare_snapshot(&mut self, checkpoint: u64) -> Result<Box<dyn PreparedSnapshot>> {
        let dir = self.base.join(format!("chk-{checkpoint}"));
        let _ = std::fs::remove_dir_all(&dir);
        // Flushes the memtable and hard-links the SST files: the content is fixed from here on.
        rocksdb::checkpoint::Checkpoint::new(&self.db)
            .and_then(|c| c.create_checkpoint(&dir))
            .map_err(|e| self.error(e))?;
        Ok(Box::new(LocalCheckpoint {
            dir,
            instance: self.instance.clone(),
            uploaded: self.uploaded.clone(),
        }))
    }
}

/// A RocksDB checkpoint on local disk, waiting for its upload.
#[derive(Debug)]
struct LocalCheckpoint {
    dir: PathBuf,
    instance: String,
    uploaded: Uploaded,
}

#[async_trait]
impl PreparedSnapshot for LocalCheckpoint {
    async fn upload(self: Box<Self>, target: &SnapshotTarget) -> Result<TaskSnapshot> {
        let mut names = Vec::new();
        let mut entries = tokio::fs::read_dir(&self.dir)
            .await
            .map_err(|e| backend_error(&self.dir, e))?;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| backend_error(&self.dir, e))?
        {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        let mut snapshot = TaskSnapshot::default();
        for name in names {
            let path = self.dir.join(&name);
            let size = tokio::fs::metadata(&path)
                .await
                .map_err(|e| backend_error(&self.dir, e))?
                .len();
            snapshot.state_bytes += size;
            let known = if name.ends_with(".sst") {
                self.uploaded
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&name)
                    .map(|(object, _)| object.clone())
            } else {
                None
            };
            if let Some(object) = known {
                snapshot.files.push(object);
                continue;
            }
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(|e| backend_error(&self.dir, e))?;
            let object = if name.ends_with(".sst") {
                format!("{}/{}{INSTANCE_SEPARATOR}{name}", target.shared, self.instance)
            } else {
                format!("{}/{name}", target.dir)
            };
            target.store.put(&object, bytes).await?;
            snapshot.uploaded_bytes += size;
            if name.ends_with(".sst") {
                self.uploaded
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name, (object.clone(), size));
            }
            snapshot.files.push(object);
        }
        let _ = tokio::fs::remove_dir_all(&self.dir).await;
        Ok(snapshot)
    }
}

impl Drop for RocksDbStateBackend {
    fn drop(&mut self) {
        // The database is scratch space: checkpoints are what outlive the task.
        let _ = std::fs::remove_dir_all(self.base.join("db"));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn store(name: &str) -> (ObjectStore, PathBuf) {
        let dir = std::env::temp_dir().join(format!("floe-rocksdb-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = ObjectStore::open(
            &format!("file://{}", dir.join("objects").display()),
            &BTreeMap::new(),
        )
        .unwrap();
        (s, dir)
    }

    fn target(store: &ObjectStore, checkpoint: u64, task: &str) -> SnapshotTarget {
        SnapshotTarget {
            store: store.clone(),
            dir: format!("chk-{checkpoint}/{task}"),
            shared: format!("shared/{task}"),
        }
    }

    /// Deterministic incompressible-ish bytes.
    fn value(i: u64, round: u64, len: usize) -> Vec<u8> {
        let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[tokio::test]
    async fn the_second_checkpoint_uploads_only_new_files_and_restores_any_key_group_range() {
        let (objects, dir) = store("incremental");
        let mut db = RocksDbStateBackend::open(&dir.join("task-0"), 0..128).unwrap();
        let n = 20_000u64;
        for i in 0..n {
            db.put("count", (i % 128) as u32, &i.to_be_bytes(), &value(i, 0, 200))
                .unwrap();
        }
        let first = db
            .prepare_snapshot(1)
            .unwrap()
            .upload(&target(&objects, 1, "t0"))
            .await
            .unwrap();
        // 1% of the keys change.
        for i in (0..n).step_by(100) {
            db.put("count", (i % 128) as u32, &i.to_be_bytes(), &value(i, 1, 200))
                .unwrap();
        }
        db.delete("count", 5, &5u64.to_be_bytes()).unwrap();
        let second = db
            .prepare_snapshot(2)
            .unwrap()
            .upload(&target(&objects, 2, "t0"))
            .await
            .unwrap();
        // As the JobManager does: the snapshots go into each checkpoint's metadata; the sizes are
        // read back from there.
        let checkpoints = floe_checkpoint::CheckpointStore::new(objects.clone());
        for (id, snapshot) in [(1, &first), (2, &second)] {
            let metadata = floe_checkpoint::CompletedCheckpoint {
                max_parallelism: BTreeMap::new(),
                operators: BTreeMap::new(),
                job_id: "job".into(),
                id,
                triggered_ms: 0,
                completed_ms: 0,
                tasks: BTreeMap::from([("reduce#0".to_string(), snapshot.clone())]),
            };
            checkpoints.write(&metadata).await.unwrap();
        }
        let full = checkpoints.load("job", 1).await.unwrap().uploaded_bytes();
        let incremental = checkpoints.load("job", 2).await.unwrap().uploaded_bytes();
        assert!(full > 3_000_000, "first: {first:?}");
        assert!(
            incremental * 10 < full,
            "checkpoint 2 uploaded {incremental} bytes, checkpoint 1 {full}"
        );
        assert!(
            second.state_bytes >= first.state_bytes,
            "the shared files are still part of it"
        );
        let shared: Vec<&String> = second.files.iter().filter(|f| f.starts_with("shared/")).collect();
        assert!(
            shared.iter().any(|f| first.files.contains(f)),
            "references the first's SST files"
        );

        // Same range: everything as of checkpoint 2.
        let whole =
            RocksDbStateBackend::restore(&dir.join("r0"), &objects, std::slice::from_ref(&second), 0..128)
                .await
                .unwrap();
        for i in [0u64, 5, 6, 100, 19_999] {
            let expected = (i != 5).then(|| value(i, u64::from(i % 100 == 0), 200));
            assert_eq!(
                whole.get("count", (i % 128) as u32, &i.to_be_bytes()).unwrap(),
                expected,
                "key {i}"
            );
        }
        // Rescaled: key groups 32..64 only, from one snapshot (range delete) and from two (copy).
        let part =
            RocksDbStateBackend::restore(&dir.join("r1"), &objects, std::slice::from_ref(&second), 32..64)
                .await
                .unwrap();
        assert!(part.get("count", 40, &40u64.to_be_bytes()).unwrap().is_some());
        assert!(part.get("count", 6, &6u64.to_be_bytes()).unwrap().is_none());
        // Rescaled: two subtasks' snapshots of disjoint key groups (0..64 and 64..128, as at
        // parallelism 2) restored into 32..96 (a subtask at another parallelism): the larger is
        // clipped, the other's range copied in.
        let mut other = RocksDbStateBackend::open(&dir.join("task-1"), 64..128).unwrap();
        for i in (0..n).filter(|i| i % 128 >= 64) {
            other
                .put("count", (i % 128) as u32, &i.to_be_bytes(), &value(i, 2, 200))
                .unwrap();
        }
        let low =
            RocksDbStateBackend::restore(&dir.join("low"), &objects, std::slice::from_ref(&second), 0..64)
                .await
                .unwrap();
        let mut low = low;
        let low_snapshot = low
            .prepare_snapshot(3)
            .unwrap()
            .upload(&target(&objects, 3, "t0"))
            .await
            .unwrap();
        let high_snapshot = other
            .prepare_snapshot(3)
            .unwrap()
            .upload(&target(&objects, 3, "t1"))
            .await
            .unwrap();
        let merged =
            RocksDbStateBackend::restore(&dir.join("r2"), &objects, &[low_snapshot, high_snapshot], 32..96)
                .await
                .unwrap();
        assert_eq!(
            merged.get("count", 300 % 128, &300u64.to_be_bytes()).unwrap(),
            Some(value(300, 1, 200)),
            "key group 44 from the first"
        );
        assert_eq!(
            merged.get("count", 70, &70u64.to_be_bytes()).unwrap(),
            Some(value(70, 2, 200)),
            "key group 70 from the second"
        );
        assert!(merged.get("count", 6, &6u64.to_be_bytes()).unwrap().is_none());
        assert!(merged.get("count", 100, &100u64.to_be_bytes()).unwrap().is_none());

        // A missing object is an error naming it.
        let gone = whole_files_of(&objects).await;
        objects.delete(&gone).await.unwrap();
        let e = RocksDbStateBackend::restore(&dir.join("r3"), &objects, &[part_snapshot(&gone)], 0..128)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&gone), "{e}");
        drop((db, whole, part, merged));
        let _ = std::fs::remove_dir_all(&dir);
    }

    async fn whole_files_of(objects: &ObjectStore) -> String {
        let names = objects.list("chk-2/t0").await.unwrap();
        let current = names.iter().find(|n| n.starts_with("CURRENT")).unwrap();
        format!("chk-2/t0/{current}")
    }

    /// Issue 33, state TTL: a compaction drops a value of a state with a time to live once it
    /// expired (a value, a map entry, a list whose every element expired), and keeps live ones,
    /// partly live lists and every value of states without a time to live, whatever their bytes.
    #[test]
    fn compaction_drops_what_expired_in_states_with_a_time_to_live() {
        let dir = std::env::temp_dir().join(format!("floe-rocksdb-ttl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut db = RocksDbStateBackend::open(&dir, 0..128).unwrap();
        let now = now_ms();
        let at = |t: i64, v: &[u8]| [&t.to_le_bytes()[..], v].concat();
        let (past, future) = (now - 60_000, now + 3_600_000);
        db.put("value+ttl:v", 1, b"\x01a", &at(past, b"old")).unwrap();
        db.put("value+ttl:v", 1, b"\x01b", &at(future, b"new")).unwrap();
        db.put("map+ttl:m", 2, b"\x01a\x01x", &at(past, b"old")).unwrap();
        db.put("map+ttl:m", 2, b"\x01a\x01y", &at(future, b"new"))
            .unwrap();
        // A list written whole (an update; merged appends become such a value in compactions).
        let (e1, e2) = (at(past, b"e"), at(past, b"e"));
        db.put(
            "list+ttl:l",
            3,
            b"\x01a",
            &floe_state::list::encode([e1.as_slice(), e2.as_slice()]),
        )
        .unwrap();
        for t in [past, future] {
            db.append("list+ttl:l", 3, b"\x01b", &at(t, b"e")).unwrap();
        }
        // The same expired bytes in states without a time to live stay.
        db.put("value:v", 1, b"\x01a", &at(past, b"old")).unwrap();
        db.put("count", 1, b"\x01a", &at(past, b"old")).unwrap();
        db.db.flush().unwrap();
        db.compact();
        let has = |state: &str, kg: u32, key: &[u8]| db.get(state, kg, key).unwrap().is_some();
        assert!(!has("value+ttl:v", 1, b"\x01a"), "an expired value goes");
        assert!(has("value+ttl:v", 1, b"\x01b"), "a live one stays");
        assert!(!has("map+ttl:m", 2, b"\x01a\x01x"));
        assert!(has("map+ttl:m", 2, b"\x01a\x01y"));
        assert!(!has("list+ttl:l", 3, b"\x01a"), "every element expired");
        let partly = db.get("list+ttl:l", 3, b"\x01b").unwrap().unwrap();
        assert_eq!(
            floe_state::list::decode(&partly).unwrap().len(),
            2,
            "a partly live list stays whole"
        );
        assert!(has("value:v", 1, b"\x01a") && has("count", 1, b"\x01a"));
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 33: per-entry state. A map's entries are keys of their own (a prefix scan reads one
    /// key's entries and no other key's, a prefix delete removes them), and a list grows by
    /// merges without a read; both survive a checkpoint and a restore into two key-group ranges
    /// (merge operands copied by the rescaling restore arrive merged).
    #[tokio::test]
    async fn map_entries_scan_by_prefix_and_list_appends_merge_across_a_rescaling_restore() {
        let (objects, dir) = store("entries");
        let mut db = RocksDbStateBackend::open(&dir.join("task-0"), 0..128).unwrap();
        // Key "a" (in key group 3) and key "ab" (group 70): "a" is a byte prefix of "ab", as
        // keys' raw bytes may be; the backend's keys carry self-delimiting encodings, here a
        // length byte.
        let (a, ab) = (b"\x01a".as_slice(), b"\x02ab".as_slice());
        for i in 0..1_000u32 {
            let mut entry = a.to_vec();
            entry.extend_from_slice(&i.to_be_bytes());
            db.put("map:m", 3, &entry, &i.to_le_bytes()).unwrap();
            db.append("list:l", 3, a, &i.to_le_bytes()).unwrap();
        }
        let mut entry = ab.to_vec();
        entry.extend_from_slice(&7u32.to_be_bytes());
        db.put("map:m", 3, &entry, b"other key").unwrap();
        db.append("list:l", 70, ab, b"x").unwrap();
        let scan = |db: &RocksDbStateBackend, kg: u32, key: &[u8]| {
            let mut seen = Vec::new();
            db.scan_prefix("map:m", kg, key, &mut |rest: &[u8], v: &[u8]| {
                seen.push((rest.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
            seen
        };
        let seen = scan(&db, 3, a);
        assert_eq!(seen.len(), 1_000, "only key a's entries");
        assert!(seen.iter().enumerate().all(|(i, (rest, v))| {
            rest.as_slice() == (i as u32).to_be_bytes() && v.as_slice() == (i as u32).to_le_bytes()
        }));
        // Stopping early stops the scan.
        let mut first = 0;
        db.scan_prefix("map:m", 3, a, &mut |_: &[u8], _: &[u8]| {
            first += 1;
            false
        })
        .unwrap();
        assert_eq!(first, 1);
        let list = |db: &RocksDbStateBackend, kg: u32, key: &[u8]| {
            let raw = db.get("list:l", kg, key).unwrap().unwrap_or_default();
            floe_state::list::decode(&raw)
                .unwrap()
                .iter()
                .map(|i| i.to_vec())
                .collect::<Vec<_>>()
        };
        let expected: Vec<Vec<u8>> = (0..1_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        assert_eq!(list(&db, 3, a), expected, "appends in order");

        let snapshot = db
            .prepare_snapshot(1)
            .unwrap()
            .upload(&target(&objects, 1, "t0"))
            .await
            .unwrap();
        // Appended after the snapshot: not in it.
        db.append("list:l", 3, a, b"late").unwrap();
        drop(db);
        // Another task's snapshot, for the restore of the high half to copy from (the largest
        // snapshot is clipped, every other one copied key by key).
        let mut other = RocksDbStateBackend::open(&dir.join("task-1"), 0..128).unwrap();
        other.append("list:l", 100, b"\x01z", b"from task 1").unwrap();
        let other_snapshot = other
            .prepare_snapshot(1)
            .unwrap()
            .upload(&target(&objects, 1, "t1"))
            .await
            .unwrap();
        drop(other);
        let mut low =
            RocksDbStateBackend::restore(&dir.join("low"), &objects, std::slice::from_ref(&snapshot), 0..64)
                .await
                .unwrap();
        assert_eq!(scan(&low, 3, a).len(), 1_000);
        assert_eq!(list(&low, 3, a), expected);
        assert!(
            low.get("list:l", 70, ab).unwrap().is_none(),
            "key group 70 is not low's"
        );
        // Appends go on after the restore, and a prefix delete clears one key's map.
        low.append("list:l", 3, a, b"after").unwrap();
        assert_eq!(list(&low, 3, a).last().unwrap(), b"after");
        low.delete_prefix("map:m", 3, a).unwrap();
        assert!(scan(&low, 3, a).is_empty());
        assert_eq!(scan(&low, 3, ab).len(), 1, "another key's entries stay");
        let high =
            RocksDbStateBackend::restore(&dir.join("high"), &objects, &[other_snapshot, snapshot], 64..128)
                .await
                .unwrap();
        assert_eq!(list(&high, 70, ab), vec![b"x".to_vec()]);
        assert_eq!(list(&high, 100, b"\x01z"), vec![b"from task 1".to_vec()]);
        assert!(high.get("list:l", 3, a).unwrap().is_none());
        drop((low, high));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn part_snapshot(object: &str) -> TaskSnapshot {
        TaskSnapshot {
            files: vec![object.to_string()],
            ..TaskSnapshot::default()
        }
    }
}
