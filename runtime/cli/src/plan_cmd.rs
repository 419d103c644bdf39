//! `floe plan`: a job's execution plan (vertices, pipelined regions, slots) for people and scripts.

use std::fmt::Write;

use floe_scheduler::plan::PlanView;

/// Output format of `floe plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Renders a plan for a person: one line per vertex, region and slot.
pub fn render_text(view: &PlanView, mode: &str) -> String {
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
        let _ = write!(
            out,
            "  {:<width$}  parallelism {:>5}  max {:>5}  slot sharing group {}",
            v.id, v.parallelism, v.max_parallelism, v.slot_sharing_group
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
