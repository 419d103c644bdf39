//! Pipelined regions (Flink's `SchedulingPipelinedRegionComputeUtil`): subtasks connected by pipelined
//! exchanges must run at the same time, so they form one region, the unit of scheduling and failover.
//!
//! Two passes, both linear in subtasks plus partitions:
//! 1. union-find over every pipelined consumed partition group (all its producers and consumers join);
//! 2. regions that reach each other through blocking groups in both directions would wait for each
//!    other forever, so every strongly connected component of the region graph is merged (Tarjan). The
//!    region graph uses group nodes (region → group → region), so an ALL_TO_ALL edge adds
//!    producers + consumers graph edges, not their product.

use serde::{Deserialize, Serialize};

use crate::execution_graph::{ExecutionGraph, ExecutionVertexId, GroupIndex};

/// Index of a region; regions are numbered in the order of their first subtask (topological).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RegionIndex(pub u32);

/// A set of subtasks scheduled, deployed and restarted together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelinedRegion {
    pub index: RegionIndex,
    pub vertices: Vec<ExecutionVertexId>,
    /// Blocking groups the region reads that some other region produces. The region becomes
    /// schedulable once they are produced.
    pub blocking_inputs: Vec<GroupIndex>,
}

/// The regions of one ExecutionGraph and the lookups scheduling and failover need.
#[derive(Debug, Clone)]
pub struct PipelinedRegions {
    regions: Vec<PipelinedRegion>,
    region_of: Vec<RegionIndex>,
    /// For each group: the regions that list it in `blocking_inputs`.
    consumer_regions: Vec<Vec<RegionIndex>>,
    /// For each group: the distinct regions producing its partitions, sorted.
    producer_regions: Vec<Vec<RegionIndex>>,
    /// For each group: whether a consumer region also produces part of it (only possible after a cycle
    /// merge); such a consumer waits only for the partitions other regions produce.
    cross_region: Vec<bool>,
}

impl PipelinedRegions {
    pub fn compute(graph: &ExecutionGraph) -> Self {
        let n = graph.task_count();
        let producer_global = |g: &crate::execution_graph::ConsumedPartitionGroup, p: u32| {
            let result = graph.result(g.result);
            graph.global_index(ExecutionVertexId {
                vertex: result.producer,
                subtask: p,
            })
        };
        let consumer_global = |g: &crate::execution_graph::ConsumedPartitionGroup, c: u32| {
            graph.global_index(ExecutionVertexId {
                vertex: g.consumer,
                subtask: c,
            })
        };

        // Pass 1: pipelined groups join their producers and consumers.
        let mut uf = UnionFind::new(n);
        for g in graph.groups() {
            if graph.result(g.result).partition_type.must_be_pipelined_consumed() {
                let first = producer_global(g, g.partitions.start);
                for p in g.partitions.clone() {
                    uf.union(first, producer_global(g, p));
                }
                for c in g.consumers.clone() {
                    uf.union(first, consumer_global(g, c));
                }
            }
        }
        let (mut provisional, count) = uf.dense_labels();

        // Pass 2: merge strongly connected components of the region graph over blocking groups.
        let blocking: Vec<usize> = (0..graph.groups().len())
            .filter(|&i| {
                let g = &graph.groups()[i];
                !graph.result(g.result).partition_type.must_be_pipelined_consumed()
            })
            .collect();
        if !blocking.is_empty() {
            let nodes = count + blocking.len();
            let mut edges: Vec<(u32, u32)> = Vec::new();
            for (k, &gi) in blocking.iter().enumerate() {
                let g = &graph.groups()[gi];
                let gnode = (count + k) as u32;
                for p in g.partitions.clone() {
                    edges.push((provisional[producer_global(g, p)], gnode));
                }
                for c in g.consumers.clone() {
                    edges.push((gnode, provisional[consumer_global(g, c)]));
                }
            }
            let adjacency = Csr::new(nodes, &edges);
            drop(edges);
            let component = tarjan_scc(&adjacency);
            let mut merge = UnionFind::new(count);
            let mut first_in_component = vec![u32::MAX; nodes];
            for (r, &c) in component.iter().enumerate().take(count) {
                let c = c as usize;
                if first_in_component[c] == u32::MAX {
                    first_in_component[c] = r as u32;
                } else {
                    merge.union(first_in_component[c] as usize, r);
                }
            }
            let (merged, _) = merge.dense_labels();
            for label in &mut provisional {
                *label = merged[*label as usize];
            }
        }

        // Number regions by first subtask so sources come first.
        let mut renumber = vec![u32::MAX; n];
        let mut regions: Vec<PipelinedRegion> = Vec::new();
        let mut region_of = Vec::with_capacity(n);
        for (global, &label) in provisional.iter().enumerate() {
            if renumber[label as usize] == u32::MAX {
                renumber[label as usize] = regions.len() as u32;
                regions.push(PipelinedRegion {
                    index: RegionIndex(regions.len() as u32),
                    vertices: Vec::new(),
                    blocking_inputs: Vec::new(),
                });
            }
            let r = renumber[label as usize];
            region_of.push(RegionIndex(r));
            regions[r as usize].vertices.push(graph.vertex_at(global));
        }

        let group_count = graph.groups().len();
        let mut producer_regions = vec![Vec::new(); group_count];
        for &gi in &blocking {
            let g = &graph.groups()[gi];
            let mut rs: Vec<RegionIndex> = g
                .partitions
                .clone()
                .map(|p| region_of[producer_global(g, p)])
                .collect();
            rs.sort_unstable();
            rs.dedup();
            producer_regions[gi] = rs;
        }
        let mut consumer_regions = vec![Vec::new(); group_count];
        let mut cross_region = vec![false; group_count];
        let mut last_added = vec![u32::MAX; group_count];
        for region in &mut regions {
            let r = region.index;
            for v in &region.vertices {
                for &gi in &graph.job_vertex(v.vertex).subtasks[v.subtask as usize].consumed {
                    let i = gi.0 as usize;
                    if last_added[i] == r.0 || producer_regions[i].is_empty() {
                        continue; // already listed, or a pipelined group
                    }
                    last_added[i] = r.0;
                    let producers = &producer_regions[i];
                    if producers.as_slice() == [r] {
                        continue; // produced and consumed inside this region
                    }
                    if producers.binary_search(&r).is_ok() {
                        cross_region[i] = true;
                    }
                    region.blocking_inputs.push(gi);
                    consumer_regions[i].push(r);
                }
            }
        }
        PipelinedRegions {
            regions,
            region_of,
            consumer_regions,
            producer_regions,
            cross_region,
        }
    }

    pub fn regions(&self) -> &[PipelinedRegion] {
        &self.regions
    }

    pub fn region(&self, index: RegionIndex) -> &PipelinedRegion {
        &self.regions[index.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.regions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The region of a subtask, by its global index ([`ExecutionGraph::global_index`]).
    pub fn region_of_global(&self, global: usize) -> RegionIndex {
        self.region_of[global]
    }

    pub fn region_of(&self, graph: &ExecutionGraph, id: ExecutionVertexId) -> RegionIndex {
        self.region_of[graph.global_index(id)]
    }

    /// Regions that wait for a blocking group.
    pub fn consumer_regions(&self, group: GroupIndex) -> &[RegionIndex] {
        &self.consumer_regions[group.0 as usize]
    }

    /// Regions producing a blocking group (empty for pipelined groups).
    pub fn producer_regions(&self, group: GroupIndex) -> &[RegionIndex] {
        &self.producer_regions[group.0 as usize]
    }

    /// Whether a consumer region of this group also produces part of it.
    pub fn is_cross_region(&self, group: GroupIndex) -> bool {
        self.cross_region[group.0 as usize]
    }
}

struct UnionFind {
    parent: Vec<u32>,
    rank: Vec<u8>,
}

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind {
            parent: (0..n as u32).collect(),
            rank: vec![0; n],
        }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] as usize != x {
            let grand = self.parent[self.parent[x] as usize];
            self.parent[x] = grand;
            x = grand as usize;
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return;
        }
        match self.rank[ra].cmp(&self.rank[rb]) {
            std::cmp::Ordering::Less => self.parent[ra] = rb as u32,
            std::cmp::Ordering::Greater => self.parent[rb] = ra as u32,
            std::cmp::Ordering::Equal => {
                self.parent[rb] = ra as u32;
                self.rank[ra] += 1;
            }
        }
    }

    /// Labels 0..k for the k sets, in order of each set's first element.
    fn dense_labels(&mut self) -> (Vec<u32>, usize) {
        let n = self.parent.len();
        let mut label_of_root = vec![u32::MAX; n];
        let mut labels = Vec::with_capacity(n);
        let mut next = 0u32;
        for x in 0..n {
            let root = self.find(x);
            if label_of_root[root] == u32::MAX {
                label_of_root[root] = next;
                next += 1;
            }
            labels.push(label_of_root[root]);
        }
        (labels, next as usize)
    }
}

/// Compressed adjacency lists.
struct Csr {
    start: Vec<u32>,
    targets: Vec<u32>,
}

impl Csr {
    fn new(nodes: usize, edges: &[(u32, u32)]) -> Self {
        let mut start = vec![0u32; nodes + 1];
        for &(from, _) in edges {
            start[from as usize + 1] += 1;
        }
        for i in 0..nodes {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut targets = vec![0u32; edges.len()];
        for &(from, to) in edges {
            targets[fill[from as usize] as usize] = to;
            fill[from as usize] += 1;
        }
        Csr { start, targets }
    }

    fn nodes(&self) -> usize {
        self.start.len() - 1
    }

    fn out(&self, v: usize) -> &[u32] {
        &self.targets[self.start[v] as usize..self.start[v + 1] as usize]
    }
}

/// Iterative Tarjan (recursion would overflow the stack on 20,000-region chains). Returns a component
/// label per node.
fn tarjan_scc(g: &Csr) -> Vec<u32> {
    const UNVISITED: u32 = u32::MAX;
    let n = g.nodes();
    let mut index = vec![UNVISITED; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut component = vec![UNVISITED; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut call: Vec<(u32, u32)> = Vec::new(); // (node, next edge offset)
    let (mut next_index, mut next_component) = (0u32, 0u32);
    for root in 0..n {
        if index[root] != UNVISITED {
            continue;
        }
        call.push((root as u32, 0));
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root as u32);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut edge)) = call.last_mut() {
            let v = v as usize;
            let out = g.out(v);
            if let Some(&w) = out.get(*edge as usize) {
                *edge += 1;
                let w = w as usize;
                if index[w] == UNVISITED {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w as u32);
                    on_stack[w] = true;
                    call.push((w as u32, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            call.pop();
            if let Some(&(parent, _)) = call.last() {
                low[parent as usize] = low[parent as usize].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w as usize] = false;
                    component[w as usize] = next_component;
                    if w as usize == v {
                        break;
                    }
                }
                next_component += 1;
            }
        }
    }
    component
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_graph::{BatchShuffleMode, JobGraph, Partitioner};

    /// Regions as lists of task names, for assertions a person can read.
    pub(crate) fn region_names(graph: &ExecutionGraph, regions: &PipelinedRegions) -> Vec<Vec<String>> {
        regions
            .regions()
            .iter()
            .map(|r| r.vertices.iter().map(|&v| graph.task_name(v)).collect())
            .collect()
    }

    fn seed_job(mode: BatchShuffleMode) -> ExecutionGraph {
        ExecutionGraph::new(JobGraph::seed_example().with_shuffle_mode(mode))
    }

    #[test]
    fn all_blocking_gives_one_region_per_task() {
        let g = seed_job(BatchShuffleMode::AllExchangesBlocking);
        let r = PipelinedRegions::compute(&g);
        assert_eq!(r.len(), 11);
        assert!(r.regions().iter().all(|x| x.vertices.len() == 1));
        // map#k waits for source#k; every reduce waits for the one map group.
        assert_eq!(r.region(RegionIndex(4)).blocking_inputs.len(), 1);
        let reduce0 = r.region_of(&g, ExecutionVertexId::new(2, 0));
        assert_eq!(r.region(reduce0).blocking_inputs.len(), 1);
        assert_eq!(r.consumer_regions(r.region(reduce0).blocking_inputs[0]).len(), 3);
    }

    #[test]
    fn forward_pipelined_pairs_source_and_map() {
        let g = seed_job(BatchShuffleMode::ForwardExchangesPipelined);
        let r = PipelinedRegions::compute(&g);
        assert_eq!(
            region_names(&g, &r),
            vec![
                vec!["source#0", "map#0"],
                vec!["source#1", "map#1"],
                vec!["source#2", "map#2"],
                vec!["source#3", "map#3"],
                vec!["reduce#0"],
                vec!["reduce#1"],
                vec!["reduce#2"],
            ]
        );
        // Pointwise here is the forward edge only, so the cut is the same.
        let g2 = seed_job(BatchShuffleMode::PointwiseExchangesPipelined);
        assert_eq!(
            region_names(&g2, &PipelinedRegions::compute(&g2)),
            region_names(&g, &r)
        );
    }

    #[test]
    fn all_pipelined_is_one_region() {
        let g = seed_job(BatchShuffleMode::AllExchangesPipelined);
        let r = PipelinedRegions::compute(&g);
        assert_eq!(r.len(), 1);
        assert_eq!(r.region(RegionIndex(0)).vertices.len(), 11);
        assert!(r.region(RegionIndex(0)).blocking_inputs.is_empty());
    }

    #[test]
    fn pointwise_mode_pipelines_rescale_but_forward_mode_does_not() {
        let job = JobGraph::test()
            .vertex("a", 4)
            .vertex("b", 2)
            .edge("a", "b", Partitioner::Rescale)
            .build()
            .unwrap();
        let pw = ExecutionGraph::new(
            job.clone()
                .with_shuffle_mode(BatchShuffleMode::PointwiseExchangesPipelined),
        );
        assert_eq!(
            region_names(&pw, &PipelinedRegions::compute(&pw)),
            vec![vec!["a#0", "a#1", "b#0"], vec!["a#2", "a#3", "b#1"]]
        );
        let fw = ExecutionGraph::new(job.with_shuffle_mode(BatchShuffleMode::ForwardExchangesPipelined));
        assert_eq!(PipelinedRegions::compute(&fw).len(), 6);
    }

    #[test]
    fn regions_linked_by_blocking_edges_both_ways_are_merged() {
        use crate::job_graph::{JobEdge, JobVertex, ResultPartitionType};
        let v = |id: &str, p: u32| JobVertex {
            id: id.into(),
            name: id.into(),
            parallelism: p,
            max_parallelism: 128,
            slot_sharing_group: "default".into(),
        };
        let e = |from: &str, to: &str, partitioner: Partitioner, t: ResultPartitionType| JobEdge {
            from: from.into(),
            to: to.into(),
            pattern: partitioner.default_pattern(),
            partitioner,
            partition_type: t,
        };
        // Pass 1 gives {p0,q0}, {p1,q1}, {s0}. s0 reads p0 and p1 (blocking) and q0, q1 read s0
        // (blocking): {p0,q0} -> {s0} -> {p0,q0}, a cycle that would deadlock if kept apart.
        let job = JobGraph::new(
            vec![v("p", 2), v("q", 2), v("s", 1)],
            vec![
                e(
                    "p",
                    "q",
                    Partitioner::Forward,
                    ResultPartitionType::PipelinedBounded,
                ),
                e("p", "s", Partitioner::Rescale, ResultPartitionType::Blocking),
                e("s", "q", Partitioner::Broadcast, ResultPartitionType::Blocking),
            ],
        )
        .unwrap();
        let g = ExecutionGraph::new(job);
        let r = PipelinedRegions::compute(&g);
        assert_eq!(
            region_names(&g, &r),
            vec![vec!["p#0", "p#1", "s#0", "q#0", "q#1"]]
        );
        assert!(r.region(RegionIndex(0)).blocking_inputs.is_empty());
    }

    #[test]
    fn all_to_all_at_scale_stays_linear() {
        let g = ExecutionGraph::new(
            JobGraph::test()
                .vertex("a", 3000)
                .vertex("b", 3000)
                .edge("a", "b", Partitioner::Hash)
                .build()
                .unwrap(),
        );
        let r = PipelinedRegions::compute(&g);
        assert_eq!(r.len(), 6000);
        assert_eq!(r.consumer_regions(GroupIndex(0)).len(), 3000);
        assert_eq!(r.producer_regions(GroupIndex(0)).len(), 3000);
    }
}
