//! The Kafka sink (Flink's `KafkaSink`): `none` and `at-least-once` send records as they come
//! (at-least-once waits at each checkpoint barrier until the broker acknowledged all of them);
//! `exactly-once` writes each checkpoint's records in one Kafka transaction once the checkpoint
//! completes.
//!
//! Exactly-once, as librdkafka allows it. Flink keeps a transaction open from one barrier to the
//! checkpoint's completion and, after a failure in between, resumes it by producer id and epoch
//! from the checkpoint; librdkafka cannot resume another producer's transaction (a new producer
//! of the same transactional id aborts it). So the records of a checkpoint are kept until it
//! completes, as a write-ahead log in the job's storage named by the checkpoint, and written then
//! in one transaction that also commits a marker, the checkpoint's id as the offset of a consumer
//! group of the sink's own (`{prefix}-{subtask}-{run}-commits`), atomically with the records. A
//! restore writes each pending checkpoint whose marker is below its id and skips the others:
//! whatever moment a process died at, every checkpoint's records become visible once. Readers
//! see them with `isolation.level=read_committed`, as with Flink, one checkpoint interval after
//! they were written.
//!
//! The marker group is the job run's (`{run}`: the JobManager's job id, kept across restarts and
//! a JobManager's failover, new with every submission): checkpoint ids count from 1 again in a
//! new run, and from a savepoint's id in a run started from it, so a marker another run left
//! must never say this run's checkpoints were written. A restored pending checkpoint carries the
//! group its own run marked it in. The transactional id stays `{prefix}-{subtask}` across runs:
//! a new run's producer fences what an earlier run left open, which would otherwise hold every
//! `read_committed` reader back until the broker's transaction timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_datastream::Result;
use floe_datastream::connector::{ConnectorContext, SinkWriter, frames};
use floe_storage::ObjectStore;
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::options::{DeliveryGuarantee, Partitioner, SinkOptions};
use crate::records::decode_frame;
use crate::source::REQUEST_TIMEOUT;
use crate::write_ahead;
use crate::{error, kafka_error};

/// How long a flush or a transaction's commit may take.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(60);

/// The first delivery the broker refused, kept until the sink reports it.
#[derive(Debug, Default)]
pub struct Deliveries {
    failed: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| e.to_string());
        }
    }
}

type Kafka = BaseProducer<Deliveries>;

/// Records of a checkpoint waiting for it to complete (exactly-once).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    checkpoint: u64,
    /// The write-ahead object in the job's storage.
    file: String,
    /// The group whose marker says whether these records were written.
    marker_group: String,
    /// The transactional id of the subtask that wrote them (a restore fences it).
    transactional_id: String,
    #[serde(skip)]
    frames: Option<Bytes>,
}

/// A subtask's writer to one topic.
pub struct KafkaSinkWriter {
    options: Arc<SinkOptions>,
    ctx: ConnectorContext,
    producer: Option<Arc<Kafka>>,
    partition: Option<i32>,
    /// Exactly-once: the frames since the last barrier, the checkpoints written ahead, the job's
    /// storage they are written to, and this sink's transactional id and marker group.
    batch: Vec<u8>,
    pending: Vec<Pending>,
    store: Option<ObjectStore>,
    writer_id: String,
    transactional_id: String,
    marker_group: String,
    last_checkpoint: u64,
    started: bool,
}

impl std::fmt::Debug for KafkaSinkWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSinkWriter")
            .field("topic", &self.options.topic)
            .field("subtask", &self.ctx.subtask)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl KafkaSinkWriter {
    pub fn new(options: Arc<SinkOptions>, ctx: &ConnectorContext) -> Result<Self> {
        options.check()?;
        let prefix = options.transactional_id_prefix.clone().unwrap_or_default();
        let transactional_id = format!("{prefix}-{}", ctx.subtask);
        let marker_group = marker_group(&transactional_id, &ctx.job_id);
        let exactly_once = options.guarantee == DeliveryGuarantee::ExactlyOnce;
        let store = if exactly_once && ctx.checkpointing {
            Some(ObjectStore::job_storage(&ctx.configuration)?.ok_or_else(|| {
                error("exactly-once with checkpoints needs the job's storage (spec.storage.url) for its write-ahead log")
            })?)
        } else {
            None
        };
        let mut pending = Vec::new();
        let mut last_checkpoint = 0;
        if let Some((checkpoint, states)) = &ctx.restored {
            last_checkpoint = *checkpoint;
            for state in states {
                let list: Vec<Pending> =
                    serde_json::from_str(state).map_err(|e| floe_datastream::Error::Restore {
                        checkpoint: *checkpoint,
                        message: format!("Kafka sink state {state:?}: {e}"),
                    })?;
                pending.extend(list);
            }
        }
        Ok(KafkaSinkWriter {
            options,
            ctx: ctx.clone(),
            producer: None,
            partition: None,
            batch: Vec::new(),
            pending,
            store,
            writer_id: uuid::Uuid::new_v4().simple().to_string(),
            transactional_id,
            marker_group,
            last_checkpoint,
            started: false,
        })
    }

    fn exactly_once(&self) -> bool {
        self.options.guarantee == DeliveryGuarantee::ExactlyOnce
    }

    fn producer(&self) -> Result<Arc<Kafka>> {
        self.producer
            .clone()
            .ok_or_else(|| error("the Kafka sink was not started"))
    }

    /// Makes the producer; exactly-once also fences earlier attempts (aborting what they left
    /// open) and writes the restored checkpoints whose markers say they were not written.
    async fn start(&mut self) -> Result<()> {
        let options = self.options.clone();
        let subtask = self.ctx.subtask;
        let transactional_id = self.exactly_once().then(|| self.transactional_id.clone());
        let restored_ids: Vec<String> = {
            let mut ids: Vec<String> = self.pending.iter().map(|p| p.transactional_id.clone()).collect();
            ids.sort();
            ids.dedup();
            ids.retain(|id| Some(id) != transactional_id.as_ref());
            ids
        };
        let (producer, partition) = blocking(move || {
            let producer = make_producer(&options, transactional_id.as_deref())?;
            let servers = &options.bootstrap_servers;
            let metadata = producer
                .client()
                .fetch_metadata(Some(&options.topic), REQUEST_TIMEOUT)
                .map_err(|e| {
                    error(format!(
                        "cannot reach the Kafka brokers at {servers} (bootstrap.servers): {e}"
                    ))
                })?;
            let partitions = metadata
                .topics()
                .iter()
                .find(|t| t.name() == options.topic && t.error().is_none())
                .map(|t| t.partitions().len() as i32)
                .filter(|n| *n > 0)
                .ok_or_else(|| error(format!("topic {:?} does not exist on {servers}", options.topic)))?;
            // Subtasks a rescale removed leave their transactional ids behind: fence each, so
            // nothing they left open lingers until the broker's transaction timeout.
            for id in &restored_ids {
                let zombie = make_producer(&options, Some(id))?;
                zombie.init_transactions(COMMIT_TIMEOUT).map_err(kafka_error)?;
            }
            if options.guarantee == DeliveryGuarantee::ExactlyOnce {
                producer.init_transactions(COMMIT_TIMEOUT).map_err(kafka_error)?;
            }
            let partition =
                (options.partitioner == Partitioner::Fixed).then(|| (subtask % partitions as u32) as i32);
            Ok((Arc::new(producer), partition))
        })
        .await?;
        self.producer = Some(producer);
        self.partition = partition;
        self.started = true;
        self.remove_orphans().await;
        let restored = std::mem::take(&mut self.pending);
        for p in restored {
            self.write_pending(p).await?;
        }
        Ok(())
    }

    /// Writes a pending checkpoint's records in one transaction with its marker, unless its
    /// marker says that was done; then drops its write-ahead object.
    async fn write_pending(&mut self, mut p: Pending) -> Result<()> {
        let frames = match p.frames.take() {
            Some(f) => f,
            None => {
                let store = self
                    .store
                    .as_ref()
                    .ok_or_else(|| error("no job storage to read the write-ahead log from"))?;
                match store.get_opt(&p.file).await? {
                    Some(bytes) => bytes,
                    // Removed after its commit (the marker tells).
                    None => Bytes::new(),
                }
            }
        };
        let producer = self.producer()?;
        let options = self.options.clone();
        let partition = self.partition;
        let (group, checkpoint) = (p.marker_group.clone(), p.checkpoint);
        blocking(move || {
            let marker = MarkerGroup::new(&options, &group)?;
            let marked = marker.committed()?;
            if marked.is_some_and(|c| c >= checkpoint) {
                tracing::info!(checkpoint, group, "Kafka sink: checkpoint already written");
                return Ok(());
            }
            tracing::info!(
                checkpoint,
                group,
                ?marked,
                bytes = frames.len(),
                "Kafka sink: writing a checkpoint's records"
            );
            if frames.is_empty() {
                return Ok(());
            }
            producer.begin_transaction().map_err(kafka_error)?;
            let written = send_all(&producer, &options.topic, partition, &frames)
                .and_then(|()| marker.commit_in(&producer, checkpoint))
                .and_then(|()| producer.commit_transaction(COMMIT_TIMEOUT).map_err(kafka_error))
                .and_then(|()| delivery_failure(&producer));
            if let Err(e) = written {
                let _ = producer.abort_transaction(COMMIT_TIMEOUT);
                return Err(e);
            }
            Ok(())
        })
        .await?;
        // Written (or found written): the object goes. Its marker, not its absence, tells a
        // restore that the records were written (a process can die between the commit and the
        // removal); one that finds the object gone reads it as empty and writes nothing.
        if let Some(store) = &self.store
            && !p.file.is_empty()
            && let Err(e) = store.delete(&p.file).await
        {
            tracing::warn!("Kafka sink: removing the write-ahead object {}: {e}", p.file);
        }
        Ok(())
    }

    /// Removes what earlier attempts of this run wrote ahead for checkpoints that never completed
    /// ([`write_ahead::orphans`]), before this attempt writes any. A failure only leaves them.
    async fn remove_orphans(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let restored = self.ctx.restored.as_ref().map_or(0, |(c, _)| *c);
        let prefix = self.options.transactional_id_prefix.clone().unwrap_or_default();
        let removed = async {
            let dirs = store.list(write_ahead::ROOT).await?;
            let mut removed = 0;
            for id in write_ahead::cleaned_by(&dirs, &prefix, self.ctx.subtask, self.ctx.parallelism) {
                let dir = write_ahead::run_dir(&id, &self.ctx.job_id);
                let doomed: Vec<String> = write_ahead::orphans(&store.list(&dir).await?, restored)
                    .into_iter()
                    .map(|name| format!("{dir}{name}"))
                    .collect();
                store.delete_many(&doomed).await?;
                removed += doomed.len();
            }
            Ok::<_, floe_storage::Error>(removed)
        };
        match removed.await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                restored,
                "Kafka sink: removed {n} write-ahead objects of checkpoints that never completed"
            ),
            Err(e) => tracing::warn!("Kafka sink: looking for orphaned write-ahead objects: {e}"),
        }
    }

    fn state(&self) -> Result<Option<String>> {
        Ok(Some(
            serde_json::to_string(&self.pending).map_err(|e| error(format!("sink state: {e}")))?,
        ))
    }
}

#[async_trait]
impl SinkWriter for KafkaSinkWriter {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        if !self.started {
            self.start().await?;
        }
        if self.exactly_once() {
            self.batch.extend_from_slice(&bytes);
            return Ok(());
        }
        let producer = self.producer()?;
        let (topic, partition) = (self.options.topic.clone(), self.partition);
        blocking(move || {
            send_all(&producer, &topic, partition, &bytes)?;
            producer.poll(Duration::ZERO);
            delivery_failure(&producer)
        })
        .await
    }

    async fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<String>> {
        if !self.started {
            self.start().await?;
        }
        self.last_checkpoint = checkpoint;
        match self.options.guarantee {
            DeliveryGuarantee::None => Ok(None),
            DeliveryGuarantee::AtLeastOnce => {
                let producer = self.producer()?;
                blocking(move || {
                    producer.flush(COMMIT_TIMEOUT).map_err(kafka_error)?;
                    delivery_failure(&producer)
                })
                .await?;
                Ok(None)
            }
            DeliveryGuarantee::ExactlyOnce => {
                let frames = Bytes::from(std::mem::take(&mut self.batch));
                if !frames.is_empty() {
                    let file = write_ahead::object(
                        &self.transactional_id,
                        &self.ctx.job_id,
                        checkpoint,
                        &self.writer_id,
                    );
                    let store = self
                        .store
                        .as_ref()
                        .ok_or_else(|| error("no job storage for the write-ahead log"))?;
                    store.put(&file, frames.clone()).await?;
                    self.pending.push(Pending {
                        checkpoint,
                        file,
                        marker_group: self.marker_group.clone(),
                        transactional_id: self.transactional_id.clone(),
                        frames: Some(frames),
                    });
                }
                self.state()
            }
        }
    }

    async fn commit(&mut self, checkpoint: u64) -> Result<()> {
        if !self.exactly_once() {
            return Ok(());
        }
        if !self.started {
            self.start().await?;
        }
        let (due, later): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.checkpoint <= checkpoint);
        self.pending = later;
        for p in due {
            self.write_pending(p).await?;
        }
        Ok(())
    }

    async fn close(mut self: Box<Self>) -> Result<()> {
        if !self.started {
            self.start().await?;
        }
        if self.exactly_once() {
            // The end of the input: what is pending, then what came after the last barrier, in
            // one more transaction with a marker past the last checkpoint.
            let pending = std::mem::take(&mut self.pending);
            for p in pending {
                self.write_pending(p).await?;
            }
            let frames = Bytes::from(std::mem::take(&mut self.batch));
            let last = Pending {
                checkpoint: self.last_checkpoint + 1,
                file: String::new(),
                marker_group: self.marker_group.clone(),
                transactional_id: self.transactional_id.clone(),
                frames: Some(frames),
            };
            return self.write_pending(last).await;
        }
        let producer = self.producer()?;
        blocking(move || {
            producer.flush(COMMIT_TIMEOUT).map_err(kafka_error)?;
            delivery_failure(&producer)
        })
        .await
    }

    /// Stopped with a savepoint: the checkpoints it and those before it cover are written, and
    /// nothing after its barrier (no transaction past the last checkpoint, which a resumed job
    /// would write again).
    async fn stop(mut self: Box<Self>) -> Result<()> {
        if !self.exactly_once() {
            return self.close().await;
        }
        if !self.started {
            self.start().await?;
        }
        if !self.batch.is_empty() {
            tracing::warn!(
                bytes = self.batch.len(),
                "Kafka sink: stopped with a savepoint; records after its barrier are not written"
            );
        }
        for p in std::mem::take(&mut self.pending) {
            self.write_pending(p).await?;
        }
        Ok(())
    }
}

/// The consumer group whose offset marks the checkpoints the run `run` wrote through
/// `transactional_id`.
fn marker_group(transactional_id: &str, run: &str) -> String {
    if run.is_empty() {
        format!("{transactional_id}-commits")
    } else {
        format!("{transactional_id}-{run}-commits")
    }
}

fn make_producer(options: &SinkOptions, transactional_id: Option<&str>) -> Result<Kafka> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &options.bootstrap_servers)
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5");
    match transactional_id {
        Some(id) => {
            config
                .set("transactional.id", id)
                .set("transaction.timeout.ms", "900000");
        }
        None if options.guarantee == DeliveryGuarantee::AtLeastOnce => {
            config.set("enable.idempotence", "true");
        }
        None => {}
    }
    for (k, v) in &options.properties {
        config.set(k, v);
    }
    config.create_with_context(Deliveries::default()).map_err(|e| {
        error(format!(
            "cannot make a producer for {}: {e}",
            options.bootstrap_servers
        ))
    })
}

/// Sends every frame of `frames` (blocking while librdkafka's queue is full).
fn send_all(producer: &Kafka, topic: &str, partition: Option<i32>, frames_: &[u8]) -> Result<()> {
    for frame in frames(frames_) {
        let (key, value) = decode_frame(frame);
        loop {
            let mut record = BaseRecord::to(topic).payload(value);
            if let Some(k) = key {
                record = record.key(k);
            }
            if let Some(p) = partition {
                record = record.partition(p);
            }
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(error(format!("sending to topic {topic}: {e}"))),
            }
        }
    }
    Ok(())
}

fn delivery_failure(producer: &Kafka) -> Result<()> {
    let failed = producer
        .context()
        .failed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    match failed {
        Some(e) => Err(error(format!("the broker refused a record: {e}"))),
        None => Ok(()),
    }
}

/// The consumer group whose committed offset (on the sink's topic, partition 0) is the last
/// checkpoint a sink subtask wrote.
struct MarkerGroup {
    consumer: BaseConsumer,
    topic: String,
}

impl MarkerGroup {
    fn new(options: &SinkOptions, group: &str) -> Result<Self> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &options.bootstrap_servers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| {
                error(format!(
                    "cannot make a consumer for {}: {e}",
                    options.bootstrap_servers
                ))
            })?;
        Ok(MarkerGroup {
            consumer,
            topic: options.topic.clone(),
        })
    }

    fn partition(&self, offset: Offset) -> Result<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, offset)
            .map_err(kafka_error)?;
        Ok(tpl)
    }

    /// The last checkpoint marked, if any.
    fn committed(&self) -> Result<Option<u64>> {
        let offsets = self
            .consumer
            .committed_offsets(self.partition(Offset::Invalid)?, REQUEST_TIMEOUT)
            .map_err(kafka_error)?;
        Ok(offsets
            .elements()
            .first()
            .and_then(|e| e.offset().to_raw())
            .and_then(|o| u64::try_from(o).ok()))
    }

    /// Marks `checkpoint` in the producer's open transaction.
    fn commit_in(&self, producer: &Kafka, checkpoint: u64) -> Result<()> {
        let metadata = self
            .consumer
            .group_metadata()
            .ok_or_else(|| error("the marker group has no metadata"))?;
        let offset = i64::try_from(checkpoint).map_err(|_| error("checkpoint id out of range"))?;
        producer
            .send_offsets_to_transaction(
                &self.partition(Offset::Offset(offset))?,
                &metadata,
                COMMIT_TIMEOUT,
            )
            .map_err(kafka_error)
    }
}

async fn blocking<R: Send + 'static>(f: impl FnOnce() -> Result<R> + Send + 'static) -> Result<R> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| error(format!("Kafka request: {e}")))?
}
