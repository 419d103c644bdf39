//! A PostgreSQL sink for Floe jobs (issue 34, item 5): each record becomes a row, upserted by the
//! table's primary key (`INSERT ... ON CONFLICT (key) DO UPDATE`).
//!
//! Rows are buffered per subtask, the last row of a key replacing an earlier one, and written in
//! one statement when `batch_rows` are buffered, at every checkpoint barrier (before the
//! checkpoint can complete) and at the end of input. A restore replays the records after the
//! restored checkpoint, and their upserts write the same rows again: the table ends as a
//! fault-free run leaves it, exactly-once in effect for a job whose rows per key are the latest
//! value of that key (a keyed aggregate's running result). Rows of one key must reach the sink
//! from one subtask in order: key the stream by the table's key before the sink, as a keyed
//! aggregate does.
//!
//! The client is `tokio-postgres` (pure Rust) over the simple-query protocol: one round trip per
//! batch, values as quoted literals (see `sql.rs`).

mod jobs;
mod sql;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floe_datastream::connector::{ConnectorContext, SinkWriter, frames};
use floe_datastream::{Data, DataStream, DataStreamSink, Error, Result};

pub use jobs::register;
pub use sql::Value;

/// Where and how a stream is upserted: the connection, the table, its columns in the order the
/// rows give them, and its primary key.
#[derive(Debug, Clone)]
pub struct PostgresSink {
    connection: String,
    table: String,
    columns: Vec<String>,
    key: Vec<String>,
    batch_rows: usize,
}

impl PostgresSink {
    /// Upserts into `table` (`name` or `schema.name`; it must exist, with a primary key or
    /// unique index on `key`): each row gives `columns`, in order. `connection` is a
    /// libpq-style string (`host=127.0.0.1 port=5432 user=floe dbname=app`) or a
    /// `postgresql://` URL. Refused, naming the argument: no columns, an empty or repeated
    /// name, no key, a key column not among the columns.
    pub fn upsert(connection: &str, table: &str, columns: &[&str], key: &[&str]) -> Result<Self> {
        let bad = |message: String| Error::Connector {
            connector: "PostgreSQL".into(),
            message,
        };
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
            connection: connection.to_string(),
            table: table.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            key: key.iter().map(|c| c.to_string()).collect(),
            batch_rows: 1000,
        })
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
            Ok(UpsertWriter::new(sink.clone(), ctx))
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

/// A subtask's upserts: rows buffered by key, written in one statement per batch.
struct UpsertWriter {
    sink: Arc<PostgresSink>,
    statement: sql::Upsert,
    subtask: u32,
    client: Option<tokio_postgres::Client>,
    /// The buffered rows, in the order their keys first came.
    rows: Vec<String>,
    /// A buffered key's row in `rows`.
    index: HashMap<String, usize>,
}

impl UpsertWriter {
    fn new(sink: Arc<PostgresSink>, ctx: &ConnectorContext) -> Self {
        UpsertWriter {
            statement: sql::Upsert::new(&sink.table, &sink.columns, &sink.key),
            sink,
            subtask: ctx.subtask,
            client: None,
            rows: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Connector {
            connector: "PostgreSQL".into(),
            message: format!("{} (subtask {}): {what}: {e}", self.sink.table, self.subtask),
        }
    }

    /// [`Self::error`] of a client error, with its causes: tokio-postgres's own text is the kind
    /// alone (`db error`), the server's message (`ERROR: relation "t" does not exist`) its source.
    fn client_error(&self, what: &str, e: &tokio_postgres::Error) -> Error {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        self.error(what, message)
    }

    /// The connection, made at the first write (a writer is made in a synchronous factory).
    async fn client(&mut self) -> Result<&tokio_postgres::Client> {
        if self.client.is_none() {
            let (client, connection) = tokio_postgres::connect(&self.sink.connection, tokio_postgres::NoTls)
                .await
                .map_err(|e| self.client_error("connect", &e))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!("PostgreSQL connection ended: {e}");
                }
            });
            client
                .batch_execute("SET standard_conforming_strings = on")
                .await
                .map_err(|e| self.client_error("connect", &e))?;
            self.client = Some(client);
        }
        self.client
            .as_ref()
            .ok_or_else(|| self.error("connect", "no connection"))
    }

    /// Writes the buffered rows (one statement: all of them or none).
    async fn flush(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let sql = self.statement.statement(self.rows.iter().map(String::as_str));
        let rows = self.rows.len();
        let result = self.client().await?.batch_execute(&sql).await;
        result.map_err(|e| self.client_error(&format!("upsert of {rows} rows"), &e))?;
        self.rows.clear();
        self.index.clear();
        Ok(())
    }
}

#[async_trait]
impl SinkWriter for UpsertWriter {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        for frame in frames(&bytes) {
            let text = std::str::from_utf8(frame).map_err(|e| self.error("row", e))?;
            let (key, row) = text.split_once('\0').unwrap_or((text, ""));
            if key.is_empty() && !row.starts_with('(') {
                return Err(self.error("row", row));
            }
            match self.index.get(key) {
                Some(&i) => self.rows[i] = row.to_string(),
                None => {
                    self.index.insert(key.to_string(), self.rows.len());
                    self.rows.push(row.to_string());
                }
            }
            if self.rows.len() >= self.sink.batch_rows {
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
        self.flush().await
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
