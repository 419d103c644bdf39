//! Async I/O end to end (issue 34, item 3): the built-in `http-enrich` job looks each generated
//! word up in a real HTTP service this test starts (axum on loopback, 1-20 ms per answer, one
//! word in 40 answered 503 at its first request), counts per `word:answer`, and writes the counts
//! exactly-once into files. The output must equal a reference computed here from the generator
//! and the service's rule:
//!
//! - `enrichment_equals_the_reference_across_a_taskmanager_kill`: the TaskManager running the
//!   lookup's first subtask is SIGKILLed once a retained checkpoint holds records in flight; the
//!   restore issues them again, and no word is lost or counted twice.
//! - `ordered_enrichment_equals_the_reference`: ordered results, one TaskManager, no fault.
//! - `a_service_that_never_answers_fails_the_job_naming_the_operator_and_the_timeout`.
//! - `a_lookup_waiting_on_a_slow_service_is_idle_not_busy`: 200 ms per answer, two requests in
//!   flight per subtask: the lookup task's time is idle, as Flink counts an async operator's wait.
//! - `the_example_runs_against_the_example_service`: `examples/http-enrich.yaml` through `floe run
//!   -f` against `examples/lookup-service.py`, as the README and the manifest say to run them.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;

const SEED: u64 = 11;

/// The service's answer for `word` (what the reference expects).
fn region(word: &str) -> String {
    format!("region-{}", word.bytes().map(u64::from).sum::<u64>() % 7)
}

/// What the lookup service keeps: its request count, and the words it refused once.
#[derive(Clone)]
struct Service {
    requests: Arc<AtomicU64>,
    refused: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// The lookup service: `GET /region/{word}` answers [`region`] after 1-20 ms (one word in 40 gets a
/// 503 for its first request: the job's retries absorb it); `GET /hang/{word}` never answers.
/// Runs on its own thread for the rest of the test process; returns its address and request count.
fn start_service() -> (String, Arc<AtomicU64>) {
    use axum::extract::{Path as UrlPath, State};
    use axum::http::StatusCode;
    let requests = Arc::new(AtomicU64::new(0));
    let counted = requests.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new()
                .route(
                    "/region/{word}",
                    axum::routing::get(
                        |State(s): State<Service>, UrlPath(word): UrlPath<String>| async move {
                            let i = s.requests.fetch_add(1, Ordering::Relaxed);
                            let spread = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59; // 0..32
                            tokio::time::sleep(Duration::from_millis(1 + spread % 20)).await;
                            // One word in 40 is refused its first request (only its first: the
                            // job's retries get an answer).
                            let sum: u64 = word.bytes().map(u64::from).sum();
                            if sum % 40 == 17 && s.refused.lock().unwrap().insert(word.clone()) {
                                return Err(StatusCode::SERVICE_UNAVAILABLE);
                            }
                            Ok(region(&word))
                        },
                    ),
                )
                .route(
                    "/slow/{word}",
                    axum::routing::get(|UrlPath(word): UrlPath<String>| async move {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        region(&word)
                    }),
                )
                .route(
                    "/hang/{word}",
                    axum::routing::get(|| async {
                        std::future::pending::<()>().await;
                        ""
                    }),
                )
                .with_state(Service {
                    requests: counted,
                    refused: Arc::default(),
                });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (format!("http://{}", rx.recv().unwrap()), requests)
}

/// The counts the job must write: each generated word under `word:region(word)`.
fn reference(seed: u64, records: u64) -> HashMap<String, u64> {
    pipeline_reference(seed, records)
        .into_iter()
        .map(|(w, n)| (format!("{w}:{}", region(&w)), n))
        .collect()
}

fn submit(
    cluster: &floe::local_cluster::LocalCluster,
    dir: &Path,
    args: &[(&str, String)],
    restarts: bool,
) -> String {
    let mut all = vec!["--output".to_string(), dir.join("out").display().to_string()];
    for (k, v) in args {
        all.push(format!("--{k}"));
        all.push(v.clone());
    }
    submit_job(
        &cluster.rpc_address,
        "http-enrich",
        all,
        streaming_conf(dir, (!restarts).then_some(0)),
    )
}

/// The job's vertex whose chain the async lookup heads.
fn lookup_vertex(cluster: &floe::local_cluster::LocalCluster, id: &str) -> serde_json::Value {
    let job = get(cluster, &format!("/jobs/{id}"));
    job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str().unwrap_or("").contains("AsyncWait"))
        .unwrap_or_else(|| panic!("no AsyncWait vertex: {job}"))
        .clone()
}

/// The number of records in flight that the retained checkpoints of `dir`'s job storage hold.
fn records_in_flight_in_checkpoints(dir: &Path) -> usize {
    let mut found = 0;
    let root = dir.join("storage/checkpoints");
    for job in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for chk in std::fs::read_dir(job.path()).into_iter().flatten().flatten() {
            let Ok(bytes) = std::fs::read(chk.path().join("_metadata")) else {
                continue;
            };
            // A short binary header, then the checkpoint as JSON.
            let Some(start) = bytes.iter().position(|&b| b == b'{') else {
                continue;
            };
            let Some(Ok(meta)) = serde_json::Deserializer::from_slice(&bytes[start..])
                .into_iter::<serde_json::Value>()
                .next()
            else {
                continue;
            };
            found += meta["tasks"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, t)| t.get("in_flight").is_some())
                .count();
        }
    }
    found
}

#[test]
fn enrichment_equals_the_reference_across_a_taskmanager_kill() {
    let (url, requests) = start_service();
    let dir = scratch("async-io-kill");
    let cluster = cluster_in(&dir, 3, 2);
    let records = 4_000;
    let args = [
        ("url", format!("{url}/region/")),
        ("records", records.to_string()),
        ("rate", "400".into()),
        ("seed", SEED.to_string()),
        ("capacity", "50".into()),
    ];
    let id = submit(&cluster, &dir, &args, true);
    wait_for(
        "a retained checkpoint holding records in flight",
        Duration::from_secs(60),
        || (records_in_flight_in_checkpoints(&dir) > 0).then_some(()),
    );
    let lookup = lookup_vertex(&cluster, &id);
    let victim = lookup["subtasks"][0]["taskmanager-id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_taskmanager(&cluster, &victim);
    let end = ended(&cluster, &id, Duration::from_secs(240));
    assert_eq!(end["state"], "FINISHED", "{end}");
    assert!(
        any_restarted(&end),
        "the job recovered without new attempts? {end}"
    );
    let want = reference(SEED, records);
    let words: u64 = want.values().sum();
    let asked = requests.load(Ordering::Relaxed);
    assert!(
        asked > words,
        "{asked} requests for {words} words: retries and re-issues add some"
    );
    assert_streaming_lines(output_lines(&dir.join("out")), &want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ordered_enrichment_equals_the_reference() {
    let (url, _) = start_service();
    let dir = scratch("async-io-ordered");
    let cluster = cluster_in(&dir, 1, 2);
    let records = 1_000;
    let args = [
        ("url", format!("{url}/region/")),
        ("records", records.to_string()),
        ("seed", SEED.to_string()),
        ("order", "ordered".into()),
    ];
    let id = submit(&cluster, &dir, &args, false);
    let end = ended(&cluster, &id, Duration::from_secs(180));
    assert_eq!(end["state"], "FINISHED", "{end}");
    assert_streaming_lines(output_lines(&dir.join("out")), &reference(SEED, records));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_lookup_waiting_on_a_slow_service_is_idle_not_busy() {
    let (url, _) = start_service();
    let dir = scratch("async-io-slow");
    let cluster = cluster_in(&dir, 1, 2);
    // 2 subtasks x 2 requests in flight x 5 answers a second: 40 lines' words take some 10 s.
    let args = [
        ("url", format!("{url}/slow/")),
        ("records", "40".into()),
        ("capacity", "2".into()),
        ("timeout-ms", "5000".into()),
    ];
    let id = submit(&cluster, &dir, &args, false);
    let lookup = lookup_vertex(&cluster, &id)["id"].as_str().unwrap().to_string();
    // Two readings of the lookup's first subtask, a second apart, once it has rates.
    let reading = || {
        wait_for("the lookup's time rates", Duration::from_secs(60), || {
            let v = get(&cluster, &format!("/jobs/{id}/vertices/{lookup}"));
            let m = v["subtasks"][0]["metrics"].clone();
            m["busyTimeMsPerSecond"].as_f64().map(|_| m)
        })
    };
    for _ in 0..2 {
        let m = reading();
        let (busy, idle) = (
            m["busyTimeMsPerSecond"].as_f64().unwrap(),
            m["idleTimeMsPerSecond"].as_f64().unwrap(),
        );
        println!("lookup subtask 0: busy {busy:.0} ms/s, idle {idle:.0} ms/s");
        assert!(
            busy < 300.0 && idle > 600.0,
            "waiting on requests is idle time: {m}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let end = ended(&cluster, &id, Duration::from_secs(120));
    assert_eq!(end["state"], "FINISHED", "{end}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_service_that_never_answers_fails_the_job_naming_the_operator_and_the_timeout() {
    let (url, _) = start_service();
    let dir = scratch("async-io-hang");
    let cluster = cluster_in(&dir, 1, 2);
    let args = [
        ("url", format!("{url}/hang/")),
        ("records", "10".into()),
        ("timeout-ms", "300".into()),
        ("attempts", "1".into()),
    ];
    let id = submit(&cluster, &dir, &args, false);
    let end = ended(&cluster, &id, Duration::from_secs(120));
    let cause = end["failure-cause"].to_string();
    assert_eq!(end["state"], "FAILED", "{end}");
    assert!(
        cause.contains("AsyncWait (unordered): async_invoke failed: no result within the timeout (300 ms, the operator's timeout)"),
        "{cause}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child process killed when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_example_runs_against_the_example_service() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = scratch("async-io-example");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _service = Child(
        std::process::Command::new("python3")
            .arg(repo.join("examples/lookup-service.py"))
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("python3 runs the example's lookup service"),
    );
    wait_for("the lookup service", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    // The example as it is, but for the service's port and an output in this test's directory.
    let example = std::fs::read_to_string(repo.join("examples/http-enrich.yaml")).unwrap();
    assert!(example.contains("127.0.0.1:8089") && example.contains("out/http-enrich"));
    let manifest = dir.join("http-enrich.yaml");
    std::fs::write(
        &manifest,
        example
            .replace("127.0.0.1:8089", &format!("127.0.0.1:{port}"))
            .replace("out/http-enrich", &dir.join("out").display().to_string()),
    )
    .unwrap();
    floe_run_ok(&manifest, &dir.join("work")).unwrap();
    // The job's defaults: seed 42; the manifest: 5,000 lines.
    assert_streaming_lines(output_lines(&dir.join("out")), &reference(42, 5_000));
    let _ = std::fs::remove_dir_all(&dir);
}
