//! Per-entry keyed state on the heap (`hashmap`), as Flink's heap backend keeps it: each declared
//! state is a table of objects per key (a map's entries in a hash map of their own, a list's
//! elements in a vector), so an access costs the same whatever the size of the key's map or list.
//! Tables are typed by their declaration and kept behind [`HeapTable`], since a process function
//! may declare states of any types; a snapshot writes them in the RocksDB backend's layout (see
//! [`super::entries`]), and a restore keeps the entries of a state as they came until the state
//! is declared again (a function declares its states as it first uses them).

use std::any::Any;
use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;

use floe_state::{Entry, HashMapStateBackend, KeyedStateBackend};

use crate::data::{Data, key_group_for_hash, key_hash};
use crate::error::{Error, Result};

/// One declared state's values for every key.
pub(crate) trait HeapTable<K>: Send {
    fn as_any(&mut self) -> &mut dyn Any;
    /// Writes every entry as a snapshot holds it: (key group, key, value) under `name`.
    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()>;
    /// Takes the restored entries of this state.
    fn load(&mut self, name: &str, entries: Vec<Entry>) -> Result<()>;
    /// Drops every value of `key` (BATCH: a key's state goes after its last element).
    fn remove_key(&mut self, key: &K);
}

/// A map per key: user keys by their encoding (equal when their encodings are, as on RocksDB).
pub(crate) struct MapTable<K, UK, UV> {
    pub map: HashMap<K, HashMap<Vec<u8>, UV>>,
    _t: PhantomData<fn() -> UK>,
}

/// A list per key.
pub(crate) struct ListTable<K, T> {
    pub map: HashMap<K, Vec<T>>,
}

/// One value per key (value, reducing and aggregating state); `None` only while a value is
/// being combined.
pub(crate) struct ValueTable<K, T> {
    pub map: HashMap<K, Option<T>>,
}

impl<K, UK, UV> Default for MapTable<K, UK, UV> {
    fn default() -> Self {
        MapTable {
            map: HashMap::new(),
            _t: PhantomData,
        }
    }
}

impl<K, T> Default for ListTable<K, T> {
    fn default() -> Self {
        ListTable { map: HashMap::new() }
    }
}

impl<K, T> Default for ValueTable<K, T> {
    fn default() -> Self {
        ValueTable { map: HashMap::new() }
    }
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
    UK: 'static,
    UV: Data,
{
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        for (k, entries) in &self.map {
            let kg = key_group_of(k, &mut key, max_parallelism);
            let len = key.len();
            for (user_key, v) in entries {
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
        for (_, key, value) in entries {
            let (k, user_key) = split_key::<K>(name, &key)?;
            let v = UV::decode(&mut value.as_slice()).map_err(|e| corrupt(name, "value", e))?;
            self.map.entry(k).or_default().insert(user_key.to_vec(), v);
        }
        Ok(())
    }

    fn remove_key(&mut self, key: &K) {
        self.map.remove(key);
    }
}

impl<K, T> HeapTable<K> for ListTable<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()> {
        let (mut key, mut item, mut value) = (Vec::new(), Vec::new(), Vec::new());
        for (k, items) in &self.map {
            if items.is_empty() {
                continue;
            }
            let kg = key_group_of(k, &mut key, max_parallelism);
            value.clear();
            for t in items {
                item.clear();
                t.encode(&mut item);
                floe_state::list::push(&mut value, &item);
            }
            put(out, name, kg, &key, &value)?;
        }
        Ok(())
    }

    fn load(&mut self, name: &str, entries: Vec<Entry>) -> Result<()> {
        for (_, key, value) in entries {
            let (k, _) = split_key::<K>(name, &key)?;
            let items = floe_state::list::decode(&value).ok_or_else(|| {
                Error::State(format!("restoring keyed state {name:?}: a list is truncated"))
            })?;
            let list = self.map.entry(k).or_default();
            for mut item in items {
                list.push(T::decode(&mut item).map_err(|e| corrupt(name, "list element", e))?);
            }
        }
        Ok(())
    }

    fn remove_key(&mut self, key: &K) {
        self.map.remove(key);
    }
}

impl<K, T> HeapTable<K> for ValueTable<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn write(&self, name: &str, out: &mut HashMapStateBackend, max_parallelism: u32) -> Result<()> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        for (k, v) in &self.map {
            let Some(v) = v else { continue };
            let kg = key_group_of(k, &mut key, max_parallelism);
            value.clear();
            v.encode(&mut value);
            put(out, name, kg, &key, &value)?;
        }
        Ok(())
    }

    fn load(&mut self, name: &str, entries: Vec<Entry>) -> Result<()> {
        for (_, key, value) in entries {
            let (k, _) = split_key::<K>(name, &key)?;
            let v = T::decode(&mut value.as_slice()).map_err(|e| corrupt(name, "value", e))?;
            self.map.insert(k, Some(v));
        }
        Ok(())
    }

    fn remove_key(&mut self, key: &K) {
        self.map.remove(key);
    }
}

/// The declared states' tables, and the restored entries of states not declared yet.
pub(crate) struct HeapTables<K> {
    tables: HashMap<String, Box<dyn HeapTable<K>>>,
    /// Restored entries of states no function has declared since the restore: kept as they came
    /// (and in every snapshot) until a declaration takes them, so a state a function uses only
    /// now and then is never lost.
    restored: HashMapStateBackend,
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
    /// Per-entry states restored from these snapshot entries (per-entry state names only).
    pub(crate) fn new(restored: HashMapStateBackend) -> Self {
        HeapEntries {
            tables: HeapTables {
                tables: HashMap::new(),
                restored,
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

    /// Drops every per-entry value of `key`.
    pub(crate) fn remove_key(&mut self, key: &K) {
        for table in self.tables.tables.values_mut() {
            table.remove_key(key);
        }
    }
}

impl<K: Data + Hash + Eq> HeapTables<K> {
    /// The table of state `name`, created (with its restored entries) at its first use.
    pub(crate) fn table<T: HeapTable<K> + Default + 'static>(&mut self, name: &str) -> Result<&mut T> {
        if !self.tables.contains_key(name) {
            let mut table = T::default();
            table.load(name, self.restored.take(name))?;
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
