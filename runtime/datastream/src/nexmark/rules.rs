//! The job `broadcast-rules`: the broadcast state pattern over Nexmark bids. A rule per bidder
//! class (`bidder % 10` -> a factor) is broadcast to every subtask of a keyed operator; each bid
//! waits in its bidder's state until the watermark passes its time (so every rule is in: the
//! rules' input holds the watermark back until it ends), then goes out as `(bidder, price *
//! factor)`. A subtask without the rules would write factor 0: the output shows whether the
//! broadcast state survived a restore or rescale.

use super::{Bid, Event, NexmarkConfig};
use crate::api::StreamExecutionEnvironment;
use crate::error::Result;
use crate::jobs::parse_args;
use crate::operators::{Collector, KeyedBroadcastProcessFunction, KeyedContext};
use crate::state::MapState;
use crate::time::WatermarkStrategy;

/// The rule of bidder class `class`.
pub fn rule_factor(class: u64) -> u64 {
    10 + class
}

/// The job's rows over `events`, sorted.
pub fn rules_reference(events: &[Event]) -> Vec<String> {
    let mut rows: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Bid(b) => Some(format!("{}\t{}", b.bidder, b.price * rule_factor(b.bidder % 10))),
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

#[derive(Clone)]
struct ApplyRules;

impl KeyedBroadcastProcessFunction<u64, Bid, (u64, u64), (u64, u64)> for ApplyRules {
    /// The bidder's bids waiting for the watermark: `(price, time)`.
    type State = Vec<(u64, i64)>;
    type Key = u64;
    type Value = u64;

    fn process_element(
        &self,
        bid: Bid,
        _: &MapState<u64, u64>,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        _: &mut dyn Collector<(u64, u64)>,
    ) {
        ctx.state().push((bid.price, bid.date_time));
        ctx.register_event_time_timer(bid.date_time);
    }

    fn process_broadcast_element(
        &self,
        (class, factor): (u64, u64),
        rules: &mut MapState<u64, u64>,
        _: &mut dyn Collector<(u64, u64)>,
    ) {
        rules.put(class, factor);
    }

    fn on_timer(
        &self,
        time: i64,
        rules: &MapState<u64, u64>,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(u64, u64)>,
    ) {
        let bidder = *ctx.key();
        let factor = rules.get(&(bidder % 10)).copied().unwrap_or(0);
        let due: Vec<u64> = ctx
            .state()
            .iter()
            .filter(|(_, t)| *t <= time)
            .map(|(p, _)| *p)
            .collect();
        ctx.state().retain(|(_, t)| *t > time);
        for price in due {
            out.collect((bidder, price * factor));
        }
        if ctx.state().is_empty() {
            ctx.clear_state();
        }
    }
}

/// The arguments of the job `broadcast-rules`.
pub const BROADCAST_RULES: crate::jobs::JobSpec = {
    use crate::jobs::{ArgKind, ArgSpec};
    crate::jobs::JobSpec {
        description: "the broadcast state pattern: a rule per bidder class applied to Nexmark bids",
        args: &[
            ArgSpec::required("output", ArgKind::Location, "where the rows go"),
            ArgSpec::optional(
                "events",
                ArgKind::Positive,
                Some("unbounded"),
                "events to generate",
            ),
            ArgSpec::optional("rate", ArgKind::Positive, None, "events per second"),
        ],
    }
};

/// `broadcast-rules --output URL [--events N] [--rate EVENTS_PER_S]`.
pub fn broadcast_rules_job(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = parse_args(args, &["output", "events", "rate"], &["output"])?;
    crate::jobs::location_args(&a, &["output"])?;
    let number = |key: &str| -> Result<Option<u64>> {
        a.get(key)
            .map(|v| {
                v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    crate::error::Error::argument(
                        &format!("--{key}"),
                        format!("expected a positive integer, got {v:?}"),
                    )
                })
            })
            .transpose()
    };
    let rules = env
        .from_collection((0..10u64).map(|c| (c, rule_factor(c))).collect())
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|_, _| 0),
        );
    let bids = env
        .nexmark_source(
            NexmarkConfig::default(),
            number("events")?,
            number("rate")?.map(|r| r as f64),
        )
        .flat_map(|e: Event, out: &mut dyn Collector<Bid>| {
            if let Event::Bid(b) = e {
                out.collect(b)
            }
        });
    bids.key_by(|b: &Bid| b.bidder)
        .connect_broadcast(&rules)
        .process(ApplyRules)
        .sink_to_file(&a["output"]);
    Ok(())
}
