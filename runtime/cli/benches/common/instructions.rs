//! Instructions a job costs, counted by valgrind's cachegrind: for the same build and input the
//! count repeats to within a few hundredths of a percent whatever else a shared machine is doing,
//! where the wall and CPU times of two back-to-back runs differ by 10-20% there. It is how a change
//! on a hot path is held to "within N% of before" (wall time cannot see 3% here).
//!
//! The job runs as the operator runs it: a JobManager in application mode (`--job-file`) and one
//! TaskManager, each under cachegrind. `floe run` cannot be used: it ends its children with
//! SIGKILL, and a process killed so writes no counts. These exit on stdin's end of file instead.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether valgrind can be run.
pub fn valgrind_available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Instructions the JobManager and the TaskManager of `exe` execute to run the job of `manifest`
/// (one TaskManager with `slots` slots) from start to their exit after the job FINISHED. `work` is
/// emptied and holds their logs, the TaskManager's data and the counts.
pub fn count_instructions(exe: &Path, manifest: &Path, slots: u32, work: &Path) -> u64 {
    let _ = std::fs::remove_dir_all(work);
    let counts = work.join("cachegrind");
    std::fs::create_dir_all(&counts).expect("work directory");
    let rpc = free_address();
    let rest = free_address();
    let start = |name: &str, args: Vec<String>| -> Child {
        let log = std::fs::File::create(work.join(format!("{name}.log"))).expect("log file");
        Command::new("valgrind")
            .args(["--tool=cachegrind", "--cache-sim=no", "-q"])
            .arg(format!("--cachegrind-out-file={}/%p.out", counts.display()))
            .arg(exe)
            .args(args)
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("valgrind starts")
    };
    let mut jobmanager = start(
        "jobmanager",
        vec![
            "jobmanager".into(),
            "--rpc-address".into(),
            rpc.clone(),
            "--rest-address".into(),
            rest.clone(),
            "--job-file".into(),
            manifest.display().to_string(),
        ],
    );
    let mut taskmanager = start(
        "taskmanager",
        vec![
            "taskmanager".into(),
            "--jobmanager".into(),
            rpc,
            "--slots".into(),
            slots.to_string(),
            "--id".into(),
            "taskmanager-0".into(),
            "--data-dir".into(),
            work.join("taskmanager-0").display().to_string(),
        ],
    );
    // Under cachegrind a job runs some 40 times slower than natively.
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let jobs = http_get(&rest, "/jobs").unwrap_or_default();
        if jobs.contains("\"FINISHED\"") {
            break;
        }
        for state in ["\"FAILED\"", "\"CANCELED\""] {
            assert!(
                !jobs.contains(state),
                "the job ended {state} under cachegrind (logs in {})",
                work.display()
            );
        }
        for (name, child) in [("JobManager", &mut jobmanager), ("TaskManager", &mut taskmanager)] {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "the {name} exited ({status}) before the job finished (logs in {})",
                    work.display()
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "the job did not finish in 30 minutes under cachegrind (logs in {})",
            work.display()
        );
    }
    // Closing their stdin makes both exit normally, and cachegrind writes its counts.
    for child in [&mut jobmanager, &mut taskmanager] {
        drop(child.stdin.take());
        let status = child.wait().expect("wait");
        assert!(status.success(), "exited {status} (logs in {})", work.display());
    }
    let mut total = 0;
    let mut files = 0;
    for entry in std::fs::read_dir(&counts).expect("counts").flatten() {
        let text = std::fs::read_to_string(entry.path()).expect("cachegrind output");
        let summary = text
            .lines()
            .find_map(|l| l.strip_prefix("summary:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("cachegrind's summary line");
        total += summary;
        files += 1;
    }
    assert_eq!(files, 2, "one count per process expected in {}", counts.display());
    total
}

/// A loopback address no one listens on now.
fn free_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").to_string()
}

/// The body of `GET path` from `address` (HTTP/1.0: the server closes after one response).
fn http_get(address: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_string()))
}
