//! What a job's configuration tells the JobManager, read with Flink's keys: the restart strategy,
//! checkpointing, how long to wait for slots, heartbeats. Every value is checked when the job is
//! submitted (and by `floe run` before it starts a cluster), with errors that name the key.

use std::collections::BTreeMap;
use std::time::Duration;

use floe_scheduler::adaptive::AdaptiveBatchParallelismDecider;
use floe_scheduler::autoscaler::AutoscalerConfig;

use crate::error::{Error, Result};

/// Flink's key for how long a job waits for the slots it needs before it fails.
pub const SLOT_REQUEST_TIMEOUT_KEY: &str = "slot.request.timeout";

/// Flink's words for a job that could not get its slots (its `NoResourceAvailableException`).
pub fn no_resource_available(needed: usize, available: usize, waited: Duration) -> String {
    format!(
        "NoResourceAvailableException: could not acquire the minimum required resources within \
         {SLOT_REQUEST_TIMEOUT_KEY} ({} s): the job needs {needed} slots, the cluster offers {available} free",
        waited.as_secs()
    )
}

/// Flink's key of the restart strategy.
pub const RESTART_STRATEGY_KEY: &str = "restart-strategy.type";
const FIXED_DELAY: &str = "restart-strategy.fixed-delay.";
const EXPONENTIAL_DELAY: &str = "restart-strategy.exponential-delay.";
const FAILURE_RATE: &str = "restart-strategy.failure-rate.";

/// A job's restart strategy (`restart-strategy.type`), with Flink's keys and defaults. What each
/// decides on a failure is in `restart.rs`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RestartStrategy {
    /// `none` (`off`, `disable`): the first failure fails the job.
    None,
    /// `fixed-delay`: `attempts` restarts over the job's life (`.attempts`, default 3), `delay`
    /// apart (`.delay`, default 1 s).
    FixedDelay { attempts: u32, delay: Duration },
    /// `exponential-delay`: restarts without end, each waiting longer than the one before until
    /// the job runs stably for a while.
    ExponentialDelay(ExponentialDelay),
    /// `failure-rate`: the job fails when more than `max_failures_per_interval` failures
    /// (`.max-failures-per-interval`, default 1) happen within `interval`
    /// (`.failure-rate-interval`, default 1 min); restarts are `delay` apart (`.delay`, 1 s).
    FailureRate {
        max_failures_per_interval: u32,
        interval: Duration,
        delay: Duration,
    },
}

/// Flink's `exponential-delay` settings (`restart-strategy.exponential-delay.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialDelay {
    /// `.initial-backoff` (default 1 s): the first restart's delay.
    pub initial_backoff: Duration,
    /// `.max-backoff` (default 1 min): the longest delay.
    pub max_backoff: Duration,
    /// `.backoff-multiplier` (default 1.5): each restart waits this much longer than the last.
    pub backoff_multiplier: f64,
    /// `.reset-backoff-threshold` (default 1 h): a failure after the job ran this long since its
    /// last restart waits `initial_backoff` again.
    pub reset_backoff_threshold: Duration,
    /// `.jitter-factor` (default 0.1): each delay varies by up to this fraction of it, so jobs
    /// that failed together do not all restart at the same moment.
    pub jitter_factor: f64,
    /// `.attempts-before-reset-backoff` (default unlimited): the job fails at the restart after
    /// this many without a reset of the backoff.
    pub attempts_before_reset_backoff: Option<u32>,
}

impl Default for ExponentialDelay {
    fn default() -> Self {
        ExponentialDelay {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            backoff_multiplier: 1.5,
            reset_backoff_threshold: Duration::from_secs(3600),
            jitter_factor: 0.1,
            attempts_before_reset_backoff: None,
        }
    }
}

/// Which strategy a configuration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrategyKind {
    None,
    FixedDelay,
    ExponentialDelay,
    FailureRate,
}

impl RestartStrategy {
    /// Reads `restart-strategy.type` (`fixed-delay`, `exponential-delay`, `failure-rate` or
    /// `none`) and the chosen strategy's keys, each checked. Without a type: the strategy whose
    /// keys are set (Floe's; Flink would ignore them), else as Flink 2 `exponential-delay` for a
    /// job that checkpoints, else Floe's `fixed-delay` (3 attempts, 1 s apart).
    pub fn from_configuration(conf: &BTreeMap<String, String>) -> Result<Self> {
        Ok(match strategy_kind(conf)? {
            StrategyKind::None => RestartStrategy::None,
            StrategyKind::FixedDelay => RestartStrategy::FixedDelay {
                attempts: match conf.get(&format!("{FIXED_DELAY}attempts")) {
                    None => 3,
                    Some(v) => v.trim().parse().map_err(|_| Error::Config {
                        key: format!("{FIXED_DELAY}attempts"),
                        message: format!("expected a non-negative integer, got {v:?}"),
                    })?,
                },
                delay: restart_duration(conf, &format!("{FIXED_DELAY}delay"), Duration::from_secs(1), 0)?,
            },
            StrategyKind::ExponentialDelay => {
                let key = |name: &str| format!("{EXPONENTIAL_DELAY}{name}");
                let default = ExponentialDelay::default();
                let initial_backoff =
                    restart_duration(conf, &key("initial-backoff"), default.initial_backoff, 1)?;
                let max_backoff = restart_duration(conf, &key("max-backoff"), default.max_backoff, 1)?;
                if max_backoff < initial_backoff {
                    return Err(Error::Config {
                        key: key("max-backoff"),
                        message: format!(
                            "{max_backoff:?} is below {} = {initial_backoff:?}",
                            key("initial-backoff")
                        ),
                    });
                }
                ExponentialDelay {
                    initial_backoff,
                    max_backoff,
                    backoff_multiplier: number_setting(
                        conf,
                        &key("backoff-multiplier"),
                        default.backoff_multiplier,
                        |x| x > 1.0,
                        "a number above 1",
                    )?,
                    reset_backoff_threshold: restart_duration(
                        conf,
                        &key("reset-backoff-threshold"),
                        default.reset_backoff_threshold,
                        1,
                    )?,
                    jitter_factor: number_setting(
                        conf,
                        &key("jitter-factor"),
                        default.jitter_factor,
                        |x| (0.0..=1.0).contains(&x),
                        "a number from 0 to 1",
                    )?,
                    attempts_before_reset_backoff: positive_setting(
                        conf,
                        &key("attempts-before-reset-backoff"),
                    )?,
                }
                .into()
            }
            StrategyKind::FailureRate => {
                let key = |name: &str| format!("{FAILURE_RATE}{name}");
                RestartStrategy::FailureRate {
                    max_failures_per_interval: positive_setting(conf, &key("max-failures-per-interval"))?
                        .unwrap_or(1),
                    interval: restart_duration(
                        conf,
                        &key("failure-rate-interval"),
                        Duration::from_secs(60),
                        1,
                    )?,
                    delay: restart_duration(conf, &key("delay"), Duration::from_secs(1), 0)?,
                }
            }
        })
    }

    /// How long a restart that waits for slots waits before it looks again.
    pub fn retry_delay(&self) -> Duration {
        match self {
            RestartStrategy::None => Duration::ZERO,
            RestartStrategy::FixedDelay { delay, .. } | RestartStrategy::FailureRate { delay, .. } => *delay,
            RestartStrategy::ExponentialDelay(e) => e.initial_backoff,
        }
    }
}

impl From<ExponentialDelay> for RestartStrategy {
    fn from(e: ExponentialDelay) -> Self {
        RestartStrategy::ExponentialDelay(e)
    }
}

/// The strategy `restart-strategy.type` names, or the one its absence means.
fn strategy_kind(conf: &BTreeMap<String, String>) -> Result<StrategyKind> {
    if let Some(v) = conf.get(RESTART_STRATEGY_KEY) {
        return match v.trim().to_ascii_lowercase().as_str() {
            "none" | "off" | "disable" => Ok(StrategyKind::None),
            "fixed-delay" | "fixeddelay" => Ok(StrategyKind::FixedDelay),
            "exponential-delay" | "exponentialdelay" => Ok(StrategyKind::ExponentialDelay),
            "failure-rate" | "failurerate" => Ok(StrategyKind::FailureRate),
            other => Err(Error::Config {
                key: RESTART_STRATEGY_KEY.into(),
                message: format!(
                    "expected fixed-delay, exponential-delay, failure-rate or none, got {other:?}"
                ),
            }),
        };
    }
    let configured: Vec<(&str, StrategyKind)> = [
        (FIXED_DELAY, StrategyKind::FixedDelay),
        (EXPONENTIAL_DELAY, StrategyKind::ExponentialDelay),
        (FAILURE_RATE, StrategyKind::FailureRate),
    ]
    .into_iter()
    .filter(|(prefix, _)| conf.keys().any(|k| k.starts_with(prefix)))
    .collect();
    match configured.as_slice() {
        [] if checkpoint_config(conf)?.is_some() => Ok(StrategyKind::ExponentialDelay),
        [] => Ok(StrategyKind::FixedDelay),
        [(_, kind)] => Ok(*kind),
        several => Err(Error::Config {
            key: RESTART_STRATEGY_KEY.into(),
            message: format!(
                "keys of several strategies are set ({}*): name the one to use",
                several.iter().map(|(p, _)| *p).collect::<Vec<_>>().join("*, ")
            ),
        }),
    }
}

/// The duration at `key` (`default` when unset), at least `min_ms`.
fn restart_duration(
    conf: &BTreeMap<String, String>,
    key: &str,
    default: Duration,
    min_ms: u64,
) -> Result<Duration> {
    match duration_setting(conf, key)? {
        None => Ok(default),
        Some(d) if d.as_millis() >= u128::from(min_ms) => Ok(d),
        Some(d) => Err(Error::Config {
            key: key.into(),
            message: format!("expected a duration of at least {min_ms} ms, got {d:?}"),
        }),
    }
}

/// The number at `key` (`default` when unset); one that is not `valid` is an error saying `expected`.
fn number_setting(
    conf: &BTreeMap<String, String>,
    key: &str,
    default: f64,
    valid: impl Fn(f64) -> bool,
    expected: &str,
) -> Result<f64> {
    match conf.get(key) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && valid(x) => Ok(x),
            _ => Err(Error::Config {
                key: key.into(),
                message: format!("expected {expected}, got {v:?}"),
            }),
        },
    }
}

pub use floe_datastream::parse_duration;

/// The JobManager's own duration keys (the job's operators check theirs when the job is built).
const DURATION_KEYS: [&str; 3] = [
    SLOT_REQUEST_TIMEOUT_KEY,
    "heartbeat.timeout",
    "heartbeat.interval",
];

/// The duration at `key`, if set; a value that is not one is an error naming the key.
pub fn duration_setting(conf: &BTreeMap<String, String>, key: &str) -> Result<Option<Duration>> {
    conf.get(key)
        .map(|v| {
            parse_duration(v).ok_or_else(|| Error::Config {
                key: key.into(),
                message: format!("expected a duration like \"10 s\" or \"10000\" (ms), got {v:?}"),
            })
        })
        .transpose()
}

/// The positive integer at `key`, if set; anything else is an error naming the key.
fn positive_setting(conf: &BTreeMap<String, String>, key: &str) -> Result<Option<u32>> {
    conf.get(key)
        .map(|v| match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(Error::Config {
                key: key.into(),
                message: format!("expected a positive integer, got {v:?}"),
            }),
        })
        .transpose()
}

/// The job's checkpointing settings (`execution.checkpointing.*`), if it checkpoints.
pub(super) fn checkpoint_config(
    conf: &BTreeMap<String, String>,
) -> Result<Option<floe_datastream::CheckpointConfig>> {
    floe_datastream::CheckpointConfig::from_configuration(conf).map_err(|e| match e {
        floe_datastream::Error::Configuration { key, value, message } => Error::Config {
            key,
            message: format!("{value:?}: {message}"),
        },
        other => Error::Config {
            key: floe_datastream::checkpoint::CHECKPOINT_INTERVAL_KEY.into(),
            message: other.to_string(),
        },
    })
}

/// `jobmanager.scheduler: adaptive` (Flink's adaptive scheduler, FLIP-160): a streaming job runs
/// at the parallelism its slots allow within its bounds, and rescales when slots come or go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveScheduler {
    /// `jobmanager.adaptive-scheduler.min-parallelism-increase` (default 1): scale up only by at
    /// least this much.
    pub min_parallelism_increase: u32,
    /// `jobmanager.adaptive-scheduler.scaling-interval.min` (default 30 s): no rescale sooner
    /// after the last one (no flapping).
    pub scaling_interval_min: Duration,
    /// `jobmanager.adaptive-scheduler.resource-stabilization-timeout` (default 10 s): how long a
    /// job that has some but not all the slots it wants waits before it starts with fewer.
    pub stabilization: Duration,
}

/// Flink's scheduler key.
pub const SCHEDULER_KEY: &str = "jobmanager.scheduler";

/// The adaptive scheduler's settings when the job asks for it (`None`: the default scheduler).
pub fn adaptive_scheduler(conf: &BTreeMap<String, String>) -> Result<Option<AdaptiveScheduler>> {
    match conf
        .get(SCHEDULER_KEY)
        .map(|s| s.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("default") | Some("adaptivebatch") | Some("adaptive-batch") => return Ok(None),
        Some("adaptive") => {}
        Some(other) => {
            return Err(Error::Config {
                key: SCHEDULER_KEY.into(),
                message: format!("expected default, adaptive or adaptivebatch, got {other:?}"),
            });
        }
    }
    let min_parallelism_increase =
        positive_setting(conf, "jobmanager.adaptive-scheduler.min-parallelism-increase")?.unwrap_or(1);
    Ok(Some(AdaptiveScheduler {
        min_parallelism_increase,
        scaling_interval_min: duration_setting(conf, "jobmanager.adaptive-scheduler.scaling-interval.min")?
            .unwrap_or(Duration::from_secs(30)),
        stabilization: duration_setting(
            conf,
            "jobmanager.adaptive-scheduler.resource-stabilization-timeout",
        )?
        .unwrap_or(Duration::from_secs(10)),
    }))
}

/// Flink's keys of the adaptive batch scheduler's parallelism decider.
pub const ADAPTIVE_PREFIX: &str = "execution.batch.adaptive.auto-parallelism.";

/// The adaptive batch scheduler's decider as the job configures it (Flink's
/// `execution.batch.adaptive.auto-parallelism.*`: min-parallelism, max-parallelism,
/// avg-data-volume-per-task, default-source-parallelism), with Flink's defaults.
pub fn adaptive_decider(conf: &BTreeMap<String, String>) -> Result<AdaptiveBatchParallelismDecider> {
    let mut d = AdaptiveBatchParallelismDecider::default();
    let positive = |name: &str| positive_setting(conf, &format!("{ADAPTIVE_PREFIX}{name}"));
    if let Some(n) = positive("min-parallelism")? {
        d.min_parallelism = n;
    }
    if let Some(n) = positive("max-parallelism")? {
        d.max_parallelism = n;
    }
    d.default_source_parallelism = positive("default-source-parallelism")?;
    let volume_key = format!("{ADAPTIVE_PREFIX}avg-data-volume-per-task");
    if let Some(v) = conf.get(&volume_key) {
        d.avg_data_volume_per_task = match floe_datastream::parse_memory_size(&volume_key, v) {
            Ok(n) if n > 0 => n as u64,
            _ => {
                return Err(Error::Config {
                    key: volume_key,
                    message: format!("expected a memory size above 0 like \"16 mb\", got {v:?}"),
                });
            }
        };
    }
    d.validate().map_err(|e| Error::Config {
        key: format!("{ADAPTIVE_PREFIX}*"),
        message: e.to_string(),
    })?;
    Ok(d)
}

/// Flink's autoscaler keys (the Flink Kubernetes Operator's `job.autoscaler.*`).
pub const AUTOSCALER_PREFIX: &str = "job.autoscaler.";

/// The job autoscaler's settings when `job.autoscaler.enabled` is true (`None`: off), with
/// Flink's defaults; it needs the adaptive scheduler, which rescales in place.
pub fn autoscaler(conf: &BTreeMap<String, String>) -> Result<Option<AutoscalerConfig>> {
    let key = |name: &str| format!("{AUTOSCALER_PREFIX}{name}");
    let enabled = match conf.get(&key("enabled")).map(|v| v.trim().to_ascii_lowercase()) {
        None => false,
        Some(v) if v == "true" => true,
        Some(v) if v == "false" => false,
        Some(v) => {
            return Err(Error::Config {
                key: key("enabled"),
                message: format!("expected true or false, got {v:?}"),
            });
        }
    };
    if !enabled {
        return Ok(None);
    }
    if adaptive_scheduler(conf)?.is_none() {
        return Err(Error::Config {
            key: key("enabled"),
            message: format!(
                "the autoscaler rescales the running job in place: set {SCHEDULER_KEY}: adaptive"
            ),
        });
    }
    let mut c = AutoscalerConfig::default();
    let ms = |name: &str, into: &mut u64| -> Result<()> {
        if let Some(d) = duration_setting(conf, &key(name))? {
            *into = d.as_millis() as u64;
        }
        Ok(())
    };
    ms("stabilization.interval", &mut c.stabilization_ms)?;
    ms("metrics.window", &mut c.window_ms)?;
    ms("scale-down.interval", &mut c.scale_down_interval_ms)?;
    ms("catch-up.duration", &mut c.catch_up_ms)?;
    ms("restart.time", &mut c.restart_ms)?;
    let fraction = |name: &str, into: &mut f64, range: std::ops::RangeInclusive<f64>| -> Result<()> {
        if let Some(v) = conf.get(&key(name)) {
            match v.trim().parse::<f64>() {
                Ok(x) if range.contains(&x) => *into = x,
                _ => {
                    return Err(Error::Config {
                        key: key(name),
                        message: format!(
                            "expected a number from {} to {}, got {v:?}",
                            range.start(),
                            range.end()
                        ),
                    });
                }
            }
        }
        Ok(())
    };
    fraction("target.utilization", &mut c.target_utilization, 0.01..=1.0)?;
    fraction(
        "target.utilization.boundary",
        &mut c.utilization_boundary,
        0.0..=1.0,
    )?;
    fraction("scale-up.max-factor", &mut c.scale_up_max_factor, 0.0..=f64::MAX)?;
    fraction("scale-down.max-factor", &mut c.scale_down_max_factor, 0.0..=1.0)?;
    if let Some(v) = conf.get(&key("metrics.busy-time.aggregator")) {
        use floe_scheduler::autoscaler::BusyTimeAggregator;
        c.busy_time_aggregator = match v.trim().to_ascii_uppercase().as_str() {
            "MAX" => BusyTimeAggregator::Max,
            "AVG" => BusyTimeAggregator::Avg,
            "MIN" => BusyTimeAggregator::Min,
            _ => {
                return Err(Error::Config {
                    key: key("metrics.busy-time.aggregator"),
                    message: format!("expected MAX, AVG or MIN, got {v:?}"),
                });
            }
        };
    }
    let positive = |name: &str, into: &mut u32| -> Result<()> {
        if let Some(n) = positive_setting(conf, &key(name))? {
            *into = n;
        }
        Ok(())
    };
    positive("vertex.min-parallelism", &mut c.vertex_min_parallelism)?;
    positive("vertex.max-parallelism", &mut c.vertex_max_parallelism)?;
    if c.vertex_min_parallelism > c.vertex_max_parallelism {
        return Err(Error::Config {
            key: key("vertex.min-parallelism"),
            message: format!(
                "{} is above {} = {}",
                c.vertex_min_parallelism,
                key("vertex.max-parallelism"),
                c.vertex_max_parallelism
            ),
        });
    }
    Ok(Some(c))
}

/// Checks every key the JobManager reads from a job's configuration (the restart strategy:
/// `restart-strategy.type` and the `fixed-delay.*`, `exponential-delay.*` or `failure-rate.*` keys of
/// the one it names; checkpointing, slot request timeout, heartbeats, the adaptive batch decider, the
/// autoscaler): what `floe run` runs before it starts a cluster, and a submission before the job is
/// accepted.
pub fn validate_configuration(conf: &BTreeMap<String, String>) -> Result<()> {
    RestartStrategy::from_configuration(conf)?;
    adaptive_decider(conf)?;
    autoscaler(conf)?;
    if adaptive_scheduler(conf)?.is_some() && checkpoint_config(conf)?.is_none() {
        return Err(Error::Config {
            key: SCHEDULER_KEY.into(),
            message:
                "the adaptive scheduler rescales through checkpoints: set execution.checkpointing.interval"
                    .into(),
        });
    }
    checkpoint_config(conf)?;
    if let Some(recovery) = super::state_recovery(conf)?
        && checkpoint_config(conf)?.is_none()
    {
        return Err(Error::Config {
            key: super::RECOVERY_PATH_KEY.into(),
            message: format!(
                "{}: a job restores a savepoint's state through its checkpoints: set execution.checkpointing.interval (a STREAMING job with spec.storage)",
                recovery.path
            ),
        });
    }
    for key in DURATION_KEYS {
        duration_setting(conf, key)?;
    }
    Ok(())
}
