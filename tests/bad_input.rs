//! Bad input a user can give Floe, one test per row (issue 17): a manifest, data, the cluster, the
//! REST API. Each row runs real processes and checks what a user would: the message names what was
//! wrong and what was expected, the exit code is not 0, the answer comes within a bounded time, no
//! process is left running, and no partial output is presented as a result. At the end the harness
//! prints the table (input, what Floe said, exit code, time to say it).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use floe::local_cluster::LocalCluster;
use floe_storage::testing::MotoServer;
use libtest_mimic::{Arguments, Failed, Trial};

/// What Floe answered to one bad input.
#[derive(Debug, Clone)]
struct Seen {
    said: String,
    exit: Option<i32>,
    took: Duration,
}

static TABLE: Mutex<Vec<(String, Seen)>> = Mutex::new(Vec::new());

/// Longest any row may take to answer: bad input is answered in seconds, never by a restart loop.
const BOUND: Duration = Duration::from_secs(45);

/// A scratch directory named after a row (its name made path-friendly).
fn row_dir(name: &str) -> PathBuf {
    let slug: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    scratch(&slug)
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), Failed> {
    if ok { Ok(()) } else { Err(what().into()) }
}

fn says(seen: &Seen, needles: &[&str]) -> Result<(), Failed> {
    for n in needles {
        check(seen.said.contains(n), || {
            format!("expected {n:?} in: {}", seen.said)
        })?;
    }
    Ok(())
}

/// Processes whose command line mentions `dir` (a `floe run`'s cluster lives under its work dir).
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .map(|(_, a)| a.trim_start().starts_with('Z'))
                    .unwrap_or(true)
            })
            .unwrap_or(true);
        if cmdline.contains(&needle) && !zombie {
            out.push(cmdline);
        }
    }
    out
}

/// Runs `program args` to its end (killed after [`BOUND`], which fails the row); the `error:`
/// line it printed (or its last line), its exit code, its time.
fn run_bounded(program: &str, args: &[&str], watch: &Path) -> Result<Seen, Failed> {
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read_all = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().unwrap()));
    let reader = read_all(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {BOUND:?}: {program} {}", args.join(" ")).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let err = reader.join().unwrap();
    let out = stdout.join().unwrap();
    // `error: ...` for a refusal, `Cause: ...` (stdout) for a job that failed.
    let said = err
        .lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .or_else(|| out.lines().find(|l| l.starts_with("Cause:")))
        .or_else(|| err.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or_default()
        .to_string();
    // Children see their stdin close when the parent exits: give them a moment.
    let mut left = processes_under(watch);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = processes_under(watch);
    }
    check(left.is_empty(), || {
        format!("still running after `{program}` ended: {left:?}")
    })?;
    Ok(Seen {
        said,
        exit: status.code(),
        took,
    })
}

/// A WordCount manifest over `input` into `output` (1 TaskManager x 2 slots, parallelism 2, BATCH),
/// changed by `edit`.
fn wordcount_yaml(input: &Path, output: &Path, edit: impl Fn(String) -> String) -> String {
    edit(format!(
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: wordcount }}\nspec:\n  job:\n    name: wordcount\n    args: [\"--input\", \"{}\", \"--output\", \"{}\"]\n    parallelism: 2\n    mode: batch\n  taskManager: {{ replicas: 1, slots: 2 }}\n  configuration:\n    heartbeat.timeout: \"10 s\"\n",
        input.display(),
        output.display()
    ))
}

/// The manifest with its `args: [...]` line replaced by `args: {args}`.
fn with_args(yaml: &str, args: &str) -> String {
    yaml.lines()
        .map(|l| {
            if l.trim_start().starts_with("args: [") {
                format!("    args: {args}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// `floe run -f` of a manifest: what it said. The row's scratch directory is `dir`.
fn floe_run_yaml(dir: &Path, yaml: &str) -> Result<Seen, Failed> {
    let manifest = dir.join("job.yaml");
    std::fs::write(&manifest, yaml).unwrap();
    let work = dir.join("work");
    run_bounded(
        FLOE,
        &[
            "run",
            "-f",
            manifest.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
        ],
        dir,
    )
}

/// A small input file for rows that reach a cluster.
fn small_input(dir: &Path) -> PathBuf {
    let path = dir.join("words.txt");
    std::fs::write(&path, "to be or not to be\nthat is the question\n").unwrap();
    path
}

/// A manifest row: `edit` breaks a good WordCount manifest; `floe run` must exit 2 at once saying
/// each of `needles`, start no cluster and write no output.
fn manifest_row(name: &'static str, edit: fn(String) -> String, needles: &'static [&'static str]) -> Row {
    Row {
        name,
        needs_moto: false,
        run: Box::new(move || {
            let dir = row_dir(name);
            let input = small_input(&dir);
            let output = dir.join("out");
            let seen = floe_run_yaml(&dir, &wordcount_yaml(&input, &output, edit))?;
            check(seen.exit == Some(2), || {
                format!("exit {:?}: {}", seen.exit, seen.said)
            })?;
            says(&seen, needles)?;
            check(!dir.join("work").join("flinkjob.yaml").exists(), || {
                "a cluster was started".into()
            })?;
            check(!output.exists(), || "output was written".into())?;
            Ok(seen)
        }),
    }
}

/// An operator row: `edit` breaks a good WordCount manifest in a way only a cluster refuses;
/// `floe-operator render -f` (what a reconcile would apply) must refuse it naming `needles`.
fn operator_row(name: &'static str, edit: fn(String) -> String, needles: &'static [&'static str]) -> Row {
    Row {
        name,
        needs_moto: false,
        run: Box::new(move || {
            let dir = row_dir(name);
            let manifest = dir.join("job.yaml");
            let yaml = wordcount_yaml(Path::new("data/words.txt"), Path::new("out"), edit);
            std::fs::write(&manifest, yaml).unwrap();
            let operator = images::operator_binary();
            let seen = run_bounded(
                operator.to_str().unwrap(),
                &["render", "-f", manifest.to_str().unwrap()],
                &dir,
            )?;
            check(seen.exit == Some(1), || {
                format!("exit {:?}: {}", seen.exit, seen.said)
            })?;
            says(&seen, needles).map(|()| seen)
        }),
    }
}

fn operator_rows() -> Vec<Row> {
    vec![
        operator_row(
            "operator: file:// storage without a claim",
            |y| {
                y.replace(
                    "  configuration:",
                    "  storage: { url: \"file:///var/lib/floe\" }\n  configuration:",
                )
            },
            &[
                "spec.storage.url",
                "needs spec.storage.persistentVolumeClaim",
                "65532",
            ],
        ),
        operator_row(
            "operator: an S3 secret key in the configuration",
            |y| {
                y.replace(
                    "  configuration:\n",
                    "  storage: { url: \"s3://jobs/prod\" }\n  configuration:\n    s3.secret-key: hunter2\n",
                )
            },
            &[
                "spec.configuration[s3.secret-key]",
                "written in clear into the job's ConfigMap",
                "spec.storage.credentialsSecret",
            ],
        ),
        manifest_row(
            "manifest: a claim for s3:// storage",
            |y| {
                y.replace(
                    "  configuration:",
                    "  storage: { url: \"s3://jobs/prod\", persistentVolumeClaim: floe-jobs }\n  configuration:",
                )
            },
            &["spec.storage.persistentVolumeClaim", "holds a file:// directory"],
        ),
    ]
}

/// A data row: a job that reaches a cluster with bad data must fail (exit 1) naming `needles`,
/// within [`BOUND`], leaving nothing running and no output presented as a result.
fn data_row(
    name: &'static str,
    setup: fn(&Path) -> (PathBuf, PathBuf),
    needles: &'static [&'static str],
) -> Row {
    Row {
        name,
        needs_moto: false,
        run: Box::new(move || {
            let dir = row_dir(name);
            let (input, output) = setup(&dir);
            let seen = floe_run_yaml(&dir, &wordcount_yaml(&input, &output, |y| y))?;
            check(seen.exit == Some(1), || {
                format!("exit {:?}: {}", seen.exit, seen.said)
            })?;
            says(&seen, needles)?;
            let committed = output.is_dir()
                && std::fs::read_dir(&output)
                    .unwrap()
                    .flatten()
                    .any(|e| !e.file_name().to_string_lossy().starts_with('.'));
            check(!committed, || "a failed job left visible output".into())?;
            Ok(seen)
        }),
    }
}

struct Row {
    name: &'static str,
    /// Reported as ignored where there is no moto server (and CI does not require one).
    needs_moto: bool,
    run: Box<dyn Fn() -> Result<Seen, Failed> + Send + Sync>,
}

fn manifest_rows() -> Vec<Row> {
    vec![
        manifest_row(
            "manifest: malformed YAML",
            |_| "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nspec: [unclosed\n".into(),
            &["job.yaml", "line"],
        ),
        manifest_row(
            "manifest: unknown field spec.job.paralelism",
            |y| y.replace("parallelism: 2", "paralelism: 2"),
            &["paralelism"],
        ),
        manifest_row(
            "manifest: missing field spec.job.name",
            |y| y.replace("    name: wordcount\n", ""),
            &["name"],
        ),
        manifest_row(
            "manifest: wrong type (replicas: one)",
            |y| y.replace("replicas: 1", "replicas: one"),
            &["spec.taskManager.replicas"],
        ),
        manifest_row(
            "manifest: parallelism 0",
            |y| y.replace("parallelism: 2", "parallelism: 0"),
            &["parallelism", "expected a positive integer"],
        ),
        manifest_row(
            "manifest: replicas above the maximum",
            |y| y.replace("replicas: 1", "replicas: 3000000000"),
            &["spec.taskManager.replicas", "expected at most 2147483647"],
        ),
        manifest_row(
            "manifest: slots 0",
            |y| y.replace("slots: 2", "slots: 0"),
            &["spec.taskManager.slots", "expected at least 1"],
        ),
        manifest_row(
            "manifest: negative checkpoint interval",
            |y| {
                y.replace("mode: batch", "mode: streaming").replace(
                    "heartbeat.timeout: \"10 s\"",
                    "execution.checkpointing.interval: \"-5 s\"",
                )
            },
            &["execution.checkpointing.interval", "-5 s"],
        ),
        manifest_row(
            "manifest: unparsable duration (heartbeat.timeout: soon)",
            |y| y.replace("\"10 s\"", "\"soon\""),
            &["heartbeat.timeout", "expected a duration", "soon"],
        ),
        manifest_row(
            "manifest: unparsable slot.request.timeout",
            |y| {
                y.replace(
                    "heartbeat.timeout: \"10 s\"",
                    "slot.request.timeout: \"5 fortnights\"",
                )
            },
            &["slot.request.timeout", "expected a duration", "5 fortnights"],
        ),
        manifest_row(
            "manifest: adaptive batch min-parallelism none",
            |y| {
                y.replace("parallelism: 2", "parallelism: auto").replace(
                    "heartbeat.timeout: \"10 s\"",
                    "execution.batch.adaptive.auto-parallelism.min-parallelism: \"none\"",
                )
            },
            &[
                "execution.batch.adaptive.auto-parallelism.min-parallelism",
                "expected a positive integer",
                "none",
            ],
        ),
        manifest_row(
            "manifest: parallelism auto in STREAMING",
            |y| {
                y.replace("parallelism: 2", "parallelism: auto")
                    .replace("mode: batch", "mode: streaming")
            },
            &["parallelism.default", "execution.runtime-mode BATCH"],
        ),
        manifest_row(
            "manifest: unknown jobmanager.scheduler",
            |y| y.replace("heartbeat.timeout: \"10 s\"", "jobmanager.scheduler: \"fancy\""),
            &[
                "jobmanager.scheduler",
                "expected default, adaptive or adaptivebatch",
                "fancy",
            ],
        ),
        manifest_row(
            "manifest: adaptive scheduler without checkpoints",
            |y| {
                y.replace("mode: batch", "mode: streaming")
                    .replace("heartbeat.timeout: \"10 s\"", "jobmanager.scheduler: adaptive")
            },
            &["jobmanager.scheduler", "rescales through checkpoints"],
        ),
        manifest_row(
            "manifest: autoscaler without the adaptive scheduler",
            |y| y.replace("heartbeat.timeout: \"10 s\"", "job.autoscaler.enabled: \"true\""),
            &["job.autoscaler.enabled", "jobmanager.scheduler: adaptive"],
        ),
        manifest_row(
            "manifest: autoscaler target utilization above 1",
            |y| {
                y.replace(
                    "heartbeat.timeout: \"10 s\"",
                    "job.autoscaler.target.utilization: \"1.5\"\n    job.autoscaler.enabled: \"true\"\n    jobmanager.scheduler: adaptive\n    execution.checkpointing.interval: \"1 s\"",
                )
            },
            &[
                "job.autoscaler.target.utilization",
                "expected a number from 0.01 to 1",
                "1.5",
            ],
        ),
        manifest_row(
            "manifest: gs:// storage",
            |y| {
                y.replace(
                    "  configuration:",
                    "  storage: { url: \"gs://bucket/jobs\" }\n  configuration:",
                )
            },
            &["spec.storage.url", "the \"gs\" scheme cannot be opened", "s3://"],
        ),
        manifest_row(
            "manifest: file:/// storage (the root)",
            |y| {
                y.replace(
                    "  configuration:",
                    "  storage: { url: \"file:///\" }\n  configuration:",
                )
            },
            &["spec.storage.url", "is the root of the file system"],
        ),
        manifest_row(
            "manifest: maxReplicas below replicas",
            |y| y.replace("replicas: 1, slots: 2", "replicas: 2, maxReplicas: 1, slots: 2"),
            &[
                "spec.taskManager.maxReplicas",
                "expected from spec.taskManager.replicas (2)",
                "got 1",
            ],
        ),
        manifest_row(
            "manifest: initialSavepointPath without checkpoints",
            |y| {
                y.replace(
                    "    mode: batch\n",
                    "    mode: batch\n    initialSavepointPath: \"file:///sp/savepoint-1\"\n",
                )
            },
            &[
                "spec.job.initialSavepointPath",
                "set spec.storage and spec.configuration[execution.checkpointing.interval]",
            ],
        ),
        manifest_row(
            "manifest: execution.state-recovery.path without checkpoints",
            |y| {
                y.replace(
                    "heartbeat.timeout: \"10 s\"",
                    "execution.state-recovery.path: \"file:///sp/savepoint-1\"",
                )
            },
            &[
                "execution.state-recovery.path",
                "set execution.checkpointing.interval",
            ],
        ),
        manifest_row(
            "manifest: unparsable memory size (segment-size: lots)",
            |y| {
                y.replace(
                    "heartbeat.timeout: \"10 s\"",
                    "taskmanager.memory.segment-size: \"lots\"",
                )
            },
            &["taskmanager.memory.segment-size", "lots"],
        ),
        manifest_row(
            "manifest: unknown restart strategy",
            |y| {
                y.replace(
                    "heartbeat.timeout: \"10 s\"",
                    "restart-strategy.type: \"sometimes\"",
                )
            },
            &["restart-strategy.type", "fixed-delay", "sometimes"],
        ),
        manifest_row(
            "manifest: unknown job name",
            |y| y.replace("name: wordcount\n    args", "name: wordcont\n    args"),
            &["wordcont", "wordcount"],
        ),
        manifest_row(
            "job arguments: --input missing",
            |y| with_args(&y, "[\"--output\", \"/tmp/floe-bad-input-never\"]"),
            &["--input"],
        ),
        manifest_row(
            "job arguments: unknown --bogus",
            |y| y.replace("args: [", "args: [\"--bogus\", \"1\", "),
            &["--bogus"],
        ),
        manifest_row(
            "job arguments: wrong type (pipeline --records many)",
            |y| {
                with_args(
                    &y,
                    "[\"--records\", \"many\", \"--output\", \"/tmp/floe-bad-input-never\"]",
                )
                .replace("name: wordcount\n    args", "name: pipeline\n    args")
            },
            &["--records", "many"],
        ),
        manifest_row(
            "cluster: too few slots (parallelism 8 on 1 x 2)",
            |y| y.replace("parallelism: 2", "parallelism: 8"),
            &[
                "job needs 8 slots but the cluster offers 2",
                "spec.taskManager.replicas",
            ],
        ),
    ]
}

fn data_rows() -> Vec<Row> {
    vec![
        data_row(
            "data: missing input",
            |dir| (dir.join("no-such-words.txt"), dir.join("out")),
            &["no-such-words.txt"],
        ),
        data_row(
            "data: output is an existing file",
            |dir| {
                let out = dir.join("out-file");
                std::fs::write(&out, "keep me\n").unwrap();
                (small_input(dir), out)
            },
            &["out-file"],
        ),
        data_row(
            "data: output not writable (under /proc)",
            |dir| (small_input(dir), PathBuf::from("/proc/floe-bad-input-out")),
            &["/proc/floe-bad-input-out"],
        ),
    ]
}

/// Issue 34, item 4: a Nexmark JSON line that is not an event (a price given as a string) fails
/// the job at once, without restarts (before, the task panicked, was retried three times reading
/// the whole file again, and the message named neither file nor line): exit 1, the file, the
/// line's number and the field in the message, within the bound, no output.
fn bad_record_row() -> Row {
    let name = "data: a malformed Nexmark JSON line (fails at once, naming file, line and field)";
    Row {
        name,
        needs_moto: false,
        run: Box::new(move || {
            let dir = row_dir(name);
            let input = dir.join("events");
            std::fs::create_dir_all(&input).unwrap();
            let bid = |n: u64, price: &str| {
                format!(
                    "{{\"event_type\":2,\"person\":null,\"auction\":null,\"bid\":{{\"auction\":{n},\"bidder\":7,\
                     \"price\":{price},\"channel\":\"Google\",\"url\":\"https://nexmark.com/a\",\
                     \"dateTime\":\"2015-07-15 00:00:0{n}.000\",\"extra\":\"\"}}}}\n"
                )
            };
            let events: String =
                [bid(1, "100"), bid(2, "200"), bid(3, "\"300 USD\""), bid(4, "400")].concat();
            std::fs::write(input.join("events-0.json"), events).unwrap();
            let output = dir.join("out");
            let yaml = format!(
                "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: nexmark }}\nspec:\n  job:\n    \
                 name: nexmark\n    args: [\"--query\", \"q1\", \"--input\", \"{}\", \"--output\", \"{}\"]\n    \
                 parallelism: 1\n    mode: streaming\n  taskManager: {{ replicas: 1, slots: 1 }}\n",
                input.display(),
                output.display()
            );
            let seen = floe_run_yaml(&dir, &yaml)?;
            check(seen.exit == Some(1), || {
                format!("exit {:?}: {}", seen.exit, seen.said)
            })?;
            says(
                &seen,
                &[
                    &format!("bad record in {}/events-0.json, line 3:", input.display()),
                    "field `bid.price`: invalid type: string \"300 USD\", expected u64",
                ],
            )?;
            // One failure of the one source task: a restart would have failed it again.
            let failures: usize = std::fs::read_dir(dir.join("work").join("logs"))
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("taskmanager"))
                .map(|e| {
                    let log = std::fs::read_to_string(e.path()).unwrap_or_default();
                    log.matches("task failed").count()
                })
                .sum();
            check(failures == 1, || {
                format!("{failures} task failures in the TaskManagers' logs, expected 1 (no restart)")
            })?;
            Ok(seen)
        }),
    }
}

/// The S3 server storage rows share (moto), when there is one.
fn moto() -> Option<&'static MotoServer> {
    static SERVER: OnceLock<Option<std::sync::Arc<MotoServer>>> = OnceLock::new();
    SERVER
        .get_or_init(|| MotoServer::for_tests("bad-input storage rows", "floe-bad-input"))
        .as_deref()
}

/// A storage row: WordCount reading `input` with `conf` (S3 settings) must fail naming `needles`.
fn storage_row(
    name: &'static str,
    input: fn(&MotoServer) -> String,
    conf: fn(&MotoServer) -> Vec<(String, String)>,
    needles: &'static [&'static str],
) -> Row {
    Row {
        name,
        needs_moto: true,
        run: Box::new(move || {
            let server = moto().ok_or("moto_server not found")?;
            let dir = row_dir(name);
            let input = input(server);
            let mut settings = String::new();
            for (k, v) in conf(server) {
                settings.push_str(&format!("    {k}: \"{v}\"\n"));
            }
            let output = dir.join("out");
            let yaml = wordcount_yaml(Path::new(&input), &output, |y| y + &settings);
            let seen = floe_run_yaml(&dir, &yaml)?;
            check(seen.exit.is_some_and(|c| c != 0), || {
                format!("exit {:?}: {}", seen.exit, seen.said)
            })?;
            says(&seen, needles)?;
            check(!output.exists(), || "output was written".into())?;
            Ok(seen)
        }),
    }
}

fn storage_rows() -> Vec<Row> {
    fn s3_conf(server: &MotoServer) -> Vec<(String, String)> {
        server.conf().into_iter().collect()
    }
    vec![
        storage_row(
            "storage: missing bucket",
            |_| "s3://floe-no-such-bucket/words.txt".into(),
            s3_conf,
            &["floe-no-such-bucket"],
        ),
        storage_row(
            "storage: missing object in a bucket",
            |server| server.url("no-such-words.txt"),
            s3_conf,
            &["no-such-words.txt"],
        ),
        storage_row(
            "storage: unreachable S3 endpoint",
            |server| server.url("words.txt"),
            |server| {
                let mut conf = s3_conf(server);
                let closed = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap();
                for (k, v) in &mut conf {
                    if k == "s3.endpoint" {
                        *v = format!("http://{closed}");
                    }
                }
                conf
            },
            &["words.txt"],
        ),
        storage_row(
            "storage: unknown URL scheme",
            |_| "ftp://example.com/words.txt".into(),
            |_| Vec::new(),
            &["ftp://example.com/words.txt"],
        ),
    ]
}

/// WordCount's result computed on the raw bytes, independently of Floe: a word is a run of ASCII
/// letters, digits and `_`, lowercased (bytes that are not UTF-8 decode to U+FFFD, which is not a
/// word character, as Java's decoder does for Flink's text source), sorted by word.
fn bytes_reference(path: &Path) -> Vec<(String, u64)> {
    let bytes = std::fs::read(path).unwrap();
    let mut counts = std::collections::BTreeMap::new();
    for word in bytes.split(|b| !(b.is_ascii_alphanumeric() || *b == b'_')) {
        if !word.is_empty() {
            *counts
                .entry(String::from_utf8(word.to_ascii_lowercase()).unwrap())
                .or_insert(0u64) += 1;
        }
    }
    counts.into_iter().collect()
}

/// Rows whose input is unusual but valid: the job must finish with the exact result.
fn valid_edge_rows() -> Vec<Row> {
    fn exact(name: &'static str, write: fn(&Path)) -> Row {
        Row {
            name,
            needs_moto: false,
            run: Box::new(move || {
                let dir = row_dir(name);
                let input = dir.join("in.txt");
                write(&input);
                let output = dir.join("out");
                let seen = floe_run_yaml(&dir, &wordcount_yaml(&input, &output, |y| y))?;
                check(seen.exit == Some(0), || {
                    format!("exit {:?}: {}", seen.exit, seen.said)
                })?;
                let mut got: Vec<(String, u64)> = output_lines(&output);
                got.sort();
                let want = bytes_reference(&input);
                check(got == want, || {
                    format!("{} words, expected {}", got.len(), want.len())
                })?;
                Ok(Seen {
                    said: format!("FINISHED, {} distinct words (exact)", got.len()),
                    ..seen
                })
            }),
        }
    }
    vec![
        exact("data: empty input", |p| std::fs::write(p, "").unwrap()),
        exact("data: binary input (1 MiB of random bytes)", |p| {
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            let bytes: Vec<u8> = (0..1 << 20)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            std::fs::write(p, bytes).unwrap();
        }),
        exact("data: one 24 MiB line (longer than any buffer)", |p| {
            let words = ["alpha", "beta", "gamma", "delta"];
            let mut line = String::with_capacity(24 << 20);
            let mut i = 0;
            while line.len() < 24 << 20 {
                line.push_str(words[i % 4]);
                line.push(' ');
                i += 1;
            }
            line.push('\n');
            std::fs::write(p, line).unwrap();
        }),
    ]
}

/// Issue 34, item 9: configuration keys Floe does not read are warned of before the job starts,
/// naming the key a typo is nearest to, or what to use instead of a Flink key Floe does not
/// implement; the job still runs, and its output is exact.
fn unread_keys_row() -> Row {
    let name = "manifest: configuration keys Floe does not read (warned, the job runs)";
    Row {
        name,
        needs_moto: false,
        run: Box::new(move || {
            let dir = row_dir(name);
            let input = small_input(&dir);
            let output = dir.join("out");
            let yaml = wordcount_yaml(&input, &output, |y| {
                y + "    execution.bufer-timeout: \"50\"\n    state.checkpoints.dir: /tmp/checkpoints\n"
            });
            let manifest = dir.join("job.yaml");
            std::fs::write(&manifest, yaml).unwrap();
            let started = Instant::now();
            let out = Command::new(FLOE)
                .args(["run", "-f", manifest.to_str().unwrap(), "--work-dir"])
                .arg(dir.join("work"))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            check(out.status.success(), || {
                format!("exit {:?}: {stderr}", out.status.code())
            })?;
            let warnings: Vec<&str> = stderr.lines().filter(|l| l.starts_with("warning:")).collect();
            let expected_typo = "warning: spec.configuration: configuration key \"execution.bufer-timeout\" \
                                 is not one Floe reads and is ignored; did you mean \"execution.buffer-timeout\"?";
            let expected_flink = "warning: spec.configuration: configuration key \"state.checkpoints.dir\" has \
                                  no effect: Floe does not implement it (checkpoints go to floe.job-storage.url";
            check(
                warnings.len() == 2
                    && warnings[0] == expected_typo
                    && warnings[1].starts_with(expected_flink),
                || format!("warnings: {warnings:#?}"),
            )?;
            let mut got: Vec<(String, u64)> = output_lines(&output);
            got.sort();
            check(got == bytes_reference(&input), || format!("{got:?}"))?;
            Ok(Seen {
                said: warnings.join(" / "),
                exit: out.status.code(),
                took: started.elapsed(),
            })
        }),
    }
}

/// A cluster of `taskmanagers` x `slots` for rows that talk to a running JobManager.
fn cluster(name: &str, taskmanagers: u32, slots: u32) -> LocalCluster {
    local_cluster(name, taskmanagers, slots).0
}

/// Submits over gRPC; the JobManager's answer, refusal included.
fn try_submit(
    rpc_address: &str,
    name: &str,
    args: &[String],
    configuration: &[(&str, &str)],
) -> Result<String, tonic::Status> {
    let conf = configuration.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    try_submit_job(rpc_address, name, args.to_vec(), conf)
}

fn cluster_rows() -> Vec<Row> {
    vec![
        Row {
            needs_moto: false,
            // The JobManager fails the job after `slot.request.timeout`, with Flink's
            // NoResourceAvailableException, although no TaskManager comes or goes meanwhile.
            name: "cluster: slots never come (submitted to a running cluster)",
            run: Box::new(|| {
                let cluster = cluster("slots-never-come", 1, 2);
                let dir = scratch("slots-never-come-job");
                let args = vec![
                    "--input".to_string(),
                    small_input(&dir).display().to_string(),
                    "--output".into(),
                    dir.join("out").display().to_string(),
                ];
                let conf = [
                    ("execution.runtime-mode", "BATCH"),
                    ("parallelism.default", "8"),
                    ("slot.request.timeout", "2 s"),
                ];
                let submitted = Instant::now();
                let id =
                    try_submit(&cluster.rpc_address, "wordcount", &args, &conf).map_err(|s| s.to_string())?;
                let job = loop {
                    let (_, job) = http("GET", &cluster.rest_address, &format!("/jobs/{id}"));
                    if job["state"] == "FAILED" {
                        break job;
                    }
                    check(submitted.elapsed() < BOUND, || format!("not failed: {job}"))?;
                    std::thread::sleep(Duration::from_millis(50));
                };
                let took = submitted.elapsed();
                let seen = Seen {
                    said: job["failure-cause"].as_str().unwrap_or_default().to_string(),
                    exit: None,
                    took,
                };
                says(
                    &seen,
                    &[
                        "NoResourceAvailableException: could not acquire the minimum required resources",
                        "slot.request.timeout (2 s)",
                        "needs 8 slots, the cluster offers 2 free",
                    ],
                )?;
                check(took >= Duration::from_secs(2), || {
                    "failed before its timeout".into()
                })?;
                Ok(seen)
            }),
        },
        Row {
            name: "cluster: submission with an unparsable slot.request.timeout",
            needs_moto: false,
            run: Box::new(|| {
                let cluster = cluster("bad-slot-timeout", 1, 2);
                let dir = scratch("bad-slot-timeout-job");
                let args = vec![
                    "--input".to_string(),
                    small_input(&dir).display().to_string(),
                    "--output".into(),
                    dir.join("out").display().to_string(),
                ];
                let started = Instant::now();
                let refused = try_submit(
                    &cluster.rpc_address,
                    "wordcount",
                    &args,
                    &[("slot.request.timeout", "soon")],
                )
                .err()
                .ok_or("accepted")?;
                let seen = Seen {
                    said: format!("{:?}: {}", refused.code(), refused.message()),
                    exit: None,
                    took: started.elapsed(),
                };
                check(refused.code() == tonic::Code::InvalidArgument, || {
                    seen.said.clone()
                })?;
                says(
                    &seen,
                    &["slot.request.timeout", "expected a duration", "\"soon\""],
                )?;
                Ok(seen)
            }),
        },
        Row {
            name: "cluster: JobManager port already taken",
            needs_moto: false,
            run: Box::new(|| {
                let dir = scratch("port-taken");
                let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let address = taken.local_addr().unwrap().to_string();
                let seen = run_bounded(
                    FLOE,
                    &[
                        "jobmanager",
                        "--rpc-address",
                        &address,
                        "--rest-address",
                        "127.0.0.1:0",
                    ],
                    &dir,
                )?;
                check(seen.exit.is_some_and(|c| c != 0), || {
                    format!("exit {:?}", seen.exit)
                })?;
                says(&seen, &[&address])?;
                Ok(seen)
            }),
        },
        Row {
            name: "cluster: TaskManager port already taken",
            needs_moto: false,
            run: Box::new(|| {
                let dir = row_dir("tm-port-taken");
                let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let address = taken.local_addr().unwrap().to_string();
                let seen = run_bounded(
                    FLOE,
                    &["taskmanager", "--jobmanager", "127.0.0.1:1", "--bind", &address],
                    &dir,
                )?;
                check(seen.exit.is_some_and(|c| c != 0), || {
                    format!("exit {:?}", seen.exit)
                })?;
                says(&seen, &[&format!("cannot bind {address}"), "in use"])?;
                Ok(seen)
            }),
        },
        Row {
            name: "cluster: TaskManager whose JobManager is unreachable (registration timeout)",
            needs_moto: false,
            run: Box::new(|| {
                let dir = scratch("tm-no-jm");
                // A port nothing listens on.
                let free = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .to_string();
                // A pod's TaskManager keeps trying (the JobManager may come later); one given a
                // registration timeout gives up after it, saying where it tried and how often.
                let seen = run_bounded(
                    FLOE,
                    &[
                        "taskmanager",
                        "--jobmanager",
                        &free,
                        "--registration-timeout-s",
                        "3",
                        "--data-dir",
                        &dir.join("data").display().to_string(),
                    ],
                    &dir,
                )?;
                check(seen.exit.is_some_and(|c| c != 0), || {
                    format!("exit {:?}", seen.exit)
                })?;
                says(&seen, &[&free, "no registration within 3 s", "attempts"])?;
                Ok(seen)
            }),
        },
    ]
}

/// Issue 17: a test's server does not outlive the test process. What the kernel does at any exit
/// (close the process's end of the server's stdin pipe) is done here; the server must then exit by
/// itself.
fn leak_rows() -> Vec<Row> {
    vec![Row {
        name: "test servers: moto exits when its test process is gone",
        needs_moto: true,
        run: Box::new(|| {
            let mut server = MotoServer::start("floe-orphan-check");
            let pid = server.close_stdin();
            let closed = Instant::now();
            let running = || {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| {
                        s.rsplit_once(')')
                            .is_some_and(|(_, a)| !a.trim_start().starts_with('Z'))
                    })
                    .unwrap_or(false)
            };
            while running() {
                check(closed.elapsed() < Duration::from_secs(10), || {
                    format!("moto (pid {pid}) still runs 10 s after its stdin closed")
                })?;
                std::thread::sleep(Duration::from_millis(20));
            }
            let took = closed.elapsed();
            Ok(Seen {
                said: format!("moto_server (pid {pid}) exited on its own after its stdin closed"),
                exit: None,
                took,
            })
        }),
    }]
}

fn rest_rows() -> Vec<Row> {
    fn rest(
        name: &'static str,
        method: &'static str,
        path: &'static str,
        code: u16,
        needle: &'static str,
    ) -> Row {
        Row {
            name,
            needs_moto: false,
            run: Box::new(move || {
                let cluster = cluster(&format!("rest-{code}-{}", path.len()), 1, 1);
                let started = Instant::now();
                let (status, body) = http(method, &cluster.rest_address, path);
                let seen = Seen {
                    said: format!("{status} {body}"),
                    exit: None,
                    took: started.elapsed(),
                };
                check(status == code, || seen.said.clone())?;
                says(&seen, &[needle])?;
                Ok(seen)
            }),
        }
    }
    vec![
        rest(
            "REST: unknown job id",
            "GET",
            "/jobs/0123456789abcdef",
            404,
            "0123456789abcdef",
        ),
        rest(
            "REST: wrong method",
            "DELETE",
            "/jobs",
            405,
            "DELETE is not allowed on /jobs",
        ),
        rest("REST: unknown path", "GET", "/jobz", 404, "/jobz"),
    ]
}

fn main() {
    let args = Arguments::from_args();
    let moto_missing = !MotoServer::available() && std::env::var_os("FLOE_REQUIRE_MOTO").is_none();
    if moto_missing {
        eprintln!("SKIPPED: bad-input storage rows (moto_server not found: pip install \"moto[server]\")");
    }
    let rows: Vec<Row> = [
        manifest_rows(),
        operator_rows(),
        data_rows(),
        storage_rows(),
        valid_edge_rows(),
        vec![unread_keys_row(), bad_record_row()],
        cluster_rows(),
        rest_rows(),
        leak_rows(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let trials = rows
        .into_iter()
        .map(|row| {
            let name = row.name;
            let ignored = row.needs_moto && moto_missing;
            Trial::test(name, move || {
                let seen = (row.run)()?;
                TABLE.lock().unwrap().push((name.to_string(), seen));
                Ok(())
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let mut table = TABLE.lock().unwrap().clone();
    if !table.is_empty() {
        table.sort_by(|a, b| a.0.cmp(&b.0));
        println!("\n| input | what Floe said | exit | time |\n|---|---|---|---|");
        for (name, seen) in table {
            let exit = seen.exit.map_or("-".to_string(), |c| c.to_string());
            let said = seen.said.replace('|', "\\|");
            println!("| {name} | {said} | {exit} | {:.2} s |", seen.took.as_secs_f64());
        }
    }
    conclusion.exit();
}
