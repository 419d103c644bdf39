//! A local Floe cluster of real processes: one JobManager and N TaskManagers, children of `floe run`.
//!
//! Children never outlive the parent: they are killed when the [`LocalCluster`] is dropped (normal
//! exit, error, Ctrl-C), and each is started with `--exit-on-stdin-eof` and a pipe on stdin, so even if
//! the parent is killed with SIGKILL the closed pipe stops them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// One child process and the pipe that keeps it alive.
#[derive(Debug)]
struct Process {
    name: String,
    child: Child,
    _stdin: Option<ChildStdin>,
}

/// The JobManager's endpoints and the running processes.
#[derive(Debug)]
pub struct LocalCluster {
    pub rpc_address: String,
    pub rest_address: String,
    pub log_dir: PathBuf,
    processes: Vec<Process>,
    exe: PathBuf,
    env: Vec<(String, String)>,
    jobmanager_args: Vec<String>,
    jobmanager_starts: u32,
    /// Each TaskManager's id and arguments, in start order.
    taskmanager_args: Vec<(String, Vec<String>)>,
    /// Processes started so far, for log names of restarts.
    starts: u32,
    /// Where the (current) JobManager runs; `None`: this host's loopback.
    jobmanager_host: Option<Host>,
    /// Where each TaskManager runs, by index.
    taskmanager_hosts: Vec<Option<Host>>,
}

/// A host of a cluster's own: a network namespace and the address a process has in it. Tests place
/// processes on hosts of their own to cut the network between them (see `tests/common/netns.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub netns: String,
    pub ip: String,
}

/// Where the processes of a [`ClusterSpec`] run.
#[derive(Debug, Clone)]
pub struct Placement {
    pub jobmanager: Host,
    pub taskmanagers: Vec<Host>,
    /// The address TaskManagers reach the JobManager at, like a Kubernetes Service (the test
    /// points it at whichever JobManager leads); `None`: the JobManager's own RPC address.
    pub jobmanager_service: Option<String>,
}

/// The RPC and REST ports of a JobManager on a host of its own (Flink's defaults).
pub const JOBMANAGER_RPC_PORT: u16 = 6123;
pub const JOBMANAGER_REST_PORT: u16 = 8081;

/// How to start a local cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// The `floe` binary the processes run.
    pub exe: PathBuf,
    pub taskmanagers: u32,
    pub slots: u32,
    pub work_dir: PathBuf,
    pub heartbeat_timeout: Duration,
    /// Application mode: the manifest the JobManager submits itself (`--job-file`).
    pub job_file: Option<PathBuf>,
    /// `None`: every process on this host's loopback (what `floe run` does).
    pub placement: Option<Placement>,
    /// Environment variables every process gets, besides this one's.
    pub env: Vec<(String, String)>,
    /// Configuration every process gets as `-D key=value` (Flink's dynamic properties): the
    /// job's `security.ssl.internal.*` keys.
    pub properties: Vec<(String, String)>,
}

fn spawn(
    exe: &Path,
    env: &[(String, String)],
    host: Option<&Host>,
    name: &str,
    args: &[String],
    log_dir: &Path,
) -> anyhow::Result<(Process, BufReader<std::process::ChildStdout>)> {
    let log = std::fs::File::create(log_dir.join(format!("{name}.log")))
        .with_context(|| format!("cannot create log file in {}", log_dir.display()))?;
    // `ip netns exec` execs the program in place: the child's pid is the program's own.
    let mut command = match host {
        Some(host) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &host.netns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg("--exit-on-stdin-eof")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("cannot start {name} ({})", exe.display()))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().context("child stdout")?;
    Ok((
        Process {
            name: name.to_string(),
            child,
            _stdin: stdin,
        },
        BufReader::new(stdout),
    ))
}

/// Reads the child's first stdout line (its "listening" line), then keeps draining stdout in the
/// background so the child never blocks on a full pipe.
fn first_line(
    mut out: BufReader<std::process::ChildStdout>,
    name: &str,
    log_dir: &Path,
) -> anyhow::Result<String> {
    let mut line = String::new();
    out.read_line(&mut line)
        .with_context(|| format!("reading {name}'s output"))?;
    if line.is_empty() {
        let log = std::fs::read_to_string(log_dir.join(format!("{name}.log"))).unwrap_or_default();
        bail!(
            "{name} exited before it was ready; its log says:\n{}",
            log.trim_end()
        );
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Ok(line.trim().to_string())
}

impl LocalCluster {
    /// Starts the JobManager, waits for its ports, then starts the TaskManagers and waits until each
    /// has registered.
    pub fn start(spec: &ClusterSpec) -> anyhow::Result<LocalCluster> {
        let exe = spec.exe.clone();
        let log_dir = spec.work_dir.join("logs");
        std::fs::create_dir_all(&log_dir).with_context(|| format!("cannot create {}", log_dir.display()))?;
        let jobmanager_host = spec.placement.as_ref().map(|p| p.jobmanager.clone());
        let mut jm_args = vec!["jobmanager".to_string()];
        jm_args.extend(jobmanager_addresses(jobmanager_host.as_ref()));
        jm_args.extend([
            "--heartbeat-timeout-ms".into(),
            spec.heartbeat_timeout.as_millis().to_string(),
        ]);
        if let Some(file) = &spec.job_file {
            jm_args.push("--job-file".into());
            jm_args.push(file.display().to_string());
        }
        let properties: Vec<String> = spec
            .properties
            .iter()
            .map(|(k, v)| format!("-D{k}={v}"))
            .collect();
        jm_args.extend(properties.iter().cloned());
        let mut cluster = LocalCluster {
            rpc_address: String::new(),
            rest_address: String::new(),
            log_dir: log_dir.clone(),
            processes: Vec::new(),
            exe: exe.clone(),
            env: spec.env.clone(),
            jobmanager_args: jm_args.clone(),
            jobmanager_starts: 1,
            taskmanager_args: Vec::new(),
            starts: 0,
            jobmanager_host: jobmanager_host.clone(),
            taskmanager_hosts: Vec::new(),
        };
        let (jm, out) = spawn(
            &exe,
            &spec.env,
            jobmanager_host.as_ref(),
            "jobmanager",
            &jm_args,
            &log_dir,
        )?;
        cluster.processes.push(jm);
        let line = first_line(out, "jobmanager", &log_dir)?;
        for word in line.split_whitespace() {
            if let Some(a) = word.strip_prefix("rpc=") {
                cluster.rpc_address = a.to_string();
            }
            if let Some(a) = word.strip_prefix("rest=") {
                cluster.rest_address = a.to_string();
            }
        }
        if cluster.rpc_address.is_empty() || cluster.rest_address.is_empty() {
            bail!("unexpected JobManager start line: {line:?}");
        }
        let service = spec
            .placement
            .as_ref()
            .and_then(|p| p.jobmanager_service.clone())
            .unwrap_or_else(|| cluster.rpc_address.clone());
        let mut outs = Vec::new();
        for i in 0..spec.taskmanagers {
            let name = format!("taskmanager-{i}");
            let host = spec
                .placement
                .as_ref()
                .map(|p| {
                    p.taskmanagers
                        .get(i as usize)
                        .cloned()
                        .with_context(|| format!("the placement has no host for {name}"))
                })
                .transpose()?;
            let mut args = vec![
                "taskmanager".to_string(),
                "--jobmanager".into(),
                service.clone(),
                "--slots".into(),
                spec.slots.to_string(),
                "--id".into(),
                name.clone(),
                "--data-dir".into(),
                spec.work_dir.join(&name).display().to_string(),
            ];
            args.extend(properties.iter().cloned());
            if let Some(host) = &host {
                args.extend([
                    "--bind".into(),
                    format!("{}:0", host.ip),
                    "--advertise-host".into(),
                    host.ip.clone(),
                ]);
            }
            let (tm, out) = spawn(&exe, &spec.env, host.as_ref(), &name, &args, &log_dir)?;
            cluster.processes.push(tm);
            cluster.taskmanager_args.push((name.clone(), args));
            cluster.taskmanager_hosts.push(host);
            outs.push((name, out));
        }
        for (name, out) in outs {
            first_line(out, &name, &log_dir)?;
        }
        Ok(cluster)
    }

    /// How the JobManager ended, if it did.
    pub fn jobmanager_exited(&mut self) -> Option<std::process::ExitStatus> {
        let jm = self.processes.iter_mut().find(|p| p.name == "jobmanager")?;
        jm.child.try_wait().ok().flatten()
    }

    /// Starts the JobManager again on the same ports (TaskManagers reconnect to it on their own).
    /// Its log goes to `jobmanager-{n}.log`.
    pub fn restart_jobmanager(&mut self) -> anyhow::Result<()> {
        self.processes.retain(|p| p.name != "jobmanager");
        self.jobmanager_starts += 1;
        let mut args = self.jobmanager_args.clone();
        for (flag, address) in [
            ("--rpc-address", &self.rpc_address),
            ("--rest-address", &self.rest_address),
        ] {
            if let Some(i) = args.iter().position(|a| a == flag) {
                args[i + 1] = address.clone();
            }
        }
        let log_name = format!("jobmanager-{}", self.jobmanager_starts);
        let (mut jm, out) = spawn(
            &self.exe,
            &self.env,
            self.jobmanager_host.as_ref(),
            &log_name,
            &args,
            &self.log_dir,
        )?;
        jm.name = "jobmanager".into();
        self.processes.insert(0, jm);
        first_line(out, &log_name, &self.log_dir)?;
        Ok(())
    }

    /// Starts another JobManager on `host` while the current one may still run (one that looks
    /// dead to its supervisor: cut off by a partition), as Kubernetes starts a replacement pod for
    /// one on an unreachable node. The new one takes the next leader epoch; the old one is kept
    /// as `jobmanager-old-{n}` (never restarted, killed at shutdown) and must notice it was
    /// fenced. The REST and RPC addresses become the new JobManager's.
    pub fn take_over_jobmanager(&mut self, host: Host) -> anyhow::Result<()> {
        if let Some(old) = self.processes.iter_mut().find(|p| p.name == "jobmanager") {
            old.name = format!("jobmanager-old-{}", self.jobmanager_starts);
        }
        self.rpc_address = format!("{}:{JOBMANAGER_RPC_PORT}", host.ip);
        self.rest_address = format!("{}:{JOBMANAGER_REST_PORT}", host.ip);
        self.jobmanager_host = Some(host);
        self.restart_jobmanager()
    }

    /// The JobManager's process id (tests kill it).
    pub fn jobmanager_pid(&self) -> Option<u32> {
        self.processes
            .iter()
            .find(|p| p.name == "jobmanager")
            .map(|p| p.child.id())
    }

    /// Process ids of the TaskManagers, by index (tests kill one); a restarted one has its new id.
    pub fn taskmanager_pids(&self) -> Vec<u32> {
        self.taskmanager_args
            .iter()
            .filter_map(|(name, _)| self.processes.iter().find(|p| &p.name == name))
            .map(|p| p.child.id())
            .collect()
    }

    /// Kills TaskManager `index` (if it still runs) and starts a new process under its id and data
    /// directory, as a pod's container restarts; returns once it registered. Its log goes to
    /// `taskmanager-{index}.{n}.log`.
    pub fn restart_taskmanager(&mut self, index: usize) -> anyhow::Result<()> {
        let (name, args) = self
            .taskmanager_args
            .get(index)
            .with_context(|| format!("no TaskManager {index}"))?
            .clone();
        if let Some(i) = self.processes.iter().position(|p| p.name == name) {
            let mut old = self.processes.remove(i);
            let _ = old.child.kill();
            let _ = old.child.wait();
        }
        self.starts += 1;
        let log_name = format!("{name}.{}", self.starts);
        let host = self.taskmanager_hosts.get(index).cloned().flatten();
        let (mut tm, out) = spawn(
            &self.exe,
            &self.env,
            host.as_ref(),
            &log_name,
            &args,
            &self.log_dir,
        )?;
        tm.name = name;
        self.processes.push(tm);
        first_line(out, &log_name, &self.log_dir)?;
        Ok(())
    }

    /// Names of the children that exited on their own (`jobmanager`, `taskmanager-{i}`); a
    /// JobManager that was taken over is not among them.
    pub fn exited(&mut self) -> Vec<String> {
        self.processes
            .iter_mut()
            .filter(|p| !p.name.starts_with("jobmanager-old-"))
            .filter_map(|p| p.child.try_wait().ok().flatten().map(|_| p.name.clone()))
            .collect()
    }

    /// Restarts every child that exited on its own, as a supervisor (Kubernetes) would, and
    /// returns their names with each restart's outcome (one that failed is tried again by the
    /// next call, which finds it still exited).
    pub fn restart_exited(&mut self) -> Vec<(String, anyhow::Result<()>)> {
        self.exited()
            .into_iter()
            .map(|name| {
                let restarted = if name == "jobmanager" {
                    self.restart_jobmanager()
                } else {
                    match name.trim_start_matches("taskmanager-").parse() {
                        Ok(index) => self.restart_taskmanager(index),
                        Err(_) => Err(anyhow::anyhow!("not a child this cluster restarts: {name}")),
                    }
                };
                (name, restarted)
            })
            .collect()
    }

    /// Process ids of JobManagers that were taken over and still run.
    pub fn old_jobmanager_pids(&mut self) -> Vec<u32> {
        self.processes
            .iter_mut()
            .filter(|p| p.name.starts_with("jobmanager-old-"))
            .filter_map(|p| p.child.try_wait().ok().flatten().is_none().then(|| p.child.id()))
            .collect()
    }

    /// Kills every child and waits for it.
    pub fn shutdown(&mut self) {
        for p in self.processes.iter_mut().rev() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        self.processes.clear();
    }
}

/// `--rpc-address A --rest-address B` of a JobManager: ports picked on loopback, or Flink's
/// default ports on a host of its own.
fn jobmanager_addresses(host: Option<&Host>) -> Vec<String> {
    let (rpc, rest) = match host {
        Some(h) => (
            format!("{}:{JOBMANAGER_RPC_PORT}", h.ip),
            format!("{}:{JOBMANAGER_REST_PORT}", h.ip),
        ),
        None => ("127.0.0.1:0".to_string(), "127.0.0.1:0".to_string()),
    };
    vec!["--rpc-address".into(), rpc, "--rest-address".into(), rest]
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}
