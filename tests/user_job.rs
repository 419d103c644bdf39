//! A user's own job in a crate of its own (issue 15): `examples/user-job` is built as a user builds
//! it (its own Cargo.toml, Floe by path) and run through its own binary with `floe run -f`, its
//! output compared with a reference computed here from the same input. Its binary lists its job
//! with the declared arguments, refuses a wrong argument naming it, and a TaskManager of another
//! build (the plain `floe` binary, which does not have the job) is refused its deployment.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn user(args: &[&str]) -> std::process::Output {
    Command::new(user_job_binary()).args(args).output().unwrap()
}

/// Seeded visits `user,page,millis` and the per-user result computed here: visits, total millis,
/// the longest visit's page (the first in page order on a tie) and millis.
fn visits(path: &Path, lines: usize) -> BTreeMap<String, (u64, u64, String, u64)> {
    let mut x: u64 = 0x5eed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pages = ["/", "/pricing", "/docs", "/docs/api", "/blog", "/signup"];
    let mut text = String::new();
    let mut reference: BTreeMap<String, (u64, u64, String, u64)> = BTreeMap::new();
    for _ in 0..lines {
        let user = format!("user{:03}", next() % 300);
        let page = pages[(next() % pages.len() as u64) as usize];
        let millis = next() % 5_000;
        text.push_str(&format!("{user},{page},{millis}\n"));
        let e = reference.entry(user).or_insert((0, 0, String::new(), 0));
        e.0 += 1;
        e.1 += millis;
        if e.0 == 1 || millis > e.3 || (millis == e.3 && page < e.2.as_str()) {
            e.2 = page.to_string();
            e.3 = millis;
        }
    }
    std::fs::write(path, text).unwrap();
    reference
}

fn manifest(dir: &Path, input: &Path, out: &Path, extra_args: &[&str], conf: &[(&str, &str)]) -> PathBuf {
    let mut args = vec![
        "--input".to_string(),
        input.display().to_string(),
        "--output".into(),
        out.display().to_string(),
    ];
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let conf: String = conf.iter().map(|(k, v)| format!("    {k}: \"{v}\"\n")).collect();
    let text = format!(
        "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: user-visits }}\nspec:\n  \
         image: floe-user-job:0.1.0\n  job:\n    name: user-visits\n    args: {args:?}\n    parallelism: 2\n    \
         mode: streaming\n    state: running\n    upgradeMode: stateless\n  taskManager: {{ replicas: 2, slots: 1 }}\n  \
         storage: {{ url: \"file://{}\" }}\n  configuration:\n    execution.checkpointing.interval: \"1 s\"\n{conf}",
        dir.join("storage").display()
    );
    let path = dir.join("user-visits.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_users_job_runs_through_its_own_binary_and_matches_the_reference() {
    let dir = scratch("user-job");
    let input = dir.join("visits.csv");
    let reference = visits(&input, 40_000);
    let out = dir.join("out");
    let manifest = manifest(&dir, &input, &out, &["--min-visits", "2"], &[]);
    let result = Command::new(user_job_binary())
        .args(["run", "-f"])
        .arg(&manifest)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "floe-user-job run failed\n{stdout}\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(stdout.contains(" FINISHED in "), "{stdout}");
    let mut got = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap().flatten() {
        if !entry.file_name().to_string_lossy().starts_with("part-") {
            continue;
        }
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 5, "user, visits, total, page, millis: {line:?}");
            let row = (
                f[1].parse::<u64>().unwrap(),
                f[2].parse::<u64>().unwrap(),
                f[3].to_string(),
                f[4].parse::<u64>().unwrap(),
            );
            assert!(
                got.insert(f[0].to_string(), row).is_none(),
                "{} written twice",
                f[0]
            );
        }
    }
    let expected: BTreeMap<_, _> = reference.into_iter().filter(|(_, r)| r.0 >= 2).collect();
    assert_eq!(got.len(), expected.len(), "users written");
    assert_eq!(got, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn its_binary_lists_its_job_and_refuses_a_wrong_argument_naming_it() {
    let jobs = user(&["jobs"]);
    let listed = String::from_utf8_lossy(&jobs.stdout);
    assert!(jobs.status.success(), "{listed}");
    assert!(
        listed.contains("user-visits: page visits per user")
            && listed.contains("--min-visits")
            && listed.contains("integer >= 1 (default 1)"),
        "{listed}"
    );
    assert!(listed.contains("wordcount:"), "Floe's own jobs stay: {listed}");

    let dir = scratch("user-job-bad-arg");
    let input = dir.join("visits.csv");
    visits(&input, 10);
    let bad = manifest(&dir, &input, &dir.join("out"), &["--min-visits", "0"], &[]);
    let run = user(&["run", "-f", bad.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{said}");
    assert!(
        said.contains("--min-visits")
            && said.contains("expected integer >= 1, got \"0\"")
            && said.contains("user-visits"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_taskmanager_of_another_build_is_refused() {
    let dir = scratch("user-job-other-build");
    let input = dir.join("visits.csv");
    visits(&input, 100);
    let manifest = manifest(
        &dir,
        &input,
        &dir.join("out"),
        &[],
        &[("restart-strategy.type", "none")],
    );
    // The JobManager of the user's build; a TaskManager of Floe's own binary (the plain worker
    // image), which has no job `user-visits`.
    let log = dir.join("jobmanager.log");
    let mut jm = Command::new(user_job_binary())
        .args([
            "jobmanager",
            "--rpc-address",
            "127.0.0.1:0",
            "--rest-address",
            "127.0.0.1:0",
        ])
        .arg("--job-file")
        .arg(&manifest)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(jm.stdout.take().unwrap()), &mut line).unwrap();
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {line:?}"))
            .to_string()
    };
    let (rpc, rest) = (field("rpc="), field("rest="));
    let jm = processes::Proc(jm);
    let _tms = [processes::taskmanager(&rpc, 1), processes::taskmanager(&rpc, 1)];
    let job = processes::wait_job(&rest, Duration::from_secs(60), |j| {
        j["state"] == "FAILED" || j["state"] == "FINISHED"
    });
    assert_eq!(job["state"], "FAILED", "{job}");
    let cause = job.to_string();
    assert!(
        cause.contains("cannot build job 'user-visits'"),
        "the refusal names the job: {cause}"
    );
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `floe new` (issue 34, item 6): the crate it makes builds with the lock file it ships
/// (`--locked`), its own test passes, and the README's command (`cargo run -- run -f job.yaml`,
/// here its binary with the same arguments in the crate's directory) counts the sample input's
/// words as a count made here does. A name Cargo would refuse is refused first, naming it.
#[test]
fn floe_new_makes_a_crate_whose_job_runs_and_whose_test_passes() {
    let started = std::time::Instant::now();
    let dir = scratch("floe-new");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bad = Command::new(FLOE)
        .args(["new", "My Job", "--dir"])
        .arg(dir.join("bad"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("NAME \"My Job\": expected a package name"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let crate_dir = dir.join("word-job");
    let made = Command::new(FLOE)
        .args(["new", "word-job", "--dir"])
        .arg(&crate_dir)
        .arg("--floe-path")
        .arg(repo.join("runtime/cli"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // <target>/debug/deps/user_job-HASH -> <target>: the build shares this build's artifacts.
    let target = std::env::current_exe()
        .unwrap()
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf();
    let test = Command::new(env!("CARGO"))
        .args(["test", "--locked", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let test_out = String::from_utf8_lossy(&test.stdout);
    assert!(
        test.status.success() && test_out.contains("test the_job_counts_every_word ... ok"),
        "{test_out}\n{}",
        String::from_utf8_lossy(&test.stderr)
    );
    let run = Command::new(target.join("debug/word-job"))
        .args(["run", "-f", "job.yaml", "--work-dir"])
        .arg(dir.join("work"))
        .current_dir(&crate_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains(" FINISHED in "),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(crate_dir.join("data/input.txt")).unwrap();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        *expected.entry(word.to_lowercase()).or_default() += 1;
    }
    let got: BTreeMap<String, u64> = common::output_lines(&crate_dir.join("out/counts"))
        .into_iter()
        .collect();
    assert_eq!(got, expected);
    println!(
        "floe new -> cargo test --locked (build + its test) -> run -f job.yaml FINISHED: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
