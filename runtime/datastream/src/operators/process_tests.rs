use super::*;
use crate::operators::tests::TimedSink;

type CountOp = KeyedProcessOperator<(String, i64), String, (String, u64), CountUntil>;

/// Counts per key and emits the count when event time passes the key's first record + 10.
struct CountUntil;

impl KeyedProcessFunction<String, (String, i64), (String, u64)> for CountUntil {
    type State = u64;
    fn process_element(
        &self,
        _: (String, i64),
        ctx: &mut KeyedContext<'_, String, u64>,
        _: &mut dyn Collector<(String, u64)>,
    ) {
        if *ctx.state() == 0 {
            let at = ctx.timestamp().expect("timestamped") + 10;
            ctx.register_event_time_timer(at);
        }
        *ctx.state() += 1;
    }
    fn on_timer(
        &self,
        _: i64,
        ctx: &mut KeyedContext<'_, String, u64>,
        out: &mut dyn Collector<(String, u64)>,
    ) {
        out.collect((ctx.key().clone(), *ctx.state()));
        ctx.clear_state();
    }
}

fn operator(
    state: Keyed<String, u64>,
    timers: Timers<String>,
) -> (CountOp, TimedSink<(String, u64)>, Arc<TaskTime>) {
    let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<(String, i64), String> = Arc::new(|r: &(String, i64)| r.0.clone());
    let op = KeyedProcessOperator::new(
        key,
        Arc::new(CountUntil),
        state,
        timers,
        time.clone(),
        Box::new(sink.clone()),
    );
    (op, sink, time)
}

fn feed(
    op: &mut KeyedProcessOperator<(String, i64), String, (String, u64), CountUntil>,
    time: &TaskTime,
    k: &str,
    ts: i64,
) {
    time.set_timestamp(ts);
    op.collect((k.to_string(), ts));
}

#[test]
fn event_time_timers_fire_in_order_with_the_timer_time_and_the_watermark_after_them() {
    let (mut op, sink, time) = operator(Keyed::new(None, 0..128, 128).unwrap(), Timers::default());
    feed(&mut op, &time, "b", 5);
    feed(&mut op, &time, "a", 3);
    feed(&mut op, &time, "a", 4);
    feed(&mut op, &time, "b", 20);
    op.on_time(TimeEvent::Watermark(14));
    feed(&mut op, &time, "a", 16);
    op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
    assert_eq!(
        sink.records(),
        vec![
            (13, ("a".to_string(), 2)),
            (15, ("b".to_string(), 2)),
            (26, ("a".to_string(), 1)),
        ]
    );
    assert_eq!(
        sink.watermarks(),
        vec![14, MAX_WATERMARK],
        "each after the timers it fired"
    );
}

#[test]
fn batch_runs_one_key_at_a_time_in_time_order_and_fires_its_timers_after_its_last_element() {
    let (op, sink, time) = operator(Keyed::new(None, 0..128, 128).unwrap(), Timers::default());
    let mut op = SortedKeyedProcess::new(op);
    for (k, ts) in [("b", 5), ("a", 16), ("a", 3), ("b", 20), ("a", 4)] {
        time.set_timestamp(ts);
        op.collect((k.to_string(), ts));
    }
    op.on_time(TimeEvent::Watermark(14));
    assert!(
        sink.records().is_empty() && sink.events().is_empty(),
        "nothing before the end"
    );
    op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
    op.finish();
    // Key a: elements 3, 4, 16 (sorted), one timer at 3 + 10 firing after the last: count 3.
    assert_eq!(
        sink.records(),
        vec![(13, ("a".to_string(), 3)), (15, ("b".to_string(), 2))]
    );
    assert_eq!(sink.watermarks(), vec![MAX_WATERMARK], "only the end passes");
    let Keyed::Heap { map, .. } = &op.inner.state else {
        panic!("heap")
    };
    assert!(map.is_empty(), "a key's state goes after the key");
}

#[test]
fn processing_time_timers_fire_on_the_tick_and_deleted_timers_never() {
    struct Ping;
    impl KeyedProcessFunction<String, (String, i64), (String, u64)> for Ping {
        type State = u64;
        fn process_element(
            &self,
            value: (String, i64),
            ctx: &mut KeyedContext<'_, String, u64>,
            _: &mut dyn Collector<(String, u64)>,
        ) {
            if value.1 < 0 {
                ctx.delete_processing_time_timer(-value.1);
            } else {
                ctx.register_processing_time_timer(value.1);
            }
        }
        fn on_timer(
            &self,
            ts: i64,
            ctx: &mut KeyedContext<'_, String, u64>,
            out: &mut dyn Collector<(String, u64)>,
        ) {
            assert_eq!(ctx.time_domain(), Some(TimeDomain::ProcessingTime));
            out.collect((ctx.key().clone(), ts as u64));
        }
    }
    let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<(String, i64), String> = Arc::new(|r: &(String, i64)| r.0.clone());
    let mut op = KeyedProcessOperator::new(
        key,
        Arc::new(Ping),
        Keyed::new(None, 0..128, 128).unwrap(),
        Timers::default(),
        time,
        Box::new(sink.clone()),
    );
    for (k, t) in [("x", 100), ("y", 50), ("x", 300), ("x", -300)] {
        op.collect((k.to_string(), t));
    }
    op.on_time(TimeEvent::ProcessingTime(120));
    op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
    op.on_time(TimeEvent::ProcessingTime(1_000));
    let got: Vec<_> = sink.records().into_iter().map(|r| r.1).collect();
    assert_eq!(got, vec![("y".to_string(), 50), ("x".to_string(), 100)]);
}

/// Flink's BATCH: after a key's last element and its event-time timers, its processing-time
/// timers fire (what a STREAMING job's processing-time windows would emit is not lost), and what
/// their callbacks register is dropped.
#[test]
fn batch_fires_a_keys_processing_time_timers_after_its_last_element_once() {
    struct Again;
    impl KeyedProcessFunction<String, (String, i64), (String, u64)> for Again {
        type State = u64;
        fn process_element(
            &self,
            value: (String, i64),
            ctx: &mut KeyedContext<'_, String, u64>,
            _: &mut dyn Collector<(String, u64)>,
        ) {
            if value.1 < 0 {
                ctx.delete_processing_time_timer(-value.1);
            } else {
                ctx.register_processing_time_timer(value.1);
            }
        }
        fn on_timer(
            &self,
            ts: i64,
            ctx: &mut KeyedContext<'_, String, u64>,
            out: &mut dyn Collector<(String, u64)>,
        ) {
            out.collect((ctx.key().clone(), ts as u64));
            ctx.register_processing_time_timer(ts + 1);
        }
    }
    let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<(String, i64), String> = Arc::new(|r: &(String, i64)| r.0.clone());
    let op = KeyedProcessOperator::new(
        key,
        Arc::new(Again),
        Keyed::new(None, 0..128, 128).unwrap(),
        Timers::default(),
        time.clone(),
        Box::new(sink.clone()),
    );
    let mut op = SortedKeyedProcess::new(op);
    for (k, t) in [("x", 100), ("y", 50), ("x", 300), ("x", -300), ("x", 200)] {
        time.set_timestamp(1);
        op.collect((k.to_string(), t));
    }
    op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
    op.finish();
    let got: Vec<_> = sink.records().into_iter().map(|r| r.1).collect();
    assert_eq!(
        got,
        vec![
            ("x".to_string(), 100),
            ("x".to_string(), 200),
            ("y".to_string(), 50)
        ],
        "key by key, in time order; 300 was deleted; nothing registered at the end fires"
    );
}

#[test]
fn timers_and_state_survive_a_heap_snapshot_and_split_by_key_group() {
    use crate::checkpoint::{KeyedStateInit, restore_timers};
    let (mut op, _, time) = operator(Keyed::new(None, 0..128, 128).unwrap(), Timers::default());
    let keys: Vec<String> = (0..40).map(|i| format!("key-{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        feed(&mut op, &time, k, i as i64);
    }
    // The heap snapshot's entries, restored whole and into two halves of the key groups.
    let full = snapshot_entries(&mut op);
    let whole = restore_timers::<String>(Some(&KeyedStateInit::Heap(full.clone()))).unwrap();
    assert_eq!(whole.len(), 40);
    let (mut low, mut high) = (0, 0);
    for (range, count) in [(0..64, &mut low), (64..128, &mut high)] {
        let mut part = floe_state::HashMapStateBackend::new(range.clone());
        for state in [crate::checkpoint::KEYED_STATE, "timers/event"] {
            for (kg, k, v) in full.entries(state) {
                if range.contains(&kg) {
                    floe_state::KeyedStateBackend::put(&mut part, state, kg, k, v).unwrap();
                }
            }
        }
        let timers = restore_timers::<String>(Some(&KeyedStateInit::Heap(part.clone()))).unwrap();
        *count = timers.len();
        // Each half fires its own keys' timers with their counts.
        let state = Keyed::new(Some(KeyedStateInit::Heap(part)), range, 128).unwrap();
        let (mut restored, sink, _) = operator(state, timers);
        restored.on_time(TimeEvent::Watermark(MAX_WATERMARK));
        assert_eq!(sink.records().len(), *count);
        assert!(
            sink.records()
                .iter()
                .all(|(ts, (k, n))| *n == 1 && *ts == keys.iter().position(|x| x == k).unwrap() as i64 + 10)
        );
    }
    assert_eq!(low + high, 40, "every timer goes to exactly one half");
    assert!(low > 0 && high > 0);
}

/// The entries of a heap snapshot of `op`, as a backend.
fn snapshot_entries(
    op: &mut KeyedProcessOperator<(String, i64), String, (String, u64), CountUntil>,
) -> floe_state::HashMapStateBackend {
    let Keyed::Heap {
        map,
        key_groups,
        max_parallelism,
        ..
    } = &op.state
    else {
        panic!("heap")
    };
    let mut full = crate::checkpoint::heap_snapshot(map, key_groups, *max_parallelism).unwrap();
    crate::checkpoint::write_timers(&mut full, &op.timers, *max_parallelism).unwrap();
    full
}
