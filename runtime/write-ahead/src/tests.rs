#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::collections::BTreeMap;

use floe_datastream::connector::frames;

use super::*;

fn store(dir: &tempfile::TempDir) -> ObjectStore {
    ObjectStore::open(&format!("file://{}", dir.path().display()), &BTreeMap::new()).unwrap()
}

/// `records` as the sink gets them: each in a frame of its length.
fn framed(records: &[Vec<u8>]) -> Vec<u8> {
    let mut all = Vec::new();
    for r in records {
        all.extend_from_slice(&(r.len() as u32).to_le_bytes());
        all.extend_from_slice(r);
    }
    all
}

async fn read_all(mut records: Records) -> Result<(Vec<Vec<u8>>, usize)> {
    let (mut got, mut batches) = (Vec::new(), 0);
    while let Some(batch) = records.next().await? {
        batches += 1;
        got.extend(frames(&batch).map(<[u8]>::to_vec));
    }
    Ok((got, batches))
}

#[test]
fn orphans_are_the_objects_of_records_after_the_restored_barrier() {
    let a = object("kafka-sink/", "floe-j-t-0", "run1", 9, "w1");
    assert_eq!(a, "kafka-sink/floe-j-t-0/run1/a00000000000000000009-w1");
    assert_eq!(run_dir("kafka-sink/", "p-0", ""), "kafka-sink/p-0/-/");
    // Records after barriers 0, 9, 10 and 12, and two objects of an earlier version, named by
    // checkpoints 10 and 11.
    let names: Vec<String> = [0, 9, 10, 12]
        .iter()
        .map(|c| {
            object("r/", "p-0", "r", *c, "w")
                .trim_start_matches("r/p-0/r/")
                .to_string()
        })
        .chain([
            "00000000000000000010-w".to_string(),
            "00000000000000000011-w".to_string(),
            "not-ours".to_string(),
            "sub/".to_string(),
        ])
        .collect();
    assert_eq!(
        orphans(&names, 10),
        [
            "a00000000000000000010-w".to_string(),
            "a00000000000000000012-w".to_string(),
            "00000000000000000011-w".to_string(),
        ]
    );
    assert_eq!(
        orphans(&names, 0).len(),
        6,
        "no checkpoint restored: every object of the run"
    );
    assert_eq!(orphans(&names, 13), Vec::<String>::new());
}

#[test]
fn each_directory_is_cleaned_by_one_subtask() {
    let dirs: Vec<String> = ["p-0/", "p-1/", "p-2/", "p-3/", "p-4/", "other-0/", "p-x/"]
        .iter()
        .map(|d| d.to_string())
        .collect();
    // Rescaled from 5 subtasks to 2: 2 and 4 fall to subtask 0, 3 to subtask 1.
    assert_eq!(cleaned_by(&dirs, "p", 0, 2), ["p-0", "p-2", "p-4"]);
    assert_eq!(cleaned_by(&dirs, "p", 1, 2), ["p-1", "p-3"]);
    assert_eq!(cleaned_by(&dirs, "p", 1, 5), ["p-1"]);
}

/// A write-ahead object of several parts comes back as batches of whole records, every record
/// once and in order, however the parts cut them.
#[tokio::test]
async fn an_object_of_several_parts_reads_back_as_whole_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    // Records of 0 to 70,000 bytes, about 2.5 parts in all, written in pieces of odd sizes.
    let mut expected = Vec::new();
    let mut i = 0u64;
    while framed(&expected).len() < floe_storage::PART_SIZE * 5 / 2 {
        expected.push(
            (0..(i * 7919) % 70_001)
                .map(|b| (b ^ i) as u8)
                .collect::<Vec<u8>>(),
        );
        i += 1;
    }
    let all = framed(&expected);
    let mut writer = store.writer("ahead").await.unwrap();
    for piece in all.chunks(1_000_003) {
        writer.write(piece.to_vec()).await.unwrap();
    }
    writer.close().await.unwrap();
    let records = Records::open(&store, "Test", "ahead", 1).await.unwrap();
    let (got, batches) = read_all(records).await.unwrap();
    assert!(batches >= 3, "one batch per part at least: {batches}");
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the records read back differ");

    // An object gone while it is still to be written (its records are read only when the
    // marker says so) is an error naming it, not an empty checkpoint.
    store.delete("ahead").await.unwrap();
    let gone = Records::open(&store, "Test", "ahead", 1)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        gone.to_string(),
        "Test: the write-ahead object ahead of checkpoint 1 is gone though its marker says its records were not written"
    );

    // One cut inside a record is an error naming the object.
    let mut writer = store.writer("cut").await.unwrap();
    writer.write(all[..all.len() - 1].to_vec()).await.unwrap();
    writer.close().await.unwrap();
    let records = Records::open(&store, "Test", "cut", 1).await.unwrap();
    let e = read_all(records).await.map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("cut") && e.contains("ends inside a record"), "{e}");
}

/// The records between two barriers are one object, named by the barrier they follow; a barrier
/// with no records since the last seals nothing; what a dead attempt left after the restored
/// barrier is removed by the next attempt, and nothing at or before it.
#[tokio::test]
async fn a_writer_seals_an_object_per_interval_and_the_next_attempt_removes_its_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let mut first = Writer::new(store.clone(), "Test", "t-sink/", "s-0", "run1");
    first.append(0, &framed(&[b"a".to_vec()])).await.unwrap();
    first.append(0, &framed(&[b"b".to_vec()])).await.unwrap();
    let one = first.seal().await.unwrap().unwrap();
    assert!(one.starts_with("t-sink/s-0/run1/a00000000000000000000-"), "{one}");
    assert_eq!(
        first.seal().await.unwrap(),
        None,
        "nothing since the last barrier"
    );
    first.append(1, &framed(&[b"c".to_vec()])).await.unwrap();
    let two = first.seal().await.unwrap().unwrap();
    let (got, _) = read_all(Records::open(&store, "Test", &one, 1).await.unwrap())
        .await
        .unwrap();
    assert_eq!(got, [b"a".to_vec(), b"b".to_vec()]);
    // Records after barrier 2 (checkpoint 2 never completes), sealed and left open.
    first.append(2, &framed(&[b"d".to_vec()])).await.unwrap();
    let three = first.seal().await.unwrap().unwrap();
    first.append(3, &framed(&[b"e".to_vec()])).await.unwrap();
    drop(first);
    // Another run's object is not this run's to remove.
    let mut other = Writer::new(store.clone(), "Test", "t-sink/", "s-0", "run0");
    other.append(5, b"").await.unwrap();
    let others = other.seal().await.unwrap().unwrap();

    // The next attempt restores checkpoint 2, whose state names `one` and `two`.
    let at = Orphans {
        root: "t-sink/",
        prefix: "s",
        subtask: 0,
        parallelism: 1,
        run: "run1",
        restored: 2,
    };
    remove_orphans(&store, "Test", at).await;
    let left: Vec<String> = store.list("t-sink/s-0/run1/").await.unwrap();
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    assert!(
        left.contains(&name(&one)) && left.contains(&name(&two)),
        "{left:?}"
    );
    assert!(!left.contains(&name(&three)), "{left:?}");
    assert_eq!(
        left.len(),
        2,
        "the dropped writer's open object is gone too: {left:?}"
    );
    assert!(
        store
            .list("t-sink/s-0/run0/")
            .await
            .unwrap()
            .contains(&name(&others))
    );
}

#[test]
fn a_completion_takes_the_checkpoints_it_covers() {
    let mut pending = vec![3u64, 5, 4, 8];
    assert_eq!(take_covered(&mut pending, 4, |c| *c), [3, 4]);
    assert_eq!(pending, [5, 8]);
    assert_eq!(take_covered(&mut pending, 2, |c| *c), Vec::<u64>::new());
}
