//! Fixtures of the resource builders' tests: the example FlinkJob, the operator's defaults, golden
//! files.
#![allow(clippy::unwrap_used)]

use floe_manifest::FlinkJob;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;

use super::Defaults;

/// The Kubernetes example (s3:// storage, credentials from a Secret) in namespace `jobs`.
pub(crate) fn example() -> FlinkJob {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/kubernetes/wordcount.yaml"
    ))
    .unwrap();
    let mut job = FlinkJob::from_yaml(&text).unwrap();
    job.validate_for_cluster().unwrap();
    job.metadata.namespace = Some("jobs".into());
    job.metadata.uid = Some("8b7a1c2e-0000-4000-8000-000000000001".into());
    job
}

pub(crate) fn defaults() -> Defaults {
    Defaults::image("ghcr.io/floe-dev/floe-worker:default")
}

/// Compares with `tests/golden/NAME.yaml`; `FLOE_UPDATE_GOLDEN=1` rewrites the file.
pub(crate) fn golden(name: &str, value: &impl serde::Serialize) {
    let path = format!("{}/tests/golden/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    let actual = serde_yaml::to_string(value).unwrap();
    if std::env::var_os("FLOE_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (FLOE_UPDATE_GOLDEN=1 writes it)"));
    assert_eq!(
        actual, expected,
        "{name} differs from {path}; review and rerun with FLOE_UPDATE_GOLDEN=1"
    );
}

/// The one container of a Deployment's pods.
pub(crate) fn container(d: &Deployment) -> &Container {
    &d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}
