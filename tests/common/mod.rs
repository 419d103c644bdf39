//! Shared helpers of the cross-process tests: seeded input, an independent reference count, output
//! readers, a tiny HTTP client for the REST API, manifests.
#![allow(dead_code, clippy::unwrap_used, clippy::too_many_arguments)] // each test target uses a subset; a panic is the failure report

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub const FLOE: &str = env!("CARGO_BIN_EXE_floe");

/// Polls `probe` every 50 ms until it gives a value; fails naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: std::time::Duration, probe: impl FnMut() -> Option<T>) -> T {
    poll(timeout, probe).unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// Polls `probe` every 50 ms until it gives a value; `None` after `timeout` (for a caller that
/// reports more than [`wait_for`]'s message).
pub fn poll<T>(timeout: std::time::Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// SIGKILLs the TaskManager of a [`floe::local_cluster::LocalCluster`] named `tm_id`
/// (`taskmanager-N`, as the REST API names it).
pub fn kill_taskmanager(cluster: &floe::local_cluster::LocalCluster, tm_id: &str) {
    let index: usize = tm_id.strip_prefix("taskmanager-").unwrap().parse().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", &cluster.taskmanager_pids()[index].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

/// The REST address (`host:port`) in `floe run`'s `Web UI: http://HOST:PORT/ ...` line, if `text`
/// holds that line.
pub fn web_ui_address(text: &str) -> Option<String> {
    let url = text
        .lines()
        .find_map(|l| l.strip_prefix("Web UI: "))?
        .split_whitespace()
        .next()?;
    let address = url.strip_prefix("http://")?.strip_suffix('/')?;
    Some(address.to_string())
}

/// A fresh directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("floe-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// 12 MiB of seeded Zipf words, generated once per test binary, and its reference count.
pub fn input() -> &'static (PathBuf, HashMap<String, u64>) {
    static INPUT: OnceLock<(PathBuf, HashMap<String, u64>)> = OnceLock::new();
    INPUT.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("floe-test-input-{}.txt", std::process::id()));
        floe::generate::write_words(&path, 12 << 20, 1234).unwrap();
        let counts = reference_count(&path);
        (path, counts)
    })
}

/// The word count, computed independently of Floe: Flink's tokenizer written out by hand (lowercase,
/// split on anything but ASCII letters, digits and '_', drop empties) and a HashMap.
pub fn reference_count(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut counts = HashMap::new();
    for line in text.lines() {
        let lower = line.to_lowercase();
        for token in lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !token.is_empty() {
                *counts.entry(token.to_string()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// Lines committed so far in a directory: part files only (a job's processes killed mid-part
/// leave hidden in-progress files, which its next restore deals with).
pub fn committed_lines(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
                .map(|e| {
                    std::fs::read_to_string(e.path())
                        .unwrap_or_default()
                        .lines()
                        .count()
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Every `word<TAB>count` line of every part file in a directory; fails on in-progress leftovers.
pub fn output_lines(dir: &Path) -> Vec<(String, u64)> {
    let mut lines = Vec::new();
    let mut parts = 0;
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("no output at {}: {e}", dir.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().to_string();
        assert!(!name.contains("inprogress"), "left-over in-progress file {name}");
        if !name.starts_with("part-") {
            continue;
        }
        parts += 1;
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let (w, c) = line
                .rsplit_once('\t')
                .unwrap_or_else(|| panic!("bad output line {line:?}"));
            lines.push((w.to_string(), c.parse().unwrap()));
        }
    }
    assert!(parts > 0, "no part files in {}", dir.display());
    lines
}

/// BATCH output: exactly one line per word, with the reference count.
pub fn assert_batch_output(dir: &Path, reference: &HashMap<String, u64>) {
    assert_batch_lines(output_lines(dir), reference);
}

/// [`assert_batch_output`] of lines read from anywhere (object storage).
pub fn assert_batch_lines(lines: Vec<(String, u64)>, reference: &HashMap<String, u64>) {
    let mut got = HashMap::new();
    for (w, c) in lines {
        assert!(
            got.insert(w.clone(), c).is_none(),
            "word {w:?} appears twice in BATCH output"
        );
    }
    assert_eq!(got.len(), reference.len(), "distinct words");
    for (w, c) in reference {
        assert_eq!(got.get(w), Some(c), "count of {w:?}");
    }
}

/// STREAMING output: one line per input word (every update), the largest count per word is final.
pub fn assert_streaming_output(dir: &Path, reference: &HashMap<String, u64>) {
    assert_streaming_lines(output_lines(dir), reference);
}

/// [`assert_streaming_output`] of lines read from anywhere (object storage).
pub fn assert_streaming_lines(lines: Vec<(String, u64)>, reference: &HashMap<String, u64>) {
    let total: u64 = reference.values().sum();
    assert_eq!(lines.len() as u64, total, "one update per input word");
    let mut last: HashMap<String, u64> = HashMap::new();
    for (w, c) in lines {
        let e = last.entry(w).or_insert(0);
        *e = (*e).max(c);
    }
    assert_eq!(&last, reference);
}

/// Every `word<TAB>count` line of the part objects directly under `store`; fails on in-progress
/// leftovers.
pub fn s3_output(store: &floe_storage::ObjectStore, rt: &tokio::runtime::Runtime) -> Vec<(String, u64)> {
    rt.block_on(async {
        let names = store.list("").await.unwrap();
        assert!(
            names.iter().all(|n| !n.contains("inprogress")),
            "left-over in-progress objects: {names:?}"
        );
        let parts: Vec<&String> = names.iter().filter(|n| n.starts_with("part-")).collect();
        assert!(!parts.is_empty(), "no part files in {}: {names:?}", store.url());
        let mut lines = Vec::new();
        for part in parts {
            let text = String::from_utf8(store.get(part).await.unwrap().to_vec()).unwrap();
            for line in text.lines() {
                let (w, c) = line.rsplit_once('\t').unwrap();
                lines.push((w.to_string(), c.parse().unwrap()));
            }
        }
        lines
    })
}

/// A FlinkJob manifest for the built-in wordcount.
pub fn wordcount_manifest(
    dir: &Path,
    input: &Path,
    output: &Path,
    mode: &str,
    parallelism: u32,
    replicas: u32,
    slots: u32,
    configuration: &[(&str, &str)],
) -> PathBuf {
    let mut conf = String::new();
    for (k, v) in configuration {
        conf.push_str(&format!("    {k}: \"{v}\"\n"));
    }
    let text = format!(
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: wordcount }}\nspec:\n  job:\n    name: wordcount\n    args: [\"--input\", \"{}\", \"--output\", \"{}\"]\n    parallelism: {parallelism}\n    mode: {mode}\n  taskManager: {{ replicas: {replicas}, slots: {slots} }}\n  configuration:\n{conf}",
        input.display(),
        output.display()
    );
    let path = dir.join(format!("job-{mode}-{parallelism}-{}.yaml", configuration.len()));
    std::fs::write(&path, text).unwrap();
    path
}

/// `floe run -f MANIFEST --work-dir WORK`, to the end.
pub fn floe_run(manifest: &Path, work_dir: &Path) -> std::process::Output {
    std::process::Command::new(FLOE)
        .args(["run", "-f"])
        .arg(manifest)
        .arg("--work-dir")
        .arg(work_dir)
        .output()
        .unwrap()
}

/// [`floe_run`] that must succeed: its stdout, or what it said when it did not.
pub fn floe_run_ok(manifest: &Path, work_dir: &Path) -> Result<String, String> {
    let out = floe_run(manifest, work_dir);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "floe run failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Minimal HTTP/1.1 client for the REST API: (status code, JSON body).
pub fn http(method: &str, address: &str, path: &str) -> (u16, serde_json::Value) {
    try_http(method, address, path).unwrap_or_else(|| panic!("{method} http://{address}{path}: no answer"))
}

/// [`http`], or `None` when the server is not there (yet) or drops the connection.
pub fn try_http(method: &str, address: &str, path: &str) -> Option<(u16, serde_json::Value)> {
    try_http_with_body(method, address, path, "")
}

/// [`http`] with a JSON request body.
pub fn http_with_body(method: &str, address: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    try_http_with_body(method, address, path, body)
        .unwrap_or_else(|| panic!("{method} http://{address}{path}: no answer"))
}

fn try_http_with_body(
    method: &str,
    address: &str,
    path: &str,
    body: &str,
) -> Option<(u16, serde_json::Value)> {
    // Bounded: a JobManager behind a network partition drops packets instead of refusing them.
    let timeout = std::time::Duration::from_secs(3);
    let socket = std::net::ToSocketAddrs::to_socket_addrs(address).ok()?.next()?;
    let mut stream = std::net::TcpStream::connect_timeout(&socket, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let content_type = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{content_type}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    ))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

/// A JSON array of strings.
pub fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}
/// Word counts of the `pipeline` job's generator lines 0..records, computed without Floe's operators.
pub fn pipeline_reference(seed: u64, records: u64) -> HashMap<String, u64> {
    let (cdf, words) = floe_datastream::generator_vocabulary();
    let mut counts = HashMap::new();
    for i in 0..records {
        for w in floe_datastream::generator_line(seed, i, &cdf, &words).split(' ') {
            *counts.entry(w.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// Submits a registered job to a JobManager over gRPC; returns the job id.
pub fn submit_job(
    rpc_address: &str,
    name: &str,
    args: Vec<String>,
    configuration: impl IntoIterator<Item = (String, String)>,
) -> String {
    try_submit_job(rpc_address, name, args, configuration).unwrap()
}

/// [`submit_job`], with the JobManager's refusal as the error.
pub fn try_submit_job(
    rpc_address: &str,
    name: &str,
    args: Vec<String>,
    configuration: impl IntoIterator<Item = (String, String)>,
) -> Result<String, tonic::Status> {
    use floe_proto::v1::SubmitJobRequest;
    use floe_proto::v1::job_manager_client::JobManagerClient;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = JobManagerClient::connect(format!("http://{rpc_address}"))
            .await
            .unwrap();
        let request = SubmitJobRequest {
            job_name: name.into(),
            args,
            configuration: configuration.into_iter().collect(),
        };
        client.submit_job(request).await.map(|r| r.into_inner().job_id)
    })
}

/// A local cluster of `taskmanagers` x `slots` (2 s heartbeat timeout) in a scratch directory
/// named `name`; returns it and that directory.
pub fn local_cluster(
    name: &str,
    taskmanagers: u32,
    slots: u32,
) -> (floe::local_cluster::LocalCluster, PathBuf) {
    let dir = scratch(name);
    (cluster_in(&dir, taskmanagers, slots), dir)
}

/// A local cluster of `taskmanagers` x `slots` (2 s heartbeat timeout) working in `dir/work`.
pub fn cluster_in(dir: &Path, taskmanagers: u32, slots: u32) -> floe::local_cluster::LocalCluster {
    let spec = floe::local_cluster::ClusterSpec {
        exe: FLOE.into(),
        taskmanagers,
        slots,
        work_dir: dir.join("work"),
        heartbeat_timeout: std::time::Duration::from_secs(2),
        job_file: None,
        placement: None,
        env: Vec::new(),
        properties: Vec::new(),
    };
    floe::local_cluster::LocalCluster::start(&spec).unwrap()
}

/// The example's binary, built once per test run into this build's target directory (so it shares
/// the compiled dependencies). Without RocksDB: the example turns it on by default for its image,
/// and a second compile of RocksDB's C++ here would cost CI minutes for nothing the test checks.
pub fn user_job_binary() -> &'static PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        // <target>/debug/deps/user_job-HASH -> <target>
        let exe = std::env::current_exe().unwrap();
        let target = exe.ancestors().nth(3).unwrap().to_path_buf();
        let out = std::process::Command::new(env!("CARGO"))
            // --locked: the example's Cargo.lock is kept current (a user's build must not
            // rewrite it), and `floe new` ships it to new crates.
            .args(["build", "--locked", "--no-default-features", "--manifest-path"])
            .arg(repo.join("examples/user-job/Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the example user project does not build:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("debug/floe-user-job")
    })
}

/// A STREAMING job's configuration: parallelism 2, a checkpoint every second, job storage in
/// `dir/storage`; `restart_attempts`: a fixed-delay strategy with that many attempts.
pub fn streaming_conf(
    dir: &Path,
    restart_attempts: Option<u32>,
) -> std::collections::BTreeMap<String, String> {
    let mut conf: std::collections::BTreeMap<String, String> = [
        ("execution.runtime-mode", "STREAMING"),
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "1 s"),
        ("restart-strategy.fixed-delay.delay", "200 ms"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    conf.insert(
        "floe.job-storage.url".into(),
        format!("file://{}", dir.join("storage").display()),
    );
    if let Some(n) = restart_attempts {
        conf.insert("restart-strategy.type".into(), "fixed-delay".into());
        conf.insert("restart-strategy.fixed-delay.attempts".into(), n.to_string());
    }
    conf
}

/// `GET path` of the cluster's REST API, which must answer 200.
pub fn get(cluster: &floe::local_cluster::LocalCluster, path: &str) -> serde_json::Value {
    let (status, body) = http("GET", &cluster.rest_address, path);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// The job once it ended (FINISHED, FAILED or CANCELED).
pub fn ended(
    cluster: &floe::local_cluster::LocalCluster,
    id: &str,
    timeout: std::time::Duration,
) -> serde_json::Value {
    wait_for("the job to end", timeout, || {
        let j = get(cluster, &format!("/jobs/{id}"));
        matches!(j["state"].as_str(), Some("FINISHED" | "FAILED" | "CANCELED")).then_some(j)
    })
}

/// A subtask of the ended job ran again (an attempt after the first).
pub fn any_restarted(job: &serde_json::Value) -> bool {
    job["vertices"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| v["subtasks"].as_array().into_iter().flatten())
        .any(|s| s["attempt"].as_u64().unwrap_or(0) > 0)
}

pub mod build_stage;
pub mod images;
pub mod kafka;
pub mod netns;
pub mod postgres;
pub mod processes;
