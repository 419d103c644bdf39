//! Each Nexmark query's output on one million events equals a reference computed here from the
//! same events by the query's SQL definition (as multisets of rows, after the final watermark).
//! The comparison with Apache Flink itself runs in the benchmark (`bench/nexmark-flink.sh`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use common::{run, temp_dir};
use floe_datastream::nexmark::{Bid, Event, NexmarkConfig};
use floe_datastream::{JobArgs, JobRegistry};

const EVENTS: u64 = 1_000_000;

fn bids() -> Vec<Bid> {
    let config = NexmarkConfig::default();
    (0..EVENTS)
        .filter_map(|n| match config.event(n) {
            Event::Bid(b) => Some(b),
            _ => None,
        })
        .collect()
}

fn row(fields: &[String]) -> String {
    fields.join("\t")
}

fn bid_row(b: &Bid) -> String {
    row(&[
        b.auction.to_string(),
        b.bidder.to_string(),
        b.price.to_string(),
        b.date_time.to_string(),
        b.extra.clone(),
    ])
}

/// Windows `[start, start + size)` every `slide` that hold `ts` (Flink's HOP).
fn hops(ts: i64, size: i64, slide: i64) -> Vec<i64> {
    let mut starts = Vec::new();
    let mut start = ts - ts.rem_euclid(slide);
    while start > ts - size {
        starts.push(start);
        start -= slide;
    }
    starts
}

/// Sessions of one key's sorted times: `(start, end, count)`, a gap of more than `gap` cuts.
fn sessions(times: &mut [i64], gap: i64) -> Vec<(i64, i64, u64)> {
    times.sort_unstable();
    let mut out = Vec::new();
    let (mut start, mut last, mut n) = (times[0], times[0], 0u64);
    for &t in times.iter() {
        if t > last + gap {
            out.push((start, last + gap, n));
            start = t;
            n = 0;
        }
        last = t;
        n += 1;
    }
    out.push((start, last + gap, n));
    out
}

fn reference(query: &str, bids: &[Bid]) -> Vec<String> {
    let mut rows: Vec<String> = match query {
        "q0" => bids.iter().map(bid_row).collect(),
        "q1" => bids
            .iter()
            .map(|b| {
                let euros = format!("{:.3}", b.price as f64 * 0.908);
                row(&[
                    b.auction.to_string(),
                    b.bidder.to_string(),
                    euros,
                    b.date_time.to_string(),
                    b.extra.clone(),
                ])
            })
            .collect(),
        "q2" => bids
            .iter()
            .filter(|b| b.auction % 123 == 0)
            .map(|b| row(&[b.auction.to_string(), b.price.to_string()]))
            .collect(),
        "q5" => {
            // count(*) per auction and hop window, then the auctions at the window's maximum.
            let mut counts: BTreeMap<i64, HashMap<u64, u64>> = BTreeMap::new();
            for b in bids {
                for start in hops(b.date_time, 10_000, 2_000) {
                    *counts.entry(start).or_default().entry(b.auction).or_default() += 1;
                }
            }
            let mut out = Vec::new();
            for per_auction in counts.values() {
                let max = per_auction.values().copied().max().unwrap_or(0);
                for (auction, n) in per_auction {
                    if *n >= max {
                        out.push(row(&[auction.to_string(), n.to_string()]));
                    }
                }
            }
            out
        }
        "q7" => {
            // The highest price per 10 s tumbling window; the bids at that price whose time is
            // within [window end - 10 s, window end] (SQL's BETWEEN: both ends).
            let mut max: BTreeMap<i64, u64> = BTreeMap::new();
            for b in bids {
                let start = b.date_time - b.date_time.rem_euclid(10_000);
                let m = max.entry(start + 10_000).or_default();
                *m = (*m).max(b.price);
            }
            let mut out = Vec::new();
            for b in bids {
                for (end, m) in &max {
                    if b.price == *m && b.date_time >= end - 10_000 && b.date_time <= *end {
                        out.push(row(&[
                            b.auction.to_string(),
                            b.price.to_string(),
                            b.bidder.to_string(),
                            b.date_time.to_string(),
                            b.extra.clone(),
                        ]));
                    }
                }
            }
            out
        }
        "q11" => {
            let mut by_bidder: HashMap<u64, Vec<i64>> = HashMap::new();
            for b in bids {
                by_bidder.entry(b.bidder).or_default().push(b.date_time);
            }
            let mut out = Vec::new();
            for (bidder, mut times) in by_bidder {
                for (start, end, n) in sessions(&mut times, 10_000) {
                    out.push(row(&[
                        bidder.to_string(),
                        n.to_string(),
                        start.to_string(),
                        end.to_string(),
                    ]));
                }
            }
            out
        }
        other => panic!("no reference for {other}"),
    };
    rows.sort();
    rows
}

fn output(dir: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for e in std::fs::read_dir(dir).expect("output") {
        let text = std::fs::read_to_string(e.expect("entry").path()).expect("read");
        rows.extend(text.lines().map(str::to_string));
    }
    rows.sort();
    rows
}

async fn run_query(query: &str, parallelism: u32) -> Vec<String> {
    run_query_with(query, parallelism, EVENTS, None).await
}

async fn run_query_with(query: &str, parallelism: u32, events: u64, rate: Option<u64>) -> Vec<String> {
    let out = temp_dir(&format!("nexmark-{query}-{parallelism}"));
    let mut args: Vec<String> = [
        "--query",
        query,
        "--events",
        &events.to_string(),
        "--output",
        &format!("file://{}", out.display()),
    ]
    .map(String::from)
    .to_vec();
    if let Some(rate) = rate {
        args.extend(["--rate".to_string(), rate.to_string()]);
    }
    let job = JobRegistry::builtin()
        .build(&JobArgs {
            name: "nexmark".into(),
            args,
            configuration: BTreeMap::from([("parallelism.default".to_string(), parallelism.to_string())]),
        })
        .expect("nexmark builds");
    run(&job, 32 * 1024, Some(Duration::from_millis(10))).await;
    output(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_queries_equal_their_sql_definition_on_a_million_events() {
    let bids = bids();
    assert!(bids.len() > 900_000);
    for query in ["q0", "q1", "q2", "q5", "q7", "q11"] {
        let want = reference(query, &bids);
        let got = run_query(query, 2).await;
        assert!(!want.is_empty(), "{query}: an empty reference proves nothing");
        assert_eq!(got.len(), want.len(), "{query}: rows");
        assert!(got == want, "{query}: the rows differ from the reference");
        eprintln!("{query}: {} rows equal the reference", got.len());
    }
}

/// Processing-time windows fire on the clock, and (as in Flink) not at the end of a bounded
/// input: the source is held to 25,000 events/s so the run crosses at least one 10 s window's
/// end; the windows that fired count each bid at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q12_counts_bids_in_processing_time_windows() {
    const Q12_EVENTS: u64 = 300_000;
    let got = run_query_with("q12", 2, Q12_EVENTS, Some(25_000)).await;
    let fields = |r: &String| -> Vec<i64> { r.split('\t').map(|x| x.parse().expect("number")).collect() };
    let total: i64 = got.iter().map(|r| fields(r)[1]).sum();
    let bids = (0..Q12_EVENTS).filter(|n| n % 50 >= 4).count() as i64;
    assert!(total > 0, "a 12 s run fires at least one 10 s window");
    assert!(total <= bids, "{total} counted of {bids} bids");
    let mut seen = std::collections::HashSet::new();
    for r in &got {
        let f = fields(r);
        assert!(seen.insert((f[0], f[2])), "one row per bidder and window: {r}");
        assert_eq!(f[3] - f[2], 10_000, "10 s windows: {r}");
        assert_eq!(f[2].rem_euclid(10_000), 0, "aligned to the epoch: {r}");
    }
}
