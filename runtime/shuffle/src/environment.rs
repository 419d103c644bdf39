//! One TaskManager's shuffle: the registry of partitions it produces, the channels to peers it reads
//! from, and the memory both hold. Writers, gates and the gRPC service all share it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::transport::Channel;

use crate::gate::RemoteInputGate;
use crate::memory::MemoryCounter;
use crate::partition::{BlockingPartition, Partition, PipelinedPartition, blocking_paths, lock};
use crate::server::ShuffleService;
use crate::{
    Error, InputChannelSpec, InputGate, PartitionKind, PartitionWriter, Result, ResultPartitionId,
    ShuffleConfig,
};
use floe_proto::v1::shuffle_server::ShuffleServer;

/// State shared by an environment's clones, writers, gates and service.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: ShuffleConfig,
    pub(crate) memory: Arc<MemoryCounter>,
    pub(crate) partitions: Mutex<HashMap<ResultPartitionId, Partition>>,
    /// One HTTP/2 connection per peer TaskManager, multiplexing all streams to it.
    pub(crate) channels: Mutex<HashMap<String, Channel>>,
    /// The address this TaskManager serves the Shuffle service on, once known: channels from it are
    /// read in process (same credits, no gRPC hop).
    pub(crate) local_address: Mutex<Option<String>>,
    /// The runtime the environment was created on (the TaskManager's process runtime): gates run
    /// their network and object-storage streams there, so connections to peers outlive any one
    /// task, whose own thread and runtime end with it; so do local blocking partitions' streams,
    /// whose file reads then overlap the task's work. Local pipelined streams run where the gate is
    /// read. `None` outside a runtime: every stream goes where the gate is read.
    pub(crate) io: Option<tokio::runtime::Handle>,
}

impl Shared {
    /// Whether `id` is a blocking partition registered here (a pipelined one, or one not
    /// registered yet, which only a pipelined consumer may ask for, is not).
    pub(crate) fn is_blocking(&self, id: &ResultPartitionId) -> bool {
        matches!(lock(&self.partitions).get(id), Some(Partition::Blocking(_)))
    }
}

/// The shuffle of one TaskManager: creates [`PartitionWriter`]s and [`InputGate`]s for its tasks and
/// serves its partitions to other TaskManagers through [`ShuffleEnvironment::service`]. Cloning is
/// cheap and shares everything.
#[derive(Debug, Clone)]
pub struct ShuffleEnvironment {
    shared: Arc<Shared>,
}

fn check_job_id(job_id: &str) -> Result<()> {
    if job_id.is_empty() || job_id.contains(['/', '\\']) || job_id == "." || job_id.contains("..") {
        return Err(Error::InvalidJobId(job_id.to_owned()));
    }
    Ok(())
}

impl ShuffleEnvironment {
    /// Creates the data directory for blocking partitions.
    pub fn new(config: ShuffleConfig) -> Result<Self> {
        std::fs::create_dir_all(&config.data_dir).map_err(|e| Error::io(&config.data_dir, e))?;
        Ok(ShuffleEnvironment {
            shared: Arc::new(Shared {
                config,
                memory: Arc::new(MemoryCounter::default()),
                partitions: Mutex::new(HashMap::new()),
                channels: Mutex::new(HashMap::new()),
                local_address: Mutex::new(None),
                io: tokio::runtime::Handle::try_current().ok(),
            }),
        })
    }

    pub fn config(&self) -> &ShuffleConfig {
        &self.shared.config
    }

    /// Registers partition `id` on this TaskManager (consumers can open it from now on) and returns
    /// its writer. A partition id is written once: a restarted producer has a new attempt number.
    pub fn create_writer(
        &self,
        id: ResultPartitionId,
        num_subpartitions: u32,
        kind: PartitionKind,
    ) -> Result<Box<dyn PartitionWriter>> {
        check_job_id(&id.job_id)?;
        let shared = &self.shared;
        if lock(&shared.partitions).contains_key(&id) {
            return Err(Error::PartitionExists(id.to_string()));
        }
        // The file is created outside the registry lock; a racing duplicate is caught below.
        let (partition, writer): (Partition, Box<dyn PartitionWriter>) = match kind {
            PartitionKind::Pipelined => {
                let (partition, writer) =
                    PipelinedPartition::create(&id, num_subpartitions, &shared.config, shared.memory.clone());
                (Partition::Pipelined(partition), Box::new(writer))
            }
            PartitionKind::Blocking => {
                let (partition, writer) = BlockingPartition::create(&id, num_subpartitions, &shared.config)?;
                (Partition::Blocking(partition), Box::new(writer))
            }
            // Needs object storage: `create_remote_writer`.
            PartitionKind::Remote => return Err(Error::NoStorage(id.to_string())),
        };
        let mut partitions = lock(&shared.partitions);
        if partitions.contains_key(&id) {
            return Err(Error::PartitionExists(id.to_string()));
        }
        partitions.insert(id, partition);
        Ok(writer)
    }

    /// A gate over `channels`, merged in arrival order. Connects when first polled.
    pub fn create_input_gate(&self, channels: Vec<InputChannelSpec>) -> Box<dyn InputGate> {
        self.create_input_gate_with_storage(channels, None)
    }

    /// [`ShuffleEnvironment::create_input_gate`] whose channels may also name remote partitions
    /// ([`crate::OBJECT_STORAGE_ADDRESS`]), read from `storage` (the job's `shuffle/` prefix).
    pub fn create_input_gate_with_storage(
        &self,
        channels: Vec<InputChannelSpec>,
        storage: Option<floe_storage::ObjectStore>,
    ) -> Box<dyn InputGate> {
        Box::new(RemoteInputGate::new(self.shared.clone(), channels, storage))
    }

    /// A writer for a remote partition: written to local disk like a blocking one, uploaded to
    /// `storage` (the job's `shuffle/` prefix) when finished. It is not served by this TaskManager.
    pub fn create_remote_writer(
        &self,
        id: ResultPartitionId,
        num_subpartitions: u32,
        storage: floe_storage::ObjectStore,
    ) -> Result<Box<dyn PartitionWriter>> {
        check_job_id(&id.job_id)?;
        let (partition, local) = BlockingPartition::create(&id, num_subpartitions, &self.shared.config)?;
        Ok(Box::new(crate::remote::RemoteWriter {
            id,
            local,
            partition,
            store: storage,
            num_subpartitions,
        }))
    }

    /// The `Shuffle` gRPC service serving this TaskManager's partitions; add it to the TaskManager's
    /// tonic server.
    pub fn service(&self) -> ShuffleServer<ShuffleService> {
        ShuffleServer::new(ShuffleService::new(self.shared.clone()))
    }

    /// Drops all partitions of `job_id` (freeing their memory, failing their writers and readers)
    /// and deletes its blocking partitions' files. Idempotent; a file that cannot be deleted is
    /// logged, not returned, as there is nothing the caller could do about it.
    pub fn release_job(&self, job_id: &str) {
        let released: Vec<Partition> = {
            let mut partitions = lock(&self.shared.partitions);
            let ids: Vec<ResultPartitionId> = partitions
                .keys()
                .filter(|id| id.job_id == job_id)
                .cloned()
                .collect();
            ids.iter().filter_map(|id| partitions.remove(id)).collect()
        };
        for partition in &released {
            partition.release();
        }
        if check_job_id(job_id).is_err() {
            // Such a job never had files (create_writer refused it); never remove outside data_dir.
            return;
        }
        let dir = self.shared.config.data_dir.join(job_id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(error = %Error::io(&dir, e), "could not delete released partitions"),
        }
    }

    /// The finished blocking partitions this TaskManager holds, with their sizes: what it tells a new
    /// JobManager when it registers, so that their producers need not run again.
    pub fn finished_partitions(&self) -> Vec<(ResultPartitionId, crate::PartitionStats)> {
        let mut held: Vec<_> = lock(&self.shared.partitions)
            .iter()
            .filter_map(|(id, p)| match p {
                Partition::Blocking(b) => b.finished_stats().map(|s| (id.clone(), s)),
                Partition::Pipelined(_) => None,
            })
            .collect();
        held.sort_by(|a, b| a.0.cmp(&b.0));
        held
    }

    /// Drops what the tasks of a JobManager that is gone were producing (pipelined partitions and
    /// unfinished blocking ones) and keeps the finished blocking partitions for its successor.
    pub fn release_unfinished(&self) {
        let released: Vec<Partition> = {
            let mut partitions = lock(&self.shared.partitions);
            let ids: Vec<ResultPartitionId> = partitions
                .iter()
                .filter(|(_, p)| !matches!(p, Partition::Blocking(b) if b.finished_stats().is_some()))
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| partitions.remove(id)).collect()
        };
        for partition in &released {
            partition.release();
        }
    }

    /// Where a blocking partition's data and index files are (whether or not they exist).
    pub fn blocking_files(&self, id: &ResultPartitionId) -> (std::path::PathBuf, std::path::PathBuf) {
        blocking_paths(&self.shared.config.data_dir, id)
    }

    /// Bytes held right now in pipelined producer queues and in consumer-side buffers received but
    /// not yet handed to a task. See [`ShuffleConfig`] for the bound.
    /// Tells the environment the host:port its [`ShuffleEnvironment::service`] is reachable at, so
    /// gates read partitions of this TaskManager in process rather than over loopback gRPC.
    pub fn set_local_address(&self, address: &str) {
        *lock(&self.shared.local_address) = Some(address.to_string());
    }

    pub fn buffered_bytes(&self) -> u64 {
        self.shared.memory.current()
    }

    /// The most [`Self::buffered_bytes`] was since this environment was created.
    pub fn peak_buffered_bytes(&self) -> u64 {
        self.shared.memory.peak()
    }
}
