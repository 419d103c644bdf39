//! A TaskManager's managed memory (Flink's `taskmanager.memory.managed.*`): the budget its RocksDB
//! instances share (`floe_state_rocksdb::SharedMemory`), so that many stateful operators in one
//! TaskManager stay within its memory however large their state grows.
//!
//! The budget, as Flink's: `taskmanager.memory.managed.size` when set; otherwise
//! `taskmanager.memory.managed.fraction` (0.4) of the process size, which is
//! `taskmanager.memory.process.size` when set and otherwise the container's memory limit (its
//! cgroup's, as a pod with `resources.limits.memory` has). A process with neither (a TaskManager
//! `floe run` starts on a workstation) has no budget and RocksDB's per-instance defaults, as
//! before. `state.backend.rocksdb.memory.managed: false` turns the budget off (Flink's switch).

use std::collections::BTreeMap;

pub const MANAGED_SIZE_KEY: &str = "taskmanager.memory.managed.size";
pub const MANAGED_FRACTION_KEY: &str = "taskmanager.memory.managed.fraction";
pub const PROCESS_SIZE_KEY: &str = "taskmanager.memory.process.size";
pub const ROCKSDB_MANAGED_KEY: &str = "state.backend.rocksdb.memory.managed";
/// Flink's default share of the process for managed memory.
pub const DEFAULT_MANAGED_FRACTION: f64 = 0.4;

/// The managed memory budget in bytes that `properties` give (with `container_limit`, the
/// process's memory limit, if it has one); `None`: no budget. Errors name the key and what it
/// expected.
pub fn managed_memory(
    properties: &BTreeMap<String, String>,
    container_limit: Option<u64>,
) -> Result<Option<u64>, String> {
    let size = |key: &str| -> Result<Option<u64>, String> {
        properties
            .get(key)
            .map(|v| {
                floe_datastream::parse_memory_size(key, v)
                    .map(|b| b as u64)
                    .map_err(|e| e.to_string())
            })
            .transpose()
    };
    if let Some(v) = properties.get(ROCKSDB_MANAGED_KEY) {
        match v.trim() {
            "true" => {}
            "false" => return Ok(None),
            _ => {
                return Err(format!(
                    "{ROCKSDB_MANAGED_KEY}: expected true or false, got {v:?}"
                ));
            }
        }
    }
    if let Some(bytes) = size(MANAGED_SIZE_KEY)? {
        return Ok(Some(bytes));
    }
    let fraction = match properties.get(MANAGED_FRACTION_KEY) {
        None => DEFAULT_MANAGED_FRACTION,
        Some(v) => match v.trim().parse::<f64>() {
            Ok(f) if f > 0.0 && f < 1.0 => f,
            _ => {
                return Err(format!(
                    "{MANAGED_FRACTION_KEY}: expected a fraction between 0 and 1, got {v:?}"
                ));
            }
        },
    };
    let process = size(PROCESS_SIZE_KEY)?.or(container_limit);
    Ok(process.map(|p| (p as f64 * fraction) as u64))
}

/// This process's memory limit from its cgroup (v2 `memory.max`, or v1 `memory.limit_in_bytes`),
/// if it has one.
pub fn container_memory_limit() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .and_then(|v| v.trim().parse::<u64>().ok())
    // cgroup v1 says "no limit" with a number near 2^63.
    .filter(|&bytes| bytes < 1 << 60)
}

/// The budget the TaskManager's RocksDB instances share.
#[cfg(feature = "rocksdb")]
pub(crate) use floe_state_rocksdb::SharedMemory as StateMemory;

/// Without RocksDB nothing is charged to the budget; it is still reported.
#[cfg(not(feature = "rocksdb"))]
#[derive(Debug, Clone)]
pub(crate) struct StateMemory(u64);

#[cfg(not(feature = "rocksdb"))]
impl StateMemory {
    pub(crate) fn new(bytes: u64) -> Self {
        StateMemory(bytes)
    }

    pub(crate) fn budget(&self) -> u64 {
        self.0
    }

    pub(crate) fn used(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_budget_is_the_size_or_a_fraction_of_the_process_or_its_container() {
        const MIB: u64 = 1 << 20;
        let gib = 1024 * MIB;
        assert_eq!(
            managed_memory(&props(&[(MANAGED_SIZE_KEY, "300mb")]), Some(gib)),
            Ok(Some(300 * MIB))
        );
        assert_eq!(
            managed_memory(&props(&[(PROCESS_SIZE_KEY, "1g")]), Some(4 * gib)),
            Ok(Some((gib as f64 * 0.4) as u64)),
            "the configured process size before the container's limit"
        );
        assert_eq!(
            managed_memory(&props(&[(MANAGED_FRACTION_KEY, "0.25")]), Some(2 * gib)),
            Ok(Some(512 * MIB))
        );
        assert_eq!(
            managed_memory(&props(&[]), None),
            Ok(None),
            "nothing bounds a process without a limit"
        );
        assert_eq!(
            managed_memory(
                &props(&[(ROCKSDB_MANAGED_KEY, "false"), (MANAGED_SIZE_KEY, "1g")]),
                Some(gib)
            ),
            Ok(None)
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        for (key, value, says) in [
            (MANAGED_SIZE_KEY, "lots", MANAGED_SIZE_KEY),
            (MANAGED_FRACTION_KEY, "1.5", "expected a fraction between 0 and 1"),
            (PROCESS_SIZE_KEY, "12 parsecs", PROCESS_SIZE_KEY),
            (ROCKSDB_MANAGED_KEY, "yes", "expected true or false"),
        ] {
            let e = managed_memory(&props(&[(key, value)]), None).unwrap_err();
            assert!(e.contains(key) && e.contains(says), "{key}={value}: {e}");
        }
    }
}
