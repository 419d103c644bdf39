//! The Helm chart as `helm install` and the API server see it (issue 32, blocker 1): the chart's
//! defaults once failed Helm's own values validation, and nothing here ran Helm.
//!
//! `chart.py` lints and renders the chart with Helm's code (the Helm v4 SDK) for every documented set
//! of values, validates each rendered object and the CRD against the Kubernetes 1.33 OpenAPI schemas
//! (strict: unknown fields refused), and checks that values the schema must refuse are refused with
//! the field named. This test then starts the real `floe-operator` with the arguments each rendered
//! Deployment and pre-delete hook give it: they must parse (a usage error would crash-loop the pod
//! or fail every uninstall), reaching the point where the operator looks for a cluster.
//! `.ci/setup` installs the Python packages; without them this fails and says what to install.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::process::Command;

const OPERATOR: &str = env!("CARGO_BIN_EXE_floe-operator");

#[test]
fn the_chart_lints_renders_and_validates_with_every_documented_value_set() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/chart.py");
    let missing = Command::new("python3")
        .args(["-c", "import helm_python, kubernetes_validate, yaml"])
        .output()
        .unwrap();
    assert!(
        missing.status.success(),
        "the chart check needs Python's helm-python-sdk and kubernetes-validate (.ci/setup installs \
         them): {}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let out = Command::new("python3").arg(script).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the chart check failed (above)");

    let last = stdout.lines().last().unwrap();
    let report: serde_json::Value = serde_json::from_str(last).unwrap();
    let value_sets = report["operator_args"].as_array().unwrap();
    assert_eq!(value_sets.len(), 5, "one operator Deployment per value set");
    let hooks = report["hook_args"].as_array().unwrap();
    assert_eq!(
        hooks.len(),
        4,
        "a pre-delete hook in every value set but the one without it"
    );
    let home = std::env::temp_dir().join(format!("floe-chart-args-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    for args in value_sets.iter().chain(hooks) {
        let mut args: Vec<String> = args
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().replace("$(POD_NAMESPACE)", "floe-system"))
            .collect();
        // The pod's port 8080 may be taken on this machine; the address is the only change.
        if let Some(health) = args.iter().position(|a| a == "--health-address") {
            args[health + 1] = "127.0.0.1:0".into();
        }
        let run = Command::new(OPERATOR)
            .args(&args)
            .env("POD_NAMESPACE", "floe-system")
            .env("KUBECONFIG", home.join("no-such-kubeconfig"))
            .env("HOME", &home)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        // clap exits 2 on a usage error; past parsing, the operator fails on the missing cluster.
        assert_ne!(
            run.status.code(),
            Some(2),
            "the chart's arguments {args:?}: {err}"
        );
        assert!(
            err.to_lowercase().contains("config"),
            "the chart's arguments {args:?} did not reach the cluster connection: {err}"
        );
    }
    std::fs::remove_dir_all(&home).ok();
}
