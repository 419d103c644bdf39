use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::checkpoint::TaskRestore;

/// What reached the operator's downstream, in order: results with their timestamps, and
/// watermarks.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Record(i64, u64),
    Watermark(i64),
}

#[derive(Clone)]
struct Log {
    time: Arc<TaskTime>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Collector<u64> for Log {
    fn collect(&mut self, record: u64) {
        let ts = self.time.timestamp();
        self.seen.lock().unwrap().push(Seen::Record(ts, record));
    }
}

impl Op<u64> for Log {
    fn on_time(&mut self, event: TimeEvent) {
        if let TimeEvent::Watermark(w) = event {
            self.seen.lock().unwrap().push(Seen::Watermark(w));
        }
    }
    fn finish(&mut self) {}
    fn drain(&mut self, _: bool, _: &mut Vec<Chunk>) {}
    fn snapshot(&mut self, _: u64, _: &mut ChainSnapshot) -> Result<()> {
        Ok(())
    }
    fn failure(&mut self) -> Option<String> {
        None
    }
}

impl Log {
    fn new(time: &Arc<TaskTime>) -> Self {
        Log {
            time: time.clone(),
            seen: Arc::default(),
        }
    }
    fn records(&self) -> Vec<u64> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter_map(|s| match s {
                Seen::Record(_, r) => Some(*r),
                Seen::Watermark(_) => None,
            })
            .collect()
    }
}

/// Squares its input after a delay that depends on it (later records often finish first);
/// fails the first `fail_first` attempts of each record; never answers for `hang`; counts the
/// requests in flight and the most there ever were.
#[derive(Clone)]
struct Square {
    delay_ms: fn(u64) -> u64,
    fail_first: u32,
    hang: Option<u64>,
    fallback: bool,
    attempts: Arc<Mutex<HashMap<u64, u32>>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

fn scrambled(n: u64) -> u64 {
    (n * 7) % 13
}

impl Square {
    fn new(delay_ms: fn(u64) -> u64) -> Self {
        Square {
            delay_ms,
            fail_first: 0,
            hang: None,
            fallback: false,
            attempts: Arc::default(),
            in_flight: Arc::default(),
            most_in_flight: Arc::default(),
        }
    }
}

impl AsyncFunction<u64, u64> for Square {
    async fn async_invoke(&self, n: u64) -> FunctionResult<Vec<u64>> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap();
            let a = attempts.entry(n).or_default();
            *a += 1;
            *a
        };
        if self.hang == Some(n) {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_millis((self.delay_ms)(n))).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if attempt <= self.fail_first {
            return Err(format!("service unavailable for {n}").into());
        }
        Ok(vec![n * n])
    }

    fn timeout(&self, n: u64) -> FunctionResult<Vec<u64>> {
        if self.fallback {
            Ok(vec![0])
        } else {
            Err(format!("no answer for {n}").into())
        }
    }
}

fn config(ordered: bool, capacity: usize) -> AsyncConfig {
    AsyncConfig {
        ordered,
        capacity,
        timeout: Duration::from_secs(10),
        retry: AsyncRetryStrategy::NO_RETRY,
    }
}

fn context(time: &Arc<TaskTime>, restore: Option<TaskRestore>) -> OpContext {
    let mut ctx = crate::io::tests::sink_context_in("job1", 0, restore);
    ctx.operator_name = "AsyncWait (unordered)".into();
    ctx.time = Some(time.clone());
    ctx
}

type SquareOp = AsyncWaitOp<u64, u64, Square>;

fn operator(f: Square, config: AsyncConfig, restore: Option<TaskRestore>) -> (SquareOp, Log, Arc<TaskTime>) {
    let time = Arc::new(TaskTime::new(Duration::from_millis(200)));
    let log = Log::new(&time);
    let op = AsyncWaitOp::new(f, config, &context(&time, restore), Box::new(log.clone())).unwrap();
    (op, log, time)
}

/// Each record `n` with timestamp `n * 10`, as the task's input head would hand it over.
fn feed(op: &mut SquareOp, time: &TaskTime, records: impl IntoIterator<Item = u64>) {
    for n in records {
        time.set_timestamp(n as i64 * 10);
        op.collect(n);
    }
}

/// Polls the operator as its task would until `done` holds (at most 10 s).
async fn poll_until(op: &mut SquareOp, done: impl Fn(&SquareOp) -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done(op) {
            std::future::poll_fn(|cx| op.poll_async(cx)).await;
        }
    })
    .await
    .expect("the operator got there within 10 s");
}

#[tokio::test]
async fn ordered_results_keep_the_input_order_whatever_order_requests_complete_in() {
    let (mut op, log, time) = operator(Square::new(scrambled), config(true, 8), None);
    feed(&mut op, &time, 1..=40);
    poll_until(&mut op, |op| op.queue.is_empty()).await;
    assert_eq!(log.records(), (1..=40).map(|n| n * n).collect::<Vec<_>>());
    let seen = log.seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|s| matches!(s, Seen::Record(ts, r) if (*ts as f64 / 10.0).powi(2) as u64 == *r)),
        "each result carries its input's timestamp: {seen:?}"
    );
}

#[tokio::test]
async fn unordered_results_come_as_they_complete_but_never_overtake_a_watermark() {
    // Later records finish first: without a watermark the output is not in input order.
    let (mut op, log, time) = operator(Square::new(|n| 200 - 4 * n), config(false, 50), None);
    feed(&mut op, &time, 1..=20);
    op.on_time(TimeEvent::Watermark(205));
    feed(&mut op, &time, 21..=40);
    poll_until(&mut op, |op| op.queue.is_empty()).await;
    let seen = log.seen.lock().unwrap().clone();
    let at = seen
        .iter()
        .position(|s| *s == Seen::Watermark(205))
        .expect("the watermark went on");
    let before: Vec<u64> = log.records().into_iter().take(at).collect();
    let mut sorted = before.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=20).map(|n| n * n).collect::<Vec<_>>(), "{seen:?}");
    assert_ne!(before, sorted, "unordered: completion order, not input order");
    assert_eq!(log.records().len(), 40);
}

#[tokio::test]
async fn no_more_than_capacity_requests_are_in_flight_and_a_full_queue_holds_the_input_back() {
    let f = Square::new(|_| 5);
    let (mut op, log, time) = operator(f.clone(), config(false, 4), None);
    assert!(!op.async_blocked());
    feed(&mut op, &time, 1..=20);
    assert!(op.async_blocked(), "20 records queued at capacity 4");
    poll_until(&mut op, |op| op.queue.is_empty()).await;
    assert!(!op.async_blocked());
    assert_eq!(f.most_in_flight.load(Ordering::SeqCst), 4);
    let mut records = log.records();
    records.sort();
    assert_eq!(records, (1..=20).map(|n| n * n).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_failed_request_is_retried_and_one_out_of_attempts_fails_the_task_naming_the_operator() {
    let f = Square {
        fail_first: 2,
        ..Square::new(|_| 1)
    };
    let retry3 = AsyncConfig {
        retry: AsyncRetryStrategy::fixed_delay(3, Duration::from_millis(2)),
        ..config(false, 4)
    };
    let (mut op, log, time) = operator(f.clone(), retry3, None);
    feed(&mut op, &time, 1..=6);
    poll_until(&mut op, |op| op.queue.is_empty()).await;
    assert_eq!(op.failure(), None);
    assert_eq!(log.records().len(), 6);
    assert!(f.attempts.lock().unwrap().values().all(|&a| a == 3));

    let retry2 = AsyncConfig {
        retry: AsyncRetryStrategy::exponential_backoff(
            2,
            Duration::from_millis(1),
            Duration::from_millis(5),
            2.0,
        ),
        ..config(false, 4)
    };
    let (mut op, log, time) = operator(
        Square {
            attempts: Arc::default(),
            ..f
        },
        retry2,
        None,
    );
    feed(&mut op, &time, 1..=6);
    poll_until(&mut op, |op| op.failure.is_some()).await;
    assert!(!op.async_blocked(), "a failed operator holds no input back");
    let e = op.failure().expect("failed");
    assert!(
        e.starts_with("AsyncWait (unordered): async_invoke failed: service unavailable for"),
        "{e}"
    );
    assert!(e.ends_with("(attempt 2 of 2)"), "{e}");
    assert!(log.records().is_empty());
}

#[tokio::test]
async fn a_request_past_the_timeout_takes_the_functions_timeout_result_or_fails_the_task() {
    let hang = Square {
        hang: Some(3),
        ..Square::new(|_| 1)
    };
    let short = AsyncConfig {
        timeout: Duration::from_millis(50),
        ..config(true, 4)
    };
    let (mut op, _, time) = operator(hang.clone(), short, None);
    feed(&mut op, &time, 1..=4);
    poll_until(&mut op, |op| op.failure.is_some()).await;
    assert_eq!(
        op.failure().as_deref(),
        Some("AsyncWait (unordered): async_invoke failed: no answer for 3 (50 ms, the operator's timeout)")
    );

    let fallback = Square {
        fallback: true,
        ..hang
    };
    let (mut op, log, time) = operator(fallback, short, None);
    feed(&mut op, &time, 1..=4);
    poll_until(&mut op, |op| op.queue.is_empty()).await;
    assert_eq!(log.records(), [1, 4, 0, 16]);
}

#[tokio::test]
async fn records_in_flight_at_a_checkpoint_are_issued_again_after_a_restore_and_emitted_once() {
    // Odd records never complete in the first run: at the checkpoint 1, 3 and 5 are in flight,
    // and 6 waits behind them (capacity 3), while 2 and 4 were emitted.
    let (mut op, first, time) = operator(
        Square::new(|n| if n % 2 == 1 { 60_000 } else { 1 }),
        config(false, 3),
        None,
    );
    feed(&mut op, &time, 1..=6);
    poll_until(&mut op, |_| first.records().len() == 2).await;
    let mut snapshot = ChainSnapshot {
        checkpoint: 7,
        keyed: None,
        source: None,
        sink: None,
        broadcast: None,
        in_flight: None,
    };
    op.snapshot(7, &mut snapshot).unwrap();
    let saved = snapshot.in_flight.expect("records in flight are saved");
    drop(op); // the task fails: its requests go with it

    let restore = TaskRestore {
        checkpoint: 7,
        in_flight: vec![saved],
        ..TaskRestore::default()
    };
    let (mut op, second, _) = operator(Square::new(|_| 1), config(false, 3), Some(restore));
    poll_until(&mut op, |op| op.queue.is_empty()).await;
    let mut all = first.seen.lock().unwrap().clone();
    all.extend(second.seen.lock().unwrap().iter().cloned());
    all.sort_by_key(|s| match s {
        Seen::Record(ts, _) => *ts,
        Seen::Watermark(w) => *w,
    });
    let expected: Vec<Seen> = (1..=6).map(|n| Seen::Record(n as i64 * 10, n * n)).collect();
    assert_eq!(all, expected, "every record once, with its timestamp");

    // Nothing in flight: nothing saved.
    let mut empty = ChainSnapshot {
        checkpoint: 8,
        keyed: None,
        source: None,
        sink: None,
        broadcast: None,
        in_flight: None,
    };
    op.snapshot(8, &mut empty).unwrap();
    assert_eq!(empty.in_flight, None);
}

#[tokio::test]
async fn the_end_of_input_finishes_the_rest_of_the_chain_only_after_the_last_result() {
    #[derive(Clone, Default)]
    struct Finish(Arc<Mutex<Vec<String>>>);
    impl Collector<u64> for Finish {
        fn collect(&mut self, r: u64) {
            self.0.lock().unwrap().push(r.to_string());
        }
    }
    impl Op<u64> for Finish {
        fn on_time(&mut self, _: TimeEvent) {}
        fn finish(&mut self) {
            self.0.lock().unwrap().push("finish".into());
        }
        fn drain(&mut self, _: bool, _: &mut Vec<Chunk>) {}
        fn snapshot(&mut self, _: u64, _: &mut ChainSnapshot) -> Result<()> {
            Ok(())
        }
        fn failure(&mut self) -> Option<String> {
            None
        }
    }
    let time = Arc::new(TaskTime::new(Duration::from_millis(200)));
    let log = Finish::default();
    let mut op = AsyncWaitOp::new(
        Square::new(|n| 10 * n),
        config(true, 4),
        &context(&time, None),
        Box::new(log.clone()),
    )
    .unwrap();
    feed(&mut op, &time, 1..=3);
    op.finish();
    assert!(op.async_busy(), "requests still in flight");
    assert!(log.0.lock().unwrap().is_empty());
    poll_until(&mut op, |op| !op.async_busy()).await;
    assert_eq!(*log.0.lock().unwrap(), ["1", "4", "9", "finish"]);
}
