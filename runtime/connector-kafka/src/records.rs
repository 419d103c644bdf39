//! Records in and out of Kafka: what a deserializer sees of a consumed record, the deserializers
//! Flink users reach for (raw bytes, UTF-8, JSON into a type), and what a serializer gives a sink.

use std::sync::Arc;

use floe_datastream::Data;

/// A consumed record, as a deserializer sees it.
#[derive(Debug, Clone, Copy)]
pub struct ConsumedRecord<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (ms since the epoch), if it has one.
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Turns a consumed record into the stream's type; the error says what is wrong with it (the
/// source adds which record it was).
pub type Deserializer<T> = Arc<dyn Fn(&ConsumedRecord<'_>) -> Result<T, String> + Send + Sync>;

/// The value's bytes as they are (an absent value, a tombstone, as none).
pub fn value_bytes() -> Deserializer<Vec<u8>> {
    Arc::new(|r| Ok(r.value.unwrap_or_default().to_vec()))
}

/// The value as UTF-8 text.
pub fn value_string() -> Deserializer<String> {
    Arc::new(|r| utf8("value", r.value))
}

/// `(key, value)`, both as UTF-8 text (an absent key as empty).
pub fn key_value_strings() -> Deserializer<(String, String)> {
    Arc::new(|r| Ok((utf8("key", r.key)?, utf8("value", r.value)?)))
}

/// The value as JSON, into a type of the job's.
pub fn value_json<T>() -> Deserializer<T>
where
    T: Data + serde::de::DeserializeOwned,
{
    Arc::new(|r| {
        serde_json::from_slice(r.value.unwrap_or_default())
            .map_err(|e| format!("value is not the JSON expected: {e}"))
    })
}

fn utf8(what: &str, bytes: Option<&[u8]>) -> Result<String, String> {
    let bytes = bytes.unwrap_or_default();
    String::from_utf8(bytes.to_vec())
        .map_err(|e| format!("{what} is not UTF-8 (at byte {})", e.utf8_error().valid_up_to()))
}

/// What a sink writes for a record: an optional key and the value.
pub type Serializer<T> = Arc<dyn Fn(&T) -> (Option<Vec<u8>>, Vec<u8>) + Send + Sync>;

/// A sink frame: `[key length + 1 (0: no key), LE u32][key][value]`.
pub(crate) fn encode_frame(key: Option<&[u8]>, value: &[u8], out: &mut Vec<u8>) {
    let len = key.map_or(0, |k| k.len() as u32 + 1);
    out.extend_from_slice(&len.to_le_bytes());
    if let Some(k) = key {
        out.extend_from_slice(k);
    }
    out.extend_from_slice(value);
}

/// The key and value of a frame [`encode_frame`] made.
pub(crate) fn decode_frame(frame: &[u8]) -> (Option<&[u8]>, &[u8]) {
    if frame.len() < 4 {
        return (None, &[]);
    }
    let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    let rest = &frame[4..];
    match len {
        0 => (None, rest),
        n => {
            let k = (n - 1).min(rest.len());
            (Some(&rest[..k]), &rest[k..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> ConsumedRecord<'a> {
        ConsumedRecord {
            topic: "t",
            partition: 0,
            offset: 7,
            timestamp: None,
            key,
            value,
        }
    }

    #[test]
    fn deserializers_say_what_is_wrong() {
        assert_eq!(value_string()(&record(None, Some(b"hi"))), Ok("hi".to_string()));
        assert_eq!(
            value_string()(&record(None, Some(b"h\xffi"))),
            Err("value is not UTF-8 (at byte 1)".to_string())
        );
        assert_eq!(
            key_value_strings()(&record(Some(b"k"), Some(b"v"))),
            Ok(("k".to_string(), "v".to_string()))
        );
        let e = value_json::<u64>()(&record(None, Some(b"{"))).unwrap_err();
        assert!(e.starts_with("value is not the JSON expected"), "{e}");
        assert_eq!(value_json::<u64>()(&record(None, Some(b"42"))), Ok(42));
    }

    #[test]
    fn frames_keep_keys_apart_from_values() {
        for (key, value) in [(None, &b"v"[..]), (Some(&b""[..]), b"v"), (Some(b"key"), b"")] {
            let mut out = Vec::new();
            encode_frame(key, value, &mut out);
            assert_eq!(decode_frame(&out), (key, value));
        }
    }
}
