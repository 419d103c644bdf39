//! Nexmark q1's end-to-end latency (issue 14): the generator held to a rate stamps every event
//! with the wall-clock µs it made it; q1's rows cross one exchange (round robin) into a latency
//! sink that keeps `now - stamp` per row in a histogram. Per rate and `execution.buffer-timeout`:
//! p50, p99, p99.9 and the largest, over the rows after a warm-up of 2 s; `behind` when the job
//! took longer than the schedule (the source could not keep the rate, so rows waited in it).
//!
//! `cargo bench -p floe --bench latency --no-default-features -- [--seconds 8] [--rates
//! 100000,1000000] [--timeouts 0,1,100] [--parallelism 2]`

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{arg, job_seconds, manifest, measure};

const FLOE: &str = env!("CARGO_BIN_EXE_floe");

fn list(args: &[String], name: &str, default: &[u64]) -> Vec<u64> {
    arg(args, name)
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = arg(&args, "--seconds").and_then(|v| v.parse().ok()).unwrap_or(8);
    let parallelism: u32 = arg(&args, "--parallelism")
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let rates = list(&args, "--rates", &[100_000, 1_000_000]);
    let timeouts = list(&args, "--timeouts", &[0, 1, 100]);
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("bench-data/latency");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let mut rows = Vec::new();
    for &rate in &rates {
        for &timeout in &timeouts {
            let out = dir.join(format!("q1-{rate}-{timeout}"));
            let _ = std::fs::remove_dir_all(&out);
            let events = rate * seconds;
            let job_args: Vec<String> = [
                "--query",
                "q1",
                "--events",
                &events.to_string(),
                "--rate",
                &rate.to_string(),
                "--latency-output",
                &out.display().to_string(),
            ]
            .map(String::from)
            .to_vec();
            let timeout_ms = timeout.to_string();
            let m = manifest(
                &dir,
                &format!("q1-{rate}-{timeout}"),
                "nexmark",
                &job_args,
                parallelism,
                &[("execution.buffer-timeout", timeout_ms.as_str())],
            );
            let (wall, _, stdout) = measure(
                Command::new(FLOE)
                    .args(["run", "-f"])
                    .arg(&m)
                    .arg("--work-dir")
                    .arg(dir.join("work")),
            );
            let secs = job_seconds(&stdout, wall);
            let mut histogram = floe_datastream::LatencyHistogram::default();
            for e in std::fs::read_dir(&out).expect("latency output").flatten() {
                if e.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                let text = std::fs::read_to_string(e.path()).expect("read");
                histogram.add_text(&text).expect("a latency histogram");
            }
            let ms = |q: f64| histogram.quantile_us(q) as f64 / 1000.0;
            let behind = secs > seconds as f64 * 1.1;
            eprintln!(
                "q1 {rate} ev/s, buffer-timeout {timeout} ms: {} rows, p50 {:.2} ms, p99 {:.2} ms, job {secs:.1} s",
                histogram.count(),
                ms(0.5),
                ms(0.99)
            );
            rows.push((
                rate,
                timeout,
                histogram.count(),
                ms(0.5),
                ms(0.99),
                ms(0.999),
                ms(1.0),
                secs,
                behind,
            ));
        }
    }
    println!(
        "\nNexmark q1 latency, event made -> sink (one exchange), parallelism {parallelism}, {seconds} s per run (the first 2 s not counted); ms, 10 µs buckets (upper ends)"
    );
    println!(
        "{:>9} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}",
        "ev/s", "timeout", "rows", "p50", "p99", "p99.9", "max", "job s", "kept up"
    );
    for (rate, timeout, n, p50, p99, p999, max, secs, behind) in rows {
        println!(
            "{rate:>9} {:>10} {n:>9} {p50:>8.2} {p99:>8.2} {p999:>8.2} {max:>8.2} {secs:>7.1} {:>7}",
            format!("{timeout} ms"),
            if behind { "BEHIND" } else { "yes" }
        );
    }
}
