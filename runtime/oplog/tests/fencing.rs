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
