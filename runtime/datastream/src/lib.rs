//! Floe's DataStream API and task runtime: what a job is made of, and how one subtask of it runs.
//!
//! A job is a Rust function registered by name in the [`JobRegistry`]; it records sources,
//! transformations and sinks on a [`StreamExecutionEnvironment`] (Flink's names: `map`,
//! `flat_map`, `key_by`, `sum`, `sink_to_file`, ...). [`StreamExecutionEnvironment::build`]
//! chains operators into a `floe_scheduler::JobGraph`; the result, a [`BuiltJob`], is what the
//! JobManager schedules and what a TaskManager instantiates with [`BuiltJob::create_task`] and
//! runs with [`Task::run`] between shuffle inputs and outputs.
//!
//! Start with [`BuiltJob`], then [`StreamExecutionEnvironment`] and [`DataStream`]; records are
//! [`Data`].

// `#[derive(Data)]` names this crate `::floe_datastream`, here as in a user's crate.
extern crate self as floe_datastream;

mod api;
pub mod checkpoint;
pub mod connector;
pub mod data;
mod error;
mod graph;
mod io;
mod job_spec;
mod jobs;
mod latency;
pub mod metrics;
pub mod nexmark;
mod operator_ids;
mod operators;
mod pace;
pub mod rng;
mod state;
mod task;
mod time;
mod types;
mod writer;

pub use api::{
    AsyncDataStream, BroadcastConnectedStream, CoGroupKeyed, CoGroupWhere, CoGroupWindowed, CoGroupedStreams,
    ConnectedStreams, DEFAULT_BUFFER_SIZE, DEFAULT_BUFFER_TIMEOUT, DataStream, DataStreamSink,
    IntervalJoined, JoinedStreams, KeyedBroadcastConnectedStream, KeyedConnectedStreams, KeyedStream,
    RuntimeMode, StreamExecutionEnvironment, WindowedStream, parse_memory_size,
};
pub use checkpoint::{CheckpointConfig, StateBackendKind, parse_duration};
pub use data::Data;
pub use error::{Error, Result};
/// `#[derive(Data)]` for a struct or enum (see [`Data`]).
pub use floe_derive::Data;
pub use graph::BuiltJob;
pub use io::sink::{RUNS_LATEST_CHECKPOINT_KEY, SUPERSEDED_RUNS_KEY};
pub use io::{GENERATOR_VOCABULARY, generator_line, generator_vocabulary, generator_word, location_url};
pub use jobs::enrich::region_of as enrich_region_of;
pub use jobs::map_state::entry_checksum as map_state_entry_checksum;
pub use jobs::{
    ArgKind, ArgSpec, JobArgValues, JobArgs, JobFn, JobRegistry, JobSpec, parse_args, tokenize, wordcount,
};
pub use latency::LatencyHistogram;
pub use operator_ids::OperatorView;
pub use operators::window::{
    AggregateFunction, ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountEvictor,
    CountTrigger, EventTimeSessionWindows, EventTimeTrigger, Evictor, GlobalWindows, NeverTrigger,
    ProcessWindowFunction, ProcessingTimeSessionWindows, ProcessingTimeTrigger, PurgingTrigger,
    SlidingEventTimeWindows, SlidingProcessingTimeWindows, TimeEvictor, TimeWindow, Trigger, TriggerContext,
    TriggerResult, TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowAssigner, WindowContext,
    WindowTrigger,
};
pub use operators::{
    AsyncFunction, AsyncRetryStrategy, BroadcastProcessFunction, Collector, FunctionError, FunctionResult,
    KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedContext, KeyedProcessFunction, OutputTag,
    ProcessContext, ProcessFunction, RichFilterFunction, RichFlatMapFunction, RichMapFunction,
    RichSinkFunction, RuntimeContext, TaggedUnion,
};
pub use state::entries::{
    AggregatingHandle, AggregatingStateDescriptor, ListHandle, ListStateDescriptor, MAX_STATE_NAME_BYTES,
    MapHandle, MapStateDescriptor, ReducingHandle, ReducingStateDescriptor, ValueHandle,
    ValueStateDescriptor,
};
pub use state::ttl::{StateTtlConfig, StateTtlConfigBuilder, StateVisibility, UpdateType};
pub use state::{ListState, MapState, ValueState};
pub use task::{BufferPools, HeldOutputs, Task, TaskContext, TaskFailure, TaskMetrics};
pub use time::timers::TimeDomain;
pub use time::{
    AUTO_WATERMARK_INTERVAL_KEY, DEFAULT_AUTO_WATERMARK_INTERVAL, MAX_WATERMARK, MIN_WATERMARK,
    WatermarkStrategy,
};
