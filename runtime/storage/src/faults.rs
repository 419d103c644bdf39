//! Injected object-store faults, for the fault-injection campaign (`tests/fault_campaign.rs`): a
//! given share of operations fails, is delayed, or (for writes) takes effect and still reports a
//! failure, as a store whose answer is lost does. Off unless a job's configuration sets one of the
//! `floe.testing.object-store.*` keys, so the faults reach every process of the job (JobManager and
//! TaskManagers alike) with the job's storage configuration.
//!
//! Faults sit above opendal's retry layer: an injected failure is what Floe sees after the retries
//! gave up, a store that stayed unavailable for a while.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{Error, Result};

/// Share of operations (0 to 1) that fail.
pub const FAILURE_RATE_KEY: &str = "floe.testing.object-store.failure-rate";
/// Share of failed writes that took effect before failing (an answer lost on the way back).
pub const AMBIGUOUS_RATE_KEY: &str = "floe.testing.object-store.ambiguous-rate";
/// Largest delay added to an operation, milliseconds (each is delayed by a random share of it).
pub const MAX_DELAY_KEY: &str = "floe.testing.object-store.max-delay-ms";
/// Seed of the fault sequence.
pub const SEED_KEY: &str = "floe.testing.object-store.seed";

/// What a faulty operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Proceed,
    /// Fail without touching the store.
    Fail,
    /// Perform the write, then report a failure.
    FailAfter,
}

/// The fault plan of one opened store.
#[derive(Debug)]
pub(crate) struct Faults {
    failure_rate: f64,
    ambiguous_rate: f64,
    max_delay: Duration,
    state: AtomicU64,
}

fn rate(conf: &BTreeMap<String, String>, key: &str) -> Result<f64> {
    match conf.get(key) {
        None => Ok(0.0),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(Error::InvalidConfiguration {
                key: key.to_string(),
                reason: format!("expected a share between 0 and 1, got {v:?}"),
            }),
        },
    }
}

impl Faults {
    /// The plan `conf` asks for, or `None` when it asks for none.
    pub(crate) fn from_configuration(conf: &BTreeMap<String, String>) -> Result<Option<Faults>> {
        let failure_rate = rate(conf, FAILURE_RATE_KEY)?;
        let ambiguous_rate = rate(conf, AMBIGUOUS_RATE_KEY)?;
        let number = |key: &str| -> Result<u64> {
            conf.get(key).map_or(Ok(0), |v| {
                v.trim().parse().map_err(|_| Error::InvalidConfiguration {
                    key: key.to_string(),
                    reason: format!("expected a non-negative integer, got {v:?}"),
                })
            })
        };
        let max_delay = Duration::from_millis(number(MAX_DELAY_KEY)?);
        if failure_rate == 0.0 && max_delay.is_zero() {
            return Ok(None);
        }
        // Each process and each store opened in it draws its own sequence: with one sequence per
        // seed, every store a restarted task opens would fail the same first operation, forever
        // (the campaign's seed 1030: a keyed-state restore failed on every attempt).
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let opened = OPENED.fetch_add(1, Ordering::Relaxed);
        let seed = number(SEED_KEY)?
            ^ u64::from(std::process::id()).rotate_left(32)
            ^ opened.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Ok(Some(Faults {
            failure_rate,
            ambiguous_rate,
            max_delay,
            state: AtomicU64::new(seed),
        }))
    }

    /// SplitMix64: uniform in [0, 1).
    fn next(&self) -> f64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Delays the operation, then says how it goes. `write`: whether it changes the store (only
    /// those can take effect and still fail).
    pub(crate) async fn before(&self, write: bool) -> Outcome {
        if !self.max_delay.is_zero() {
            tokio::time::sleep(self.max_delay.mul_f64(self.next())).await;
        }
        if self.next() >= self.failure_rate {
            Outcome::Proceed
        } else if write && self.next() < self.ambiguous_rate {
            Outcome::FailAfter
        } else {
            Outcome::Fail
        }
    }
}

/// The error an injected fault reports: a temporary one, as from a store that is unavailable.
pub(crate) fn injected(url: String, after: bool) -> Error {
    let what = if after {
        "injected fault: the write took effect, its answer was lost"
    } else {
        "injected fault: the store is unavailable"
    };
    Error::Io {
        url,
        source: opendal::Error::new(opendal::ErrorKind::Unexpected, what).set_temporary(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_keys_no_faults() {
        assert!(
            Faults::from_configuration(&BTreeMap::new())
                .expect("ok")
                .is_none()
        );
    }

    #[test]
    fn a_bad_rate_names_the_key() {
        let e = Faults::from_configuration(&conf(&[(FAILURE_RATE_KEY, "1.5")]))
            .expect_err("out of range")
            .to_string();
        assert!(
            e.contains(FAILURE_RATE_KEY) && e.contains("between 0 and 1"),
            "{e}"
        );
    }

    /// The campaign's seed 1030: each store a restarted task opened replayed one fault sequence, so
    /// the same first operation failed on every attempt. Stores opened with one seed differ.
    #[tokio::test]
    async fn every_store_opened_draws_its_own_fault_sequence() {
        let plan = conf(&[(FAILURE_RATE_KEY, "0.5"), (SEED_KEY, "7")]);
        let mut sequences = std::collections::BTreeSet::new();
        for _ in 0..8 {
            let faults = Faults::from_configuration(&plan).expect("ok").expect("faults");
            let mut outcomes = Vec::new();
            for _ in 0..16 {
                outcomes.push(faults.before(false).await == Outcome::Proceed);
            }
            sequences.insert(outcomes);
        }
        assert!(
            sequences.len() > 1,
            "8 stores opened, one fault sequence: {sequences:?}"
        );
    }

    #[tokio::test]
    async fn the_failure_rate_is_the_share_that_fails() {
        let faults = Faults::from_configuration(&conf(&[(FAILURE_RATE_KEY, "0.2"), (SEED_KEY, "7")]))
            .expect("ok")
            .expect("faults");
        let mut failed = 0;
        for _ in 0..10_000 {
            if faults.before(false).await != Outcome::Proceed {
                failed += 1;
            }
        }
        assert!((1_700..2_300).contains(&failed), "{failed} of 10000 failed");
    }
}
