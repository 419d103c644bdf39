//! A job planned end to end: execution graph, pipelined regions and slot placement, plus the
//! serialisable view `floe plan` prints and the JobManager's REST API reuses.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::execution_graph::ExecutionGraph;
use crate::job_graph::{BatchShuffleMode, JobGraph};
use crate::regions::PipelinedRegions;
use crate::slots::{self, AssignedSlot};

/// Execution graph, regions and slot placement of one job.
#[derive(Debug, Clone)]
pub struct Plan {
    pub graph: ExecutionGraph,
    pub regions: PipelinedRegions,
    pub slots: Vec<AssignedSlot>,
}

impl Plan {
    /// Plans a job onto TaskManagers offering `slots_per_taskmanager[i]` slots each; with `None`, onto
    /// one TaskManager with exactly the slots the job needs (the fewest that fit).
    pub fn new(job: JobGraph, slots_per_taskmanager: Option<&[u32]>) -> Result<Plan> {
        let graph = ExecutionGraph::new(job);
        let regions = PipelinedRegions::compute(&graph);
        let slots = match slots_per_taskmanager {
            Some(offer) => slots::assign_slots(&graph, offer)?,
            None => slots::assign_slots(&graph, &[slots::slots_needed(&graph) as u32])?,
        };
        Ok(Plan {
            graph,
            regions,
            slots,
        })
    }

    /// Plans a BATCH job with the given shuffle mode.
    pub fn batch(
        job: JobGraph,
        mode: BatchShuffleMode,
        slots_per_taskmanager: Option<&[u32]>,
    ) -> Result<Plan> {
        Plan::new(job.with_shuffle_mode(mode), slots_per_taskmanager)
    }

    pub fn view(&self) -> PlanView {
        let job = self.graph.job_graph();
        let vertices = job
            .vertices()
            .iter()
            .enumerate()
            .map(|(i, v)| VertexView {
                id: v.id.clone(),
                name: v.name.clone(),
                parallelism: v.parallelism,
                max_parallelism: v.max_parallelism,
                slot_sharing_group: v.slot_sharing_group.clone(),
                inputs: job
                    .inputs(crate::job_graph::VertexIndex(i as u32))
                    .iter()
                    .map(|&r| {
                        let ds = job.data_set(r);
                        InputView {
                            from: job.vertex(ds.producer).id.clone(),
                            pattern: ds.pattern,
                            partitioner: ds.partitioner,
                            partition_type: ds.partition_type,
                        }
                    })
                    .collect(),
            })
            .collect();
        let regions = self
            .regions
            .regions()
            .iter()
            .map(|r| RegionView {
                tasks: r.vertices.iter().map(|&v| self.graph.task_name(v)).collect(),
            })
            .collect();
        let slots = self
            .slots
            .iter()
            .map(|s| SlotView {
                taskmanager: s.slot.taskmanager,
                slot: s.slot.slot,
                tasks: s.tasks.iter().map(|&v| self.graph.task_name(v)).collect(),
            })
            .collect();
        PlanView {
            vertices,
            regions,
            slots,
        }
    }
}

/// What `floe plan --format json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanView {
    pub vertices: Vec<VertexView>,
    pub regions: Vec<RegionView>,
    pub slots: Vec<SlotView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexView {
    pub id: String,
    pub name: String,
    pub parallelism: u32,
    pub max_parallelism: u32,
    pub slot_sharing_group: String,
    pub inputs: Vec<InputView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputView {
    pub from: String,
    pub pattern: crate::job_graph::DistributionPattern,
    pub partitioner: crate::job_graph::Partitioner,
    pub partition_type: crate::job_graph::ResultPartitionType,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionView {
    pub tasks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotView {
    pub taskmanager: u32,
    pub slot: u32,
    pub tasks: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_without_a_cluster_use_the_fewest_slots() {
        let job = JobGraph::seed_example();
        let plan = Plan::batch(job, BatchShuffleMode::ForwardExchangesPipelined, None).unwrap();
        let view = plan.view();
        assert_eq!(view.slots.len(), 4);
        assert!(view.slots.iter().all(|s| s.taskmanager == 0));
        assert_eq!(view.regions.len(), 7);
        assert_eq!(view.regions[0].tasks, ["source#0", "map#0"]);
        assert_eq!(view.vertices[2].inputs[0].from, "map");
    }
}
