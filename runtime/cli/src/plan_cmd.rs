//! `floe plan`: a job's execution plan (vertices, pipelined regions, slots) for people and scripts.

use std::fmt::Write;

use floe_manifest::FlinkJob;
use floe_scheduler::plan::PlanView;
use floe_scheduler::{BatchShuffleMode, JobGraph};

/// What a manifest asks to run, as `floe plan -f` and `floe run -f` see it.
#[derive(Debug)]
pub struct ManifestJob {
    pub graph: JobGraph,
    /// The shuffle mode, as the plan names it.
    pub mode: &'static str,
    /// Slots per TaskManager of the cluster the manifest declares (`spec.taskManager`).
    pub offer: Vec<u32>,
    /// The configuration the job is submitted with.
    pub configuration: std::collections::BTreeMap<String, String>,
    /// Every operator with its vertex, uid and the state it keeps.
    pub operators: Vec<floe_datastream::OperatorView>,
}

/// Builds the manifest's job graph (its job name, arguments and configuration, with the shuffle mode
/// `shuffle_mode` if given instead of `execution.batch-shuffle-mode`) from the jobs of `registry`.
pub fn manifest_job(
    manifest: &FlinkJob,
    registry: &floe_datastream::JobRegistry,
    shuffle_mode: Option<&str>,
) -> anyhow::Result<ManifestJob> {
    let mut conf = manifest.job_configuration();
    if let Some(m) = shuffle_mode {
        conf.insert("execution.batch-shuffle-mode".into(), m.to_string());
    }
    let mode: BatchShuffleMode = conf
        .get("execution.batch-shuffle-mode")
        .map_or(Ok(BatchShuffleMode::default()), |m| m.parse())?;
    let args = floe_datastream::JobArgs {
        name: manifest.spec.job.name.clone(),
        args: manifest.spec.job.args.clone(),
        configuration: conf.clone(),
    };
    let built = registry.build(&args)?;
    let tm = &manifest.spec.task_manager;
    let mode = match built.runtime_mode() {
        floe_datastream::RuntimeMode::Streaming => "STREAMING (all exchanges pipelined)",
        _ => mode.name(),
    };
    // A parallelism decided at run time needs blocking inputs (the JobManager refuses it too).
    built.job_graph().check_adaptive()?;
    Ok(ManifestJob {
        graph: built.job_graph().clone(),
        mode,
        offer: vec![tm.slots; tm.replicas as usize],
        configuration: conf,
        operators: built.operators(),
    })
}

/// Output format of `floe plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Renders a plan for a person: one line per vertex, region and slot, and per operator when the
/// plan is of a registered job (its uid names its state in savepoints).
pub fn render_text(view: &PlanView, mode: &str, operators: &[floe_datastream::OperatorView]) -> String {
    let tasks: u32 = view.vertices.iter().map(|v| v.parallelism).sum();
    let taskmanagers = view
        .slots
        .iter()
        .map(|s| s.taskmanager)
        .max()
        .map_or(0, |m| m + 1);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Plan: {} vertices, {tasks} tasks, {} regions, {} slots on {taskmanagers} TaskManager(s), shuffle mode {mode}",
        view.vertices.len(),
        view.regions.len(),
        view.slots.len(),
    );
    let _ = writeln!(out, "\nVertices:");
    let width = view.vertices.iter().map(|v| v.id.len()).max().unwrap_or(0);
    for v in &view.vertices {
        // Flink's "-1": the adaptive batch scheduler decides it from the inputs' size.
        let parallelism = match v.parallelism {
            0 => "decided at run time".to_string(),
            p => format!("{p:>5}"),
        };
        let _ = write!(
            out,
            "  {:<width$}  parallelism {parallelism}  max {:>5}  slot sharing group {}",
            v.id, v.max_parallelism, v.slot_sharing_group
        );
        for i in &v.inputs {
            let _ = write!(
                out,
                "  <- {} ({:?}, {:?}, {:?})",
                i.from, i.partitioner, i.pattern, i.partition_type
            );
        }
        out.push('\n');
    }
    if !operators.is_empty() {
        let _ = writeln!(out, "\nOperators (uid: what names their state in savepoints):");
        let width = operators.iter().map(|o| o.name.len()).max().unwrap_or(0);
        for o in operators {
            let state = match o.state.as_slice() {
                [] => "no state".to_string(),
                s => format!("{} state", s.join(", ")),
            };
            let derived = match (o.uid_set, o.state.is_empty()) {
                (true, _) => "",
                (false, true) => " (derived)",
                (false, false) => " (derived: set uid() to keep this state across graph changes)",
            };
            let _ = writeln!(
                out,
                "  {:<width$}  in {}  uid {}  {state}{derived}",
                o.name, o.vertex, o.uid
            );
        }
    }
    let _ = writeln!(out, "\nPipelined regions:");
    for (i, r) in view.regions.iter().enumerate() {
        let _ = writeln!(out, "  region {i}: {}", r.tasks.join(", "));
    }
    let _ = writeln!(out, "\nSlots:");
    for s in &view.slots {
        let _ = writeln!(
            out,
            "  taskmanager {} slot {}: {}",
            s.taskmanager,
            s.slot,
            s.tasks.join(", ")
        );
    }
    out
}
