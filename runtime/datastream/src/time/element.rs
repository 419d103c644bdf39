//! The stream elements of a timed job's exchanges (Flink's `StreamElementSerializer`): a tag byte,
//! then a record (with its timestamp when it has one), a watermark, or a watermark status. A buffer
//! holds whole elements, so a watermark is read exactly where its producer put it among the
//! records.

use super::{MIN_WATERMARK, TimeEvent};
use crate::error::{Error, Result};

const RECORD: u8 = 0;
const RECORD_WITH_TIMESTAMP: u8 = 1;
const WATERMARK: u8 = 2;
const IDLE: u8 = 3;
const ACTIVE: u8 = 4;

/// What the next element of a buffer is. A record's bytes follow its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Header {
    /// A record and its timestamp ([`MIN_WATERMARK`]: none).
    Record(i64),
    Event(TimeEvent),
}

/// The header of a record with timestamp `ts`; its encoding goes right after.
#[inline]
pub(crate) fn write_record_header(out: &mut Vec<u8>, ts: i64) {
    if ts == MIN_WATERMARK {
        out.push(RECORD);
    } else {
        out.push(RECORD_WITH_TIMESTAMP);
        out.extend_from_slice(&ts.to_le_bytes());
    }
}

/// A watermark or a status. Processing time is a task's own clock and never crosses an exchange.
pub(crate) fn write_event(out: &mut Vec<u8>, event: TimeEvent) {
    match event {
        TimeEvent::Watermark(w) => {
            out.push(WATERMARK);
            out.extend_from_slice(&w.to_le_bytes());
        }
        TimeEvent::Idle => out.push(IDLE),
        TimeEvent::Active => out.push(ACTIVE),
        TimeEvent::ProcessingTime(_) => {}
    }
}

fn read_i64(input: &mut &[u8]) -> Result<i64> {
    let (bytes, rest) = input
        .split_first_chunk::<8>()
        .ok_or_else(|| Error::Decode("truncated stream element timestamp".into()))?;
    *input = rest;
    Ok(i64::from_le_bytes(*bytes))
}

#[inline]
pub(crate) fn read_header(input: &mut &[u8]) -> Result<Header> {
    let (&tag, rest) = input
        .split_first()
        .ok_or_else(|| Error::Decode("empty stream element".into()))?;
    *input = rest;
    Ok(match tag {
        RECORD => Header::Record(MIN_WATERMARK),
        RECORD_WITH_TIMESTAMP => Header::Record(read_i64(input)?),
        WATERMARK => Header::Event(TimeEvent::Watermark(read_i64(input)?)),
        IDLE => Header::Event(TimeEvent::Idle),
        ACTIVE => Header::Event(TimeEvent::Active),
        other => return Err(Error::Decode(format!("unknown stream element tag {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_read_back_in_order() {
        let mut buf = Vec::new();
        write_record_header(&mut buf, 42);
        buf.push(7);
        write_event(&mut buf, TimeEvent::Watermark(-3));
        write_record_header(&mut buf, MIN_WATERMARK);
        buf.push(8);
        write_event(&mut buf, TimeEvent::Idle);
        write_event(&mut buf, TimeEvent::Active);
        let mut input = buf.as_slice();
        assert_eq!(read_header(&mut input).unwrap(), Header::Record(42));
        assert_eq!(input[0], 7);
        input = &input[1..];
        assert_eq!(
            read_header(&mut input).unwrap(),
            Header::Event(TimeEvent::Watermark(-3))
        );
        assert_eq!(read_header(&mut input).unwrap(), Header::Record(MIN_WATERMARK));
        input = &input[1..];
        assert_eq!(read_header(&mut input).unwrap(), Header::Event(TimeEvent::Idle));
        assert_eq!(read_header(&mut input).unwrap(), Header::Event(TimeEvent::Active));
        assert!(input.is_empty());
        assert!(
            read_header(&mut &[9u8][..])
                .unwrap_err()
                .to_string()
                .contains("tag 9")
        );
        assert!(read_header(&mut &[2u8, 1][..]).is_err(), "truncated watermark");
    }
}
