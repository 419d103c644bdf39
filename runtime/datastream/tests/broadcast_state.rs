//! The broadcast state pattern end to end in one process: a stream of rules is broadcast to every
//! subtask of an operator that applies them to another stream, keyed (with timers) and not; the
//! output equals a reference computed here from the inputs.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{counted, lines, run, temp_dir, url};
use floe_datastream::{
    BroadcastProcessFunction, Collector, KeyedBroadcastProcessFunction, KeyedContext, MapState,
    ProcessContext, RuntimeMode, StreamExecutionEnvironment, WatermarkStrategy,
};

const N: u64 = 10_000;
const KEYS: u64 = 5;

fn factor(key: u64) -> u64 {
    key * 10 + 3
}

/// Multiplies each number by its key's factor, once the rules are in: numbers wait in their key's
/// state for an event-time timer at their timestamp, which fires only when the watermark of both
/// inputs passed it; the rules' input reaches that only after its last rule. Each rule is also
/// acknowledged by every subtask that stored it.
#[derive(Clone)]
struct ApplyRules;

impl KeyedBroadcastProcessFunction<u64, (u64, u64), (u64, u64), (u64, u64)> for ApplyRules {
    type State = Vec<u64>;
    type Key = u64;
    type Value = u64;

    fn process_element(
        &self,
        (_, n): (u64, u64),
        _: &MapState<u64, u64>,
        ctx: &mut KeyedContext<'_, u64, Vec<u64>>,
        _: &mut dyn Collector<(u64, u64)>,
    ) {
        ctx.state().push(n);
        let at = ctx.timestamp().expect("timed");
        ctx.register_event_time_timer(at);
    }

    fn process_broadcast_element(
        &self,
        (key, factor): (u64, u64),
        rules: &mut MapState<u64, u64>,
        out: &mut dyn Collector<(u64, u64)>,
    ) {
        rules.put(key, factor);
        out.collect((u64::MAX - key, factor));
    }

    fn on_timer(
        &self,
        timestamp: i64,
        rules: &MapState<u64, u64>,
        ctx: &mut KeyedContext<'_, u64, Vec<u64>>,
        out: &mut dyn Collector<(u64, u64)>,
    ) {
        let key = *ctx.key();
        // A missing rule shows as factor 0: the reference never has it.
        let f = rules.get(&key).copied().unwrap_or(0);
        let due: Vec<u64> = ctx
            .state()
            .iter()
            .copied()
            .filter(|n| *n as i64 <= timestamp)
            .collect();
        ctx.state().retain(|n| *n as i64 > timestamp);
        for n in due {
            out.collect((key, n * f));
        }
    }
}

#[tokio::test]
async fn a_keyed_broadcast_process_function_applies_the_rules_every_subtask_holds() {
    for mode in [RuntimeMode::Streaming, RuntimeMode::Batch] {
        let out = temp_dir(&format!("broadcast-keyed-{mode:?}"));
        let mut env = StreamExecutionEnvironment::from_configuration(&BTreeMap::from([(
            "pipeline.auto-watermark-interval".to_string(),
            "5 ms".to_string(),
        )]))
        .expect("configuration");
        env.set_parallelism(2).set_runtime_mode(mode);
        let rules = env
            .from_collection((0..KEYS).map(|k| (k, factor(k))).collect())
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|_, _| 0),
            );
        env.generate_sequence(0, N - 1)
            .map(|n: u64| (n % KEYS, n))
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::for_monotonous_timestamps()
                    .with_timestamp_assigner(|e: &(u64, u64), _| e.1 as i64),
            )
            .key_by(|e: &(u64, u64)| e.0)
            .connect_broadcast(&rules)
            .process(ApplyRules)
            .sink_to_file(&url(&out));
        run(&env.build().expect("builds"), 512, Some(Duration::from_millis(2))).await;
        let mut want: Vec<String> = (0..N)
            .map(|n| format!("{}\t{}", n % KEYS, n * factor(n % KEYS)))
            .collect();
        // Both subtasks acknowledge each rule.
        for k in 0..KEYS {
            want.push(format!("{}\t{}", u64::MAX - k, factor(k)));
            want.push(format!("{}\t{}", u64::MAX - k, factor(k)));
        }
        assert_eq!(lines(&out), counted(want), "{mode:?}");
    }
}

/// The same rules over a stream that is not keyed.
#[derive(Clone)]
struct Multiply;

impl BroadcastProcessFunction<u64, (u64, u64), u64> for Multiply {
    type Key = u64;
    type Value = u64;

    fn process_element(
        &self,
        n: u64,
        rules: &MapState<u64, u64>,
        _: &mut ProcessContext<'_>,
        out: &mut dyn Collector<u64>,
    ) {
        out.collect(n * rules.get(&(n % KEYS)).copied().unwrap_or(0));
    }

    fn process_broadcast_element(
        &self,
        (key, factor): (u64, u64),
        rules: &mut MapState<u64, u64>,
        _: &mut dyn Collector<u64>,
    ) {
        rules.put(key, factor);
    }
}

#[tokio::test]
async fn in_batch_every_rule_is_in_before_the_other_input_is_processed() {
    let out = temp_dir("broadcast-batch");
    let mut env = StreamExecutionEnvironment::new();
    env.set_parallelism(2).set_runtime_mode(RuntimeMode::Batch);
    let rules = env.from_collection((0..KEYS).map(|k| (k, factor(k))).collect());
    env.generate_sequence(0, N - 1)
        .connect_broadcast(&rules)
        .process(Multiply)
        .sink_to_file(&url(&out));
    run(&env.build().expect("builds"), 512, Some(Duration::from_millis(2))).await;
    let want = counted((0..N).map(|n| (n * factor(n % KEYS)).to_string()));
    assert_eq!(lines(&out), want);
}
