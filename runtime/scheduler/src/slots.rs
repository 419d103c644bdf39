//! Slot sharing (Flink's `SlotSharingGroup` and `ExecutionSlotSharingGroup`): subtask k of every vertex
//! in a slot sharing group goes into the same slot, so a slot runs one whole pipeline and a job needs
//! as many slots as the highest parallelism of each group, summed over groups.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::execution_graph::{ExecutionGraph, ExecutionVertexId};

/// A slot of a TaskManager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SlotId {
    pub taskmanager: u32,
    pub slot: u32,
}

/// The subtasks that share one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSlotSharingGroup {
    pub slot_sharing_group: String,
    pub tasks: Vec<ExecutionVertexId>,
}

/// A slot and the subtasks placed in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignedSlot {
    pub slot: SlotId,
    pub tasks: Vec<ExecutionVertexId>,
}

/// Groups subtasks into execution slot sharing groups: for each slot sharing group (in order of its
/// first vertex), group k holds subtask k of each of its vertices that has one.
pub fn execution_slot_sharing_groups(graph: &ExecutionGraph) -> Vec<ExecutionSlotSharingGroup> {
    let job = graph.job_graph();
    let mut names: Vec<&str> = Vec::new();
    for v in job.vertices() {
        if !names.contains(&v.slot_sharing_group.as_str()) {
            names.push(&v.slot_sharing_group);
        }
    }
    let mut out = Vec::new();
    for name in names {
        let members: Vec<_> = graph
            .job_vertices()
            .iter()
            .filter(|v| job.vertex(v.index).slot_sharing_group == name)
            .collect();
        let width = members.iter().map(|v| v.parallelism).max().unwrap_or(0);
        for k in 0..width {
            out.push(ExecutionSlotSharingGroup {
                slot_sharing_group: name.to_string(),
                tasks: members
                    .iter()
                    .filter(|v| k < v.parallelism)
                    .map(|v| ExecutionVertexId {
                        vertex: v.index,
                        subtask: k,
                    })
                    .collect(),
            });
        }
    }
    out
}

/// How many slots the job needs with slot sharing.
pub fn slots_needed(graph: &ExecutionGraph) -> usize {
    execution_slot_sharing_groups(graph).len()
}

/// Every slot of a cluster whose TaskManager `i` offers `slots_per_taskmanager[i]` slots, TaskManager by
/// TaskManager.
pub fn offered_slots(slots_per_taskmanager: &[u32]) -> Vec<SlotId> {
    slots_per_taskmanager
        .iter()
        .enumerate()
        .flat_map(|(tm, &n)| {
            (0..n).map(move |slot| SlotId {
                taskmanager: tm as u32,
                slot,
            })
        })
        .collect()
}

/// Places groups into free slots in order (the first TaskManager's slots fill first, as Flink does
/// without `cluster.evenly-spread-out-slots`). Errors with the number of slots needed if they do not fit.
pub fn place(groups: Vec<ExecutionSlotSharingGroup>, free: &[SlotId]) -> Result<Vec<AssignedSlot>> {
    if groups.len() > free.len() {
        return Err(Error::NotEnoughSlots {
            needed: groups.len(),
            available: free.len(),
        });
    }
    Ok(groups
        .into_iter()
        .zip(free)
        .map(|(g, &slot)| AssignedSlot { slot, tasks: g.tasks })
        .collect())
}

/// The whole job placed on a cluster's offered slots.
pub fn assign_slots(graph: &ExecutionGraph, slots_per_taskmanager: &[u32]) -> Result<Vec<AssignedSlot>> {
    place(
        execution_slot_sharing_groups(graph),
        &offered_slots(slots_per_taskmanager),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_graph::{JobGraph, Partitioner};

    fn seed() -> ExecutionGraph {
        ExecutionGraph::new(JobGraph::seed_example())
    }

    #[test]
    fn seed_example_uses_four_slots_each_a_pipeline() {
        let g = seed();
        let slots = assign_slots(&g, &[3, 3]).unwrap();
        assert_eq!(slots.len(), 4);
        for (k, s) in slots.iter().enumerate() {
            let names: Vec<String> = s.tasks.iter().map(|&t| g.task_name(t)).collect();
            let mut expected = vec![format!("source#{k}"), format!("map#{k}")];
            if k < 3 {
                expected.push(format!("reduce#{k}"));
            }
            assert_eq!(names, expected);
        }
        let placed: Vec<SlotId> = slots.iter().map(|s| s.slot).collect();
        assert_eq!(
            placed,
            [
                SlotId {
                    taskmanager: 0,
                    slot: 0
                },
                SlotId {
                    taskmanager: 0,
                    slot: 1
                },
                SlotId {
                    taskmanager: 0,
                    slot: 2
                },
                SlotId {
                    taskmanager: 1,
                    slot: 0
                }
            ]
        );
    }

    #[test]
    fn a_job_that_does_not_fit_says_how_many_slots_it_needs() {
        let err = assign_slots(&seed(), &[1, 2]).unwrap_err();
        assert_eq!(err.to_string(), "job needs 4 slots but the cluster offers 3");
    }

    #[test]
    fn separate_slot_sharing_groups_need_their_own_slots() {
        let g = ExecutionGraph::new(
            JobGraph::test()
                .vertex("a", 2)
                .vertex("b", 3)
                .group("heavy")
                .edge("a", "b", Partitioner::Hash)
                .build()
                .unwrap(),
        );
        assert_eq!(slots_needed(&g), 5);
        let groups = execution_slot_sharing_groups(&g);
        assert_eq!(groups[2].slot_sharing_group, "heavy");
        assert_eq!(groups[2].tasks, vec![ExecutionVertexId::new(1, 0)]);
    }
}
