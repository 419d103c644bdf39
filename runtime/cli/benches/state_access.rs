//! Per-entry keyed state (issue 33): the per-record cost of a `MapState` `get` + `put`, of a
//! `ListState::add` and of adding to a process window's contents against the number of entries
//! under the key, on both state backends, with the whole-value `MapState` facade of `type State`
//! (decoded and encoded whole at every record) as the map's before and a `Vec` in `type State`
//! (the layout window contents had) as the window's.
//!
//! Run: `cargo bench -p floe --bench state_access` (options after `--`: `--records N`, default
//! 2,000,000; `--sizes A,B,C` entries per key, default 100,10000,1000000; `--whole-records N`,
//! default 20,000, the records of the whole-value rows, whose cost grows with the map).
//!
//! Every row runs the `map-state` job through `floe run` at parallelism 1 with the same number of
//! records and the same total state: `keys = records / (2 x entries)` keys of `entries` entries
//! each (maps: every entry updated twice), or `records / entries` keys of `entries` elements
//! (lists), so only how the state is spread over keys changes from row to row. A row's figure is
//! the job's own time (`floe run`'s `FINISHED in`, which leaves out the cluster's start) per record;
//! its ratio is against the smallest size of the same backend and state, measured in the same run.
//! Each run's output is checked: one line per key, and the entries the job counted.

use std::path::Path;
use std::process::Command;

mod common;

use common::{arg, bench_data, job_seconds, manifest, measure_run};

const FLOE: &str = env!("CARGO_BIN_EXE_floe");

/// (lines, total entries) of the job's output: `key TAB entries TAB checksum` per key.
fn output(dir: &Path) -> (u64, u64) {
    let (mut lines, mut entries) = (0, 0);
    for e in std::fs::read_dir(dir).expect("output directory") {
        let path = e.expect("entry").path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("part").lines() {
            lines += 1;
            entries += line
                .split('\t')
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .expect("entries column");
        }
    }
    (lines, entries)
}

/// One run: the job's seconds per record.
fn run(dir: &Path, backend: &str, state: &str, keys: u64, entries: u64, records: u64) -> f64 {
    let name = format!("{backend}-{state}-{entries}");
    let out = dir.join(&name);
    let _ = std::fs::remove_dir_all(&out);
    let args: Vec<String> = [
        "--output",
        out.to_str().expect("path"),
        "--keys",
        &keys.to_string(),
        "--entries-per-key",
        &entries.to_string(),
        "--records",
        &records.to_string(),
        "--state",
        state,
    ]
    .map(String::from)
    .to_vec();
    // RocksDB is the keyed state's backend only in a checkpointing job; the interval is short
    // because a bounded job ends through a final checkpoint (up to one interval of waiting). The
    // heap rows take no checkpoints.
    let conf: &[(&str, &str)] = if backend == "rocksdb" {
        &[
            ("state.backend.type", "rocksdb"),
            ("execution.checkpointing.interval", "1 s"),
        ]
    } else {
        &[("state.backend.type", "hashmap")]
    };
    let m = manifest(dir, &name, "map-state", &args, 1, conf);
    let r = measure_run(
        Command::new(FLOE)
            .args(["run", "-f"])
            .arg(&m)
            .arg("--work-dir")
            .arg(dir.join("work")),
    );
    let (lines, counted) = output(&out);
    let listed = matches!(state, "list" | "window" | "whole-list");
    let expected = if listed {
        records
    } else {
        keys * entries.min(records / keys)
    };
    assert_eq!(lines, keys, "{name}: one line per key");
    assert_eq!(counted, expected, "{name}: entries");
    job_seconds(&r.stdout, r.wall_s) / records as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |name: &str, default: u64| {
        arg(&args, name).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{name}: expected a number"))
        })
    };
    let records = number("--records", 2_000_000);
    let whole_records = number("--whole-records", 20_000);
    let sizes: Vec<u64> = arg(&args, "--sizes").map_or(vec![100, 10_000, 1_000_000], |v| {
        v.split(',')
            .map(|s| s.trim().parse().expect("--sizes: numbers"))
            .collect()
    });
    let dir = bench_data("state-access");
    println!("per-record cost of per-entry state, {records} records per row (parallelism 1)");
    println!(
        "{:<8} {:<10} {:>10} {:>8} {:>12} {:>10}",
        "backend", "state", "entries", "keys", "us/record", "vs first"
    );
    for backend in ["hashmap", "rocksdb"] {
        for state in ["map", "list", "window"] {
            let mut first = None;
            for &size in &sizes {
                let keys = if state != "map" {
                    (records / size).max(1)
                } else {
                    (records / (2 * size)).max(1)
                };
                let per = run(&dir, backend, state, keys, size, records);
                let base = *first.get_or_insert(per);
                println!(
                    "{backend:<8} {state:<10} {size:>10} {keys:>8} {:>12.3} {:>9.2}x",
                    per * 1e6,
                    per / base
                );
            }
        }
        // The before: the whole-value facade, against per-entry state at the same size.
        for &size in sizes.iter().take(2) {
            let keys = (whole_records / (2 * size)).max(1);
            let whole = run(&dir, backend, "whole-map", keys, size, whole_records);
            let entry = run(&dir, backend, "map", keys, size, whole_records);
            println!(
                "{backend:<8} {:<10} {size:>10} {keys:>8} {:>12.3} {:>9.2}x (whole-value facade / per-entry map, {whole_records} records)",
                "whole-map",
                whole * 1e6,
                whole / entry
            );
            let keys = (whole_records / size).max(1);
            let whole = run(&dir, backend, "whole-list", keys, size, whole_records);
            let window = run(&dir, backend, "window", keys, size, whole_records);
            println!(
                "{backend:<8} {:<10} {size:>10} {keys:>8} {:>12.3} {:>9.2}x (a Vec in type State / window contents per entry, {whole_records} records)",
                "whole-list",
                whole * 1e6,
                whole / window
            );
        }
    }
}
