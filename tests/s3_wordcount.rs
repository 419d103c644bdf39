//! WordCount with input and output in S3 (a local moto server): the job reads `s3://` through the same
//! object-storage wrapper the operation log uses, writes part files there, and the result equals the
//! independent reference count. Reported as ignored with `SKIPPED` where `moto_server` is missing,
//! unless `FLOE_REQUIRE_MOTO` is set (`.ci/run` sets it).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;

use floe_storage::ObjectStore;
use floe_storage::testing::MotoServer;
use libtest_mimic::{Arguments, Failed, Trial};

/// Every `word<TAB>count` line of the part files under `out/` in the bucket.
fn s3_output(store: &ObjectStore, rt: &tokio::runtime::Runtime) -> Vec<(String, u64)> {
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

fn wordcount_on_s3(server: &MotoServer, mode: &str, parallelism: u32, mib: u64) -> Result<(), Failed> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = common::scratch(&format!("s3-{mode}"));
    let local = dir.join("words.txt");
    floe::generate::write_words(&local, mib << 20, 99).unwrap();
    let reference = common::reference_count(&local);
    let data = ObjectStore::open(&server.url(mode), &server.conf()).unwrap();
    rt.block_on(data.put("in/words.txt", std::fs::read(&local).unwrap()))
        .unwrap();
    let conf: Vec<(&str, &str)> = vec![
        ("s3.endpoint", &server.endpoint),
        ("s3.region", "us-east-1"),
        ("s3.access-key", "test"),
        ("s3.secret-key", "test"),
    ];
    let input = server.url(&format!("{mode}/in/words.txt"));
    let output = server.url(&format!("{mode}/out"));
    let manifest = common::wordcount_manifest(
        &dir,
        std::path::Path::new(&input),
        std::path::Path::new(&output),
        mode,
        parallelism,
        2,
        2,
        &conf,
    );
    let out = common::floe_run(&manifest, &dir.join("work"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "floe run failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    assert!(stdout.contains("FINISHED"), "{stdout}");
    let lines = s3_output(&data.scoped("out"), &rt);
    match mode {
        "batch" => {
            let got: HashMap<String, u64> = lines.into_iter().collect();
            assert_eq!(got, reference);
        }
        _ => {
            let total: u64 = reference.values().sum();
            assert_eq!(lines.len() as u64, total, "one update per input word");
            let mut last: HashMap<String, u64> = HashMap::new();
            for (w, c) in lines {
                let e = last.entry(w).or_insert(0);
                *e = (*e).max(c);
            }
            assert_eq!(last, reference);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let server = MotoServer::for_tests("s3 wordcount", "floe-data");
    let trials = [("batch", 4, 12), ("streaming", 2, 2)]
        .into_iter()
        .map(|(mode, p, mib)| {
            let server = server.clone();
            let missing = server.is_none();
            Trial::test(format!("wordcount_{mode}_p{p}_on_s3"), move || {
                let server = server.as_ref().ok_or("moto_server not found")?;
                wordcount_on_s3(server, mode, p, mib)
            })
            .with_ignored_flag(missing)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
