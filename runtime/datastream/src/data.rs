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
    /// FNV-1a over [`Data::encode`]'s bytes, continued from `state`: the stable key hash. Types
    /// whose encoding is cheap to walk hash it without writing it out; others encode into
    /// `scratch` first.
    fn hash_encoded(&self, state: u32, scratch: &mut Vec<u8>) -> u32 {
        scratch.clear();
        self.encode(scratch);
        fnv1a32_from(state, scratch)
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
}

impl Data for String {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let n = usize::try_from(get_varint(input)?).map_err(|_| Error::Decode("length".into()))?;
        let bytes = take(input, n)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| Error::Decode(e.to_string()))
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
    fn hash_encoded(&self, mut state: u32, _scratch: &mut Vec<u8>) -> u32 {
        let mut n = self.len() as u64;
        while n >= 0x80 {
            state = fnv1a32_step(state, (n as u8) | 0x80);
            n >>= 7;
        }
        state = fnv1a32_step(state, n as u8);
        fnv1a32_from(state, self.as_bytes())
    }
}

impl<T: Data> Data for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        self.iter().for_each(|x| x.encode(out));
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let n = usize::try_from(get_varint(input)?).map_err(|_| Error::Decode("length".into()))?;
        // Each element takes at least one byte: do not trust a corrupt length for the allocation.
        let mut v = Vec::with_capacity(n.min(input.len()));
        for _ in 0..n {
            v.push(T::decode(input)?);
        }
        Ok(v)
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
    fn hash_encoded(&self, state: u32, scratch: &mut Vec<u8>) -> u32 {
        let state = self.0.hash_encoded(state, scratch);
        self.1.hash_encoded(state, scratch)
    }
    fn write_text(&self, out: &mut Vec<u8>) {
        self.0.write_text(out);
        out.push(b'\t');
        self.1.write_text(out);
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
}

const FNV1A32_OFFSET: u32 = 0x811c_9dc5;

#[inline]
fn fnv1a32_step(h: u32, b: u8) -> u32 {
    (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
}

/// FNV-1a (32 bit) continued from `state` over more bytes.
#[inline]
fn fnv1a32_from(state: u32, bytes: &[u8]) -> u32 {
    bytes.iter().fold(state, |h, &b| fnv1a32_step(h, b))
}

/// FNV-1a (32 bit) over bytes: the key's "hashCode", identical in every process and build.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    fnv1a32_from(FNV1A32_OFFSET, bytes)
}

/// Stable hash of a key: FNV-1a over its encoded bytes, which are left in `scratch` (state
/// backends store them as the key).
pub fn key_hash<K: Data>(key: &K, scratch: &mut Vec<u8>) -> u32 {
    scratch.clear();
    key.encode(scratch);
    fnv1a32(scratch)
}

/// The same hash as [`key_hash`] where only the hash is needed (routing a record): strings and
/// tuples of them are hashed without being encoded first.
pub fn key_hash_only<K: Data>(key: &K, scratch: &mut Vec<u8>) -> u32 {
    key.hash_encoded(FNV1A32_OFFSET, scratch)
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
    fn key_hash_only_equals_the_hash_of_the_encoding() {
        let mut scratch = Vec::new();
        for s in ["", "a", "word", &"long".repeat(40), &"y".repeat(20_000)] {
            let s = s.to_string();
            assert_eq!(key_hash_only(&s, &mut scratch), key_hash(&s, &mut Vec::new()));
            let pair = (s.clone(), 77u64);
            assert_eq!(
                key_hash_only(&pair, &mut scratch),
                key_hash(&pair, &mut Vec::new())
            );
        }
        assert_eq!(
            key_hash_only(&42u64, &mut scratch),
            key_hash(&42u64, &mut Vec::new())
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
