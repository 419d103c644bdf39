//! Rich functions end to end in one process (issue 34, item 2): each subtask opens its own copy of
//! a function once, with its index, the parallelism, its attempt and the job's configuration,
//! before its first record, and closes it once after its last; the metrics the functions
//! register count what they did; a failing `open` or `map` fails its task naming the operator;
//! the built-in `enrich` job equals a reference computed here.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{lines, run_tasks, temp_dir, url};
use floe_datastream::metrics::Metric;
use floe_datastream::{
    Collector, FunctionResult, JobArgs, JobRegistry, KeyedContext, KeyedProcessFunction, RichMapFunction,
    RichSinkFunction, RuntimeContext, StreamExecutionEnvironment, TaskMetrics,
};

/// Writes `name` in `dir` once: a second write of the same name (a second `open` or `close` of one
/// subtask's copy) fails.
fn mark(dir: &Path, name: &str, content: &str) -> FunctionResult {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(name))
        .map_err(|e| format!("{name}: {e}"))?;
    f.write_all(content.as_bytes())?;
    Ok(())
}

/// Tags each number with the subtask that mapped it; records what `open` saw and, in `close`, how
/// many it mapped.
#[derive(Clone)]
struct Tag {
    marks: PathBuf,
    fail_open_on: Option<u32>,
    fail_map_at: Option<u64>,
    subtask: Option<u32>,
    mapped: u64,
    counter: Option<floe_datastream::metrics::Counter>,
}

impl Tag {
    fn new(marks: &Path) -> Self {
        Tag {
            marks: marks.to_path_buf(),
            fail_open_on: None,
            fail_map_at: None,
            subtask: None,
            mapped: 0,
            counter: None,
        }
    }
}

impl RichMapFunction<u64, (u32, u64)> for Tag {
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let i = ctx.index_of_this_subtask();
        if self.fail_open_on == Some(i) {
            return Err("no connection to db:5432".into());
        }
        mark(
            &self.marks,
            &format!("map-opened-{i}"),
            &format!(
                "{} {} {} {} {}",
                ctx.number_of_parallel_subtasks(),
                ctx.max_number_of_parallel_subtasks(),
                ctx.attempt_number(),
                ctx.parameter("pipeline.name").unwrap_or("-"),
                ctx.operator_name()
            ),
        )?;
        self.counter = Some(ctx.metric_group().counter("mapped"));
        self.subtask = Some(i);
        Ok(())
    }

    fn map(&mut self, n: u64) -> FunctionResult<(u32, u64)> {
        let subtask = self.subtask.ok_or("map before open")?;
        if self.fail_map_at == Some(n) {
            return Err(format!("cannot map {n}").into());
        }
        self.mapped += 1;
        if let Some(c) = &self.counter {
            c.inc();
        }
        Ok((subtask, n))
    }

    fn close(&mut self) -> FunctionResult {
        let i = self.subtask.ok_or("close before open")?;
        mark(&self.marks, &format!("map-closed-{i}"), &self.mapped.to_string())
    }
}

/// Passes each tagged number on with the keyed subtask that saw it; open and close marked.
#[derive(Clone)]
struct Keyed {
    marks: PathBuf,
    subtask: Option<u32>,
}

impl KeyedProcessFunction<u64, (u32, u64), String> for Keyed {
    type State = u64;

    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let i = ctx.index_of_this_subtask();
        mark(&self.marks, &format!("keyed-opened-{i}"), "")?;
        self.subtask = Some(i);
        Ok(())
    }

    fn process_element(
        &self,
        (from, n): (u32, u64),
        ctx: &mut KeyedContext<'_, u64, u64>,
        out: &mut dyn Collector<String>,
    ) {
        *ctx.state() += 1;
        out.collect(format!("{n} {from} {}", self.subtask.unwrap_or(u32::MAX)));
    }

    fn close(&mut self) -> FunctionResult {
        let i = self.subtask.ok_or("close before open")?;
        mark(&self.marks, &format!("keyed-closed-{i}"), "")
    }
}

const N: u64 = 3000;

fn job(out: &Path, marks: &Path, tag: Tag) -> floe_datastream::BuiltJob {
    let conf: BTreeMap<String, String> = [("pipeline.name", "rich-test"), ("parallelism.default", "3")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    let env = StreamExecutionEnvironment::from_configuration(&conf).expect("configuration");
    env.generate_sequence(1, N)
        .set_parallelism(1)
        .rebalance()
        .map_rich(tag)
        .key_by(|p: &(u32, u64)| p.1 % 7)
        .process_function(Keyed {
            marks: marks.to_path_buf(),
            subtask: None,
        })
        .sink_to_file(&url(out));
    env.build().expect("builds")
}

fn read(marks: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(marks.join(name)).ok()
}

/// The value of counter `name` a task's functions registered, if any.
fn counter(metrics: &TaskMetrics, name: &str) -> Option<i64> {
    metrics
        .user
        .registered()
        .into_iter()
        .find(|r| r.name == name)
        .and_then(|r| match r.metric {
            Metric::Counter(c) => Some(c.count()),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_subtask_opens_its_own_copy_before_its_first_record_and_closes_it_after_its_last() {
    let (out, marks) = (temp_dir("rich-out"), temp_dir("rich-marks"));
    let job = job(&out, &marks, Tag::new(&marks));
    let runs = run_tasks(&job, 4096, Some(Duration::from_millis(5))).await;
    for r in &runs {
        assert!(
            r.result.is_ok(),
            "task {}/{}: {:?}",
            r.vertex,
            r.subtask,
            r.result
        );
    }
    // Every number once, each tagged by the map subtask and the keyed subtask that saw it.
    let got = lines(&out);
    assert_eq!(got.len() as u64, N, "one line per number");
    let mut per_map_subtask = [0u64; 3];
    let mut numbers = Vec::new();
    for (line, count) in &got {
        assert_eq!(*count, 1, "{line}");
        let f: Vec<u64> = line.split(' ').map(|x| x.parse().expect("number")).collect();
        numbers.push(f[0]);
        per_map_subtask[f[1] as usize] += 1;
        assert!(f[2] < 3, "keyed subtask {line}");
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=N).collect::<Vec<_>>());
    for (i, mapped) in per_map_subtask.iter().enumerate() {
        // What open saw: 3 subtasks, 128 key groups (the default), attempt 0, the job's
        // configuration, the operator's name.
        assert_eq!(
            read(&marks, &format!("map-opened-{i}")).as_deref(),
            Some("3 128 0 rich-test Map"),
            "map subtask {i}"
        );
        // close ran once, after the subtask's last record: it counted every record it mapped.
        assert_eq!(
            read(&marks, &format!("map-closed-{i}")),
            Some(mapped.to_string()),
            "map subtask {i}"
        );
        assert!(
            read(&marks, &format!("keyed-opened-{i}")).is_some(),
            "keyed subtask {i}"
        );
        assert!(
            read(&marks, &format!("keyed-closed-{i}")).is_some(),
            "keyed subtask {i}"
        );
    }
    // The counter each map subtask registered counted what it mapped.
    let map_vertex = runs
        .iter()
        .find(|r| counter(&r.metrics, "mapped").is_some())
        .expect("a task registered the counter")
        .vertex;
    for r in runs.iter().filter(|r| r.vertex == map_vertex) {
        assert_eq!(
            counter(&r.metrics, "mapped"),
            Some(per_map_subtask[r.subtask as usize] as i64),
            "subtask {}",
            r.subtask
        );
        let registered = r.metrics.user.registered();
        assert_eq!(registered[0].operator, "Map");
        assert_eq!(
            registered[0].scoped_name(),
            "flink_taskmanager_job_task_operator_mapped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_that_fails_fails_its_task_naming_the_operator_and_the_subtask() {
    let (out, marks) = (temp_dir("rich-open-out"), temp_dir("rich-open-marks"));
    let mut tag = Tag::new(&marks);
    tag.fail_open_on = Some(1);
    let runs = run_tasks(&job(&out, &marks, tag), 4096, Some(Duration::from_millis(5))).await;
    let failed: Vec<&String> = runs.iter().filter_map(|r| r.result.as_ref().err()).collect();
    assert!(
        failed
            .iter()
            .any(|e| e.as_str() == "Map (subtask 2 of 3): open failed: no connection to db:5432"),
        "{failed:?}"
    );
    // The subtask whose open failed was never opened, so it is not closed either.
    assert!(read(&marks, "map-opened-1").is_none());
    assert!(read(&marks, "map-closed-1").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_that_fails_fails_its_task_and_its_function_is_still_closed() {
    let (out, marks) = (temp_dir("rich-map-out"), temp_dir("rich-map-marks"));
    let mut tag = Tag::new(&marks);
    tag.fail_map_at = Some(1500);
    let runs = run_tasks(&job(&out, &marks, tag), 4096, Some(Duration::from_millis(5))).await;
    let failed: Vec<&String> = runs.iter().filter_map(|r| r.result.as_ref().err()).collect();
    assert!(
        failed
            .iter()
            .any(|e| e.as_str() == "Map: map failed: cannot map 1500"),
        "{failed:?}"
    );
    // Every map subtask was closed, the failed one too (when its operator was dropped).
    for i in 0..3 {
        assert!(
            read(&marks, &format!("map-closed-{i}")).is_some(),
            "map subtask {i}"
        );
    }
}

/// The built-in `enrich` job: views per region equal a count made here from the generator's
/// lines and `region_of`, and its user metrics count the lookups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enrich_job_counts_views_per_region_and_its_metrics_count_its_lookups() {
    let out = temp_dir("enrich");
    let records = 20_000u64;
    let job = JobRegistry::builtin()
        .build(&JobArgs {
            name: "enrich".into(),
            args: [
                "--records",
                &records.to_string(),
                "--output",
                &url(&out),
                "--regions",
                "5",
            ]
            .map(String::from)
            .to_vec(),
            configuration: [("parallelism.default", "2"), ("execution.runtime-mode", "BATCH")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        })
        .expect("builds");
    let runs = run_tasks(&job, 32 * 1024, Some(Duration::from_millis(10))).await;
    for r in &runs {
        assert!(r.result.is_ok(), "{:?}", r.result);
    }
    let (cdf, words) = floe_datastream::generator_vocabulary();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    let mut lookups = 0;
    for i in 0..records {
        for w in floe_datastream::generator_line(42, i, &cdf, &words).split_whitespace() {
            *want.entry(floe_datastream::enrich_region_of(w, 5)).or_default() += 1;
            lookups += 1;
        }
    }
    let got: BTreeMap<String, u64> = lines(&out)
        .into_keys()
        .map(|l| {
            let (region, n) = l.split_once('\t').expect("region TAB views");
            (region.to_string(), n.parse().expect("views"))
        })
        .collect();
    assert_eq!(got, want);
    let sum = |name: &str| -> i64 { runs.iter().filter_map(|r| counter(&r.metrics, name)).sum() };
    assert_eq!(sum("lookups"), lookups);
    assert_eq!(sum("misses"), 0);
    let lines_seen: u64 = runs
        .iter()
        .flat_map(|r| r.metrics.user.registered())
        .filter_map(|r| match r.metric {
            Metric::Histogram(h) if r.name == "wordsPerLine" => Some(h.count()),
            _ => None,
        })
        .sum();
    assert_eq!(lines_seen, records);
}

/// Appends what it is given to its subtask's file, at each flush; `open` and `close` leave marks.
#[derive(Clone)]
struct FileLines {
    dir: PathBuf,
    file: Option<PathBuf>,
    buffered: String,
}

impl RichSinkFunction<u64> for FileLines {
    fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
        let i = ctx.index_of_this_subtask();
        mark(&self.dir, &format!("sink-opened-{i}"), ctx.operator_name())?;
        self.file = Some(self.dir.join(format!("lines-{i}")));
        Ok(())
    }
    fn invoke(&mut self, value: u64) -> FunctionResult {
        self.buffered.push_str(&format!("{value}\n"));
        Ok(())
    }
    fn flush(&mut self) -> FunctionResult {
        use std::io::Write;
        let path = self.file.as_ref().ok_or("flush before open")?;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        f.write_all(std::mem::take(&mut self.buffered).as_bytes())?;
        Ok(())
    }
    fn close(&mut self) -> FunctionResult {
        let path = self.file.as_ref().ok_or("close before open")?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        mark(&self.dir, &format!("sink-closed-{name}"), "")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_function_gets_every_record_once_and_each_subtask_opens_and_closes_its_copy() {
    let dir = temp_dir("rich-sink");
    let env = StreamExecutionEnvironment::new();
    env.generate_sequence(1, N)
        .set_parallelism(3)
        .map(|n: u64| n * 2)
        .add_sink(FileLines {
            dir: dir.clone(),
            file: None,
            buffered: String::new(),
        })
        .set_parallelism(2);
    let runs = run_tasks(
        &env.build().expect("builds"),
        4096,
        Some(Duration::from_millis(5)),
    )
    .await;
    for r in &runs {
        assert!(r.result.is_ok(), "{:?}", r.result);
    }
    let mut got = Vec::new();
    for i in 0..2 {
        assert_eq!(
            read(&dir, &format!("sink-opened-{i}")).as_deref(),
            Some("Sink: Function")
        );
        assert!(
            read(&dir, &format!("sink-closed-lines-{i}")).is_some(),
            "subtask {i} closed"
        );
        let text = read(&dir, &format!("lines-{i}")).unwrap_or_default();
        got.extend(text.lines().map(|l| l.parse::<u64>().expect("number")));
    }
    got.sort_unstable();
    assert_eq!(got, (1..=N).map(|n| n * 2).collect::<Vec<_>>());
}
