//! The job registry: jobs are Rust functions compiled into the worker, looked up by name; every
//! process runs the same function on the same [`JobArgs`] and so gets the same graph.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::StreamExecutionEnvironment;
use crate::error::{Error, Result};
use crate::graph::BuiltJob;
pub use crate::job_spec::{ArgKind, ArgSpec, JobArgValues, JobSpec};
use crate::operators::Collector;

pub(crate) mod enrich;
pub(crate) mod map_state;

/// `--records` of the jobs over generated lines.
const GENERATED_LINES: ArgSpec = ArgSpec::optional(
    "records",
    ArgKind::Count,
    Some("100000"),
    "lines to generate; 0: unbounded",
);

/// `--rate` of the jobs over generated lines.
const LINE_RATE: ArgSpec = ArgSpec::optional("rate", ArgKind::Rate, None, "lines per second");

const WORDCOUNT: JobSpec = JobSpec {
    description: "Flink's WordCount example: lines `word TAB count`",
    args: &[
        ArgSpec::required("input", ArgKind::Location, "text files to count the words of"),
        ArgSpec::required("output", ArgKind::Location, "where the counts go"),
    ],
};

const PIPELINE: JobSpec = JobSpec {
    description: "generator -> map -> keyed count -> files, with the knobs scheduling and flow-control tests use",
    args: &[
        ArgSpec::required("output", ArgKind::Location, "where the counts go"),
        ArgSpec::optional(
            "aggregate",
            ArgKind::OneOf(&["reduce", "sum"]),
            Some("reduce"),
            "how words are counted",
        ),
        GENERATED_LINES,
        LINE_RATE,
        ArgSpec::optional(
            "rate-after",
            ArgKind::Text,
            None,
            "LINE:LINES_PER_S, the rate from that line on",
        ),
        ArgSpec::optional("seed", ArgKind::Count, Some("42"), "the generator's seed"),
        ArgSpec::optional(
            "source-parallelism",
            ArgKind::Positive,
            None,
            "the source's parallelism",
        ),
        ArgSpec::optional(
            "map-parallelism",
            ArgKind::Positive,
            None,
            "the map's parallelism",
        ),
        ArgSpec::optional(
            "reduce-parallelism",
            ArgKind::Positive,
            None,
            "the count's parallelism",
        ),
        ArgSpec::optional(
            "sink-delay-us",
            ArgKind::Count,
            Some("0"),
            "a deliberately slow sink",
        ),
        ArgSpec::optional(
            "latest-first",
            ArgKind::OneOf(&["true", "false"]),
            Some("false"),
            "a keyed reduce before the count that passes every pair on (an upgrade adding an operator upstream)",
        ),
    ],
};

const KEYED_STATE: JobSpec = JobSpec {
    description: "a keyed running count over many distinct keys (state-size benchmarks)",
    args: &[
        ArgSpec::required("output", ArgKind::Location, "where counts go"),
        ArgSpec::required("keys", ArgKind::Positive, "distinct keys"),
        ArgSpec::optional("key-bytes", ArgKind::Positive, Some("100"), "bytes per key"),
        ArgSpec::optional("records", ArgKind::Positive, Some("3 x --keys"), "records in all"),
        ArgSpec::optional(
            "emit-every",
            ArgKind::Positive,
            Some("1000"),
            "write a key's count at multiples of this",
        ),
    ],
};

/// What the CLI and the FlinkJob manifest say about a job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobArgs {
    pub name: String,
    pub args: Vec<String>,
    pub configuration: BTreeMap<String, String>,
}

/// A job's build function: records sources, transformations and sinks on the environment.
pub type JobFn = Arc<dyn Fn(&mut StreamExecutionEnvironment, &[String]) -> Result<()> + Send + Sync>;

/// Jobs by name, each with its declared arguments where it declares them.
#[derive(Clone, Default)]
pub struct JobRegistry {
    jobs: BTreeMap<String, (JobFn, Option<JobSpec>)>,
}

impl std::fmt::Debug for JobRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.jobs.keys()).finish()
    }
}

impl JobRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The jobs that ship with Floe: `wordcount`, `pipeline`, `keyed-state`, `map-state`,
    /// `nexmark`, `broadcast-rules` and `enrich`.
    pub fn builtin() -> Self {
        let mut r = Self::new();
        r.register_declared("wordcount", WORDCOUNT, wordcount);
        r.register_declared("pipeline", PIPELINE, pipeline);
        r.register_declared("keyed-state", KEYED_STATE, keyed_state);
        r.register_declared("map-state", map_state::MAP_STATE, map_state::map_state);
        r.register_declared("enrich", enrich::ENRICH, enrich::enrich);
        r.register_declared("nexmark", crate::nexmark::NEXMARK, crate::nexmark::nexmark_job);
        r.register_declared(
            "broadcast-rules",
            crate::nexmark::BROADCAST_RULES,
            crate::nexmark::broadcast_rules_job,
        );
        r
    }

    /// A job whose arguments it checks itself.
    pub fn register<F>(&mut self, name: &str, build: F) -> &mut Self
    where
        F: Fn(&mut StreamExecutionEnvironment, &[String]) -> Result<()> + Send + Sync + 'static,
    {
        self.jobs.insert(name.to_string(), (Arc::new(build), None));
        self
    }

    /// A job with declared arguments: they are checked before it is built, and `floe jobs`
    /// lists them.
    pub fn register_declared<F>(&mut self, name: &str, spec: JobSpec, build: F) -> &mut Self
    where
        F: Fn(&mut StreamExecutionEnvironment, &[String]) -> Result<()> + Send + Sync + 'static,
    {
        self.jobs.insert(name.to_string(), (Arc::new(build), Some(spec)));
        self
    }

    /// The declared arguments of job `name`.
    pub fn spec(&self, name: &str) -> Option<JobSpec> {
        self.jobs.get(name).and_then(|(_, spec)| *spec)
    }

    /// Every job with its arguments (what `floe jobs` prints).
    pub fn usage(&self) -> String {
        let mut out = String::new();
        for (name, (_, spec)) in &self.jobs {
            match spec {
                Some(spec) => out.push_str(&spec.usage(name)),
                None => out.push_str(&format!("{name}: (arguments not declared)\n")),
            }
            out.push('\n');
        }
        out
    }

    pub fn names(&self) -> Vec<String> {
        self.jobs.keys().cloned().collect()
    }

    /// Configures an environment from `args.configuration`, runs the job's build function and
    /// generates the JobGraph.
    pub fn build(&self, args: &JobArgs) -> Result<BuiltJob> {
        let (job, spec) = self.jobs.get(&args.name).ok_or_else(|| Error::UnknownJob {
            name: args.name.clone(),
            registered: self.names().join(", "),
        })?;
        if let Some(spec) = spec {
            spec.check(&args.name, &args.args)?;
        }
        let mut env = StreamExecutionEnvironment::from_configuration(&args.configuration)?;
        job(&mut env, &args.args)?;
        env.build()
    }
}

/// Arguments `names` are locations a source or sink can open (a path, `file://`, `s3://`).
pub(crate) fn location_args(args: &BTreeMap<String, String>, names: &[&str]) -> Result<()> {
    for name in names {
        if let Some(v) = args.get(*name) {
            crate::io::check_location(v).map_err(|e| Error::argument(&format!("--{name}"), e.to_string()))?;
        }
    }
    Ok(())
}

/// Parses `--name value` pairs; every name must be in `known`, every name in `required` present.
pub fn parse_args(args: &[String], known: &[&str], required: &[&str]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let name = arg
            .strip_prefix("--")
            .ok_or_else(|| Error::argument(arg, "expected --name value"))?;
        let (name, value) = match name.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => (
                name.to_string(),
                it.next()
                    .cloned()
                    .ok_or_else(|| Error::argument(arg, "missing value"))?,
            ),
        };
        if !known.contains(&name.as_str()) {
            return Err(Error::argument(
                &format!("--{name}"),
                format!(
                    "unknown argument; expected {}",
                    known
                        .iter()
                        .map(|k| format!("--{k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        out.insert(name, value);
    }
    for r in required {
        if !out.contains_key(*r) {
            return Err(Error::argument(&format!("--{r}"), "is required"));
        }
    }
    Ok(out)
}

/// Flink's WordCount tokenizer: lowercase, split on `\W+` (anything but ASCII letters, digits and
/// `_`), drop empty tokens. Calls `f` per word without allocating (one reused buffer for words
/// that need lowercasing).
pub fn tokenize(line: &str, mut f: impl FnMut(&str)) {
    let bytes = line.as_bytes();
    let mut lower = String::new();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && !is_word(bytes[i]) {
            i += 1;
        }
        let start = i;
        let mut upper = false;
        while i < bytes.len() && is_word(bytes[i]) {
            upper |= bytes[i].is_ascii_uppercase();
            i += 1;
        }
        if start < i {
            // Word bytes are ASCII, so the slice is on char boundaries.
            let word = &line[start..i];
            if upper {
                lower.clear();
                lower.push_str(word);
                lower.make_ascii_lowercase();
                f(&lower);
            } else {
                f(word);
            }
        }
    }
}

#[inline]
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The built-in `wordcount`: Flink's WordCount example.
/// `--input PATH_OR_URL --output PATH_OR_URL`; output lines `word<TAB>count`.
pub fn wordcount(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let args = parse_args(args, &["input", "output"], &["input", "output"])?;
    location_args(&args, &["input", "output"])?;
    env.read_text_file(&args["input"])
        .flat_map(|line: String, out: &mut dyn Collector<(String, u64)>| {
            tokenize(&line, |w| out.collect((w.to_string(), 1)))
        })
        .name("Tokenizer")
        .key_by_ref(|p: &(String, u64)| &p.0)
        .sum()
        .sink_to_file(&args["output"]);
    Ok(())
}

/// The built-in `pipeline`: generator -> map -> keyed reduce -> file sink, with every knob scheduling
/// and flow-control tests need. Source and map are separate vertices (`start_new_chain`), as in the
/// Source(4) -> Map(4) -> Reduce(3) example of Flink's scheduling docs.
///
/// `--output PATH [--records N (lines; 0 = unbounded; default 100000)] [--rate LINES_PER_S]
/// [--rate-after LINE:LINES_PER_S (the rate from that line on)] [--seed S] [--source-parallelism P] [--map-parallelism P] [--reduce-parallelism P]
/// [--sink-delay-us D (a deliberately slow sink)] [--aggregate reduce|sum (default reduce)]
/// [--latest-first true|false (default false)]`; output lines `word<TAB>count`.
///
/// The source, the counting reduce and the sink set uids, so their state follows them into a
/// changed job. `--latest-first true` adds an operator before the count: a keyed reduce keeping
/// each word's latest pair, which passes every `(word, 1)` on unchanged (the same counts); it is
/// the upgrade that adds an operator upstream, and it takes the vertex id `reduce` (the count's
/// vertex becomes `reduce-2`).
pub fn pipeline(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    const KNOWN: [&str; 11] = [
        "output",
        "latest-first",
        "aggregate",
        "records",
        "rate",
        "rate-after",
        "seed",
        "source-parallelism",
        "map-parallelism",
        "reduce-parallelism",
        "sink-delay-us",
    ];
    let a = parse_args(args, &KNOWN, &["output"])?;
    location_args(&a, &["output"])?;
    let number = |key: &str, default: u64| -> Result<u64> {
        match a.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                Error::argument(
                    &format!("--{key}"),
                    format!("expected a non-negative integer, got {v:?}"),
                )
            }),
        }
    };
    let default_p = u64::from(env.parallelism());
    let records = number("records", 100_000)?;
    let rate = match a.get("rate") {
        None => None,
        Some(v) => Some(
            v.parse::<f64>()
                .map_err(|_| Error::argument("--rate", format!("expected lines per second, got {v:?}")))?,
        ),
    };
    // `--rate-after LINE:RATE`: from line LINE on, RATE lines per second (a load that drops or
    // grows, for the autoscaler).
    let mut rates: Vec<(u64, f64)> = rate.map(|r| vec![(0, r)]).unwrap_or_default();
    if let Some(v) = a.get("rate-after") {
        let step = v
            .split_once(':')
            .and_then(|(line, r)| Some((line.parse::<u64>().ok()?, r.parse::<f64>().ok()?)))
            .filter(|(_, r)| *r > 0.0)
            .ok_or_else(|| {
                Error::argument(
                    "--rate-after",
                    format!("expected LINE:RATE (a line number and lines per second), got {v:?}"),
                )
            })?;
        if rates.is_empty() {
            return Err(Error::argument(
                "--rate-after",
                "needs --rate (the rate before it)",
            ));
        }
        rates.push(step);
    }
    let seed = number("seed", 42)?;
    // Unset: the environment's (0 when `parallelism.default` is auto: decided at run time).
    let parallelism = |key: &str| -> Result<u32> {
        match number(key, default_p)? {
            0 if a.contains_key(key) => Err(Error::argument(&format!("--{key}"), "must be at least 1")),
            p => u32::try_from(p).map_err(|_| Error::argument(&format!("--{key}"), "too large")),
        }
    };
    let (sp, mp, rp) = (
        parallelism("source-parallelism")?,
        parallelism("map-parallelism")?,
        parallelism("reduce-parallelism")?,
    );
    let delay = std::time::Duration::from_micros(number("sink-delay-us", 0)?);
    let words = env
        .data_generator_at_rates(seed, (records > 0).then_some(records), rates)
        .set_parallelism(sp)
        .uid("source")
        .flat_map(|line: String, out: &mut dyn Collector<(String, u64)>| {
            tokenize(&line, |w| out.collect((w.to_string(), 1)))
        })
        .name("Map")
        .uid("map")
        .set_parallelism(mp)
        .start_new_chain();
    let words = match a.get("latest-first").map(String::as_str) {
        None | Some("false") => words,
        Some("true") => words
            .key_by(|p: &(String, u64)| p.0.clone())
            .reduce(|_, latest| latest)
            .set_parallelism(rp)
            .name("Latest"),
        Some(other) => {
            return Err(Error::argument(
                "--latest-first",
                format!("expected true or false, got {other:?}"),
            ));
        }
    };
    let keyed = words.key_by(|p: &(String, u64)| p.0.clone());
    let reduced = match a.get("aggregate").map(String::as_str) {
        None | Some("reduce") => keyed.reduce(|a, b| (a.0, a.1 + b.1)),
        Some("sum") => keyed.sum(),
        Some(other) => {
            return Err(Error::argument(
                "--aggregate",
                format!("expected reduce or sum, got {other:?}"),
            ));
        }
    }
    .set_parallelism(rp)
    .name("Reduce")
    .uid("reduce");
    let slowed = if delay.is_zero() {
        reduced
    } else {
        // Blocking on purpose: this stands for a sink whose external system is slow.
        reduced
            .map(move |r| {
                std::thread::sleep(delay);
                r
            })
            .set_parallelism(rp)
    };
    slowed.sink_to_file(&a["output"]).set_parallelism(rp).uid("sink");
    Ok(())
}

/// The built-in `keyed-state`: a keyed running count over many distinct keys, for state-size
/// benchmarks (rescale downtime with a large RocksDB state).
/// `--output PATH --keys K [--key-bytes B (default 100)] [--records N (default 3 K)]
/// [--emit-every E (default 1000)]`: record n counts key n mod K, a B-byte string of hex digits
/// mixed from it (so the state does not compress to nothing); a key's count is written
/// (`key<TAB>count`) when it reaches a multiple of E.
pub fn keyed_state(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = parse_args(
        args,
        &["output", "keys", "key-bytes", "records", "emit-every"],
        &["output", "keys"],
    )?;
    location_args(&a, &["output"])?;
    let positive = |key: &str, default: Option<u64>| -> Result<u64> {
        match (a.get(key), default) {
            (None, Some(d)) => Ok(d),
            (None, None) => Err(Error::argument(&format!("--{key}"), "is required")),
            (Some(v), _) => match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(Error::argument(
                    &format!("--{key}"),
                    format!("expected a positive integer, got {v:?}"),
                )),
            },
        }
    };
    let keys = positive("keys", None)?;
    let width = usize::try_from(positive("key-bytes", Some(100))?)
        .map_err(|_| Error::argument("--key-bytes", "too large"))?;
    let records = positive("records", Some(keys.saturating_mul(3)))?;
    let emit = positive("emit-every", Some(1000))?;
    env.generate_sequence(0, records - 1)
        .map(move |n: u64| (state_key(n % keys, width), 1u64))
        .name("Key")
        .key_by_ref(|p: &(String, u64)| &p.0)
        .sum()
        .filter(move |p: &(String, u64)| p.1.is_multiple_of(emit))
        .sink_to_file(&a["output"]);
    Ok(())
}

/// Key `k` of `keyed-state`: `width` hex digits of a SplitMix64 sequence seeded by `k`.
fn state_key(k: u64, width: usize) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(width + 16);
    let mut rng = crate::rng::SplitMix::new(k);
    while out.len() < width {
        let _ = write!(out, "{:016x}", rng.next_u64());
    }
    out.truncate(width);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_matches_flinks() {
        let mut words = Vec::new();
        tokenize("Hello, World! hello_world x2", |w| words.push(w.to_string()));
        assert_eq!(words, ["hello", "world", "hello_world", "x2"]);
        words.clear();
        tokenize("  --ÄBC déf--  ", |w| words.push(w.to_string()));
        assert_eq!(words, ["bc", "d", "f"]);
        words.clear();
        tokenize("", |w| words.push(w.to_string()));
        assert!(words.is_empty());
    }

    #[test]
    fn bad_arguments_name_the_argument() {
        let r = JobRegistry::builtin();
        let build = |args: &[&str]| {
            r.build(&JobArgs {
                name: "wordcount".into(),
                args: args.iter().map(|s| s.to_string()).collect(),
                configuration: BTreeMap::new(),
            })
        };
        let e = build(&["--input", "/tmp/x"])
            .expect_err("missing output")
            .to_string();
        assert!(e.contains("--output"), "{e}");
        let e = build(&["--input", "/tmp/x", "--output", "/tmp/y", "--bogus", "1"])
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("--bogus"), "{e}");
        let e = build(&["--input"]).expect_err("no value").to_string();
        assert!(e.contains("--input"), "{e}");
        let e = r
            .build(&JobArgs {
                name: "nope".into(),
                ..JobArgs::default()
            })
            .expect_err("unknown job")
            .to_string();
        assert!(e.contains("nope") && e.contains("wordcount"), "{e}");
    }
}
