//! What a Kafka source and sink are told: brokers, topics, where to start and stop, the delivery
//! guarantee, extra client properties (Flink's `KafkaSource` and `KafkaSink` builders, and their
//! `properties.*` keys in the manifest jobs).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error;

/// Which topics a source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// These topics by name: each must exist (an unknown one fails the job, naming it).
    Topics(Vec<String>),
    /// Every topic whose whole name matches this pattern (a regular expression in librdkafka's
    /// syntax), now and as topics are created while the job runs.
    Pattern(String),
}

/// Where a partition the source has no checkpointed offset for starts (Flink's
/// `OffsetsInitializer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingOffsets {
    Earliest,
    Latest,
    /// The first record with a timestamp at or after this (ms since the epoch).
    Timestamp(i64),
    /// The consumer group's committed offset, or the earliest where it has none.
    Committed,
}

impl StartingOffsets {
    /// `earliest`, `latest`, `committed` or `timestamp:MS`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "earliest" => Ok(StartingOffsets::Earliest),
            "latest" => Ok(StartingOffsets::Latest),
            "committed" => Ok(StartingOffsets::Committed),
            _ => text
                .strip_prefix("timestamp:")
                .and_then(|ms| ms.parse().ok())
                .map(StartingOffsets::Timestamp)
                .ok_or_else(|| {
                    format!("expected earliest, latest, committed or timestamp:MILLIS, got {text:?}")
                }),
        }
    }
}

/// What a sink promises (Flink's `DeliveryGuarantee`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// Records are sent as they come; a failure may lose or repeat some.
    None,
    /// Every record written before a checkpoint is acknowledged by the broker before the
    /// checkpoint completes; a restore may repeat some.
    AtLeastOnce,
    /// Each record is visible once to `read_committed` consumers: a checkpoint's records are
    /// written in one Kafka transaction when the checkpoint completes.
    ExactlyOnce,
}

impl DeliveryGuarantee {
    /// `none`, `at-least-once` or `exactly-once` (Flink's `NONE`, `AT_LEAST_ONCE`,
    /// `EXACTLY_ONCE` too).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().replace('_', "-").as_str() {
            "none" => Ok(DeliveryGuarantee::None),
            "at-least-once" => Ok(DeliveryGuarantee::AtLeastOnce),
            "exactly-once" => Ok(DeliveryGuarantee::ExactlyOnce),
            _ => Err(format!(
                "expected none, at-least-once or exactly-once, got {text:?}"
            )),
        }
    }
}

/// A Kafka source's settings.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    pub subscription: Subscription,
    pub starting_offsets: StartingOffsets,
    /// Stop at the offsets current when the job starts (Flink's `setBounded(latest())`): the
    /// source ends once it has read them.
    pub bounded: bool,
    /// `group.id`: where the source commits the offsets of completed checkpoints, for
    /// monitoring (the checkpoint holds the offsets it restores from), and what `committed`
    /// starting offsets read.
    pub group_id: Option<String>,
    /// How often new partitions (and, with a pattern, new topics) are looked for
    /// (`partition.discovery.interval.ms`; `None`: never).
    pub discovery_interval: Option<Duration>,
    /// Event time from the records' Kafka timestamps, with per-partition watermarks that trail
    /// each partition's largest timestamp by this much (Flink's
    /// `WatermarkStrategy.forBoundedOutOfOrderness` on a `KafkaSource`); `None`: no event time.
    pub watermark_out_of_orderness: Option<Duration>,
    /// A partition that gives no record for this long holds event time back no more, and a
    /// subtask whose partitions are all that quiet is idle: downstream watermarks go on without
    /// it until it has records again (Flink's `WatermarkStrategy.withIdleness`). A subtask that
    /// owns no partition is idle whatever this is. `None`: a quiet partition holds event time.
    pub watermark_idle_timeout: Option<Duration>,
    /// More librdkafka consumer properties (`isolation.level`, `security.protocol`, ...).
    pub properties: BTreeMap<String, String>,
}

impl SourceOptions {
    pub fn new(bootstrap_servers: &str, subscription: Subscription) -> Self {
        SourceOptions {
            bootstrap_servers: bootstrap_servers.to_string(),
            subscription,
            starting_offsets: StartingOffsets::Earliest,
            bounded: false,
            group_id: None,
            discovery_interval: Some(Duration::from_secs(30)),
            watermark_out_of_orderness: None,
            watermark_idle_timeout: None,
            properties: BTreeMap::new(),
        }
    }
}

/// How a sink picks a record's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioner {
    /// By the key's murmur2 hash, as Kafka's Java client (keyless records spread at random).
    Default,
    /// Each sink subtask writes to one partition, `subtask % partitions` (Flink's
    /// `FlinkFixedPartitioner`).
    Fixed,
}

/// A Kafka sink's settings.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    pub bootstrap_servers: String,
    pub topic: String,
    pub guarantee: DeliveryGuarantee,
    /// Prefix of the transactional ids (`{prefix}-{subtask}`): unique per job writing to a
    /// cluster, the same across the job's restarts (Flink's `setTransactionalIdPrefix`).
    pub transactional_id_prefix: Option<String>,
    pub partitioner: Partitioner,
    /// More librdkafka producer properties.
    pub properties: BTreeMap<String, String>,
}

impl SinkOptions {
    pub fn new(bootstrap_servers: &str, topic: &str, guarantee: DeliveryGuarantee) -> Self {
        SinkOptions {
            bootstrap_servers: bootstrap_servers.to_string(),
            topic: topic.to_string(),
            guarantee,
            transactional_id_prefix: None,
            partitioner: Partitioner::Default,
            properties: BTreeMap::new(),
        }
    }

    /// Refuses settings that cannot work, naming them.
    pub(crate) fn check(&self) -> floe_datastream::Result<()> {
        if self.topic.is_empty() {
            return Err(error("topic: expected a topic name, got an empty one"));
        }
        if self.guarantee == DeliveryGuarantee::ExactlyOnce
            && self.transactional_id_prefix.as_deref().is_none_or(str::is_empty)
        {
            return Err(error(
                "transactional id prefix: exactly-once needs one, unique to this job (setTransactionalIdPrefix)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_as_flink_names_them_and_refuse_the_rest() {
        assert_eq!(StartingOffsets::parse("earliest"), Ok(StartingOffsets::Earliest));
        assert_eq!(
            StartingOffsets::parse("timestamp:1700000000000"),
            Ok(StartingOffsets::Timestamp(1_700_000_000_000))
        );
        assert!(
            StartingOffsets::parse("newest")
                .unwrap_err()
                .contains("expected earliest, latest, committed or timestamp:MILLIS")
        );
        assert_eq!(
            DeliveryGuarantee::parse("EXACTLY_ONCE"),
            Ok(DeliveryGuarantee::ExactlyOnce)
        );
        assert!(DeliveryGuarantee::parse("twice").is_err());
        let sink = SinkOptions::new("127.0.0.1:9092", "out", DeliveryGuarantee::ExactlyOnce);
        assert!(
            sink.check()
                .unwrap_err()
                .to_string()
                .contains("transactional id prefix")
        );
    }
}
