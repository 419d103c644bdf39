//! The `floe` command line as a library call: [`main`] parses the arguments and runs `plan`, `jobs`,
//! `new`, `run`, `jobmanager`, `taskmanager` or `gen-words` with the jobs of the registry it is given, so a
//! user's crate that registers its own jobs gets the same command (and its `floe run` starts its own
//! binary as the JobManager and TaskManagers). Errors map to exit codes: 2 for bad input, as clap
//! does for bad arguments; 1 for a job that did not finish.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use floe_datastream::JobRegistry;
use floe_scheduler::{BatchShuffleMode, Plan};
use floe_telemetry::logs::{self, LogFormat};

use crate::plan_cmd::{self, Format};
use crate::{application, generate, graph_file, new_project, run_cmd};

#[derive(Debug, Parser)]
#[command(
    name = "floe",
    version,
    about = "Floe: Flink's runtime ideas, Kubernetes-native, in Rust"
)]
struct Cli {
    /// Log lines as text for people, or JSON (one object a line) for a cluster's log collector:
    /// the operator's JobManager and TaskManager pods run with `json`.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a job's plan: vertices, pipelined regions and slot placement.
    Plan {
        /// A JobGraph in YAML (vertices and edges).
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        graph: Option<PathBuf>,
        /// A FlinkJob manifest: plans the registered job it names on its TaskManagers.
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        /// execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING, FORWARD_EXCHANGES_PIPELINED,
        /// POINTWISE_EXCHANGES_PIPELINED or ALL_EXCHANGES_PIPELINED (default: the manifest's, else
        /// ALL_EXCHANGES_BLOCKING).
        #[arg(long)]
        shuffle_mode: Option<String>,
        /// Number of TaskManagers (default: one with just the slots the job needs).
        #[arg(long, requires = "slots")]
        taskmanagers: Option<u32>,
        /// Slots per TaskManager.
        #[arg(long)]
        slots: Option<u32>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Make a crate of your own with a job that runs: `floe new my-job && cd my-job && cargo run
    /// -- run -f job.yaml`. It depends on Floe by path when this binary's source is on this
    /// machine, else by version.
    New {
        /// The crate's (and its job's) name: lowercase letters, digits, '-' and '_'.
        name: String,
        /// Where the crate goes (default: ./NAME); it must not exist or be empty.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Depend on the Floe checkout here (its runtime/cli directory).
        #[arg(long, conflicts_with = "floe_version")]
        floe_path: Option<PathBuf>,
        /// Depend on this published version of Floe.
        #[arg(long)]
        floe_version: Option<String>,
    },
    /// List the registered jobs and the arguments each takes.
    Jobs,
    /// List the configuration keys Floe reads (a Markdown table: value, default, who reads it,
    /// what it does), and the Flink keys it does not implement.
    Config,
    /// Run a FlinkJob manifest on a local cluster of real processes.
    Run {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Where the cluster keeps logs and blocking shuffle files (default: a fresh temp directory).
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// Keep the local cluster and its web UI up after the job ended, until Ctrl-C.
        #[arg(long)]
        keep_ui: bool,
    },
    /// Prove a job exactly-once before production: run it undisturbed once, then RUNS times under
    /// random faults (and with --lifecycle, stops with savepoints, rescales and suspends, each
    /// resumed by a new deployment), comparing every run's committed output with the undisturbed
    /// run's. The job needs bounded input and an --output directory. Exits 0 only when every
    /// output is exact.
    Verify {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Disturbed runs.
        #[arg(long, default_value_t = 5)]
        runs: u32,
        /// Faults to draw from, comma-separated.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "tm-kill,tm-term,tm-pause,jm-kill,jm-pause"
        )]
        faults: Vec<crate::verify::Fault>,
        /// Also stop with a savepoint and resume (at the same or another parallelism), and
        /// suspend and resume in last-state mode (STREAMING jobs with checkpoints).
        #[arg(long)]
        lifecycle: bool,
        /// Run `i` draws its schedule from seed + i: a failing run is replayed with its seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Seconds one run may take before it counts as hung.
        #[arg(long, default_value_t = 300)]
        timeout_s: u64,
        /// Where runs keep their output, storage and logs (default: a fresh temp directory); a
        /// run that was not exact keeps them.
        #[arg(long)]
        work_dir: Option<PathBuf>,
    },
    /// Run a JobManager.
    Jobmanager {
        #[arg(long, default_value = "127.0.0.1:6123")]
        rpc_address: SocketAddr,
        #[arg(long, default_value = "127.0.0.1:8081")]
        rest_address: SocketAddr,
        #[arg(long, default_value_t = 1000)]
        heartbeat_interval_ms: u64,
        #[arg(long, default_value_t = 10_000)]
        heartbeat_timeout_ms: u64,
        #[arg(long, default_value_t = 60)]
        slot_request_timeout_s: u64,
        /// Exit when standard input closes (used by `floe run` so children die with it).
        #[arg(long)]
        exit_on_stdin_eof: bool,
        /// Application mode: submit the job of this FlinkJob manifest at start (as the operator's
        /// JobManager pods do), and keep serving its status after it ends.
        #[arg(long)]
        job_file: Option<PathBuf>,
        /// Configuration of this process, Flink's dynamic properties: `-Dkey=value` (the
        /// `security.ssl.internal.*` keys). A manifest's configuration counts too.
        #[arg(short = 'D', value_name = "KEY=VALUE", value_parser = property)]
        properties: Vec<(String, String)>,
    },
    /// Run a TaskManager that offers slots to a JobManager.
    Taskmanager {
        /// host:port of the JobManager's RPC endpoint.
        #[arg(long)]
        jobmanager: String,
        #[arg(long, default_value_t = 1)]
        slots: u32,
        #[arg(long, default_value = "127.0.0.1:0")]
        bind: SocketAddr,
        /// Host (name or IP) peers reach this TaskManager at, when it binds a wildcard address (a
        /// pod's IP, a container's name). Default: the bound address.
        #[arg(long)]
        advertise_host: Option<String>,
        /// Default: taskmanager-<pid>.
        #[arg(long)]
        id: Option<String>,
        /// Local directory for blocking shuffle partitions (default: a temp directory).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Serve this TaskManager's `/metrics` (its tasks' figures, Flink's names) here; Flink's
        /// Prometheus reporter port is 9249. Default: not served.
        #[arg(long)]
        metrics_address: Option<SocketAddr>,
        /// Give up (exit 1) when no JobManager took the registration within this many seconds.
        /// Default: keep trying, with backoff up to 10 s, as a pod should.
        #[arg(long)]
        registration_timeout_s: Option<u64>,
        /// Configuration of this process, Flink's dynamic properties: `-Dkey=value` (the
        /// `security.ssl.internal.*` keys).
        #[arg(short = 'D', value_name = "KEY=VALUE", value_parser = property)]
        properties: Vec<(String, String)>,
        #[arg(long)]
        exit_on_stdin_eof: bool,
    },
    /// List the jobs of a JobManager with their state (as `flink list`).
    List {
        #[command(flatten)]
        target: ClientArgs,
    },
    /// Show a job: state, vertices, subtasks with attempts and TaskManagers, checkpoints.
    Info {
        /// The job's id.
        job: String,
        #[command(flatten)]
        target: ClientArgs,
    },
    /// Cancel a job and wait until it has ended (as `flink cancel`).
    Cancel {
        job: String,
        #[command(flatten)]
        target: ClientArgs,
    },
    /// Take a savepoint of a job and print its location (as `flink savepoint JOB [DIR]`; DIR
    /// defaults to the job's `state.savepoints.dir`).
    Savepoint {
        job: String,
        dir: Option<String>,
        #[command(flatten)]
        target: ClientArgs,
    },
    /// Stop a job with a savepoint (as `flink stop`): the savepoint's location is printed.
    Stop {
        job: String,
        /// Where the savepoint goes (default: the job's `state.savepoints.dir`).
        #[arg(long = "savepoint-path")]
        savepoint_path: Option<String>,
        /// End event time before the savepoint (Flink's `stop --drain`): every open event-time
        /// window and timer fires, and its output is committed; for a job that will not resume.
        #[arg(long)]
        drain: bool,
        #[command(flatten)]
        target: ClientArgs,
    },
    /// Write seeded, Zipf-distributed lines of words (WordCount input) to a file, or to an object
    /// (`s3://bucket/key`, credentials and endpoint from AWS_* environment variables).
    GenWords {
        #[arg(long)]
        output: String,
        /// Size in MiB.
        #[arg(long, default_value_t = 10)]
        mib: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
}

/// Where a client command goes and how it answers.
#[derive(Debug, clap::Args)]
struct ClientArgs {
    /// The JobManager's REST address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    jobmanager: String,
    /// `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value = "text")]
    output: crate::client::Output,
}

/// Runs a client command; its output on stdout. Errors exit 1 (the JobManager refused or could
/// not be reached), a bad `--jobmanager` exits 2.
fn client_command(
    target: &ClientArgs,
    command: impl FnOnce(&crate::client::Client, crate::client::Output) -> anyhow::Result<String>,
) -> Result<ExitCode, Failure> {
    let client = crate::client::Client::new(&target.jobmanager)?;
    let out = command(&client, target.output).map_err(|error| Failure { code: 1, error })?;
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// `key=value` of `-D`.
fn property(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

/// A failure and the exit code it maps to.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            code: 2,
            error: e.into(),
        }
    }
}

/// Runs the `floe` command line (the process's arguments) with the jobs of `registry`: a user's
/// binary is `fn main() -> ExitCode { floe::main(my_jobs()) }`. Returns the exit code.
pub fn main(registry: JobRegistry) -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Jobmanager { .. } | Command::Taskmanager { .. } => "info",
        _ => "warn",
    };
    logs::init(cli.log_format, default_level);
    match run(cli, registry) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure {
            code: 1,
            error: e.into(),
        })
}

/// Exits the process when stdin reaches end of file (the parent is gone).
fn exit_on_stdin_eof() {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
}

fn run(cli: Cli, registry: JobRegistry) -> Result<ExitCode, Failure> {
    match cli.command {
        Command::Plan {
            graph,
            file,
            shuffle_mode,
            taskmanagers,
            slots,
            format,
        } => {
            let (job, mode, manifest_offer, operators) = match (graph, file) {
                (Some(graph), _) => {
                    let mode: BatchShuffleMode = shuffle_mode
                        .as_deref()
                        .unwrap_or("ALL_EXCHANGES_BLOCKING")
                        .parse()?;
                    (graph_file::load(&graph, mode)?, mode.name(), None, Vec::new())
                }
                (None, Some(file)) => {
                    let manifest = run_cmd::load_manifest(&file)?;
                    let job = plan_cmd::manifest_job(&manifest, &registry, shuffle_mode.as_deref())?;
                    (job.graph, job.mode, Some(job.offer), job.operators)
                }
                (None, None) => unreachable!("clap requires --graph or -f"),
            };
            let offer = match (taskmanagers, slots) {
                (Some(n), Some(m)) => Some(vec![m; n as usize]),
                // --slots alone: as many TaskManagers of that size as the job needs.
                (None, Some(m)) if m > 0 => {
                    let needed = floe_scheduler::slots::slots_needed(&floe_scheduler::ExecutionGraph::new(
                        job.clone(),
                    ));
                    Some(vec![m; needed.div_ceil(m as usize).max(1)])
                }
                _ => manifest_offer,
            };
            let plan = Plan::new(job, offer.as_deref())?;
            let view = plan.view();
            match format {
                Format::Json => {
                    let mut json = serde_json::to_value(&view)?;
                    if !operators.is_empty() {
                        json["operators"] = serde_json::to_value(&operators)?;
                    }
                    println!("{}", serde_json::to_string_pretty(&json)?)
                }
                Format::Text => print!("{}", plan_cmd::render_text(&view, mode, &operators)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::New {
            name,
            dir,
            floe_path,
            floe_version,
        } => {
            let floe = match (floe_path, floe_version) {
                (Some(p), _) => new_project::FloeSource::Path(std::path::absolute(&p)?),
                (None, Some(v)) => new_project::FloeSource::Version(v),
                (None, None) => new_project::FloeSource::of_this_build(),
            };
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            let written = new_project::create(&dir, &name, &floe)?;
            println!(
                "created {} ({} files), Floe from {floe:?}",
                dir.display(),
                written.len()
            );
            println!(
                "next:\n  cd {}\n  cargo run -- run -f job.yaml\n  cargo test",
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Jobs => {
            print!("{}", registry.usage());
            Ok(ExitCode::SUCCESS)
        }
        Command::Config => {
            print!("{}", floe_config::markdown());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            file,
            work_dir,
            keep_ui,
        } => {
            let manifest = run_cmd::load_manifest(&file)?;
            // Bad input like the manifest's own errors (exit 2), before any process starts.
            run_cmd::preflight(&manifest, &registry)?;
            let work_dir = work_dir
                .unwrap_or_else(|| std::env::temp_dir().join(format!("floe-run-{}", std::process::id())));
            let rt = runtime()?;
            let outcome = rt.block_on(async {
                // One listener for the whole run: a Ctrl-C during the job interrupts it, one after
                // it (with --keep-ui) ends the run with the job's exit code, one in between is
                // kept for the wait. (Two listeners, one in the run for --keep-ui, let a Ctrl-C
                // right after the summary reach only the interrupting one now and then.)
                let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                    .map_err(|e| anyhow::anyhow!("listening for Ctrl-C: {e}"))?;
                let mut ended = tokio::select! {
                    r = run_cmd::run(&manifest, &work_dir, keep_ui) => r?,
                    // Dropping the run future drops the cluster, which kills every child.
                    _ = interrupt.recv() => return Ok(None),
                };
                if let Some(cluster) = ended.kept.take() {
                    interrupt.recv().await;
                    drop(cluster);
                }
                anyhow::Ok(Some(ended))
            });
            match outcome {
                Ok(Some(o)) if o.status == "FINISHED" => Ok(ExitCode::SUCCESS),
                Ok(Some(_)) => Ok(ExitCode::from(1)),
                Ok(None) => {
                    eprintln!("\ninterrupted: local cluster stopped");
                    Ok(ExitCode::from(130))
                }
                Err(e) => Err(Failure { code: 1, error: e }),
            }
        }
        Command::Verify {
            file,
            runs,
            faults,
            lifecycle,
            seed,
            timeout_s,
            work_dir,
        } => {
            let manifest = run_cmd::load_manifest(&file)?;
            run_cmd::preflight(&manifest, &registry)?;
            let options = crate::verify::Options {
                runs,
                faults,
                lifecycle,
                seed,
                work_dir: work_dir.unwrap_or_else(|| {
                    std::env::temp_dir().join(format!("floe-verify-{}", std::process::id()))
                }),
                timeout: std::time::Duration::from_secs(timeout_s),
            };
            // Bad input (exit 2) before any process starts.
            crate::verify::check_job(&manifest, &options)?;
            let verdict =
                crate::verify::verify(&manifest, &options).map_err(|error| Failure { code: 1, error })?;
            print!("{}", verdict.table());
            if verdict.all_exact() {
                let _ = std::fs::remove_dir_all(&options.work_dir);
                Ok(ExitCode::SUCCESS)
            } else {
                let seeds: Vec<String> = verdict
                    .runs
                    .iter()
                    .filter(|r| !r.exact)
                    .map(|r| r.seed.to_string())
                    .collect();
                println!(
                    "not exact: runs of seeds {} (kept in {}; replay one with --runs 1 --seed SEED-1)",
                    seeds.join(", "),
                    options.work_dir.display()
                );
                Ok(ExitCode::from(1))
            }
        }
        Command::Jobmanager {
            rpc_address,
            rest_address,
            heartbeat_interval_ms,
            heartbeat_timeout_ms,
            slot_request_timeout_s,
            exit_on_stdin_eof: eof,
            job_file,
            properties,
        } => {
            if eof {
                exit_on_stdin_eof();
            }
            let application = job_file.as_deref().map(run_cmd::load_manifest).transpose()?;
            let mut conf = application
                .as_ref()
                .map(|m| m.job_configuration())
                .unwrap_or_default();
            conf.extend(properties);
            floe_proto::tls::install(&conf).map_err(|e| Failure {
                code: 2,
                error: e.into(),
            })?;
            let config = floe_jobmanager::JobManagerConfig {
                rpc_address,
                rest_address,
                heartbeat_interval: Duration::from_millis(heartbeat_interval_ms),
                heartbeat_timeout: Duration::from_millis(heartbeat_timeout_ms),
                slot_request_timeout: Duration::from_secs(slot_request_timeout_s),
                ..floe_jobmanager::JobManagerConfig::default()
            };
            let jm = floe_jobmanager::JobManager::new(config, registry);
            runtime()?
                .block_on(async {
                    tokio::select! {
                        served = application::serve(jm, application) => served,
                        // In a pod this process is PID 1: without a handler SIGTERM does nothing
                        // and every suspend or upgrade waits for the kill. The listeners close
                        // with the process; a JobManager that takes over resumes from the log.
                        () = terminated() => {
                            tracing::info!("SIGTERM: the JobManager stops");
                            Ok(())
                        }
                    }
                })
                .map_err(|e| Failure { code: 1, error: e })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Taskmanager {
            jobmanager,
            slots,
            bind,
            advertise_host,
            id,
            data_dir,
            registration_timeout_s,
            exit_on_stdin_eof: eof,
            properties,
            metrics_address,
        } => {
            if eof {
                exit_on_stdin_eof();
            }
            let properties: std::collections::BTreeMap<String, String> = properties.into_iter().collect();
            floe_proto::tls::install(&properties).map_err(|e| Failure {
                code: 2,
                error: e.into(),
            })?;
            let managed_memory = floe_taskmanager::memory::managed_memory(
                &properties,
                floe_taskmanager::memory::container_memory_limit(),
            )
            .map_err(|e| Failure {
                code: 2,
                error: anyhow::anyhow!(e),
            })?;
            let id = id.unwrap_or_else(|| format!("taskmanager-{}", std::process::id()));
            let data_dir = data_dir.unwrap_or_else(|| std::env::temp_dir().join(format!("floe-{id}")));
            let config = floe_taskmanager::TaskManagerConfig {
                jobmanager,
                bind,
                advertise_host,
                slots,
                id,
                data_dir,
                registration_timeout: registration_timeout_s.map(Duration::from_secs),
                registry,
                metrics_address,
                managed_memory,
            };
            runtime()?
                .block_on(floe_taskmanager::run_until(config, terminated()))
                .map_err(|e| Failure {
                    code: 1,
                    error: e.into(),
                })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::List { target } => client_command(&target, |c, o| c.list(o)),
        Command::Info { job, target } => client_command(&target, |c, o| c.info(&job, o)),
        Command::Cancel { job, target } => client_command(&target, |c, o| c.cancel(&job, o)),
        Command::Savepoint { job, dir, target } => {
            client_command(&target, |c, o| c.savepoint(&job, dir.as_deref(), None, o))
        }
        Command::Stop {
            job,
            savepoint_path,
            drain,
            target,
        } => client_command(&target, |c, o| {
            c.savepoint(&job, savepoint_path.as_deref(), Some(drain), o)
        }),
        Command::GenWords { output, mib, seed } => {
            let bytes = mib * 1024 * 1024;
            let written = if output.contains("://") {
                generate::upload_words(&output, bytes, seed)?
            } else {
                generate::write_words(std::path::Path::new(&output), bytes, seed)?
            };
            eprintln!("wrote {output} ({written} bytes, seed {seed})");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Resolves when the process gets SIGTERM (never, if the handler cannot be installed).
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(e) => {
            tracing::warn!("cannot handle SIGTERM: {e}");
            std::future::pending::<()>().await
        }
    }
}
