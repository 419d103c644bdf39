//! Restoring a checkpoint into any parallelism (Flink's `StateAssignmentOperation`): the one
//! mechanism behind a restart, a rescale and a savepoint upgrade. Keyed state goes by key-group
//! ranges (a subtask takes every old snapshot whose key groups overlap its own, and its backend
//! keeps only its range); source splits and sink committer states, which belong to no key, are
//! dealt out round-robin (Flink's list state). At an unchanged parallelism every subtask gets
//! exactly its own snapshot back.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::TaskSnapshot;

/// What one subtask restores from a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SubtaskRestore {
    /// Snapshots holding keyed state of this subtask's key groups (the backend clips them).
    pub keyed: Vec<TaskSnapshot>,
    /// Source split positions to read on from.
    pub positions: Vec<String>,
    /// Sink committer states to take over (commit what they left pending).
    pub sinks: Vec<String>,
    /// Broadcast state: every subtask holds the same, so each new subtask takes old subtask
    /// `subtask mod old parallelism`'s copy (as Flink redistributes broadcast state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<String>,
    /// An async operator's records in flight to issue again: its own at an unchanged
    /// parallelism; after a rescale those of the old subtasks `i` with `i mod parallelism ==
    /// subtask` (list state, as sinks' committer states).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_flight: Vec<String>,
    /// Where `keyed`'s files are when not in the job storage: a savepoint's directory (URL).
    /// Such files are never the new job's own: its first checkpoint copies what it keeps
    /// (Flink's `NO_CLAIM` restore mode), so the savepoint stays whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

/// The restore of subtask `subtask` of `parallelism` from the snapshots of one vertex's old
/// subtasks (`old[i]` of old subtask i). `key_groups(p, i)` is subtask i-of-p's key-group range;
/// `positions(s)` the split positions one source snapshot holds (several after an earlier
/// rescale).
pub fn redistribute(
    old: &[&TaskSnapshot],
    parallelism: u32,
    subtask: u32,
    key_groups: impl Fn(u32, u32) -> Range<u32>,
    positions: impl Fn(&str) -> Vec<String>,
) -> SubtaskRestore {
    let old_parallelism = old.len() as u32;
    if old_parallelism == parallelism {
        let own = old[subtask as usize];
        return SubtaskRestore {
            keyed: (!own.files.is_empty()).then(|| own.clone()).into_iter().collect(),
            positions: own.position.as_deref().map(&positions).unwrap_or_default(),
            sinks: own.sink.iter().cloned().collect(),
            broadcast: own.broadcast.clone(),
            in_flight: own.in_flight.iter().cloned().collect(),
            storage: None,
        };
    }
    let mine = key_groups(parallelism, subtask);
    let keyed = old
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            let theirs = key_groups(old_parallelism, *i as u32);
            !s.files.is_empty() && theirs.start < mine.end && mine.start < theirs.end
        })
        .map(|(_, s)| (*s).clone())
        .collect();
    let positions = old
        .iter()
        .filter_map(|s| s.position.as_deref())
        .flat_map(&positions)
        .enumerate()
        .filter(|(j, _)| *j as u32 % parallelism == subtask)
        .map(|(_, p)| p)
        .collect();
    let dealt = |part: fn(&TaskSnapshot) -> &Option<String>| -> Vec<String> {
        old.iter()
            .enumerate()
            .filter(|(i, _)| *i as u32 % parallelism == subtask)
            .filter_map(|(_, s)| part(s).clone())
            .collect()
    };
    let sinks = dealt(|s| &s.sink);
    let in_flight = dealt(|s| &s.in_flight);
    let broadcast = old
        .get((subtask % old_parallelism.max(1)) as usize)
        .and_then(|s| s.broadcast.clone());
    SubtaskRestore {
        keyed,
        positions,
        sinks,
        broadcast,
        in_flight,
        storage: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flink's formula, written out for the test (128 key groups).
    fn ranges(p: u32, i: u32) -> Range<u32> {
        (i * 128).div_ceil(p)..((i + 1) * 128).div_ceil(p)
    }

    fn snapshot(i: u32) -> TaskSnapshot {
        TaskSnapshot {
            files: vec![format!("state-{i}")],
            position: Some(format!("split-{i}")),
            sink: Some(format!("sink-{i}")),
            broadcast: Some("rules".into()),
            in_flight: Some(format!("records-{i}")),
            ..Default::default()
        }
    }

    fn one(p: &str) -> Vec<String> {
        vec![p.to_string()]
    }

    #[test]
    fn every_subtask_of_any_parallelism_gets_a_copy_of_the_broadcast_state() {
        let old: Vec<TaskSnapshot> = (0..3)
            .map(|i| TaskSnapshot {
                broadcast: Some(format!("copy-{i}")),
                ..Default::default()
            })
            .collect();
        let refs: Vec<&TaskSnapshot> = old.iter().collect();
        for p in [1, 2, 3, 5] {
            for k in 0..p {
                let r = redistribute(&refs, p, k, ranges, one);
                assert_eq!(r.broadcast, Some(format!("copy-{}", k % 3)), "{k} of {p}");
            }
        }
    }

    #[test]
    fn an_unchanged_parallelism_gives_each_subtask_its_own() {
        let old: Vec<TaskSnapshot> = (0..3).map(snapshot).collect();
        let refs: Vec<&TaskSnapshot> = old.iter().collect();
        for k in 0..3 {
            let r = redistribute(&refs, 3, k, ranges, one);
            assert_eq!(r.keyed, vec![old[k as usize].clone()]);
            assert_eq!(r.positions, vec![format!("split-{k}")]);
            assert_eq!(r.sinks, vec![format!("sink-{k}")]);
            assert_eq!(r.in_flight, vec![format!("records-{k}")]);
        }
    }

    #[test]
    fn every_key_group_split_sink_and_record_in_flight_lands_exactly_once_in_any_parallelism() {
        let old: Vec<TaskSnapshot> = (0..4).map(snapshot).collect();
        let refs: Vec<&TaskSnapshot> = old.iter().collect();
        for p in [1u32, 2, 3, 5, 8] {
            let all: Vec<SubtaskRestore> = (0..p).map(|k| redistribute(&refs, p, k, ranges, one)).collect();
            // Each new subtask's key groups are covered by the old snapshots it got.
            for (k, r) in all.iter().enumerate() {
                for kg in ranges(p, k as u32) {
                    let owner = (0..4).find(|&i| ranges(4, i).contains(&kg)).unwrap();
                    assert!(r.keyed.contains(&old[owner as usize]), "p={p} k={k} kg={kg}");
                }
            }
            let mut splits: Vec<String> = all.iter().flat_map(|r| r.positions.clone()).collect();
            splits.sort();
            assert_eq!(
                splits,
                (0..4).map(|i| format!("split-{i}")).collect::<Vec<_>>(),
                "p={p}"
            );
            let mut sinks: Vec<String> = all.iter().flat_map(|r| r.sinks.clone()).collect();
            sinks.sort();
            assert_eq!(
                sinks,
                (0..4).map(|i| format!("sink-{i}")).collect::<Vec<_>>(),
                "p={p}"
            );
            // An async operator's records in flight: each old subtask's to exactly one new one.
            let mut in_flight: Vec<String> = all.iter().flat_map(|r| r.in_flight.clone()).collect();
            in_flight.sort();
            assert_eq!(
                in_flight,
                (0..4).map(|i| format!("records-{i}")).collect::<Vec<_>>(),
                "p={p}"
            );
        }
        // Scaling 4 -> 2: subtask 0 takes old 0 and 1's key groups, and nothing of 2 or 3's.
        let r = redistribute(&refs, 2, 0, ranges, one);
        assert_eq!(r.keyed, vec![old[0].clone(), old[1].clone()]);
    }

    #[test]
    fn several_positions_of_one_snapshot_are_dealt_out_one_by_one() {
        let mut a = snapshot(0);
        a.position = Some("a,b,c".into());
        let refs = [&a];
        let split = |p: &str| p.split(',').map(String::from).collect::<Vec<_>>();
        assert_eq!(redistribute(&refs, 2, 0, ranges, split).positions, vec!["a", "c"]);
        assert_eq!(redistribute(&refs, 2, 1, ranges, split).positions, vec!["b"]);
    }
}
