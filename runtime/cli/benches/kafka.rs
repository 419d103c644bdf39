//! Kafka -> keyed count -> Kafka (issue 15): `kafka-keyed-count` at parallelism 2 with the
//! exactly-once sink and a 1 s checkpoint interval, 1 KiB records, against the broker the tests
//! use (nisshi, in memory, on the same 2 cores).
//!
//! - Throughput: a topic filled with `--records` records beforehand, read to its end
//!   (`--bounded true`) by `floe run -f`; records per second, and per core of the machine's two
//!   (the broker shares them). Baseline in the same run: the same work by one hand-written
//!   librdkafka loop (consume, count per key in a map, produce `key TAB count`, one transaction
//!   per second) — what a program of its own would reach against this broker.
//! - Latency: the job running unbounded while records arrive at `--rate` per second for
//!   `--seconds`; each output count `(key, n)` is matched to the time the n-th record of that key
//!   was sent; p50, p99 and the largest, over the records after a warm-up of 2 s. With exactly-once
//!   a record is visible when the checkpoint after it completes: about the interval.
//!
//! `cargo bench -p floe --bench kafka --no-default-features -- [--records 200000] [--rate 5000]
//! [--seconds 10]` (needs the broker of `.ci/setup`).

mod common;
#[path = "../../../tests/common/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{arg, job_seconds, manifest, measure};
use kafka::Broker;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

const FLOE: &str = env!("CARGO_BIN_EXE_floe");
const KEYS: u64 = 1_000;

fn value(i: u64) -> String {
    let mut v = format!("record {i} ");
    while v.len() < 1024 {
        v.push('x');
    }
    v
}

fn key(i: u64) -> String {
    format!("key{:04}", (i * 7919) % KEYS)
}

fn fill(broker: &Broker, topic: &str, records: u64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("linger.ms", "20")
        // One record per batch: the broker's ListOffsets(latest), where the bounded job stops,
        // is the last batch's first offset + 1 (see tests/common/kafka.rs).
        .set("batch.num.messages", "1")
        .set("queue.buffering.max.kbytes", "262144")
        .create()
        .expect("producer");
    for i in 0..records {
        let (k, v) = (key(i), value(i));
        loop {
            match producer.send(BaseRecord::to(topic).key(k.as_bytes()).payload(v.as_bytes())) {
                Ok(()) => break,
                Err(_) => {
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
}

/// A `read_committed` consumer of both partitions of `topic`, from the beginning.
fn reader(broker: &Broker, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("isolation.level", "read_committed")
        // librdkafka assigns partitions only to a consumer with a group id.
        .set("group.id", "floe-test-reader")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..2 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl");
    }
    consumer.assign(&tpl).expect("assign");
    consumer
}

/// The hand-written loop: consume everything, count per key, produce counts in a transaction a
/// second. Returns its seconds.
fn baseline(broker: &Broker, input: &str, output: &str, records: u64) -> f64 {
    let start = Instant::now();
    let consumer = reader(broker, input);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("transactional.id", "bench-baseline")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    producer.init_transactions(Duration::from_secs(30)).expect("init");
    producer.begin_transaction().expect("begin");
    let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut read = 0;
    let mut last_commit = Instant::now();
    while read < records {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        read += 1;
        let k = m.key().unwrap_or_default().to_vec();
        let n = counts.entry(k.clone()).or_insert(0);
        *n += 1;
        let out = format!("{}\t{n}", String::from_utf8_lossy(&k));
        loop {
            match producer.send(BaseRecord::to(output).key(&k[..]).payload(out.as_bytes())) {
                Ok(()) => break,
                Err(_) => {
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
        if last_commit.elapsed() >= Duration::from_secs(1) {
            producer
                .commit_transaction(Duration::from_secs(60))
                .expect("commit");
            producer.begin_transaction().expect("begin");
            last_commit = Instant::now();
        }
    }
    producer
        .commit_transaction(Duration::from_secs(60))
        .expect("commit");
    start.elapsed().as_secs_f64()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let records: u64 = arg(&args, "--records")
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let rate: u64 = arg(&args, "--rate").and_then(|v| v.parse().ok()).unwrap_or(5_000);
    let seconds: u64 = arg(&args, "--seconds").and_then(|v| v.parse().ok()).unwrap_or(10);
    let Some(binary) = kafka::broker_binary() else {
        eprintln!("no Kafka broker: run .ci/setup (or set FLOE_KAFKA_BROKER)");
        std::process::exit(2);
    };
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("bench-data/kafka");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let broker = Broker::start(&binary, &dir.join("broker.log"));
    for t in ["bench-in", "bench-out", "base-out", "live-in", "live-out"] {
        broker.create_topic(t, 2);
    }

    // Throughput.
    let fill_start = Instant::now();
    fill(&broker, "bench-in", records);
    eprintln!(
        "filled {records} records in {:.1} s",
        fill_start.elapsed().as_secs_f64()
    );
    let base = baseline(&broker, "bench-in", "base-out", records);
    let job = |name: &str, input: &str, output: &str, bounded: bool| {
        let mut a: Vec<String> = [
            "--bootstrap-servers",
            &broker.bootstrap,
            "--topic",
            input,
            "--output-topic",
            output,
            "--delivery-guarantee",
            "exactly-once",
            "--transactional-id-prefix",
            name,
        ]
        .map(String::from)
        .to_vec();
        if bounded {
            a.extend(["--bounded".to_string(), "true".to_string()]);
        }
        let storage = format!("file://{}", dir.join(format!("{name}-storage")).display());
        manifest(
            &dir,
            name,
            "kafka-keyed-count",
            &a,
            2,
            &[
                ("execution.checkpointing.interval", "1 s"),
                ("floe.job-storage.url", &storage),
            ],
        )
    };
    let m = job("throughput", "bench-in", "bench-out", true);
    let (wall, peak_kib, out) = measure(
        Command::new(FLOE)
            .args(["run", "-f"])
            .arg(&m)
            .arg("--work-dir")
            .arg(dir.join("run-throughput")),
    );
    let floe_s = job_seconds(&out, wall);
    let floe_rate = records as f64 / floe_s;
    let base_rate = records as f64 / base;

    // Latency.
    let m = job("latency", "live-in", "live-out", false);
    let mut run = Command::new(FLOE)
        .args(["run", "-f"])
        .arg(&m)
        .arg("--work-dir")
        .arg(dir.join("run-latency"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("floe run");
    std::thread::sleep(Duration::from_secs(3));
    let sent: Arc<Mutex<HashMap<(String, u64), Instant>>> = Arc::default();
    let total = rate * seconds;
    let sender = {
        let (sent, bootstrap) = (sent.clone(), broker.bootstrap.clone());
        std::thread::spawn(move || {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("linger.ms", "1")
                .create()
                .expect("producer");
            let mut nth: HashMap<String, u64> = HashMap::new();
            let start = Instant::now();
            for i in 0..total {
                let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let k = key(i);
                let n = nth.entry(k.clone()).or_insert(0);
                *n += 1;
                sent.lock().expect("sent").insert((k.clone(), *n), Instant::now());
                while producer
                    .send(
                        BaseRecord::to("live-in")
                            .key(k.as_bytes())
                            .payload(value(i).as_bytes()),
                    )
                    .is_err()
                {
                    producer.poll(Duration::from_millis(1));
                }
                producer.poll(Duration::ZERO);
            }
            producer.flush(Duration::from_secs(30)).expect("flush");
        })
    };
    let consumer = reader(&broker, "live-out");
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut seen = 0u64;
    while seen < total && started.elapsed() < Duration::from_secs(seconds + 60) {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let now = Instant::now();
        seen += 1;
        let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        let Some((k, n)) = v.rsplit_once('\t') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else {
            continue;
        };
        if let Some(at) = sent.lock().expect("sent").get(&(k.to_string(), n))
            && at.duration_since(started) > Duration::from_secs(2)
        {
            latencies.push(now.duration_since(*at).as_secs_f64() * 1000.0);
        }
    }
    sender.join().expect("sender");
    let _ = run.kill();
    let _ = run.wait();
    latencies.sort_by(f64::total_cmp);

    println!(
        "\n**Kafka -> keyed count -> Kafka, exactly-once, parallelism 2, 1 KiB records, 1 s checkpoints**\n"
    );
    println!("| | records | seconds | records/s | records/s per core (of 2) | vs baseline |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| Floe `kafka-keyed-count` (bounded) | {records} | {floe_s:.2} | {floe_rate:.0} | {:.0} | {:.2}x |",
        floe_rate / 2.0,
        floe_rate / base_rate
    );
    println!(
        "| baseline: one librdkafka loop | {records} | {base:.2} | {base_rate:.0} | {:.0} | 1.00x |",
        base_rate / 2.0
    );
    println!(
        "\nFloe's peak memory (JobManager + TaskManager): {} MiB",
        peak_kib / 1024
    );
    println!(
        "\nLatency at {rate} records/s for {seconds} s (send to read_committed read, after 2 s): {} records, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(f64::NAN)
    );
}
