//! `floe-operator`: `crd` prints the CustomResourceDefinition; `render` prints what a reconcile
//! would apply for a FlinkJob file; `run` runs the controller with the in-cluster service account
//! (or the local kubeconfig), plus `/healthz` for probes and `/metrics` (OpenMetrics) on one port.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use floe_operator::controller::{self, Context};
use floe_operator::jobmanager_api::RestClient;
use floe_operator::resources::Defaults;
use floe_telemetry::logs::{self, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "floe-operator",
    version,
    about = "Reconciles FlinkJobs into Floe clusters"
)]
struct Cli {
    /// Log lines as text, or JSON (one object a line) for the cluster's log collector (the
    /// chart's default).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
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
        #[arg(
            long,
            env = "FLOE_DEFAULT_IMAGE",
            default_value = "ghcr.io/floe-dev/floe-worker:0.1.0"
        )]
        default_image: String,
    },
    /// Remove the operator's finalizer from every FlinkJob (the chart's pre-delete hook), so that
    /// FlinkJobs and their namespaces can be deleted after the operator is gone. A running operator
    /// adds the finalizer back: name its Deployment and it is scaled to zero first.
    ReleaseFinalizers {
        /// The operator's Deployment: scaled to 0 replicas, and its pods waited for, before any
        /// finalizer is released.
        #[arg(long)]
        operator_deployment: Option<String>,
        /// The Deployment's namespace (the chart passes the hook pod's).
        #[arg(long, env = "POD_NAMESPACE", requires = "operator_deployment")]
        operator_namespace: Option<String>,
        /// How long to wait for the operator's pods to go.
        #[arg(long, default_value_t = 120)]
        stop_timeout_s: u64,
    },
    /// Run the controller.
    Run {
        /// Worker image for FlinkJobs without spec.image.
        #[arg(
            long,
            env = "FLOE_DEFAULT_IMAGE",
            default_value = "ghcr.io/floe-dev/floe-worker:0.1.0"
        )]
        default_image: String,
        /// Comma-separated namespaces to watch (default: all).
        #[arg(long, env = "FLOE_WATCH_NAMESPACES", value_delimiter = ',')]
        watch_namespaces: Vec<String>,
        /// Where `/healthz` is served.
        #[arg(long, default_value = "[::]:8080")]
        health_address: SocketAddr,
        /// Give every job a NetworkPolicy that lets in only its own pods and this operator (which
        /// the policy finds by `--operator-namespace` and `--operator-pod-labels`).
        #[arg(long, requires_all = ["operator_namespace", "operator_pod_labels"])]
        network_policies: bool,
        /// The operator's own namespace (the chart passes the pod's).
        #[arg(long, env = "POD_NAMESPACE")]
        operator_namespace: Option<String>,
        /// The operator pods' labels, `key=value,...` (the chart passes its selector labels).
        #[arg(long)]
        operator_pod_labels: Option<String>,
        /// With `--network-policies`: the namespace of the Prometheus that scrapes the jobs; the
        /// policies let its pods (`--metrics-scraper-pod-labels`) reach the JobManager's REST port
        /// (`/metrics`) and the TaskManagers' metrics port (9249).
        #[arg(long, requires_all = ["network_policies", "metrics_scraper_pod_labels"])]
        metrics_scraper_namespace: Option<String>,
        /// The Prometheus pods' labels, `key=value,...`.
        #[arg(long, requires = "metrics_scraper_namespace")]
        metrics_scraper_pod_labels: Option<String>,
        /// Reconcile only while holding the Lease `--lease-name` in `--operator-namespace`, so
        /// several replicas never reconcile at once.
        #[arg(long, requires = "operator_namespace")]
        leader_election: bool,
        /// The Lease of the election (the chart's: `{release fullname}-leader`).
        #[arg(long, default_value = floe_operator::leader::DEFAULT_LEASE_NAME)]
        lease_name: String,
        /// This replica's name in the election (the chart passes the pod's name).
        #[arg(long, env = "POD_NAME", default_value = "floe-operator")]
        identity: String,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // An error is one line a user reads (with its causes), not a debug dump with a backtrace.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logs::init(cli.log_format, "info");
    match cli.command {
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
            // What a reconcile would refuse is refused here too.
            job.validate_for_cluster()
                .with_context(|| format!("{}", file.display()))?;
            let what = match (manifest, status) {
                (true, _) => What::Manifest,
                (_, true) => What::Status,
                _ => What::Objects,
            };
            let defaults = Defaults::image(default_image);
            print!(
                "{}",
                render_yaml(&job, &defaults, k8s_openapi::jiff::Timestamp::now(), what)
            );
        }
        Command::ReleaseFinalizers {
            operator_deployment,
            operator_namespace,
            stop_timeout_s,
        } => {
            let client = kube::Client::try_default().await?;
            let operator = match operator_deployment {
                Some(name) => Some(floe_operator::uninstall::OperatorDeployment {
                    namespace: operator_namespace.unwrap_or_else(|| client.default_namespace().to_string()),
                    name,
                }),
                None => {
                    eprintln!(
                        "warning: no --operator-deployment: an operator still running adds the \
                         finalizers back"
                    );
                    None
                }
            };
            let released = floe_operator::uninstall::uninstall(
                client,
                operator.as_ref(),
                std::time::Duration::from_secs(stop_timeout_s),
            )
            .await?;
            println!(
                "released the finalizer of {} FlinkJob(s): {}",
                released.len(),
                released.join(", ")
            );
        }
        Command::Run {
            default_image,
            watch_namespaces,
            health_address,
            network_policies,
            operator_namespace,
            operator_pod_labels,
            metrics_scraper_namespace,
            metrics_scraper_pod_labels,
            leader_election,
            lease_name,
            identity,
        } => {
            let mut defaults = Defaults::image(&default_image);
            if network_policies {
                let labels = floe_operator::resources::parse_labels(&operator_pod_labels.unwrap_or_default())
                    .map_err(|e| anyhow::anyhow!("--operator-pod-labels: {e}"))?;
                defaults.operator = Some(floe_operator::resources::OperatorPods {
                    namespace: operator_namespace.clone().unwrap_or_default(),
                    labels,
                });
            }
            if let Some(namespace) = metrics_scraper_namespace {
                let labels =
                    floe_operator::resources::parse_labels(&metrics_scraper_pod_labels.unwrap_or_default())
                        .map_err(|e| anyhow::anyhow!("--metrics-scraper-pod-labels: {e}"))?;
                defaults.metrics_scrapers =
                    Some(floe_operator::resources::OperatorPods { namespace, labels });
            }
            let client = kube::Client::try_default().await?;
            let ctx = Context::new(client.clone(), Arc::new(RestClient::default()), defaults);
            // `[::]` takes IPv4 and IPv6 (IPv6-only clusters too), IPv4 alone without IPv6.
            let health = floe_net::bind(health_address).await?;
            let metrics = ctx.metrics.clone();
            let health_state = ctx.health.clone();
            let app = axum::Router::new()
                // 503 once the controller's watches have kept failing (`floe_operator::health`).
                .route(
                    "/healthz",
                    axum::routing::get(move || {
                        let health = health_state.clone();
                        async move {
                            match health.verdict(std::time::Instant::now()) {
                                Ok(()) => (axum::http::StatusCode::OK, "ok".to_string()),
                                Err(why) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, why),
                            }
                        }
                    }),
                )
                // Reconciliations, failures by reason, reconcile durations (controller-rs style).
                .route(
                    "/metrics",
                    axum::routing::get(move || {
                        let metrics = metrics.clone();
                        async move {
                            (
                                [(
                                    axum::http::header::CONTENT_TYPE,
                                    floe_operator::metrics::OPENMETRICS,
                                )],
                                metrics.encode(),
                            )
                        }
                    }),
                );
            tokio::spawn(async move { axum::serve(health, app).await });
            let namespaces: Vec<String> = watch_namespaces.into_iter().filter(|n| !n.is_empty()).collect();
            tracing::info!(?namespaces, %default_image, network_policies, "floe-operator starting");
            let controller = controller::run(client.clone(), namespaces, ctx);
            match operator_namespace.filter(|_| leader_election) {
                Some(namespace) => {
                    floe_operator::leader::run_elected(
                        client,
                        &namespace,
                        &lease_name,
                        &identity,
                        controller,
                    )
                    .await?;
                }
                None => controller.await,
            }
        }
    }
    Ok(())
}
