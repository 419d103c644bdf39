//! The Kafka source: each partition is a split, owned by one subtask, read from an offset the
//! checkpoint records (Flink's `KafkaSource`; the consumer group's committed offsets are for
//! monitoring and for a later job's `committed` starting offsets).
//!
//! The group's offsets are committed when a checkpoint completes, not when it is snapshotted
//! (Flink's `notifyCheckpointComplete`): a checkpoint that fails after this source's snapshot
//! (a sink's pre-commit, an upload, its metadata) leaves them where the last completed one put
//! them, so they never run ahead of the output that checkpoint made visible. Each snapshot's
//! offsets are kept under its checkpoint id until a completion covers it.
//!
//! Which subtask owns a partition: the one the checkpoint's position of that partition was dealt
//! to on a restore; otherwise (a fresh start, or a partition created later) Flink's rule,
//! `(hash(topic) * 31 + partition) % parallelism`. Every position also carries how many partitions
//! of each topic were known when it was taken, so a restored subtask tells a partition created
//! since (read from the earliest offset by its owner) from one another subtask was dealt.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use floe_datastream::connector::{ConnectorContext, SourceReader};
use floe_datastream::{Collector, Data, Result};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::options::{SourceOptions, StartingOffsets, Subscription};
use crate::records::{ConsumedRecord, Deserializer};
use crate::{error, kafka_error};

/// How long a metadata or offsets request may take before the source gives up on the brokers.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Records a poll hands on at most, so barriers and timers get their turn.
const MAX_BATCH: usize = 2_000;
/// Snapshots whose offsets wait for their checkpoint to complete, at most (the oldest go first:
/// a completion commits the newest snapshot it covers, so only a completion of one of those
/// could have used them).
const MAX_PENDING_COMMITS: usize = 32;

/// One partition's place in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    topic: String,
    partition: i32,
    /// The next offset to read.
    offset: i64,
    /// Bounded: the offset the partition ends at (exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stop: Option<i64>,
    /// Partitions per topic known when the position was taken.
    known: BTreeMap<String, i32>,
}

/// The place of a reader that never started (a checkpoint taken before its first poll, which is
/// when it resolves its partitions): the partitions subtask `subtask` of `parallelism` owns, from
/// the starting offsets. Before, such a reader's place was no position at all, and a restore of
/// that checkpoint read none of its partitions (a bounded job finished without them; an
/// unbounded one never read them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Unstarted {
    subtask: u32,
    parallelism: u32,
}

/// How an [`Unstarted`] place is written in a checkpoint: `{"unstarted":{...}}`.
#[derive(Debug, Serialize, Deserialize)]
struct UnstartedPosition {
    unstarted: Unstarted,
}

#[derive(Debug, Clone, Copy)]
struct Owned {
    next: i64,
    stop: Option<i64>,
    /// The largest record timestamp read (event time), if any.
    max_timestamp: Option<i64>,
    /// When the partition last gave a record (or was taken on): with an idle timeout, one quiet
    /// for longer holds event time back no more.
    last_active: Instant,
}

impl Owned {
    fn done(&self) -> bool {
        self.stop.is_some_and(|s| self.next >= s)
    }
}

/// Flink's `KafkaSourceEnumerator.getSplitOwner`, with a hash of the topic that is the same in
/// every process (FNV-1a).
pub fn owner(topic: &str, partition: i32, parallelism: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in topic.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let start = (h.wrapping_mul(31) & 0x7FFF_FFFF) % parallelism.max(1);
    (start + partition.unsigned_abs()) % parallelism.max(1)
}

/// A subtask's reader of the partitions it owns.
pub struct KafkaSourceReader<T> {
    options: Arc<SourceOptions>,
    deserialize: Deserializer<T>,
    consumer: Arc<BaseConsumer>,
    subtask: u32,
    parallelism: u32,
    /// `None`: a fresh start; `Some(positions)` the positions a restore dealt this subtask.
    restored: Option<Vec<Position>>,
    /// The places of readers that never started which a restore dealt this subtask: their
    /// partitions are this reader's, from the starting offsets.
    unstarted: Vec<Unstarted>,
    started: bool,
    owned: BTreeMap<(String, i32), Owned>,
    known: BTreeMap<String, i32>,
    last_discovery: Instant,
    discovery: Option<tokio::task::JoinHandle<Result<BTreeMap<String, i32>>>>,
    pattern: Option<regex_lite::Regex>,
    /// Event time: where each record's timestamp goes, and how far a partition's watermark
    /// trails its largest timestamp.
    timestamps: Option<(floe_datastream::connector::RecordTimestamps, i64)>,
    /// With a group id: the offsets each checkpoint snapshotted, `(topic, partition, next
    /// offset)`, committed to the group once that checkpoint (or a later one) completes.
    pending_commits: BTreeMap<u64, Vec<(String, i32, i64)>>,
    /// The last commit to the group, in flight off the task's thread (each waits for the one
    /// before, so an older checkpoint's offsets never land after a newer one's).
    committing: Option<tokio::task::JoinHandle<()>>,
}

impl<T> std::fmt::Debug for KafkaSourceReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSourceReader")
            .field("subtask", &self.subtask)
            .field("owned", &self.owned)
            .finish()
    }
}

impl<T: Data> KafkaSourceReader<T> {
    pub fn new(
        options: Arc<SourceOptions>,
        deserialize: Deserializer<T>,
        ctx: &ConnectorContext,
    ) -> Result<Self> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &options.bootstrap_servers)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // End-of-partition events tell a bounded source it is done (librdkafka logs them).
            .set(
                "enable.partition.eof",
                if options.bounded { "true" } else { "false" },
            )
            .set("isolation.level", "read_committed")
            .set("client.id", format!("floe-source-{}", ctx.subtask));
        // librdkafka assigns partitions only to a consumer with a group id; without the user's
        // one, a name of its own that nothing commits to (the source never joins the group).
        let group = options
            .group_id
            .clone()
            .unwrap_or_else(|| format!("floe-source-{}", uuid::Uuid::new_v4().simple()));
        config.set("group.id", group);
        for (k, v) in &options.properties {
            config.set(k, v);
        }
        let consumer: BaseConsumer = config.create().map_err(|e| {
            error(format!(
                "cannot make a consumer for {}: {e}",
                options.bootstrap_servers
            ))
        })?;
        let pattern = match &options.subscription {
            Subscription::Pattern(p) => Some(
                regex_lite::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| error(format!("topic pattern {p:?}: {e}")))?,
            ),
            Subscription::Topics(_) => None,
        };
        let mut unstarted = Vec::new();
        let restored = match &ctx.restored {
            None => None,
            Some((checkpoint, positions)) => {
                let mut restored = Vec::new();
                for p in positions {
                    if let Ok(u) = serde_json::from_str::<UnstartedPosition>(p) {
                        unstarted.push(u.unstarted);
                        continue;
                    }
                    restored.push(serde_json::from_str::<Position>(p).map_err(|e| {
                        floe_datastream::Error::Restore {
                            checkpoint: *checkpoint,
                            message: format!("Kafka source position {p:?}: {e}"),
                        }
                    })?);
                }
                Some(restored)
            }
        };
        Ok(KafkaSourceReader {
            deserialize,
            consumer: Arc::new(consumer),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            restored,
            unstarted,
            started: false,
            owned: BTreeMap::new(),
            known: BTreeMap::new(),
            last_discovery: Instant::now(),
            discovery: None,
            pattern,
            pending_commits: BTreeMap::new(),
            committing: None,
            timestamps: match (&ctx.timestamps, options.watermark_out_of_orderness) {
                (Some(t), Some(bound)) => {
                    Some((t.clone(), i64::try_from(bound.as_millis()).unwrap_or(i64::MAX)))
                }
                _ => None,
            },
            options,
        })
    }

    /// Whether `o` has given no record for the idle timeout (never, without one).
    fn quiet(&self, o: &Owned, now: Instant) -> bool {
        self.options
            .watermark_idle_timeout
            .is_some_and(|timeout| now.saturating_duration_since(o.last_active) >= timeout)
    }

    /// The smallest of the active owned partitions' watermarks (a partition's largest timestamp
    /// less the bound; one not read from yet holds event time back, as in Flink, until it has
    /// been quiet for the idle timeout).
    fn watermark_at(&self, now: Instant) -> Option<i64> {
        let (_, bound) = self.timestamps.as_ref()?;
        self.owned
            .values()
            .filter(|o| !o.done() && !self.quiet(o, now))
            .map(|o| {
                o.max_timestamp
                    .map_or(i64::MIN, |t| t.saturating_sub(*bound).saturating_sub(1))
            })
            .min()
    }

    /// With event time, the subtask is idle when it owns no partition it still reads (more
    /// subtasks than partitions: with no idleness at all such a subtask would hold every
    /// downstream watermark at its minimum forever) or every one it owns has been quiet for the
    /// idle timeout.
    fn idle_at(&self, now: Instant) -> bool {
        self.timestamps.is_some()
            && self.started
            && self
                .owned
                .values()
                .filter(|o| !o.done())
                .all(|o| self.quiet(o, now))
    }

    fn mine(&self, topic: &str, partition: i32) -> bool {
        owner(topic, partition, self.parallelism) == self.subtask
    }

    async fn partitions(&self) -> Result<BTreeMap<String, i32>> {
        list_partitions(self.consumer.clone(), self.options.clone(), self.pattern.clone()).await
    }

    /// Concrete starting offsets of partitions this reader starts fresh, and their stops when
    /// bounded.
    async fn resolve(
        &self,
        fresh: Vec<(String, i32)>,
        starting: StartingOffsets,
    ) -> Result<Vec<((String, i32), Owned)>> {
        let consumer = self.consumer.clone();
        let options = self.options.clone();
        blocking(move || {
            let servers = &options.bootstrap_servers;
            let mut out = Vec::new();
            let mut by_time = TopicPartitionList::new();
            let mut committed = TopicPartitionList::new();
            for (topic, partition) in &fresh {
                let (low, high) = consumer
                    .fetch_watermarks(topic, *partition, REQUEST_TIMEOUT)
                    .map_err(|e| unreachable(servers, &e))?;
                let stop = options.bounded.then_some(high);
                let next = match starting {
                    StartingOffsets::Earliest => low,
                    StartingOffsets::Latest => high,
                    StartingOffsets::Timestamp(ms) => {
                        by_time
                            .add_partition_offset(topic, *partition, Offset::Offset(ms))
                            .map_err(kafka_error)?;
                        high
                    }
                    StartingOffsets::Committed => {
                        committed.add_partition(topic, *partition);
                        low
                    }
                };
                out.push((
                    (topic.clone(), *partition),
                    Owned {
                        next,
                        stop,
                        max_timestamp: None,
                        last_active: Instant::now(),
                    },
                ));
            }
            let mut found = BTreeMap::new();
            if by_time.count() > 0 {
                let times = consumer
                    .offsets_for_times(by_time, REQUEST_TIMEOUT)
                    .map_err(|e| unreachable(servers, &e))?;
                for e in times.elements() {
                    // No record at or after the time: the partition's end (set above).
                    if let Some(o) = e.offset().to_raw().filter(|o| *o >= 0) {
                        found.insert((e.topic().to_string(), e.partition()), o);
                    }
                }
            }
            if committed.count() > 0 {
                if options.group_id.is_none() {
                    return Err(error("starting offsets committed: need a group id (group.id)"));
                }
                let offsets = consumer
                    .committed_offsets(committed, REQUEST_TIMEOUT)
                    .map_err(|e| unreachable(servers, &e))?;
                for e in offsets.elements() {
                    if let Some(o) = e.offset().to_raw().filter(|o| *o >= 0) {
                        found.insert((e.topic().to_string(), e.partition()), o);
                    }
                }
            }
            for (key, owned) in &mut out {
                if let Some(o) = found.get(key) {
                    owned.next = *o;
                }
            }
            Ok(out)
        })
        .await
    }

    /// Earliest offsets of partitions created while the job runs.
    async fn earliest(&self, new: Vec<(String, i32)>) -> Result<Vec<((String, i32), Owned)>> {
        self.resolve(new, StartingOffsets::Earliest).await.map(|v| {
            v.into_iter()
                .map(|(k, o)| (k, Owned { stop: None, ..o }))
                .collect()
        })
    }

    async fn start(&mut self) -> Result<()> {
        let now = self.partitions().await?;
        match self.restored.take() {
            None => {
                let fresh: Vec<(String, i32)> = now
                    .iter()
                    .flat_map(|(t, n)| (0..*n).map(move |p| (t.clone(), p)))
                    .filter(|(t, p)| self.mine(t, *p))
                    .collect();
                let resolved = self.resolve(fresh, self.options.starting_offsets).await?;
                self.owned.extend(resolved);
                self.known = now;
            }
            Some(positions) => {
                let mut known = BTreeMap::new();
                for p in &positions {
                    for (t, n) in &p.known {
                        let k = known.entry(t.clone()).or_insert(0);
                        *k = (*k).max(*n);
                    }
                    self.owned.insert(
                        (p.topic.clone(), p.partition),
                        Owned {
                            next: p.offset,
                            stop: p.stop,
                            max_timestamp: None,
                            last_active: Instant::now(),
                        },
                    );
                }
                // A subtask dealt no position cannot tell what was known at the checkpoint: it
                // takes what exists now as known (a partition created between the checkpoint
                // and this restore whose owner is such a subtask is read by no one).
                self.known = if positions.is_empty() { now.clone() } else { known };
                // The partitions of readers that never started, from the starting offsets, as
                // those readers would have taken them.
                if !self.unstarted.is_empty() {
                    let unstarted = self.unstarted.clone();
                    let fresh: Vec<(String, i32)> = now
                        .iter()
                        .flat_map(|(t, n)| (0..*n).map(move |p| (t.clone(), p)))
                        .filter(|(t, p)| {
                            unstarted.iter().any(|u| owner(t, *p, u.parallelism) == u.subtask)
                                && !self.owned.contains_key(&(t.clone(), *p))
                        })
                        .collect();
                    let resolved = self.resolve(fresh, self.options.starting_offsets).await?;
                    self.owned.extend(resolved);
                    for (t, n) in &now {
                        let k = self.known.entry(t.clone()).or_insert(0);
                        *k = (*k).max(*n);
                    }
                }
                self.adopt(now).await?;
            }
        }
        self.assign()?;
        self.started = true;
        Ok(())
    }

    /// Takes the partitions of `now` not known before that this subtask owns, from the earliest
    /// offset (unbounded sources only: a bounded one reads what existed when it started).
    async fn adopt(&mut self, now: BTreeMap<String, i32>) -> Result<bool> {
        if self.options.bounded {
            return Ok(false);
        }
        let new: Vec<(String, i32)> = now
            .iter()
            .flat_map(|(t, n)| {
                let from = self.known.get(t).copied().unwrap_or(0);
                (from..*n).map(move |p| (t.clone(), p))
            })
            .filter(|(t, p)| self.mine(t, *p) && !self.owned.contains_key(&(t.clone(), *p)))
            .collect();
        for (t, n) in &now {
            let k = self.known.entry(t.clone()).or_insert(0);
            *k = (*k).max(*n);
        }
        if new.is_empty() {
            return Ok(false);
        }
        tracing::info!(subtask = self.subtask, ?new, "Kafka source: new partitions");
        let resolved = self.earliest(new).await?;
        self.owned.extend(resolved);
        Ok(true)
    }

    /// Where each owned partition continues from: the restored positions until the reader
    /// started, then the partitions it reads.
    fn current_positions(&self) -> Vec<Position> {
        if !self.started
            && let Some(restored) = &self.restored
        {
            return restored.clone();
        }
        self.owned
            .iter()
            .map(|((topic, partition), o)| Position {
                topic: topic.clone(),
                partition: *partition,
                offset: o.next,
                stop: o.stop,
                known: self.known.clone(),
            })
            .collect()
    }

    /// The places of readers that never started this reader stands for: its own before its
    /// first poll on a fresh start, or those a restore dealt it until it starts.
    fn unstarted_places(&self) -> Vec<Unstarted> {
        match (self.started, &self.restored) {
            (true, _) => Vec::new(),
            (false, None) => vec![Unstarted {
                subtask: self.subtask,
                parallelism: self.parallelism,
            }],
            (false, Some(_)) => self.unstarted.clone(),
        }
    }

    /// `positions` and the [`Unstarted`] places as a checkpoint keeps them.
    fn position_strings(&self, positions: &[Position]) -> Vec<String> {
        let unstarted = self
            .unstarted_places()
            .into_iter()
            .map(|unstarted| UnstartedPosition { unstarted });
        positions
            .iter()
            .map(|p| serde_json::to_string(p).unwrap_or_default())
            .chain(unstarted.map(|u| serde_json::to_string(&u).unwrap_or_default()))
            .collect()
    }

    fn assign(&self) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), o) in &self.owned {
            if !o.done() {
                tpl.add_partition_offset(topic, *partition, Offset::Offset(o.next))
                    .map_err(kafka_error)?;
            }
        }
        self.consumer.assign(&tpl).map_err(kafka_error)
    }

    /// Moves each partition's next offset to the consumer's position (past control records and
    /// transactions aborted at the end of a partition), so a bounded partition ends.
    fn catch_up_positions(&mut self) {
        if let Ok(positions) = self.consumer.position() {
            for e in positions.elements() {
                if let (Some(o), Some(owned)) = (
                    e.offset().to_raw(),
                    self.owned.get_mut(&(e.topic().to_string(), e.partition())),
                ) && o > owned.next
                {
                    owned.next = o;
                }
            }
        }
    }
}

#[async_trait]
impl<T: Data> SourceReader<T> for KafkaSourceReader<T> {
    async fn poll_next(&mut self, out: &mut dyn Collector<T>) -> Result<bool> {
        if !self.started {
            self.start().await?;
        }
        // Discovery in the background; its result adopted once it is in.
        if let Some(handle) = self.discovery.take_if(|h| h.is_finished()) {
            match handle.await {
                Ok(Ok(now)) => {
                    if self.adopt(now).await? {
                        self.assign()?;
                    }
                }
                Ok(Err(e)) => tracing::warn!("Kafka partition discovery failed: {e}"),
                Err(e) => tracing::warn!("Kafka partition discovery failed: {e}"),
            }
        }
        if let Some(interval) = self.options.discovery_interval
            && !self.options.bounded
            && self.discovery.is_none()
            && self.last_discovery.elapsed() >= interval
        {
            self.last_discovery = Instant::now();
            self.discovery = Some(tokio::spawn(list_partitions(
                self.consumer.clone(),
                self.options.clone(),
                self.pattern.clone(),
            )));
        }
        if self.options.bounded && self.owned.values().all(Owned::done) {
            return Ok(false);
        }
        let mut emitted = 0;
        let mut eof = false;
        let now = Instant::now();
        while emitted < MAX_BATCH {
            let Some(message) = self.consumer.poll(Duration::ZERO) else {
                break;
            };
            match message {
                Ok(m) => {
                    let key = (m.topic().to_string(), m.partition());
                    let Some(owned) = self.owned.get_mut(&key) else {
                        continue;
                    };
                    if owned.done() || m.offset() < owned.next {
                        continue;
                    }
                    let record = ConsumedRecord {
                        topic: m.topic(),
                        partition: m.partition(),
                        offset: m.offset(),
                        timestamp: m.timestamp().to_millis(),
                        key: m.key(),
                        value: m.payload(),
                    };
                    let value = (self.deserialize)(&record).map_err(|e| {
                        error(format!(
                            "record at topic {} partition {} offset {} does not deserialize: {e}",
                            m.topic(),
                            m.partition(),
                            m.offset()
                        ))
                    })?;
                    owned.next = m.offset() + 1;
                    owned.last_active = now;
                    if let Some((timestamps, _)) = &self.timestamps {
                        // A record without a timestamp keeps its partition's latest.
                        let ts = record.timestamp.or(owned.max_timestamp).unwrap_or(i64::MIN + 1);
                        owned.max_timestamp = Some(owned.max_timestamp.map_or(ts, |m| m.max(ts)));
                        timestamps.set(ts);
                    }
                    out.collect(value);
                    emitted += 1;
                }
                Err(KafkaError::PartitionEOF(_)) => eof = true,
                Err(e) => {
                    if is_fatal(&e) {
                        return Err(error(format!(
                            "consuming from {}: {e}",
                            self.options.bootstrap_servers
                        )));
                    }
                    tracing::warn!("Kafka source: {e}");
                }
            }
        }
        if eof && self.options.bounded {
            self.catch_up_positions();
            if self.owned.values().all(Owned::done) {
                return Ok(false);
            }
        }
        if emitted == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(true)
    }

    fn watermark(&self) -> Option<i64> {
        self.watermark_at(Instant::now())
    }

    fn idle(&self) -> bool {
        self.idle_at(Instant::now())
    }

    fn positions(&self) -> Vec<String> {
        self.position_strings(&self.current_positions())
    }

    /// The positions, and with a group id the offsets to commit once `checkpoint` completes.
    fn snapshot_state(&mut self, checkpoint: u64) -> Vec<String> {
        let positions = self.current_positions();
        if self.options.group_id.is_some() && !positions.is_empty() {
            let offsets = positions
                .iter()
                .map(|p| (p.topic.clone(), p.partition, p.offset))
                .collect();
            self.pending_commits.insert(checkpoint, offsets);
            while self.pending_commits.len() > MAX_PENDING_COMMITS {
                self.pending_commits.pop_first();
            }
        }
        self.position_strings(&positions)
    }

    /// Commits to the group the offsets of the newest snapshot `checkpoint` covers (its own, or
    /// an earlier one's when this reader took none for it) and forgets every snapshot up to it.
    /// The commit runs off the task's thread; a failed one is logged (the offsets are for
    /// monitoring and `committed` starts; the checkpoint holds the positions restores use).
    async fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let Some(offsets) = take_covered(&mut self.pending_commits, checkpoint) else {
            return Ok(());
        };
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset) in &offsets {
            tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .map_err(kafka_error)?;
        }
        let consumer = self.consumer.clone();
        let previous = self.committing.take();
        let subtask = self.subtask;
        self.committing = Some(tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            let committed =
                tokio::task::spawn_blocking(move || consumer.commit(&tpl, CommitMode::Sync)).await;
            match committed {
                Ok(Ok(())) => {
                    tracing::debug!(
                        subtask,
                        checkpoint,
                        "Kafka source: offsets committed to the group"
                    )
                }
                Ok(Err(e)) => tracing::warn!(
                    subtask,
                    checkpoint,
                    "Kafka source: committing the offsets of a completed checkpoint to the group: {e}"
                ),
                Err(e) => tracing::warn!(subtask, checkpoint, "Kafka source: committing offsets: {e}"),
            }
        }));
        Ok(())
    }

    /// Waits (at most the request timeout) for the commit of the last completed checkpoint's
    /// offsets: a job stopped with a savepoint, or at the end of its input, has then put its
    /// final offsets in the group, where a new job started from `committed` reads on. Before,
    /// the commit was left running as the task ended, and a stateless redeploy read again what
    /// the drained job had already counted.
    async fn close(&mut self) -> Result<()> {
        if let Some(commit) = self.committing.take()
            && tokio::time::timeout(REQUEST_TIMEOUT, commit).await.is_err()
        {
            tracing::warn!(
                subtask = self.subtask,
                "Kafka source: the last commit of offsets to the group did not end within {REQUEST_TIMEOUT:?}"
            );
        }
        Ok(())
    }
}

/// What a completion of `checkpoint` commits: the newest snapshot up to it; that one and every
/// older one are dropped, later ones kept for their own completions.
fn take_covered<V>(pending: &mut BTreeMap<u64, V>, checkpoint: u64) -> Option<V> {
    let later = pending.split_off(&checkpoint.saturating_add(1));
    let covered = std::mem::replace(pending, later);
    covered.into_iter().next_back().map(|(_, v)| v)
}

/// Partitions per topic now: the named topics (each must exist) or those the pattern matches.
async fn list_partitions(
    consumer: Arc<BaseConsumer>,
    options: Arc<SourceOptions>,
    pattern: Option<regex_lite::Regex>,
) -> Result<BTreeMap<String, i32>> {
    blocking(move || {
        let servers = &options.bootstrap_servers;
        let mut out = BTreeMap::new();
        match &options.subscription {
            Subscription::Topics(topics) => {
                for topic in topics {
                    let metadata = consumer
                        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                        .map_err(|e| unreachable(servers, &e))?;
                    let t = metadata.topics().iter().find(|t| t.name() == topic);
                    match t {
                        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                            out.insert(topic.clone(), t.partitions().len() as i32);
                        }
                        Some(t) if t.error().is_some() => {
                            return Err(error(format!(
                                "topic {topic:?} does not exist on {servers} ({:?})",
                                t.error().map(rdkafka::error::RDKafkaErrorCode::from)
                            )));
                        }
                        _ => return Err(error(format!("topic {topic:?} does not exist on {servers}"))),
                    }
                }
            }
            Subscription::Pattern(_) => {
                let metadata = consumer
                    .fetch_metadata(None, REQUEST_TIMEOUT)
                    .map_err(|e| unreachable(servers, &e))?;
                for t in metadata.topics() {
                    if t.error().is_none()
                        && !t.name().starts_with("__")
                        && pattern.as_ref().is_some_and(|p| p.is_match(t.name()))
                    {
                        out.insert(t.name().to_string(), t.partitions().len() as i32);
                    }
                }
            }
        }
        Ok(out)
    })
    .await
}

/// Errors no retry fixes (librdkafka retries transport failures itself).
fn is_fatal(e: &KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::TopicAuthorizationFailed | C::GroupAuthorizationFailed | C::Fatal | C::InvalidArgument)
    )
}

fn unreachable(servers: &str, e: &KafkaError) -> floe_datastream::Error {
    error(format!(
        "cannot reach the Kafka brokers at {servers} (bootstrap.servers): {e}"
    ))
}

/// Runs a blocking librdkafka call off the task's thread.
async fn blocking<R: Send + 'static>(f: impl FnOnce() -> Result<R> + Send + 'static) -> Result<R> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| error(format!("Kafka request: {e}")))?
}

#[cfg(test)]
mod tests;
