//! The JobManager's operation log in object storage, and the leader epochs that fence it (DESIGN.md
//! "Object storage layout and JobManager failover"). Read [`OperationLog::acquire`] first.
//!
//! Layout under a job's prefix (`{storage.url}/{namespace}/{job-name}/`):
//!
//! ```text
//! leader/{epoch}          one object per epoch, created once (conditional create): who leads
//! oplog/{epoch}/{seq}     one object per appended batch of events (or snapshot), created once
//! snapshot/{epoch}.{seq}  names the newest snapshot entry: where a replay starts
//! ```
//!
//! Nothing is ever overwritten. Fencing uses only conditional creates:
//! 1. A JobManager takes epoch `n + 1` by creating `leader/{n+1}`; if another created it first, it lost.
//! 2. It then *seals* every earlier epoch that is not sealed yet: it creates the next free `seq` of that
//!    epoch with a seal marker. An older JobManager (a zombie of that epoch) that later appends creates
//!    that same `seq` and is refused ([`Error::Fenced`]); what it appended before the seal is in the
//!    log and is replayed, which is right because it logged before acting.
//! 3. Replay reads every earlier epoch up to its seal, in order.
//!
//! Compaction ([`OperationLog::compact`]) keeps the log from growing with every append: the leader
//! appends a *snapshot* entry, the caller's summary of everything before it, at its next `seq` by
//! the same conditional create as an append (so a fenced leader's snapshot is refused like its
//! appends), then names it in `snapshot/`, then ([`Compaction::run`]) deletes what it covers: its
//! own earlier entries, every entry of the older epochs but their seals, and older `snapshot/` names.
//! A replay starts at the newest named snapshot and reads only the entries after it; a snapshot entry
//! met on the way (one not named yet) replaces everything read before it. So a leader that dies at
//! any step of a compaction leaves a log that replays to the same events, and no reader lists or reads
//! the entries a snapshot covers. Entries are deleted only below a snapshot already named: a reader
//! that finds no entry where it reads next re-reads `snapshot/`: a snapshot named at or after that
//! place means the entry is gone (its leader wrote past it), and the replay goes on from that
//! snapshot; only otherwise is the place free, and sealed. Never a seal in the hole a deletion left.
//!
//! Every object is framed by `floe_storage::envelope` (length + CRC-32): a truncated or corrupt entry
//! is an error naming it, never a silently shorter history.

use bytes::Bytes;
use floe_storage::{ObjectStore, envelope};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why the log could not be taken or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another JobManager took the epoch this one tried to take.
    #[error("another JobManager took leader epoch {epoch} first ({url}); this one is not the leader")]
    LostElection { epoch: u64, url: String },
    /// A newer JobManager sealed this one's epoch: it must stop acting.
    #[error(
        "JobManager of epoch {epoch} was fenced: a newer JobManager sealed its log at {url}; \
         its writes are refused"
    )]
    Fenced { epoch: u64, url: String },
    #[error("operation log entry {url} is corrupt: {reason}")]
    Corrupt { url: String, reason: String },
    #[error(transparent)]
    Storage(#[from] floe_storage::Error),
}

impl Error {
    /// Whether trying again later may succeed (storage unavailable).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Storage(e) if e.is_retryable())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Names sort in numeric order: fixed-width decimal.
fn name(n: u64) -> String {
    format!("{n:020}")
}

fn parse(name: &str) -> Option<u64> {
    name.trim_end_matches('/').parse().ok()
}

/// Where an entry is in the log: `(epoch, seq)`, ordered as the log is.
type Position = (u64, u64);

/// The `snapshot/` object naming the snapshot entry at `at`.
fn snapshot_name((epoch, seq): Position) -> String {
    format!("snapshot/{}.{}", name(epoch), name(seq))
}

fn parse_snapshot(name: &str) -> Option<Position> {
    let (epoch, seq) = name.split_once('.')?;
    Some((epoch.parse().ok()?, seq.parse().ok()?))
}

/// One log object: a batch of events, a snapshot standing for every event before it, or the seal a
/// newer epoch put at the end of an older one.
#[derive(Debug, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Entry<E> {
    Events(Vec<E>),
    Sealed {
        by_epoch: u64,
    },
    /// The caller's summary of every event before it: a replay replaces what it read so far with it.
    Snapshot(Vec<E>),
}

/// [`Entry`] as written, without copying the events.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum EntryRef<'a, E> {
    Events(&'a [E]),
    Snapshot(&'a [E]),
}

/// Who holds an epoch (the `leader/{epoch}` object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Leader {
    pub epoch: u64,
    /// Free text: host, pid, pod name.
    pub holder: String,
}

/// The log as one leader holds it.
#[derive(Debug)]
pub struct OperationLog {
    store: ObjectStore,
    epoch: u64,
    next_seq: u64,
    /// Entries after the newest snapshot: what a replay reads now.
    since_snapshot: u64,
    /// This epoch's entries below this one are covered by a snapshot and handed to a
    /// [`Compaction`] to delete.
    covered_from: u64,
    /// Older epochs whose entries, but their seals, the next compaction deletes.
    older: Vec<u64>,
}

/// What [`OperationLog::acquire`] found: the events of every earlier epoch, in order.
#[derive(Debug)]
pub struct Replayed<E> {
    /// The events of the snapshot replay started from, then those appended after it.
    pub events: Vec<E>,
    /// The epochs read, oldest first (from the snapshot's on).
    pub epochs: Vec<u64>,
    /// The snapshot entry the replay started from, `(epoch, seq)`; `None`: from the beginning.
    pub snapshot: Option<(u64, u64)>,
    /// Entries read after the last snapshot (objects a compaction would remove).
    pub entries: u64,
}

/// What a snapshot covers, to delete: [`OperationLog::compact`] returns it, [`Compaction::run`]
/// deletes it, outside whatever serializes the log's appends. The log replays the same with or
/// without these objects: one left behind (the run failed, the process died) is only space, and the
/// next leader's compaction deletes what is left of the epochs before its own.
#[derive(Debug)]
#[must_use = "the objects the snapshot covers stay until `run` deletes them"]
pub struct Compaction {
    store: ObjectStore,
    at: Position,
    /// This epoch's entries the snapshot covers.
    own: Vec<String>,
    /// Older epochs, whose entries but their seals the snapshot covers.
    older: Vec<u64>,
}

impl Compaction {
    /// The snapshot entry, `(epoch, seq)`.
    pub fn snapshot(&self) -> (u64, u64) {
        self.at
    }

    /// Deletes what the snapshot covers: its leader's earlier entries, every entry of the older
    /// epochs but the seal at its end (a zombie leader of that epoch must still be refused there),
    /// and the names of older snapshots. Returns how many objects it deleted. Deleting twice, or
    /// after another compaction deleted the same, is harmless.
    pub async fn run(self) -> Result<usize> {
        let mut deleted = 0;
        for epoch in &self.older {
            let dir = format!("oplog/{}", name(*epoch));
            let mut seqs: Vec<u64> = self
                .store
                .list(&dir)
                .await?
                .iter()
                .filter_map(|n| parse(n))
                .collect();
            seqs.sort_unstable();
            // The last entry of an older epoch is its seal (nothing is created after a seal).
            seqs.pop();
            let paths: Vec<String> = seqs.iter().map(|s| format!("{dir}/{}", name(*s))).collect();
            self.store.delete_many(&paths).await?;
            deleted += paths.len();
        }
        self.store.delete_many(&self.own).await?;
        deleted += self.own.len();
        let stale: Vec<String> = self
            .store
            .list("snapshot")
            .await?
            .iter()
            .filter(|n| parse_snapshot(n).is_some_and(|at| at < self.at))
            .map(|n| format!("snapshot/{n}"))
            .collect();
        self.store.delete_many(&stale).await?;
        deleted += stale.len();
        tracing::debug!(
            epoch = self.at.0,
            seq = self.at.1,
            deleted,
            "deleted the operation log entries a snapshot covers"
        );
        Ok(deleted)
    }
}

impl OperationLog {
    /// Takes the next leader epoch on `store` (a job's prefix), seals every earlier epoch and replays
    /// them from the newest snapshot. Fails with [`Error::LostElection`] when another JobManager took
    /// the epoch first.
    pub async fn acquire<E: DeserializeOwned + Serialize>(
        store: ObjectStore,
        holder: &str,
    ) -> Result<(OperationLog, Replayed<E>)> {
        let epochs: Vec<u64> = store
            .list("leader")
            .await?
            .iter()
            .filter_map(|n| parse(n))
            .collect();
        let epoch = epochs.iter().max().copied().unwrap_or(0) + 1;
        let leader = Leader {
            epoch,
            holder: holder.to_string(),
        };
        let body = serde_json::to_vec(&leader).unwrap_or_default();
        let path = format!("leader/{}", name(epoch));
        match store.create(&path, envelope::seal(&body)).await {
            Ok(()) => {}
            Err(floe_storage::Error::AlreadyExists { url }) => {
                return Err(Error::LostElection { epoch, url });
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(epoch, %holder, url = %store.url(), "took leadership");
        // Every earlier epoch is sealed, also one that never wrote (its leader may still be alive and
        // about to): the seal takes its first sequence number.
        let mut logged: Vec<u64> = store
            .list("oplog")
            .await?
            .iter()
            .filter_map(|n| parse(n))
            .collect();
        for older in epochs.iter().copied().filter(|e| *e < epoch) {
            if !logged.contains(&older) {
                logged.push(older);
            }
        }
        logged.sort_unstable();
        logged.retain(|e| *e < epoch);
        let replayed = loop {
            let from = Self::newest_snapshot(&store).await?;
            if let Some(at) = from
                && at.0 >= epoch
            {
                // A newer leader took over and compacted meanwhile.
                return Err(Error::Fenced {
                    epoch,
                    url: store.url_of(&snapshot_name(at)),
                });
            }
            if let Some(replayed) = Self::replay(&store, &logged, epoch, from).await? {
                break replayed;
            }
            tracing::info!("the log was compacted while it was replayed: replaying from the new snapshot");
        };
        Ok((
            OperationLog {
                store,
                epoch,
                next_seq: 0,
                since_snapshot: replayed.entries,
                covered_from: 0,
                older: logged,
            },
            replayed,
        ))
    }

    /// The newest named snapshot entry.
    async fn newest_snapshot(store: &ObjectStore) -> Result<Option<Position>> {
        Ok(store
            .list("snapshot")
            .await?
            .iter()
            .filter_map(|n| parse_snapshot(n))
            .max())
    }

    /// Reads (and seals) the older epochs from the snapshot entry `from` on; the epochs before its own
    /// are covered by it, and were sealed by its leader. `None` when a newer snapshot was named
    /// meanwhile: entries after `from` may be gone, and the caller starts again from the new one.
    async fn replay<E: DeserializeOwned + Serialize>(
        store: &ObjectStore,
        older: &[u64],
        epoch: u64,
        from: Option<Position>,
    ) -> Result<Option<Replayed<E>>> {
        let mut replayed = Replayed {
            events: Vec::new(),
            epochs: Vec::new(),
            snapshot: from,
            entries: 0,
        };
        for &e in older {
            let start = match from {
                Some((at_epoch, _)) if e < at_epoch => continue,
                Some((at_epoch, seq)) if e == at_epoch => seq,
                _ => 0,
            };
            if !Self::seal_and_read(store, e, start, from, epoch, &mut replayed).await? {
                return Ok(None);
            }
            replayed.epochs.push(e);
        }
        Ok(Some(replayed))
    }

    /// Reads one older epoch from `start` up to its end, sealing it there if no newer epoch did.
    /// `false` when an entry is gone (deleted by a compaction that named a snapshot at or after
    /// it): never a seal in that hole, which its leader wrote past.
    async fn seal_and_read<E: DeserializeOwned + Serialize>(
        store: &ObjectStore,
        older: u64,
        start: u64,
        from: Option<Position>,
        epoch: u64,
        replayed: &mut Replayed<E>,
    ) -> Result<bool> {
        let dir = format!("oplog/{}", name(older));
        let mut seq = start;
        loop {
            let path = format!("{dir}/{}", name(seq));
            let at_snapshot = from == Some((older, seq));
            match store.get_opt(&path).await? {
                Some(bytes) => match Self::decode::<E>(store, &path, &bytes) {
                    Ok(Entry::Events(batch)) => {
                        replayed.events.extend(batch);
                        replayed.entries += 1;
                    }
                    Ok(Entry::Snapshot(events)) => {
                        replayed.events = events;
                        replayed.entries = 0;
                    }
                    Ok(Entry::Sealed { .. }) => return Ok(true),
                    // A named snapshot was written whole: its damage is never a torn tail.
                    Err(Error::Corrupt { url, reason }) if !at_snapshot => {
                        Self::torn_tail::<E>(store, &dir, seq, &url, &reason).await?;
                    }
                    Err(e) => return Err(e),
                },
                None => {
                    // Gone rather than never written when a snapshot at or after it was named
                    // (its leader wrote this far): the replay goes on from that snapshot. A
                    // replay that restarted at every newer snapshot instead could chase a leader
                    // appending as fast as it reads for ever.
                    let newest = Self::newest_snapshot(store).await?;
                    if at_snapshot && newest <= from {
                        return Err(Error::Corrupt {
                            url: store.url_of(&path),
                            reason: format!(
                                "missing, but {} names it as the snapshot to replay from",
                                store.url_of(&snapshot_name((older, seq)))
                            ),
                        });
                    }
                    if newest >= Some((older, seq)) {
                        return Ok(false);
                    }
                    let seal: Entry<E> = Entry::Sealed { by_epoch: epoch };
                    let body = serde_json::to_vec(&seal).unwrap_or_default();
                    match store.create(&path, envelope::seal(&body)).await {
                        Ok(()) => {
                            tracing::info!(epoch = older, seq, "sealed the log of an older epoch");
                            return Ok(true);
                        }
                        // The older leader appended here just now: read it on the next turn.
                        Err(floe_storage::Error::AlreadyExists { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            seq += 1;
        }
    }

    /// A damaged entry is tolerated only as the torn tail of an epoch: the last entry, written by a
    /// leader that died during the append (a file system write is not atomic), so that append never
    /// returned and nothing was done on it. It is re-read for a while first (a live leader may still
    /// be writing it); damage anywhere else is an error naming the object.
    async fn torn_tail<E: DeserializeOwned>(
        store: &ObjectStore,
        dir: &str,
        seq: u64,
        url: &str,
        reason: &str,
    ) -> Result<()> {
        let corrupt = || Error::Corrupt {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let next = format!("{dir}/{}", name(seq + 1));
        match store.get_opt(&next).await? {
            None => {}
            Some(bytes) => match Self::decode::<E>(store, &next, &bytes) {
                Ok(Entry::Sealed { .. }) => {}
                _ => return Err(corrupt()),
            },
        }
        let path = format!("{dir}/{}", name(seq));
        for _ in 0..10 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            if let Some(bytes) = store.get_opt(&path).await?
                && Self::decode::<E>(store, &path, &bytes).is_ok()
            {
                // Written whole meanwhile: the caller's next read of this epoch would see it, but the
                // sequence moved on; refuse rather than skip an event that was acted on.
                return Err(Error::Corrupt {
                    url: url.to_string(),
                    reason: "was being written while the log was replayed; start again".into(),
                });
            }
        }
        tracing::warn!(
            url,
            reason,
            "skipping the torn last entry of an older epoch (its append never returned)"
        );
        Ok(())
    }

    fn decode<E: DeserializeOwned>(store: &ObjectStore, path: &str, bytes: &Bytes) -> Result<Entry<E>> {
        let url = store.url_of(path);
        let payload = envelope::open(&url, bytes).map_err(|e| match e {
            floe_storage::Error::Corrupt { url, reason } => Error::Corrupt { url, reason },
            other => Error::Storage(other),
        })?;
        serde_json::from_slice(&payload).map_err(|e| Error::Corrupt {
            url,
            reason: format!("not an operation log entry: {e}"),
        })
    }

    /// This leader's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether a newer JobManager took leadership after this one: `leader/{epoch + 1}` exists
    /// (epochs are taken one after another, each the highest plus one). A leader asks now and
    /// then, so that one fenced while it had nothing to append (waiting for slots, say) stops
    /// as soon as one that appends would: Flink's revocation of leadership.
    pub async fn superseded(&self) -> Result<bool> {
        let next = format!("leader/{}", name(self.epoch + 1));
        Ok(self.store.get_opt(&next).await?.is_some())
    }

    /// Entries appended (or replayed) after the newest snapshot: what a JobManager taking over
    /// would read now. A leader compacts when it grows past a bound.
    pub fn appends_since_snapshot(&self) -> u64 {
        self.since_snapshot
    }

    /// Appends a batch of events, before the JobManager acts on them. [`Error::Fenced`] when a newer
    /// JobManager has sealed this epoch: the caller must stop.
    pub async fn append<E: Serialize>(&mut self, events: &[E]) -> Result<()> {
        let body = serde_json::to_vec(&EntryRef::Events(events)).unwrap_or_default();
        self.write(&body).await?;
        self.since_snapshot += 1;
        Ok(())
    }

    /// Appends a snapshot: `snapshot` stands for every event replayed and appended so far (a
    /// replay from it yields `snapshot`, then the events appended after it). Written at the next
    /// sequence number like an append, and refused like one ([`Error::Fenced`]) once a newer
    /// JobManager sealed this epoch; then named in `snapshot/`, where replays start. Returns what
    /// the snapshot covers, for [`Compaction::run`] to delete: the caller may do that later, or on
    /// another task, and append meanwhile.
    pub async fn compact<E: Serialize>(&mut self, snapshot: &[E]) -> Result<Compaction> {
        let body = serde_json::to_vec(&EntryRef::Snapshot(snapshot)).unwrap_or_default();
        let seq = self.write(&body).await?;
        self.since_snapshot = 0;
        let at = (self.epoch, seq);
        let named = format!("{{\"epoch\":{},\"seq\":{seq}}}", self.epoch);
        match self
            .store
            .create(&snapshot_name(at), envelope::seal(named.as_bytes()))
            .await
        {
            // Created by an earlier try whose answer was lost.
            Ok(()) | Err(floe_storage::Error::AlreadyExists { .. }) => {}
            // Not named: replays pass over the snapshot entry on their way (which is right), and
            // what it covers stays until the next compaction.
            Err(e) => return Err(e.into()),
        }
        let own = (self.covered_from..seq)
            .map(|s| format!("oplog/{}/{}", name(self.epoch), name(s)))
            .collect();
        self.covered_from = seq;
        tracing::info!(
            epoch = self.epoch,
            seq,
            events = snapshot.len(),
            "compacted the operation log"
        );
        Ok(Compaction {
            store: self.store.clone(),
            at,
            own,
            older: std::mem::take(&mut self.older),
        })
    }

    /// Creates this epoch's next entry; returns its sequence number.
    async fn write(&mut self, body: &[u8]) -> Result<u64> {
        let seq = self.next_seq;
        let path = format!("oplog/{}/{}", name(self.epoch), name(seq));
        let entry = envelope::seal(body);
        let outcome = match self.store.create(&path, entry.clone()).await {
            Ok(()) => Ok(()),
            // A store may apply a write and lose its answer: whether this append took effect is
            // read back, after a refusal (an earlier try of this very append may have written it)
            // and after a transient failure alike. The entry holds exactly these bytes if it did;
            // anything else there is a newer JobManager's seal.
            Err(e) if matches!(e, floe_storage::Error::AlreadyExists { .. }) || e.is_retryable() => {
                let refused = matches!(e, floe_storage::Error::AlreadyExists { .. });
                let fenced = || Error::Fenced {
                    epoch: self.epoch,
                    url: self.store.url_of(&path),
                };
                match self.store.get_opt(&path).await {
                    Ok(Some(found)) if found == entry => Ok(()),
                    Ok(Some(_)) => Err(fenced()),
                    Ok(None) if refused => Err(fenced()),
                    Err(read) if refused => Err(read.into()),
                    // Not written (or unknown yet): the caller tries again at the same number.
                    Ok(None) | Err(_) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        };
        outcome?;
        self.next_seq += 1;
        Ok(seq)
    }
}
