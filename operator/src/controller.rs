//! The reconcile loop (controller-rs's shape): [`reconcile`] is tracing + finalizer + dispatch to
//! [`apply`] or [`cleanup`]; [`error_policy`] is separate; everything it needs is in [`Context`].
//! Every step is idempotent: objects and status go out by server-side apply, so running a reconcile
//! twice changes nothing the second time.

use std::sync::Arc;
use std::time::Duration;

use floe_manifest::{DesiredState, FlinkJob, FlinkJobStatus};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::jobmanager_api::{JobManagerApi, JobOverview, SavepointState};
use crate::resources::{self, Defaults, MANAGER, REST_PORT};
use crate::savepoints::{self, Step};
use crate::status::{self, Observed, lifecycle};

/// Lets the operator cancel the job before Kubernetes removes its pods.
pub const FINALIZER: &str = "floe.dev/cleanup";

/// Why a reconcile failed. All of these are retried by [`error_policy`] with a delay.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("FlinkJob {0} has no namespace")]
    NoNamespace(String),
    /// The status write found the FlinkJob changed since this reconcile read it (its
    /// resourceVersion): written anyway, it could drop what another writer recorded, such as the
    /// trigger id of a savepoint in flight. The reconcile runs again on the object as it is now.
    #[error("FlinkJob {0} changed since it was read")]
    StatusConflict(String),
}

impl Error {
    /// The kind of failure, as the `reason` label of `floe_operator_reconcile_failures_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "Kube",
            Error::Finalizer(_) => "Finalizer",
            Error::NoNamespace(_) => "NoNamespace",
            Error::StatusConflict(_) => "StatusConflict",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything reconcile needs.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub jobmanager: Arc<dyn JobManagerApi>,
    pub defaults: Defaults,
    /// REST base URL of a job's JobManager: its Service's DNS name in the cluster.
    pub jobmanager_url: fn(&FlinkJob) -> String,
    /// Reconciles, failures and durations (`/metrics`).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The controller's watch errors, for `/healthz`.
    pub health: Arc<crate::health::Health>,
    /// Failed reconciles in a row, per FlinkJob (`namespace/name`): [`error_policy`]'s backoff.
    pub failures: Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("jobmanager", &self.jobmanager)
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(client: Client, jobmanager: Arc<dyn JobManagerApi>, defaults: Defaults) -> Context {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            jobmanager,
            defaults,
            jobmanager_url: in_cluster_jobmanager_url,
            metrics: crate::metrics::Metrics::shared(),
            failures: Arc::default(),
            health: Arc::default(),
        }
    }
}

/// `http://<job>-jobmanager.<namespace>.svc:8081`.
pub fn in_cluster_jobmanager_url(job: &FlinkJob) -> String {
    format!("http://{}:{REST_PORT}", resources::jobmanager_host(job))
}

/// How often a job whose JobManager was released is looked at again (a resync: its spec changing
/// wakes the reconcile at once).
const RELEASED_RESYNC: Duration = Duration::from_secs(3600);

/// How soon to look again at a job in each situation: often while it changes, rarely once it ended.
fn requeue(observed: &Observed) -> Action {
    match observed {
        Observed::InvalidSpec(_) => Action::await_change(),
        Observed::Suspended { .. } => Action::requeue(Duration::from_secs(300)),
        Observed::Job(j) if j.is_terminal() => Action::requeue(Duration::from_secs(60)),
        _ => Action::requeue(Duration::from_secs(5)),
    }
}

/// The FlinkJob resource, untyped: the controller watches FlinkJobs as [`DynamicObject`]s and
/// decodes each one in its own reconcile, so an object the API server accepted and the types
/// refuse is that FlinkJob's `InvalidSpec`, never a watcher error that stops every job.
pub fn flinkjob_resource() -> ApiResource {
    ApiResource::erase::<FlinkJob>(&())
}

/// An object as a FlinkJob, or why it is not one (naming the field).
pub fn decode(object: &DynamicObject) -> std::result::Result<FlinkJob, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize::<_, FlinkJob>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path.is_empty() || path == "." {
            inner
        } else {
            format!("{path}: {inner}")
        }
    })
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let metrics = ctx.metrics.clone();
    let failures = ctx.failures.clone();
    let key = format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any());
    let result = reconcile_object(object, ctx).await;
    metrics.reconciled(started.elapsed());
    if result.is_ok() {
        failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&key);
    }
    result
}

async fn reconcile_object(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    let ns = object
        .namespace()
        .ok_or_else(|| Error::NoNamespace(object.name_any()))?;
    tracing::debug!(job = %object.name_any(), %ns, "reconcile");
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &flinkjob_resource());
    finalizer(&api, FINALIZER, object, |event| async {
        match event {
            Finalizer::Apply(object) => apply_latest(&api, object, &ctx).await,
            Finalizer::Cleanup(object) => match decode(&object) {
                Ok(job) => cleanup(Arc::new(job), ctx.clone()).await,
                // Nothing to ask its JobManager with; the owned objects go with the FlinkJob.
                Err(_) => Ok(Action::await_change()),
            },
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// How many times a reconcile runs on a FlinkJob that keeps changing under its status writes.
const STATUS_ATTEMPTS: usize = 3;

/// [`apply`] (or [`undecodable`]); when its status write finds the FlinkJob changed since it was
/// read, again on the object read anew, up to [`STATUS_ATTEMPTS`] times, then the error (retried
/// later by [`error_policy`]).
async fn apply_latest(
    api: &Api<DynamicObject>,
    object: Arc<DynamicObject>,
    ctx: &Arc<Context>,
) -> Result<Action> {
    let mut object = object;
    let mut attempt = 1;
    loop {
        let result = match decode(&object) {
            Ok(job) => apply(Arc::new(job), ctx.clone()).await,
            Err(message) => undecodable(&object, &message, ctx).await,
        };
        match result {
            Err(Error::StatusConflict(name)) if attempt < STATUS_ATTEMPTS => {
                tracing::info!(job = %name, attempt, "the FlinkJob changed meanwhile; reconciling it again");
                object = Arc::new(api.get(&name).await.map_err(Error::Kube)?);
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The status patch: server-side apply by the operator's field manager, with the resourceVersion
/// the reconcile read as a precondition (a 409 when the object changed since: see
/// [`Error::StatusConflict`]).
fn status_patch(
    name: &str,
    resource_version: Option<&String>,
    status: serde_json::Value,
) -> serde_json::Value {
    let mut metadata = serde_json::json!({ "name": name });
    if let Some(version) = resource_version {
        metadata["resourceVersion"] = version.clone().into();
    }
    serde_json::json!({
        "apiVersion": floe_manifest::API_VERSION,
        "kind": floe_manifest::KIND,
        "metadata": metadata,
        "status": status,
    })
}

/// Sends a status patch; a 409 is [`Error::StatusConflict`].
async fn patch_status<K>(api: &Api<K>, name: &str, patch: serde_json::Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api
        .patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(Error::StatusConflict(name.to_string())),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// A FlinkJob the types refuse (a value the schema let through): `Ready=False`, `InvalidSpec`
/// with the field and the reason, a Warning event once, and no retry until it changes.
async fn undecodable(object: &DynamicObject, message: &str, ctx: &Context) -> Result<Action> {
    let message = format!("spec does not decode: {message}");
    let known = object.data["status"]["error"].as_str() == Some(message.as_str());
    if known {
        return Ok(Action::await_change());
    }
    tracing::warn!(job = %object.name_any(), "{message}");
    let event = Event {
        type_: EventType::Warning,
        reason: "InvalidSpec".into(),
        note: Some(message.clone()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = object.object_ref(&flinkjob_resource());
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        tracing::warn!(job = %object.name_any(), error = %e, "cannot publish event");
    }
    let generation = object.metadata.generation;
    let status = FlinkJobStatus {
        lifecycle_state: Some(lifecycle::FAILED.into()),
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: status::READY.into(),
            status: "False".into(),
            reason: "InvalidSpec".into(),
            message: message.clone(),
            observed_generation: generation,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        }],
        observed_generation: generation,
        error: Some(message),
        ..FlinkJobStatus::default()
    };
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &object.namespace().unwrap_or_default(),
        &flinkjob_resource(),
    );
    // Only what this says changes: the rest of the status (the deployment, a savepoint in flight,
    // the savepoint history) stays for when the spec decodes again.
    let mut merged = match object.data.get("status") {
        Some(existing @ serde_json::Value::Object(_)) => existing.clone(),
        _ => serde_json::json!({}),
    };
    let fresh = serde_json::to_value(&status).unwrap_or_default();
    if let (Some(merged), Some(fresh)) = (merged.as_object_mut(), fresh.as_object()) {
        for key in ["lifecycleState", "conditions", "observedGeneration", "error"] {
            match fresh.get(key) {
                Some(value) => merged.insert(key.to_string(), value.clone()),
                None => merged.remove(key),
            };
        }
    }
    let patch = status_patch(
        &object.name_any(),
        object.metadata.resource_version.as_ref(),
        merged,
    );
    patch_status(&api, &object.name_any(), patch).await?;
    Ok(Action::await_change())
}

/// Retries a failed reconcile after [`backoff`] of the failures in a row of that FlinkJob: an API
/// server that refuses (an admission webhook, a quota, RBAC) is not asked again every 15 s for
/// hours.
pub fn error_policy(job: Arc<DynamicObject>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(error.reason());
    let key = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
    let failures = {
        let mut all = ctx
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = all.entry(key).or_default();
        *n = n.saturating_add(1);
        *n
    };
    let delay = backoff(failures);
    tracing::warn!(job = %job.name_any(), %error, failures, "reconcile failed; retrying in {delay:?}");
    Action::requeue(delay)
}

/// The delay after `failures` failed reconciles in a row: 15 s, doubling, at most 5 min.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(5);
    Duration::from_secs(15 << doublings).min(Duration::from_secs(300))
}

/// Server-side apply of one namespaced object, owned by the operator's field manager; the object
/// as the API server stored it (with its status).
async fn apply_object<K>(client: &Client, ns: &str, object: &K) -> Result<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.patch(
        &object.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(Error::Kube)
}

/// The keys of `spec.configuration` Floe does not read (issue 34, item 9), once per generation
/// (the first reconcile of a spec, before its status records the generation): a misspelled key
/// runs the job as if unset, and `kubectl describe` is where a user looks. An event's note holds
/// 1 KiB; the first findings are enough to act on.
fn configuration_warning(job: &FlinkJob) -> Option<String> {
    let observed = job.status.as_ref().and_then(|s| s.observed_generation);
    if observed.is_some() && observed == job.metadata.generation {
        return None;
    }
    let findings = floe_config::check(job.spec.configuration.keys().map(String::as_str));
    if findings.is_empty() {
        return None;
    }
    let mut note = findings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if note.len() > 1000 {
        let mut end = 990;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str(" ...");
    }
    Some(note)
}

async fn publish(ctx: &Context, job: &FlinkJob, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    // An event that cannot be written is logged, never a reason to fail the reconcile.
    if let Err(e) = ctx.recorder.publish(&event, &job.object_ref(&())).await {
        tracing::warn!(job = %job.name_any(), error = %e, "cannot publish event");
    }
}

async fn write_status(ctx: &Context, job: &FlinkJob, status: &FlinkJobStatus) -> Result<()> {
    if job.status.as_ref() == Some(status) {
        return Ok(());
    }
    let api: Api<FlinkJob> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let status = serde_json::to_value(status).unwrap_or_default();
    let patch = status_patch(&job.name_any(), job.metadata.resource_version.as_ref(), status);
    patch_status(&api, &job.name_any(), patch).await
}

/// What the JobManager says, as an observation.
async fn observe(ctx: &Context, url: &str) -> Observed {
    match ctx.jobmanager.current_job(url).await {
        Ok(Some(job)) => Observed::Job(job),
        Ok(None) => Observed::NoJob,
        Err(e) => Observed::Unreachable(e.to_string()),
    }
}

/// Cancels the job if it runs. Returns it as last seen (marked CANCELED when cancelled here).
async fn cancel_running(ctx: &Context, job: &FlinkJob, url: &str) -> Option<JobOverview> {
    match ctx.jobmanager.current_job(url).await {
        Ok(Some(running)) if !running.is_terminal() => match ctx.jobmanager.cancel(url, &running.id).await {
            Ok(()) => {
                tracing::info!(job = %job.name_any(), id = %running.id, "cancelled");
                Some(JobOverview {
                    state: "CANCELED".into(),
                    ..running
                })
            }
            Err(e) => {
                tracing::warn!(job = %job.name_any(), error = %e, "cannot cancel the job");
                Some(running)
            }
        },
        Ok(ended) => ended,
        Err(_) => None,
    }
}

/// A new `checkpointTriggerNonce` of a running job asks its JobManager for a checkpoint now
/// (`CheckpointTriggered`, or `CheckpointError`); the nonce is recorded either way, so it is
/// acted on once.
async fn trigger_checkpoint(ctx: &Context, job: &mut FlinkJob, url: &str, observed: &Observed, now_ms: i64) {
    let Some((job_id, nonce)) = savepoints::checkpoint_nonce_due(job, observed) else {
        return;
    };
    let spec = job.clone();
    match ctx.jobmanager.trigger_checkpoint(url, &job_id).await {
        Ok(()) => {
            let note = format!("checkpoint of job {job_id} triggered (checkpointTriggerNonce {nonce})");
            publish(ctx, &spec, EventType::Normal, "CheckpointTriggered", note).await;
        }
        Err(e) => {
            let note = format!("checkpoint of job {job_id} could not be triggered: {e}");
            publish(ctx, &spec, EventType::Warning, "CheckpointError", note).await;
        }
    }
    let status = job
        .status
        .get_or_insert_with(Default::default)
        .job_status
        .get_or_insert_with(Default::default);
    status.checkpoint_info = Some(floe_manifest::CheckpointInfo {
        trigger_nonce: Some(nonce),
        trigger_timestamp: Some(now_ms),
    });
}

/// Savepoints that leave the history ([`savepoints::expired`]) are disposed of through the
/// JobManager while it answers (one `SavepointDisposed` event naming them all: the event recorder
/// folds a second event of the same reason into the first's series, note and all), or only
/// forgotten with
/// `kubernetes.operator.savepoint.cleanup.enabled: false`; one the JobManager could not dispose of
/// stays in the history and is tried at the next reconcile.
async fn dispose_savepoints(ctx: &Context, job: &mut FlinkJob, url: &str, observed: &Observed, now_ms: i64) {
    let expired = savepoints::expired(job, now_ms);
    if expired.is_empty() {
        return;
    }
    let cleanup = savepoints::cleanup_enabled(job);
    if cleanup && !matches!(observed, Observed::Job(_)) {
        return;
    }
    let spec = job.clone();
    let mut disposed = Vec::new();
    for location in expired {
        if cleanup {
            match ctx.jobmanager.dispose_savepoint(url, &location).await {
                Ok(()) => disposed.push(location.clone()),
                Err(e) => {
                    tracing::warn!(job = %spec.name_any(), %location, error = %e, "cannot dispose of the savepoint");
                    continue;
                }
            }
        }
        if let Some(status) = job.status.as_mut().and_then(|s| s.job_status.as_mut()) {
            savepoints::forget(status, &location);
        }
    }
    if !disposed.is_empty() {
        let note = format!(
            "savepoint(s) {} disposed of (they left the savepoint history)",
            disposed.join(", ")
        );
        publish(ctx, &spec, EventType::Normal, "SavepointDisposed", note).await;
    }
}

/// The savepoint step of this reconcile ([`savepoints::next_step`]): triggers or polls, and
/// records the outcome in `job`'s status (events for each). `Some(requeue)`: hold, apply nothing
/// new yet (an upgrade's or a suspend's savepoint is in flight, or failed and is tried again).
async fn take_savepoints(
    ctx: &Context,
    job: &mut FlinkJob,
    url: &str,
    observed: &Observed,
    now_ms: i64,
) -> Option<Action> {
    let step = savepoints::next_step(job, observed, now_ms);
    if step == Step::None {
        return None;
    }
    let spec = job.clone();
    let status = job
        .status
        .get_or_insert_with(Default::default)
        .job_status
        .get_or_insert_with(Default::default);
    // An upgrade or a suspend in savepoint mode waits for any savepoint in flight, then takes its
    // own stop savepoint.
    let stop_wanted = savepoints::stop_wanted(&spec);
    let hold = |kind: savepoints::TriggerType, after: u64| {
        (kind.stops() || stop_wanted).then(|| Action::requeue(Duration::from_secs(after)))
    };
    match step {
        Step::None => None,
        Step::Trigger { job_id, kind } => {
            match ctx.jobmanager.trigger_savepoint(url, &job_id, kind.stops()).await {
                Ok(trigger) => {
                    savepoints::triggered(&spec, status, trigger.clone(), kind, now_ms);
                    let what = if kind.stops() {
                        "stop with a savepoint"
                    } else {
                        "savepoint"
                    };
                    let note = format!("{} {what} of job {job_id} triggered ({trigger})", kind.name());
                    publish(ctx, &spec, EventType::Normal, "SavepointTriggered", note).await;
                    hold(kind, 2)
                }
                Err(e) => {
                    let note = format!(
                        "{} savepoint of job {job_id} could not be triggered: {e}",
                        kind.name()
                    );
                    publish(ctx, &spec, EventType::Warning, "SavepointError", note).await;
                    savepoints::attempted(&spec, status, kind, now_ms);
                    hold(kind, 15)
                }
            }
        }
        Step::Poll {
            job_id,
            trigger,
            kind,
        } => match ctx.jobmanager.savepoint_state(url, &job_id, &trigger).await {
            Ok(SavepointState::InProgress) | Err(_) => hold(kind, 2),
            Ok(SavepointState::Completed { location }) => {
                let note = format!("{} savepoint of job {job_id} completed: {location}", kind.name());
                savepoints::completed(status, kind, location, now_ms);
                publish(ctx, &spec, EventType::Normal, "SavepointCompleted", note).await;
                // A savepoint that let the job run on, while a stop is wanted: the stop is next.
                (!kind.stops() && stop_wanted).then(|| Action::requeue(Duration::from_secs(1)))
            }
            Ok(SavepointState::Failed { cause }) => {
                savepoints::failed(status);
                let note = format!("{} savepoint of job {job_id} failed: {cause}", kind.name());
                publish(ctx, &spec, EventType::Warning, "SavepointError", note).await;
                hold(kind, 15)
            }
        },
        Step::Expired {
            job_id,
            trigger,
            kind,
        } => {
            savepoints::failed(status);
            let note = format!(
                "{} savepoint {trigger} of job {job_id} had no answer within {} min: given up",
                kind.name(),
                savepoints::TRIGGER_TIMEOUT_MS / 60_000
            );
            publish(ctx, &spec, EventType::Warning, "SavepointError", note).await;
            hold(kind, 15)
        }
    }
}

/// The objects of a job, applied in order (the first refusal stops it): the NetworkPolicy before
/// the Deployments, so no pod of the job runs unprotected. Returns the TaskManager Deployment as
/// stored (its status as last observed by its controller).
async fn apply_objects(client: &Client, ns: &str, desired: &resources::Desired) -> Result<Deployment> {
    apply_object::<ConfigMap>(client, ns, &desired.config_map).await?;
    apply_object::<Service>(client, ns, &desired.jobmanager_service).await?;
    if let Some(policy) = &desired.network_policy {
        apply_object::<NetworkPolicy>(client, ns, policy).await?;
    }
    apply_object::<Deployment>(client, ns, &desired.jobmanager).await?;
    apply_object::<Deployment>(client, ns, &desired.taskmanager).await
}

/// Why the job's pods do not run, if its Deployments or pods say (errors reading them are none).
/// Why TaskManagers of `job` asked for do not run, from their Deployment (`taskmanagers`, as
/// applied: a quota refusing pods shows there) and their pods (unschedulable, an image that
/// cannot be pulled).
async fn taskmanager_problem(
    ctx: &Context,
    ns: &str,
    job: &FlinkJob,
    taskmanagers: &Deployment,
) -> Option<crate::workloads::Problem> {
    let selector = resources::selector_string(job, resources::Component::TaskManager);
    let pods = pods_selected(ctx, ns, &selector).await;
    crate::workloads::problem(std::slice::from_ref(taskmanagers), &pods)
}

/// The pods in `ns` that `selector` selects (none when they cannot be listed: a diagnosis only).
async fn pods_selected(ctx: &Context, ns: &str, selector: &str) -> Vec<k8s_openapi::api::core::v1::Pod> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(ctx.client.clone(), ns);
    pods.list(&kube::api::ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

async fn workload_problem(ctx: &Context, ns: &str, job: &FlinkJob) -> Option<crate::workloads::Problem> {
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let mut found = Vec::new();
    for component in [
        resources::Component::JobManager,
        resources::Component::TaskManager,
    ] {
        if let Ok(Some(d)) = deployments.get_opt(&resources::object_name(job, component)).await {
            found.push(d);
        }
    }
    let selector = format!("{}={}", resources::JOB_LABEL, job.name());
    let pods = pods_selected(ctx, ns, &selector).await;
    crate::workloads::problem(&found, &pods)
}

/// Makes the cluster match the FlinkJob, then reports what the JobManager says.
pub async fn apply(job: Arc<FlinkJob>, ctx: Arc<Context>) -> Result<Action> {
    let ns = job
        .namespace()
        .ok_or_else(|| Error::NoNamespace(job.name_any()))?;
    let now = Timestamp::now();
    let invalid = match job.validate_for_cluster() {
        Err(e) => Some(e.to_string()),
        Ok(()) => status::storage_moved(&job),
    };
    if let Some(message) = invalid {
        // Not an error of the reconcile: retrying cannot fix it, a new spec can (await_change).
        let status = status::compute(&job, &Observed::InvalidSpec(message.clone()), now);
        let known = job.status.as_ref().and_then(|s| s.error.as_ref()) == Some(&message);
        if !known {
            publish(&ctx, &job, EventType::Warning, "InvalidSpec", message).await;
        }
        write_status(&ctx, &job, &status).await?;
        return Ok(Action::await_change());
    }
    if let Some(note) = configuration_warning(&job) {
        publish(&ctx, &job, EventType::Warning, "ConfigurationKeys", note).await;
    }
    let url = (ctx.jobmanager_url)(&job);
    let suspended = job.spec.job.state == DesiredState::Suspended;
    let was_suspended =
        job.status.as_ref().and_then(|s| s.lifecycle_state.as_deref()) == Some(lifecycle::SUSPENDED);
    // Savepoints first: in savepoint mode an upgrade or a suspend waits for the job's savepoint,
    // with the old objects left as they are.
    let original = job;
    let mut job = (*original).clone();
    let mut first_look = None;
    if !(suspended && was_suspended) {
        let look = observe(&ctx, &url).await;
        let now_ms = now.as_millisecond();
        dispose_savepoints(&ctx, &mut job, &url, &look, now_ms).await;
        trigger_checkpoint(&ctx, &mut job, &url, &look, now_ms).await;
        let held = take_savepoints(&ctx, &mut job, &url, &look, now_ms).await;
        first_look = Some(look);
        if let Some(requeue) = held {
            let first_look = first_look.unwrap_or(Observed::NoJob);
            let mut status = job.status.clone().unwrap_or_default();
            if let Observed::Job(j) = &first_look
                && let Some(s) = status.job_status.as_mut()
            {
                s.state = j.state.clone();
            }
            write_status(&ctx, &original, &status).await?;
            return Ok(requeue);
        }
    }
    let job = &job;
    // Cancel before scaling to zero, while the JobManager is still there to ask.
    let suspended_observation = match (suspended, was_suspended) {
        (true, false) => Some(Observed::Suspended {
            cancelled: cancel_running(&ctx, job, &url).await,
        }),
        (true, true) => Some(Observed::Suspended { cancelled: None }),
        (false, _) => None,
    };
    // Observed first: the TaskManagers the autoscaler's slots need depend on what the JobManager
    // says.
    let observed = match (suspended_observation, first_look) {
        (Some(o), _) => o,
        (None, Some(look)) => look,
        (None, None) => observe(&ctx, &url).await,
    };
    // The savepoints above saw everything (the old job's stop savepoint); from here on, only this
    // deployment's job counts.
    let observed = status::of_this_deployment(job, observed, now.as_millisecond());
    let taskmanagers = status::taskmanager_replicas(job, &observed);
    let replicas = resources::Replicas {
        jobmanagers: status::jobmanager_replicas(job, &observed, now.as_millisecond()),
        taskmanagers,
    };
    // Built against the status being written (the deployed generation and the savepoint the
    // deployment starts from): computed for what the JobManager said, then again if the pods say
    // more.
    let planned = status::compute(job, &observed, now);
    let mut deploying = job.clone();
    deploying.spec = status::spec_to_deploy(job, &planned);
    deploying.status = Some(planned.clone());
    let desired = resources::desired_with(&deploying, &ctx.defaults, replicas);
    let taskmanager_deployment = match apply_objects(&ctx.client, &ns, &desired).await {
        Ok(d) => d,
        Err(e) => {
            let message = format!("cannot apply the job's objects: {e}");
            if job.status.as_ref().and_then(|s| s.error.as_deref()) != Some(message.as_str()) {
                publish(&ctx, job, EventType::Warning, "ApplyFailed", message.clone()).await;
            }
            let status = status::compute(job, &Observed::ApplyFailed(message), now);
            write_status(&ctx, &original, &status).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    // The job ended and its JobManager was released (past the shutdown TTL): nothing runs to ask
    // or to look at, until the spec changes (the watch wakes the reconcile then).
    let released = replicas.jobmanagers == 0 && !suspended;
    // A JobManager that does not answer: its pods may say why.
    let observed = match observed {
        Observed::Unreachable(_) | Observed::NoJob if !released => {
            match workload_problem(&ctx, &ns, job).await {
                Some(p) => {
                    if job.status.as_ref().and_then(|s| s.error.as_deref()) != Some(p.message.as_str()) {
                        publish(&ctx, job, EventType::Warning, &p.reason, p.message.clone()).await;
                    }
                    Observed::PodsFailing {
                        reason: p.reason,
                        message: p.message,
                    }
                }
                None => observed,
            }
        }
        other => other,
    };
    let mut status = status::compute(job, &observed, now);
    let tm_status = taskmanager_deployment.status.as_ref();
    // The scale subresource's replicas are the TaskManagers there are, not the ones asked for.
    if !suspended {
        status.task_managers = Some(tm_status.and_then(|s| s.replicas).unwrap_or(0));
    }
    // TaskManagers asked for and not ready: their pods may say why (a quota, no node that fits).
    let ready = tm_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    if !suspended
        && !released
        && ready < replicas.taskmanagers
        && let Some(problem) = taskmanager_problem(&ctx, &ns, job, &taskmanager_deployment).await
    {
        let generation = job.metadata.generation;
        let previous = job.status.as_ref();
        if let Some(message) =
            status::taskmanagers_not_running(previous, &mut status, &problem, generation, now)
        {
            publish(&ctx, job, EventType::Warning, &problem.reason, message).await;
        }
    }
    for decision in status::new_autoscaler_decisions(job, &observed) {
        publish(
            &ctx,
            job,
            EventType::Normal,
            status::AUTOSCALER_RESCALE,
            decision.summary.clone(),
        )
        .await;
    }
    let previous_tms = job
        .status
        .as_ref()
        .and_then(|s| s.autoscaler.as_ref())
        .and_then(|a| a.task_managers);
    if job.spec.autoscales_taskmanagers() && previous_tms.is_some_and(|p| p != taskmanagers) {
        publish(
            &ctx,
            job,
            EventType::Normal,
            status::AUTOSCALER_TASKMANAGERS,
            format!(
                "TaskManagers {} -> {taskmanagers} for the {} slots the job wants (spec.taskManager.replicas..maxReplicas = {}..{})",
                previous_tms.unwrap_or_default(),
                status.autoscaler.as_ref().and_then(|a| a.slots_wanted).unwrap_or_default(),
                job.spec.task_manager.replicas,
                job.spec.task_manager.max_replicas.unwrap_or_default()
            ),
        )
        .await;
    }
    let rolled_back = |s: Option<&FlinkJobStatus>| s.and_then(|s| s.rolled_back_generation).is_some();
    if rolled_back(Some(&status)) && !rolled_back(job.status.as_ref()) {
        let message = status
            .conditions
            .first()
            .map(|c| c.message.clone())
            .unwrap_or_default();
        publish(&ctx, job, EventType::Warning, "Rollback", message).await;
    }
    if let Some(change) = status::state_change(job.status.as_ref(), &status) {
        let type_ = match &observed {
            Observed::Job(j) if j.state == "FAILED" => EventType::Warning,
            _ => EventType::Normal,
        };
        publish(&ctx, job, type_, "JobStatusChanged", change).await;
    }
    if let Some(message) = status::slots_newly_insufficient(job.status.as_ref(), &status) {
        publish(&ctx, job, EventType::Warning, status::INSUFFICIENT_SLOTS, message).await;
    }
    write_status(&ctx, &original, &status).await?;
    if released {
        return Ok(Action::requeue(RELEASED_RESYNC));
    }
    Ok(requeue(&observed))
}

/// The FlinkJob is being deleted: cancel its job; Kubernetes deletes the owned objects.
pub async fn cleanup(job: Arc<FlinkJob>, ctx: Arc<Context>) -> Result<Action> {
    let url = (ctx.jobmanager_url)(&job);
    let cancelled = cancel_running(&ctx, &job, &url).await;
    let note = match cancelled {
        Some(j) => format!("deleting: job {} is {}", j.id, j.state),
        None => "deleting: no running job".to_string(),
    };
    publish(&ctx, &job, EventType::Normal, "Deleting", note).await;
    // `kubernetes.operator.savepoint.dispose-on-delete`: the history goes with the FlinkJob (one
    // event for all, as in `dispose_savepoints`).
    let (mut disposed, mut failed) = (Vec::new(), Vec::new());
    for location in savepoints::on_delete(&job) {
        match ctx.jobmanager.dispose_savepoint(&url, &location).await {
            Ok(()) => disposed.push(location),
            Err(e) => failed.push(format!("{location}: {e}")),
        }
    }
    if !disposed.is_empty() {
        let note = format!(
            "savepoint(s) {} disposed of (the FlinkJob is deleted)",
            disposed.join(", ")
        );
        publish(&ctx, &job, EventType::Normal, "SavepointDisposed", note).await;
    }
    if !failed.is_empty() {
        let note = format!("savepoint(s) could not be disposed of: {}", failed.join("; "));
        publish(&ctx, &job, EventType::Warning, "SavepointError", note).await;
    }
    Ok(Action::await_change())
}

/// Runs the controller until a shutdown signal: one per watched namespace, or one for all.
pub async fn run(client: Client, namespaces: Vec<String>, ctx: Context) {
    let ctx = Arc::new(ctx);
    let scopes: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.into_iter().map(Some).collect()
    };
    let controllers = scopes.into_iter().map(|ns| {
        fn api<K>(client: &Client, ns: &Option<String>) -> Api<K>
        where
            K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
        {
            match ns {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            }
        }
        let owned = watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={MANAGER}"));
        let flinkjobs: Api<DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &flinkjob_resource()),
            None => Api::all_with(client.clone(), &flinkjob_resource()),
        };
        Controller::new_with(
            flinkjobs,
            watcher::Config::default().any_semantic(),
            flinkjob_resource(),
        )
        .owns(api::<Deployment>(&client, &ns), owned.clone())
        .owns(api::<Service>(&client, &ns), owned.clone())
        .owns(api::<ConfigMap>(&client, &ns), owned)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            let health = ctx.health.clone();
            async move {
                match result {
                    Ok((object, _)) => tracing::debug!(job = %object.name, "reconciled"),
                    Err(kube::runtime::controller::Error::QueueError(e)) => {
                        tracing::warn!(error = %e, "watch error");
                        health.watch_failed(std::time::Instant::now(), e.to_string());
                    }
                    Err(e) => tracing::warn!(error = %e, "reconcile error"),
                }
            }
        })
    });
    futures::future::join_all(controllers).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34, item 9: a key Floe does not read is a Warning event at the first reconcile of
    /// each generation that has one, naming the key it is nearest to; not at every reconcile.
    #[test]
    fn unknown_configuration_keys_are_a_warning_once_per_generation() {
        let mut job = crate::resources::testing::example();
        job.metadata.generation = Some(2);
        job.spec
            .configuration
            .insert("execution.checkpointing.intervall".into(), "10 s".into());
        let note = configuration_warning(&job).expect("a new generation with an unknown key");
        assert!(
            note.contains("\"execution.checkpointing.intervall\" is not one Floe reads")
                && note.contains("did you mean \"execution.checkpointing.interval\"?"),
            "{note}"
        );
        job.status = Some(FlinkJobStatus {
            observed_generation: Some(2),
            ..FlinkJobStatus::default()
        });
        assert_eq!(
            configuration_warning(&job),
            None,
            "this generation was reconciled"
        );
        job.metadata.generation = Some(3);
        assert!(configuration_warning(&job).is_some());
        job.spec.configuration.clear();
        assert_eq!(configuration_warning(&job), None, "nothing unknown");
    }
}
