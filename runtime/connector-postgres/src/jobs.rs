//! `words-to-postgres`: generated lines' word counts written to a PostgreSQL table as they change
//! (a manifest alone runs it): upserted (the table ends with each word's count) or appended
//! (a row per change: each word's counts 1, 2, ... n), at least once or exactly once.
//!
//! The sink's arguments ([`CONNECTION`] to [`BATCH_ROWS`]) and [`word_count_sink`] are public for
//! the jobs of other crates that write word counts to PostgreSQL (`floe-jobs`).

use floe_datastream::{
    ArgKind, ArgSpec, Collector, DataStream, JobArgValues, JobRegistry, JobSpec, Result,
    StreamExecutionEnvironment,
};

use crate::{PostgresSink, PostgresSinkExt};

pub const CONNECTION: ArgSpec = ArgSpec::required(
    "connection",
    ArgKind::Text,
    "the database: host=H port=P user=U dbname=D, or a postgresql:// URL",
);
pub const TABLE: ArgSpec = ArgSpec::optional(
    "table",
    ArgKind::Text,
    Some("word_counts"),
    "the table (it must exist)",
);
pub const MODE: ArgSpec = ArgSpec::optional(
    "mode",
    ArgKind::OneOf(&["upsert", "append"]),
    Some("upsert"),
    "upsert each word's latest count by the primary key (word), or append a row per change",
);
pub const GUARANTEE: ArgSpec = ArgSpec::optional(
    "delivery-guarantee",
    ArgKind::OneOf(&["at-least-once", "exactly-once"]),
    Some("at-least-once"),
    "exactly-once: each checkpoint's rows in one transaction once it completed",
);
pub const BATCH_ROWS: ArgSpec = ArgSpec::optional(
    "batch-rows",
    ArgKind::Positive,
    Some("1000"),
    "rows a subtask writes per statement",
);

const WORDS_TO_POSTGRES: JobSpec = JobSpec {
    description: "generator lines -> word counts written to a PostgreSQL table (word text, count bigint; word the primary key to upsert) as they change",
    args: &[
        CONNECTION,
        TABLE,
        ArgSpec::optional(
            "records",
            ArgKind::Count,
            Some("100000"),
            "lines to generate; 0: unbounded",
        ),
        ArgSpec::optional("rate", ArgKind::Rate, None, "lines per second"),
        ArgSpec::optional("seed", ArgKind::Count, Some("42"), "the generator's seed"),
        MODE,
        GUARANTEE,
        BATCH_ROWS,
    ],
};

/// Registers `words-to-postgres`.
pub fn register(registry: &mut JobRegistry) {
    registry.register_declared("words-to-postgres", WORDS_TO_POSTGRES, words_to_postgres);
}

/// Writes `(word, count)` pairs to the table the arguments name ([`CONNECTION`], [`TABLE`],
/// [`MODE`], [`GUARANTEE`], [`BATCH_ROWS`]), columns `word` and `count`.
pub fn word_count_sink(counts: &DataStream<(String, u64)>, a: &JobArgValues) -> Result<()> {
    let (connection, table) = (a.text("connection")?, a.text("table")?);
    let mut sink = match a.text("mode")? {
        "append" => PostgresSink::append(connection, table, &["word", "count"])?,
        _ => PostgresSink::upsert(connection, table, &["word", "count"], &["word"])?,
    }
    .batch_rows(a.u64("batch-rows")? as usize);
    if a.text("delivery-guarantee")? == "exactly-once" {
        sink = sink.exactly_once();
    }
    counts.sink_to_postgres(sink, |(word, count): &(String, u64)| {
        vec![word.as_str().into(), (*count).into()]
    });
    Ok(())
}

fn words_to_postgres(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = WORDS_TO_POSTGRES.parse("words-to-postgres", args)?;
    let records = a.u64("records")?;
    let counts = env
        .data_generator(
            a.u64("seed")?,
            (records > 0).then_some(records),
            a.opt_f64("rate")?,
        )
        .flat_map(|line: String, out: &mut dyn Collector<(String, u64)>| {
            for word in line.split(' ') {
                out.collect((word.to_string(), 1));
            }
        })
        .name("Tokenizer")
        .key_by_ref(|p: &(String, u64)| &p.0)
        .sum();
    word_count_sink(&counts, &a)
}
