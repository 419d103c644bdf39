//! The DataStream API (Flink's names): [`StreamExecutionEnvironment`] records a stream graph of
//! sources, transformations and sinks; [`StreamExecutionEnvironment::build`] turns it into a
//! [`crate::BuiltJob`].

use std::any::Any;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floe_scheduler::job_graph::{DEFAULT_MAX_PARALLELISM, PARALLELISM_DECIDED_AT_RUN_TIME};
use floe_scheduler::{BatchShuffleMode, Partitioner};

use crate::data::Data;
use crate::error::{Error, Result};
use crate::io::{self, CollectionSource, FileSinkIo, GeneratorSource, PrintIo, SequenceSource, SinkIo};
use crate::operators::{
    AnyOp, BoxOp, Collector, FilterOp, FlatMapOp, KeyRefFn, MapOp, OpContext, OpFactory, OutputTag, downcast,
    erase,
};
use crate::pace::{Pacer, Stride};
use crate::task::{Head, SourceHead, StreamType, TypeOf};
use crate::time::{TimestampsAndWatermarks, WatermarkStrategy};

mod async_io;
mod connected;
mod files;
mod keyed;
mod rich;
mod window;

pub use crate::types::RuntimeMode;
use crate::types::TaskMetrics;
pub use async_io::AsyncDataStream;
pub use connected::{
    BroadcastConnectedStream, CoGroupKeyed, CoGroupWhere, CoGroupWindowed, CoGroupedStreams,
    ConnectedStreams, IntervalJoined, JoinedStreams, KeyedBroadcastConnectedStream, KeyedConnectedStreams,
};
pub use keyed::KeyedStream;
pub use window::WindowedStream;

pub(crate) type SourceFactory = Arc<dyn Fn(&OpContext, AnyOp) -> Result<Box<dyn Head>> + Send + Sync>;
pub(crate) type SinkFactory =
    Arc<dyn Fn(&OpContext, Arc<TaskMetrics>) -> Result<(AnyOp, Box<dyn SinkIo>)> + Send + Sync>;

#[derive(Clone)]
pub(crate) enum NodeKind {
    Source(SourceFactory),
    Operator(OpFactory),
    Sink(SinkFactory),
    /// Flink's `union`: not an operator. Its consumers read from each of its inputs directly
    /// (the edges are resolved when the job is built).
    Union,
    /// The side output of this id of its input node: its consumers read that node's writer for
    /// the tag (the edges are resolved when the job is built).
    SideOutput(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Par {
    Default,
    Fixed(u32),
    SameAsInput,
}

#[derive(Clone)]
pub(crate) struct NodeInput {
    pub node: usize,
    /// Explicit partitioner; `None` = forward if parallelism matches, rebalance otherwise.
    pub partitioner: Option<Partitioner>,
    /// `KeyHasher<T>` for hash edges.
    pub key: Option<Arc<dyn Any + Send + Sync>>,
    /// Which input of a two-input operator the edge feeds (0: the first, 1: the second).
    pub side: u8,
    /// The edge reads its producer's side output of this id (records of type `.1`), not its main
    /// output.
    pub tag: Option<(String, Arc<dyn StreamType>)>,
}

impl NodeInput {
    /// The first (or only) input from `node`.
    pub(crate) fn from(node: usize, partitioner: Option<Partitioner>) -> Self {
        NodeInput {
            node,
            partitioner,
            key: None,
            side: 0,
            tag: None,
        }
    }
}

/// One transformation of the stream graph.
#[derive(Clone)]
pub(crate) struct StreamNode {
    /// Its kind (`reduce`, `sink`, `broadcast-process`).
    pub id: &'static str,
    /// The uid the job set (`uid()`): its state's name in checkpoints ([`crate::operator_ids`]),
    /// and the name of the vertex it heads (else the vertex is named after its kind).
    pub uid: Option<&'static str>,
    pub name: String,
    pub parallelism: Par,
    /// Its input edges: none for a source, one for most operators, one per stream of a union
    /// feeding it, and both sides of a two-input operator.
    pub inputs: Vec<NodeInput>,
    pub kind: NodeKind,
    /// A two-input operator's input decoder (records of its first and second input type); `None`:
    /// the node's input records are of its input node's output type.
    pub two_input: Option<Arc<dyn crate::task::TwoInputType>>,
    /// Operations on the output record type (`None` for sinks).
    pub out_type: Option<Arc<dyn StreamType>>,
    /// Flink's `startNewChain()`: never chained to its input.
    pub new_chain: bool,
    /// A file source's input location: its size decides the source's parallelism when that is
    /// decided at run time.
    pub source_input: Option<String>,
}

pub(crate) struct Shared {
    pub nodes: Vec<StreamNode>,
    pub mode: RuntimeMode,
    /// Some stream has event time (timestamps assigned, timers or windows): the job's exchanges
    /// carry stream elements with timestamps and watermarks (`crate::time`).
    pub timed: bool,
    /// What the API refused while the job was defined (a window size of 0, ...): `build` fails
    /// with the first.
    pub errors: Vec<String>,
}

pub(crate) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while holding the lock leaves the node list consistent (pushes are atomic).
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Flink's `taskmanager.memory.segment-size` default.
pub const DEFAULT_BUFFER_SIZE: usize = 32 * 1024;
/// Flink's `execution.buffer-timeout` default.
pub const DEFAULT_BUFFER_TIMEOUT: Duration = Duration::from_millis(100);

/// The entry point of a job: configuration plus the stream graph being recorded.
///
/// A job is a function that records its graph on the environment; `floe run -f` (or the
/// JobManager) builds the graph and deploys it.
///
/// ```
/// use floe_datastream::{Collector, Result, StreamExecutionEnvironment};
///
/// fn word_counts(env: &mut StreamExecutionEnvironment, _args: &[String]) -> Result<()> {
///     env.from_collection(vec!["to be or not to be".to_string()])
///         .flat_map(|line: String, out: &mut dyn Collector<(String, u64)>| {
///             for word in line.split(' ') {
///                 out.collect((word.to_string(), 1));
///             }
///         })
///         .key_by(|p: &(String, u64)| p.0.clone())
///         .sum()
///         .uid("counts")
///         .print();
///     Ok(())
/// }
///
/// let mut env = StreamExecutionEnvironment::new();
/// word_counts(&mut env, &[])?;
/// let job = env.build()?;
/// // The keyed sum keeps its counts as keyed state, under the uid the job gave it.
/// assert!(job.operators().iter().any(|o| o.uid == "counts" && o.state.contains(&"keyed")));
/// # Ok::<(), floe_datastream::Error>(())
/// ```
pub struct StreamExecutionEnvironment {
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) configuration: BTreeMap<String, String>,
    pub(crate) parallelism: u32,
    pub(crate) max_parallelism: Option<u32>,
    /// `execution.batch.adaptive.auto-parallelism.max-parallelism`: the key groups (subpartitions)
    /// of a vertex whose parallelism is decided at run time, unless `pipeline.max-parallelism`.
    pub(crate) adaptive_max_parallelism: u32,
    pub(crate) shuffle_mode: BatchShuffleMode,
    pub(crate) buffer_timeout: Option<Duration>,
    pub(crate) buffer_size: usize,
    pub(crate) chaining: bool,
    /// `pipeline.auto-watermark-interval`.
    pub(crate) auto_watermark_interval: Duration,
}

impl std::fmt::Debug for StreamExecutionEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamExecutionEnvironment")
            .field("mode", &self.runtime_mode())
            .field("parallelism", &self.parallelism)
            .field("nodes", &lock(&self.shared).nodes.len())
            .finish()
    }
}

impl Default for StreamExecutionEnvironment {
    fn default() -> Self {
        StreamExecutionEnvironment {
            shared: Arc::new(Mutex::new(Shared {
                nodes: Vec::new(),
                mode: RuntimeMode::Streaming,
                timed: false,
                errors: Vec::new(),
            })),
            configuration: BTreeMap::new(),
            parallelism: 1,
            max_parallelism: None,
            adaptive_max_parallelism: DEFAULT_MAX_PARALLELISM,
            shuffle_mode: BatchShuffleMode::default(),
            buffer_timeout: Some(DEFAULT_BUFFER_TIMEOUT),
            buffer_size: DEFAULT_BUFFER_SIZE,
            chaining: true,
            auto_watermark_interval: crate::time::DEFAULT_AUTO_WATERMARK_INTERVAL,
        }
    }
}

/// Flink's key for the upper bound of a parallelism the adaptive batch scheduler decides.
pub const ADAPTIVE_MAX_PARALLELISM_KEY: &str = "execution.batch.adaptive.auto-parallelism.max-parallelism";

fn parse_u32(key: &str, v: &str) -> Result<u32> {
    match v.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Error::config(key, v, "expected a positive integer")),
    }
}

/// Parses Flink memory sizes: `32768`, `32kb`, `32 KiB`, `1m`, `1mb`.
pub fn parse_memory_size(key: &str, v: &str) -> Result<usize> {
    let s = v.trim().to_ascii_lowercase();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| Error::config(key, v, "expected a size like 32kb"))?;
    let mult = match unit.trim() {
        "" | "b" | "bytes" => 1,
        "k" | "kb" | "kib" | "kibibytes" => 1 << 10,
        "m" | "mb" | "mib" | "mebibytes" => 1 << 20,
        "g" | "gb" | "gib" | "gibibytes" => 1 << 30,
        _ => return Err(Error::config(key, v, "unknown size unit")),
    };
    match n.checked_mul(mult) {
        Some(b) if b > 0 => Ok(b),
        _ => Err(Error::config(key, v, "size out of range")),
    }
}

impl StreamExecutionEnvironment {
    /// STREAMING, parallelism 1, Flink's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// An environment configured by Flink's keys: `execution.runtime-mode`, `parallelism.default`,
    /// `pipeline.max-parallelism`, `execution.batch-shuffle-mode`, `execution.buffer-timeout` (ms;
    /// 0 = flush every record, -1 = only full buffers), `taskmanager.memory.segment-size`.
    pub fn from_configuration(configuration: &BTreeMap<String, String>) -> Result<Self> {
        let mut env = Self::new();
        env.configuration = configuration.clone();
        for (key, v) in configuration {
            match key.as_str() {
                "execution.runtime-mode" => {
                    env.set_runtime_mode(v.parse()?);
                }
                // Flink's -1 ("not set"): the adaptive batch scheduler decides from the data.
                "parallelism.default" if matches!(v.trim(), "-1" | "auto") => {
                    env.parallelism = PARALLELISM_DECIDED_AT_RUN_TIME
                }
                "parallelism.default" => env.parallelism = parse_u32(key, v)?,
                ADAPTIVE_MAX_PARALLELISM_KEY => env.adaptive_max_parallelism = parse_u32(key, v)?,
                "pipeline.max-parallelism" => env.max_parallelism = Some(parse_u32(key, v)?),
                "execution.batch-shuffle-mode" => {
                    env.shuffle_mode = v
                        .parse()
                        .map_err(|e: floe_scheduler::Error| Error::config(key, v, e.to_string()))?
                }
                "execution.buffer-timeout" => {
                    let t = v.trim().trim_end_matches("ms").trim();
                    env.buffer_timeout = match t.parse::<i64>() {
                        Ok(-1) => None,
                        Ok(ms) if ms >= 0 => Some(Duration::from_millis(ms as u64)),
                        _ => return Err(Error::config(key, v, "expected milliseconds >= 0, or -1")),
                    }
                }
                "taskmanager.memory.segment-size" => env.buffer_size = parse_memory_size(key, v)?,
                crate::time::AUTO_WATERMARK_INTERVAL_KEY => {
                    env.auto_watermark_interval = crate::checkpoint::parse_duration(v)
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| {
                            Error::config(key, v, "expected a positive duration like \"200 ms\" or \"1 s\"")
                        })?
                }
                _ => {}
            }
        }
        Ok(env)
    }

    pub fn configuration(&self) -> &BTreeMap<String, String> {
        &self.configuration
    }

    pub fn set_parallelism(&mut self, parallelism: u32) -> &mut Self {
        self.parallelism = parallelism.max(1);
        self
    }

    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    pub fn set_max_parallelism(&mut self, max_parallelism: u32) -> &mut Self {
        self.max_parallelism = Some(max_parallelism);
        self
    }

    pub fn set_runtime_mode(&mut self, mode: RuntimeMode) -> &mut Self {
        lock(&self.shared).mode = mode;
        self
    }

    pub fn runtime_mode(&self) -> RuntimeMode {
        lock(&self.shared).mode
    }

    pub fn set_batch_shuffle_mode(&mut self, mode: BatchShuffleMode) -> &mut Self {
        self.shuffle_mode = mode;
        self
    }

    /// Flink's `disableOperatorChaining()`: every operator becomes its own JobVertex.
    pub fn disable_operator_chaining(&mut self) -> &mut Self {
        self.chaining = false;
        self
    }

    pub fn set_buffer_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.buffer_timeout = timeout;
        self
    }

    fn add_source<T: Data>(
        &self,
        id: &'static str,
        name: String,
        par: Par,
        factory: SourceFactory,
    ) -> DataStream<T> {
        let node = push_node(
            &self.shared,
            StreamNode {
                uid: None,
                id,
                name,
                parallelism: par,
                inputs: Vec::new(),
                kind: NodeKind::Source(factory),
                two_input: None,
                out_type: Some(Arc::new(TypeOf::<T>(PhantomData))),
                new_chain: false,
                source_input: None,
            },
        );
        DataStream::at(self.shared.clone(), node)
    }

    /// The job uses event time (its tasks keep a record timestamp and a clock).
    pub(crate) fn mark_timed(&self) {
        lock(&self.shared).timed = true;
    }

    /// A connector's source ([`crate::connector`]): one reader per subtask, made from all the
    /// positions its restore gives it.
    pub(crate) fn connector_source<T, S>(
        &self,
        name: &str,
        make: crate::connector::ReaderFactory<S>,
    ) -> DataStream<T>
    where
        T: Data,
        S: io::Source<T> + 'static,
    {
        let factory: SourceFactory = Arc::new(move |ctx: &OpContext, chain: AnyOp| {
            let counted = crate::operators::CountIn {
                down: downcast::<T>(chain)?,
                count: 0,
                metrics: ctx.metrics.clone(),
            };
            Ok(Box::new(SourceHead {
                source: make(ctx)?,
                chain: Box::new(counted),
                metrics: ctx.metrics.clone(),
                watermark: crate::time::MIN_WATERMARK,
                idle: false,
            }) as Box<dyn Head>)
        });
        self.add_source("source", format!("Source: {name}"), Par::Default, factory)
    }

    /// A source that sets its records' timestamps and gives its splits' watermarks (the job is
    /// timed): `make` builds one split's source for a subtask.
    pub(crate) fn timed_source<T, S, M>(&self, name: &str, make: M) -> DataStream<T>
    where
        T: Data,
        S: io::Source<T> + 'static,
        M: Fn(&OpContext, Arc<crate::time::TaskTime>) -> S + Send + Sync + 'static,
    {
        lock(&self.shared).timed = true;
        let factory: SourceFactory = Arc::new(move |ctx: &OpContext, chain: AnyOp| {
            let time = ctx.task_time()?;
            source_head(ctx, || make(ctx, time.clone()), chain)
        });
        self.add_source("source", name.to_string(), Par::Default, factory)
    }

    /// Lines of 1 to 12 seeded Zipf-distributed words; `count` lines in all (`None`: unbounded),
    /// optionally at `rate` lines per second. Deterministic for a seed, whatever the parallelism.
    pub fn data_generator(&self, seed: u64, count: Option<u64>, rate: Option<f64>) -> DataStream<String> {
        self.data_generator_at_rates(seed, count, rate.map(|r| vec![(0, r)]).unwrap_or_default())
    }

    /// [`Self::data_generator`] whose rate changes with the lines read: `rates` are
    /// `(from line, lines per second for the whole source)` steps, e.g. `[(0, 3000.0), (60_000,
    /// 300.0)]`; a line's index is the same whatever the parallelism, so a rescale keeps the
    /// schedule.
    pub fn data_generator_at_rates(
        &self,
        seed: u64,
        count: Option<u64>,
        rates: Vec<(u64, f64)>,
    ) -> DataStream<String> {
        let factory: SourceFactory = Arc::new(move |ctx: &OpContext, chain: AnyOp| {
            let p = f64::from(ctx.parallelism.max(1));
            let source = || GeneratorSource {
                seed,
                stride: Stride::of_subtask(ctx.subtask, ctx.parallelism, count),
                pacer: Pacer::new(rates.iter().map(|&(from, r)| (from, r / p)).collect()),
                vocabulary: io::generator_vocabulary(),
                metrics: ctx.metrics.clone(),
            };
            source_head(ctx, source, chain)
        });
        self.add_source("source", "Source: Data Generator".into(), Par::Default, factory)
    }

    /// The numbers `from..=to`, split into contiguous ranges across subtasks.
    pub fn generate_sequence(&self, from: u64, to: u64) -> DataStream<u64> {
        let factory: SourceFactory = Arc::new(move |ctx: &OpContext, chain: AnyOp| {
            let n = u128::from(to.saturating_sub(from)) + u128::from(to >= from);
            let (p, s) = (u128::from(ctx.parallelism), u128::from(ctx.subtask));
            let source = || SequenceSource {
                next: from + (n * s / p) as u64,
                end: from + (n * (s + 1) / p) as u64,
            };
            source_head(ctx, source, chain)
        });
        self.add_source("source", "Source: Sequence".into(), Par::Default, factory)
    }

    /// The given elements, from one subtask (as Flink's `fromCollection`).
    pub fn from_collection<T: Data>(&self, items: Vec<T>) -> DataStream<T> {
        let items = Arc::new(items);
        let factory: SourceFactory = Arc::new(move |ctx: &OpContext, chain: AnyOp| {
            let source = || CollectionSource {
                items: items.clone(),
                next: 0,
            };
            source_head(ctx, source, chain)
        });
        self.add_source("source", "Source: Collection".into(), Par::Fixed(1), factory)
    }
}

/// The head of a source chain. Restored, the subtask reads every split position it was given,
/// each in a source made by `make` (one at an unchanged parallelism; any number after a rescale);
/// otherwise one fresh source.
fn source_head<T: Data, S: io::Source<T> + 'static>(
    ctx: &OpContext,
    make: impl Fn() -> S,
    chain: AnyOp,
) -> Result<Box<dyn Head>> {
    let counted = crate::operators::CountIn {
        down: downcast::<T>(chain)?,
        count: 0,
        metrics: ctx.metrics.clone(),
    };
    let Some(restore) = &ctx.restore else {
        return Ok(Box::new(SourceHead {
            source: make(),
            chain: Box::new(counted),
            metrics: ctx.metrics.clone(),
            watermark: crate::time::MIN_WATERMARK,
            idle: false,
        }));
    };
    let mut sources = Vec::with_capacity(restore.sources.len());
    for position in &restore.sources {
        let mut source = make();
        source.restore(position).map_err(|message| Error::Restore {
            checkpoint: restore.checkpoint,
            message: format!("source position {position:?}: {message}"),
        })?;
        // Several splits share the subtask's rate, so the source's rate is the same at any
        // parallelism.
        source.share_rate(restore.sources.len());
        sources.push(source);
    }
    Ok(Box::new(SourceHead {
        source: io::MultiSource::new(sources),
        chain: Box::new(counted),
        metrics: ctx.metrics.clone(),
        watermark: crate::time::MIN_WATERMARK,
        idle: false,
    }))
}

/// The operator of a map from records of type `I` (one stream's, or a connected pair's tagged).
pub(crate) fn map_factory<I: Data, O: Data, F: Fn(I) -> O + Send + Sync + 'static>(f: F) -> OpFactory {
    let f = Arc::new(f);
    Arc::new(move |_: &OpContext, down: AnyOp| {
        Ok(erase::<I>(Box::new(MapOp {
            f: f.clone(),
            down: downcast::<O>(down)?,
            _in: PhantomData,
        })))
    })
}

/// The operator of a flat map from records of type `I`.
pub(crate) fn flat_map_factory<I, O, F>(f: F) -> OpFactory
where
    I: Data,
    O: Data,
    F: Fn(I, &mut dyn Collector<O>) + Send + Sync + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |_: &OpContext, down: AnyOp| {
        Ok(erase::<I>(Box::new(FlatMapOp {
            f: f.clone(),
            down: downcast::<O>(down)?,
            _in: PhantomData,
        })))
    })
}

fn push_node(shared: &Mutex<Shared>, node: StreamNode) -> usize {
    let mut g = lock(shared);
    g.nodes.push(node);
    g.nodes.len() - 1
}

/// A stream of records of type `T` (Flink's `DataStream`): each transformation records an
/// operator and gives the stream of its output.
///
/// ```
/// use floe_datastream::{DataStream, StreamExecutionEnvironment};
///
/// let env = StreamExecutionEnvironment::new();
/// let readings: DataStream<(String, f64)> =
///     env.from_collection(vec![("kitchen".to_string(), 21.5), ("attic".to_string(), 35.0)]);
/// let fahrenheit = readings.map(|(room, c): (String, f64)| (room, c * 9.0 / 5.0 + 32.0));
/// let hot = fahrenheit.filter(|(_, f): &(String, f64)| *f > 90.0).name("Hot rooms");
/// let alarms = env.from_collection(vec![("garage".to_string(), 140.0)]);
/// hot.union(&[&alarms]).print();
/// assert!(env.build()?.operators().iter().any(|o| o.name.contains("Hot rooms")));
/// # Ok::<(), floe_datastream::Error>(())
/// ```
pub struct DataStream<T> {
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) node: usize,
    pub(crate) partitioner: Option<Partitioner>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        DataStream {
            shared: self.shared.clone(),
            node: self.node,
            partitioner: self.partitioner,
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for DataStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataStream").field("node", &self.node).finish()
    }
}

impl<T: Data> DataStream<T> {
    pub(crate) fn at(shared: Arc<Mutex<Shared>>, node: usize) -> Self {
        DataStream {
            shared,
            node,
            partitioner: None,
            _t: PhantomData,
        }
    }

    pub(crate) fn mode(&self) -> RuntimeMode {
        lock(&self.shared).mode
    }

    pub(crate) fn add_operator<O: Data>(
        &self,
        id: &'static str,
        name: &str,
        parallelism: Par,
        input: NodeInput,
        factory: OpFactory,
    ) -> DataStream<O> {
        let node = push_node(
            &self.shared,
            StreamNode {
                uid: None,
                id,
                name: name.to_string(),
                parallelism,
                inputs: vec![input],
                kind: NodeKind::Operator(factory),
                two_input: None,
                out_type: Some(Arc::new(TypeOf::<O>(PhantomData))),
                new_chain: false,
                source_input: None,
            },
        );
        DataStream::at(self.shared.clone(), node)
    }

    pub(crate) fn plain_input(&self) -> NodeInput {
        NodeInput::from(self.node, self.partitioner)
    }

    pub fn map<O: Data, F: Fn(T) -> O + Send + Sync + 'static>(&self, f: F) -> DataStream<O> {
        self.add_operator(
            "map",
            "Map",
            Par::Default,
            self.plain_input(),
            map_factory::<T, O, F>(f),
        )
    }

    /// `f(record, out)` emits any number of records through `out.collect(..)`.
    pub fn flat_map<O: Data, F>(&self, f: F) -> DataStream<O>
    where
        F: Fn(T, &mut dyn Collector<O>) + Send + Sync + 'static,
    {
        let factory = flat_map_factory::<T, O, F>(f);
        self.add_operator("flat-map", "FlatMap", Par::Default, self.plain_input(), factory)
    }

    /// Gives every record a timestamp and the stream watermarks (Flink's
    /// `assignTimestampsAndWatermarks`): chained to its input, it replaces upstream watermarks
    /// with the strategy's, emitted every `pipeline.auto-watermark-interval`.
    pub fn assign_timestamps_and_watermarks(&self, strategy: WatermarkStrategy<T>) -> DataStream<T> {
        lock(&self.shared).timed = true;
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let time = ctx
                .time
                .clone()
                .ok_or_else(|| Error::Graph("timestamps assigned in a job without event time".into()))?;
            Ok(erase::<T>(Box::new(TimestampsAndWatermarks::new(
                strategy.clone(),
                time,
                ctx.metrics.clone(),
                downcast::<T>(down)?,
            ))))
        });
        self.add_operator(
            "timestamps",
            "Timestamps/Watermarks",
            Par::SameAsInput,
            self.plain_input(),
            factory,
        )
    }

    /// A [`ProcessFunction`](crate::ProcessFunction) over each element (Flink's
    /// `process(ProcessFunction)`): the element's timestamp, the watermark, and side outputs
    /// (`ctx.output(&tag, ..)`, read with `get_side_output(&tag)`).
    pub fn process<O: Data, F: crate::operators::ProcessFunction<T, O> + Clone>(
        &self,
        f: F,
    ) -> DataStream<O> {
        let prototype = Arc::new(crate::operators::Prototype::new(f));
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let down = downcast::<O>(down)?;
            let f = crate::operators::Opened::open(prototype.copy(), ctx, F::open, F::close)?;
            Ok(erase::<T>(Box::new(crate::operators::ProcessOp {
                f,
                time: ctx.time.clone(),
                watermark: crate::time::MIN_WATERMARK,
                side: ctx.take_side_outputs(),
                failure: None,
                down,
                _in: PhantomData,
            })))
        });
        self.add_operator("process", "Process", Par::Default, self.plain_input(), factory)
    }

    pub fn filter<F: Fn(&T) -> bool + Send + Sync + 'static>(&self, f: F) -> DataStream<T> {
        let f = Arc::new(f);
        let factory: OpFactory = Arc::new(move |_: &OpContext, down: AnyOp| {
            Ok(erase::<T>(Box::new(FilterOp {
                f: f.clone(),
                down: downcast::<T>(down)?,
            })))
        });
        self.add_operator("filter", "Filter", Par::Default, self.plain_input(), factory)
    }

    /// Partitions by key (hash of the key into Flink's key groups).
    pub fn key_by<K, F>(&self, key: F) -> KeyedStream<T, K>
    where
        K: Data + Hash + Eq + Ord,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        KeyedStream {
            stream: self.clone(),
            key: Arc::new(key),
            key_ref: None,
        }
    }

    /// `key_by` with a selector that borrows the key from the record (`|p: &(String, u64)| &p.0`),
    /// like Java's `value -> value.f0`: routing and keyed state then copy no key per record, only
    /// each new key once.
    pub fn key_by_ref<K, F>(&self, key: F) -> KeyedStream<T, K>
    where
        K: Data + Hash + Eq + Ord,
        F: for<'a> Fn(&'a T) -> &'a K + Send + Sync + 'static,
    {
        let by_ref: KeyRefFn<T, K> = Arc::new(key);
        let owned = by_ref.clone();
        KeyedStream {
            stream: self.clone(),
            key: Arc::new(move |t: &T| owned(t).clone()),
            key_ref: Some(by_ref),
        }
    }

    fn partitioned(&self, p: Partitioner) -> DataStream<T> {
        DataStream {
            partitioner: Some(p),
            ..self.clone()
        }
    }

    /// Round-robin to all downstream subtasks.
    pub fn rebalance(&self) -> DataStream<T> {
        self.partitioned(Partitioner::Rebalance)
    }

    /// Round-robin to the downstream subtasks of this subtask's pointwise range.
    pub fn rescale(&self) -> DataStream<T> {
        self.partitioned(Partitioner::Rescale)
    }

    /// Every record to every downstream subtask.
    pub fn broadcast(&self) -> DataStream<T> {
        self.partitioned(Partitioner::Broadcast)
    }

    /// To the downstream subtask of the same index (parallelism must match).
    pub fn forward(&self) -> DataStream<T> {
        self.partitioned(Partitioner::Forward)
    }

    /// The records the operator producing this stream emitted to `tag` (Flink's
    /// `getSideOutput`): from a process function's `ctx.output(&tag, ..)`, or a window's late
    /// elements (`side_output_late_data`).
    pub fn get_side_output<X: Data>(&self, tag: &OutputTag<X>) -> DataStream<X> {
        let node = push_node(
            &self.shared,
            StreamNode {
                uid: None,
                id: "side-output",
                name: format!("SideOutput({})", tag.id()),
                parallelism: Par::Default,
                inputs: vec![NodeInput::from(self.node, None)],
                kind: NodeKind::SideOutput(tag.id().to_string()),
                two_input: None,
                out_type: Some(Arc::new(TypeOf::<X>(PhantomData))),
                new_chain: false,
                source_input: None,
            },
        );
        DataStream::at(self.shared.clone(), node)
    }

    /// Sets the parallelism of the operator that produces this stream.
    pub fn set_parallelism(self, parallelism: u32) -> Self {
        // Flink's `setParallelism(PARALLELISM_DEFAULT)`: 0 leaves it to the environment's.
        lock(&self.shared).nodes[self.node].parallelism = match parallelism {
            0 => Par::Default,
            p => Par::Fixed(p),
        };
        self
    }

    /// Flink's `uid()`: the operator's stable id, which names its state in checkpoints and
    /// savepoints (a savepoint restores into a changed job by it; two operators with one uid are
    /// refused), and the id of the JobVertex it heads, shown in task names (`map#0`) and the REST
    /// API.
    pub fn uid(self, id: &'static str) -> Self {
        lock(&self.shared).nodes[self.node].uid = Some(id);
        self
    }

    /// Flink's `startNewChain()`: the operator producing this stream starts a new JobVertex even where
    /// it could be chained to its input.
    pub fn start_new_chain(self) -> Self {
        lock(&self.shared).nodes[self.node].new_chain = true;
        self
    }

    /// Renames the operator that produces this stream (the name shows in the vertex name).
    pub fn name(self, name: &str) -> Self {
        lock(&self.shared).nodes[self.node].name = name.to_string();
        self
    }

    /// A connector's sink ([`crate::connector`]) named `Sink: {name}`.
    pub(crate) fn connector_sink(&self, name: &str, factory: SinkFactory) -> DataStreamSink {
        self.push_sink(&format!("Sink: {name}"), factory)
    }

    pub(crate) fn push_sink(&self, name: &str, factory: SinkFactory) -> DataStreamSink {
        let node = push_node(
            &self.shared,
            StreamNode {
                uid: None,
                new_chain: false,
                id: "sink",
                name: name.to_string(),
                parallelism: Par::Default,
                inputs: vec![self.plain_input()],
                kind: NodeKind::Sink(factory),
                two_input: None,
                out_type: None,
                source_input: None,
            },
        );
        DataStreamSink {
            shared: self.shared.clone(),
            node,
        }
    }

    /// One part file per subtask under `url` (a directory): written as
    /// `.part-{run}-{subtask}-{attempt}.inprogress`, renamed to `part-{run}-{subtask}` when the
    /// subtask finishes (`{run}`: the job run's id; other runs' files are never touched).
    /// With checkpointing (STREAMING and `execution.checkpointing.interval`) it is exactly-once: a
    /// part file per subtask and checkpoint, `.part-{run}-{subtask}-{n}-{writer}.inprogress` until the
    /// checkpoint that covers it completes, then `part-{run}-{subtask}-{n}-{writer}` (`{writer}` is unique
    /// per attempt, so two attempts never touch each other's files); a restore removes what the
    /// restored checkpoint does not cover. Lines are the records' text form (tuples and structs
    /// TAB-separated; a TAB, newline, CR or backslash inside a text field written as `\t`, `\n`,
    /// `\r`, `\\`; a `String` record as it is).
    pub fn sink_to_file(&self, url: &str) -> DataStreamSink {
        let url = url.to_string();
        let factory: SinkFactory = Arc::new(move |ctx: &OpContext, metrics: Arc<TaskMetrics>| {
            let op: BoxOp<T> = io::sink_op(Vec::new(), 1 << 20, metrics);
            let sink = FileSinkIo::new(url.clone(), ctx);
            Ok((erase::<T>(op), Box::new(sink) as Box<dyn SinkIo>))
        });
        self.push_sink("Sink: File", factory)
    }

    /// Records to stdout, prefixed `{subtask + 1}> ` when the sink is parallel (as Flink).
    pub fn print(&self) -> DataStreamSink {
        let factory: SinkFactory = Arc::new(move |ctx: &OpContext, metrics: Arc<TaskMetrics>| {
            let prefix = if ctx.parallelism > 1 {
                format!("{}> ", ctx.subtask + 1).into_bytes()
            } else {
                Vec::new()
            };
            let op: BoxOp<T> = io::sink_op(prefix, 0, metrics);
            Ok((erase::<T>(op), Box::new(PrintIo) as Box<dyn SinkIo>))
        });
        self.push_sink("Sink: Print to Std. Out", factory)
    }
}

/// A sink, to set its parallelism.
#[derive(Clone)]
pub struct DataStreamSink {
    shared: Arc<Mutex<Shared>>,
    node: usize,
}

impl std::fmt::Debug for DataStreamSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataStreamSink")
            .field("node", &self.node)
            .finish()
    }
}

impl DataStreamSink {
    /// Flink's `uid()` on a sink: the sink's stable id, which names its committer state in
    /// checkpoints and savepoints (see [`DataStream::uid`]).
    pub fn uid(self, id: &'static str) -> Self {
        lock(&self.shared).nodes[self.node].uid = Some(id);
        self
    }

    pub fn set_parallelism(self, parallelism: u32) -> Self {
        // Flink's `setParallelism(PARALLELISM_DEFAULT)`: 0 leaves it to the environment's.
        lock(&self.shared).nodes[self.node].parallelism = match parallelism {
            0 => Par::Default,
            p => Par::Fixed(p),
        };
        self
    }
}
