//! Memory the RocksDB instances of a TaskManager share: Flink's managed memory for RocksDB
//! (`state.backend.rocksdb.memory.managed`). Every instance's block cache, index and filter
//! blocks and memtables are charged to one LRU cache of a fixed budget: the memtables through a
//! write buffer manager that reserves their memory in that cache. Without it each instance takes
//! RocksDB's own defaults (its own block cache, up to two 64 MiB memtables and unbounded index
//! and filter blocks), so a TaskManager running twenty stateful operators needs gigabytes before
//! its state grows at all, and a large state's index blocks grow with it.
//!
//! Flink bounds RocksDB per slot; a Floe TaskManager bounds all its instances together (its tasks
//! are not pinned to slots), which is the same bound for the process, and lets one busy operator
//! use what idle ones leave.

use rocksdb::{BlockBasedOptions, Cache, Options, WriteBufferManager};

/// The share of the budget memtables may take (Flink's
/// `state.backend.rocksdb.memory.write-buffer-ratio` default).
pub const WRITE_BUFFER_RATIO: f64 = 0.5;

/// One memory budget for the RocksDB instances that open with it.
#[derive(Clone)]
pub struct SharedMemory {
    cache: Cache,
    write_buffers: WriteBufferManager,
    budget: u64,
    /// Each instance's memtable size: a quarter of the write buffer manager's (1 to 64 MiB).
    memtable_bytes: usize,
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("budget", &self.budget)
            .field("used", &self.used())
            .finish()
    }
}

impl SharedMemory {
    /// A budget of `bytes` (at least 1 MiB). Sized as Flink sizes it: the cache holds
    /// `(3 - r) / 3` of the budget and the write buffer manager `2r / 3` of it (`r` =
    /// [`WRITE_BUFFER_RATIO`]), since RocksDB lets the memtables overshoot their manager's size by
    /// half before it flushes; so blocks and memtables together stay within the budget.
    pub fn new(bytes: u64) -> Self {
        let budget = bytes.max(1 << 20);
        let cache_bytes = (budget as f64 * (3.0 - WRITE_BUFFER_RATIO) / 3.0) as usize;
        let buffer_bytes = (budget as f64 * 2.0 * WRITE_BUFFER_RATIO / 3.0) as usize;
        let cache = Cache::new_lru_cache(cache_bytes);
        let write_buffers =
            WriteBufferManager::new_write_buffer_manager_with_cache(buffer_bytes, false, cache.clone());
        SharedMemory {
            cache,
            write_buffers,
            budget,
            memtable_bytes: (buffer_bytes / 4).clamp(1 << 20, 64 << 20),
        }
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes charged now: cached blocks and the memtables' reservations.
    pub fn used(&self) -> u64 {
        self.cache.get_usage() as u64
    }

    /// Bytes of memtables now (part of [`SharedMemory::used`]).
    pub fn memtables(&self) -> u64 {
        self.write_buffers.get_usage() as u64
    }

    /// Makes a database opened with `opts` charge its blocks and memtables to this budget.
    pub(crate) fn apply(&self, opts: &mut Options) {
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&self.cache);
        // Index and filter blocks count too (as in Flink): they grow with the state.
        table.set_cache_index_and_filter_blocks(true);
        table.set_cache_index_and_filter_blocks_with_high_priority(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        opts.set_block_based_table_factory(&table);
        opts.set_write_buffer_manager(&self.write_buffers);
        // A memtable's arena grows in blocks of an eighth of its size, each charged whole: at
        // RocksDB's default 64 MiB, one 8 MiB block per instance exceeds a small budget before a
        // flush can help (Flink warns of the same, "RocksDB will flush memtable constantly").
        opts.set_write_buffer_size(self.memtable_bytes);
    }
}
