//! `floe-operator`: `crd` prints the CustomResourceDefinition; `run` runs the controller with the
//! in-cluster service account (or the local kubeconfig), plus a `/healthz` endpoint for probes.

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
