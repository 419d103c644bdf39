//! WordCount, Floe against Apache Flink 2.3 and a hand-written single-threaded Rust baseline, on the
//! same generated file in the same run.
//!
//! Run: `cargo bench -p floe --bench wordcount --no-default-features` (no RocksDB build) (options after `--`: `--mib N` input size, default 200;
//! `--skip-flink`; `--parallelism P`, default 2; `--runs R`, Floe runs per mode, default 5;
//! `--compare-exe PATH`: another build's `floe`, run alternately with this one in every round, for
//! a before/after of a change on a hot path measured in one run: besides the medians, each pair of
//! runs back to back gives a ratio, of wall time and of CPU time (the processes' user and system
//! time, which other tenants disturb far less), and the median pair is printed;
//! `--instructions`: besides, each build's JobManager and TaskManager run each mode once under
//! valgrind's cachegrind on a `--instructions-mib N` input (default 20), and the instruction counts
//! are compared: they repeat to a few hundredths of a percent, where times vary by 10-20% from run
//! to run on a shared machine (`--runs 0 --instructions`: the counts only). Each
//! Floe mode runs R times, alternating BATCH and STREAMING so that load from other tenants of a
//! shared machine falls on both alike; the table shows the median run (and the fastest), and the
//! STREAMING output is checked against BATCH's: every word's updates are 1, 2, ... up to its final
//! count. The input is generated once (seeded Zipf words) under
//! `$CARGO_TARGET_DIR/bench-data/`. Flink runs through `../shared/bench/flink/flink-wordcount.sh`, which
//! installs Flink from PyPI once. Peak memory is sampled from /proc for the whole process tree of each
//! run (every 20 ms), so it covers `floe run` and all its JobManager and TaskManager children.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod common;

use common::{arg, instructions, measure, measure_run};

const FLOE: &str = env!("CARGO_BIN_EXE_floe");

struct Measured {
    name: String,
    wall_s: f64,
    peak_rss_kib: u64,
    /// CPU seconds of the run's processes; 0 where not measured.
    cpu_s: f64,
}

/// One run of a build in one mode: (wall s, peak KiB, CPU s); a build's runs are kept in round
/// order, so that run i of two builds ran back to back.
type Figures = (f64, u64, f64);

/// The physical baseline: read, tokenize as Flink's example does, count in a HashMap, one thread.
fn baseline(input: &Path) -> (usize, u64) {
    let data = std::fs::read(input).expect("input");
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut lower = Vec::new();
    let mut words = 0u64;
    for line in data.split(|&b| b == b'\n') {
        lower.clear();
        lower.extend(line.iter().map(|b| b.to_ascii_lowercase()));
        for token in lower.split(|b| !(b.is_ascii_alphanumeric() || *b == b'_')) {
            if token.is_empty() {
                continue;
            }
            words += 1;
            let w = std::str::from_utf8(token).unwrap_or("");
            match counts.get_mut(w) {
                Some(c) => *c += 1,
                None => {
                    counts.insert(w.to_string(), 1);
                }
            }
        }
    }
    (counts.len(), words)
}

/// `word<TAB>count` lines of every part file in `dir`.
fn read_counts(dir: &Path) -> Vec<(String, u64)> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output directory").flatten() {
        let text = std::fs::read_to_string(entry.path()).expect("part file");
        for line in text.lines() {
            let (w, c) = line.split_once('\t').expect("word<TAB>count");
            lines.push((w.to_string(), c.parse().expect("count")));
        }
    }
    lines
}

/// STREAMING emits an update per word occurrence: each word's updates must be exactly 1..=n, n
/// being BATCH's final count.
fn check_streaming_against_batch(batch: &Path, streaming: &Path) -> String {
    let finals: HashMap<String, u64> = read_counts(batch).into_iter().collect();
    let mut updates: HashMap<String, Vec<u64>> = HashMap::new();
    for (w, c) in read_counts(streaming) {
        updates.entry(w).or_default().push(c);
    }
    assert_eq!(
        updates.len(),
        finals.len(),
        "STREAMING and BATCH count different words"
    );
    let mut total = 0u64;
    for (w, mut counts) in updates {
        counts.sort_unstable();
        let n = finals[&w];
        assert!(
            counts.iter().copied().eq(1..=n),
            "STREAMING updates of {w:?} are not 1..={n}"
        );
        total += n;
    }
    format!(
        "check: STREAMING's {total} updates are 1..=n for each of the {} words, n = BATCH's count",
        finals.len()
    )
}

fn manifest(dir: &Path, input: &Path, mode: &str, parallelism: u32) -> PathBuf {
    let out = dir.join(format!("out-{mode}"));
    let _ = std::fs::remove_dir_all(&out);
    let text = format!(
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: bench-{mode} }}\nspec:\n  job:\n    name: wordcount\n    args: [\"--input\", \"{}\", \"--output\", \"{}\"]\n    parallelism: {parallelism}\n    mode: {mode}\n  taskManager: {{ replicas: 1, slots: {parallelism} }}\n",
        input.display(),
        out.display()
    );
    let path = dir.join(format!("bench-{mode}.yaml"));
    std::fs::write(&path, text).expect("manifest");
    path
}

/// `words-{mib}mib.txt` under `dir`, generated (seeded) on first use.
fn words_file(dir: &Path, mib: u64) -> PathBuf {
    let input = dir.join(format!("words-{mib}mib.txt"));
    if !input.exists() {
        eprintln!("generating {} ...", input.display());
        let status = Command::new(FLOE)
            .args(["gen-words", "--output"])
            .arg(&input)
            .args(["--mib", &mib.to_string(), "--seed", "42"])
            .status()
            .expect("gen-words");
        assert!(status.success());
    }
    input
}

/// Each build's instruction count per mode on a `mib` MiB input (one run each: the count
/// repeats), and this build's over the compared one's.
fn instruction_counts(dir: &Path, builds: &[(String, PathBuf)], mib: u64, parallelism: u32) {
    assert!(
        instructions::valgrind_available(),
        "--instructions needs valgrind (Debian's valgrind package)"
    );
    let input = words_file(dir, mib);
    let mut lines = Vec::new();
    for mode in ["batch", "streaming"] {
        let mut counts = Vec::new();
        for (label, exe) in builds {
            let m = manifest(dir, &input, mode, parallelism);
            let work = dir.join(format!("cachegrind-{mode}"));
            let count = instructions::count_instructions(exe, &m, parallelism, &work);
            let name = format!("{label} {} p={parallelism}", mode.to_uppercase());
            eprintln!("{name}: {count} instructions");
            lines.push(format!("{name:<32} {count:>16}"));
            counts.push(count);
        }
        if let [this, other] = counts[..] {
            lines.push(format!(
                "floe {} instructions / compared build's: {:.4}x (below 1: this build does less)",
                mode.to_uppercase(),
                this as f64 / other as f64
            ));
        }
    }
    println!("\ninstructions of the JobManager and TaskManager (cachegrind) on {mib} MiB of words");
    for line in lines {
        println!("{line}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: u64 = arg(&args, "--mib").and_then(|v| v.parse().ok()).unwrap_or(200);
    let parallelism: u32 = arg(&args, "--parallelism")
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let skip_flink = args.iter().any(|a| a == "--skip-flink");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("bench-data");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let input = words_file(&dir, mib);
    let size_mib = std::fs::metadata(&input).map(|m| m.len()).unwrap_or(0) as f64 / 1048576.0;

    let mut rows: Vec<Measured> = Vec::new();
    let start = Instant::now();
    let (distinct, words) = baseline(&input);
    rows.push(Measured {
        name: "rust baseline (1 thread)".into(),
        wall_s: start.elapsed().as_secs_f64(),
        peak_rss_kib: 0,
        cpu_s: 0.0,
    });
    eprintln!("baseline: {words} words, {distinct} distinct");

    let count_instructions = args.iter().any(|a| a == "--instructions");
    // `--runs 0` with `--instructions`: the instruction counts only.
    let runs: usize = arg(&args, "--runs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(usize::from(!count_instructions));
    let mut builds = vec![("floe".to_string(), PathBuf::from(FLOE))];
    if let Some(other) = arg(&args, "--compare-exe") {
        builds.push(("compared".to_string(), PathBuf::from(other)));
    }
    let mut floe_runs: Vec<(String, Vec<Figures>)> = Vec::new();
    for _ in 0..runs {
        for mode in ["batch", "streaming"] {
            for (label, exe) in &builds {
                let m = manifest(&dir, &input, mode, parallelism);
                let run = measure_run(
                    Command::new(exe)
                        .args(["run", "-f"])
                        .arg(&m)
                        .arg("--work-dir")
                        .arg(dir.join(format!("work-{mode}"))),
                );
                eprintln!("{}", run.stdout.trim());
                let name = format!("{label} {} p={parallelism}", mode.to_uppercase());
                let figures = (run.wall_s, run.peak_rss_kib, run.cpu_s);
                match floe_runs.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.push(figures),
                    None => floe_runs.push((name, vec![figures])),
                }
            }
        }
    }
    // The last runs of each mode were this build's when no other build is compared.
    if builds.len() == 1 && runs > 0 {
        let check = check_streaming_against_batch(&dir.join("out-batch"), &dir.join("out-streaming"));
        eprintln!("{check}");
    }
    // This build against the compared one, run by run: each pair ran back to back, so the load of
    // other tenants falls on both alike; the median pair's ratio, for wall and for CPU time.
    let mut paired = Vec::new();
    for mode in ["BATCH", "STREAMING"] {
        let of = |label: &str| {
            floe_runs
                .iter()
                .find(|(n, _)| *n == format!("{label} {mode} p={parallelism}"))
                .map(|(_, v)| v.clone())
        };
        if let (Some(this), Some(other)) = (of("floe"), of("compared")) {
            let median = |mut r: Vec<f64>| {
                r.sort_by(f64::total_cmp);
                (r[r.len() / 2], r[0], r[r.len() - 1])
            };
            let wall = median(this.iter().zip(&other).map(|(a, b)| a.0 / b.0).collect());
            let cpu = median(this.iter().zip(&other).map(|(a, b)| a.2 / b.2).collect());
            paired.push((mode, wall, cpu));
        }
    }
    for (name, mut v) in floe_runs {
        let mut cpus: Vec<f64> = v.iter().map(|r| r.2).collect();
        cpus.sort_by(f64::total_cmp);
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let walls: Vec<String> = v.iter().map(|r| format!("{:.2}", r.0)).collect();
        let cpu_text: Vec<String> = cpus.iter().map(|c| format!("{c:.2}")).collect();
        eprintln!("{name}: wall s of {} runs, sorted: {}", v.len(), walls.join(" "));
        eprintln!(
            "{name}: CPU s of {} runs, sorted: {}",
            v.len(),
            cpu_text.join(" ")
        );
        let (wall, peak, _) = v[v.len() / 2];
        rows.push(Measured {
            name: format!("{name} (median)"),
            wall_s: wall,
            peak_rss_kib: peak,
            cpu_s: cpus[cpus.len() / 2],
        });
        rows.push(Measured {
            name: format!("{name} (fastest)"),
            wall_s: v[0].0,
            peak_rss_kib: v[0].1,
            cpu_s: v[0].2,
        });
    }
    if !skip_flink {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/flink/flink-wordcount.sh");
        for mode in ["batch", "streaming"] {
            let (wall, peak, out) = measure(
                Command::new("bash")
                    .arg(&script)
                    .arg(&input)
                    .arg(mode)
                    .arg(parallelism.to_string()),
            );
            eprintln!("{}", out.trim());
            // The script's own wall_s excludes nothing we include; use it when present.
            let wall = out
                .split_whitespace()
                .find_map(|w| w.strip_prefix("wall_s=").and_then(|v| v.parse().ok()))
                .unwrap_or(wall);
            rows.push(Measured {
                name: format!("flink 2.3 {} p={parallelism}", mode.to_uppercase()),
                wall_s: wall,
                peak_rss_kib: peak,
                cpu_s: 0.0,
            });
        }
    }

    println!(
        "\nwordcount on {} ({size_mib:.0} MiB, {words} words, {distinct} distinct)",
        input.display()
    );
    println!(
        "{:<32} {:>9} {:>10} {:>14} {:>8}",
        "engine", "wall s", "MiB/s", "peak RSS MiB", "CPU s"
    );
    for r in &rows {
        let peak = if r.peak_rss_kib == 0 {
            "-".to_string()
        } else {
            format!("{:.0}", r.peak_rss_kib as f64 / 1024.0)
        };
        let cpu = if r.cpu_s == 0.0 {
            "-".to_string()
        } else {
            format!("{:.2}", r.cpu_s)
        };
        println!(
            "{:<32} {:>9.2} {:>10.1} {:>14} {:>8}",
            r.name,
            r.wall_s,
            size_mib / r.wall_s,
            peak,
            cpu
        );
    }
    let rate = |name: &str| {
        rows.iter()
            .find(|r| r.name.starts_with(name))
            .map(|r| size_mib / r.wall_s)
    };
    let (b, fb, fs, base) = (
        rate("floe BATCH"),
        rate("flink 2.3 BATCH"),
        rate("flink 2.3 STREAMING"),
        rate("rust baseline"),
    );
    let s = rate("floe STREAMING");
    println!();
    if let (Some(b), Some(fb)) = (b, fb) {
        println!(
            "floe BATCH / flink BATCH throughput:         {:.1}x (target >= 15x)",
            b / fb
        );
    }
    if let (Some(s), Some(fs)) = (s, fs) {
        println!("floe STREAMING / flink STREAMING throughput: {:.1}x", s / fs);
    }
    if let (Some(b), Some(base)) = (b, base) {
        println!(
            "floe BATCH per core / baseline:              {:.2} (target >= 0.5; BATCH/baseline {:.2}x on {parallelism} cores)",
            b / parallelism as f64 / base,
            b / base
        );
    }
    if let (Some(b), Some(s)) = (b, s) {
        println!(
            "floe STREAMING time / BATCH time:            {:.2}x (target <= 2; median runs)",
            b / s
        );
    }
    if let (Some(b), Some(s)) = (
        rate(&format!("floe BATCH p={parallelism} (fastest)")),
        rate(&format!("floe STREAMING p={parallelism} (fastest)")),
    ) {
        println!("floe STREAMING time / BATCH time, fastest:   {:.2}x", b / s);
    }
    for mode in ["BATCH", "STREAMING"] {
        if let (Some(this), Some(other)) = (
            rate(&format!("floe {mode} p={parallelism} (median)")),
            rate(&format!("compared {mode} p={parallelism} (median)")),
        ) {
            println!(
                "floe {mode} time / compared build's:{}{:.3}x (median runs; below 1: this build is faster)",
                " ".repeat(10 - mode.len()),
                other / this
            );
        }
    }
    for (mode, wall, cpu) in paired {
        println!(
            "floe {mode} / compared, run by run:{}wall {:.3}x (range {:.3}-{:.3}), CPU {:.3}x (range {:.3}-{:.3}) (median of {runs} back-to-back pairs)",
            " ".repeat(11 - mode.len()),
            wall.0,
            wall.1,
            wall.2,
            cpu.0,
            cpu.1,
            cpu.2
        );
    }
    let mem = |name: &str| {
        rows.iter()
            .find(|r| r.name.starts_with(name))
            .map(|r| r.peak_rss_kib as f64)
    };
    if let (Some(f), Some(fl)) = (mem("floe BATCH"), mem("flink 2.3 BATCH")) {
        println!("peak memory floe BATCH / flink BATCH:        {:.2}", f / fl);
    }
    if count_instructions {
        let mib = arg(&args, "--instructions-mib")
            .and_then(|v| v.parse().ok())
            .unwrap_or(20);
        instruction_counts(&dir, &builds, mib, parallelism);
    }
}
