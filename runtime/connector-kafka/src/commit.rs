//! The exactly-once sink's committer: writes a completed checkpoint's records to Kafka in one
//! transaction with the checkpoint's marker ([`Committer::write_pending`]).
//!
//! The records come back from the checkpoint's write-ahead object part by part
//! ([`floe_storage::ObjectReader`]), a batch of whole records at a time, so a checkpoint interval
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
use floe_storage::{ObjectReader, ObjectStore};
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
        let mut records = Records::open(self.store.as_ref(), p).await?;
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

/// The write-ahead object of `p` is gone, and `p`'s marker says its records were not written
/// (only then are they read): they are lost. Before, this read as no records, and the
/// checkpoint was marked written without them (another attempt of the subtask, running beside
/// this one, had removed the object as an orphan).
fn missing(p: &Pending) -> floe_datastream::Error {
    error(format!(
        "the write-ahead object {} of checkpoint {} is gone though its marker says its records were not written",
        p.file, p.checkpoint
    ))
}

/// A pending checkpoint's records, a batch of whole records at a time.
enum Records {
    Memory(Option<Bytes>),
    Object {
        path: String,
        reader: Box<ObjectReader>,
        /// The start of a record a part ended inside of.
        carry: Vec<u8>,
        read_any: bool,
    },
}

impl Records {
    async fn open(store: Option<&ObjectStore>, p: &Pending) -> Result<Self> {
        if let Some(frames) = &p.frames {
            return Ok(Records::Memory(Some(frames.clone())));
        }
        let store = store.ok_or_else(|| error("no job storage to read the write-ahead log from"))?;
        match store.reader(&p.file).await {
            Ok(reader) => Ok(Records::Object {
                path: p.file.clone(),
                reader: Box::new(reader),
                carry: Vec::new(),
                read_any: false,
            }),
            Err(floe_storage::Error::NotFound { .. }) => Err(missing(p)),
            Err(e) => Err(e.into()),
        }
    }

    /// The next batch of whole records (never empty), `None` at the end.
    async fn next(&mut self) -> Result<Option<Bytes>> {
        match self {
            Records::Memory(frames) => Ok(frames.take().filter(|f| !f.is_empty())),
            Records::Object {
                path,
                reader,
                carry,
                read_any,
            } => loop {
                let part = match reader.next_part().await {
                    Ok(part) => part,
                    Err(floe_storage::Error::NotFound { .. }) if !*read_any => {
                        return Err(error(format!(
                            "the write-ahead object {path} is gone though its checkpoint's marker says its records were not written"
                        )));
                    }
                    Err(e) => return Err(e.into()),
                };
                let Some(part) = part else {
                    if !carry.is_empty() {
                        return Err(error(format!(
                            "the write-ahead object {path} ends inside a record ({} bytes of it)",
                            carry.len()
                        )));
                    }
                    return Ok(None);
                };
                *read_any = true;
                carry.extend_from_slice(&part);
                let whole = complete_frames(carry);
                if whole > 0 {
                    let rest = carry.split_off(whole);
                    return Ok(Some(Bytes::from(std::mem::replace(carry, rest))));
                }
            },
        }
    }
}

/// The length of the longest prefix of `buffer` made of whole frames (`u32` length, bytes).
fn complete_frames(buffer: &[u8]) -> usize {
    let mut at = 0;
    while let Some(head) = buffer.get(at..at + 4) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if buffer.len() - at - 4 < len {
            break;
        }
        at += 4 + len;
    }
    at
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A write-ahead object of several parts comes back as batches of whole records, every record
    /// once and in order, however the parts cut them.
    #[tokio::test]
    async fn a_write_ahead_object_of_several_parts_reads_back_as_whole_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(&format!("file://{}", dir.path().display()), &BTreeMap::new()).unwrap();
        // Records of 0 to 70,000 bytes, about 2.5 parts in all, written in pieces of odd sizes.
        let (mut all, mut expected) = (Vec::new(), Vec::new());
        let mut i = 0u64;
        while all.len() < floe_storage::PART_SIZE * 5 / 2 {
            let value: Vec<u8> = (0..(i * 7919) % 70_001).map(|b| (b ^ i) as u8).collect();
            // As the sink gets it: each record's encoding in a frame of its length.
            let mut record = Vec::new();
            crate::records::encode_frame(None, &value, &mut record);
            all.extend_from_slice(&(record.len() as u32).to_le_bytes());
            all.extend_from_slice(&record);
            expected.push(value);
            i += 1;
        }
        let mut writer = store.writer("ahead").await.unwrap();
        for piece in all.chunks(1_000_003) {
            writer.write(piece.to_vec()).await.unwrap();
        }
        writer.close().await.unwrap();
        let pending = Pending {
            checkpoint: 1,
            file: "ahead".into(),
            marker_group: String::new(),
            transactional_id: String::new(),
            frames: None,
        };
        let mut records = Records::open(Some(&store), &pending).await.unwrap();
        let (mut got, mut batches) = (Vec::new(), 0);
        while let Some(batch) = records.next().await.unwrap() {
            batches += 1;
            got.extend(frames(&batch).map(|f| decode_frame(f).1.to_vec()));
        }
        assert!(batches >= 3, "one batch per part at least: {batches}");
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the records read back differ");

        // An object gone while it is still to be written (its records are read only when the
        // marker says so) is an error naming it, not an empty checkpoint.
        store.delete("ahead").await.unwrap();
        let gone = Records::open(Some(&store), &pending)
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(
            gone.to_string().contains("ahead of checkpoint 1 is gone"),
            "{gone}"
        );

        // One cut inside a record is an error naming the object.
        let mut writer = store.writer("cut").await.unwrap();
        writer.write(all[..all.len() - 1].to_vec()).await.unwrap();
        writer.close().await.unwrap();
        let cut = Pending {
            file: "cut".into(),
            ..pending
        };
        let mut records = Records::open(Some(&store), &cut).await.unwrap();
        let e = loop {
            match records.next().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("a cut record was not noticed"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(e.contains("cut") && e.contains("ends inside a record"), "{e}");
    }
}
