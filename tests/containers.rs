//! The images, built here and run as containers: a JobManager container (application mode, the
//! FlinkJob manifest mounted) and two TaskManager containers on a private Docker network run the
//! wordcount job over a mounted volume; the output equals the independent reference count.
//!
//! Needs a Docker engine. Where there is none, the test is reported as ignored with `SKIPPED: ...`
//! (never as passed). The images are built with the production Dockerfiles (`docker/`), on a base
//! image the test makes from the host's shared libraries, because no registry is reachable here.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::images::{self, OPERATOR_IMAGE, WORKER_IMAGE, sh};
use libtest_mimic::{Arguments, Failed, Trial};

/// Removes the test's containers and network however the test ends.
struct Cleanup {
    containers: Vec<String>,
    network: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            if std::env::var_os("FLOE_KEEP_CONTAINERS").is_none() {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", c])
                    .output();
            }
        }
        let _ = std::process::Command::new("docker")
            .args(["network", "rm", &self.network])
            .output();
    }
}

fn logs(container: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["logs", "--tail", "30", container])
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn rest_address(container: &str) -> String {
    sh("docker", &["port", container, "8081/tcp"])
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_string()
}

fn job_state(address: &str) -> Option<(String, String)> {
    // The JobManager may still be starting: a refused connection is "not yet".
    std::net::TcpStream::connect(address).ok()?;
    let (code, list) = common::http("GET", address, "/jobs");
    let id = list["jobs"].get(0)?["id"].as_str()?.to_string();
    (code == 200).then_some(())?;
    let (_, job) = common::http("GET", address, &format!("/jobs/{id}"));
    Some((
        job["state"].as_str()?.to_string(),
        job["failure-cause"].to_string(),
    ))
}

fn wordcount_in_containers() -> Result<(), Failed> {
    images::build_images();
    // Images: the non-root user, and the entrypoint is the binary.
    for image in [WORKER_IMAGE, OPERATOR_IMAGE] {
        let user = sh("docker", &["image", "inspect", "-f", "{{.Config.User}}", image]);
        assert_eq!(user.trim(), "65532:65532", "{image} runs as non-root");
    }
    let crd = sh("docker", &["run", "--rm", OPERATOR_IMAGE, "crd"]);
    assert_eq!(
        crd,
        std::fs::read_to_string(images::repo().join("crds/flinkjob.yaml")).unwrap(),
        "the operator image prints the committed CRD"
    );

    let id = std::process::id();
    let network = format!("floe-test-{id}");
    let (jm, tm1, tm2) = (
        format!("floe-jm-{id}"),
        format!("floe-tm1-{id}"),
        format!("floe-tm2-{id}"),
    );
    let _cleanup = Cleanup {
        containers: vec![jm.clone(), tm1.clone(), tm2.clone()],
        network: network.clone(),
    };
    // The volume: input, manifest and output, written by the containers' user 65532.
    let dir = common::scratch("containers");
    sh("chmod", &["0777", dir.to_str().unwrap()]);
    let input = dir.join("data/words.txt");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    floe::generate::write_words(&input, 10 << 20, 77).unwrap();
    let reference = common::reference_count(&input);
    let manifest = "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: { name: wordcount }\nspec:\n  job:\n    name: wordcount\n    args: [\"--input\", \"data/words.txt\", \"--output\", \"out/wordcount\"]\n    parallelism: 4\n    mode: batch\n  taskManager: { replicas: 2, slots: 2 }\n";
    images::write(&dir.join("flinkjob.yaml"), manifest);
    let volume = format!("{}:/var/lib/floe", dir.display());

    sh("docker", &["network", "create", &network]);
    let started = Instant::now();
    sh(
        "docker",
        &[
            "run",
            "-d",
            "--name",
            &jm,
            "--network",
            &network,
            "-v",
            &volume,
            "-p",
            "127.0.0.1::8081",
            "--read-only",
            "--tmpfs",
            "/tmp",
            WORKER_IMAGE,
            "jobmanager",
            "--rpc-address",
            "0.0.0.0:6123",
            "--rest-address",
            "0.0.0.0:8081",
            "--job-file",
            "/var/lib/floe/flinkjob.yaml",
        ],
    );
    for tm in [&tm1, &tm2] {
        sh(
            "docker",
            &[
                "run",
                "-d",
                "--name",
                tm,
                "--network",
                &network,
                "-v",
                &volume,
                "--read-only",
                "--tmpfs",
                "/tmp",
                WORKER_IMAGE,
                "taskmanager",
                "--jobmanager",
                &format!("{jm}:6123"),
                "--slots",
                "2",
                "--bind",
                "0.0.0.0:6121",
                "--advertise-host",
                tm,
                "--id",
                tm,
                "--data-dir",
                "/tmp/floe",
            ],
        );
    }
    let address = rest_address(&jm);
    let (state, cause) = loop {
        if let Some((state, cause)) = job_state(&address)
            && matches!(state.as_str(), "FINISHED" | "FAILED" | "CANCELED")
        {
            break (state, cause);
        }
        if started.elapsed() > Duration::from_secs(180) {
            return Err(format!(
                "job not done after 180 s\n--- jobmanager\n{}\n--- taskmanager\n{}",
                logs(&jm),
                logs(&tm1)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    if state != "FINISHED" {
        return Err(format!("job {state}: {cause}\n--- jobmanager\n{}", logs(&jm)).into());
    }
    common::assert_batch_output(&dir.join("out/wordcount"), &reference);
    // Both TaskManagers ran tasks: the job really crossed containers.
    let (_, tms) = common::http("GET", &address, "/taskmanagers");
    let tms = tms["taskmanagers"].as_array().unwrap().len();
    assert_eq!(tms, 2, "two TaskManager containers registered");
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "wordcount in containers: FINISHED {:.1}s after the first container started, {} distinct words equal the reference",
        started.elapsed().as_secs_f64(),
        reference.len()
    );
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let docker = images::works("docker", &["info"]);
    if !docker {
        eprintln!("SKIPPED: docker (no Docker engine answers `docker info`)");
    }
    let trials =
        vec![Trial::test("wordcount_in_containers", wordcount_in_containers).with_ignored_flag(!docker)];
    libtest_mimic::run(&args, trials).exit();
}
