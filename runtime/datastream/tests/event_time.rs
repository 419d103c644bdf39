//! Event time end to end in one process: timestamps and watermarks cross real exchanges between
//! subtasks (pipelined in STREAMING, blocking files in BATCH), windows fire on the combined
//! watermark, and the output equals a reference computed here from the same events.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use common::{run, temp_dir};
use floe_datastream::{
    AggregateFunction, Collector, EventTimeSessionWindows, ProcessWindowFunction, RuntimeMode,
    SlidingEventTimeWindows, StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy,
    WindowContext,
};

const EVENTS: u64 = 30_000;
const KEYS: u64 = 7;

/// Event `n`: its key and its timestamp, up to 40 ms out of order (ms since 0).
fn event(n: u64) -> (String, i64) {
    let jitter = (n.wrapping_mul(0x9e37_79b9) >> 7) % 41;
    (format!("k{}", n % KEYS), (n * 10) as i64 - jitter as i64)
}

/// Emits `(key, (window start, count))`.
#[derive(Clone)]
struct Count;
impl ProcessWindowFunction<String, (String, i64), (String, (i64, u64))> for Count {
    fn process(
        &self,
        key: &String,
        ctx: &WindowContext,
        elements: &[(String, i64)],
        out: &mut dyn Collector<(String, (i64, u64))>,
    ) {
        out.collect((key.clone(), (ctx.window.start, elements.len() as u64)));
    }
}

/// Counts with an accumulator (the incremental path).
#[derive(Clone)]
struct Counter;
impl AggregateFunction<(String, i64)> for Counter {
    type Acc = (String, u64);
    type Out = (String, u64);
    fn create_accumulator(&self) -> (String, u64) {
        (String::new(), 0)
    }
    fn add(&self, value: (String, i64), acc: &mut (String, u64)) {
        acc.0 = value.0;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(String, u64)) -> (String, u64) {
        acc.clone()
    }
    fn merge(&self, a: (String, u64), b: (String, u64)) -> (String, u64) {
        (a.0, a.1 + b.1)
    }
}

/// Adds the window's start to an aggregated count.
#[derive(Clone)]
struct WithStart;
impl ProcessWindowFunction<String, (String, u64), (String, (i64, u64))> for WithStart {
    fn process(
        &self,
        _: &String,
        ctx: &WindowContext,
        elements: &[(String, u64)],
        out: &mut dyn Collector<(String, (i64, u64))>,
    ) {
        for (k, n) in elements {
            out.collect((k.clone(), (ctx.window.start, *n)));
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Tumbling,
    Sliding,
    Session,
}

fn job(kind: Kind, mode: RuntimeMode, parallelism: u32, output: &Path) -> floe_datastream::BuiltJob {
    let mut env = StreamExecutionEnvironment::from_configuration(&BTreeMap::from([(
        "pipeline.auto-watermark-interval".to_string(),
        "5 ms".to_string(),
    )]))
    .expect("configuration");
    env.set_parallelism(parallelism).set_runtime_mode(mode);
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(40))
        .with_timestamp_assigner(|e: &(String, i64), _| e.1);
    // Each source subtask reads a contiguous share of the events, so their event times are far
    // apart: only the minimum over channels keeps the later windows from firing early.
    let events = env
        .generate_sequence(0, EVENTS - 1)
        .map(event)
        .assign_timestamps_and_watermarks(strategy)
        // One more exchange before the keyed one: watermarks cross both.
        .rebalance()
        .map(|e: (String, i64)| e);
    let events = match kind {
        // Seconds 2, 7, 12, ... have no events: sessions end there.
        Kind::Session => events.filter(|e: &(String, i64)| (e.1 / 1000) % 5 != 2),
        _ => events,
    };
    let keyed = events.key_by(|e: &(String, i64)| e.0.clone());
    let windowed = match kind {
        Kind::Tumbling => keyed
            .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
            .process(Count),
        Kind::Sliding => keyed
            .window(SlidingEventTimeWindows::of(
                Duration::from_secs(2),
                Duration::from_millis(500),
            ))
            .aggregate_process(Counter, WithStart),
        Kind::Session => keyed
            .window(EventTimeSessionWindows::with_gap(Duration::from_millis(300)))
            .process(Count),
    };
    windowed.sink_to_file(&format!("file://{}", output.display()));
    env.build().expect("job builds")
}

/// The reference, from the events alone: counts per key and window start.
fn reference(kind: Kind) -> HashMap<(String, i64), u64> {
    let mut out = HashMap::new();
    match kind {
        Kind::Tumbling => {
            for n in 0..EVENTS {
                let (k, ts) = event(n);
                *out.entry((k, ts.div_euclid(1000) * 1000)).or_default() += 1;
            }
        }
        Kind::Sliding => {
            for n in 0..EVENTS {
                let (k, ts) = event(n);
                let mut start = ts.div_euclid(500) * 500;
                while start > ts - 2000 {
                    *out.entry((k.clone(), start)).or_default() += 1;
                    start -= 500;
                }
            }
        }
        Kind::Session => {
            // Sessions per key: sort the key's timestamps, cut where the gap is more than 300 ms
            // (a window [t, t + 300) touching the next element's merges with it).
            let mut by_key: HashMap<String, Vec<i64>> = HashMap::new();
            for n in 0..EVENTS {
                let (k, ts) = event(n);
                if (ts / 1000) % 5 != 2 {
                    by_key.entry(k).or_default().push(ts);
                }
            }
            for (k, mut times) in by_key {
                times.sort_unstable();
                let mut start = times[0];
                let mut count = 0;
                let mut last = times[0];
                for t in times {
                    if t > last + 300 {
                        out.insert((k.clone(), start), count);
                        start = t;
                        count = 0;
                    }
                    count += 1;
                    last = t;
                }
                out.insert((k, start), count);
            }
        }
    }
    out
}

fn read(dir: &Path) -> HashMap<(String, i64), u64> {
    let mut got = HashMap::new();
    for e in std::fs::read_dir(dir).expect("output") {
        let path = e.expect("entry").path();
        for line in std::fs::read_to_string(&path).expect("read").lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let key = (f[0].to_string(), f[1].parse().expect("start"));
            let previous = got.insert(key.clone(), f[2].parse().expect("count"));
            assert!(previous.is_none(), "window {key:?} fired twice");
        }
    }
    got
}

async fn check(kind: Kind, mode: RuntimeMode, parallelism: u32) {
    let output = temp_dir(&format!("event-time-{kind:?}-{mode:?}-{parallelism}"));
    let job = job(kind, mode, parallelism, &output);
    // Small buffers: watermarks and records cross many buffer boundaries.
    run(&job, 512, Some(Duration::from_millis(2))).await;
    let got = read(&output);
    let want = reference(kind);
    assert_eq!(
        got.len(),
        want.len(),
        "{kind:?} {mode:?} p={parallelism}: windows"
    );
    assert_eq!(got, want, "{kind:?} {mode:?} p={parallelism}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tumbling_windows_over_pipelined_exchanges_equal_the_reference() {
    check(Kind::Tumbling, RuntimeMode::Streaming, 3).await;
    check(Kind::Tumbling, RuntimeMode::Streaming, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_and_session_windows_equal_the_reference() {
    check(Kind::Sliding, RuntimeMode::Streaming, 2).await;
    check(Kind::Session, RuntimeMode::Streaming, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_in_batch_over_blocking_exchanges_equal_the_reference() {
    check(Kind::Tumbling, RuntimeMode::Batch, 3).await;
    check(Kind::Session, RuntimeMode::Batch, 2).await;
}
