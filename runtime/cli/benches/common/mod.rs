//! What the benchmarks share: arguments, and running a command while sampling the memory of its
//! whole process tree.

#![allow(dead_code)]

pub mod instructions;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Sum of VmRSS over a process and its descendants.
pub fn tree_rss_kib(root: u32) -> u64 {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // Field 4 (ppid) follows the parenthesised command name.
            let Some(after) = stat.rsplit_once(')').map(|(_, a)| a) else {
                continue;
            };
            if let Some(ppid) = after
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
            {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut total = 0;
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            total += status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
        stack.extend(children.get(&pid).into_iter().flatten());
    }
    total
}

/// CPU seconds (user and system) of this process's children that have ended and been waited for,
/// and of theirs (`cutime` and `cstime` of `/proc/self/stat`, in clock ticks of 10 ms).
fn children_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields 16 and 17; the fields after the parenthesised command name start at field 3.
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let ticks: u64 = after
        .split_whitespace()
        .skip(13)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// One measured run of a command.
pub struct Run {
    pub wall_s: f64,
    pub peak_rss_kib: u64,
    /// CPU seconds of the command and every process under it that it waited for (`floe run` waits
    /// for its JobManager and TaskManagers): the work done, which other tenants of a shared machine
    /// disturb far less than the wall time.
    pub cpu_s: f64,
    pub stdout: String,
}

/// Runs a command to completion, sampling its process tree's memory; returns (wall s, peak KiB, stdout).
pub fn measure(cmd: &mut Command) -> (f64, u64, String) {
    let run = measure_run(cmd);
    (run.wall_s, run.peak_rss_kib, run.stdout)
}

/// [`measure`], with the CPU time the run took.
pub fn measure_run(cmd: &mut Command) -> Run {
    let cpu_before = children_cpu_s();
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("command starts");
    let pid = child.id();
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok();
        s
    });
    let mut peak = 0;
    loop {
        peak = peak.max(tree_rss_kib(pid));
        if let Ok(Some(status)) = child.try_wait() {
            assert!(status.success(), "{cmd:?} failed: {status}");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Run {
        wall_s: start.elapsed().as_secs_f64(),
        peak_rss_kib: peak,
        cpu_s: children_cpu_s() - cpu_before,
        stdout: reader.join().unwrap_or_default(),
    }
}

/// A `FlinkJob` manifest for `floe run -f`: job `job` with `args` at `parallelism` (one
/// TaskManager with a slot per subtask), STREAMING, with `configuration`.
pub fn manifest(
    dir: &std::path::Path,
    name: &str,
    job: &str,
    args: &[String],
    parallelism: u32,
    configuration: &[(&str, &str)],
) -> std::path::PathBuf {
    let mut text = format!(
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: {name} }}\nspec:\n  job:\n    name: {job}\n    args: {}\n    parallelism: {parallelism}\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: {parallelism} }}\n",
        serde_json::to_string(args).expect("args")
    );
    if !configuration.is_empty() {
        text.push_str("  configuration:\n");
        for (k, v) in configuration {
            text.push_str(&format!(
                "    {k}: {}\n",
                serde_json::to_string(v).expect("value")
            ));
        }
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).expect("manifest");
    path
}

/// The job's own time from `floe run`'s summary (`FINISHED in 1.23s`), else the wall time.
pub fn job_seconds(out: &str, wall: f64) -> f64 {
    out.split("FINISHED in ")
        .nth(1)
        .and_then(|rest| rest.split('s').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(wall)
}

/// `$CARGO_TARGET_DIR/bench-data/{name}` (the workspace's `target` without it), created.
pub fn bench_data(name: &str) -> std::path::PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("bench-data").join(name);
    std::fs::create_dir_all(&dir).expect("bench directory");
    dir
}
