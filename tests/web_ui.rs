//! The web UI in a real browser (issue 16): a local cluster of real processes runs a finished batch
//! WordCount and a running streaming pipeline; `tests/web_ui.py` opens the JobManager's UI in
//! Debian's Chromium (through chromedriver and Selenium) and checks what a user looks at: the job
//! list, the WordCount's dataflow graph with its vertices and edges, every subtask FINISHED,
//! regions and slot sharing on demand, the pipeline's live rates and checkpoint history, a savepoint
//! and a cancel from the UI's buttons, and no console error. Screenshots go to
//! `target/tmp/web-ui/`. `.ci/setup` installs the browser; where it is missing the test is
//! reported ignored (SKIPPED, never passed), and `FLOE_REQUIRE_BROWSER=1` (CI) makes its absence a
//! failure.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::json;

/// What the browser needs: Chromium, its driver and Selenium; `None` when all are there.
fn missing_browser() -> Option<String> {
    let mut missing = Vec::new();
    for path in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        if !Path::new(path).exists() {
            missing.push(path.to_string());
        }
    }
    let selenium = std::process::Command::new("python3")
        .args(["-c", "import selenium"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !selenium {
        missing.push("python3 selenium".into());
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

fn conf(pairs: &[(&str, &str)], storage: &Path) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([(
            "floe.job-storage.url".to_string(),
            format!("file://{}", storage.display()),
        )])
        .collect()
}

fn main() {
    let args = Arguments::from_args();
    let missing = missing_browser();
    if let Some(missing) = &missing {
        assert!(
            std::env::var("FLOE_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "FLOE_REQUIRE_BROWSER=1 but missing: {missing} (.ci/setup installs them)"
        );
        eprintln!("SKIPPED: no browser ({missing} missing; .ci/setup installs them)");
    }
    let trial = Trial::test(
        "the_web_ui_shows_jobs_in_a_real_browser_and_cancels_one",
        the_web_ui_shows_jobs_in_a_real_browser_and_cancels_one,
    )
    .with_ignored_flag(missing.is_some());
    libtest_mimic::run(&args, vec![trial]).exit();
}

fn the_web_ui_shows_jobs_in_a_real_browser_and_cancels_one() -> Result<(), Failed> {
    let (cluster, dir) = local_cluster("web-ui", 2, 2);
    let rest = cluster.rest_address.clone();

    // A batch WordCount at parallelism 2, to its end.
    let words = dir.join("words.txt");
    floe::generate::write_words(&words, 256 << 10, 7).unwrap();
    let wordcount = submit_job(
        &cluster.rpc_address,
        "wordcount",
        vec![
            "--input".into(),
            words.to_str().unwrap().into(),
            "--output".into(),
            dir.join("counts").to_str().unwrap().into(),
        ],
        conf(
            &[("execution.runtime-mode", "BATCH"), ("parallelism.default", "2")],
            &dir.join("storage-wordcount"),
        ),
    );
    wait_for("the WordCount to finish", Duration::from_secs(120), || {
        let state = http("GET", &rest, &format!("/jobs/{wordcount}")).1["state"].clone();
        assert_ne!(state, "FAILED");
        (state == "FINISHED").then_some(())
    });
    assert_batch_output(&dir.join("counts"), &reference_count(&words));
    // Every subtask the JobManager ran (adaptive batch may decide a vertex's parallelism).
    let finished = http("GET", &rest, &format!("/jobs/{wordcount}")).1;
    let subtasks: u64 = finished["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["subtasks"].as_array().unwrap().len() as u64)
        .sum();

    // An unbounded streaming pipeline with checkpoints: it runs until the UI cancels it.
    let pipeline = submit_job(
        &cluster.rpc_address,
        "pipeline",
        [
            "--output",
            dir.join("pipeline").to_str().unwrap(),
            "--records",
            "0",
            "--rate",
            "2000",
        ]
        .map(String::from)
        .to_vec(),
        conf(
            &[
                ("execution.runtime-mode", "STREAMING"),
                ("parallelism.default", "1"),
                ("execution.checkpointing.interval", "500 ms"),
            ],
            &dir.join("storage-pipeline"),
        ),
    );

    let spec = json!({
        "url": format!("http://{rest}/"),
        "finished_job": wordcount,
        "running_job": pipeline,
        "vertices": WORDCOUNT_VERTICES,
        "edges": WORDCOUNT_EDGES,
        "subtasks": subtasks,
        "running_vertices": PIPELINE_VERTICES,
        "taskmanagers": 2,
        "screenshots": screenshots(),
    });
    let spec_file = dir.join("spec.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web_ui.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&spec_file)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{said}");
    assert!(out.status.success(), "the browser's checks failed:\n{said}");

    // What the clicks did, as the REST API tells it.
    let job = http("GET", &rest, &format!("/jobs/{pipeline}")).1;
    assert_eq!(job["state"], "CANCELED", "{job}");
    let history = http("GET", &rest, &format!("/jobs/{pipeline}/checkpoints")).1;
    assert!(
        history["history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["is_savepoint"] == true && c["status"] == "COMPLETED"),
        "the UI's savepoint is in the history: {history}"
    );
    for shot in [
        "finished-job-graph.png",
        "running-job-checkpoints.png",
        "running-job-canceled.png",
    ] {
        let png = std::fs::read(screenshots().join(shot)).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{shot} is a PNG");
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Where the screenshots are kept (a test artifact).
fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("web-ui")
}

/// WordCount as its user knows it: the source with the tokenizer chained to it, a hash exchange
/// by word, the sum with the file sink chained to it.
const WORDCOUNT_VERTICES: [&str; 2] = ["source", "reduce"];
const WORDCOUNT_EDGES: [[&str; 2]; 1] = [["source", "reduce"]];
/// The pipeline: generator, map, keyed reduce with its sink.
const PIPELINE_VERTICES: [&str; 3] = ["source", "map", "reduce"];
