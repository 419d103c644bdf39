//! Per-entry state through a keyed process operator, on the heap and on a byte-level backend,
//! checked against a reference computed here with plain maps: every state kind, a snapshot in
//! the middle, and a restore split over two key-group ranges (a rescale 1 -> 2).

use std::collections::BTreeMap;
use std::sync::Arc;

use floe_state::{HashMapStateBackend, SnapshotTarget};
use floe_storage::ObjectStore;

use super::*;
use crate::checkpoint::{Keyed, KeyedStateInit, restore_timers};
use crate::operators::tests::TimedSink;
use crate::operators::{Collector, KeyFn, KeyedContext, KeyedProcessFunction, KeyedProcessOperator, Op};
use crate::time::timers::Timers;
use crate::time::{MAX_WATERMARK, TaskTime, TimeEvent};

/// (sum, count) of the elements: an [`AggregateFunction`] whose result is the mean.
struct Mean;

impl AggregateFunction<u64> for Mean {
    type Acc = (u64, u64);
    type Out = u64;
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, v: u64, acc: &mut (u64, u64)) {
        acc.0 += v;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> u64 {
        acc.0 / acc.1.max(1)
    }
    fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

/// What a key ends with: its map's entries (sorted), list, reducing sum, mean, last value, and
/// whether the map is empty.
type Summary = (String, (Vec<(u64, u64)>, (Vec<u64>, (u64, (u64, (u64, bool))))));

/// Per record `n` of a key: map entry `n % 7` += n (removed when n is a multiple of 11), list
/// append, reducing sum, mean, last value. A key's summary comes out at the end of event time.
struct Journal {
    map: MapStateDescriptor<u64, u64>,
    list: ListStateDescriptor<u64>,
    sum: ReducingStateDescriptor<u64>,
    mean: AggregatingStateDescriptor<u64, Mean>,
    last: ValueStateDescriptor<u64>,
}

impl Journal {
    fn new() -> Self {
        Journal {
            map: MapStateDescriptor::new("m"),
            list: ListStateDescriptor::new("l"),
            sum: ReducingStateDescriptor::new("s", |a, b| a + b),
            mean: AggregatingStateDescriptor::new("a", Mean),
            last: ValueStateDescriptor::new("v"),
        }
    }
}

impl KeyedProcessFunction<String, (String, u64), Summary> for Journal {
    type State = ();

    fn process_element(
        &self,
        (_, n): (String, u64),
        ctx: &mut KeyedContext<'_, String, ()>,
        _: &mut dyn Collector<Summary>,
    ) {
        ctx.register_event_time_timer(MAX_WATERMARK);
        let mut map = ctx.map_state(&self.map);
        if n % 11 == 0 {
            map.remove(&(n % 7));
        } else {
            let before = map.get(&(n % 7)).unwrap_or(0);
            assert_eq!(map.contains(&(n % 7)), before > 0);
            map.put(n % 7, before + n);
        }
        ctx.list_state(&self.list).add(n);
        ctx.reducing_state(&self.sum).add(n);
        ctx.aggregating_state(&self.mean).add(n);
        ctx.value_state(&self.last).update(n);
    }

    fn on_timer(&self, _: i64, ctx: &mut KeyedContext<'_, String, ()>, out: &mut dyn Collector<Summary>) {
        let mut entries = ctx.map_state(&self.map).entries();
        entries.sort();
        let empty = ctx.map_state(&self.map).is_empty();
        assert_eq!(ctx.map_state(&self.map).keys().len(), entries.len());
        let list = ctx.list_state(&self.list).get();
        let sum = ctx.reducing_state(&self.sum).get().unwrap_or(0);
        let mean = ctx.aggregating_state(&self.mean).get().unwrap_or(0);
        let last = ctx.value_state(&self.last).value().unwrap_or(0);
        out.collect((ctx.key().clone(), (entries, (list, (sum, (mean, (last, empty)))))));
        // Cleared: a second firing (none comes) would see nothing.
        ctx.map_state(&self.map).clear();
        ctx.list_state(&self.list).clear();
        ctx.reducing_state(&self.sum).clear();
        ctx.aggregating_state(&self.mean).clear();
        ctx.value_state(&self.last).clear();
        assert!(ctx.map_state(&self.map).is_empty());
        assert!(ctx.list_state(&self.list).get().is_empty());
        assert_eq!(ctx.value_state(&self.last).value(), None);
    }
}

type JournalOp = KeyedProcessOperator<(String, u64), String, Summary, Journal>;

fn operator(state: Keyed<String, ()>, timers: Timers<String>) -> (JournalOp, TimedSink<Summary>) {
    let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<(String, u64), String> = Arc::new(|r: &(String, u64)| r.0.clone());
    let op = KeyedProcessOperator::new(
        key,
        Arc::new(Journal::new()),
        state,
        timers,
        time,
        Box::new(sink.clone()),
    );
    (op, sink)
}

/// Records 0..n over 13 keys.
fn records(n: u64) -> Vec<(String, u64)> {
    (0..n).map(|i| (format!("key-{}", i % 13), i)).collect()
}

/// The summaries computed directly from the records.
fn reference(records: &[(String, u64)]) -> BTreeMap<String, Summary> {
    let mut per_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (k, n) in records {
        per_key.entry(k.clone()).or_default().push(*n);
    }
    per_key
        .into_iter()
        .map(|(k, ns)| {
            let mut map: BTreeMap<u64, u64> = BTreeMap::new();
            for &n in &ns {
                if n % 11 == 0 {
                    map.remove(&(n % 7));
                } else {
                    *map.entry(n % 7).or_default() += n;
                }
            }
            let sum: u64 = ns.iter().sum();
            let mean = sum / ns.len() as u64;
            let last = *ns.last().unwrap_or(&0);
            let entries: Vec<(u64, u64)> = map.into_iter().collect();
            let empty = entries.is_empty();
            (k.clone(), (k, (entries, (ns, (sum, (mean, (last, empty)))))))
        })
        .collect()
}

fn summaries(sink: &TimedSink<Summary>) -> BTreeMap<String, Summary> {
    sink.records()
        .into_iter()
        .map(|(_, s)| (s.0.clone(), s))
        .collect()
}

fn fresh(backend: bool) -> Keyed<String, ()> {
    let init = backend.then(|| KeyedStateInit::Backend(Box::new(HashMapStateBackend::new(0..128))));
    Keyed::new(init, 0..128, 128).expect("state")
}

#[test]
fn every_state_kind_matches_the_reference_on_both_backends() {
    let input = records(2_000);
    for backend in [false, true] {
        let (mut op, sink) = operator(fresh(backend), Timers::default());
        for r in &input {
            op.collect(r.clone());
        }
        op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
        assert_eq!(op.failure(), None);
        assert_eq!(summaries(&sink), reference(&input), "backend: {backend}");
        // Every state was cleared at the end: no key is left, not even for its `()` value.
        if let Keyed::Heap {
            map,
            entries,
            max_parallelism,
            ..
        } = &op.state
        {
            assert_eq!(map.len(), 0, "keys whose value is the default");
            let mut left = HashMapStateBackend::new(0..128);
            entries.write(&mut left, *max_parallelism).unwrap();
            assert!(left.is_empty(), "{:?}", left.state_names());
        }
    }
}

/// A snapshot after half of the input, uploaded and restored into two key-group halves (a
/// rescale 1 -> 2) that take the rest of the input: together they end with the reference, on
/// either backend.
#[tokio::test]
async fn per_entry_state_survives_a_snapshot_and_a_rescale() {
    let dir = std::env::temp_dir().join(format!("floe-entries-rescale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
    let input = records(3_000);
    let (first, rest) = input.split_at(1_400);
    for backend in [false, true] {
        let (mut op, _) = operator(fresh(backend), Timers::default());
        for r in first {
            op.collect(r.clone());
        }
        let prepared = op.state.prepare_snapshot_with_timers(1, &op.timers).unwrap();
        let target = SnapshotTarget {
            store: store.clone(),
            dir: format!("chk-1/{backend}"),
            shared: "shared".into(),
        };
        let snapshot = prepared.upload(&target).await.unwrap();
        // Records after the snapshot are not in it.
        op.collect(("key-0".into(), 1));
        let mut out = BTreeMap::new();
        for range in [0..64u32, 64..128] {
            let part = HashMapStateBackend::restore(&store, std::slice::from_ref(&snapshot), range.clone())
                .await
                .unwrap();
            assert!(
                part.state_names().iter().any(|n| n.starts_with("map:")),
                "{:?}",
                part.state_names()
            );
            let init = if backend {
                KeyedStateInit::Backend(Box::new(part))
            } else {
                KeyedStateInit::Heap(part)
            };
            let timers = restore_timers::<String>(Some(&init)).unwrap();
            let (mut op, sink) = operator(Keyed::new(Some(init), range.clone(), 128).unwrap(), timers);
            for r in rest {
                let kg = crate::data::key_group_for_hash(crate::data::key_hash(&r.0, &mut Vec::new()), 128);
                if range.contains(&kg) {
                    op.collect(r.clone());
                }
            }
            op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
            assert_eq!(op.failure(), None);
            out.extend(summaries(&sink));
        }
        assert_eq!(out, reference(&input), "backend: {backend}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One name declared as two kinds is two states; one name declared with two types of one kind is
/// an error that fails the task and names the state.
#[test]
fn a_state_declared_with_two_types_fails_the_task_naming_it() {
    struct Twice;
    impl KeyedProcessFunction<String, (String, u64), u64> for Twice {
        type State = ();
        fn process_element(
            &self,
            _: (String, u64),
            ctx: &mut KeyedContext<'_, String, ()>,
            _: &mut dyn Collector<u64>,
        ) {
            ctx.map_state(&MapStateDescriptor::<u64, u64>::new("x")).put(1, 1);
            ctx.list_state(&ListStateDescriptor::<u64>::new("x")).add(1);
            ctx.map_state(&MapStateDescriptor::<u64, String>::new("x"))
                .put(1, "y".into());
        }
    }
    let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<(String, u64), String> = Arc::new(|r: &(String, u64)| r.0.clone());
    let mut op = KeyedProcessOperator::new(
        key,
        Arc::new(Twice),
        fresh(false),
        Timers::default(),
        time,
        Box::new(sink),
    );
    op.collect(("k".into(), 1));
    let e = op.failure().expect("a failure");
    assert!(e.contains("\"map:x\"") && e.contains("different types"), "{e}");
}

#[test]
#[should_panic(expected = "expected 1 to 200 bytes")]
fn a_descriptor_name_too_long_is_refused() {
    let _ = MapStateDescriptor::<u64, u64>::new(&"n".repeat(201));
}
