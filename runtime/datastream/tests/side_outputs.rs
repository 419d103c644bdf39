//! Side outputs end to end in one process: a process function and a keyed process function emit
//! records of another type next to their main output, and a window sends its late elements to a
//! side output instead of dropping them; each stream is read with `get_side_output` through an
//! exchange and equals a reference computed here.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::{counted, lines, run, temp_dir, url};
use floe_datastream::{
    Collector, KeyedContext, KeyedProcessFunction, OutputTag, ProcessContext, ProcessFunction,
    StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy,
};

/// Evens on the main output, odd numbers as text on the side.
#[derive(Clone)]
struct Split(OutputTag<String>);

impl ProcessFunction<u64, u64> for Split {
    fn process_element(&self, n: u64, ctx: &mut ProcessContext<'_>, out: &mut dyn Collector<u64>) {
        if n.is_multiple_of(2) {
            out.collect(n)
        } else {
            ctx.output(&self.0, format!("odd {n}"))
        }
    }
}

/// Sums per key on the main output; each key's first element also goes to the side output.
#[derive(Clone)]
struct FirstSeen(OutputTag<u64>);

impl KeyedProcessFunction<u64, u64, (u64, u64)> for FirstSeen {
    /// Whether the key was seen, and its sum.
    type State = (bool, u64);
    fn process_element(
        &self,
        n: u64,
        ctx: &mut KeyedContext<'_, u64, (bool, u64)>,
        out: &mut dyn Collector<(u64, u64)>,
    ) {
        if !ctx.state().0 {
            ctx.output(&self.0, n);
        }
        let state = ctx.state();
        *state = (true, state.1 + n);
        let (key, sum) = (*ctx.key(), ctx.state().1);
        out.collect((key, sum));
    }
}

#[tokio::test]
async fn process_functions_emit_to_side_outputs_read_by_their_own_streams() {
    let (evens, odds, sums, firsts) = (
        temp_dir("side-evens"),
        temp_dir("side-odds"),
        temp_dir("side-sums"),
        temp_dir("side-firsts"),
    );
    let mut env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let odd = OutputTag::<String>::new("odd");
    let main = env.generate_sequence(0, 3_999).process(Split(odd.clone()));
    main.map(|n: u64| n.to_string()).sink_to_file(&url(&evens));
    // The side output's consumer has another parallelism: it reads through an exchange.
    main.get_side_output(&odd)
        .map(|s: String| s)
        .set_parallelism(3)
        .sink_to_file(&url(&odds));
    let first = OutputTag::<u64>::new("first");
    let keyed = env
        .generate_sequence(0, 3_999)
        .key_by(|n: &u64| n % 10)
        .process_function(FirstSeen(first.clone()));
    keyed.sink_to_file(&url(&sums));
    keyed.get_side_output(&first).sink_to_file(&url(&firsts));
    run(&env.build().expect("builds"), 256, Some(Duration::from_millis(2))).await;
    assert_eq!(
        lines(&evens),
        counted((0..4_000u64).filter(|n| n % 2 == 0).map(|n| n.to_string()))
    );
    assert_eq!(
        lines(&odds),
        counted((0..4_000u64).filter(|n| n % 2 == 1).map(|n| format!("odd {n}")))
    );
    // A running sum per element; each key's largest is the sum of all its numbers.
    let mut largest: BTreeMap<u64, u64> = BTreeMap::new();
    let mut emitted = 0;
    for (line, n) in lines(&sums) {
        let (k, sum) = line.split_once('\t').expect("key and sum");
        let e = largest.entry(k.parse().expect("key")).or_default();
        *e = (*e).max(sum.parse().expect("sum"));
        emitted += n;
    }
    assert_eq!(emitted, 4_000);
    let want: BTreeMap<u64, u64> = (0..10)
        .map(|k| (k, (0..4_000u64).filter(|m| m % 10 == k).sum()))
        .collect();
    assert_eq!(largest, want);
    // Each key's first element: the smallest of its numbers that its subtask saw first. Each
    // source subtask reads a contiguous half, so a key's first is in one of the two halves.
    let got = lines(&firsts);
    assert_eq!(got.len(), 10, "one first element per key: {got:?}");
    for (line, n) in &got {
        let v: u64 = line.parse().expect("a number");
        assert!(*n == 1 && (v < 10 || (2_000..2_010).contains(&v)), "{line}");
    }
}

const N: u64 = 20_480;

/// Event `n`: timestamp `n * 10` ms; in the last of the source's batches (4096 numbers each)
/// every seventh is 100 s behind, long after the watermark passed its window.
fn timestamp(n: u64) -> i64 {
    let t = (n * 10) as i64;
    if is_late(n) { t - 100_000 } else { t }
}

fn is_late(n: u64) -> bool {
    n >= 16_384 && n.is_multiple_of(7)
}

#[tokio::test]
async fn a_window_sends_late_elements_to_its_side_output_instead_of_dropping_them() {
    let (counts, late_out) = (temp_dir("late-counts"), temp_dir("late-side"));
    let mut env = StreamExecutionEnvironment::from_configuration(&BTreeMap::from([(
        "pipeline.auto-watermark-interval".to_string(),
        "2 ms".to_string(),
    )]))
    .expect("configuration");
    env.set_parallelism(2);
    let late = OutputTag::<(u64, i64)>::new("late");
    let events = env
        .generate_sequence(0, N - 1)
        .set_parallelism(1)
        .map(|n: u64| {
            // A batch takes at least 16 ms, so the watermark moves on between batches.
            if n.is_multiple_of(1_024) {
                std::thread::sleep(Duration::from_millis(4));
            }
            (n % 3, timestamp(n))
        })
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|e: &(u64, i64), _| e.1),
        );
    let windows = events
        .key_by(|e: &(u64, i64)| e.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .side_output_late_data(&late)
        .reduce(|a, b| (a.0, a.1.max(b.1)));
    windows.map(|e: (u64, i64)| e.0).sink_to_file(&url(&counts));
    windows.get_side_output(&late).sink_to_file(&url(&late_out));
    run(&env.build().expect("builds"), 512, Some(Duration::from_millis(1))).await;
    let want_late = counted(
        (0..N)
            .filter(|n| is_late(*n))
            .map(|n| format!("{}\t{}", n % 3, timestamp(n))),
    );
    assert!(!want_late.is_empty());
    assert_eq!(lines(&late_out), want_late);
    // One result per key and window of the elements that were not late.
    let windows: std::collections::BTreeSet<(u64, i64)> = (0..N)
        .filter(|n| !is_late(*n))
        .map(|n| (n % 3, timestamp(n).div_euclid(1_000)))
        .collect();
    let mut want = HashMap::new();
    for (k, _) in windows {
        *want.entry(k.to_string()).or_default() += 1;
    }
    assert_eq!(lines(&counts), want);
}
