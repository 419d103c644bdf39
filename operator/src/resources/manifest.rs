//! The job's manifest in its ConfigMap (what `floe jobmanager --job-file` reads), and the hashes
//! that tell a new deployment from a scale.

use std::collections::BTreeMap;

use floe_manifest::{DesiredState, FlinkJob};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{config_map_name, meta};

pub const MANIFEST_FILE: &str = "flinkjob.yaml";

/// The manifest the JobManager reads (`floe jobmanager --job-file`): the FlinkJob without status or
/// server-set metadata, so the same file would run under `floe run -f`.
pub fn manifest_yaml(job: &FlinkJob) -> String {
    manifest_doc(job, deployed_generation(job))
}

/// The manifest as YAML with `generation` as its `metadata.generation`, and the savepoint the
/// deployment starts from (`status.deployed.savepoint`) as Flink's
/// `execution.state-recovery.path`.
fn manifest_doc(job: &FlinkJob, generation: Option<i64>) -> String {
    let mut spec = job.spec.clone();
    if let Some(savepoint) = job
        .status
        .as_ref()
        .and_then(|s| s.deployed.as_ref())
        .and_then(|d| d.savepoint.clone())
    {
        spec.configuration
            .insert(floe_manifest::RECOVERY_PATH_KEY.into(), savepoint);
    }
    let doc = serde_json::json!({
        "apiVersion": floe_manifest::API_VERSION,
        "kind": floe_manifest::KIND,
        // uid and generation tell the JobManager whether its logged job belongs to this deployment
        // (a changed spec, a resume after suspend, a FlinkJob created again under the same name
        // are new ones). The generation is the deployed one, not the FlinkJob's: a scale changes
        // the latter, and must not make a restarted JobManager run the job from scratch.
        "metadata": ObjectMeta {
            name: Some(job.name().to_string()),
            namespace: job.metadata.namespace.clone(),
            uid: job.metadata.uid.clone(),
            generation,
            ..ObjectMeta::default()
        },
        "spec": spec,
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// The manifest without what changes by scaling (replicas and their bound, suspend and resume):
/// those change the Deployments' replicas, and must not restart the JobManager (which would run
/// the job anew).
fn hashed_manifest(job: &FlinkJob) -> String {
    let mut job = job.clone();
    job.metadata.uid = None;
    job.status = None;
    // A savepoint or checkpoint asked for is no upgrade (a restart nonce is: it stays in).
    job.spec.job.savepoint_trigger_nonce = None;
    job.spec.job.checkpoint_trigger_nonce = None;
    job.spec.task_manager.replicas = 1;
    job.spec.task_manager.max_replicas = None;
    job.spec.job.state = DesiredState::Running;
    manifest_doc(&job, None)
}

/// The hash of what defines the job (the manifest without scaling, suspend and resume).
pub fn spec_hash(job: &FlinkJob) -> String {
    config_hash(&hashed_manifest(job))
}

/// The pod templates' hash (their `floe.dev/config-hash` annotation): what defines the job, the
/// generation it is deployed at and the savepoint it starts from. A new deployment always rolls
/// the pods out, even when its spec equals the running one's: after A -> B -> A while B's
/// stop-with-savepoint was in flight, job A has stopped, and only a JobManager started anew reads
/// the new manifest (issue 32, item 4). A scale keeps the deployed generation: no rollout.
pub fn pod_template_hash(job: &FlinkJob) -> String {
    let savepoint = job
        .status
        .as_ref()
        .and_then(|s| s.deployed.as_ref())
        .and_then(|d| d.savepoint.as_deref())
        .unwrap_or("");
    let generation = deployed_generation(job).map_or_else(String::new, |g| g.to_string());
    config_hash(&format!(
        "{}\n# deployed generation {generation}, savepoint {savepoint}\n",
        hashed_manifest(job)
    ))
}

/// The FlinkJob generation the job was deployed at: the current one when what defines the job
/// changed since (its [`spec_hash`]) or the job resumes from suspended, else the one recorded in
/// `status.deployed`; while suspended, the recorded one (the resume deploys anew).
pub fn deployed_generation(job: &FlinkJob) -> Option<i64> {
    let current = job.metadata.generation;
    let Some(status) = &job.status else {
        return current;
    };
    let recorded = status.deployed.as_ref();
    if job.spec.job.state == DesiredState::Suspended {
        return recorded.map(|d| d.generation).or(current);
    }
    let resumed = status.lifecycle_state.as_deref() == Some(crate::status::lifecycle::SUSPENDED);
    // A stop savepoint waits for its deployment: the job it stopped is not run again, even when
    // the spec was changed back meanwhile.
    let stopped = status
        .job_status
        .as_ref()
        .is_some_and(|j| j.upgrade_savepoint_path.is_some());
    match recorded {
        Some(d) if !resumed && !stopped && d.spec_hash == spec_hash(job) => Some(d.generation),
        _ => current,
    }
}

/// The manifest's hash (stable across processes and Rust versions).
fn config_hash(text: &str) -> String {
    floe_manifest::stable_hash(text)
}

pub fn config_map(job: &FlinkJob) -> ConfigMap {
    ConfigMap {
        metadata: meta(job, config_map_name(job), None),
        data: Some(BTreeMap::from([(MANIFEST_FILE.into(), manifest_yaml(job))])),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{defaults, example};
    use super::super::{CONFIG_HASH_ANNOTATION, desired};
    use super::*;

    /// Issue 13, item 5: the JobManager tells a new deployment from a restart by the manifest's
    /// generation. A scale (a new FlinkJob generation, the same spec) keeps the deployed one, so a
    /// JobManager restarted after it resumes the job from its log; a changed spec, or a resume
    /// from suspended, is deployed at the new generation (the job runs anew).
    /// The job of the deployment, running.
    fn running() -> crate::status::Observed {
        crate::status::Observed::Job(crate::jobmanager_api::JobOverview {
            id: "j".into(),
            name: "wordcount".into(),
            state: "RUNNING".into(),
            start_time_ms: None,
            end_time_ms: None,
            failure: None,
            parallelism: Some(4),
            slots_wanted: None,
            autoscaler_decisions: Vec::new(),
        })
    }

    #[test]
    fn a_scale_keeps_the_deployed_generation_and_a_spec_change_or_a_resume_takes_the_new_one() {
        let manifest_generation = |j: &FlinkJob| {
            let yaml = config_map(j).data.unwrap()[MANIFEST_FILE].clone();
            FlinkJob::from_yaml(&yaml).unwrap().metadata.generation
        };
        let mut job = example();
        job.metadata.generation = Some(1);
        let observed = running();
        let status = |j: &FlinkJob| crate::status::compute(j, &observed, k8s_openapi::jiff::Timestamp::now());
        job.status = Some(status(&job));
        assert_eq!(
            job.status.as_ref().unwrap().deployed.as_ref().unwrap().generation,
            1
        );

        let mut scaled = job.clone();
        scaled.metadata.generation = Some(2);
        scaled.spec.task_manager.replicas = 4;
        scaled.spec.task_manager.max_replicas = Some(6);
        assert_eq!(
            manifest_generation(&scaled),
            Some(1),
            "a scale is not a new deployment"
        );
        scaled.status = Some(status(&scaled));
        assert_eq!(
            scaled
                .status
                .as_ref()
                .unwrap()
                .deployed
                .as_ref()
                .unwrap()
                .generation,
            1
        );

        let mut changed = scaled.clone();
        changed.metadata.generation = Some(3);
        changed.spec.job.args.push("--seed".into());
        assert_eq!(
            manifest_generation(&changed),
            Some(3),
            "a changed spec is deployed anew"
        );

        // Suspended at generation 4: still the deployed 1; resumed at 5: deployed anew.
        let mut suspended = scaled.clone();
        suspended.metadata.generation = Some(4);
        suspended.spec.job.state = DesiredState::Suspended;
        assert_eq!(manifest_generation(&suspended), Some(1));
        let suspended_status = crate::status::compute(
            &suspended,
            &crate::status::Observed::Suspended { cancelled: None },
            k8s_openapi::jiff::Timestamp::now(),
        );
        assert_eq!(suspended_status.lifecycle_state.as_deref(), Some("SUSPENDED"));
        let mut resumed = suspended.clone();
        resumed.status = Some(suspended_status);
        resumed.metadata.generation = Some(5);
        resumed.spec.job.state = DesiredState::Running;
        assert_eq!(
            manifest_generation(&resumed),
            Some(5),
            "a resume is a new deployment"
        );
    }

    /// Issue 32, item 4: spec A runs, B's stop-with-savepoint completes after the spec went back to
    /// A (a GitOps revert, generation 3). Job A has stopped; the deployment of generation 3 (A,
    /// from B's savepoint) must reach a new JobManager, so its pods roll out although the spec is
    /// A's again.
    #[test]
    fn a_spec_reverted_during_its_stop_savepoint_still_rolls_the_pods_out() {
        let mut job = example();
        job.metadata.generation = Some(1);
        let observed = running();
        job.status = Some(crate::status::compute(
            &job,
            &observed,
            k8s_openapi::jiff::Timestamp::now(),
        ));
        let mut reverted = job.clone();
        reverted.metadata.generation = Some(3);
        reverted
            .status
            .as_mut()
            .unwrap()
            .job_status
            .get_or_insert_with(Default::default)
            .upgrade_savepoint_path = Some("file:///savepoints/savepoint-7".into());
        assert_eq!(spec_hash(&reverted), spec_hash(&job), "the spec is A's again");
        assert_eq!(deployed_generation(&reverted), Some(3));
        assert_ne!(
            pods_hash(&reverted),
            pods_hash(&job),
            "the stopped job's JobManager must be replaced"
        );
        // Once deployed (status records generation 3 and its savepoint), the hash holds still.
        let mut deployed = reverted.clone();
        let status = deployed.status.as_mut().unwrap();
        status.job_status = None;
        let d = status.deployed.as_mut().unwrap();
        d.generation = 3;
        d.savepoint = Some("file:///savepoints/savepoint-7".into());
        assert_eq!(deployed_generation(&deployed), Some(3));
        let mut scaled = deployed.clone();
        scaled.metadata.generation = Some(4);
        scaled.spec.task_manager.replicas = 7;
        assert_eq!(pods_hash(&scaled), pods_hash(&deployed), "a scale is no rollout");
    }

    fn pods_hash(j: &FlinkJob) -> String {
        desired(j, &defaults())
            .jobmanager
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()[CONFIG_HASH_ANNOTATION]
            .clone()
    }

    #[test]
    fn a_spec_change_changes_the_pods_config_hash() {
        let job = example();
        let mut changed = job.clone();
        changed.spec.task_manager.slots = 3;
        let hash = pods_hash;
        assert_ne!(hash(&job), hash(&changed));
        assert_eq!(hash(&job), hash(&job.clone()));
        let mut scaled = job.clone();
        scaled.spec.task_manager.replicas = 5;
        scaled.spec.job.state = DesiredState::Suspended;
        assert_eq!(
            hash(&job),
            hash(&scaled),
            "scaling must not restart the JobManager"
        );
        let mut savepoint = job.clone();
        savepoint.spec.job.savepoint_trigger_nonce = Some(7);
        assert_eq!(hash(&job), hash(&savepoint), "a savepoint nonce is no upgrade");
        let mut checkpoint = job.clone();
        checkpoint.spec.job.checkpoint_trigger_nonce = Some(3);
        assert_eq!(hash(&job), hash(&checkpoint), "a checkpoint nonce is no upgrade");
        let mut restart = job.clone();
        restart.spec.job.restart_nonce = Some(1);
        assert_ne!(hash(&job), hash(&restart), "a restart nonce is a new deployment");
    }
}
