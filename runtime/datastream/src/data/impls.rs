//! [`Data`] for Rust's own types: every primitive, `String`, `Option`, `Box`, `Vec`, maps and
//! sets, arrays and tuples up to 12, each with a hand-written codec (these are the records of the
//! built-in jobs, on the per-record path) and its [`Schema`].
//!
//! Encodings: unsigned integers are LEB128 varints and signed ones zigzag varints (one byte for
//! small values, whatever the declared width), `u8`/`i8`/`bool` one byte, floats and 128-bit
//! integers little-endian, `char` a varint of its scalar value, strings and sequences a varint
//! length then their items, `Option` a tag byte (0 none, 1 some) then the value, an array its
//! items (the length is in the type). A map or set is written in its order (a `HashMap`'s entries
//! sorted by their keys' encodings), so equal values have equal encodings, as state backends
//! compare keys by encoding.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, Hash};
use std::io::Write as _;

use super::schema::Schema;
use super::{Data, StableHash};
use crate::error::{Error, Result};

/// Writes `v` as a LEB128 varint (the length prefixes and integers of the codec).
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint written by [`put_varint`].
#[inline]
pub fn get_varint(input: &mut &[u8]) -> Result<u64> {
    let mut value = 0u64;
    for (i, &b) in input.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *input = &input[i + 1..];
            return Ok(value);
        }
    }
    Err(Error::Decode("truncated or overlong varint".into()))
}

/// The error of an enum's encoding whose variant index the type does not have.
pub fn unknown_variant(type_name: &str, index: u64, count: usize) -> Error {
    Error::Decode(format!("{type_name}: variant {index}, the type has {count}"))
}

pub(super) fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if input.len() < n {
        return Err(Error::Decode(format!("need {n} bytes, {} left", input.len())));
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

fn get_len(input: &mut &[u8]) -> Result<usize> {
    usize::try_from(get_varint(input)?).map_err(|_| Error::Decode("length".into()))
}

/// Text as a text sink writes it: a TAB, newline, carriage return or backslash inside a value
/// would split a field or a line, so each is written as its backslash escape (`\t`, `\n`,
/// `\r`, `\\`, PostgreSQL's text format); every other byte as it is. A line of output is then
/// always one record, and a TAB always between two fields.
#[inline]
pub fn write_escaped(out: &mut Vec<u8>, text: &[u8]) {
    if !may_need_escapes(text) {
        out.extend_from_slice(text);
        return;
    }
    for &b in text {
        match b {
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => out.push(b),
        }
    }
}

/// The bytes a text form escapes: TAB, newline, CR and backslash.
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    table[b'\t' as usize] = true;
    table[b'\n' as usize] = true;
    table[b'\r' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Whether `text` has a byte to escape: one table load a byte, with no early exit inside a
/// word's few bytes.
#[inline]
fn may_need_escapes(text: &[u8]) -> bool {
    text.iter().fold(false, |any, &b| any | ESCAPED[usize::from(b)])
}

fn write_number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Integers as varints: unsigned ones as they are, signed ones zigzag-encoded (small magnitudes
/// in one byte either way). `to` gives the varint of a value, `from` the value of a varint.
macro_rules! varint_integer {
    ($($t:ty => $schema:ident, $to:expr, $from:expr);* $(;)?) => {$(
        impl Data for $t {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                #[allow(clippy::redundant_closure_call)]
                put_varint(out, ($to)(*self));
            }
            #[inline]
            fn decode(input: &mut &[u8]) -> Result<Self> {
                let v = get_varint(input)?;
                #[allow(clippy::redundant_closure_call)]
                ($from)(v).ok_or_else(|| Error::Decode(concat!(stringify!($t), " out of range").into()))
            }
            fn write_text(&self, out: &mut Vec<u8>) {
                write_number(out, *self);
            }
            #[inline]
            fn stable_hash(&self, h: &mut StableHash) {
                // The value's bits (sign-extended), not its varint.
                h.write_u64(*self as i64 as u64);
            }
            #[inline]
            fn data_eq(&self, other: &Self) -> bool {
                self == other
            }
            fn schema() -> Schema {
                Schema::$schema
            }
        }
    )*};
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

varint_integer!(
    u16 => U16, |v: u16| u64::from(v), |v: u64| u16::try_from(v).ok();
    u32 => U32, |v: u32| u64::from(v), |v: u64| u32::try_from(v).ok();
    u64 => U64, |v: u64| v, Some;
    usize => U64, |v: usize| v as u64, |v: u64| usize::try_from(v).ok();
    i16 => I16, |v: i16| zigzag(i64::from(v)), |v: u64| i16::try_from(unzigzag(v)).ok();
    i32 => I32, |v: i32| zigzag(i64::from(v)), |v: u64| i32::try_from(unzigzag(v)).ok();
    i64 => I64, zigzag, |v: u64| Some(unzigzag(v));
    isize => I64, |v: isize| zigzag(v as i64), |v: u64| isize::try_from(unzigzag(v)).ok();
);

/// Types of a fixed number of little-endian bytes.
macro_rules! fixed {
    ($($t:ty => $schema:ident, $n:literal, $bits:expr),*) => {$(
        impl Data for $t {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn decode(input: &mut &[u8]) -> Result<Self> {
                let mut b = [0u8; $n];
                b.copy_from_slice(take(input, $n)?);
                Ok(<$t>::from_le_bytes(b))
            }
            fn write_text(&self, out: &mut Vec<u8>) {
                let _ = write!(out, "{self}");
            }
            #[inline]
            fn stable_hash(&self, h: &mut StableHash) {
                #[allow(clippy::redundant_closure_call)]
                let bits: u128 = ($bits)(*self);
                h.write_u64(bits as u64);
                if $n > 8 {
                    h.write_u64((bits >> 64) as u64);
                }
            }
            #[inline]
            fn data_eq(&self, other: &Self) -> bool {
                self.to_le_bytes() == other.to_le_bytes()
            }
            fn schema() -> Schema {
                Schema::$schema
            }
        }
    )*};
}
fixed!(
    f64 => F64, 8, |v: f64| u128::from(v.to_bits()),
    f32 => F32, 4, |v: f32| u128::from(v.to_bits()),
    u128 => U128, 16, |v: u128| v,
    i128 => I128, 16, |v: i128| v as u128
);

/// One byte each.
macro_rules! byte {
    ($($t:ty => $schema:ident),*) => {$(
        impl Data for $t {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                out.push(*self as u8);
            }
            #[inline]
            fn decode(input: &mut &[u8]) -> Result<Self> {
                let (&b, rest) = input
                    .split_first()
                    .ok_or_else(|| Error::Decode(concat!(stringify!($t), ": end of input").into()))?;
                *input = rest;
                Ok(b as $t)
            }
            fn write_text(&self, out: &mut Vec<u8>) {
                write_number(out, *self);
            }
            #[inline]
            fn stable_hash(&self, h: &mut StableHash) {
                h.write_u64(u64::from(*self as u8));
            }
            #[inline]
            fn data_eq(&self, other: &Self) -> bool {
                self == other
            }
            fn schema() -> Schema {
                Schema::$schema
            }
        }
    )*};
}
// A byte: raw Kafka keys and values are `Vec<u8>`; one byte in the codec, a number in text.
byte!(u8 => U8, i8 => I8);

impl Data for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        match take(input, 1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(Error::Decode(format!("bad bool byte {b}"))),
        }
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        let _ = write!(out, "{self}");
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(u64::from(*self));
    }
    fn data_eq(&self, other: &Self) -> bool {
        self == other
    }
    fn schema() -> Schema {
        Schema::Bool
    }
}

impl Data for char {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(u32::from(*self)));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let v = get_varint(input)?;
        u32::try_from(v)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| Error::Decode(format!("char: {v} is not a Unicode scalar value")))
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        let mut b = [0u8; 4];
        out.extend_from_slice(self.encode_utf8(&mut b).as_bytes());
    }
    fn write_field(&self, out: &mut Vec<u8>) {
        let mut b = [0u8; 4];
        write_escaped(out, self.encode_utf8(&mut b).as_bytes());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(u64::from(u32::from(*self)));
    }
    fn data_eq(&self, other: &Self) -> bool {
        self == other
    }
    fn schema() -> Schema {
        Schema::Char
    }
}

impl Data for String {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let mut text = String::new();
        text.decode_into(input)?;
        Ok(text)
    }
    /// As it is: a record that is text is a line the job made itself.
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    /// Escaped ([`write_escaped`]): a field never splits its record's fields or line.
    fn write_field(&self, out: &mut Vec<u8>) {
        write_escaped(out, self.as_bytes());
    }
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        let n = get_len(input)?;
        let text = std::str::from_utf8(take(input, n)?).map_err(|e| Error::Decode(e.to_string()))?;
        self.clear();
        self.push_str(text);
        Ok(())
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(self.len() as u64);
        h.write_bytes(self.as_bytes());
    }
    fn data_eq(&self, other: &Self) -> bool {
        self == other
    }
    fn schema() -> Schema {
        Schema::String
    }
}

/// No value: the state of a process function that keeps everything in per-entry state
/// (descriptors), which then writes nothing per key.
impl Data for () {
    fn encode(&self, _: &mut Vec<u8>) {}
    fn decode(_: &mut &[u8]) -> Result<Self> {
        Ok(())
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"()");
    }
    fn stable_hash(&self, _: &mut StableHash) {}
    fn data_eq(&self, _: &Self) -> bool {
        true
    }
    fn schema() -> Schema {
        Schema::Unit
    }
}

/// A tag byte (0 none, 1 some) then the value; `null` in text, as Flink prints a null field.
impl<T: Data> Data for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        match take(input, 1)?[0] {
            0 => Ok(None),
            1 => Ok(Some(T::decode(input)?)),
            t => Err(Error::Decode(format!("bad option tag {t}"))),
        }
    }
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        match (self.as_mut(), input.first()) {
            (Some(v), Some(1)) => {
                *input = &input[1..];
                v.decode_into(input)
            }
            _ => {
                *self = Self::decode(input)?;
                Ok(())
            }
        }
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        match self {
            None => out.extend_from_slice(b"null"),
            Some(v) => v.write_text(out),
        }
    }
    fn write_field(&self, out: &mut Vec<u8>) {
        match self {
            None => out.extend_from_slice(b"null"),
            Some(v) => v.write_field(out),
        }
    }
    fn stable_hash(&self, h: &mut StableHash) {
        match self {
            None => h.write_u64(0),
            Some(v) => {
                h.write_u64(1);
                v.stable_hash(h);
            }
        }
    }
    fn data_eq(&self, other: &Self) -> bool {
        match (self, other) {
            (None, None) => true,
            (Some(a), Some(b)) => a.data_eq(b),
            _ => false,
        }
    }
    fn schema() -> Schema {
        Schema::Option(Box::new(T::schema()))
    }
}

/// The boxed value's encoding (a recursive type's indirection costs nothing in the codec).
impl<T: Data> Data for Box<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        (**self).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        T::decode(input).map(Box::new)
    }
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        (**self).decode_into(input)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        (**self).write_text(out);
    }
    fn write_field(&self, out: &mut Vec<u8>) {
        (**self).write_field(out);
    }
    fn stable_hash(&self, h: &mut StableHash) {
        (**self).stable_hash(h);
    }
    fn data_eq(&self, other: &Self) -> bool {
        (**self).data_eq(other)
    }
    fn schema() -> Schema {
        T::schema()
    }
}

/// Writes items as `[a, b]`.
fn write_seq<'a, T: Data + 'a>(out: &mut Vec<u8>, items: impl Iterator<Item = &'a T>) {
    out.push(b'[');
    for (i, x) in items.enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        x.write_field(out);
    }
    out.push(b']');
}

/// The hash of an ordered sequence: its length, then its items.
fn hash_seq<'a, T: Data + 'a>(h: &mut StableHash, len: usize, items: impl Iterator<Item = &'a T>) {
    h.write_u64(len as u64);
    items.for_each(|x| x.stable_hash(h));
}

/// Whether two ordered sequences of one length hold the same items.
fn eq_seq<'a, T: Data + 'a>(a: impl Iterator<Item = &'a T>, b: impl Iterator<Item = &'a T>) -> bool {
    a.zip(b).all(|(x, y)| x.data_eq(y))
}

/// Writes entries as `{k: v, k2: v2}`.
fn write_map<'a, K: Data + 'a, V: Data + 'a>(
    out: &mut Vec<u8>,
    entries: impl Iterator<Item = (&'a K, &'a V)>,
) {
    out.push(b'{');
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        k.write_field(out);
        out.extend_from_slice(b": ");
        v.write_field(out);
    }
    out.push(b'}');
}

impl<T: Data> Data for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        self.iter().for_each(|x| x.encode(out));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let mut v = Vec::new();
        v.decode_into(input)?;
        Ok(v)
    }
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        let n = get_len(input)?;
        self.clear();
        // Each element takes at least one byte: do not trust a corrupt length for the allocation.
        self.reserve(n.min(input.len()));
        for _ in 0..n {
            self.push(T::decode(input)?);
        }
        Ok(())
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        write_seq(out, self.iter());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        hash_seq(h, self.len(), self.iter());
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.len() == other.len() && eq_seq(self.iter(), other.iter())
    }
    fn schema() -> Schema {
        Schema::Seq(Box::new(T::schema()))
    }
}

/// `N` items, no length (it is the type's).
impl<T: Data, const N: usize> Data for [T; N] {
    fn encode(&self, out: &mut Vec<u8>) {
        self.iter().for_each(|x| x.encode(out));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let items = (0..N).map(|_| T::decode(input)).collect::<Result<Vec<T>>>()?;
        items
            .try_into()
            .map_err(|_| Error::Decode(format!("array of {N}")))
    }
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        self.iter_mut().try_for_each(|x| x.decode_into(input))
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        write_seq(out, self.iter());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        self.iter().for_each(|x| x.stable_hash(h));
    }
    fn data_eq(&self, other: &Self) -> bool {
        eq_seq(self.iter(), other.iter())
    }
    fn schema() -> Schema {
        Schema::Array(N, Box::new(T::schema()))
    }
}

/// A length, then that many key and value pairs (a map of any kind).
fn decode_map<K: Data, V: Data, C: FromIterator<(K, V)>>(input: &mut &[u8]) -> Result<C> {
    let n = get_len(input)?;
    (0..n)
        .map(|_| Ok((K::decode(input)?, V::decode(input)?)))
        .collect()
}

/// The hash of an unordered collection: each item hashed alone and the results added, so the
/// iteration order (a `HashMap`'s differs between processes) does not count.
fn unordered_hash<I: Iterator>(
    h: &mut StableHash,
    len: usize,
    items: I,
    item: impl Fn(I::Item, &mut StableHash),
) {
    h.write_u64(len as u64);
    let mut sum = 0u64;
    for x in items {
        let mut one = StableHash::default();
        item(x, &mut one);
        sum = sum.wrapping_add(one.state());
    }
    h.write_u64(sum);
}

/// Encodes a hashed collection's items in the order of their encodings (equal collections have
/// equal encodings, whatever their hash order).
fn encode_sorted<I: Iterator>(out: &mut Vec<u8>, len: usize, items: I, item: impl Fn(I::Item, &mut Vec<u8>)) {
    put_varint(out, len as u64);
    let mut scratch = Vec::new();
    let mut spans = Vec::with_capacity(len);
    for x in items {
        let start = scratch.len();
        item(x, &mut scratch);
        spans.push(start..scratch.len());
    }
    spans.sort_unstable_by(|a, b| scratch[a.clone()].cmp(&scratch[b.clone()]));
    spans.into_iter().for_each(|s| out.extend_from_slice(&scratch[s]));
}

impl<K: Data + Ord, V: Data> Data for BTreeMap<K, V> {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        for (k, v) in self {
            k.encode(out);
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        decode_map(input)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        write_map(out, self.iter());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(self.len() as u64);
        for (k, v) in self {
            k.stable_hash(h);
            v.stable_hash(h);
        }
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .zip(other)
                .all(|(a, b)| a.0.data_eq(b.0) && a.1.data_eq(b.1))
    }
    fn schema() -> Schema {
        Schema::Map(Box::new(K::schema()), Box::new(V::schema()))
    }
}

impl<K, V, S> Data for HashMap<K, V, S>
where
    K: Data + Eq + Hash,
    V: Data,
    S: BuildHasher + Default + Clone + Send + Sync + 'static,
{
    fn encode(&self, out: &mut Vec<u8>) {
        encode_sorted(out, self.len(), self.iter(), |(k, v), buf| {
            k.encode(buf);
            v.encode(buf);
        });
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        decode_map(input)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        write_map(out, self.iter());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        unordered_hash(h, self.len(), self.iter(), |(k, v), one| {
            k.stable_hash(one);
            v.stable_hash(one);
        });
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(k, v)| other.get(k).is_some_and(|w| v.data_eq(w)))
    }
    fn schema() -> Schema {
        Schema::Map(Box::new(K::schema()), Box::new(V::schema()))
    }
}

impl<T: Data + Ord> Data for BTreeSet<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        self.iter().for_each(|x| x.encode(out));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let n = get_len(input)?;
        (0..n).map(|_| T::decode(input)).collect()
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        write_seq(out, self.iter());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        hash_seq(h, self.len(), self.iter());
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.len() == other.len() && eq_seq(self.iter(), other.iter())
    }
    fn schema() -> Schema {
        Schema::Seq(Box::new(T::schema()))
    }
}

impl<T, S> Data for HashSet<T, S>
where
    T: Data + Eq + Hash,
    S: BuildHasher + Default + Clone + Send + Sync + 'static,
{
    fn encode(&self, out: &mut Vec<u8>) {
        encode_sorted(out, self.len(), self.iter(), |x, buf| x.encode(buf));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let n = get_len(input)?;
        (0..n).map(|_| T::decode(input)).collect()
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        write_seq(out, self.iter());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        unordered_hash(h, self.len(), self.iter(), |x, one| x.stable_hash(one));
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|x| other.contains(x))
    }
    fn schema() -> Schema {
        Schema::Seq(Box::new(T::schema()))
    }
}

/// Tuples: the items back to back, TAB-separated in text.
macro_rules! tuple {
    ($(($($t:ident $i:tt),+)),+ $(,)?) => {$(
        impl<$($t: Data),+> Data for ($($t,)+) {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                $(self.$i.encode(out);)+
            }
            #[inline]
            fn decode(input: &mut &[u8]) -> Result<Self> {
                Ok(($($t::decode(input)?,)+))
            }
            #[inline]
            fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
                $(self.$i.decode_into(input)?;)+
                Ok(())
            }
            fn write_text(&self, out: &mut Vec<u8>) {
                let mut first = true;
                $(
                    if !std::mem::take(&mut first) {
                        out.push(b'\t');
                    }
                    self.$i.write_field(out);
                )+
            }
            #[inline]
            fn stable_hash(&self, h: &mut StableHash) {
                $(self.$i.stable_hash(h);)+
            }
            #[inline]
            fn data_eq(&self, other: &Self) -> bool {
                true $(&& self.$i.data_eq(&other.$i))+
            }
            fn schema() -> Schema {
                Schema::Tuple(vec![$($t::schema()),+])
            }
        }
    )+};
}
tuple!(
    (A 0),
    (A 0, B 1),
    (A 0, B 1, C 2),
    (A 0, B 1, C 2, D 3),
    (A 0, B 1, C 2, D 3, E 4),
    (A 0, B 1, C 2, D 3, E 4, F 5),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11),
);
