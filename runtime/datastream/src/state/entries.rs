//! Per-entry keyed state for keyed `process` functions, Flink's model: a function declares a
//! state with a descriptor (`MapStateDescriptor::new("visits")`) and reaches the current key's
//! part of it through the context (`ctx.map_state(&visits)`). Unlike the whole-value facades in
//! `type State` ([`super::MapState`], read and written whole at every record), an access reads or
//! writes one entry, whatever the size of the key's map or list:
//!
//! - On RocksDB a map entry is a key of its own, `key group | "map:{name}" | key | user key`, so
//!   `get`/`put`/`remove` touch one RocksDB key and `entries()` is a prefix scan; a list is one
//!   value that `add` extends with RocksDB's merge operator, without reading it (as Flink's
//!   `ListState::add`); value, reducing and aggregating states are one value per key. Encodings
//!   are self-delimiting, so one key's prefix never matches another key's entries.
//! - On the heap each state is a typed table of objects per key (see [`super::heap`]).
//!
//! Both backends snapshot the same entries (the heap writes them in the RocksDB layout), so key
//! groups move between subtasks on a rescale as every keyed state's do. Iteration order of a map
//! is unspecified, as in Flink. A state may have a time to live ([`super::ttl`]). Map and list
//! handles are in [`super::collections`].

use std::collections::HashSet;
use std::hash::Hash;

use floe_state::KeyedStateBackend;

pub use super::collections::{ListHandle, MapHandle};
pub use super::descriptors::{
    AggregatingStateDescriptor, ListStateDescriptor, MAX_STATE_NAME_BYTES, MapStateDescriptor,
    ReducingStateDescriptor, ValueStateDescriptor,
};
use super::evolution::{EntrySchema, StateSchemas, migrate_backend_state};
use super::heap::{Expiry, HeapEntries, HeapTable, ValueTable, ttl_switched};
use super::ttl::{Stamped, StateTtlConfig};
use crate::data::Data;
use crate::operators::window::AggregateFunction;

/// The current key's per-entry states, as a process function's context hands them out.
pub(crate) struct EntryAccess<'a, K> {
    pub key: &'a K,
    pub store: EntryStore<'a, K>,
}

pub(crate) enum EntryStore<'a, K> {
    Heap(&'a mut HeapEntries<K>),
    Backend(BackendEntries<'a>),
}

/// A byte-level backend at the current key, with the scratch buffers of the per-record path.
pub(crate) struct BackendEntries<'a> {
    pub backend: &'a mut (dyn KeyedStateBackend + 'static),
    pub key_group: u32,
    /// The current key's encoding: the prefix of every entry of it.
    pub key: &'a [u8],
    /// The entry key being read or written (the key, then a map's user key).
    pub entry: &'a mut Vec<u8>,
    pub value: &'a mut Vec<u8>,
    pub failure: &'a mut Option<String>,
    /// The states checked for a switched time to live (once per state and operator).
    pub declared: &'a mut HashSet<String>,
    /// The states' recorded and declared schemas.
    pub schemas: &'a mut StateSchemas,
}

impl BackendEntries<'_> {
    pub(super) fn fail(&mut self, e: impl std::fmt::Display) {
        self.failure.get_or_insert_with(|| e.to_string());
    }

    /// The first access to state `name` (of the types `entry` gives): refused if the backend
    /// holds the state with its time to live switched (restored from a checkpoint of the job as it
    /// was) or written with a schema its types cannot read; its values are migrated first when
    /// they were written with another compatible one ([`super::evolution`]).
    pub(super) fn declare(&mut self, name: &str, entry: impl FnOnce() -> EntrySchema) {
        if self.declared.contains(name) {
            return;
        }
        let key_groups = self.backend.key_groups();
        match self.schemas.declare(name, entry()) {
            Ok(None) => {}
            Ok(Some(m)) => {
                if let Err(e) = migrate_backend_state(&mut *self.backend, name, key_groups, &m) {
                    self.fail(e);
                }
            }
            Err(e) => self.fail(e),
        }
        let other = super::descriptors::other_variant(name);
        let mut found = false;
        for kg in self.backend.key_groups() {
            let scan = self
                .backend
                .scan_prefix(&other, kg, &[], &mut |_: &[u8], _: &[u8]| {
                    found = true;
                    false
                });
            if let Err(e) = scan {
                self.fail(e);
            }
            if found {
                self.fail(ttl_switched(name));
                break;
            }
        }
        self.declared.insert(name.to_string());
    }

    /// The entry key: the current key, then `user_key`'s encoding if any.
    pub(super) fn at<U: Data>(&mut self, user_key: Option<&U>) {
        self.entry.clear();
        self.entry.extend_from_slice(self.key);
        if let Some(u) = user_key {
            u.encode(self.entry);
        }
    }

    /// The entry key of a state with one entry per key: the current key.
    pub(super) fn at_key(&mut self) {
        self.at::<()>(None);
    }

    pub(super) fn get<V: Data>(&mut self, name: &str) -> Option<V> {
        match self.backend.get(name, self.key_group, self.entry) {
            Ok(None) => None,
            Ok(Some(bytes)) => match V::decode(&mut bytes.as_slice()) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.fail(format!("keyed state {name:?}: {e}"));
                    None
                }
            },
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    pub(super) fn contains(&mut self, name: &str) -> bool {
        match self.backend.get(name, self.key_group, self.entry) {
            Ok(v) => v.is_some(),
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    pub(super) fn put<V: Data>(&mut self, name: &str, v: &V) {
        self.value.clear();
        v.encode(self.value);
        if let Err(e) = self.backend.put(name, self.key_group, self.entry, self.value) {
            self.fail(e);
        }
    }

    pub(super) fn delete(&mut self, name: &str) {
        if let Err(e) = self.backend.delete(name, self.key_group, self.entry) {
            self.fail(e);
        }
    }

    /// Every entry of the current key in `name`: (rest of the entry key, value) to `f` until it
    /// returns `false`.
    pub(super) fn scan(&mut self, name: &str, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        if let Err(e) = self.backend.scan_prefix(name, self.key_group, self.key, f) {
            self.fail(e);
        }
    }

    pub(super) fn delete_all(&mut self, name: &str) {
        if let Err(e) = self.backend.delete_prefix(name, self.key_group, self.key) {
            self.fail(e);
        }
    }

    pub(super) fn list<T: Data>(&mut self, name: &str) -> Vec<T> {
        self.at_key();
        let raw = match self.backend.get(name, self.key_group, self.entry) {
            Ok(raw) => raw.unwrap_or_default(),
            Err(e) => {
                self.fail(e);
                return Vec::new();
            }
        };
        let decoded = floe_state::list::decode(&raw)
            .ok_or_else(|| "a list is truncated".to_string())
            .and_then(|items| {
                items
                    .into_iter()
                    .map(|mut item| T::decode(&mut item).map_err(|e| e.to_string()))
                    .collect::<Result<Vec<T>, String>>()
            });
        decoded.unwrap_or_else(|e| {
            self.fail(format!("keyed state {name:?}: {e}"));
            Vec::new()
        })
    }
}

impl<K> EntryAccess<'_, K> {
    pub(super) fn fail_heap(heap: &mut HeapEntries<K>, e: impl std::fmt::Display) {
        heap.failure.get_or_insert_with(|| e.to_string());
    }
}

/// Decodes `bytes` as a `T`, or records the failure.
pub(super) fn decoded<T: Data>(name: &str, mut bytes: &[u8], failure: &mut Option<String>) -> Option<T> {
    match T::decode(&mut bytes) {
        Ok(t) => Some(t),
        Err(e) => {
            failure.get_or_insert_with(|| format!("keyed state {name:?}: {e}"));
            None
        }
    }
}

/// How a stored `S` tells when it expires (milliseconds).
pub(super) type ExpiresOf<S> = fn(&S) -> i64;

/// A declared state as its accesses see it: its stored name and, with a time to live, its
/// config and how a stored `S` tells when it expires.
pub(super) struct Decl<'d, S> {
    pub name: &'d str,
    pub ttl: Option<(StateTtlConfig, ExpiresOf<S>)>,
}

impl<S> Clone for Decl<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Decl<'_, S> {}

impl<'d, S> Decl<'d, S> {
    pub(super) fn plain(name: &'d str) -> Self {
        Decl { name, ttl: None }
    }

    /// The expiry a new table of this state reads its values by.
    pub(super) fn expiry(&self) -> Option<Expiry<S>> {
        self.ttl.map(|(config, of)| Expiry::new(of, config))
    }
}

impl<'d, T> Decl<'d, Stamped<T>> {
    pub(super) fn stamped(name: &'d str, ttl: StateTtlConfig) -> Self {
        Decl {
            name,
            ttl: Some((ttl, |s: &Stamped<T>| s.expires)),
        }
    }
}

impl<K: Data + Hash + Eq> HeapEntries<K> {
    /// The table of a declared state, created at its first use (failures are recorded).
    pub(super) fn open<T: HeapTable<K>>(&mut self, name: &str, create: impl FnOnce() -> T) -> Option<&mut T> {
        match self.tables.table(name, create) {
            Ok(t) => Some(t),
            Err(e) => {
                self.failure.get_or_insert_with(|| e.to_string());
                None
            }
        }
    }
}

/// Runs `f` on the heap value slot of the current key (`None`: absent); a slot left `None` is
/// removed. Then, with a time to live, a few keys of the state are checked for expired values.
/// `false` in backend mode.
fn heap_value<K: Data + Hash + Eq, S: Data>(
    access: &mut EntryAccess<'_, K>,
    decl: Decl<'_, S>,
    f: impl FnOnce(&mut Option<S>),
) -> bool {
    let key = access.key;
    let EntryStore::Heap(heap) = &mut access.store else {
        return false;
    };
    let Some(t) = heap.open(decl.name, || ValueTable::new(decl.expiry())) else {
        return true;
    };
    match t.map.get_mut(key) {
        Some(slot) => {
            f(slot);
            if slot.is_none() {
                t.map.swap_remove(key);
            }
        }
        None => {
            let mut slot = None;
            f(&mut slot);
            if slot.is_some() {
                t.map.insert(key.clone(), slot);
            }
        }
    }
    if let Some((config, _)) = decl.ttl {
        t.cleanup(super::ttl::now_ms(), config.incremental_keys());
    }
    true
}

/// Reads the backend value of the current key, lets `f` change it, and writes what it leaves
/// (`None`: deleted). Nothing in heap mode.
fn backend_value<K, S: Data>(access: &mut EntryAccess<'_, K>, name: &str, f: impl FnOnce(&mut Option<S>)) {
    if let EntryStore::Backend(b) = &mut access.store {
        b.declare(name, EntrySchema::value::<S>);
        b.at_key();
        let mut slot = b.get::<S>(name);
        f(&mut slot);
        match slot {
            Some(v) => b.put(name, &v),
            None => b.delete(name),
        }
    }
}

/// Reads the current key's stored value (either backend).
fn read_value<K: Data + Hash + Eq, S: Data>(access: &mut EntryAccess<'_, K>, decl: Decl<'_, S>) -> Option<S> {
    let mut out = None;
    if heap_value::<K, S>(access, decl, |slot| out = slot.clone()) {
        return out;
    }
    if let EntryStore::Backend(b) = &mut access.store {
        b.declare(decl.name, EntrySchema::value::<S>);
        b.at_key();
        return b.get(decl.name);
    }
    None
}

/// Changes the current key's stored value (either backend).
fn change_value<K: Data + Hash + Eq, S: Data>(
    access: &mut EntryAccess<'_, K>,
    decl: Decl<'_, S>,
    f: impl FnOnce(&mut Option<S>),
) {
    let mut f = Some(f);
    let heap = heap_value::<K, S>(access, decl, |slot| {
        if let Some(f) = f.take() {
            f(slot)
        }
    });
    if !heap && let Some(f) = f {
        backend_value(access, decl.name, f);
    }
}

/// The current key's value of a value-like state (value, reducing, aggregating), with its time to
/// live if it has one: an expired value is removed and not returned (unless the state returns
/// expired values), and a read starts a live value's time again if the state says so.
fn get_value<K: Data + Hash + Eq, T: Data>(
    access: &mut EntryAccess<'_, K>,
    name: &str,
    ttl: Option<StateTtlConfig>,
) -> Option<T> {
    let Some(ttl) = ttl else {
        return read_value(access, Decl::<T>::plain(name));
    };
    let decl = Decl::<Stamped<T>>::stamped(name, ttl);
    let now = super::ttl::now_ms();
    let stored = read_value(access, decl)?;
    if stored.expired(now) {
        change_value(access, decl, |slot| *slot = None);
        return ttl.returns_expired().then_some(stored.value);
    }
    if ttl.refreshes_on_read() {
        let refreshed = Stamped {
            expires: ttl.expiry(now),
            value: stored.value.clone(),
        };
        change_value(access, decl, |slot| *slot = Some(refreshed));
    }
    Some(stored.value)
}

/// Changes the current key's value of a value-like state: `f` sees the live value (`None` when
/// absent or expired), and what it leaves is written (with a new expiry).
fn set_value<K: Data + Hash + Eq, T: Data>(
    access: &mut EntryAccess<'_, K>,
    name: &str,
    ttl: Option<StateTtlConfig>,
    f: impl FnOnce(&mut Option<T>),
) {
    let Some(ttl) = ttl else {
        return change_value(access, Decl::<T>::plain(name), f);
    };
    let now = super::ttl::now_ms();
    change_value(access, Decl::<Stamped<T>>::stamped(name, ttl), |slot| {
        let mut live = slot.take().filter(|s| !s.expired(now)).map(|s| s.value);
        f(&mut live);
        *slot = live.map(|value| Stamped {
            expires: ttl.expiry(now),
            value,
        });
    });
}

/// The current key's value of a [`ValueStateDescriptor`] (Flink's `ValueState`).
pub struct ValueHandle<'c, 'a, K, T> {
    access: &'c mut EntryAccess<'a, K>,
    d: &'c ValueStateDescriptor<T>,
}

impl<K, T> std::fmt::Debug for ValueHandle<'_, '_, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueHandle").field("name", &self.d.name).finish()
    }
}

impl<'c, 'a, K: Data + Hash + Eq, T: Data> ValueHandle<'c, 'a, K, T> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c ValueStateDescriptor<T>) -> Self {
        ValueHandle { access, d }
    }

    pub fn value(&mut self) -> Option<T> {
        get_value(self.access, &self.d.name, self.d.ttl)
    }

    pub fn update(&mut self, value: T) {
        set_value(self.access, &self.d.name, self.d.ttl, |slot| *slot = Some(value));
    }

    pub fn clear(&mut self) {
        set_value::<K, T>(self.access, &self.d.name, self.d.ttl, |slot| *slot = None);
    }
}

/// The current key's value of a [`ReducingStateDescriptor`] (Flink's `ReducingState`).
pub struct ReducingHandle<'c, 'a, K, T> {
    access: &'c mut EntryAccess<'a, K>,
    d: &'c ReducingStateDescriptor<T>,
}

impl<K, T> std::fmt::Debug for ReducingHandle<'_, '_, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReducingHandle")
            .field("name", &self.d.name)
            .finish()
    }
}

impl<'c, 'a, K: Data + Hash + Eq, T: Data> ReducingHandle<'c, 'a, K, T> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c ReducingStateDescriptor<T>) -> Self {
        ReducingHandle { access, d }
    }

    /// The reduction of every element added since the last clear (and, with a time to live,
    /// since the value last expired).
    pub fn get(&mut self) -> Option<T> {
        get_value(self.access, &self.d.name, self.d.ttl)
    }

    pub fn add(&mut self, value: T) {
        let reduce = &self.d.reduce;
        set_value(self.access, &self.d.name, self.d.ttl, |slot: &mut Option<T>| {
            *slot = Some(match slot.take() {
                Some(acc) => reduce(acc, value),
                None => value,
            });
        });
    }

    pub fn clear(&mut self) {
        set_value::<K, T>(self.access, &self.d.name, self.d.ttl, |slot| *slot = None);
    }
}

/// The current key's accumulator of an [`AggregatingStateDescriptor`] (Flink's
/// `AggregatingState`).
pub struct AggregatingHandle<'c, 'a, K, IN, F> {
    access: &'c mut EntryAccess<'a, K>,
    d: &'c AggregatingStateDescriptor<IN, F>,
}

impl<K, IN, F> std::fmt::Debug for AggregatingHandle<'_, '_, K, IN, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatingHandle")
            .field("name", &self.d.name)
            .finish()
    }
}

impl<'c, 'a, K: Data + Hash + Eq, IN, F: AggregateFunction<IN>> AggregatingHandle<'c, 'a, K, IN, F> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c AggregatingStateDescriptor<IN, F>) -> Self {
        AggregatingHandle { access, d }
    }

    /// The result over every element added since the last clear (and, with a time to live,
    /// since the accumulator last expired).
    pub fn get(&mut self) -> Option<F::Out> {
        get_value::<K, F::Acc>(self.access, &self.d.name, self.d.ttl)
            .map(|acc| self.d.function.get_result(&acc))
    }

    pub fn add(&mut self, value: IN) {
        let function = &self.d.function;
        set_value(
            self.access,
            &self.d.name,
            self.d.ttl,
            |slot: &mut Option<F::Acc>| {
                let acc = slot.get_or_insert_with(|| function.create_accumulator());
                function.add(value, acc);
            },
        );
    }

    pub fn clear(&mut self) {
        set_value::<K, F::Acc>(self.access, &self.d.name, self.d.ttl, |slot| *slot = None);
    }
}

#[cfg(test)]
#[path = "entries_tests.rs"]
mod tests;
