//! A process function's state type changes between a snapshot and a restore: the state written
//! by the old type restores into the new one (a field removed, one added with a default), on the
//! heap, on a byte-level backend in memory and on RocksDB, and the job's result equals a reference computed here; an
//! incompatible change fails the restore without restarts, naming the state, type and field.

use std::collections::BTreeMap;
use std::sync::Arc;

use floe_checkpoint::TaskSnapshot;
use floe_state::{HashMapStateBackend, SnapshotTarget};
use floe_storage::ObjectStore;

use crate::Data;
use crate::checkpoint::{KEYED_STATE, Keyed, KeyedStateInit, TaskRestore, restore_timers};
use crate::operators::tests::TimedSink;
use crate::operators::{Collector, KeyFn, KeyedContext, KeyedProcessFunction, KeyedProcessOperator, Op};
use crate::time::timers::Timers;
use crate::time::{MAX_WATERMARK, TaskTime, TimeEvent};

/// A visit: (user, page, millis).
type Visit = (String, String, u64);

/// The state as the job's first version kept it.
#[derive(Clone, Debug, Default, PartialEq, Data)]
struct StatsV1 {
    visits: u64,
    pages: Vec<String>,
}

/// The second version: `pages` gone, `total_millis` added (restored state starts it at 0) and
/// `plan` added with a default of its own.
#[derive(Clone, Debug, Default, PartialEq, Data)]
struct StatsV2 {
    #[data(default)]
    total_millis: u64,
    visits: u64,
    #[data(default = "free")]
    plan: String,
}

fn free() -> String {
    "free".into()
}

/// A version that adds a field without saying what restored state gets.
#[derive(Clone, Debug, Default, PartialEq, Data)]
struct StatsNoDefault {
    visits: u64,
    pages: Vec<String>,
    country: String,
}

/// Counts visits per user (V1 also lists the pages), and writes (user, visits, total millis,
/// plan) at the end of input.
struct Count<S>(std::marker::PhantomData<S>);

trait Stats: Data + Default {
    fn add(&mut self, visit: &Visit);
    fn result(&self) -> (u64, u64, String);
}

impl Stats for StatsV1 {
    fn add(&mut self, visit: &Visit) {
        self.visits += 1;
        self.pages.push(visit.1.clone());
    }
    fn result(&self) -> (u64, u64, String) {
        (self.visits, 0, String::new())
    }
}

impl Stats for StatsV2 {
    fn add(&mut self, visit: &Visit) {
        self.visits += 1;
        self.total_millis += visit.2;
        if self.plan.is_empty() {
            self.plan = free();
        }
    }
    fn result(&self) -> (u64, u64, String) {
        (self.visits, self.total_millis, self.plan.clone())
    }
}

impl Stats for StatsNoDefault {
    fn add(&mut self, _: &Visit) {}
    fn result(&self) -> (u64, u64, String) {
        (0, 0, String::new())
    }
}

type Out = (String, (u64, u64, String));

impl<S: Stats> KeyedProcessFunction<String, Visit, Out> for Count<S> {
    type State = S;
    fn process_element(
        &self,
        visit: Visit,
        ctx: &mut KeyedContext<'_, String, S>,
        _: &mut dyn Collector<Out>,
    ) {
        ctx.state().add(&visit);
        ctx.register_event_time_timer(MAX_WATERMARK);
    }
    fn on_timer(&self, _: i64, ctx: &mut KeyedContext<'_, String, S>, out: &mut dyn Collector<Out>) {
        out.collect((ctx.key().clone(), ctx.state().result()));
        ctx.clear_state();
    }
}

fn operator<S: Stats>(
    state: Keyed<String, S>,
    timers: Timers<String>,
) -> (KeyedProcessOperator<Visit, String, Out, Count<S>>, TimedSink<Out>) {
    let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<Visit, String> = Arc::new(|v: &Visit| v.0.clone());
    let op = KeyedProcessOperator::new(
        key,
        Arc::new(Count(std::marker::PhantomData)),
        state,
        timers,
        time,
        Box::new(sink.clone()),
    );
    (op, sink)
}

fn visits(n: u64) -> Vec<Visit> {
    (0..n)
        .map(|i| {
            (
                format!("user-{}", i * 7 % 23),
                format!("/page/{}", i % 5),
                i * 13 % 1000,
            )
        })
        .collect()
}

/// Where the operators keep their state.
#[derive(Debug, Clone, Copy)]
enum Backend {
    /// Objects on the heap (`hashmap`).
    Heap,
    /// Bytes in a backend, RocksDB's layout in memory.
    Bytes,
    /// Real RocksDB.
    RocksDb,
}

const BACKENDS: [Backend; 3] = [Backend::Heap, Backend::Bytes, Backend::RocksDb];

/// A fresh state of `backend` (a RocksDB under `dir/name`).
fn fresh(backend: Backend, dir: &std::path::Path, name: &str) -> Option<KeyedStateInit> {
    match backend {
        Backend::Heap => None,
        Backend::Bytes => Some(KeyedStateInit::Backend(Box::new(HashMapStateBackend::new(
            0..128,
        )))),
        Backend::RocksDb => Some(KeyedStateInit::Backend(Box::new(
            floe_state_rocksdb::RocksDbStateBackend::open(&dir.join(name), 0..128).unwrap(),
        ))),
    }
}

/// `snapshot` restored into `backend` (a RocksDB under `dir/name`).
async fn restored(
    store: &ObjectStore,
    snapshot: &TaskSnapshot,
    backend: Backend,
    dir: &std::path::Path,
    name: &str,
) -> KeyedStateInit {
    let snapshots = std::slice::from_ref(snapshot);
    match backend {
        Backend::Heap => KeyedStateInit::Heap(
            HashMapStateBackend::restore(store, snapshots, 0..128)
                .await
                .unwrap(),
        ),
        Backend::Bytes => KeyedStateInit::Backend(Box::new(
            HashMapStateBackend::restore(store, snapshots, 0..128)
                .await
                .unwrap(),
        )),
        Backend::RocksDb => KeyedStateInit::Backend(Box::new(
            floe_state_rocksdb::RocksDbStateBackend::restore(&dir.join(name), store, snapshots, 0..128)
                .await
                .unwrap(),
        )),
    }
}

/// The state's snapshot after `first`, written by the V1 function, uploaded to `store`.
async fn snapshot_v1(
    store: &ObjectStore,
    backend: Backend,
    dir: &std::path::Path,
    first: &[Visit],
) -> TaskSnapshot {
    let init = fresh(backend, dir, "v1");
    let (mut op, sink) = operator::<StatsV1>(Keyed::new(init, 0..128, 128).unwrap(), Timers::default());
    for v in first {
        op.collect(v.clone());
    }
    assert!(sink.records().is_empty());
    let prepared = op.state.prepare_snapshot_with_timers(1, &op.timers).unwrap();
    let target = SnapshotTarget {
        store: store.clone(),
        dir: format!("chk-1/{backend:?}"),
        shared: format!("shared/{backend:?}"),
    };
    prepared.upload(&target).await.unwrap()
}

fn restore_of(snapshot: &TaskSnapshot) -> TaskRestore {
    TaskRestore {
        checkpoint: 1,
        schemas: snapshot.schemas.clone(),
        ..TaskRestore::default()
    }
}

#[tokio::test]
async fn state_of_an_old_type_restores_into_a_type_that_added_and_removed_fields() {
    let dir = std::env::temp_dir().join(format!("floe-evolution-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
    let input = visits(2_000);
    let (first, rest) = input.split_at(700);
    // The reference: visits over all the input, millis over what the new version saw.
    let mut reference: BTreeMap<String, (u64, u64, String)> = BTreeMap::new();
    for (i, (user, _, millis)) in input.iter().enumerate() {
        let e = reference.entry(user.clone()).or_insert((0, 0, free()));
        e.0 += 1;
        if i >= first.len() {
            e.1 += millis;
        }
    }
    for backend in BACKENDS {
        let snapshot = snapshot_v1(&store, backend, &dir, first).await;
        let recorded: crate::data::Schema = serde_json::from_str(&snapshot.schemas[KEYED_STATE]).unwrap();
        assert_eq!(
            recorded,
            StatsV1::schema(),
            "the snapshot records the state's schema"
        );
        let init = restored(&store, &snapshot, backend, &dir, "v2").await;
        let timers = restore_timers::<String>(Some(&init)).unwrap();
        let state = Keyed::<String, StatsV2>::restored(Some(init), 0..128, 128, Some(&restore_of(&snapshot)))
            .unwrap();
        let (mut op, sink) = operator(state, timers);
        for v in rest {
            op.collect(v.clone());
        }
        op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
        assert_eq!(op.failure(), None);
        let got: BTreeMap<String, (u64, u64, String)> = sink.records().into_iter().map(|(_, r)| r).collect();
        assert_eq!(got, reference, "backend: {backend:?}");
        // A restore at the same type reads the state as it is.
        let init = restored(&store, &snapshot, backend, &dir, "v1-again").await;
        let timers = restore_timers::<String>(Some(&init)).unwrap();
        let state = Keyed::<String, StatsV1>::restored(Some(init), 0..128, 128, Some(&restore_of(&snapshot)))
            .unwrap();
        let (mut op, sink) = operator(state, timers);
        op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
        let total: u64 = sink.records().iter().map(|(_, (_, (n, _, _)))| n).sum();
        assert_eq!(total, first.len() as u64, "backend: {backend:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_incompatible_state_type_fails_the_restore_without_restarts_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("floe-evolution-refused-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
    for backend in BACKENDS {
        let snapshot = snapshot_v1(&store, backend, &dir, &visits(50)).await;
        let init = restored(&store, &snapshot, backend, &dir, "refused").await;
        let Err(e) =
            Keyed::<String, StatsNoDefault>::restored(Some(init), 0..128, 128, Some(&restore_of(&snapshot)))
        else {
            panic!("a field without a default was restored (backend: {backend:?})");
        };
        assert!(e.is_non_recoverable(), "{e}");
        let message = e.to_string();
        assert!(
            message.contains("state \"keyed\"")
                && message.contains("StatsNoDefault.country: the field was added without #[data(default)]"),
            "{message}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// Per-entry states declared with descriptors: a map's values, a list's elements (with a time to
// live: each stored with its expiry) and a value change type between the snapshot and the restore.

#[derive(Clone, Debug, PartialEq, Data)]
struct PageV1 {
    hits: u64,
    title: String,
}

/// `title` removed, `bytes` added.
#[derive(Clone, Debug, PartialEq, Data)]
struct PageV2 {
    hits: u64,
    #[data(default)]
    bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Data)]
struct ClickV1 {
    at: u64,
}

#[derive(Clone, Debug, PartialEq, Data)]
struct ClickV2 {
    at: u64,
    #[data(default = "one")]
    weight: u64,
}

fn one() -> u64 {
    1
}

/// Per user: (page, hits, bytes) sorted, the sum of the clicks' `at x weight`, the last visit's
/// bytes.
type PagesOut = (String, PagesResult);
type PagesResult = (Vec<(String, u64, u64)>, (u64, u64));
/// Per user: hits and bytes by page, and the clicks' sum and last bytes.
type PagesByUser = BTreeMap<String, (BTreeMap<String, (u64, u64)>, (u64, u64))>;

struct Descriptors<P, C> {
    pages: crate::MapStateDescriptor<String, P>,
    clicks: crate::ListStateDescriptor<C>,
    last: crate::ValueStateDescriptor<P>,
}

impl<P: Data, C: Data> Descriptors<P, C> {
    fn new() -> Self {
        let ttl = crate::StateTtlConfig::new_builder(std::time::Duration::from_secs(3600)).build();
        Descriptors {
            pages: crate::MapStateDescriptor::new("pages"),
            clicks: crate::ListStateDescriptor::new("clicks").enable_time_to_live(ttl),
            last: crate::ValueStateDescriptor::new("last"),
        }
    }
}

struct PagesV1(Descriptors<PageV1, ClickV1>);
struct PagesV2(Descriptors<PageV2, ClickV2>);
/// The map's user key type changed (page names to numbers): refused.
struct PagesByNumber(crate::MapStateDescriptor<u64, PageV1>);

impl KeyedProcessFunction<String, Visit, PagesOut> for PagesV1 {
    type State = ();
    fn process_element(
        &self,
        (_, page, millis): Visit,
        ctx: &mut KeyedContext<'_, String, ()>,
        _: &mut dyn Collector<PagesOut>,
    ) {
        ctx.register_event_time_timer(MAX_WATERMARK);
        let mut pages = ctx.map_state(&self.0.pages);
        let hits = pages.get(&page).map_or(0, |p| p.hits);
        pages.put(
            page.clone(),
            PageV1 {
                hits: hits + 1,
                title: page.to_uppercase(),
            },
        );
        ctx.list_state(&self.0.clicks).add(ClickV1 { at: millis });
        ctx.value_state(&self.0.last)
            .update(PageV1 { hits: 0, title: page });
    }
    fn on_timer(&self, _: i64, _: &mut KeyedContext<'_, String, ()>, _: &mut dyn Collector<PagesOut>) {}
}

impl KeyedProcessFunction<String, Visit, PagesOut> for PagesV2 {
    type State = ();
    fn process_element(
        &self,
        (_, page, millis): Visit,
        ctx: &mut KeyedContext<'_, String, ()>,
        _: &mut dyn Collector<PagesOut>,
    ) {
        ctx.register_event_time_timer(MAX_WATERMARK);
        let mut pages = ctx.map_state(&self.0.pages);
        let p = pages.get(&page).unwrap_or(PageV2 { hits: 0, bytes: 0 });
        pages.put(
            page,
            PageV2 {
                hits: p.hits + 1,
                bytes: p.bytes + millis,
            },
        );
        ctx.list_state(&self.0.clicks).add(ClickV2 {
            at: millis,
            weight: 2,
        });
        ctx.value_state(&self.0.last).update(PageV2 {
            hits: 0,
            bytes: millis,
        });
    }
    fn on_timer(&self, _: i64, ctx: &mut KeyedContext<'_, String, ()>, out: &mut dyn Collector<PagesOut>) {
        let mut pages: Vec<(String, u64, u64)> = ctx
            .map_state(&self.0.pages)
            .entries()
            .into_iter()
            .map(|(k, p)| (k, p.hits, p.bytes))
            .collect();
        pages.sort();
        let clicks = ctx
            .list_state(&self.0.clicks)
            .get()
            .iter()
            .map(|c| c.at * c.weight)
            .sum();
        let last = ctx.value_state(&self.0.last).value().map_or(0, |p| p.bytes);
        out.collect((ctx.key().clone(), (pages, (clicks, last))));
    }
}

impl KeyedProcessFunction<String, Visit, PagesOut> for PagesByNumber {
    type State = ();
    fn process_element(
        &self,
        _: Visit,
        ctx: &mut KeyedContext<'_, String, ()>,
        _: &mut dyn Collector<PagesOut>,
    ) {
        ctx.map_state(&self.0).get(&1);
    }
    fn on_timer(&self, _: i64, _: &mut KeyedContext<'_, String, ()>, _: &mut dyn Collector<PagesOut>) {}
}

fn pages_operator<F: KeyedProcessFunction<String, Visit, PagesOut, State = ()>>(
    f: F,
    state: Keyed<String, ()>,
    timers: Timers<String>,
) -> (
    KeyedProcessOperator<Visit, String, PagesOut, F>,
    TimedSink<PagesOut>,
) {
    let time = Arc::new(TaskTime::new(std::time::Duration::from_millis(200)));
    let sink = TimedSink::new(time.clone());
    let key: KeyFn<Visit, String> = Arc::new(|v: &Visit| v.0.clone());
    let op = KeyedProcessOperator::new(key, Arc::new(f), state, timers, time, Box::new(sink.clone()));
    (op, sink)
}

#[tokio::test]
async fn descriptor_states_of_old_types_restore_into_changed_types_on_every_backend() {
    let dir = std::env::temp_dir().join(format!("floe-evolution-entries-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
    let input = visits(1_500);
    let (first, rest) = input.split_at(600);
    // The reference: hits over all visits, bytes and weight 2 only for the new version's, and
    // the last visit's millis (0 for a user whose last visit was the old version's).
    let mut reference = PagesByUser::new();
    for (i, (user, page, millis)) in input.iter().enumerate() {
        let e = reference.entry(user.clone()).or_default();
        let p = e.0.entry(page.clone()).or_default();
        p.0 += 1;
        let new = i >= first.len();
        if new {
            p.1 += millis;
        }
        e.1.0 += millis * if new { 2 } else { 1 };
        e.1.1 = if new { *millis } else { 0 };
    }
    let reference: BTreeMap<String, PagesResult> = reference
        .into_iter()
        .map(|(u, (pages, rest))| {
            (
                u,
                (pages.into_iter().map(|(p, (h, b))| (p, h, b)).collect(), rest),
            )
        })
        .collect();
    for backend in BACKENDS {
        let init = fresh(backend, &dir, "pages-v1");
        let (mut op, _) = pages_operator(
            PagesV1(Descriptors::new()),
            Keyed::new(init, 0..128, 128).unwrap(),
            Timers::default(),
        );
        for v in first {
            op.collect(v.clone());
        }
        let prepared = op.state.prepare_snapshot_with_timers(1, &op.timers).unwrap();
        let target = SnapshotTarget {
            store: store.clone(),
            dir: format!("chk-1/{backend:?}"),
            shared: format!("shared/{backend:?}"),
        };
        let snapshot = prepared.upload(&target).await.unwrap();
        for name in ["map:pages", "list+ttl:clicks", "value:last", KEYED_STATE] {
            assert!(
                snapshot.schemas.contains_key(name),
                "{name} in {:?}",
                snapshot.schemas.keys()
            );
        }
        let init = restored(&store, &snapshot, backend, &dir, "pages-v2").await;
        let timers = restore_timers::<String>(Some(&init)).unwrap();
        let state = Keyed::restored(Some(init), 0..128, 128, Some(&restore_of(&snapshot))).unwrap();
        let (mut op, sink) = pages_operator(PagesV2(Descriptors::new()), state, timers);
        for v in rest {
            op.collect(v.clone());
        }
        op.on_time(TimeEvent::Watermark(MAX_WATERMARK));
        assert_eq!(op.failure(), None, "backend: {backend:?}");
        let got: BTreeMap<String, PagesResult> =
            sink.records().into_iter().map(|(_, (u, r))| (u, r)).collect();
        assert_eq!(got, reference, "backend: {backend:?}");
        // A state restored and not declared again keeps the schema it was written with.
        let init = restored(&store, &snapshot, backend, &dir, "pages-key").await;
        let state =
            Keyed::<String, ()>::restored(Some(init), 0..128, 128, Some(&restore_of(&snapshot))).unwrap();
        let (mut op, _) = pages_operator(
            PagesByNumber(crate::MapStateDescriptor::new("pages")),
            state,
            Timers::default(),
        );
        let resnapshot = op.state.prepare_snapshot_with_timers(2, &op.timers).unwrap();
        let again = resnapshot
            .upload(&SnapshotTarget {
                store: store.clone(),
                dir: format!("chk-2/{backend:?}"),
                shared: format!("shared/{backend:?}"),
            })
            .await
            .unwrap();
        assert_eq!(again.schemas, snapshot.schemas, "backend: {backend:?}");
        // Its first access with another user key type fails the task, naming the state.
        op.collect(first[0].clone());
        let failure = op.failure().expect("a changed map key type is refused");
        assert!(
            failure.contains("state \"map:pages\"") && failure.contains("the map's key type changed"),
            "{failure}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
