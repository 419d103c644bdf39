//! The region failover strategy (Flink's `RestartPipelinedRegionFailoverStrategy`): which subtasks must
//! restart when one fails.

use std::collections::{BTreeSet, VecDeque};

use crate::execution_graph::{ExecutionGraph, ExecutionVertexId, PartitionId};
use crate::regions::{PipelinedRegions, RegionIndex};

/// The subtasks to restart after `failed` failed, sorted by ExecutionVertexId:
/// - the failed subtask's region;
/// - every region consuming a result of a restarted region (its input is being recomputed);
/// - every region producing a blocking partition that a restarted region reads and that is no longer
///   available (`is_available` says which are, e.g. false when the TaskManager holding it died).
///
/// Nothing else restarts.
pub fn tasks_to_restart(
    graph: &ExecutionGraph,
    regions: &PipelinedRegions,
    failed: ExecutionVertexId,
    is_available: impl Fn(PartitionId) -> bool,
) -> Vec<ExecutionVertexId> {
    let mut visited_regions = vec![false; regions.len()];
    let mut visited_consumed = vec![false; graph.groups().len()];
    let mut visited_consumers = vec![false; graph.groups().len()];
    let mut queue = VecDeque::new();
    let start = regions.region_of(graph, failed);
    visited_regions[start.0 as usize] = true;
    queue.push_back(start);
    let mut enqueue = |r: RegionIndex, queue: &mut VecDeque<RegionIndex>| {
        if !visited_regions[r.0 as usize] {
            visited_regions[r.0 as usize] = true;
            queue.push_back(r);
        }
    };
    let mut restart = BTreeSet::new();
    while let Some(r) = queue.pop_front() {
        let region = regions.region(r);
        for &g in &region.blocking_inputs {
            if std::mem::replace(&mut visited_consumed[g.0 as usize], true) {
                continue;
            }
            let group = graph.group(g);
            for p in group.partitions.clone() {
                let partition = PartitionId {
                    result: group.result,
                    partition: p,
                };
                if !is_available(partition) {
                    enqueue(regions.region_of(graph, graph.producer_of(partition)), &mut queue);
                }
            }
        }
        for &v in &region.vertices {
            restart.insert(v);
            for partition in graph.produced_partitions(v) {
                let g = graph.group_of(partition);
                if std::mem::replace(&mut visited_consumers[g.0 as usize], true) {
                    continue;
                }
                let group = graph.group(g);
                for c in group.consumers.clone() {
                    let consumer = ExecutionVertexId {
                        vertex: group.consumer,
                        subtask: c,
                    };
                    enqueue(regions.region_of(graph, consumer), &mut queue);
                }
            }
        }
    }
    restart.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_graph::{BatchShuffleMode, JobGraph, Partitioner};

    fn graph(mode: BatchShuffleMode) -> (ExecutionGraph, PipelinedRegions) {
        let g = ExecutionGraph::new(
            JobGraph::test()
                .vertex("source", 4)
                .vertex("map", 4)
                .vertex("reduce", 3)
                .vertex("sink", 3)
                .edge("source", "map", Partitioner::Forward)
                .edge("map", "reduce", Partitioner::Hash)
                .edge("reduce", "sink", Partitioner::Forward)
                .build()
                .unwrap()
                .with_shuffle_mode(mode),
        );
        let r = PipelinedRegions::compute(&g);
        (g, r)
    }

    fn names(g: &ExecutionGraph, vs: &[ExecutionVertexId]) -> Vec<String> {
        vs.iter().map(|&v| g.task_name(v)).collect()
    }

    #[test]
    fn a_failed_consumer_restarts_alone_when_its_inputs_are_available() {
        let (g, r) = graph(BatchShuffleMode::AllExchangesBlocking);
        let restart = tasks_to_restart(&g, &r, ExecutionVertexId::new(3, 1), |_| true);
        assert_eq!(names(&g, &restart), ["sink#1"]);
    }

    #[test]
    fn a_failed_producer_restarts_its_downstream_regions() {
        let (g, r) = graph(BatchShuffleMode::AllExchangesBlocking);
        let restart = tasks_to_restart(&g, &r, ExecutionVertexId::new(1, 2), |_| true);
        assert_eq!(
            names(&g, &restart),
            [
                "map#2", "reduce#0", "reduce#1", "reduce#2", "sink#0", "sink#1", "sink#2"
            ]
        );
    }

    #[test]
    fn lost_inputs_restart_their_producers() {
        let (g, r) = graph(BatchShuffleMode::AllExchangesBlocking);
        // reduce#0 fails and map#3's output (on a dead TaskManager) is gone: map#3 reruns, which in turn
        // restarts every reducer and sink, and source#3's output is still there so source#3 does not.
        let lost = PartitionId {
            result: crate::job_graph::ResultIndex(1),
            partition: 3,
        };
        let restart = tasks_to_restart(&g, &r, ExecutionVertexId::new(2, 0), |p| p != lost);
        assert_eq!(
            names(&g, &restart),
            [
                "map#3", "reduce#0", "reduce#1", "reduce#2", "sink#0", "sink#1", "sink#2"
            ]
        );
    }

    #[test]
    fn pipelined_regions_restart_whole() {
        let (g, r) = graph(BatchShuffleMode::ForwardExchangesPipelined);
        let restart = tasks_to_restart(&g, &r, ExecutionVertexId::new(0, 1), |_| true);
        assert_eq!(
            names(&g, &restart),
            [
                "source#1", "map#1", "reduce#0", "reduce#1", "reduce#2", "sink#0", "sink#1", "sink#2"
            ]
        );
        let (g, r) = graph(BatchShuffleMode::AllExchangesPipelined);
        assert_eq!(
            tasks_to_restart(&g, &r, ExecutionVertexId::new(3, 0), |_| true).len(),
            14
        );
    }
}
