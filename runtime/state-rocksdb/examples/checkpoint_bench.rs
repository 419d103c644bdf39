//! Checkpoint duration and bytes uploaded for RocksDB keyed state: a full checkpoint of ~1 GiB of
//! state (loaded, then compacted: a settled state), then an incremental one after 1% of the keys
//! changed, to `file://` storage. Prints figures
//! and the incremental/full ratios (measured in the same run; this machine is shared and noisy).
//!
//! `cargo test --workspace --no-run && $CARGO_TARGET_DIR/debug/examples/checkpoint_bench` (the test
//! build compiles examples, with the RocksDB it already built, at -O2 by the workspace's dependency
//! profile; `cargo build --examples` resolves features differently and would compile RocksDB again).
//! `FLOE_BENCH_STATE_MIB` sets the state size (default 1024).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Instant;

use floe_state::{KeyedStateBackend, SnapshotTarget};
use floe_state_rocksdb::RocksDbStateBackend;
use floe_storage::ObjectStore;

const VALUE_BYTES: usize = 1000;
const KEY_GROUPS: u32 = 128;

fn value(i: u64, round: u64) -> Vec<u8> {
    let mut x = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (round << 32);
    (0..VALUE_BYTES / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

#[tokio::main]
async fn main() {
    let state_mib: u64 = std::env::var("FLOE_BENCH_STATE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let keys = (state_mib << 20) / VALUE_BYTES as u64;
    let dir = std::env::temp_dir().join(format!("floe-checkpoint-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = ObjectStore::open(
        &format!("file://{}", dir.join("storage").display()),
        &BTreeMap::new(),
    )
    .unwrap();
    let target = |n: u64| SnapshotTarget {
        store: store.clone(),
        dir: format!("checkpoints/bench/chk-{n}/reduce-0"),
        shared: "checkpoints/bench/shared/reduce-0".into(),
    };
    let mut db = RocksDbStateBackend::open(&dir.join("task"), 0..KEY_GROUPS).unwrap();
    let started = Instant::now();
    for i in 0..keys {
        db.put(
            "count",
            (i % u64::from(KEY_GROUPS)) as u32,
            &i.to_be_bytes(),
            &value(i, 0),
        )
        .unwrap();
    }
    // A settled state, as in a job that has run for a while: the load's L0 files compacted away, so
    // the next flush is not the one that triggers a compaction rewriting every file.
    db.compact();
    let load = started.elapsed().as_secs_f64();
    println!(
        "state: {keys} keys x {VALUE_BYTES} B = {:.0} MiB written in {load:.1} s",
        mib(keys * VALUE_BYTES as u64)
    );

    let mut rows = Vec::new();
    for (n, label) in [(1u64, "full"), (2, "incremental (1% of keys changed)")] {
        if n == 2 {
            for i in (0..keys).step_by(100) {
                db.put(
                    "count",
                    (i % u64::from(KEY_GROUPS)) as u32,
                    &i.to_be_bytes(),
                    &value(i, 1),
                )
                .unwrap();
            }
        }
        let started = Instant::now();
        let prepared = db.prepare_snapshot(n).unwrap();
        let sync = started.elapsed().as_secs_f64();
        let snapshot = prepared.upload(&target(n)).await.unwrap();
        let total = started.elapsed().as_secs_f64();
        println!(
            "checkpoint {n} ({label}): {total:.2} s (synchronous part {sync:.2} s), uploaded {:.1} MiB of {:.1} MiB state, {} files",
            mib(snapshot.uploaded_bytes),
            mib(snapshot.state_bytes),
            snapshot.files.len()
        );
        rows.push((total, snapshot.uploaded_bytes));
    }
    let (full, incremental) = (rows[0], rows[1]);
    println!(
        "incremental / full: duration {:.3}, bytes uploaded {:.4}",
        incremental.0 / full.0,
        incremental.1 as f64 / full.1 as f64
    );
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}
