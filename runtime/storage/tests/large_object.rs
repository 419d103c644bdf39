//! One large object through a slow S3 server that fails one part and stalls another, written and
//! read back part by part in bounded memory. Alone in its test binary: the memory it asserts is the
//! process's peak (VmHWM), which another test running beside it would add to.
//!
//! The size is `FLOE_LARGE_OBJECT_MIB` (default 384 MiB, CI's size; `FLOE_LARGE_OBJECT_MIB=6144`
//! is the 6 GiB, a run of several minutes that needs about 13 GiB free for moto).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use floe_storage::faulty_proxy::FaultyProxy;
use floe_storage::testing::MotoServer;
use floe_storage::{ObjectStore, PART_SIZE, PART_TIMEOUT_KEY};

const MIB: usize = 1 << 20;

/// Deterministic bytes, a MiB at a time (xorshift): the test never holds the object.
struct Generator(u64);

impl Generator {
    fn next_mib(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MIB);
        while out.len() < MIB {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            out.extend_from_slice(&self.0.to_le_bytes());
        }
        out
    }
}

fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap()
        / 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_object_moves_through_a_slow_failing_server_part_by_part_in_bounded_memory() {
    let Some(moto) = MotoServer::for_tests("a large object on S3", "large") else {
        return;
    };
    let mib: usize = std::env::var("FLOE_LARGE_OBJECT_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(384);
    // 128 MiB/s shared by every part in flight: a part takes a few hundred ms, a whole-object
    // request several seconds (beyond the 10 s a single request gets, from 1.3 GiB on).
    let proxy = FaultyProxy::start(&moto.endpoint, 128 * MIB as u64);
    proxy.fail_part_once(2);
    // A request that never gets an answer (an hour is past the test's end): only the part deadline
    // (3 s here) ends it, and that part is sent again while the stalled request hangs. Before each
    // request had the deadline, the upload waited on it for good.
    proxy.stall_part_once(5, Duration::from_secs(3600));
    let mut conf = moto.conf();
    conf.insert("s3.endpoint".into(), proxy.endpoint.clone());
    conf.insert(PART_TIMEOUT_KEY.into(), "3000".into());
    let store = ObjectStore::open(&moto.url("objects"), &conf).unwrap();
    let before = peak_rss_mib();

    let (mut generator, mut written) = (Generator(0x9E37_79B9_7F4A_7C15), crc32fast::Hasher::new());
    let upload = async {
        let mut writer = store.writer("big").await.unwrap();
        for _ in 0..mib {
            let piece = generator.next_mib();
            written.update(&piece);
            writer.write(piece).await.unwrap();
        }
        writer.close().await.unwrap()
    };
    // A bound on waiting, so a hang fails with a message instead of running until CI's limit (the
    // upload takes seconds at the proxy's rate; minutes are no measurement of its speed).
    let size = tokio::time::timeout(Duration::from_secs(20 + mib as u64), upload)
        .await
        .unwrap_or_else(|_| panic!("the upload did not end: the stalled part was never sent again"));
    assert_eq!(size, (mib * MIB) as u64);
    assert_eq!(
        store.size("big").await.unwrap(),
        size,
        "the object's size as the server has it"
    );

    let mut reader = store.reader("big").await.unwrap();
    let (mut read, mut read_bytes) = (crc32fast::Hasher::new(), 0u64);
    while let Some(part) = reader.next_part().await.unwrap() {
        assert!(part.len() <= PART_SIZE, "a read piece of {} bytes", part.len());
        read.update(&part);
        read_bytes += part.len() as u64;
    }
    assert_eq!(read_bytes, size, "bytes read back");
    assert_eq!(
        read.finalize(),
        written.finalize(),
        "the object read back is the one written"
    );

    assert_eq!(proxy.failed_parts(), 1, "the injected 500 reached a part");
    assert_eq!(proxy.stalled_parts(), 1, "the injected stall reached a part");
    assert!(
        proxy.largest_request_body() <= PART_SIZE as u64,
        "a request carried {} bytes, more than a part ({PART_SIZE})",
        proxy.largest_request_body()
    );
    let peak = peak_rss_mib();
    eprintln!(
        "{mib} MiB written and read back through the faulty proxy; peak RSS {peak} MiB ({before} MiB before)"
    );
    // Parts in flight (4 of 8 MiB each way) and their copies in the HTTP client: tens of MiB.
    // Holding the object would take its whole size.
    assert!(
        peak < before + 160,
        "peak RSS {peak} MiB for a {mib} MiB object ({before} MiB before the transfer)"
    );
}
