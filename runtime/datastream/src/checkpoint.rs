//! Checkpoints inside a task (DESIGN.md "State and checkpoints", seed 001 section 3.3): what a task
//! hands its TaskManager at a barrier ([`ChainSnapshot`], the synchronous part of its snapshot),
//! what a restored task starts from ([`TaskRestore`], [`KeyedStateInit`]), and `Keyed`, where a
//! keyed operator keeps its per-key values: as objects on the heap (`hashmap`, written to a full
//! snapshot at each checkpoint) or as bytes in a [`KeyedStateBackend`] read and written on every
//! record (`rocksdb`).

use std::hash::Hash;
use std::ops::Range;

use floe_state::{HashMapStateBackend, KeyedStateBackend, PreparedSnapshot};

use crate::data::{Data, key_group_for_hash, key_hash};
use crate::error::{Error, Result};
use crate::state::entries::{BackendEntries, EntryAccess, EntryStore};
use crate::state::evolution::{self, EntrySchema, StateSchemas};
use crate::state::heap::HeapEntries;
use crate::time::timers::{TimeDomain, Timers, decode_timer_entry, timer_entry_key};
use crate::types::{KeyMap, RuntimeMode};

pub use floe_scheduler::parse_duration;

/// Which keyed state backend tasks use (`state.backend.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateBackendKind {
    /// Objects on the heap, full snapshots (Flink's `hashmap`, the default).
    HashMap,
    /// RocksDB on local disk, incremental snapshots.
    RocksDb,
}

/// A job's checkpointing settings (Flink's keys). Present only for STREAMING jobs with
/// `execution.checkpointing.interval`: BATCH jobs take no checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    pub interval: std::time::Duration,
    /// `execution.checkpointing.num-retained` (default 1).
    pub num_retained: usize,
    /// `execution.checkpointing.timeout` (default 10 min): a checkpoint pending longer is aborted.
    pub timeout: std::time::Duration,
    pub backend: StateBackendKind,
}

pub const CHECKPOINT_INTERVAL_KEY: &str = "execution.checkpointing.interval";

impl CheckpointConfig {
    pub fn from_configuration(conf: &std::collections::BTreeMap<String, String>) -> Result<Option<Self>> {
        let duration =
            |key: &str, default: Option<std::time::Duration>| -> Result<Option<std::time::Duration>> {
                match conf.get(key) {
                    None => Ok(default),
                    Some(v) => parse_duration(v).map(Some).ok_or_else(|| {
                        Error::config(key, v, "expected a duration like \"1 s\" or \"500 ms\"")
                    }),
                }
            };
        let backend = match conf
            .get("state.backend.type")
            .map(|s| s.trim().to_ascii_lowercase())
        {
            None => StateBackendKind::HashMap,
            Some(b) if b == "hashmap" || b == "heap" => StateBackendKind::HashMap,
            Some(b) if b == "rocksdb" => StateBackendKind::RocksDb,
            Some(b) => {
                return Err(Error::config(
                    "state.backend.type",
                    &b,
                    "expected hashmap or rocksdb",
                ));
            }
        };
        let mode: RuntimeMode = match conf.get("execution.runtime-mode") {
            Some(m) => m.parse()?,
            None => RuntimeMode::default(),
        };
        let Some(interval) = duration(CHECKPOINT_INTERVAL_KEY, None)? else {
            return Ok(None);
        };
        if mode == RuntimeMode::Batch || interval.is_zero() {
            return Ok(None);
        }
        let num_retained = match conf.get("execution.checkpointing.num-retained") {
            None => 1,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(Error::config(
                        "execution.checkpointing.num-retained",
                        v,
                        "expected an integer of at least 1",
                    ));
                }
            },
        };
        let timeout = duration(
            "execution.checkpointing.timeout",
            Some(std::time::Duration::from_secs(600)),
        )?
        .unwrap_or(std::time::Duration::from_secs(600));
        Ok(Some(CheckpointConfig {
            interval,
            num_retained,
            timeout,
            backend,
        }))
    }
}

/// The state name keyed operators use in the backend (a key_by always starts a new task, so a
/// task has at most one keyed operator).
pub(crate) const KEYED_STATE: &str = "keyed";

/// The bit a stop-with-savepoint barrier (no drain: Flink's synchronous savepoint) carries in its
/// id on the wire. A task that takes it is stopped: nothing after it is emitted or committed (no
/// processing-time timer fires, no operator finishes, a sink commits only what the savepoint and
/// the checkpoints before it cover), because the job resumed from the savepoint produces exactly
/// that rest. The shuffle aligns it like any barrier; checkpoint ids never come near 2^63.
pub const STOP_BARRIER: u64 = 1 << 63;

/// A barrier's checkpoint id and whether it stops the job (see [`STOP_BARRIER`]).
pub fn barrier_of(wire: u64) -> (u64, bool) {
    (wire & !STOP_BARRIER, wire & STOP_BARRIER != 0)
}

/// What the TaskManager tells a running task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Sources: inject the barrier of this checkpoint.
    Trigger(u64),
    /// Sources: inject the barrier of this savepoint, then end the input (stop with a savepoint):
    /// the source finishes once the savepoint completed, and everything downstream after it.
    /// `drain` (Flink's `stop --drain`): the source first ends event time (the MAX watermark), so
    /// every event-time window and timer fires before the barrier and its output is part of
    /// what the savepoint covers; without it the barrier is a stop barrier ([`STOP_BARRIER`]).
    Stop { checkpoint: u64, drain: bool },
    /// This checkpoint completed: sinks commit what it covers.
    Complete(u64),
    /// Sources: this checkpoint was aborted; send its cancel-checkpoint marker downstream, so no
    /// task keeps channels blocked waiting for its barrier (Flink's `CancelCheckpointMarker`).
    Abort(u64),
}

/// The synchronous part of one task's snapshot for one checkpoint; the TaskManager uploads it and
/// acknowledges the checkpoint.
pub struct ChainSnapshot {
    pub checkpoint: u64,
    pub keyed: Option<Box<dyn PreparedSnapshot>>,
    /// Sources: where to read on from after a restore.
    pub source: Option<String>,
    /// Sinks: files pending commit and the next part number.
    pub sink: Option<String>,
    /// A broadcast process function's broadcast state (hex of its encoding).
    pub broadcast: Option<String>,
    /// An async operator's records whose results were not emitted yet (hex of their encoding):
    /// issued again after a restore.
    pub in_flight: Option<String>,
}

impl std::fmt::Debug for ChainSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainSnapshot")
            .field("checkpoint", &self.checkpoint)
            .field("keyed", &self.keyed.is_some())
            .field("source", &self.source)
            .field("sink", &self.sink)
            .field("broadcast", &self.broadcast.is_some())
            .field("in_flight", &self.in_flight.is_some())
            .finish()
    }
}

/// What a task restored from a checkpoint starts from (its keyed state comes as [`KeyedStateInit`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskRestore {
    pub checkpoint: u64,
    /// Sources: the positions this subtask reads on from, one per split it takes over: its own
    /// at an unchanged parallelism; after a rescale, any number (none: nothing left for it).
    pub sources: Vec<String>,
    /// Sinks: the committer states this subtask takes over (its own, or after a rescale those
    /// of the old subtasks given to it; none: a subtask a rescale added).
    pub sinks: Vec<String>,
    /// A broadcast process function's broadcast state, as a snapshot of any old subtask held it.
    pub broadcast: Option<String>,
    /// An async operator's records in flight that this subtask issues again (its own, or after a
    /// rescale those of the old subtasks given to it).
    pub in_flight: Vec<String>,
    /// The schema each keyed state was written with, from the keyed snapshots restored
    /// (`state/evolution.rs`).
    pub schemas: std::collections::BTreeMap<String, String>,
}

/// Bytes as lowercase hex: how operator state too small for files of its own (broadcast state, an
/// async operator's records in flight) travels inline in a checkpoint's metadata.
pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The bytes of [`hex_encode`]'s text.
pub(crate) fn hex_decode(hex: &str) -> std::result::Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err("not hex: odd length".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("not hex at {i}"))
        })
        .collect()
}

/// The positions a source snapshot holds: a subtask that read several splits (after a rescale)
/// records a JSON array of their positions, one that read one split that position.
pub fn source_positions(position: &str) -> Vec<String> {
    if position.starts_with('[')
        && let Ok(list) = serde_json::from_str::<Vec<String>>(position)
    {
        return list;
    }
    vec![position.to_string()]
}

/// Keyed state a task starts with.
pub enum KeyedStateInit {
    /// `hashmap`: operators keep objects; these are the entries restored from a snapshot (or none).
    Heap(HashMapStateBackend),
    /// `rocksdb` (or any byte-level backend), fresh or restored.
    Backend(Box<dyn KeyedStateBackend>),
}

impl std::fmt::Debug for KeyedStateInit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyedStateInit::Heap(h) => write!(f, "Heap({} entries)", h.len()),
            KeyedStateInit::Backend(b) => write!(f, "Backend({:?})", b.key_groups()),
        }
    }
}

/// How a task's checkpoints reach it and leave it.
#[derive(Debug)]
pub struct Checkpointing {
    pub control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    pub snapshots: tokio::sync::mpsc::UnboundedSender<ChainSnapshot>,
}

/// A keyed operator's values.
pub(crate) enum Keyed<K, V> {
    /// Objects; `None` only for the instant a value is being combined. `entries`: the per-entry
    /// states a process function declares ([`crate::state::entries`]).
    Heap {
        map: KeyMap<K, Option<V>>,
        key_groups: Range<u32>,
        max_parallelism: u32,
        entries: HeapEntries<K>,
    },
    /// Bytes in a backend, per record; `last` holds the value just folded, handed out by reference
    /// like the heap's.
    Store { table: StoreTable, last: Option<V> },
}

/// A byte-level backend with the scratch buffers of the per-record path. The first failure is kept
/// and fails the task at its next step (a collector cannot return errors).
pub(crate) struct StoreTable {
    backend: Box<dyn KeyedStateBackend>,
    max_parallelism: u32,
    key: Vec<u8>,
    value: Vec<u8>,
    /// A per-entry state's entry key.
    entry: Vec<u8>,
    pub(crate) failure: Option<String>,
    /// The per-entry states checked for a switched time to live.
    declared: std::collections::HashSet<String>,
    /// The schemas of the states restored and declared (`state/evolution.rs`).
    schemas: StateSchemas,
}

impl<K: Data + Hash + Eq, V: Data> Keyed<K, V> {
    /// The operator's state from what the task was given (restored entries or a backend).
    #[cfg(test)]
    pub(crate) fn new(
        init: Option<KeyedStateInit>,
        key_groups: Range<u32>,
        max_parallelism: u32,
    ) -> Result<Self> {
        Self::restored(init, key_groups, max_parallelism, None)
    }

    /// The operator's state from what the task was given (restored entries or a backend), its
    /// values migrated when `restore` recorded another schema of `V` (see
    /// [`crate::state::evolution`]).
    pub(crate) fn restored(
        init: Option<KeyedStateInit>,
        key_groups: Range<u32>,
        max_parallelism: u32,
        restore: Option<&TaskRestore>,
    ) -> Result<Self> {
        let mut schemas = StateSchemas::restored(restore.filter(|_| init.is_some()));
        let migration = schemas.declare(KEYED_STATE, EntrySchema::value::<V>())?;
        match init {
            Some(KeyedStateInit::Backend(mut backend)) => {
                if let Some(m) = &migration {
                    evolution::migrate_backend_state(backend.as_mut(), KEYED_STATE, key_groups.clone(), m)?;
                }
                Ok(Keyed::Store {
                    table: StoreTable {
                        backend,
                        max_parallelism,
                        key: Vec::new(),
                        value: Vec::new(),
                        entry: Vec::new(),
                        failure: None,
                        declared: Default::default(),
                        schemas,
                    },
                    last: None,
                })
            }
            Some(KeyedStateInit::Heap(mut restored)) => {
                let mut map = KeyMap::default();
                for (_, key, value) in restored.take(KEYED_STATE) {
                    let k = K::decode(&mut key.as_slice()).map_err(|e| restore_error("key", e))?;
                    let v = match &migration {
                        Some(m) => m.decode::<V>(&value),
                        None => V::decode(&mut value.as_slice()),
                    }
                    .map_err(|e| restore_error("value", e))?;
                    map.insert(k, Some(v));
                }
                // Timers are the operator's (`restore_timers`); what is left is per-entry state,
                // kept for the declarations that will take it.
                for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
                    restored.take(domain.state_name());
                }
                Ok(Keyed::Heap {
                    map,
                    key_groups,
                    max_parallelism,
                    entries: HeapEntries::new(restored, schemas),
                })
            }
            None => Ok(Keyed::Heap {
                map: KeyMap::default(),
                key_groups,
                max_parallelism,
                entries: HeapEntries::new(HashMapStateBackend::default(), schemas),
            }),
        }
    }

    /// Folds `value` into the key's state with `f` (first value as is) and returns the new state.
    /// `None` only after a backend failure (kept in [`StoreTable::failure`]).
    pub(crate) fn fold(&mut self, key: K, value: V, f: impl FnOnce(V, V) -> V) -> Option<&V> {
        match self {
            Keyed::Heap { map, .. } => {
                let slot = map.entry(key).or_insert(None);
                let folded = match slot.take() {
                    Some(acc) => f(acc, value),
                    None => value,
                };
                Some(slot.insert(folded))
            }
            Keyed::Store { table, last } => {
                *last = table.fold(&key, value, f);
                last.as_ref()
            }
        }
    }

    /// Runs `g` on the key's state (the default for a new key) and keeps what it leaves there.
    pub(crate) fn update(&mut self, key: K, g: impl FnOnce(&K, &mut V))
    where
        V: Default,
    {
        match self {
            Keyed::Heap { map, .. } => {
                if let Some(slot) = map.get_mut(&key) {
                    g(&key, slot.get_or_insert_with(V::default));
                } else {
                    let mut state = V::default();
                    g(&key, &mut state);
                    map.insert(key, Some(state));
                }
            }
            Keyed::Store { table, .. } => table.update_keep(&key, |k, v, _| {
                g(k, v);
                true
            }),
        }
    }

    /// Like `update`, but `g` says whether the key keeps any state (`false` removes the key's
    /// entry: a window operator's key with no window left, a process function's cleared state),
    /// and gets the key's per-entry states too (a process function's context).
    pub(crate) fn update_entries(&mut self, key: &K, g: impl FnOnce(&K, &mut V, EntryAccess<'_, K>) -> bool)
    where
        V: Default,
    {
        match self {
            Keyed::Heap { map, entries, .. } => {
                let access = EntryAccess {
                    key,
                    store: EntryStore::Heap(entries),
                };
                // A key whose value is back to the default holds nothing: it goes (a function
                // that keeps everything in per-entry state, a count back at zero), as if `g`
                // had cleared it; its next access starts from the default again.
                match map.get_mut(key) {
                    Some(slot) => {
                        let state = slot.get_or_insert_with(V::default);
                        if !g(key, state, access) || state.data_eq(&V::default()) {
                            map.remove(key);
                        }
                    }
                    None => {
                        let mut state = V::default();
                        if g(key, &mut state, access) && !state.data_eq(&V::default()) {
                            map.insert(key.clone(), Some(state));
                        }
                    }
                }
            }
            Keyed::Store { table, .. } => table.update_keep(key, g),
        }
    }

    /// Drops everything of `key` (BATCH: a key's state goes after its last element, which only
    /// the heap holds: BATCH jobs take no checkpoints, so they never get a byte-level backend).
    pub(crate) fn remove_key(&mut self, key: &K)
    where
        V: Default,
    {
        match self {
            Keyed::Heap { map, entries, .. } => {
                map.remove(key);
                entries.remove_key(key);
            }
            Keyed::Store { table, .. } => table.update_keep::<K, V>(key, |_, _, _| false),
        }
    }

    /// A timer of `key` was registered (`present`) or deleted: a byte-level backend holds it as
    /// keyed state at once (so its snapshots have it); the heap writes timers at a snapshot.
    pub(crate) fn set_timer(&mut self, domain: TimeDomain, key: &K, timestamp: i64, present: bool) {
        if let Keyed::Store { table, .. } = self {
            table.set_timer(domain, key, timestamp, present);
        }
    }

    /// [`Keyed::prepare_snapshot`] with the operator's timers in it.
    pub(crate) fn prepare_snapshot_with_timers(
        &mut self,
        checkpoint: u64,
        timers: &Timers<K>,
    ) -> Result<Box<dyn PreparedSnapshot>>
    where
        K: Ord,
    {
        match self {
            Keyed::Heap {
                map,
                key_groups,
                max_parallelism,
                entries,
            } => {
                let mut full = heap_snapshot(map, key_groups, *max_parallelism)?;
                entries.write(&mut full, *max_parallelism)?;
                write_timers(&mut full, timers, *max_parallelism)?;
                full.prepare_snapshot(checkpoint).map_err(state_error)
            }
            Keyed::Store { table, .. } => table.backend.prepare_snapshot(checkpoint).map_err(state_error),
        }
        .map(|inner| self.with_schemas(inner))
    }

    /// `inner` with the schemas of the states it holds.
    fn with_schemas(&self, inner: Box<dyn PreparedSnapshot>) -> Box<dyn PreparedSnapshot> {
        let schemas = match self {
            Keyed::Heap { entries, .. } => entries.tables.schemas.recorded(),
            Keyed::Store { table, .. } => table.schemas.recorded(),
        };
        Box::new(evolution::WithSchemas { inner, schemas })
    }

    /// The heap slot of a key already held (the fast path of `key_by_ref`: no key copy).
    pub(crate) fn heap_slot<Q>(&mut self, key: &Q) -> Option<&mut Option<V>>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self {
            Keyed::Heap { map, .. } => map.get_mut(key),
            Keyed::Store { .. } => None,
        }
    }

    pub(crate) fn failure(&mut self) -> Option<String> {
        match self {
            Keyed::Store { table, .. } => table.failure.take(),
            Keyed::Heap { entries, .. } => entries.failure.take(),
        }
    }

    /// The synchronous part of the snapshot: heap objects are encoded now (a full snapshot); a
    /// backend fixes its content its own way.
    pub(crate) fn prepare_snapshot(&mut self, checkpoint: u64) -> Result<Box<dyn PreparedSnapshot>> {
        match self {
            Keyed::Heap {
                map,
                key_groups,
                max_parallelism,
                entries,
            } => {
                let mut full = heap_snapshot(map, key_groups, *max_parallelism)?;
                entries.write(&mut full, *max_parallelism)?;
                full.prepare_snapshot(checkpoint).map_err(state_error)
            }
            Keyed::Store { table, .. } => table.backend.prepare_snapshot(checkpoint).map_err(state_error),
        }
        .map(|inner| self.with_schemas(inner))
    }
}

/// Every timer as a keyed state entry of its key's key group.
pub(crate) fn write_timers<K: Data + Ord + Hash>(
    backend: &mut HashMapStateBackend,
    timers: &Timers<K>,
    max_parallelism: u32,
) -> Result<()> {
    let (mut key, mut entry) = (Vec::new(), Vec::new());
    for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
        for (ts, k) in timers.iter(domain) {
            let kg = key_group_for_hash(key_hash(k, &mut key), max_parallelism);
            timer_entry_key(k, *ts, &mut entry);
            backend
                .put(domain.state_name(), kg, &entry, &[])
                .map_err(state_error)?;
        }
    }
    Ok(())
}

/// The heap state of a keyed operator as a full snapshot's entries.
pub(crate) fn heap_snapshot<K: Data, V: Data>(
    map: &KeyMap<K, Option<V>>,
    key_groups: &Range<u32>,
    max_parallelism: u32,
) -> Result<HashMapStateBackend> {
    let mut full = HashMapStateBackend::new(key_groups.clone());
    let (mut key, mut value) = (Vec::new(), Vec::new());
    for (k, v) in map.iter() {
        let Some(v) = v else { continue };
        let kg = key_group_for_hash(key_hash(k, &mut key), max_parallelism);
        value.clear();
        v.encode(&mut value);
        full.put(KEYED_STATE, kg, &key, &value).map_err(state_error)?;
    }
    Ok(full)
}

/// The timers a keyed snapshot holds (both domains), for the operator that takes `init`.
pub(crate) fn restore_timers<K: Data + Ord + Hash>(init: Option<&KeyedStateInit>) -> Result<Timers<K>> {
    let mut timers = Timers::default();
    for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
        let entries: Vec<Vec<u8>> = match init {
            None => Vec::new(),
            Some(KeyedStateInit::Heap(h)) => h
                .entries(domain.state_name())
                .map(|(_, k, _)| k.to_vec())
                .collect(),
            Some(KeyedStateInit::Backend(b)) => b
                .entries(domain.state_name())
                .map_err(state_error)?
                .into_iter()
                .map(|(_, k, _)| k)
                .collect(),
        };
        for entry in entries {
            let (key, ts) = decode_timer_entry::<K>(&entry).map_err(|e| restore_error("timer", e))?;
            timers.register(domain, key, ts);
        }
    }
    Ok(timers)
}

impl StoreTable {
    /// Reads the key's value, runs `g` on it (with the key's per-entry states), and writes what
    /// it leaves if that changed (`g` returns `false`: deletes it).
    fn update_keep<K: Data, V: Data + Default>(
        &mut self,
        key: &K,
        g: impl FnOnce(&K, &mut V, EntryAccess<'_, K>) -> bool,
    ) {
        if self.failure.is_some() {
            return;
        }
        let kg = key_group_for_hash(key_hash(key, &mut self.key), self.max_parallelism);
        let read = (|| -> Result<(Option<Vec<u8>>, V)> {
            let old = self
                .backend
                .get(KEYED_STATE, kg, &self.key)
                .map_err(state_error)?;
            let state = match &old {
                Some(bytes) => V::decode(&mut bytes.as_slice())?,
                None => V::default(),
            };
            Ok((old, state))
        })();
        let (old, mut state) = match read {
            Ok(read) => read,
            Err(e) => {
                self.failure = Some(e.to_string());
                return;
            }
        };
        let access = EntryAccess {
            key,
            store: EntryStore::Backend(BackendEntries {
                backend: &mut *self.backend,
                key_group: kg,
                key: &self.key,
                entry: &mut self.entry,
                value: &mut self.value,
                failure: &mut self.failure,
                declared: &mut self.declared,
                schemas: &mut self.schemas,
            }),
        };
        // As on the heap: a value back to the default is deleted.
        let result = if g(key, &mut state, access) && !state.data_eq(&V::default()) {
            self.value.clear();
            state.encode(&mut self.value);
            // Unchanged (a read, or a function that keeps all in per-entry state): no write.
            if old.as_deref() == Some(self.value.as_slice()) {
                Ok(())
            } else {
                self.backend.put(KEYED_STATE, kg, &self.key, &self.value)
            }
        } else if old.is_some() {
            self.backend.delete(KEYED_STATE, kg, &self.key)
        } else {
            Ok(())
        };
        if let Err(e) = result {
            self.failure.get_or_insert_with(|| e.to_string());
        }
    }

    fn set_timer<K: Data>(&mut self, domain: TimeDomain, key: &K, timestamp: i64, present: bool) {
        if self.failure.is_some() {
            return;
        }
        let kg = key_group_for_hash(key_hash(key, &mut self.key), self.max_parallelism);
        timer_entry_key(key, timestamp, &mut self.value);
        let result = if present {
            self.backend.put(domain.state_name(), kg, &self.value, &[])
        } else {
            self.backend.delete(domain.state_name(), kg, &self.value)
        };
        if let Err(e) = result {
            self.failure = Some(e.to_string());
        }
    }

    fn fold<K: Data, V: Data>(&mut self, key: &K, value: V, f: impl FnOnce(V, V) -> V) -> Option<V> {
        if self.failure.is_some() {
            return None;
        }
        let kg = key_group_for_hash(key_hash(key, &mut self.key), self.max_parallelism);
        let result = (|| -> Result<V> {
            let folded = match self
                .backend
                .get(KEYED_STATE, kg, &self.key)
                .map_err(state_error)?
            {
                Some(bytes) => f(V::decode(&mut bytes.as_slice())?, value),
                None => value,
            };
            self.value.clear();
            folded.encode(&mut self.value);
            self.backend
                .put(KEYED_STATE, kg, &self.key, &self.value)
                .map_err(state_error)?;
            Ok(folded)
        })();
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.failure = Some(e.to_string());
                None
            }
        }
    }
}

fn state_error(e: floe_state::Error) -> Error {
    Error::State(e.to_string())
}

fn restore_error(what: &str, e: Error) -> Error {
    Error::State(format!(
        "restoring keyed state: a {what} does not decode as this operator's type: {e}"
    ))
}
