//! The Kafka sink (Flink's `KafkaSink`): `none` and `at-least-once` send records as they come
//! (at-least-once waits at each checkpoint barrier until the broker acknowledged all of them);
//! `exactly-once` writes each checkpoint's records in one Kafka transaction once the checkpoint
//! completes.
//!
//! Exactly-once, as librdkafka allows it. Flink keeps a transaction open from one barrier to the
//! checkpoint's completion and, after a failure in between, resumes it by producer id and epoch
//! from the checkpoint; librdkafka cannot resume another producer's transaction (a new producer
//! of the same transactional id aborts it). So the records of a checkpoint are kept until it
//! completes, as a write-ahead log in the job's storage (streamed into an object as they come, a
//! few parts in memory: [`floe_write_ahead`]), and written then, by a commit task of the sink's
//! own while records go on (`commit.rs`), in one transaction that also commits a marker,
//! the checkpoint's id as the offset of a consumer
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
//!
//! A limit: one checkpoint's records are one transaction, read back and sent within the
//! producer's `transaction.timeout.ms` (15 minutes, the broker's default ceiling). An interval
//! that gathers more than the link moves in 15 minutes (hundreds of GiB at common rates) fails its
//! commit, and fails it again after every restore: a shorter checkpoint interval is the remedy.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_datastream::Result;
use floe_datastream::connector::{ConnectorContext, SinkWriter};
use floe_storage::ObjectStore;
use rdkafka::ClientConfig;
use rdkafka::producer::Producer;

use crate::commit::{
    COMMIT_TIMEOUT, Committer, Deliveries, Kafka, Pending, blocking, delivery_failure, send_all,
};
use crate::options::{DeliveryGuarantee, Partitioner, SinkOptions};
use crate::source::REQUEST_TIMEOUT;
use crate::{error, kafka_error};

/// Where the write-ahead objects live, under the job's storage.
pub(crate) const WRITE_AHEAD_ROOT: &str = "kafka-sink/";

/// Checkpoints whose records the commit task is writing.
struct Committing {
    checkpoints: Vec<Pending>,
    task: tokio::task::JoinHandle<Result<()>>,
}

/// A subtask's writer to one topic.
pub struct KafkaSinkWriter {
    options: Arc<SinkOptions>,
    ctx: ConnectorContext,
    producer: Option<Arc<Kafka>>,
    partition: Option<i32>,
    /// Exactly-once: the write-ahead object of the records since the last barrier (or, without
    /// checkpoints and so without storage, the records themselves until the end), the
    /// checkpoints written ahead and the ones being written to Kafka, the job's storage, and this
    /// sink's transactional id and marker group.
    ahead: Option<floe_write_ahead::Writer>,
    batch: Vec<u8>,
    pending: Vec<Pending>,
    committing: Option<Committing>,
    store: Option<ObjectStore>,
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
        let ahead = store.clone().map(|store| {
            floe_write_ahead::Writer::new(store, "Kafka", WRITE_AHEAD_ROOT, &transactional_id, &ctx.job_id)
        });
        Ok(KafkaSinkWriter {
            options,
            ctx: ctx.clone(),
            producer: None,
            partition: None,
            ahead,
            batch: Vec::new(),
            pending,
            committing: None,
            store,
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
        self.write_now(restored).await
    }

    fn committer(&self) -> Result<Committer> {
        Ok(Committer {
            producer: self.producer()?,
            options: self.options.clone(),
            partition: self.partition,
            store: self.store.clone(),
        })
    }

    /// Waits for the commit task, if any: its checkpoints are written, or its error is the
    /// sink's.
    async fn committed(&mut self) -> Result<()> {
        match self.committing.take() {
            Some(c) => c
                .task
                .await
                .map_err(|e| error(format!("the Kafka sink's commit task: {e}")))?,
            None => Ok(()),
        }
    }

    /// Writes `due` now, after any commit in flight (markers must advance in checkpoint order).
    async fn write_now(&mut self, due: Vec<Pending>) -> Result<()> {
        self.committed().await?;
        let committer = self.committer()?;
        for p in due {
            committer.write_pending(p).await?;
        }
        Ok(())
    }

    /// Hands records to the write-ahead log (without checkpoints, and so without storage, keeps
    /// them until the end).
    async fn write_ahead(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.ahead {
            Some(log) => log.append(self.last_checkpoint, bytes).await,
            None => {
                self.batch.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Completes the open write-ahead object, if any: the records after the last barrier, as a
    /// pending checkpoint `checkpoint` (or the records themselves, without storage).
    async fn seal(&mut self, checkpoint: u64) -> Result<Option<Pending>> {
        let (file, frames) = match &mut self.ahead {
            Some(log) => match log.seal().await? {
                Some(file) => (file, None),
                None => return Ok(None),
            },
            None if self.batch.is_empty() => return Ok(None),
            None => (String::new(), Some(Bytes::from(std::mem::take(&mut self.batch)))),
        };
        Ok(Some(Pending {
            checkpoint,
            file,
            marker_group: self.marker_group.clone(),
            transactional_id: self.transactional_id.clone(),
            frames,
        }))
    }

    /// Removes what earlier attempts of this run wrote ahead for checkpoints that never completed,
    /// before this attempt writes any.
    async fn remove_orphans(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let prefix = self.options.transactional_id_prefix.clone().unwrap_or_default();
        let at = floe_write_ahead::Orphans {
            root: WRITE_AHEAD_ROOT,
            prefix: &prefix,
            subtask: self.ctx.subtask,
            parallelism: self.ctx.parallelism,
            run: &self.ctx.job_id,
            restored: self.ctx.restored.as_ref().map_or(0, |(c, _)| *c),
        };
        floe_write_ahead::remove_orphans(store, "Kafka", at).await;
    }

    /// What a restore needs: every checkpoint not known to be written, those the commit task is
    /// writing included (a restore writes them, unless their markers say it was done).
    fn state(&self) -> Result<Option<String>> {
        let committing = self.committing.iter().flat_map(|c| &c.checkpoints);
        let unwritten: Vec<&Pending> = committing.chain(&self.pending).collect();
        Ok(Some(
            serde_json::to_string(&unwritten).map_err(|e| error(format!("sink state: {e}")))?,
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
            return self.write_ahead(&bytes).await;
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
                    crate::commit::flush_progressing(&producer)?;
                    delivery_failure(&producer)
                })
                .await?;
                Ok(None)
            }
            DeliveryGuarantee::ExactlyOnce => {
                // A commit task that failed fails the sink now, not at the next commit.
                if self.committing.as_ref().is_some_and(|c| c.task.is_finished()) {
                    self.committed().await?;
                }
                if let Some(p) = self.seal(checkpoint).await? {
                    if p.frames.is_some() {
                        return Err(error("no job storage for the write-ahead log"));
                    }
                    self.pending.push(p);
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
        let due = floe_write_ahead::take_covered(&mut self.pending, checkpoint, |p| p.checkpoint);
        if due.is_empty() {
            return Ok(());
        }
        // On a task of its own: the records go on while a checkpoint's records are written to
        // Kafka. One commit task at a time, so markers advance in checkpoint order; a commit
        // waits here only for the one before it.
        self.committed().await?;
        let committer = self.committer()?;
        let checkpoints = due.clone();
        let task = tokio::spawn(async move {
            for p in due {
                committer.write_pending(p).await?;
            }
            Ok(())
        });
        self.committing = Some(Committing { checkpoints, task });
        Ok(())
    }

    async fn close(mut self: Box<Self>) -> Result<()> {
        if !self.started {
            self.start().await?;
        }
        if self.exactly_once() {
            // The end of the input: what is pending, then what came after the last barrier, in
            // one more transaction with a marker past the last checkpoint.
            let mut due = std::mem::take(&mut self.pending);
            due.extend(self.seal(self.last_checkpoint + 1).await?);
            return self.write_now(due).await;
        }
        let producer = self.producer()?;
        blocking(move || {
            crate::commit::flush_progressing(&producer)?;
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
        if let Some(log) = self.ahead.as_mut() {
            log.abandon().await;
        }
        let pending = std::mem::take(&mut self.pending);
        self.write_now(pending).await
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
