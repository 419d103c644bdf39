//! The Nexmark queries with the DataStream API, as the suite's Flink SQL defines them
//! (`nexmark/nexmark`, `queries/q*.sql`), and the registered job `nexmark`. Output rows are
//! TAB-separated in the SQL's column order; times are ms since the epoch.
//!
//! q3 and q4 join two streams with keyed co-process functions (Flink's SQL runs regular joins
//! there), q8 with a window join (co-group); q6 is left out, as in the Flink suite. q4's result is
//! an updating table: its rows are a changelog (`+I`, `-U`, `+U`, as Flink prints one), whose
//! final state is the query's result.

use std::time::Duration;

use super::{Auction, Bid, Event, NexmarkConfig, Person};
use crate::api::{DataStream, StreamExecutionEnvironment};
use crate::error::{Error, Result};
use crate::jobs::parse_args;
use crate::operators::window::{
    AggregateFunction, EventTimeSessionWindows, ProcessWindowFunction, SlidingEventTimeWindows,
    TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowContext,
};
use crate::operators::{Collector, KeyedCoProcessFunction, KeyedContext, KeyedProcessFunction};
use crate::state::entries::{ListStateDescriptor, ValueStateDescriptor};
use crate::state::ttl::StateTtlConfig;
use crate::state::{MapState, ValueState};
use crate::time::WatermarkStrategy;

/// The queries the job runs, and `export`: the events themselves as the suite's JSON lines.
pub const QUERIES: [&str; 12] = [
    "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11", "q12", "export", "bids",
];

fn bids(events: &DataStream<Event>) -> DataStream<Bid> {
    events.flat_map(|e: Event, out: &mut dyn Collector<Bid>| {
        if let Event::Bid(b) = e {
            out.collect(b)
        }
    })
}

fn persons(events: &DataStream<Event>) -> DataStream<Person> {
    events.flat_map(|e: Event, out: &mut dyn Collector<Person>| {
        if let Event::Person(p) = e {
            out.collect(p)
        }
    })
}

fn auctions(events: &DataStream<Event>) -> DataStream<Auction> {
    events.flat_map(|e: Event, out: &mut dyn Collector<Auction>| {
        if let Event::Auction(a) = e {
            out.collect(a)
        }
    })
}

/// q3's `(name, city, state)` of a person.
type PersonRow = (String, (String, String));

/// q3, the inner join of auctions and persons on `A.seller = P.id` (a regular join: both sides
/// are kept, as Flink keeps them, for ever or, with `--state-ttl-ms`, as Flink's
/// `table.exec.state.ttl` does: a side not written for that long is dropped). Person ids are
/// unique, so a key holds at most one person, and the auctions that came before it.
#[derive(Clone)]
struct SellerJoin {
    person: ValueStateDescriptor<PersonRow>,
    waiting: ListStateDescriptor<u64>,
}

impl SellerJoin {
    fn new(ttl: Option<Duration>) -> Self {
        let (mut person, mut waiting) = (
            ValueStateDescriptor::new("person"),
            ListStateDescriptor::new("waiting"),
        );
        if let Some(ttl) = ttl {
            let ttl = StateTtlConfig::new_builder(ttl).build();
            person = person.enable_time_to_live(ttl);
            waiting = waiting.enable_time_to_live(ttl);
        }
        SellerJoin { person, waiting }
    }
}

impl KeyedCoProcessFunction<u64, Person, Auction, (PersonRow, u64)> for SellerJoin {
    type State = ();
    fn process_element1(
        &self,
        p: Person,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(PersonRow, u64)>,
    ) {
        let row = (p.name, (p.city, p.state));
        let mut waiting = ctx.list_state(&self.waiting);
        for auction in waiting.get() {
            out.collect((row.clone(), auction));
        }
        waiting.clear();
        ctx.value_state(&self.person).update(row);
    }
    fn process_element2(
        &self,
        a: Auction,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(PersonRow, u64)>,
    ) {
        match ctx.value_state(&self.person).value() {
            Some(row) => out.collect((row, a.id)),
            None => ctx.list_state(&self.waiting).add(a.id),
        }
    }
}

/// q4, first half per auction: the highest bid within the auction's lifetime (`B.dateTime
/// BETWEEN A.dateTime AND A.expires`), as `(category, (auction, max))` each time it rises.
/// Bids that come before their auction wait for it.
#[derive(Clone)]
struct WinningBids;
impl KeyedCoProcessFunction<u64, Auction, Bid, (u64, (u64, u64))> for WinningBids {
    /// The auction's `(dateTime, expires, category)`, its highest bid so far, bids before it.
    type State = (ValueState<(i64, (i64, u64))>, ValueState<u64>, Vec<(u64, i64)>);
    fn process_element1(
        &self,
        a: Auction,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(u64, (u64, u64))>,
    ) {
        let (auction, max, waiting) = ctx.state();
        auction.update((a.date_time, (a.expires, a.category)));
        let best = waiting
            .drain(..)
            .filter(|(_, t)| (a.date_time..=a.expires).contains(t))
            .map(|(price, _)| price)
            .max();
        if let Some(best) = best {
            max.update(best);
            out.collect((a.category, (a.id, best)));
        }
    }
    fn process_element2(
        &self,
        b: Bid,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(u64, (u64, u64))>,
    ) {
        let (auction, max, waiting) = ctx.state();
        let Some(&(start, (expires, category))) = auction.value() else {
            waiting.push((b.price, b.date_time));
            return;
        };
        if (start..=expires).contains(&b.date_time) && max.value().is_none_or(|m| b.price > *m) {
            max.update(b.price);
            out.collect((category, (b.auction, b.price)));
        }
    }
}

/// q4, second half per category: `AVG(final)` over its auctions' highest bids (a BIGINT average,
/// truncated, as Flink's), as a changelog row `(op, (category, avg))` each time it changes.
#[derive(Clone)]
struct AveragePrice;
impl KeyedProcessFunction<u64, (u64, (u64, u64)), (String, (u64, u64))> for AveragePrice {
    /// Each auction's highest bid, their sum, and the average last emitted.
    type State = (MapState<u64, u64>, u64, ValueState<u64>);
    fn process_element(
        &self,
        (category, (auction, best)): (u64, (u64, u64)),
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(String, (u64, u64))>,
    ) {
        let (finals, sum, emitted) = ctx.state();
        *sum = *sum - finals.put(auction, best).unwrap_or(0) + best;
        let avg = *sum / finals.len() as u64;
        match emitted.value() {
            None => out.collect(("+I".into(), (category, avg))),
            Some(&old) if old != avg => {
                out.collect(("-U".into(), (category, old)));
                out.collect(("+U".into(), (category, avg)));
            }
            Some(_) => return,
        }
        emitted.update(avg);
    }
}

/// q8, per person and 10 s window: the person, if it also opened an auction in that window, as
/// `(id, (name, window start))` (the SQL groups each side by key and window, then joins).
fn new_sellers(
    id: &u64,
    w: &WindowContext,
    persons: &[(u64, String)],
    auctions: &[u64],
    out: &mut dyn Collector<(u64, (String, i64))>,
) {
    if auctions.is_empty() {
        return;
    }
    let mut names: Vec<&String> = persons.iter().map(|p| &p.1).collect();
    names.sort();
    names.dedup();
    for name in names {
        out.collect((*id, (name.clone(), w.window.start)));
    }
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
#[derive(Clone)]
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
#[derive(Clone)]
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
#[derive(Clone)]
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
#[derive(Clone)]
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
#[derive(Clone)]
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

fn q0(events: &DataStream<Event>) -> DataStream<BidRow> {
    bids(events).map(bid_row).name("q0")
}

/// q1's rows: the bid with its price in euros.
type Q1Row = (u64, (u64, (String, (i64, String))));

fn q1(events: &DataStream<Event>) -> DataStream<Q1Row> {
    bids(events)
        .map(|b: Bid| (b.auction, (b.bidder, (euros(b.price), (b.date_time, b.extra)))))
        .name("q1")
}

fn q2(events: &DataStream<Event>) -> DataStream<(u64, u64)> {
    bids(events)
        .filter(|b: &Bid| b.auction.is_multiple_of(123))
        .map(|b: Bid| (b.auction, b.price))
        .name("q2")
}

/// The latency benchmark's form of a stateless query: its rows cross one exchange (round robin)
/// into the latency sink, which keeps each row's latency from its event's making.
fn latency_query(events: DataStream<Event>, query: &str, output: &str, warmup: Duration) -> Result<()> {
    match query {
        "q0" => q0(&events).rebalance().sink_latency(output, warmup),
        "q1" => q1(&events).rebalance().sink_latency(output, warmup),
        "q2" => q2(&events).rebalance().sink_latency(output, warmup),
        other => {
            return Err(Error::argument(
                "--latency-output",
                format!("measures the stateless queries q0, q1 and q2, not {other:?}"),
            ));
        }
    };
    Ok(())
}

/// What a query takes beyond its events: the size of q12's processing-time windows
/// (`--window-ms`), the time to live of q3's join state (`--state-ttl-ms`).
struct QueryOptions {
    q12_window: Duration,
    state_ttl: Option<Duration>,
}

/// Builds query `query` over `events`, writing to `output`.
fn query(events: DataStream<Event>, query: &str, output: &str, options: &QueryOptions) -> Result<()> {
    let q12_window = options.q12_window;
    let secs = Duration::from_secs;
    match query {
        "export" => {
            events.sink_to_file(output);
        }
        "bids" => {
            bids(&events).map(bid_row).sink_to_file(output);
        }
        "q0" => {
            q0(&events).sink_to_file(output);
        }
        "q1" => {
            q1(&events).sink_to_file(output);
        }
        "q2" => {
            q2(&events).sink_to_file(output);
        }
        "q3" => {
            let auctions = auctions(&events).filter(|a: &Auction| a.category == 10);
            persons(&events)
                .filter(|p: &Person| matches!(p.state.as_str(), "OR" | "ID" | "CA"))
                .connect(&auctions)
                .key_by(|p: &Person| p.id, |a: &Auction| a.seller)
                .process(SellerJoin::new(options.state_ttl))
                .name("q3")
                .sink_to_file(output);
        }
        "q4" => {
            auctions(&events)
                .connect(&bids(&events))
                .key_by(|a: &Auction| a.id, |b: &Bid| b.auction)
                .process(WinningBids)
                .key_by(|w: &(u64, (u64, u64))| w.0)
                .process_function(AveragePrice)
                .name("q4")
                .sink_to_file(output);
        }
        "q8" => {
            let persons = persons(&events).map(|p: Person| (p.id, p.name));
            let sellers = auctions(&events).map(|a: Auction| a.seller);
            persons
                .co_group(&sellers)
                .where_key(|p: &(u64, String)| p.0)
                .equal_to(|s: &u64| *s)
                .window(TumblingEventTimeWindows::of(secs(10)))
                .apply(new_sellers)
                .name("q8")
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
                .window(TumblingProcessingTimeWindows::of(q12_window))
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

/// The arguments of the job `nexmark`.
pub const NEXMARK: crate::jobs::JobSpec = {
    use crate::jobs::{ArgKind, ArgSpec};
    crate::jobs::JobSpec {
        description: "the Nexmark benchmark's queries over generated (or exported) events",
        args: &[
            ArgSpec::required("query", ArgKind::OneOf(&QUERIES), "the query to run"),
            ArgSpec::optional("output", ArgKind::Location, None, "where the rows go"),
            ArgSpec::optional(
                "events",
                ArgKind::Positive,
                Some("unbounded"),
                "events to generate",
            ),
            ArgSpec::optional(
                "rate",
                ArgKind::Positive,
                None,
                "events per second for the whole source",
            ),
            ArgSpec::optional("seed", ArgKind::Count, Some("0"), "the generator's seed"),
            ArgSpec::optional(
                "event-rate",
                ArgKind::Positive,
                Some("10000"),
                "events per second of event time",
            ),
            ArgSpec::optional(
                "input",
                ArgKind::Location,
                None,
                "exported events (JSON lines) to read instead",
            ),
            ArgSpec::optional(
                "latency-output",
                ArgKind::Location,
                None,
                "q0-q2: a latency histogram instead of rows",
            ),
            ArgSpec::optional(
                "latency-warmup-s",
                ArgKind::Count,
                Some("2"),
                "seconds of events the latency skips",
            ),
            ArgSpec::optional(
                "window-ms",
                ArgKind::Positive,
                Some("10000"),
                "q12: the processing-time windows' size (the suite's 10 s by default)",
            ),
        ],
    }
};

/// The job `nexmark`: `--query Q --output URL [--events N] [--rate EVENTS_PER_S] [--seed S]
/// [--event-rate EVENTS_PER_S_OF_EVENT_TIME]`. Without `--events` the source is unbounded. With
/// `--input URL` the events are read from JSON lines (what `--query export` wrote; what Flink
/// reads in the benchmark) instead of generated, with the suite's watermarks (`dateTime - 4 s`):
/// each file whole by one subtask, so a subtask's events are in time order when it reads one
/// file (export at the parallelism the queries read with).
pub fn nexmark_job(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = parse_args(
        args,
        &[
            "query",
            "output",
            "events",
            "rate",
            "seed",
            "event-rate",
            "input",
            "latency-output",
            "latency-warmup-s",
            "window-ms",
            "state-ttl-ms",
        ],
        &["query"],
    )?;
    crate::jobs::location_args(&a, &["output", "input", "latency-output"])?;
    let number = |key: &str| -> Result<Option<u64>> {
        a.get(key)
            .map(|v| match v.parse::<u64>() {
                Ok(n) if n > 0 || matches!(key, "seed" | "latency-warmup-s") => Ok(n),
                _ => Err(Error::argument(
                    &format!("--{key}"),
                    format!("expected a positive integer, got {v:?}"),
                )),
            })
            .transpose()
    };
    // The latency benchmark: rate-limited generated events, timestamped with the wall clock.
    let latency = a.get("latency-output");
    if latency.is_some() && (a.contains_key("input") || !a.contains_key("rate")) {
        return Err(Error::argument(
            "--latency-output",
            "measures generated events at a fixed rate: give --rate, and no --input",
        ));
    }
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
            // A line that is not a Nexmark event fails the job at once, naming its file, line
            // and field; nothing is skipped silently.
            env.read_text_records(input, true, Event::from_json_line)
                .assign_timestamps_and_watermarks(strategy)
        }
        None => env.nexmark_source_with(
            config,
            number("events")?,
            number("rate")?.map(|r| r as f64),
            latency.is_some(),
        ),
    };
    match (latency, a.get("output")) {
        (Some(url), _) => {
            let warmup = Duration::from_secs(number("latency-warmup-s")?.unwrap_or(2));
            latency_query(events, &a["query"], url, warmup)?
        }
        (None, Some(output)) => {
            let options = QueryOptions {
                q12_window: Duration::from_millis(number("window-ms")?.unwrap_or(10_000)),
                state_ttl: number("state-ttl-ms")?.map(Duration::from_millis),
            };
            query(events, &a["query"], output, &options)?
        }
        (None, None) => {
            return Err(Error::argument(
                "--output",
                "missing: where the query's rows go (or --latency-output for the latency benchmark)",
            ));
        }
    }
    Ok(())
}
