//! Adaptive batch scheduling on the JobMaster (Flink's `AdaptiveBatchScheduler`): a vertex whose
//! parallelism is decided at run time gets it once its inputs are produced, from the bytes its
//! producers wrote (a source: from its input's size). A decision is proposed as an
//! [`Action::DecideParallelism`]; the driver logs it, then [`JobMaster::apply_decisions`] grows the
//! graph and deploys what became ready. So a JobManager that takes over applies the logged
//! decisions instead of deciding again.

use std::collections::BTreeMap;

use floe_scheduler::execution_graph::ExecutionVertexId;
use floe_scheduler::job_graph::{DistributionPattern, Partitioner, VertexIndex};
use floe_scheduler::{JobStatus, PipelinedRegionSchedulingStrategy, PipelinedRegions, slots};
use floe_shuffle::{ResultPartitionId, ShuffleMaster};
use serde::{Deserialize, Serialize};

use super::{Action, JobMaster, SlotRef, TaskCounters};

/// One vertex's parallelism as the adaptive batch scheduler decided it: what the operation log
/// records and the REST API shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexDecision {
    pub vertex: u32,
    pub parallelism: u32,
    /// Per subtask, the subpartitions `[start, end)` it reads of its all-to-all inputs (empty: a
    /// source, or split by count).
    pub subpartition_ranges: Vec<(u32, u32)>,
    /// The bytes decided from (`None`: a source of unknown size).
    pub input_bytes: Option<u64>,
    /// Per subtask, the bytes its range holds (empty for a source).
    #[serde(default)]
    pub bytes_per_subtask: Vec<u64>,
    /// The largest single subpartition index's bytes: no subtask's share exceeds the average by
    /// more than this.
    #[serde(default)]
    pub largest_subpartition_bytes: u64,
    pub reason: String,
    pub time_ms: u64,
}

impl JobMaster {
    /// The vertices whose parallelism can be decided now, as one action (`None`: nothing to decide,
    /// or the job is not adaptive). Sources wait until their input sizes are known. A decision may
    /// use the job's slots and the `free` ones; the free slots it needs are taken at once.
    pub fn propose_decisions(&mut self, free: &[SlotRef]) -> Option<Action> {
        let decider = self.decider?;
        if self.status != JobStatus::Running {
            return None;
        }
        let mut decisions = Vec::new();
        let spare_slots: Vec<SlotRef> = free
            .iter()
            .filter(|s| !self.slot_of_group.contains(s))
            .cloned()
            .collect();
        let mut spare_left = spare_slots.len() as u32;
        let mut spare = spare_slots.into_iter();
        for v in self.graph.decidable() {
            if self.deciding.contains(&v.0) {
                continue;
            }
            let have = self.slots_for(v);
            let slots = have + spare_left;
            let is_source = self.graph.job_graph().inputs(v).is_empty();
            // A consumer's bytes per subpartition index (none for a source).
            let bytes = if is_source {
                Vec::new()
            } else {
                self.input_bytes(v)
            };
            let decision = if is_source {
                let Some(input) = self.source_bytes.get(&v.0) else {
                    continue;
                };
                decider.decide_source(*input, slots)
            } else {
                decider.decide_within(&bytes, slots)
            };
            let decision = match decision {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(job = %self.id, "cannot decide the parallelism of vertex {}: {e}", v.0);
                    continue;
                }
            };
            let bytes_per_subtask = decision
                .subpartition_ranges
                .iter()
                .map(|r| bytes[r.start as usize..r.end as usize].iter().sum())
                .collect();
            let largest_subpartition_bytes = bytes.iter().copied().max().unwrap_or(0);
            // Held from now on, so nothing else takes them before the decision applies.
            for _ in have..decision.parallelism {
                if let Some(slot) = spare.next() {
                    self.slot_of_group.push(slot);
                    spare_left -= 1;
                }
            }
            self.deciding.insert(v.0);
            decisions.push(VertexDecision {
                vertex: v.0,
                parallelism: decision.parallelism,
                subpartition_ranges: decision
                    .subpartition_ranges
                    .iter()
                    .map(|r| (r.start, r.end))
                    .collect(),
                input_bytes: decision.input_bytes,
                bytes_per_subtask,
                largest_subpartition_bytes,
                reason: decision.reason,
                // Stamped by the driver, which has the clock.
                time_ms: 0,
            });
        }
        (!decisions.is_empty()).then(|| Action::DecideParallelism {
            job_id: self.id.clone(),
            decisions,
        })
    }

    /// Slots a vertex of its slot sharing group may use: the job's slots less those the other
    /// slot sharing groups take. (Slots are added at the end of the job's list: a job whose
    /// vertices decided at run time are all in one slot sharing group, as every DataStream job
    /// is, keeps each group's slot.)
    fn slots_for(&self, v: VertexIndex) -> u32 {
        let group = &self.graph.job_graph().vertex(v).slot_sharing_group;
        let others = slots::execution_slot_sharing_groups(&self.graph)
            .iter()
            .filter(|g| &g.slot_sharing_group != group)
            .count();
        self.slot_of_group.len().saturating_sub(others).max(1) as u32
    }

    /// Bytes per subpartition index over every producer partition of `v`'s all-to-all inputs
    /// (broadcast inputs are read whole by every subtask and do not count).
    fn input_bytes(&self, v: VertexIndex) -> Vec<u64> {
        let job = self.graph.job_graph();
        let mut bytes = vec![0u64; job.vertex(v).max_parallelism as usize];
        for &r in job.inputs(v) {
            let ds = job.data_set(r);
            if ds.pattern != DistributionPattern::AllToAll || ds.partitioner == Partitioner::Broadcast {
                continue;
            }
            for partition in &self.graph.result(r).partitions {
                let id: ResultPartitionId = self.partition_id(partition.id);
                if let Some(stats) = self.shuffle.stats(&id) {
                    for (total, b) in bytes.iter_mut().zip(&stats.bytes_per_subpartition) {
                        *total += b;
                    }
                }
            }
        }
        bytes
    }

    /// Takes decisions (logged, or restored from the log) into the graph: the vertices get their
    /// subtasks, and a running job deploys the regions that became ready.
    pub fn apply_decisions(&mut self, decisions: &[VertexDecision]) -> Vec<Action> {
        let before: Vec<(ExecutionVertexId, Option<SlotRef>, TaskCounters)> = self
            .graph
            .execution_vertices()
            .map(|e| {
                let g = self.graph.global_index(e.id);
                (e.id, self.location[g].clone(), self.counters[g])
            })
            .collect();
        let mut changed = false;
        for d in decisions {
            self.deciding.remove(&d.vertex);
            let v = VertexIndex(d.vertex);
            if self.graph.job_graph().vertices().len() <= d.vertex as usize || self.graph.is_decided(v) {
                continue;
            }
            let ranges = (!d.subpartition_ranges.is_empty())
                .then(|| d.subpartition_ranges.iter().map(|&(s, e)| s..e).collect());
            match self.graph.decide(v, d.parallelism, ranges) {
                Ok(()) => {
                    tracing::info!(job = %self.id, vertex = %self.graph.job_graph().vertex(v).id, parallelism = d.parallelism, "parallelism decided: {}", d.reason);
                    self.decisions.insert(d.vertex, d.clone());
                    changed = true;
                }
                Err(e) => {
                    tracing::error!(job = %self.id, "cannot apply the decision for vertex {}: {e}", d.vertex)
                }
            }
        }
        if !changed {
            return Vec::new();
        }
        self.regions = PipelinedRegions::compute(&self.graph);
        self.strategy = PipelinedRegionSchedulingStrategy::resume(&self.graph, &self.regions);
        self.group_of_task = super::group_of_task(&self.graph);
        let n = self.graph.task_count();
        self.location = vec![None; n];
        self.counters = vec![TaskCounters::default(); n];
        for (id, location, counters) in before {
            let g = self.graph.global_index(id);
            self.location[g] = location;
            self.counters[g] = counters;
        }
        if self.status != JobStatus::Running {
            return Vec::new();
        }
        // Decisions never exceed the job's slots; a restored decision on a smaller cluster shares
        // the slots it has rather than fail here.
        self.share_slots(slots::execution_slot_sharing_groups(&self.graph).len());
        let ready = self.strategy.schedule_ready_regions(&self.graph, &self.regions);
        self.deploy(&ready)
    }

    /// Input sizes of the sources decided at run time, measured by the JobManager (`None`: not a
    /// file source, or its size could not be read: the source task reports why).
    pub fn set_source_bytes(&mut self, bytes: BTreeMap<u32, Option<u64>>) {
        self.source_bytes.extend(bytes);
    }

    /// Sources whose parallelism is decided at run time and not decided yet.
    pub fn undecided_sources(&self) -> Vec<u32> {
        self.graph
            .decidable()
            .into_iter()
            .filter(|&v| self.graph.job_graph().inputs(v).is_empty())
            .map(|v| v.0)
            .collect()
    }

    /// The decisions taken so far, by vertex index.
    pub fn decisions(&self) -> &BTreeMap<u32, VertexDecision> {
        &self.decisions
    }

    /// Whether every vertex has its parallelism (a job is finished only then).
    pub fn fully_decided(&self) -> bool {
        self.graph.job_graph().vertices().iter().all(|v| v.is_decided())
    }
}
