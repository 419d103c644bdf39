//! Jobs a user without Rust runs with a manifest alone: a topic to exactly-once files and back,
//! and the Kafka versions of WordCount and a keyed count (topic to topic).

use std::sync::Arc;
use std::time::Duration;

use floe_datastream::{
    ArgKind, ArgSpec, Collector, JobArgValues, JobRegistry, JobSpec, ProcessWindowFunction, Result,
    StreamExecutionEnvironment, TumblingEventTimeWindows, WindowContext, tokenize,
};

use crate::options::{DeliveryGuarantee, SinkOptions, SourceOptions, StartingOffsets, Subscription};
use crate::{KafkaSinkExt, KafkaSourceExt, records};

// The arguments of a job that reads a topic, public for the jobs of other crates that read one
// (`floe-jobs`), with [`source_options`].
pub const SERVERS: ArgSpec = ArgSpec::required(
    "bootstrap-servers",
    ArgKind::Text,
    "the Kafka brokers, host:port,...",
);
pub const TOPIC: ArgSpec = ArgSpec::optional(
    "topic",
    ArgKind::Text,
    None,
    "the topic(s) to read, comma-separated",
);
pub const PATTERN: ArgSpec = ArgSpec::optional(
    "topic-pattern",
    ArgKind::Text,
    None,
    "read every topic matching this regular expression, also those created later",
);
pub const STARTING: ArgSpec = ArgSpec::optional(
    "starting-offsets",
    ArgKind::Text,
    Some("earliest"),
    "earliest, latest, committed or timestamp:MILLIS",
);
pub const BOUNDED: ArgSpec = ArgSpec::optional(
    "bounded",
    ArgKind::OneOf(&["true", "false"]),
    Some("false"),
    "stop at the offsets current at the start",
);
pub const GROUP: ArgSpec = ArgSpec::optional(
    "group-id",
    ArgKind::Text,
    None,
    "consumer group the read offsets are committed to when a checkpoint completes, for monitoring",
);
pub const DISCOVERY: ArgSpec = ArgSpec::optional(
    "partition-discovery-interval-ms",
    ArgKind::Count,
    Some("30000"),
    "how often new partitions are looked for; 0: never",
);
const OUT_TOPIC: ArgSpec = ArgSpec::required("output-topic", ArgKind::Text, "the topic to write");
const GUARANTEE: ArgSpec = ArgSpec::optional(
    "delivery-guarantee",
    ArgKind::OneOf(&["none", "at-least-once", "exactly-once"]),
    Some("exactly-once"),
    "what the sink promises",
);
const TXN_PREFIX: ArgSpec = ArgSpec::optional(
    "transactional-id-prefix",
    ArgKind::Text,
    None,
    "prefix of the sink's transactional ids, unique per job (default: the job's name and topic)",
);

const KAFKA_TO_FILES: JobSpec = JobSpec {
    description: "a topic's records (values as UTF-8 lines) to exactly-once part files",
    args: &[
        SERVERS,
        TOPIC,
        PATTERN,
        ArgSpec::required("output", ArgKind::Location, "the directory the part files go to"),
        STARTING,
        BOUNDED,
        GROUP,
        DISCOVERY,
        ArgSpec::optional(
            "format",
            ArgKind::OneOf(&["value", "key-value"]),
            Some("value"),
            "value: the value per line; key-value: key TAB value",
        ),
    ],
};

const FILES_TO_KAFKA: JobSpec = JobSpec {
    description: "lines of text files to a topic, one record per line",
    args: &[
        ArgSpec::required("input", ArgKind::Location, "text files"),
        SERVERS,
        OUT_TOPIC,
        GUARANTEE,
        TXN_PREFIX,
        ArgSpec::optional(
            "key",
            ArgKind::OneOf(&["none", "first-field"]),
            Some("none"),
            "first-field: the text before the first TAB (or comma) is the record's key",
        ),
    ],
};

const KAFKA_WORDCOUNT: JobSpec = JobSpec {
    description: "WordCount over a topic's values: lines `word TAB count` to exactly-once part files",
    args: &[
        SERVERS,
        TOPIC,
        PATTERN,
        ArgSpec::required("output", ArgKind::Location, "the directory the counts go to"),
        STARTING,
        BOUNDED,
        DISCOVERY,
    ],
};

const KAFKA_KEYED_COUNT: JobSpec = JobSpec {
    description: "a running count per key of a topic's records, written as `key TAB count` records (keyed by key) to a topic",
    args: &[
        SERVERS, TOPIC, PATTERN, OUT_TOPIC, STARTING, BOUNDED, DISCOVERY, GUARANTEE, TXN_PREFIX,
    ],
};

const KAFKA_WINDOWED_COUNT: JobSpec = JobSpec {
    description: "records per key and tumbling event-time window (the records' Kafka timestamps): lines `key TAB window start TAB count` to exactly-once part files",
    args: &[
        SERVERS,
        TOPIC,
        PATTERN,
        ArgSpec::required("output", ArgKind::Location, "the directory the counts go to"),
        STARTING,
        BOUNDED,
        DISCOVERY,
        ArgSpec::optional("window-ms", ArgKind::Count, Some("1000"), "the windows' size"),
        ArgSpec::optional(
            "out-of-orderness-ms",
            ArgKind::Count,
            Some("0"),
            "how far a partition's records may come behind its largest timestamp",
        ),
        ArgSpec::optional(
            "idle-timeout-ms",
            ArgKind::Count,
            Some("0"),
            "a partition without records for this long holds event time back no more; 0: it always does",
        ),
        GROUP,
        ArgSpec::optional(
            "output-topic",
            ArgKind::Text,
            None,
            "also write the lines to this topic (keyed by key), with --delivery-guarantee",
        ),
        GUARANTEE,
        TXN_PREFIX,
        ArgSpec::optional(
            "skip-empty-keys",
            ArgKind::OneOf(&["true", "false"]),
            Some("false"),
            "true: a filter before the count drops records without a key (an operator upstream of the window, for upgrades that add one)",
        ),
    ],
};

/// Registers `kafka-to-files`, `files-to-kafka`, `kafka-wordcount`, `kafka-keyed-count` and
/// `kafka-windowed-count`.
pub fn register(registry: &mut JobRegistry) {
    registry.register_declared("kafka-to-files", KAFKA_TO_FILES, kafka_to_files);
    registry.register_declared("files-to-kafka", FILES_TO_KAFKA, files_to_kafka);
    registry.register_declared("kafka-wordcount", KAFKA_WORDCOUNT, kafka_wordcount);
    registry.register_declared("kafka-keyed-count", KAFKA_KEYED_COUNT, kafka_keyed_count);
    registry.register_declared("kafka-windowed-count", KAFKA_WINDOWED_COUNT, kafka_windowed_count);
}

/// The source's options from the arguments [`SERVERS`] to [`DISCOVERY`] declare (`job` names the job in
/// errors).
pub fn source_options(job: &str, a: &JobArgValues) -> Result<SourceOptions> {
    let subscription = match (a.get("topic"), a.get("topic-pattern")) {
        (Some(t), None) => Subscription::Topics(t.split(',').map(|s| s.trim().to_string()).collect()),
        (None, Some(p)) => Subscription::Pattern(p.to_string()),
        _ => {
            return Err(floe_datastream::Error::argument(
                "--topic",
                format!("give --topic or --topic-pattern, one of them (job {job})"),
            ));
        }
    };
    let mut options = SourceOptions::new(a.text("bootstrap-servers")?, subscription);
    options.starting_offsets = StartingOffsets::parse(a.text("starting-offsets")?)
        .map_err(|e| floe_datastream::Error::argument("--starting-offsets", format!("{e} (job {job})")))?;
    options.bounded = a.text("bounded")? == "true";
    options.group_id = a.get("group-id").map(str::to_string);
    options.discovery_interval = a
        .opt_u64("partition-discovery-interval-ms")?
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    Ok(options)
}

fn sink_options(job: &str, a: &JobArgValues) -> Result<SinkOptions> {
    let topic = a.text("output-topic")?;
    let guarantee = DeliveryGuarantee::parse(a.text("delivery-guarantee")?)
        .map_err(|e| floe_datastream::Error::argument("--delivery-guarantee", e))?;
    let mut options = SinkOptions::new(a.text("bootstrap-servers")?, topic, guarantee);
    options.transactional_id_prefix = Some(
        a.get("transactional-id-prefix")
            .map_or_else(|| format!("floe-{job}-{topic}"), str::to_string),
    );
    Ok(options)
}

fn kafka_to_files(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = KAFKA_TO_FILES.parse("kafka-to-files", args)?;
    let options = source_options("kafka-to-files", &a)?;
    let lines = if a.text("format")? == "key-value" {
        env.kafka_source(options, records::key_value_strings())
            .map(|(k, v): (String, String)| format!("{k}\t{v}"))
    } else {
        env.kafka_source(options, records::value_string())
    };
    lines.sink_to_file(a.text("output")?);
    Ok(())
}

fn files_to_kafka(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = FILES_TO_KAFKA.parse("files-to-kafka", args)?;
    let options = sink_options("files-to-kafka", &a)?;
    let keyed = a.text("key")? == "first-field";
    env.read_text_file(a.text("input")?).sink_to_kafka(
        options,
        Arc::new(move |line: &String| {
            let key = keyed.then(|| {
                line.split(['\t', ','])
                    .next()
                    .unwrap_or_default()
                    .as_bytes()
                    .to_vec()
            });
            (key, line.as_bytes().to_vec())
        }),
    );
    Ok(())
}

fn kafka_wordcount(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = KAFKA_WORDCOUNT.parse("kafka-wordcount", args)?;
    let options = source_options("kafka-wordcount", &a)?;
    env.kafka_source(options, records::value_string())
        .flat_map(|line: String, out: &mut dyn Collector<(String, u64)>| {
            tokenize(&line, |w| out.collect((w.to_string(), 1)))
        })
        .name("Tokenizer")
        .key_by_ref(|p: &(String, u64)| &p.0)
        .sum()
        .sink_to_file(a.text("output")?);
    Ok(())
}

fn kafka_keyed_count(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = KAFKA_KEYED_COUNT.parse("kafka-keyed-count", args)?;
    let source = source_options("kafka-keyed-count", &a)?;
    let sink = sink_options("kafka-keyed-count", &a)?;
    env.kafka_source(source, records::key_value_strings())
        .map(|(k, _): (String, String)| (k, 1u64))
        .name("Key")
        .key_by_ref(|p: &(String, u64)| &p.0)
        .sum()
        .sink_to_kafka(
            sink,
            Arc::new(|(k, n): &(String, u64)| {
                (Some(k.as_bytes().to_vec()), format!("{k}\t{n}").into_bytes())
            }),
        );
    Ok(())
}

/// Writes `key TAB window start TAB count` for each window's count.
#[derive(Clone)]
struct WindowCount;

impl ProcessWindowFunction<String, (String, u64), String> for WindowCount {
    fn process(
        &self,
        key: &String,
        ctx: &WindowContext,
        counts: &[(String, u64)],
        out: &mut dyn Collector<String>,
    ) {
        for (_, n) in counts {
            out.collect(format!("{key}\t{}\t{n}", ctx.window.start));
        }
    }
}

fn kafka_windowed_count(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = KAFKA_WINDOWED_COUNT.parse("kafka-windowed-count", args)?;
    let mut options = source_options("kafka-windowed-count", &a)?;
    let ms = |name: &str| -> Result<u64> { Ok(a.opt_u64(name)?.unwrap_or(0)) };
    let window = ms("window-ms")?;
    if window == 0 {
        return Err(floe_datastream::Error::argument(
            "--window-ms",
            "a window of 0 ms (give 1 or more)",
        ));
    }
    options.watermark_out_of_orderness = Some(Duration::from_millis(ms("out-of-orderness-ms")?));
    options.watermark_idle_timeout = Some(ms("idle-timeout-ms")?)
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    // Every operator has a uid: a savepoint restores into a changed job (a filter added upstream,
    // another parallelism) by them.
    let records = env
        .kafka_source(options, records::key_value_strings())
        .uid("source");
    let records = if a.text("skip-empty-keys")? == "true" {
        records
            .filter(|(k, _): &(String, String)| !k.is_empty())
            .name("SkipEmptyKeys")
            .uid("skip-empty-keys")
    } else {
        records
    };
    let counts = records
        .map(|(k, _): (String, String)| (k, 1u64))
        .name("Key")
        .uid("key")
        .key_by_ref(|p: &(String, u64)| &p.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(window)))
        .reduce_process(|a: (String, u64), b: (String, u64)| (a.0, a.1 + b.1), WindowCount)
        .uid("window");
    counts.sink_to_file(a.text("output")?).uid("files");
    if a.get("output-topic").is_some() {
        let sink = sink_options("kafka-windowed-count", &a)?;
        counts
            .sink_to_kafka(
                sink,
                Arc::new(|line: &String| {
                    let key = line.split('\t').next().unwrap_or_default();
                    (Some(key.as_bytes().to_vec()), line.as_bytes().to_vec())
                }),
            )
            .uid("kafka");
    }
    Ok(())
}
