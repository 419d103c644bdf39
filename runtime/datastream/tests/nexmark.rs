//! Each Nexmark query's output on one million events equals a reference computed here from the
//! same events by the query's SQL definition (as multisets of rows, after the final watermark).
//! The comparison with Apache Flink itself runs in the benchmark (`bench/nexmark-flink.sh`).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{run, temp_dir};
use floe_datastream::nexmark::{Event, NexmarkConfig, output_table, reference};
use floe_datastream::{JobArgs, JobRegistry};

const EVENTS: u64 = 1_000_000;

fn events(n: u64) -> Vec<Event> {
    floe_datastream::nexmark::events(&NexmarkConfig::default(), n)
}

/// A query's rows as the table they stand for (q4's changelog folded).
fn table(query: &str, rows: Vec<String>) -> Vec<String> {
    output_table(query, rows).unwrap_or_else(|e| panic!("{e}"))
}

fn output(dir: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for e in std::fs::read_dir(dir).expect("output") {
        let text = std::fs::read_to_string(e.expect("entry").path()).expect("read");
        rows.extend(text.lines().map(str::to_string));
    }
    rows.sort();
    rows
}

/// Runs the job `nexmark` with `args` and configuration `conf` on the in-memory cluster.
async fn run_nexmark(args: &[&str], conf: &[(&str, &str)]) {
    let job = JobRegistry::builtin()
        .build(&JobArgs {
            name: "nexmark".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            configuration: conf.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        })
        .expect("nexmark builds");
    run(&job, 32 * 1024, Some(Duration::from_millis(10))).await;
}

async fn run_query(query: &str, parallelism: u32) -> Vec<String> {
    run_query_with(query, parallelism, EVENTS, None).await
}

async fn run_query_with(query: &str, parallelism: u32, events: u64, rate: Option<u64>) -> Vec<String> {
    let out = temp_dir(&format!("nexmark-{query}-{parallelism}"));
    let (events, url, rate) = (
        events.to_string(),
        format!("file://{}", out.display()),
        rate.map(|r| r.to_string()),
    );
    let mut args = vec!["--query", query, "--events", &events, "--output", &url];
    if let Some(rate) = &rate {
        args.extend(["--rate", rate]);
    }
    run_nexmark(&args, &[("parallelism.default", &parallelism.to_string())]).await;
    output(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_queries_equal_their_sql_definition_on_a_million_events() {
    let events = events(EVENTS);
    for query in ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11"] {
        let want = reference(query, &events).expect("a reference");
        let got = table(query, run_query(query, 2).await);
        assert!(!want.is_empty(), "{query}: an empty reference proves nothing");
        assert_eq!(got.len(), want.len(), "{query}: rows");
        assert!(got == want, "{query}: the rows differ from the reference");
        eprintln!("{query}: {} rows equal the reference", got.len());
    }
}

/// The same queries over the events exported as JSON lines and read back (`--input`, what the
/// benchmark feeds Floe and Flink): each exported file is one source subtask's events in time
/// order, read whole by one subtask, so no event is late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_over_exported_json_lines_equal_their_definition() {
    const N: u64 = 300_000;
    let events = temp_dir("nexmark-export");
    let (n, input) = (N.to_string(), format!("file://{}", events.display()));
    let conf = [("parallelism.default", "2")];
    run_nexmark(&["--query", "export", "--events", &n, "--output", &input], &conf).await;
    let events = self::events(N);
    for query in ["q5", "q7", "q8", "q11"] {
        let out = temp_dir(&format!("nexmark-input-{query}"));
        let url = format!("file://{}", out.display());
        run_nexmark(&["--query", query, "--input", &input, "--output", &url], &conf).await;
        let want = reference(query, &events).expect("a reference");
        assert!(
            output(&out) == want,
            "{query} over JSON lines differs from its definition"
        );
    }
}

/// BATCH: the windows and process functions sort their input by key and time and run one key at
/// a time (blocking exchanges between them); the rows are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_in_batch_equal_their_definition() {
    const N: u64 = 300_000;
    let events = events(N);
    let n = N.to_string();
    let conf = [("parallelism.default", "2"), ("execution.runtime-mode", "BATCH")];
    for query in ["q3", "q4", "q5", "q7", "q8", "q11"] {
        let out = temp_dir(&format!("nexmark-batch-{query}"));
        let url = format!("file://{}", out.display());
        run_nexmark(&["--query", query, "--events", &n, "--output", &url], &conf).await;
        let want = reference(query, &events).expect("a reference");
        assert!(
            table(query, output(&out)) == want,
            "{query} in BATCH differs from its definition"
        );
    }
}

/// Processing-time windows fire on the clock, and (as in Flink) not at the end of a bounded
/// input: the source is held to 25,000 events/s so the run crosses at least one 10 s window's
/// end; the windows that fired count each bid at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q12_counts_bids_in_processing_time_windows() {
    const Q12_EVENTS: u64 = 300_000;
    let got = run_query_with("q12", 2, Q12_EVENTS, Some(25_000)).await;
    let fields = |r: &String| -> Vec<i64> { r.split('\t').map(|x| x.parse().expect("number")).collect() };
    let total: i64 = got.iter().map(|r| fields(r)[1]).sum();
    let bids = (0..Q12_EVENTS).filter(|n| n % 50 >= 4).count() as i64;
    assert!(total > 0, "a 12 s run fires at least one 10 s window");
    assert!(total <= bids, "{total} counted of {bids} bids");
    let mut seen = std::collections::HashSet::new();
    for r in &got {
        let f = fields(r);
        assert!(seen.insert((f[0], f[2])), "one row per bidder and window: {r}");
        assert_eq!(f[3] - f[2], 10_000, "10 s windows: {r}");
        assert_eq!(f[2].rem_euclid(10_000), 0, "aligned to the epoch: {r}");
    }
}

/// The latency benchmark's job: q1's rows reach the latency sink through an exchange, and its
/// histograms count every row (no warm-up here) with a latency far below the run's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_latency_counts_every_row_from_its_making() {
    let out = temp_dir("nexmark-latency");
    let url = format!("file://{}", out.display());
    let args = [
        "--query",
        "q1",
        "--events",
        "20000",
        "--rate",
        "20000",
        "--latency-output",
        &url,
        "--latency-warmup-s",
        "0",
    ];
    run_nexmark(
        &args,
        &[("parallelism.default", "2"), ("execution.buffer-timeout", "1")],
    )
    .await;
    let mut histogram = floe_datastream::LatencyHistogram::default();
    for e in std::fs::read_dir(&out).expect("output") {
        let text = std::fs::read_to_string(e.expect("entry").path()).expect("read");
        histogram.add_text(&text).expect("a histogram");
    }
    let bids = events(20_000)
        .iter()
        .filter(|e| matches!(e, Event::Bid(_)))
        .count() as u64;
    assert_eq!(histogram.count(), bids);
    assert!(
        histogram.quantile_us(0.5) < 500_000,
        "p50 {} µs",
        histogram.quantile_us(0.5)
    );
}

#[test]
fn the_latency_output_is_refused_where_it_cannot_measure() {
    let build = |args: &[&str]| {
        JobRegistry::builtin()
            .build(&JobArgs {
                name: "nexmark".into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                configuration: Default::default(),
            })
            .expect_err("refused")
            .to_string()
    };
    let e = build(&["--query", "q1", "--latency-output", "/tmp/x"]);
    assert!(e.contains("--latency-output") && e.contains("give --rate"), "{e}");
    let e = build(&["--query", "q5", "--rate", "10", "--latency-output", "/tmp/x"]);
    assert!(e.contains("q0, q1 and q2") && e.contains("\"q5\""), "{e}");
    let e = build(&["--query", "q1"]);
    assert!(e.contains("--output") && e.contains("missing"), "{e}");
}

/// The broadcast state pattern over bids: every bid goes out with its bidder class's rule, which
/// every subtask holds (none would write a factor of 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_rules_apply_to_every_bid() {
    let out = temp_dir("broadcast-rules");
    let url = format!("file://{}", out.display());
    let job = JobRegistry::builtin()
        .build(&JobArgs {
            name: "broadcast-rules".into(),
            args: ["--events", "100000", "--output", &url]
                .map(String::from)
                .to_vec(),
            configuration: [("parallelism.default", "2")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        })
        .expect("builds");
    run(&job, 32 * 1024, Some(Duration::from_millis(10))).await;
    let want = floe_datastream::nexmark::rules_reference(&events(100_000));
    assert!(
        output(&out) == want,
        "the rows differ from the rules applied to every bid"
    );
}
