//! The command-line client (issue 16): `floe list`, `info`, `savepoint`, `stop` and `cancel`
//! against a running local cluster's REST API, as a Flink user runs `flink list` and friends;
//! text for people, `--output json` for scripts; a wrong address or job named in the error.
//! Savepoint directories as plain paths, as Flink takes them (absolute, or relative to where the
//! command runs); `floe stop` of the job a `floe run` runs hears the stop's outcome although that
//! cluster ends with the job.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn floe(args: &[&str]) -> Output {
    std::process::Command::new(FLOE).args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn submit(cluster: &floe::local_cluster::LocalCluster, dir: &std::path::Path, name: &str) -> String {
    let args: Vec<String> = [
        "--output",
        dir.join(name).to_str().unwrap(),
        "--records",
        "0",
        "--rate",
        "2000",
    ]
    .map(String::from)
    .to_vec();
    let conf: Vec<(String, String)> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "1"),
        ("execution.checkpointing.interval", "500 ms"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into_iter()
    .chain([(
        "floe.job-storage.url".to_string(),
        format!("file://{}", dir.join(format!("storage-{name}")).display()),
    )])
    .collect();
    submit_job(&cluster.rpc_address, "pipeline", args, conf)
}

fn state(rest: &str, id: &str) -> String {
    http("GET", rest, &format!("/jobs/{id}")).1["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn wait_running(rest: &str, id: &str) {
    let started = Instant::now();
    while state(rest, id) != "RUNNING" {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "job {id} not running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A checkpoint completed (a savepoint needs the job's tasks all running).
    while http("GET", rest, &format!("/jobs/{id}/checkpoints")).1["counts"]["completed"]
        .as_u64()
        .unwrap_or(0)
        < 1
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint of {id}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn list_info_savepoint_stop_and_cancel_as_flinks_cli() {
    let (cluster, dir) = local_cluster("client", 1, 2);
    let jm = format!("http://{}", cluster.rest_address);
    let first = submit(&cluster, &dir, "first");
    let second = submit(&cluster, &dir, "second");
    wait_running(&cluster.rest_address, &first);
    wait_running(&cluster.rest_address, &second);

    let list = stdout(&floe(&["list", "--jobmanager", &jm]));
    assert!(list.starts_with("JOB ID"), "{list}");
    for id in [&first, &second] {
        let row = list
            .lines()
            .find(|l| l.starts_with(id.as_str()))
            .unwrap_or_else(|| panic!("{id} in {list}"));
        assert!(row.contains("RUNNING") && row.ends_with("pipeline"), "{row}");
    }
    let json: Value =
        serde_json::from_str(&stdout(&floe(&["list", "--jobmanager", &jm, "--output", "json"]))).unwrap();
    assert_eq!(json["jobs"].as_array().unwrap().len(), 2, "{json}");

    let info = stdout(&floe(&["info", &first, "--jobmanager", &jm]));
    assert!(
        info.starts_with(&format!("pipeline ({first}): RUNNING")),
        "{info}"
    );
    assert!(
        info.contains("(parallelism 1)") && info.contains("#0 RUNNING") && info.contains("Checkpoints: "),
        "{info}"
    );

    let savepoints = format!("file://{}", dir.join("savepoints").display());
    let taken = stdout(&floe(&["savepoint", &first, &savepoints, "--jobmanager", &jm]));
    let location = taken
        .trim()
        .strip_prefix("Savepoint completed: ")
        .unwrap_or_else(|| panic!("{taken}"));
    assert!(location.starts_with(&savepoints), "{location}");
    let local = location.strip_prefix("file://").unwrap();
    assert!(
        std::path::Path::new(local).exists(),
        "the savepoint {local} exists"
    );
    assert_eq!(
        state(&cluster.rest_address, &first),
        "RUNNING",
        "a savepoint does not stop the job"
    );

    let stopped = stdout(&floe(&[
        "stop",
        &first,
        "--savepoint-path",
        &savepoints,
        "--jobmanager",
        &jm,
        "--output",
        "json",
    ]));
    let stopped: Value = serde_json::from_str(&stopped).unwrap();
    assert!(
        stopped["location"].as_str().unwrap().starts_with(&savepoints),
        "{stopped}"
    );
    let started = Instant::now();
    while state(&cluster.rest_address, &first) == "RUNNING" {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        state(&cluster.rest_address, &first),
        "FINISHED",
        "a stopped job finishes"
    );

    let cancelled = stdout(&floe(&["cancel", &second, "--jobmanager", &jm]));
    assert_eq!(cancelled.trim(), format!("Cancelled job {second}: CANCELED"));

    let unknown = floe(&["info", "no-such-job", "--jobmanager", &jm]);
    assert_eq!(unknown.status.code(), Some(1));
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(said.contains("job no-such-job not found (HTTP 404)"), "{said}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_jobmanager_is_named() {
    let bad = floe(&["list", "--jobmanager", "https://jm:8081"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--jobmanager: expected http://HOST:PORT"));
    // Nothing listens on port 1.
    let down = floe(&["list", "--jobmanager", "http://127.0.0.1:1"]);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("cannot reach the JobManager at http://127.0.0.1:1"),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
}

/// The savepoint directory a `floe savepoint` or `floe stop` printed (`... : file:///...`), as a
/// local path, after checking it is under `parent` and holds a whole savepoint.
fn savepoint_under(printed: &str, parent: &std::path::Path) -> std::path::PathBuf {
    let location = printed
        .trim()
        .rsplit_once(": ")
        .unwrap_or_else(|| panic!("no location in {printed:?}"))
        .1;
    let local = std::path::PathBuf::from(
        location
            .strip_prefix("file://")
            .unwrap_or_else(|| panic!("not a file:// location: {location}")),
    );
    assert_eq!(local.parent(), Some(parent), "{printed}");
    assert!(
        local.join("_metadata").is_file(),
        "the savepoint {} is whole",
        local.display()
    );
    local
}

/// `floe savepoint JOB /plain/dir` and `floe stop JOB --savepoint-path /plain/dir`, as Flink's
/// CLI takes them: a plain path is a local directory; a relative one is taken against the
/// directory the command runs in.
#[test]
fn plain_paths_are_savepoint_directories() {
    let (cluster, dir) = local_cluster("client-plain-paths", 1, 2);
    let jm = format!("http://{}", cluster.rest_address);
    let id = submit(&cluster, &dir, "job");
    wait_running(&cluster.rest_address, &id);

    let absolute = dir.join("savepoints");
    let taken = stdout(&floe(&[
        "savepoint",
        &id,
        absolute.to_str().unwrap(),
        "--jobmanager",
        &jm,
    ]));
    savepoint_under(&taken, &absolute);

    let relative = std::process::Command::new(FLOE)
        .args(["savepoint", &id, "relative/savepoints", "--jobmanager", &jm])
        .current_dir(&dir)
        .output()
        .unwrap();
    savepoint_under(&stdout(&relative), &dir.join("relative/savepoints"));

    let stops = dir.join("stops");
    let stopped = stdout(&floe(&[
        "stop",
        &id,
        "--savepoint-path",
        stops.to_str().unwrap(),
        "--jobmanager",
        &jm,
    ]));
    assert!(
        stopped.starts_with(&format!("Savepoint completed, job {id} stopped: ")),
        "{stopped}"
    );
    savepoint_under(&stopped, &stops);
    wait_for("the stopped job to finish", Duration::from_secs(60), || {
        (state(&cluster.rest_address, &id) == "FINISHED").then_some(())
    });
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `floe stop` of the job a `floe run` runs: that cluster ends as the job finishes, which the
/// stop makes it do as its savepoint completes; the stop still hears its outcome (exit 0, the
/// savepoint's location printed), and `floe run` reports the job FINISHED.
#[test]
fn stop_of_a_floe_run_job_reports_its_savepoint() {
    let dir = scratch("client-stop-floe-run");
    let manifest = dir.join("pipeline.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pipeline }}\nspec:\n  job:\n    \
             name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"0\", \"--rate\", \"2000\"]\n    \
             parallelism: 1\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 2 }}\n  configuration:\n    \
             execution.checkpointing.interval: \"500 ms\"\n",
            dir.join("out").display()
        ),
    )
    .unwrap();
    // Killed on drop: a failed assertion leaves no `floe run` (nor, through it, its cluster) behind.
    let mut run = common::processes::Proc(
        std::process::Command::new(FLOE)
            .args(["run", "-f"])
            .arg(&manifest)
            .arg("--work-dir")
            .arg(dir.join("work"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(run.0.stderr.take().unwrap());
    let mut line = String::new();
    let rest = loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "floe run ended before printing the UI's URL"
        );
        if let Some(address) = web_ui_address(&line) {
            break address;
        }
    };
    // The rest of its progress lines, so it never blocks on a full pipe.
    let said = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    let id = wait_for("floe run's job", Duration::from_secs(60), || {
        try_http("GET", &rest, "/jobs")
            .and_then(|(_, jobs)| jobs["jobs"][0]["id"].as_str().map(str::to_string))
    });
    wait_running(&rest, &id);
    let savepoints = format!("file://{}", dir.join("savepoints").display());
    let stop = floe(&[
        "stop",
        &id,
        "--savepoint-path",
        &savepoints,
        "--jobmanager",
        &format!("http://{rest}"),
    ]);
    let Some(run_status) = poll(Duration::from_secs(60), || run.0.try_wait().unwrap()) else {
        panic!(
            "floe run did not end after the stop: {}{}",
            String::from_utf8_lossy(&stop.stdout),
            String::from_utf8_lossy(&stop.stderr)
        );
    };
    let mut run_out = String::new();
    run.0.stdout.take().unwrap().read_to_string(&mut run_out).unwrap();
    let run_err = said.join().unwrap();
    assert!(
        stop.status.success(),
        "floe stop failed: {}{}\nfloe run said: {run_out}{run_err}",
        String::from_utf8_lossy(&stop.stdout),
        String::from_utf8_lossy(&stop.stderr)
    );
    let stopped = String::from_utf8_lossy(&stop.stdout);
    assert!(
        stopped.starts_with(&format!("Savepoint completed, job {id} stopped: {savepoints}/")),
        "{stopped}"
    );
    savepoint_under(&stopped, &dir.join("savepoints"));
    assert!(run_status.success(), "floe run: {run_status}\n{run_out}{run_err}");
    assert!(run_out.contains(&format!("({id}) FINISHED in ")), "{run_out}");
    let _ = std::fs::remove_dir_all(&dir);
}
