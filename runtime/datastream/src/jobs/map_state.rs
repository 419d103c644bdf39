//! The built-in `map-state` job: per-entry keyed state at scale, for the state benchmark and tests.
//! Record `n` (of `0..records`) belongs to key `n mod keys` and entry `(n div keys) mod entries`
//! of it; with `--state map` it adds `n` to that entry of the key's `MapState<u64, u64>` (a `get`
//! and a `put`), with `--state list` it appends `n` to the key's `ListState<u64>`. At the end of
//! input every key writes `key<TAB>entries<TAB>checksum`, where the checksum is the wrapping sum of
//! [`entry_checksum`] over its entries (list elements count as entry = position-free value), so
//! the result does not depend on the order records of one key arrive in from several sources.
//! `--state whole-map` does what `map` does in the whole-value [`MapState`] facade of `type State`
//! (the map decoded and encoded whole at every record on RocksDB): the benchmark's before.
//! `--state window` puts every record into its key's one global window, evaluated by a process
//! window function at the end of input (the window's contents are per-entry state), and
//! `--state whole-list` appends it to a `Vec` in `type State`, the layout window contents had
//! before (decoded and encoded whole at every record on RocksDB). Both count as lists.

use crate::api::StreamExecutionEnvironment;
use crate::error::{Error, Result};
use crate::jobs::{ArgKind, ArgSpec, JobSpec, parse_args};
use crate::operators::window::{EventTimeTrigger, GlobalWindows, ProcessWindowFunction, WindowContext};
use crate::operators::{Collector, KeyedContext, KeyedProcessFunction};
use crate::state::MapState;
use crate::state::entries::{ListStateDescriptor, MapStateDescriptor};

pub(crate) const MAP_STATE: JobSpec = JobSpec {
    description: "per-entry keyed state: every record updates one entry of its key's map (or appends to its list)",
    args: &[
        ArgSpec::required(
            "output",
            ArgKind::Location,
            "where each key's entries and checksum go",
        ),
        ArgSpec::required("keys", ArgKind::Positive, "distinct keys"),
        ArgSpec::required(
            "entries-per-key",
            ArgKind::Positive,
            "the entries a key's map holds at most",
        ),
        ArgSpec::required("records", ArgKind::Positive, "records in all"),
        ArgSpec::optional(
            "state",
            ArgKind::OneOf(&["map", "list", "whole-map", "window", "whole-list"]),
            Some("map"),
            "map: get and put one map entry per record; list: append one element; whole-map: as map, in the whole-value MapState facade (read and written whole per record: the benchmark's before); window: one process window per key holds every record; whole-list: as list, in a Vec read and written whole per record (the window's before)",
        ),
    ],
};

/// SplitMix64's finalizer: a checksum term that mixes every bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One entry's term of a key's checksum (a list element is `entry_checksum(0, value)`).
pub fn entry_checksum(user_key: u64, value: u64) -> u64 {
    mix(mix(user_key) ^ value)
}

/// End of input: a timer that fires once the MAX watermark arrives.
const AT_END: i64 = i64::MAX;

#[derive(Clone)]
struct MapStateJob {
    keys: u64,
    entries: u64,
    map: MapStateDescriptor<u64, u64>,
    list: Option<ListStateDescriptor<u64>>,
}

impl KeyedProcessFunction<u64, u64, (u64, u64, u64)> for MapStateJob {
    type State = ();

    fn process_element(
        &self,
        n: u64,
        ctx: &mut KeyedContext<'_, u64, ()>,
        _: &mut dyn Collector<(u64, u64, u64)>,
    ) {
        // The key's first record registers its end-of-input timer.
        if n < self.keys {
            ctx.register_event_time_timer(AT_END);
        }
        match &self.list {
            Some(list) => ctx.list_state(list).add(n),
            None => {
                let entry = (n / self.keys) % self.entries;
                let mut map = ctx.map_state(&self.map);
                let sum = map.get(&entry).unwrap_or(0).wrapping_add(n);
                map.put(entry, sum);
            }
        }
    }

    fn on_timer(
        &self,
        _: i64,
        ctx: &mut KeyedContext<'_, u64, ()>,
        out: &mut dyn Collector<(u64, u64, u64)>,
    ) {
        let key = *ctx.key();
        let (mut entries, mut checksum) = (0u64, 0u64);
        match &self.list {
            Some(list) => {
                for v in ctx.list_state(list).get() {
                    entries += 1;
                    checksum = checksum.wrapping_add(entry_checksum(0, v));
                }
            }
            None => ctx.map_state(&self.map).for_each(|k, v| {
                entries += 1;
                checksum = checksum.wrapping_add(entry_checksum(k, v));
                true
            }),
        }
        out.collect((key, entries, checksum));
    }
}

/// `--state whole-map`: [`MapStateJob`]'s map in `type State`.
#[derive(Clone)]
struct WholeMapJob {
    keys: u64,
    entries: u64,
}

impl KeyedProcessFunction<u64, u64, (u64, u64, u64)> for WholeMapJob {
    type State = MapState<u64, u64>;

    fn process_element(
        &self,
        n: u64,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        _: &mut dyn Collector<(u64, u64, u64)>,
    ) {
        if n < self.keys {
            ctx.register_event_time_timer(AT_END);
        }
        let entry = (n / self.keys) % self.entries;
        let map = ctx.state();
        let sum = map.get(&entry).copied().unwrap_or(0).wrapping_add(n);
        map.put(entry, sum);
    }

    fn on_timer(
        &self,
        _: i64,
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(u64, u64, u64)>,
    ) {
        let key = *ctx.key();
        let map = ctx.state();
        let checksum = map
            .entries()
            .fold(0u64, |c, (k, v)| c.wrapping_add(entry_checksum(*k, *v)));
        out.collect((key, map.len() as u64, checksum));
    }
}

/// `--state window`: the key's elements as one window sees them.
#[derive(Clone)]
struct WindowCount;

impl ProcessWindowFunction<u64, u64, (u64, u64, u64)> for WindowCount {
    fn process(
        &self,
        key: &u64,
        _: &WindowContext,
        elements: &[u64],
        out: &mut dyn Collector<(u64, u64, u64)>,
    ) {
        let checksum = elements
            .iter()
            .fold(0u64, |c, v| c.wrapping_add(entry_checksum(0, *v)));
        out.collect((*key, elements.len() as u64, checksum));
    }
}

/// `--state whole-list`: [`MapStateJob`]'s list in `type State`.
#[derive(Clone)]
struct WholeListJob {
    keys: u64,
}

impl KeyedProcessFunction<u64, u64, (u64, u64, u64)> for WholeListJob {
    type State = Vec<u64>;

    fn process_element(
        &self,
        n: u64,
        ctx: &mut KeyedContext<'_, u64, Vec<u64>>,
        _: &mut dyn Collector<(u64, u64, u64)>,
    ) {
        if n < self.keys {
            ctx.register_event_time_timer(AT_END);
        }
        ctx.state().push(n);
    }

    fn on_timer(
        &self,
        _: i64,
        ctx: &mut KeyedContext<'_, u64, Vec<u64>>,
        out: &mut dyn Collector<(u64, u64, u64)>,
    ) {
        let key = *ctx.key();
        let list = ctx.state();
        let checksum = list
            .iter()
            .fold(0u64, |c, v| c.wrapping_add(entry_checksum(0, *v)));
        out.collect((key, list.len() as u64, checksum));
    }
}

/// `map-state --output URL --keys K --entries-per-key E --records N [--state map|list]`.
pub(crate) fn map_state(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = parse_args(
        args,
        &["output", "keys", "entries-per-key", "records", "state"],
        &["output", "keys", "entries-per-key", "records"],
    )?;
    crate::jobs::location_args(&a, &["output"])?;
    let positive = |key: &str| -> Result<u64> {
        match a[key].parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(Error::argument(
                &format!("--{key}"),
                format!("expected a positive integer, got {:?}", a[key]),
            )),
        }
    };
    let (keys, entries, records) = (
        positive("keys")?,
        positive("entries-per-key")?,
        positive("records")?,
    );
    let keyed = env
        .generate_sequence(0, records - 1)
        .key_by(move |n: &u64| n % keys);
    let job = |list| MapStateJob {
        keys,
        entries,
        map: MapStateDescriptor::new("entries"),
        list,
    };
    let out = match a.get("state").map(String::as_str) {
        None | Some("map") => keyed.process_function(job(None)),
        Some("list") => keyed.process_function(job(Some(ListStateDescriptor::new("elements")))),
        Some("whole-map") => keyed.process_function(WholeMapJob { keys, entries }),
        Some("window") => keyed
            .window(GlobalWindows::create())
            .trigger(EventTimeTrigger::create())
            .process(WindowCount),
        Some("whole-list") => keyed.process_function(WholeListJob { keys }),
        Some(other) => {
            return Err(Error::argument(
                "--state",
                format!("expected map, list, whole-map, window or whole-list, got {other:?}"),
            ));
        }
    };
    out.sink_to_file(&a["output"]);
    Ok(())
}
