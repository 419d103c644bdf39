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
        api_group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
    },
];

fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The rules as the chart writes them (flow-style lists).
pub fn rules_yaml() -> String {
    RULES
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

    #[test]
    fn the_charts_cluster_role_grants_exactly_these_rules_without_wildcards() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../charts/floe-operator/templates/clusterrole.yaml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let rules = text
            .split_once("rules:\n")
            .unwrap_or_else(|| panic!("{path}: no `rules:` line"))
            .1;
        assert_eq!(rules, rules_yaml(), "{path} differs from operator/src/rbac.rs");
        assert!(!text.contains('*'), "{path}: wildcard");
    }
}
