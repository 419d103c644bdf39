//! Typed per-key state for keyed `process` functions. The facades here (`ValueState`,
//! `ListState`, `MapState`) are [`Data`], so a process function's `type State` can be one of them
//! or a tuple of several: the whole value is read and written at every access (on RocksDB, decoded
//! and encoded whole), which suits small state. Per-entry state declared with descriptors
//! ([`entries`]: Flink's `MapStateDescriptor` and friends) costs one entry per access, whatever
//! the size of a key's map or list.

use std::collections::BTreeMap;

use crate::data::Data;

pub(crate) mod collections;
pub mod descriptors;
pub mod entries;
pub(crate) mod evolution;
pub(crate) mod heap;
pub mod ttl;
use crate::error::Result;

/// One value per key, absent until set (Flink's `ValueState`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValueState<T>(Option<T>);

impl<T> ValueState<T> {
    pub fn value(&self) -> Option<&T> {
        self.0.as_ref()
    }
    pub fn update(&mut self, value: T) {
        self.0 = Some(value);
    }
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

/// A list per key (Flink's `ListState`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListState<T>(Vec<T>);

impl<T> ListState<T> {
    pub fn add(&mut self, value: T) {
        self.0.push(value);
    }
    pub fn get(&self) -> &[T] {
        &self.0
    }
    pub fn update(&mut self, values: Vec<T>) {
        self.0 = values;
    }
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// A sorted map per key (Flink's `MapState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapState<K: Ord, V>(BTreeMap<K, V>);

impl<K: Ord, V> Default for MapState<K, V> {
    fn default() -> Self {
        MapState(BTreeMap::new())
    }
}

impl<K: Ord, V> MapState<K, V> {
    pub fn get(&self, key: &K) -> Option<&V> {
        self.0.get(key)
    }
    pub fn put(&mut self, key: K, value: V) -> Option<V> {
        self.0.insert(key, value)
    }
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.0.remove(key)
    }
    pub fn contains(&self, key: &K) -> bool {
        self.0.contains_key(key)
    }
    pub fn entries(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An `Option`'s codec and text (`null` when empty).
impl<T: Data> Data for ValueState<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        Option::decode(input).map(ValueState)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        self.0.write_text(out)
    }
    fn schema() -> crate::data::Schema {
        Option::<T>::schema()
    }
}

impl<T: Data> Data for ListState<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        Vec::decode(input).map(ListState)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        self.0.write_text(out)
    }
    fn schema() -> crate::data::Schema {
        Vec::<T>::schema()
    }
}

/// A `BTreeMap`'s codec and text.
impl<K: Data + Ord, V: Data> Data for MapState<K, V> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        BTreeMap::decode(input).map(MapState)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        self.0.write_text(out)
    }
    fn schema() -> crate::data::Schema {
        BTreeMap::<K, V>::schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Data + PartialEq + std::fmt::Debug>(value: T) {
        let mut bytes = Vec::new();
        value.encode(&mut bytes);
        let mut input = bytes.as_slice();
        assert_eq!(T::decode(&mut input).unwrap_or_else(|e| panic!("{e}")), value);
        assert!(input.is_empty());
    }

    #[test]
    fn state_facades_round_trip_through_the_codec() {
        let mut v = ValueState::default();
        round_trip(v.clone());
        v.update(7u64);
        round_trip(v);
        let mut l = ListState::default();
        l.add("a".to_string());
        l.add("b".to_string());
        round_trip(l);
        let mut m = MapState::default();
        m.put("x".to_string(), 1u64);
        m.put("y".to_string(), 2);
        round_trip((m, ValueState(Some(3u64))));
    }
}
