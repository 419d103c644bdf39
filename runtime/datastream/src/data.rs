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

/// FNV-1a (32 bit) over bytes: the key's "hashCode", identical in every process and build.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Stable hash of a key: FNV-1a over its encoded bytes. `scratch` is reused to avoid allocating.
pub fn key_hash<K: Data>(key: &K, scratch: &mut Vec<u8>) -> u32 {
    scratch.clear();
    key.encode(scratch);
    fnv1a32(scratch)
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
