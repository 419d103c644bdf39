//! The RocksDB backend against real RocksDB instances and a file-system object store.
#![allow(clippy::unwrap_used)]

use super::*;

fn store(name: &str) -> (ObjectStore, PathBuf) {
    let dir = std::env::temp_dir().join(format!("floe-rocksdb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = ObjectStore::open(
        &format!("file://{}", dir.join("objects").display()),
        &BTreeMap::new(),
    )
    .unwrap();
    (s, dir)
}

fn target(store: &ObjectStore, checkpoint: u64, task: &str) -> SnapshotTarget {
    SnapshotTarget {
        store: store.clone(),
        dir: format!("chk-{checkpoint}/{task}"),
        shared: format!("shared/{task}"),
    }
}

/// Deterministic incompressible-ish bytes.
fn value(i: u64, round: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn the_second_checkpoint_uploads_only_new_files_and_restores_any_key_group_range() {
    let (objects, dir) = store("incremental");
    let mut db = RocksDbStateBackend::open(&dir.join("task-0"), 0..128).unwrap();
    let n = 20_000u64;
    for i in 0..n {
        db.put("count", (i % 128) as u32, &i.to_be_bytes(), &value(i, 0, 200))
            .unwrap();
    }
    let first = db
        .prepare_snapshot(1)
        .unwrap()
        .upload(&target(&objects, 1, "t0"))
        .await
        .unwrap();
    // 1% of the keys change.
    for i in (0..n).step_by(100) {
        db.put("count", (i % 128) as u32, &i.to_be_bytes(), &value(i, 1, 200))
            .unwrap();
    }
    db.delete("count", 5, &5u64.to_be_bytes()).unwrap();
    let second = db
        .prepare_snapshot(2)
        .unwrap()
        .upload(&target(&objects, 2, "t0"))
        .await
        .unwrap();
    // As the JobManager does: the snapshots go into each checkpoint's metadata; the sizes are
    // read back from there.
    let checkpoints = floe_checkpoint::CheckpointStore::new(objects.clone());
    for (id, snapshot) in [(1, &first), (2, &second)] {
        let metadata = floe_checkpoint::CompletedCheckpoint {
            max_parallelism: BTreeMap::new(),
            operators: BTreeMap::new(),
            job_id: "job".into(),
            id,
            triggered_ms: 0,
            completed_ms: 0,
            tasks: BTreeMap::from([("reduce#0".to_string(), snapshot.clone())]),
        };
        checkpoints.write(&metadata).await.unwrap();
    }
    let full = checkpoints.load("job", 1).await.unwrap().uploaded_bytes();
    let incremental = checkpoints.load("job", 2).await.unwrap().uploaded_bytes();
    assert!(full > 3_000_000, "first: {first:?}");
    assert!(
        incremental * 10 < full,
        "checkpoint 2 uploaded {incremental} bytes, checkpoint 1 {full}"
    );
    assert!(
        second.state_bytes >= first.state_bytes,
        "the shared files are still part of it"
    );
    let shared: Vec<&String> = second.files.iter().filter(|f| f.starts_with("shared/")).collect();
    assert!(
        shared.iter().any(|f| first.files.contains(f)),
        "references the first's SST files"
    );

    // Same range: everything as of checkpoint 2.
    let whole =
        RocksDbStateBackend::restore(&dir.join("r0"), &objects, std::slice::from_ref(&second), 0..128)
            .await
            .unwrap();
    for i in [0u64, 5, 6, 100, 19_999] {
        let expected = (i != 5).then(|| value(i, u64::from(i % 100 == 0), 200));
        assert_eq!(
            whole.get("count", (i % 128) as u32, &i.to_be_bytes()).unwrap(),
            expected,
            "key {i}"
        );
    }
    // Rescaled: key groups 32..64 only, from one snapshot (range delete) and from two (copy).
    let part = RocksDbStateBackend::restore(&dir.join("r1"), &objects, std::slice::from_ref(&second), 32..64)
        .await
        .unwrap();
    assert!(part.get("count", 40, &40u64.to_be_bytes()).unwrap().is_some());
    assert!(part.get("count", 6, &6u64.to_be_bytes()).unwrap().is_none());
    // Rescaled: two subtasks' snapshots of disjoint key groups (0..64 and 64..128, as at
    // parallelism 2) restored into 32..96 (a subtask at another parallelism): the larger is
    // clipped, the other's range copied in.
    let mut other = RocksDbStateBackend::open(&dir.join("task-1"), 64..128).unwrap();
    for i in (0..n).filter(|i| i % 128 >= 64) {
        other
            .put("count", (i % 128) as u32, &i.to_be_bytes(), &value(i, 2, 200))
            .unwrap();
    }
    let low = RocksDbStateBackend::restore(&dir.join("low"), &objects, std::slice::from_ref(&second), 0..64)
        .await
        .unwrap();
    let mut low = low;
    let low_snapshot = low
        .prepare_snapshot(3)
        .unwrap()
        .upload(&target(&objects, 3, "t0"))
        .await
        .unwrap();
    let high_snapshot = other
        .prepare_snapshot(3)
        .unwrap()
        .upload(&target(&objects, 3, "t1"))
        .await
        .unwrap();
    let merged =
        RocksDbStateBackend::restore(&dir.join("r2"), &objects, &[low_snapshot, high_snapshot], 32..96)
            .await
            .unwrap();
    assert_eq!(
        merged.get("count", 300 % 128, &300u64.to_be_bytes()).unwrap(),
        Some(value(300, 1, 200)),
        "key group 44 from the first"
    );
    assert_eq!(
        merged.get("count", 70, &70u64.to_be_bytes()).unwrap(),
        Some(value(70, 2, 200)),
        "key group 70 from the second"
    );
    assert!(merged.get("count", 6, &6u64.to_be_bytes()).unwrap().is_none());
    assert!(merged.get("count", 100, &100u64.to_be_bytes()).unwrap().is_none());

    // A missing object is an error naming it.
    let gone = whole_files_of(&objects).await;
    objects.delete(&gone).await.unwrap();
    let e = RocksDbStateBackend::restore(&dir.join("r3"), &objects, &[part_snapshot(&gone)], 0..128)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&gone), "{e}");
    drop((db, whole, part, merged));
    let _ = std::fs::remove_dir_all(&dir);
}

async fn whole_files_of(objects: &ObjectStore) -> String {
    let names = objects.list("chk-2/t0").await.unwrap();
    let current = names.iter().find(|n| n.starts_with("CURRENT")).unwrap();
    format!("chk-2/t0/{current}")
}

/// Issue 33, state TTL: a compaction drops a value of a state with a time to live once it
/// expired (a value, a map entry, a list whose every element expired), and keeps live ones,
/// partly live lists and every value of states without a time to live, whatever their bytes.
#[test]
fn compaction_drops_what_expired_in_states_with_a_time_to_live() {
    let dir = std::env::temp_dir().join(format!("floe-rocksdb-ttl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut db = RocksDbStateBackend::open(&dir, 0..128).unwrap();
    let now = now_ms();
    let at = |t: i64, v: &[u8]| [&t.to_le_bytes()[..], v].concat();
    let (past, future) = (now - 60_000, now + 3_600_000);
    db.put("value+ttl:v", 1, b"\x01a", &at(past, b"old")).unwrap();
    db.put("value+ttl:v", 1, b"\x01b", &at(future, b"new")).unwrap();
    db.put("map+ttl:m", 2, b"\x01a\x01x", &at(past, b"old")).unwrap();
    db.put("map+ttl:m", 2, b"\x01a\x01y", &at(future, b"new"))
        .unwrap();
    // A list written whole (an update; merged appends become such a value in compactions).
    let (e1, e2) = (at(past, b"e"), at(past, b"e"));
    db.put(
        "list+ttl:l",
        3,
        b"\x01a",
        &floe_state::list::encode([e1.as_slice(), e2.as_slice()]),
    )
    .unwrap();
    for t in [past, future] {
        db.append("list+ttl:l", 3, b"\x01b", &at(t, b"e")).unwrap();
    }
    let (p, f) = (at(past, b"e"), at(future, b"e"));
    db.put(
        "list+ttl:l",
        3,
        b"\x01c",
        &floe_state::list::encode([p.as_slice(), f.as_slice()]),
    )
    .unwrap();
    // The same expired bytes in states without a time to live stay.
    db.put("value:v", 1, b"\x01a", &at(past, b"old")).unwrap();
    db.put("count", 1, b"\x01a", &at(past, b"old")).unwrap();
    db.db.flush().unwrap();
    db.compact();
    let has = |state: &str, kg: u32, key: &[u8]| db.get(state, kg, key).unwrap().is_some();
    assert!(!has("value+ttl:v", 1, b"\x01a"), "an expired value goes");
    assert!(has("value+ttl:v", 1, b"\x01b"), "a live one stays");
    assert!(!has("map+ttl:m", 2, b"\x01a\x01x"));
    assert!(has("map+ttl:m", 2, b"\x01a\x01y"));
    assert!(!has("list+ttl:l", 3, b"\x01a"), "every element expired");
    // Appends merge without their expired elements: an append-only list is trimmed.
    let trimmed = db.get("list+ttl:l", 3, b"\x01b").unwrap().unwrap();
    assert_eq!(
        floe_state::list::decode(&trimmed).unwrap(),
        vec![at(future, b"e").as_slice()],
        "an appended list keeps its live elements only"
    );
    // A list written whole and never merged again keeps its expired head until every element
    // expired (reads do not return them).
    let whole = db.get("list+ttl:l", 3, b"\x01c").unwrap().unwrap();
    assert_eq!(
        floe_state::list::decode(&whole).unwrap().len(),
        2,
        "a partly live list written whole stays"
    );
    assert!(has("value:v", 1, b"\x01a") && has("count", 1, b"\x01a"));
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33: per-entry state. A map's entries are keys of their own (a prefix scan reads one
/// key's entries and no other key's, a prefix delete removes them), and a list grows by
/// merges without a read; both survive a checkpoint and a restore into two key-group ranges
/// (merge operands copied by the rescaling restore arrive merged).
#[tokio::test]
async fn map_entries_scan_by_prefix_and_list_appends_merge_across_a_rescaling_restore() {
    let (objects, dir) = store("entries");
    let mut db = RocksDbStateBackend::open(&dir.join("task-0"), 0..128).unwrap();
    // Key "a" (in key group 3) and key "ab" (group 70): "a" is a byte prefix of "ab", as
    // keys' raw bytes may be; the backend's keys carry self-delimiting encodings, here a
    // length byte.
    let (a, ab) = (b"\x01a".as_slice(), b"\x02ab".as_slice());
    for i in 0..1_000u32 {
        let mut entry = a.to_vec();
        entry.extend_from_slice(&i.to_be_bytes());
        db.put("map:m", 3, &entry, &i.to_le_bytes()).unwrap();
        db.append("list:l", 3, a, &i.to_le_bytes()).unwrap();
    }
    let mut entry = ab.to_vec();
    entry.extend_from_slice(&7u32.to_be_bytes());
    db.put("map:m", 3, &entry, b"other key").unwrap();
    db.append("list:l", 70, ab, b"x").unwrap();
    let scan = |db: &RocksDbStateBackend, kg: u32, key: &[u8]| {
        let mut seen = Vec::new();
        db.scan_prefix("map:m", kg, key, &mut |rest: &[u8], v: &[u8]| {
            seen.push((rest.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        seen
    };
    let seen = scan(&db, 3, a);
    assert_eq!(seen.len(), 1_000, "only key a's entries");
    assert!(seen.iter().enumerate().all(|(i, (rest, v))| {
        rest.as_slice() == (i as u32).to_be_bytes() && v.as_slice() == (i as u32).to_le_bytes()
    }));
    // Stopping early stops the scan.
    let mut first = 0;
    db.scan_prefix("map:m", 3, a, &mut |_: &[u8], _: &[u8]| {
        first += 1;
        false
    })
    .unwrap();
    assert_eq!(first, 1);
    let list = |db: &RocksDbStateBackend, kg: u32, key: &[u8]| {
        let raw = db.get("list:l", kg, key).unwrap().unwrap_or_default();
        floe_state::list::decode(&raw)
            .unwrap()
            .iter()
            .map(|i| i.to_vec())
            .collect::<Vec<_>>()
    };
    let expected: Vec<Vec<u8>> = (0..1_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    assert_eq!(list(&db, 3, a), expected, "appends in order");

    let snapshot = db
        .prepare_snapshot(1)
        .unwrap()
        .upload(&target(&objects, 1, "t0"))
        .await
        .unwrap();
    // Appended after the snapshot: not in it.
    db.append("list:l", 3, a, b"late").unwrap();
    drop(db);
    // Another task's snapshot, for the restore of the high half to copy from (the largest
    // snapshot is clipped, every other one copied key by key).
    let mut other = RocksDbStateBackend::open(&dir.join("task-1"), 0..128).unwrap();
    other.append("list:l", 100, b"\x01z", b"from task 1").unwrap();
    let other_snapshot = other
        .prepare_snapshot(1)
        .unwrap()
        .upload(&target(&objects, 1, "t1"))
        .await
        .unwrap();
    drop(other);
    let mut low =
        RocksDbStateBackend::restore(&dir.join("low"), &objects, std::slice::from_ref(&snapshot), 0..64)
            .await
            .unwrap();
    assert_eq!(scan(&low, 3, a).len(), 1_000);
    assert_eq!(list(&low, 3, a), expected);
    assert!(
        low.get("list:l", 70, ab).unwrap().is_none(),
        "key group 70 is not low's"
    );
    // Appends go on after the restore, and a prefix delete clears one key's map.
    low.append("list:l", 3, a, b"after").unwrap();
    assert_eq!(list(&low, 3, a).last().unwrap(), b"after");
    low.delete_prefix("map:m", 3, a).unwrap();
    assert!(scan(&low, 3, a).is_empty());
    assert_eq!(scan(&low, 3, ab).len(), 1, "another key's entries stay");
    let high =
        RocksDbStateBackend::restore(&dir.join("high"), &objects, &[other_snapshot, snapshot], 64..128)
            .await
            .unwrap();
    assert_eq!(list(&high, 70, ab), vec![b"x".to_vec()]);
    assert_eq!(list(&high, 100, b"\x01z"), vec![b"from task 1".to_vec()]);
    assert!(high.get("list:l", 3, a).unwrap().is_none());
    drop((low, high));
    let _ = std::fs::remove_dir_all(&dir);
}

fn part_snapshot(object: &str) -> TaskSnapshot {
    TaskSnapshot {
        files: vec![object.to_string()],
        ..TaskSnapshot::default()
    }
}

/// Issue 33, bounded memory: instances opened with one [`SharedMemory`] charge their memtables
/// (through the write buffer manager) and the blocks their reads load to its cache, which stays
/// near its budget while the instances hold four times as much state.
#[test]
fn instances_sharing_a_budget_charge_memtables_and_blocks_to_it_and_stay_within_it() {
    let dir = std::env::temp_dir().join(format!("floe-rocksdb-memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let budget = 8u64 << 20;
    let memory = SharedMemory::new(budget);
    assert_eq!(memory.used(), 0, "nothing charged before an instance opened");
    let mut a = RocksDbStateBackend::open_sharing(&dir.join("a"), 0..128, Some(&memory)).unwrap();
    let mut b = RocksDbStateBackend::open_sharing(&dir.join("b"), 0..128, Some(&memory)).unwrap();
    // 32 MiB of values that do not compress, half in each instance.
    let value = |i: u32| -> Vec<u8> {
        let mut x = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..1024 / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect()
    };
    let mut peak_memtables = 0;
    for i in 0..32 * 1024u32 {
        let db = if i % 2 == 0 { &mut a } else { &mut b };
        db.put("value:v", i % 128, &i.to_be_bytes(), &value(i)).unwrap();
        peak_memtables = peak_memtables.max(memory.memtables());
    }
    assert!(
        peak_memtables > 0,
        "the memtables are charged to the shared budget"
    );
    for i in (0..32 * 1024u32).step_by(7) {
        let db = if i % 2 == 0 { &a } else { &b };
        assert_eq!(
            db.get("value:v", i % 128, &i.to_be_bytes()).unwrap(),
            Some(value(i)),
            "key {i}"
        );
    }
    let used = memory.used();
    eprintln!(
        "32 MiB of state in two instances: {used} bytes charged to a budget of {budget}, memtables peaked at {peak_memtables}"
    );
    assert!(used > 0, "reads load blocks into the shared cache");
    assert!(
        used <= budget * 5 / 4,
        "{used} bytes charged to a budget of {budget}"
    );
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
