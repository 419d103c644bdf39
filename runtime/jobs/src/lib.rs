//! Built-in jobs that join connectors, so a manifest alone runs them (a connector crate holds the
//! jobs of its own connector; one that reads one system and writes another lives here, so no
//! connector depends on another):
//!
//! - `kafka-to-postgres`: WordCount over a topic's values, each word's count written to a
//!   PostgreSQL table as it changes, exactly-once by default (`examples/kafka-to-postgres.yaml`).

use floe_connector_kafka::jobs::{
    BOUNDED, DISCOVERY, GROUP, PATTERN, SERVERS, STARTING, TOPIC, source_options,
};
use floe_connector_kafka::{KafkaSourceExt, records};
use floe_connector_postgres::jobs::{BATCH_ROWS, CONNECTION, MODE, TABLE, word_count_sink};
use floe_datastream::{
    ArgKind, ArgSpec, Collector, JobRegistry, JobSpec, Result, StreamExecutionEnvironment, tokenize,
};

const KAFKA_TO_POSTGRES: JobSpec = JobSpec {
    description: "WordCount over a topic's values: each word's count written to a PostgreSQL table (word text, count bigint; word the primary key to upsert) as it changes",
    args: &[
        SERVERS,
        TOPIC,
        PATTERN,
        STARTING,
        BOUNDED,
        GROUP,
        DISCOVERY,
        CONNECTION,
        TABLE,
        MODE,
        ArgSpec::optional(
            "delivery-guarantee",
            ArgKind::OneOf(&["at-least-once", "exactly-once"]),
            Some("exactly-once"),
            "exactly-once: each checkpoint's rows in one transaction once it completed",
        ),
        BATCH_ROWS,
    ],
};

/// Registers `kafka-to-postgres`.
pub fn register(registry: &mut JobRegistry) {
    registry.register_declared("kafka-to-postgres", KAFKA_TO_POSTGRES, kafka_to_postgres);
}

fn kafka_to_postgres(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = KAFKA_TO_POSTGRES.parse("kafka-to-postgres", args)?;
    let counts = env
        .kafka_source(source_options("kafka-to-postgres", &a)?, records::value_string())
        .flat_map(|line: String, out: &mut dyn Collector<(String, u64)>| {
            tokenize(&line, |w| out.collect((w.to_string(), 1)))
        })
        .name("Tokenizer")
        .key_by_ref(|p: &(String, u64)| &p.0)
        .sum();
    word_count_sink(&counts, &a)
}
