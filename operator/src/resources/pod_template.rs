//! Pod templates (Flink's `podTemplate`, `jobManager.podTemplate`, `taskManager.podTemplate`):
//! how a FlinkJob's templates become part of the pods the operator makes.
//!
//! A component's template is `spec.podTemplate` with the component's own merged over it. The
//! operator's pod is then merged over that, in two layers: its defaults (the pod and main
//! container security contexts, the scrape annotations) go under the template, so a template
//! replaces them; what runs the process (the main container's image, arguments, ports, probes,
//! working directory, environment it sets, its volumes and mounts, the labels the Deployment
//! selects on, the template hash) goes over it, so no template breaks the job. Objects merge key
//! by key and lists of named items (containers, volumes, mounts, env, ports, pull secrets) by
//! name, as the Flink operator does with `kubernetes.operator.pod-template.merge-arrays-by-name`;
//! other lists are replaced. The template names the main container `flink-main-container`, as in
//! Flink, or by the component (`jobmanager`, `taskmanager`); any other container is a sidecar.

use floe_manifest::{FlinkJob, PodTemplate};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Map, Value};

use super::CONFIG_HASH_ANNOTATION;
use super::Component;

/// The main container's name in a Flink pod template.
pub const MAIN_CONTAINER: &str = "flink-main-container";

/// A component's template: `spec.podTemplate` with the component's merged over it.
pub(super) fn effective(job: &FlinkJob, component: Component) -> PodTemplate {
    let common = job.spec.pod_template.clone().unwrap_or_default();
    let own = match component {
        Component::JobManager => job.spec.job_manager.as_ref().and_then(|j| j.pod_template.clone()),
        Component::TaskManager => job.spec.task_manager.pod_template.clone(),
    };
    let Some(own) = own else {
        return common;
    };
    let mut merged = common;
    merged.labels.extend(own.labels);
    merged.annotations.extend(own.annotations);
    merged.env.extend(own.env);
    merged.service_account_name = own.service_account_name.or(merged.service_account_name);
    merged.security_context = own.security_context.or(merged.security_context);
    for (mine, theirs) in [(&mut merged.metadata, own.metadata), (&mut merged.spec, own.spec)] {
        match (mine.as_mut(), theirs) {
            (Some(base), Some(over)) => merge(base, over),
            (None, Some(over)) => *mine = Some(over),
            (_, None) => {}
        }
    }
    merged
}

/// `ours` (the pod the operator makes for `component`) merged with `template`'s metadata and
/// spec (see the module doc); `ours` itself when the template gives neither.
pub(super) fn apply(
    ours: PodTemplateSpec,
    template: &PodTemplate,
    component: Component,
) -> Result<PodTemplateSpec, String> {
    if template.metadata.is_none() && template.spec.is_none() {
        return Ok(ours);
    }
    let main = component.name();
    let other = match component {
        Component::JobManager => Component::TaskManager.name(),
        Component::TaskManager => Component::JobManager.name(),
    };
    let mut essentials = serde_json::to_value(&ours).map_err(|e| e.to_string())?;
    // The template, its main container under the component's name; the other component's main
    // container (named by component in the common template) is not this pod's.
    let mut pod = serde_json::json!({ "metadata": {}, "spec": {} });
    if let Some(metadata) = &template.metadata {
        merge(&mut pod["metadata"], metadata.clone());
    }
    if let Some(spec) = &template.spec {
        merge(&mut pod["spec"], spec.clone());
    }
    if let Some(containers) = pod.pointer_mut("/spec/containers").and_then(Value::as_array_mut) {
        containers.retain(|c| c.get("name").and_then(Value::as_str) != Some(other));
        for c in containers {
            if c.get("name").and_then(Value::as_str) == Some(MAIN_CONTAINER) {
                c["name"] = main.into();
            }
        }
    }
    // The operator's defaults, where the template says nothing: its annotations (but the
    // template hash), the pod's and the main container's security contexts.
    if let Some(annotations) = essentials
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        let hash = annotations.remove(CONFIG_HASH_ANNOTATION);
        let defaults = std::mem::take(annotations);
        if let Some(hash) = hash {
            annotations.insert(CONFIG_HASH_ANNOTATION.into(), hash);
        }
        let theirs = pod["metadata"]
            .as_object_mut()
            .ok_or("the pod template's metadata is not an object")?
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(theirs) = theirs.as_object_mut() {
            for (key, value) in defaults {
                theirs.entry(key).or_insert(value);
            }
        }
    }
    if let Some(context) = essentials
        .pointer_mut("/spec")
        .and_then(Value::as_object_mut)
        .and_then(|s| s.remove("securityContext"))
        && let Some(spec) = pod["spec"].as_object_mut()
    {
        spec.entry("securityContext").or_insert(context);
    }
    if let Some(context) = main_container(&mut essentials, main).and_then(|c| c.remove("securityContext")) {
        match main_container(&mut pod, main) {
            Some(theirs) => {
                theirs.entry("securityContext").or_insert(context);
            }
            None => {
                let defaults = serde_json::json!([{ "name": main, "securityContext": context }]);
                merge(&mut pod["spec"]["containers"], defaults);
            }
        }
    }
    // What runs the process, over it.
    overlay(&mut pod, essentials, Level::Pod);
    // The main container first (the one `kubectl logs` and `exec` pick).
    if let Some(containers) = pod.pointer_mut("/spec/containers").and_then(Value::as_array_mut)
        && let Some(at) = containers
            .iter()
            .position(|c| c.get("name").and_then(Value::as_str) == Some(main))
    {
        let c = containers.remove(at);
        containers.insert(0, c);
    }
    serde_json::from_value(pod).map_err(|e| format!("the pod template does not make a pod: {e}"))
}

/// Where [`overlay`] is in a pod template: the levels whose objects merge key by key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The template itself (`metadata`, `spec`).
    Pod,
    /// `metadata` or `spec`.
    Part,
    /// Labels or annotations.
    Map,
    /// A container.
    Container,
    /// Anything inside: replaced as a whole.
    Leaf,
}

/// Puts the operator's `over` onto the merged pod `base`: the pod, its metadata and spec, labels,
/// annotations and containers key by key; containers by name; other lists of named items
/// (volumes, mounts, env, ports) item by item, a same-named item replaced whole (two volume
/// sources or an env value beside a `valueFrom` would be refused); `envFrom` added to; anything
/// else replaced.
fn overlay(base: &mut Value, over: Value, level: Level) {
    match (base, over) {
        (_, Value::Null) => {}
        (Value::Object(base), Value::Object(over)) if level != Level::Leaf => {
            for (key, value) in over {
                let inner = match (level, key.as_str()) {
                    (Level::Pod, _) => Level::Part,
                    (Level::Part, "labels" | "annotations") => Level::Map,
                    (Level::Part, _) | (Level::Container, _) => Level::Leaf,
                    _ => Level::Leaf,
                };
                match base.get_mut(&key) {
                    Some(existing) if key == "envFrom" => {
                        if let (Value::Array(theirs), Value::Array(ours)) = (existing, value) {
                            for item in ours {
                                if !theirs.contains(&item) {
                                    theirs.push(item);
                                }
                            }
                        }
                    }
                    Some(existing) if key == "containers" && level == Level::Part => {
                        overlay_named(existing, value, Level::Container)
                    }
                    Some(existing) if inner == Level::Leaf => overlay_named(existing, value, Level::Leaf),
                    Some(existing) => overlay(existing, value, inner),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// [`overlay`] of a list of named items (each item at `level`), or of any other value (replaced).
fn overlay_named(base: &mut Value, over: Value, level: Level) {
    match (base, over) {
        (Value::Array(base), Value::Array(over)) if named(base) && named(&over) => {
            for item in over {
                let name = item.get("name").cloned();
                match base.iter_mut().find(|b| b.get("name") == name.as_ref()) {
                    Some(existing) if level == Level::Container => overlay(existing, item, level),
                    Some(existing) => *existing = item,
                    None => base.push(item),
                }
            }
        }
        (_, Value::Null) => {}
        (base, over) => *base = over,
    }
}

/// The container named `name` of a pod template's JSON.
fn main_container<'a>(pod: &'a mut Value, name: &str) -> Option<&'a mut Map<String, Value>> {
    pod.pointer_mut("/spec/containers")?
        .as_array_mut()?
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
}

/// Whether every item of a list is an object with a name (merged by name).
fn named(items: &[Value]) -> bool {
    items
        .iter()
        .all(|i| i.get("name").and_then(Value::as_str).is_some())
}

/// Merges `over` into `base`: objects key by key, lists of named items by name (items of `over`
/// with a new name appended), anything else replaced; a null in `over` changes nothing.
pub(super) fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (_, Value::Null) => {}
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        if !value.is_null() {
                            base.insert(key, value);
                        }
                    }
                }
            }
        }
        (Value::Array(base), Value::Array(over)) if named(base) && named(&over) => {
            for item in over {
                let name = item.get("name").cloned();
                match base.iter_mut().find(|b| b.get("name") == name.as_ref()) {
                    Some(existing) => merge(existing, item),
                    None => base.push(item),
                }
            }
        }
        (base, over) => *base = over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_merge_by_key_and_named_lists_by_name() {
        let mut base = serde_json::json!({
            "a": 1,
            "o": { "x": 1, "y": 2 },
            "named": [{ "name": "m", "v": 1, "w": 1 }, { "name": "n" }],
            "plain": [1, 2],
        });
        merge(
            &mut base,
            serde_json::json!({
                "a": null,
                "o": { "y": 3, "z": 4 },
                "named": [{ "name": "m", "v": 2 }, { "name": "s" }],
                "plain": [3],
            }),
        );
        assert_eq!(
            base,
            serde_json::json!({
                "a": 1,
                "o": { "x": 1, "y": 3, "z": 4 },
                "named": [{ "name": "m", "v": 2, "w": 1 }, { "name": "n" }, { "name": "s" }],
                "plain": [3],
            })
        );
    }
}
