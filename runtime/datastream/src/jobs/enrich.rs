//! The built-in `enrich` job: a stream enriched from a lookup table each subtask loads once, in a
//! rich function's `open` (issue 34, item 2). Generator lines are page views, each word a user's;
//! [`Enrich`] looks each user up in its table of regions and emits `(region, 1)`, and a keyed sum
//! counts views per region. Its `open` registers user metrics (`/metrics`, under the `enrich`
//! group of its operator): `lookups` and `misses` (counters), `lookupsPerSecond` (a meter),
//! `wordsPerLine` (a histogram over the last 1,000 lines) and `tableSize` (a gauge); its `close`
//! logs what the subtask looked up.
//!
//! A user's region is [`region_of`] its name: the test's reference computes it the same way from
//! the generator's lines. `--regions` regions; a user outside the table (none, with the
//! generator's vocabulary) counts as a miss and goes to region `unknown`.

use std::collections::HashMap;

use super::{GENERATED_LINES, LINE_RATE};
use crate::api::StreamExecutionEnvironment;
use crate::error::Result;
use crate::io::generator_vocabulary;
use crate::job_spec::{ArgKind, ArgSpec, JobSpec};
use crate::metrics::{Counter, Histogram, Meter};
use crate::operators::{Collector, FunctionResult, RichFlatMapFunction, RuntimeContext};

pub(crate) const ENRICH: JobSpec = JobSpec {
    description: "generator lines as page views by user, each enriched with the user's region from a table loaded in open(); views per region (rich functions and user metrics)",
    args: &[
        ArgSpec::required("output", ArgKind::Location, "where views per region go"),
        GENERATED_LINES,
        LINE_RATE,
        ArgSpec::optional("seed", ArgKind::Count, Some("42"), "the generator's seed"),
        ArgSpec::optional("regions", ArgKind::Positive, Some("8"), "regions users are in"),
    ],
};

/// The region of `user` among `regions`: FNV-1a of its name, modulo.
pub fn region_of(user: &str, regions: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in user.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("region-{}", h % regions)
}

/// Looks each word of a line up in the table `open` loads; a subtask's own copy.
#[derive(Clone)]
struct Enrich {
    regions: u64,
    table: HashMap<String, String>,
    lookups: Counter,
    misses: Counter,
    per_second: Meter,
    words_per_line: Histogram,
    subtask: u32,
}

impl RichFlatMapFunction<String, (String, u64)> for Enrich {
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        // The table a real job would read from a database or a file, once per subtask.
        let (_, words) = generator_vocabulary();
        self.table = words
            .iter()
            .map(|w| (w.clone(), region_of(w, self.regions)))
            .collect();
        let group = ctx.metric_group().add_group("enrich");
        self.lookups = group.counter("lookups");
        self.misses = group.counter("misses");
        self.per_second = group.meter("lookupsPerSecond");
        self.words_per_line = group.histogram("wordsPerLine", 1000);
        let size = self.table.len() as f64;
        group.gauge("tableSize", move || size);
        self.subtask = ctx.index_of_this_subtask();
        Ok(())
    }

    fn flat_map(&mut self, line: String, out: &mut dyn Collector<(String, u64)>) -> FunctionResult {
        let mut words = 0;
        for user in line.split_whitespace() {
            words += 1;
            match self.table.get(user) {
                Some(region) => out.collect((region.clone(), 1)),
                None => {
                    self.misses.inc();
                    out.collect(("unknown".to_string(), 1));
                }
            }
        }
        self.lookups.inc_by(words);
        self.per_second.mark_events(words as u64);
        self.words_per_line.update(words);
        Ok(())
    }

    fn close(&mut self) -> FunctionResult {
        tracing::info!(
            subtask = self.subtask,
            lookups = self.lookups.count(),
            misses = self.misses.count(),
            "enrich closed"
        );
        Ok(())
    }
}

pub(crate) fn enrich(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = ENRICH.parse("enrich", args)?;
    let output = a.text("output")?;
    crate::io::check_location(output).map_err(|e| crate::Error::argument("--output", e.to_string()))?;
    let records = a.u64("records")?;
    let enrich = Enrich {
        regions: a.u64("regions")?,
        table: HashMap::new(),
        lookups: Counter::default(),
        misses: Counter::default(),
        per_second: Meter::default(),
        words_per_line: Histogram::new(1),
        subtask: 0,
    };
    env.data_generator(
        a.u64("seed")?,
        (records > 0).then_some(records),
        a.opt_f64("rate")?,
    )
    .flat_map_rich(enrich)
    .name("Enrich")
    .key_by(|p: &(String, u64)| p.0.clone())
    .sum()
    .sink_to_file(output);
    Ok(())
}
