//! A PostgreSQL sink for Floe jobs (issue 34, item 5): each record becomes a row of a table,
//! upserted by its primary key or appended.
//!
//! Two guarantees:
//!
//! - **Upsert, idempotent** ([`PostgresSink::upsert`]): rows are buffered per subtask, the last
//!   row of a key replacing an earlier one, and written in one statement (`INSERT ... ON
//!   CONFLICT (key) DO UPDATE`) when `batch_rows` are buffered, at every checkpoint barrier
//!   (before the checkpoint can complete) and at the end of input. A restore replays the records
//!   after the restored checkpoint, and their upserts write the same rows again: the table ends as
//!   a fault-free run leaves it, exactly-once in effect for a job whose rows per key are the
//!   latest value of that key (a keyed aggregate's running result). Rows of one key must reach
//!   the sink from one subtask in order: key the stream by the table's key before the sink. An
//!   append ([`PostgresSink::append`]) written this way is at-least-once: a restore inserts the
//!   replayed rows again.
//! - **Exactly-once, transactional** ([`PostgresSink::exactly_once`]): each checkpoint's rows
//!   become visible in one transaction once the checkpoint completed, with a marker row that
//!   says so (`transactional.rs`), so an append or an upsert is written once whatever moment a
//!   process dies at, and readers see only the rows of completed checkpoints.
//!
//! The client is `tokio-postgres` (pure Rust) over the simple-query protocol: one round trip per
//! batch, values as quoted literals (see `sql.rs`).

mod batch;
mod client;
pub mod jobs;
mod sql;
mod transactional;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floe_datastream::connector::{ConnectorContext, SinkWriter, frames};
use floe_datastream::{Data, DataStream, DataStreamSink, Error, Result};

use batch::Batch;
use transactional::TransactionalWriter;

pub use jobs::register;
pub use sql::Value;

/// The marker table of [`PostgresSink::exactly_once`] unless [`PostgresSink::marker_table`]
/// names another.
pub const DEFAULT_MARKER_TABLE: &str = "floe_sink_commits";

/// Where and how a stream is written: the connection, the table, its columns in the order the
/// rows give them, its primary key (none: rows are appended), and the guarantee.
///
/// ```
/// use floe_connector_postgres::{PostgresSink, PostgresSinkExt};
/// use floe_datastream::StreamExecutionEnvironment;
///
/// let env = StreamExecutionEnvironment::new();
/// let counts = env.from_collection(vec![("to".to_string(), 2u64), ("be".to_string(), 2)]);
/// // CREATE TABLE word_counts (word text PRIMARY KEY, count bigint); the connection is made when
/// // the first rows are written, not here.
/// let sink = PostgresSink::upsert("host=db user=app dbname=app", "word_counts", &["word", "count"], &["word"])?
///     .exactly_once();
/// counts.sink_to_postgres(sink, |(word, n): &(String, u64)| vec![word.as_str().into(), (*n).into()]);
/// env.build()?;
///
/// // Arguments are checked when the sink is made, naming what is wrong.
/// let e = PostgresSink::upsert("host=db", "word_counts", &["word", "count"], &["id"]).unwrap_err();
/// assert_eq!(e.to_string(), r#"PostgreSQL: key of word_counts: "id" is not one of the columns ["word", "count"]"#);
/// # Ok::<(), floe_datastream::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct PostgresSink {
    connection: String,
    table: String,
    columns: Vec<String>,
    key: Vec<String>,
    batch_rows: usize,
    exactly_once: bool,
    sink_id: Option<String>,
    marker_table: String,
}

fn bad(message: String) -> Error {
    Error::Connector {
        connector: "PostgreSQL".into(),
        message,
    }
}

impl PostgresSink {
    /// Upserts into `table` (`name` or `schema.name`; it must exist, with a primary key or
    /// unique index on `key`): each row gives `columns`, in order. `connection` is a
    /// libpq-style string (`host=127.0.0.1 port=5432 user=floe dbname=app`) or a
    /// `postgresql://` URL. Refused, naming the argument: no columns, an empty or repeated
    /// name, no key, a key column not among the columns.
    pub fn upsert(connection: &str, table: &str, columns: &[&str], key: &[&str]) -> Result<Self> {
        let sink = Self::append(connection, table, columns)?;
        if key.is_empty() {
            return Err(bad(format!(
                "key of {table}: expected the primary key's columns, got none"
            )));
        }
        if let Some(k) = key.iter().find(|k| !columns.contains(k)) {
            return Err(bad(format!(
                "key of {table}: {k:?} is not one of the columns {columns:?}"
            )));
        }
        Ok(PostgresSink {
            key: key.iter().map(|c| c.to_string()).collect(),
            ..sink
        })
    }

    /// Appends to `table` (it must exist): each row gives `columns`, in order, in a plain
    /// `INSERT`. At-least-once unless [`Self::exactly_once`]: a restore inserts the records it
    /// replays again. Refused, naming the argument: no columns, an empty or repeated name.
    pub fn append(connection: &str, table: &str, columns: &[&str]) -> Result<Self> {
        if table.is_empty() || table.split('.').any(str::is_empty) {
            return Err(bad(format!("table: expected name or schema.name, got {table:?}")));
        }
        if columns.is_empty() {
            return Err(bad(format!("columns of {table}: expected at least one")));
        }
        for (i, c) in columns.iter().enumerate() {
            if c.is_empty() {
                return Err(bad(format!(
                    "columns of {table}: column {} has an empty name",
                    i + 1
                )));
            }
            if columns[..i].contains(c) {
                return Err(bad(format!("columns of {table}: {c:?} is given twice")));
            }
        }
        Ok(PostgresSink {
            connection: connection.to_string(),
            table: table.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            key: Vec::new(),
            batch_rows: 1000,
            exactly_once: false,
            sink_id: None,
            marker_table: DEFAULT_MARKER_TABLE.to_string(),
        })
    }

    /// Exactly-once: each checkpoint's rows are kept in a write-ahead log in the job's storage
    /// (`spec.storage`) until the checkpoint completes, then written in one transaction with a
    /// row of the marker table ([`Self::marker_table`]) that records the checkpoint, so a
    /// restore writes each checkpoint's rows once. Readers see rows one checkpoint interval after
    /// they came. Without checkpoints, all the rows are written in one transaction committed at
    /// the end of the input. The connection's user must be allowed to create the marker table,
    /// or it must exist.
    pub fn exactly_once(mut self) -> Self {
        self.exactly_once = true;
        self
    }

    /// The sink's name in the marker table and the job's storage (default: the table's name).
    /// Two exactly-once sinks of one job that write the same table need different ids. Refused,
    /// naming it: empty, or holding a `/`.
    pub fn sink_id(mut self, id: &str) -> Result<Self> {
        if id.is_empty() || id.contains('/') {
            return Err(bad(format!(
                "sink id of {}: expected a name without '/', got {id:?}",
                self.table
            )));
        }
        self.sink_id = Some(id.to_string());
        Ok(self)
    }

    /// The exactly-once sink's marker table (`name` or `schema.name`, default
    /// [`DEFAULT_MARKER_TABLE`]), created if it does not exist.
    pub fn marker_table(mut self, table: &str) -> Result<Self> {
        if table.is_empty() || table.split('.').any(str::is_empty) {
            return Err(bad(format!(
                "marker table: expected name or schema.name, got {table:?}"
            )));
        }
        self.marker_table = table.to_string();
        Ok(self)
    }

    /// The id the marker rows and write-ahead objects are named by.
    fn id(&self) -> String {
        self.sink_id
            .clone()
            .unwrap_or_else(|| self.table.replace('/', "_"))
    }

    /// Rows a subtask buffers before it writes them (default 1,000); also written at every
    /// checkpoint barrier and at the end.
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }
}

/// `sink_to_postgres` on a stream: `to_row` gives a record's values, one per column.
pub trait PostgresSinkExt<T> {
    fn sink_to_postgres(
        &self,
        sink: PostgresSink,
        to_row: impl Fn(&T) -> Vec<Value> + Send + Sync + 'static,
    ) -> DataStreamSink;
}

impl<T: Data> PostgresSinkExt<T> for DataStream<T> {
    fn sink_to_postgres(
        &self,
        sink: PostgresSink,
        to_row: impl Fn(&T) -> Vec<Value> + Send + Sync + 'static,
    ) -> DataStreamSink {
        let sink = Arc::new(sink);
        let (columns, key_at) = (sink.columns.len(), key_positions(&sink));
        let encode = move |record: &T, out: &mut Vec<u8>| {
            let values = to_row(record);
            encode_row(&values, columns, &key_at, out);
        };
        self.sink_to("PostgreSQL", encode, move |ctx| {
            Ok(if sink.exactly_once && ctx.checkpointing {
                Writer::Transactional(Box::new(TransactionalWriter::new(sink.clone(), ctx)?))
            } else {
                Writer::Direct(Box::new(DirectWriter::new(sink.clone(), ctx)))
            })
        })
    }
}

/// Where the key's columns are among the columns.
fn key_positions(sink: &PostgresSink) -> Vec<usize> {
    sink.key
        .iter()
        .filter_map(|k| sink.columns.iter().position(|c| c == k))
        .collect()
}

/// A frame: the key's literals, a NUL, the row as `(v1, ...)`; or, for a row with the wrong
/// number of values, a NUL first and the message (literals never hold a NUL: see `sql.rs`).
fn encode_row(values: &[Value], columns: usize, key_at: &[usize], out: &mut Vec<u8>) {
    let mut text = String::new();
    if values.len() != columns {
        text.push('\0');
        text.push_str(&format!(
            "a row has {} values, the sink's columns are {columns}",
            values.len()
        ));
    } else {
        for &k in key_at {
            values[k].write_literal(&mut text);
            text.push(',');
        }
        text.push('\0');
        sql::row(values, &mut text);
    }
    out.extend_from_slice(text.as_bytes());
}

/// A subtask's writer: rows as they come, or each checkpoint's in a transaction.
enum Writer {
    Direct(Box<DirectWriter>),
    Transactional(Box<TransactionalWriter>),
}

#[async_trait]
impl SinkWriter for Writer {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        match self {
            Writer::Direct(w) => w.write(bytes).await,
            Writer::Transactional(w) => w.write(bytes).await,
        }
    }

    async fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<String>> {
        match self {
            Writer::Direct(w) => w.pre_commit(checkpoint).await,
            Writer::Transactional(w) => w.pre_commit(checkpoint).await,
        }
    }

    async fn commit(&mut self, checkpoint: u64) -> Result<()> {
        match self {
            Writer::Direct(w) => w.commit(checkpoint).await,
            Writer::Transactional(w) => w.commit(checkpoint).await,
        }
    }

    async fn close(self: Box<Self>) -> Result<()> {
        match *self {
            Writer::Direct(w) => w.close().await,
            Writer::Transactional(w) => w.close().await,
        }
    }

    async fn stop(self: Box<Self>) -> Result<()> {
        match *self {
            Writer::Direct(w) => w.stop().await,
            Writer::Transactional(w) => w.stop().await,
        }
    }
}

/// The marker's value for "this subtask's rows of the run were committed" in a job without
/// checkpoints (above any checkpoint id).
const END_OF_INPUT: u64 = i64::MAX as u64;

/// A subtask's rows written as they come: buffered ([`Batch`]), one statement per batch, every
/// batch written at a checkpoint barrier. Exactly-once without checkpoints: every statement in
/// one transaction, committed at the end of the input (a failure restarts the job from its
/// start, and the dropped connection rolls back what this attempt wrote) with the subtask's
/// marker row set to [`END_OF_INPUT`], so of two attempts that both reach the end (one of them on
/// a TaskManager declared lost that still runs) only the first commits.
struct DirectWriter {
    sink: Arc<PostgresSink>,
    statement: sql::Insert,
    subtask: client::Subtask,
    run: String,
    client: Option<tokio_postgres::Client>,
    batch: Batch,
}

impl DirectWriter {
    fn new(sink: Arc<PostgresSink>, ctx: &ConnectorContext) -> Self {
        DirectWriter {
            statement: sql::Insert::new(&sink.table, &sink.columns, &sink.key),
            subtask: client::Subtask {
                table: sink.table.clone(),
                subtask: ctx.subtask,
            },
            batch: Batch::new(!sink.key.is_empty()),
            run: ctx.job_id.clone(),
            sink,
            client: None,
        }
    }

    /// The connection, made at the first write; in one transaction when exactly-once.
    async fn client(&mut self) -> Result<&tokio_postgres::Client> {
        if self.client.is_none() {
            let client = self.subtask.connect(&self.sink.connection).await?;
            if self.sink.exactly_once {
                transactional::ensure_marker_table(&client, &self.sink.marker_table, &self.subtask).await?;
                client
                    .batch_execute("BEGIN")
                    .await
                    .map_err(|e| self.subtask.client_error("begin", &e))?;
            }
            self.client = Some(client);
        }
        self.client
            .as_ref()
            .ok_or_else(|| self.subtask.error("connect", "no connection"))
    }

    /// Writes the buffered rows (one statement: all of them or none).
    async fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let sql = self.statement.statement(self.batch.rows());
        let rows = self.batch.len();
        let result = self.client().await?.batch_execute(&sql).await;
        let what = if self.sink.key.is_empty() {
            "insert"
        } else {
            "upsert"
        };
        result.map_err(|e| self.subtask.client_error(&format!("{what} of {rows} rows"), &e))?;
        self.batch.clear();
        Ok(())
    }
}

#[async_trait]
impl SinkWriter for DirectWriter {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        for frame in frames(&bytes) {
            self.batch.push(frame).map_err(|e| self.subtask.error("row", e))?;
            if self.batch.len() >= self.sink.batch_rows {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<String>> {
        self.flush().await?;
        Ok(None)
    }

    async fn close(mut self: Box<Self>) -> Result<()> {
        self.flush().await?;
        if !self.sink.exactly_once {
            return Ok(());
        }
        let marker = sql::Marker::new(
            &self.sink.marker_table,
            &self.sink.id(),
            &self.run,
            self.subtask.subtask,
        );
        let (subtask, table) = (self.subtask.clone(), self.sink.table.clone());
        let client = self.client().await?;
        let marked =
            transactional::first_number(&subtask.query(client, &marker.claim(), "read the marker").await?);
        if marked >= END_OF_INPUT {
            subtask.query(client, "ROLLBACK", "roll back").await?;
            tracing::warn!(
                %table,
                subtask = subtask.subtask,
                "PostgreSQL sink: another attempt of this subtask committed the run's rows; this one's are rolled back"
            );
            return Ok(());
        }
        subtask
            .query(client, &marker.set(END_OF_INPUT), "set the marker")
            .await?;
        subtask.query(client, "COMMIT", "commit").await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_refused_naming_them() {
        let err = |columns: &[&str], key: &[&str]| {
            PostgresSink::upsert("host=x", "counts", columns, key)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(&["word", "n"], &["id"]),
            "PostgreSQL: key of counts: \"id\" is not one of the columns [\"word\", \"n\"]"
        );
        assert_eq!(
            err(&["word", "n"], &[]),
            "PostgreSQL: key of counts: expected the primary key's columns, got none"
        );
        assert_eq!(
            err(&["word", "word"], &["word"]),
            "PostgreSQL: columns of counts: \"word\" is given twice"
        );
        assert_eq!(
            err(&[], &["word"]),
            "PostgreSQL: columns of counts: expected at least one"
        );
        assert_eq!(
            PostgresSink::upsert("host=x", "public.", &["a"], &["a"])
                .unwrap_err()
                .to_string(),
            "PostgreSQL: table: expected name or schema.name, got \"public.\""
        );
    }

    #[test]
    fn an_exactly_once_sink_s_names_are_checked() {
        let sink = PostgresSink::append("host=x", "events", &["a"]).unwrap();
        assert_eq!(sink.id(), "events");
        assert_eq!(
            sink.clone().sink_id("a/b").unwrap_err().to_string(),
            "PostgreSQL: sink id of events: expected a name without '/', got \"a/b\""
        );
        assert_eq!(sink.clone().sink_id("events-2").unwrap().id(), "events-2");
        assert_eq!(
            sink.marker_table("ops.").unwrap_err().to_string(),
            "PostgreSQL: marker table: expected name or schema.name, got \"ops.\""
        );
    }

    #[test]
    fn a_frame_holds_the_key_then_the_row() {
        let mut out = Vec::new();
        encode_row(&["a'b".into(), 3i64.into()], 2, &[0], &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "'a''b',\0('a''b', 3)");
        let mut out = Vec::new();
        encode_row(&["a".into()], 2, &[0], &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\0a row has 1 values, the sink's columns are 2"
        );
    }
}
