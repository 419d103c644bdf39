//! Declared job arguments (issue 15): what a registered job takes, by name, kind, default and
//! help. The registry checks a job's arguments against its declaration before it builds the job,
//! so a wrong argument is refused when the job is submitted, naming it; `floe jobs` lists every
//! job with its arguments.

use crate::error::{Error, Result};
use crate::jobs::parse_args;

/// What an argument's value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    Text,
    /// An integer of at least 1.
    Positive,
    /// An integer of at least 0.
    Count,
    /// A number above 0 (a rate).
    Rate,
    /// A place a source or sink opens: a path, `file://...` or `s3://...`.
    Location,
    /// One of these words.
    OneOf(&'static [&'static str]),
}

impl ArgKind {
    fn describe(&self) -> String {
        match self {
            ArgKind::Text => "text".into(),
            ArgKind::Positive => "integer >= 1".into(),
            ArgKind::Count => "integer >= 0".into(),
            ArgKind::Rate => "number > 0".into(),
            ArgKind::Location => "path or URL".into(),
            ArgKind::OneOf(words) => words.join("|"),
        }
    }

    /// `Err(what was expected)` when `value` is not of this kind.
    fn check(&self, value: &str) -> std::result::Result<(), String> {
        let ok = match self {
            ArgKind::Text => true,
            ArgKind::Positive => value.parse::<u64>().is_ok_and(|n| n >= 1),
            ArgKind::Count => value.parse::<u64>().is_ok(),
            ArgKind::Rate => value.parse::<f64>().is_ok_and(|r| r > 0.0 && r.is_finite()),
            ArgKind::Location => return crate::io::check_location(value).map_err(|e| e.to_string()),
            ArgKind::OneOf(words) => words.contains(&value),
        };
        if ok {
            Ok(())
        } else {
            Err(format!("expected {}, got {value:?}", self.describe()))
        }
    }
}

/// One declared argument: `--name value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgSpec {
    pub name: &'static str,
    pub kind: ArgKind,
    pub required: bool,
    /// What the job uses when the argument is not given (shown by `floe jobs`).
    pub default: Option<&'static str>,
    pub help: &'static str,
}

impl ArgSpec {
    pub const fn required(name: &'static str, kind: ArgKind, help: &'static str) -> Self {
        ArgSpec {
            name,
            kind,
            required: true,
            default: None,
            help,
        }
    }

    pub const fn optional(
        name: &'static str,
        kind: ArgKind,
        default: Option<&'static str>,
        help: &'static str,
    ) -> Self {
        ArgSpec {
            name,
            kind,
            required: false,
            default,
            help,
        }
    }
}

/// What a registered job is and takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSpec {
    pub description: &'static str,
    pub args: &'static [ArgSpec],
}

impl JobSpec {
    /// Checks `args` (`--name value` pairs) against the declaration: every name declared, every
    /// required one given, every value of its kind. The error names the argument.
    pub fn check(&self, job: &str, args: &[String]) -> Result<()> {
        let known: Vec<&str> = self.args.iter().map(|a| a.name).collect();
        let required: Vec<&str> = self.args.iter().filter(|a| a.required).map(|a| a.name).collect();
        let given = parse_args(args, &known, &required).map_err(|e| match e {
            Error::Argument { argument, message } => Error::Argument {
                argument,
                message: format!("{message} (job {job})"),
            },
            other => other,
        })?;
        for spec in self.args {
            if let Some(value) = given.get(spec.name) {
                spec.kind.check(value).map_err(|message| {
                    Error::argument(&format!("--{}", spec.name), format!("{message} (job {job})"))
                })?;
            }
        }
        Ok(())
    }

    /// Checks `args` as [`JobSpec::check`] does and returns them typed, with the declared defaults
    /// filled in: a job's build function reads its arguments from here.
    pub fn parse(&self, job: &str, args: &[String]) -> Result<JobArgValues> {
        self.check(job, args)?;
        let known: Vec<&str> = self.args.iter().map(|a| a.name).collect();
        let given = parse_args(args, &known, &[])?;
        let mut values = std::collections::BTreeMap::new();
        for spec in self.args {
            let value = given.get(spec.name).cloned().or_else(|| {
                // A default that is a description ("3 x --keys") is the job's to compute.
                spec.default
                    .filter(|d| spec.kind.check(d).is_ok())
                    .map(str::to_string)
            });
            if let Some(v) = value {
                values.insert(spec.name, v);
            }
        }
        Ok(JobArgValues {
            job: job.to_string(),
            values,
        })
    }

    /// The job's usage, one line per argument (what `floe jobs` prints).
    pub fn usage(&self, job: &str) -> String {
        let mut out = format!("{job}: {}\n", self.description);
        for a in self.args {
            let value = match a.default {
                Some(d) => format!("{} (default {d})", a.kind.describe()),
                None if a.required => format!("{}, required", a.kind.describe()),
                None => a.kind.describe(),
            };
            out.push_str(&format!("  --{:<20} {value}: {}\n", a.name, a.help));
        }
        out
    }
}

/// A job's arguments after [`JobSpec::parse`]: checked against their kinds, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobArgValues {
    job: String,
    values: std::collections::BTreeMap<&'static str, String>,
}

impl JobArgValues {
    /// The value given or defaulted, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A value the declaration requires or defaults.
    pub fn text(&self, name: &str) -> Result<&str> {
        self.get(name)
            .ok_or_else(|| Error::argument(&format!("--{name}"), format!("is required (job {})", self.job)))
    }

    /// An integer argument (`Positive` or `Count`), if given or defaulted.
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    Error::argument(
                        &format!("--{name}"),
                        format!("expected an integer, got {v:?} (job {})", self.job),
                    )
                })
            })
            .transpose()
    }

    /// An integer argument the declaration requires or defaults.
    pub fn u64(&self, name: &str) -> Result<u64> {
        self.text(name)?;
        Ok(self.opt_u64(name)?.unwrap_or_default())
    }

    /// A number argument (`Rate`), if given or defaulted.
    pub fn opt_f64(&self, name: &str) -> Result<Option<f64>> {
        self.get(name)
            .map(|v| {
                v.parse::<f64>().map_err(|_| {
                    Error::argument(
                        &format!("--{name}"),
                        format!("expected a number, got {v:?} (job {})", self.job),
                    )
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: JobSpec = JobSpec {
        description: "a test job",
        args: &[
            ArgSpec::required("output", ArgKind::Location, "where rows go"),
            ArgSpec::optional("events", ArgKind::Positive, None, "how many"),
            ArgSpec::optional("mode", ArgKind::OneOf(&["a", "b"]), Some("a"), "which"),
        ],
    };

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_wrong_argument_is_refused_naming_it_and_the_job() {
        assert!(
            SPEC.check("t", &args(&["--output", "/tmp/x", "--events", "3"]))
                .is_ok()
        );
        let e = SPEC
            .check("t", &args(&["--output", "/tmp/x", "--evnets", "3"]))
            .unwrap_err();
        assert!(
            e.to_string().contains("--evnets") && e.to_string().contains("--events"),
            "{e}"
        );
        assert!(e.to_string().contains("(job t)"), "{e}");
        let e = SPEC.check("t", &args(&["--events", "3"])).unwrap_err();
        assert!(e.to_string().contains("--output"), "{e}");
        let e = SPEC
            .check("t", &args(&["--output", "/tmp/x", "--events", "0"]))
            .unwrap_err();
        assert!(
            e.to_string().contains("--events") && e.to_string().contains("integer >= 1"),
            "{e}"
        );
        let e = SPEC
            .check("t", &args(&["--output", "/tmp/x", "--mode", "c"]))
            .unwrap_err();
        assert!(e.to_string().contains("expected a|b, got \"c\""), "{e}");
        let e = SPEC.check("t", &args(&["--output", "ftp://x"])).unwrap_err();
        assert!(e.to_string().contains("--output"), "{e}");
    }

    #[test]
    fn parsed_arguments_are_typed_with_their_defaults() {
        let a = SPEC
            .parse("t", &args(&["--output", "/tmp/x", "--events", "7"]))
            .unwrap();
        assert_eq!(a.text("output").unwrap(), "/tmp/x");
        assert_eq!(a.u64("events").unwrap(), 7);
        assert_eq!(a.text("mode").unwrap(), "a", "the declared default");
        let a = SPEC.parse("t", &args(&["--output", "/tmp/x"])).unwrap();
        assert_eq!(a.opt_u64("events").unwrap(), None);
        let e = a.u64("events").unwrap_err().to_string();
        assert!(e.contains("--events") && e.contains("(job t)"), "{e}");
        assert!(
            SPEC.parse("t", &args(&["--output", "/tmp/x", "--events", "x"]))
                .is_err()
        );
    }

    #[test]
    fn usage_lists_every_argument_with_its_kind_and_default() {
        let u = SPEC.usage("t");
        assert!(u.starts_with("t: a test job\n"), "{u}");
        assert!(
            u.contains("--output") && u.contains("path or URL, required: where rows go"),
            "{u}"
        );
        assert!(u.contains("a|b (default a): which"), "{u}");
    }
}
