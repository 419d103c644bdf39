//! The JobManager's operation log across real processes (DESIGN.md "Object storage layout and
//! JobManager failover"): JobManagers in application mode (`floe jobmanager --job-file`) whose
//! manifest has `spec.storage` take a leader epoch, and
//! - a second JobManager on the same job storage fences the first: the first's next log write is
//!   refused and it exits saying so, while the second goes on;
//! - a JobManager restarted after its job FINISHED restores it from the log and does not run it again.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::processes::{Proc, jobmanager, taskmanager, wait_job};

fn manifest(dir: &Path, input: &Path, output: &Path) -> PathBuf {
    let path = dir.join("job.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: wordcount }}\nspec:\n  job:\n    name: wordcount\n    args: [\"--input\", \"{}\", \"--output\", \"{}\"]\n    parallelism: 2\n    mode: batch\n  taskManager: {{ replicas: 1, slots: 2 }}\n  storage: {{ url: \"file://{}\" }}\n",
            input.display(),
            output.display(),
            dir.join("storage").display()
        ),
    )
    .unwrap();
    path
}

/// How a process exited, within 20 s.
fn exit_status(process: &mut Proc, what: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            return status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn leader_epochs(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("storage/default/wordcount/leader"))
        .unwrap()
        .count()
}

#[test]
fn a_second_jobmanager_fences_the_first() {
    let dir = common::scratch("fence");
    let input = dir.join("words.txt");
    floe::generate::write_words(&input, 1 << 20, 5).unwrap();
    let m = manifest(&dir, &input, &dir.join("out"));
    // No TaskManagers: the job waits for slots, so both JobManagers hold it unfinished.
    let (mut a, _, rest_a) = jobmanager(&m, &dir.join("jm-a.log"));
    let job_a = wait_job(&rest_a, Duration::from_secs(20), |j| j["state"] == "CREATED");
    let (_b, _, rest_b) = jobmanager(&m, &dir.join("jm-b.log"));
    let job_b = wait_job(&rest_b, Duration::from_secs(20), |j| j["state"] == "CREATED");
    assert_eq!(
        job_a["jid"], job_b["jid"],
        "the new leader resumes the logged job under its id"
    );
    assert_eq!(leader_epochs(&dir), 2);

    // The old leader acts (a cancel changes its job's status) and must log it first: refused.
    let id = job_a["jid"].as_str().unwrap();
    common::http("PATCH", &rest_a, &format!("/jobs/{id}"));
    let status = exit_status(&mut a, "the fenced JobManager did not exit");
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(dir.join("jm-a.log")).unwrap();
    assert!(
        log.contains("JobManager of epoch 1 was fenced: a newer JobManager sealed its log at")
            && log.contains("its writes are refused"),
        "{log}"
    );
    // The new leader's job is untouched by the zombie's cancel.
    let (_, job) = common::http("GET", &rest_b, &format!("/jobs/{id}"));
    assert_eq!(job["state"], "CREATED");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restarted_jobmanager_does_not_run_a_finished_job_again() {
    let dir = common::scratch("restart");
    let input = dir.join("words.txt");
    floe::generate::write_words(&input, 2 << 20, 6).unwrap();
    let reference = common::reference_count(&input);
    let output = dir.join("out");
    let m = manifest(&dir, &input, &output);
    let (a, rpc, rest_a) = jobmanager(&m, &dir.join("jm-a.log"));
    let tm = taskmanager(&rpc, 2);
    let finished = wait_job(&rest_a, Duration::from_secs(60), |j| {
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED"))
    });
    assert_eq!(finished["state"], "FINISHED", "{finished}");
    common::assert_batch_output(&output, &reference);
    // The status change reaches the log within 100 ms; then the JobManager and its TaskManager die.
    std::thread::sleep(Duration::from_millis(500));
    drop((a, tm));
    let written: Vec<SystemTime> = std::fs::read_dir(&output)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().modified().unwrap())
        .collect();

    let (_b, rpc_b, rest_b) = jobmanager(&m, &dir.join("jm-b.log"));
    let _tm_b = taskmanager(&rpc_b, 2);
    let restored = wait_job(&rest_b, Duration::from_secs(20), |j| j["state"] == "FINISHED");
    assert_eq!(restored["jid"], finished["jid"]);
    assert_eq!(restored["restored-from-operation-log"], true);
    assert_eq!(leader_epochs(&dir), 2);
    // Nothing ran again: the same part files, untouched, and no task was deployed.
    std::thread::sleep(Duration::from_millis(500));
    let again: Vec<SystemTime> = std::fs::read_dir(&output)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().modified().unwrap())
        .collect();
    assert_eq!(again, written);
    common::assert_batch_output(&output, &reference);
    let log = std::fs::read_to_string(dir.join("jm-b.log")).unwrap();
    assert!(log.contains("not running it again"), "{log}");
    drop((_b, _tm_b));

    // A newer generation of the FlinkJob (what the operator writes after a resume) is a new
    // deployment: its job is submitted anew, under a new id, and runs.
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("name: wordcount }", "name: wordcount, generation: 3 }");
    std::fs::write(&m, text).unwrap();
    std::fs::remove_dir_all(&output).unwrap();
    let (_c, rpc_c, rest_c) = jobmanager(&m, &dir.join("jm-c.log"));
    let _tm_c = taskmanager(&rpc_c, 2);
    let rerun = wait_job(&rest_c, Duration::from_secs(60), |j| {
        j["restored-from-operation-log"].is_null()
            && matches!(j["state"].as_str(), Some("FINISHED" | "FAILED"))
    });
    assert_eq!(rerun["state"], "FINISHED", "{rerun}");
    assert_ne!(rerun["jid"], finished["jid"]);
    common::assert_batch_output(&output, &reference);
    assert_eq!(leader_epochs(&dir), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Process ids whose command line contains every one of `parts`.
fn pids_with(parts: &[&str]) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if parts.iter().all(|p| cmdline.contains(p)) {
            pids.push(pid);
        }
    }
    pids
}

/// `floe run` in the background, its stderr to `dir/run.stderr`; returns it, that file, and the REST
/// address of its JobManager (from the cluster line), which a restarted JobManager keeps.
fn start_floe_run(dir: &Path, manifest: &Path, work: &Path) -> (Proc, PathBuf, String) {
    let stderr = dir.join("run.stderr");
    let run = Proc(
        Command::new(common::FLOE)
            .args(["run", "-f"])
            .arg(manifest)
            .arg("--work-dir")
            .arg(work)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    let rest = loop {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        if let Some(rest) = common::web_ui_address(&text) {
            break rest;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no cluster line: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    (run, stderr, rest)
}

/// SIGKILLs the one JobManager `floe run` started for `work`; returns its pid.
fn kill_jobmanager(work: &Path) -> u32 {
    let job_file = work.join("flinkjob.yaml").display().to_string();
    let pids = pids_with(&["jobmanager", &job_file]);
    assert_eq!(pids.len(), 1, "one JobManager process: {pids:?}");
    assert!(
        Command::new("kill")
            .args(["-9", &pids[0].to_string()])
            .status()
            .unwrap()
            .success()
    );
    pids[0]
}

/// Waits for `floe run` to end; returns (stdout, stderr) after checking the job FINISHED.
fn finished_run(mut run: Proc, stderr: &Path) -> (String, String) {
    let status = run.0.wait().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut run.0.stdout.take().unwrap(), &mut out).unwrap();
    let err = std::fs::read_to_string(stderr).unwrap();
    assert!(
        status.success() && out.contains("FINISHED"),
        "floe run failed: {out}\n{err}"
    );
    (out, err)
}

#[test]
fn floe_run_restarts_a_killed_jobmanager_and_the_job_still_finishes() {
    let dir = common::scratch("run-jm-kill");
    let work = dir.join("work");
    let output = dir.join("out");
    // A rate-limited generator: about 3 s of work, so the JobManager dies mid-job.
    let records = 60_000;
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pipeline }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{records}\", \"--rate\", \"20000\"]\n    parallelism: 2\n    mode: batch\n  taskManager: {{ replicas: 2, slots: 2 }}\n  configuration: {{ heartbeat.timeout: \"2 s\" }}\n",
            output.display()
        ),
    )
    .unwrap();
    let (run, stderr, rest) = start_floe_run(&dir, &manifest, &work);
    // Wait until the job runs, then SIGKILL the JobManager.
    let job_file = work.join("flinkjob.yaml").display().to_string();
    let running = wait_job(&rest, Duration::from_secs(20), |j| j["state"] == "RUNNING");
    let killed_pid = kill_jobmanager(&work);
    let killed = Instant::now();
    // The restarted JobManager answers on the same REST port with the same job, running again.
    let again = loop {
        if let Some((_, list)) = common::try_http("GET", &rest, "/jobs")
            && let Some(state) = list["jobs"].get(0).and_then(|j| j["status"].as_str())
            && matches!(state, "RUNNING" | "FINISHED")
            && !pids_with(&["jobmanager", &job_file]).contains(&killed_pid)
        {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the job did not run again"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "JobManager failover under floe run: job RUNNING again {:.2} s after SIGKILL",
        again.as_secs_f64()
    );

    let (out, err) = finished_run(run, &stderr);
    assert!(err.contains("starting it again on the same ports"), "{err}");
    assert!(
        out.contains(running["jid"].as_str().unwrap()),
        "the same job finished: {out}"
    );
    common::assert_batch_output(&output, &common::pipeline_reference(42, records));
    let new_pids = pids_with(&["jobmanager", &job_file]);
    assert!(
        new_pids.is_empty(),
        "floe run left a JobManager behind: {new_pids:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The events of one epoch of a job's operation log, read straight from storage (each object: the
/// 17-byte FLOE1 envelope header, then JSON).
fn epoch_events(job_dir: &Path, epoch: u64) -> Vec<serde_json::Value> {
    let dir = job_dir.join(format!("oplog/{epoch:020}"));
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let entries: Vec<Option<serde_json::Value>> = names
        .iter()
        .map(|name| {
            let bytes = std::fs::read(name).unwrap();
            bytes
                .get(17..)
                .and_then(|json| serde_json::from_slice::<serde_json::Value>(json).ok())
        })
        .collect();
    let mut events = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        // The last entry an epoch's JobManager wrote may be torn (it was killed while appending),
        // as the log itself tolerates: then it is the last object, or only the seal a newer
        // JobManager put after it follows. Any other entry must be whole.
        let Some(entry) = entry else {
            let rest = &entries[i + 1..];
            let only_a_seal_follows = rest.is_empty()
                || (rest.len() == 1 && rest[0].as_ref().is_some_and(|e| e.get("sealed").is_some()));
            assert!(only_a_seal_follows, "damaged log entry {}", names[i].display());
            continue;
        };
        if let Some(batch) = entry["events"].as_array() {
            events.extend(batch.iter().cloned());
        }
    }
    events
}

/// Issue 5's batch failover: with remote shuffle, SIGKILL the JobManager after the first stage
/// finished; the restarted JobManager completes the job with the correct result, and neither its REST
/// API nor its log shows any first-stage execution running again.
#[test]
fn with_remote_shuffle_a_restarted_jobmanager_does_not_rerun_the_finished_first_stage() {
    jobmanager_killed_after_the_first_stage(true);
}

/// The same failover with partitions on the TaskManagers' local disks: the TaskManagers keep their
/// finished partitions when the JobManager dies, report them when they register with the new one,
/// and the new JobManager does not run the first stage again.
#[test]
fn a_restarted_jobmanager_finds_finished_local_partitions_on_the_taskmanagers() {
    jobmanager_killed_after_the_first_stage(false);
}

/// The job as the JobManager `floe run` started again after `killed_pid` reports it, once `ready`
/// holds (within 60 s of `started`).
fn restarted_job(
    rest: &str,
    work: &Path,
    killed_pid: u32,
    started: Instant,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let job_file = work.join("flinkjob.yaml").display().to_string();
    loop {
        if let Some((_, list)) = common::try_http("GET", rest, "/jobs")
            && let Some(id) = list["jobs"].get(0).and_then(|j| j["id"].as_str())
            && !pids_with(&["jobmanager", &job_file]).contains(&killed_pid)
            && let Some((_, job)) = common::try_http("GET", rest, &format!("/jobs/{id}"))
            && job["vertices"].is_array()
            && ready(&job)
        {
            return job;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no restarted JobManager"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn jobmanager_killed_after_the_first_stage(remote: bool) {
    let dir = common::scratch(if remote {
        "run-jm-kill-remote"
    } else {
        "run-jm-kill-local"
    });
    let work = dir.join("work");
    let output = dir.join("out");
    let records = 40_000;
    let manifest = dir.join("job.yaml");
    let remote_conf = if remote {
        "    shuffle.remote.enabled: \"true\"\n"
    } else {
        ""
    };
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pipeline }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{records}\", \"--rate\", \"40000\", \"--sink-delay-us\", \"400\"]\n    parallelism: 2\n    mode: batch\n  taskManager: {{ replicas: 2, slots: 2 }}\n  configuration:\n    execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING\n{remote_conf}",
            output.display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let (run, stderr, rest) = start_floe_run(&dir, &manifest, &work);
    // The first stage (both sources) finished, the job goes on: kill the JobManager now.
    let sources_done = |j: &serde_json::Value| {
        j["vertices"][0]["subtasks"]
            .as_array()
            .is_some_and(|s| s.iter().all(|t| t["status"] == "FINISHED"))
    };
    let snapshot = wait_job(&rest, Duration::from_secs(30), |j| {
        sources_done(j) || j["state"] != "RUNNING" && j["state"] != "CREATED"
    });
    assert_eq!(
        snapshot["state"], "RUNNING",
        "the job must still run when the JobManager dies"
    );
    let killed_pid = kill_jobmanager(&work);

    // The restarted JobManager: the sources are finished from the log, not run.
    let resumed = restarted_job(&rest, &work, killed_pid, started, |j| j["state"] != "CREATED");
    assert_eq!(resumed["jid"], snapshot["jid"]);
    for s in resumed["vertices"][0]["subtasks"].as_array().unwrap() {
        assert_eq!(s["status"], "FINISHED", "{s}");
        assert_eq!(s["attempt"], 0, "{s}");
        assert_eq!(s["restored-from-operation-log"], true, "{s}");
    }

    finished_run(run, &stderr);
    common::assert_batch_output(&output, &common::pipeline_reference(42, records));

    // The log: epoch 1 saw both sources finish; epoch 2 logged no source execution at all.
    let job_dir = work.join("storage/default/pipeline");
    let source_finishes = |events: &[serde_json::Value]| {
        events
            .iter()
            .filter(|e| e["event"] == "execution_finished" && e["vertex"] == 0)
            .count()
    };
    assert_eq!(source_finishes(&epoch_events(&job_dir, 1)), 2);
    let second = epoch_events(&job_dir, 2);
    assert_eq!(source_finishes(&second), 0, "{second:?}");
    if remote {
        // Every finish is logged with remote shuffle; locally only those with blocking results.
        let reduces = second
            .iter()
            .filter(|e| e["event"] == "execution_finished" && e["vertex"] == 2)
            .count();
        assert_eq!(
            reduces, 2,
            "the last stage ran under the new JobManager: {second:?}"
        );
    }
    assert!(
        second
            .iter()
            .any(|e| e["event"] == "job_status_changed" && e["status"] == "FINISHED"),
        "the end is logged before floe run hears of it: {second:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: an adaptive batch job's JobManager dies (SIGKILL) after it decided the reducer's
/// parallelism from the bytes the first stages wrote; the JobManager `floe run` starts again
/// keeps the logged decision (same parallelism, same decision time, none logged again) instead
/// of deciding anew, and the output is exact.
#[test]
fn a_restarted_jobmanager_keeps_the_parallelism_its_predecessor_decided() {
    let dir = common::scratch("run-jm-kill-adaptive");
    let work = dir.join("work");
    let output = dir.join("out");
    let records = 40_000;
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pipeline }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{records}\", \"--rate\", \"40000\", \"--sink-delay-us\", \"300\"]\n    parallelism: auto\n    mode: batch\n  taskManager: {{ replicas: 2, slots: 2 }}\n  configuration:\n    execution.batch.adaptive.auto-parallelism.default-source-parallelism: \"2\"\n    execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task: \"64 kb\"\n    execution.batch.adaptive.auto-parallelism.max-parallelism: \"32\"\n    shuffle.remote.enabled: \"true\"\n",
            output.display()
        ),
    )
    .unwrap();
    let (run, stderr, rest) = start_floe_run(&dir, &manifest, &work);
    // The reducer (vertex 2) is decided and the job goes on: kill the JobManager now.
    let decided = wait_job(&rest, Duration::from_secs(60), |j| {
        !j["vertices"][2]["parallelism-decision"].is_null()
            || j["state"] != "RUNNING" && j["state"] != "CREATED"
    });
    assert_eq!(
        decided["state"], "RUNNING",
        "the job must still run when the JobManager dies: {decided}"
    );
    let decision = decided["vertices"][2]["parallelism-decision"].clone();
    let parallelism = decision["parallelism"].as_u64().unwrap();
    assert!(
        parallelism >= 2,
        "64 KiB per task over the generator's words: {decision}"
    );
    assert_eq!(decided["vertices"][2]["parallelism"], parallelism);
    let killed_pid = kill_jobmanager(&work);
    let resumed = restarted_job(&rest, &work, killed_pid, Instant::now(), |_| true);
    assert_eq!(resumed["jid"], decided["jid"]);
    assert_eq!(
        resumed["vertices"][2]["parallelism-decision"], decision,
        "the logged decision is kept"
    );
    assert_eq!(resumed["vertices"][2]["parallelism"], parallelism);
    assert_eq!(
        resumed["vertices"][2]["subtasks"].as_array().unwrap().len() as u64,
        parallelism
    );

    finished_run(run, &stderr);
    common::assert_batch_output(&output, &common::pipeline_reference(42, records));
    // Epoch 1 logged the decisions; epoch 2 logged none (it decided nothing again).
    let job_dir = work.join("storage/default/pipeline");
    let decisions = |events: &[serde_json::Value]| -> Vec<u64> {
        events
            .iter()
            .filter(|e| e["event"] == "parallelism_decided")
            .map(|e| e["decision"]["vertex"].as_u64().unwrap())
            .collect()
    };
    let first = decisions(&epoch_events(&job_dir, 1));
    assert!(first.contains(&0) && first.contains(&2), "{first:?}");
    assert_eq!(decisions(&epoch_events(&job_dir, 2)), Vec::<u64>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// (its REST API says which), and the committed output equals the fault-free output exactly.
#[test]
fn a_restarted_jobmanager_resumes_a_streaming_job_from_its_latest_checkpoint() {
    let dir = common::scratch("run-jm-kill-streaming");
    let work = dir.join("work");
    let output = dir.join("out");
    let records = 30_000u64;
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pipeline }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"{records}\", \"--rate\", \"5000\"]\n    parallelism: 2\n    mode: streaming\n  taskManager: {{ replicas: 2, slots: 2 }}\n  configuration:\n    execution.checkpointing.interval: \"1 s\"\n    state.backend.type: rocksdb\n",
            output.display()
        ),
    )
    .unwrap();
    let (run, stderr, rest) = start_floe_run(&dir, &manifest, &work);
    // Bounded: a REST address read wrongly must fail the test, not hang it.
    let job_id = common::wait_for("the job in /jobs", Duration::from_secs(60), || {
        let (_, list) = common::try_http("GET", &rest, "/jobs")?;
        list["jobs"].get(0)?["id"].as_str().map(String::from)
    });
    let checkpoints = format!("/jobs/{job_id}/checkpoints");
    let started = Instant::now();
    loop {
        if let Some((_, c)) = common::try_http("GET", &rest, &checkpoints)
            && c["counts"]["completed"].as_u64().unwrap_or(0) >= 2
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no second checkpoint"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let job_file = work.join("flinkjob.yaml").display().to_string();
    let killed_pid = kill_jobmanager(&work);
    // The new JobManager says which checkpoint it restored.
    let started = Instant::now();
    let restored = loop {
        if !pids_with(&["jobmanager", &job_file]).contains(&killed_pid)
            && let Some((200, c)) = common::try_http("GET", &rest, &checkpoints)
            && let Some(id) = c["latest"]["restored"]["id"].as_u64()
        {
            break id;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job was not resumed from a checkpoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(restored >= 2, "restored checkpoint {restored}");
    finished_run(run, &stderr);
    let mut got = common::output_lines(&output);
    got.sort();
    let mut expected: Vec<(String, u64)> = common::pipeline_reference(42, records)
        .into_iter()
        .flat_map(|(w, total)| (1..=total).map(move |c| (w.clone(), c)))
        .collect();
    expected.sort();
    assert_eq!(got.len(), expected.len(), "every update exactly once");
    assert!(
        got == expected,
        "the committed output differs from the fault-free output"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Checkpoint ids the operation log records as completed, over every epoch so far.
fn logged_checkpoints(job_dir: &Path) -> Vec<u64> {
    let mut epochs: Vec<u64> = std::fs::read_dir(job_dir.join("oplog"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
        .collect();
    epochs.sort_unstable();
    epochs
        .into_iter()
        .flat_map(|epoch| epoch_events(job_dir, epoch))
        .filter(|e| e["event"] == "checkpoint_completed")
        .filter_map(|e| e["checkpoint"].as_u64())
        .collect()
}

/// Issue 11, scenario 2: a fenced JobManager of a streaming job that stays RUNNING (no status
/// change to log) stops at its next refused append, the completion of its next checkpoint, instead
/// of going on; and the checkpoint metadata it wrote before that refused append is never restored.
#[test]
fn a_fenced_jobmanager_stops_at_its_next_checkpoint_whose_metadata_is_never_restored() {
    let dir = common::scratch("fence-streaming");
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pipeline }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\", \"--records\", \"100000000\", \"--rate\", \"2000\"]\n    parallelism: 1\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 1 }}\n  storage: {{ url: \"file://{}\" }}\n  configuration:\n    execution.checkpointing.interval: \"500 ms\"\n    high-availability.kubernetes.leader-election.retry-period: \"1 h\"\n",
            dir.join("out").display(),
            dir.join("storage").display()
        ),
    )
    .unwrap();
    // (A retry period of an hour: A does not look for a newer leader, it meets its refused append.)
    let job_dir = dir.join("storage/default/pipeline");
    let (mut a, rpc_a, rest_a) = jobmanager(&manifest, &dir.join("jm-a.log"));
    let _tm = taskmanager(&rpc_a, 1);
    let job = wait_job(&rest_a, Duration::from_secs(30), |j| j["state"] == "RUNNING");
    let id = job["jid"].as_str().unwrap().to_string();
    let checkpoints = format!("/jobs/{id}/checkpoints");
    let started = Instant::now();
    while common::http("GET", &rest_a, &checkpoints).1["counts"]["completed"]
        .as_u64()
        .unwrap_or(0)
        < 2
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint completed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // B takes epoch 2 (it has no TaskManager: its job waits for slots). A's tasks go on
    // checkpointing; A's next CheckpointCompleted append is refused, and A must stop there.
    let (_b, _, _) = jobmanager(&manifest, &dir.join("jm-b.log"));
    let status = exit_status(
        &mut a,
        "the fenced JobManager of a RUNNING job did not stop at its next checkpoint",
    );
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(dir.join("jm-a.log")).unwrap();
    assert!(log.contains("JobManager of epoch 1 was fenced"), "{log}");

    // A wrote the metadata of a checkpoint the log does not record (its append was refused).
    let logged = logged_checkpoints(&job_dir);
    let newest_logged = *logged.iter().max().unwrap();
    let written: Vec<u64> = std::fs::read_dir(job_dir.join(format!("checkpoints/{id}")))
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let n = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
            e.path().join("_metadata").exists().then_some(n)
        })
        .collect();
    let unvouched = written.iter().copied().filter(|n| !logged.contains(n)).max();
    assert!(
        unvouched.is_some_and(|n| n > newest_logged),
        "A's last checkpoint has metadata but no log entry: written {written:?}, logged {logged:?}"
    );

    // A third JobManager restores the newest checkpoint the log vouches for, not A's.
    let (_c, _, rest_c) = jobmanager(&manifest, &dir.join("jm-c.log"));
    let started = Instant::now();
    let restored = loop {
        if let Some((200, c)) = common::try_http("GET", &rest_c, &checkpoints)
            && let Some(r) = c["latest"]["restored"]["id"].as_u64()
        {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the third JobManager restored nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(restored, newest_logged, "unvouched {unvouched:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fenced JobManager with nothing to append (its job waits for slots: no status change, no
/// checkpoint) stops within the leader-election retry period, instead of running on as a zombie
/// until its slot request times out (the fault campaign's first takeover found it).
#[test]
fn a_fenced_jobmanager_with_nothing_to_append_stops_within_the_retry_period() {
    let dir = common::scratch("fence-idle");
    let manifest = dir.join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: pipeline }}\nspec:\n  job:\n    name: pipeline\n    args: [\"--output\", \"{}\"]\n    parallelism: 1\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 1 }}\n  storage: {{ url: \"file://{}\" }}\n  configuration:\n    high-availability.kubernetes.leader-election.retry-period: \"500 ms\"\n",
            dir.join("out").display(),
            dir.join("storage").display()
        ),
    )
    .unwrap();
    // No TaskManager: A's job waits for slots (60 s) and A appends nothing meanwhile.
    let (mut a, _, rest_a) = jobmanager(&manifest, &dir.join("jm-a.log"));
    wait_job(&rest_a, Duration::from_secs(30), |j| j["state"] == "CREATED");
    let (_b, _, _) = jobmanager(&manifest, &dir.join("jm-b.log"));
    let status = exit_status(&mut a, "the fenced JobManager of a waiting job did not stop");
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(dir.join("jm-a.log")).unwrap();
    assert!(log.contains("a newer JobManager took leader epoch 2"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
