//! The write-ahead log of Floe's exactly-once sinks (the Kafka sink's transactions, the
//! PostgreSQL sink's transactional mode).
//!
//! Such a sink cannot make a checkpoint's records visible at the barrier (the checkpoint may
//! never complete), nor keep a transaction of its external system open from the barrier to the
//! checkpoint's completion (a process that dies in between loses it, and neither librdkafka nor
//! PostgreSQL without prepared transactions lets another process finish it). So the records after
//! each barrier stream into an object of the job's storage as they come ([`Writer`]: a few parts
//! in memory, never the interval), named in the checkpoint's state at the next barrier, and are
//! read back ([`Records`]) and written in one transaction with the checkpoint's marker once the
//! checkpoint completed. The object is removed after that transaction; the marker, not the
//! object's absence, tells a restore that the records were written.
//!
//! Objects are named `{root}{id}/{run}/a{after}-{writer}`: `id` one subtask's identity in the
//! external system (a transactional id, a sink's id and subtask), `run` the job run (its
//! JobManager job id), `after` the barrier the records follow (0 at the start; the checkpoint they
//! belong to is known only at the next barrier), `writer` one attempt. Objects of earlier versions
//! are named by their checkpoint, `{checkpoint}-{writer}`, and are read and cleaned the same way.
//!
//! An attempt that dies before a checkpoint completes leaves the objects after that checkpoint's
//! barrier behind, and nothing names them: the run restores from its latest completed checkpoint,
//! whose state names only objects of records up to its barrier. The next attempt of the subtask
//! removes such orphans of its run when it starts ([`remove_orphans`]): every object of records
//! after the restored checkpoint's barrier. Objects of earlier runs are left alone (a savepoint of
//! theirs may name them).

use bytes::Bytes;
use floe_datastream::{Error, Result};
use floe_storage::{ObjectReader, ObjectStore, ObjectWriter};

/// Bytes of records gathered before they go to the object's writer (which sends them in parts
/// of `floe_storage::PART_SIZE`): few calls, little memory.
const PIECE: usize = 1 << 20;

fn error(connector: &str, message: impl Into<String>) -> Error {
    Error::Connector {
        connector: connector.into(),
        message: message.into(),
    }
}

/// A run's directory of the objects written for `id`.
pub fn run_dir(root: &str, id: &str, run: &str) -> String {
    let run = if run.is_empty() { "-" } else { run };
    format!("{root}{id}/{run}/")
}

/// The object of the records after barrier `after` (0: from the start), written by `writer`
/// (one attempt of the subtask).
pub fn object(root: &str, id: &str, run: &str, after: u64, writer: &str) -> String {
    format!("{}a{after:020}-{writer}", run_dir(root, id, run))
}

/// Whether an object (its name in its run's directory) holds records after the barrier of
/// checkpoint `restored`: one after barrier `a` holds those of a checkpoint after `a`, an older
/// object named by checkpoint `c` those of `c`.
fn after_restored(name: &str, restored: u64) -> bool {
    let Some((head, _writer)) = name.split_once('-') else {
        return false;
    };
    match head.strip_prefix('a') {
        Some(after) => after.parse::<u64>().is_ok_and(|a| a >= restored),
        None => head.parse::<u64>().is_ok_and(|c| c > restored),
    }
}

/// The objects (names in a run's directory) of records after the barrier of `restored`, which
/// nothing names; `restored` 0 for a start without a checkpoint of the run.
pub fn orphans(names: &[String], restored: u64) -> Vec<String> {
    names
        .iter()
        .filter(|n| after_restored(n, restored))
        .cloned()
        .collect()
}

/// The ids (directories under the root, `name/`) whose orphans subtask `subtask` of
/// `parallelism` removes, for ids `{prefix}-{subtask}`: its own, and those of subtasks a rescale
/// removed (`{prefix}-{j}`, j >= parallelism) that fall to it (j mod parallelism), so no two
/// subtasks clean one directory.
pub fn cleaned_by(dirs: &[String], prefix: &str, subtask: u32, parallelism: u32) -> Vec<String> {
    let own = format!("{prefix}-{subtask}");
    dirs.iter()
        .filter_map(|d| d.strip_suffix('/'))
        .filter(|d| {
            *d == own
                || d.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .and_then(|j| j.parse::<u32>().ok())
                    .is_some_and(|j| j >= parallelism && j % parallelism.max(1) == subtask)
        })
        .map(str::to_string)
        .collect()
}

/// Takes from `pending` the checkpoints a completion of `checkpoint` covers (`of` gives each
/// one's id), in order, leaving the later ones.
pub fn take_covered<P>(pending: &mut Vec<P>, checkpoint: u64, of: impl Fn(&P) -> u64) -> Vec<P> {
    let (due, later) = std::mem::take(pending)
        .into_iter()
        .partition(|p| of(p) <= checkpoint);
    *pending = later;
    due
}

/// Where a subtask's orphans are looked for: the log's root, the prefix of its ids
/// (`{prefix}-{subtask}`), the subtask, and the checkpoint it restored (0: none of its run).
#[derive(Debug, Clone)]
pub struct Orphans<'a> {
    pub root: &'a str,
    pub prefix: &'a str,
    pub subtask: u32,
    pub parallelism: u32,
    pub run: &'a str,
    pub restored: u64,
}

/// Removes what earlier attempts of this run wrote ahead for checkpoints that never completed
/// ([`orphans`]), for the ids [`cleaned_by`] gives this subtask; to be called before the attempt
/// writes any. A failure only leaves them (logged): they are garbage, not records to write.
pub async fn remove_orphans(store: &ObjectStore, connector: &str, at: Orphans<'_>) {
    let removed = async {
        let dirs = store.list(at.root).await?;
        let mut removed = 0;
        for id in cleaned_by(&dirs, at.prefix, at.subtask, at.parallelism) {
            let dir = run_dir(at.root, &id, at.run);
            let doomed: Vec<String> = orphans(&store.list(&dir).await?, at.restored)
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
            restored = at.restored,
            "{connector} sink: removed {n} write-ahead objects of checkpoints that never completed"
        ),
        Err(e) => tracing::warn!("{connector} sink: looking for orphaned write-ahead objects: {e}"),
    }
}

/// The object of the records since the last barrier, open.
struct Open {
    file: String,
    writer: ObjectWriter,
    /// Records not handed to the writer yet (less than [`PIECE`]).
    piece: Vec<u8>,
}

/// One attempt's writer of a subtask's log: records since the last barrier go into one object,
/// opened at the first record after the barrier and completed ([`Writer::seal`]) at the next.
pub struct Writer {
    store: ObjectStore,
    connector: &'static str,
    root: String,
    id: String,
    run: String,
    /// Names this attempt's objects apart from every other attempt's.
    writer_id: String,
    open: Option<Open>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("dir", &run_dir(&self.root, &self.id, &self.run))
            .field("open", &self.open.as_ref().map(|o| &o.file))
            .finish()
    }
}

impl Writer {
    /// A writer of `id`'s objects of run `run` under `root` (`kafka-sink/`, `postgres-sink/`);
    /// `connector` names the sink in errors and logs.
    pub fn new(store: ObjectStore, connector: &'static str, root: &str, id: &str, run: &str) -> Self {
        Writer {
            store,
            connector,
            root: root.to_string(),
            id: id.to_string(),
            run: run.to_string(),
            writer_id: uuid::Uuid::new_v4().simple().to_string(),
            open: None,
        }
    }

    /// The job storage the objects are in.
    pub fn store(&self) -> &ObjectStore {
        &self.store
    }

    /// Appends `bytes` (whole frames) to the object of the records after barrier `after`,
    /// opening it if it is not open.
    pub async fn append(&mut self, after: u64, bytes: &[u8]) -> Result<()> {
        if self.open.is_none() {
            let file = object(&self.root, &self.id, &self.run, after, &self.writer_id);
            self.open = Some(Open {
                writer: self.store.writer(&file).await?,
                file,
                piece: Vec::with_capacity(PIECE),
            });
        }
        if let Some(o) = self.open.as_mut() {
            o.piece.extend_from_slice(bytes);
            if o.piece.len() >= PIECE {
                let piece = std::mem::replace(&mut o.piece, Vec::with_capacity(PIECE));
                o.writer.write(piece).await?;
            }
        }
        Ok(())
    }

    /// Completes the open object, if any (records came since the last barrier): its path.
    pub async fn seal(&mut self) -> Result<Option<String>> {
        let Some(mut o) = self.open.take() else {
            return Ok(None);
        };
        let piece = std::mem::take(&mut o.piece);
        if !piece.is_empty() {
            o.writer.write(piece).await?;
        }
        o.writer.close().await?;
        Ok(Some(o.file))
    }

    /// Abandons the open object, if any (stopped with a savepoint: records after its barrier
    /// belong to no checkpoint, and the job resumed from it produces them again).
    pub async fn abandon(&mut self) {
        if let Some(o) = self.open.take() {
            tracing::warn!(
                object = %o.file,
                "{} sink: stopped with a savepoint; records after its barrier are not written",
                self.connector
            );
            if let Err(e) = o.writer.abort().await {
                tracing::warn!(
                    "{} sink: abandoning the write-ahead object {}: {e}",
                    self.connector,
                    o.file
                );
            }
        }
    }
}

/// A writer dropped with its object open (its task was canceled, or its TaskManager stopped with
/// SIGTERM): the object is aborted in the background, so no incomplete upload is left (a local
/// file's temporary, an S3 multipart upload), and the storage layer does not warn of a writer
/// "not closed or aborted". Its records belong to no completed checkpoint.
impl Drop for Writer {
    fn drop(&mut self) {
        let Some(o) = self.open.take() else {
            return;
        };
        let connector = self.connector;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = o.writer.abort().await {
                        tracing::warn!(
                            "{connector} sink: abandoning the write-ahead object {}: {e}",
                            o.file
                        );
                    }
                });
            }
            Err(_) => tracing::warn!(
                "{connector} sink: dropped outside a runtime; the write-ahead object {} is left incomplete",
                o.file
            ),
        }
    }
}

/// A pending checkpoint's records read back, a batch of whole frames at a time: from its object,
/// part by part (a checkpoint interval of any size passes through a few parts of memory), or
/// from memory (records that were never written ahead: the end of a job without checkpoints).
pub enum Records {
    Memory(Option<Bytes>),
    Object {
        connector: &'static str,
        path: String,
        reader: Box<ObjectReader>,
        /// The start of a record a part ended inside of.
        carry: Vec<u8>,
        read_any: bool,
    },
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Records::Memory(frames) => f
                .debug_tuple("Memory")
                .field(&frames.as_ref().map(Bytes::len))
                .finish(),
            Records::Object { path, .. } => f.debug_struct("Object").field("path", path).finish(),
        }
    }
}

impl Records {
    /// The records of checkpoint `checkpoint` in object `path`, to be read because its marker
    /// says they were not written. An object gone is an error: its records are lost, and saying
    /// so beats committing the checkpoint without them.
    pub async fn open(
        store: &ObjectStore,
        connector: &'static str,
        path: &str,
        checkpoint: u64,
    ) -> Result<Self> {
        match store.reader(path).await {
            Ok(reader) => Ok(Records::Object {
                connector,
                path: path.to_string(),
                reader: Box::new(reader),
                carry: Vec::new(),
                read_any: false,
            }),
            Err(floe_storage::Error::NotFound { .. }) => Err(error(
                connector,
                format!(
                    "the write-ahead object {path} of checkpoint {checkpoint} is gone though its marker says its records were not written"
                ),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// The next batch of whole frames (never empty), `None` at the end.
    pub async fn next(&mut self) -> Result<Option<Bytes>> {
        match self {
            Records::Memory(frames) => Ok(frames.take().filter(|f| !f.is_empty())),
            Records::Object {
                connector,
                path,
                reader,
                carry,
                read_any,
            } => loop {
                let part = match reader.next_part().await {
                    Ok(part) => part,
                    Err(floe_storage::Error::NotFound { .. }) if !*read_any => {
                        return Err(error(
                            connector,
                            format!(
                                "the write-ahead object {path} is gone though its checkpoint's marker says its records were not written"
                            ),
                        ));
                    }
                    Err(e) => return Err(e.into()),
                };
                let Some(part) = part else {
                    if !carry.is_empty() {
                        return Err(error(
                            connector,
                            format!(
                                "the write-ahead object {path} ends inside a record ({} bytes of it)",
                                carry.len()
                            ),
                        ));
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

#[cfg(test)]
mod tests;
