//! kind end-to-end, as a real cluster runs the quick start: a kind cluster, both images built here
//! and loaded into it, the operator installed with its Helm chart (NetworkPolicies on), an S3 server
//! (moto) in the cluster, and the jobs in a namespace that enforces Pod Security "restricted".
//! Job storage, input and output are `s3://`, the credentials in a Secret the FlinkJobs name:
//! 1. `examples/kubernetes/wordcount.yaml` applied: `kubectl get flinkjob` reaches FINISHED, the
//!    output equals the reference count, and deleting the FlinkJob leaves none of its objects;
//! 2. a streaming job in `upgradeMode: savepoint` is upgraded (parallelism 2 -> 3): the operator
//!    stops it with a savepoint and deploys the new spec from it; the job finishes and its counts
//!    over both deployments equal the reference exactly (nothing lost, nothing doubled);
//! 3. an unbounded streaming job under the adaptive scheduler runs at the 2 slots of its one
//!    TaskManager, rescales to 4 after `kubectl scale flinkjob stream --replicas 2`
//!    (`status.jobStatus.parallelism`), then is suspended (no pods left) and resumed (RUNNING).
//!
//! Needs `kind`, `kubectl`, `helm` and a Docker engine, and the cluster pulls the moto image from
//! Docker Hub. With `FLOE_E2E_IMAGES=release` (the e2e-kind workflow) the images are the release
//! build: the Dockerfiles' default target on the default distroless base. Where a tool is missing the test prints `SKIPPED: <what is missing>` and is reported
//! as ignored, never as passed; with `FLOE_E2E_REQUIRE=1` (the e2e-kind CI workflow) a missing
//! tool fails it instead.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::images::{self, OPERATOR_IMAGE, WORKER_IMAGE, sh, works};
use floe_storage::ObjectStore;
use libtest_mimic::{Arguments, Failed, Trial};

/// The S3 server in the cluster: `motoserver/moto`, pinned.
const MOTO_IMAGE: &str = "docker.io/motoserver/moto:5.1.0";
const BUCKET: &str = "floe-jobs";
/// Where the jobs run: Pod Security "restricted" is enforced there.
const JOBS: &str = "jobs";

/// Deletes the kind cluster however the test ends (unless FLOE_KEEP_CLUSTER is set).
struct Cluster {
    name: String,
    kubeconfig: PathBuf,
    dir: PathBuf,
    /// `kubectl port-forward` to the in-cluster S3 server, and its local address.
    forward: Option<Child>,
    s3: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut f) = self.forward.take() {
            let _ = f.kill();
            let _ = f.wait();
        }
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

    /// `kubectl apply` of a manifest written to the test's directory.
    fn apply(&self, name: &str, text: &str) {
        let path = self.dir.join(name);
        images::write(&path, text);
        self.kubectl(&["apply", "-f", path.to_str().unwrap()]);
    }

    /// Polls `kubectl get ... -o jsonpath=...` until `done` holds for what it prints.
    fn wait_until(
        &self,
        what: &str,
        args: &[&str],
        done: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, Failed> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < timeout {
            let mut all = vec!["--kubeconfig", self.kubeconfig.to_str().unwrap()];
            all.extend_from_slice(args);
            let out = Command::new("kubectl").args(&all).output().unwrap();
            last = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if done(&last) {
                eprintln!("{what}: {last} after {:.0}s", started.elapsed().as_secs_f64());
                return Ok(last);
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        let flinkjobs = self.kubectl(&["get", "flinkjobs", "-A", "-o", "yaml"]);
        let pods = self.kubectl(&["get", "pods", "-A", "-o", "wide"]);
        let events = self.kubectl(&["get", "events", "-n", JOBS]);
        Err(format!("{what}: still {last:?} after {timeout:?}\n{flinkjobs}\n{pods}\n{events}").into())
    }

    /// [`Cluster::wait_until`] it prints `want`.
    fn wait_for(&self, what: &str, args: &[&str], want: &str, timeout: Duration) -> Result<(), Failed> {
        self.wait_until(what, args, |got| got == want, timeout)
            .map(|_| ())
    }

    /// The bucket through the port-forward, as the test reads and writes it.
    fn bucket(&self, prefix: &str) -> ObjectStore {
        let conf = BTreeMap::from([
            ("s3.endpoint".to_string(), format!("http://{}", self.s3)),
            ("s3.region".to_string(), "us-east-1".to_string()),
            ("s3.access-key".to_string(), "test".to_string()),
            ("s3.secret-key".to_string(), "test".to_string()),
        ]);
        ObjectStore::open(&format!("s3://{BUCKET}/{prefix}"), &conf).unwrap()
    }
}

/// The S3 server's Deployment and Service, in a namespace of their own.
fn s3_server() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{ name: floe-s3 }}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{ name: s3, namespace: floe-s3 }}\nspec:\n  replicas: 1\n  selector: {{ matchLabels: {{ app: s3 }} }}\n  template:\n    metadata: {{ labels: {{ app: s3 }} }}\n    spec:\n      containers:\n      - name: moto\n        image: {MOTO_IMAGE}\n        ports: [{{ containerPort: 5000 }}]\n        readinessProbe: {{ tcpSocket: {{ port: 5000 }}, periodSeconds: 2 }}\n---\napiVersion: v1\nkind: Service\nmetadata: {{ name: s3, namespace: floe-s3 }}\nspec:\n  selector: {{ app: s3 }}\n  ports: [{{ port: 5000, targetPort: 5000 }}]\n"
    )
}

/// The jobs' namespace (Pod Security "restricted" enforced) and the Secret their FlinkJobs name.
fn jobs_namespace() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {JOBS}\n  labels:\n    pod-security.kubernetes.io/enforce: restricted\n    pod-security.kubernetes.io/enforce-version: latest\n---\napiVersion: v1\nkind: Secret\nmetadata: {{ name: floe-s3, namespace: {JOBS} }}\ntype: Opaque\nstringData:\n  AWS_ACCESS_KEY_ID: test\n  AWS_SECRET_ACCESS_KEY: test\n  AWS_REGION: us-east-1\n  AWS_ENDPOINT_URL: http://s3.floe-s3.svc:5000\n"
    )
}

/// A free local port for the port-forward.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start() -> Result<Cluster, Failed> {
    // The workflow runs the release images (distroless base, binaries built inside); elsewhere
    // the images are built from this build's binaries on a base of the host's libraries.
    if std::env::var("FLOE_E2E_IMAGES").as_deref() == Ok("release") {
        images::build_release_images();
    } else {
        images::build_images();
    }
    let name = format!("floe-e2e-{}", std::process::id());
    let dir = common::scratch("kind");
    let kubeconfig = dir.join("kubeconfig");
    let mut cluster = Cluster {
        name: name.clone(),
        kubeconfig: kubeconfig.clone(),
        dir,
        forward: None,
        s3: String::new(),
    };
    sh(
        "kind",
        &[
            "create",
            "cluster",
            "--name",
            &name,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--wait",
            "120s",
        ],
    );
    sh(
        "kind",
        &[
            "load",
            "docker-image",
            WORKER_IMAGE,
            OPERATOR_IMAGE,
            "--name",
            &name,
        ],
    );
    let (repository, tag) = OPERATOR_IMAGE.rsplit_once(':').unwrap();
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
            &format!("image.repository={repository}"),
            "--set",
            &format!("image.tag={tag}"),
            "--set",
            "image.pullPolicy=Never",
            "--set",
            &format!("workerImage={WORKER_IMAGE}"),
            "--wait",
            "--timeout",
            "180s",
        ],
    );
    cluster.apply("s3.yaml", &s3_server());
    cluster.kubectl(&[
        "rollout",
        "status",
        "deployment/s3",
        "-n",
        "floe-s3",
        "--timeout=300s",
    ]);
    cluster.apply("jobs.yaml", &jobs_namespace());
    let port = free_port();
    let forward = Command::new("kubectl")
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "port-forward",
            "-n",
            "floe-s3",
            "service/s3",
            &format!("{port}:5000"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    cluster.forward = Some(forward);
    cluster.s3 = format!("127.0.0.1:{port}");
    let started = Instant::now();
    while std::net::TcpStream::connect(&cluster.s3).is_err() {
        if started.elapsed() > Duration::from_secs(60) {
            return Err("the port-forward to the S3 server did not open".into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    floe_storage::testing::create_bucket(&cluster.s3, BUCKET);
    Ok(cluster)
}

/// The example with smaller resource requests (a CI runner's node), in the jobs' namespace.
fn example(path: &str) -> String {
    let text = std::fs::read_to_string(images::repo().join(path))
        .unwrap()
        .replace("cpu: \"1\"", "cpu: \"100m\"")
        .replace("memory: \"2Gi\"", "memory: \"512Mi\"")
        .replace("memory: \"1Gi\"", "memory: \"256Mi\"")
        .replace("ghcr.io/floe-dev/floe-worker:0.1.0", WORKER_IMAGE);
    assert!(text.contains(WORKER_IMAGE), "{path} names the worker image");
    text
}

/// `kubectl get flinkjob JOB -n jobs -o jsonpath={PATH}`'s arguments.
fn jsonpath(job: &str, path: &str) -> Vec<String> {
    [
        "get",
        "flinkjob",
        job,
        "-n",
        JOBS,
        "-o",
        &format!("jsonpath={{{path}}}"),
    ]
    .map(String::from)
    .to_vec()
}

fn state_of(job: &str) -> Vec<String> {
    jsonpath(job, ".status.jobStatus.state")
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Deletes a FlinkJob and waits until none of its objects is left.
fn delete_leaves_nothing(cluster: &Cluster, job: &str) -> Result<(), Failed> {
    cluster.kubectl(&[
        "delete",
        "flinkjob",
        job,
        "-n",
        JOBS,
        "--wait=true",
        "--timeout=120s",
    ]);
    let label = format!("floe.dev/job={job}");
    let owned = [
        "get",
        "pods,services,deployments,configmaps,networkpolicies",
        "-n",
        JOBS,
        "-l",
        &label,
        "-o",
        "name",
    ];
    cluster.wait_for(
        &format!("objects of the deleted FlinkJob {job}"),
        &owned,
        "",
        Duration::from_secs(180),
    )
}

fn batch_wordcount_finishes_and_delete_cleans_up(cluster: &Cluster) -> Result<(), Failed> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let local = cluster.dir.join("words.txt");
    floe::generate::write_words(&local, 20 << 20, 42).unwrap();
    let reference = common::reference_count(&local);
    rt.block_on(
        cluster
            .bucket("data")
            .put("words.txt", std::fs::read(&local).unwrap()),
    )
    .unwrap();
    let manifest = example("examples/kubernetes/wordcount.yaml");
    cluster.apply(
        "wordcount.yaml",
        &manifest.replace(
            "metadata: { name: wordcount }",
            &format!("metadata: {{ name: wordcount, namespace: {JOBS} }}"),
        ),
    );
    // Its pods were admitted under "restricted" and carry the NetworkPolicy's selector.
    cluster.wait_for(
        "wordcount",
        &strs(&state_of("wordcount")),
        "FINISHED",
        Duration::from_secs(600),
    )?;
    eprintln!(
        "{}",
        cluster.kubectl(&["get", "flinkjob", "wordcount", "-n", JOBS])
    );
    let policy = cluster.kubectl(&[
        "get",
        "networkpolicy",
        "wordcount-network",
        "-n",
        JOBS,
        "-o",
        "jsonpath={.spec.podSelector.matchLabels.floe\\.dev/job}",
    ]);
    assert_eq!(
        policy.trim(),
        "wordcount",
        "the job's NetworkPolicy selects its pods"
    );
    common::assert_batch_lines(
        common::s3_output(&cluster.bucket("out/wordcount"), &rt),
        &reference,
    );
    delete_leaves_nothing(cluster, "wordcount")
}

/// Issue 13's upgrade in a cluster: stopped with a savepoint, redeployed at parallelism 3 from it,
/// counts exact over both deployments.
fn savepoint_upgrade_continues_the_counts(cluster: &Cluster) -> Result<(), Failed> {
    const RECORDS: u64 = 120_000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let flinkjob = |parallelism: u32| {
        format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: counts, namespace: {JOBS} }}\nspec:\n  image: {WORKER_IMAGE}\n  job:\n    name: pipeline\n    args: [\"--output\", \"s3://{BUCKET}/out/counts\", \"--records\", \"{RECORDS}\", \"--rate\", \"1500\"]\n    parallelism: {parallelism}\n    mode: streaming\n    upgradeMode: savepoint\n  taskManager: {{ replicas: 1, slots: 4, resources: {{ cpu: \"200m\", memory: \"512Mi\" }} }}\n  jobManager: {{ resources: {{ cpu: \"100m\", memory: \"256Mi\" }} }}\n  storage: {{ url: \"s3://{BUCKET}/jobs\", credentialsSecret: floe-s3 }}\n  configuration:\n    execution.checkpointing.interval: \"1 s\"\n"
        )
    };
    cluster.apply("counts.yaml", &flinkjob(2));
    let state = state_of("counts");
    cluster.wait_for("counts", &strs(&state), "RUNNING", Duration::from_secs(300))?;
    // Some checkpoints in, then the upgrade.
    std::thread::sleep(Duration::from_secs(15));
    cluster.apply("counts.yaml", &flinkjob(3));
    let savepoint = jsonpath("counts", ".status.deployed.savepoint");
    let location = cluster.wait_until(
        "the upgrade's savepoint",
        &strs(&savepoint),
        |s| s.starts_with("s3://"),
        Duration::from_secs(300),
    )?;
    cluster.wait_for(
        "counts upgraded",
        &strs(&state),
        "FINISHED",
        Duration::from_secs(600),
    )?;
    let parallelism = cluster.kubectl(&strs(&jsonpath("counts", ".status.jobStatus.parallelism")));
    assert_eq!(parallelism.trim(), "3", "the upgraded deployment runs at 3");
    common::assert_streaming_lines(
        common::s3_output(&cluster.bucket("out/counts"), &rt),
        &common::pipeline_reference(42, RECORDS),
    );
    eprintln!("counts: upgraded 2 -> 3 through {location}; output exact");
    delete_leaves_nothing(cluster, "counts")
}

fn streaming_job_scales_suspends_and_resumes(cluster: &Cluster) -> Result<(), Failed> {
    cluster.apply(
        "stream.yaml",
        &format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: stream, namespace: {JOBS} }}\nspec:\n  image: {WORKER_IMAGE}\n  job:\n    name: pipeline\n    args: [\"--output\", \"s3://{BUCKET}/out/stream\", \"--records\", \"0\", \"--rate\", \"2000\"]\n    parallelism: 4\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 2 }}\n  storage: {{ url: \"s3://{BUCKET}/jobs\", credentialsSecret: floe-s3 }}\n  configuration:\n    execution.checkpointing.interval: \"1 s\"\n    jobmanager.scheduler: adaptive\n    jobmanager.adaptive-scheduler.resource-stabilization-timeout: \"2 s\"\n    jobmanager.adaptive-scheduler.scaling-interval.min: \"5 s\"\n"
        ),
    );
    let state = state_of("stream");
    let label = "floe.dev/job=stream".to_string();
    let pods = ["get", "pods", "-n", JOBS, "-l", &label, "-o", "name"];
    cluster.wait_for("stream", &strs(&state), "RUNNING", Duration::from_secs(300))?;
    // Issue 12: the adaptive scheduler runs the job at the 2 slots one TaskManager has; `kubectl
    // scale` adds a TaskManager and the running job rescales to 4 without a new JobManager.
    let parallelism = jsonpath("stream", ".status.jobStatus.parallelism");
    let parallelism = strs(&parallelism);
    cluster.wait_for("stream at 2", &parallelism, "2", Duration::from_secs(120))?;
    cluster.kubectl(&["scale", "flinkjob", "stream", "-n", JOBS, "--replicas", "2"]);
    cluster.wait_for(
        "stream rescaled to 4",
        &parallelism,
        "4",
        Duration::from_secs(180),
    )?;
    let suspend = r#"{"spec":{"job":{"state":"suspended"}}}"#;
    cluster.kubectl(&[
        "patch", "flinkjob", "stream", "-n", JOBS, "--type", "merge", "-p", suspend,
    ]);
    let lifecycle = jsonpath("stream", ".status.lifecycleState");
    cluster.wait_for("stream", &strs(&lifecycle), "SUSPENDED", Duration::from_secs(120))?;
    cluster.wait_for("pods of the suspended job", &pods, "", Duration::from_secs(180))?;
    let resume = r#"{"spec":{"job":{"state":"running"}}}"#;
    cluster.kubectl(&[
        "patch", "flinkjob", "stream", "-n", JOBS, "--type", "merge", "-p", resume,
    ]);
    cluster.wait_for(
        "stream resumed",
        &strs(&state),
        "RUNNING",
        Duration::from_secs(300),
    )?;
    delete_leaves_nothing(cluster, "stream")
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
        let cluster = start()?;
        batch_wordcount_finishes_and_delete_cleans_up(&cluster)?;
        savepoint_upgrade_continues_the_counts(&cluster)?;
        streaming_job_scales_suspends_and_resumes(&cluster)?;
        Ok(())
    })
    .with_ignored_flag(skip);
    libtest_mimic::run(&args, vec![trial]).exit();
}
