//! WordCount with input and output in S3 (a local moto server): the job reads `s3://` through the same
//! object-storage wrapper the operation log uses, writes part files there, and the result equals the
//! independent reference count. Reported as ignored with `SKIPPED` where `moto_server` is missing,
//! unless `FLOE_REQUIRE_MOTO` is set (`.ci/run` sets it).
#![allow(clippy::unwrap_used)]

mod common;

use floe_storage::ObjectStore;
use floe_storage::testing::MotoServer;
use libtest_mimic::{Arguments, Failed, Trial};

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
    let stdout = common::floe_run_ok(&manifest, &dir.join("work"))?;
    assert!(stdout.contains("FINISHED"), "{stdout}");
    let lines = common::s3_output(&data.scoped("out"), &rt);
    match mode {
        "batch" => common::assert_batch_lines(lines, &reference),
        _ => common::assert_streaming_lines(lines, &reference),
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
