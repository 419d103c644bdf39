//! Issue item 8: how long a JobManager takes to take over a job's operation log (take the next
//! epoch, seal the old one, replay it and fold it into jobs) after a long run of completed
//! checkpoints, one append each as the JobManager logs them: without compaction (every append an
//! object, read one by one) and with it (the log compacted every `COMPACT_EVERY` appends, as the
//! JobManager does: a snapshot and the entries after it). Also what it takes a first leader to
//! compact a log written without compaction (the snapshot, then deleting what it covers). On local
//! files; with `--s3`, also on S3 (moto, when installed: slow, keep `--appends` small there).
//!
//! `cargo bench --bench oplog_compaction -- --appends 300000` (default 20,000 appends: the issue's
//! figure is 300,000, some 35 days of 10 s checkpoints).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Instant;

use floe_jobmanager::oplog::{COMPACT_EVERY, Event, compact, jobs_of};
use floe_oplog::OperationLog;
use floe_storage::ObjectStore;
use floe_storage::testing::MotoServer;

const JOB: &str = "3f0c5d7e9a1b2c4d6e8f0a1b2c3d4e5f";

fn start() -> Vec<Event> {
    vec![
        Event::JobSubmitted {
            job_id: JOB.into(),
            name: "nexmark-q5".into(),
            args: vec!["--events".into(), "unbounded".into()],
            configuration: BTreeMap::from([
                ("execution.checkpointing.interval".to_string(), "10 s".to_string()),
                ("execution.runtime-mode".to_string(), "STREAMING".to_string()),
            ]),
            deployment: "6a1c0f2e-uid/1#0123456789abcdef".into(),
            time_ms: 1_796_000_000_000,
        },
        Event::JobStatusChanged {
            job_id: JOB.into(),
            status: "RUNNING".into(),
            failure: None,
            time_ms: 1_796_000_000_500,
        },
    ]
}

fn checkpoint(n: u64) -> Event {
    Event::CheckpointCompleted {
        job_id: JOB.into(),
        checkpoint: n,
        time_ms: 1_796_000_000_000 + n * 10_000,
    }
}

/// Writes a log of `appends` entries (the job's start, then completed checkpoints, one an append),
/// compacting as the JobManager does if `compacted`. Returns appends per second.
async fn write(store: &ObjectStore, appends: u64, compacted: bool) -> f64 {
    let (mut log, _) = OperationLog::acquire::<Event>(store.clone(), "writer")
        .await
        .unwrap();
    let started = Instant::now();
    let mut history = start();
    log.append(&history).await.unwrap();
    let mut deletions = Vec::new();
    for n in 1..appends {
        let e = checkpoint(n);
        log.append(std::slice::from_ref(&e)).await.unwrap();
        history.push(e);
        if compacted && log.appends_since_snapshot() >= COMPACT_EVERY {
            let snapshot = compact(&history);
            let compaction = log.compact(&snapshot).await.unwrap();
            history = snapshot;
            // As the JobManager does: deleted on a task of its own while appends go on.
            deletions.push(tokio::spawn(compaction.run()));
        }
    }
    let rate = appends as f64 / started.elapsed().as_secs_f64();
    for d in deletions {
        d.await.unwrap().unwrap();
    }
    rate
}

/// Objects under the log's prefix.
async fn objects(store: &ObjectStore) -> usize {
    let mut n = store.list("leader").await.unwrap().len() + store.list("snapshot").await.unwrap().len();
    for epoch in store.list("oplog").await.unwrap() {
        n += store.list(&format!("oplog/{epoch}")).await.unwrap().len();
    }
    n
}

/// A JobManager taking over a log of `appends` (its last checkpoint `appends - 1`): acquire (seal
/// and replay) and fold into jobs. Returns the seconds it took, the log and the replayed events.
async fn take_over(store: &ObjectStore, appends: u64) -> (f64, OperationLog, Vec<Event>) {
    let started = Instant::now();
    let (log, replayed) = OperationLog::acquire::<Event>(store.clone(), "successor")
        .await
        .unwrap();
    let jobs = jobs_of(&replayed.events);
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        jobs[0].checkpoint,
        Some(appends - 1),
        "the whole log was replayed"
    );
    (seconds, log, replayed.events)
}

fn appends_arg() -> (u64, bool) {
    let args: Vec<String> = std::env::args().collect();
    let appends = args
        .iter()
        .position(|a| a == "--appends")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.replace(['_', ','], "").parse().expect("--appends N"))
        .unwrap_or(20_000);
    (appends, args.iter().any(|a| a == "--s3"))
}

fn main() {
    let (appends, s3) = appends_arg();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = std::env::temp_dir().join(format!("floe-oplog-compaction-{}", std::process::id()));
    let moto = if s3 {
        MotoServer::for_tests("s3 figures", "floe-bench")
    } else {
        None
    };
    let mut stores = vec![(
        "file",
        ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap(),
    )];
    if let Some(m) = &moto {
        stores.push(("s3", ObjectStore::open(&m.url("compaction"), &m.conf()).unwrap()));
    }
    println!(
        "{appends} appends (the job's start, then one completed checkpoint each); compaction every {COMPACT_EVERY}"
    );
    for (name, store) in stores {
        rt.block_on(async {
            let plain = store.scoped("plain");
            let rate = write(&plain, appends, false).await;
            println!("{name}: wrote {appends} appends without compaction, {rate:.0} appends/s");
            let (before, mut log, events) = take_over(&plain, appends).await;
            println!(
                "{name}: takeover without compaction: {:.3} s ({appends} objects read)",
                before
            );
            // The first leader that compacts a log written without compaction.
            let started = Instant::now();
            let compaction = log.compact(&compact(&events)).await.unwrap();
            let snapshot_s = started.elapsed().as_secs_f64();
            let started = Instant::now();
            let deleted = compaction.run().await.unwrap();
            println!(
                "{name}: compacting it: snapshot {:.3} s, deleting the {deleted} objects it covers {:.1} s",
                snapshot_s,
                started.elapsed().as_secs_f64()
            );
            let (migrated, _, _) = take_over(&plain, appends).await;
            println!("{name}: takeover after that compaction: {migrated:.3} s");

            let compacted = store.scoped("compacted");
            let rate = write(&compacted, appends, true).await;
            println!(
                "{name}: wrote {appends} appends compacting as the JobManager does, {rate:.0} appends/s"
            );
            let left = objects(&compacted).await;
            let (after, mut log, _) = take_over(&compacted, appends).await;
            println!("{name}: takeover with compaction: {after:.3} s ({left} objects in the log)");
            // The most a compacted log holds: one entry short of its next compaction.
            let worst_case = appends + COMPACT_EVERY - 1;
            for n in appends..worst_case {
                log.append(&[checkpoint(n)]).await.unwrap();
            }
            let (worst, _, _) = take_over(&compacted, worst_case).await;
            println!(
                "{name}: takeover with compaction, {} entries after the snapshot: {worst:.3} s",
                COMPACT_EVERY - 1
            );
            println!(
                "{name}: takeover time without / with compaction = {:.0}x ({before:.3} s / {after:.3} s); \
                 {:.0}x one entry short of the next compaction ({worst:.3} s)",
                before / after,
                before / worst
            );
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}
