//! The JobManager's operation log in object storage, and the leader epochs that fence it (DESIGN.md
//! "Object storage layout and JobManager failover"). Read [`OperationLog::acquire`] first.
//!
//! Layout under a job's prefix (`{storage.url}/{namespace}/{job-name}/`):
//!
//! ```text
//! leader/{epoch}          one object per epoch, created once (conditional create): who leads
//! oplog/{epoch}/{seq}     one object per appended batch of events, created once
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

/// One log object: a batch of events, or the seal a newer epoch put at the end of an older one.
#[derive(Debug, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Entry<E> {
    Events(Vec<E>),
    Sealed { by_epoch: u64 },
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
}

/// What [`OperationLog::acquire`] found: the events of every earlier epoch, in order.
#[derive(Debug)]
pub struct Replayed<E> {
    pub events: Vec<E>,
    /// The epochs read, oldest first.
    pub epochs: Vec<u64>,
}

impl OperationLog {
    /// Takes the next leader epoch on `store` (a job's prefix), seals every earlier epoch and replays
    /// them. Fails with [`Error::LostElection`] when another JobManager took the epoch first.
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
        let mut replayed = Replayed {
            events: Vec::new(),
            epochs: Vec::new(),
        };
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
        for older in logged.into_iter().filter(|e| *e < epoch) {
            Self::seal_and_read(&store, older, epoch, &mut replayed.events).await?;
            replayed.epochs.push(older);
        }
        Ok((
            OperationLog {
                store,
                epoch,
                next_seq: 0,
            },
            replayed,
        ))
    }

    /// Reads one older epoch up to its end, sealing it there if no newer epoch did.
    async fn seal_and_read<E: DeserializeOwned + Serialize>(
        store: &ObjectStore,
        older: u64,
        epoch: u64,
        events: &mut Vec<E>,
    ) -> Result<()> {
        let dir = format!("oplog/{}", name(older));
        let mut seq = 0u64;
        loop {
            let path = format!("{dir}/{}", name(seq));
            match store.get_opt(&path).await? {
                Some(bytes) => match Self::decode::<E>(store, &path, &bytes) {
                    Ok(Entry::Events(batch)) => events.extend(batch),
                    Ok(Entry::Sealed { .. }) => return Ok(()),
                    Err(Error::Corrupt { url, reason }) => {
                        Self::torn_tail::<E>(store, &dir, seq, &url, &reason).await?;
                    }
                    Err(e) => return Err(e),
                },
                None => {
                    let seal: Entry<E> = Entry::Sealed { by_epoch: epoch };
                    let body = serde_json::to_vec(&seal).unwrap_or_default();
                    match store.create(&path, envelope::seal(&body)).await {
                        Ok(()) => {
                            tracing::info!(epoch = older, seq, "sealed the log of an older epoch");
                            return Ok(());
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

    /// Appends a batch of events, before the JobManager acts on them. [`Error::Fenced`] when a newer
    /// JobManager has sealed this epoch: the caller must stop.
    pub async fn append<E: Serialize>(&mut self, events: &[E]) -> Result<()> {
        #[derive(Serialize)]
        #[serde(rename_all = "snake_case")]
        enum EntryRef<'a, E> {
            Events(&'a [E]),
        }
        let body = serde_json::to_vec(&EntryRef::Events(events)).unwrap_or_default();
        let path = format!("oplog/{}/{}", name(self.epoch), name(self.next_seq));
        let entry = envelope::seal(&body);
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
        if outcome.is_ok() {
            self.next_seq += 1;
        }
        outcome
    }
}
