//! Savepoints (issue 13, part 2): a keyed running sum that checkpoints every 500 ms takes a
//! savepoint while it runs (`POST /jobs/{id}/savepoints`), then stops with one
//! (`POST /jobs/{id}/stop`): the job ends FINISHED with every committed update a gapless prefix of
//! each word's counts. Its whole job storage (checkpoints and operation log) is then deleted and
//! the job is deployed anew at another parallelism with `spec.job.initialSavepointPath`: the
//! savepoint alone carries the state, and the output of both deployments together equals the
//! fault-free output exactly (no update lost, none twice), for both state backends. A
//! `last-state` upgrade (the first deployment's processes killed, the second at another
//! parallelism) starts from the first's latest checkpoint, exactly once; and requests a job
//! cannot serve are answered with what is wrong. Through the manifests `floe-operator render`
//! makes: three FlinkJob generations (savepoint, rescale, last-state) continue the counts, and a
//! failed upgrade rolls back to the stable spec from the upgrade's savepoint. An upgrade that adds
//! an operator before the count (renaming the count's vertex) restores each operator's state by its
//! uid. (Unclaimed state and a changed max parallelism are refused by the JobMaster: its unit
//! tests.)
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

use common::processes::{Proc, jobmanager, taskmanager, wait_job};

const RECORDS: u64 = 60_000;

/// A `pipeline` FlinkJob: a keyed running sum over generated words.
fn manifest(
    dir: &Path,
    name: &str,
    output: &Path,
    parallelism: u32,
    backend: &str,
    extra_job: &str,
    args: &str,
) -> PathBuf {
    manifest_at(dir, name, 1, output, parallelism, backend, extra_job, args)
}

/// [`manifest`] of FlinkJob generation `generation` (a new one is a new deployment).
#[allow(clippy::too_many_arguments)]
fn manifest_at(
    dir: &Path,
    name: &str,
    generation: u32,
    output: &Path,
    parallelism: u32,
    backend: &str,
    extra_job: &str,
    args: &str,
) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let storage = format!("file://{}", dir.join("storage").display());
    std::fs::write(
        &path,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: savepoints, generation: {generation} }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{RECORDS}\", \"--rate\", \"5000\"{args}]\n    parallelism: {parallelism}\n    mode: streaming\n{extra_job}  taskManager: {{ replicas: 1, slots: 4 }}\n  storage: {{ url: \"{storage}\" }}\n  configuration:\n    execution.checkpointing.interval: \"500 ms\"\n    state.backend.type: {backend}\n",
            output.display(),
        ),
    )
    .unwrap();
    path
}

fn post(rest: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    common::http_with_body("POST", rest, path, body)
}

/// Polls savepoint `trigger` until it is no longer in progress; its answer.
fn await_savepoint(rest: &str, id: &str, trigger: &str) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let (status, answer) = common::http("GET", rest, &format!("/jobs/{id}/savepoints/{trigger}"));
        assert_eq!(status, 200, "{answer}");
        if answer["status"]["id"] != "IN_PROGRESS" {
            return answer;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "savepoint {trigger} still in progress"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Takes a savepoint (`stop`: stops with it) into `target`; its location.
fn savepoint(rest: &str, id: &str, target: &Path, stop: bool) -> String {
    let (status, answer) = if stop {
        post(
            rest,
            &format!("/jobs/{id}/stop"),
            &format!(
                r#"{{"targetDirectory": "file://{}", "drain": false}}"#,
                target.display()
            ),
        )
    } else {
        post(
            rest,
            &format!("/jobs/{id}/savepoints"),
            &format!(r#"{{"target-directory": "file://{}"}}"#, target.display()),
        )
    };
    assert_eq!(status, 202, "{answer}");
    let trigger = answer["request-id"].as_str().unwrap();
    let done = await_savepoint(rest, id, trigger);
    done["operation"]["location"]
        .as_str()
        .unwrap_or_else(|| panic!("savepoint failed: {done}"))
        .to_string()
}

/// The savepoint at `location` records the schema of every keyed task's state (issue 34, item
/// 1: a restore into a changed type migrates or refuses by it), built of Rust's own types.
fn assert_schemas_recorded(location: &str) {
    let metadata =
        std::fs::read(Path::new(location.trim_start_matches("file://")).join("_metadata")).unwrap();
    // The sealed object's JSON after its header (whose length and checksum bytes may hold a '{').
    let start = metadata
        .windows(10)
        .position(|w| w == b"{\"format\":")
        .unwrap_or_else(|| panic!("no savepoint JSON in {location}/_metadata"));
    let savepoint: serde_json::Value = serde_json::from_slice(&metadata[start..]).unwrap();
    let tasks = savepoint["checkpoint"]["tasks"].as_object().unwrap();
    let keyed: Vec<_> = tasks
        .iter()
        .filter(|(_, t)| t["files"].as_array().is_some_and(|f| !f.is_empty()))
        .collect();
    assert!(!keyed.is_empty(), "{savepoint}");
    for (task, snapshot) in keyed {
        let schema = snapshot["schemas"]["keyed"]
            .as_str()
            .unwrap_or_else(|| panic!("{task}: {snapshot}"));
        let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
        assert!(
            !schema.to_string().contains("opaque"),
            "{task}: the sum's state has a schema of its fields: {schema}"
        );
    }
}

/// Every word's committed updates are 1, 2, ..., n: nothing lost or doubled before the stop.
fn assert_gapless_prefix(output: &Path) -> u64 {
    let mut by_word: HashMap<String, Vec<u64>> = HashMap::new();
    for (w, c) in common::output_lines(output) {
        by_word.entry(w).or_default().push(c);
    }
    let mut total = 0;
    for (word, mut counts) in by_word {
        counts.sort_unstable();
        let n = counts.len() as u64;
        assert_eq!(counts, (1..=n).collect::<Vec<_>>(), "{word}: updates not 1..{n}");
        total += n;
    }
    total
}

fn running(m: &Path, dir: &Path, log: &str) -> (Proc, Proc, String, String) {
    let (jm, rpc, rest) = jobmanager(m, &dir.join(log));
    let tm = taskmanager(&rpc, 4);
    let job = wait_job(&rest, Duration::from_secs(30), |j| {
        j["state"] == "RUNNING" || j["state"] == "FAILED"
    });
    assert_eq!(
        job["state"],
        "RUNNING",
        "{job}\n{}",
        std::fs::read_to_string(dir.join(log)).unwrap_or_default()
    );
    (jm, tm, rest, job["jid"].as_str().unwrap().to_string())
}

/// The job once it ended, which must be FINISHED (else the JobManager's log is shown).
fn finished(rest: &str, log: &Path) -> serde_json::Value {
    let done = wait_job(rest, Duration::from_secs(60), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED"))
    });
    assert_eq!(
        done["state"],
        "FINISHED",
        "{done}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    done
}

fn wait_checkpoint(rest: &str, id: &str) {
    wait_checkpoints(rest, id, 1)
}

/// Until checkpoint `n` (or a later one) completed.
fn wait_checkpoints(rest: &str, id: &str, n: u64) {
    let started = Instant::now();
    loop {
        let (_, c) = common::http("GET", rest, &format!("/jobs/{id}/checkpoints"));
        if c["latest"]["completed"]["id"].as_u64().unwrap_or(0) >= n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no checkpoint completes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `upgraded`: arguments the second deployment adds (an upgraded job).
fn upgrade_through_a_savepoint(backend: &str, from: u32, to: u32, upgraded: &str) -> Result<(), Failed> {
    let dir = common::scratch(&format!("savepoints-{backend}-{from}-{to}"));
    let output = dir.join("out");
    let savepoints = dir.join("savepoints");
    let sum = r#", "--aggregate", "sum""#;
    let first = manifest(&dir, "first", &output, from, backend, "", sum);
    let (jm, tm, rest, id) = running(&first, &dir, "jm-1.log");
    wait_checkpoint(&rest, &id);
    // A savepoint of the running job: it runs on.
    let taken = savepoint(&rest, &id, &savepoints, false);
    assert!(
        Path::new(taken.trim_start_matches("file://"))
            .join("_metadata")
            .is_file(),
        "{taken}"
    );
    assert_schemas_recorded(&taken);
    let (_, job) = common::http("GET", &rest, &format!("/jobs/{id}"));
    assert_eq!(job["state"], "RUNNING", "a savepoint does not stop the job");
    std::thread::sleep(Duration::from_secs(1));
    // Stop with a savepoint: FINISHED, its output a gapless prefix of the counts.
    let stopped_at = savepoint(&rest, &id, &savepoints, true);
    assert_ne!(stopped_at, taken);
    let done = wait_job(&rest, Duration::from_secs(30), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED"))
    });
    assert_eq!(done["state"], "FINISHED", "{done}");
    drop((jm, tm));
    let before = assert_gapless_prefix(&output);
    let all: u64 = common::pipeline_reference(42, RECORDS).values().sum();
    assert!(
        before > 0 && before < all,
        "stopped mid-job: {before} of {all} updates committed"
    );
    // The savepoint is self-contained: the job storage goes (checkpoints, operation log).
    std::fs::remove_dir_all(dir.join("storage")).unwrap();
    let extra = format!("    initialSavepointPath: \"{stopped_at}\"\n");
    let second = manifest(
        &dir,
        "second",
        &output,
        to,
        backend,
        &extra,
        &format!("{sum}{upgraded}"),
    );
    let (_jm, _tm, rest, id) = running(&second, &dir, "jm-2.log");
    let (_, c) = common::http("GET", &rest, &format!("/jobs/{id}/checkpoints"));
    assert_eq!(c["latest"]["restored"]["is_savepoint"], true, "{c}");
    let done = finished(&rest, &dir.join("jm-2.log"));
    assert!(
        done["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["parallelism"] == to),
        "{done}"
    );
    common::assert_streaming_output(&output, &common::pipeline_reference(42, RECORDS));
    println!(
        "{backend}: savepoint while running, stop with savepoint after {before} of {all} updates, \
         job storage deleted, restored at parallelism {from} -> {to} (added arguments: [{upgraded}]); \
         output exact"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `upgradeMode: last-state`: the processes of deployment 1 are killed mid-job (as an upgrade's
/// Recreate would), and deployment 2 (generation 2, another parallelism) starts from deployment
/// 1's latest checkpoint, found through the operation log: nothing of deployment 1's committed
/// output is lost or doubled, and the output is exact.
fn last_state_upgrade_continues_from_the_latest_checkpoint() -> Result<(), Failed> {
    let dir = common::scratch("savepoints-last-state");
    let output = dir.join("out");
    let sum = r#", "--aggregate", "sum""#;
    let mode = "    upgradeMode: last-state\n";
    let first = manifest_at(&dir, "first", 1, &output, 2, "hashmap", mode, sum);
    let (jm, tm, rest, id) = running(&first, &dir, "jm-1.log");
    wait_checkpoints(&rest, &id, 3);
    drop((jm, tm));
    let before = common::committed_lines(&output);
    assert!(before > 0, "deployment 1 committed output");
    let second = manifest_at(&dir, "second", 2, &output, 3, "hashmap", mode, sum);
    let (_jm, _tm, rest, id) = running(&second, &dir, "jm-2.log");
    let (_, c) = common::http("GET", &rest, &format!("/jobs/{id}/checkpoints"));
    assert!(c["latest"]["restored"]["id"].as_u64().unwrap_or(0) >= 3, "{c}");
    finished(&rest, &dir.join("jm-2.log"));
    common::assert_streaming_output(&output, &common::pipeline_reference(42, RECORDS));
    println!(
        "last-state: deployment 1 killed after {before} committed updates; deployment 2 at parallelism 3 restored {}; output exact",
        c["latest"]["restored"]
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A FlinkJob as the operator sees it: uid, generation, and the status it wrote last.
fn flinkjob(
    dir: &Path,
    generation: u32,
    parallelism: u32,
    mode: &str,
    status: Option<&serde_json::Value>,
) -> String {
    flinkjob_with(dir, generation, parallelism, mode, &dir.join("out"), "", status)
}

/// [`flinkjob`] writing to `output`, with `conf` (lines) added to its configuration.
fn flinkjob_with(
    dir: &Path,
    generation: u32,
    parallelism: u32,
    mode: &str,
    output: &Path,
    conf: &str,
    status: Option<&serde_json::Value>,
) -> String {
    let status = status.map(|s| format!("status: {s}\n")).unwrap_or_default();
    format!(
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: upgrades, namespace: jobs, uid: u-1, generation: {generation} }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{RECORDS}\", \"--rate\", \"5000\", \"--aggregate\", \"sum\"]\n    parallelism: {parallelism}\n    mode: streaming\n    upgradeMode: {mode}\n  taskManager: {{ replicas: 1, slots: 4 }}\n  storage: {{ url: \"file://{}\", persistentVolumeClaim: floe-jobs }}\n  configuration:\n    execution.checkpointing.interval: \"500 ms\"\n{conf}{status}",
        output.display(),
        dir.join("storage").display(),
    )
}

/// `floe-operator render -f` of `flinkjob` with `flag` (`--manifest`, `--status`).
fn render(dir: &Path, name: &str, flinkjob: &str, flag: &str) -> String {
    let path = dir.join(format!("{name}-flinkjob.yaml"));
    std::fs::write(&path, flinkjob).unwrap();
    let out = std::process::Command::new(common::images::operator_binary())
        .args(["render", "-f"])
        .arg(&path)
        .arg(flag)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The JobManager's manifest the operator renders for `flinkjob` (written to `{name}.yaml`), and
/// the savepoint it names.
fn operator_manifest(dir: &Path, name: &str, flinkjob: &str) -> (PathBuf, Option<String>) {
    let text = render(dir, name, flinkjob, "--manifest");
    let parsed = floe_manifest::FlinkJob::from_yaml(&text).unwrap();
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, &text).unwrap();
    (
        path,
        parsed
            .spec
            .configuration
            .get("execution.state-recovery.path")
            .cloned(),
    )
}

/// What the operator does before a savepoint-mode upgrade: stops the job of `processes` with a
/// savepoint (it ends FINISHED, its committed output a gapless prefix) and records the savepoint in
/// `status` for the next deployment. The savepoint, and the updates committed before the stop.
fn stop_for_an_upgrade(
    processes: (Proc, Proc),
    rest: &str,
    id: &str,
    dir: &Path,
    output: &Path,
    status: &mut serde_json::Value,
) -> (String, u64) {
    let location = savepoint(rest, id, &dir.join("savepoints"), true);
    let done = wait_job(rest, Duration::from_secs(30), |j| j["state"] != "RUNNING");
    assert_eq!(done["state"], "FINISHED", "{done}");
    drop(processes);
    let stopped_after = assert_gapless_prefix(output);
    status["jobStatus"]["upgradeSavepointPath"] = location.clone().into();
    (location, stopped_after)
}

/// Issue 13 part 2, through the operator's own objects: the JobManagers run the manifests
/// `floe-operator render` makes for each FlinkJob generation, as its ConfigMap would carry them.
/// Generation 1 (savepoint mode, parallelism 2) stops with a savepoint as the operator does
/// before an upgrade; generation 2 (parallelism 3) starts from it, named in its manifest;
/// generation 3 (last-state, parallelism 2) is deployed while generation 2 runs (its processes
/// killed) and starts from generation 2's latest checkpoint. The counts continue exactly.
fn operator_upgrades_continue_the_counts_exactly() -> Result<(), Failed> {
    let dir = common::scratch("savepoints-operator");
    let output = dir.join("out");
    let first = flinkjob(&dir, 1, 2, "savepoint", None);
    let (m1, from) = operator_manifest(&dir, "gen-1", &first);
    assert_eq!(from, None, "a first deployment starts empty");
    let (jm, tm, rest, id) = running(&m1, &dir, "jm-1.log");
    wait_checkpoints(&rest, &id, 2);
    let mut status: serde_json::Value =
        serde_json::from_str(&render(&dir, "gen-1", &first, "--status")).unwrap();
    // The upgrade to generation 2: the operator stops the job with a savepoint and records it.
    let (location, stopped_after) = stop_for_an_upgrade((jm, tm), &rest, &id, &dir, &output, &mut status);
    let second = flinkjob(&dir, 2, 3, "savepoint", Some(&status));
    let (m2, from) = operator_manifest(&dir, "gen-2", &second);
    assert_eq!(
        from.as_deref(),
        Some(location.as_str()),
        "the new deployment starts from the savepoint"
    );
    let (jm, tm, rest, id) = running(&m2, &dir, "jm-2.log");
    let (_, c) = common::http("GET", &rest, &format!("/jobs/{id}/checkpoints"));
    assert_eq!(c["latest"]["restored"]["is_savepoint"], true, "{c}");
    let restored = c["latest"]["restored"]["id"].as_u64().unwrap();
    wait_checkpoints(&rest, &id, restored + 3);
    // A resync of generation 2 keeps naming the savepoint (a restarted JobManager starts the same).
    let status: serde_json::Value =
        serde_json::from_str(&render(&dir, "gen-2", &second, "--status")).unwrap();
    assert_eq!(status["deployed"]["savepoint"], location.as_str(), "{status}");
    assert_eq!(
        operator_manifest(
            &dir,
            "gen-2-again",
            &flinkjob(&dir, 2, 3, "savepoint", Some(&status))
        )
        .1,
        Some(location.clone())
    );
    // Generation 3 in last-state mode, deployed over the running generation 2 (Recreate kills it).
    let third = flinkjob(&dir, 3, 2, "last-state", Some(&status));
    let (m3, from) = operator_manifest(&dir, "gen-3", &third);
    assert_eq!(
        from, None,
        "last-state: the JobManager finds the predecessor's checkpoint"
    );
    drop((jm, tm));
    let killed_after = common::committed_lines(&output);
    let (_jm, _tm, rest, id) = running(&m3, &dir, "jm-3.log");
    let (_, c) = common::http("GET", &rest, &format!("/jobs/{id}/checkpoints"));
    assert!(
        c["latest"]["restored"]["id"].as_u64().unwrap_or(0) > restored,
        "generation 2's own checkpoint: {c}"
    );
    finished(&rest, &dir.join("jm-3.log"));
    common::assert_streaming_output(&output, &common::pipeline_reference(42, RECORDS));
    println!(
        "operator manifests: generation 1 stopped with a savepoint after {stopped_after} updates, generation 2 \
         at parallelism 3 from it, generation 3 (last-state, parallelism 2) over it after {killed_after}; output exact"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Issue 13 part 2, rollback with real processes: generation 1 (savepoint mode, rollback on,
/// readiness timeout 1 s) runs and is recorded stable; the upgrade to generation 2 stops it with a
/// savepoint; generation 2 starts from it and fails (its output is a file). Past the readiness
/// timeout the operator's status says ROLLED_BACK, and the manifest it renders is generation 1's
/// spec starting from the upgrade's savepoint: that deployment finishes the job, and the counts of
/// both of generation 1's runs together equal the reference exactly.
fn a_failed_upgrade_rolls_back_to_the_stable_spec_from_its_savepoint() -> Result<(), Failed> {
    let dir = common::scratch("savepoints-rollback");
    let output = dir.join("out");
    let conf = "    kubernetes.operator.deployment.rollback.enabled: \"true\"\n    kubernetes.operator.deployment.readiness.timeout: \"1 s\"\n";
    let first = flinkjob_with(&dir, 1, 2, "savepoint", &output, conf, None);
    let (m1, _) = operator_manifest(&dir, "gen-1", &first);
    let (jm, tm, rest, id) = running(&m1, &dir, "jm-1.log");
    wait_checkpoints(&rest, &id, 2);
    // What the operator writes once generation 1's job runs: it is the stable spec.
    let mut status: serde_json::Value =
        serde_json::from_str(&render(&dir, "gen-1", &first, "--status")).unwrap();
    let stable = floe_manifest::FlinkJob::from_yaml(&first).unwrap().spec;
    status["lastStableSpec"] = serde_json::json!({
        "generation": 1,
        "spec": serde_json::to_string(&stable).unwrap(),
    });
    let (location, stopped_after) = stop_for_an_upgrade((jm, tm), &rest, &id, &dir, &output, &mut status);
    // Generation 2 cannot run: its output is a file.
    let not_a_directory = dir.join("not-a-directory");
    std::fs::write(&not_a_directory, "a file").unwrap();
    let second = flinkjob_with(&dir, 2, 3, "savepoint", &not_a_directory, conf, Some(&status));
    let (m2, from) = operator_manifest(&dir, "gen-2", &second);
    assert_eq!(from.as_deref(), Some(location.as_str()));
    let (jm, rpc, rest) = jobmanager(&m2, &dir.join("jm-2.log"));
    let tm = taskmanager(&rpc, 4);
    let failed = wait_job(&rest, Duration::from_secs(30), |j| {
        matches!(j["state"].as_str(), Some("FAILED" | "FINISHED"))
    });
    assert_eq!(failed["state"], "FAILED", "{failed}");
    drop((jm, tm));
    let deployed: serde_json::Value =
        serde_json::from_str(&render(&dir, "gen-2", &second, "--status")).unwrap();
    assert_eq!(deployed["deployed"]["generation"], 2, "{deployed}");
    assert!(
        deployed["rolledBackGeneration"].is_null(),
        "within the timeout: {deployed}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let later = flinkjob_with(&dir, 2, 3, "savepoint", &not_a_directory, conf, Some(&deployed));
    let rolled: serde_json::Value =
        serde_json::from_str(&render(&dir, "gen-2-later", &later, "--status")).unwrap();
    assert_eq!(rolled["lifecycleState"], "ROLLED_BACK", "{rolled}");
    assert_eq!(rolled["rolledBackGeneration"], 2, "{rolled}");
    let rolled_back = flinkjob_with(&dir, 2, 3, "savepoint", &not_a_directory, conf, Some(&rolled));
    let (m3, from) = operator_manifest(&dir, "gen-2-rolled-back", &rolled_back);
    assert_eq!(
        from.as_deref(),
        Some(location.as_str()),
        "the stable spec starts from the upgrade's savepoint"
    );
    let manifest = floe_manifest::FlinkJob::from_yaml(&std::fs::read_to_string(&m3).unwrap()).unwrap();
    assert_eq!(
        manifest.spec.job, stable.job,
        "generation 1's job: {:?}",
        manifest.spec.job
    );
    let (_jm, _tm, rest, _) = running(&m3, &dir, "jm-3.log");
    finished(&rest, &dir.join("jm-3.log"));
    common::assert_streaming_output(&output, &common::pipeline_reference(42, RECORDS));
    println!(
        "rollback: generation 1 stopped with a savepoint after {stopped_after} updates, generation 2 FAILED, \
         rolled back to generation 1's spec from that savepoint; output exact"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The REST answer's first error says `needle`.
/// Event time and a stop (issue 14): Nexmark q11 (session windows) stops with a savepoint, without
/// `drain`, as Flink's `stop` does: event time does not end, so no session fires early and every
/// row committed by then is a row of the query's definition. A new deployment from the
/// savepoint alone (its job storage deleted) runs to the end; both together equal the definition
/// exactly.
/// A streaming Nexmark `query` FlinkJob `name` over `events` events at 20,000 a second into
/// `dir/out`, checkpointing every 500 ms; `extra_job`: more lines of `spec.job`.
fn nexmark_manifest(dir: &Path, name: &str, query: &str, events: u64, extra_job: &str) -> PathBuf {
    nexmark_manifest_with(dir, name, query, events, "", extra_job)
}

/// [`nexmark_manifest`] with `extra_args` (`, "--flag", "value"` pieces) after the job's arguments.
fn nexmark_manifest_with(
    dir: &Path,
    name: &str,
    query: &str,
    events: u64,
    extra_args: &str,
    extra_job: &str,
) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: {name} }}\nspec:\n  job:\n    name: nexmark\n    args: [\"--query\", \"{query}\", \"--events\", \"{events}\", \"--rate\", \"20000\", \"--output\", \"{}\"{extra_args}]\n    parallelism: 2\n    mode: streaming\n{extra_job}  taskManager: {{ replicas: 1, slots: 4 }}\n  storage: {{ url: \"file://{}\" }}\n  configuration:\n    execution.checkpointing.interval: \"500 ms\"\n",
            dir.join("out").display(),
            dir.join(format!("storage-{name}")).display(),
        ),
    )
    .unwrap();
    path
}

/// The committed rows under `output`, sorted.
fn committed_rows(output: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(output) else {
        return Vec::new();
    };
    let mut rows: Vec<String> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("part-"))
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    rows.sort();
    rows
}

/// Waits until some rows were committed under `output`.
fn wait_committed(output: &Path) {
    let started = Instant::now();
    while committed_rows(output).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "nothing committed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn windows_stop_without_drain_and_resume() -> Result<(), Failed> {
    const EVENTS: u64 = 200_000;
    let dir = common::scratch("savepoints-windows");
    let output = dir.join("out");
    let write = |name: &str, extra_job: &str| nexmark_manifest(&dir, name, "q11", EVENTS, extra_job);
    let events =
        floe_datastream::nexmark::events(&floe_datastream::nexmark::NexmarkConfig::default(), EVENTS);
    let want = floe_datastream::nexmark::reference("q11", &events).unwrap();
    let committed = || committed_rows(&output);
    let first = write("first", "");
    let (jm, tm, rest, id) = running(&first, &dir, "jm-1.log");
    // Stop once some sessions were committed, while others are open.
    wait_committed(&output);
    let location = savepoint(&rest, &id, &dir.join("savepoints"), true);
    finished(&rest, &dir.join("jm-1.log"));
    drop((jm, tm));
    let early = committed();
    let wanted: std::collections::HashSet<&String> = want.iter().collect();
    let not_in_definition = early.iter().filter(|r| !wanted.contains(r)).count();
    if not_in_definition > 0 {
        return Err(format!(
            "after the stop, {not_in_definition} of {} committed sessions are not sessions of the definition (fired early?)",
            early.len()
        )
        .into());
    }
    assert!(
        early.len() < want.len(),
        "the stop came before the end: {} rows",
        early.len()
    );
    let _ = std::fs::remove_dir_all(dir.join("storage-first"));
    let second = write("second", &format!("    initialSavepointPath: \"{location}\"\n"));
    let (jm, tm, rest, _) = running(&second, &dir, "jm-2.log");
    finished(&rest, &dir.join("jm-2.log"));
    drop((jm, tm));
    let all = committed();
    if all != want {
        return Err(format!("after the resume: {} rows, expected {}", all.len(), want.len()).into());
    }
    println!(
        "q11: {} sessions committed at the stop, all {} after the resume, exactly",
        early.len(),
        all.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Issue 31, item 4 (Flink's `stop --drain`): Nexmark q11 (session windows) stopped with drain
/// ends event time before the savepoint, so every session open at the stop fires: what is
/// committed equals the query's definition over exactly the events the sources had read (the
/// savepoint's source positions tell which). Before drain did anything, the sessions open at the
/// stop were never committed.
fn windows_stop_with_drain_fire_every_window() -> Result<(), Failed> {
    const EVENTS: u64 = 200_000;
    let dir = common::scratch("savepoints-drain");
    let output = dir.join("out");
    let manifest = nexmark_manifest(&dir, "drained", "q11", EVENTS, "");
    let (jm, tm, rest, id) = running(&manifest, &dir, "jm.log");
    wait_committed(&output);
    // Through the command-line client: `floe stop --drain`.
    let stop = std::process::Command::new(common::FLOE)
        .args(["stop", &id, "--drain", "--savepoint-path"])
        .arg(dir.join("savepoints"))
        .args(["--jobmanager", &format!("http://{rest}")])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&stop.stdout).into_owned();
    assert!(
        stop.status.success(),
        "floe stop --drain: {said}{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let location = said
        .trim()
        .rsplit(": ")
        .next()
        .unwrap_or_else(|| panic!("no savepoint location in {said:?}"))
        .to_string();
    finished(&rest, &dir.join("jm.log"));
    drop((jm, tm));
    // Subtask s of the source read events s, s + step, ... below its `next`.
    let metadata =
        std::fs::read(Path::new(location.trim_start_matches("file://")).join("_metadata")).unwrap();
    let text = String::from_utf8_lossy(&metadata);
    let mut read = Vec::new();
    for at in text.match_indices("next=").map(|(i, _)| i) {
        let fields: Vec<u64> = text[at..]
            .split(['"', '\\'])
            .next()
            .unwrap()
            .split(',')
            .filter_map(|f| f.split_once('=')?.1.parse().ok())
            .collect();
        read.push((fields[0], fields[1]));
    }
    assert_eq!(read.len(), 2, "two source positions in {text}");
    let config = floe_datastream::nexmark::NexmarkConfig::default();
    let mut numbers: Vec<u64> = read
        .iter()
        .flat_map(|&(next, step)| (next % step..next).step_by(step as usize))
        .collect();
    numbers.sort();
    assert!(
        (numbers.len() as u64) < EVENTS,
        "the stop came before the end of the input"
    );
    let events: Vec<_> = numbers.iter().map(|&n| config.event(n)).collect();
    let want = floe_datastream::nexmark::reference("q11", &events).unwrap();
    let got = committed_rows(&output);
    if got != want {
        return Err(format!(
            "drained at {} events: {} sessions committed, the definition over those events has {}",
            numbers.len(),
            got.len(),
            want.len()
        )
        .into());
    }
    println!(
        "q11 drained at {} events: all {} sessions committed",
        numbers.len(),
        got.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Issue 31, item 3 (Flink's synchronous savepoint): Nexmark q12 counts bids per bidder in
/// 200 ms processing-time windows, so windows keep firing on the wall clock while the job is
/// stopped. After the stop's barrier nothing more may be emitted or committed: a window fired
/// after it would be committed at the sinks' close and fired again by the resumed job, which
/// restores its contents from the savepoint. Stopped mid-run and resumed from the savepoint
/// alone, the two runs' counts add up to the number of bids, each counted once.
fn processing_time_windows_stop_and_resume_count_every_bid_once() -> Result<(), Failed> {
    const EVENTS: u64 = 200_000;
    let dir = common::scratch("savepoints-processing-time");
    let output = dir.join("out");
    let window = r#", "--window-ms", "200""#;
    let config = floe_datastream::nexmark::NexmarkConfig::default();
    let bids = (0..EVENTS)
        .filter(|&n| matches!(config.event(n), floe_datastream::nexmark::Event::Bid(_)))
        .count() as u64;
    // Rows `bidder TAB count TAB window start TAB window end`.
    let counted = |rows: &[String]| -> u64 {
        rows.iter()
            .map(|r| {
                r.split('\t')
                    .nth(1)
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("bad row {r:?}"))
            })
            .sum()
    };
    let first = nexmark_manifest_with(&dir, "first", "q12", EVENTS, window, "");
    let (jm, tm, rest, id) = running(&first, &dir, "jm-1.log");
    wait_committed(&output);
    let location = savepoint(&rest, &id, &dir.join("savepoints"), true);
    finished(&rest, &dir.join("jm-1.log"));
    drop((jm, tm));
    let early = counted(&committed_rows(&output));
    assert!(
        early < bids,
        "the stop came before the end: {early} of {bids} bids counted"
    );
    let _ = std::fs::remove_dir_all(dir.join("storage-first"));
    let second = nexmark_manifest_with(
        &dir,
        "second",
        "q12",
        EVENTS,
        window,
        &format!("    initialSavepointPath: \"{location}\"\n"),
    );
    let (jm, tm, rest, _) = running(&second, &dir, "jm-2.log");
    finished(&rest, &dir.join("jm-2.log"));
    drop((jm, tm));
    let all = counted(&committed_rows(&output));
    if all != bids {
        return Err(format!(
            "q12 in 200 ms processing-time windows, stopped at {early} bids and resumed: {all} bids counted, the events hold {bids}"
        )
        .into());
    }
    println!("q12: {early} bids counted at the stop, all {bids} after the resume, each once");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn assert_error(answer: &serde_json::Value, needle: &str) {
    let message = answer["errors"][0].as_str().unwrap_or_default();
    assert!(message.contains(needle), "{answer}");
}

/// What a job cannot serve is answered with what is wrong.
fn savepoint_requests_name_the_problem() -> Result<(), Failed> {
    let dir = common::scratch("savepoints-bad");
    let output = dir.join("out");
    let m = manifest(&dir, "job", &output, 2, "hashmap", "", "");
    let (_jm, _tm, rest, id) = running(&m, &dir, "jm.log");
    let (status, answer) = post(&rest, &format!("/jobs/{id}/savepoints"), "[1]");
    assert_eq!(status, 400, "{answer}");
    assert_error(&answer, "expected a JSON object");
    let (status, answer) = post(&rest, &format!("/jobs/{id}/stop"), r#"{"drain": "yes"}"#);
    assert_eq!(status, 400, "{answer}");
    assert_error(&answer, "drain: expected true or false");
    let (status, answer) = post(&rest, "/jobs/nope/savepoints", "{}");
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = common::http("GET", &rest, &format!("/jobs/{id}/savepoints/nope"));
    assert_eq!(status, 404, "{answer}");
    assert_error(&answer, "no savepoint nope");
    // No directory named: the job storage's savepoints/ (Floe's default for state.savepoints.dir).
    let (status, answer) = post(&rest, &format!("/jobs/{id}/savepoints"), "");
    assert_eq!(status, 202, "{answer}");
    let trigger = answer["request-id"].as_str().unwrap().to_string();
    let (status, answer) = post(&rest, &format!("/jobs/{id}/savepoints"), "{}");
    assert_eq!(status, 409, "one at a time: {answer}");
    assert_error(&answer, "still in progress");
    let done = await_savepoint(&rest, &id, &trigger);
    let location = done["operation"]["location"].as_str().unwrap();
    assert!(
        location.starts_with(&format!(
            "file://{}/storage/default/savepoints/savepoints/savepoint-",
            dir.display()
        )),
        "{location}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let trials = vec![
        Trial::test(
            "event_time_windows_stop_without_drain_and_resume",
            windows_stop_without_drain_and_resume,
        ),
        Trial::test(
            "event_time_windows_stop_with_drain_fire_every_window",
            windows_stop_with_drain_fire_every_window,
        ),
        Trial::test(
            "processing_time_windows_stop_and_resume_count_every_bid_once",
            processing_time_windows_stop_and_resume_count_every_bid_once,
        ),
        Trial::test("hashmap_savepoint_stop_and_restore_2_to_3_exactly_once", || {
            upgrade_through_a_savepoint("hashmap", 2, 3, "")
        }),
        // Issue 31, item 5: the upgrade adds a keyed reduce before the count, which takes the
        // vertex id `reduce` (the count's vertex is `reduce-2` now): the count's state and the
        // sink's follow their operators' uids.
        Trial::test(
            "an_operator_added_upstream_leaves_the_counts_state_with_the_count",
            || upgrade_through_a_savepoint("rocksdb", 2, 2, r#", "--latest-first", "true""#),
        ),
        Trial::test("rocksdb_savepoint_stop_and_restore_3_to_2_exactly_once", || {
            upgrade_through_a_savepoint("rocksdb", 3, 2, "")
        }),
        Trial::test(
            "last_state_upgrade_continues_from_the_latest_checkpoint",
            last_state_upgrade_continues_from_the_latest_checkpoint,
        ),
        Trial::test(
            "savepoint_requests_name_the_problem",
            savepoint_requests_name_the_problem,
        ),
        Trial::test(
            "operator_upgrades_continue_the_counts_exactly",
            operator_upgrades_continue_the_counts_exactly,
        ),
        Trial::test(
            "a_failed_upgrade_rolls_back_to_the_stable_spec_from_its_savepoint",
            a_failed_upgrade_rolls_back_to_the_stable_spec_from_its_savepoint,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}
