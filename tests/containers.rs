//! The images, built here and run as containers the way the operator's pods run them: the
//! JobManager and TaskManager Deployments `floe-operator render` makes for a FlinkJob are started
//! as containers on a private Docker network, each with its pod's image, arguments, environment,
//! user, read-only root, dropped capabilities, working directory and volumes (the ConfigMap's
//! manifest, `emptyDir`s, the claimed storage directory), and the JobManager reachable at its
//! Service's name. The wordcount job's output equals the independent reference count. Also: the
//! images run as non-root, the operator image prints the committed CRD, and the binary in each
//! image finds every glibc and libstdc++ symbol version it needs in the image's own libraries.
//!
//! Needs a Docker engine. Where there is none, the tests are reported as ignored with `SKIPPED:
//! ...` (never as passed). The images are built with the production Dockerfiles (`docker/`,
//! target `prebuilt`), on a base image the test makes from the host's shared libraries, because
//! no registry is reachable here. With `FLOE_WORKER_IMAGE` and `FLOE_OPERATOR_IMAGE` set (the
//! release workflow), the symbol check runs on those images instead.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use common::images::{self, OPERATOR_IMAGE, WORKER_IMAGE, sh};
use common::user_job_binary;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

/// Builds the images once, for every test of this run.
fn build_images() {
    static BUILT: Once = Once::new();
    BUILT.call_once(images::build_images);
}

/// Removes the test's containers and network however the test ends.
struct Cleanup {
    containers: Vec<String>,
    network: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            if std::env::var_os("FLOE_KEEP_CONTAINERS").is_none() {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", c])
                    .output();
            }
        }
        let _ = std::process::Command::new("docker")
            .args(["network", "rm", &self.network])
            .output();
    }
}

fn logs(container: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["logs", "--tail", "30", container])
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn rest_address(container: &str) -> String {
    sh("docker", &["port", container, "8081/tcp"])
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_string()
}

fn job_state(address: &str) -> Option<(String, String)> {
    // The JobManager may still be starting: a refused connection is "not yet".
    std::net::TcpStream::connect(address).ok()?;
    let (code, list) = common::http("GET", address, "/jobs");
    let id = list["jobs"].get(0)?["id"].as_str()?.to_string();
    (code == 200).then_some(())?;
    let (_, job) = common::http("GET", address, &format!("/jobs/{id}"));
    Some((
        job["state"].as_str()?.to_string(),
        job["failure-cause"].to_string(),
    ))
}

fn images_run_as_non_root_and_the_operator_prints_the_crd() -> Result<(), Failed> {
    build_images();
    for image in [WORKER_IMAGE, OPERATOR_IMAGE] {
        let user = sh("docker", &["image", "inspect", "-f", "{{.Config.User}}", image]);
        assert_eq!(user.trim(), "65532:65532", "{image} runs as non-root");
    }
    let crd = sh("docker", &["run", "--rm", OPERATOR_IMAGE, "crd"]);
    assert_eq!(
        crd,
        std::fs::read_to_string(images::repo().join("crds/flinkjob.yaml")).unwrap(),
        "the operator image prints the committed CRD"
    );
    Ok(())
}

/// Issue 13, item 3: a binary built on a newer distribution than the base image needs a glibc or
/// libstdc++ the image does not have, and does not start; the check reads the versions the binary
/// references and the ones its image's libraries define.
fn binaries_find_their_symbol_versions_in_their_images() -> Result<(), Failed> {
    let given = (
        std::env::var("FLOE_WORKER_IMAGE").ok(),
        std::env::var("FLOE_OPERATOR_IMAGE").ok(),
    );
    let (worker, operator) = match given {
        (Some(w), Some(o)) => (w, o),
        _ => {
            build_images();
            (WORKER_IMAGE.to_string(), OPERATOR_IMAGE.to_string())
        }
    };
    for (image, binary) in [
        (worker, "/usr/local/bin/floe"),
        (operator, "/usr/local/bin/floe-operator"),
    ] {
        let checked = images::symbol_versions(&image, binary)?;
        eprintln!("{checked}");
    }
    // The check fails where it should: the worker binary on a base with only what the operator
    // binary needs (no libstdc++, which RocksDB's C++ needs).
    let operator = images::operator_binary();
    let floe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_floe"));
    let (thin_base, thin_worker) = ("floe-test-thin-base:local", "floe-test-thin-worker:local");
    images::build_base_image_as(&[&operator], thin_base);
    images::build_image_on("worker.Dockerfile", &floe, thin_worker, thin_base);
    let refused = images::symbol_versions(thin_worker, "/usr/local/bin/floe");
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", thin_worker, thin_base])
        .output();
    let message = refused.expect_err("a base without libstdc++ is refused");
    assert!(
        message.contains("needs libstdc++.so.6, which the image does not have"),
        "{message}"
    );
    Ok(())
}

/// The documents of `floe-operator render -f` (ConfigMap, Service, NetworkPolicy, Deployments),
/// by kind and name.
fn rendered(flinkjob: &Path) -> BTreeMap<(String, String), Value> {
    let operator = images::operator_binary();
    let yaml = sh(
        operator.to_str().unwrap(),
        &["render", "-f", flinkjob.to_str().unwrap()],
    );
    let mut objects = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let value: Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
        objects.insert((kind, name), value);
    }
    objects
}

/// A pod of `deployment` started as a container named `name`, as a kubelet would start it: the
/// container's image, arguments (`$(VAR)` expanded from its environment), environment (a field
/// reference to the pod's name is the container's name; to its IP, the container's name too,
/// which the Docker network resolves as a cluster resolves a pod IP), user and group, read-only
/// root, dropped capabilities, no privilege escalation, working directory; `emptyDir` volumes as
/// fresh tmpfs, the ConfigMap and claims from the host directories `volumes` names.
fn run_pod(
    deployment: &Value,
    name: &str,
    network: &str,
    aliases: &[&str],
    volumes: &BTreeMap<String, PathBuf>,
    publish: Option<&str>,
) {
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container per pod");
    let c = &containers[0];
    let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--name".into(), name.into()];
    args.extend(["--network".into(), network.into()]);
    for alias in aliases {
        args.extend(["--network-alias".into(), alias.to_string()]);
    }
    if let Some(port) = publish {
        args.extend(["-p".into(), format!("127.0.0.1::{port}")]);
    }
    let security = &pod["securityContext"];
    if let Some(user) = security["runAsUser"].as_i64() {
        let group = security["runAsGroup"].as_i64().unwrap_or(user);
        args.extend(["--user".into(), format!("{user}:{group}")]);
    }
    if let Some(group) = security["fsGroup"].as_i64() {
        args.extend(["--group-add".into(), group.to_string()]);
    }
    let csc = &c["securityContext"];
    if csc["readOnlyRootFilesystem"] == Value::Bool(true) {
        args.push("--read-only".into());
    }
    if csc["allowPrivilegeEscalation"] == Value::Bool(false) {
        args.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    for cap in csc["capabilities"]["drop"].as_array().into_iter().flatten() {
        args.extend(["--cap-drop".into(), cap.as_str().unwrap().into()]);
    }
    if let Some(dir) = c["workingDir"].as_str() {
        args.extend(["-w".into(), dir.into()]);
    }
    assert!(c["envFrom"].is_null(), "the test's job takes no Secret");
    let mut env = BTreeMap::new();
    for var in c["env"].as_array().into_iter().flatten() {
        let key = var["name"].as_str().unwrap().to_string();
        let value = match (&var["value"], var["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
            (Value::String(v), _) => v.clone(),
            (_, Some("metadata.name" | "status.podIP")) => name.to_string(),
            other => panic!("env {key}: {other:?} is not emulated"),
        };
        args.extend(["-e".into(), format!("{key}={value}")]);
        env.insert(key, value);
    }
    let pod_volumes: BTreeMap<&str, &Value> = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    for mount in c["volumeMounts"].as_array().into_iter().flatten() {
        let volume = pod_volumes[mount["name"].as_str().unwrap()];
        let path = mount["mountPath"].as_str().unwrap();
        let read_only = mount["readOnly"] == Value::Bool(true);
        if volume["emptyDir"].is_object() {
            args.extend([
                "--mount".into(),
                format!("type=tmpfs,destination={path},tmpfs-mode=1777"),
            ]);
            continue;
        }
        let source = if let Some(cm) = volume["configMap"]["name"].as_str() {
            volumes[cm].clone()
        } else if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
            volumes[claim].clone()
        } else {
            panic!("volume {volume} is not emulated")
        };
        let ro = if read_only { ",readonly" } else { "" };
        args.extend([
            "--mount".into(),
            format!("type=bind,source={},destination={path}{ro}", source.display()),
        ]);
    }
    args.push(c["image"].as_str().unwrap().into());
    for arg in c["args"].as_array().into_iter().flatten() {
        let mut arg = arg.as_str().unwrap().to_string();
        for (key, value) in &env {
            arg = arg.replace(&format!("$({key})"), value);
        }
        args.push(arg);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sh("docker", &args);
}

/// Issue 13, tests: the worker image started as the operator's pod spec starts it, not with
/// hand-written arguments: the JobManager from its ConfigMap's manifest, the TaskManagers finding it
/// at its Service's name, job storage on the claimed directory (a kind cluster's local-path
/// volume is such a directory), user 65532 on a read-only root.
fn wordcount_in_pods_as_the_operator_specifies_them() -> Result<(), Failed> {
    build_images();
    let id = std::process::id();
    let network = format!("floe-test-{id}");
    let jm = format!("floe-jm-{id}");
    let tms = [format!("floe-tm1-{id}"), format!("floe-tm2-{id}")];
    let mut containers = vec![jm.clone()];
    containers.extend(tms.iter().cloned());
    let _cleanup = Cleanup {
        containers,
        network: network.clone(),
    };
    // The claim: input, job storage and output, written by the containers' user 65532.
    let dir = common::scratch("containers");
    let claim = dir.join("claim");
    std::fs::create_dir_all(claim.join("data")).unwrap();
    sh("chmod", &["-R", "0777", claim.to_str().unwrap()]);
    let input = claim.join("data/words.txt");
    floe::generate::write_words(&input, 10 << 20, 77).unwrap();
    let reference = common::reference_count(&input);
    let flinkjob = dir.join("flinkjob.yaml");
    images::write(
        &flinkjob,
        &format!(
            "apiVersion: floe.dev/v1alpha1\nkind: FlinkJob\nmetadata: {{ name: wordcount, namespace: jobs, uid: u-1, generation: 1 }}\nspec:\n  image: {WORKER_IMAGE}\n  job:\n    name: wordcount\n    args: [\"--input\", \"data/words.txt\", \"--output\", \"out/wordcount\"]\n    parallelism: 4\n    mode: batch\n  taskManager: {{ replicas: 2, slots: 2 }}\n  storage: {{ url: \"file:///mnt/floe\", persistentVolumeClaim: floe-jobs }}\n"
        ),
    );
    let objects = rendered(&flinkjob);
    let get = |kind: &str, name: &str| objects[&(kind.to_string(), name.to_string())].clone();
    let config_map = get("ConfigMap", "wordcount-config");
    let config = dir.join("config");
    for (file, text) in config_map["data"].as_object().unwrap() {
        images::write(&config.join(file), text.as_str().unwrap());
    }
    let volumes = BTreeMap::from([
        ("wordcount-config".to_string(), config),
        ("floe-jobs".to_string(), claim.clone()),
    ]);
    let service = get("Service", "wordcount-jobmanager");
    let namespace = service["metadata"]["namespace"].as_str().unwrap();
    let service_name = format!("wordcount-jobmanager.{namespace}.svc");
    let jobmanager = get("Deployment", "wordcount-jobmanager");
    let taskmanager = get("Deployment", "wordcount-taskmanager");
    assert_eq!(taskmanager["spec"]["replicas"], 2);

    sh("docker", &["network", "create", &network]);
    let started = Instant::now();
    run_pod(
        &jobmanager,
        &jm,
        &network,
        &[&service_name],
        &volumes,
        Some("8081"),
    );
    for tm in &tms {
        run_pod(&taskmanager, tm, &network, &[], &volumes, None);
    }
    let address = rest_address(&jm);
    let (state, cause) = loop {
        if let Some((state, cause)) = job_state(&address)
            && matches!(state.as_str(), "FINISHED" | "FAILED" | "CANCELED")
        {
            break (state, cause);
        }
        if started.elapsed() > Duration::from_secs(180) {
            return Err(format!(
                "job not done after 180 s\n--- jobmanager\n{}\n--- taskmanager\n{}",
                logs(&jm),
                logs(&tms[0])
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    if state != "FINISHED" {
        return Err(format!("job {state}: {cause}\n--- jobmanager\n{}", logs(&jm)).into());
    }
    common::assert_batch_output(&claim.join("out/wordcount"), &reference);
    // Both TaskManagers ran tasks: the job really crossed containers.
    let (_, registered) = common::http("GET", &address, "/taskmanagers");
    let registered = registered["taskmanagers"].as_array().unwrap().len();
    assert_eq!(registered, 2, "two TaskManager containers registered");
    // The job's operation log is on the claim, written by the pods' user.
    assert!(
        claim.join("jobs/wordcount/oplog").is_dir(),
        "the operation log is on the claimed directory"
    );
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "wordcount in pods as the operator specifies them: FINISHED {:.1}s after the first container started, {} distinct words equal the reference",
        started.elapsed().as_secs_f64(),
        reference.len()
    );
    Ok(())
}

/// Issue 15: the example user project's image (its Dockerfile's `prebuilt` target with the
/// binary of its own build, on a base made for it) runs that binary as `floe`, as non-root, and
/// the binary has the user's job next to Floe's.
fn the_users_image_runs_its_own_binary() -> Result<(), Failed> {
    let binary = user_job_binary();
    let (base, tag) = ("floe-user-base:test", "floe-user-job:test");
    images::build_base_image_as(&[binary], base);
    images::build_image_with(
        &images::repo().join("examples/user-job/Dockerfile"),
        binary,
        tag,
        base,
    );
    let user = sh("docker", &["image", "inspect", "-f", "{{.Config.User}}", tag]);
    assert_eq!(user.trim(), "65532:65532", "the user's image runs as non-root");
    let jobs = sh("docker", &["run", "--rm", tag, "jobs"]);
    if !(jobs.contains("user-visits: page visits per user") && jobs.contains("wordcount:")) {
        return Err(format!("`floe jobs` in the user's image: {jobs}").into());
    }
    Ok(())
}

/// What the C builds of the release image call beyond the Rust image (which has gcc, libc6-dev
/// and perl): `c++` and libclang for RocksDB, `make` for librdkafka's `./configure && make`.
const BUILD_TOOLS: [&str; 3] = ["clang", "libclang-dev", "make"];

/// Issue 32, blocker 2, the check every `cargo test` runs (no Docker needed): the worker
/// Dockerfile's `build-tools` stage installs every tool the C builds call. The full check (the
/// stage's commands run on a clean Debian 12, building librdkafka) is
/// [`the_build_stages_build_their_c_libraries_on_a_clean_debian_12`], on demand.
fn the_build_tools_stage_installs_what_the_c_builds_call() -> Result<(), Failed> {
    let dockerfile = std::fs::read_to_string(images::repo().join("docker/worker.Dockerfile"))
        .map_err(|e| format!("docker/worker.Dockerfile: {e}"))?;
    let stage = dockerfile
        .split("\nFROM ")
        .find(|s| {
            s.lines()
                .next()
                .is_some_and(|l| l.trim_end().ends_with("AS build-tools"))
        })
        .ok_or("docker/worker.Dockerfile has no `build-tools` stage")?;
    // The words of its `apt-get install` (continued lines joined).
    let joined = stage.replace("\\\n", " ");
    let install = joined
        .lines()
        .find(|l| l.contains("apt-get install"))
        .ok_or("the build-tools stage runs no `apt-get install`")?;
    let packages: Vec<&str> = install
        .split("apt-get install")
        .nth(1)
        .unwrap_or_default()
        .split("&&")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .filter(|w| !w.starts_with('-'))
        .collect();
    let missing: Vec<&str> = BUILD_TOOLS
        .into_iter()
        .filter(|t| !packages.contains(t))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("the build-tools stage installs {packages:?}, not {missing:?}").into())
    }
}

/// Issue 32, blocker 2: the worker image's `build-tools` stage (its real `apt-get install`), run on
/// a clean Debian 12 with what `rust:1.95-slim-bookworm` has, builds every C library the release
/// build compiles but RocksDB (librdkafka with its `./configure` and `make`, zlib, lz4, mimalloc,
/// ring), and has what RocksDB's build calls: `c++` compiling C++17 with the standard library, and
/// libclang for its bindings. RocksDB's own compile (about 20 minutes) is left to the release
/// workflow. The operator image's build stage has no `build-tools`: ring, its one C library, builds
/// on the Rust image as it is.
fn the_build_stages_build_their_c_libraries_on_a_clean_debian_12() -> Result<(), Failed> {
    use common::build_stage;
    build_stage::rust_slim_bookworm();
    let tools = "floe-test/worker-build-tools:local";
    build_stage::build_tools_image("worker.Dockerfile", tools);
    let crates = [
        "-p",
        "rdkafka-sys",
        "-p",
        "libz-sys",
        "-p",
        "lz4-sys",
        "-p",
        "libmimalloc-sys",
        "-p",
        "ring",
    ];
    let built = build_stage::cargo_build_in(tools, &crates)
        .map_err(|e| format!("the worker's build stage cannot build its C libraries:\n{e}"))?;
    if !built.contains("Compiling rdkafka-sys") {
        return Err(format!("librdkafka was not built: {built}").into());
    }
    let rocksdb_tools = sh(
        "docker",
        &[
            "run",
            "--rm",
            tools,
            "sh",
            "-c",
            "printf '#include <atomic>\\n#include <memory>\\n#include <string>\\n#include <thread>\\n\
             int main() { std::atomic<int> a{0}; auto s = std::make_unique<std::string>(\"x\"); \
             std::thread t([&] { a += s->size(); }); t.join(); return a - 1; }\\n' > /tmp/t.cc \
             && c++ -std=c++17 -pthread -o /tmp/t /tmp/t.cc && /tmp/t && ls /usr/lib/llvm-*/lib/libclang*.so*",
        ],
    );
    if !rocksdb_tools.contains("libclang") {
        return Err(format!("no libclang for RocksDB's bindings: {rocksdb_tools}").into());
    }
    build_stage::cargo_build_in(build_stage::RUST_SLIM_BOOKWORM, &["-p", "ring"])
        .map_err(|e| format!("the operator's build stage cannot build ring:\n{e}"))?;
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let docker = images::works("docker", &["info"]);
    if !docker {
        eprintln!("SKIPPED: docker (no Docker engine answers `docker info`)");
    }
    // The full build-stage check takes about 5 minutes cold (a Debian 12 made with debootstrap,
    // then librdkafka's build): on demand, and in the build-stage workflow whenever docker/
    // changes, so a cold CI run stays under its hour.
    let build_stage = std::env::var_os("FLOE_BUILD_STAGE_CHECK").is_some();
    if !build_stage {
        eprintln!(
            "SKIPPED: the_build_stages_build_their_c_libraries_on_a_clean_debian_12 runs with \
             FLOE_BUILD_STAGE_CHECK=1 (.github/workflows/build-stage.yaml)"
        );
    }
    let static_check = Trial::test(
        "the_build_tools_stage_installs_what_the_c_builds_call",
        the_build_tools_stage_installs_what_the_c_builds_call,
    );
    let trials = vec![
        Trial::test(
            "images_run_as_non_root_and_the_operator_prints_the_crd",
            images_run_as_non_root_and_the_operator_prints_the_crd,
        ),
        Trial::test(
            "binaries_find_their_symbol_versions_in_their_images",
            binaries_find_their_symbol_versions_in_their_images,
        ),
        Trial::test(
            "wordcount_in_pods_as_the_operator_specifies_them",
            wordcount_in_pods_as_the_operator_specifies_them,
        ),
        Trial::test(
            "the_users_image_runs_its_own_binary",
            the_users_image_runs_its_own_binary,
        ),
        Trial::test(
            "the_build_stages_build_their_c_libraries_on_a_clean_debian_12",
            the_build_stages_build_their_c_libraries_on_a_clean_debian_12,
        ),
    ];
    let mut trials: Vec<Trial> = trials
        .into_iter()
        .map(|t| {
            let on_demand = t.name() == "the_build_stages_build_their_c_libraries_on_a_clean_debian_12";
            t.with_ignored_flag(!docker || (on_demand && !build_stage))
        })
        .collect();
    trials.push(static_check);
    libtest_mimic::run(&args, trials).exit();
}
