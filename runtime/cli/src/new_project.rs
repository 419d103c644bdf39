//! `floe new NAME`: a user's crate with a job, ready to run (issue 34, item 6). It writes a
//! Cargo.toml depending on Floe (by path to this binary's own source when that is on this
//! machine, else by version), a job that counts words (a record type that derives `Data`, a
//! declared argument list), its FlinkJob manifest, sample input, a test that runs the job through
//! the crate's binary against a count made in the test, a Dockerfile and a README. So the path
//! from nothing to a job of one's own is `floe new my-job`, `cd my-job`, `cargo run -- run -f
//! job.yaml`.
//!
//! With a path dependency the crate also gets the lock file Floe's own example job is built and
//! tested with (the same dependency graph: only Floe), so its first build compiles the versions
//! Floe was tested with.

use std::path::{Path, PathBuf};

/// Where the new crate gets Floe from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FloeSource {
    /// A local checkout: the `runtime/cli` directory of Floe's repository.
    Path(PathBuf),
    /// A registry version.
    Version(String),
}

impl FloeSource {
    /// The source of this binary's own build: its checkout when that is still on this machine,
    /// else its version.
    pub fn of_this_build() -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        if dir.join("Cargo.toml").is_file() {
            FloeSource::Path(dir.to_path_buf())
        } else {
            FloeSource::Version(env!("CARGO_PKG_VERSION").to_string())
        }
    }

    fn dependency(&self) -> String {
        match self {
            // A TOML basic string: backslashes and quotes escaped.
            FloeSource::Path(p) => format!(
                "floe = {{ path = \"{}\", default-features = false }}",
                p.display().to_string().replace('\\', "\\\\").replace('"', "\\\"")
            ),
            FloeSource::Version(v) => format!("floe = {{ version = \"{v}\", default-features = false }}"),
        }
    }
}

/// Why a crate could not be made; every case is bad input (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    #[error(
        "floe new: NAME {0:?}: expected a package name: lowercase letters, digits, '-' and '_', starting with a letter, at most 64 characters"
    )]
    Name(String),
    #[error("floe new: {0} already exists and is not empty: expected a new or empty directory")]
    NotEmpty(PathBuf),
    #[error(
        "floe new: --floe-path {0}: expected Floe's runtime/cli directory (its Cargo.toml names package \"floe\")"
    )]
    NotFloe(PathBuf),
    #[error("floe new: writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The files of a new crate: (path relative to its directory, template).
const FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../templates/new/Cargo.toml.tmpl")),
    ("src/main.rs", include_str!("../templates/new/main.rs.tmpl")),
    ("tests/job.rs", include_str!("../templates/new/job_test.rs.tmpl")),
    ("job.yaml", include_str!("../templates/new/job.yaml.tmpl")),
    ("data/input.txt", include_str!("../templates/new/input.txt.tmpl")),
    ("Dockerfile", include_str!("../templates/new/Dockerfile.tmpl")),
    ("README.md", include_str!("../templates/new/README.md.tmpl")),
    (".gitignore", include_str!("../templates/new/gitignore.tmpl")),
];

/// The lock file of Floe's example job, whose only dependency is Floe too.
const EXAMPLE_LOCK: &str = include_str!("../../../examples/user-job/Cargo.lock");

fn check_name(name: &str) -> Result<(), NewError> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(NewError::Name(name.to_string()))
    }
}

/// The files of crate `name` depending on Floe from `floe`: (relative path, contents).
pub fn render(name: &str, floe: &FloeSource) -> Result<Vec<(String, String)>, NewError> {
    check_name(name)?;
    let fill = |template: &str| {
        template
            .replace("@NAME@", name)
            .replace("@CRATE@", &name.replace('-', "_"))
            .replace("@FLOE_DEPENDENCY@", &floe.dependency())
    };
    let mut files: Vec<(String, String)> = FILES
        .iter()
        .map(|(path, t)| (path.to_string(), fill(t)))
        .collect();
    if matches!(floe, FloeSource::Path(_)) {
        files.push((
            "Cargo.lock".into(),
            EXAMPLE_LOCK.replace("name = \"floe-user-job\"", &format!("name = \"{name}\"")),
        ));
    }
    Ok(files)
}

/// Writes crate `name` into `dir` (created; it must not exist or be empty); the files written.
pub fn create(dir: &Path, name: &str, floe: &FloeSource) -> Result<Vec<PathBuf>, NewError> {
    if let FloeSource::Path(p) = floe {
        let manifest = std::fs::read_to_string(p.join("Cargo.toml")).unwrap_or_default();
        if !manifest.lines().any(|l| l.trim() == "name = \"floe\"") {
            return Err(NewError::NotFloe(p.clone()));
        }
    }
    let files = render(name, floe)?;
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(NewError::NotEmpty(dir.to_path_buf()));
    }
    let mut written = Vec::new();
    for (relative, contents) in files {
        let path = dir.join(&relative);
        let write = || {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, contents)
        };
        write().map_err(|source| NewError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_the_dependency_is_the_source_given() {
        let path = FloeSource::Path(PathBuf::from("/src/floe/runtime/cli"));
        let files = render("my-job", &path).unwrap();
        for (file, contents) in &files {
            assert!(
                !contents.contains("@NAME@")
                    && !contents.contains("@CRATE@")
                    && !contents.contains("@FLOE_DEPENDENCY@"),
                "{file}"
            );
        }
        let find = |name: &str| &files.iter().find(|(f, _)| f == name).unwrap().1;
        assert!(
            find("Cargo.toml")
                .contains("floe = { path = \"/src/floe/runtime/cli\", default-features = false }")
        );
        assert!(find("Cargo.toml").contains("name = \"my-job\""));
        assert!(
            find("tests/job.rs").contains("CARGO_BIN_EXE_my-job")
                && find("tests/job.rs").contains("my_job-test")
        );
        let lock = find("Cargo.lock");
        assert!(lock.contains("name = \"my-job\"") && !lock.contains("floe-user-job"));
        let version = render("my-job", &FloeSource::Version("0.1.0".into())).unwrap();
        assert!(
            version.iter().all(|(f, _)| f != "Cargo.lock"),
            "a registry dependency resolves its own versions"
        );
        assert!(
            version[0]
                .1
                .contains("floe = { version = \"0.1.0\", default-features = false }")
        );
    }

    #[test]
    fn a_bad_name_or_a_used_directory_is_refused_naming_it() {
        for bad in ["", "My-Job", "1job", "job!", "a b", &"x".repeat(65)] {
            let e = render(bad, &FloeSource::Version("0.1.0".into())).expect_err(bad);
            assert!(
                e.to_string()
                    .contains(&format!("NAME {bad:?}: expected a package name")),
                "{e}"
            );
        }
        let dir = std::env::temp_dir().join(format!("floe-new-used-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "mine").unwrap();
        let e = create(&dir, "job", &FloeSource::Version("0.1.0".into())).expect_err("not empty");
        assert_eq!(
            e.to_string(),
            format!(
                "floe new: {} already exists and is not empty: expected a new or empty directory",
                dir.display()
            )
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
            "mine",
            "nothing touched"
        );
        let e = create(&dir.join("fresh"), "job", &FloeSource::Path(dir.clone())).expect_err("not Floe");
        assert!(e.to_string().contains("--floe-path"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
