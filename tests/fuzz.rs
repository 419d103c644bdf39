//! Fuzzing of everything Floe decodes from outside (issue 11), with proptest on stable Rust: FlinkJob
//! manifests, the JobManager's RPC requests, the REST API's paths, operation-log entries and
//! checkpoint metadata. Each property: no panic, and every error names what was wrong (the field,
//! the argument, the object). Failures print the smallest input proptest shrank them to; a fixed
//! seed per property keeps CI's runs the same (`PROPTEST_CASES` raises the case count).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};

use floe_datastream::{JobArgs, JobRegistry};
use floe_jobmanager::oplog::Event;
use floe_jobmanager::{JobManager, JobManagerConfig};
use floe_manifest::FlinkJob;
use floe_proto::v1 as pb;
use floe_proto::v1::job_manager_server::JobManager as _;
use floe_storage::{ObjectStore, envelope};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// A runner with a fixed seed, so every CI run tries the same cases.
fn runner(cases: u32) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---- Manifests ----

const MANIFEST: &str = "apiVersion: floe.dev/v1alpha1
kind: FlinkJob
metadata: { name: fuzz }
spec:
  job:
    name: wordcount
    args: [\"--input\", \"/tmp/in\", \"--output\", \"/tmp/out\"]
    parallelism: 2
    mode: batch
  taskManager: { replicas: 1, slots: 2 }
  storage: { url: \"file:///tmp/storage\" }
";

#[test]
fn any_text_as_a_manifest_is_an_error_or_a_manifest_never_a_panic() {
    runner(512)
        .run(
            &prop_oneof![".{0,300}", "[a-zA-Z:{}\\[\\], \\n\"-]{0,300}"],
            |text| {
                if let Err(e) = FlinkJob::from_yaml(&text) {
                    prop_assert!(!e.to_string().trim().is_empty());
                }
                Ok(())
            },
        )
        .unwrap();
}

/// A valid manifest with one field set to a value of the wrong kind: the error names the field.
#[test]
fn a_wrong_value_in_a_manifest_names_its_field() {
    let fields: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "parallelism: 2",
            "parallelism",
            vec!["0", "-1", "abc", "1.5", "[1]", "{}", "99999999999"],
        ),
        ("mode: batch", "mode", vec!["stream", "BATCHY", "1", "[]", "\"\""]),
        ("replicas: 1", "replicas", vec!["-1", "abc", "1.5", "[1]"]),
        ("slots: 2", "slots", vec!["0", "-2", "abc", "{}"]),
        (
            "url: \"file:///tmp/storage\"",
            "url",
            vec!["\"ftp://x\"", "\"\"", "\"relative/dir\"", "[1]"],
        ),
        ("name: wordcount", "name", vec!["[]", "{}", "\"\""]),
    ];
    let strategy =
        prop::sample::select((0..fields.len()).collect::<Vec<_>>()).prop_flat_map(|i| (Just(i), 0..8usize));
    runner(256)
        .run(&strategy, |(i, v)| {
            let (original, key, values) = &fields[i];
            let value = values[v % values.len()];
            let text = MANIFEST.replacen(original, &format!("{key}: {value}"), 1);
            let error = match FlinkJob::from_yaml(&text) {
                Ok(_) => return Err(TestCaseError::fail(format!("accepted {key}: {value}"))),
                Err(e) => e.to_string(),
            };
            prop_assert!(
                error.contains(key),
                "{key}: {value} gave an error that does not name the field: {error}"
            );
            Ok(())
        })
        .unwrap();
}

// ---- The JobManager's RPC requests ----

/// Configuration keys a submission may carry, real ones with arbitrary values among them.
const KEYS: [&str; 8] = [
    "execution.runtime-mode",
    "parallelism.default",
    "execution.checkpointing.interval",
    "restart-strategy.type",
    "restart-strategy.fixed-delay.attempts",
    "state.backend.type",
    "execution.batch-shuffle-mode",
    "pipeline.max-parallelism",
];

fn submission() -> impl Strategy<Value = pb::SubmitJobRequest> {
    let name = prop_oneof![
        Just("wordcount".to_string()),
        Just("pipeline".to_string()),
        "[a-z]{0,8}"
    ];
    let arg = prop_oneof![
        Just("--input".to_string()),
        Just("--output".to_string()),
        Just("--records".to_string()),
        Just("/tmp/floe-fuzz".to_string()),
        "-?[0-9]{1,3}",
        "[a-z-]{0,6}",
    ];
    let value = prop_oneof!["[A-Z_]{0,8}", "-?[0-9]{0,4}( ms| s)?", ".{0,6}"];
    (
        name,
        prop::collection::vec(arg, 0..6),
        prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), value, 0..3),
    )
        .prop_map(|(job_name, args, conf)| pb::SubmitJobRequest {
            job_name,
            args,
            configuration: conf.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        })
}

/// A bad submission is refused with INVALID_ARGUMENT naming the argument, the key or the job; a
/// good one is accepted. Never a panic, never an internal error.
#[test]
fn a_submission_is_accepted_or_refused_naming_what_was_wrong() {
    let rt = runtime();
    let _entered = rt.enter();
    let jm = JobManager::new(JobManagerConfig::default(), JobRegistry::builtin());
    runner(256)
        .run(&submission(), |request| {
            let answer = rt.block_on(jm.submit_job(tonic::Request::new(request.clone())));
            if let Err(status) = answer {
                prop_assert_eq!(
                    status.code(),
                    tonic::Code::InvalidArgument,
                    "{}",
                    status.message()
                );
                let message = status.message();
                let named = request
                    .args
                    .iter()
                    .any(|a| a.starts_with("--") && message.contains(a.as_str()))
                    || request.configuration.keys().any(|k| message.contains(k.as_str()))
                    || message.contains(&request.job_name)
                    || message.contains("--input")
                    || message.contains("--output");
                prop_assert!(named, "the refusal names nothing of {:?}: {}", request, message);
            }
            Ok(())
        })
        .unwrap();
}

fn attempt_id() -> impl Strategy<Value = Option<pb::ExecutionAttemptId>> {
    prop::option::of(
        (
            "[a-z0-9]{0,4}",
            0u32..4,
            prop_oneof![0u32..4, Just(u32::MAX)],
            any::<u64>(),
        )
            .prop_map(|(job_id, vertex, subtask, attempt)| pb::ExecutionAttemptId {
                job_id,
                vertex,
                subtask,
                attempt,
            }),
    )
}

/// Reports, heartbeats, registrations and checkpoint acknowledgements with arbitrary contents
/// (unknown jobs and TaskManagers, out-of-range subtasks, unknown states): answered, never a panic.
#[test]
fn arbitrary_taskmanager_calls_are_answered_never_a_panic() {
    let rt = runtime();
    let _entered = rt.enter();
    let jm = JobManager::new(JobManagerConfig::default(), JobRegistry::builtin());
    // A job to aim at, waiting for slots.
    let job = jm
        .submit(JobArgs {
            name: "wordcount".into(),
            args: ["--input", "/tmp/in", "--output", "/tmp/out"]
                .map(String::from)
                .to_vec(),
            configuration: BTreeMap::new(),
        })
        .unwrap();
    let call = (
        0u8..5,
        attempt_id(),
        "[a-z-]{0,6}",
        any::<i32>(),
        prop::collection::vec(any::<u64>(), 0..3),
        any::<u64>(),
    );
    runner(512)
        .run(&call, |(kind, mut id, tm, state, numbers, checkpoint)| {
            if let Some(id) = id.as_mut().filter(|_| numbers.len() == 2) {
                id.job_id = job.clone(); // aim some calls at the real job
            }
            rt.block_on(async {
                let _ = match kind {
                    0 => jm
                        .update_task_execution_state(tonic::Request::new(pb::TaskExecutionStateUpdate {
                            taskmanager_id: tm.clone(),
                            id: id.clone(),
                            state,
                            produced: vec![pb::PartitionStats {
                                result: numbers.len() as u32,
                                partition: state as u32,
                                bytes_per_subpartition: numbers.clone(),
                            }],
                            ..Default::default()
                        }))
                        .await
                        .map(|_| ()),
                    1 => jm
                        .heartbeat(tonic::Request::new(pb::HeartbeatRequest {
                            taskmanager_id: tm.clone(),
                            executions: vec![pb::TaskExecutionStateUpdate {
                                id: id.clone(),
                                state,
                                ..Default::default()
                            }],
                            ..Default::default()
                        }))
                        .await
                        .map(|_| ()),
                    2 => jm
                        .register_task_manager(tonic::Request::new(pb::RegisterTaskManagerRequest {
                            taskmanager_id: tm.clone(),
                            address: format!("127.0.0.1:{}", 9 + numbers.len()),
                            slots: state.unsigned_abs() % 3,
                            instance_id: tm.clone(),
                            ..Default::default()
                        }))
                        .await
                        .map(|_| ()),
                    3 => jm
                        .acknowledge_checkpoint(tonic::Request::new(pb::AcknowledgeCheckpointRequest {
                            id: id.clone(),
                            checkpoint,
                            ..Default::default()
                        }))
                        .await
                        .map(|_| ()),
                    _ => jm
                        .decline_checkpoint(tonic::Request::new(pb::DeclineCheckpointRequest {
                            id: id.clone(),
                            checkpoint,
                            ..Default::default()
                        }))
                        .await
                        .map(|_| ()),
                };
            });
            Ok(())
        })
        .unwrap();
    // Still answering.
    let status = rt
        .block_on(jm.get_job_status(tonic::Request::new(pb::GetJobStatusRequest {
            job_id: job.clone(),
        })))
        .unwrap()
        .into_inner();
    assert_eq!(status.job_id, job);
}

// ---- REST ----

/// Arbitrary methods and paths: 2xx or 4xx, never a 5xx; every error has Flink's `{"errors": [...]}`
/// body saying what was wrong (before, an unknown path or method got an empty 404 or 405).
#[test]
fn arbitrary_rest_requests_get_an_answer_never_a_server_error() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let address = rt.block_on(async {
        let jm = JobManager::new(JobManagerConfig::default(), JobRegistry::builtin());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, floe_jobmanager::rest::router(jm)).await });
        address
    });
    let segment = prop_oneof![
        Just("jobs".to_string()),
        Just("checkpoints".to_string()),
        Just("taskmanagers".to_string()),
        "[a-zA-Z0-9%._~-]{0,12}",
    ];
    let request = (
        prop::sample::select(vec!["GET", "PATCH", "POST", "DELETE", "PUT", "HEAD"]),
        prop::collection::vec(segment, 0..4),
    );
    runner(256)
        .run(&request, |(method, segments)| {
            let path = format!("/{}", segments.join("/"));
            let mut stream = std::net::TcpStream::connect(address).unwrap();
            write!(
                stream,
                "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            )
            .unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            let status: u16 = response
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            prop_assert!((200..500).contains(&status), "{method} {path}: {response}");
            // An error says what was wrong, in Flink's shape (HEAD answers carry no body).
            if status >= 400 && method != "HEAD" {
                let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
                prop_assert!(
                    body.contains("\"errors\""),
                    "{method} {path}: {status} without an error message: {response}"
                );
            }
            Ok(())
        })
        .unwrap();
}

// ---- Operation log and checkpoint metadata ----

fn store(name: &str) -> (ObjectStore, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("floe-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    (
        ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap(),
        dir,
    )
}

/// Damage done to an object: raw bytes, an envelope around arbitrary bytes, or a valid envelope
/// around JSON of the wrong shape.
fn damaged() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| envelope::seal(&b).to_vec()),
        prop_oneof![
            Just("{}".to_string()),
            Just("{\"events\":[{\"event\":\"job_submitted\"}]}".to_string()),
            Just("{\"events\":[{\"event\":\"nope\",\"job_id\":\"j\"}]}".to_string()),
            "\\{\"[a-z_]{0,8}\":[0-9]{0,3}\\}",
        ]
        .prop_map(|json| envelope::seal(json.as_bytes()).to_vec()),
        // Truncated: a valid envelope cut short.
        (0usize..40).prop_map(|n| {
            let whole = envelope::seal(b"{\"events\":[]}");
            whole[..n.min(whole.len() - 1)].to_vec()
        }),
    ]
}

/// A damaged entry in the middle of an earlier epoch's log (a whole entry follows it): taking over
/// fails with an error naming the damaged object, never a panic, never a silent skip.
#[test]
fn a_damaged_operation_log_entry_is_an_error_naming_it() {
    let rt = runtime();
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner(64)
        .run(&damaged(), |bytes| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (store, dir) = store(&format!("oplog-{case}"));
            let good = envelope::seal(b"{\"events\":[]}");
            let result = rt.block_on(async {
                store
                    .put(
                        "leader/00000000000000000001",
                        envelope::seal(b"{\"epoch\":1,\"holder\":\"a\"}"),
                    )
                    .await
                    .unwrap();
                store
                    .put("oplog/00000000000000000001/00000000000000000000", bytes.clone())
                    .await
                    .unwrap();
                store
                    .put("oplog/00000000000000000001/00000000000000000001", good)
                    .await
                    .unwrap();
                floe_oplog::OperationLog::acquire::<Event>(store.clone(), "fuzz").await
            });
            let _ = std::fs::remove_dir_all(&dir);
            match result {
                // The damage happened to decode as an entry (for example an empty batch).
                Ok(_) => {}
                Err(e) => {
                    let message = e.to_string();
                    prop_assert!(
                        message.contains("oplog/00000000000000000001/00000000000000000000"),
                        "{message}"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

fn event() -> impl Strategy<Value = Event> {
    let job = prop_oneof![Just("j1".to_string()), Just("j2".to_string()), "[a-z0-9]{0,3}"];
    prop_oneof![
        (
            job.clone(),
            prop::sample::select(vec!["wordcount", "pipeline", "nope"]),
            any::<u64>()
        )
            .prop_map(|(job_id, name, time_ms)| Event::JobSubmitted {
                job_id,
                name: name.into(),
                args: ["--output", "/tmp/floe-fuzz-out", "--input", "/tmp/floe-fuzz-in"]
                    .map(String::from)
                    .to_vec(),
                configuration: BTreeMap::new(),
                deployment: String::new(),
                time_ms,
            }),
        (
            job.clone(),
            prop::sample::select(vec!["RUNNING", "FINISHED", "FAILED", "CANCELED", "???"])
        )
            .prop_map(|(job_id, status)| Event::JobStatusChanged {
                job_id,
                status: status.into(),
                failure: None,
                time_ms: 0,
            }),
        (
            job.clone(),
            0u32..6,
            prop_oneof![0u32..6, Just(u32::MAX)],
            any::<u64>(),
            prop::collection::vec(prop::collection::vec(any::<u64>(), 0..3), 0..3)
        )
            .prop_map(
                |(job_id, vertex, subtask, attempt, produced)| Event::ExecutionFinished {
                    job_id,
                    vertex,
                    subtask,
                    attempt,
                    produced,
                    time_ms: 0,
                }
            ),
        (job.clone(), 0u32..6, "[a-z]{0,5}", 0u32..5000).prop_map(|(job_id, vertex, id, parallelism)| {
            Event::VertexInitialized {
                job_id,
                vertex,
                id,
                parallelism,
                time_ms: 0,
            }
        }),
        (job, any::<u64>()).prop_map(|(job_id, checkpoint)| Event::CheckpointCompleted {
            job_id,
            checkpoint,
            time_ms: 0,
        }),
    ]
}

/// A log of well-formed entries in any order and with any numbers (executions of vertices that do
/// not exist, statuses after the end, checkpoints of unknown jobs): a new JobManager resumes from
/// it or refuses it with an error, never a panic.
#[test]
fn resuming_from_any_sequence_of_logged_events_never_panics() {
    let rt = runtime();
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner(128)
        .run(&prop::collection::vec(event(), 0..12), |events| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (store, dir) = store(&format!("resume-{case}"));
            rt.block_on(async {
                let jm = JobManager::new(JobManagerConfig::default(), JobRegistry::builtin());
                let (log, _) = floe_oplog::OperationLog::acquire::<Event>(store, "fuzz")
                    .await
                    .unwrap();
                let _ = floe_jobmanager::oplog::resume(&jm, log, &events, None).await;
                let _ = floe_jobmanager::oplog::jobs_of(&events);
            });
            let _ = std::fs::remove_dir_all(&dir);
            Ok(())
        })
        .unwrap();
}

/// Damaged checkpoint metadata is an error naming the object.
#[test]
fn damaged_checkpoint_metadata_is_an_error_naming_it() {
    let rt = runtime();
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner(128)
        .run(&damaged(), |bytes| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (store, dir) = store(&format!("chk-{case}"));
            let result = rt.block_on(async {
                store.put("checkpoints/j/chk-3/_metadata", bytes).await.unwrap();
                floe_checkpoint::store::CheckpointStore::new(store.clone())
                    .load("j", 3)
                    .await
            });
            let _ = std::fs::remove_dir_all(&dir);
            let error = result.expect_err("damaged metadata read back").to_string();
            prop_assert!(error.contains("checkpoints/j/chk-3/_metadata"), "{error}");
            Ok(())
        })
        .unwrap();
}
