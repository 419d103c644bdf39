//! The Nexmark model: people, auctions and bids (the Nexmark benchmark's `Person`, `Auction`,
//! `Bid`), as records of the job and as the JSON lines of the suite's `datagen` table
//! (`event_type` 0/1/2 and one nested row each; timestamps as Flink's JSON `SQL` format,
//! `yyyy-MM-dd HH:mm:ss.SSS`, UTC).

use crate::data::Data;
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq, crate::Data)]
pub struct Person {
    pub id: u64,
    pub name: String,
    pub email_address: String,
    pub credit_card: String,
    pub city: String,
    pub state: String,
    pub date_time: i64,
    pub extra: String,
}

#[derive(Debug, Clone, PartialEq, Eq, crate::Data)]
pub struct Auction {
    pub id: u64,
    pub item_name: String,
    pub description: String,
    pub initial_bid: u64,
    pub reserve: u64,
    pub date_time: i64,
    pub expires: i64,
    pub seller: u64,
    pub category: u64,
    pub extra: String,
}

#[derive(Debug, Clone, PartialEq, Eq, crate::Data)]
pub struct Bid {
    pub auction: u64,
    pub bidder: u64,
    pub price: u64,
    pub channel: String,
    pub url: String,
    pub date_time: i64,
    pub extra: String,
}

/// One Nexmark event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Person(Person),
    Auction(Auction),
    Bid(Bid),
}

impl Event {
    /// The event's time (ms since the epoch): its `dateTime`.
    pub fn date_time(&self) -> i64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    pub fn bid(&self) -> Option<&Bid> {
        match self {
            Event::Bid(b) => Some(b),
            _ => None,
        }
    }
}

impl Data for Event {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Event::Person(p) => {
                out.push(0);
                p.encode(out);
            }
            Event::Auction(a) => {
                out.push(1);
                a.encode(out);
            }
            Event::Bid(b) => {
                out.push(2);
                b.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Result<Self> {
        let (&tag, rest) = input
            .split_first()
            .ok_or_else(|| Error::Decode("empty Nexmark event".into()))?;
        *input = rest;
        Ok(match tag {
            0 => Event::Person(Person::decode(input)?),
            1 => Event::Auction(Auction::decode(input)?),
            2 => Event::Bid(Bid::decode(input)?),
            t => return Err(Error::Decode(format!("Nexmark event type {t}"))),
        })
    }

    /// The event as a JSON line of the suite's `datagen` schema.
    fn write_text(&self, out: &mut Vec<u8>) {
        let ts = sql_timestamp;
        let s = |v: &str| serde_json::Value::String(v.to_string());
        let (kind, person, auction, bid) = match self {
            Event::Person(p) => (
                0,
                serde_json::json!({
                    "id": p.id, "name": s(&p.name), "emailAddress": s(&p.email_address),
                    "creditCard": s(&p.credit_card), "city": s(&p.city), "state": s(&p.state),
                    "dateTime": ts(p.date_time), "extra": s(&p.extra),
                }),
                serde_json::Value::Null,
                serde_json::Value::Null,
            ),
            Event::Auction(a) => (
                1,
                serde_json::Value::Null,
                serde_json::json!({
                    "id": a.id, "itemName": s(&a.item_name), "description": s(&a.description),
                    "initialBid": a.initial_bid, "reserve": a.reserve, "dateTime": ts(a.date_time),
                    "expires": ts(a.expires), "seller": a.seller, "category": a.category, "extra": s(&a.extra),
                }),
                serde_json::Value::Null,
            ),
            Event::Bid(b) => (
                2,
                serde_json::Value::Null,
                serde_json::Value::Null,
                serde_json::json!({
                    "auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": s(&b.channel),
                    "url": s(&b.url), "dateTime": ts(b.date_time), "extra": s(&b.extra),
                }),
            ),
        };
        let line =
            serde_json::json!({ "event_type": kind, "person": person, "auction": auction, "bid": bid });
        out.extend_from_slice(line.to_string().as_bytes());
    }
}

/// The `datagen` schema's rows as serde reads them (typed: parsing into a generic JSON value
/// first cost a sliding-window query a tenth of its time).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonPerson {
    id: u64,
    name: String,
    email_address: String,
    credit_card: String,
    city: String,
    state: String,
    date_time: String,
    extra: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonAuction {
    id: u64,
    item_name: String,
    description: String,
    initial_bid: u64,
    reserve: u64,
    date_time: String,
    expires: String,
    seller: u64,
    category: u64,
    extra: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonBid {
    auction: u64,
    bidder: u64,
    price: u64,
    channel: String,
    url: String,
    date_time: String,
    extra: String,
}

#[derive(serde::Deserialize)]
struct JsonEvent {
    event_type: u8,
    person: Option<JsonPerson>,
    auction: Option<JsonAuction>,
    bid: Option<JsonBid>,
}

fn time_of(field: &str, text: &str) -> std::result::Result<i64, String> {
    parse_sql_timestamp(text)
        .ok_or_else(|| format!("{field}: expected a time like 2015-07-15 00:00:00.000, got {text:?}"))
}

impl Event {
    /// An event from a JSON line of the `datagen` schema (what `write_text` writes, and what
    /// Flink's JSON format reads); the error names what is missing or malformed.
    pub fn from_json_line(line: &str) -> std::result::Result<Event, String> {
        let e: JsonEvent = crate::io::json_record(line.as_bytes())?;
        match (e.event_type, e.person, e.auction, e.bid) {
            (0, Some(p), _, _) => Ok(Event::Person(Person {
                id: p.id,
                name: p.name,
                email_address: p.email_address,
                credit_card: p.credit_card,
                city: p.city,
                state: p.state,
                date_time: time_of("person.dateTime", &p.date_time)?,
                extra: p.extra,
            })),
            (1, _, Some(a), _) => Ok(Event::Auction(Auction {
                id: a.id,
                item_name: a.item_name,
                description: a.description,
                initial_bid: a.initial_bid,
                reserve: a.reserve,
                date_time: time_of("auction.dateTime", &a.date_time)?,
                expires: time_of("auction.expires", &a.expires)?,
                seller: a.seller,
                category: a.category,
                extra: a.extra,
            })),
            (2, _, _, Some(b)) => Ok(Event::Bid(Bid {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                channel: b.channel,
                url: b.url,
                date_time: time_of("bid.dateTime", &b.date_time)?,
                extra: b.extra,
            })),
            (t @ 0..=2, ..) => Err(format!(
                "event_type {t}: its row ({}) is missing",
                ["person", "auction", "bid"][t as usize]
            )),
            (t, ..) => Err(format!(
                "event_type {t}: expected 0 (person), 1 (auction) or 2 (bid)"
            )),
        }
    }
}

/// Parses [`sql_timestamp`]'s format (fractional digits optional, 0 to 3).
pub fn parse_sql_timestamp(text: &str) -> Option<i64> {
    let (date, time) = text.trim().split_once(' ')?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if frac.is_empty() || frac.len() > 3 || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    let ms = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
    // Days from the civil date (Howard Hinnant's algorithm, the inverse of `sql_timestamp`'s).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400_000 + hh * 3_600_000 + mm * 60_000 + ss * 1000 + ms)
}

/// `yyyy-MM-dd HH:mm:ss.SSS` in UTC (Flink's JSON `SQL` timestamp format): days to a civil date
/// by Howard Hinnant's algorithm.
pub fn sql_timestamp(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_timestamps_are_utc_calendar_times() {
        assert_eq!(sql_timestamp(0), "1970-01-01 00:00:00.000");
        assert_eq!(sql_timestamp(1_436_918_400_000), "2015-07-15 00:00:00.000");
        assert_eq!(sql_timestamp(951_782_400_000 + 1_234), "2000-02-29 00:00:01.234");
        assert_eq!(sql_timestamp(-1), "1969-12-31 23:59:59.999");
    }

    #[test]
    fn sql_timestamps_parse_back() {
        for ms in [
            0,
            1_436_918_400_123,
            951_782_400_000 + 1_234,
            -1,
            4_102_444_800_000,
        ] {
            assert_eq!(parse_sql_timestamp(&sql_timestamp(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            parse_sql_timestamp("2015-07-15 00:00:10.1"),
            Some(1_436_918_410_100)
        );
        assert_eq!(
            parse_sql_timestamp("2015-07-15 00:00:10"),
            Some(1_436_918_410_000)
        );
        assert_eq!(parse_sql_timestamp("2015-13-15 00:00:10"), None);
        assert_eq!(parse_sql_timestamp("yesterday"), None);
    }

    #[test]
    fn events_read_back_from_their_json_lines() {
        let config = super::super::NexmarkConfig::default();
        for n in 0..200 {
            let e = config.event(n);
            let mut line = Vec::new();
            e.write_text(&mut line);
            assert_eq!(Event::from_json_line(std::str::from_utf8(&line).unwrap()), Ok(e));
        }
        let err = Event::from_json_line(r#"{"event_type":2,"bid":{"auction":1}}"#).unwrap_err();
        assert!(err.starts_with("field `bid`: missing field `bidder`"), "{err}");
        let err = Event::from_json_line(r#"{"event_type":2,"bid":{"auction":1,"bidder":"x"}}"#).unwrap_err();
        assert!(
            err.starts_with("field `bid.bidder`: invalid type: string"),
            "{err}"
        );
    }

    #[test]
    fn events_round_trip_and_print_as_datagen_json() {
        let bid = Event::Bid(Bid {
            auction: 1000,
            bidder: 1001,
            price: 1234,
            channel: "Google".into(),
            url: "https://www.nexmark.com/a/b/c/item.htm?query=1".into(),
            date_time: 1_436_918_400_123,
            extra: "x".into(),
        });
        let mut buf = Vec::new();
        bid.encode(&mut buf);
        assert_eq!(Event::decode(&mut buf.as_slice()).unwrap(), bid);
        let mut line = Vec::new();
        bid.write_text(&mut line);
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["event_type"], 2);
        assert_eq!(v["bid"]["dateTime"], "2015-07-15 00:00:00.123");
        assert_eq!(v["bid"]["price"], 1234);
        assert!(v["person"].is_null() && v["auction"].is_null());
    }
}
