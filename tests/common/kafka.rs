//! A Kafka-protocol broker on loopback for the Kafka connector's tests, and plain librdkafka
//! clients to fill topics and read them back (independent of the connector under test).
//!
//! The broker is nisshi (crates.io, the Rust broker formerly tansu) with in-memory storage,
//! installed by `.ci/setup` into `~/.cache/floe-kafka-broker`; `FLOE_KAFKA_BROKER` names another
//! binary. Where it is missing the tests report themselves ignored with SKIPPED, unless
//! `FLOE_REQUIRE_KAFKA` is set (CI), where they fail.
#![allow(clippy::unwrap_used)] // test code (also the Kafka benchmark's): a panic is the failure report

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

pub fn broker_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("FLOE_KAFKA_BROKER") {
        return Some(PathBuf::from(path));
    }
    let home = std::env::var("HOME").ok()?;
    let path = PathBuf::from(home).join(".cache/floe-kafka-broker/bin/nisshi");
    path.exists().then_some(path)
}

/// The broker binary, or `None` with a SKIPPED line (a panic where `FLOE_REQUIRE_KAFKA` is set).
pub fn broker_or_skip(what: &str) -> Option<PathBuf> {
    match broker_binary() {
        Some(b) => Some(b),
        None if std::env::var_os("FLOE_REQUIRE_KAFKA").is_some() => {
            panic!("{what}: no Kafka broker (run .ci/setup, or set FLOE_KAFKA_BROKER)")
        }
        None => {
            eprintln!("SKIPPED {what}: no Kafka broker (run .ci/setup, or set FLOE_KAFKA_BROKER)");
            None
        }
    }
}

/// Waits until the broker has acknowledged every record `producer` sent, for as long as
/// acknowledgements keep coming (a loaded machine makes the broker slow, not stuck: 20,000
/// one-record batches to the debug-built broker can take more than any fixed wait); fails after
/// 30 s without one.
pub fn flush_all(producer: &BaseProducer) {
    let mut in_flight = producer.in_flight_count();
    let mut progress = Instant::now();
    while producer.flush(Duration::from_secs(1)).is_err() {
        let now = producer.in_flight_count();
        if now < in_flight {
            (in_flight, progress) = (now, Instant::now());
        }
        assert!(
            progress.elapsed() < Duration::from_secs(30),
            "the broker acknowledged none of {now} records in flight for 30 s"
        );
    }
}

/// A broker process on a free loopback port; killed when dropped.
pub struct Broker {
    child: Option<Child>,
    pub bootstrap: String,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Broker {
    /// A handle on a broker another handle started (for another thread's clients).
    pub fn attach(bootstrap: &str) -> Broker {
        Broker {
            child: None,
            bootstrap: bootstrap.to_string(),
        }
    }

    pub fn start(binary: &std::path::Path, log: &std::path::Path) -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://floe/"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let broker = Broker {
            child: Some(child),
            bootstrap: format!("127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(&broker.bootstrap).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the broker did not listen: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
    }

    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let results = rt
            .block_on(admin.create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .unwrap();
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
    }

    /// A plain producer, one record per batch (before the broker patch fixed ListOffsets, its
    /// latest offset was the last batch's first offset + 1, which one-record batches made the
    /// high watermark).
    pub fn producer(&self) -> BaseProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("linger.ms", "5")
            .set("batch.num.messages", "1")
            .create()
            .unwrap()
    }

    /// An idempotent producer: a request it sends again (timed out under load, a connection
    /// reset) is stored once, so an input it writes has exactly the records sent. (A plain
    /// producer's retry stored a record twice in one lifecycle sequence.)
    pub fn idempotent_producer(&self) -> BaseProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("linger.ms", "5")
            .set("batch.num.messages", "1")
            .set("enable.idempotence", "true")
            .create()
            .unwrap()
    }

    /// Sends `(key, value)` records and waits until the broker has them all.
    pub fn produce(&self, topic: &str, records: &[(Option<String>, String)]) {
        let producer = self.producer();
        for (key, value) in records {
            loop {
                let mut r = BaseRecord::to(topic).payload(value.as_bytes());
                if let Some(k) = key {
                    r = r.key(k.as_bytes());
                }
                match producer.send(r) {
                    Ok(()) => break,
                    Err(_) => {
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        flush_all(&producer);
    }

    /// Sends keyed records with the given timestamps (ms) to one partition, waiting until the
    /// broker has them all.
    pub fn produce_at(&self, topic: &str, partition: i32, records: &[(String, i64)]) {
        let producer = self.producer();
        for (key, timestamp) in records {
            loop {
                let r = BaseRecord::to(topic)
                    .partition(partition)
                    .key(key.as_bytes())
                    .payload(b"")
                    .timestamp(*timestamp);
                match producer.send(r) {
                    Ok(()) => break,
                    Err(_) => {
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        flush_all(&producer);
    }

    /// The offset consumer group `group` committed on partition 0 of `topic`, if any.
    pub fn committed(&self, group: &str, topic: &str) -> Option<i64> {
        self.committed_on(group, topic, 0)
    }

    /// The offset consumer group `group` committed on `partition` of `topic`, if any.
    pub fn committed_on(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", group)
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Invalid)
            .unwrap();
        let offsets = consumer.committed_offsets(tpl, Duration::from_secs(10)).ok()?;
        offsets.elements().first()?.offset().to_raw().filter(|o| *o >= 0)
    }

    /// Every record of `topic` a `read_committed` consumer sees now, per partition in order:
    /// (partition, key, value).
    pub fn read_committed(&self, topic: &str) -> Vec<(i32, Option<String>, String)> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("isolation.level", "read_committed")
            // librdkafka assigns partitions only to a consumer with a group id.
            .set("group.id", "floe-test-reader")
            .set("enable.partition.eof", "true")
            .create()
            .unwrap();
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        let partitions = metadata.topics()[0].partitions().len() as i32;
        let mut tpl = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
            let (_, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap();
            ends.insert(p, high);
        }
        consumer.assign(&tpl).unwrap();
        let mut out = Vec::new();
        let mut eof = std::collections::BTreeSet::new();
        let started = Instant::now();
        while eof.len() < partitions as usize && started.elapsed() < Duration::from_secs(30) {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => out.push((
                    m.partition(),
                    m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                )),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    eof.insert(p);
                }
                _ => {}
            }
        }
        out
    }
}
