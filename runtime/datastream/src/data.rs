//! Records: the [`Data`] trait (a small self-delimiting binary codec plus a text form for sinks), the
//! stable key hash and Flink's key-group assignment.

use std::io::Write as _;

use crate::error::{Error, Result};

/// A record type that can cross a shuffle boundary and be written by a text sink.
///
/// The codec is self-delimiting (records are written back to back into a buffer, no framing) and
/// must be the same in every process: integers are LEB128 varints (signed ones zigzag-encoded),
/// floats little-endian, strings and vectors length-prefixed.
pub trait Data: Clone + Send + Sync + 'static {
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(input: &mut &[u8]) -> Result<Self>;
    /// The record as one line of a text sink (no newline); tuples are TAB-separated.
    fn write_text(&self, out: &mut Vec<u8>);
    /// Decodes the next record into `self`, reusing what it owns (a string's buffer): the input
    /// side of a chain that borrows its records decodes every record into one value.
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        *self = Self::decode(input)?;
        Ok(())
    }
    /// Whether two values are the same value (their encodings are equal). The default compares
    /// encodings, which allocates; every type here compares directly.
    fn data_eq(&self, other: &Self) -> bool {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        self.encode(&mut a);
        other.encode(&mut b);
        a == b
    }
    /// Feeds the value into the stable key hash (the same in every process and build). The
    /// default hashes the encoded bytes, which allocates; key types on the per-record path
    /// override it (every type here does).
    fn stable_hash(&self, h: &mut StableHash) {
        let mut bytes = Vec::new();
        self.encode(&mut bytes);
        h.write_bytes(&bytes);
    }
}

/// Implements [`Data`] for a struct with named fields, each itself [`Data`]: the fields encoded in
/// order, and written to text sinks TAB-separated. A user's record type is then one line:
///
/// ```
/// #[derive(Clone, Debug, PartialEq)]
/// struct Visit {
///     user: String,
///     page: String,
///     millis: u64,
/// }
/// floe_datastream::data_fields!(Visit { user, page, millis });
/// ```
#[macro_export]
macro_rules! data_fields {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl $crate::Data for $ty {
            fn encode(&self, out: &mut Vec<u8>) {
                $($crate::Data::encode(&self.$field, out);)*
            }
            fn decode(input: &mut &[u8]) -> $crate::Result<Self> {
                Ok($ty { $($field: $crate::Data::decode(input)?),* })
            }
            fn write_text(&self, out: &mut Vec<u8>) {
                let mut first = true;
                $(
                    if !::std::mem::take(&mut first) {
                        out.push(b'\t');
                    }
                    $crate::Data::write_text(&self.$field, out);
                )*
            }
        }
    };
}

/// The stable key hash: a multiply-fold over 64-bit words (as foldhash, with fixed constants), so
/// a short string costs two multiplications instead of one per byte. Key groups, and so which
/// subtask owns a key and where its state lives in a checkpoint, follow from it.
#[derive(Debug, Clone, Copy)]
pub struct StableHash(u64);

const STABLE_SEED: u64 = 0x243f_6a88_85a3_08d3;
const STABLE_MUL: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn fold_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

impl Default for StableHash {
    fn default() -> Self {
        StableHash(STABLE_SEED)
    }
}

impl StableHash {
    #[inline]
    pub fn write_u64(&mut self, v: u64) {
        self.0 = fold_multiply(self.0 ^ v, STABLE_MUL);
    }

    /// Bytes as 64-bit little-endian words read in place: whole words, then the last 8 bytes
    /// (overlapping); shorter inputs as two overlapping 4-byte reads or three single bytes. Every
    /// byte is read, so inputs of one length hash as distinct words (callers write the length
    /// first). No copy to a buffer: a store-then-load of a padded tail stalled the CPU.
    #[inline]
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        let len = bytes.len();
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let half = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[i..i + 4]);
            u64::from(u32::from_le_bytes(b))
        };
        if len >= 8 {
            let mut i = 0;
            while i + 8 < len {
                self.write_u64(word(i));
                i += 8;
            }
            self.write_u64(word(len - 8));
        } else if len >= 4 {
            self.write_u64(half(0) | (half(len - 4) << 32));
        } else if len > 0 {
            let (a, b, c) = (bytes[0], bytes[len / 2], bytes[len - 1]);
            self.write_u64(u64::from(a) | (u64::from(b) << 8) | (u64::from(c) << 16));
        }
    }

    #[inline]
    pub fn finish(self) -> u32 {
        let h = fold_multiply(self.0, STABLE_SEED);
        (h ^ (h >> 32)) as u32
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(input: &mut &[u8]) -> Result<u64> {
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

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if input.len() < n {
        return Err(Error::Decode(format!("need {n} bytes, {} left", input.len())));
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

impl Data for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, *self);
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        get_varint(input)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(itoa::Buffer::new().format(*self).as_bytes());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(*self);
    }
    fn data_eq(&self, other: &Self) -> bool {
        self == other
    }
}

/// A byte (raw Kafka keys and values are `Vec<u8>`): one byte in the codec, a number in text.
impl Data for u8 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let (&b, rest) = input
            .split_first()
            .ok_or_else(|| Error::Decode("u8: end of input".into()))?;
        *input = rest;
        Ok(b)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(itoa::Buffer::new().format(*self).as_bytes());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(u64::from(*self));
    }
    fn data_eq(&self, other: &Self) -> bool {
        self == other
    }
}

impl Data for u32 {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(*self));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        u32::try_from(get_varint(input)?).map_err(|_| Error::Decode("u32 out of range".into()))
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(itoa::Buffer::new().format(*self).as_bytes());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(u64::from(*self));
    }
    fn data_eq(&self, other: &Self) -> bool {
        self == other
    }
}

impl Data for i64 {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, ((*self << 1) ^ (*self >> 63)) as u64);
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let v = get_varint(input)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(itoa::Buffer::new().format(*self).as_bytes());
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(*self as u64);
    }
    fn data_eq(&self, other: &Self) -> bool {
        self == other
    }
}

impl Data for f64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let mut b = [0u8; 8];
        b.copy_from_slice(take(input, 8)?);
        Ok(f64::from_le_bytes(b))
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        let _ = write!(out, "{self}");
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(self.to_bits());
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}

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
    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        let n = usize::try_from(get_varint(input)?).map_err(|_| Error::Decode("length".into()))?;
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
        let n = usize::try_from(get_varint(input)?).map_err(|_| Error::Decode("length".into()))?;
        self.clear();
        // Each element takes at least one byte: do not trust a corrupt length for the allocation.
        self.reserve(n.min(input.len()));
        for _ in 0..n {
            self.push(T::decode(input)?);
        }
        Ok(())
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, x) in self.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            x.write_text(out);
        }
        out.push(b']');
    }
    fn stable_hash(&self, h: &mut StableHash) {
        h.write_u64(self.len() as u64);
        self.iter().for_each(|x| x.stable_hash(h));
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a.data_eq(b))
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
}

impl<A: Data, B: Data> Data for (A, B) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        Ok((A::decode(input)?, B::decode(input)?))
    }
    fn decode_into(&mut self, input: &mut &[u8]) -> Result<()> {
        self.0.decode_into(input)?;
        self.1.decode_into(input)
    }
    fn stable_hash(&self, h: &mut StableHash) {
        self.0.stable_hash(h);
        self.1.stable_hash(h);
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        self.0.write_text(out);
        out.push(b'\t');
        self.1.write_text(out);
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.0.data_eq(&other.0) && self.1.data_eq(&other.1)
    }
}

impl<A: Data, B: Data, C: Data> Data for (A, B, C) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
        self.2.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        Ok((A::decode(input)?, B::decode(input)?, C::decode(input)?))
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        self.0.write_text(out);
        out.push(b'\t');
        self.1.write_text(out);
        out.push(b'\t');
        self.2.write_text(out);
    }
    fn stable_hash(&self, h: &mut StableHash) {
        self.0.stable_hash(h);
        self.1.stable_hash(h);
        self.2.stable_hash(h);
    }
    fn data_eq(&self, other: &Self) -> bool {
        self.0.data_eq(&other.0) && self.1.data_eq(&other.1) && self.2.data_eq(&other.2)
    }
}

/// FNV-1a (32 bit) over bytes: the key's "hashCode", identical in every process and build.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The stable hash of a key ([`StableHash`]), with the key's encoding left in `scratch` (state
/// backends store it as the key).
pub fn key_hash<K: Data>(key: &K, scratch: &mut Vec<u8>) -> u32 {
    scratch.clear();
    key.encode(scratch);
    key_hash_only(key)
}

/// The stable hash of a key where only the hash is needed (routing a record).
#[inline]
pub fn key_hash_only<K: Data>(key: &K) -> u32 {
    let mut h = StableHash::default();
    key.stable_hash(&mut h);
    h.finish()
}

/// Routes key hashes to subtasks as [`key_group_for_hash`] and [`operator_index_for_key_group`]
/// do, without their two divisions per record: the remainder by `max_parallelism` is computed by
/// multiplication (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019) and the
/// key group's subtask is looked up in a table.
#[derive(Debug, Clone)]
pub(crate) struct KeyGroupRouter {
    max_parallelism: u32,
    /// `ceil(2^64 / max_parallelism)`; 0 for a max parallelism of 1.
    magic: u64,
    subtask: Vec<u32>,
}

impl KeyGroupRouter {
    pub(crate) fn new(max_parallelism: u32, parallelism: u32) -> Self {
        let max_parallelism = max_parallelism.max(1);
        let magic = if max_parallelism == 1 {
            0
        } else {
            (u64::MAX / u64::from(max_parallelism)) + 1
        };
        let subtask = (0..max_parallelism)
            .map(|kg| operator_index_for_key_group(max_parallelism, parallelism, kg))
            .collect();
        KeyGroupRouter {
            max_parallelism,
            magic,
            subtask,
        }
    }

    #[inline]
    pub(crate) fn key_group(&self, key_hash: u32) -> u32 {
        let low = self.magic.wrapping_mul(u64::from(murmur_hash(key_hash)));
        ((u128::from(low) * u128::from(self.max_parallelism)) >> 64) as u32
    }

    #[inline]
    pub(crate) fn subtask(&self, key_hash: u32) -> u32 {
        self.subtask[self.key_group(key_hash) as usize]
    }
}

/// Flink's `MathUtils.murmurHash(int)`: murmur3 finalisation of one int, made non-negative.
pub fn murmur_hash(code: u32) -> u32 {
    let mut h = code.wrapping_mul(0xcc9e_2d51);
    h = h.rotate_left(15);
    h = h.wrapping_mul(0x1b87_3593);
    h = h.rotate_left(13);
    h = h.wrapping_mul(5).wrapping_add(0xe654_6b64);
    h ^= 4;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    let signed = h as i32;
    if signed >= 0 {
        signed as u32
    } else if signed != i32::MIN {
        signed.wrapping_neg() as u32
    } else {
        0
    }
}

/// Flink's `KeyGroupRangeAssignment.computeKeyGroupForKeyHash`.
pub fn key_group_for_hash(key_hash: u32, max_parallelism: u32) -> u32 {
    murmur_hash(key_hash) % max_parallelism
}

/// Flink's `KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup`.
pub fn operator_index_for_key_group(max_parallelism: u32, parallelism: u32, key_group: u32) -> u32 {
    (u64::from(key_group) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
}

/// Flink's `KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex` (inclusive range).
pub fn key_group_range_for_operator(
    max_parallelism: u32,
    parallelism: u32,
    operator_index: u32,
) -> std::ops::RangeInclusive<u32> {
    let (m, p, i) = (
        u64::from(max_parallelism),
        u64::from(parallelism),
        u64::from(operator_index),
    );
    let start = (i * m).div_ceil(p);
    let end = ((i + 1) * m).div_ceil(p) - 1;
    start as u32..=end as u32
}

/// The subtask (of `parallelism`) that owns `key`.
pub fn subtask_for_key<K: Data>(key: &K, max_parallelism: u32, parallelism: u32) -> u32 {
    let kg = key_group_for_hash(key_hash(key, &mut Vec::new()), max_parallelism);
    operator_index_for_key_group(max_parallelism, parallelism, kg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Data + PartialEq + std::fmt::Debug>(values: &[T]) {
        let mut buf = Vec::new();
        values.iter().for_each(|v| v.encode(&mut buf));
        let mut input = buf.as_slice();
        for v in values {
            assert_eq!(&T::decode(&mut input).expect("decodes"), v);
        }
        assert!(input.is_empty());
    }

    #[test]
    fn codec_round_trips() {
        round_trip(&[0u64, 1, 127, 128, 300, u64::MAX]);
        round_trip(&[0u32, 77, u32::MAX]);
        round_trip(&[0i64, -1, 1, i64::MIN, i64::MAX, -300]);
        round_trip(&[0.0f64, -1.5, f64::MAX, f64::MIN_POSITIVE]);
        round_trip(&[true, false]);
        round_trip(&["".to_string(), "héllo".to_string(), "x".repeat(1000)]);
        round_trip(&[vec![1u64, 2, 3], vec![]]);
        round_trip(&[("a".to_string(), 5u64), ("bb".to_string(), u64::MAX)]);
        round_trip(&[(1i64, "z".to_string(), vec![true, false])]);
    }

    #[test]
    fn decode_into_reuses_and_matches_decode() {
        let values = [
            ("héllo".to_string(), 5u64),
            (String::new(), 0),
            ("x".repeat(300), u64::MAX),
        ];
        let mut buf = Vec::new();
        values.iter().for_each(|v| v.encode(&mut buf));
        let mut input = buf.as_slice();
        let mut slot = (String::with_capacity(400), 9u64);
        for v in &values {
            slot.decode_into(&mut input).expect("decodes");
            assert_eq!(&slot, v);
        }
        assert!(input.is_empty());
        let mut bad = &[2u8, 0xff, 0xfe][..];
        assert!(
            String::new().decode_into(&mut bad).is_err(),
            "invalid UTF-8 is an error"
        );
    }

    #[test]
    fn the_key_hash_is_stable_and_spreads_keys_over_key_groups() {
        // Fixed values: every process and build must route a key to the same key group, and a
        // checkpoint keeps state by key group, so a changed hash is a breaking change.
        let mut scratch = Vec::new();
        assert_eq!(key_hash(&"word".to_string(), &mut scratch), 741_783_893);
        assert_eq!(
            scratch,
            vec![4, b'w', b'o', b'r', b'd'],
            "the encoding is left for state backends"
        );
        assert_eq!(key_hash_only(&("a".to_string(), 1u64)), 315_815_429);
        assert_eq!(key_hash_only(&42u64), 3_418_034_013);
        assert_ne!(
            key_hash_only(&"ab".to_string()),
            key_hash_only(&"ab\0".to_string())
        );
        // Every byte counts, whatever the length (the tail is read in overlapping pieces).
        for len in 1..40 {
            let base = "k".repeat(len);
            for i in 0..len {
                let mut other = base.clone().into_bytes();
                other[i] = b'j';
                let other = String::from_utf8(other).expect("ascii");
                assert_ne!(key_hash_only(&base), key_hash_only(&other), "len {len} byte {i}");
            }
        }
        assert_ne!(
            key_hash_only(&("a".to_string(), "bc".to_string())),
            key_hash_only(&("ab".to_string(), "c".to_string()))
        );
        let mut per_group = [0u32; 128];
        for i in 0..12_800 {
            per_group[key_group_for_hash(key_hash_only(&format!("w{i}")), 128) as usize] += 1;
        }
        let (min, max) = (per_group.iter().min().unwrap(), per_group.iter().max().unwrap());
        assert!(
            *min > 50 && *max < 150,
            "100 keys per group expected, got {min}..{max}"
        );
    }

    #[test]
    fn key_group_router_agrees_with_flinks_assignment() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (max, p) in [
            (1u32, 1u32),
            (128, 2),
            (128, 3),
            (7, 7),
            (4096, 5),
            (32_768, 32_768),
            (100, 1),
        ] {
            let router = KeyGroupRouter::new(max, p);
            for h in [0u32, 1, 42, u32::MAX, i32::MAX as u32, 1 << 31]
                .into_iter()
                .chain((0..10_000).map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u32
                }))
            {
                let kg = key_group_for_hash(h, max);
                assert_eq!(router.key_group(h), kg, "hash {h} max {max}");
                assert_eq!(router.subtask(h), operator_index_for_key_group(max, p, kg));
            }
        }
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let mut buf = Vec::new();
        "hello".to_string().encode(&mut buf);
        let mut short = &buf[..3];
        assert!(String::decode(&mut short).is_err());
        let mut bad = &[0xffu8; 3][..];
        assert!(u64::decode(&mut bad).is_err());
    }

    #[test]
    fn text_form_is_tab_separated() {
        let mut out = Vec::new();
        ("word".to_string(), 42u64).write_text(&mut out);
        assert_eq!(out, b"word\t42");
    }

    #[test]
    fn murmur_matches_flink() {
        // Values of Flink's MathUtils.murmurHash(int), computed independently with Java int semantics.
        for (code, expected) in [
            (0u32, 593_689_054u32),
            (1, 68_075_478),
            (42, 1_134_849_565),
            (u32::MAX, 1_982_413_648),
            (123_456_789, 1_088_346_449),
        ] {
            assert_eq!(murmur_hash(code), expected, "murmurHash({code})");
        }
        assert_eq!(key_group_for_hash(42, 128), 29);
    }

    #[test]
    fn key_groups_follow_flinks_ranges() {
        for (max, p) in [(128u32, 1u32), (128, 3), (128, 7), (4096, 5), (7, 7)] {
            for op in 0..p {
                for kg in key_group_range_for_operator(max, p, op) {
                    assert_eq!(
                        operator_index_for_key_group(max, p, kg),
                        op,
                        "max {max} p {p} kg {kg}"
                    );
                }
            }
            let covered: u32 = (0..p)
                .map(|op| key_group_range_for_operator(max, p, op).count() as u32)
                .sum();
            assert_eq!(covered, max);
        }
        let mut scratch = Vec::new();
        for w in ["a", "hello", "flink"] {
            let kg = key_group_for_hash(key_hash(&w.to_string(), &mut scratch), 128);
            assert!(kg < 128);
        }
    }
}
