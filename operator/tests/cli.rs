//! The shipped `floe-operator` binary, run as a user or the chart runs it. (Also what makes
//! `cargo test --workspace` build the binary that the container and kind tests put in the image.)

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::process::Command;
use std::time::{Duration, Instant};

const OPERATOR: &str = env!("CARGO_BIN_EXE_floe-operator");

#[test]
fn crd_prints_the_definition_the_chart_installs() {
    let out = Command::new(OPERATOR).arg("crd").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let chart = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/floe-operator/crds/flinkjob.yaml"
    ))
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), chart);
}

/// Bad input (issue 17): started where there is no Kubernetes API to talk to, the operator exits at
/// once with a non-zero code and says it has no cluster configuration, instead of retrying forever.
#[test]
fn run_without_a_cluster_says_so_and_exits() {
    let dir = std::env::temp_dir().join(format!("floe-operator-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let out = Command::new(OPERATOR)
        .args(["run", "--health-address", "127.0.0.1:0"])
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env("HOME", &dir)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "({:.2} s, exit {:?}) {err}",
        took.as_secs_f64(),
        out.status.code()
    );
    assert!(!out.status.success());
    assert!(err.to_lowercase().contains("config"), "{err}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
}
