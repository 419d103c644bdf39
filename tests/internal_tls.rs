//! Internal RPC over mutual TLS (issue 13, item 12), with certificates this test makes with the
//! `openssl` command: a CA, and a certificate it signed for the name `floe-internal`, as a
//! cert-manager `Certificate` would put them in a Secret (`tls.crt`, `tls.key`, `ca.crt`).
//! 1. WordCount under `floe run` with Flink's `security.ssl.internal.*` keys: every JobManager <->
//!    TaskManager call and every shuffle stream goes over TLS; the output equals the reference.
//! 2. A TaskManager without a certificate, or with one another CA signed, cannot register with
//!    such a JobManager (it gives up after its registration timeout, exit 1); one with the job's
//!    certificate can.
//!
//! Needs `openssl`; where it is missing the tests are reported as ignored with `SKIPPED`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

/// `tls.crt`, `tls.key` and `ca.crt` in `dir`: a CA and a certificate it signed for
/// `floe-internal`.
fn certificates(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=floe-test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
        "-subj",
        "/CN=floe-internal",
    ]);
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:floe-internal\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
}

/// The `security.ssl.internal.*` configuration for the files in `dir`.
fn tls_conf(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("security.ssl.internal.enabled".into(), "true".into()),
        (
            "security.ssl.internal.keystore".into(),
            dir.join("tls.crt").display().to_string(),
        ),
        (
            "security.ssl.internal.key".into(),
            dir.join("tls.key").display().to_string(),
        ),
        (
            "security.ssl.internal.truststore".into(),
            dir.join("ca.crt").display().to_string(),
        ),
    ]
}

fn wordcount_over_tls() -> Result<(), Failed> {
    let dir = common::scratch("internal-tls-wordcount");
    let certs = dir.join("certs");
    certificates(&certs);
    let input = dir.join("words.txt");
    floe::generate::write_words(&input, 4 << 20, 11).unwrap();
    let reference = common::reference_count(&input);
    let conf = tls_conf(&certs);
    let conf: Vec<(&str, &str)> = conf.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let output = dir.join("out");
    let manifest = common::wordcount_manifest(&dir, &input, &output, "batch", 4, 2, 2, &conf);
    common::floe_run_ok(&manifest, &dir.join("work"))?;
    common::assert_batch_output(&output, &reference);
    // The JobManager's RPC port speaks TLS only: its log says so.
    let log = std::fs::read_to_string(dir.join("work/logs/jobmanager.log")).unwrap_or_default();
    assert!(log.contains("internal RPC over mutual TLS"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A TaskManager of `floe taskmanager` with `-D` properties `conf`, giving up registering after
/// 3 s; its exit status and output.
fn taskmanager(rpc: &str, conf: &[(String, String)], dir: &Path) -> (bool, String) {
    let mut args = vec![
        "taskmanager".to_string(),
        "--jobmanager".into(),
        rpc.into(),
        "--slots".into(),
        "1".into(),
        "--registration-timeout-s".into(),
        "3".into(),
        "--data-dir".into(),
        dir.join("tm").display().to_string(),
    ];
    for (k, v) in conf {
        args.push(format!("-D{k}={v}"));
    }
    let out = Command::new(common::FLOE)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn only_holders_of_the_jobs_certificate_register() -> Result<(), Failed> {
    let dir = common::scratch("internal-tls-refusals");
    let certs = dir.join("certs");
    certificates(&certs);
    let other = dir.join("other");
    certificates(&other);
    let conf = tls_conf(&certs);
    let mut jm_args: Vec<String> = vec![
        "jobmanager".into(),
        "--rpc-address".into(),
        "127.0.0.1:0".into(),
        "--rest-address".into(),
        "127.0.0.1:0".into(),
        "--exit-on-stdin-eof".into(),
    ];
    jm_args.extend(conf.iter().map(|(k, v)| format!("-D{k}={v}")));
    let mut jm = Command::new(common::FLOE)
        .args(&jm_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = jm.stdout.take().unwrap();
    let line = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .next()
        .unwrap()
        .unwrap();
    let rpc = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("rpc="))
        .unwrap()
        .to_string();
    let rest = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("rest="))
        .unwrap()
        .to_string();
    let started = Instant::now();
    let (ok, said) = taskmanager(&rpc, &[], &dir.join("plain"));
    assert!(!ok, "a TaskManager without TLS registered: {said}");
    let (ok, said) = taskmanager(&rpc, &tls_conf(&other), &dir.join("other-ca"));
    assert!(
        !ok,
        "a TaskManager with another CA's certificate registered: {said}"
    );
    let (_, tms) = common::http("GET", &rest, "/taskmanagers");
    assert_eq!(tms["taskmanagers"].as_array().unwrap().len(), 0, "{tms}");
    // The job's own certificate gets in (the TaskManager runs until stopped: it registered).
    let mut args = vec![
        "taskmanager".to_string(),
        "--jobmanager".into(),
        rpc.clone(),
        "--slots".into(),
        "1".into(),
        "--exit-on-stdin-eof".into(),
        "--data-dir".into(),
        dir.join("tm-ok").display().to_string(),
    ];
    args.extend(conf.iter().map(|(k, v)| format!("-D{k}={v}")));
    let mut tm = Command::new(common::FLOE)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let registered = loop {
        let (_, tms) = common::http("GET", &rest, "/taskmanagers");
        let n = tms["taskmanagers"].as_array().map_or(0, Vec::len);
        if n == 1 || started.elapsed() > Duration::from_secs(30) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = tm.kill();
    let _ = jm.kill();
    let _ = (tm.wait(), jm.wait());
    assert_eq!(
        registered, 1,
        "the TaskManager with the job's certificate registered"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let openssl = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !openssl {
        eprintln!("SKIPPED: internal TLS (no openssl command to make the test's certificates)");
    }
    let trials = vec![
        Trial::test("wordcount_over_tls", wordcount_over_tls),
        Trial::test(
            "only_holders_of_the_jobs_certificate_register",
            only_holders_of_the_jobs_certificate_register,
        ),
    ];
    let trials = trials
        .into_iter()
        .map(|t| t.with_ignored_flag(!openssl))
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
