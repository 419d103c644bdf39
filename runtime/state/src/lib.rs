//! Keyed state (DESIGN.md "State and checkpoints"): every key belongs to a key group (Flink's
//! `KeyGroupRangeAssignment`, over max parallelism), and a task holds the state of a contiguous
//! range of key groups, so state can be redistributed when parallelism changes. Read
//! [`KeyedStateBackend`] first; [`HashMapStateBackend`] is the in-memory backend's snapshot format
//! (`hashmap`, full snapshots: operators keep their state as objects and write it here at a
//! checkpoint, as Flink's heap backend does). The RocksDB backend (`floe-state-rocksdb`, incremental
//! snapshots) implements the same trait, and operators read and write it on every record.
//!
//! Values are bytes; value, list and map state are encodings on top ([`list`] for lists).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use floe_checkpoint::TaskSnapshot;
use floe_storage::{ObjectStore, envelope};

/// Why state could not be read, written, snapshotted or restored.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Storage(#[from] floe_storage::Error),
    #[error("state snapshot {url} is corrupt: {reason}")]
    Corrupt { url: String, reason: String },
    /// The local store (RocksDB) failed.
    #[error("state backend {backend}: {message}")]
    Backend { backend: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where one task's snapshot goes: `dir` holds what only this checkpoint uses, `shared` what later
/// checkpoints may reference too (incremental backends' immutable files); both relative to `store`.
#[derive(Debug, Clone)]
pub struct SnapshotTarget {
    pub store: ObjectStore,
    pub dir: String,
    pub shared: String,
}

/// An entry of keyed state: (key group, key, value).
pub type Entry = (u32, Vec<u8>, Vec<u8>);

/// One task's keyed state, organised by state name and key group.
///
/// Invariants: only key groups in [`KeyedStateBackend::key_groups`] are held; a snapshot holds every
/// entry at the moment [`KeyedStateBackend::prepare_snapshot`] is called (later writes are not in it);
/// restoring snapshots keeps exactly the entries of the restored range's key groups, whichever tasks'
/// snapshots they come from.
pub trait KeyedStateBackend: Send {
    fn key_groups(&self) -> Range<u32>;
    fn get(&self, state: &str, key_group: u32, key: &[u8]) -> Result<Option<Vec<u8>>>;
    fn put(&mut self, state: &str, key_group: u32, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete(&mut self, state: &str, key_group: u32, key: &[u8]) -> Result<()>;
    /// Every entry of `state` in the backend's key groups: (key group, key, value), in key group
    /// order. For state read whole when a task starts (timers), not for per-record access.
    fn entries(&self, state: &str) -> Result<Vec<Entry>>;
    /// Calls `f` with (the rest of the key after `prefix`, value) for every entry of `state` in
    /// `key_group` whose key starts with `prefix`, in key byte order, until `f` returns `false`:
    /// per-entry state (a map's entries under one key) without reading any other key.
    fn scan_prefix(
        &self,
        state: &str,
        key_group: u32,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;
    /// Deletes every entry of `state` in `key_group` whose key starts with `prefix`.
    fn delete_prefix(&mut self, state: &str, key_group: u32, prefix: &[u8]) -> Result<()>;
    /// Appends `item` to the list at `key` (the [`list`] encoding) without reading it: a list
    /// element's cost does not grow with the list (RocksDB's merge operator, as Flink's
    /// `ListState::add`).
    fn append(&mut self, state: &str, key_group: u32, key: &[u8], item: &[u8]) -> Result<()>;
    /// The synchronous part of a snapshot (fixes its content; processing goes on once it returns).
    fn prepare_snapshot(&mut self, checkpoint: u64) -> Result<Box<dyn PreparedSnapshot>>;
}

/// The asynchronous part of a snapshot: the upload.
#[async_trait]
pub trait PreparedSnapshot: Send {
    async fn upload(self: Box<Self>, target: &SnapshotTarget) -> Result<TaskSnapshot>;
}

type Table = HashMap<Vec<u8>, Vec<u8>>;

/// Keyed state in memory: full snapshots in one object per task and checkpoint.
#[derive(Debug, Default, Clone)]
pub struct HashMapStateBackend {
    key_groups: Range<u32>,
    tables: BTreeMap<(String, u32), Table>,
}

/// Reads and checks one snapshot object.
async fn read_object(store: &ObjectStore, path: &str) -> Result<(String, Bytes)> {
    let url = store.url_of(path);
    let bytes = store.get(path).await?;
    let payload = envelope::open(&url, &bytes).map_err(|e| match e {
        floe_storage::Error::Corrupt { url, reason } => Error::Corrupt { url, reason },
        other => Error::Storage(other),
    })?;
    Ok((url, payload))
}

impl HashMapStateBackend {
    pub fn new(key_groups: Range<u32>) -> Self {
        HashMapStateBackend {
            key_groups,
            tables: BTreeMap::new(),
        }
    }

    /// Rebuilds the state of `key_groups` from snapshots (of one task, or of several after a rescale).
    pub async fn restore(
        store: &ObjectStore,
        snapshots: &[TaskSnapshot],
        key_groups: Range<u32>,
    ) -> Result<Self> {
        let mut backend = HashMapStateBackend::new(key_groups.clone());
        for snapshot in snapshots {
            for file in &snapshot.files {
                let (url, payload) = read_object(store, file).await?;
                decode(&url, &payload, |state, key_group, key, value| {
                    if key_groups.contains(&key_group) {
                        backend.insert(state, key_group, key, value);
                    }
                })?;
            }
        }
        Ok(backend)
    }

    fn insert(&mut self, state: &str, key_group: u32, key: &[u8], value: &[u8]) {
        self.tables
            .entry((state.to_string(), key_group))
            .or_default()
            .insert(key.to_vec(), value.to_vec());
    }

    /// Every entry of `state`: (key group, key, value).
    pub fn entries<'a>(&'a self, state: &'a str) -> impl Iterator<Item = (u32, &'a [u8], &'a [u8])> + 'a {
        self.tables
            .iter()
            .filter(move |((s, _), _)| s == state)
            .flat_map(|((_, kg), t)| t.iter().map(move |(k, v)| (*kg, k.as_slice(), v.as_slice())))
    }

    /// Every entry: (state name, key group, key, value).
    pub fn all_entries(&self) -> impl Iterator<Item = (&str, u32, &[u8], &[u8])> + '_ {
        self.tables.iter().flat_map(|((s, kg), t)| {
            t.iter()
                .map(move |(k, v)| (s.as_str(), *kg, k.as_slice(), v.as_slice()))
        })
    }

    /// Removes and returns every entry of `state`: (key group, key, value).
    pub fn take(&mut self, state: &str) -> Vec<Entry> {
        let groups: Vec<(String, u32)> = self.tables.keys().filter(|(s, _)| s == state).cloned().collect();
        let mut out = Vec::new();
        for g in groups {
            if let Some(t) = self.tables.remove(&g) {
                out.extend(t.into_iter().map(|(k, v)| (g.1, k, v)));
            }
        }
        out
    }

    /// The names of the states held.
    pub fn state_names(&self) -> std::collections::BTreeSet<&str> {
        self.tables.keys().map(|(s, _)| s.as_str()).collect()
    }

    pub fn len(&self) -> usize {
        self.tables.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn encode(&self) -> Bytes {
        // Per entry: state name, key group, key, value; each byte string length-prefixed (u32 LE).
        let mut out = BytesMut::new();
        for ((state, key_group), table) in &self.tables {
            for (key, value) in table {
                put_bytes(&mut out, state.as_bytes());
                out.put_u32_le(*key_group);
                put_bytes(&mut out, key);
                put_bytes(&mut out, value);
            }
        }
        out.freeze()
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32_le(u32::try_from(b.len()).unwrap_or(u32::MAX));
    out.put_slice(b);
}

fn decode(url: &str, mut data: &[u8], mut entry: impl FnMut(&str, u32, &[u8], &[u8])) -> Result<()> {
    let corrupt = |reason: &str| Error::Corrupt {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    fn take<'a>(data: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (data.get(..n)?, data.get(n..)?);
        *data = tail;
        Some(head)
    }
    fn take_u32(data: &mut &[u8]) -> Option<u32> {
        take(data, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn take_bytes<'a>(data: &mut &'a [u8]) -> Option<&'a [u8]> {
        let n = take_u32(data)? as usize;
        take(data, n)
    }
    while !data.is_empty() {
        let state = take_bytes(&mut data).ok_or_else(|| corrupt("truncated state name"))?;
        let state = std::str::from_utf8(state).map_err(|_| corrupt("state name is not UTF-8"))?;
        let key_group = take_u32(&mut data).ok_or_else(|| corrupt("truncated key group"))?;
        let key = take_bytes(&mut data).ok_or_else(|| corrupt("truncated key"))?;
        let value = take_bytes(&mut data).ok_or_else(|| corrupt("truncated value"))?;
        entry(state, key_group, key, value);
    }
    Ok(())
}

impl KeyedStateBackend for HashMapStateBackend {
    fn key_groups(&self) -> Range<u32> {
        self.key_groups.clone()
    }

    fn get(&self, state: &str, key_group: u32, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .tables
            .get(&(state.to_string(), key_group))
            .and_then(|t| t.get(key))
            .cloned())
    }

    fn put(&mut self, state: &str, key_group: u32, key: &[u8], value: &[u8]) -> Result<()> {
        self.insert(state, key_group, key, value);
        Ok(())
    }

    fn delete(&mut self, state: &str, key_group: u32, key: &[u8]) -> Result<()> {
        if let Some(t) = self.tables.get_mut(&(state.to_string(), key_group)) {
            t.remove(key);
        }
        Ok(())
    }

    fn entries(&self, state: &str) -> Result<Vec<Entry>> {
        Ok(HashMapStateBackend::entries(self, state)
            .map(|(kg, k, v)| (kg, k.to_vec(), v.to_vec()))
            .collect())
    }

    fn scan_prefix(
        &self,
        state: &str,
        key_group: u32,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        // The snapshot format, not the heap operators' store: a scan of the table is enough.
        let Some(t) = self.tables.get(&(state.to_string(), key_group)) else {
            return Ok(());
        };
        let mut hits: Vec<(&Vec<u8>, &Vec<u8>)> = t.iter().filter(|(k, _)| k.starts_with(prefix)).collect();
        hits.sort();
        for (k, v) in hits {
            if !f(&k[prefix.len()..], v) {
                break;
            }
        }
        Ok(())
    }

    fn delete_prefix(&mut self, state: &str, key_group: u32, prefix: &[u8]) -> Result<()> {
        if let Some(t) = self.tables.get_mut(&(state.to_string(), key_group)) {
            t.retain(|k, _| !k.starts_with(prefix));
        }
        Ok(())
    }

    fn append(&mut self, state: &str, key_group: u32, key: &[u8], item: &[u8]) -> Result<()> {
        let value = self
            .tables
            .entry((state.to_string(), key_group))
            .or_default()
            .entry(key.to_vec())
            .or_default();
        list::push(value, item);
        Ok(())
    }

    fn prepare_snapshot(&mut self, _checkpoint: u64) -> Result<Box<dyn PreparedSnapshot>> {
        Ok(Box::new(FullSnapshot(self.encode())))
    }
}

/// A full snapshot, encoded (sealed as it is uploaded): one object in the checkpoint's task directory.
#[derive(Debug)]
struct FullSnapshot(Bytes);

#[async_trait]
impl PreparedSnapshot for FullSnapshot {
    async fn upload(self: Box<Self>, target: &SnapshotTarget) -> Result<TaskSnapshot> {
        let path = format!("{}/keyed-state", target.dir);
        let size = (self.0.len() + envelope::HEADER) as u64;
        target.store.create_sealed(&path, self.0).await?;
        Ok(TaskSnapshot {
            files: vec![path],
            uploaded_bytes: size,
            state_bytes: size,
            ..TaskSnapshot::default()
        })
    }
}

/// List state as one value: elements length-prefixed.
pub mod list {
    use bytes::{BufMut, BytesMut};

    pub fn encode<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
        let mut out = BytesMut::new();
        for item in items {
            super::put_bytes(&mut out, item);
        }
        out.to_vec()
    }

    /// The elements, or `None` when the value is not a list encoding.
    pub fn decode(mut value: &[u8]) -> Option<Vec<&[u8]>> {
        let mut items = Vec::new();
        while !value.is_empty() {
            let n = u32::from_le_bytes(value.get(..4)?.try_into().ok()?) as usize;
            items.push(value.get(4..4 + n)?);
            value = value.get(4 + n..)?;
        }
        Some(items)
    }

    /// Appends one element to an encoded list.
    pub fn push(value: &mut Vec<u8>, item: &[u8]) {
        value.put_u32_le(u32::try_from(item.len()).unwrap_or(u32::MAX));
        value.extend_from_slice(item);
    }
}

/// The stored layout of per-entry state with a time to live, shared by the engine that writes it
/// and the RocksDB compaction filter that drops what expired: such a state's name is
/// `{kind}+ttl:{name}`, and each of its values (a list's each element) starts with the time it
/// expires (milliseconds since the epoch, 8 bytes little-endian). A filter needs no registry of
/// the job's states: the name and the value say it all.
pub mod ttl {
    /// The kind suffix of a state with a time to live.
    pub const KIND_SUFFIX: &str = "+ttl";

    /// How a state's values expire: `None` for a state without a time to live.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Layout {
        /// One expiring value per entry (value, reducing, aggregating state; a map's entries).
        Value,
        /// A list of expiring elements.
        List,
    }

    pub fn layout(state: &[u8]) -> Option<Layout> {
        let colon = state.iter().position(|&b| b == b':')?;
        let kind = state[..colon].strip_suffix(KIND_SUFFIX.as_bytes())?;
        Some(if kind == b"list" {
            Layout::List
        } else {
            Layout::Value
        })
    }

    /// When a stored value expires.
    pub fn expires(value: &[u8]) -> Option<i64> {
        Some(i64::from_le_bytes(value.get(..8)?.try_into().ok()?))
    }

    /// Whether a stored value of a state with `layout` holds nothing live at `now`: a value
    /// that expired, a list whose every element did (a value that does not parse is kept).
    pub fn all_expired(layout: Layout, value: &[u8], now: i64) -> bool {
        match layout {
            Layout::Value => expires(value).is_some_and(|t| t <= now),
            Layout::List => super::list::decode(value)
                .is_some_and(|items| items.iter().all(|item| expires(item).is_some_and(|t| t <= now))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn store(name: &str) -> (ObjectStore, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("floe-state-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
        (s, dir)
    }

    #[tokio::test]
    async fn snapshots_restore_exactly_the_key_groups_asked_for() {
        let (objects, dir) = store("restore");
        // Two tasks of a job at parallelism 2 over 8 key groups.
        let mut a = HashMapStateBackend::new(0..4);
        let mut b = HashMapStateBackend::new(4..8);
        for kg in 0..8u32 {
            let task: &mut HashMapStateBackend = if kg < 4 { &mut a } else { &mut b };
            task.put(
                "count",
                kg,
                format!("word{kg}").as_bytes(),
                &u64::from(kg).to_le_bytes(),
            )
            .unwrap();
            let mut l = Vec::new();
            list::push(&mut l, b"x");
            list::push(&mut l, format!("y{kg}").as_bytes());
            task.put("seen", kg, b"k", &l).unwrap();
        }
        a.delete("count", 0, b"word0").unwrap();
        let target = |dir: &str| SnapshotTarget {
            store: objects.clone(),
            dir: dir.to_string(),
            shared: "shared".into(),
        };
        let pa = a.prepare_snapshot(1).unwrap();
        let pb = b.prepare_snapshot(1).unwrap();
        // Written after the snapshot was prepared: not in it.
        a.put("count", 1, b"late", b"!").unwrap();
        let sa = pa.upload(&target("chk-1/task-0")).await.unwrap();
        let sb = pb.upload(&target("chk-1/task-1")).await.unwrap();

        // Rescaled to three tasks: the middle one takes key groups 3..6 from both snapshots.
        let mid = HashMapStateBackend::restore(&objects, &[sa.clone(), sb.clone()], 3..6)
            .await
            .unwrap();
        for kg in 0..8u32 {
            let expected = (3..6).contains(&kg).then(|| u64::from(kg).to_le_bytes().to_vec());
            assert_eq!(
                mid.get("count", kg, format!("word{kg}").as_bytes()).unwrap(),
                expected
            );
        }
        let seen_value = mid.get("seen", 5, b"k").unwrap().unwrap();
        let seen = list::decode(&seen_value).unwrap();
        assert_eq!(seen, [&b"x"[..], &b"y5"[..]]);
        let first = HashMapStateBackend::restore(&objects, &[sa], 0..4).await.unwrap();
        assert_eq!(
            first.get("count", 0, b"word0").unwrap(),
            None,
            "deleted before the snapshot"
        );
        assert_eq!(
            first.get("count", 1, b"late").unwrap(),
            None,
            "written after the snapshot"
        );
        assert_eq!(first.entries("count").count(), 3, "word1 to word3");

        // A truncated snapshot is an error naming it.
        let whole = objects.get("chk-1/task-1/keyed-state").await.unwrap();
        objects
            .put("chk-1/task-1/keyed-state", whole.slice(..whole.len() - 3))
            .await
            .unwrap();
        let e = HashMapStateBackend::restore(&objects, &[sb], 4..8)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("chk-1/task-1") && e.contains("truncated"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ttl_layout_comes_from_the_state_name_and_expiry_from_the_value() {
        use ttl::{Layout, all_expired, layout};
        assert_eq!(layout(b"list+ttl:events"), Some(Layout::List));
        assert_eq!(layout(b"map+ttl:visits"), Some(Layout::Value));
        assert_eq!(layout(b"value+ttl:a:b"), Some(Layout::Value));
        assert_eq!(layout(b"list:events"), None, "no time to live");
        assert_eq!(layout(b"count"), None);
        let at = |t: i64, v: &[u8]| [&t.to_le_bytes()[..], v].concat();
        assert!(all_expired(Layout::Value, &at(100, b"x"), 100));
        assert!(!all_expired(Layout::Value, &at(101, b"x"), 100));
        let (old, new) = (at(50, b"a"), at(150, b"b"));
        let both = list::encode([old.as_slice(), new.as_slice()]);
        assert!(!all_expired(Layout::List, &both, 100), "one element is live");
        assert!(all_expired(Layout::List, &both, 150));
        assert!(!all_expired(Layout::Value, b"short", 1 << 40), "unparsable: kept");
    }
}
