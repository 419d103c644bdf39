//! The window operator on the keyed process operator, fed records, watermarks and processing
//! time by hand; expectations worked out from the window definitions.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::checkpoint::Keyed;
use crate::operators::tests::TimedSink;
use crate::operators::{KeyFn, KeyedProcessOperator, Op};
use crate::time::timers::Timers;
use crate::time::{MAX_WATERMARK, TaskTime, TimeEvent};

type Rec = (String, u64);

struct Harness<O: Data> {
    op: Box<dyn Op<Rec>>,
    sink: TimedSink<O>,
    time: Arc<TaskTime>,
    metrics: Arc<crate::types::TaskMetrics>,
}

impl<O: Data> Harness<O> {
    fn new<W: WindowFn<String, Rec, O>>(
        assigner: WindowAssigner,
        trigger: Trigger,
        lateness: i64,
        f: W,
    ) -> Self {
        let time = Arc::new(TaskTime::new(Duration::from_millis(200)));
        let sink = TimedSink::new(time.clone());
        let key: KeyFn<Rec, String> = Arc::new(|r: &Rec| r.0.clone());
        let window = WindowOperator {
            assigner,
            trigger,
            allowed_lateness: lateness,
            f,
            late: None,
            _types: PhantomData,
        };
        let op = KeyedProcessOperator::new(
            key,
            Arc::new(window),
            Keyed::new(None, 0..128, 128).expect("heap"),
            Timers::default(),
            time.clone(),
            Box::new(sink.clone()),
        )
        .ending_processing_time();
        let metrics = Arc::new(crate::types::TaskMetrics::default());
        let op = op.with_metrics(metrics.clone());
        Harness {
            op: Box::new(op),
            sink,
            time,
            metrics,
        }
    }

    fn element(&mut self, key: &str, value: u64, ts: i64) {
        self.time.set_timestamp(ts);
        self.op.collect((key.to_string(), value));
    }

    fn watermark(&mut self, w: i64) {
        self.op.on_time(TimeEvent::Watermark(w));
    }

    /// Output as (timestamp, record), sorted (firings of one watermark come in key order).
    fn output(&self) -> Vec<(i64, O)>
    where
        O: Ord,
    {
        self.sink.records()
    }
}

fn sum() -> ReduceFn<impl Fn(Rec, Rec) -> Rec + Send + Sync + 'static, Direct> {
    ReduceFn(Arc::new(|a: Rec, b: Rec| (a.0, a.1 + b.1)), Direct)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn rec(k: &str, v: u64) -> Rec {
    (k.to_string(), v)
}

#[test]
fn tumbling_event_time_reduce_fires_each_window_once_at_its_end() {
    let mut h = Harness::new(
        TumblingEventTimeWindows::of(ms(10)),
        EventTimeTrigger::create(),
        0,
        sum(),
    );
    h.element("a", 1, 1);
    h.element("b", 10, 3);
    h.element("a", 2, 9);
    h.element("a", 4, 10);
    h.watermark(8);
    assert!(h.output().is_empty(), "window [0,10) still open at watermark 8");
    h.watermark(9);
    assert_eq!(h.output(), vec![(9, rec("a", 3)), (9, rec("b", 10))]);
    // Too late: window [0, 10) is gone (no allowed lateness).
    h.element("a", 100, 5);
    h.watermark(MAX_WATERMARK);
    assert_eq!(
        h.output(),
        vec![(9, rec("a", 3)), (9, rec("b", 10)), (19, rec("a", 4))],
        "the late element is dropped, [10,20) fires at end of input"
    );
}

#[test]
fn allowed_lateness_fires_again_for_each_late_element_then_drops() {
    let mut h = Harness::new(
        TumblingEventTimeWindows::of(ms(10)),
        EventTimeTrigger::create(),
        5,
        sum(),
    );
    h.element("a", 1, 2);
    h.watermark(9);
    h.element("a", 2, 4); // late, within lateness: fires at once with the new total
    h.watermark(13);
    h.element("a", 4, 6); // still within: cleanup is at 9 + 5 = 14
    h.watermark(14);
    h.element("a", 8, 7); // past cleanup: dropped
    h.watermark(MAX_WATERMARK);
    assert_eq!(
        h.output(),
        vec![(9, rec("a", 1)), (9, rec("a", 3)), (9, rec("a", 7))]
    );
    let dropped = h
        .metrics
        .late_records_dropped
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        dropped, 1,
        "numLateRecordsDropped counts the one element no window took"
    );
}

struct Avg;
impl AggregateFunction<Rec> for Avg {
    type Acc = (u64, u64);
    type Out = u64;
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, value: Rec, acc: &mut (u64, u64)) {
        acc.0 += value.1;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> u64 {
        acc.0 / acc.1.max(1)
    }
    fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

/// Emits (key, window start, window end, element count, sum) for every evaluation.
struct Describe;
impl ProcessWindowFunction<String, Rec, (String, (i64, (i64, (u64, u64))))> for Describe {
    fn process(
        &self,
        key: &String,
        ctx: &WindowContext,
        elements: &[Rec],
        out: &mut dyn Collector<(String, (i64, (i64, (u64, u64))))>,
    ) {
        let sum = elements.iter().map(|e| e.1).sum();
        out.collect((
            key.clone(),
            (ctx.window.start, (ctx.window.end, (elements.len() as u64, sum))),
        ));
    }
}

type Described = (String, (i64, (i64, (u64, u64))));

fn described(k: &str, start: i64, end: i64, n: u64, sum: u64) -> (i64, Described) {
    (end - 1, (k.to_string(), (start, (end, (n, sum)))))
}

#[test]
fn sliding_windows_aggregate_every_window_an_element_is_in() {
    let avg = AggregateFn(Arc::new(Avg), Direct);
    let mut h = Harness::new(
        SlidingEventTimeWindows::of(ms(10), ms(5)),
        EventTimeTrigger::create(),
        0,
        avg,
    );
    h.element("a", 10, 1);
    h.element("a", 20, 6);
    h.element("a", 60, 12);
    h.watermark(MAX_WATERMARK);
    // [-5,5): 10; [0,10): 15; [5,15): 40; [10,20): 60.
    assert_eq!(h.output(), vec![(4, 10), (9, 15), (14, 40), (19, 60)]);
}

#[test]
fn session_windows_merge_when_elements_come_closer_than_the_gap() {
    let f = ContentsFn::new(Arc::new(Describe), None);
    let mut h = Harness::new(
        EventTimeSessionWindows::with_gap(ms(10)),
        EventTimeTrigger::create(),
        0,
        f,
    );
    h.element("a", 1, 0);
    h.element("a", 2, 25);
    h.element("b", 5, 3);
    // [14,24) touches neither [0,10) nor [25,35); [20,30) bridges [14,24) and [25,35).
    h.element("a", 4, 14);
    h.element("a", 8, 20);
    h.watermark(MAX_WATERMARK);
    assert_eq!(
        h.output(),
        vec![
            described("a", 0, 10, 1, 1),
            described("b", 3, 13, 1, 5),
            described("a", 14, 35, 3, 14)
        ],
        "a's sessions: 0..10 alone, 14..35 merged from three"
    );
}

#[test]
fn count_windows_and_evictors() {
    // count_window(3): global windows, purging count trigger.
    let mut h = Harness::new(
        GlobalWindows::create(),
        PurgingTrigger::of(CountTrigger::of(3)),
        0,
        sum(),
    );
    for i in 1..=7 {
        h.element("k", i, i as i64);
    }
    h.watermark(MAX_WATERMARK);
    let values: Vec<u64> = h.output().into_iter().map(|r| r.1.1).collect();
    assert_eq!(values, vec![6, 15], "1+2+3, 4+5+6; 7 never completes a count");

    // A count evictor keeps the last 2 elements of each firing (non-purging count trigger).
    let f = ContentsFn::new(Arc::new(Describe), Some(CountEvictor::of(2)));
    let mut h = Harness::new(GlobalWindows::create(), CountTrigger::of(2), 0, f);
    for i in 1..=4 {
        h.element("k", i, i as i64);
    }
    let sums: Vec<u64> = h.output().into_iter().map(|r| r.1.1.1.1.1).collect();
    assert_eq!(
        sums,
        vec![3, 7],
        "(1,2) then (3,4): the evictor dropped 1 and 2 the second time"
    );
}

#[test]
fn continuous_trigger_fires_early_and_reduce_then_process_sees_one_result() {
    let f = ReduceFn(
        Arc::new(|a: Rec, b: Rec| (a.0, a.1 + b.1)),
        ThenProcess(Arc::new(Describe), PhantomData),
    );
    let mut h = Harness::new(
        TumblingEventTimeWindows::of(ms(100)),
        ContinuousEventTimeTrigger::of(ms(30)),
        0,
        f,
    );
    h.element("a", 1, 5);
    h.element("a", 2, 40);
    h.watermark(30);
    h.element("a", 4, 70);
    h.watermark(60);
    h.watermark(MAX_WATERMARK);
    let firings: Vec<(u64, u64)> = h.output().into_iter().map(|r| r.1.1.1.1).collect();
    assert_eq!(
        firings,
        vec![(1, 3), (1, 7), (1, 7), (1, 7)],
        "every 30 ms of event time (30: 1+2, 60 and 90: 1+2+4) and at the end (99); one reduced \
         element each"
    );
}

#[test]
fn processing_time_windows_fire_on_the_clock() {
    let mut h = Harness::new(
        TumblingProcessingTimeWindows::of(ms(1_000)),
        ProcessingTimeTrigger::create(),
        0,
        sum(),
    );
    // The elements go into the window of the clock when they come: that one or a later one.
    let now = crate::time::now_ms();
    let end = now - now.rem_euclid(1_000) + 1_000;
    h.element("a", 1, MIN_WATERMARK);
    h.element("a", 2, MIN_WATERMARK);
    h.op.on_time(TimeEvent::ProcessingTime(end - 2));
    h.watermark(end + 10_000);
    assert!(
        h.output().is_empty(),
        "not before its end; a watermark does not fire it"
    );
    h.op.on_time(TimeEvent::ProcessingTime(end + 1_005));
    let got = h.output();
    // The two elements may straddle a second boundary: one or two windows, every element once.
    assert_eq!(got.iter().map(|r| r.1.1).sum::<u64>(), 3, "{got:?}");
}

/// A bounded job's last processing-time windows: the end of input (the MAX watermark, which
/// comes before the final checkpoint's barrier) fires them, each once; Flink drops them.
#[test]
fn processing_time_windows_fire_when_the_input_ends() {
    let mut h = Harness::new(
        TumblingProcessingTimeWindows::of(Duration::from_secs(3_600)),
        ProcessingTimeTrigger::create(),
        0,
        sum(),
    );
    for (key, value) in [("a", 1), ("b", 4), ("a", 2)] {
        h.element(key, value, MIN_WATERMARK);
    }
    h.op.on_time(TimeEvent::ProcessingTime(crate::time::now_ms()));
    assert!(h.output().is_empty(), "an hour's window is open");
    h.watermark(MAX_WATERMARK);
    let mut got: Vec<(String, u64)> = h.output().into_iter().map(|r| r.1).collect();
    got.sort();
    // Both elements of a key may straddle an hour's boundary: a key's windows, every element once.
    let per_key = |k: &str| got.iter().filter(|r| r.0 == k).map(|r| r.1).sum::<u64>();
    assert_eq!((per_key("a"), per_key("b")), (3, 4), "{got:?}");
    h.op.on_time(TimeEvent::ProcessingTime(i64::MAX / 2));
    assert_eq!(h.output().len(), got.len(), "fired once: the windows are gone");
}

/// At the end of input the timer service is quiesced: a continuous trigger's next firing, which
/// each firing registers, is dropped instead of firing for ever.
#[test]
fn a_continuous_processing_time_trigger_ends_with_the_input() {
    let mut h = Harness::new(
        TumblingProcessingTimeWindows::of(Duration::from_secs(3_600)),
        ContinuousProcessingTimeTrigger::of(ms(1)),
        0,
        sum(),
    );
    h.element("a", 5, MIN_WATERMARK);
    h.watermark(MAX_WATERMARK);
    let got = h.output();
    assert!(
        !got.is_empty() && got.iter().all(|r| r.1 == ("a".to_string(), 5)),
        "the pending interval and the end fire the window's contents: {got:?}"
    );
    assert!(got.len() <= 2, "no firing registered at the end: {got:?}");
}

/// A user-defined trigger: fires and purges a window at every third element, and fires what is
/// left at the window's end; its count is the window's trigger state.
struct EveryThirdOrEnd;

impl WindowTrigger for EveryThirdOrEnd {
    fn on_element(&self, _: i64, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> TriggerResult {
        if ctx.state().is_none() {
            ctx.register_event_time_timer(window.max_timestamp());
        }
        let n = ctx.state().unwrap_or(0) + 1;
        if n == 3 {
            ctx.set_state(Some(0));
            TriggerResult::FIRE_AND_PURGE
        } else {
            ctx.set_state(Some(n));
            TriggerResult::CONTINUE
        }
    }

    fn on_event_time(&self, time: i64, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> TriggerResult {
        if time == window.max_timestamp() && ctx.state().is_some_and(|n| n > 0) {
            TriggerResult::FIRE
        } else {
            TriggerResult::CONTINUE
        }
    }
}

#[test]
fn a_user_defined_trigger_fires_by_its_own_rules_with_its_state_kept_per_window() {
    let mut h = Harness::new(
        TumblingEventTimeWindows::of(ms(10)),
        Trigger::custom(EveryThirdOrEnd),
        0,
        sum(),
    );
    for (v, ts) in [(1, 0), (2, 1), (4, 2), (8, 3), (16, 4)] {
        h.element("a", v, ts);
    }
    h.element("b", 100, 5);
    // The third element of a's window fired (1 + 2 + 4; a window's result carries its last
    // millisecond) and purged it.
    assert_eq!(h.output(), vec![(9, rec("a", 7))]);
    h.watermark(9);
    // At the end: a's two elements since the purge, and b's one.
    assert_eq!(
        h.output(),
        vec![(9, rec("a", 7)), (9, rec("a", 24)), (9, rec("b", 100))]
    );
    // Session windows need a trigger that merges: refused when the job is built.
    let env = crate::StreamExecutionEnvironment::new();
    env.from_collection(vec![rec("a", 1)])
        .key_by(|r: &Rec| r.0.clone())
        .window(crate::EventTimeSessionWindows::with_gap(ms(10)))
        .trigger(Trigger::custom(EveryThirdOrEnd))
        .reduce(|a, b| (a.0, a.1 + b.1))
        .print();
    let err = env.build().expect_err("refused").to_string();
    assert!(err.contains("WindowTrigger::can_merge"), "{err}");
}

type SessionOp = KeyedProcessOperator<
    Rec,
    String,
    Described,
    WindowOperator<String, Rec, Described, ContentsFn<Describe, Rec>>,
>;

/// Session windows (gap 10) evaluated by [`Describe`] over their whole contents.
fn sessions(
    state: Keyed<String, Windows<functions::Contents<Rec>>>,
    timers: Timers<String>,
) -> (SessionOp, TimedSink<Described>, Arc<TaskTime>) {
    let time = Arc::new(TaskTime::new(Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<Rec, String> = Arc::new(|r: &Rec| r.0.clone());
    let window = WindowOperator {
        assigner: EventTimeSessionWindows::with_gap(ms(10)),
        trigger: EventTimeTrigger::create(),
        allowed_lateness: 0,
        f: ContentsFn::new(Arc::new(Describe), None),
        late: None,
        _types: PhantomData,
    };
    let op = KeyedProcessOperator::new(
        key,
        Arc::new(window),
        state,
        timers,
        time.clone(),
        Box::new(sink.clone()),
    );
    (op, sink, time)
}

/// 12 keys, timestamps spread so that some sessions stand alone and others merge from elements
/// arriving on either side of them.
fn session_input() -> Vec<(Rec, i64)> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..3_000u64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((format!("k{}", i % 12), i), (x % 3_000) as i64)
        })
        .collect()
}

/// The sessions of `input` worked out directly: per key, timestamps sorted and split where the
/// next one is more than the gap after the last (an element at `t` is the window `[t, t + gap)`,
/// and windows that overlap or touch merge).
fn session_reference(input: &[(Rec, i64)], gap: i64) -> Vec<(i64, Described)> {
    let mut by_key: std::collections::BTreeMap<&str, Vec<(i64, u64)>> = Default::default();
    for ((k, v), ts) in input {
        by_key.entry(k).or_default().push((*ts, *v));
    }
    let mut out = Vec::new();
    for (k, mut elements) in by_key {
        elements.sort();
        let (mut start, mut last, mut n, mut sum) = (elements[0].0, elements[0].0, 0, 0);
        for (ts, v) in elements {
            if ts > last + gap {
                out.push(described(k, start, last + gap, n, sum));
                (start, n, sum) = (ts, 0, 0);
            }
            last = ts;
            n += 1;
            sum += v;
        }
        out.push(described(k, start, last + gap, n, sum));
    }
    out.sort();
    out
}

fn session_state(backend: bool) -> Keyed<String, Windows<functions::Contents<Rec>>> {
    let init = backend.then(|| {
        crate::checkpoint::KeyedStateInit::Backend(Box::new(floe_state::HashMapStateBackend::new(0..128)))
    });
    Keyed::new(init, 0..128, 128).expect("state")
}

/// A window's contents are per-entry state of its key on a byte-level backend and inline on the
/// heap: through a snapshot in the middle of the input and a restore split over two key-group
/// ranges (a rescale 1 -> 2) into the other kind of state, every session is evaluated once with
/// exactly its elements.
#[tokio::test]
async fn session_contents_survive_a_snapshot_and_a_rescale_on_both_backends() {
    use crate::checkpoint::{KeyedStateInit, restore_timers};
    let dir = std::env::temp_dir().join(format!("floe-window-contents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store =
        floe_storage::ObjectStore::open(&format!("file://{}", dir.display()), &Default::default()).unwrap();
    let input = session_input();
    let reference = session_reference(&input, 10);
    assert!(
        reference.len() > 100 && reference.iter().any(|r| r.1.1.1.1.0 > 3),
        "the input makes many sessions, some of several elements"
    );
    let (first, rest) = input.split_at(1_300);
    for backend in [false, true] {
        let (mut op, _, time) = sessions(session_state(backend), Timers::default());
        for (r, ts) in first {
            time.set_timestamp(*ts);
            op.collect(r.clone());
        }
        let prepared = op.state.prepare_snapshot_with_timers(1, &op.timers).unwrap();
        let target = floe_state::SnapshotTarget {
            store: store.clone(),
            dir: format!("chk-1/{backend}"),
            shared: "shared".into(),
        };
        let snapshot = prepared.upload(&target).await.unwrap();
        let mut out = Vec::new();
        for range in [0..64u32, 64..128] {
            let part = floe_state::HashMapStateBackend::restore(
                &store,
                std::slice::from_ref(&snapshot),
                range.clone(),
            )
            .await
            .unwrap();
            assert_eq!(
                part.state_names()
                    .iter()
                    .any(|n| n.contains(functions::CONTENTS_STATE)),
                backend,
                "the contents are entries of their own state on a backend, inline on the heap: {:?}",
                part.state_names()
            );
            // Restored into the other kind of state (Flink's savepoints move between heap and
            // RocksDB): inline contents become entries at their next element, entries stay.
            let init = if !backend {
                KeyedStateInit::Backend(Box::new(part))
            } else {
                KeyedStateInit::Heap(part)
            };
            let timers = restore_timers::<String>(Some(&init)).unwrap();
            let (mut op, sink, time) = sessions(Keyed::new(Some(init), range.clone(), 128).unwrap(), timers);
            for (r, ts) in rest {
                let kg = crate::data::key_group_for_hash(crate::data::key_hash(&r.0, &mut Vec::new()), 128);
                if range.contains(&kg) {
                    time.set_timestamp(*ts);
                    op.collect(r.clone());
                }
            }
            op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
            assert_eq!(op.failure(), None);
            out.extend(sink.records());
            // Every window fired and was cleaned up: no contents are left behind.
            if let Keyed::Heap {
                entries,
                max_parallelism,
                ..
            } = &op.state
            {
                let mut left = floe_state::HashMapStateBackend::new(0..128);
                entries.write(&mut left, *max_parallelism).unwrap();
                assert!(left.is_empty(), "contents left: {:?}", left.state_names());
            }
        }
        out.sort();
        let missing: Vec<_> = reference.iter().filter(|r| !out.contains(r)).take(5).collect();
        let extra: Vec<_> = out.iter().filter(|r| !reference.contains(r)).take(5).collect();
        assert!(
            out == reference,
            "backend {backend}: {} sessions, {} expected; missing {missing:?}, not expected {extra:?}",
            out.len(),
            reference.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// As Flink's evicting window operator, what an evictor evicts leaves the window's state: a
/// global window with a count trigger and a count evictor holds at most the evictor's count
/// between firings, however many elements went through it (before, every element stayed), inline
/// on the heap and as entries on a byte-level backend.
#[tokio::test]
async fn evicted_elements_leave_the_window_state() {
    for backend in [false, true] {
        let time = Arc::new(TaskTime::new(Duration::from_millis(200)));
        let sink = TimedSink::new(time.clone());
        let key: KeyFn<Rec, String> = Arc::new(|r: &Rec| r.0.clone());
        let window = WindowOperator {
            assigner: GlobalWindows::create(),
            trigger: CountTrigger::of(2),
            allowed_lateness: 0,
            f: ContentsFn::new(Arc::new(Describe), Some(CountEvictor::of(3))),
            late: None,
            _types: PhantomData,
        };
        let mut op = KeyedProcessOperator::new(
            key,
            Arc::new(window),
            session_state(backend),
            Timers::default(),
            time.clone(),
            Box::new(sink.clone()),
        );
        for i in 1..=1_000 {
            time.set_timestamp(i as i64);
            op.collect(rec("k", i));
        }
        let sums: Vec<u64> = sink.records().into_iter().map(|r| r.1.1.1.1.1).collect();
        assert_eq!(sums.len(), 500, "a firing every second element");
        assert_eq!(sums[..2], [1 + 2, 2 + 3 + 4], "the last three of each firing");
        assert_eq!(sums[499], 998 + 999 + 1000);
        // What the window holds, as its snapshot has it.
        let prepared = op.state.prepare_snapshot_with_timers(1, &op.timers).unwrap();
        let store = floe_storage::ObjectStore::open("memory://evicted", &Default::default()).unwrap();
        let target = floe_state::SnapshotTarget {
            store: store.clone(),
            dir: format!("chk-1/{backend}"),
            shared: "shared".into(),
        };
        let snapshot = prepared.upload(&target).await.unwrap();
        let held = floe_state::HashMapStateBackend::restore(&store, std::slice::from_ref(&snapshot), 0..128)
            .await
            .unwrap();
        let entries = held
            .state_names()
            .into_iter()
            .filter(|n| n.contains(functions::CONTENTS_STATE))
            .map(|n| held.entries(n).count())
            .sum::<usize>();
        let inline = match &op.state {
            Keyed::Heap { map, .. } => match map.get("k") {
                Some(Some(Windows(windows))) => match &windows[0].acc {
                    Some(functions::Contents::Inline(elements)) => elements.len(),
                    other => panic!("inline contents on the heap: {other:?}"),
                },
                other => panic!("the key's windows: {other:?}"),
            },
            Keyed::Store { .. } => 0,
        };
        assert_eq!(
            entries + inline,
            3,
            "elements the window holds after 1,000 (backend: {backend})"
        );
    }
}
