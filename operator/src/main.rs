//! `floe-operator`: `crd` prints the CustomResourceDefinition; `render` prints what a reconcile
//! would apply for a FlinkJob file; `run` runs the controller with the in-cluster service account
//! (or the local kubeconfig), plus a `/healthz` endpoint for probes.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use floe_operator::controller::{self, Context};
use floe_operator::jobmanager_api::RestClient;
use floe_operator::resources::Defaults;

#[derive(Debug, Parser)]
#[command(
    name = "floe-operator",
    version,
    about = "Reconciles FlinkJobs into Floe clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the FlinkJob CustomResourceDefinition (YAML).
    Crd,
    /// Print what a reconcile would apply for a FlinkJob file (its `status`, if any, taken as the
    /// operator's last): every object (YAML), or only the JobManager's manifest or the status.
    Render {
        /// The FlinkJob (YAML).
        #[arg(short = 'f', long)]
        file: std::path::PathBuf,
        /// Only the manifest the JobManager reads (the ConfigMap's `flinkjob.yaml`).
        #[arg(long, conflicts_with = "status")]
        manifest: bool,
        /// Only the status the reconcile would write (JSON).
        #[arg(long)]
        status: bool,
        /// Worker image for FlinkJobs without spec.image.
        #[arg(long, env = "FLOE_DEFAULT_IMAGE", default_value = "floe/worker:0.1.0")]
        default_image: String,
    },
    /// Run the controller.
    Run {
        /// Worker image for FlinkJobs without spec.image.
        #[arg(long, env = "FLOE_DEFAULT_IMAGE", default_value = "floe/worker:0.1.0")]
        default_image: String,
        /// Comma-separated namespaces to watch (default: all).
        #[arg(long, env = "FLOE_WATCH_NAMESPACES", value_delimiter = ',')]
        watch_namespaces: Vec<String>,
        /// Where `/healthz` is served.
        #[arg(long, default_value = "0.0.0.0:8080")]
        health_address: SocketAddr,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match Cli::parse().command {
        Command::Crd => print!("{}", floe_operator::crd::crd_yaml()),
        Command::Render {
            file,
            manifest,
            status,
            default_image,
        } => {
            use anyhow::Context as _;
            use floe_operator::render::{What, render_yaml};
            let text = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
            let job =
                floe_manifest::FlinkJob::from_yaml(&text).with_context(|| format!("{}", file.display()))?;
            job.validate().with_context(|| format!("{}", file.display()))?;
            let what = match (manifest, status) {
                (true, _) => What::Manifest,
                (_, true) => What::Status,
                _ => What::Objects,
            };
            let defaults = Defaults { image: default_image };
            print!(
                "{}",
                render_yaml(&job, &defaults, k8s_openapi::jiff::Timestamp::now(), what)
            );
        }
        Command::Run {
            default_image,
            watch_namespaces,
            health_address,
        } => {
            let client = kube::Client::try_default().await?;
            let health = tokio::net::TcpListener::bind(health_address).await?;
            let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
            tokio::spawn(async move { axum::serve(health, app).await });
            let namespaces: Vec<String> = watch_namespaces.into_iter().filter(|n| !n.is_empty()).collect();
            tracing::info!(?namespaces, %default_image, "floe-operator starting");
            let ctx = Context::new(
                client.clone(),
                Arc::new(RestClient::default()),
                Defaults { image: default_image },
            );
            controller::run(client, namespaces, ctx).await;
        }
    }
    Ok(())
}
