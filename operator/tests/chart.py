"""The Helm chart as Helm and the API server see it (issue 32, blocker 1).

Run by `operator/tests/chart.rs`. For every documented set of values (the defaults `helm install`
uses, the kind test's, and sets that turn every option on or off) this:

- lints the chart with Helm's own code (the Helm v4 SDK, `helm-python-sdk`), which validates the
  values against `values.schema.json` exactly as `helm install`, `upgrade`, `lint` and `template`
  do, and fails on any error or warning;
- renders the templates (Helm's engine) and parses every object as Kubernetes YAML;
- validates each object, and the chart's CRD, against the Kubernetes 1.33 OpenAPI schemas in strict
  mode (`kubernetes-validate`: unknown fields are refused, as a server-side apply with field
  validation refuses them);
- checks what a user relies on in the result (the metrics scraper reaches the operator's arguments);
- validates the operator's own objects for a job (its golden files) the same way.

It also lints values that must be refused and checks that Helm's message names the field.

Prints, last, one JSON line: `{"operator_args": [[...], ...], "hook_args": [[...], ...]}`, the
arguments of the operator's container and of the pre-delete hook's, for every rendered value set,
which the Rust side runs against the real `floe-operator` binary.
Exit status 0 when everything holds; otherwise every failure is printed and the status is 1.
"""

import copy
import json
import os
import sys

import helm_python as helm
import kubernetes_validate
import yaml

CHART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "charts", "floe-operator")
KUBE_VERSION = "1.33.0"
# Kinds outside the core API (a CRD's): no Kubernetes schema to validate them against. Their
# structure is checked by hand below.
NOT_CORE = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor")}
# The job pods the operator makes (its golden objects, which a test keeps equal to what it builds).
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")

# The kind end-to-end test's `helm install --set ...` (tests/kind_e2e.rs).
KIND_TEST = {
    "image": {"repository": "floe-operator-e2e", "tag": "test", "pullPolicy": "Never"},
    "workerImage": "floe-worker-e2e:test",
}

# Every option away from its default.
EVERYTHING = {
    "image": {"repository": "registry.example.com/floe/operator", "tag": "0.1.0", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry"}],
    "workerImage": "registry.example.com/floe/worker:0.1.0",
    "logFormat": "text",
    "replicaCount": 2,
    "leaderElection": {"enabled": True},
    "releaseFinalizersOnUninstall": True,
    "networkPolicy": {
        "enabled": True,
        "metricsScraper": {
            "namespace": "monitoring",
            "podLabels": {"app.kubernetes.io/name": "prometheus"},
        },
    },
    "watchNamespaces": ["team-a", "team-b"],
    "logLevel": "floe_operator=debug",
    "serviceAccount": {"create": True, "name": "floe", "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": 1, "memory": "512Mi"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "floe", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "floe-operator"}},
                    },
                }
            ]
        }
    },
    "podAnnotations": {"example.com/team": "data"},
    "podLabels": {"team": "data"},
    "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prometheus"}},
    "podMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prometheus"}},
}

# Every optional part off.
NOTHING = {
    "leaderElection": {"enabled": False},
    "releaseFinalizersOnUninstall": False,
    "networkPolicy": {"enabled": False},
    "serviceAccount": {"create": False, "name": ""},
    "resources": {},
}

# OpenShift's restricted SCC: no fixed UID (the namespace's range is assigned), nothing else changed.
OPENSHIFT = {"podSecurityContext": {"runAsUser": None}}

VALUE_SETS = {
    "defaults (helm install with no values, as the README does)": None,
    "the kind test's": KIND_TEST,
    "every option set": EVERYTHING,
    "every optional part off": NOTHING,
    "OpenShift's (no fixed runAsUser)": OPENSHIFT,
}


def with_path(path, value):
    """Values with one field (a dotted path) set on top of the defaults' structure."""
    values = {}
    node = values
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return values


# Values Helm must refuse, and what its message must name.
REFUSED = [
    (with_path("networkPolicy.metricsScraper.namespace", 5), "/networkPolicy/metricsScraper/namespace"),
    (with_path("networkPolicy.metricsScraper.podLabels", {"app": 1}), "/networkPolicy/metricsScraper/podLabels/app"),
    (with_path("networkPolicy.metricsScrapers", {}), "metricsScrapers"),
    (with_path("replicaCount", 0), "/replicaCount"),
    (with_path("logFormat", "xml"), "/logFormat"),
    (with_path("podSecurityContext.runAsUser", "65532"), "/podSecurityContext/runAsUser"),
    (with_path("securityContext.readOnlyRootFilesystem", "yes"), "/securityContext/readOnlyRootFilesystem"),
]

failures = []


def fail(what):
    failures.append(what)
    print(f"FAIL: {what}", flush=True)


def lint(values, label):
    report = helm.lint(CHART, copy.deepcopy(values), strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    for m in problems:
        fail(f"helm lint with {label} values: {m['path']}: {m['error'].strip()}")
    return not problems


def check_service_monitor(obj, services, label):
    spec = obj.get("spec", {})
    endpoints = spec.get("endpoints") or []
    if not endpoints or not all(e.get("port") for e in endpoints):
        fail(f"{label}: ServiceMonitor {obj['metadata']['name']} has no endpoint with a port name")
    selector = spec.get("selector", {}).get("matchLabels", {})
    matched = [
        s for s in services if all(s["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
    ]
    if not selector or not matched:
        fail(f"{label}: ServiceMonitor {obj['metadata']['name']} selects no Service of the chart ({selector})")
    for service in matched:
        ports = {p.get("name") for p in service["spec"].get("ports", [])}
        for e in endpoints:
            if e.get("port") not in ports:
                fail(f"{label}: ServiceMonitor endpoint port {e.get('port')!r} is not a port of {service['metadata']['name']}")


def job_pod_templates():
    """The JobManager's and TaskManager's pod templates, as the operator builds them."""
    templates = {}
    for component in ("jobmanager", "taskmanager"):
        with open(os.path.join(GOLDEN, f"{component}-deployment.yaml")) as f:
            templates[component] = yaml.safe_load(f)["spec"]["template"]
    return templates


def check_pod_monitor(obj, values, label):
    """The PodMonitor selects both job pods and names a metrics port of each (the JobManager's
    REST port, the TaskManagers' 9249), in the namespaces the operator watches."""
    spec = obj.get("spec", {})
    selector = spec.get("selector", {}).get("matchLabels", {})
    ports = {e.get("port") for e in spec.get("podMetricsEndpoints") or []}
    for component, template in job_pod_templates().items():
        labels = template["metadata"]["labels"]
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            fail(f"{label}: the PodMonitor's selector {selector} misses the {component} pods ({labels})")
        named = {p.get("name") for c in template["spec"]["containers"] for p in c.get("ports", [])}
        scraped = str(template["metadata"]["annotations"].get("prometheus.io/port"))
        by_number = {str(p.get("containerPort")): p.get("name") for c in template["spec"]["containers"] for p in c.get("ports", [])}
        if by_number.get(scraped) not in ports & named:
            fail(f"{label}: the PodMonitor scrapes ports {ports}, not the {component}'s metrics port {scraped} ({by_number})")
    watched = (values or {}).get("watchNamespaces") or []
    selector_ns = spec.get("namespaceSelector", {})
    if watched and selector_ns.get("matchNames") != watched or not watched and selector_ns.get("any") is not True:
        fail(f"{label}: the PodMonitor's namespaces {selector_ns} are not the watched ones {watched or 'all'}")


def render(values, label):
    """The rendered objects (hooks included), each validated; the operator container's args."""
    try:
        with helm.Chart.load(CHART) as chart:
            manifests = chart.render(copy.deepcopy(values), name="floe-operator", namespace="floe-system", is_install=True)
    except helm.HelmError as e:
        fail(f"{label}: helm template refused it: {str(e).strip()}")
        return [], None, None, []
    objects = []
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            continue
        try:
            docs = [d for d in yaml.safe_load_all(text) if d]
        except yaml.YAMLError as e:
            fail(f"{label}: {template} is not YAML: {e}")
            continue
        for doc in docs:
            objects.append((template, doc))
    services = [o for _, o in objects if o.get("kind") == "Service"]
    operator_args = None
    hook_args = None
    pod_specs = []
    pod_monitors = 0
    for template, obj in objects:
        kind = (obj.get("apiVersion"), obj.get("kind"))
        if kind == ("monitoring.coreos.com/v1", "PodMonitor"):
            check_pod_monitor(obj, values, label)
            pod_monitors += 1
            continue
        if kind in NOT_CORE:
            check_service_monitor(obj, services, label)
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            fail(f"{label}: {template} ({kind[1]}): at {path or '/'}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            fail(f"{label}: {template}: no Kubernetes {KUBE_VERSION} schema for {kind}")
        if obj.get("kind") in ("Deployment", "Job"):
            pod_specs.append((obj["kind"], obj["spec"]["template"]["spec"]))
        if obj.get("kind") == "Deployment":
            containers = obj["spec"]["template"]["spec"]["containers"]
            operator_args = next(c["args"] for c in containers if c["name"] == "operator")
        if obj.get("kind") == "Job":
            hook_args = obj["spec"]["template"]["spec"]["containers"][0]["args"]
    if operator_args is None:
        fail(f"{label}: no operator Deployment rendered")
    if values is EVERYTHING and pod_monitors != 1:
        fail(f"{label}: podMonitor.enabled rendered {pod_monitors} PodMonitors")
    return objects, operator_args, hook_args, pod_specs


def check_security_contexts(values, label, pod_specs):
    """Both pods (operator and hook) run non-root with the containers locked down; a fixed UID
    only where the values keep one (OpenShift assigns its own)."""
    if len(pod_specs) < (1 if values is NOTHING else 2):
        fail(f"{label}: expected the operator's and the hook's pods, rendered {[k for k, _ in pod_specs]}")
    for kind, spec in pod_specs:
        pod = spec.get("securityContext") or {}
        if pod.get("runAsNonRoot") is not True:
            fail(f"{label}: the {kind}'s pod may run as root: {pod}")
        if values is OPENSHIFT and "runAsUser" in pod:
            fail(f"{label}: the {kind}'s pod still fixes runAsUser {pod['runAsUser']}")
        if values is not OPENSHIFT and pod.get("runAsUser") != 65532:
            fail(f"{label}: the {kind}'s pod lost its default runAsUser: {pod}")
        for c in spec["containers"]:
            sc = c.get("securityContext") or {}
            if sc.get("allowPrivilegeEscalation") is not False or sc.get("capabilities", {}).get("drop") != ["ALL"]:
                fail(f"{label}: the {kind}'s container {c['name']} is not locked down: {sc}")


def main():
    with open(os.path.join(CHART, "crds", "flinkjob.yaml")) as f:
        for crd in yaml.safe_load_all(f):
            try:
                kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)
            except kubernetes_validate.ValidationError as e:
                fail(f"crds/flinkjob.yaml: at {'/'.join(str(p) for p in e.path)}: {e.message}")

    # The operator's own objects for a job (its golden files, which its unit tests keep equal to
    # what it builds, full pod templates merged in included), as strictly as the chart's.
    for name in sorted(os.listdir(GOLDEN)):
        with open(os.path.join(GOLDEN, name)) as f:
            obj = yaml.safe_load(f)
        if not name.endswith(".yaml") or not isinstance(obj, dict) or "kind" not in obj:
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
            print(f"ok: operator/tests/golden/{name} ({obj['kind']}) is valid against Kubernetes {KUBE_VERSION}", flush=True)
        except kubernetes_validate.ValidationError as e:
            fail(f"operator/tests/golden/{name}: at {'/'.join(str(p) for p in e.path) or '/'}: {e.message}")

    all_args = []
    all_hooks = []
    for label, values in VALUE_SETS.items():
        before = len(failures)
        lint(values, label)
        objects, args, hook, pod_specs = render(values, label)
        check_security_contexts(values, label, pod_specs)
        if hook is not None:
            all_hooks.append(hook)
        if len(failures) == before:
            print(f"ok: {label}: {len(objects)} objects rendered and valid against Kubernetes {KUBE_VERSION}", flush=True)
        if args is not None:
            all_args.append(args)
        if values is EVERYTHING:
            joined = " ".join(args or [])
            if "--metrics-scraper-namespace monitoring" not in joined or "app.kubernetes.io/name=prometheus" not in joined:
                fail(f"{label}: networkPolicy.metricsScraper did not reach the operator's arguments: {args}")

    for values, field in REFUSED:
        report = helm.lint(CHART, copy.deepcopy(values), kube_version=f"v{KUBE_VERSION}")
        errors = " ".join(report["errors"])
        if not errors:
            fail(f"helm lint accepted {json.dumps(values)}, which the schema must refuse")
        elif field not in errors:
            fail(f"helm lint refused {json.dumps(values)} without naming {field}: {errors}")
        else:
            print(f"ok: refused {json.dumps(values)}: {errors.strip().splitlines()[-1].strip()}", flush=True)

    print(json.dumps({"operator_args": all_args, "hook_args": all_hooks}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
