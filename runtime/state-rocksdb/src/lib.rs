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

mod memory;
pub use memory::{SharedMemory, WRITE_BUFFER_RATIO};

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
/// concatenates. A list of a state with a time to live leaves its expired elements out: the
/// compactions that merge a growing list's appends trim it, where the compaction filter could
/// only drop it whole once every element expired (an append-only list never gets there).
fn concat_lists(key: &[u8], existing: Option<&[u8]>, operands: &rocksdb::MergeOperands) -> Option<Vec<u8>> {
    let size = existing.map_or(0, <[u8]>::len) + operands.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    let parts = existing.into_iter().chain(operands.iter());
    if state_name(key).and_then(floe_state::ttl::layout) == Some(floe_state::ttl::Layout::List) {
        let now = now_ms();
        for part in parts {
            match floe_state::list::decode(part) {
                Some(items) => {
                    for item in items {
                        if floe_state::ttl::expires(item).is_none_or(|t| t > now) {
                            floe_state::list::push(&mut out, item);
                        }
                    }
                }
                // Bytes that do not parse are kept as they are, never dropped.
                None => out.extend_from_slice(part),
            }
        }
    } else {
        for part in parts {
            out.extend_from_slice(part);
        }
    }
    Some(out)
}

/// The state name in a backend key (`key group | name length | name | ...`).
fn state_name(key: &[u8]) -> Option<&[u8]> {
    key.get(4).and_then(|&len| key.get(5..5 + usize::from(len)))
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
    let expired = state_name(key)
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

/// The options every database opens with; `memory`: the budget it shares with others.
fn options(memory: Option<&SharedMemory>) -> Options {
    let mut opts = Options::default();
    if let Some(memory) = memory {
        memory.apply(&mut opts);
    }
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
    // Part by part: an SST file of any size never sits in memory whole.
    for object in &snapshot.files {
        store.download_file(object, &dir.join(local_name(object))).await?;
    }
    Ok(())
}

impl RocksDbStateBackend {
    /// A fresh instance in `base` (emptied first) for `key_groups`.
    pub fn open(base: &Path, key_groups: Range<u32>) -> Result<Self> {
        Self::open_sharing(base, key_groups, None)
    }

    /// [`RocksDbStateBackend::open`] with its blocks and memtables charged to `memory` (a
    /// TaskManager's managed memory), if given.
    pub fn open_sharing(base: &Path, key_groups: Range<u32>, memory: Option<&SharedMemory>) -> Result<Self> {
        let _ = std::fs::remove_dir_all(base);
        std::fs::create_dir_all(base).map_err(|e| backend_error(base, e))?;
        Self::open_db(base, key_groups, BTreeMap::new(), memory)
    }

    fn open_db(
        base: &Path,
        key_groups: Range<u32>,
        uploaded: BTreeMap<String, (String, u64)>,
        memory: Option<&SharedMemory>,
    ) -> Result<Self> {
        let path = base.join("db");
        let db = DB::open(&options(memory), &path).map_err(|e| backend_error(&path, e))?;
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
        Self::restore_sharing(base, store, snapshots, key_groups, None).await
    }

    /// [`RocksDbStateBackend::restore`] with its blocks and memtables (and those of the databases
    /// it copies from) charged to `memory`, if given.
    pub async fn restore_sharing(
        base: &Path,
        store: &ObjectStore,
        snapshots: &[TaskSnapshot],
        key_groups: Range<u32>,
        memory: Option<&SharedMemory>,
    ) -> Result<Self> {
        let _ = tokio::fs::remove_dir_all(base).await;
        let Some(largest) = (0..snapshots.len()).max_by_key(|&i| snapshots[i].state_bytes) else {
            std::fs::create_dir_all(base).map_err(|e| backend_error(base, e))?;
            return Self::open_db(base, key_groups, BTreeMap::new(), memory);
        };
        let first = &snapshots[largest];
        download(store, first, &base.join("db")).await?;
        let uploaded = first
            .files
            .iter()
            .filter(|o| o.ends_with(".sst"))
            .map(|o| (local_name(o).to_string(), (o.clone(), 0)))
            .collect();
        let backend = Self::open_db(base, key_groups.clone(), uploaded, memory)?;
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
            let source = DB::open(&options(memory), &dir).map_err(|e| backend_error(&dir, e))?;
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
            let object = if name.ends_with(".sst") {
                format!("{}/{}{INSTANCE_SEPARATOR}{name}", target.shared, self.instance)
            } else {
                format!("{}/{name}", target.dir)
            };
            // Part by part, from the file: the upload holds a few parts, not the file.
            target.store.upload_file(&object, &path).await?;
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
mod tests;
