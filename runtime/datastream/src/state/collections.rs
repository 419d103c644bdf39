//! The map and list handles of per-entry state (see [`super::entries`]). Each is a thin facade
//! over a raw view that stores its values as `S`: the user's type, or [`Stamped`] with a time to
//! live, where the facade decides what expired.

use std::hash::Hash;
use std::marker::PhantomData;

use super::entries::{BackendEntries, Decl, EntryAccess, EntryStore, decoded};
use super::evolution::EntrySchema;
use super::heap::{ListTable, MapTable};
use super::ttl::Stamped;
use crate::data::Data;
use crate::state::descriptors::{ListStateDescriptor, MapStateDescriptor};

/// A map of the current key whose values are stored as `S`.
struct RawMap<'h, 'a, K, UK, S> {
    access: &'h mut EntryAccess<'a, K>,
    decl: Decl<'h, S>,
    _t: PhantomData<fn() -> UK>,
}

impl<'h, 'a, K: Data + Hash + Eq, UK: Data, S: Data> RawMap<'h, 'a, K, UK, S> {
    /// Heap mode: `f` on the state's table with the key and `user_key`'s encoding (`Some(None)`:
    /// the table could not be had, a failure is recorded), then a step of the table's cleanup if
    /// the state has a time to live. `None` in backend mode.
    fn heap_entry<R>(
        &mut self,
        user_key: &UK,
        f: impl FnOnce(&mut MapTable<K, UK, S>, &K, &[u8]) -> R,
    ) -> Option<Option<R>> {
        let key = self.access.key;
        let EntryStore::Heap(heap) = &mut self.access.store else {
            return None;
        };
        let decl = self.decl;
        let mut scratch = std::mem::take(&mut heap.scratch);
        scratch.clear();
        user_key.encode(&mut scratch);
        let result = heap.open(decl.name, || MapTable::new(decl.expiry())).map(|t| {
            let r = f(t, key, &scratch);
            if let Some((config, _)) = decl.ttl {
                t.cleanup(super::ttl::now_ms(), config.incremental_keys());
            }
            r
        });
        heap.scratch = scratch;
        Some(result)
    }

    /// Backend mode: the backend at `user_key`'s entry.
    fn backend_entry(&mut self, user_key: &UK) -> Option<&mut BackendEntries<'a>> {
        match &mut self.access.store {
            EntryStore::Backend(b) => {
                b.declare(self.decl.name, EntrySchema::map::<UK, S>);
                b.at(Some(user_key));
                Some(b)
            }
            EntryStore::Heap(_) => None,
        }
    }

    fn get(&mut self, user_key: &UK) -> Option<S> {
        let found = self.heap_entry(user_key, |t, key, uk| {
            t.map.get(key).and_then(|m| m.get(uk)).cloned()
        });
        match found {
            Some(found) => found.flatten(),
            None => {
                let name = self.decl.name;
                self.backend_entry(user_key).and_then(|b| b.get(name))
            }
        }
    }

    fn contains(&mut self, user_key: &UK) -> bool {
        let found = self.heap_entry(user_key, |t, key, uk| {
            t.map.get(key).is_some_and(|m| m.contains_key(uk))
        });
        match found {
            Some(found) => found.unwrap_or(false),
            None => {
                let name = self.decl.name;
                self.backend_entry(user_key).is_some_and(|b| b.contains(name))
            }
        }
    }

    fn put(&mut self, user_key: &UK, value: S) {
        let mut value = Some(value);
        let stored = self.heap_entry(user_key, |t, key, uk| {
            let Some(value) = value.take() else { return };
            match t.map.get_mut(key) {
                Some(m) => {
                    m.insert(uk.to_vec(), value);
                }
                None => {
                    t.map
                        .insert(key.clone(), [(uk.to_vec(), value)].into_iter().collect());
                }
            }
        });
        if stored.is_none() {
            let name = self.decl.name;
            if let (Some(b), Some(value)) = (self.backend_entry(user_key), value) {
                b.put(name, &value);
            }
        }
    }

    fn remove(&mut self, user_key: &UK) {
        let removed = self.heap_entry(user_key, |t, key, uk| {
            if let Some(m) = t.map.get_mut(key) {
                m.swap_remove(uk);
                if m.is_empty() {
                    t.map.swap_remove(key);
                }
            }
        });
        if removed.is_none() {
            let name = self.decl.name;
            if let Some(b) = self.backend_entry(user_key) {
                b.delete(name);
            }
        }
    }

    /// Calls `f` with every entry until it returns `false` (the order is unspecified).
    fn for_each(&mut self, mut f: impl FnMut(UK, S) -> bool) {
        let key = self.access.key;
        let decl = self.decl;
        let name = decl.name;
        match &mut self.access.store {
            EntryStore::Heap(heap) => {
                let Some(t) = heap.open(name, || MapTable::<K, UK, S>::new(decl.expiry())) else {
                    return;
                };
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
            EntryStore::Backend(b) => {
                b.declare(name, EntrySchema::map::<UK, S>);
                let mut failure = None;
                b.scan(name, &mut |user_key: &[u8], value: &[u8]| {
                    let (Some(uk), Some(v)) = (
                        decoded::<UK>(name, user_key, &mut failure),
                        decoded::<S>(name, value, &mut failure),
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

    fn clear(&mut self) {
        let key = self.access.key;
        let decl = self.decl;
        match &mut self.access.store {
            EntryStore::Heap(heap) => {
                if let Some(t) = heap.open(decl.name, || MapTable::<K, UK, S>::new(decl.expiry())) {
                    t.map.swap_remove(key);
                }
            }
            EntryStore::Backend(b) => {
                b.declare(decl.name, EntrySchema::map::<UK, S>);
                b.delete_all(decl.name)
            }
        }
    }
}

/// The current key's map of a [`MapStateDescriptor`] (Flink's `MapState`).
pub struct MapHandle<'c, 'a, K, UK, UV> {
    access: &'c mut EntryAccess<'a, K>,
    d: &'c MapStateDescriptor<UK, UV>,
}

impl<K, UK, UV> std::fmt::Debug for MapHandle<'_, '_, K, UK, UV> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapHandle").field("name", &self.d.name).finish()
    }
}

impl<'c, 'a, K: Data + Hash + Eq, UK: Data, UV: Data> MapHandle<'c, 'a, K, UK, UV> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c MapStateDescriptor<UK, UV>) -> Self {
        MapHandle { access, d }
    }

    fn plain(&mut self) -> RawMap<'_, 'a, K, UK, UV> {
        RawMap {
            access: self.access,
            decl: Decl::plain(&self.d.name),
            _t: PhantomData,
        }
    }

    fn stamped(&mut self) -> RawMap<'_, 'a, K, UK, Stamped<UV>> {
        let ttl = self.d.ttl.expect("a state with a time to live");
        RawMap {
            access: self.access,
            decl: Decl::stamped(&self.d.name, ttl),
            _t: PhantomData,
        }
    }

    /// The value of `user_key`, if any (and, with a time to live, live or returned expired).
    pub fn get(&mut self, user_key: &UK) -> Option<UV> {
        let Some(ttl) = self.d.ttl else {
            return self.plain().get(user_key);
        };
        let now = super::ttl::now_ms();
        let mut raw = self.stamped();
        let stored = raw.get(user_key)?;
        if stored.expired(now) {
            raw.remove(user_key);
            return ttl.returns_expired().then_some(stored.value);
        }
        if ttl.refreshes_on_read() {
            let refreshed = Stamped {
                expires: ttl.expiry(now),
                value: stored.value.clone(),
            };
            raw.put(user_key, refreshed);
        }
        Some(stored.value)
    }

    pub fn contains(&mut self, user_key: &UK) -> bool {
        match self.d.ttl {
            None => self.plain().contains(user_key),
            Some(_) => self.get(user_key).is_some(),
        }
    }

    /// Sets the value of `user_key`.
    pub fn put(&mut self, user_key: UK, value: UV) {
        match self.d.ttl {
            None => self.plain().put(&user_key, value),
            Some(ttl) => {
                let expires = ttl.expiry(super::ttl::now_ms());
                self.stamped().put(&user_key, Stamped { expires, value })
            }
        }
    }

    pub fn remove(&mut self, user_key: &UK) {
        match self.d.ttl {
            None => self.plain().remove(user_key),
            Some(_) => self.stamped().remove(user_key),
        }
    }

    /// Calls `f` with every entry until it returns `false` (the order is unspecified). With a
    /// time to live, expired entries are removed (and passed to `f` only if the state returns
    /// expired values), and a read starts an entry's time again if the state says so.
    pub fn for_each(&mut self, mut f: impl FnMut(UK, UV) -> bool) {
        let Some(ttl) = self.d.ttl else {
            return self.plain().for_each(f);
        };
        let now = super::ttl::now_ms();
        let (mut expired, mut refreshed) = (Vec::new(), Vec::new());
        let mut raw = self.stamped();
        raw.for_each(|uk, stored| {
            if stored.expired(now) {
                expired.push(uk.clone());
                return !ttl.returns_expired() || f(uk, stored.value);
            }
            if ttl.refreshes_on_read() {
                refreshed.push((uk.clone(), stored.value.clone()));
            }
            f(uk, stored.value)
        });
        for uk in &expired {
            raw.remove(uk);
        }
        for (uk, value) in refreshed {
            let expires = ttl.expiry(now);
            raw.put(&uk, Stamped { expires, value });
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

    /// No entry a read would return: one seek on RocksDB without a time to live; with one, a scan
    /// to the first live entry (any entry, when the state returns expired values not cleaned up
    /// yet). It reads no value, so under `OnReadAndWrite` it starts no entry's time again, as
    /// reading an entry's value does; nor does it remove expired entries (a read of them does).
    pub fn is_empty(&mut self) -> bool {
        let mut empty = true;
        match self.d.ttl {
            None => self.plain().for_each(|_, _| {
                empty = false;
                false
            }),
            Some(ttl) => {
                let now = super::ttl::now_ms();
                let counts_expired = ttl.returns_expired();
                self.stamped().for_each(|_, stored| {
                    empty = !counts_expired && stored.expired(now);
                    empty
                })
            }
        }
        empty
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        match self.d.ttl {
            None => self.plain().clear(),
            Some(_) => self.stamped().clear(),
        }
    }
}

/// A list of the current key whose elements are stored as `S`.
struct RawList<'h, 'a, K, S> {
    access: &'h mut EntryAccess<'a, K>,
    decl: Decl<'h, S>,
}

impl<'a, K: Data + Hash + Eq, S: Data> RawList<'_, 'a, K, S> {
    /// Runs `f` on the heap list of the current key (created empty; removed when left empty),
    /// then a step of the table's cleanup with a time to live. `false` in backend mode.
    fn heap_list(&mut self, f: impl FnOnce(&mut Vec<S>)) -> bool {
        let key = self.access.key;
        let decl = self.decl;
        let EntryStore::Heap(heap) = &mut self.access.store else {
            return false;
        };
        let Some(t) = heap.open(decl.name, || ListTable::new(decl.expiry())) else {
            return true;
        };
        match t.map.get_mut(key) {
            Some(list) => {
                f(list);
                if list.is_empty() {
                    t.map.swap_remove(key);
                }
            }
            None => {
                let mut list = Vec::new();
                f(&mut list);
                if !list.is_empty() {
                    t.map.insert(key.clone(), list);
                }
            }
        }
        if let Some((config, _)) = decl.ttl {
            t.cleanup(super::ttl::now_ms(), config.incremental_keys());
        }
        true
    }

    fn backend(&mut self) -> Option<&mut BackendEntries<'a>> {
        match &mut self.access.store {
            EntryStore::Backend(b) => {
                b.declare(self.decl.name, EntrySchema::list::<S>);
                b.at_key();
                Some(b)
            }
            EntryStore::Heap(_) => None,
        }
    }

    fn get(&mut self) -> Vec<S> {
        let mut out = Vec::new();
        if self.heap_list(|l| out = l.clone()) {
            return out;
        }
        let name = self.decl.name;
        self.backend().map(|b| b.list(name)).unwrap_or_default()
    }

    /// Appends `value` (on RocksDB a merge, without reading the list).
    fn add(&mut self, value: S) {
        let mut value = Some(value);
        if self.heap_list(|l| l.extend(value.take())) {
            return;
        }
        let name = self.decl.name;
        if let (Some(b), Some(v)) = (self.backend(), value) {
            b.value.clear();
            v.encode(b.value);
            if let Err(e) = b.backend.append(name, b.key_group, b.entry, b.value) {
                b.fail(e);
            }
        }
    }

    /// Replaces the list.
    fn update(&mut self, values: Vec<S>) {
        let mut values = Some(values);
        if self.heap_list(|l| *l = values.take().unwrap_or_default()) {
            return;
        }
        let name = self.decl.name;
        if let (Some(b), Some(values)) = (self.backend(), values) {
            let mut list = Vec::new();
            for v in &values {
                b.value.clear();
                v.encode(b.value);
                floe_state::list::push(&mut list, b.value);
            }
            let result = if list.is_empty() {
                b.backend.delete(name, b.key_group, b.entry)
            } else {
                b.backend.put(name, b.key_group, b.entry, &list)
            };
            if let Err(e) = result {
                b.fail(e);
            }
        }
    }
}

/// The current key's list of a [`ListStateDescriptor`] (Flink's `ListState`).
pub struct ListHandle<'c, 'a, K, T> {
    access: &'c mut EntryAccess<'a, K>,
    d: &'c ListStateDescriptor<T>,
}

impl<K, T> std::fmt::Debug for ListHandle<'_, '_, K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListHandle").field("name", &self.d.name).finish()
    }
}

impl<'c, 'a, K: Data + Hash + Eq, T: Data> ListHandle<'c, 'a, K, T> {
    pub(crate) fn new(access: &'c mut EntryAccess<'a, K>, d: &'c ListStateDescriptor<T>) -> Self {
        ListHandle { access, d }
    }

    fn plain(&mut self) -> RawList<'_, 'a, K, T> {
        RawList {
            access: self.access,
            decl: Decl::plain(&self.d.name),
        }
    }

    fn stamped(&mut self) -> RawList<'_, 'a, K, Stamped<T>> {
        let ttl = self.d.ttl.expect("a state with a time to live");
        RawList {
            access: self.access,
            decl: Decl::stamped(&self.d.name, ttl),
        }
    }

    /// Every element, in the order added. With a time to live, expired elements are removed
    /// (and returned this once only if the state returns expired values), and a read starts the
    /// live elements' time again if the state says so.
    pub fn get(&mut self) -> Vec<T> {
        let Some(ttl) = self.d.ttl else {
            return self.plain().get();
        };
        let now = super::ttl::now_ms();
        let mut raw = self.stamped();
        let stored = raw.get();
        let expired = stored.iter().filter(|s| s.expired(now)).count();
        let all: Vec<T> = if expired > 0 && ttl.returns_expired() {
            stored.iter().map(|s| s.value.clone()).collect()
        } else {
            Vec::new()
        };
        let mut live: Vec<Stamped<T>> = stored.into_iter().filter(|s| !s.expired(now)).collect();
        if ttl.refreshes_on_read() {
            for s in &mut live {
                s.expires = ttl.expiry(now);
            }
        }
        if expired > 0 || (ttl.refreshes_on_read() && !live.is_empty()) {
            raw.update(live.clone());
        }
        if expired > 0 && ttl.returns_expired() {
            return all;
        }
        live.into_iter().map(|s| s.value).collect()
    }

    /// Appends `value` (on RocksDB without reading the list).
    pub fn add(&mut self, value: T) {
        match self.d.ttl {
            None => self.plain().add(value),
            Some(ttl) => {
                let expires = ttl.expiry(super::ttl::now_ms());
                self.stamped().add(Stamped { expires, value })
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
        match self.d.ttl {
            None => self.plain().update(values),
            Some(ttl) => {
                let expires = ttl.expiry(super::ttl::now_ms());
                let stamped = values
                    .into_iter()
                    .map(|value| Stamped { expires, value })
                    .collect();
                self.stamped().update(stamped)
            }
        }
    }

    pub fn clear(&mut self) {
        self.update(Vec::new());
    }
}
