//! Kafka for Floe jobs: a source whose partitions are splits read from offsets the checkpoints
//! hold ([`source`]), a sink with Flink's three delivery guarantees, exactly-once through Kafka
//! transactions ([`sink`]), the record (de)serializers ([`records`]), and the manifest-only jobs
//! `kafka-to-files`, `files-to-kafka` and the Kafka WordCount and keyed count ([`jobs`]).
//!
//! The client is librdkafka (the `rdkafka` crate, its bundled 2.12 built with the C toolchain the
//! RocksDB backend needs anyway): the one Rust client with transactions and `read_committed`;
//! the pure-Rust ones (rskafka, kafka, samsa) have neither.

mod commit;
pub mod jobs;
pub mod options;
pub mod records;
pub mod sink;
pub mod source;

use std::sync::Arc;

use floe_datastream::{Data, DataStream, DataStreamSink, StreamExecutionEnvironment};

pub use jobs::register;
pub use options::{
    DeliveryGuarantee, Partitioner, SinkOptions, SourceOptions, StartingOffsets, Subscription,
};
pub use records::{ConsumedRecord, Deserializer, Serializer};
pub use sink::KafkaSinkWriter;
pub use source::KafkaSourceReader;

/// A connector error (the message names the broker, topic, partition or record).
pub(crate) fn error(message: impl Into<String>) -> floe_datastream::Error {
    floe_datastream::Error::Connector {
        connector: "Kafka".into(),
        message: message.into(),
    }
}

pub(crate) fn kafka_error(e: rdkafka::error::KafkaError) -> floe_datastream::Error {
    error(e.to_string())
}

/// `env.kafka_source(options, deserializer)`: Flink's `env.fromSource(KafkaSource...)`.
pub trait KafkaSourceExt {
    fn kafka_source<T: Data>(&self, options: SourceOptions, deserialize: Deserializer<T>) -> DataStream<T>;
}

impl KafkaSourceExt for StreamExecutionEnvironment {
    fn kafka_source<T: Data>(&self, options: SourceOptions, deserialize: Deserializer<T>) -> DataStream<T> {
        let timed = options.watermark_out_of_orderness.is_some();
        let options = Arc::new(options);
        let make = move |ctx: &floe_datastream::connector::ConnectorContext| {
            KafkaSourceReader::new(options.clone(), deserialize.clone(), ctx)
        };
        if timed {
            self.from_source_with_timestamps("Kafka", make)
        } else {
            self.from_source("Kafka", make)
        }
    }
}

/// `stream.sink_to_kafka(options, serializer)`: Flink's `stream.sinkTo(KafkaSink...)`.
pub trait KafkaSinkExt<T> {
    fn sink_to_kafka(&self, options: SinkOptions, serialize: Serializer<T>) -> DataStreamSink;
}

impl<T: Data> KafkaSinkExt<T> for DataStream<T> {
    fn sink_to_kafka(&self, options: SinkOptions, serialize: Serializer<T>) -> DataStreamSink {
        let options = Arc::new(options);
        self.sink_to(
            "Kafka",
            move |record: &T, out: &mut Vec<u8>| {
                let (key, value) = serialize(record);
                records::encode_frame(key.as_deref(), &value, out);
            },
            move |ctx| KafkaSinkWriter::new(options.clone(), ctx),
        )
    }
}
