//! Planning cost at scale: a two-vertex ALL_TO_ALL job at parallelism 1,000 and 10,000 (10^8 logical
//! edges), planned end to end (execution graph, pipelined regions, slot placement).
//!
//! Run: `cargo bench -p floe-scheduler --bench plan_scale`
//!
//! Each size runs in a fresh child process (this binary re-executed) so that its peak resident memory
//! (VmHWM) is its own; an empty child gives the process's baseline. Prints wall time, peak memory and the
//! 10,000 / 1,000 ratios (linear planning gives ~10 for time, not 100).

use std::process::Command;
use std::time::Instant;

use floe_scheduler::job_graph::Partitioner;
use floe_scheduler::{BatchShuffleMode, JobGraph, Plan};

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Child: plan one size (0 = baseline, nothing planned) and print `wall_s peak_kib regions slots`.
fn child(parallelism: u32, mode: BatchShuffleMode) {
    if parallelism == 0 {
        println!("0 {} 0 0", peak_rss_kib());
        return;
    }
    let start = Instant::now();
    let job = JobGraph::test()
        .vertex("source", parallelism)
        .vertex("sink", parallelism)
        .edge("source", "sink", Partitioner::Hash)
        .build()
        .expect("valid job")
        .with_shuffle_mode(mode);
    let plan = Plan::new(job, None).expect("fits");
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{wall:.4} {} {} {}",
        peak_rss_kib(),
        plan.regions.len(),
        plan.slots.len()
    );
}

fn run(parallelism: u32, mode: BatchShuffleMode) -> (f64, u64, u64, u64) {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe)
        .args(["--child", &parallelism.to_string(), mode.name()])
        .output()
        .expect("child runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    assert!(
        f.len() == 4,
        "child failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        f[0].parse().expect("wall"),
        f[1].parse().expect("rss"),
        f[2].parse().expect("regions"),
        f[3].parse().expect("slots"),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let p = args[i + 1].parse().expect("parallelism");
        let mode = args[i + 2].parse().expect("mode");
        child(p, mode);
        return;
    }
    let (_, base_kib, _, _) = run(0, BatchShuffleMode::AllExchangesBlocking);
    println!("plan_scale: source(P) -hash, all-to-all-> sink(P); baseline process peak {base_kib} KiB");
    for mode in [
        BatchShuffleMode::AllExchangesBlocking,
        BatchShuffleMode::AllExchangesPipelined,
    ] {
        let mut rows = Vec::new();
        for p in [1_000u32, 10_000] {
            // Best of three: the machine is shared.
            let best = (0..3)
                .map(|_| run(p, mode))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .expect("runs");
            let edges = p as u64 * p as u64;
            println!(
                "  {mode} P={p:>6} logical_edges={edges:>11} regions={:>6} slots={:>6} wall_s={:.4} \
                 peak_rss_mib={:.1} (above baseline {:.1})",
                best.2,
                best.3,
                best.0,
                best.1 as f64 / 1024.0,
                best.1.saturating_sub(base_kib) as f64 / 1024.0
            );
            rows.push(best);
        }
        println!(
            "  {mode} ratio 10000/1000: time {:.1}x, memory above baseline {:.1}x (10x = linear)",
            rows[1].0 / rows[0].0,
            rows[1].1.saturating_sub(base_kib) as f64 / rows[0].1.saturating_sub(base_kib).max(1) as f64
        );
    }
}
