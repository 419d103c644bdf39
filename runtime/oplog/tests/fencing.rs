//! Fencing and replay of the operation log on real object storage: a local directory (`file://`) and
//! a local S3 server (`s3://`, moto). The S3 cases are reported as ignored with `SKIPPED` where
//! `moto_server` is not installed, unless `FLOE_REQUIRE_MOTO` is set (`.ci/run` installs it and sets it).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use floe_oplog::{Error, OperationLog};
use floe_storage::ObjectStore;
use floe_storage::testing::MotoServer;
use libtest_mimic::{Arguments, Failed, Trial};

type Events = Vec<String>;

fn ev(names: &[&str]) -> Events {
    names.iter().map(|s| s.to_string()).collect()
}

async fn takeover_fences_the_old_leader(store: ObjectStore) {
    let (mut a, replayed) = OperationLog::acquire::<String>(store.clone(), "jm-a")
        .await
        .unwrap();
    assert_eq!((a.epoch(), replayed.events.len()), (1, 0));
    a.append(&ev(&["submitted", "vertex source p=4"])).await.unwrap();
    assert!(!a.superseded().await.unwrap(), "no newer leader yet");
    let (mut b, replayed) = OperationLog::acquire::<String>(store.clone(), "jm-b")
        .await
        .unwrap();
    assert_eq!(b.epoch(), 2);
    // The old leader learns it was fenced without having to append anything.
    assert!(a.superseded().await.unwrap());
    assert!(!b.superseded().await.unwrap());
    assert_eq!(replayed.events, ev(&["submitted", "vertex source p=4"]));
    let e = a.append(&ev(&["zombie write"])).await.unwrap_err();
    assert!(matches!(e, Error::Fenced { epoch: 1, .. }), "{e}");
    assert!(e.to_string().contains("was fenced"), "{e}");
    b.append(&ev(&["source#0 finished"])).await.unwrap();
    let (c, replayed) = OperationLog::acquire::<String>(store, "jm-c").await.unwrap();
    assert_eq!(c.epoch(), 3);
    assert_eq!(replayed.epochs, [1, 2]);
    assert_eq!(
        replayed.events,
        ev(&["submitted", "vertex source p=4", "source#0 finished"]),
        "the zombie's refused write is not in the log"
    );
}

async fn a_leader_that_never_wrote_is_fenced_too(store: ObjectStore) {
    let (mut a, _) = OperationLog::acquire::<String>(store.clone(), "jm-a")
        .await
        .unwrap();
    let (mut b, _) = OperationLog::acquire::<String>(store.clone(), "jm-b")
        .await
        .unwrap();
    assert!(matches!(
        a.append(&ev(&["late"])).await,
        Err(Error::Fenced { .. })
    ));
    b.append(&ev(&["ok"])).await.unwrap();
}

async fn concurrent_starts_leave_exactly_one_writer(store: ObjectStore) {
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for i in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            OperationLog::acquire::<String>((*store).clone(), &format!("jm-{i}")).await
        }));
    }
    let mut leaders = Vec::new();
    let mut lost = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok((log, _)) => leaders.push(log),
            Err(Error::LostElection { .. }) => lost += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(leaders.len() + lost, 4);
    let mut wrote = Vec::new();
    for mut log in leaders {
        let epoch = log.epoch();
        match log.append(&ev(&[&format!("from {epoch}")])).await {
            Ok(()) => wrote.push(epoch),
            Err(Error::Fenced { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(wrote.len(), 1, "exactly one JobManager can write, got {wrote:?}");
}

async fn a_corrupt_or_truncated_entry_is_an_error_naming_it(store: ObjectStore) {
    let (mut a, _) = OperationLog::acquire::<String>(store.clone(), "jm-a")
        .await
        .unwrap();
    a.append(&ev(&["one"])).await.unwrap();
    a.append(&ev(&["two"])).await.unwrap();
    a.append(&ev(&["three"])).await.unwrap();
    // Damage in the middle of an epoch: an error naming the object.
    let second = "oplog/00000000000000000001/00000000000000000001";
    let whole = store.get(second).await.unwrap();
    store.put(second, whole.slice(..whole.len() - 2)).await.unwrap();
    let e = OperationLog::acquire::<String>(store.clone(), "jm-b")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "operation log entry {} is corrupt: truncated: header says {} payload bytes, found {}",
            store.url_of(second),
            whole.len() - 17,
            whole.len() - 19
        )
    );
    store.put(second, "{\"events\": [\"forged\"]}").await.unwrap();
    let e = OperationLog::acquire::<String>(store.clone(), "jm-c")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(second) && e.contains("not a Floe object"), "{e}");
    // The torn last entry of a leader killed during its append (0 bytes on a file system): that
    // append never returned, so it is skipped and the rest replays.
    store.put(second, whole).await.unwrap();
    let third = "oplog/00000000000000000001/00000000000000000002";
    store.put(third, bytes::Bytes::new()).await.unwrap();
    let (_, replayed) = OperationLog::acquire::<String>(store, "jm-d").await.unwrap();
    assert_eq!(replayed.events, ["one", "two"]);
}

/// A store that applied an append but lost its answer: before, the JobManager's retry met its own
/// entry and took it for a newer leader's seal, and stopped. Trying the same append again finds its
/// own bytes there: it took effect, and the log goes on after it.
async fn an_append_whose_answer_was_lost_is_recognised_when_tried_again(store: ObjectStore) {
    let (mut a, _) = OperationLog::acquire::<String>(store.clone(), "jm-a")
        .await
        .unwrap();
    a.append(&ev(&["first"])).await.unwrap();
    // What the lost append wrote: the next entry, with exactly these events.
    let body = serde_json::to_vec(&serde_json::json!({ "events": ["second"] })).unwrap();
    store
        .create(
            "oplog/00000000000000000001/00000000000000000001",
            floe_storage::envelope::seal(&body),
        )
        .await
        .unwrap();
    a.append(&ev(&["second"])).await.unwrap();
    a.append(&ev(&["third"])).await.unwrap();
    // A different entry in its place is still a refusal.
    let (mut b, replayed) = OperationLog::acquire::<String>(store.clone(), "jm-b")
        .await
        .unwrap();
    assert_eq!(replayed.events, ["first", "second", "third"]);
    assert!(matches!(
        a.append(&ev(&["fourth"])).await,
        Err(Error::Fenced { epoch: 1, .. })
    ));
    b.append(&ev(&["fourth"])).await.unwrap();
}

/// Every object under the log's prefix.
async fn objects(store: &ObjectStore) -> usize {
    let mut n = store.list("leader").await.unwrap().len() + store.list("snapshot").await.unwrap().len();
    for epoch in store.list("oplog").await.unwrap() {
        n += store.list(&format!("oplog/{epoch}")).await.unwrap().len();
    }
    n
}

/// Events "0", "1", ... `to - 1`.
fn numbered(from: usize, to: usize) -> Events {
    (from..to).map(|i| i.to_string()).collect()
}

/// Issue item 8: the log no longer grows with every append. A leader that compacts every 100
/// appends keeps about 100 objects whatever it appended; a new leader reads the snapshot and the
/// entries after it, not every entry ever appended, and gets the same events; the old leader can
/// neither append nor compact any more; the next compaction removes the old epoch but its seal.
async fn compaction_bounds_the_log_and_a_takeover_replays_from_the_snapshot(store: ObjectStore) {
    let (mut a, _) = OperationLog::acquire::<String>(store.clone(), "jm-a")
        .await
        .unwrap();
    let mut history = Events::new();
    for i in 0..350 {
        let event = i.to_string();
        a.append(std::slice::from_ref(&event)).await.unwrap();
        history.push(event);
        if a.appends_since_snapshot() >= 100 {
            // The snapshot here is every event so far: the caller decides what stands for them.
            let compaction = a.compact(&history).await.unwrap();
            assert_eq!(compaction.snapshot().0, 1);
            compaction.run().await.unwrap();
        }
    }
    assert_eq!(a.appends_since_snapshot(), 50);
    // leader/1, the snapshot's name and entry, 50 entries after it.
    assert_eq!(
        objects(&store).await,
        53,
        "a compacted log keeps what follows its snapshot"
    );
    let (mut b, replayed) = OperationLog::acquire::<String>(store.clone(), "jm-b")
        .await
        .unwrap();
    assert_eq!(replayed.events, history);
    assert_eq!(
        replayed.snapshot,
        Some((1, 302)),
        "100 appends, then a snapshot, three times"
    );
    assert_eq!(
        replayed.entries, 50,
        "only the entries after the snapshot are read"
    );
    assert_eq!(b.appends_since_snapshot(), 50);
    let e = a.compact(&history).await.unwrap_err();
    assert!(matches!(e, Error::Fenced { epoch: 1, .. }), "{e}");
    assert!(matches!(
        a.append(&ev(&["zombie"])).await,
        Err(Error::Fenced { epoch: 1, .. })
    ));
    b.append(&ev(&["350"])).await.unwrap();
    history.push("350".into());
    let compaction = b.compact(&history).await.unwrap();
    assert_eq!(compaction.snapshot(), (2, 1));
    // Epoch 1's snapshot and the 50 entries after it, b's first append and epoch 1's snapshot name;
    // not epoch 1's seal, where its zombie is refused.
    assert_eq!(compaction.run().await.unwrap(), 53);
    assert_eq!(store.list("oplog/00000000000000000001").await.unwrap().len(), 1);
    assert!(matches!(
        a.append(&ev(&["zombie"])).await,
        Err(Error::Fenced { epoch: 1, .. })
    ));
    // leader/1, leader/2, epoch 1's seal, b's snapshot and its name.
    assert_eq!(objects(&store).await, 5);
    b.append(&ev(&["351"])).await.unwrap();
    history.push("351".into());
    let (c, replayed) = OperationLog::acquire::<String>(store, "jm-c").await.unwrap();
    assert_eq!(c.epoch(), 3);
    assert_eq!(replayed.events, history);
    assert_eq!(
        replayed.epochs,
        [2],
        "epoch 1 is not read: the snapshot covers it"
    );
    assert_eq!(replayed.entries, 1);
}

/// A leader that dies at any step of a compaction leaves a log that replays the same: snapshot
/// entry torn (killed while writing it), written but not named, named with none of what it covers
/// deleted, or with part of it deleted.
async fn a_leader_that_dies_mid_compaction_leaves_a_log_that_replays_the_same(store: ObjectStore) {
    let (mut a, _) = OperationLog::acquire::<String>(store.clone(), "jm-a")
        .await
        .unwrap();
    let history = numbered(0, 20);
    for event in &history {
        a.append(std::slice::from_ref(event)).await.unwrap();
    }
    let replays = |holder: &'static str| {
        let store = store.clone();
        async move {
            let (log, replayed) = OperationLog::acquire::<String>(store, holder).await.unwrap();
            (log.epoch(), replayed)
        }
    };
    // Killed while writing the snapshot entry (0 bytes on a file system): a torn tail, skipped.
    let torn = "oplog/00000000000000000001/00000000000000000020";
    store.create(torn, bytes::Bytes::new()).await.unwrap();
    let (_, replayed) = replays("jm-b").await;
    assert_eq!((replayed.events, replayed.snapshot), (history.clone(), None));

    // The next leader writes its snapshot, then dies before naming it: a replay from the start
    // meets the snapshot on its way.
    let (mut c, _) = OperationLog::acquire::<String>(store.clone(), "jm-c")
        .await
        .unwrap();
    c.append(&ev(&["20"])).await.unwrap();
    let mut history = numbered(0, 21);
    let compaction = c.compact(&history).await.unwrap();
    assert_eq!(compaction.snapshot(), (3, 1));
    drop(compaction);
    store
        .delete("snapshot/00000000000000000003.00000000000000000001")
        .await
        .unwrap();
    c.append(&ev(&["21"])).await.unwrap();
    history.push("21".into());
    let (epoch, replayed) = replays("jm-d").await;
    assert_eq!(epoch, 4);
    assert_eq!((&replayed.events, replayed.snapshot), (&history, None));

    // Named, nothing deleted yet (the Compaction was never run).
    let (mut e, _) = OperationLog::acquire::<String>(store.clone(), "jm-e")
        .await
        .unwrap();
    e.append(&ev(&["22"])).await.unwrap();
    history.push("22".into());
    let compaction = e.compact(&history).await.unwrap();
    assert_eq!(compaction.snapshot(), (5, 1));
    drop(compaction);
    e.append(&ev(&["23"])).await.unwrap();
    history.push("23".into());
    let (epoch, replayed) = replays("jm-f").await;
    assert_eq!(epoch, 6);
    assert_eq!((&replayed.events, replayed.snapshot), (&history, Some((5, 1))));
    assert_eq!(replayed.epochs, [5]);

    // Part of what the snapshot covers deleted: the first entries of epoch 1, not the rest.
    for seq in 0..10 {
        store
            .delete(&format!("oplog/00000000000000000001/{seq:020}"))
            .await
            .unwrap();
    }
    let (_, replayed) = replays("jm-g").await;
    assert_eq!(replayed.events, history);
    // And all of it, by the next leader's compaction: each older epoch keeps its seal.
    let (mut h, replayed) = OperationLog::acquire::<String>(store.clone(), "jm-h")
        .await
        .unwrap();
    assert_eq!(replayed.events, history);
    h.compact(&history).await.unwrap().run().await.unwrap();
    for epoch in store.list("oplog").await.unwrap() {
        let left = store.list(&format!("oplog/{epoch}")).await.unwrap();
        if epoch.trim_end_matches('/') != "00000000000000000008" {
            assert_eq!(left.len(), 1, "epoch {epoch}: {left:?}");
        }
    }
    let (_, replayed) = replays("jm-i").await;
    assert_eq!((&replayed.events, replayed.snapshot), (&history, Some((8, 0))));
}

/// A named snapshot that is gone or damaged is an error naming it, never a replay of what happens
/// to be left after it.
async fn a_named_snapshot_that_is_gone_is_an_error(store: ObjectStore) {
    let (mut a, _) = OperationLog::acquire::<String>(store.clone(), "jm-a")
        .await
        .unwrap();
    a.append(&ev(&["one"])).await.unwrap();
    a.compact(&ev(&["one"])).await.unwrap().run().await.unwrap();
    a.append(&ev(&["two"])).await.unwrap();
    let snapshot = "oplog/00000000000000000001/00000000000000000001";
    let whole = store.get(snapshot).await.unwrap();
    store.put(snapshot, whole.slice(..whole.len() - 1)).await.unwrap();
    let e = OperationLog::acquire::<String>(store.clone(), "jm-b")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(snapshot) && e.contains("truncated"), "{e}");
    store.delete(snapshot).await.unwrap();
    let e = OperationLog::acquire::<String>(store.clone(), "jm-c")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(snapshot) && e.contains("names it as the snapshot to replay from"),
        "{e}"
    );
}

/// A JobManager takes over while the old one goes on appending and compacting (deleting entries
/// the new one may be about to read): the new one replays a whole prefix of what the old one
/// appended, never a log with a hole, and the old one is fenced at its next write.
async fn a_takeover_during_compactions_replays_a_whole_prefix(store: ObjectStore) {
    for round in 0..4 {
        let store = store.scoped(&format!("round-{round}"));
        let (mut a, _) = OperationLog::acquire::<String>(store.clone(), "jm-a")
            .await
            .unwrap();
        let writer = tokio::spawn(async move {
            let mut history = Events::new();
            for i in 0.. {
                let event = i.to_string();
                match a.append(std::slice::from_ref(&event)).await {
                    Ok(()) => history.push(event),
                    Err(Error::Fenced { .. }) => return history.len(),
                    Err(e) => panic!("{e}"),
                }
                if a.appends_since_snapshot() >= 7 {
                    match a.compact(&history).await {
                        Ok(compaction) => {
                            compaction.run().await.unwrap();
                        }
                        Err(Error::Fenced { .. }) => return history.len(),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            unreachable!()
        });
        tokio::time::sleep(std::time::Duration::from_millis(20 + 15 * round)).await;
        let (_, replayed) = OperationLog::acquire::<String>(store.clone(), "jm-b")
            .await
            .unwrap();
        let appended = writer.await.unwrap();
        assert_eq!(replayed.events, numbered(0, appended), "round {round}");
    }
}

type Scenario = fn(ObjectStore) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

fn scenarios() -> Vec<(&'static str, Scenario)> {
    vec![
        ("takeover_fences_the_old_leader", |s| {
            Box::pin(takeover_fences_the_old_leader(s))
        }),
        ("a_leader_that_never_wrote_is_fenced_too", |s| {
            Box::pin(a_leader_that_never_wrote_is_fenced_too(s))
        }),
        ("concurrent_starts_leave_exactly_one_writer", |s| {
            Box::pin(concurrent_starts_leave_exactly_one_writer(s))
        }),
        ("a_corrupt_or_truncated_entry_is_an_error_naming_it", |s| {
            Box::pin(a_corrupt_or_truncated_entry_is_an_error_naming_it(s))
        }),
        (
            "an_append_whose_answer_was_lost_is_recognised_when_tried_again",
            |s| Box::pin(an_append_whose_answer_was_lost_is_recognised_when_tried_again(s)),
        ),
        (
            "compaction_bounds_the_log_and_a_takeover_replays_from_the_snapshot",
            |s| Box::pin(compaction_bounds_the_log_and_a_takeover_replays_from_the_snapshot(s)),
        ),
        (
            "a_leader_that_dies_mid_compaction_leaves_a_log_that_replays_the_same",
            |s| Box::pin(a_leader_that_dies_mid_compaction_leaves_a_log_that_replays_the_same(s)),
        ),
        ("a_named_snapshot_that_is_gone_is_an_error", |s| {
            Box::pin(a_named_snapshot_that_is_gone_is_an_error(s))
        }),
        ("a_takeover_during_compactions_replays_a_whole_prefix", |s| {
            Box::pin(a_takeover_during_compactions_replays_a_whole_prefix(s))
        }),
    ]
}

fn run(scenario: Scenario, store: ObjectStore) -> Result<(), Failed> {
    tokio::runtime::Runtime::new().unwrap().block_on(scenario(store));
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let server = MotoServer::for_tests("s3 cases", "floe-oplog");
    let mut trials = Vec::new();
    for (i, (name, scenario)) in scenarios().into_iter().enumerate() {
        trials.push(Trial::test(format!("file/{name}"), move || {
            let dir = std::env::temp_dir().join(format!("floe-oplog-{}-{i}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let store = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
            let r = run(scenario, store.scoped("default/wordcount"));
            let _ = std::fs::remove_dir_all(&dir);
            r
        }));
        let missing = server.is_none();
        let server = server.clone();
        trials.push(
            Trial::test(format!("s3/{name}"), move || {
                let server = server.as_ref().ok_or("moto_server not found")?;
                let store = ObjectStore::open(&server.url(&format!("case-{i}")), &server.conf()).unwrap();
                run(scenario, store.scoped("default/wordcount"))
            })
            .with_ignored_flag(missing),
        );
    }
    libtest_mimic::run(&args, trials).exit();
}
