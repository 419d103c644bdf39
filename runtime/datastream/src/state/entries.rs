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
//! is unspecified, as in Flink.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use floe_state::KeyedStateBackend;

use super::heap::{HeapEntries, ListTable, MapTable, ValueTable};
use crate::data::Data;
use crate::operators::window::AggregateFunction;

/// The longest state name a descriptor takes (the backend's key layout keeps a name in 255
/// bytes, with its kind).
pub const MAX_STATE_NAME_BYTES: usize = 200;

fn state_name(kind: &str, name: &str) -> String {
    assert!(
        !name.is_empty() && name.len() <= MAX_STATE_NAME_BYTES,
        "state descriptor name {name:?}: expected 1 to {MAX_STATE_NAME_BYTES} bytes"
    );
    format!("{kind}:{name}")
}

/// Declares a map per key (Flink's `MapStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Debug, Clone)]
pub struct MapStateDescriptor<UK, UV> {
    name: String,
    _t: PhantomData<fn() -> (UK, UV)>,
}

impl<UK: Data, UV: Data> MapStateDescriptor<UK, UV> {
    pub fn new(name: &str) -> Self {
        MapStateDescriptor {
            name: state_name("map", name),
            _t: PhantomData,
        }
    }
}

/// Declares a list per key (Flink's `ListStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Debug, Clone)]
pub struct ListStateDescriptor<T> {
    name: String,
    _t: PhantomData<fn() -> T>,
}

impl<T: Data> ListStateDescriptor<T> {
    pub fn new(name: &str) -> Self {
        ListStateDescriptor {
            name: state_name("list", name),
            _t: PhantomData,
        }
    }
}

/// Declares one value per key (Flink's `ValueStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Debug, Clone)]
pub struct ValueStateDescriptor<T> {
    name: String,
    _t: PhantomData<fn() -> T>,
}

impl<T: Data> ValueStateDescriptor<T> {
    pub fn new(name: &str) -> Self {
        ValueStateDescriptor {
            name: state_name("value", name),
            _t: PhantomData,
        }
    }
}

type ReduceFn<T> = Arc<dyn Fn(T, T) -> T + Send + Sync>;

/// Declares a value per key that every added element is reduced into (Flink's
/// `ReducingStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Clone)]
pub struct ReducingStateDescriptor<T> {
    name: String,
    reduce: ReduceFn<T>,
}

impl<T> std::fmt::Debug for ReducingStateDescriptor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReducingStateDescriptor")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<T: Data> ReducingStateDescriptor<T> {
    pub fn new(name: &str, reduce: impl Fn(T, T) -> T + Send + Sync + 'static) -> Self {
        ReducingStateDescriptor {
            name: state_name("reducing", name),
            reduce: Arc::new(reduce),
        }
    }
}

/// Declares an accumulator per key that every added element is aggregated into with an
/// [`AggregateFunction`] (Flink's `AggregatingStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
pub struct AggregatingStateDescriptor<IN, F> {
    name: String,
    function: Arc<F>,
    _t: PhantomData<fn(IN)>,
}

impl<IN, F> Clone for AggregatingStateDescriptor<IN, F> {
    fn clone(&self) -> Self {
        AggregatingStateDescriptor {
            name: self.name.clone(),
            function: self.function.clone(),
            _t: PhantomData,
        }
    }
}

impl<IN, F> std::fmt::Debug for AggregatingStateDescriptor<IN, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatingStateDescriptor")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<IN, F: AggregateFunction<IN>> AggregatingStateDescriptor<IN, F> {
    pub fn new(name: &str, function: F) -> Self {
        AggregatingStateDescriptor {
            name: state_name("aggregating", name),
            function: Arc::new(function),
            _t: PhantomData,
        }
    }
}

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
}

impl BackendEntries<'_> {
    fn fail(&mut self, e: impl std::fmt::Display) {
        self.failure.get_or_insert_with(|| e.to_string());
    }

    /// The entry key: the current key, then `user_key`'s encoding if any.
    fn at<U: Data>(&mut self, user_key: Option<&U>) {
        self.entry.clear();
        self.entry.extend_from_slice(self.key);
        if let Some(u) = user_key {
            u.encode(self.entry);
        }
    }

    /// The entry key of a state with one entry per key: the current key.
    fn at_key(&mut self) {
        self.at::<()>(None);
    }

    fn get<V: Data>(&mut self, name: &str) -> Option<V> {
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

    fn contains(&mut self, name: &str) -> bool {
        match self.backend.get(name, self.key_group, self.entry) {
            Ok(v) => v.is_some(),
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    fn put<V: Data>(&mut self, name: &str, v: &V) {
        self.value.clear();
        v.encode(self.value);
        if let Err(e) = self.backend.put(name, self.key_group, self.entry, self.value) {
            self.fail(e);
        }
    }

    fn delete(&mut self, name: &str) {
        if let Err(e) = self.backend.delete(name, self.key_group, self.entry) {
            self.fail(e);
        }
    }

    /// Every entry of the current key in `name`: (rest of the entry key, value) to `f` until it
    /// returns `false`.
    fn scan(&mut self, name: &str, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        if let Err(e) = self.backend.scan_prefix(name, self.key_group, self.key, f) {
            self.fail(e);
        }
    }

    fn delete_all(&mut self, name: &str) {
        if let Err(e) = self.backend.delete_prefix(name, self.key_group, self.key) {
            self.fail(e);
        }
    }

    fn list<T: Data>(&mut self, name: &str) -> Vec<T> {
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
    fn fail_heap(heap: &mut HeapEntries<K>, e: impl std::fmt::Display) {
        heap.failure.get_or_insert_with(|| e.to_string());
    }
}

/// Decodes `bytes` as a `T`, or records the failure.
fn decoded<T: Data>(name: &str, mut bytes: &[u8], failure: &mut Option<String>) -> Option<T> {
    match T::decode(&mut bytes) {
        Ok(t) => Some(t),
        Err(e) => {
            failure.get_or_insert_with(|| format!("keyed state {name:?}: {e}"));
            None
        }
    }
}

/// The current key's map of a [`MapStateDescriptor`] (Flink's `MapState`).
pub struct MapHandle<'c, 'a, K, UK, UV> {
    access: &'c mut EntryAccess<'a, K>,
    name: &'c str,
    _t: PhantomData<fn() -> (UK, UV)>,
}

impl<K, UK, UV> std::fmt::Debug for MapHandle<'_, '_, K, UK, UV> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapHandle").field("name", &self.name).finish()
    }
}

impl<'c, 'a, K: Data + Hash + Eq, UK: Data, UV: Data> MapHandle<'c, 'a, K, UK, UV> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c MapStateDescriptor<UK, UV>) -> Self {
        MapHandle {
            access,
            name: &d.name,
            _t: PhantomData,
        }
    }

    /// Heap mode: `f` on the state's table with the key and `user_key`'s encoding (`Some(None)`:
    /// the table could not be had, a failure is recorded). `None` in backend mode.
    fn heap_entry<R>(
        &mut self,
        user_key: &UK,
        f: impl FnOnce(&mut MapTable<K, UK, UV>, &K, &[u8]) -> R,
    ) -> Option<Option<R>> {
        let key = self.access.key;
        let EntryStore::Heap(heap) = &mut self.access.store else {
            return None;
        };
        let HeapEntries {
            tables,
            scratch,
            failure,
        } = &mut **heap;
        scratch.clear();
        user_key.encode(scratch);
        Some(match tables.table::<MapTable<K, UK, UV>>(self.name) {
            Ok(t) => Some(f(t, key, scratch)),
            Err(e) => {
                failure.get_or_insert_with(|| e.to_string());
                None
            }
        })
    }

    /// Backend mode: the backend at `user_key`'s entry.
    fn backend_entry(&mut self, user_key: &UK) -> Option<&mut BackendEntries<'a>> {
        match &mut self.access.store {
            EntryStore::Backend(b) => {
                b.at(Some(user_key));
                Some(b)
            }
            EntryStore::Heap(_) => None,
        }
    }

    /// The value of `user_key`, if any.
    pub fn get(&mut self, user_key: &UK) -> Option<UV> {
        let found = self.heap_entry(user_key, |t, key, uk| {
            t.map.get(key).and_then(|m| m.get(uk)).cloned()
        });
        match found {
            Some(found) => found.flatten(),
            None => {
                let name = self.name;
                self.backend_entry(user_key).and_then(|b| b.get(name))
            }
        }
    }

    pub fn contains(&mut self, user_key: &UK) -> bool {
        let found = self.heap_entry(user_key, |t, key, uk| {
            t.map.get(key).is_some_and(|m| m.contains_key(uk))
        });
        match found {
            Some(found) => found.unwrap_or(false),
            None => {
                let name = self.name;
                self.backend_entry(user_key).is_some_and(|b| b.contains(name))
            }
        }
    }

    /// Sets the value of `user_key`.
    pub fn put(&mut self, user_key: UK, value: UV) {
        let mut value = Some(value);
        let stored = self.heap_entry(&user_key, |t, key, uk| {
            let Some(value) = value.take() else { return };
            match t.map.get_mut(key) {
                Some(m) => {
                    m.insert(uk.to_vec(), value);
                }
                None => {
                    t.map.insert(key.clone(), [(uk.to_vec(), value)].into());
                }
            }
        });
        if stored.is_none() {
            let name = self.name;
            if let (Some(b), Some(value)) = (self.backend_entry(&user_key), value) {
                b.put(name, &value);
            }
        }
    }

    pub fn remove(&mut self, user_key: &UK) {
        let removed = self.heap_entry(user_key, |t, key, uk| {
            if let Some(m) = t.map.get_mut(key) {
                m.remove(uk);
                if m.is_empty() {
                    t.map.remove(key);
                }
            }
        });
        if removed.is_none() {
            let name = self.name;
            if let Some(b) = self.backend_entry(user_key) {
                b.delete(name);
            }
        }
    }

    /// Calls `f` with every entry until it returns `false` (the order is unspecified).
    pub fn for_each(&mut self, mut f: impl FnMut(UK, UV) -> bool) {
        let key = self.access.key;
        let name = self.name;
        match &mut self.access.store {
            EntryStore::Heap(heap) => match heap.tables.table::<MapTable<K, UK, UV>>(name) {
                Ok(t) => {
                    let Some(m) = t.map.get(key) else { return };
                    let mut failure = None;
                    for (user_key, v) in m {
                        let Some(uk) = decoded::<UK>(name, user_key, &mut failure) else {
                            break;
                        };
                        if !f(uk, v.clone()) {
                            break;
                        }
                    }
                    if let Some(e) = failure {
                        EntryAccess::<K>::fail_heap(heap, e);
                    }
                }
                Err(e) => EntryAccess::<K>::fail_heap(heap, e),
            },
            EntryStore::Backend(b) => {
                let mut failure = None;
                b.scan(name, &mut |user_key: &[u8], value: &[u8]| {
                    let (Some(uk), Some(v)) = (
                        decoded::<UK>(name, user_key, &mut failure),
                        decoded::<UV>(name, value, &mut failure),
                    ) else {
                        return false;
                    };
                    f(uk, v)
                });
                if let Some(e) = failure {
                    b.fail(e);
                }
            }
        }
    }

    /// Every entry (the order is unspecified).
    pub fn entries(&mut self) -> Vec<(UK, UV)> {
        let mut out = Vec::new();
        self.for_each(|k, v| {
            out.push((k, v));
            true
        });
        out
    }

    pub fn keys(&mut self) -> Vec<UK> {
        self.entries().into_iter().map(|(k, _)| k).collect()
    }

    pub fn values(&mut self) -> Vec<UV> {
        self.entries().into_iter().map(|(_, v)| v).collect()
    }

    /// No entry (one seek on RocksDB).
    pub fn is_empty(&mut self) -> bool {
        let key = self.access.key;
        match &mut self.access.store {
            EntryStore::Heap(heap) => match heap.tables.table::<MapTable<K, UK, UV>>(self.name) {
                Ok(t) => t.map.get(key).is_none_or(|m| m.is_empty()),
                Err(e) => {
                    EntryAccess::<K>::fail_heap(heap, e);
                    true
                }
            },
            EntryStore::Backend(b) => {
                let mut empty = true;
                b.scan(self.name, &mut |_: &[u8], _: &[u8]| {
                    empty = false;
                    false
                });
                empty
            }
        }
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        let key = self.access.key;
        match &mut self.access.store {
            EntryStore::Heap(heap) => match heap.tables.table::<MapTable<K, UK, UV>>(self.name) {
                Ok(t) => {
                    t.map.remove(key);
                }
                Err(e) => EntryAccess::<K>::fail_heap(heap, e),
            },
            EntryStore::Backend(b) => b.delete_all(self.name),
        }
    }
}

/// The current key's list of a [`ListStateDescriptor`] (Flink's `ListState`).
pub struct ListHandle<'c, 'a, K, T> {
    access: &'c mut EntryAccess<'a, K>,
    name: &'c str,
    _t: PhantomData<fn() -> T>,
}

impl<K, T> std::fmt::Debug for ListHandle<'_, '_, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListHandle").field("name", &self.name).finish()
    }
}

impl<'c, 'a, K: Data + Hash + Eq, T: Data> ListHandle<'c, 'a, K, T> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c ListStateDescriptor<T>) -> Self {
        ListHandle {
            access,
            name: &d.name,
            _t: PhantomData,
        }
    }

    /// Runs `f` on the heap list of the current key (created empty).
    fn heap_list(&mut self, f: impl FnOnce(&mut Vec<T>)) -> bool {
        let key = self.access.key;
        let EntryStore::Heap(heap) = &mut self.access.store else {
            return false;
        };
        match heap.tables.table::<ListTable<K, T>>(self.name) {
            Ok(t) => match t.map.get_mut(key) {
                Some(list) => f(list),
                None => {
                    let mut list = Vec::new();
                    f(&mut list);
                    if !list.is_empty() {
                        t.map.insert(key.clone(), list);
                    }
                }
            },
            Err(e) => EntryAccess::<K>::fail_heap(heap, e),
        }
        true
    }

    /// Every element, in the order added.
    pub fn get(&mut self) -> Vec<T> {
        let mut out = Vec::new();
        if self.heap_list(|l| out = l.clone()) {
            return out;
        }
        match &mut self.access.store {
            EntryStore::Backend(b) => b.list(self.name),
            EntryStore::Heap(_) => out,
        }
    }

    /// Appends `value` (on RocksDB without reading the list).
    pub fn add(&mut self, value: T) {
        let mut value = Some(value);
        if self.heap_list(|l| l.extend(value.take())) {
            return;
        }
        if let (EntryStore::Backend(b), Some(v)) = (&mut self.access.store, value) {
            b.at_key();
            b.value.clear();
            v.encode(b.value);
            if let Err(e) = b.backend.append(self.name, b.key_group, b.entry, b.value) {
                b.fail(e);
            }
        }
    }

    pub fn add_all(&mut self, values: Vec<T>) {
        for v in values {
            self.add(v);
        }
    }

    /// Replaces the list.
    pub fn update(&mut self, values: Vec<T>) {
        let mut values = Some(values);
        if self.heap_list(|l| *l = values.take().unwrap_or_default()) {
            return;
        }
        if let (EntryStore::Backend(b), Some(values)) = (&mut self.access.store, values) {
            b.at_key();
            let mut list = Vec::new();
            for v in &values {
                b.value.clear();
                v.encode(b.value);
                floe_state::list::push(&mut list, b.value);
            }
            let result = if list.is_empty() {
                b.backend.delete(self.name, b.key_group, b.entry)
            } else {
                b.backend.put(self.name, b.key_group, b.entry, &list)
            };
            if let Err(e) = result {
                b.fail(e);
            }
        }
    }

    pub fn clear(&mut self) {
        self.update(Vec::new());
    }
}

/// The current key's value of a [`ValueStateDescriptor`] (Flink's `ValueState`).
pub struct ValueHandle<'c, 'a, K, T> {
    access: &'c mut EntryAccess<'a, K>,
    name: &'c str,
    _t: PhantomData<fn() -> T>,
}

impl<K, T> std::fmt::Debug for ValueHandle<'_, '_, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueHandle").field("name", &self.name).finish()
    }
}

/// Runs `f` on the heap value slot of the current key in table `name` (`None`: absent); a slot
/// left `None` is removed. `false` in backend mode.
fn heap_value<K: Data + Hash + Eq, T: Data>(
    access: &mut EntryAccess<'_, K>,
    name: &str,
    f: impl FnOnce(&mut Option<T>),
) -> bool {
    let key = access.key;
    let EntryStore::Heap(heap) = &mut access.store else {
        return false;
    };
    match heap.tables.table::<ValueTable<K, T>>(name) {
        Ok(t) => match t.map.get_mut(key) {
            Some(slot) => {
                f(slot);
                if slot.is_none() {
                    t.map.remove(key);
                }
            }
            None => {
                let mut slot = None;
                f(&mut slot);
                if slot.is_some() {
                    t.map.insert(key.clone(), slot);
                }
            }
        },
        Err(e) => EntryAccess::<K>::fail_heap(heap, e),
    }
    true
}

/// Reads the backend value of the current key in `name`, lets `f` change it, and writes what it
/// leaves (`None`: deleted). Nothing in heap mode.
fn backend_value<K, T: Data>(access: &mut EntryAccess<'_, K>, name: &str, f: impl FnOnce(&mut Option<T>)) {
    if let EntryStore::Backend(b) = &mut access.store {
        b.at_key();
        let mut slot = b.get::<T>(name);
        f(&mut slot);
        match slot {
            Some(v) => b.put(name, &v),
            None => b.delete(name),
        }
    }
}

/// Reads the current key's value in `name` (either backend).
fn read_value<K: Data + Hash + Eq, T: Data>(access: &mut EntryAccess<'_, K>, name: &str) -> Option<T> {
    let mut out = None;
    if heap_value::<K, T>(access, name, |slot| out = slot.clone()) {
        return out;
    }
    if let EntryStore::Backend(b) = &mut access.store {
        b.at_key();
        return b.get(name);
    }
    None
}

/// Changes the current key's value in `name` (either backend).
fn change_value<K: Data + Hash + Eq, T: Data>(
    access: &mut EntryAccess<'_, K>,
    name: &str,
    f: impl FnOnce(&mut Option<T>),
) {
    let mut f = Some(f);
    let heap = heap_value::<K, T>(access, name, |slot| {
        if let Some(f) = f.take() {
            f(slot)
        }
    });
    if !heap && let Some(f) = f {
        backend_value(access, name, f);
    }
}

impl<'c, 'a, K: Data + Hash + Eq, T: Data> ValueHandle<'c, 'a, K, T> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c ValueStateDescriptor<T>) -> Self {
        ValueHandle {
            access,
            name: &d.name,
            _t: PhantomData,
        }
    }

    pub fn value(&mut self) -> Option<T> {
        read_value(self.access, self.name)
    }

    pub fn update(&mut self, value: T) {
        change_value(self.access, self.name, |slot| *slot = Some(value));
    }

    pub fn clear(&mut self) {
        change_value::<K, T>(self.access, self.name, |slot| *slot = None);
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

    /// The reduction of every element added since the last clear.
    pub fn get(&mut self) -> Option<T> {
        read_value(self.access, &self.d.name)
    }

    pub fn add(&mut self, value: T) {
        let reduce = &self.d.reduce;
        change_value(self.access, &self.d.name, |slot: &mut Option<T>| {
            *slot = Some(match slot.take() {
                Some(acc) => reduce(acc, value),
                None => value,
            });
        });
    }

    pub fn clear(&mut self) {
        change_value::<K, T>(self.access, &self.d.name, |slot| *slot = None);
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

    /// The result over every element added since the last clear.
    pub fn get(&mut self) -> Option<F::Out> {
        read_value::<K, F::Acc>(self.access, &self.d.name).map(|acc| self.d.function.get_result(&acc))
    }

    pub fn add(&mut self, value: IN) {
        let function = &self.d.function;
        change_value(self.access, &self.d.name, |slot: &mut Option<F::Acc>| {
            let acc = slot.get_or_insert_with(|| function.create_accumulator());
            function.add(value, acc);
        });
    }

    pub fn clear(&mut self) {
        change_value::<K, F::Acc>(self.access, &self.d.name, |slot| *slot = None);
    }
}

#[cfg(test)]
#[path = "entries_tests.rs"]
mod tests;
