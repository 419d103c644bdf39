//! The check's findings, and the table against the sources: a key literal in the code that the
//! table lacks fails here.

use super::*;

#[test]
fn a_misspelled_key_names_the_key_it_is_nearest_to() {
    let found = check([
        "execution.checkpointing.intervall",
        "restart-strategy.fixed-delay.atempts",
    ]);
    assert_eq!(
        found,
        vec![
            Finding::Unknown {
                key: "execution.checkpointing.intervall".into(),
                nearest: Some("execution.checkpointing.interval"),
            },
            Finding::Unknown {
                key: "restart-strategy.fixed-delay.atempts".into(),
                nearest: Some("restart-strategy.fixed-delay.attempts"),
            },
        ]
    );
    assert_eq!(
        found[0].to_string(),
        "configuration key \"execution.checkpointing.intervall\" is not one Floe reads and is ignored; \
         did you mean \"execution.checkpointing.interval\"?"
    );
}

#[test]
fn a_key_without_its_first_segments_names_the_whole_key() {
    assert_eq!(
        check(["checkpointing.num-retained"]),
        vec![Finding::Unknown {
            key: "checkpointing.num-retained".into(),
            nearest: Some("execution.checkpointing.num-retained"),
        }]
    );
}

#[test]
fn a_key_near_nothing_known_is_reported_without_a_guess() {
    assert_eq!(
        check(["my.team.owner"]),
        vec![Finding::Unknown {
            key: "my.team.owner".into(),
            nearest: None,
        }]
    );
}

#[test]
fn a_flink_key_floe_does_not_implement_says_what_to_use_instead() {
    let found = check(["state.checkpoints.dir", "execution.checkpointing.interval"]);
    assert_eq!(found.len(), 1, "{found:?}");
    let message = found[0].to_string();
    assert!(
        message.starts_with(
            "configuration key \"state.checkpoints.dir\" has no effect: Floe does not implement it"
        ) && message.contains("floe.job-storage.url"),
        "{message}"
    );
}

#[test]
fn every_key_of_the_table_passes_and_appears_once() {
    assert!(check(KEYS.iter().map(|k| k.name)).is_empty());
    let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
    names.extend(NOT_IMPLEMENTED.iter().map(|(k, _)| *k));
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        all,
        "a key is in the table twice, or both read and not implemented"
    );
}

#[test]
fn the_keys_a_process_reads_are_passed_to_it() {
    let conf: BTreeMap<String, String> = [
        ("taskmanager.memory.managed.size", "256m"),
        ("security.ssl.internal.enabled", "true"),
        ("state.backend.rocksdb.memory.managed", "false"),
        ("execution.checkpointing.interval", "10 s"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let passed: Vec<String> = process_properties(&conf).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        passed,
        vec![
            "security.ssl.internal.enabled",
            "state.backend.rocksdb.memory.managed",
            "taskmanager.memory.managed.size"
        ]
    );
}

/// First segments of the keys Flink and Floe use.
const FAMILIES: &[&str] = &[
    "cluster",
    "execution",
    "floe",
    "heartbeat",
    "high-availability",
    "job",
    "jobmanager",
    "kubernetes",
    "metrics",
    "parallelism",
    "pipeline",
    "rest",
    "restart-strategy",
    "s3",
    "security",
    "shuffle",
    "slot",
    "state",
    "table",
    "taskmanager",
    "web",
];

/// Literals of those families that are not configuration keys (an API group, protobuf names, the
/// manifest `floe new` writes).
const NOT_KEYS: &[&str] = &["floe.dev", "floe.proto", "floe.v1", "job.yaml"];

/// The string literals of `source` (outside an inline test module) that look like keys.
fn key_literals(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]\nmod tests {").next().unwrap_or(source);
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.contains('.')
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
                && FAMILIES.contains(&s.split('.').next().unwrap_or(""))
        })
        .map(str::to_string)
        .collect()
}

fn rust_sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "tests" | "benches" | "fixtures" | "target") {
                rust_sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// The table cannot drift from the code: every key-like literal in the runtime's, the
/// operator's and the protocol crate's sources is in the table, read or not implemented.
#[test]
fn every_key_the_code_names_is_in_the_table() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in ["runtime", "operator", "proto"] {
        rust_sources(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 100,
        "found only {} sources under {}",
        files.len(),
        root.display()
    );
    let mut missing = std::collections::BTreeSet::new();
    for file in files {
        if file.starts_with(root.join("runtime/config")) {
            continue;
        }
        let source = std::fs::read_to_string(&file).unwrap_or_default();
        for literal in key_literals(&source) {
            // A prefix keys are built from begins some key; a suffix a prefix is put before
            // (`job.autoscaler.` + `metrics.window`) ends one.
            let known = if literal.ends_with('.') {
                KEYS.iter().any(|k| k.name.starts_with(&literal))
            } else if KEYS.iter().any(|k| k.name.ends_with(&format!(".{literal}"))) {
                true
            } else {
                lookup(&literal).is_some()
                    || NOT_IMPLEMENTED.iter().any(|(k, _)| *k == literal)
                    || NOT_KEYS.contains(&literal.as_str())
            };
            if !known {
                missing.insert(format!("{literal} ({})", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys the code names and the table lacks: {missing:#?}"
    );
}

/// The guide's page of configuration keys (`docs/src/configuration.md`) is this table, so the
/// two cannot drift: a key added here and not there fails this test. `FLOE_BLESS=1 cargo test -p
/// floe-config the_guide` rewrites the page's table from the code.
#[test]
fn the_guide_s_configuration_page_is_the_table() {
    const START: &str = "<!-- generated by floe-config's markdown(): begin -->\n";
    const END: &str = "<!-- generated: end -->\n";
    let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/configuration.md");
    let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    let (head, rest) = text
        .split_once(START)
        .expect("the page marks where the table begins");
    let (table, tail) = rest.split_once(END).expect("the page marks where the table ends");
    let generated = crate::markdown();
    if table != generated {
        if std::env::var_os("FLOE_BLESS").is_some() {
            std::fs::write(&page, format!("{head}{START}{generated}{END}{tail}")).unwrap();
        } else {
            panic!(
                "{} differs from the table of keys: run FLOE_BLESS=1 cargo test -p floe-config the_guide",
                page.display()
            );
        }
    }
}
