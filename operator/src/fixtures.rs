//! Reconcile tests against a mock API server (kube's tower-test pattern, as in kube-rs/controller-rs):
//! the test scripts the requests reconcile must make, checks each one (method, path, body) and answers
//! it. A request the script does not expect fails the test; a request the script expects and
//! reconcile does not make fails it too. The JobManager behind the REST API is a scripted
//! [`JobManagerApi`]; the real HTTP client is tested against a real JobManager in `jobmanager_api`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use floe_manifest::{DesiredState, FlinkJob};
use http::{Method, Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::{Client, Resource};
use serde_json::{Value, json};

use crate::controller::{Context, FINALIZER, reconcile};
use crate::jobmanager_api::{JobManagerApi, JobOverview, RestError};
use crate::resources::Defaults;

/// A JobManager whose answer the test sets, recording the cancels it gets.
#[derive(Debug)]
struct ScriptedJobManager {
    answer: Mutex<Result<Option<JobOverview>, String>>,
    cancels: Mutex<Vec<String>>,
}

impl ScriptedJobManager {
    fn new(answer: Result<Option<JobOverview>, String>) -> Arc<Self> {
        Arc::new(ScriptedJobManager {
            answer: Mutex::new(answer),
            cancels: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl JobManagerApi for ScriptedJobManager {
    async fn current_job(&self, base: &str) -> Result<Option<JobOverview>, RestError> {
        assert_eq!(base, "http://wordcount-jobmanager.jobs.svc:8081");
        self.answer
            .lock()
            .unwrap()
            .clone()
            .map_err(|message| RestError::Unreachable {
                url: format!("{base}/jobs"),
                message,
            })
    }

    async fn cancel(&self, _base: &str, job_id: &str) -> Result<(), RestError> {
        self.cancels.lock().unwrap().push(job_id.to_string());
        let mut answer = self.answer.lock().unwrap();
        if let Ok(Some(j)) = answer.as_mut() {
            j.state = "CANCELED".into();
        }
        Ok(())
    }
}

fn job_running(state: &str) -> JobOverview {
    JobOverview {
        id: "a1b2".into(),
        name: "wordcount".into(),
        state: state.into(),
        start_time_ms: Some(1_764_460_800_000),
        failure: None,
        parallelism: Some(4),
        slots_wanted: None,
        autoscaler_decisions: Vec::new(),
    }
}

/// One request reconcile must make, and what it must contain.
struct Expect {
    method: Method,
    path: String,
    check: Box<dyn FnOnce(&Value) + Send>,
}

fn expect(method: Method, path: &str, check: impl FnOnce(&Value) + Send + 'static) -> Expect {
    Expect {
        method,
        path: path.into(),
        check: Box::new(check),
    }
}

const NS_PATH: &str = "/api/v1/namespaces/jobs";
const APPS_PATH: &str = "/apis/apps/v1/namespaces/jobs";
const JOB_PATH: &str = "/apis/floe.dev/v1alpha1/namespaces/jobs/flinkjobs/wordcount";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/jobs/events";

/// Server-side applies of the four objects, in order, with the replicas expected of each Deployment.
fn applies(jobmanagers: i64, taskmanagers: i64) -> Vec<Expect> {
    let owned = |body: &Value| {
        assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "FlinkJob");
        assert_eq!(body["metadata"]["ownerReferences"][0]["name"], "wordcount");
        assert_eq!(body["metadata"]["labels"]["floe.dev/job"], "wordcount");
    };
    vec![
        expect(
            Method::PATCH,
            &format!("{NS_PATH}/configmaps/wordcount-config"),
            move |b| {
                owned(b);
                assert!(
                    b["data"]["flinkjob.yaml"]
                        .as_str()
                        .unwrap()
                        .contains("name: wordcount")
                );
            },
        ),
        expect(
            Method::PATCH,
            &format!("{NS_PATH}/services/wordcount-jobmanager"),
            move |b| {
                owned(b);
                assert_eq!(b["spec"]["ports"][0]["port"], 6123);
            },
        ),
        expect(
            Method::PATCH,
            &format!("{APPS_PATH}/deployments/wordcount-jobmanager"),
            move |b| {
                owned(b);
                assert_eq!(b["spec"]["replicas"], jobmanagers, "JobManager replicas");
            },
        ),
        expect(
            Method::PATCH,
            &format!("{APPS_PATH}/deployments/wordcount-taskmanager"),
            move |b| {
                owned(b);
                assert_eq!(b["spec"]["replicas"], taskmanagers, "TaskManager replicas");
            },
        ),
    ]
}

fn event(type_: &'static str, reason: &'static str, note: &'static str) -> Expect {
    expect(Method::POST, EVENTS_PATH, move |b| {
        assert_eq!(b["type"], type_);
        assert_eq!(b["reason"], reason);
        assert!(
            b["note"].as_str().unwrap().contains(note),
            "event note {:?}",
            b["note"]
        );
        assert_eq!(b["regarding"]["name"], "wordcount");
    })
}

fn status_patch(check: impl FnOnce(&Value) + Send + 'static) -> Expect {
    expect(Method::PATCH, &format!("{JOB_PATH}/status"), move |b| {
        assert_eq!(b["kind"], "FlinkJob");
        check(&b["status"]);
    })
}

/// Answers the scripted requests in order, then checks that nothing else was asked.
async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    stored: Value,
    script: Vec<Expect>,
) {
    for step in script {
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("reconcile did not make {} {}", step.method, step.path))
            .expect("client dropped");
        assert_eq!(
            (request.method(), request.uri().path()),
            (&step.method, step.path.as_str()),
            "unexpected request"
        );
        if step.method == Method::PATCH && !step.path.starts_with(JOB_PATH) || step.path.ends_with("/status")
        {
            let query = request.uri().query().unwrap_or_default();
            assert!(
                query.contains("fieldManager=floe-operator") && query.contains("force=true"),
                "server-side apply expected: {query}"
            );
        }
        let body = request.into_body().collect_bytes().await.unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        (step.check)(&body);
        // The API server returns the object it stored: the FlinkJob (with the status sent) for
        // requests on the FlinkJob, else the object that was applied.
        let reply = if step.path.starts_with(JOB_PATH) {
            let mut stored = stored.clone();
            if let Some(status) = body.get("status") {
                stored["status"] = status.clone();
            }
            stored
        } else if body.is_object() {
            body
        } else {
            json!({})
        };
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap(),
        );
    }
    // Anything further is a request the script did not allow.
    if let Ok(Some((request, _))) =
        tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await
    {
        panic!("unexpected request {} {}", request.method(), request.uri());
    }
}

fn context(
    jobmanager: Arc<ScriptedJobManager>,
) -> (
    Arc<Context>,
    tower_test::mock::Handle<Request<Body>, Response<Body>>,
) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "jobs");
    let mut ctx = Context::new(
        client,
        jobmanager,
        Defaults {
            image: "floe/worker:test".into(),
        },
    );
    ctx.jobmanager_url = crate::controller::in_cluster_jobmanager_url;
    (Arc::new(ctx), handle)
}

/// The example manifest as the API server would hand it over: namespace, uid, generation.
fn resource(finalized: bool) -> FlinkJob {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/wordcount.yaml")).unwrap();
    let mut job = FlinkJob::from_yaml(&text).unwrap();
    job.metadata.namespace = Some("jobs".into());
    job.metadata.uid = Some("8b7a1c2e-0000-4000-8000-000000000001".into());
    job.metadata.generation = Some(1);
    job.metadata.resource_version = Some("100".into());
    if finalized {
        job.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    job
}

/// Runs one reconcile against the script; returns its action.
async fn run(job: FlinkJob, jobmanager: Arc<ScriptedJobManager>, script: Vec<Expect>) -> Action {
    let (ctx, handle) = context(jobmanager);
    let stored = serde_json::to_value(&job).unwrap();
    let server = tokio::spawn(serve(handle, stored, script));
    let action = tokio::time::timeout(Duration::from_secs(10), reconcile(Arc::new(job), ctx))
        .await
        .expect("reconcile hung")
        .expect("reconcile failed");
    server.await.expect("the mock API server saw a wrong request");
    action
}

/// The status reconcile wrote, as the next reconcile will see it.
fn with_status(mut job: FlinkJob, status: floe_manifest::FlinkJobStatus) -> FlinkJob {
    job.status = Some(status);
    job
}

fn computed(job: &FlinkJob, observed: crate::status::Observed) -> floe_manifest::FlinkJobStatus {
    crate::status::compute(job, &observed, Timestamp::now())
}

#[tokio::test]
async fn a_new_flinkjob_first_gets_the_finalizer() {
    let jm = ScriptedJobManager::new(Err("not started".into()));
    let action = run(
        resource(false),
        jm,
        vec![expect(Method::PATCH, JOB_PATH, |b| {
            let ops = b.as_array().expect("a JSON patch");
            assert!(
                ops.iter()
                    .any(|op| op["op"] == "add" && op["path"] == "/metadata/finalizers"),
                "{b}"
            );
        })],
    )
    .await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn create_applies_every_object_and_reports_the_job_deploying() {
    let jm = ScriptedJobManager::new(Err("connection refused".into()));
    let mut script = applies(1, 2);
    script.push(event(
        "Normal",
        "JobStatusChanged",
        "job state none -> RECONCILING",
    ));
    script.push(status_patch(|s| {
        assert_eq!(s["lifecycleState"], "DEPLOYED");
        assert_eq!(s["jobStatus"]["state"], "RECONCILING");
        assert_eq!(s["observedGeneration"], 1);
        assert_eq!(s["taskManagers"], 2);
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "JobManagerUnreachable");
        assert!(
            s["conditions"][0]["message"]
                .as_str()
                .unwrap()
                .contains("connection refused")
        );
    }));
    let action = run(resource(true), jm, script).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
}

#[tokio::test]
async fn status_follows_the_jobmanager_to_running_and_finished() {
    let jm = ScriptedJobManager::new(Ok(Some(job_running("RUNNING"))));
    let deploying = computed(&resource(true), crate::status::Observed::NoJob);
    let job = with_status(resource(true), deploying);
    let mut script = applies(1, 2);
    script.push(event(
        "Normal",
        "JobStatusChanged",
        "job state RECONCILING -> RUNNING",
    ));
    script.push(status_patch(|s| {
        assert_eq!(s["jobStatus"]["state"], "RUNNING");
        assert_eq!(s["jobStatus"]["jobId"], "a1b2");
        assert_eq!(s["jobStatus"]["startTime"], "1764460800000");
        assert_eq!(s["jobStatus"]["parallelism"], 4);
        assert_eq!(s["lifecycleState"], "STABLE");
        assert_eq!(s["conditions"][0]["status"], "True");
    }));
    run(job.clone(), jm.clone(), script).await;

    *jm.answer.lock().unwrap() = Ok(Some(job_running("FINISHED")));
    let running = computed(&job, crate::status::Observed::Job(job_running("RUNNING")));
    let job = with_status(job, running);
    let mut script = applies(1, 2);
    script.push(event(
        "Normal",
        "JobStatusChanged",
        "job state RUNNING -> FINISHED",
    ));
    script.push(status_patch(|s| {
        assert_eq!(s["jobStatus"]["state"], "FINISHED");
        assert_eq!(s["conditions"][0]["reason"], "JobFinished");
    }));
    let action = run(job.clone(), jm.clone(), script).await;
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(60)),
        "an ended job is looked at rarely"
    );

    // Nothing changed: objects are applied again (idempotent), but no event and no status write.
    let finished = computed(&job, crate::status::Observed::Job(job_running("FINISHED")));
    let job = with_status(job, finished);
    run(job, jm, applies(1, 2)).await;
}

/// Issue 17: a parallelism the TaskManagers cannot hold is a condition and a Warning event (once),
/// while the objects are still applied: the job may get its slots when the spec changes.
/// Issue 12, part 4: `kubectl scale flinkjob wordcount --replicas 4` changes only
/// `spec.taskManager.replicas` (the scale subresource). Reconcile patches the TaskManager
/// Deployment to 4 and leaves the JobManager's pod alone (its template hashes the manifest without
/// the replicas); the adaptive scheduler in the JobManager rescales the
/// running job to the new slots, and the status shows the parallelism it reports.
#[tokio::test]
async fn a_scaled_flinkjob_gets_more_taskmanagers_and_its_status_the_new_parallelism() {
    let mut before = resource(true);
    before
        .spec
        .configuration
        .insert("jobmanager.scheduler".into(), "adaptive".into());
    let mut at_two = job_running("RUNNING");
    at_two.parallelism = Some(2);
    let running = computed(&before, crate::status::Observed::Job(at_two));
    let defaults = Defaults { image: "x".into() };
    let before_objects = crate::resources::desired(&before, &defaults);
    let mut scaled = with_status(before, running);
    scaled.spec.task_manager.replicas = 4;
    scaled.metadata.generation = Some(2);
    let after_objects = crate::resources::desired(&scaled, &defaults);
    assert_eq!(
        after_objects.jobmanager.spec.as_ref().map(|s| &s.template),
        before_objects.jobmanager.spec.as_ref().map(|s| &s.template),
        "the JobManager's pod is not replaced"
    );
    let jm = ScriptedJobManager::new(Ok(Some(job_running("RUNNING"))));
    let mut script = applies(1, 4);
    script.push(status_patch(|s| {
        assert_eq!(s["taskManagers"], 4);
        assert_eq!(s["jobStatus"]["state"], "RUNNING");
        assert_eq!(
            s["jobStatus"]["parallelism"], 4,
            "as the JobManager reports it after rescaling"
        );
    }));
    run(scaled, jm, script).await;
}

#[tokio::test]
async fn a_parallelism_above_replicas_times_slots_gets_a_condition_and_an_event() {
    let jm = ScriptedJobManager::new(Err("connection refused".into()));
    let mut job = resource(true);
    job.spec.job.parallelism = floe_manifest::Parallelism::Fixed(8);
    let offered = job.spec.task_manager.replicas * job.spec.task_manager.slots;
    let mut script = applies(1, 2);
    script.push(event(
        "Normal",
        "JobStatusChanged",
        "job state none -> RECONCILING",
    ));
    script.push(event(
        "Warning",
        "InsufficientSlots",
        "parallelism 8 needs 8 slots but spec.taskManager offers",
    ));
    script.push(status_patch(move |s| {
        let slots = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "SlotsSufficient")
            .expect("SlotsSufficient condition");
        assert_eq!(slots["status"], "False");
        assert_eq!(slots["reason"], "InsufficientSlots");
        assert!(
            slots["message"]
                .as_str()
                .unwrap()
                .contains(&format!("= {offered}: raise spec.taskManager.replicas")),
            "{slots}"
        );
    }));
    let action = run(job.clone(), jm.clone(), script).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));

    // Seen again with that condition written: the objects again, no second event.
    let unreachable = crate::jobmanager_api::RestError::Unreachable {
        url: "http://wordcount-jobmanager.jobs.svc:8081/jobs".into(),
        message: "connection refused".into(),
    };
    let status = computed(
        &job,
        crate::status::Observed::Unreachable(unreachable.to_string()),
    );
    let action = run(with_status(job, status), jm, applies(1, 2)).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
}

#[tokio::test]
async fn an_invalid_spec_gets_a_condition_and_an_event_and_is_not_retried() {
    let jm = ScriptedJobManager::new(Ok(None));
    let mut job = resource(true);
    job.spec.task_manager.replicas = 0;
    let message = "invalid manifest: spec.taskManager.replicas: expected at least 1";
    let script = vec![
        event(
            "Warning",
            "InvalidSpec",
            "spec.taskManager.replicas: expected at least 1",
        ),
        status_patch(move |s| {
            assert_eq!(s["conditions"][0]["status"], "False");
            assert_eq!(s["conditions"][0]["reason"], "InvalidSpec");
            assert_eq!(s["conditions"][0]["message"], message);
            assert_eq!(s["error"], message);
            assert_eq!(s["lifecycleState"], "FAILED");
        }),
    ];
    let action = run(job.clone(), jm.clone(), script).await;
    assert_eq!(action, Action::await_change(), "no hot loop: wait for a new spec");

    // Seen again (a resync) with that status already written: no event, no write, no objects.
    let status = computed(&job, crate::status::Observed::InvalidSpec(message.into()));
    let action = run(with_status(job, status), jm, vec![]).await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn suspend_cancels_the_job_and_scales_to_zero_and_resume_scales_back() {
    let jm = ScriptedJobManager::new(Ok(Some(job_running("RUNNING"))));
    let running = computed(
        &resource(true),
        crate::status::Observed::Job(job_running("RUNNING")),
    );
    let mut job = with_status(resource(true), running);
    job.spec.job.state = DesiredState::Suspended;
    job.metadata.generation = Some(2);
    let mut script = applies(0, 0);
    script.push(event(
        "Normal",
        "JobStatusChanged",
        "job state RUNNING -> SUSPENDED",
    ));
    script.push(status_patch(|s| {
        assert_eq!(s["lifecycleState"], "SUSPENDED");
        assert_eq!(s["jobStatus"]["state"], "SUSPENDED");
        assert_eq!(s["jobStatus"]["jobId"], "a1b2");
        assert_eq!(s["taskManagers"], 0);
        assert_eq!(s["observedGeneration"], 2);
    }));
    run(job.clone(), jm.clone(), script).await;
    assert_eq!(
        *jm.cancels.lock().unwrap(),
        ["a1b2"],
        "the job was cancelled before scaling down"
    );

    // Back to running: both Deployments scale up again; the new JobManager submits the job anew.
    *jm.answer.lock().unwrap() = Ok(None);
    let suspended = computed(
        &job,
        crate::status::Observed::Suspended {
            cancelled: Some(job_running("CANCELED")),
        },
    );
    let mut job = with_status(job, suspended);
    job.spec.job.state = DesiredState::Running;
    job.metadata.generation = Some(3);
    let mut script = applies(1, 2);
    script.push(event(
        "Normal",
        "JobStatusChanged",
        "job state SUSPENDED -> RECONCILING",
    ));
    script.push(status_patch(|s| {
        assert_eq!(s["lifecycleState"], "DEPLOYED");
        assert_eq!(s["taskManagers"], 2);
    }));
    run(job, jm.clone(), script).await;
    assert_eq!(jm.cancels.lock().unwrap().len(), 1, "resuming cancels nothing");
}

#[tokio::test]
async fn delete_cancels_the_job_and_releases_the_finalizer() {
    let jm = ScriptedJobManager::new(Ok(Some(job_running("RUNNING"))));
    let mut job = resource(true);
    job.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    let script = vec![
        event("Normal", "Deleting", "job a1b2 is CANCELED"),
        expect(Method::PATCH, JOB_PATH, |b| {
            let ops = b.as_array().expect("a JSON patch");
            assert!(
                ops.iter().any(|op| op["op"] == "remove"),
                "finalizer removed: {b}"
            );
        }),
    ];
    let action = run(job.clone(), jm.clone(), script).await;
    assert_eq!(action, Action::await_change());
    assert_eq!(*jm.cancels.lock().unwrap(), ["a1b2"]);
    // Owned objects are left to the garbage collector: their owner reference names this FlinkJob.
    let desired = crate::resources::desired(&job, &Defaults { image: "x".into() });
    let owner = &desired.taskmanager.metadata.owner_references.unwrap()[0];
    assert_eq!(owner.uid, job.meta().uid.clone().unwrap());
}

/// Issue 12, part 5: the job's autoscaler wants more slots than the TaskManagers offer. The
/// operator raises the TaskManager Deployment for them, no higher than `maxReplicas`, reports the
/// decision and the new replicas as events, and lowers the replicas again (to `replicas`) when the
/// autoscaler scales the job down; each decision is reported once.
#[tokio::test]
async fn the_autoscalers_slots_raise_and_lower_the_taskmanagers_within_max_replicas() {
    use crate::jobmanager_api::AutoscalerDecision;
    let mut job = resource(true);
    for (k, v) in [
        ("jobmanager.scheduler", "adaptive"),
        ("job.autoscaler.enabled", "true"),
    ] {
        job.spec.configuration.insert(k.into(), v.into());
    }
    job.spec.task_manager.replicas = 1;
    job.spec.task_manager.max_replicas = Some(3);
    let mut at_one = job_running("RUNNING");
    at_one.parallelism = Some(1);
    at_one.slots_wanted = Some(1);
    let job = with_status(job.clone(), computed(&job, crate::status::Observed::Job(at_one)));
    assert_eq!(job.status.as_ref().unwrap().task_managers, Some(1));

    let up = AutoscalerDecision {
        time_ms: 1_000,
        summary: "reduce: 1 -> 8 (scale up: true processing rate 950.0/s ...)".into(),
    };
    let mut wanting = job_running("RUNNING");
    wanting.parallelism = Some(2);
    wanting.slots_wanted = Some(8);
    wanting.autoscaler_decisions = vec![up.clone()];
    let jm = ScriptedJobManager::new(Ok(Some(wanting.clone())));
    // 8 slots at 2 per TaskManager would be 4: maxReplicas says 3.
    let mut script = applies(1, 3);
    script.push(event("Normal", "AutoscalerRescale", "reduce: 1 -> 8 (scale up"));
    script.push(event(
        "Normal",
        "AutoscalerTaskManagers",
        "TaskManagers 1 -> 3 for the 8 slots the job wants",
    ));
    script.push(status_patch(|s| {
        assert_eq!(s["taskManagers"], 3);
        assert_eq!(s["autoscaler"]["slotsWanted"], 8);
        assert_eq!(s["autoscaler"]["taskManagers"], 3);
        assert_eq!(s["autoscaler"]["lastDecisionTime"], 1_000);
    }));
    run(job.clone(), jm, script).await;

    // The same answer again: the Deployment stays at 3, no event is repeated.
    let raised = with_status(
        job.clone(),
        computed(&job, crate::status::Observed::Job(wanting.clone())),
    );
    let jm = ScriptedJobManager::new(Ok(Some(wanting.clone())));
    run(raised.clone(), jm, applies(1, 3)).await;

    // The load dropped: the autoscaler scaled the job down to 1 slot; the operator goes back to
    // spec.taskManager.replicas.
    let mut down = wanting;
    down.parallelism = Some(1);
    down.slots_wanted = Some(1);
    down.autoscaler_decisions.push(AutoscalerDecision {
        time_ms: 2_000,
        summary: "reduce: 6 -> 1 (scale down: ...)".into(),
    });
    let jm = ScriptedJobManager::new(Ok(Some(down)));
    let mut script = applies(1, 1);
    script.push(event("Normal", "AutoscalerRescale", "reduce: 6 -> 1"));
    script.push(event("Normal", "AutoscalerTaskManagers", "TaskManagers 3 -> 1"));
    script.push(status_patch(|s| {
        assert_eq!(s["taskManagers"], 1);
        assert_eq!(s["autoscaler"]["lastDecisionTime"], 2_000);
    }));
    run(raised, jm, script).await;
}
