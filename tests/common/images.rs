//! Container images for the container and kind tests, built here without a registry: a base image
//! made from the host's shared libraries (what the `floe` binaries link against), then the production
//! Dockerfiles in `docker/` with that base as their `BASE_IMAGE` build argument.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BASE_IMAGE: &str = "floe-test-base:local";
pub const WORKER_IMAGE: &str = "floe/worker:test";
pub const OPERATOR_IMAGE: &str = "floe/operator:test";

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Runs a command; returns stdout, or panics with its stderr.
pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether a command exists and answers (`docker info`, `kind version`, ...).
pub fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The `floe-operator` binary, built by the same `cargo test --workspace` (or built here).
pub fn operator_binary() -> PathBuf {
    let floe = Path::new(env!("CARGO_BIN_EXE_floe"));
    let path = floe.with_file_name("floe-operator");
    if !path.exists() {
        let profile_release = floe.parent().and_then(|p| p.file_name()) == Some("release".as_ref());
        let mut args = vec!["build", "-p", "floe-operator"];
        if profile_release {
            args.push("--release");
        }
        sh(env!("CARGO"), &args);
    }
    path
}

/// Shared libraries a binary loads (from `ldd`), the dynamic loader included.
fn shared_libraries(binary: &Path) -> BTreeSet<PathBuf> {
    let out = sh("ldd", &[binary.to_str().unwrap()]);
    out.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.trim().split(' ').next()?,
                None => l.split(' ').next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// A minimal root filesystem: the libraries the binaries need, /etc/passwd with the `nonroot` user
/// (65532, as distroless), a sticky /tmp. Imported as [`BASE_IMAGE`].
pub fn build_base_image(binaries: &[&Path]) {
    let root = std::env::temp_dir().join(format!("floe-base-rootfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for binary in binaries {
        for lib in shared_libraries(binary) {
            let target = root.join(lib.strip_prefix("/").unwrap());
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            // Copy the file a symlink points to under the symlink's name.
            std::fs::copy(&lib, &target).unwrap();
        }
    }
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").unwrap();
    std::fs::write(root.join("etc/nsswitch.conf"), "hosts: files dns\n").unwrap();
    for dir in ["tmp", "home/nonroot", "var/lib/floe"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    sh("chmod", &["1777", root.join("tmp").to_str().unwrap()]);
    sh("chmod", &["0777", root.join("var/lib/floe").to_str().unwrap()]);
    let mut tar = Command::new("tar")
        .args([
            "--numeric-owner",
            "--owner=0",
            "--group=0",
            "-C",
            root.to_str().unwrap(),
            "-c",
            ".",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status = Command::new("docker")
        .args(["import", "-", BASE_IMAGE])
        .stdin(tar.stdout.take().unwrap())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(
        tar.wait().unwrap().success() && status.success(),
        "docker import of the base image failed"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `docker build` of one of the production Dockerfiles, with the binary copied into a fresh context.
pub fn build_image(dockerfile: &str, binary: &Path, tag: &str) {
    let context = std::env::temp_dir().join(format!(
        "floe-image-context-{}-{}",
        std::process::id(),
        tag.replace(['/', ':'], "-")
    ));
    let _ = std::fs::remove_dir_all(&context);
    std::fs::create_dir_all(&context).unwrap();
    let name = binary.file_name().unwrap().to_str().unwrap();
    std::fs::copy(binary, context.join(name)).unwrap();
    // Test builds carry debug info (hundreds of MB); the image needs none of it.
    let _ = Command::new("strip").arg(context.join(name)).status();
    let dockerfile = repo().join("docker").join(dockerfile);
    sh(
        "docker",
        &[
            "build",
            "-q",
            "-f",
            dockerfile.to_str().unwrap(),
            "--build-arg",
            &format!("BASE_IMAGE={BASE_IMAGE}"),
            "--build-arg",
            &format!("BINARY={name}"),
            "-t",
            tag,
            context.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_dir_all(&context);
}

/// Builds the base, worker and operator images from the binaries of this build.
pub fn build_images() {
    let floe = PathBuf::from(env!("CARGO_BIN_EXE_floe"));
    let operator = operator_binary();
    build_base_image(&[&floe, &operator]);
    build_image("worker.Dockerfile", &floe, WORKER_IMAGE);
    build_image("operator.Dockerfile", &operator, OPERATOR_IMAGE);
}

/// Writes text to a file, creating its directory.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}
