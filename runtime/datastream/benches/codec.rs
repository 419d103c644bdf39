//! `#[derive(Data)]` against hand-written codecs (issue 34, item 1): encode, decode and
//! decode-into throughput of the WordCount record and the Nexmark `Bid` and `Event`, each derived
//! and written by hand with the same layout, measured alternately in the same run (the machine is
//! shared: each figure is the best of several rounds, and the ratio is derived over hand-written).
//!
//! Run: `cargo bench -p floe-datastream --bench codec` (options after `--`: `--records N`,
//! default 1,000,000; `--rounds R`, default 7).
//!
//! The hand-written codecs are what `data_fields!` generated for structs before the derive
//! replaced it (fields in order, `decode` only) and the hand-written `Event` enum codec; the
//! derived ones are the crate's own types (`Bid` derives `Data` now) and mirrors of the others.

use std::hint::black_box;
use std::time::Instant;

use floe_datastream::nexmark::{Bid, Person};
use floe_datastream::{Data, Result};

/// The WordCount record, derived (the built-in `(String, u64)` is the hand-written one).
#[derive(Clone, Debug, PartialEq, Data)]
struct WordCount {
    word: String,
    count: u64,
}

/// `Bid`'s fields with the codec `data_fields!` wrote.
#[derive(Clone, Debug, PartialEq)]
struct BidByHand {
    auction: u64,
    bidder: u64,
    price: u64,
    channel: String,
    url: String,
    date_time: i64,
    extra: String,
}

impl Data for BidByHand {
    fn encode(&self, out: &mut Vec<u8>) {
        self.auction.encode(out);
        self.bidder.encode(out);
        self.price.encode(out);
        self.channel.encode(out);
        self.url.encode(out);
        self.date_time.encode(out);
        self.extra.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        Ok(BidByHand {
            auction: Data::decode(input)?,
            bidder: Data::decode(input)?,
            price: Data::decode(input)?,
            channel: Data::decode(input)?,
            url: Data::decode(input)?,
            date_time: Data::decode(input)?,
            extra: Data::decode(input)?,
        })
    }
    fn write_text(&self, _: &mut Vec<u8>) {}
}

/// A Nexmark event, derived (the crate's `Event` codec is hand-written: a tag byte, then the
/// record).
#[derive(Clone, Debug, PartialEq, Data)]
enum EventDerived {
    Person(Person),
    Bid(Bid),
}

/// The same events with the hand-written tag.
#[derive(Clone, Debug, PartialEq)]
enum EventByHand {
    Person(Person),
    Bid(BidByHand),
}

impl Data for EventByHand {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            EventByHand::Person(p) => {
                out.push(0);
                p.encode(out);
            }
            EventByHand::Bid(b) => {
                out.push(1);
                b.encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self> {
        let (&tag, rest) = input
            .split_first()
            .ok_or_else(|| floe_datastream::Error::Decode("empty".into()))?;
        *input = rest;
        Ok(match tag {
            0 => EventByHand::Person(Person::decode(input)?),
            _ => EventByHand::Bid(BidByHand::decode(input)?),
        })
    }
    fn write_text(&self, _: &mut Vec<u8>) {}
}

/// xorshift64: the same records in every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn text(&mut self, min: usize, max: usize) -> String {
        let n = min + (self.next() as usize) % (max - min + 1);
        (0..n)
            .map(|_| (b'a' + (self.next() % 26) as u8) as char)
            .collect()
    }
}

fn bid(rng: &mut Rng) -> Bid {
    Bid {
        auction: 1000 + rng.next() % 10_000,
        bidder: 1000 + rng.next() % 100_000,
        price: rng.next() % 10_000_000,
        channel: rng.text(5, 10),
        url: format!("https://www.nexmark.com/{}/item.htm?query=1", rng.text(4, 12)),
        date_time: 1_436_918_400_000 + (rng.next() % 100_000_000) as i64,
        extra: rng.text(0, 40),
    }
}

fn by_hand(b: &Bid) -> BidByHand {
    BidByHand {
        auction: b.auction,
        bidder: b.bidder,
        price: b.price,
        channel: b.channel.clone(),
        url: b.url.clone(),
        date_time: b.date_time,
        extra: b.extra.clone(),
    }
}

fn person(rng: &mut Rng) -> Person {
    Person {
        id: rng.next() % 1_000_000,
        name: rng.text(5, 15),
        email_address: format!("{}@{}.com", rng.text(3, 8), rng.text(3, 8)),
        credit_card: rng.text(19, 19),
        city: rng.text(4, 12),
        state: rng.text(2, 2),
        date_time: 1_436_918_400_000 + (rng.next() % 100_000_000) as i64,
        extra: rng.text(0, 40),
    }
}

/// Seconds to encode, decode and decode-into every record (best of `rounds` each, interleaved
/// by the caller).
#[derive(Clone, Copy)]
struct Times {
    encode: f64,
    decode: f64,
    decode_into: f64,
    bytes: usize,
}

fn time_codec<T: Data + PartialEq>(records: &[T]) -> Times {
    let mut buf = Vec::with_capacity(records.len() * 64);
    let start = Instant::now();
    for r in records {
        r.encode(&mut buf);
    }
    let encode = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut input = buf.as_slice();
    let mut n = 0usize;
    while !input.is_empty() {
        black_box(T::decode(&mut input).expect("decodes"));
        n += 1;
    }
    let decode = start.elapsed().as_secs_f64();
    assert_eq!(n, records.len());
    let start = Instant::now();
    let mut input = buf.as_slice();
    let mut slot = records[0].clone();
    while !input.is_empty() {
        slot.decode_into(&mut input).expect("decodes");
        black_box(&slot);
    }
    let decode_into = start.elapsed().as_secs_f64();
    assert!(
        slot == records[records.len() - 1],
        "the last record decoded is the last written"
    );
    Times {
        encode,
        decode,
        decode_into,
        bytes: buf.len(),
    }
}

fn best(a: Times, b: Times) -> Times {
    Times {
        encode: a.encode.min(b.encode),
        decode: a.decode.min(b.decode),
        decode_into: a.decode_into.min(b.decode_into),
        bytes: a.bytes,
    }
}

fn compare<H: Data + PartialEq, D: Data + PartialEq>(name: &str, hand: &[H], derived: &[D], rounds: usize) {
    let (mut h, mut d) = (time_codec(hand), time_codec(derived));
    assert_eq!(
        h.bytes, d.bytes,
        "{name}: the derived codec writes the hand-written layout"
    );
    // Alternate which goes first, so neither always runs on a warmer cache and allocator.
    for round in 1..rounds {
        if round % 2 == 1 {
            d = best(d, time_codec(derived));
            h = best(h, time_codec(hand));
        } else {
            h = best(h, time_codec(hand));
            d = best(d, time_codec(derived));
        }
    }
    let n = hand.len() as f64;
    let rate = |secs: f64| n / secs / 1e6;
    for (op, hs, ds) in [
        ("encode", h.encode, d.encode),
        ("decode", h.decode, d.decode),
        ("decode_into", h.decode_into, d.decode_into),
    ] {
        println!(
            "| {name} | {op} | {:.1} | {:.1} | {:.2} |",
            rate(hs),
            rate(ds),
            hs / ds
        );
    }
}

/// Seconds to write every record's text form as a text sink does (a line each), and to copy the
/// same strings' bytes raw: the cost of the text form over a plain copy, in one run.
fn time_text(records: &[(String, u64)]) -> (f64, f64) {
    let mut out = Vec::with_capacity(records.len() * 24);
    let start = Instant::now();
    for r in records {
        r.write_text(&mut out);
        out.push(b'\n');
    }
    let text = start.elapsed().as_secs_f64();
    black_box(&out);
    out.clear();
    let start = Instant::now();
    for (word, count) in records {
        out.extend_from_slice(word.as_bytes());
        out.push(b'\t');
        out.extend_from_slice(itoa::Buffer::new().format(*count).as_bytes());
        out.push(b'\n');
    }
    let raw = start.elapsed().as_secs_f64();
    black_box(&out);
    (text, raw)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{name}: expected a number, got {v}"))
            })
    };
    let (records, rounds) = (arg("--records", 1_000_000), arg("--rounds", 7).max(1));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let words: Vec<(String, u64)> = (0..records)
        .map(|_| (rng.text(2, 12), rng.next() % 1000))
        .collect();
    let derived_words: Vec<WordCount> = words
        .iter()
        .map(|(w, c)| WordCount {
            word: w.clone(),
            count: *c,
        })
        .collect();
    let bids: Vec<Bid> = (0..records).map(|_| bid(&mut rng)).collect();
    let hand_bids: Vec<BidByHand> = bids.iter().map(by_hand).collect();
    let mut events = Vec::with_capacity(records);
    let mut hand_events = Vec::with_capacity(records);
    for i in 0..records {
        // Nexmark's mix: one person in 50 events, the rest bids here.
        if i % 50 == 0 {
            let p = person(&mut rng);
            hand_events.push(EventByHand::Person(p.clone()));
            events.push(EventDerived::Person(p));
        } else {
            let b = bid(&mut rng);
            hand_events.push(EventByHand::Bid(by_hand(&b)));
            events.push(EventDerived::Bid(b));
        }
    }
    println!("{records} records per row, best of {rounds} rounds; millions of records per second");
    println!();
    println!("| record | operation | hand-written | derived | derived / hand-written |");
    println!("|---|---|---|---|---|");
    compare("WordCount (String, u64)", &words, &derived_words, rounds);
    compare("Nexmark Bid", &hand_bids, &bids, rounds);
    compare("Nexmark event (2% Person)", &hand_events, &events, rounds);
    let (mut text, mut raw) = time_text(&words);
    for _ in 1..rounds {
        let (t, r) = time_text(&words);
        (text, raw) = (text.min(t), raw.min(r));
    }
    println!();
    println!("| text form of (String, u64) | raw copy | write_text | raw / write_text |");
    println!("|---|---|---|---|");
    let rate = |secs: f64| records as f64 / secs / 1e6;
    println!(
        "| WordCount lines | {:.1} | {:.1} | {:.2} |",
        rate(raw),
        rate(text),
        raw / text
    );
}
