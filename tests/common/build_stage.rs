//! The release Dockerfiles' build stage, run where no registry serves its Rust image (issue 32,
//! blocker 2): the release worker image could not be built because librdkafka's build calls `make`,
//! which the stage never installed, and the tests build images only from prebuilt binaries.
//!
//! [`rust_slim_bookworm`] makes a stand-in for `rust:1.95-slim-bookworm` from Debian's own archive:
//! a clean Debian 12 (`debootstrap --variant=minbase`, its root file system cached in `~/.cache`)
//! with the packages the official image adds (`ca-certificates gcc libc6-dev`). Its Rust is this
//! machine's toolchain, mounted when a build runs rather than copied in (the same 1.95 the official
//! image carries). [`build_tools_image`] builds a Dockerfile's `build-tools` stage (its real
//! `apt-get install` line) on it; [`cargo_build_in`] runs `cargo build` there on this checkout.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::images::{repo, sh};

/// A clean Debian 12, from Debian's archive.
pub const DEBIAN12: &str = "floe-test/debian12-minbase:local";
/// [`DEBIAN12`] with what `rust:*-slim-bookworm` installs besides Rust.
pub const RUST_SLIM_BOOKWORM: &str = "floe-test/rust-slim-bookworm:local";

fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap();
    home.join(".cache")
}

/// Imports [`DEBIAN12`] from a root file system made by debootstrap (made once per machine).
pub fn debian12() {
    let tarball = cache_dir().join("floe-debian12-minbase.tar");
    if !tarball.exists() {
        let root = std::env::temp_dir().join(format!("floe-debian12-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let out = Command::new("debootstrap")
            .args(["--variant=minbase", "bookworm"])
            .arg(&root)
            .arg("http://deb.debian.org/debian")
            .output()
            .unwrap_or_else(|e| panic!("cannot run debootstrap (.ci/setup installs it): {e}"));
        assert!(
            out.status.success(),
            "debootstrap of Debian 12 failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::create_dir_all(cache_dir()).unwrap();
        let partial = tarball.with_extension("tar.partial");
        sh(
            "tar",
            &[
                "--numeric-owner",
                "-C",
                root.to_str().unwrap(),
                "-cf",
                partial.to_str().unwrap(),
                ".",
            ],
        );
        std::fs::rename(&partial, &tarball).unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }
    sh("docker", &["import", tarball.to_str().unwrap(), DEBIAN12]);
}

/// Builds [`RUST_SLIM_BOOKWORM`]: as the official image, `ca-certificates gcc libc6-dev` on Debian
/// 12, and Rust on the PATH at `/usr/local/rust/bin` (mounted by [`cargo_build_in`]).
pub fn rust_slim_bookworm() {
    debian12();
    let dockerfile = format!(
        "FROM {DEBIAN12}\n\
         RUN apt-get update \\\n && apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev \\\n \
         && rm -rf /var/lib/apt/lists/*\n\
         ENV CARGO_HOME=/usr/local/cargo \
         PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    );
    docker_build_stdin(&dockerfile, RUST_SLIM_BOOKWORM);
}

fn docker_build_stdin(dockerfile: &str, tag: &str) {
    let mut build = Command::new("docker")
        .args(["build", "-q", "-t", tag, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    build
        .stdin
        .take()
        .unwrap()
        .write_all(dockerfile.as_bytes())
        .unwrap();
    let out = build.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "docker build of {tag} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `build-tools` stage of `docker/{dockerfile}` on [`RUST_SLIM_BOOKWORM`], tagged `tag`.
pub fn build_tools_image(dockerfile: &str, tag: &str) {
    // The legacy builder (no BuildKit here) builds every stage before the target: the runtime
    // stages get the stand-in as their base and an empty file as their binary.
    let context = std::env::temp_dir().join(format!("floe-build-tools-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&context);
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(context.join("binary"), b"").unwrap();
    let file = repo().join("docker").join(dockerfile);
    sh(
        "docker",
        &[
            "build",
            "-q",
            "-f",
            file.to_str().unwrap(),
            "--target",
            "build-tools",
            "--build-arg",
            &format!("BUILDER_IMAGE={RUST_SLIM_BOOKWORM}"),
            "--build-arg",
            &format!("BASE_IMAGE={DEBIAN12}"),
            "--build-arg",
            "BINARY=binary",
            "-t",
            tag,
            context.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_dir_all(&context);
}

/// Runs `cargo build --release --locked --offline` with `args` in `image` on this checkout
/// (read-only), with this machine's Rust toolchain and crate downloads, into a fresh target
/// directory; returns cargo's output, or an error with its last lines.
pub fn cargo_build_in(image: &str, args: &[&str]) -> Result<String, String> {
    let sysroot = sh("rustc", &["--print", "sysroot"]).trim().to_string();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let target = std::env::temp_dir().join(format!(
        "floe-build-stage-target-{}-{}",
        std::process::id(),
        image.replace(['/', ':'], "-")
    ));
    let _ = std::fs::remove_dir_all(&target);
    std::fs::create_dir_all(&target).unwrap();
    let mount = |from: &Path, to: &str, options: &str| {
        format!("type=bind,source={},target={to}{options}", from.display())
    };
    let out = Command::new("docker")
        .args(["run", "--rm", "--mount"])
        .arg(mount(Path::new(&sysroot), "/usr/local/rust", ",readonly"))
        .arg("--mount")
        .arg(mount(&repo(), "/src", ",readonly"))
        .arg("--mount")
        .arg(mount(
            &cargo_home.join("registry"),
            "/usr/local/cargo/registry",
            "",
        ))
        .arg("--mount")
        .arg(mount(&target, "/target", ""))
        .args(["-e", "CARGO_TARGET_DIR=/target", "-w", "/src", image])
        .args(["cargo", "build", "--release", "--locked", "--offline"])
        .args(args)
        .output()
        .unwrap();
    // The build ran as root in the container: its files go with the directory.
    let _ = std::fs::remove_dir_all(&target);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        let tail: Vec<&str> = text.lines().rev().take(25).collect();
        Err(tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
    }
}
