//! Per-entry keyed state on the heap (`hashmap`), as Flink's heap backend keeps it: each declared
//! state is a table of objects per key (a map's entries in a hash map of their own, a list's
//! elements in a vector), so an access costs the same whatever the size of the key's map or list.
//! Tables are typed by their declaration and kept behind [`HeapTable`], since a process function
//! may declare states of any types; a snapshot writes them in the RocksDB backend's layout (see
//! [`super::entries`]), and a restore keeps the entries of a state as they came until the state
//! is declared again (a function declares its states as it first uses them).
//!
//! Tables are insertion-ordered maps ([`IndexMap`]) so that a state with a time to live can be
//! cleaned a few entries at a time from a cursor that survives inserts and removals (Flink's
//! incremental cleanup of its heap state tables); a table of such a state knows how to read its
//! values' expiry ([`Expiry`]), which full snapshots and restores leave expired values out by.

use std::any::Any;
use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;

use floe_state::{Entry, HashMapStateBackend, KeyedStateBackend};
use indexmap::IndexMap;

use super::descriptors::{other_variant, user_name};
use super::evolution::{EntrySchema, StateSchemas};
use super::ttl::StateTtlConfig;
use crate::data::{Data, key_group_for_hash, key_hash};
use crate::error::{Error, Result};

/// How a table of a state with a time to live finds its values' expiry, and where its
/// incremental cleanup goes on.
pub(crate) struct Expiry<V> {
    pub of: fn(&V) -> i64,
    pub config: StateTtlConfig,
    /// The next key (and, in a map table, the next entry of that key) the cleanup checks.
    cursor: (usize, usize),
}

impl<V> Expiry<V> {
    pub(crate) fn new(of: fn(&V) -> i64, config: StateTtlConfig) -> Self {
        Expiry {
            of,
            config,
            cursor: (0, 0),
        }
    }

    fn live(&self, v: &V, now: i64) -> bool {
        (self.of)(v) > now
    }

    /// Whether a full snapshot (or a restore) at `now` keeps `v`.
    fn kept(expiry: &Option<Self>, v: &V, now: i64) -> bool {
        expiry
            .as_ref()
            .is_none_or(|e| !e.config.cleans_full_snapshots() || e.live(v, now))
    }
}

/// One declared state's values for every key.
pub(crate) trait HeapTable<K>: Send + 'static {
    fn as_any(&mut self) -> &mut dyn Any;
    /// Writes every entry as a snapshot holds it: (key group, key, value) under `name`.
    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()>;
    /// Takes the restored entries of this state.
    fn load(&mut self, name: &str, entries: Vec<Entry>) -> Result<()>;
    /// The layout and schema of what the state stores (its recorded schema).
    fn entry_schema(&self) -> EntrySchema;
    /// Drops every value of `key` (BATCH: a key's state goes after its last element).
    fn remove_key(&mut self, key: &K);
    /// The keys holding a value.
    #[cfg(test)]
    fn keys(&self) -> usize;
}

/// A map per key: user keys by their encoding (equal when their encodings are, as on RocksDB).
pub(crate) struct MapTable<K, UK, UV> {
    pub map: IndexMap<K, IndexMap<Vec<u8>, UV>>,
    pub expiry: Option<Expiry<UV>>,
    _t: PhantomData<fn() -> UK>,
}

/// A list per key.
pub(crate) struct ListTable<K, T> {
    pub map: IndexMap<K, Vec<T>>,
    pub expiry: Option<Expiry<T>>,
}

/// One value per key (value, reducing and aggregating state); `None` only while a value is
/// being combined.
pub(crate) struct ValueTable<K, T> {
    pub map: IndexMap<K, Option<T>>,
    pub expiry: Option<Expiry<T>>,
}

impl<K, UK, UV> MapTable<K, UK, UV> {
    pub(crate) fn new(expiry: Option<Expiry<UV>>) -> Self {
        MapTable {
            map: IndexMap::new(),
            expiry,
            _t: PhantomData,
        }
    }

    /// Checks `n` entries from the cursor and removes the expired ones (a key whose map is left
    /// empty goes with its last entry).
    pub(crate) fn cleanup(&mut self, now: i64, n: usize) {
        let Some(e) = self.expiry.as_mut() else { return };
        let (mut key, mut entry) = e.cursor;
        let (mut checked, mut keys_passed) = (0, 0);
        // Passing from key to key checks nothing; at most one lap of the keys per call.
        while checked < n && !self.map.is_empty() && keys_passed <= self.map.len() {
            if key >= self.map.len() {
                (key, entry) = (0, 0);
            }
            let Some((_, m)) = self.map.get_index_mut(key) else {
                break;
            };
            if entry >= m.len() {
                (key, entry, keys_passed) = (key + 1, 0, keys_passed + 1);
                continue;
            }
            checked += 1;
            if m.get_index(entry).is_some_and(|(_, v)| !e.live(v, now)) {
                m.swap_remove_index(entry);
                if m.is_empty() {
                    // The last key moves here: it is checked next, from its first entry.
                    self.map.swap_remove_index(key);
                    entry = 0;
                }
            } else {
                entry += 1;
            }
        }
        e.cursor = (key, entry);
    }
}

impl<K, T> ListTable<K, T> {
    pub(crate) fn new(expiry: Option<Expiry<T>>) -> Self {
        ListTable {
            map: IndexMap::new(),
            expiry,
        }
    }

    /// Checks the lists of `n` keys from the cursor and removes their expired elements (a key
    /// whose list is left empty goes).
    pub(crate) fn cleanup(&mut self, now: i64, n: usize) {
        let Some(e) = self.expiry.as_mut() else { return };
        let of = e.of;
        cleanup_keys(&mut self.map, &mut e.cursor.0, n, |list| {
            list.retain(|v| of(v) > now);
            !list.is_empty()
        });
    }
}

impl<K, T> ValueTable<K, T> {
    pub(crate) fn new(expiry: Option<Expiry<T>>) -> Self {
        ValueTable {
            map: IndexMap::new(),
            expiry,
        }
    }

    /// Checks the values of `n` keys from the cursor and removes the expired ones.
    pub(crate) fn cleanup(&mut self, now: i64, n: usize) {
        let Some(e) = self.expiry.as_mut() else { return };
        let of = e.of;
        cleanup_keys(&mut self.map, &mut e.cursor.0, n, |slot| {
            slot.as_ref().is_some_and(|v| of(v) > now)
        });
    }
}

/// Visits the values of `n` keys from `cursor` (each key once at most: a table of fewer keys is
/// not walked twice) and removes the keys `keep` says go. A removed key's place takes the last
/// key, which is visited next, so the cursor stays valid across removals and inserts.
fn cleanup_keys<K, V>(
    map: &mut IndexMap<K, V>,
    cursor: &mut usize,
    n: usize,
    mut keep: impl FnMut(&mut V) -> bool,
) {
    let mut key = *cursor;
    for _ in 0..n.min(map.len()) {
        if key >= map.len() {
            key = 0;
        }
        let Some((_, value)) = map.get_index_mut(key) else {
            break;
        };
        if keep(value) {
            key += 1;
        } else {
            map.swap_remove_index(key);
        }
    }
    *cursor = key;
}

fn corrupt(name: &str, what: &str, e: Error) -> Error {
    Error::State(format!(
        "restoring keyed state {name:?}: a {what} does not decode as its declared type: {e}"
    ))
}

/// Decodes the key at the start of a restored entry's key; the rest is what follows it.
fn split_key<'b, K: Data>(name: &str, mut bytes: &'b [u8]) -> Result<(K, &'b [u8])> {
    let key = K::decode(&mut bytes).map_err(|e| corrupt(name, "key", e))?;
    Ok((key, bytes))
}

fn key_group_of<K: Data>(key: &K, scratch: &mut Vec<u8>, max_parallelism: u32) -> u32 {
    key_group_for_hash(key_hash(key, scratch), max_parallelism)
}

fn put(out: &mut HashMapStateBackend, name: &str, kg: u32, key: &[u8], value: &[u8]) -> Result<()> {
    out.put(name, kg, key, value)
        .map_err(|e| Error::State(e.to_string()))
}

impl<K, UK, UV> HeapTable<K> for MapTable<K, UK, UV>
where
    K: Data + Hash + Eq,
    UK: Data,
    UV: Data,
{
    fn entry_schema(&self) -> EntrySchema {
        EntrySchema::map::<UK, UV>()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        let now = super::ttl::now_ms();
        for (k, entries) in &self.map {
            let kg = key_group_of(k, &mut key, max_parallelism);
            let len = key.len();
            for (user_key, v) in entries {
                if !Expiry::kept(&self.expiry, v, now) {
                    continue;
                }
                key.truncate(len);
                key.extend_from_slice(user_key);
                value.clear();
                v.encode(&mut value);
                put(out, name, kg, &key, &value)?;
            }
        }
        Ok(())
    }

    fn load(&mut self, name: &str, entries: Vec<Entry>) -> Result<()> {
        let now = super::ttl::now_ms();
        for (_, key, value) in entries {
            let (k, user_key) = split_key::<K>(name, &key)?;
            let v = UV::decode(&mut value.as_slice()).map_err(|e| corrupt(name, "value", e))?;
            if Expiry::kept(&self.expiry, &v, now) {
                self.map.entry(k).or_default().insert(user_key.to_vec(), v);
            }
        }
        Ok(())
    }

    fn remove_key(&mut self, key: &K) {
        self.map.swap_remove(key);
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.map.len()
    }
}

impl<K, T> HeapTable<K> for ListTable<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    fn entry_schema(&self) -> EntrySchema {
        EntrySchema::list::<T>()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()> {
        let (mut key, mut item, mut value) = (Vec::new(), Vec::new(), Vec::new());
        let now = super::ttl::now_ms();
        for (k, items) in &self.map {
            value.clear();
            for t in items {
                if !Expiry::kept(&self.expiry, t, now) {
                    continue;
                }
                item.clear();
                t.encode(&mut item);
                floe_state::list::push(&mut value, &item);
            }
            if value.is_empty() {
                continue;
            }
            let kg = key_group_of(k, &mut key, max_parallelism);
            put(out, name, kg, &key, &value)?;
        }
        Ok(())
    }

    fn load(&mut self, name: &str, entries: Vec<Entry>) -> Result<()> {
        let now = super::ttl::now_ms();
        for (_, key, value) in entries {
            let (k, _) = split_key::<K>(name, &key)?;
            let items = floe_state::list::decode(&value).ok_or_else(|| {
                Error::State(format!("restoring keyed state {name:?}: a list is truncated"))
            })?;
            let mut list = Vec::with_capacity(items.len());
            for mut item in items {
                let t = T::decode(&mut item).map_err(|e| corrupt(name, "list element", e))?;
                if Expiry::kept(&self.expiry, &t, now) {
                    list.push(t);
                }
            }
            if !list.is_empty() {
                self.map.entry(k).or_default().extend(list);
            }
        }
        Ok(())
    }

    fn remove_key(&mut self, key: &K) {
        self.map.swap_remove(key);
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.map.len()
    }
}

impl<K, T> HeapTable<K> for ValueTable<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    fn entry_schema(&self) -> EntrySchema {
        EntrySchema::value::<T>()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        let now = super::ttl::now_ms();
        for (k, v) in &self.map {
            let Some(v) = v.as_ref().filter(|v| Expiry::kept(&self.expiry, v, now)) else {
                continue;
            };
            let kg = key_group_of(k, &mut key, max_parallelism);
            value.clear();
            v.encode(&mut value);
            put(out, name, kg, &key, &value)?;
        }
        Ok(())
    }

    fn load(&mut self, name: &str, entries: Vec<Entry>) -> Result<()> {
        let now = super::ttl::now_ms();
        for (_, key, value) in entries {
            let (k, _) = split_key::<K>(name, &key)?;
            let v = T::decode(&mut value.as_slice()).map_err(|e| corrupt(name, "value", e))?;
            if Expiry::kept(&self.expiry, &v, now) {
                self.map.insert(k, Some(v));
            }
        }
        Ok(())
    }

    fn remove_key(&mut self, key: &K) {
        self.map.swap_remove(key);
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.map.len()
    }
}

/// The declared states' tables, and the restored entries of states not declared yet.
pub(crate) struct HeapTables<K> {
    tables: HashMap<String, Box<dyn HeapTable<K>>>,
    /// Restored entries of states no function has declared since the restore: kept as they came
    /// (and in every snapshot) until a declaration takes them, so a state a function uses only
    /// now and then is never lost.
    restored: HashMapStateBackend,
    /// The schemas the restored states were written with, and those declared since.
    pub schemas: StateSchemas,
}

/// The heap's per-entry states with the scratch buffer of the per-record path. The first failure
/// (a state declared twice with different types, a restored entry that does not decode) is kept
/// and fails the task at its next step.
pub(crate) struct HeapEntries<K> {
    pub tables: HeapTables<K>,
    pub scratch: Vec<u8>,
    pub failure: Option<String>,
}

impl<K: Data + Hash + Eq> HeapEntries<K> {
    /// Per-entry states restored from these snapshot entries (per-entry state names only),
    /// written with `schemas`.
    pub(crate) fn new(restored: HashMapStateBackend, schemas: StateSchemas) -> Self {
        HeapEntries {
            tables: HeapTables {
                tables: HashMap::new(),
                restored,
                schemas,
            },
            scratch: Vec::new(),
            failure: None,
        }
    }

    /// Every per-entry state's entries into a full snapshot.
    pub(crate) fn write(&self, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()> {
        for (name, table) in &self.tables.tables {
            table.write(name, out, max_parallelism)?;
        }
        for (name, kg, key, value) in self.tables.restored.all_entries() {
            put(out, name, kg, key, value)?;
        }
        Ok(())
    }

    /// The keys holding a value in each declared state, by name.
    #[cfg(test)]
    pub(crate) fn keys_per_state(&self) -> std::collections::BTreeMap<String, usize> {
        self.tables
            .tables
            .iter()
            .map(|(name, t)| (name.clone(), t.keys()))
            .collect()
    }

    /// Drops every per-entry value of `key`.
    pub(crate) fn remove_key(&mut self, key: &K) {
        for table in self.tables.tables.values_mut() {
            table.remove_key(key);
        }
    }
}

impl<K: Data + Hash + Eq> HeapTables<K> {
    /// The table of state `name`, created by `create` (then given its restored entries) at its
    /// first use. A state restored with its time to live switched is refused (see
    /// [`super::ttl`]).
    pub(crate) fn table<T: HeapTable<K>>(
        &mut self,
        name: &str,
        create: impl FnOnce() -> T,
    ) -> Result<&mut T> {
        if !self.tables.contains_key(name) {
            let other = other_variant(name);
            if self.restored.state_names().contains(other.as_str()) {
                return Err(ttl_switched(name));
            }
            let mut table = create();
            let migration = self.schemas.declare(name, table.entry_schema())?;
            let mut entries = self.restored.take(name);
            if let Some(m) = migration {
                for (_, _, value) in &mut entries {
                    *value = m.value(value)?;
                }
            }
            table.load(name, entries)?;
            self.tables.insert(name.to_string(), Box::new(table));
        }
        self.tables
            .get_mut(name)
            .and_then(|t| t.as_any().downcast_mut::<T>())
            .ok_or_else(|| {
                Error::State(format!(
                    "keyed state {name:?} is declared twice with different types"
                ))
            })
    }
}

/// The error of a state restored with its time to live switched on or off.
pub(crate) fn ttl_switched(name: &str) -> Error {
    let (now, then) = if floe_state::ttl::layout(name.as_bytes()).is_some() {
        ("with", "without")
    } else {
        ("without", "with")
    };
    Error::State(format!(
        "keyed state {:?} is declared {now} a time to live but was checkpointed {then} one: \
         switching a state's time to live is not a compatible change (as in Flink); restore \
         with the state declared as it was, or give the state a new name",
        user_name(name)
    ))
}
