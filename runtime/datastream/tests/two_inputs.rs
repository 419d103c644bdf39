//! Operators with more than one input, end to end in one process: a union, connected streams
//! with co-map, co-flat-map and a keyed co-process function, the interval join and the window
//! join and co-group. Inputs of different parallelism cross real exchanges into one task, whose
//! gates are read as one; every output equals a reference computed here from the inputs alone.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{counted, lines, run, temp_dir, url};
use floe_datastream::{
    BuiltJob, Collector, KeyedCoProcessFunction, KeyedContext, RuntimeMode, StreamExecutionEnvironment,
    TumblingEventTimeWindows, WatermarkStrategy, WindowContext,
};

fn env(mode: RuntimeMode, parallelism: u32) -> StreamExecutionEnvironment {
    let mut env = StreamExecutionEnvironment::from_configuration(&BTreeMap::from([(
        "pipeline.auto-watermark-interval".to_string(),
        "5 ms".to_string(),
    )]))
    .expect("configuration");
    env.set_parallelism(parallelism).set_runtime_mode(mode);
    env
}

async fn run_job(job: &BuiltJob) {
    // Small buffers: records, watermarks and ends of input cross many buffer boundaries.
    run(job, 512, Some(Duration::from_millis(2))).await;
}

#[tokio::test]
async fn a_union_reads_every_stream_once_whatever_their_parallelism() {
    let out = temp_dir("union-plain");
    let env = env(RuntimeMode::Streaming, 2);
    let a = env.generate_sequence(0, 9_999);
    let b = env.generate_sequence(10_000, 19_999).set_parallelism(3);
    let c = env.from_collection(vec![100_000u64, 100_001]);
    // A stream unioned with itself is read twice (as in Flink).
    a.union(&[&b, &c, &a])
        .map(|n: u64| n.to_string())
        .sink_to_file(&url(&out));
    let job = env.build().expect("builds");
    let union_vertex = job
        .job_graph()
        .vertices()
        .iter()
        .position(|v| v.name.starts_with("Map"))
        .expect("the map after the union is a vertex of its own");
    let inputs = job
        .job_graph()
        .inputs(floe_scheduler::job_graph::VertexIndex(union_vertex as u32));
    assert_eq!(
        inputs.len(),
        4,
        "one input edge per unioned stream, none for the union itself"
    );
    run_job(&job).await;
    let want = counted(
        (0..10_000u64)
            .chain(0..10_000)
            .chain(10_000..20_000)
            .chain([100_000, 100_001])
            .map(|n| n.to_string()),
    );
    assert_eq!(lines(&out), want);
}

#[tokio::test]
async fn a_keyed_union_in_batch_reduces_all_streams_together() {
    let out = temp_dir("union-keyed-batch");
    let env = env(RuntimeMode::Batch, 2);
    let a = env.generate_sequence(1, 5_000).map(|n: u64| (n % 7, n));
    let b = env
        .generate_sequence(5_001, 12_000)
        .set_parallelism(3)
        .map(|n: u64| (n % 7, n));
    a.union(&[&b])
        .key_by(|p: &(u64, u64)| p.0)
        .reduce(|x, y| (x.0, x.1 + y.1))
        .sink_to_file(&url(&out));
    run_job(&env.build().expect("builds")).await;
    let mut sums = BTreeMap::new();
    for n in 1..=12_000u64 {
        *sums.entry(n % 7).or_insert(0u64) += n;
    }
    let want = counted(sums.iter().map(|(k, s)| format!("{k}\t{s}")));
    assert_eq!(lines(&out), want);
}

#[tokio::test]
async fn connected_streams_co_map_and_co_flat_map_each_input_with_its_own_function() {
    let out = temp_dir("co-map");
    let env = env(RuntimeMode::Streaming, 2);
    let numbers = env.generate_sequence(0, 4_999);
    let words = env
        .from_collection((0..300u64).map(|i| format!("w{i}")).collect())
        .rebalance();
    let mapped = numbers
        .connect(&words)
        .map(|n: u64| format!("n{n}"), |w: String| format!("s{w}"));
    let flat = numbers.connect(&words).flat_map(
        |n: u64, out: &mut dyn Collector<String>| {
            if n.is_multiple_of(2) {
                out.collect(format!("even{n}"));
                out.collect(format!("again{n}"));
            }
        },
        |w: String, out: &mut dyn Collector<String>| out.collect(w.to_uppercase()),
    );
    mapped.union(&[&flat]).sink_to_file(&url(&out));
    run_job(&env.build().expect("builds")).await;
    let mut want = Vec::new();
    for n in 0..5_000u64 {
        want.push(format!("n{n}"));
        if n % 2 == 0 {
            want.push(format!("even{n}"));
            want.push(format!("again{n}"));
        }
    }
    for i in 0..300 {
        want.push(format!("sw{i}"));
        want.push(format!("W{i}"));
    }
    assert_eq!(lines(&out), counted(want));
}

/// Orders wait in their customer's state until the customer is known; then each goes out with
/// the customer's name. Which input is ahead differs by subtask and run.
#[derive(Clone)]
struct Enrich;

impl KeyedCoProcessFunction<u64, (u64, String), (u64, u64), (String, u64)> for Enrich {
    /// The customer's name (empty until known) and the orders waiting for it.
    type State = (String, Vec<u64>);

    fn process_element1(
        &self,
        customer: (u64, String),
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(String, u64)>,
    ) {
        let state = ctx.state();
        state.0 = customer.1;
        for order in state.1.drain(..) {
            out.collect((state.0.clone(), order));
        }
    }

    fn process_element2(
        &self,
        order: (u64, u64),
        ctx: &mut KeyedContext<'_, u64, Self::State>,
        out: &mut dyn Collector<(String, u64)>,
    ) {
        let state = ctx.state();
        if state.0.is_empty() {
            state.1.push(order.1);
        } else {
            out.collect((state.0.clone(), order.1));
        }
    }
}

fn enrich_job(mode: RuntimeMode, out: &Path) -> BuiltJob {
    let env = env(mode, 2);
    // Customers only arrive after a detour through a map of another parallelism, so orders are
    // often first.
    let customers = env
        .generate_sequence(0, 999)
        .map(|i: u64| (i, format!("c{i}")))
        .rebalance()
        .map(|c: (u64, String)| c)
        .set_parallelism(3);
    let orders = env.generate_sequence(0, 19_999).map(|n: u64| (n % 1_000, n));
    customers
        .connect(&orders)
        .key_by(|c: &(u64, String)| c.0, |o: &(u64, u64)| o.0)
        .process(Enrich)
        .sink_to_file(&url(out));
    env.build().expect("builds")
}

#[tokio::test]
async fn a_keyed_co_process_function_shares_each_keys_state_between_its_inputs() {
    for mode in [RuntimeMode::Streaming, RuntimeMode::Batch] {
        let out = temp_dir(&format!("co-process-{mode:?}"));
        run_job(&enrich_job(mode, &out)).await;
        let want = counted((0..20_000u64).map(|n| format!("c{}\t{n}", n % 1_000)));
        assert_eq!(lines(&out), want, "{mode:?}");
    }
}

const LEFT: u64 = 3_000;
const RIGHT: u64 = 4_000;
const KEYS: u64 = 13;

fn left(n: u64) -> (u64, i64) {
    (n % KEYS, (n * 10) as i64)
}

fn right(m: u64) -> (u64, i64) {
    (m % KEYS, (m * 7 + 3) as i64)
}

type Timed = floe_datastream::DataStream<(u64, i64)>;

/// Both inputs timed by their second field; each source subtask reads a contiguous range, so
/// the subtasks' event times are far apart and only the minimum over all channels of both inputs
/// keeps the join from dropping or cleaning up too early.
fn timed_inputs(env: &StreamExecutionEnvironment) -> (Timed, Timed) {
    let strategy =
        || WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|e: &(u64, i64), _| e.1);
    let l = env
        .generate_sequence(0, LEFT - 1)
        .map(left)
        .assign_timestamps_and_watermarks(strategy());
    let r = env
        .generate_sequence(0, RIGHT - 1)
        .set_parallelism(3)
        .map(right)
        .assign_timestamps_and_watermarks(strategy());
    (l, r)
}

#[tokio::test]
async fn the_interval_join_pairs_exactly_the_elements_within_the_interval() {
    for mode in [RuntimeMode::Streaming, RuntimeMode::Batch] {
        let out = temp_dir(&format!("interval-join-{mode:?}"));
        let env = env(mode, 2);
        let (l, r) = timed_inputs(&env);
        l.key_by(|e: &(u64, i64)| e.0)
            .interval_join(&r.key_by(|e: &(u64, i64)| e.0))
            .between(-20, 30)
            .process(
                |a: &(u64, i64), b: &(u64, i64), out: &mut dyn Collector<(i64, i64)>| out.collect((a.1, b.1)),
            )
            .sink_to_file(&url(&out));
        run_job(&env.build().expect("builds")).await;
        let mut want = Vec::new();
        for n in 0..LEFT {
            let (k, t) = left(n);
            for m in 0..RIGHT {
                let (k2, t2) = right(m);
                if k == k2 && t - 20 <= t2 && t2 <= t + 30 {
                    want.push(format!("{t}\t{t2}"));
                }
            }
        }
        assert!(want.len() > 1_000, "the reference has pairs: {}", want.len());
        assert_eq!(lines(&out), counted(want), "{mode:?}");
    }
}

#[tokio::test]
async fn the_window_join_and_co_group_meet_elements_of_one_key_and_window() {
    for mode in [RuntimeMode::Streaming, RuntimeMode::Batch] {
        let (joined, grouped) = (
            temp_dir(&format!("window-join-{mode:?}")),
            temp_dir(&format!("co-group-{mode:?}")),
        );
        let env = env(mode, 2);
        let (l, r) = timed_inputs(&env);
        let window = || TumblingEventTimeWindows::of(Duration::from_millis(100));
        l.join(&r)
            .where_key(|e: &(u64, i64)| e.0)
            .equal_to(|e: &(u64, i64)| e.0)
            .window(window())
            .apply(|a: &(u64, i64), b: &(u64, i64)| (a.1, b.1))
            .sink_to_file(&url(&joined));
        l.co_group(&r)
            .where_key(|e: &(u64, i64)| e.0)
            .equal_to(|e: &(u64, i64)| e.0)
            .window(window())
            .apply(
                |k: &u64,
                 w: &WindowContext,
                 a: &[(u64, i64)],
                 b: &[(u64, i64)],
                 out: &mut dyn Collector<(u64, (i64, (u64, u64)))>| {
                    out.collect((*k, (w.window.start, (a.len() as u64, b.len() as u64))))
                },
            )
            .sink_to_file(&url(&grouped));
        run_job(&env.build().expect("builds")).await;
        let (mut pairs, mut groups) = (Vec::new(), BTreeMap::<(u64, i64), (u64, u64)>::new());
        for n in 0..LEFT {
            let (k, t) = left(n);
            groups.entry((k, t.div_euclid(100) * 100)).or_default().0 += 1;
            for m in 0..RIGHT {
                let (k2, t2) = right(m);
                if k == k2 && t.div_euclid(100) == t2.div_euclid(100) {
                    pairs.push(format!("{t}\t{t2}"));
                }
            }
        }
        for m in 0..RIGHT {
            let (k, t) = right(m);
            groups.entry((k, t.div_euclid(100) * 100)).or_default().1 += 1;
        }
        assert_eq!(lines(&joined), counted(pairs), "join, {mode:?}");
        let groups = groups
            .iter()
            .map(|((k, s), (a, b))| format!("{k}\t{s}\t{a}\t{b}"));
        assert_eq!(lines(&grouped), counted(groups), "co-group, {mode:?}");
    }
}
