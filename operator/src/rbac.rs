//! The Kubernetes permissions the operator uses, and nothing more. The Helm chart's ClusterRole
//! (`charts/floe-operator/templates/clusterrole.yaml`) must grant exactly these; a test compares them.

/// One RBAC rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub api_group: &'static str,
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

/// Why each rule is there:
/// - FlinkJobs are watched; `patch` adds and removes the finalizer.
/// - Their status is written by server-side apply.
/// - ConfigMaps, Services and Deployments are applied (server-side apply creates them, hence `create`)
///   and watched as owned objects; deletion is left to the garbage collector (owner references).
/// - Events go through events.k8s.io (kube's `Recorder`), which creates and then patches a series.
/// - Pods are read (never changed) to tell why a job's pods do not run.
/// - A job's NetworkPolicy is applied (with `--network-policies`); like the others it goes with
///   its FlinkJob through the garbage collector.
pub const RULES: &[Rule] = &[
    Rule {
        api_group: "floe.dev",
        resources: &["flinkjobs"],
        verbs: &["get", "list", "watch", "patch"],
    },
    Rule {
        api_group: "floe.dev",
        resources: &["flinkjobs/status"],
        verbs: &["get", "patch"],
    },
    Rule {
        api_group: "",
        resources: &["configmaps", "services"],
        verbs: &["get", "list", "watch", "create", "patch"],
    },
    Rule {
        api_group: "",
        resources: &["pods"],
        verbs: &["get", "list"],
    },
    Rule {
        api_group: "apps",
        resources: &["deployments"],
        verbs: &["get", "list", "watch", "create", "patch"],
    },
    Rule {
        api_group: "networking.k8s.io",
        resources: &["networkpolicies"],
        verbs: &["create", "patch"],
    },
    Rule {
        api_group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
    },
];

/// The namespaced rules of the chart's Role (`templates/role.yaml`), in the operator's own
/// namespace: the Lease of leader election (read, taken, renewed by server-side apply).
pub const LEASE_RULES: &[Rule] = &[Rule {
    api_group: "coordination.k8s.io",
    resources: &["leases"],
    verbs: &["get", "create", "patch"],
}];

fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The rules as the chart writes them (flow-style lists).
pub fn rules_yaml(rules: &[Rule]) -> String {
    rules
        .iter()
        .map(|r| {
            format!(
                "- apiGroups: [{:?}]\n  resources: {}\n  verbs: {}\n",
                r.api_group,
                list(r.resources),
                list(r.verbs)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chart's rules of `file` (after `rules:`).
    fn chart_rules(file: &str) -> (String, String) {
        let path = format!(
            "{}/../charts/floe-operator/templates/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let rules = text
            .split_once("rules:\n")
            .unwrap_or_else(|| panic!("{path}: no `rules:` line"))
            .1
            .to_string();
        assert!(!text.contains('*'), "{path}: wildcard");
        (path, rules)
    }

    #[test]
    fn the_charts_roles_grant_exactly_these_rules_without_wildcards() {
        let (path, rules) = chart_rules("clusterrole.yaml");
        assert_eq!(
            rules,
            rules_yaml(RULES),
            "{path} differs from operator/src/rbac.rs"
        );
        let (path, rules) = chart_rules("role.yaml");
        assert_eq!(
            rules,
            rules_yaml(LEASE_RULES),
            "{path} differs from operator/src/rbac.rs"
        );
    }
}
