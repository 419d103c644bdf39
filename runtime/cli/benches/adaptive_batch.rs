//! Adaptive batch parallelism on a skewed input: WordCount with `parallelism: auto` against the
//! same job at a fixed parallelism, on the same cluster (one TaskManager, `--slots` slots), in the
//! same run, alternating so that load from other tenants of a shared machine falls on both alike.
//!
//! Run: `cargo bench -p floe --bench adaptive_batch --no-default-features` (options after `--`:
//! `--mib N` input size, default 1024; `--parallelism P` of the fixed run, default 2; `--slots S`,
//! default 8; `--runs R`, default 3). The input is generated once under
//! `$CARGO_TARGET_DIR/bench-data/`: words drawn half from a hot set whose every word falls into
//! one key group of the reducer's 32, half from the other key groups, so after the combiner half
//! of the reducer's bytes are in one subpartition. Both runs' outputs are checked equal. Prints
//! the median wall time of each and their ratio, and what the adaptive run decided.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const FLOE: &str = env!("CARGO_BIN_EXE_floe");
const MAX_PARALLELISM: u32 = 32;
const HOT_GROUP: u32 = 7;

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` distinct words whose key group (of MAX_PARALLELISM) `pick` accepts.
fn vocabulary(n: usize, pick: impl Fn(u32) -> bool, prefix: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let mut i = 0u64;
    while out.len() < n {
        let w = format!("{prefix}{i:x}");
        let group = floe_datastream::data::key_group_for_hash(
            floe_datastream::data::key_hash_only(&w),
            MAX_PARALLELISM,
        );
        if pick(group) {
            out.push(w);
        }
        i += 1;
    }
    out
}

fn generate(path: &Path, bytes: u64) {
    let hot = vocabulary(200_000, |g| g == HOT_GROUP, "h");
    let cold = vocabulary(200_000, |g| g != HOT_GROUP, "c");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).expect("input"));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut written = 0u64;
    let mut line = String::new();
    while written < bytes {
        line.clear();
        for k in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let set = if k % 2 == 0 { &hot } else { &cold };
            line.push_str(&set[(x % set.len() as u64) as usize]);
            line.push(' ');
        }
        line.push('\n');
        out.write_all(line.as_bytes()).expect("write input");
        written += line.len() as u64;
    }
    out.flush().expect("flush input");
}

fn manifest(dir: &Path, input: &Path, parallelism: &str, slots: u64) -> PathBuf {
    let path = dir.join(format!("adaptive-{parallelism}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: bench-adaptive }}\nspec:\n  job:\n    name: wordcount\n    args: [\"--input\", \"{}\", \"--output\", \"{}\"]\n    parallelism: {parallelism}\n    mode: batch\n  taskManager: {{ replicas: 1, slots: {slots} }}\n  configuration:\n    pipeline.max-parallelism: \"{MAX_PARALLELISM}\"\n    execution.batch.adaptive.auto-parallelism.max-parallelism: \"{MAX_PARALLELISM}\"\n    execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task: \"64 mb\"\n",
            input.display(),
            dir.join(format!("out-{parallelism}")).display()
        ),
    )
    .expect("manifest");
    path
}

/// Every output line, sorted: the two runs must agree.
fn output(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for e in std::fs::read_dir(dir).expect("output").flatten() {
        if e.file_name().to_string_lossy().starts_with("part-") {
            lines.extend(
                std::fs::read_to_string(e.path())
                    .expect("part")
                    .lines()
                    .map(String::from),
            );
        }
    }
    lines.sort_unstable();
    lines
}

/// A log line without its terminal color codes.
fn strip_colors(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib = arg(&args, "--mib", 1024);
    let fixed = arg(&args, "--parallelism", 2);
    let slots = arg(&args, "--slots", 8);
    let runs = arg(&args, "--runs", 3).max(1) as usize;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("bench-data");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let input = dir.join(format!("skewed-{mib}mib.txt"));
    if !input.exists() {
        eprintln!("generating {} ...", input.display());
        generate(&input, mib << 20);
    }
    let mut walls: Vec<(String, Vec<f64>)> =
        vec![("auto".into(), Vec::new()), (fixed.to_string(), Vec::new())];
    let mut decided = String::new();
    for _ in 0..runs {
        for (parallelism, times) in &mut walls {
            let m = manifest(&dir, &input, parallelism, slots);
            let start = Instant::now();
            let out = Command::new(FLOE)
                .args(["run", "-f"])
                .arg(&m)
                .arg("--work-dir")
                .arg(dir.join(format!("work-adaptive-{parallelism}")))
                .output()
                .expect("floe run");
            let wall = start.elapsed().as_secs_f64();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "floe run failed: {stderr}");
            times.push(wall);
            if parallelism == "auto" {
                let logs = dir.join("work-adaptive-auto/logs");
                let jm = std::fs::read_dir(&logs)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("jobmanager"))
                    .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                    .collect::<String>();
                decided = jm
                    .lines()
                    .filter(|l| l.contains("parallelism decided"))
                    .map(strip_colors)
                    .collect::<Vec<_>>()
                    .join("\n");
            }
        }
    }
    assert_eq!(
        output(&dir.join("out-auto")),
        output(&dir.join(format!("out-{fixed}"))),
        "auto and fixed parallelism disagree"
    );
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let auto = median(&mut walls[0].1);
    let fixed_wall = median(&mut walls[1].1);
    println!(
        "\nadaptive batch WordCount on {} ({mib} MiB, half the words in key group {HOT_GROUP} of {MAX_PARALLELISM}), {slots} slots, {runs} runs each",
        input.display()
    );
    println!("  parallelism auto : {auto:.2} s (median)");
    println!("  parallelism {fixed:<4} : {fixed_wall:.2} s (median)");
    println!("  auto / fixed     : {:.2}x wall time", auto / fixed_wall);
    if !decided.is_empty() {
        println!("decisions of the last auto run:\n{decided}");
    }
}
