//! Job graph generation (Flink's `StreamingJobGraphGenerator`): chains operators connected by
//! forward edges of equal parallelism into one JobVertex, and instantiates one vertex's chain for
//! one subtask ([`BuiltJob::create_task`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use floe_scheduler::job_graph::{
    PARALLELISM_DECIDED_AT_RUN_TIME, ResultPartitionType, VertexIndex, default_max_parallelism,
};
use floe_scheduler::{JobEdge, JobGraph, JobVertex, Partitioner};
use floe_shuffle::{InputGate, UnionInputGate};

use crate::api::{NodeInput, NodeKind, Par, RuntimeMode, StreamExecutionEnvironment, StreamNode, lock};
use crate::data::fnv1a32;
use crate::error::{Error, Result};
use crate::operators::OpContext;
use crate::operators::SideOutputs;
use crate::task::{OutputRoute, StreamType, Task, TaskContext, WriterSetup};

/// One vertex's operator chain and how its outputs route records.
#[derive(Clone)]
struct VertexPlan {
    /// Stream node indices, head first.
    chain: Vec<usize>,
    /// The chain tail's outputs (the vertex outputs reading its main output).
    outputs: Vec<OutputRoute>,
    /// Side outputs read through the vertex's outputs: the chain node emitting them, the tag, its
    /// record type and the vertex outputs reading it.
    side_outputs: Vec<SidePlan>,
    /// How many outputs (partition writers) the vertex has.
    num_outputs: usize,
    /// Per input gate, in JobGraph input order: the type of the records arriving on it and which
    /// input of the head operator it feeds.
    inputs: Vec<(Option<Arc<dyn StreamType>>, u8)>,
}

#[derive(Clone)]
struct SidePlan {
    node: usize,
    tag: String,
    ty: Arc<dyn StreamType>,
    routes: Vec<OutputRoute>,
}

/// Each node's input edges with unions and side outputs resolved: an edge into a union becomes
/// one edge from each of the union's inputs (with the consumer's partitioner and key, where it set
/// them), an edge into a side output one from the node emitting it, tagged; so every edge starts
/// at an operator or source. Union and side-output nodes themselves have none.
fn is_virtual(kind: &NodeKind) -> bool {
    matches!(kind, NodeKind::Union | NodeKind::SideOutput(_))
}

fn resolve_edges(nodes: &[StreamNode]) -> Vec<Vec<NodeInput>> {
    fn expand(nodes: &[StreamNode], edge: &NodeInput, out: &mut Vec<NodeInput>) {
        match &nodes[edge.node].kind {
            NodeKind::SideOutput(id) => {
                let producer = &nodes[edge.node];
                if let (Some(from), Some(ty)) = (producer.inputs.first(), producer.out_type.clone()) {
                    out.push(NodeInput {
                        node: from.node,
                        tag: Some((id.clone(), ty)),
                        ..edge.clone()
                    });
                }
            }
            NodeKind::Union => {
                for member in &nodes[edge.node].inputs {
                    let resolved = NodeInput {
                        node: member.node,
                        partitioner: edge.partitioner.or(member.partitioner),
                        key: edge.key.clone(),
                        side: edge.side,
                        tag: None,
                    };
                    expand(nodes, &resolved, out);
                }
            }
            _ => out.push(edge.clone()),
        }
    }
    nodes
        .iter()
        .map(|node| {
            let mut out = Vec::new();
            if !is_virtual(&node.kind) {
                for edge in &node.inputs {
                    expand(nodes, edge, &mut out);
                }
            }
            out
        })
        .collect()
}

/// A job ready to schedule and run: the JobGraph plus what each vertex runs.
#[derive(Clone)]
pub struct BuiltJob {
    graph: JobGraph,
    nodes: Arc<Vec<StreamNode>>,
    plans: Vec<VertexPlan>,
    mode: RuntimeMode,
    buffer_timeout: Option<Duration>,
    buffer_size: usize,
    configuration: BTreeMap<String, String>,
    fingerprint: String,
    /// A timed job's `pipeline.auto-watermark-interval`; `None` when the job has no event time.
    time_interval: Option<Duration>,
    /// Each stream node's operator uid ([`crate::operator_ids`]).
    uids: Arc<Vec<String>>,
}

impl std::fmt::Debug for BuiltJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltJob")
            .field("graph", &self.graph)
            .field("mode", &self.mode)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl StreamExecutionEnvironment {
    /// Turns the recorded stream graph into a JobGraph (chained) and the per-vertex plans.
    pub fn build(&self) -> Result<BuiltJob> {
        let (nodes, mode, timed) = {
            let g = lock(&self.shared);
            if let Some(e) = g.errors.first() {
                return Err(Error::Graph(e.clone()));
            }
            (g.nodes.clone(), g.mode, g.timed)
        };
        if nodes.is_empty() {
            return Err(Error::Graph("the job defines no operators".into()));
        }
        if !nodes.iter().any(|n| matches!(n.kind, NodeKind::Sink(_))) {
            return Err(Error::Graph("the job defines no sink".into()));
        }
        let uids = crate::operator_ids::operator_uids(&nodes)?;
        let n = nodes.len();
        let edges = resolve_edges(&nodes);
        let is_union = |i: usize| is_virtual(&nodes[i].kind);
        let mut par = vec![0u32; n];
        let mut consumers = vec![0usize; n];
        for (i, node) in nodes.iter().enumerate() {
            par[i] = match (node.parallelism, edges[i].first()) {
                (Par::Fixed(p), _) => p,
                (Par::SameAsInput, Some(input)) => par[input.node],
                _ => self.parallelism,
            };
            // A side output's consumers never chain: they do not count against the main output's.
            for input in edges[i].iter().filter(|e| e.tag.is_none()) {
                consumers[input.node] += 1;
            }
        }
        let mut partitioners: Vec<Vec<Partitioner>> = vec![Vec::new(); n];
        let mut chained = vec![false; n];
        let mut head = (0..n).collect::<Vec<_>>();
        for (i, node) in nodes.iter().enumerate() {
            for input in &edges[i] {
                let same = par[input.node] == par[i];
                let p = input.partitioner.unwrap_or(if same {
                    Partitioner::Forward
                } else {
                    Partitioner::Rebalance
                });
                // A forward consumer decided at run time takes its producer's parallelism.
                let decided_later = par[input.node] == 0 || par[i] == 0;
                if p == Partitioner::Forward && !same && !decided_later {
                    return Err(Error::Graph(format!(
                        "forward partitioning between {} (parallelism {}) and {} (parallelism {})",
                        nodes[input.node].name, par[input.node], node.name, par[i]
                    )));
                }
                partitioners[i].push(p);
            }
            // Only an operator with one input edge chains to it (as Flink's chaining rule).
            if let ([input], [p]) = (edges[i].as_slice(), partitioners[i].as_slice()) {
                chained[i] = self.chaining
                    && !node.new_chain
                    && input.tag.is_none()
                    && node.two_input.is_none()
                    && *p == Partitioner::Forward
                    && par[input.node] == par[i]
                    && consumers[input.node] == 1;
                if chained[i] {
                    head[i] = head[input.node];
                }
            }
        }
        // Vertices in order of their head nodes; ids from the head's kind, made unique.
        let heads: Vec<usize> = (0..n).filter(|&i| head[i] == i && !is_union(i)).collect();
        let mut seen: HashMap<&str, u32> = HashMap::new();
        let mut vertex_of_head = HashMap::new();
        let mut vertices = Vec::new();
        let mut chains = Vec::new();
        for &h in &heads {
            // The head's uid (unique), else its kind, made unique.
            let named = nodes[h].uid.unwrap_or(nodes[h].id);
            let count = seen.entry(named).or_insert(0);
            *count += 1;
            let id = if *count == 1 {
                named.to_string()
            } else {
                format!("{named}-{count}")
            };
            let chain: Vec<usize> = (0..n).filter(|&i| head[i] == h).collect();
            let name = chain
                .iter()
                .map(|&i| nodes[i].name.as_str())
                .collect::<Vec<_>>()
                .join(" -> ");
            let p = par[h];
            if p == PARALLELISM_DECIDED_AT_RUN_TIME && mode == RuntimeMode::Streaming {
                return Err(Error::config(
                    "parallelism.default",
                    "-1",
                    "a parallelism decided at run time (auto) is adaptive batch scheduling: it needs \
                     execution.runtime-mode BATCH; a STREAMING job needs a positive parallelism",
                ));
            }
            // Decided at run time: one key group (subpartition) per parallelism it may get.
            let default_max = match p {
                PARALLELISM_DECIDED_AT_RUN_TIME => self.adaptive_max_parallelism,
                p => default_max_parallelism(p),
            };
            vertex_of_head.insert(h, vertices.len());
            vertices.push(JobVertex {
                id,
                name,
                parallelism: p,
                max_parallelism: self.max_parallelism.unwrap_or(default_max).max(p),
                slot_sharing_group: "default".into(),
            });
            chains.push(chain);
        }
        // Edges in stream-node order: the JobGraph's data set i is edge i.
        let mut job_edges = Vec::new();
        let mut edge_nodes = Vec::new();
        for i in 0..n {
            if chained[i] {
                continue;
            }
            for (k, input) in edges[i].iter().enumerate() {
                let (from, to) = (vertex_of_head[&head[input.node]], vertex_of_head[&i]);
                job_edges.push(JobEdge {
                    from: vertices[from].id.clone(),
                    to: vertices[to].id.clone(),
                    pattern: partitioners[i][k].default_pattern(),
                    partitioner: partitioners[i][k],
                    partition_type: ResultPartitionType::PipelinedBounded,
                });
                edge_nodes.push((i, k));
            }
        }
        let graph = JobGraph::new(vertices.clone(), job_edges)?;
        let graph = match mode {
            RuntimeMode::Streaming => graph.streaming(),
            RuntimeMode::Batch => graph.with_shuffle_mode(self.shuffle_mode),
        };
        let mut plans = Vec::with_capacity(graph.vertices().len());
        for (vi, v) in graph.vertices().iter().enumerate() {
            let ours = vertices
                .iter()
                .position(|x| x.id == v.id)
                .ok_or_else(|| Error::Graph(format!("vertex {} lost", v.id)))?;
            let chain = chains[ours].clone();
            let (mut outputs, mut side_outputs) = (Vec::new(), Vec::<SidePlan>::new());
            let vertex_outputs = graph.outputs(VertexIndex(vi as u32));
            for (index, r) in vertex_outputs.iter().enumerate() {
                let (consumer, k) = edge_nodes[r.0 as usize];
                let edge = &edges[consumer][k];
                let ds = graph.data_set(*r);
                let route = OutputRoute {
                    partitioner: ds.partitioner,
                    key: edge.key.clone(),
                    max_parallelism: graph.vertex(ds.consumer).max_parallelism,
                    index,
                };
                match &edge.tag {
                    None => outputs.push(route),
                    Some((tag, ty)) => match side_outputs
                        .iter_mut()
                        .find(|s| s.node == edge.node && s.tag == *tag)
                    {
                        Some(side) => side.routes.push(route),
                        None => side_outputs.push(SidePlan {
                            node: edge.node,
                            tag: tag.clone(),
                            ty: ty.clone(),
                            routes: vec![route],
                        }),
                    },
                }
            }
            let inputs = graph
                .inputs(VertexIndex(vi as u32))
                .iter()
                .map(|r| {
                    let (consumer, k) = edge_nodes[r.0 as usize];
                    let edge = &edges[consumer][k];
                    // A side output's records are of its tag's type, not its producer's.
                    let ty = match &edge.tag {
                        Some((_, ty)) => Some(ty.clone()),
                        None => nodes[edge.node].out_type.clone(),
                    };
                    (ty, edge.side)
                })
                .collect();
            plans.push(VertexPlan {
                chain,
                outputs,
                side_outputs,
                num_outputs: vertex_outputs.len(),
                inputs,
            });
        }
        let fingerprint = format!(
            "{:016x}{:08x}",
            fnv64(format!("{graph:?}|{mode:?}").as_bytes()),
            fnv1a32(format!("{graph:?}").as_bytes())
        );
        Ok(BuiltJob {
            graph,
            nodes: Arc::new(nodes),
            plans,
            mode,
            buffer_timeout: self.buffer_timeout,
            buffer_size: self.buffer_size,
            configuration: self.configuration.clone(),
            fingerprint,
            time_interval: timed.then_some(self.auto_watermark_interval),
            uids: Arc::new(uids),
        })
    }
}

impl BuiltJob {
    pub fn job_graph(&self) -> &JobGraph {
        &self.graph
    }

    /// Each vertex's id, its chain's stream nodes (head first) and whether it is keyed.
    fn chains(&self) -> Vec<(String, &[usize], bool)> {
        self.plans
            .iter()
            .enumerate()
            .map(|(v, p)| {
                let id = self.graph.vertices()[v].id.clone();
                (id, p.chain.as_slice(), self.is_keyed(v as u32))
            })
            .collect()
    }

    /// Each vertex's operators that own its tasks' state, by uid: what checkpoints record and
    /// restores map state by ([`floe_checkpoint::owners`]).
    pub fn state_owners(&self) -> BTreeMap<String, floe_checkpoint::StateOwners> {
        crate::operator_ids::state_owners(&self.nodes, &self.uids, &self.chains())
    }

    /// Every operator with its vertex, uid and the state it keeps (`floe plan`).
    pub fn operators(&self) -> Vec<crate::OperatorView> {
        crate::operator_ids::operator_views(&self.nodes, &self.uids, &self.chains())
    }

    /// The operators that keep state but have no uid of the job's: their state maps by their place
    /// in the graph, so an operator added before them leaves it unclaimed (the JobManager warns).
    pub fn stateful_operators_without_uid(&self) -> Vec<String> {
        self.operators()
            .into_iter()
            .filter(|o| !o.uid_set && !o.state.is_empty())
            .map(|o| format!("{} (vertex {})", o.name, o.vertex))
            .collect()
    }

    /// Stable hash of the JobGraph (structure, chain names, partition types): equal in every
    /// process that built the job from the same JobArgs with the same code.
    pub fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    pub fn runtime_mode(&self) -> RuntimeMode {
        self.mode
    }

    /// The bytes a source vertex will read, when its source reads files (`None`: another kind of
    /// source, or not a source): what a source parallelism decided at run time is inferred from.
    pub async fn source_input_bytes(&self, vertex: u32) -> Result<Option<u64>> {
        let Some(url) = self
            .plans
            .get(vertex as usize)
            .and_then(|p| p.chain.first())
            .and_then(|&head| self.nodes[head].source_input.as_ref())
        else {
            return Ok(None);
        };
        let location = crate::io::locate(url, &self.configuration)?;
        let files = crate::io::list_files(&location).await?;
        Ok(Some(files.iter().map(|(_, size)| size).sum()))
    }

    /// `execution.buffer-timeout` (`None` = -1: flush only full buffers).
    pub fn buffer_timeout(&self) -> Option<Duration> {
        self.buffer_timeout
    }

    /// `taskmanager.memory.segment-size`.
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    pub fn configuration(&self) -> &BTreeMap<String, String> {
        &self.configuration
    }

    /// Whether `vertex` keeps keyed state: keyed operators are fed by a hash exchange (a `key_by`
    /// always starts a new task).
    pub fn is_keyed(&self, vertex: u32) -> bool {
        self.job_graph()
            .data_sets()
            .iter()
            .any(|d| d.consumer.0 == vertex && d.partitioner == floe_scheduler::Partitioner::Hash)
    }

    /// The max parallelism of `vertex` and the key groups its subtask `subtask` owns (at
    /// `parallelism`): what its keyed state holds.
    pub fn key_groups(&self, vertex: u32, subtask: u32, parallelism: u32) -> (u32, std::ops::Range<u32>) {
        let max_parallelism = self
            .job_graph()
            .vertices()
            .get(vertex as usize)
            .map_or(parallelism, |v| v.max_parallelism.max(parallelism));
        let owned = crate::data::key_group_range_for_operator(max_parallelism, parallelism.max(1), subtask);
        (max_parallelism, *owned.start()..*owned.end() + 1)
    }

    /// Whether a subtask of `vertex` with these many input gates and partition writers fits the job
    /// (what [`BuiltJob::create_task`] checks first; a TaskManager checks it before accepting a task).
    pub fn check_task(
        &self,
        vertex: u32,
        subtask: u32,
        parallelism: u32,
        inputs: usize,
        outputs: usize,
    ) -> Result<()> {
        let fail = |message: String| Error::Task { vertex, message };
        let plan = self
            .plans
            .get(vertex as usize)
            .ok_or_else(|| fail(format!("the job has {} vertices", self.plans.len())))?;
        let expected_inputs = plan.inputs.len();
        if inputs != expected_inputs {
            return Err(fail(format!(
                "expected {expected_inputs} input gates, got {inputs}"
            )));
        }
        if outputs != plan.num_outputs {
            return Err(fail(format!(
                "expected {} partition writers, got {outputs}",
                plan.num_outputs
            )));
        }
        if parallelism == 0 || subtask >= parallelism {
            return Err(fail(format!("subtask {subtask} of parallelism {parallelism}")));
        }
        Ok(())
    }

    /// Instantiates the operator chain of JobGraph vertex `vertex` for one subtask.
    pub fn create_task(&self, vertex: u32, ctx: TaskContext) -> Result<Task> {
        let fail = |message: String| Error::Task { vertex, message };
        let plan = self
            .plans
            .get(vertex as usize)
            .ok_or_else(|| fail(format!("the job has {} vertices", self.plans.len())))?;
        self.check_task(
            vertex,
            ctx.subtask,
            ctx.parallelism,
            ctx.inputs.len(),
            ctx.outputs.len(),
        )?;
        let (max_parallelism, key_groups) = self.key_groups(vertex, ctx.subtask, ctx.parallelism);
        let op_ctx = OpContext {
            job_id: ctx.job_id.clone(),
            operator_name: plan
                .chain
                .first()
                .map(|&i| self.nodes[i].name.clone())
                .unwrap_or_default(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            attempt: ctx.attempt,
            configuration: ctx.configuration.clone(),
            metrics: ctx.metrics.clone(),
            key_groups,
            max_parallelism,
            keyed_state: std::sync::Arc::new(std::sync::Mutex::new(ctx.keyed_state)),
            restore: ctx.restore.clone(),
            checkpointing: ctx.checkpointing.is_some(),
            time: self
                .time_interval
                .map(|interval| std::sync::Arc::new(crate::time::TaskTime::new(interval))),
            side_outputs: Default::default(),
        };
        let (flush_each_record, flush_interval) = match ctx.buffer_timeout {
            Some(t) if t.is_zero() => (true, None),
            other => (false, other),
        };
        let tail = &self.nodes[*plan.chain.last().ok_or_else(|| fail("empty chain".into()))?];
        let setup = WriterSetup {
            subpartitions: ctx.outputs.iter().map(|w| w.num_subpartitions()).collect(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            buffer_size: ctx.buffer_size,
            flush_each_record,
            metrics: ctx.metrics.clone(),
            time: op_ctx.time.clone(),
        };
        // The context an operator is built in: with the writers of its side outputs something
        // reads; after it is built, none may be left (only process functions and windows emit).
        let node_ctx = |i: usize| -> Result<OpContext> {
            let mut sides = SideOutputs::default();
            for side in plan.side_outputs.iter().filter(|s| s.node == i) {
                sides
                    .0
                    .push((side.tag.clone(), side.ty.side_writer(&side.routes, &setup)?));
            }
            let mut c = op_ctx.clone();
            c.operator_name = self.nodes[i].name.clone();
            c.side_outputs = Arc::new(std::sync::Mutex::new((!sides.0.is_empty()).then_some(sides)));
            Ok(c)
        };
        let built = |i: usize, c: &OpContext| -> Result<()> {
            match c.side_outputs.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(sides) => Err(fail(format!(
                    "get_side_output: {} emits no side outputs (process functions and windows do), \
                     yet {sides:?} is read",
                    self.nodes[i].name
                ))),
                None => Ok(()),
            }
        };
        let (mut down, sink, ops_end) = match &tail.kind {
            NodeKind::Sink(factory) => {
                let mut c = op_ctx.clone();
                c.operator_name = tail.name.clone();
                let (op, io) = factory(&c, ctx.metrics.clone())?;
                (op, Some(io), plan.chain.len() - 1)
            }
            _ => {
                let ty = tail
                    .out_type
                    .as_ref()
                    .ok_or_else(|| fail("tail has no output type".into()))?;
                (ty.writer(&plan.outputs, &setup)?, None, plan.chain.len())
            }
        };
        for &i in plan.chain.iter().take(ops_end).skip(1).rev() {
            match &self.nodes[i].kind {
                NodeKind::Operator(factory) => {
                    let c = node_ctx(i)?;
                    down = factory(&c, down)?;
                    built(i, &c)?;
                }
                _ => return Err(fail(format!("{} cannot be chained", self.nodes[i].name))),
            }
        }
        let first = &self.nodes[plan.chain[0]];
        let channels: Vec<usize> = ctx.inputs.iter().map(|g| g.num_channels()).collect();
        let input_head = |down| -> Result<_> {
            if let Some(two) = &first.two_input {
                // Which input of the operator each channel (numbered across the gates) feeds.
                let sides = plan
                    .inputs
                    .iter()
                    .zip(&channels)
                    .flat_map(|((_, side), &n)| std::iter::repeat_n(*side, n))
                    .collect();
                return two.input_head(down, ctx.metrics.clone(), op_ctx.time.clone(), sides);
            }
            let (ty, _) = plan.inputs.first().ok_or_else(|| fail("no input".into()))?;
            let ty = ty
                .as_ref()
                .ok_or_else(|| fail("input has no record type".into()))?;
            let total = channels.iter().sum::<usize>().max(1);
            ty.input_head(down, ctx.metrics.clone(), op_ctx.time.clone(), total)
        };
        let head = match &first.kind {
            NodeKind::Source(factory) => factory(&op_ctx, down)?,
            NodeKind::Operator(factory) if ops_end > 0 => {
                let c = node_ctx(plan.chain[0])?;
                let op = factory(&c, down)?;
                built(plan.chain[0], &c)?;
                input_head(op)?
            }
            // The chain is just the sink: records go straight from the input into it.
            _ => input_head(down)?,
        };
        let mut inputs = ctx.inputs;
        let input: Option<Box<dyn InputGate>> = match inputs.len() {
            0 => None,
            1 => inputs.pop(),
            // More than one input (a union, a two-input operator): read as one gate, channels
            // numbered across the gates in order, barriers aligned across all of them.
            _ => Some(Box::new(UnionInputGate::new(inputs))),
        };
        Ok(Task {
            vertex,
            metrics: ctx.metrics.clone(),
            head,
            input,
            outputs: ctx.outputs,
            sink,
            flush_interval,
            checkpointing: ctx.checkpointing,
            time: op_ctx.time.clone(),
        })
    }
}
