//! How long a new JobManager takes to take over a job's operation log: take the next epoch, seal the
//! old one and replay it, for logs of 100 and 1,000 finished executions (one entry each, as the
//! JobManager appends them), on local disk and on S3 (moto, when installed). Prints figures; the
//! ratio 1,000/100 shows how replay grows with the log.
//!
//! `cargo bench -p floe-oplog --bench replay`
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Instant;

use floe_oplog::OperationLog;
use floe_storage::ObjectStore;
use floe_storage::testing::MotoServer;
use serde_json::{Value, json};

fn event(i: u32) -> Value {
    json!({
        "event": "execution_finished",
        "job_id": "3f0c5d7e9a1b2c4d6e8f0a1b2c3d4e5f",
        "vertex": i % 3,
        "subtask": i,
        "attempt": 0,
        "produced": [[4096, 4096, 4096, 4096]],
        "time_ms": 1_796_000_000_000u64 + u64::from(i),
    })
}

/// (append entries/s, takeover seconds) for a log of `n` entries.
async fn measure(store: ObjectStore, n: u32) -> (f64, f64) {
    let (mut log, _) = OperationLog::acquire::<Value>(store.clone(), "writer")
        .await
        .unwrap();
    let started = Instant::now();
    for i in 0..n {
        log.append(&[event(i)]).await.unwrap();
    }
    let append_rate = f64::from(n) / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (_, replayed) = OperationLog::acquire::<Value>(store, "successor").await.unwrap();
    let takeover = started.elapsed().as_secs_f64();
    assert_eq!(replayed.events.len(), n as usize);
    (append_rate, takeover)
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = std::env::temp_dir().join(format!("floe-oplog-bench-{}", std::process::id()));
    let moto = MotoServer::for_tests("s3 figures", "floe-bench");
    println!(
        "{:<8} {:>8} {:>16} {:>14}",
        "storage", "entries", "append entries/s", "takeover ms"
    );
    let mut takeovers: BTreeMap<(&str, u32), f64> = BTreeMap::new();
    for n in [100u32, 1000] {
        let file = ObjectStore::open(&format!("file://{}/n{n}", dir.display()), &BTreeMap::new()).unwrap();
        let mut stores = vec![("file", file)];
        if let Some(m) = &moto {
            stores.push((
                "s3",
                ObjectStore::open(&m.url(&format!("n{n}")), &m.conf()).unwrap(),
            ));
        }
        for (name, store) in stores {
            let (rate, takeover) = rt.block_on(measure(store, n));
            println!("{name:<8} {n:>8} {rate:>16.0} {:>14.1}", takeover * 1e3);
            takeovers.insert((name, n), takeover);
        }
    }
    for name in ["file", "s3"] {
        if let (Some(a), Some(b)) = (takeovers.get(&(name, 100)), takeovers.get(&(name, 1000))) {
            println!("{name}: takeover time 1000 entries / 100 entries = {:.1}x", b / a);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
