//! The Nexmark queries with the DataStream API, as the suite's Flink SQL defines them
//! (`nexmark/nexmark`, `queries/q*.sql`), and the registered job `nexmark`. Output rows are
//! TAB-separated in the SQL's column order; times are ms since the epoch.
//!
//! q3, q4 and q8 join two streams and wait for operators of two inputs; q6 is left out, as in the
//! Flink suite.

use std::time::Duration;

use super::{Bid, Event, NexmarkConfig};
use crate::api::{DataStream, StreamExecutionEnvironment};
use crate::error::{Error, Result};
use crate::jobs::parse_args;
use crate::operators::window::{
    AggregateFunction, EventTimeSessionWindows, ProcessWindowFunction, SlidingEventTimeWindows,
    TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowContext,
};
use crate::operators::{Collector, KeyedContext, KeyedProcessFunction};
use crate::time::WatermarkStrategy;

/// The queries the job runs, and `export`: the events themselves as the suite's JSON lines.
pub const QUERIES: [&str; 9] = ["q0", "q1", "q2", "q5", "q7", "q11", "q12", "export", "bids"];

fn bids(events: &DataStream<Event>) -> DataStream<Bid> {
    events.flat_map(|e: Event, out: &mut dyn Collector<Bid>| {
        if let Event::Bid(b) = e {
            out.collect(b)
        }
    })
}

/// `(auction, bidder, price, dateTime, extra)` as nested pairs (TAB-separated in a text sink).
type BidRow = (u64, (u64, (u64, (i64, String))));

fn bid_row(b: Bid) -> BidRow {
    (b.auction, (b.bidder, (b.price, (b.date_time, b.extra))))
}

/// q1's `0.908 * price` as Flink's `DECIMAL(23, 3)` prints it.
fn euros(price: u64) -> String {
    let milli = u128::from(price) * 908;
    format!("{}.{:03}", milli / 1000, milli % 1000)
}

/// Counts (the `count(*)` of q5, q11, q12).
struct Count;
impl<T: Send + Sync + 'static> AggregateFunction<T> for Count {
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: T, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

/// `(key, count, window start, window end)` of a window's count.
struct KeyCountWindow;
impl ProcessWindowFunction<u64, u64, (u64, (u64, (i64, i64)))> for KeyCountWindow {
    fn process(
        &self,
        key: &u64,
        ctx: &WindowContext,
        counts: &[u64],
        out: &mut dyn Collector<(u64, (u64, (i64, i64)))>,
    ) {
        for &n in counts {
            out.collect((*key, (n, (ctx.window.start, ctx.window.end))));
        }
    }
}

/// q5, first half: `(window end, (auction, count))` per auction and sliding window.
struct AuctionCount;
impl ProcessWindowFunction<u64, u64, (i64, (u64, u64))> for AuctionCount {
    fn process(
        &self,
        auction: &u64,
        ctx: &WindowContext,
        counts: &[u64],
        out: &mut dyn Collector<(i64, (u64, u64))>,
    ) {
        for &n in counts {
            out.collect((ctx.window.end, (*auction, n)));
        }
    }
}

/// q5, second half, per window end: the auctions whose count is the window's largest (`num >=
/// maxn`), once every count of the window is in (the watermark passed its end).
struct HottestAuctions;
impl KeyedProcessFunction<i64, (i64, (u64, u64)), (u64, u64)> for HottestAuctions {
    type State = Vec<(u64, u64)>;
    fn process_element(
        &self,
        value: (i64, (u64, u64)),
        ctx: &mut KeyedContext<'_, i64, Vec<(u64, u64)>>,
        _: &mut dyn Collector<(u64, u64)>,
    ) {
        if ctx.state().is_empty() {
            ctx.register_event_time_timer(value.0 - 1);
        }
        ctx.state().push(value.1);
    }
    fn on_timer(
        &self,
        _: i64,
        ctx: &mut KeyedContext<'_, i64, Vec<(u64, u64)>>,
        out: &mut dyn Collector<(u64, u64)>,
    ) {
        let max = ctx.state().iter().map(|c| c.1).max().unwrap_or(0);
        for &(auction, n) in ctx.state().iter() {
            if n >= max {
                out.collect((auction, n));
            }
        }
        ctx.clear_state();
    }
}

/// q7, first half: per auction and tumbling window, its highest bids (all of them on a tie),
/// as `(window end, bid)`.
struct LocalHighest;
impl ProcessWindowFunction<u64, Bid, (i64, BidRow)> for LocalHighest {
    fn process(&self, _: &u64, ctx: &WindowContext, bids: &[Bid], out: &mut dyn Collector<(i64, BidRow)>) {
        let max = bids.iter().map(|b| b.price).max().unwrap_or(0);
        for b in bids.iter().filter(|b| b.price == max) {
            out.collect((ctx.window.end, bid_row(b.clone())));
        }
    }
}

/// q7, second half, per window end: the window's highest bids, as
/// `(auction, price, bidder, dateTime, extra)` (the suite's SELECT order).
struct Highest;
impl KeyedProcessFunction<i64, (i64, BidRow), BidRow> for Highest {
    type State = Vec<BidRow>;
    fn process_element(
        &self,
        value: (i64, BidRow),
        ctx: &mut KeyedContext<'_, i64, Vec<BidRow>>,
        _: &mut dyn Collector<BidRow>,
    ) {
        if ctx.state().is_empty() {
            ctx.register_event_time_timer(value.0 - 1);
        }
        ctx.state().push(value.1);
    }
    fn on_timer(
        &self,
        _: i64,
        ctx: &mut KeyedContext<'_, i64, Vec<BidRow>>,
        out: &mut dyn Collector<BidRow>,
    ) {
        let max = ctx.state().iter().map(|b| b.1.1.0).max().unwrap_or(0);
        for (auction, (bidder, (price, rest))) in ctx.state().drain(..) {
            if price == max {
                out.collect((auction, (price, (bidder, rest))));
            }
        }
        ctx.clear_state();
    }
}

/// Builds query `query` over `events`, writing to `output`.
fn query(events: DataStream<Event>, query: &str, output: &str) -> Result<()> {
    let secs = Duration::from_secs;
    match query {
        "export" => {
            events.sink_to_file(output);
        }
        "bids" => {
            bids(&events).map(bid_row).sink_to_file(output);
        }
        "q0" => {
            bids(&events).map(bid_row).name("q0").sink_to_file(output);
        }
        "q1" => {
            bids(&events)
                .map(|b: Bid| (b.auction, (b.bidder, (euros(b.price), (b.date_time, b.extra)))))
                .name("q1")
                .sink_to_file(output);
        }
        "q2" => {
            bids(&events)
                .filter(|b: &Bid| b.auction.is_multiple_of(123))
                .map(|b: Bid| (b.auction, b.price))
                .name("q2")
                .sink_to_file(output);
        }
        "q5" => {
            bids(&events)
                .map(|b: Bid| b.auction)
                .key_by(|a: &u64| *a)
                .window(SlidingEventTimeWindows::of(secs(10), secs(2)))
                .aggregate_process(Count, AuctionCount)
                .key_by(|c: &(i64, (u64, u64))| c.0)
                .process_function(HottestAuctions)
                .sink_to_file(output);
        }
        "q7" => {
            bids(&events)
                .key_by(|b: &Bid| b.auction)
                .window(TumblingEventTimeWindows::of(secs(10)))
                .process(LocalHighest)
                .key_by(|c: &(i64, BidRow)| c.0)
                .process_function(Highest)
                .sink_to_file(output);
        }
        "q11" => {
            bids(&events)
                .map(|b: Bid| b.bidder)
                .key_by(|b: &u64| *b)
                .window(EventTimeSessionWindows::with_gap(secs(10)))
                .aggregate_process(Count, KeyCountWindow)
                .sink_to_file(output);
        }
        "q12" => {
            bids(&events)
                .map(|b: Bid| b.bidder)
                .key_by(|b: &u64| *b)
                .window(TumblingProcessingTimeWindows::of(secs(10)))
                .aggregate_process(Count, KeyCountWindow)
                .sink_to_file(output);
        }
        other => {
            return Err(Error::argument(
                "--query",
                format!("unknown query {other:?}; expected one of {}", QUERIES.join(", ")),
            ));
        }
    }
    Ok(())
}

/// The job `nexmark`: `--query Q --output URL [--events N] [--rate EVENTS_PER_S] [--seed S]
/// [--event-rate EVENTS_PER_S_OF_EVENT_TIME]`. Without `--events` the source is unbounded. With
/// `--input URL` the events are read from JSON lines (what `--query export` wrote; what Flink
/// reads in the benchmark) instead of generated, with the suite's watermarks (`dateTime - 4 s`):
/// each file whole by one subtask, so a subtask's events are in time order when it reads one
/// file (export at the parallelism the queries read with).
pub fn nexmark_job(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = parse_args(
        args,
        &["query", "output", "events", "rate", "seed", "event-rate", "input"],
        &["query", "output"],
    )?;
    crate::jobs::location_args(&a, &["output", "input"])?;
    let number = |key: &str| -> Result<Option<u64>> {
        a.get(key)
            .map(|v| match v.parse::<u64>() {
                Ok(n) if n > 0 || key == "seed" => Ok(n),
                _ => Err(Error::argument(
                    &format!("--{key}"),
                    format!("expected a positive integer, got {v:?}"),
                )),
            })
            .transpose()
    };
    let config = NexmarkConfig {
        seed: number("seed")?.unwrap_or(0),
        event_rate: number("event-rate")?.unwrap_or(10_000),
        ..NexmarkConfig::default()
    };
    let events = match a.get("input") {
        Some(input) => {
            let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(
                super::WATERMARK_DELAY_MS as u64,
            ))
            .with_timestamp_assigner(|e: &Event, _| e.date_time());
            // Each exported file is in time order: read whole, one subtask each.
            env.read_text_files_whole(input)
                .map(|line: String| match Event::from_json_line(&line) {
                    Ok(event) => event,
                    // The task fails with the line's error; nothing is skipped silently.
                    Err(e) => panic!("nexmark --input: a line is not a Nexmark event ({e}): {line:.200}"),
                })
                .name("Parse")
                .assign_timestamps_and_watermarks(strategy)
        }
        None => env.nexmark_source(config, number("events")?, number("rate")?.map(|r| r as f64)),
    };
    query(events, &a["query"], &a["output"])?;
    Ok(())
}
