//! State TTL through a keyed process operator on the heap and on a byte-level backend, with the
//! TTL clock moved forward by hand: what a function sees of expired values, when their time
//! starts again, how the heap removes them without an access, and the refusal of a state
//! restored with its time to live switched.

use std::sync::Arc;

use floe_state::HashMapStateBackend;

use super::tests_clock::advance;
use super::*;
use crate::checkpoint::{Keyed, KeyedStateInit};
use crate::operators::tests::TimedSink;
use crate::operators::window::AggregateFunction;
use crate::operators::{Collector, KeyFn, KeyedContext, KeyedProcessFunction, KeyedProcessOperator, Op};
use crate::state::entries::{
    AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
    ValueStateDescriptor,
};
use crate::time::TaskTime;
use crate::time::timers::Timers;

/// What a read sees of a key: value (0: none), map entries, list elements, reducing sum (0:
/// none), aggregate (0: none), whether the map is empty.
type Reading = (u64, (u64, (u64, (u64, (u64, bool)))));
type Seen = (String, Reading);

const WRITE: u64 = 0;
const READ: u64 = 1;
const TTL: Duration = Duration::from_millis(1_000);

struct Last;

impl AggregateFunction<u64> for Last {
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, v: u64, acc: &mut u64) {
        *acc = v;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, _: u64) -> u64 {
        a
    }
}

/// Per record `(key, WRITE)`: writes every state kind of the key; `(key, READ)`: emits what it
/// sees of them.
struct Expiring {
    value: ValueStateDescriptor<u64>,
    map: MapStateDescriptor<u64, u64>,
    list: ListStateDescriptor<u64>,
    sum: ReducingStateDescriptor<u64>,
    last: AggregatingStateDescriptor<u64, Last>,
}

impl Expiring {
    fn new(ttl: Option<StateTtlConfig>) -> Self {
        let mut e = Expiring {
            value: ValueStateDescriptor::new("v"),
            map: MapStateDescriptor::new("m"),
            list: ListStateDescriptor::new("l"),
            sum: ReducingStateDescriptor::new("s", |a, b| a + b),
            last: AggregatingStateDescriptor::new("a", Last),
        };
        if let Some(ttl) = ttl {
            e.value = e.value.enable_time_to_live(ttl);
            e.map = e.map.enable_time_to_live(ttl);
            e.list = e.list.enable_time_to_live(ttl);
            e.sum = e.sum.enable_time_to_live(ttl);
            e.last = e.last.enable_time_to_live(ttl);
        }
        e
    }
}

impl KeyedProcessFunction<String, (String, u64), Seen> for Expiring {
    type State = ();

    fn process_element(
        &self,
        (key, op): (String, u64),
        ctx: &mut KeyedContext<'_, String, ()>,
        out: &mut dyn Collector<Seen>,
    ) {
        if op == WRITE {
            ctx.value_state(&self.value).update(7);
            ctx.map_state(&self.map).put(1, 10);
            ctx.list_state(&self.list).add(5);
            ctx.reducing_state(&self.sum).add(2);
            ctx.aggregating_state(&self.last).add(3);
            return;
        }
        let value = ctx.value_state(&self.value).value().unwrap_or(0);
        let map = ctx.map_state(&self.map).entries().len() as u64;
        let list = ctx.list_state(&self.list).get().len() as u64;
        let sum = ctx.reducing_state(&self.sum).get().unwrap_or(0);
        let last = ctx.aggregating_state(&self.last).get().unwrap_or(0);
        let empty = ctx.map_state(&self.map).is_empty();
        out.collect((key, (value, (map, (list, (sum, (last, empty)))))));
    }
}

type ExpiringOp = KeyedProcessOperator<(String, u64), String, Seen, Expiring>;

fn operator(state: Keyed<String, ()>, ttl: Option<StateTtlConfig>) -> (ExpiringOp, TimedSink<Seen>) {
    let time = Arc::new(TaskTime::new(Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<(String, u64), String> = Arc::new(|r: &(String, u64)| r.0.clone());
    let op = KeyedProcessOperator::new(
        key,
        Arc::new(Expiring::new(ttl)),
        state,
        Timers::default(),
        time,
        Box::new(sink.clone()),
    );
    (op, sink)
}

fn fresh(backend: bool) -> Keyed<String, ()> {
    let init = backend.then(|| KeyedStateInit::Backend(Box::new(HashMapStateBackend::new(0..128))));
    Keyed::new(init, 0..128, 128).expect("state")
}

/// Reads `key` and returns what the function saw (and no failure).
fn read(op: &mut ExpiringOp, sink: &TimedSink<Seen>, key: &str) -> Reading {
    op.collect((key.to_string(), READ));
    assert_eq!(op.failure(), None);
    sink.records().last().expect("a read emits").1.1
}

const ALL: Reading = (7, (1, (1, (2, (3, false)))));
const NONE: Reading = (0, (0, (0, (0, (0, true)))));

#[test]
fn expired_values_are_never_seen_on_either_backend() {
    let ttl = StateTtlConfig::new_builder(TTL).build();
    for backend in [false, true] {
        let (mut op, sink) = operator(fresh(backend), Some(ttl));
        op.collect(("a".into(), WRITE));
        assert_eq!(read(&mut op, &sink, "a"), ALL, "backend {backend}");
        advance(600);
        op.collect(("b".into(), WRITE));
        assert_eq!(read(&mut op, &sink, "a"), ALL, "600 ms of 1,000: live");
        advance(500);
        assert_eq!(
            read(&mut op, &sink, "a"),
            NONE,
            "1,100 ms since its write: expired"
        );
        assert_eq!(read(&mut op, &sink, "b"), ALL, "b was written 500 ms ago");
        // A write after the expiry starts afresh: the reducing state does not add to the old sum.
        op.collect(("a".into(), WRITE));
        assert_eq!(read(&mut op, &sink, "a"), ALL);
    }
}

#[test]
fn a_read_starts_the_time_again_only_with_on_read_and_write() {
    let on_read = StateTtlConfig::new_builder(TTL)
        .update_ttl_on_read_and_write()
        .build();
    let on_write = StateTtlConfig::new_builder(TTL).build();
    for backend in [false, true] {
        for (ttl, after) in [(on_read, ALL), (on_write, NONE)] {
            let (mut op, sink) = operator(fresh(backend), Some(ttl));
            op.collect(("a".into(), WRITE));
            advance(600);
            assert_eq!(read(&mut op, &sink, "a"), ALL);
            advance(600);
            assert_eq!(
                read(&mut op, &sink, "a"),
                after,
                "1,200 ms after the write, 600 after a read: {:?}, backend {backend}",
                ttl.update_type()
            );
            advance(1_001);
            assert_eq!(read(&mut op, &sink, "a"), NONE);
        }
    }
}

#[test]
fn an_expired_value_not_cleaned_up_is_returned_once_if_the_state_says_so() {
    let ttl = StateTtlConfig::new_builder(TTL)
        .return_expired_if_not_cleaned_up()
        .disable_cleanup_in_background()
        .build();
    for backend in [false, true] {
        let (mut op, sink) = operator(fresh(backend), Some(ttl));
        op.collect(("a".into(), WRITE));
        advance(1_100);
        let (value, (map, (list, (sum, (last, _))))) = read(&mut op, &sink, "a");
        assert_eq!(
            (value, map, list, sum, last),
            (7, 1, 1, 2, 3),
            "expired but still there: returned, backend {backend}"
        );
        assert_eq!(read(&mut op, &sink, "a"), NONE, "the read removed them");
    }
}

/// The heap backend removes expired keys a few per access, without their keys being read again,
/// and a full snapshot leaves expired values out.
#[test]
fn the_heap_drops_expired_keys_a_few_per_access_and_snapshots_leave_them_out() {
    let ttl = StateTtlConfig::new_builder(TTL).build();
    let (mut op, _) = operator(fresh(false), Some(ttl));
    for k in 0..100 {
        op.collect((format!("old-{k}"), WRITE));
    }
    advance(1_100);
    let Keyed::Heap {
        entries,
        max_parallelism,
        ..
    } = &op.state
    else {
        panic!("heap")
    };
    assert!(entries.keys_per_state().values().all(|&n| n == 100));
    let mut snapshot = HashMapStateBackend::new(0..128);
    entries.write(&mut snapshot, *max_parallelism).unwrap();
    assert!(snapshot.is_empty(), "{:?}", snapshot.state_names());
    // 5 keys (a map's: 5 entries or keys) per access: 100 expired keys are gone after 40
    // writes of one live key.
    for _ in 0..40 {
        op.collect(("live".into(), WRITE));
    }
    let Keyed::Heap { entries, .. } = &op.state else {
        panic!("heap")
    };
    let kept = entries.keys_per_state();
    assert_eq!(kept.len(), 5);
    assert!(
        kept.values().all(|&n| n == 1),
        "only the live key is left: {kept:?}"
    );
}

/// A state checkpointed without a time to live and declared with one (and the other way round)
/// fails the task, naming the state, on either backend.
#[test]
fn a_state_restored_with_its_time_to_live_switched_is_refused() {
    let ttl = StateTtlConfig::new_builder(TTL).build();
    for (before, after, message) in [
        (
            None,
            Some(ttl),
            "declared with a time to live but was checkpointed without one",
        ),
        (
            Some(ttl),
            None,
            "declared without a time to live but was checkpointed with one",
        ),
    ] {
        let (mut op, _) = operator(fresh(false), before);
        op.collect(("a".into(), WRITE));
        let Keyed::Heap {
            entries,
            max_parallelism,
            ..
        } = &op.state
        else {
            panic!("heap")
        };
        let mut snapshot = HashMapStateBackend::new(0..128);
        entries.write(&mut snapshot, *max_parallelism).unwrap();
        for backend in [false, true] {
            let init = if backend {
                KeyedStateInit::Backend(Box::new(snapshot.clone()))
            } else {
                KeyedStateInit::Heap(snapshot.clone())
            };
            let (mut restored, _) = operator(Keyed::new(Some(init), 0..128, 128).unwrap(), after);
            restored.collect(("a".into(), READ));
            let e = restored.failure().expect("refused");
            assert!(
                e.contains("\"v\"") && e.contains(message),
                "backend {backend}: {e}"
            );
        }
    }
}
