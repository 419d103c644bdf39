//! The pipelined-region scheduling strategy (Flink's `PipelinedRegionSchedulingStrategy`).
//!
//! Source regions (no blocking inputs) are scheduled first. A region becomes schedulable when every
//! blocking partition group it reads is fully produced. Pipelined consumers share their producers'
//! region, so they are scheduled with them. The strategy holds only scheduling state; it is driven by
//! events and answers with the subtasks to deploy next, region by region.

use crate::execution_graph::{ExecutionGraph, ExecutionVertexId, PartitionId};
use crate::regions::{PipelinedRegions, RegionIndex};
use crate::state::ExecutionState;

/// Scheduling state of one job: which blocking partitions are produced and which regions are scheduled.
#[derive(Debug, Clone)]
pub struct PipelinedRegionSchedulingStrategy {
    /// Per result, per partition; only blocking results are tracked.
    produced: Vec<Vec<bool>>,
    /// Per group: partitions not yet produced (blocking groups only).
    unfinished: Vec<u32>,
    scheduled: Vec<bool>,
}

impl PipelinedRegionSchedulingStrategy {
    pub fn new(graph: &ExecutionGraph, regions: &PipelinedRegions) -> Self {
        PipelinedRegionSchedulingStrategy {
            produced: graph
                .results()
                .iter()
                .map(|r| vec![false; r.partitions.len()])
                .collect(),
            unfinished: graph.groups().iter().map(|g| g.partitions.len() as u32).collect(),
            scheduled: vec![false; regions.len()],
        }
    }

    /// The strategy of a graph that changed shape (a vertex's parallelism was decided at run time),
    /// taken up from the executions' states: a blocking partition is produced when its producer's
    /// current attempt finished, a region is scheduled when any of its subtasks left CREATED.
    pub fn resume(graph: &ExecutionGraph, regions: &PipelinedRegions) -> Self {
        let mut s = Self::new(graph, regions);
        for (r, result) in graph.results().iter().enumerate() {
            if !result.partition_type.is_blocking() {
                continue;
            }
            for (p, partition) in result.partitions.iter().enumerate() {
                let producer = graph.producer_of(partition.id);
                let finished = graph
                    .execution_vertex(producer)
                    .is_ok_and(|e| e.current.state == ExecutionState::Finished);
                if finished {
                    s.produced[r][p] = true;
                    s.unfinished[partition.group.0 as usize] -= 1;
                }
            }
        }
        for region in regions.regions() {
            s.scheduled[region.index.0 as usize] = region.vertices.iter().any(|&v| {
                graph
                    .execution_vertex(v)
                    .is_ok_and(|e| e.current.state != ExecutionState::Created)
            });
        }
        s
    }

    /// Every region not scheduled yet whose blocking inputs are produced (after [`resume`]).
    ///
    /// [`resume`]: PipelinedRegionSchedulingStrategy::resume
    pub fn schedule_ready_regions(
        &mut self,
        graph: &ExecutionGraph,
        regions: &PipelinedRegions,
    ) -> Vec<ExecutionVertexId> {
        let all = regions.regions().iter().map(|r| r.index).collect();
        self.schedule_ready(graph, regions, all)
    }

    /// The source regions: every region without blocking inputs.
    pub fn start_scheduling(
        &mut self,
        graph: &ExecutionGraph,
        regions: &PipelinedRegions,
    ) -> Vec<ExecutionVertexId> {
        let ready: Vec<RegionIndex> = regions
            .regions()
            .iter()
            .filter(|r| r.blocking_inputs.is_empty())
            .map(|r| r.index)
            .collect();
        self.schedule(graph, regions, ready)
    }

    /// A subtask finished: its blocking partitions are produced.
    pub fn on_execution_finished(
        &mut self,
        graph: &ExecutionGraph,
        regions: &PipelinedRegions,
        vertex: ExecutionVertexId,
    ) -> Vec<ExecutionVertexId> {
        let partitions: Vec<PartitionId> = graph.produced_partitions(vertex).collect();
        self.on_partitions_produced(graph, regions, &partitions)
    }

    /// Partitions became fully produced (and consumable by a reader that starts now).
    pub fn on_partitions_produced(
        &mut self,
        graph: &ExecutionGraph,
        regions: &PipelinedRegions,
        partitions: &[PartitionId],
    ) -> Vec<ExecutionVertexId> {
        let mut candidates = Vec::new();
        for &p in partitions {
            if !graph.result(p.result).partition_type.is_blocking() {
                continue;
            }
            let slot = &mut self.produced[p.result.0 as usize][p.partition as usize];
            if *slot {
                continue;
            }
            *slot = true;
            let group = graph.group_of(p);
            let left = &mut self.unfinished[group.0 as usize];
            *left -= 1;
            if *left == 0 || regions.is_cross_region(group) {
                candidates.extend_from_slice(regions.consumer_regions(group));
            }
        }
        self.schedule_ready(graph, regions, candidates)
    }

    /// An execution failed. Nothing is deployed on a failure itself: the failover strategy decides what
    /// restarts and [`PipelinedRegionSchedulingStrategy::restart`] schedules it.
    pub fn on_execution_failed(&mut self, _vertex: ExecutionVertexId) -> Vec<ExecutionVertexId> {
        Vec::new()
    }

    /// Subtasks are restarted (whole regions, as failover decides): their partitions are gone and their
    /// regions are unscheduled; those whose inputs are still produced are scheduled again at once.
    pub fn restart(
        &mut self,
        graph: &ExecutionGraph,
        regions: &PipelinedRegions,
        vertices: &[ExecutionVertexId],
    ) -> Vec<ExecutionVertexId> {
        let mut affected = Vec::new();
        for &v in vertices {
            for p in graph.produced_partitions(v) {
                let slot = &mut self.produced[p.result.0 as usize][p.partition as usize];
                if *slot {
                    *slot = false;
                    self.unfinished[graph.group_of(p).0 as usize] += 1;
                }
            }
            let r = regions.region_of(graph, v);
            self.scheduled[r.0 as usize] = false;
            affected.push(r);
        }
        self.schedule_ready(graph, regions, affected)
    }

    /// Partitions whose data is gone (their TaskManager was lost, a consumer could not read them):
    /// not produced any more, so no consumer is scheduled to read them until they are produced
    /// again. A restart already pending for a consumer then waits for its producer.
    pub fn partitions_lost(&mut self, graph: &ExecutionGraph, partitions: &[PartitionId]) {
        for &p in partitions {
            if !graph.result(p.result).partition_type.is_blocking() {
                continue;
            }
            let Some(slot) = self
                .produced
                .get_mut(p.result.0 as usize)
                .and_then(|r| r.get_mut(p.partition as usize))
            else {
                continue;
            };
            if *slot {
                *slot = false;
                self.unfinished[graph.group_of(p).0 as usize] += 1;
            }
        }
    }

    /// Whether a blocking partition is produced.
    pub fn is_produced(&self, partition: PartitionId) -> bool {
        self.produced[partition.result.0 as usize][partition.partition as usize]
    }

    pub fn is_scheduled(&self, region: RegionIndex) -> bool {
        self.scheduled[region.0 as usize]
    }

    fn schedule_ready(
        &mut self,
        graph: &ExecutionGraph,
        regions: &PipelinedRegions,
        mut candidates: Vec<RegionIndex>,
    ) -> Vec<ExecutionVertexId> {
        candidates.sort_unstable();
        candidates.dedup();
        candidates.retain(|&r| !self.scheduled[r.0 as usize] && self.inputs_produced(graph, regions, r));
        self.schedule(graph, regions, candidates)
    }

    fn inputs_produced(
        &self,
        graph: &ExecutionGraph,
        regions: &PipelinedRegions,
        region: RegionIndex,
    ) -> bool {
        regions.region(region).blocking_inputs.iter().all(|&g| {
            if self.unfinished[g.0 as usize] == 0 {
                return true;
            }
            if !regions.is_cross_region(g) {
                return false;
            }
            // Partitions this region produces itself do not count: it cannot wait for itself.
            let group = graph.group(g);
            let result = graph.result(group.result);
            group.partitions.clone().all(|p| {
                let producer = ExecutionVertexId {
                    vertex: result.producer,
                    subtask: p,
                };
                self.produced[group.result.0 as usize][p as usize]
                    || regions.region_of(graph, producer) == region
            })
        })
    }

    fn schedule(
        &mut self,
        _graph: &ExecutionGraph,
        regions: &PipelinedRegions,
        ready: Vec<RegionIndex>,
    ) -> Vec<ExecutionVertexId> {
        let mut deploy = Vec::new();
        for r in ready {
            if !self.scheduled[r.0 as usize] {
                self.scheduled[r.0 as usize] = true;
                deploy.extend_from_slice(&regions.region(r).vertices);
            }
        }
        deploy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_graph::{BatchShuffleMode, JobGraph};

    fn setup(
        mode: BatchShuffleMode,
    ) -> (
        ExecutionGraph,
        PipelinedRegions,
        PipelinedRegionSchedulingStrategy,
    ) {
        let g = ExecutionGraph::new(JobGraph::seed_example().with_shuffle_mode(mode));
        let r = PipelinedRegions::compute(&g);
        let s = PipelinedRegionSchedulingStrategy::new(&g, &r);
        (g, r, s)
    }

    fn names(g: &ExecutionGraph, vs: &[ExecutionVertexId]) -> Vec<String> {
        vs.iter().map(|&v| g.task_name(v)).collect()
    }

    fn ev(v: u32, s: u32) -> ExecutionVertexId {
        ExecutionVertexId::new(v, s)
    }

    #[test]
    fn blocking_job_schedules_stage_by_stage() {
        let (g, r, mut s) = setup(BatchShuffleMode::AllExchangesBlocking);
        assert_eq!(
            names(&g, &s.start_scheduling(&g, &r)),
            ["source#0", "source#1", "source#2", "source#3"]
        );
        assert_eq!(names(&g, &s.on_execution_finished(&g, &r, ev(0, 2))), ["map#2"]);
        for m in [0, 1, 2] {
            s.on_execution_finished(&g, &r, ev(0, m));
        }
        assert!(s.on_execution_finished(&g, &r, ev(1, 0)).is_empty());
        assert!(s.on_execution_finished(&g, &r, ev(1, 1)).is_empty());
        assert!(s.on_execution_finished(&g, &r, ev(1, 2)).is_empty());
        // Reduce needs every map partition: only the last one releases all three reducers.
        assert_eq!(
            names(&g, &s.on_execution_finished(&g, &r, ev(1, 3))),
            ["reduce#0", "reduce#1", "reduce#2"]
        );
        // A duplicate event changes nothing.
        assert!(s.on_execution_finished(&g, &r, ev(1, 3)).is_empty());
    }

    #[test]
    fn pipelined_consumers_are_scheduled_with_their_producers() {
        let (g, r, mut s) = setup(BatchShuffleMode::AllExchangesPipelined);
        assert_eq!(s.start_scheduling(&g, &r).len(), 11);
        let (g, r, mut s) = setup(BatchShuffleMode::ForwardExchangesPipelined);
        assert_eq!(
            names(&g, &s.start_scheduling(&g, &r)),
            [
                "source#0", "map#0", "source#1", "map#1", "source#2", "map#2", "source#3", "map#3"
            ]
        );
        // The source finishing produces nothing blocking; the maps finishing release the reducers.
        for k in 0..4 {
            assert!(s.on_execution_finished(&g, &r, ev(0, k)).is_empty());
        }
        for k in 0..3 {
            assert!(s.on_execution_finished(&g, &r, ev(1, k)).is_empty());
        }
        assert_eq!(s.on_execution_finished(&g, &r, ev(1, 3)).len(), 3);
    }

    #[test]
    fn restart_reschedules_regions_whose_inputs_are_still_there() {
        let (g, r, mut s) = setup(BatchShuffleMode::AllExchangesBlocking);
        s.start_scheduling(&g, &r);
        for k in 0..4 {
            s.on_execution_finished(&g, &r, ev(0, k));
        }
        for k in 0..4 {
            s.on_execution_finished(&g, &r, ev(1, k));
        }
        assert!(s.on_execution_failed(ev(2, 1)).is_empty());
        // reduce#1 restarts alone: its input is still produced, so it is deployed again at once.
        assert_eq!(names(&g, &s.restart(&g, &r, &[ev(2, 1)])), ["reduce#1"]);
        // map#0 and the reducers restart (map#0's output is lost): map#0 first, reducers wait for it.
        assert_eq!(
            names(&g, &s.restart(&g, &r, &[ev(1, 0), ev(2, 0), ev(2, 1), ev(2, 2)])),
            ["map#0"]
        );
        assert!(!s.is_produced(PartitionId {
            result: crate::job_graph::ResultIndex(1),
            partition: 0
        }));
        assert_eq!(s.on_execution_finished(&g, &r, ev(1, 0)).len(), 3);
    }

    #[test]
    fn a_lost_partition_holds_back_its_consumers_until_produced_again() {
        let (g, r, mut s) = setup(BatchShuffleMode::AllExchangesBlocking);
        s.start_scheduling(&g, &r);
        for k in 0..4 {
            s.on_execution_finished(&g, &r, ev(0, k));
        }
        for k in 0..3 {
            s.on_execution_finished(&g, &r, ev(1, k));
        }
        // map#0's output is lost before the last map finishes: the reducers are not released.
        let lost = PartitionId {
            result: crate::job_graph::ResultIndex(1),
            partition: 0,
        };
        s.partitions_lost(&g, &[lost]);
        assert!(!s.is_produced(lost));
        assert!(s.on_execution_finished(&g, &r, ev(1, 3)).is_empty());
        assert_eq!(s.on_execution_finished(&g, &r, ev(1, 0)).len(), 3);
    }
}
