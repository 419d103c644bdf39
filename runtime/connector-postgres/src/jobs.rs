//! `words-to-postgres`: generated lines' word counts, upserted into a PostgreSQL table as they
//! change (the table ends with each word's count; a manifest alone runs it).

use floe_datastream::{
    ArgKind, ArgSpec, Collector, JobRegistry, JobSpec, Result, StreamExecutionEnvironment,
};

use crate::{PostgresSink, PostgresSinkExt};

const WORDS_TO_POSTGRES: JobSpec = JobSpec {
    description: "generator lines -> word counts upserted into a PostgreSQL table (word text PRIMARY KEY, count bigint) as they change",
    args: &[
        ArgSpec::required(
            "connection",
            ArgKind::Text,
            "the database: host=H port=P user=U dbname=D, or a postgresql:// URL",
        ),
        ArgSpec::optional(
            "table",
            ArgKind::Text,
            Some("word_counts"),
            "the table (it must exist)",
        ),
        ArgSpec::optional(
            "records",
            ArgKind::Count,
            Some("100000"),
            "lines to generate; 0: unbounded",
        ),
        ArgSpec::optional("rate", ArgKind::Rate, None, "lines per second"),
        ArgSpec::optional("seed", ArgKind::Count, Some("42"), "the generator's seed"),
        ArgSpec::optional(
            "batch-rows",
            ArgKind::Positive,
            Some("1000"),
            "rows a subtask writes per statement",
        ),
    ],
};

/// Registers `words-to-postgres`.
pub fn register(registry: &mut JobRegistry) {
    registry.register_declared("words-to-postgres", WORDS_TO_POSTGRES, words_to_postgres);
}

fn words_to_postgres(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = WORDS_TO_POSTGRES.parse("words-to-postgres", args)?;
    let sink = PostgresSink::upsert(
        a.text("connection")?,
        a.text("table")?,
        &["word", "count"],
        &["word"],
    )?
    .batch_rows(a.u64("batch-rows")? as usize);
    let records = a.u64("records")?;
    env.data_generator(
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
    .sum()
    .sink_to_postgres(sink, |(word, count): &(String, u64)| {
        vec![word.as_str().into(), (*count).into()]
    });
    Ok(())
}
