//! The ExecutionGraph: the JobGraph parallelised. One ExecutionVertex per subtask, one Execution per
//! attempt, one IntermediateResultPartition per producer subtask and result.
//!
//! Connections are stored as consumed partition groups (Flink's `ConsumedPartitionGroup` /
//! `ConsumerVertexGroup`, FLINK-21110): a group is a contiguous range of partitions of one result read
//! by a contiguous range of consumer subtasks. An ALL_TO_ALL edge is a single group (all partitions, all
//! consumers), so a 10,000 x 10,000 edge costs one group, not 10^8 pointers.

use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job_graph::{
    DistributionPattern, JobGraph, Partitioner, ResultIndex, ResultPartitionType, VertexIndex,
};
use crate::state::ExecutionState;

/// Flink's `jobmanager.execution.attempts-history-size` default: prior attempts kept per vertex.
pub const ATTEMPT_HISTORY_SIZE: usize = 16;

/// One subtask: `vertex#subtask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExecutionVertexId {
    pub vertex: VertexIndex,
    pub subtask: u32,
}

impl ExecutionVertexId {
    pub fn new(vertex: u32, subtask: u32) -> Self {
        ExecutionVertexId {
            vertex: VertexIndex(vertex),
            subtask,
        }
    }
}

/// One partition: the part of a result one producer subtask writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionId {
    pub result: ResultIndex,
    pub partition: u32,
}

/// Index of a [`ConsumedPartitionGroup`] in its ExecutionGraph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupIndex(pub u32);

/// One attempt at running a subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    pub attempt: u64,
    pub state: ExecutionState,
}

/// One subtask of a JobVertex with its current attempt and the ones before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionVertex {
    pub id: ExecutionVertexId,
    /// One group per input of the JobVertex, in input order.
    pub consumed: Vec<GroupIndex>,
    pub current: Execution,
    /// Earlier attempts, oldest first, at most [`ATTEMPT_HISTORY_SIZE`].
    pub prior: Vec<Execution>,
}

/// All subtasks of one JobVertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionJobVertex {
    pub index: VertexIndex,
    pub parallelism: u32,
    pub subtasks: Vec<ExecutionVertex>,
}

/// The partition a producer subtask writes for one result. Its consumers are the group it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntermediateResultPartition {
    pub id: PartitionId,
    pub group: GroupIndex,
}

/// The parallel form of one IntermediateDataSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntermediateResult {
    pub index: ResultIndex,
    pub producer: VertexIndex,
    pub consumer: VertexIndex,
    pub partition_type: ResultPartitionType,
    pub pattern: DistributionPattern,
    pub partitions: Vec<IntermediateResultPartition>,
}

/// A contiguous range of a result's partitions, read by a contiguous range of consumer subtasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedPartitionGroup {
    pub result: ResultIndex,
    pub partitions: Range<u32>,
    pub consumer: VertexIndex,
    pub consumers: Range<u32>,
}

/// The parallel form of a [`JobGraph`], with the state of every execution.
#[derive(Debug, Clone)]
pub struct ExecutionGraph {
    job_graph: JobGraph,
    vertices: Vec<ExecutionJobVertex>,
    results: Vec<IntermediateResult>,
    groups: Vec<ConsumedPartitionGroup>,
    /// Global index of subtask 0 of each JobVertex; a dense numbering of all subtasks.
    offsets: Vec<u32>,
    /// Per vertex: its parallelism is decided at run time (adaptive batch scheduling).
    dynamic: Vec<bool>,
    /// Per vertex decided at run time: the subpartitions each subtask reads of its all-to-all inputs.
    subpartition_ranges: Vec<Option<Vec<Range<u32>>>>,
    first_attempt: u64,
}

/// The first attempt number a JobManager of leader epoch `epoch` gives each subtask. Attempt numbers
/// are part of execution attempt ids and result partition ids (files, objects, reports), so they
/// must never repeat across JobManagers of one job: each epoch numbers from `epoch << 32` (Flink
/// makes its ExecutionAttemptID unique with a random graph id instead). Without an operation log
/// the epoch is 0 and attempts count from 0.
pub const fn first_attempt_of_epoch(epoch: u64) -> u64 {
    epoch << 32
}

/// The leader epoch of the JobManager that numbered `attempt` (see [`first_attempt_of_epoch`]).
pub const fn epoch_of_attempt(attempt: u64) -> u64 {
    attempt >> 32
}

impl ExecutionGraph {
    /// Expands a validated JobGraph. Cost is linear in subtasks plus partitions, whatever the edges.
    /// A vertex whose parallelism is decided at run time has no subtasks until
    /// [`ExecutionGraph::decide`]; one whose input is pointwise takes its producer's parallelism.
    pub fn new(job_graph: JobGraph) -> Self {
        Self::with_first_attempt(job_graph, 0)
    }

    /// Every subtask's first attempt is numbered `first_attempt` (see [`first_attempt_of_epoch`]).
    pub fn with_first_attempt(job_graph: JobGraph, first_attempt: u64) -> Self {
        let dynamic: Vec<bool> = job_graph.vertices().iter().map(|v| !v.is_decided()).collect();
        let ranges = vec![None; dynamic.len()];
        Self::build(job_graph, dynamic, ranges, first_attempt)
    }

    fn build(
        mut job_graph: JobGraph,
        dynamic: Vec<bool>,
        subpartition_ranges: Vec<Option<Vec<Range<u32>>>>,
        first_attempt: u64,
    ) -> Self {
        // Pointwise consumers decided at run time take their producer's parallelism as soon as it
        // is known (Flink's forward groups): they read whole partitions, nothing to balance.
        for i in 0..job_graph.vertices().len() {
            let index = VertexIndex(i as u32);
            if job_graph.vertex(index).is_decided() {
                continue;
            }
            let producer = job_graph.inputs(index).iter().find_map(|&r| {
                let ds = job_graph.data_set(r);
                let p = job_graph.vertex(ds.producer).parallelism;
                (ds.pattern == DistributionPattern::Pointwise && p > 0).then_some(p)
            });
            if let Some(p) = producer {
                // Within the max parallelism or left undecided (the decider's bound applies).
                let _ = job_graph.set_parallelism(index, p);
            }
        }
        let mut offsets = Vec::with_capacity(job_graph.vertices().len());
        let mut total = 0u32;
        let mut vertices: Vec<ExecutionJobVertex> = job_graph
            .vertices()
            .iter()
            .enumerate()
            .map(|(i, v)| {
                offsets.push(total);
                total += v.parallelism;
                let index = VertexIndex(i as u32);
                let subtasks = (0..v.parallelism)
                    .map(|subtask| ExecutionVertex {
                        id: ExecutionVertexId {
                            vertex: index,
                            subtask,
                        },
                        consumed: Vec::with_capacity(job_graph.inputs(index).len()),
                        current: Execution {
                            attempt: first_attempt,
                            state: ExecutionState::Created,
                        },
                        prior: Vec::new(),
                    })
                    .collect();
                ExecutionJobVertex {
                    index,
                    parallelism: v.parallelism,
                    subtasks,
                }
            })
            .collect();
        let mut results = Vec::with_capacity(job_graph.data_sets().len());
        let mut groups = Vec::new();
        for (r, ds) in job_graph.data_sets().iter().enumerate() {
            let result = ResultIndex(r as u32);
            let sp = job_graph.vertex(ds.producer).parallelism;
            let tp = job_graph.vertex(ds.consumer).parallelism;
            let mut partitions: Vec<IntermediateResultPartition> = (0..sp)
                .map(|p| IntermediateResultPartition {
                    id: PartitionId { result, partition: p },
                    group: GroupIndex(0),
                })
                .collect();
            let consumers = &mut vertices[ds.consumer.0 as usize].subtasks;
            let mut connect = |parts: Range<u32>, cons: Range<u32>| {
                let g = GroupIndex(groups.len() as u32);
                for p in parts.clone() {
                    partitions[p as usize].group = g;
                }
                for c in cons.clone() {
                    consumers[c as usize].consumed.push(g);
                }
                groups.push(ConsumedPartitionGroup {
                    result,
                    partitions: parts,
                    consumer: ds.consumer,
                    consumers: cons,
                });
            };
            match ds.pattern {
                DistributionPattern::AllToAll => connect(0..sp, 0..tp),
                // Flink's EdgeManagerBuildUtil.connectPointwise.
                DistributionPattern::Pointwise if sp == tp => {
                    (0..sp).for_each(|i| connect(i..i + 1, i..i + 1))
                }
                DistributionPattern::Pointwise if sp > tp => (0..tp).for_each(|i| {
                    let (start, end) = (
                        i as u64 * sp as u64 / tp as u64,
                        (i as u64 + 1) * sp as u64 / tp as u64,
                    );
                    connect(start as u32..end as u32, i..i + 1)
                }),
                DistributionPattern::Pointwise => (0..sp).for_each(|p| {
                    let start = (p as u64 * tp as u64).div_ceil(sp as u64);
                    let end = ((p as u64 + 1) * tp as u64).div_ceil(sp as u64);
                    connect(p..p + 1, start as u32..end as u32)
                }),
            }
            results.push(IntermediateResult {
                index: result,
                producer: ds.producer,
                consumer: ds.consumer,
                partition_type: ds.partition_type,
                pattern: ds.pattern,
                partitions,
            });
        }
        ExecutionGraph {
            job_graph,
            vertices,
            results,
            groups,
            offsets,
            dynamic,
            subpartition_ranges,
            first_attempt,
        }
    }

    /// Whether `vertex`'s parallelism is decided at run time (decided yet or not).
    pub fn is_dynamic(&self, vertex: VertexIndex) -> bool {
        self.dynamic[vertex.0 as usize]
    }

    /// Whether `vertex` has its subtasks (its parallelism is known).
    pub fn is_decided(&self, vertex: VertexIndex) -> bool {
        self.job_graph.vertex(vertex).is_decided()
    }

    /// Vertices whose parallelism may be decided now: not decided, and every input's producer
    /// decided with all its subtasks finished (so their partitions' sizes are known). Sources
    /// (no inputs) are always among them until decided.
    pub fn decidable(&self) -> Vec<VertexIndex> {
        (0..self.vertices.len() as u32)
            .map(VertexIndex)
            .filter(|&v| !self.is_decided(v))
            .filter(|&v| {
                self.job_graph.inputs(v).iter().all(|&r| {
                    let producer = self.job_graph.data_set(r).producer;
                    self.is_decided(producer)
                        && self.vertices[producer.0 as usize]
                            .subtasks
                            .iter()
                            .all(|s| s.current.state == ExecutionState::Finished)
                })
            })
            .collect()
    }

    /// Gives a vertex decided at run time its parallelism and, for its all-to-all inputs, the
    /// subpartitions each subtask reads (`None`: split by count). The graph grows: the vertex's
    /// subtasks, partitions and groups appear; every execution so far keeps its attempt and state.
    pub fn decide(
        &mut self,
        vertex: VertexIndex,
        parallelism: u32,
        subpartition_ranges: Option<Vec<Range<u32>>>,
    ) -> Result<()> {
        let v = self.job_graph.vertex(vertex);
        if v.is_decided() {
            return Err(Error::InvalidAdaptiveConfig(format!(
                "vertex '{}' already has parallelism {}",
                v.id, v.parallelism
            )));
        }
        if let Some(ranges) = &subpartition_ranges {
            let covers = ranges.len() == parallelism as usize
                && ranges.first().is_some_and(|r| r.start == 0)
                && ranges.last().is_some_and(|r| r.end == v.max_parallelism)
                && ranges.windows(2).all(|w| w[0].end == w[1].start)
                && ranges.iter().all(|r| !r.is_empty());
            if !covers {
                return Err(Error::InvalidAdaptiveConfig(format!(
                    "vertex '{}': {} subpartition ranges do not split 0..{} among {parallelism} subtasks",
                    v.id,
                    ranges.len(),
                    v.max_parallelism
                )));
            }
        }
        let mut job_graph = self.job_graph.clone();
        job_graph.set_parallelism(vertex, parallelism)?;
        let mut ranges = self.subpartition_ranges.clone();
        ranges[vertex.0 as usize] = subpartition_ranges;
        let mut grown = Self::build(job_graph, self.dynamic.clone(), ranges, self.first_attempt);
        for (old, new) in self.vertices.iter().zip(grown.vertices.iter_mut()) {
            for (o, n) in old.subtasks.iter().zip(new.subtasks.iter_mut()) {
                n.current = o.current;
                n.prior.clone_from(&o.prior);
            }
        }
        *self = grown;
        Ok(())
    }

    /// How many subpartitions a partition has: one per consumer subtask, or, when the consumer's
    /// parallelism is decided at run time, one per key group of the consumer (its max
    /// parallelism) so that any parallelism can read contiguous ranges; a broadcast result for
    /// such a consumer has one subpartition that every consumer subtask reads.
    pub fn num_subpartitions(&self, partition: PartitionId) -> u32 {
        let result = self.result(partition.result);
        let consumer = self.job_graph.vertex(result.consumer);
        match result.pattern {
            DistributionPattern::AllToAll if self.is_dynamic(result.consumer) => {
                if self.job_graph.data_set(partition.result).partitioner == Partitioner::Broadcast {
                    1
                } else {
                    consumer.max_parallelism
                }
            }
            DistributionPattern::AllToAll => consumer.parallelism,
            DistributionPattern::Pointwise => self.group(self.group_of(partition)).consumers.len() as u32,
        }
    }

    /// The subpartitions consumer subtask `consumer` reads of each partition of group `group`.
    pub fn consumed_subpartitions(&self, consumer: ExecutionVertexId, group: GroupIndex) -> Range<u32> {
        let g = self.group(group);
        let result = self.result(g.result);
        let s = consumer.subtask;
        match result.pattern {
            DistributionPattern::AllToAll if self.is_dynamic(consumer.vertex) => {
                if self.job_graph.data_set(g.result).partitioner == Partitioner::Broadcast {
                    return 0..1;
                }
                match &self.subpartition_ranges[consumer.vertex.0 as usize] {
                    Some(ranges) => ranges[s as usize].clone(),
                    None => {
                        let n = self.job_graph.vertex(consumer.vertex).max_parallelism as u64;
                        let p = self.vertices[consumer.vertex.0 as usize].parallelism.max(1) as u64;
                        let start = s as u64 * n / p;
                        let end = (s as u64 + 1) * n / p;
                        start as u32..end as u32
                    }
                }
            }
            DistributionPattern::AllToAll => s..s + 1,
            DistributionPattern::Pointwise => {
                let k = s - g.consumers.start;
                k..k + 1
            }
        }
    }

    /// The subpartition ranges decided for a vertex's subtasks, if the decider balanced them.
    pub fn subpartition_ranges(&self, vertex: VertexIndex) -> Option<&[Range<u32>]> {
        self.subpartition_ranges[vertex.0 as usize].as_deref()
    }

    pub fn job_graph(&self) -> &JobGraph {
        &self.job_graph
    }

    pub fn job_vertices(&self) -> &[ExecutionJobVertex] {
        &self.vertices
    }

    pub fn job_vertex(&self, index: VertexIndex) -> &ExecutionJobVertex {
        &self.vertices[index.0 as usize]
    }

    pub fn results(&self) -> &[IntermediateResult] {
        &self.results
    }

    pub fn result(&self, index: ResultIndex) -> &IntermediateResult {
        &self.results[index.0 as usize]
    }

    pub fn groups(&self) -> &[ConsumedPartitionGroup] {
        &self.groups
    }

    pub fn group(&self, index: GroupIndex) -> &ConsumedPartitionGroup {
        &self.groups[index.0 as usize]
    }

    /// Number of subtasks over all vertices.
    pub fn task_count(&self) -> usize {
        self.vertices.iter().map(|v| v.subtasks.len()).sum()
    }

    /// Every subtask, vertex by vertex in topological order.
    pub fn execution_vertices(&self) -> impl Iterator<Item = &ExecutionVertex> {
        self.vertices.iter().flat_map(|v| v.subtasks.iter())
    }

    /// Dense index of a subtask in `0..task_count()`.
    pub fn global_index(&self, id: ExecutionVertexId) -> usize {
        (self.offsets[id.vertex.0 as usize] + id.subtask) as usize
    }

    /// Inverse of [`ExecutionGraph::global_index`].
    pub fn vertex_at(&self, global: usize) -> ExecutionVertexId {
        let v = self.offsets.partition_point(|&o| o as usize <= global) - 1;
        ExecutionVertexId {
            vertex: VertexIndex(v as u32),
            subtask: global as u32 - self.offsets[v],
        }
    }

    pub fn contains(&self, id: ExecutionVertexId) -> bool {
        self.vertices
            .get(id.vertex.0 as usize)
            .is_some_and(|v| id.subtask < v.parallelism)
    }

    pub fn execution_vertex(&self, id: ExecutionVertexId) -> Result<&ExecutionVertex> {
        if !self.contains(id) {
            return Err(Error::UnknownExecutionVertex {
                vertex: format!("{id:?}"),
            });
        }
        Ok(&self.vertices[id.vertex.0 as usize].subtasks[id.subtask as usize])
    }

    /// `vertex#subtask`, the task name users see.
    pub fn task_name(&self, id: ExecutionVertexId) -> String {
        format!("{}#{}", self.job_graph.vertex(id.vertex).id, id.subtask)
    }

    /// Partitions a subtask produces: partition `subtask` of every result of its vertex.
    pub fn produced_partitions(&self, id: ExecutionVertexId) -> impl Iterator<Item = PartitionId> + '_ {
        self.job_graph
            .outputs(id.vertex)
            .iter()
            .map(move |&result| PartitionId {
                result,
                partition: id.subtask,
            })
    }

    /// The subtask that produces a partition.
    pub fn producer_of(&self, partition: PartitionId) -> ExecutionVertexId {
        ExecutionVertexId {
            vertex: self.result(partition.result).producer,
            subtask: partition.partition,
        }
    }

    /// The group a partition belongs to (each partition has exactly one: one consumer edge per result).
    pub fn group_of(&self, partition: PartitionId) -> GroupIndex {
        self.result(partition.result).partitions[partition.partition as usize].group
    }

    /// A subtask not started yet takes over attempt number `attempt`: one that finished under an
    /// earlier JobManager, whose partitions are named by it.
    pub fn restore_attempt(&mut self, id: ExecutionVertexId, attempt: u64) -> Result<()> {
        let name = self.task_name_checked(id)?;
        let ev = &mut self.vertices[id.vertex.0 as usize].subtasks[id.subtask as usize];
        if ev.current.state != ExecutionState::Created || !ev.prior.is_empty() {
            return Err(Error::IllegalExecutionTransition {
                vertex: name,
                attempt: ev.current.attempt,
                from: ev.current.state,
                to: ExecutionState::Created,
            });
        }
        ev.current.attempt = attempt;
        Ok(())
    }

    /// Moves the current attempt of a subtask to a new state, refusing moves seed 002 does not allow.
    pub fn transition(&mut self, id: ExecutionVertexId, to: ExecutionState) -> Result<Execution> {
        let name = self.task_name_checked(id)?;
        let ev = &mut self.vertices[id.vertex.0 as usize].subtasks[id.subtask as usize];
        let from = ev.current.state;
        if !from.can_transition_to(to) {
            return Err(Error::IllegalExecutionTransition {
                vertex: name,
                attempt: ev.current.attempt,
                from,
                to,
            });
        }
        ev.current.state = to;
        Ok(ev.current)
    }

    /// Starts a new attempt (CREATED) for a subtask whose current attempt is terminal; the old attempt
    /// joins the bounded history.
    pub fn new_attempt(&mut self, id: ExecutionVertexId) -> Result<Execution> {
        let name = self.task_name_checked(id)?;
        let ev = &mut self.vertices[id.vertex.0 as usize].subtasks[id.subtask as usize];
        if !ev.current.state.is_terminal() {
            return Err(Error::IllegalExecutionTransition {
                vertex: name,
                attempt: ev.current.attempt,
                from: ev.current.state,
                to: ExecutionState::Created,
            });
        }
        if ev.prior.len() == ATTEMPT_HISTORY_SIZE {
            ev.prior.remove(0);
        }
        ev.prior.push(ev.current);
        ev.current = Execution {
            attempt: ev.current.attempt + 1,
            state: ExecutionState::Created,
        };
        Ok(ev.current)
    }

    fn task_name_checked(&self, id: ExecutionVertexId) -> Result<String> {
        if !self.contains(id) {
            return Err(Error::UnknownExecutionVertex {
                vertex: format!("{id:?}"),
            });
        }
        Ok(self.task_name(id))
    }
}

impl fmt::Display for ExecutionVertexId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}#{}", self.vertex.0, self.subtask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumed_partitions(g: &ExecutionGraph, vertex: u32) -> Vec<Vec<u32>> {
        g.job_vertex(VertexIndex(vertex))
            .subtasks
            .iter()
            .map(|ev| {
                ev.consumed
                    .iter()
                    .flat_map(|&gi| g.group(gi).partitions.clone())
                    .collect()
            })
            .collect()
    }

    fn pointwise(sp: u32, tp: u32) -> ExecutionGraph {
        ExecutionGraph::new(
            JobGraph::test()
                .vertex("a", sp)
                .vertex("b", tp)
                .edge("a", "b", Partitioner::Rescale)
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn pointwise_equal_parallelism_is_one_to_one() {
        assert_eq!(
            consumed_partitions(&pointwise(3, 3), 1),
            vec![vec![0], vec![1], vec![2]]
        );
    }

    #[test]
    fn pointwise_more_producers_than_consumers() {
        // Flink: consumer i reads [i*sp/tp, (i+1)*sp/tp).
        assert_eq!(
            consumed_partitions(&pointwise(5, 2), 1),
            vec![vec![0, 1], vec![2, 3, 4]]
        );
        assert_eq!(
            consumed_partitions(&pointwise(4, 3), 1),
            vec![vec![0], vec![1], vec![2, 3]]
        );
    }

    #[test]
    fn pointwise_fewer_producers_than_consumers() {
        // Flink: partition p feeds consumers [ceil(p*tp/sp), ceil((p+1)*tp/sp)).
        assert_eq!(
            consumed_partitions(&pointwise(2, 5), 1),
            vec![vec![0], vec![0], vec![0], vec![1], vec![1]]
        );
        let g = pointwise(3, 4);
        assert_eq!(
            consumed_partitions(&g, 1),
            vec![vec![0], vec![0], vec![1], vec![2]]
        );
        // Every partition is consumed by someone.
        let mut covered: Vec<u32> = consumed_partitions(&g, 1).concat();
        covered.dedup();
        assert_eq!(covered, vec![0, 1, 2]);
    }

    #[test]
    fn all_to_all_is_one_group() {
        let g = ExecutionGraph::new(
            JobGraph::test()
                .vertex("a", 300)
                .vertex("b", 200)
                .edge("a", "b", Partitioner::Hash)
                .build()
                .unwrap(),
        );
        assert_eq!(g.groups().len(), 1);
        assert_eq!(g.group(GroupIndex(0)).partitions, 0..300);
        assert_eq!(g.group(GroupIndex(0)).consumers, 0..200);
        assert!(
            g.job_vertex(VertexIndex(1))
                .subtasks
                .iter()
                .all(|s| s.consumed == [GroupIndex(0)])
        );
        assert_eq!(g.task_count(), 500);
    }

    #[test]
    fn global_index_round_trips() {
        let g = pointwise(3, 4);
        for (i, ev) in g.execution_vertices().enumerate() {
            assert_eq!(g.global_index(ev.id), i);
            assert_eq!(g.vertex_at(i), ev.id);
        }
    }

    #[test]
    fn attempt_numbers_never_repeat_across_jobmanager_epochs() {
        let graph = || {
            JobGraph::test()
                .vertex("a", 2)
                .vertex("b", 2)
                .edge("a", "b", Partitioner::Rescale)
                .build()
                .unwrap()
        };
        let mut first = ExecutionGraph::with_first_attempt(graph(), first_attempt_of_epoch(1));
        let mut second = ExecutionGraph::with_first_attempt(graph(), first_attempt_of_epoch(2));
        let id = ExecutionVertexId::new(0, 1);
        // Epoch 1 restarts its subtask many times; epoch 2 never reuses any of those numbers.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            seen.insert(first.execution_vertex(id).unwrap().current.attempt);
            first.transition(id, ExecutionState::Scheduled).unwrap();
            first.transition(id, ExecutionState::Failed).unwrap();
            first.new_attempt(id).unwrap();
        }
        assert!(!seen.contains(&second.execution_vertex(id).unwrap().current.attempt));
        assert_eq!(second.execution_vertex(id).unwrap().current.attempt, 2 << 32);
        // A subtask that finished under epoch 1 keeps its attempt (its partitions are named by it),
        // but only before it ran under epoch 2.
        second.restore_attempt(id, 7 + (1 << 32)).unwrap();
        assert_eq!(
            second.execution_vertex(id).unwrap().current.attempt,
            7 + (1 << 32)
        );
        second.transition(id, ExecutionState::Scheduled).unwrap();
        assert!(second.restore_attempt(id, 3).is_err());
    }

    #[test]
    fn attempts_follow_the_state_machine_and_keep_history() {
        let mut g = pointwise(1, 1);
        let id = ExecutionVertexId::new(0, 0);
        for s in [
            ExecutionState::Scheduled,
            ExecutionState::Deploying,
            ExecutionState::Initializing,
        ] {
            g.transition(id, s).unwrap();
        }
        let err = g.transition(id, ExecutionState::Finished).unwrap_err();
        assert_eq!(
            err.to_string(),
            "illegal execution state transition INITIALIZING -> FINISHED for a#0 attempt 0"
        );
        assert!(g.new_attempt(id).is_err(), "a live attempt cannot be replaced");
        g.transition(id, ExecutionState::Failed).unwrap();
        let next = g.new_attempt(id).unwrap();
        assert_eq!(
            next,
            Execution {
                attempt: 1,
                state: ExecutionState::Created
            }
        );
        let ev = g.execution_vertex(id).unwrap();
        assert_eq!(
            ev.prior,
            vec![Execution {
                attempt: 0,
                state: ExecutionState::Failed
            }]
        );
        for _ in 0..40 {
            g.transition(id, ExecutionState::Failed).unwrap();
            g.new_attempt(id).unwrap();
        }
        let ev = g.execution_vertex(id).unwrap();
        assert_eq!(ev.prior.len(), ATTEMPT_HISTORY_SIZE);
        assert_eq!(ev.current.attempt, 41);
        assert!(g.execution_vertex(ExecutionVertexId::new(0, 9)).is_err());
    }
}

#[cfg(test)]
mod adaptive_tests {
    use super::*;
    use crate::job_graph::BatchShuffleMode;
    use crate::regions::PipelinedRegions;
    use crate::scheduling::PipelinedRegionSchedulingStrategy;

    fn finish(g: &mut ExecutionGraph, v: ExecutionVertexId) {
        for s in [
            ExecutionState::Scheduled,
            ExecutionState::Deploying,
            ExecutionState::Initializing,
            ExecutionState::Running,
            ExecutionState::Finished,
        ] {
            g.transition(v, s).unwrap();
        }
    }

    /// source(2) -hash-> reduce(?) -forward-> sink(?), every exchange blocking.
    fn auto_graph() -> ExecutionGraph {
        let job = JobGraph::test()
            .vertex("source", 2)
            .vertex("reduce", 0)
            .vertex("sink", 0)
            .edge("source", "reduce", Partitioner::Hash)
            .edge("reduce", "sink", Partitioner::Forward)
            .build()
            .unwrap()
            .with_shuffle_mode(BatchShuffleMode::AllExchangesBlocking);
        job.check_adaptive().unwrap();
        ExecutionGraph::with_first_attempt(job, 5)
    }

    #[test]
    fn a_vertex_decided_at_run_time_grows_the_graph() {
        let mut g = auto_graph();
        let (reduce, sink) = (VertexIndex(1), VertexIndex(2));
        assert_eq!(g.task_count(), 2);
        assert!(g.is_dynamic(reduce) && !g.is_decided(reduce) && !g.is_dynamic(VertexIndex(0)));
        // Producers write one subpartition per key group of the undecided consumer.
        let p0 = PartitionId {
            result: ResultIndex(0),
            partition: 0,
        };
        assert_eq!(g.num_subpartitions(p0), 128);
        assert!(g.decidable().is_empty(), "the sources have not finished");
        finish(&mut g, ExecutionVertexId::new(0, 0));
        assert!(g.decidable().is_empty());
        finish(&mut g, ExecutionVertexId::new(0, 1));
        assert_eq!(g.decidable(), vec![reduce]);

        let bad = g.decide(reduce, 3, Some(vec![0..10, 10..128])).unwrap_err();
        assert!(bad.to_string().contains("do not split 0..128 among 3"), "{bad}");
        g.decide(reduce, 3, Some(vec![0..10, 10..100, 100..128])).unwrap();
        // The forward consumer follows; the sources keep their finished attempts.
        assert_eq!(g.job_vertex(sink).parallelism, 3);
        assert_eq!(g.task_count(), 8);
        let source = g.execution_vertex(ExecutionVertexId::new(0, 1)).unwrap();
        assert_eq!(source.current.state, ExecutionState::Finished);
        assert_eq!(source.current.attempt, 5);
        assert_eq!(
            g.execution_vertex(ExecutionVertexId::new(1, 2))
                .unwrap()
                .current
                .attempt,
            5
        );
        let r1 = ExecutionVertexId::new(1, 1);
        let group = g.execution_vertex(r1).unwrap().consumed[0];
        assert_eq!(g.group(group).partitions, 0..2);
        assert_eq!(g.consumed_subpartitions(r1, group), 10..100);
        // reduce -> sink is forward: one subpartition, read one to one.
        let rp = PartitionId {
            result: ResultIndex(1),
            partition: 2,
        };
        assert_eq!(g.num_subpartitions(rp), 1);
        assert!(g.decide(reduce, 2, None).is_err(), "decided once");

        // The strategy taken up from the states deploys the reducers, not the finished sources.
        let regions = PipelinedRegions::compute(&g);
        let mut s = PipelinedRegionSchedulingStrategy::resume(&g, &regions);
        let names: Vec<String> = s
            .schedule_ready_regions(&g, &regions)
            .into_iter()
            .map(|v| g.task_name(v))
            .collect();
        assert_eq!(names, ["reduce#0", "reduce#1", "reduce#2"]);
        assert!(s.schedule_ready_regions(&g, &regions).is_empty());
    }

    #[test]
    fn undecided_ranges_split_by_count() {
        let mut g = auto_graph();
        for k in 0..2 {
            finish(&mut g, ExecutionVertexId::new(0, k));
        }
        g.decide(VertexIndex(1), 3, None).unwrap();
        let ranges: Vec<Range<u32>> = (0..3)
            .map(|k| {
                let v = ExecutionVertexId::new(1, k);
                g.consumed_subpartitions(v, g.execution_vertex(v).unwrap().consumed[0])
            })
            .collect();
        assert_eq!(ranges, vec![0..42, 42..85, 85..128]);
    }
}
