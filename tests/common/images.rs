//! Container images for the container and kind tests, built here without a registry: a base image
//! made from the host's shared libraries (what the `floe` binaries link against), then the production
//! Dockerfiles in `docker/` with that base as their `BASE_IMAGE` build argument and the binaries of
//! this build as their `prebuilt` target (the default target builds them inside the image build, on
//! a Rust image no registry here serves). [`symbol_versions`] checks that the binary in an image
//! finds every symbol version it needs in the image's own libraries.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BASE_IMAGE: &str = "floe-test-base:local";
pub const WORKER_IMAGE: &str = "ghcr.io/floe-dev/floe-worker:test";
pub const OPERATOR_IMAGE: &str = "ghcr.io/floe-dev/floe-operator:test";

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
    build_base_image_as(binaries, BASE_IMAGE);
}

/// [`build_base_image`], imported as `tag`.
pub fn build_base_image_as(binaries: &[&Path], tag: &str) {
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
        .args(["import", "-", tag])
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
    build_image_on(dockerfile, binary, tag, BASE_IMAGE);
}

/// [`build_image`] on the base image `base`.
pub fn build_image_on(dockerfile: &str, binary: &Path, tag: &str, base: &str) {
    build_image_with(&repo().join("docker").join(dockerfile), binary, tag, base);
}

/// The `prebuilt` target of the Dockerfile at `dockerfile`, with `binary`, on the base `base`.
pub fn build_image_with(dockerfile: &Path, binary: &Path, tag: &str, base: &str) {
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
    sh(
        "docker",
        &[
            "build",
            "-q",
            "-f",
            dockerfile.to_str().unwrap(),
            "--target",
            "prebuilt",
            "--build-arg",
            &format!("BASE_IMAGE={base}"),
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

/// The images as a release builds them: each Dockerfile's default target (the binary compiled
/// inside, on the Rust image of the base's Debian release) on the default base image
/// (distroless `cc-debian12`). Needs a registry and BuildKit: the kind workflow
/// (`FLOE_E2E_IMAGES=release`).
pub fn build_release_images() {
    let repo = repo();
    for (dockerfile, tag) in [
        ("worker.Dockerfile", WORKER_IMAGE),
        ("operator.Dockerfile", OPERATOR_IMAGE),
    ] {
        let file = repo.join("docker").join(dockerfile);
        sh(
            "docker",
            &[
                "build",
                "-q",
                "-f",
                file.to_str().unwrap(),
                "-t",
                tag,
                repo.to_str().unwrap(),
            ],
        );
    }
}

/// Writes text to a file, creating its directory.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// The symbol versions (`GLIBC_2.34`, `GLIBCXX_3.4.30`, ...) an ELF file needs, by library, or
/// defines (`objdump -p`: "Version References" / "Version definitions").
fn versions(file: &Path, section: &str) -> BTreeSet<(String, String)> {
    let out = sh("objdump", &["-p", file.to_str().unwrap()]);
    let mut found = BTreeSet::new();
    let mut library = String::new();
    let mut inside = false;
    for line in out.lines() {
        let header = line.ends_with(':') && line.starts_with(|c: char| c.is_ascii_uppercase());
        if header {
            inside = line == section;
            continue;
        }
        if !inside || line.trim().is_empty() {
            continue;
        }
        let line = line.trim();
        if let Some(lib) = line.strip_prefix("required from ") {
            library = lib.trim_end_matches(':').to_string();
        } else if let Some(version) = line.split_whitespace().last() {
            // References: "0x09691a75 0x00 05 GLIBC_2.2.5"; definitions: "2 0x00 0x09691a75 GLIBC_2.2.5".
            found.insert((library.clone(), version.to_string()));
        }
    }
    found
}

/// Checks that the binary at `binary` inside `image` finds, in the image's own libraries, every
/// symbol version it needs (a binary built on a newer distribution than the base needs a newer
/// glibc or libstdc++ and does not start). Returns what was checked, for the test's output.
pub fn symbol_versions(image: &str, binary: &str) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!(
        "floe-symbols-{}-{}",
        std::process::id(),
        image.replace(['/', ':'], "-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let container = sh("docker", &["create", image]).trim().to_string();
    let copy_out = |path: &str, to: &Path| {
        Command::new("docker")
            .args(["cp", "-L", &format!("{container}:{path}"), to.to_str().unwrap()])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let result = (|| {
        let local = dir.join("binary");
        if !copy_out(binary, &local) {
            return Err(format!("{image} has no {binary}"));
        }
        let needed = versions(&local, "Version References:");
        let libraries: BTreeSet<&String> = needed.iter().map(|(lib, _)| lib).collect();
        let mut checked = Vec::new();
        for library in libraries {
            let local_lib = dir.join(library);
            let found = [
                "/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu",
                "/lib64",
                "/lib",
                "/usr/lib",
            ]
            .iter()
            .any(|d| copy_out(&format!("{d}/{library}"), &local_lib));
            if !found {
                return Err(format!(
                    "{image}: {binary} needs {library}, which the image does not have"
                ));
            }
            let defined: BTreeSet<String> = versions(&local_lib, "Version definitions:")
                .into_iter()
                .map(|(_, v)| v)
                .collect();
            let wanted: Vec<&String> = needed
                .iter()
                .filter(|(l, _)| l == library)
                .map(|(_, v)| v)
                .collect();
            let missing: Vec<&&String> = wanted.iter().filter(|v| !defined.contains(**v)).collect();
            if !missing.is_empty() {
                return Err(format!(
                    "{image}: {binary} needs {missing:?} of {library}, which the image's {library} does not define \
                     (built on a newer distribution than the base image?)"
                ));
            }
            let newest = wanted
                .iter()
                .max_by(|a, b| version_order(a, b))
                .map(|v| v.as_str())
                .unwrap_or("-");
            checked.push(format!("{library} ({} versions, newest {newest})", wanted.len()));
        }
        Ok(format!("{image}: {binary} needs {}", checked.join(", ")))
    })();
    let _ = Command::new("docker").args(["rm", "-f", &container]).output();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `GLIBC_2.9` < `GLIBC_2.34`: compares the numbers after the name.
fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let numbers = |v: &str| -> Vec<u32> {
        v.rsplit('_')
            .next()
            .unwrap_or_default()
            .split('.')
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    numbers(a).cmp(&numbers(b))
}
