//! The exactly-once sink with checkpoints: the Kafka sink's scheme, the marker in a table.
//!
//! The rows after each checkpoint barrier stream into a write-ahead object of the job's storage
//! ([`floe_write_ahead`]), named in the checkpoint's state at the barrier. Once the checkpoint
//! completed, a commit task of the sink's own (records go on meanwhile) writes its rows in one
//! transaction that also sets the subtask's marker row (`sink`, `run`, `subtask` ->
//! `checkpoint`) to the checkpoint's id, then removes the object. A restore writes each pending
//! checkpoint of its state whose marker is below its id and skips the others: whatever moment a
//! process died at, every checkpoint's rows become visible once.
//!
//! The transaction first makes the marker row if it is missing and locks it (`SELECT ... FOR
//! UPDATE`): two attempts of a subtask that commit the same checkpoint (one of them on a
//! TaskManager declared lost that still runs) are serialized there, and the second finds the
//! marker already set and writes nothing.
//!
//! Markers are scoped to the job run (the JobManager's job id): checkpoint ids count from 1 again
//! in a new run, so a marker another run left must never say this run's checkpoints were
//! written. A restored pending checkpoint carries the marker row its own run and subtask set.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floe_datastream::connector::{ConnectorContext, SinkWriter, frames};
use floe_datastream::{Error, Result};
use floe_storage::ObjectStore;
use floe_write_ahead::{Orphans, Records, Writer};
use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::PostgresSink;
use crate::batch::{Batch, check};
use crate::client::Subtask;
use crate::sql;

/// Where the write-ahead objects live, under the job's storage.
const ROOT: &str = "postgres-sink/";

/// Rows of a checkpoint waiting for it to complete.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    checkpoint: u64,
    /// The write-ahead object in the job's storage.
    file: String,
    /// The marker row that says whether these rows were written: the sink, the run and the
    /// subtask that wrote them.
    sink: String,
    run: String,
    subtask: u32,
}

/// What writing a checkpoint's rows needs; moved onto the commit task and back.
struct Committer {
    sink: Arc<PostgresSink>,
    statement: sql::Insert,
    store: ObjectStore,
    subtask: Subtask,
    /// Made at the first commit; dropped after an error (its transaction's state is unknown).
    client: Option<Client>,
}

impl Committer {
    /// Connects, unless connected.
    async fn connect(&mut self) -> Result<()> {
        if self.client.is_none() {
            let client = self.subtask.connect(&self.sink.connection).await?;
            ensure_marker_table(&client, &self.sink.marker_table, &self.subtask).await?;
            self.client = Some(client);
        }
        Ok(())
    }

    /// Writes `p`'s rows in one transaction with its marker, unless its marker says that was
    /// done; then removes its write-ahead object.
    async fn write_pending(&mut self, p: &Pending) -> Result<()> {
        let written = self.transact(p).await;
        if written.is_err() {
            // Rolled back when the connection goes; a new one for the next try.
            self.client = None;
        }
        written?;
        if let Err(e) = self.store.delete(&p.file).await {
            tracing::warn!("PostgreSQL sink: removing the write-ahead object {}: {e}", p.file);
        }
        Ok(())
    }

    async fn transact(&mut self, p: &Pending) -> Result<()> {
        self.connect().await?;
        let Committer {
            sink,
            statement,
            store,
            subtask,
            client,
        } = &*self;
        let client = client
            .as_ref()
            .ok_or_else(|| subtask.error("connect", "no connection"))?;
        let marker = sql::Marker::new(&sink.marker_table, &p.sink, &p.run, p.subtask);
        subtask.query(client, "BEGIN", "begin").await?;
        let marked = first_number(&subtask.query(client, &marker.claim(), "read the marker").await?);
        if marked >= p.checkpoint {
            subtask.query(client, "ROLLBACK", "roll back").await?;
            tracing::info!(
                checkpoint = p.checkpoint,
                marked,
                "PostgreSQL sink: checkpoint already written"
            );
            return Ok(());
        }
        let mut records = Records::open(store, "PostgreSQL", &p.file, p.checkpoint).await?;
        let mut batch = Batch::new(!sink.key.is_empty());
        let mut rows = 0u64;
        while let Some(chunk) = records.next().await? {
            for frame in frames(&chunk) {
                batch.push(frame).map_err(|e| subtask.error("row", e))?;
                if batch.len() >= sink.batch_rows {
                    rows += batch.len() as u64;
                    subtask
                        .query(client, &statement.statement(batch.rows()), "write rows")
                        .await?;
                    batch.clear();
                }
            }
        }
        if !batch.is_empty() {
            rows += batch.len() as u64;
            subtask
                .query(client, &statement.statement(batch.rows()), "write rows")
                .await?;
        }
        subtask
            .query(client, &marker.set(p.checkpoint), "set the marker")
            .await?;
        subtask.query(client, "COMMIT", "commit").await?;
        tracing::info!(
            checkpoint = p.checkpoint,
            rows,
            "PostgreSQL sink: checkpoint written"
        );
        Ok(())
    }
}

/// Makes the marker table unless it is there. A concurrent `CREATE TABLE IF NOT EXISTS` can still
/// fail on the catalog's unique index; the second try sees the table.
pub(crate) async fn ensure_marker_table(client: &Client, table: &str, subtask: &Subtask) -> Result<()> {
    let marker = sql::Marker::new(table, "", "", 0);
    let exists = client
        .simple_query(&marker.exists())
        .await
        .map_err(|e| subtask.client_error("look for the marker table", &e))?;
    let there = exists.iter().any(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0) == Some("t"),
        _ => false,
    });
    if there {
        return Ok(());
    }
    if client.batch_execute(&marker.create()).await.is_err() {
        client
            .batch_execute(&marker.create())
            .await
            .map_err(|e| subtask.client_error("create the marker table", &e))?;
    }
    Ok(())
}

/// The first column of the first row a query answered, as a number (0 without one).
pub(crate) fn first_number(messages: &[SimpleQueryMessage]) -> u64 {
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(|c| c.parse::<u64>().ok()),
            _ => None,
        })
        .unwrap_or(0)
}

/// Checkpoints the commit task is writing.
struct Committing {
    checkpoints: Vec<Pending>,
    task: tokio::task::JoinHandle<(Committer, Result<()>)>,
}

/// A subtask's exactly-once writer with checkpoints.
pub(crate) struct TransactionalWriter {
    sink: Arc<PostgresSink>,
    ctx: ConnectorContext,
    /// The write-ahead log of this subtask's objects (`{sink id}-{subtask}`).
    log: Writer,
    /// Checkpoints written ahead, waiting for their completion.
    pending: Vec<Pending>,
    /// `None` while the commit task has it.
    committer: Option<Committer>,
    committing: Option<Committing>,
    last_checkpoint: u64,
    started: bool,
    subtask: Subtask,
}

impl TransactionalWriter {
    pub(crate) fn new(sink: Arc<PostgresSink>, ctx: &ConnectorContext) -> Result<Self> {
        let subtask = Subtask {
            table: sink.table.clone(),
            subtask: ctx.subtask,
        };
        let store = ObjectStore::job_storage(&ctx.configuration)?.ok_or_else(|| {
            subtask.error(
                "exactly-once",
                "checkpoints need the job's storage (spec.storage.url) for the write-ahead log",
            )
        })?;
        let mut pending = Vec::new();
        let mut last_checkpoint = 0;
        if let Some((checkpoint, states)) = &ctx.restored {
            last_checkpoint = *checkpoint;
            for state in states {
                let list: Vec<Pending> = serde_json::from_str(state).map_err(|e| Error::Restore {
                    checkpoint: *checkpoint,
                    message: format!("PostgreSQL sink state {state:?}: {e}"),
                })?;
                pending.extend(list);
            }
        }
        let id = format!("{}-{}", sink.id(), ctx.subtask);
        Ok(TransactionalWriter {
            log: Writer::new(store.clone(), "PostgreSQL", ROOT, &id, &ctx.job_id),
            committer: Some(Committer {
                statement: sql::Insert::new(&sink.table, &sink.columns, &sink.key),
                sink: sink.clone(),
                store,
                subtask: subtask.clone(),
                client: None,
            }),
            sink,
            ctx: ctx.clone(),
            pending,
            committing: None,
            last_checkpoint,
            started: false,
            subtask,
        })
    }

    /// Removes the orphans of this run's earlier attempts, then writes the restored checkpoints
    /// whose markers say they were not written.
    async fn start(&mut self) -> Result<()> {
        self.started = true;
        let at = Orphans {
            root: ROOT,
            prefix: &self.sink.id(),
            subtask: self.ctx.subtask,
            parallelism: self.ctx.parallelism,
            run: &self.ctx.job_id,
            restored: self.ctx.restored.as_ref().map_or(0, |(c, _)| *c),
        };
        floe_write_ahead::remove_orphans(self.log.store(), "PostgreSQL", at).await;
        let restored = std::mem::take(&mut self.pending);
        self.write_now(restored).await
    }

    /// Waits for the commit task, if any: its checkpoints are written, or its error is the
    /// sink's.
    async fn committed(&mut self) -> Result<()> {
        let Some(c) = self.committing.take() else {
            return Ok(());
        };
        let (committer, result) = c
            .task
            .await
            .map_err(|e| self.subtask.error("the commit task", e))?;
        self.committer = Some(committer);
        result
    }

    fn take_committer(&mut self) -> Result<Committer> {
        self.committer
            .take()
            .ok_or_else(|| self.subtask.error("commit", "the committer was lost"))
    }

    /// Writes `due` now, after any commit in flight (markers advance in checkpoint order).
    async fn write_now(&mut self, due: Vec<Pending>) -> Result<()> {
        self.committed().await?;
        let mut committer = self.take_committer()?;
        let mut result = Ok(());
        for p in &due {
            result = committer.write_pending(p).await;
            if result.is_err() {
                break;
            }
        }
        self.committer = Some(committer);
        result
    }

    /// What a restore needs: every checkpoint not known to be written, those the commit task is
    /// writing included (a restore writes them, unless their markers say it was done).
    fn state(&self) -> Result<Option<String>> {
        let committing = self.committing.iter().flat_map(|c| &c.checkpoints);
        let unwritten: Vec<&Pending> = committing.chain(&self.pending).collect();
        serde_json::to_string(&unwritten)
            .map(Some)
            .map_err(|e| self.subtask.error("state", e))
    }

    /// The rows since the last barrier as a pending checkpoint `checkpoint`, if any came.
    async fn seal(&mut self, checkpoint: u64) -> Result<Option<Pending>> {
        Ok(self.log.seal().await?.map(|file| Pending {
            checkpoint,
            file,
            sink: self.sink.id(),
            run: self.ctx.job_id.clone(),
            subtask: self.ctx.subtask,
        }))
    }
}

#[async_trait]
impl SinkWriter for TransactionalWriter {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        if !self.started {
            self.start().await?;
        }
        // A row the encoder refused fails the job now, not at the commit of its checkpoint.
        for frame in frames(&bytes) {
            let text = std::str::from_utf8(frame).map_err(|e| self.subtask.error("row", e))?;
            check(text).map_err(|e| self.subtask.error("row", e))?;
        }
        self.log.append(self.last_checkpoint, &bytes).await
    }

    async fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<String>> {
        if !self.started {
            self.start().await?;
        }
        // A commit task that failed fails the sink now, not at the next commit.
        if self.committing.as_ref().is_some_and(|c| c.task.is_finished()) {
            self.committed().await?;
        }
        self.last_checkpoint = checkpoint;
        if let Some(p) = self.seal(checkpoint).await? {
            self.pending.push(p);
        }
        self.state()
    }

    async fn commit(&mut self, checkpoint: u64) -> Result<()> {
        if !self.started {
            self.start().await?;
        }
        let due = floe_write_ahead::take_covered(&mut self.pending, checkpoint, |p| p.checkpoint);
        if due.is_empty() {
            return Ok(());
        }
        // On a task of its own: records go on while a checkpoint's rows are written. One
        // commit task at a time, so markers advance in checkpoint order.
        self.committed().await?;
        let mut committer = self.take_committer()?;
        let checkpoints = due.clone();
        let task = tokio::spawn(async move {
            for p in &due {
                if let Err(e) = committer.write_pending(p).await {
                    return (committer, Err(e));
                }
            }
            (committer, Ok(()))
        });
        self.committing = Some(Committing { checkpoints, task });
        Ok(())
    }

    /// The end of the input: what is pending, then the rows after the last barrier, in one more
    /// transaction with a marker past the last checkpoint.
    async fn close(mut self: Box<Self>) -> Result<()> {
        if !self.started {
            self.start().await?;
        }
        let mut due = std::mem::take(&mut self.pending);
        due.extend(self.seal(self.last_checkpoint + 1).await?);
        self.write_now(due).await
    }

    /// Stopped with a savepoint: the checkpoints it and those before it cover are written, and
    /// nothing after its barrier (the job resumed from it writes those rows).
    async fn stop(mut self: Box<Self>) -> Result<()> {
        if !self.started {
            self.start().await?;
        }
        self.log.abandon().await;
        let pending = std::mem::take(&mut self.pending);
        self.write_now(pending).await
    }
}
