//! Streamed transfers on a file system and on S3 (moto): objects larger than a part keep every byte
//! through files, object-to-object copies and conditional creates, and no request carries more
//! than a part.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use floe_storage::faulty_proxy::FaultyProxy;
use floe_storage::testing::MotoServer;
use floe_storage::{Error, ObjectStore, PART_SIZE};

/// 2.5 parts of distinct bytes.
fn payload() -> Vec<u8> {
    (0..PART_SIZE * 5 / 2)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 13)) as u8)
        .collect()
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("floe-streams-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A moto server behind a proxy that records the largest request, and a store on it.
fn s3(what: &str, bucket: &str) -> Option<(std::sync::Arc<MotoServer>, FaultyProxy, ObjectStore)> {
    let moto = MotoServer::for_tests(what, bucket)?;
    let proxy = FaultyProxy::start(&moto.endpoint, 1 << 30);
    let mut conf = moto.conf();
    conf.insert("s3.endpoint".into(), proxy.endpoint.clone());
    let store = ObjectStore::open(&moto.url("p"), &conf).unwrap();
    Some((moto, proxy, store))
}

async fn files_and_copies_keep_every_byte(store: &ObjectStore, other: &ObjectStore, dir: &std::path::Path) {
    let bytes = payload();
    let local = dir.join("in");
    std::fs::write(&local, &bytes).unwrap();
    assert_eq!(
        store.upload_file("a/in", &local).await.unwrap(),
        bytes.len() as u64
    );
    assert_eq!(store.get("a/in").await.unwrap(), bytes.as_slice());
    assert_eq!(
        store.copy_to("a/in", other, "b/copy").await.unwrap(),
        bytes.len() as u64
    );
    let back = dir.join("back");
    assert_eq!(
        other.download_file("b/copy", &back).await.unwrap(),
        bytes.len() as u64
    );
    assert!(
        std::fs::read(&back).unwrap() == bytes,
        "the downloaded copy differs"
    );
    let e = store
        .upload_file("a/none", &dir.join("missing"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("a/none") && e.contains("missing"), "{e}");
}

#[tokio::test]
async fn files_and_copies_keep_every_byte_on_a_file_system() {
    let dir = temp_dir("fs");
    let store = ObjectStore::open(&format!("file://{}/store", dir.display()), &BTreeMap::new()).unwrap();
    let other = ObjectStore::open(&format!("file://{}/other", dir.display()), &BTreeMap::new()).unwrap();
    files_and_copies_keep_every_byte(&store, &other, &dir).await;
}

#[tokio::test]
async fn files_and_copies_keep_every_byte_on_s3_in_requests_of_a_part_at_most() {
    let Some((_moto, proxy, store)) = s3("streamed transfers on S3", "streams") else {
        return;
    };
    let dir = temp_dir("s3");
    // Copies from S3 to a file system and back pass through this process either way.
    let other = ObjectStore::open(&format!("file://{}/other", dir.display()), &BTreeMap::new()).unwrap();
    files_and_copies_keep_every_byte(&store, &other, &dir).await;
    other.copy_to("b/copy", &store, "c/copy").await.unwrap();
    assert_eq!(store.get("c/copy").await.unwrap(), payload().as_slice());
    assert!(
        proxy.largest_request_body() <= PART_SIZE as u64,
        "a request carried {} bytes",
        proxy.largest_request_body()
    );
}

/// `put` of a body larger than a part: before, one PUT carried it whole under one 10 s deadline.
#[tokio::test]
async fn a_put_larger_than_a_part_goes_in_parts() {
    let Some((_moto, proxy, store)) = s3("a large put on S3", "puts") else {
        return;
    };
    store.put("big", payload()).await.unwrap();
    store.create("big-once", payload()).await.unwrap();
    assert_eq!(store.get("big").await.unwrap(), payload().as_slice());
    assert_eq!(store.get("big-once").await.unwrap(), payload().as_slice());
    assert!(
        proxy.largest_request_body() <= PART_SIZE as u64,
        "a request carried {} bytes",
        proxy.largest_request_body()
    );
}

/// A conditional create of an object of several parts: S3 checks `If-None-Match: *` when it
/// completes the upload, so the first writer wins whole and the second is told.
#[tokio::test]
async fn a_conditional_create_in_parts_fails_when_the_object_exists() {
    let Some((moto, _proxy, store)) = s3("conditional creates in parts", "creates") else {
        return;
    };
    let first = payload();
    let mut writer = store.creator("once").await.unwrap();
    writer.write(first.clone()).await.unwrap();
    writer.close().await.unwrap();
    let mut second = store.creator("once").await.unwrap();
    second.write(vec![7u8; PART_SIZE * 2]).await.unwrap();
    let e = second.close().await.unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    assert!(e.to_string().contains("once already exists"), "{e}");
    assert_eq!(
        store.get("once").await.unwrap(),
        first.as_slice(),
        "the first create wins"
    );
    assert_eq!(
        moto.open_multipart_uploads(),
        0,
        "the refused upload is aborted, not left incomplete"
    );
}

/// A write given up part way (an error, a stop) leaves nothing behind: no object, no partial local
/// file, no incomplete multipart upload.
async fn an_abandoned_write_leaves_nothing(store: &ObjectStore) {
    let mut writer = store.writer("abandoned").await.unwrap();
    writer.write(payload()).await.unwrap();
    writer.abort().await.unwrap();
    assert_eq!(
        store.get_opt("abandoned").await.unwrap(),
        None,
        "an abandoned object"
    );
}

/// Before, `abort` on a local file failed (the file service cannot abort) and left the partial file.
#[tokio::test]
async fn an_abandoned_write_leaves_nothing_on_a_file_system() {
    let dir = temp_dir("abandoned");
    let store = ObjectStore::open(&format!("file://{}", dir.display()), &BTreeMap::new()).unwrap();
    an_abandoned_write_leaves_nothing(&store).await;
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, Vec::<String>::new(), "files left in the store's directory");
}

#[tokio::test]
async fn an_abandoned_write_leaves_nothing_on_s3() {
    let Some((moto, _proxy, store)) = s3("abandoned writes on S3", "abandoned") else {
        return;
    };
    an_abandoned_write_leaves_nothing(&store).await;
    assert_eq!(
        moto.open_multipart_uploads(),
        0,
        "incomplete multipart uploads left in the bucket"
    );
    // The check can see one: an upload begun and not ended is listed.
    let mut writer = store.writer("begun").await.unwrap();
    writer.write(payload()).await.unwrap();
    let listed = moto.open_multipart_uploads();
    writer.abort().await.unwrap();
    assert_eq!(listed, 1, "an upload in progress");
    assert_eq!(moto.open_multipart_uploads(), 0, "after its abort");
}
