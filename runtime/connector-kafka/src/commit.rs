//! The exactly-once sink's committer: writes a completed checkpoint's records to Kafka in one
//! transaction with the checkpoint's marker ([`Committer::write_pending`]).
//!
//! The records come back from the checkpoint's write-ahead object part by part
//! ([`floe_write_ahead::Records`]), a batch of whole records at a time, so a checkpoint interval
//! of any size passes through a few parts of memory. The transaction's deadline does not grow
//! with the checkpoint either: records are sent as they are read (librdkafka's queue bounds what
//! is in flight), the producer's queue is flushed for as long as acknowledgements keep arriving
//! ([`flush_progressing`]), and only then is the transaction committed, under a deadline for the
//! commit alone. The sink runs the committer on a task of its own, beside the task's records.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_datastream::Result;
use floe_datastream::connector::frames;
use floe_storage::ObjectStore;
use floe_write_ahead::Records;
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::options::SinkOptions;
use crate::records::decode_frame;
use crate::source::REQUEST_TIMEOUT;
use crate::{error, kafka_error};

/// How long a transaction's commit (its records already flushed), the fencing of an earlier
/// producer, or a flush that sees no acknowledgement at all may take.
pub(crate) const COMMIT_TIMEOUT: Duration = Duration::from_secs(60);

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

pub(crate) type Kafka = BaseProducer<Deliveries>;

/// Records of a checkpoint waiting for it to complete (exactly-once).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Pending {
    pub checkpoint: u64,
    /// The write-ahead object in the job's storage (empty: the records are in `frames`).
    pub file: String,
    /// The group whose marker says whether these records were written.
    pub marker_group: String,
    /// The transactional id of the subtask that wrote them (a restore fences it).
    pub transactional_id: String,
    /// The records themselves, when they were never written ahead (the end of the input).
    #[serde(skip)]
    pub frames: Option<Bytes>,
}

/// What writing a checkpoint's records needs; cloned onto the sink's commit task.
#[derive(Clone)]
pub(crate) struct Committer {
    pub producer: Arc<Kafka>,
    pub options: Arc<SinkOptions>,
    pub partition: Option<i32>,
    pub store: Option<ObjectStore>,
}

impl Committer {
    /// Writes `p`'s records in one transaction with its marker, unless its marker says that was
    /// done; then removes its write-ahead object. Its marker, not the object's absence, tells a
    /// restore that the records were written (a process can die between the commit and the
    /// removal). An object gone while its marker says it was not written is an error: its
    /// records are lost, and saying so beats committing the checkpoint without them.
    pub(crate) async fn write_pending(&self, p: Pending) -> Result<()> {
        let (options, group) = (self.options.clone(), p.marker_group.clone());
        let marker = Arc::new(blocking(move || MarkerGroup::new(&options, &group)).await?);
        let written = self.write_unless_marked(&p, &marker).await;
        // The marker group is a consumer whose drop waits on the broker: its last reference is
        // dropped on a blocking thread, never on the runtime's (here, whatever happened above).
        blocking(move || {
            drop(marker);
            Ok(())
        })
        .await?;
        written?;
        if let Some(store) = &self.store
            && !p.file.is_empty()
            && let Err(e) = store.delete(&p.file).await
        {
            tracing::warn!("Kafka sink: removing the write-ahead object {}: {e}", p.file);
        }
        Ok(())
    }

    async fn write_unless_marked(&self, p: &Pending, marker: &Arc<MarkerGroup>) -> Result<()> {
        let reading = marker.clone();
        let marked = blocking(move || reading.committed()).await?;
        if marked.is_some_and(|c| c >= p.checkpoint) {
            tracing::info!(checkpoint = p.checkpoint, group = %p.marker_group, "Kafka sink: checkpoint already written");
            return Ok(());
        }
        tracing::info!(
            checkpoint = p.checkpoint,
            group = %p.marker_group,
            ?marked,
            "Kafka sink: writing a checkpoint's records"
        );
        self.transact(p, marker).await
    }

    /// One transaction: `p`'s records as they are read, then its marker. Aborted on any error.
    async fn transact(&self, p: &Pending, marker: &Arc<MarkerGroup>) -> Result<()> {
        let mut records = match (&p.frames, &self.store) {
            (Some(frames), _) => Records::Memory(Some(frames.clone())),
            (None, Some(store)) => Records::open(store, "Kafka", &p.file, p.checkpoint).await?,
            (None, None) => return Err(error("no job storage to read the write-ahead log from")),
        };
        let mut began = false;
        let (mut bytes, started) = (0u64, Instant::now());
        let written = async {
            while let Some(batch) = records.next().await? {
                if !began {
                    let producer = self.producer.clone();
                    blocking(move || producer.begin_transaction().map_err(kafka_error)).await?;
                    began = true;
                }
                bytes += batch.len() as u64;
                let (producer, topic, partition) =
                    (self.producer.clone(), self.options.topic.clone(), self.partition);
                blocking(move || send_all(&producer, &topic, partition, &batch)).await?;
            }
            if !began {
                return Ok(());
            }
            let (producer, checkpoint, marker) = (self.producer.clone(), p.checkpoint, marker.clone());
            blocking(move || {
                marker.commit_in(&producer, checkpoint)?;
                flush_progressing(&producer)?;
                producer.commit_transaction(COMMIT_TIMEOUT).map_err(kafka_error)?;
                delivery_failure(&producer)
            })
            .await
        }
        .await;
        match written {
            Ok(()) => {
                if began {
                    tracing::info!(
                        checkpoint = p.checkpoint,
                        bytes,
                        ms = started.elapsed().as_millis() as u64,
                        "Kafka sink: checkpoint written"
                    );
                }
                Ok(())
            }
            Err(e) => {
                if began {
                    let producer = self.producer.clone();
                    let _ = blocking(move || producer.abort_transaction(COMMIT_TIMEOUT).map_err(kafka_error))
                        .await;
                }
                Err(e)
            }
        }
    }
}

/// Sends every frame of `frames_` (blocking while librdkafka's queue is full).
pub(crate) fn send_all(producer: &Kafka, topic: &str, partition: Option<i32>, frames_: &[u8]) -> Result<()> {
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

/// Waits until the broker acknowledged every record sent, for as long as acknowledgements keep
/// arriving: a slow broker is waited for, one that answers nothing for [`COMMIT_TIMEOUT`] is an
/// error. (A single deadline for the whole flush failed a large checkpoint on a slow broker, and
/// every restore sent the same records into the same deadline.)
pub(crate) fn flush_progressing(producer: &Kafka) -> Result<()> {
    let mut left = producer.in_flight_count();
    let mut progressed = Instant::now();
    while left > 0 {
        match producer.flush(Duration::from_secs(1)) {
            Ok(()) => return Ok(()),
            Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)) => {}
            Err(e) => return Err(kafka_error(e)),
        }
        let now = producer.in_flight_count();
        if now < left {
            (left, progressed) = (now, Instant::now());
        } else if progressed.elapsed() >= COMMIT_TIMEOUT {
            return Err(error(format!(
                "the broker acknowledged none of {left} records for {} s",
                COMMIT_TIMEOUT.as_secs()
            )));
        }
    }
    Ok(())
}

pub(crate) fn delivery_failure(producer: &Kafka) -> Result<()> {
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
pub(crate) struct MarkerGroup {
    consumer: BaseConsumer,
    topic: String,
}

impl MarkerGroup {
    pub(crate) fn new(options: &SinkOptions, group: &str) -> Result<Self> {
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
    pub(crate) fn committed(&self) -> Result<Option<u64>> {
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

pub(crate) async fn blocking<R: Send + 'static>(f: impl FnOnce() -> Result<R> + Send + 'static) -> Result<R> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| error(format!("Kafka request: {e}")))?
}
