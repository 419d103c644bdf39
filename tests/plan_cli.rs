//! `floe plan` as a user runs it: the built binary on example graph files.

#![allow(clippy::unwrap_used)] // test helpers: a panic is the failure report

mod common;

use std::process::{Command, Output};

use common::strings;

use serde_json::Value;

fn floe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("floe runs")
}

fn json(args: &[&str]) -> Value {
    let out = floe(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn seed_example_on_two_taskmanagers_with_three_slots() {
    let v = json(&[
        "plan",
        "--graph",
        "examples/seed-graph.yaml",
        "--taskmanagers",
        "2",
        "--slots",
        "3",
        "--format",
        "json",
    ]);
    let slots = v["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 4);
    for (k, s) in slots.iter().enumerate() {
        assert_eq!(s["taskmanager"], if k < 3 { 0 } else { 1 });
        let mut expected = vec![format!("source#{k}"), format!("map#{k}")];
        if k < 3 {
            expected.push(format!("reduce#{k}"));
        }
        assert_eq!(strings(&s["tasks"]), expected);
    }
    // Default shuffle mode is ALL_EXCHANGES_BLOCKING: one region per task.
    assert_eq!(v["regions"].as_array().unwrap().len(), 11);
    assert_eq!(v["vertices"].as_array().unwrap().len(), 3);
    assert_eq!(v["vertices"][2]["parallelism"], 3);
}

#[test]
fn shuffle_modes_cut_regions_differently() {
    let count = |mode: &str| {
        let v = json(&[
            "plan",
            "--graph",
            "examples/seed-graph.yaml",
            "--shuffle-mode",
            mode,
            "--format",
            "json",
        ]);
        v["regions"].as_array().unwrap().len()
    };
    assert_eq!(count("ALL_EXCHANGES_BLOCKING"), 11);
    assert_eq!(count("FORWARD_EXCHANGES_PIPELINED"), 7);
    assert_eq!(count("POINTWISE_EXCHANGES_PIPELINED"), 7);
    assert_eq!(count("ALL_EXCHANGES_PIPELINED"), 1);
    let v = json(&[
        "plan",
        "--graph",
        "examples/seed-graph.yaml",
        "--shuffle-mode",
        "FORWARD_EXCHANGES_PIPELINED",
        "--format",
        "json",
    ]);
    assert_eq!(strings(&v["regions"][0]["tasks"]), ["source#0", "map#0"]);
    // Without --taskmanagers: the fewest slots that fit, on one TaskManager.
    assert_eq!(v["slots"].as_array().unwrap().len(), 4);
}

#[test]
fn text_format_is_readable() {
    let out = floe(&["plan", "--graph", "examples/seed-graph.yaml"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("Plan: 3 vertices, 11 tasks, 11 regions, 4 slots on 1 TaskManager(s)"),
        "{text}"
    );
    assert!(text.contains("taskmanager 0 slot 3: source#3, map#3\n"), "{text}");
}

/// `parallelism: auto`: the plan shows what is decided at run time, and refuses a pipelined
/// all-to-all input (the adaptive batch scheduler needs it blocking).
#[test]
fn auto_parallelism_is_decided_at_run_time() {
    let out = floe(&["plan", "-f", "examples/wordcount-auto.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("parallelism decided at run time  max    32"),
        "{text}"
    );
    assert!(text.starts_with("Plan: 2 vertices, 0 tasks"), "{text}");
    fails_with(
        &[
            "plan",
            "-f",
            "examples/wordcount-auto.yaml",
            "--shuffle-mode",
            "ALL_EXCHANGES_PIPELINED",
        ],
        "vertex 'reduce': its parallelism is decided at run time from its inputs' size, so edge \
         source->reduce must be blocking",
    );
}

/// Issue 31, item 5: the plan of a registered job shows every operator's uid, the state it keeps,
/// and which uids are derived from the graph (state that an operator added upstream would leave
/// unclaimed); the JSON plan lists them too.
#[test]
fn the_plan_shows_each_operators_uid_and_state() {
    let out = floe(&["plan", "-f", "examples/pipeline-checkpointed.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no line for {name} in\n{text}"))
            .to_string()
    };
    assert!(
        text.contains("\nOperators (uid: what names their state in savepoints):\n"),
        "{text}"
    );
    let reduce = line("Reduce ");
    assert!(
        reduce.contains("in reduce")
            && reduce.contains("uid reduce  keyed state")
            && !reduce.contains("derived"),
        "{reduce}"
    );
    let map = line("Map ");
    assert!(map.contains("uid map  no state"), "{map}");
    let json = json(&[
        "plan",
        "-f",
        "examples/pipeline-checkpointed.yaml",
        "--format",
        "json",
    ]);
    let operators = json["operators"].as_array().unwrap();
    let sink = operators.iter().find(|o| o["uid"] == "sink").unwrap();
    assert_eq!(
        sink["vertex"], "reduce",
        "the sink is chained to the count: {sink}"
    );
    assert_eq!(sink["state"], serde_json::json!(["sink"]));
    assert_eq!(sink["uid_set"], true);
    // WordCount sets no uids: its count's uid is derived, and the plan says so.
    let out = floe(&["plan", "-f", "examples/wordcount-streaming.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("keyed state (derived: set uid() to keep this state across graph changes)")),
        "{text}"
    );
}

fn fails_with(args: &[&str], needle: &str) {
    let out = floe(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in {err}");
}

#[test]
fn bad_inputs_name_what_is_wrong_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("floe-plan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let typo = write(
        "typo.yaml",
        "vertices:\n  - { id: a, parallelism: 1 }\n  - { id: b, paralelism: 2 }\n",
    );
    fails_with(&["plan", "--graph", &typo], "line 3");
    fails_with(&["plan", "--graph", &typo], "unknown field `paralelism`");
    let cycle = write(
        "cycle.yaml",
        "vertices:\n  - { id: a, parallelism: 1 }\n  - { id: b, parallelism: 1 }\nedges:\n  - { from: a, to: b, partitioner: hash }\n  - { from: b, to: a, partitioner: hash }\n",
    );
    fails_with(&["plan", "--graph", &cycle], "cycle through vertex 'a'");
    let fwd = write(
        "forward.yaml",
        "vertices:\n  - { id: a, parallelism: 4 }\n  - { id: b, parallelism: 3 }\nedges:\n  - { from: a, to: b, partitioner: forward }\n",
    );
    fails_with(
        &["plan", "--graph", &fwd],
        "edge a->b: a forward edge needs equal parallelism",
    );
    let unknown = write(
        "unknown.yaml",
        "vertices:\n  - { id: a, parallelism: 1 }\nedges:\n  - { from: a, to: ghost, partitioner: hash }\n",
    );
    fails_with(&["plan", "--graph", &unknown], "unknown vertex 'ghost'");
    fails_with(
        &[
            "plan",
            "--graph",
            "examples/seed-graph.yaml",
            "--taskmanagers",
            "1",
            "--slots",
            "2",
        ],
        "job needs 4 slots but the cluster offers 2",
    );
    fails_with(
        &[
            "plan",
            "--graph",
            "examples/seed-graph.yaml",
            "--shuffle-mode",
            "FAST",
        ],
        "unknown execution.batch-shuffle-mode 'FAST'",
    );
    fails_with(
        &["plan", "--graph", "does/not/exist.yaml"],
        "cannot read does/not/exist.yaml",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The `floe` binary reads the FlinkJob type from `floe-manifest` but must not pull in the Kubernetes
/// client or controller (that is the operator's).
#[test]
fn the_floe_binary_does_not_depend_on_the_kubernetes_client_or_controller() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "floe",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.contains("floe-manifest"),
        "floe reads manifests through floe-manifest"
    );
    for forbidden in ["kube-runtime", "kube-client", "floe-operator"] {
        assert!(
            !tree.lines().any(|l| l.starts_with(&format!("{forbidden} "))),
            "floe depends on {forbidden}"
        );
    }
}

/// The worker image's production base (distroless `cc-debian12`) has glibc, libgcc and libstdc++
/// and nothing else: a binary that needs another shared library (zlib, which librdkafka would
/// link by default) does not start there, though it starts on the base the container tests make
/// from this machine's libraries.
#[test]
fn the_floe_binary_needs_only_the_libraries_of_the_worker_base() {
    let out = Command::new("objdump")
        .args(["-p", env!("CARGO_BIN_EXE_floe")])
        .output();
    let Ok(out) = out else {
        panic!("objdump is missing (.ci/setup installs binutils)");
    };
    let needed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("NEEDED"))
        .map(|l| l.trim().to_string())
        .collect();
    assert!(!needed.is_empty(), "objdump found no NEEDED entries");
    let base = [
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libstdc++.so.6",
        "ld-linux-x86-64.so.2",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
    ];
    for lib in &needed {
        assert!(
            base.contains(&lib.as_str()),
            "floe needs {lib}, which distroless cc-debian12 does not have"
        );
    }
}

/// `floe jobs` lists every registered job with its declared arguments, and a wrong argument is
/// refused naming it and the job, before anything runs (issue 15).
#[test]
fn jobs_lists_the_registered_jobs_and_their_arguments() {
    let out = floe(&["jobs"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for job in [
        "wordcount:",
        "pipeline:",
        "keyed-state:",
        "nexmark:",
        "broadcast-rules:",
    ] {
        assert!(text.contains(job), "{job} missing from:\n{text}");
    }
    assert!(
        text.contains("--query") && text.contains("q0|q1|q2|q3|q4|q5|q7|q8|q11|q12|export|bids, required"),
        "{text}"
    );
    let refused = floe_datastream::JobRegistry::builtin()
        .build(&floe_datastream::JobArgs {
            name: "nexmark".into(),
            args: ["--query", "q5", "--events", "many", "--output", "/tmp/out"]
                .map(String::from)
                .to_vec(),
            configuration: Default::default(),
        })
        .expect_err("--events many is refused")
        .to_string();
    assert!(
        refused.contains("--events")
            && refused.contains("integer >= 1, got \"many\"")
            && refused.contains("(job nexmark)"),
        "{refused}"
    );
}

/// Every FlinkJob manifest in `examples/` is one `floe plan` accepts: its job is registered, its
/// arguments are the job's, its configuration keys are known (a manifest the README points to
/// that the binary refuses is a broken first step).
#[test]
fn every_example_manifest_is_accepted() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        if !std::fs::read_to_string(&path).unwrap().contains("kind: FlinkJob") {
            continue; // a graph file for `floe plan --graph`
        }
        let out = floe(&["plan", "-f", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        checked.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    assert!(checked.iter().any(|n| n == "enrich.yaml"), "checked {checked:?}");
    assert!(checked.len() >= 7, "checked {checked:?}");
}
