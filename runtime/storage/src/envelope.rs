//! A checksummed frame around an object's payload: `FLOE1`, payload length (u64 LE), CRC-32 of the
//! payload (u32 LE), payload. Object stores do not promise that a reader never sees a truncated or
//! damaged object (a crashed writer on a file system, a bad copy); [`open`] turns that into an error
//! that names the object instead of a misread.

use bytes::{BufMut, Bytes, BytesMut};

use crate::{Error, Result};

const MAGIC: &[u8; 5] = b"FLOE1";
pub const HEADER: usize = MAGIC.len() + 8 + 4;

/// Frames a payload.
pub fn seal(payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER + payload.len());
    out.put_slice(&header(payload));
    out.put_slice(payload);
    out.freeze()
}

/// The frame's header for `payload`: written before it, the pair is what [`seal`] makes, without
/// copying the payload ([`crate::ObjectStore::create_sealed`]).
pub fn header(payload: &[u8]) -> [u8; HEADER] {
    let mut out = [0u8; HEADER];
    out[..MAGIC.len()].copy_from_slice(MAGIC);
    out[5..13].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    out[13..].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out
}

/// Checks a frame read from `url` and returns its payload.
pub fn open(url: &str, object: &Bytes) -> Result<Bytes> {
    let corrupt = |reason: String| Error::Corrupt {
        url: url.to_string(),
        reason,
    };
    if object.len() < HEADER || &object[..MAGIC.len()] != MAGIC {
        return Err(corrupt(format!(
            "not a Floe object (expected the FLOE1 header, got {} bytes)",
            object.len()
        )));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&object[5..13]);
    let len = u64::from_le_bytes(len);
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&object[13..17]);
    let crc = u32::from_le_bytes(crc);
    let payload = object.slice(HEADER..);
    if payload.len() as u64 != len {
        return Err(corrupt(format!(
            "truncated: header says {len} payload bytes, found {}",
            payload.len()
        )));
    }
    let actual = crc32fast::hash(&payload);
    if actual != crc {
        return Err(corrupt(format!(
            "checksum mismatch (stored {crc:08x}, computed {actual:08x})"
        )));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_named() {
        let sealed = seal(b"hello oplog");
        assert_eq!(open("s3://b/x", &sealed).unwrap(), "hello oplog");
        let truncated = sealed.slice(..sealed.len() - 3);
        let e = open("s3://b/x", &truncated).unwrap_err().to_string();
        assert_eq!(
            e,
            "object s3://b/x is corrupt: truncated: header says 11 payload bytes, found 8"
        );
        let mut flipped = sealed.to_vec();
        *flipped.last_mut().unwrap() ^= 1;
        let e = open("s3://b/x", &Bytes::from(flipped)).unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        let e = open("s3://b/x", &Bytes::from_static(b"{}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a Floe object"), "{e}");
    }

    #[test]
    fn the_header_and_the_payload_are_the_sealed_object() {
        let payload = b"a payload of a heap snapshot";
        let mut pair = header(payload).to_vec();
        pair.extend_from_slice(payload);
        assert_eq!(pair, seal(payload));
    }
}
