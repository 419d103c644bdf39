//! Records: the [`Data`] trait (a small self-delimiting binary codec plus a text form for sinks,
//! implemented for Rust's own types in `impls` and for a user's types by `#[derive(Data)]`), the
//! [`Schema`] of an encoding that state evolution reads, the stable key hash and Flink's
//! key-group assignment.

mod impls;
pub mod schema;

pub use impls::{get_varint, put_varint, unknown_variant, write_escaped};
pub use schema::{Field, Schema, Variant};

use crate::error::Result;

/// A record type that can cross a shuffle boundary, be kept in state and be written by a text
/// sink.
///
/// The codec is self-delimiting (records are written back to back into a buffer, no framing) and
/// must be the same in every process: integers are LEB128 varints (signed ones zigzag-encoded),
/// floats little-endian, strings and vectors length-prefixed (see `impls` for every built-in
/// type). A user's struct or enum derives it:
///
/// ```
/// use floe_datastream::Data;
///
/// #[derive(Clone, Debug, PartialEq, Data)]
/// struct Visit {
///     user: String,
///     page: String,
///     millis: u64,
///     /// Added after state was first written: a restore of that state gives `None`.
///     #[data(default)]
///     referrer: Option<String>,
/// }
///
/// let visit = Visit { user: "ada".into(), page: "/".into(), millis: 7, referrer: None };
/// let mut bytes = Vec::new();
/// visit.encode(&mut bytes);
/// assert_eq!(Visit::decode(&mut bytes.as_slice()).unwrap(), visit);
/// let mut text = Vec::new();
/// visit.write_text(&mut text);
/// assert_eq!(text, b"ada\t/\t7\tnull");
/// ```
pub trait Data: Clone + Send + Sync + 'static {
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(input: &mut &[u8]) -> Result<Self>;
    /// The record as one line of a text sink (no newline); tuples and structs are TAB-separated,
    /// their fields written with [`Data::write_field`]. A record that is text itself is written
    /// as it is (a line the job formatted).
    fn write_text(&self, out: &mut Vec<u8>);
    /// This value's text as a field of a larger record (a tuple's, a struct's, a collection's
    /// item): text escapes TAB, newline, CR and backslash there ([`write_escaped`]), so a value
    /// never splits its record's fields or line. The default is [`Data::write_text`].
    fn write_field(&self, out: &mut Vec<u8>) {
        self.write_text(out)
    }
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
    /// The shape of the encoding, recorded with state so that a later version of the type can
    /// read it ([`schema`]). `#[derive(Data)]` names every field; the default is
    /// [`Schema::Opaque`], which restores into the same type only.
    fn schema() -> Schema {
        Schema::opaque::<Self>()
    }
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

    /// The running state (an unordered collection adds its items' states).
    #[inline]
    pub(crate) fn state(&self) -> u64 {
        self.0
    }

    #[inline]
    pub fn finish(self) -> u32 {
        let h = fold_multiply(self.0, STABLE_SEED);
        (h ^ (h >> 32)) as u32
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
mod tests;
