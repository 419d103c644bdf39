//! Adaptive batch scheduling across real processes (issue 12, part 1): WordCount with
//! `parallelism: auto` on a JobManager in application mode and a TaskManager. Each vertex's
//! parallelism is decided at run time; the test reads the decisions from the REST API, checks
//! them against the formula (ceil(bytes / avg-data-volume-per-task) within the bounds) and the
//! output against an independent count.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::processes::{jobmanager, taskmanager, wait_job};

const AVG: u64 = 64 << 10;
const MAX_PARALLELISM: u64 = 16;
/// One TaskManager with eight slots (registered before anything is decided).
const SLOTS: u64 = 8;

fn manifest(dir: &Path, input: &Path, output: &Path) -> PathBuf {
    let path = dir.join("job.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: wordcount }}\nspec:\n  job:\n    name: wordcount\n    args: [\"--input\", \"{}\", \"--output\", \"{}\"]\n    parallelism: auto\n    mode: batch\n  taskManager: {{ replicas: 1, slots: 8 }}\n  configuration:\n    execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task: \"{AVG}\"\n    execution.batch.adaptive.auto-parallelism.max-parallelism: \"{MAX_PARALLELISM}\"\n",
            input.display(),
            output.display()
        ),
    )
    .unwrap();
    path
}

/// Runs WordCount `auto` on `input`; returns the finished job's REST details.
fn run_auto(dir: &Path, input: &Path, reference: &HashMap<String, u64>) -> serde_json::Value {
    let output = dir.join("out");
    let m = manifest(dir, input, &output);
    let (_jm, rpc, rest) = jobmanager(&m, &dir.join("jm.log"));
    let _tm = taskmanager(&rpc, SLOTS as u32);
    let job = wait_job(&rest, Duration::from_secs(90), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED"))
    });
    assert_eq!(
        job["state"],
        "FINISHED",
        "{job}\n{}",
        std::fs::read_to_string(dir.join("jm.log")).unwrap_or_default()
    );
    common::assert_batch_output(&output, reference);
    job
}

/// Flink's formula with Floe's bounds: ceil(bytes / avg) within [1, max-parallelism], never above
/// the slots the job holds.
fn expected(bytes: u64) -> u64 {
    bytes.div_ceil(AVG).clamp(1, MAX_PARALLELISM).min(SLOTS)
}

fn decision(job: &serde_json::Value, vertex: usize) -> &serde_json::Value {
    let d = &job["vertices"][vertex]["parallelism-decision"];
    assert!(d.is_object(), "vertex {vertex} has no decision: {job}");
    assert_eq!(job["vertices"][vertex]["parallelism-decided-at-run-time"], true);
    d
}

#[test]
fn auto_parallelism_follows_the_bytes_of_three_inputs() {
    let mut reducers = Vec::new();
    for (i, size) in [100u64 << 10, 200 << 10, 420 << 10].into_iter().enumerate() {
        let dir = common::scratch(&format!("adaptive-size-{i}"));
        let input = dir.join("words.txt");
        floe::generate::write_words(&input, size, 40 + i as u64).unwrap();
        let file_bytes = std::fs::metadata(&input).unwrap().len();
        let job = run_auto(&dir, &input, &common::reference_count(&input));
        // The source: from the file's size.
        let source = decision(&job, 0);
        assert_eq!(source["input-bytes"], file_bytes);
        assert_eq!(
            source["parallelism"].as_u64().unwrap(),
            expected(file_bytes),
            "{source}"
        );
        assert_eq!(
            job["vertices"][0]["subtasks"].as_array().unwrap().len() as u64,
            expected(file_bytes)
        );
        // The reducer: from the bytes the sources wrote, which the sources' parallelism shaped.
        let reduce = decision(&job, 1);
        let bytes = reduce["input-bytes"].as_u64().unwrap();
        let p = reduce["parallelism"].as_u64().unwrap();
        assert_eq!(p, expected(bytes), "{reduce}");
        assert_eq!(job["vertices"][1]["subtasks"].as_array().unwrap().len() as u64, p);
        let shares: Vec<u64> = reduce["bytes-per-subtask"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .collect();
        assert_eq!(shares.iter().sum::<u64>(), bytes);
        println!(
            "input {file_bytes} B: source parallelism {}, reducer parallelism {p} from {bytes} B ({})",
            source["parallelism"], reduce["reason"]
        );
        reducers.push(p);
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(
        reducers.windows(2).all(|w| w[0] <= w[1]) && reducers[0] < reducers[2],
        "the reducer's parallelism grows with the input: {reducers:?}"
    );
}

/// Distinct words whose key group (of the reducer's 16) is `group`, or any other, as asked.
fn words_in_groups(n: usize, pick: impl Fn(u32) -> bool, salt: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let mut i = 0u64;
    while out.len() < n {
        let w = format!("{salt}{i:07}");
        let group = floe_datastream::data::key_group_for_hash(
            floe_datastream::data::key_hash_only(&w),
            MAX_PARALLELISM as u32,
        );
        if pick(group) {
            out.push(w);
        }
        i += 1;
    }
    out
}

/// Skewed input: half of all words fall into one key group. The reducer's subpartition ranges are
/// balanced by bytes: no subtask reads more than the average plus the largest subpartition, and
/// the hot key group gets a range narrower than an even split by count would give it.
#[test]
fn a_skewed_input_is_spread_by_bytes_not_by_count() {
    let dir = common::scratch("adaptive-skew");
    let input = dir.join("skewed.txt");
    const HOT: u32 = 5;
    let hot = words_in_groups(6000, |g| g == HOT, "hot");
    let cold = words_in_groups(6000, |g| g != HOT, "cold");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
    for (h, c) in hot.iter().zip(&cold) {
        writeln!(f, "{h} {c}").unwrap();
    }
    drop(f);
    let job = run_auto(&dir, &input, &common::reference_count(&input));
    let reduce = decision(&job, 1);
    let p = reduce["parallelism"].as_u64().unwrap();
    assert!(p >= 3, "{reduce}");
    let total = reduce["input-bytes"].as_u64().unwrap();
    let largest = reduce["largest-subpartition-bytes"].as_u64().unwrap();
    assert!(
        largest * 3 > total,
        "the hot key group holds about half: {reduce}"
    );
    for share in reduce["bytes-per-subtask"].as_array().unwrap() {
        let share = share.as_u64().unwrap();
        assert!(
            share <= total.div_ceil(p) + largest,
            "{share} > average + largest: {reduce}"
        );
    }
    let ranges: Vec<(u64, u64)> = reduce["subpartition-ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap()))
        .collect();
    assert_eq!(ranges.len() as u64, p);
    // The hot key group is read by a subtask of its own (a split by count would give it
    // MAX_PARALLELISM / p key groups).
    let (s, e) = *ranges
        .iter()
        .find(|(s, e)| (*s..*e).contains(&(HOT as u64)))
        .unwrap();
    assert_eq!((s, e), (HOT as u64, HOT as u64 + 1), "{ranges:?}");
    // The reducer that reads the hot group counted about half of all records.
    let records: Vec<u64> = job["vertices"][1]["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["records-in"].as_u64().unwrap())
        .collect();
    println!(
        "skewed input: reducer ranges {ranges:?}, records in {records:?}, {}",
        reduce["reason"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
