//! `floe run` never leaves a child process behind: not after Ctrl-C (SIGINT), and not when it is
//! killed outright (SIGKILL: the children see their stdin pipe close and exit).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Direct children of a process, from /proc.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, after)) = stat.rsplit_once(')') else {
            continue;
        };
        if after
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u32>().ok())
            == Some(pid)
        {
            out.push(p);
        }
    }
    out
}

/// Alive and not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .map(|(_, a)| a.split_whitespace().next() != Some("Z"))
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

/// Starts an unbounded streaming job under `floe run` and waits until it is submitted.
fn start_unbounded(name: &str) -> (Child, Vec<u32>) {
    let dir = scratch(name);
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: forever }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"0\", \"--rate\", \"100\"]\n    parallelism: 2\n    mode: streaming\n  taskManager: {{ replicas: 2, slots: 1 }}\n",
            dir.join("out").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(FLOE)
        .args(["run", "-f"])
        .arg(&manifest)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("Submitted job") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "floe run ended before submitting"
        );
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let kids = children(child.id());
    assert_eq!(kids.len(), 3, "a JobManager and two TaskManagers");
    assert!(kids.iter().all(|&k| alive(k)));
    (child, kids)
}

fn wait_gone(pids: &[u32]) {
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "children still running: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ctrl_c_stops_every_child() {
    let (mut child, kids) = start_unbounded("sigint");
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    wait_gone(&kids);
}

#[test]
fn sigkill_of_floe_run_still_stops_every_child() {
    let (mut child, kids) = start_unbounded("sigkill");
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(&kids);
}

/// `floe run` prints its web UI's URL; with `--keep-ui` the UI stays up after the job ended, shows
/// it FINISHED, and Ctrl-C then stops the cluster with the job's exit code (0), leaving no child.
#[test]
fn keep_ui_serves_the_ui_after_the_job_until_ctrl_c() {
    let dir = scratch("keep-ui");
    let (input, reference) = input();
    let manifest = wordcount_manifest(&dir, input, &dir.join("out"), "batch", 2, 1, 2, &[]);
    let mut child = Command::new(FLOE)
        .args(["run", "--keep-ui", "-f"])
        .arg(&manifest)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let address = loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "floe run ended before printing the UI's URL"
        );
        if line.starts_with("Web UI: ") {
            break web_ui_address(&line).unwrap_or_else(|| panic!("not an http URL: {line}"));
        }
    };
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    // The summary line: the job ended.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut summary = String::new();
    while !summary.starts_with("Job wordcount") {
        summary.clear();
        assert!(out.read_line(&mut summary).unwrap() > 0, "no summary line");
    }
    assert!(summary.contains("FINISHED"), "{summary}");
    assert_batch_output(&dir.join("out"), reference);
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    // Still served after the end: the page, and the job FINISHED behind it.
    let mut page = String::new();
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&address).unwrap();
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        s.read_to_string(&mut page).unwrap();
    }
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("<script src=\"ui/app.js\">"), "{page}");
    let jobs = http("GET", &address, "/jobs/overview").1;
    assert_eq!(jobs["jobs"][0]["state"], "FINISHED", "{jobs}");
    let kids = children(child.id());
    assert_eq!(kids.len(), 2, "the JobManager and the TaskManager still run");
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the job's exit code, not an interruption's"
    );
    wait_gone(&kids);
    assert!(try_http("GET", &address, "/overview").is_none(), "the UI is gone");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 31, item 2: the checkpointed `pipeline` job run twice by `floe run` into one output
/// directory (a resubmit, or a stateless redeploy: nothing restored) leaves both runs' committed
/// output, each run's the reference's running counts. Before the part files carried the run's id,
/// the second run's start deleted every part of the first run its subtasks' names matched.
#[test]
fn a_second_run_into_one_directory_keeps_the_first_runs_output() {
    const RECORDS: u64 = 20_000;
    let dir = scratch("second-run-same-output");
    let out = dir.join("out");
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: twice }}\nspec:\n  job:\n    name: pipeline\n    \
             args: [\"--output\", \"{}\", \"--records\", \"{RECORDS}\", \"--rate\", \"20000\"]\n    parallelism: 2\n    \
             mode: streaming\n  taskManager: {{ replicas: 1, slots: 2 }}\n  configuration:\n    \
             execution.checkpointing.interval: \"300 ms\"\n",
            out.display()
        ),
    )
    .unwrap();
    for run in 1..=2 {
        let stdout = floe_run_ok(&manifest, &dir.join(format!("work{run}"))).unwrap();
        assert!(stdout.contains(" FINISHED in "), "run {run}: {stdout}");
    }
    let mut got = output_lines(&out);
    got.sort();
    // Every running count (word, 1..=n) of one run, twice.
    let mut expected: Vec<(String, u64)> = pipeline_reference(42, RECORDS)
        .into_iter()
        .flat_map(|(w, n)| (1..=n).flat_map(move |c| [(w.clone(), c), (w.clone(), c)]))
        .collect();
    expected.sort();
    assert_eq!(
        got.len(),
        expected.len(),
        "committed lines of the two runs (each run's {})",
        expected.len() / 2
    );
    assert!(
        got == expected,
        "the two runs' output differs from twice the reference"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A streaming `pipeline` manifest for `floe verify`: 20,000 generated lines at 5,000 a second,
/// checkpoints every 300 ms, `extra` configuration lines appended.
fn verify_manifest(dir: &std::path::Path, mode: &str, extra: &str) -> std::path::PathBuf {
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: verified }}\nspec:\n  job:\n    name: pipeline\n    \
             args: [\"--output\", \"{}\", \"--records\", \"20000\", \"--rate\", \"5000\", \"--seed\", \"42\"]\n    parallelism: 2\n    \
             mode: {mode}\n  taskManager: {{ replicas: 2, slots: 2 }}\n  configuration:\n    \
             execution.checkpointing.interval: \"300 ms\"\n{extra}",
            dir.join("out").display()
        ),
    )
    .unwrap();
    manifest
}

fn floe_verify(manifest: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(FLOE)
        .args(["verify", "-f"])
        .arg(manifest)
        .args(args)
        .output()
        .unwrap()
}

/// `floe verify` (issue 31): the pipeline disturbed by kills, pauses, stops with savepoints,
/// rescales and suspends commits, in every run, exactly what it commits undisturbed, and that is every running
/// count of the independently computed reference.
#[test]
fn verify_proves_a_job_exactly_once_under_faults_and_lifecycle_operations() {
    let dir = scratch("verify-exact");
    let manifest = verify_manifest(
        &dir,
        "streaming",
        "    restart-strategy.type: fixed-delay\n    restart-strategy.fixed-delay.attempts: \"1000\"\n    \
         restart-strategy.fixed-delay.delay: \"200 ms\"\n",
    );
    let work = dir.join("verify");
    let out = floe_verify(
        &manifest,
        &[
            "--runs",
            "2",
            "--lifecycle",
            "--seed",
            "23",
            "--work-dir",
            work.to_str().unwrap(),
        ],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "floe verify failed:\n{stdout}\n{stderr}");
    let updates: u64 = pipeline_reference(42, 20_000).values().sum();
    assert!(
        stdout.contains(&format!(
            "exact outputs        2 of 2 ({updates} committed lines each)"
        )),
        "{stdout}\n{stderr}"
    );
    let disturbances: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("disturbances"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(disturbances >= 2, "{stdout}");
    // Seed 23 draws a rescale first in its second run (to parallelism 4 of the manifest's 2):
    // the generator's splits and the keyed counts move to new subtasks through a savepoint.
    assert!(
        stdout.lines().any(|l| l.trim_start().starts_with("rescale ")),
        "no rescale drawn: {stdout}\n{stderr}"
    );
    assert!(!work.exists(), "an exact verify leaves no work directory");
}

/// `floe verify` names what is wrong: a job whose restart strategy gives up at the first fault
/// ends FAILED under a TaskManager kill (exit 1, the run counted wrong); a batch job cannot have
/// lifecycle operations and a job without `--output` has nothing to compare (exit 2, naming why).
#[test]
fn verify_reports_a_job_that_does_not_survive_and_refuses_what_it_cannot_check() {
    let dir = scratch("verify-wrong");
    let manifest = verify_manifest(&dir, "streaming", "    restart-strategy.type: none\n");
    let out = floe_verify(&manifest, &["--runs", "1", "--faults", "tm-kill"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("wrong outputs        1"), "{stdout}");
    assert!(stderr.contains("the job ended FAILED"), "{stderr}");
    assert!(stdout.contains("not exact: runs of seeds 2"), "{stdout}");

    let batch = verify_manifest(&dir, "batch", "");
    let out = floe_verify(&batch, &["--lifecycle"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "--lifecycle: stops with savepoints and last-state resumes need spec.job.mode: streaming"
        ),
        "{stderr}"
    );
    let no_output = dir.join("no-output.yaml");
    std::fs::write(
        &no_output,
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: { name: quiet }\nspec:\n  job:\n    name: nexmark\n    \
         args: [\"--query\", \"q0\", \"--events\", \"1000\", \"--rate\", \"1000\", \"--latency-output\", \"/tmp/latency\"]\n  \
         taskManager: { replicas: 1, slots: 2 }\n",
    )
    .unwrap();
    let out = floe_verify(&no_output, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has no --output argument"), "{stderr}");
}
