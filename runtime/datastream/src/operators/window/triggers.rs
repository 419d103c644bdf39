//! Window triggers (Flink's `Trigger`s): when a window's function is evaluated, and whether its
//! contents are purged then. A trigger's state is one `i64` per window (a count, or the next
//! firing time; [`NO_STATE`] when empty), kept with the window in keyed state.

use std::sync::Arc;
use std::time::Duration;

use super::TimeWindow;
use crate::time::timers::TimeDomain;

/// A trigger's state before it has any.
pub(crate) const NO_STATE: i64 = i64::MIN;

/// What a trigger decides for a window (Flink's `TriggerResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerResult {
    pub fire: bool,
    pub purge: bool,
}

impl TriggerResult {
    pub const CONTINUE: TriggerResult = TriggerResult {
        fire: false,
        purge: false,
    };
    pub const FIRE: TriggerResult = TriggerResult {
        fire: true,
        purge: false,
    };
    pub const PURGE: TriggerResult = TriggerResult {
        fire: false,
        purge: true,
    };
    pub const FIRE_AND_PURGE: TriggerResult = TriggerResult {
        fire: true,
        purge: true,
    };
}

/// A trigger of the user's own (Flink's `Trigger` subclass): when a window fires, from its
/// elements, timers and one `i64` of state per window (a count, a next firing time, ...), kept
/// with the window in keyed state, so it checkpoints and rescales with it.
pub trait WindowTrigger: Send + Sync + 'static {
    /// An element with timestamp `timestamp` went into `window`.
    fn on_element(&self, timestamp: i64, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> TriggerResult;

    /// An event-time timer of the window's key at `time` fired (maybe another window's).
    fn on_event_time(&self, time: i64, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> TriggerResult {
        let _ = (time, window, ctx);
        TriggerResult::CONTINUE
    }

    /// A processing-time timer of the window's key at `time` fired (maybe another window's).
    fn on_processing_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        let _ = (time, window, ctx);
        TriggerResult::CONTINUE
    }

    /// Whether [`WindowTrigger::on_merge`] is implemented: session windows need it.
    fn can_merge(&self) -> bool {
        false
    }

    /// Windows with states `merged` became `window`: set its state and timers in `ctx`.
    fn on_merge(&self, window: &TimeWindow, merged: &[Option<i64>], ctx: &mut TriggerContext<'_>) {
        let _ = (window, merged, ctx);
    }
}

/// What a [`WindowTrigger`] sees: its window's state, the time, and the timer service.
pub struct TriggerContext<'a> {
    state: Option<i64>,
    watermark: i64,
    now: i64,
    timers: &'a mut Vec<(TimeDomain, i64)>,
}

impl std::fmt::Debug for TriggerContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerContext")
            .field("state", &self.state)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

impl TriggerContext<'_> {
    /// The window's state (`None` until set; `i64::MIN` is taken to mean none).
    pub fn state(&self) -> Option<i64> {
        self.state
    }

    pub fn set_state(&mut self, state: Option<i64>) {
        self.state = state.filter(|s| *s != NO_STATE);
    }

    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    pub fn current_processing_time(&self) -> i64 {
        self.now
    }

    pub fn register_event_time_timer(&mut self, time: i64) {
        self.timers.push((TimeDomain::EventTime, time));
    }

    pub fn register_processing_time_timer(&mut self, time: i64) {
        self.timers.push((TimeDomain::ProcessingTime, time));
    }
}

#[derive(Clone)]
enum Kind {
    EventTime,
    ProcessingTime,
    Count(u64),
    ContinuousEventTime(i64),
    ContinuousProcessingTime(i64),
    Never,
    Custom(Arc<dyn WindowTrigger>),
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::EventTime => write!(f, "EventTime"),
            Kind::ProcessingTime => write!(f, "ProcessingTime"),
            Kind::Count(n) => write!(f, "Count({n})"),
            Kind::ContinuousEventTime(i) => write!(f, "ContinuousEventTime({i})"),
            Kind::ContinuousProcessingTime(i) => write!(f, "ContinuousProcessingTime({i})"),
            Kind::Never => write!(f, "Never"),
            Kind::Custom(_) => write!(f, "Custom"),
        }
    }
}

/// When a window fires. The assigner's default applies unless
/// [`WindowedStream::trigger`](crate::WindowedStream::trigger) sets one.
#[derive(Debug, Clone)]
pub struct Trigger {
    kind: Kind,
    purging: bool,
}

/// Fires once the watermark passes the window's end; a late element within the allowed lateness
/// fires it again at once. The default of event-time windows.
#[derive(Debug)]
pub struct EventTimeTrigger;
impl EventTimeTrigger {
    pub fn create() -> Trigger {
        Trigger::of(Kind::EventTime)
    }
}

/// Fires when processing time reaches the window's end. The default of processing-time windows.
#[derive(Debug)]
pub struct ProcessingTimeTrigger;
impl ProcessingTimeTrigger {
    pub fn create() -> Trigger {
        Trigger::of(Kind::ProcessingTime)
    }
}

/// Fires every `n` elements of a window (the count starts again after each firing).
#[derive(Debug)]
pub struct CountTrigger;
impl CountTrigger {
    pub fn of(n: u64) -> Trigger {
        Trigger::of(Kind::Count(n.max(1)))
    }
}

/// Fires every `interval` of event time while the window is open, and at its end.
#[derive(Debug)]
pub struct ContinuousEventTimeTrigger;
impl ContinuousEventTimeTrigger {
    pub fn of(interval: Duration) -> Trigger {
        Trigger::of(Kind::ContinuousEventTime(
            interval.as_millis().clamp(1, i64::MAX as u128) as i64,
        ))
    }
}

/// Fires every `interval` of processing time while the window is open, and at its end.
#[derive(Debug)]
pub struct ContinuousProcessingTimeTrigger;
impl ContinuousProcessingTimeTrigger {
    pub fn of(interval: Duration) -> Trigger {
        Trigger::of(Kind::ContinuousProcessingTime(
            interval.as_millis().clamp(1, i64::MAX as u128) as i64,
        ))
    }
}

/// Never fires (the default of global windows).
#[derive(Debug)]
pub struct NeverTrigger;
impl NeverTrigger {
    pub fn create() -> Trigger {
        Trigger::of(Kind::Never)
    }
}

/// Purges the window's contents whenever `trigger` fires it.
#[derive(Debug)]
pub struct PurgingTrigger;
impl PurgingTrigger {
    pub fn of(trigger: Trigger) -> Trigger {
        Trigger {
            purging: true,
            ..trigger
        }
    }
}

impl Trigger {
    const fn of(kind: Kind) -> Self {
        Trigger { kind, purging: false }
    }

    /// A trigger of the user's own.
    pub fn custom(trigger: impl WindowTrigger) -> Trigger {
        Trigger::of(Kind::Custom(Arc::new(trigger)))
    }

    /// Whether the trigger can merge windows' states (session windows need it).
    pub(crate) fn can_merge(&self) -> bool {
        match &self.kind {
            Kind::Custom(t) => t.can_merge(),
            _ => true,
        }
    }

    /// Runs a custom trigger's call with its state as `Option`, written back after.
    fn custom_call(
        state: &mut i64,
        watermark: i64,
        now: i64,
        timers: &mut Vec<(TimeDomain, i64)>,
        call: impl FnOnce(&mut TriggerContext<'_>) -> TriggerResult,
    ) -> TriggerResult {
        let mut ctx = TriggerContext {
            state: (*state != NO_STATE).then_some(*state),
            watermark,
            now,
            timers,
        };
        let result = call(&mut ctx);
        *state = ctx.state.unwrap_or(NO_STATE);
        result
    }

    fn result(&self, fire: bool) -> TriggerResult {
        TriggerResult {
            fire,
            purge: fire && self.purging,
        }
    }

    /// An element with timestamp `ts` went into `window`; timers it wants go to `timers`.
    pub(crate) fn on_element(
        &self,
        ts: i64,
        window: &TimeWindow,
        state: &mut i64,
        watermark: i64,
        now: i64,
        timers: &mut Vec<(TimeDomain, i64)>,
    ) -> TriggerResult {
        let end = window.max_timestamp();
        let fire = match &self.kind {
            Kind::Custom(t) => {
                let r = Self::custom_call(state, watermark, now, timers, |ctx| t.on_element(ts, window, ctx));
                return TriggerResult {
                    fire: r.fire,
                    purge: r.purge || (r.fire && self.purging),
                };
            }
            Kind::EventTime => {
                if end <= watermark {
                    true
                } else {
                    timers.push((TimeDomain::EventTime, end));
                    false
                }
            }
            Kind::ProcessingTime => {
                timers.push((TimeDomain::ProcessingTime, end));
                false
            }
            Kind::Count(n) => {
                *state = if *state == NO_STATE { 1 } else { *state + 1 };
                if *state as u64 >= *n {
                    *state = 0;
                    true
                } else {
                    false
                }
            }
            Kind::ContinuousEventTime(interval) => {
                if end <= watermark {
                    true
                } else {
                    timers.push((TimeDomain::EventTime, end));
                    if *state == NO_STATE {
                        let interval = *interval;
                        let next = ts - ts.rem_euclid(interval) + interval;
                        *state = next;
                        timers.push((TimeDomain::EventTime, next));
                    }
                    false
                }
            }
            Kind::ContinuousProcessingTime(interval) => {
                timers.push((TimeDomain::ProcessingTime, end));
                if *state == NO_STATE {
                    let interval = *interval;
                    let next = now - now.rem_euclid(interval) + interval;
                    *state = next;
                    timers.push((TimeDomain::ProcessingTime, next));
                }
                false
            }
            Kind::Never => false,
        };
        self.result(fire)
    }

    /// A timer of `domain` at `time` fired for the window's key.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_timer(
        &self,
        domain: TimeDomain,
        time: i64,
        window: &TimeWindow,
        state: &mut i64,
        watermark: i64,
        now: i64,
        timers: &mut Vec<(TimeDomain, i64)>,
    ) -> TriggerResult {
        let at_end = time == window.max_timestamp();
        if let Kind::Custom(t) = &self.kind {
            let r = Self::custom_call(state, watermark, now, timers, |ctx| match domain {
                TimeDomain::EventTime => t.on_event_time(time, window, ctx),
                TimeDomain::ProcessingTime => t.on_processing_time(time, window, ctx),
            });
            return TriggerResult {
                fire: r.fire,
                purge: r.purge || (r.fire && self.purging),
            };
        }
        let fire = match (self.kind.clone(), domain) {
            (Kind::EventTime, TimeDomain::EventTime) | (Kind::ProcessingTime, TimeDomain::ProcessingTime) => {
                at_end
            }
            (Kind::ContinuousEventTime(interval), TimeDomain::EventTime)
            | (Kind::ContinuousProcessingTime(interval), TimeDomain::ProcessingTime) => {
                let periodic = *state == time;
                if periodic {
                    *state = time.saturating_add(interval);
                    if *state < window.max_timestamp() {
                        timers.push((domain, *state));
                    }
                }
                at_end || periodic
            }
            _ => false,
        };
        self.result(fire)
    }

    /// Windows merged into `window` (sessions); their states are `states`. The merged window's
    /// state, and the timers it needs.
    pub(crate) fn on_merge(
        &self,
        window: &TimeWindow,
        states: &[i64],
        watermark: i64,
        timers: &mut Vec<(TimeDomain, i64)>,
    ) -> i64 {
        let end = window.max_timestamp();
        let present = states.iter().copied().filter(|s| *s != NO_STATE);
        match &self.kind {
            Kind::Custom(t) => {
                let merged: Vec<Option<i64>> =
                    states.iter().map(|s| (*s != NO_STATE).then_some(*s)).collect();
                let mut state = NO_STATE;
                Self::custom_call(&mut state, watermark, crate::time::now_ms(), timers, |ctx| {
                    t.on_merge(window, &merged, ctx);
                    TriggerResult::CONTINUE
                });
                state
            }
            Kind::EventTime => {
                if end > watermark {
                    timers.push((TimeDomain::EventTime, end));
                }
                NO_STATE
            }
            Kind::ProcessingTime => {
                timers.push((TimeDomain::ProcessingTime, end));
                NO_STATE
            }
            Kind::Count(_) => present.sum::<i64>().max(0),
            Kind::ContinuousEventTime(_) | Kind::ContinuousProcessingTime(_) => {
                let domain = if matches!(&self.kind, Kind::ContinuousEventTime(_)) {
                    TimeDomain::EventTime
                } else {
                    TimeDomain::ProcessingTime
                };
                if domain == TimeDomain::ProcessingTime || end > watermark {
                    timers.push((domain, end));
                }
                match present.min() {
                    Some(next) => {
                        timers.push((domain, next));
                        next
                    }
                    None => NO_STATE,
                }
            }
            Kind::Never => NO_STATE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: i64, end: i64) -> TimeWindow {
        TimeWindow::new(start, end)
    }

    #[test]
    fn event_time_fires_at_the_end_and_late_elements_at_once() {
        let t = EventTimeTrigger::create();
        let (mut state, mut timers) = (NO_STATE, Vec::new());
        assert!(!t.on_element(3, &w(0, 10), &mut state, 0, 0, &mut timers).fire);
        assert_eq!(timers, vec![(TimeDomain::EventTime, 9)]);
        assert!(
            !t.on_timer(TimeDomain::EventTime, 8, &w(0, 10), &mut state, 0, 0, &mut timers)
                .fire
        );
        assert!(
            t.on_timer(TimeDomain::EventTime, 9, &w(0, 10), &mut state, 0, 0, &mut timers)
                .fire
        );
        assert!(
            !t.on_timer(
                TimeDomain::ProcessingTime,
                9,
                &w(0, 10),
                &mut state,
                0,
                0,
                &mut timers
            )
            .fire
        );
        timers.clear();
        let late = t.on_element(3, &w(0, 10), &mut state, 9, 0, &mut timers);
        assert!(
            late.fire && !late.purge && timers.is_empty(),
            "a late firing, no timer"
        );
    }

    #[test]
    fn count_and_purging_count() {
        let t = PurgingTrigger::of(CountTrigger::of(3));
        let (mut state, mut timers) = (NO_STATE, Vec::new());
        let results: Vec<_> = (0..7)
            .map(|i| t.on_element(i, &w(0, 100), &mut state, 0, 0, &mut timers))
            .collect();
        let fired: Vec<bool> = results.iter().map(|r| r.fire).collect();
        assert_eq!(fired, vec![false, false, true, false, false, true, false]);
        assert!(results[2].purge);
        assert!(timers.is_empty());
        assert_eq!(t.on_merge(&w(0, 100), &[2, NO_STATE, 1], 0, &mut timers), 3);
    }

    #[test]
    fn continuous_event_time_fires_every_interval_and_at_the_end() {
        let t = ContinuousEventTimeTrigger::of(Duration::from_millis(4));
        let (mut state, mut timers) = (NO_STATE, Vec::new());
        let window = w(0, 10);
        assert!(!t.on_element(1, &window, &mut state, MIN, 0, &mut timers).fire);
        assert_eq!(
            timers,
            vec![(TimeDomain::EventTime, 9), (TimeDomain::EventTime, 4)]
        );
        timers.clear();
        assert!(
            t.on_timer(TimeDomain::EventTime, 4, &window, &mut state, 0, 0, &mut timers)
                .fire
        );
        assert_eq!(timers, vec![(TimeDomain::EventTime, 8)]);
        timers.clear();
        assert!(
            t.on_timer(TimeDomain::EventTime, 8, &window, &mut state, 0, 0, &mut timers)
                .fire
        );
        assert!(timers.is_empty(), "12 is past the window");
        assert!(
            t.on_timer(TimeDomain::EventTime, 9, &window, &mut state, 0, 0, &mut timers)
                .fire
        );
    }

    const MIN: i64 = i64::MIN;
}
