//! State schema evolution at a restore (issue 34, item 1): every keyed snapshot records the schema
//! each state was written with ([`WithSchemas`], into `TaskSnapshot::schemas`), and a restored
//! operator compares it with its current type's when it declares the state
//! ([`StateSchemas::declare`]: a process function's `State` when the operator starts, a
//! descriptor's state at its first access). Equal schemas restore as
//! before; a compatible change (fields added with a default, fields removed) rewrites every
//! stored value once, on the heap as it is decoded and on RocksDB in place before the state's
//! first access ([`migrate_backend_state`]), as Flink migrates state whose serializer is "compatible
//! after migration"; an incompatible one fails the job at once (no restart can fix it), naming
//! the state, the type and the field. (A descriptor's state is declared at its first access, in
//! the middle of a record: its refusal fails the task there, and the job after its restarts, as
//! Flink's state registration does.) State from a checkpoint that recorded no schema (written
//! before schemas were recorded) restores as before.

use std::collections::BTreeMap;
use std::ops::Range;

use async_trait::async_trait;
use floe_checkpoint::TaskSnapshot;
use floe_state::{KeyedStateBackend, PreparedSnapshot, SnapshotTarget};

use crate::checkpoint::TaskRestore;
use crate::data::Data;
use crate::data::schema::{Compatibility, Schema, check, migrate};
use crate::error::{Error, Result};

/// A keyed snapshot with the schemas of its states: the upload's `TaskSnapshot` carries them.
pub(crate) struct WithSchemas {
    pub inner: Box<dyn PreparedSnapshot>,
    /// State name to schema (JSON).
    pub schemas: BTreeMap<String, String>,
}

#[async_trait]
impl PreparedSnapshot for WithSchemas {
    async fn upload(self: Box<Self>, target: &SnapshotTarget) -> floe_state::Result<TaskSnapshot> {
        let WithSchemas { inner, schemas } = *self;
        let mut snapshot = inner.upload(target).await?;
        snapshot.schemas = schemas;
        Ok(snapshot)
    }
}

/// The schema as it is recorded.
fn schema_json(schema: &Schema) -> String {
    serde_json::to_string(schema).unwrap_or_default()
}

/// How a state's stored values hold its types (what its recorded schema describes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One value per entry: a process function's `State`, value, reducing and aggregating state.
    Value,
    /// A map's entries: the recorded schema is the tuple (user key, value); user keys are part of
    /// the stored keys, so their type may not change.
    Map,
    /// A list's elements (the list encoding of `floe_state::list`), each migrated.
    List,
}

/// A state's layout and the schema of what it stores (values with a time to live included).
#[derive(Debug, Clone)]
pub(crate) struct EntrySchema {
    layout: Layout,
    schema: Schema,
}

impl EntrySchema {
    pub(crate) fn value<S: Data>() -> Self {
        EntrySchema {
            layout: Layout::Value,
            schema: S::schema(),
        }
    }

    pub(crate) fn map<UK: Data, S: Data>() -> Self {
        EntrySchema {
            layout: Layout::Map,
            schema: Schema::Tuple(vec![UK::schema(), S::schema()]),
        }
    }

    pub(crate) fn list<S: Data>() -> Self {
        EntrySchema {
            layout: Layout::List,
            schema: S::schema(),
        }
    }
}

/// The rewrite of one state's stored values from its recorded schema into its current one.
#[derive(Debug)]
pub(crate) struct Migration {
    layout: Layout,
    stored: Schema,
    current: Schema,
}

impl Migration {
    /// One stored value (a whole list for a list state) in the current encoding.
    pub(crate) fn value(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let one = |mut input: &[u8]| {
            let mut out = Vec::with_capacity(input.len() + 8);
            migrate(&mut input, &self.stored, &self.current, &mut out).map(|()| out)
        };
        match self.layout {
            Layout::Value | Layout::Map => one(bytes),
            Layout::List => {
                let items = floe_state::list::decode(bytes)
                    .ok_or_else(|| Error::State("a list value is truncated".into()))?;
                let migrated = items.into_iter().map(one).collect::<Result<Vec<_>>>()?;
                Ok(floe_state::list::encode(migrated.iter().map(Vec::as_slice)))
            }
        }
    }

    /// Decodes one stored value (a `Value` layout) as `T`.
    pub(crate) fn decode<T: Data>(&self, bytes: &[u8]) -> Result<T> {
        T::decode(&mut self.value(bytes)?.as_slice())
    }
}

/// The schemas of a task's keyed states: those recorded by the snapshot it restored, and those
/// its operator declared since. A snapshot records both (a state not declared since keeps the
/// schema it was written with: its entries are carried as they came).
#[derive(Debug, Clone, Default)]
pub(crate) struct StateSchemas {
    checkpoint: u64,
    stored: BTreeMap<String, String>,
    current: BTreeMap<String, String>,
}

impl StateSchemas {
    pub(crate) fn restored(restore: Option<&TaskRestore>) -> Self {
        StateSchemas {
            checkpoint: restore.map_or(0, |r| r.checkpoint),
            stored: restore.map(|r| r.schemas.clone()).unwrap_or_default(),
            current: BTreeMap::new(),
        }
    }

    /// What a snapshot records.
    pub(crate) fn recorded(&self) -> BTreeMap<String, String> {
        let mut all = self.stored.clone();
        all.extend(self.current.iter().map(|(k, v)| (k.clone(), v.clone())));
        all
    }

    /// Declares state `name` with its current types: the migration its restored values need
    /// (`None`: none, or nothing recorded), or the error of an incompatible change, which names
    /// the state, type and field and fails the job without restarts.
    pub(crate) fn declare(&mut self, name: &str, entry: EntrySchema) -> Result<Option<Migration>> {
        let json = schema_json(&entry.schema);
        let Some(stored) = self.stored.get(name).filter(|s| **s != json).cloned() else {
            self.current.insert(name.to_string(), json);
            return Ok(None);
        };
        let fail = |message: String| Error::Restore {
            checkpoint: self.checkpoint,
            message: format!(
                "state {name:?} cannot be read as its type now declares it: {message}. Restore into the \
                 type it was written with, or change it compatibly (add fields with #[data(default)], remove fields)"
            ),
        };
        let stored: Schema = serde_json::from_str(&stored)
            .map_err(|e| fail(format!("its recorded schema does not parse: {e}")))?;
        let (stored, current) = match (entry.layout, stored, entry.schema) {
            (Layout::Map, Schema::Tuple(mut s), Schema::Tuple(mut c)) if s.len() == 2 && c.len() == 2 => {
                let (stored_key, current_key) = (s.remove(0), c.remove(0));
                if check(&stored_key, &current_key) != Ok(Compatibility::Identical) {
                    return Err(fail(format!(
                        "the map's key type changed (user keys are part of the stored keys): {}",
                        check(&stored_key, &current_key)
                            .err()
                            .map_or_else(|| "its layout differs".into(), |e| e.to_string())
                    )));
                }
                (s.remove(0), c.remove(0))
            }
            (_, stored, current) => (stored, current),
        };
        let compatibility = check(&stored, &current).map_err(|e| fail(e.to_string()))?;
        // Declared only once its stored values can be read: a snapshot records the schema its
        // entries are in.
        self.current.insert(name.to_string(), json);
        Ok(match compatibility {
            Compatibility::Identical => None,
            Compatibility::AfterMigration => Some(Migration {
                layout: entry.layout,
                stored,
                current,
            }),
        })
    }
}

/// Rewrites every value of `state` in `key_groups` with `migration`, one key group at a time;
/// returns how many values it rewrote.
pub(crate) fn migrate_backend_state(
    backend: &mut dyn KeyedStateBackend,
    state: &str,
    key_groups: Range<u32>,
    migration: &Migration,
) -> Result<u64> {
    let mut migrated = 0;
    for kg in key_groups {
        let mut group: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut failure = None;
        backend
            .scan_prefix(state, kg, &[], &mut |key, value| {
                match migration.value(value) {
                    Ok(out) => group.push((key.to_vec(), out)),
                    Err(e) => failure = Some(e),
                }
                failure.is_none()
            })
            .map_err(|e| Error::State(e.to_string()))?;
        if let Some(e) = failure {
            return Err(Error::State(format!(
                "migrating state {state:?}, key group {kg}: {e}"
            )));
        }
        for (key, value) in group {
            backend
                .put(state, kg, &key, &value)
                .map_err(|e| Error::State(e.to_string()))?;
            migrated += 1;
        }
    }
    if migrated > 0 {
        tracing::info!(
            state,
            values = migrated,
            "keyed state migrated to its changed type"
        );
    }
    Ok(migrated)
}

#[cfg(test)]
#[path = "evolution_tests.rs"]
mod tests;
