//! `floe`: plan, run and operate Floe jobs. Thin: parse arguments, call the library, map errors to exit
//! codes (2 for bad input, as clap does for bad arguments).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use floe::graph_file;
use floe::plan_cmd::{self, Format};
use floe_scheduler::{BatchShuffleMode, Plan};

#[derive(Debug, Parser)]
#[command(
    name = "floe",
    version,
    about = "Floe: Flink's runtime ideas, Kubernetes-native, in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a job's plan: vertices, pipelined regions and slot placement.
    Plan {
        /// A JobGraph in YAML (vertices and edges).
        #[arg(long)]
        graph: PathBuf,
        /// execution.batch-shuffle-mode: ALL_EXCHANGES_BLOCKING, FORWARD_EXCHANGES_PIPELINED,
        /// POINTWISE_EXCHANGES_PIPELINED or ALL_EXCHANGES_PIPELINED.
        #[arg(long, default_value = "ALL_EXCHANGES_BLOCKING")]
        shuffle_mode: String,
        /// Number of TaskManagers (default: one with just the slots the job needs).
        #[arg(long, requires = "slots")]
        taskmanagers: Option<u32>,
        /// Slots per TaskManager.
        #[arg(long)]
        slots: Option<u32>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
}

/// A failure and the exit code it maps to.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            code: 2,
            error: e.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Plan {
            graph,
            shuffle_mode,
            taskmanagers,
            slots,
            format,
        } => {
            let mode: BatchShuffleMode = shuffle_mode.parse()?;
            let job = graph_file::load(&graph, mode)?;
            let offer = slots.map(|m| vec![m; taskmanagers.unwrap_or(0) as usize]);
            let plan = match (&offer, slots) {
                (Some(o), _) if taskmanagers.is_some() => Plan::new(job, Some(o))?,
                // --slots alone: as many TaskManagers of that size as the job needs.
                (_, Some(m)) if m > 0 => {
                    let needed = floe_scheduler::slots::slots_needed(&floe_scheduler::ExecutionGraph::new(
                        job.clone(),
                    ));
                    let tms = needed.div_ceil(m as usize).max(1);
                    Plan::new(job, Some(&vec![m; tms]))?
                }
                _ => Plan::new(job, None)?,
            };
            let view = plan.view();
            match format {
                Format::Json => println!("{}", serde_json::to_string_pretty(&view)?),
                Format::Text => print!("{}", plan_cmd::render_text(&view, mode.name())),
            }
            Ok(())
        }
    }
}
