//! The sink's connection: made when first needed (a writer is made in a synchronous factory),
//! with errors that name the table, the subtask and what was being done.

use floe_datastream::Error;
use tokio_postgres::{Client, SimpleQueryMessage};

/// What a subtask's errors name.
#[derive(Debug, Clone)]
pub(crate) struct Subtask {
    pub table: String,
    pub subtask: u32,
}

impl Subtask {
    pub(crate) fn error(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Connector {
            connector: "PostgreSQL".into(),
            message: format!("{} (subtask {}): {what}: {e}", self.table, self.subtask),
        }
    }

    /// [`Self::error`] of a client error, with its causes: tokio-postgres's own text is the kind
    /// alone (`db error`), the server's message (`ERROR: relation "t" does not exist`) its
    /// source.
    pub(crate) fn client_error(&self, what: &str, e: &tokio_postgres::Error) -> Error {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        self.error(what, message)
    }

    /// A connection to `connection` (libpq-style or a URL), its driver on a task of its own.
    pub(crate) async fn connect(&self, connection: &str) -> floe_datastream::Result<Client> {
        let (client, driver) = tokio_postgres::connect(connection, tokio_postgres::NoTls)
            .await
            .map_err(|e| self.client_error("connect", &e))?;
        tokio::spawn(async move {
            if let Err(e) = driver.await {
                tracing::warn!("PostgreSQL connection ended: {e}");
            }
        });
        client
            .batch_execute("SET standard_conforming_strings = on")
            .await
            .map_err(|e| self.client_error("connect", &e))?;
        Ok(client)
    }

    /// Sends `sql` over the simple-query protocol; an error says `what` was being done.
    pub(crate) async fn query(
        &self,
        client: &Client,
        sql: &str,
        what: &str,
    ) -> floe_datastream::Result<Vec<SimpleQueryMessage>> {
        client
            .simple_query(sql)
            .await
            .map_err(|e| self.client_error(what, &e))
    }
}
