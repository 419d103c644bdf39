//! kind end-to-end: a kind cluster, both images built here and loaded into it, the operator installed
//! with its Helm chart, then
//! 1. `examples/wordcount.yaml` applied: `kubectl get flinkjob` reaches FINISHED, the output equals the
//!    reference count, and deleting the FlinkJob removes its pods, Services, Deployments, ConfigMap;
//! 2. an unbounded streaming job under the adaptive scheduler runs at the 2 slots of its one
//!    TaskManager, rescales to 4 after `kubectl scale flinkjob stream --replicas 2`
//!    (`status.jobStatus.parallelism`), then is suspended (`spec.job.state: suspended`: no pods
//!    left) and resumed (RUNNING again).
//!
//! Needs `kind`, `kubectl`, `helm` and a Docker engine. Where one is missing the test prints
//! `SKIPPED: <what is missing>` and is reported as ignored, never as passed; with
//! `FLOE_E2E_REQUIRE=1` (the e2e-kind CI workflow) a missing tool fails it instead.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::images::{self, OPERATOR_IMAGE, WORKER_IMAGE, sh, works};
use libtest_mimic::{Arguments, Failed, Trial};

const WORKER: &str = "floe/worker:0.1.0";
const OPERATOR: &str = "floe/operator:0.1.0";

/// Deletes the kind cluster however the test ends (unless FLOE_KEEP_CLUSTER is set).
struct Cluster {
    name: String,
    kubeconfig: PathBuf,
    storage: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::env::var_os("FLOE_KEEP_CLUSTER").is_none() {
            let _ = Command::new("kind")
                .args(["delete", "cluster", "--name", &self.name])
                .output();
        }
    }
}

impl Cluster {
    fn kubectl(&self, args: &[&str]) -> String {
        let mut all = vec!["--kubeconfig", self.kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        sh("kubectl", &all)
    }

    /// Polls `kubectl get ... -o jsonpath=...` until it prints `want`.
    fn wait_for(&self, what: &str, args: &[&str], want: &str, timeout: Duration) -> Result<(), Failed> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < timeout {
            let mut all = vec!["--kubeconfig", self.kubeconfig.to_str().unwrap()];
            all.extend_from_slice(args);
            let out = Command::new("kubectl").args(&all).output().unwrap();
            last = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if last == want {
                eprintln!("{what}: {want} after {:.0}s", started.elapsed().as_secs_f64());
                return Ok(());
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        let flinkjobs = self.kubectl(&["get", "flinkjobs", "-A", "-o", "yaml"]);
        let pods = self.kubectl(&["get", "pods", "-A", "-o", "wide"]);
        Err(format!("{what}: wanted {want:?}, still {last:?} after {timeout:?}\n{flinkjobs}\n{pods}").into())
    }
}

fn start() -> Cluster {
    images::build_images();
    sh("docker", &["tag", WORKER_IMAGE, WORKER]);
    sh("docker", &["tag", OPERATOR_IMAGE, OPERATOR]);
    let name = format!("floe-e2e-{}", std::process::id());
    // The node's /var/lib/floe is a host directory: the job's file:// storage, read and written here.
    let storage = common::scratch("kind-storage");
    sh("chmod", &["0777", storage.to_str().unwrap()]);
    let config = storage.with_extension("kind.yaml");
    images::write(
        &config,
        &format!(
            "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  extraMounts:\n  - hostPath: {}\n    containerPath: /var/lib/floe\n",
            storage.display()
        ),
    );
    let kubeconfig = storage.with_extension("kubeconfig");
    let cluster = Cluster {
        name: name.clone(),
        kubeconfig: kubeconfig.clone(),
        storage,
    };
    sh(
        "kind",
        &[
            "create",
            "cluster",
            "--name",
            &name,
            "--config",
            config.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--wait",
            "120s",
        ],
    );
    sh(
        "kind",
        &["load", "docker-image", WORKER, OPERATOR, "--name", &name],
    );
    let chart = images::repo().join("charts/floe-operator");
    sh(
        "helm",
        &[
            "install",
            "floe-operator",
            chart.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--namespace",
            "floe-system",
            "--create-namespace",
            "--set",
            "image.repository=floe/operator",
            "--set",
            "image.tag=0.1.0",
            "--set",
            "image.pullPolicy=Never",
            "--set",
            &format!("workerImage={WORKER}"),
            "--wait",
            "--timeout",
            "180s",
        ],
    );
    cluster
}

/// The example with smaller resource requests, so it fits a CI runner's node.
fn example(path: &str) -> String {
    std::fs::read_to_string(images::repo().join(path))
        .unwrap()
        .replace("cpu: \"1\"", "cpu: \"100m\"")
        .replace("memory: \"2Gi\"", "memory: \"512Mi\"")
        .replace("memory: \"1Gi\"", "memory: \"256Mi\"")
}

fn batch_wordcount_finishes_and_delete_cleans_up(cluster: &Cluster) -> Result<(), Failed> {
    let input = cluster.storage.join("data/words.txt");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    sh("chmod", &["0777", input.parent().unwrap().to_str().unwrap()]);
    floe::generate::write_words(&input, 20 << 20, 42).unwrap();
    let reference = common::reference_count(&input);
    let manifest = cluster.storage.join("wordcount.yaml");
    images::write(&manifest, &example("examples/wordcount.yaml"));
    cluster.kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    let state = [
        "get",
        "flinkjob",
        "wordcount",
        "-o",
        "jsonpath={.status.jobStatus.state}",
    ];
    cluster.wait_for("wordcount", &state, "FINISHED", Duration::from_secs(600))?;
    eprintln!("{}", cluster.kubectl(&["get", "flinkjob", "wordcount"]));
    common::assert_batch_output(&cluster.storage.join("out/wordcount"), &reference);

    cluster.kubectl(&["delete", "flinkjob", "wordcount", "--wait=true", "--timeout=120s"]);
    let owned = [
        "get",
        "pods,services,deployments,configmaps",
        "-l",
        "floe.dev/job=wordcount",
        "-o",
        "name",
    ];
    cluster.wait_for(
        "objects of the deleted FlinkJob",
        &owned,
        "",
        Duration::from_secs(180),
    )
}

fn streaming_job_suspends_and_resumes(cluster: &Cluster) -> Result<(), Failed> {
    let manifest = cluster.storage.join("stream.yaml");
    images::write(
        &manifest,
        &format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: stream }}\nspec:\n  image: {WORKER}\n  job:\n    name: pipeline\n    args: [\"--output\", \"out/stream\", \"--records\", \"0\", \"--rate\", \"2000\"]\n    parallelism: 4\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 2 }}\n  storage: {{ url: \"file:///var/lib/floe\" }}\n  configuration:\n    execution.checkpointing.interval: \"1 s\"\n    jobmanager.scheduler: adaptive\n    jobmanager.adaptive-scheduler.resource-stabilization-timeout: \"2 s\"\n    jobmanager.adaptive-scheduler.scaling-interval.min: \"5 s\"\n"
        ),
    );
    cluster.kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    let state = [
        "get",
        "flinkjob",
        "stream",
        "-o",
        "jsonpath={.status.jobStatus.state}",
    ];
    let pods = ["get", "pods", "-l", "floe.dev/job=stream", "-o", "name"];
    cluster.wait_for("stream", &state, "RUNNING", Duration::from_secs(300))?;
    // Issue 12: the adaptive scheduler runs the job at the 2 slots one TaskManager has; `kubectl
    // scale` adds a TaskManager and the running job rescales to 4 without a new JobManager.
    let parallelism = [
        "get",
        "flinkjob",
        "stream",
        "-o",
        "jsonpath={.status.jobStatus.parallelism}",
    ];
    cluster.wait_for("stream at 2", &parallelism, "2", Duration::from_secs(120))?;
    cluster.kubectl(&["scale", "flinkjob", "stream", "--replicas", "2"]);
    cluster.wait_for(
        "stream rescaled to 4",
        &parallelism,
        "4",
        Duration::from_secs(180),
    )?;
    let suspend = r#"{"spec":{"job":{"state":"suspended"}}}"#;
    cluster.kubectl(&["patch", "flinkjob", "stream", "--type", "merge", "-p", suspend]);
    let lifecycle = [
        "get",
        "flinkjob",
        "stream",
        "-o",
        "jsonpath={.status.lifecycleState}",
    ];
    cluster.wait_for("stream", &lifecycle, "SUSPENDED", Duration::from_secs(120))?;
    cluster.wait_for("pods of the suspended job", &pods, "", Duration::from_secs(180))?;
    let resume = r#"{"spec":{"job":{"state":"running"}}}"#;
    cluster.kubectl(&["patch", "flinkjob", "stream", "--type", "merge", "-p", resume]);
    cluster.wait_for("stream resumed", &state, "RUNNING", Duration::from_secs(300))?;
    cluster.kubectl(&["delete", "flinkjob", "stream", "--wait=true", "--timeout=120s"]);
    Ok(())
}

fn missing_tools() -> Vec<&'static str> {
    let mut missing = Vec::new();
    for (tool, args) in [
        ("kind", &["version"][..]),
        ("kubectl", &["version", "--client"][..]),
        ("helm", &["version"][..]),
        ("docker", &["info"][..]),
    ] {
        if !works(tool, args) {
            missing.push(tool);
        }
    }
    missing
}

fn main() {
    let args = Arguments::from_args();
    let missing = missing_tools();
    let required = std::env::var_os("FLOE_E2E_REQUIRE").is_some();
    let skip = !missing.is_empty() && !required;
    if skip {
        eprintln!(
            "SKIPPED: {} not found (the kind end-to-end test needs kind, kubectl, helm and docker)",
            missing.join(", ")
        );
    }
    let trial = Trial::test("kind_end_to_end", move || {
        if !missing.is_empty() {
            return Err(format!("FLOE_E2E_REQUIRE is set but {} not found", missing.join(", ")).into());
        }
        let cluster = start();
        batch_wordcount_finishes_and_delete_cleans_up(&cluster)?;
        streaming_job_suspends_and_resumes(&cluster)?;
        Ok(())
    })
    .with_ignored_flag(skip);
    libtest_mimic::run(&args, vec![trial]).exit();
}
