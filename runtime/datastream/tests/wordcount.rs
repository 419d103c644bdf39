//! End-to-end runs of whole jobs in one process, through an in-memory shuffle.

mod common;

use common::{run, temp_dir};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use floe_datastream::{
    BuiltJob, Collector, JobArgs, JobRegistry, RuntimeMode, StreamExecutionEnvironment, generator_line,
    generator_vocabulary,
};
use floe_scheduler::job_graph::ResultPartitionType;
use floe_scheduler::{DistributionPattern, Partitioner};

/// Seeded input: generator lines with capitals and punctuation mixed in, over several files.
fn write_input(dir: &Path) -> HashMap<String, u64> {
    let (cdf, words) = generator_vocabulary();
    let mut reference = HashMap::new();
    for f in 0..3u64 {
        let mut text = String::new();
        for i in 0..1500u64 {
            let mut line = generator_line(42, f * 10_000 + i, &cdf, &words);
            if i % 7 == 0 {
                line = format!("{}, The END! x2 snake_case\r", line.to_uppercase());
            }
            text.push_str(&line);
            text.push('\n');
            // Reference tokenizer, written independently: chars, not bytes.
            let lowered = line.to_lowercase();
            for tok in lowered.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if !tok.is_empty() {
                    *reference.entry(tok.to_string()).or_insert(0) += 1;
                }
            }
        }
        std::fs::write(dir.join(format!("part-{f}.txt")), text).expect("input");
    }
    reference
}

fn read_output(dir: &Path) -> Vec<(String, u64)> {
    let mut lines = Vec::new();
    for e in std::fs::read_dir(dir).expect("output dir") {
        let path = e.expect("entry").path();
        let name = path.file_name().expect("name").to_string_lossy().to_string();
        assert!(name.starts_with("part-"), "unexpected file {name}");
        for l in std::fs::read_to_string(&path).expect("read").lines() {
            let (w, c) = l.split_once('\t').expect("word<TAB>count");
            lines.push((w.to_string(), c.parse().expect("count")));
        }
    }
    lines
}

fn wordcount_job(input: &Path, output: &Path, mode: &str, parallelism: u32) -> BuiltJob {
    JobRegistry::builtin()
        .build(&JobArgs {
            name: "wordcount".into(),
            args: vec![
                "--input".into(),
                input.to_string_lossy().into(),
                "--output".into(),
                format!("file://{}", output.to_string_lossy()),
            ],
            configuration: BTreeMap::from([
                ("execution.runtime-mode".to_string(), mode.to_string()),
                ("parallelism.default".to_string(), parallelism.to_string()),
            ]),
        })
        .expect("wordcount builds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_wordcount_gives_one_final_count_per_word() {
    let input = temp_dir("batch-in");
    let reference = write_input(&input);
    for p in [1u32, 3] {
        let output = temp_dir(&format!("batch-out-{p}"));
        let job = wordcount_job(&input, &output, "BATCH", p);
        // Small buffers so records cross many buffer boundaries.
        run(&job, 1000, Some(Duration::from_millis(100))).await;
        let files = std::fs::read_dir(&output).expect("dir").count();
        assert_eq!(
            files, p as usize,
            "one part file per sink subtask, no .inprogress left"
        );
        let lines = read_output(&output);
        let got: HashMap<String, u64> = lines.iter().cloned().collect();
        assert_eq!(lines.len(), got.len(), "one line per word");
        assert_eq!(got, reference, "parallelism {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_wordcount_emits_every_update() {
    let input = temp_dir("stream-in");
    let reference = write_input(&input);
    for (p, timeout) in [
        (1u32, Some(Duration::from_millis(5))),
        (3, None),
        (3, Some(Duration::ZERO)),
    ] {
        let output = temp_dir(&format!("stream-out-{p}-{timeout:?}"));
        let job = wordcount_job(&input, &output, "STREAMING", p);
        run(&job, 4096, timeout).await;
        let mut updates: HashMap<String, Vec<u64>> = HashMap::new();
        for (w, c) in read_output(&output) {
            updates.entry(w).or_default().push(c);
        }
        assert_eq!(updates.len(), reference.len());
        for (w, mut counts) in updates {
            let n = reference[&w];
            counts.sort_unstable();
            assert_eq!(counts, (1..=n).collect::<Vec<_>>(), "updates of {w}");
        }
    }
}

#[test]
fn wordcount_graph_is_chained_as_in_flink() {
    let dir = std::env::temp_dir();
    for (mode, ty, head) in [
        (
            "BATCH",
            ResultPartitionType::Blocking,
            "Source: Text -> Tokenizer -> Combine",
        ),
        (
            "STREAMING",
            ResultPartitionType::PipelinedBounded,
            "Source: Text -> Tokenizer -> LocalSum",
        ),
    ] {
        let job = wordcount_job(&dir, &dir, mode, 4);
        let g = job.job_graph();
        assert_eq!(g.vertices().len(), 2, "{mode}");
        assert_eq!(g.vertices()[0].id, "source");
        assert_eq!(g.vertices()[0].name, head);
        assert_eq!(g.vertices()[1].id, "reduce");
        assert_eq!(g.vertices()[1].name, "Sum -> Sink: File");
        assert!(g.vertices().iter().all(|v| v.parallelism == 4));
        assert_eq!(g.data_sets().len(), 1);
        let ds = g.data_sets()[0];
        assert_eq!(ds.partitioner, Partitioner::Hash);
        assert_eq!(ds.pattern, DistributionPattern::AllToAll);
        assert_eq!(ds.partition_type, ty);
        let again = wordcount_job(&dir, &dir, mode, 4);
        assert_eq!(job.fingerprint(), again.fingerprint(), "stable fingerprint");
    }
    let b = wordcount_job(&dir, &dir, "BATCH", 4);
    let s = wordcount_job(&dir, &dir, "STREAMING", 4);
    let s2 = wordcount_job(&dir, &dir, "STREAMING", 2);
    assert_ne!(b.fingerprint(), s.fingerprint());
    assert_ne!(s.fingerprint(), s2.fingerprint());
    let pipelined = JobRegistry::builtin()
        .build(&JobArgs {
            name: "wordcount".into(),
            args: ["--input", "/a", "--output", "/b"].map(String::from).to_vec(),
            configuration: BTreeMap::from([
                ("execution.runtime-mode".to_string(), "BATCH".to_string()),
                (
                    "execution.batch-shuffle-mode".to_string(),
                    "ALL_EXCHANGES_PIPELINED".to_string(),
                ),
            ]),
        })
        .expect("builds");
    assert_eq!(
        pipelined.job_graph().data_sets()[0].partition_type,
        ResultPartitionType::PipelinedBounded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioners_parallelism_and_keyed_process() {
    let out = temp_dir("partitioners");
    let mut env = StreamExecutionEnvironment::new();
    env.set_parallelism(2).set_runtime_mode(RuntimeMode::Streaming);
    env.generate_sequence(1, 1000)
        .map(|x: u64| x * 2)
        .set_parallelism(3)
        .broadcast()
        .filter(|x: &u64| !x.is_multiple_of(3))
        .rescale()
        .map(|x: u64| (x % 10, x))
        .key_by(|p: &(u64, u64)| p.0)
        .process(
            |k: &u64, v: (u64, u64), seen: &mut u64, out: &mut dyn Collector<(u64, u64, u64)>| {
                *seen += 1;
                out.collect((*k, v.1, *seen));
            },
        )
        .rebalance()
        .sink_to_file(&out.to_string_lossy())
        .set_parallelism(1);
    let job = env.build().expect("builds");
    let g = job.job_graph();
    let parts: Vec<_> = g.data_sets().iter().map(|d| d.partitioner).collect();
    assert_eq!(
        parts,
        [
            Partitioner::Rebalance,
            Partitioner::Broadcast,
            Partitioner::Rescale,
            Partitioner::Hash,
            Partitioner::Rebalance
        ]
    );
    run(&job, 64, Some(Duration::from_millis(1))).await;
    let text = std::fs::read_to_string(out.join("part-0")).expect("part-0");
    let mut per_key: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut values = Vec::new();
    for l in text.lines() {
        let f: Vec<u64> = l.split('\t').map(|x| x.parse().expect("number")).collect();
        per_key.entry(f[0]).or_default().push(f[2]);
        values.push(f[1]);
    }
    // Broadcast to 2 subtasks doubles every even number that is not a multiple of 3.
    let mut expected: Vec<u64> = (1..=1000u64)
        .map(|x| x * 2)
        .filter(|x| !x.is_multiple_of(3))
        .flat_map(|x| [x, x])
        .collect();
    expected.sort_unstable();
    values.sort_unstable();
    assert_eq!(values, expected);
    for (k, mut seen) in per_key {
        seen.sort_unstable();
        assert_eq!(
            seen,
            (1..=seen.len() as u64).collect::<Vec<_>>(),
            "state of key {k}"
        );
    }
}

#[tokio::test]
async fn batch_count_and_reduce_from_a_collection() {
    let out = temp_dir("count");
    let mut env = StreamExecutionEnvironment::new();
    env.set_parallelism(2).set_runtime_mode(RuntimeMode::Batch);
    let words = ["b", "a", "b", "c", "b", "a"].map(String::from).to_vec();
    env.from_collection(words)
        .key_by(|w: &String| w.clone())
        .count()
        .sink_to_file(&out.to_string_lossy());
    let job = env.build().expect("builds");
    run(&job, 32, None).await;
    let mut got = read_output(&out);
    got.sort();
    assert_eq!(
        got,
        [("a".to_string(), 2), ("b".to_string(), 3), ("c".to_string(), 1)]
    );
}
