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
    let f = ContentsFn {
        f: Arc::new(Describe),
        evictor: None,
    };
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
    let f = ContentsFn {
        f: Arc::new(Describe),
        evictor: Some(CountEvictor::of(2)),
    };
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
