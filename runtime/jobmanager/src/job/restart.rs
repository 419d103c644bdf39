//! What a failure leads to: the restart strategy's decision (Flink's `RestartBackoffTimeStrategy`s:
//! fixed-delay, exponential-delay, failure-rate, none) and which failures are one. Pure: the time and
//! the jitter's random draw come in as arguments ([`draw_jitter`] is the caller's random source), so
//! every decision is tested without a clock.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use floe_scheduler::ExecutionState;
use floe_scheduler::execution_graph::ExecutionVertexId;

use super::config::{ExponentialDelay, RestartStrategy};

/// What the restart strategy says to a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    /// Restart the failed tasks after `delay`. `counted`: the failure is a new restart attempt;
    /// otherwise it joined the one whose restart is due (it is restarted with it, spending nothing).
    Restart { delay: Duration, counted: bool },
    /// No more restarts: why, for the job's failure cause.
    Fail(String),
}

/// A job's restart strategy and what it remembers of the failures so far.
#[derive(Debug, Clone)]
pub struct RestartBackoff {
    strategy: RestartStrategy,
    /// Failures that counted as restart attempts over the job's life.
    attempts: u32,
    /// exponential-delay: attempts since the backoff was last reset (Flink's `currentRestartAttempt`).
    since_reset: u32,
    /// When the restart of the latest counted failure is due (ms).
    next_restart_ms: Option<u64>,
    /// failure-rate: the times of the latest failures, at most `max_failures_per_interval + 1`.
    failures: VecDeque<u64>,
}

impl RestartBackoff {
    pub fn new(strategy: RestartStrategy) -> Self {
        RestartBackoff {
            strategy,
            attempts: 0,
            since_reset: 0,
            next_restart_ms: None,
            failures: VecDeque::new(),
        }
    }

    pub fn strategy(&self) -> &RestartStrategy {
        &self.strategy
    }

    /// Failures counted as restart attempts so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// A failure at `now_ms`. `joins`: the caller knows it is part of the latest counted failure (the
    /// loss of a TaskManager whose tasks' failures started it, see [`FailureEpisode`]); it restarts
    /// when that one's restart is due and counts for nothing. `jitter`: a uniform draw from [-1, 1]
    /// (exponential-delay varies its delay by up to `jitter-factor` of it).
    pub fn on_failure(&mut self, now_ms: u64, joins: bool, jitter: f64) -> RestartDecision {
        let joined = |next: u64| RestartDecision::Restart {
            delay: Duration::from_millis(next.saturating_sub(now_ms)),
            counted: false,
        };
        if joins && let Some(next) = self.next_restart_ms {
            return joined(next);
        }
        match self.strategy {
            RestartStrategy::None => {
                RestartDecision::Fail("restart-strategy.type is none: no restart".into())
            }
            RestartStrategy::FixedDelay { attempts, delay } => {
                if self.attempts >= attempts {
                    return RestartDecision::Fail(format!(
                        "restart strategy exhausted after {} restarts",
                        self.attempts
                    ));
                }
                self.count(now_ms, delay)
            }
            RestartStrategy::ExponentialDelay(e) => {
                // Flink 2 (FLIP-364): a failure before the pending restart is part of it.
                if let Some(next) = self.next_restart_ms {
                    if now_ms <= next {
                        return joined(next);
                    }
                    if now_ms - next >= e.reset_backoff_threshold.as_millis() as u64 {
                        self.since_reset = 0;
                    }
                }
                let backoff = e.backoff(self.since_reset, jitter);
                self.since_reset += 1;
                if let Some(limit) = e.attempts_before_reset_backoff
                    && self.since_reset > limit
                {
                    return RestartDecision::Fail(format!(
                        "restart strategy exhausted after {limit} restarts without a reset of the backoff \
                         (restart-strategy.exponential-delay.attempts-before-reset-backoff)"
                    ));
                }
                self.count(now_ms, backoff)
            }
            RestartStrategy::FailureRate {
                max_failures_per_interval,
                interval,
                delay,
            } => {
                let max = max_failures_per_interval as usize;
                if self.failures.len() > max {
                    self.failures.pop_front();
                }
                self.failures.push_back(now_ms);
                let interval_ms = interval.as_millis() as u64;
                if let Some(&earliest) = self.failures.front()
                    && self.failures.len() > max
                    && now_ms.saturating_sub(earliest) <= interval_ms
                {
                    return RestartDecision::Fail(format!(
                        "restart strategy exhausted: {} failures within {interval_ms} ms, more than \
                         restart-strategy.failure-rate.max-failures-per-interval ({max})",
                        self.failures.len()
                    ));
                }
                self.count(now_ms, delay)
            }
        }
    }

    fn count(&mut self, now_ms: u64, delay: Duration) -> RestartDecision {
        self.attempts += 1;
        self.next_restart_ms =
            Some(now_ms.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)));
        RestartDecision::Restart { delay, counted: true }
    }
}

impl ExponentialDelay {
    /// The delay of the restart `attempt` (0: the first since the backoff was reset):
    /// `initial-backoff * backoff-multiplier^attempt`, moved by `jitter` (in [-1, 1]) times
    /// `jitter-factor` of it, within [`initial-backoff`, `max-backoff`] (Flink's).
    pub fn backoff(&self, attempt: u32, jitter: f64) -> Duration {
        let initial = self.initial_backoff.as_millis() as f64;
        let max = self.max_backoff.as_millis() as f64;
        // Far beyond any max-backoff, and finite however many attempts (`powi`: exact for 1.5^k).
        let exponent = attempt.min(10_000) as i32;
        let current = (initial * self.backoff_multiplier.powi(exponent))
            .min(1e15)
            .floor();
        let offset = (current * self.jitter_factor).floor();
        let jittered = current + (offset * jitter.clamp(-1.0, 1.0)).round();
        Duration::from_millis(jittered.min(max).max(initial) as u64)
    }
}

/// A uniform draw from [-1, 1] for [`RestartBackoff::on_failure`]'s jitter: the only thing here
/// that is not a function of its arguments.
pub fn draw_jitter() -> f64 {
    use std::hash::BuildHasher;
    // Every `RandomState` has new keys: the hash of anything under them is a fresh random number.
    let bits = std::collections::hash_map::RandomState::new().hash_one(0u8);
    (bits >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

/// Which failures are one for the restart strategy. A TaskManager that goes away fails every task
/// it runs, and the JobManager hears of it more than once: a TaskManager stopping on SIGTERM
/// reports each of its tasks failed, then it is found lost (a restart's deployment cannot reach it,
/// or its heartbeats stop); one killed outright fails its tasks' consumers elsewhere first. The
/// restart strategy counts the first of these; an episode is what the later ones join:
/// - failures of tasks on the TaskManagers of the episode's failed tasks, before its restart ran
///   (each report of a TaskManager shutting down);
/// - the loss of one of those TaskManagers before the restart ran, or of any TaskManager whose only
///   executions are attempts the episode's restarts sent there and that never started (they never
///   ran: the loss is the episode's cause found out) -- once per TaskManager, so a TaskManager that
///   keeps dying costs restarts.
#[derive(Debug, Clone, Default)]
pub struct FailureEpisode {
    /// A failure was counted (there is an episode to join).
    active: bool,
    /// The episode's restart has not run yet.
    restart_pending: bool,
    /// Where the episode's failed tasks ran.
    taskmanagers: BTreeSet<String>,
    /// TaskManagers whose loss joined the episode.
    lost: BTreeSet<String>,
    /// Attempts the episode's restarts created.
    restarted: BTreeSet<(ExecutionVertexId, u64)>,
}

impl FailureEpisode {
    /// Tasks that ran on `taskmanagers` failed: whether that joins the episode.
    pub fn joins_tasks(&self, taskmanagers: &BTreeSet<String>) -> bool {
        self.active
            && self.restart_pending
            && !taskmanagers.is_empty()
            && taskmanagers.is_subset(&self.taskmanagers)
    }

    /// TaskManager `tm` was lost with `victims` (its executions that had not ended: attempt and
    /// state): whether that joins the episode.
    pub fn joins_loss(&self, tm: &str, victims: &[(ExecutionVertexId, u64, ExecutionState)]) -> bool {
        if !self.active || self.lost.contains(tm) {
            return false;
        }
        let its_own = self.restart_pending && self.taskmanagers.contains(tm);
        let never_started = !victims.is_empty()
            && victims.iter().all(|(v, attempt, state)| {
                matches!(
                    state,
                    ExecutionState::Created | ExecutionState::Scheduled | ExecutionState::Deploying
                ) && self.restarted.contains(&(*v, *attempt))
            });
        its_own || never_started
    }

    /// A failure of tasks on `taskmanagers` counted as a new restart attempt: a new episode.
    pub fn begin(&mut self, taskmanagers: BTreeSet<String>) {
        *self = FailureEpisode {
            active: true,
            restart_pending: true,
            taskmanagers,
            ..FailureEpisode::default()
        };
    }

    /// A failure of tasks on `taskmanagers` joined the episode; `lost`: the TaskManager whose
    /// loss it was.
    pub fn join(&mut self, taskmanagers: BTreeSet<String>, lost: Option<&str>) {
        self.taskmanagers.extend(taskmanagers);
        self.lost.extend(lost.map(str::to_string));
    }

    /// A restart ran, creating these attempts.
    pub fn restarted(&mut self, attempts: impl IntoIterator<Item = (ExecutionVertexId, u64)>) {
        self.restart_pending = false;
        if self.active {
            self.restarted.extend(attempts);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn conf(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn strategy(pairs: &[(&str, &str)]) -> RestartStrategy {
        RestartStrategy::from_configuration(&conf(pairs)).unwrap()
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        RestartStrategy::from_configuration(&conf(pairs))
            .unwrap_err()
            .to_string()
    }

    fn exponential(pairs: &[(&str, &str)]) -> ExponentialDelay {
        let mut with_type = vec![("restart-strategy.type", "exponential-delay")];
        with_type.extend_from_slice(pairs);
        match strategy(&with_type) {
            RestartStrategy::ExponentialDelay(e) => e,
            other => panic!("{other:?}"),
        }
    }

    fn delay_ms(d: &RestartDecision) -> u64 {
        match d {
            RestartDecision::Restart { delay, .. } => delay.as_millis() as u64,
            RestartDecision::Fail(why) => panic!("failed: {why}"),
        }
    }

    fn counted(d: &RestartDecision) -> bool {
        matches!(d, RestartDecision::Restart { counted: true, .. })
    }

    const CHECKPOINTING: [(&str, &str); 2] = [
        ("execution.checkpointing.interval", "1 s"),
        ("execution.runtime-mode", "STREAMING"),
    ];

    #[test]
    fn defaults_follow_flink_2_with_checkpointing_and_floe_without() {
        // Without checkpointing: Floe's default as before, 3 attempts 1 s apart.
        assert_eq!(
            strategy(&[]),
            RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_secs(1)
            }
        );
        // With checkpointing: Flink 2's exponential-delay with Flink's defaults.
        assert_eq!(
            strategy(&CHECKPOINTING),
            RestartStrategy::ExponentialDelay(ExponentialDelay {
                initial_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(60),
                backoff_multiplier: 1.5,
                reset_backoff_threshold: Duration::from_secs(3600),
                jitter_factor: 0.1,
                attempts_before_reset_backoff: None,
            })
        );
        // A batch job does not checkpoint: Floe's default.
        assert!(matches!(
            strategy(&[
                ("execution.checkpointing.interval", "1 s"),
                ("execution.runtime-mode", "BATCH")
            ]),
            RestartStrategy::FixedDelay { attempts: 3, .. }
        ));
        // A named type wins; without one, the strategy whose keys are set.
        let mut fixed = CHECKPOINTING.to_vec();
        fixed.push(("restart-strategy.fixed-delay.delay", "200 ms"));
        assert_eq!(
            strategy(&fixed),
            RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(200)
            }
        );
        assert!(matches!(
            strategy(&[("restart-strategy.failure-rate.delay", "2 s")]),
            RestartStrategy::FailureRate { max_failures_per_interval: 1, delay, interval }
                if delay == Duration::from_secs(2) && interval == Duration::from_secs(60)
        ));
        assert_eq!(
            strategy(&[
                ("restart-strategy.type", "none"),
                ("restart-strategy.fixed-delay.delay", "2 s")
            ]),
            RestartStrategy::None
        );
        assert!(matches!(
            strategy(&[("restart-strategy.type", "ExponentialDelay")]),
            RestartStrategy::ExponentialDelay(_)
        ));
    }

    #[test]
    fn every_key_is_read_with_flink_durations() {
        let e = exponential(&[
            ("restart-strategy.exponential-delay.initial-backoff", "500"),
            ("restart-strategy.exponential-delay.max-backoff", "2 min"),
            ("restart-strategy.exponential-delay.backoff-multiplier", "2.0"),
            (
                "restart-strategy.exponential-delay.reset-backoff-threshold",
                "1 h",
            ),
            ("restart-strategy.exponential-delay.jitter-factor", "0"),
            (
                "restart-strategy.exponential-delay.attempts-before-reset-backoff",
                "7",
            ),
        ]);
        assert_eq!(
            e,
            ExponentialDelay {
                initial_backoff: Duration::from_millis(500),
                max_backoff: Duration::from_secs(120),
                backoff_multiplier: 2.0,
                reset_backoff_threshold: Duration::from_secs(3600),
                jitter_factor: 0.0,
                attempts_before_reset_backoff: Some(7),
            }
        );
        assert_eq!(
            strategy(&[
                ("restart-strategy.type", "failure-rate"),
                ("restart-strategy.failure-rate.max-failures-per-interval", "3"),
                ("restart-strategy.failure-rate.failure-rate-interval", "5 min"),
                ("restart-strategy.failure-rate.delay", "10 s"),
            ]),
            RestartStrategy::FailureRate {
                max_failures_per_interval: 3,
                interval: Duration::from_secs(300),
                delay: Duration::from_secs(10)
            }
        );
    }

    #[test]
    fn bad_values_name_the_key_and_what_was_expected() {
        let cases: [(&[(&str, &str)], &str); 10] = [
            (
                &[("restart-strategy.type", "exponential")],
                "invalid configuration restart-strategy.type: expected fixed-delay, exponential-delay, failure-rate or none, got \"exponential\"",
            ),
            (
                &[("restart-strategy.exponential-delay.initial-backoff", "soon")],
                "invalid configuration restart-strategy.exponential-delay.initial-backoff: expected a duration like \"10 s\" or \"10000\" (ms), got \"soon\"",
            ),
            (
                &[("restart-strategy.exponential-delay.initial-backoff", "0 s")],
                "invalid configuration restart-strategy.exponential-delay.initial-backoff: expected a duration of at least 1 ms, got 0ns",
            ),
            (
                &[
                    ("restart-strategy.exponential-delay.initial-backoff", "2 min"),
                    ("restart-strategy.exponential-delay.max-backoff", "1 min"),
                ],
                "invalid configuration restart-strategy.exponential-delay.max-backoff: 60s is below restart-strategy.exponential-delay.initial-backoff = 120s",
            ),
            (
                &[("restart-strategy.exponential-delay.backoff-multiplier", "1")],
                "invalid configuration restart-strategy.exponential-delay.backoff-multiplier: expected a number above 1, got \"1\"",
            ),
            (
                &[("restart-strategy.exponential-delay.jitter-factor", "1.5")],
                "invalid configuration restart-strategy.exponential-delay.jitter-factor: expected a number from 0 to 1, got \"1.5\"",
            ),
            (
                &[(
                    "restart-strategy.exponential-delay.attempts-before-reset-backoff",
                    "0",
                )],
                "invalid configuration restart-strategy.exponential-delay.attempts-before-reset-backoff: expected a positive integer, got \"0\"",
            ),
            (
                &[("restart-strategy.failure-rate.max-failures-per-interval", "-1")],
                "invalid configuration restart-strategy.failure-rate.max-failures-per-interval: expected a positive integer, got \"-1\"",
            ),
            (
                &[("restart-strategy.fixed-delay.attempts", "many")],
                "invalid configuration restart-strategy.fixed-delay.attempts: expected a non-negative integer, got \"many\"",
            ),
            (
                &[
                    ("restart-strategy.fixed-delay.delay", "1 s"),
                    ("restart-strategy.failure-rate.delay", "1 s"),
                ],
                "invalid configuration restart-strategy.type: keys of several strategies are set (restart-strategy.fixed-delay.*, restart-strategy.failure-rate.*): name the one to use",
            ),
        ];
        for (pairs, expected) in cases {
            assert_eq!(error(pairs), expected, "{pairs:?}");
        }
        // The validator `floe run` and a submission go through checks them all.
        let e = super::super::validate_configuration(&conf(&[(
            "restart-strategy.failure-rate.failure-rate-interval",
            "0",
        )]))
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid configuration restart-strategy.failure-rate.failure-rate-interval:"),
            "{e}"
        );
    }

    #[test]
    fn fixed_delay_is_unchanged_attempts_over_the_jobs_life() {
        let mut b = RestartBackoff::new(strategy(&[("restart-strategy.fixed-delay.attempts", "2")]));
        // However far apart: the budget never comes back.
        for now in [0, 10_000_000] {
            let d = b.on_failure(now, false, 1.0);
            assert_eq!(delay_ms(&d), 1000);
            assert!(counted(&d));
        }
        assert_eq!(
            b.on_failure(20_000_000, false, 0.0),
            RestartDecision::Fail("restart strategy exhausted after 2 restarts".into())
        );
        let mut none = RestartBackoff::new(RestartStrategy::None);
        assert!(matches!(none.on_failure(0, false, 0.0), RestartDecision::Fail(_)));
    }

    #[test]
    fn exponential_backoff_grows_by_the_multiplier_up_to_the_max() {
        let e = ExponentialDelay::default();
        let sequence: Vec<u64> = (0..14).map(|k| e.backoff(k, 0.0).as_millis() as u64).collect();
        assert_eq!(
            sequence,
            [
                1000, 1500, 2250, 3375, 5062, 7593, 11390, 17085, 25628, 38443, 57665, 60000, 60000, 60000
            ]
        );
        assert_eq!(
            e.backoff(100_000, 1.0),
            Duration::from_secs(60),
            "finite however many"
        );
        // Through the strategy: each failure after the previous restart ran waits longer.
        let mut b = RestartBackoff::new(RestartStrategy::ExponentialDelay(e));
        let mut now = 0;
        let mut delays = Vec::new();
        for _ in 0..5 {
            let d = b.on_failure(now, false, 0.0);
            assert!(counted(&d));
            delays.push(delay_ms(&d));
            now += delay_ms(&d) + 5_000; // restarted, ran 5 s, failed again
        }
        assert_eq!(delays, [1000, 1500, 2250, 3375, 5062]);
        assert_eq!(b.attempts(), 5);
    }

    #[test]
    fn jitter_stays_within_its_factor_and_the_bounds() {
        let e = ExponentialDelay::default();
        // 10% of 2250 ms either way.
        assert_eq!(e.backoff(2, -1.0), Duration::from_millis(2025));
        assert_eq!(e.backoff(2, 1.0), Duration::from_millis(2475));
        // Never below the initial backoff nor above the max.
        assert_eq!(e.backoff(0, -1.0), Duration::from_millis(1000));
        assert_eq!(e.backoff(0, 1.0), Duration::from_millis(1100));
        assert_eq!(e.backoff(20, 1.0), Duration::from_secs(60));
        // Seeded draws: every delay within [0.9, 1.1] of the plain one, and not all the same.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let draw = (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            let ms = e.backoff(3, draw).as_millis() as u64;
            assert!((3038..=3713).contains(&ms), "{ms}");
            seen.insert(ms);
        }
        assert!(seen.len() > 50, "{}", seen.len());
        // The real draws are in [-1, 1] too.
        for _ in 0..1000 {
            let j = draw_jitter();
            assert!((-1.0..=1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn exponential_backoff_resets_after_the_threshold_of_stable_running() {
        let e = exponential(&[(
            "restart-strategy.exponential-delay.reset-backoff-threshold",
            "1 min",
        )]);
        let mut b = RestartBackoff::new(e.into());
        assert_eq!(delay_ms(&b.on_failure(0, false, 0.0)), 1000); // restarts at 1 000
        assert_eq!(delay_ms(&b.on_failure(2_000, false, 0.0)), 1500); // restarts at 3 500
        assert_eq!(delay_ms(&b.on_failure(60_000, false, 0.0)), 2250); // ran 56.5 s: no reset
        // Restarted at 62 250 and ran a full minute without a failure: back to the start.
        assert_eq!(delay_ms(&b.on_failure(122_250, false, 0.0)), 1000);
        assert_eq!(delay_ms(&b.on_failure(124_000, false, 0.0)), 1500);
        assert_eq!(b.attempts(), 5);
    }

    #[test]
    fn exponential_failures_before_the_restart_are_part_of_it() {
        let mut b = RestartBackoff::new(ExponentialDelay::default().into());
        assert_eq!(delay_ms(&b.on_failure(10_000, false, 0.0)), 1000);
        // Another region fails 300 ms later: it restarts with the first, at 11 000, uncounted.
        let d = b.on_failure(10_300, false, 0.0);
        assert_eq!(
            d,
            RestartDecision::Restart {
                delay: Duration::from_millis(700),
                counted: false
            }
        );
        assert_eq!(b.attempts(), 1);
        // After the restart: a new attempt, with the next backoff.
        let d = b.on_failure(11_001, false, 0.0);
        assert!(counted(&d));
        assert_eq!(delay_ms(&d), 1500);
    }

    #[test]
    fn exponential_attempts_before_reset_fail_the_job() {
        let e = exponential(&[
            (
                "restart-strategy.exponential-delay.attempts-before-reset-backoff",
                "2",
            ),
            (
                "restart-strategy.exponential-delay.reset-backoff-threshold",
                "10 s",
            ),
        ]);
        let mut b = RestartBackoff::new(e.into());
        assert!(counted(&b.on_failure(0, false, 0.0)));
        assert!(counted(&b.on_failure(5_000, false, 0.0)));
        // Stable past the threshold since the restart at 6 500: the count starts over.
        assert!(counted(&b.on_failure(20_000, false, 0.0)));
        assert!(counted(&b.on_failure(22_000, false, 0.0)));
        let d = b.on_failure(30_000, false, 0.0);
        assert!(
            matches!(&d, RestartDecision::Fail(why) if why.contains("after 2 restarts without a reset")),
            "{d:?}"
        );
    }

    #[test]
    fn failure_rate_fails_on_more_than_max_failures_within_the_sliding_interval() {
        let mut b = RestartBackoff::new(strategy(&[
            ("restart-strategy.type", "failure-rate"),
            ("restart-strategy.failure-rate.max-failures-per-interval", "2"),
            ("restart-strategy.failure-rate.failure-rate-interval", "10 s"),
            ("restart-strategy.failure-rate.delay", "100 ms"),
        ]));
        assert_eq!(delay_ms(&b.on_failure(0, false, 1.0)), 100);
        assert_eq!(delay_ms(&b.on_failure(4_000, false, 1.0)), 100);
        // A third within 10 s of the first would fail the job; at 10 001 the first slid out.
        assert_eq!(delay_ms(&b.on_failure(10_001, false, 1.0)), 100);
        // 4 000, 10 001, 13 999 would be three failures within 10 s: more than 2.
        let mut tight = b.clone();
        assert!(matches!(
            tight.on_failure(13_999, false, 0.0),
            RestartDecision::Fail(_)
        ));
        assert_eq!(delay_ms(&b.on_failure(14_001, false, 1.0)), 100);
        // Any number of failures spread out: never exhausted (the budget slides).
        for k in 0..100u64 {
            assert!(counted(&b.on_failure(30_000 + k * 6_000, false, 0.0)));
        }
        // The default: one failure per minute.
        let mut default = RestartBackoff::new(strategy(&[("restart-strategy.type", "failure-rate")]));
        assert!(counted(&default.on_failure(0, false, 0.0)));
        assert!(matches!(
            default.on_failure(59_000, false, 0.0),
            RestartDecision::Fail(_)
        ));
        let mut default = RestartBackoff::new(strategy(&[("restart-strategy.type", "failure-rate")]));
        assert!(counted(&default.on_failure(0, false, 0.0)));
        assert!(counted(&default.on_failure(60_001, false, 0.0)));
    }

    #[test]
    fn a_failure_that_joins_restarts_with_the_pending_one_for_every_strategy() {
        for s in [
            strategy(&[("restart-strategy.fixed-delay.attempts", "1")]),
            strategy(&[
                ("restart-strategy.type", "failure-rate"),
                ("restart-strategy.failure-rate.max-failures-per-interval", "1"),
            ]),
            ExponentialDelay::default().into(),
        ] {
            let mut b = RestartBackoff::new(s);
            assert!(counted(&b.on_failure(0, false, 0.0)));
            // The same TaskManager's loss found out 400 ms later, and after the restart ran.
            for (now, left) in [(400, 600), (5_000, 0)] {
                assert_eq!(
                    b.on_failure(now, true, 0.0),
                    RestartDecision::Restart {
                        delay: Duration::from_millis(left),
                        counted: false
                    },
                    "{s:?}"
                );
            }
            assert_eq!(b.attempts(), 1);
        }
        // Nothing to join yet: counted as usual.
        let mut b = RestartBackoff::new(strategy(&[]));
        assert!(counted(&b.on_failure(0, true, 0.0)));
    }

    fn ev(v: u32, s: u32) -> ExecutionVertexId {
        ExecutionVertexId::new(v, s)
    }

    fn tms(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_taskmanager_going_away_is_one_episode() {
        let mut e = FailureEpisode::default();
        assert!(!e.joins_tasks(&tms(&["tm1"])), "nothing counted yet");
        assert!(!e.joins_loss("tm1", &[]));
        // tm1 stops on SIGTERM: its first report counts...
        e.begin(tms(&["tm1"]));
        // ...its other tasks' reports (another region) join, others' do not.
        assert!(e.joins_tasks(&tms(&["tm1"])));
        assert!(!e.joins_tasks(&tms(&["tm0"])));
        assert!(!e.joins_tasks(&tms(&["tm0", "tm1"])));
        // Its loss before the restart ran joins, whatever it still ran.
        let running = [(ev(0, 1), 0, ExecutionState::Running)];
        assert!(e.joins_loss("tm1", &running));
        assert!(!e.joins_loss("tm0", &running));
        // The restart ran, sending attempts 1 of source#1 and map#1 back to tm1's slots.
        e.restarted([(ev(0, 1), 1), (ev(1, 1), 1)]);
        assert!(
            !e.joins_tasks(&tms(&["tm1"])),
            "a failure after the restart is a new one"
        );
        // tm1 is found lost (the deployment could not reach it): they never started, it joins.
        let sent = [
            (ev(0, 1), 1, ExecutionState::Deploying),
            (ev(1, 1), 1, ExecutionState::Deploying),
        ];
        assert!(e.joins_loss("tm1", &sent));
        // Not if one had started there, nor for attempts no restart of the episode sent.
        let started = [
            (ev(0, 1), 1, ExecutionState::Running),
            (ev(1, 1), 1, ExecutionState::Deploying),
        ];
        assert!(!e.joins_loss("tm1", &started));
        assert!(!e.joins_loss("tm1", &[(ev(2, 0), 0, ExecutionState::Deploying)]));
        assert!(!e.joins_loss("tm1", &[]), "nothing lost with it");
        // Once per TaskManager: one that keeps dying before its tasks start costs restarts.
        e.join(tms(&["tm1"]), Some("tm1"));
        assert!(!e.joins_loss("tm1", &sent));
        // A killed TaskManager (tm2): its consumers on tm0 fail first and count; the restart
        // sends attempts to tm2's slots; tm2's loss then joins.
        e.begin(tms(&["tm0"]));
        e.restarted([(ev(1, 0), 2), (ev(0, 0), 2)]);
        assert!(e.joins_loss("tm2", &[(ev(0, 0), 2, ExecutionState::Deploying)]));
        assert!(
            !e.joins_loss("tm2", &[(ev(0, 0), 1, ExecutionState::Deploying)]),
            "an older attempt"
        );
    }
}
