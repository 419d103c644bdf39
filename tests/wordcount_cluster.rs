//! WordCount through `floe run`, as a user runs it: a local cluster of real JobManager and TaskManager
//! processes on loopback, output compared with an independently computed count, in BATCH (each batch
//! shuffle mode) and STREAMING mode, at parallelism 1 and 4.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::process::Command;

use common::*;

fn run_wordcount(name: &str, mode: &str, parallelism: u32, shuffle_mode: Option<&str>) {
    let (input, reference) = input();
    let dir = scratch(name);
    let out = dir.join("out");
    let mut conf = vec![];
    if let Some(m) = shuffle_mode {
        conf.push(("execution.batch-shuffle-mode", m));
    }
    let replicas = if parallelism > 1 { 2 } else { 1 };
    let slots = parallelism.div_ceil(replicas);
    let manifest = wordcount_manifest(&dir, input, &out, mode, parallelism, replicas, slots, &conf);
    let result = floe_run(&manifest, &dir.join("work"));
    let stdout = String::from_utf8_lossy(&result.stdout);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        result.status.success(),
        "floe run failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains(" FINISHED in "), "{stdout}");
    assert!(stdout.contains(&format!("Output: {}", out.display())), "{stdout}");
    match mode {
        "batch" => assert_batch_output(&out, reference),
        _ => assert_streaming_output(&out, reference),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn batch_all_exchanges_blocking_p1() {
    run_wordcount("b-aeb-1", "batch", 1, Some("ALL_EXCHANGES_BLOCKING"));
}

#[test]
fn batch_all_exchanges_blocking_p4() {
    run_wordcount("b-aeb-4", "batch", 4, Some("ALL_EXCHANGES_BLOCKING"));
}

#[test]
fn batch_forward_exchanges_pipelined_p1() {
    run_wordcount("b-fep-1", "batch", 1, Some("FORWARD_EXCHANGES_PIPELINED"));
}

#[test]
fn batch_forward_exchanges_pipelined_p4() {
    run_wordcount("b-fep-4", "batch", 4, Some("FORWARD_EXCHANGES_PIPELINED"));
}

#[test]
fn batch_pointwise_exchanges_pipelined_p1() {
    run_wordcount("b-pep-1", "batch", 1, Some("POINTWISE_EXCHANGES_PIPELINED"));
}

#[test]
fn batch_pointwise_exchanges_pipelined_p4() {
    run_wordcount("b-pep-4", "batch", 4, Some("POINTWISE_EXCHANGES_PIPELINED"));
}

#[test]
fn batch_all_exchanges_pipelined_p1() {
    run_wordcount("b-aep-1", "batch", 1, Some("ALL_EXCHANGES_PIPELINED"));
}

#[test]
fn batch_all_exchanges_pipelined_p4() {
    run_wordcount("b-aep-4", "batch", 4, Some("ALL_EXCHANGES_PIPELINED"));
}

#[test]
fn streaming_p1() {
    run_wordcount("s-1", "streaming", 1, None);
}

#[test]
fn streaming_p4() {
    run_wordcount("s-4", "streaming", 4, None);
}

#[test]
fn invalid_manifest_names_the_field_and_exits_2() {
    let dir = scratch("bad-manifest");
    let (input, _) = input();
    let manifest = wordcount_manifest(&dir, input, &dir.join("out"), "batch", 2, 1, 2, &[]);
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("replicas: 1", "replicas: one");
    std::fs::write(&manifest, text).unwrap();
    let result = Command::new(FLOE)
        .args(["run", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("spec.taskManager.replicas"), "{stderr}");
}

#[test]
fn unknown_job_fails_with_the_registered_names() {
    let dir = scratch("unknown-job");
    let (input, _) = input();
    let manifest = wordcount_manifest(&dir, input, &dir.join("out"), "batch", 1, 1, 1, &[]);
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("name: wordcount\n    args", "name: wordcont\n    args");
    std::fs::write(&manifest, text).unwrap();
    let result = floe_run(&manifest, &dir.join("work"));
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_ne!(result.status.code(), Some(0));
    assert!(
        stderr.contains("wordcont") && stderr.contains("wordcount"),
        "{stderr}"
    );
}
