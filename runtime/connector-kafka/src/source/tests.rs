//! The Kafka source's pure parts: split assignment, watermarks and idleness, offset commits and positions.

use super::*;

#[test]
fn every_partition_has_one_owner_spread_over_the_subtasks() {
    for p in [1u32, 2, 3, 7] {
        let mut counts = vec![0; p as usize];
        for partition in 0..(p as i32 * 4) {
            let o = owner("events", partition, p);
            assert!(o < p);
            counts[o as usize] += 1;
        }
        // Consecutive partitions go to consecutive subtasks, as in Flink.
        assert!(counts.iter().all(|c| *c == 4), "{counts:?}");
    }
}

#[test]
fn the_watermark_is_the_slowest_partitions_less_the_bound() {
    let options = Arc::new(SourceOptions {
        watermark_out_of_orderness: Some(Duration::from_millis(100)),
        ..SourceOptions::new("127.0.0.1:1", Subscription::Topics(vec!["t".into()]))
    });
    let ctx = event_time_context();
    let mut reader = KafkaSourceReader::new(options, crate::records::value_bytes(), &ctx).unwrap();
    let part = |next, stop, max_timestamp| Owned {
        next,
        stop,
        max_timestamp,
        last_active: Instant::now(),
    };
    reader.owned.insert(("t".into(), 0), part(5, None, Some(10_000)));
    reader.owned.insert(("t".into(), 1), part(9, None, Some(4_000)));
    assert_eq!(
        reader.watermark(),
        Some(3_899),
        "partition 1 holds event time back"
    );
    // A partition read to its end (bounded) holds nothing back.
    reader
        .owned
        .insert(("t".into(), 1), part(9, Some(9), Some(4_000)));
    assert_eq!(reader.watermark(), Some(9_899));
    // One not read from yet holds everything back, as in Flink without idleness.
    reader.owned.insert(("t".into(), 2), part(0, None, None));
    assert_eq!(reader.watermark(), Some(i64::MIN));
    // Without event time the source gives no watermark.
    reader.timestamps = None;
    assert_eq!(reader.watermark(), None);
}

/// Subtask 0 of 1, with event time.
fn event_time_context() -> ConnectorContext {
    ConnectorContext {
        job_id: String::new(),
        subtask: 0,
        parallelism: 1,
        attempt: 0,
        configuration: BTreeMap::new(),
        checkpointing: false,
        restored: None,
        timestamps: Some(floe_datastream::connector::RecordTimestamps::default()),
    }
}

/// Issue 31, item 10: a partition that goes quiet stops holding event time back once the
/// idle timeout passes, and rejoins with its next record; a subtask whose partitions are all
/// quiet, or that owns none, is idle. Without a timeout a quiet partition holds event time.
#[test]
fn quiet_partitions_drop_out_of_the_watermark_after_the_idle_timeout() {
    let mut options = SourceOptions::new("localhost:1", Subscription::Topics(vec!["t".into()]));
    options.watermark_out_of_orderness = Some(Duration::from_millis(100));
    let ctx = event_time_context();
    let start = Instant::now();
    let part = |max_timestamp, active_ms| Owned {
        next: 0,
        stop: None,
        max_timestamp,
        last_active: start + Duration::from_millis(active_ms),
    };
    let reader_with = |timeout: Option<u64>| {
        let mut options = options.clone();
        options.watermark_idle_timeout = timeout.map(Duration::from_millis);
        let mut reader =
            KafkaSourceReader::new(Arc::new(options), crate::records::value_bytes(), &ctx).unwrap();
        reader.started = true;
        reader
    };
    let at = |ms| start + Duration::from_millis(ms);

    // Partition 1 gave its last record at 0 ms, partition 0 keeps going.
    let mut reader = reader_with(Some(500));
    reader.owned.insert(("t".into(), 0), part(Some(10_000), 900));
    reader.owned.insert(("t".into(), 1), part(Some(4_000), 0));
    assert_eq!(
        reader.watermark_at(at(400)),
        Some(3_899),
        "not quiet for long enough yet"
    );
    assert_eq!(
        reader.watermark_at(at(1_000)),
        Some(9_899),
        "partition 1 quiet for 1 s"
    );
    assert!(!reader.idle_at(at(1_000)), "partition 0 is active");
    assert!(
        reader.idle_at(at(1_400)),
        "both quiet for 500 ms: the subtask is idle"
    );
    assert_eq!(reader.watermark_at(at(1_400)), None);
    // Partition 1 has a record again: it holds event time back again.
    reader.owned.get_mut(&("t".to_string(), 1)).unwrap().last_active = at(1_500);
    assert!(!reader.idle_at(at(1_600)));
    assert_eq!(reader.watermark_at(at(1_600)), Some(3_899));

    // Without a timeout, a partition quiet for an hour still holds event time back.
    let mut reader = reader_with(None);
    reader.owned.insert(("t".into(), 0), part(Some(10_000), 0));
    reader.owned.insert(("t".into(), 1), part(Some(4_000), 0));
    assert_eq!(reader.watermark_at(at(3_600_000)), Some(3_899));
    assert!(!reader.idle_at(at(3_600_000)));

    // A subtask that owns no partition (more subtasks than partitions) is idle, timeout or
    // not, but only once it has learnt its partitions.
    let mut reader = reader_with(None);
    assert!(reader.idle_at(at(0)));
    reader.started = false;
    assert!(!reader.idle_at(at(0)));
    // Without event time there is no idleness to speak of.
    let mut reader = reader_with(Some(500));
    reader.timestamps = None;
    assert!(!reader.idle_at(at(10_000)));
}

#[test]
fn a_completion_commits_the_newest_snapshot_it_covers_and_drops_older_ones() {
    let mut pending: BTreeMap<u64, &str> = BTreeMap::from([(3, "c3"), (4, "c4"), (6, "c6")]);
    // Nothing snapshotted up to 2: nothing to commit, nothing dropped.
    assert_eq!(take_covered(&mut pending, 2), None);
    assert_eq!(pending.len(), 3);
    // 5 completed (this reader took no snapshot for it): 4's offsets, 3's dropped with them.
    assert_eq!(take_covered(&mut pending, 5), Some("c4"));
    assert_eq!(pending, BTreeMap::from([(6, "c6")]));
    assert_eq!(take_covered(&mut pending, 6), Some("c6"));
    assert!(pending.is_empty());
    assert_eq!(take_covered(&mut pending, u64::MAX), None);
}

#[test]
fn positions_round_trip() {
    let p = Position {
        topic: "t".into(),
        partition: 3,
        offset: 17,
        stop: Some(20),
        known: BTreeMap::from([("t".into(), 4)]),
    };
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Position>(&text).unwrap(), p);
}

/// A checkpoint taken before a reader's first poll (a trigger already queued when its task
/// starts) keeps the reader's place as unstarted, not as no partitions at all; a reader restored
/// from it keeps that place until it starts, and takes the unstarted reader's partitions then
/// (the broker test `a_checkpoint_taken_before_the_reader_started_reads_its_partitions`).
#[test]
fn an_unstarted_reader_s_place_survives_a_checkpoint() {
    let options = Arc::new(SourceOptions::new(
        "127.0.0.1:1",
        Subscription::Topics(vec!["t".into()]),
    ));
    let mut ctx = event_time_context();
    ctx.subtask = 1;
    ctx.parallelism = 3;
    let fresh = KafkaSourceReader::new(options.clone(), crate::records::value_bytes(), &ctx).unwrap();
    let places = fresh.positions();
    assert_eq!(places, [r#"{"unstarted":{"subtask":1,"parallelism":3}}"#]);

    // Restored (after a rescale to 2) with that place and another subtask's position.
    let position = r#"{"topic":"t","partition":0,"offset":7,"known":{"t":3}}"#.to_string();
    ctx.subtask = 0;
    ctx.parallelism = 2;
    ctx.restored = Some((4, vec![places[0].clone(), position.clone()]));
    let restored = KafkaSourceReader::new(options, crate::records::value_bytes(), &ctx).unwrap();
    assert_eq!(
        restored.unstarted,
        [Unstarted {
            subtask: 1,
            parallelism: 3
        }]
    );
    assert_eq!(restored.positions(), [position, places[0].clone()]);
}
