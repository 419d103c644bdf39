//! Who may reach a job (issue 13, item 12): a NetworkPolicy per job lets in only the job's own
//! pods (JobManager RPC, the TaskManagers' shuffle and task ports, REST) and the operator (REST,
//! for status, savepoints and cancels). Without it every pod in the cluster could reach the
//! JobManager's REST API and cancel the job. Policies add up: to open the REST API to more
//! clients (a dashboard, Prometheus), a user adds a policy of their own that allows them.
//! Egress stays open: jobs reach object storage and their sources and sinks.

use std::collections::BTreeMap;

use floe_manifest::FlinkJob;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{JOB_LABEL, OperatorPods, REST_PORT, TASKMANAGER_METRICS_PORT, meta};

/// The label every namespace carries with its name (Kubernetes 1.21+).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// `<job>-network`.
pub fn network_policy_name(job: &FlinkJob) -> String {
    format!("{}-network", job.name())
}

/// Every pod of the job, JobManager and TaskManagers.
fn job_pods(job: &FlinkJob) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([
            ("app.kubernetes.io/name".into(), "floe".into()),
            (JOB_LABEL.into(), job.name().into()),
        ])),
        ..LabelSelector::default()
    }
}

/// Pods of `pods.namespace` with `pods.labels`.
fn peer(pods: &OperatorPods) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                NAMESPACE_NAME_LABEL.into(),
                pods.namespace.clone(),
            )])),
            ..LabelSelector::default()
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(pods.labels.clone()),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    }
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..NetworkPolicyPort::default()
    }
}

/// The job's NetworkPolicy: ingress to its pods from its pods, to the REST port from the
/// operator's pods, and, when the operator names a metrics scraper (a Prometheus), to the
/// JobManager's REST port (`/metrics`) and the TaskManagers' metrics port from it. The REST port
/// serves both the metrics and the API, so a scraper let in can also read (and cancel) jobs:
/// name only the Prometheus pods.
pub fn network_policy(
    job: &FlinkJob,
    operator: &OperatorPods,
    scrapers: Option<&OperatorPods>,
) -> NetworkPolicy {
    let own_pods = NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(job_pods(job)),
            ..NetworkPolicyPeer::default()
        }]),
        ports: None,
    };
    let from_operator = NetworkPolicyIngressRule {
        from: Some(vec![peer(operator)]),
        ports: Some(vec![tcp(REST_PORT)]),
    };
    let from_scrapers = scrapers.map(|pods| NetworkPolicyIngressRule {
        from: Some(vec![peer(pods)]),
        ports: Some(vec![tcp(REST_PORT), tcp(TASKMANAGER_METRICS_PORT)]),
    });
    NetworkPolicy {
        metadata: meta(job, network_policy_name(job), None),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(job_pods(job)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(
                [own_pods, from_operator]
                    .into_iter()
                    .chain(from_scrapers)
                    .collect(),
            ),
            ..NetworkPolicySpec::default()
        }),
    }
}

/// `key=value,...` as `--operator-pod-labels` takes the operator's own pod labels.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
            _ => Err(format!(
                "expected key=value pairs separated by commas, got {pair:?}"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{defaults, example, golden};
    use super::super::{Defaults, desired};
    use super::*;

    fn operator() -> OperatorPods {
        OperatorPods {
            namespace: "floe-system".into(),
            labels: parse_labels(
                "app.kubernetes.io/name=floe-operator,app.kubernetes.io/instance=floe-operator",
            )
            .unwrap(),
        }
    }

    /// The namespace a rule's (first) peer is selected from.
    fn namespace_of(rule: &NetworkPolicyIngressRule) -> &str {
        let from = &rule.from.as_ref().unwrap()[0];
        &from
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()[NAMESPACE_NAME_LABEL]
    }

    /// Issue 13, item 12: the job's pods take connections from each other and the operator's
    /// REST calls, nothing else; the policy selects exactly the pods of both Deployments.
    #[test]
    fn only_the_jobs_pods_and_the_operator_reach_a_job() {
        let job = example();
        let with_policy = Defaults {
            operator: Some(operator()),
            ..defaults()
        };
        let d = desired(&job, &with_policy);
        let policy = d.network_policy.clone().expect("a NetworkPolicy");
        golden("networkpolicy", &policy);
        let spec = policy.spec.unwrap();
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
        let selected = spec.pod_selector.unwrap().match_labels.unwrap();
        for deployment in [&d.jobmanager, &d.taskmanager] {
            let pod_labels = deployment
                .spec
                .as_ref()
                .unwrap()
                .template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .clone()
                .unwrap();
            for (k, v) in &selected {
                assert_eq!(pod_labels.get(k), Some(v), "the policy selects the pods by {k}");
            }
        }
        let ingress = spec.ingress.unwrap();
        assert_eq!(ingress.len(), 2);
        assert_eq!(ingress[0].ports, None, "the job's own pods reach every port");
        assert_eq!(namespace_of(&ingress[1]), "floe-system");
        let ports = ingress[1].ports.as_ref().unwrap();
        assert_eq!(
            ports[0].port,
            Some(IntOrString::Int(8081)),
            "the operator reaches REST only"
        );
        // No policy without the operator's whereabouts.
        assert!(desired(&job, &defaults()).network_policy.is_none());
        // Another job's pods are not this job's.
        let mut other = example();
        other.metadata.name = Some("other".into());
        let other_policy = network_policy(&other, &operator(), None);
        assert_ne!(
            other_policy.spec.unwrap().pod_selector,
            Some(job_pods(&job)),
            "each job's policy selects its own pods"
        );
    }

    /// A Prometheus the operator was told of (`--metrics-scraper-*`) reaches the JobManager's
    /// `/metrics` (REST port) and the TaskManagers' metrics port, nothing else.
    #[test]
    fn a_named_prometheus_reaches_the_metrics_ports() {
        let prometheus = OperatorPods {
            namespace: "monitoring".into(),
            labels: parse_labels("app.kubernetes.io/name=prometheus").unwrap(),
        };
        let with_scraper = Defaults {
            operator: Some(operator()),
            metrics_scrapers: Some(prometheus),
            ..defaults()
        };
        let policy = desired(&example(), &with_scraper).network_policy.unwrap();
        let ingress = policy.spec.unwrap().ingress.unwrap();
        assert_eq!(ingress.len(), 3, "own pods, the operator, Prometheus");
        let rule = &ingress[2];
        assert_eq!(namespace_of(rule), "monitoring");
        let from = &rule.from.as_ref().unwrap()[0];
        let pods = from.pod_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
        assert_eq!(pods["app.kubernetes.io/name"], "prometheus");
        let ports: Vec<_> = rule
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| p.port.clone())
            .collect();
        assert_eq!(
            ports,
            vec![Some(IntOrString::Int(8081)), Some(IntOrString::Int(9249))]
        );
    }

    #[test]
    fn operator_labels_parse_or_name_the_bad_pair() {
        assert_eq!(
            parse_labels("a=1, b=2").unwrap(),
            BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])
        );
        let e = parse_labels("a=1,b").unwrap_err();
        assert!(e.contains("\"b\""), "{e}");
    }
}
