//! JobManager side of the shuffle: pure bookkeeping of where partitions live, whether they can still
//! be read, and how big they are. No I/O, no clocks, so the scheduler's failover and adaptive
//! parallelism decisions built on it are plain functions of events.

use std::collections::{BTreeMap, BTreeSet};

use crate::{PartitionKind, PartitionStats, ResultPartitionId};

/// Registers result partitions, says where their data lives and whether it is still there, releases
/// them when their job ends.
///
/// Invariants:
/// - a partition is *available* (consumers scheduled later can read it) iff it is blocking, its
///   producer finished it (`mark_finished`), and the TaskManager holding it was not lost since;
///   pipelined partitions are never available that way: they are read while produced, once;
/// - after `taskmanager_lost(tm)`, no partition hosted on `tm` has a location or is available again
///   (a re-run producer registers a new attempt, which is a new id), except finished remote
///   partitions, which live in object storage;
/// - after `release_job(job)`, nothing of `job` is known; the returned addresses are the live
///   TaskManagers that still hold its data and must be told to release it;
/// - every method is idempotent and ignores ids it does not know.
pub trait ShuffleMaster: Send + std::fmt::Debug {
    /// Records that `producer_taskmanager`, serving at `address` (host:port), produces `id`.
    fn register_partition(
        &mut self,
        id: ResultPartitionId,
        producer_taskmanager: String,
        address: String,
        kind: PartitionKind,
    );
    /// Where consumers read `id` from (host:port); `None` if unknown or its TaskManager was lost.
    fn location(&self, id: &ResultPartitionId) -> Option<&str>;
    /// The producer finished `id`, holding `stats`.
    fn mark_finished(&mut self, id: &ResultPartitionId, stats: PartitionStats);
    /// Whether `id` is a finished blocking partition whose TaskManager is still there.
    fn is_available(&self, id: &ResultPartitionId) -> bool;
    /// `tm` is gone: returns every partition it hosted that was not already lost, sorted (the
    /// finished blocking ones among them must be produced again if still needed).
    fn taskmanager_lost(&mut self, tm: &str) -> Vec<ResultPartitionId>;
    /// A consumer could not read `id` (its data is gone though its TaskManager may live on): it is
    /// not available again, so failover produces it anew. Returns whether it was available.
    fn partition_lost(&mut self, id: &ResultPartitionId) -> bool;
    /// Forgets `job_id`'s partitions; returns the addresses (sorted, distinct) of the live
    /// TaskManagers to tell to release them.
    fn release_job(&mut self, job_id: &str) -> Vec<String>;
    /// What a finished partition holds (kept after its TaskManager is lost: decisions made on it
    /// stay explainable).
    fn stats(&self, id: &ResultPartitionId) -> Option<&PartitionStats>;
}

#[derive(Debug, Clone)]
struct PartitionInfo {
    taskmanager: String,
    address: String,
    kind: PartitionKind,
    stats: Option<PartitionStats>,
    lost: bool,
}

/// The [`ShuffleMaster`] for partitions held by TaskManagers (pipelined in memory, blocking on their
/// local disk): a partition lives exactly as long as its TaskManager.
#[derive(Debug, Clone, Default)]
pub struct TaskManagerShuffleMaster {
    partitions: BTreeMap<ResultPartitionId, PartitionInfo>,
}

impl TaskManagerShuffleMaster {
    pub fn new() -> Self {
        Self::default()
    }
}

impl ShuffleMaster for TaskManagerShuffleMaster {
    fn register_partition(
        &mut self,
        id: ResultPartitionId,
        producer_taskmanager: String,
        address: String,
        kind: PartitionKind,
    ) {
        let info = PartitionInfo {
            taskmanager: producer_taskmanager,
            address,
            kind,
            stats: None,
            lost: false,
        };
        self.partitions.insert(id, info);
    }

    fn location(&self, id: &ResultPartitionId) -> Option<&str> {
        self.partitions
            .get(id)
            .filter(|p| !p.lost)
            .map(|p| p.address.as_str())
    }

    fn mark_finished(&mut self, id: &ResultPartitionId, stats: PartitionStats) {
        if let Some(info) = self.partitions.get_mut(id) {
            info.stats = Some(stats);
        }
    }

    fn is_available(&self, id: &ResultPartitionId) -> bool {
        self.partitions
            .get(id)
            .is_some_and(|p| p.kind != PartitionKind::Pipelined && p.stats.is_some() && !p.lost)
    }

    fn taskmanager_lost(&mut self, tm: &str) -> Vec<ResultPartitionId> {
        let mut lost = Vec::new();
        for (id, info) in &mut self.partitions {
            // A finished remote partition lives in object storage, not on the TaskManager.
            let outlives = info.kind == PartitionKind::Remote && info.stats.is_some();
            if info.taskmanager == tm && !info.lost && !outlives {
                info.lost = true;
                lost.push(id.clone());
            }
        }
        lost
    }

    fn partition_lost(&mut self, id: &ResultPartitionId) -> bool {
        match self.partitions.get_mut(id) {
            Some(info) if !info.lost => {
                info.lost = true;
                true
            }
            _ => false,
        }
    }

    fn release_job(&mut self, job_id: &str) -> Vec<String> {
        let mut addresses = BTreeSet::new();
        self.partitions.retain(|id, info| {
            if id.job_id != job_id {
                return true;
            }
            if !info.lost && info.kind != PartitionKind::Remote {
                addresses.insert(info.address.clone());
            }
            false
        });
        addresses.into_iter().collect()
    }

    fn stats(&self, id: &ResultPartitionId) -> Option<&PartitionStats> {
        self.partitions.get(id).and_then(|p| p.stats.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(job: &str, result: u32, partition: u32) -> ResultPartitionId {
        ResultPartitionId {
            job_id: job.into(),
            result,
            partition,
            attempt: 0,
        }
    }

    fn stats(bytes: &[u64]) -> PartitionStats {
        PartitionStats {
            bytes_per_subpartition: bytes.to_vec(),
        }
    }

    #[test]
    fn blocking_partition_is_available_once_finished_until_its_taskmanager_is_lost() {
        let mut master = TaskManagerShuffleMaster::new();
        let (a, b) = (id("j", 1, 0), id("j", 1, 1));
        master.register_partition(
            a.clone(),
            "tm-1".into(),
            "10.0.0.1:6121".into(),
            PartitionKind::Blocking,
        );
        master.register_partition(
            b.clone(),
            "tm-2".into(),
            "10.0.0.2:6121".into(),
            PartitionKind::Blocking,
        );

        assert_eq!(master.location(&a), Some("10.0.0.1:6121"));
        assert!(!master.is_available(&a), "not finished yet");
        assert_eq!(master.stats(&a), None);

        master.mark_finished(&a, stats(&[3, 4]));
        master.mark_finished(&b, stats(&[5, 6]));
        assert!(master.is_available(&a));
        assert_eq!(master.stats(&a), Some(&stats(&[3, 4])));

        assert_eq!(master.taskmanager_lost("tm-1"), vec![a.clone()]);
        assert!(!master.is_available(&a));
        assert_eq!(master.location(&a), None);
        assert!(master.is_available(&b), "other TaskManagers' partitions stay");
        assert_eq!(
            master.taskmanager_lost("tm-1"),
            Vec::<ResultPartitionId>::new(),
            "idempotent"
        );
        assert_eq!(master.stats(&a), Some(&stats(&[3, 4])), "stats outlive the data");
    }

    #[test]
    fn pipelined_partitions_are_never_available_for_later_consumers() {
        let mut master = TaskManagerShuffleMaster::new();
        let a = id("j", 1, 0);
        master.register_partition(a.clone(), "tm-1".into(), "h:1".into(), PartitionKind::Pipelined);
        master.mark_finished(&a, stats(&[1]));
        assert!(!master.is_available(&a));
        assert_eq!(master.location(&a), Some("h:1"));
        assert_eq!(master.stats(&a), Some(&stats(&[1])));
    }

    #[test]
    fn release_job_names_live_taskmanagers_once_and_forgets_only_that_job() {
        let mut master = TaskManagerShuffleMaster::new();
        let blocking = PartitionKind::Blocking;
        master.register_partition(id("j", 1, 0), "tm-1".into(), "h1:1".into(), blocking);
        master.register_partition(id("j", 1, 1), "tm-1".into(), "h1:1".into(), blocking);
        master.register_partition(id("j", 2, 0), "tm-2".into(), "h2:1".into(), blocking);
        master.register_partition(id("j", 2, 1), "tm-3".into(), "h3:1".into(), blocking);
        master.register_partition(id("other", 1, 0), "tm-1".into(), "h1:1".into(), blocking);
        master.mark_finished(&id("other", 1, 0), stats(&[1]));
        master.taskmanager_lost("tm-3");

        assert_eq!(
            master.release_job("j"),
            vec!["h1:1".to_owned(), "h2:1".to_owned()]
        );
        assert_eq!(master.location(&id("j", 1, 0)), None);
        assert_eq!(master.stats(&id("j", 1, 0)), None);
        assert!(master.is_available(&id("other", 1, 0)));
        assert_eq!(master.release_job("j"), Vec::<String>::new());
    }

    #[test]
    fn unknown_ids_are_ignored() {
        let mut master = TaskManagerShuffleMaster::new();
        master.mark_finished(&id("j", 9, 9), stats(&[1]));
        assert!(!master.is_available(&id("j", 9, 9)));
        assert_eq!(master.location(&id("j", 9, 9)), None);
    }
}
