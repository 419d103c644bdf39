//! Window assigners (Flink's `WindowAssigner`s): which windows an element belongs to.

use std::time::Duration;

use super::TimeWindow;
use crate::error::{Error, Result};
use crate::time::MIN_WATERMARK;

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// Which windows an element goes to, and by which clock. Made by [`TumblingEventTimeWindows`],
/// [`SlidingEventTimeWindows`], [`EventTimeSessionWindows`], their processing-time twins and
/// [`GlobalWindows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowAssigner {
    Tumbling {
        size: i64,
        offset: i64,
        event_time: bool,
    },
    Sliding {
        size: i64,
        slide: i64,
        offset: i64,
        event_time: bool,
    },
    /// Merging: an element opens `[t, t + gap)`, and windows that overlap become one.
    Session { gap: i64, event_time: bool },
    /// One window per key for all time; fires only by a trigger such as a count trigger.
    Global,
}

/// Flink's `TimeWindow.getWindowStartWithOffset`.
pub(crate) fn window_start(timestamp: i64, offset: i64, size: i64) -> i64 {
    let remainder = (timestamp - offset) % size;
    if remainder < 0 {
        timestamp - (remainder + size)
    } else {
        timestamp - remainder
    }
}

impl WindowAssigner {
    /// Windows are in event time (else processing time, or none for global windows).
    pub fn is_event_time(&self) -> bool {
        match *self {
            WindowAssigner::Tumbling { event_time, .. }
            | WindowAssigner::Sliding { event_time, .. }
            | WindowAssigner::Session { event_time, .. } => event_time,
            WindowAssigner::Global => false,
        }
    }

    pub(crate) fn is_merging(&self) -> bool {
        matches!(self, WindowAssigner::Session { .. })
    }

    pub(crate) fn check(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::Graph(format!("window assigner: {what}")));
        match *self {
            WindowAssigner::Tumbling { size, offset, .. } if size <= 0 || offset.abs() >= size => {
                bad("expected a size above 0 ms and |offset| < size")
            }
            WindowAssigner::Sliding {
                size, slide, offset, ..
            } if size <= 0 || slide <= 0 || offset.abs() >= slide => {
                bad("expected size and slide above 0 ms and |offset| < slide")
            }
            WindowAssigner::Session { gap, .. } if gap <= 0 => bad("expected a session gap above 0 ms"),
            _ => Ok(()),
        }
    }

    /// The windows of an element with `timestamp` (event time) at processing time `now`, into
    /// `out`; an error when the windows are in event time and the element has no timestamp.
    pub(crate) fn assign(&self, timestamp: i64, now: i64, out: &mut Vec<TimeWindow>) -> Result<()> {
        out.clear();
        let time = if self.is_event_time() {
            if timestamp == MIN_WATERMARK {
                return Err(Error::Graph(
                    "a record reached an event-time window without a timestamp: did you forget \
                     assign_timestamps_and_watermarks(...) before it?"
                        .into(),
                ));
            }
            timestamp
        } else {
            now
        };
        match *self {
            WindowAssigner::Tumbling { size, offset, .. } => {
                let start = window_start(time, offset, size);
                out.push(TimeWindow::new(start, start + size));
            }
            WindowAssigner::Sliding {
                size, slide, offset, ..
            } => {
                let mut start = window_start(time, offset, slide);
                while start > time - size {
                    out.push(TimeWindow::new(start, start + size));
                    start -= slide;
                }
            }
            WindowAssigner::Session { gap, .. } => out.push(TimeWindow::new(time, time.saturating_add(gap))),
            WindowAssigner::Global => out.push(TimeWindow::GLOBAL),
        }
        Ok(())
    }
}

/// Fixed-size, non-overlapping event-time windows.
#[derive(Debug)]
pub struct TumblingEventTimeWindows;

impl TumblingEventTimeWindows {
    pub fn of(size: Duration) -> WindowAssigner {
        Self::of_with_offset(size, Duration::ZERO)
    }
    /// Windows start at `offset` past multiples of `size` (time zones, Flink's second argument).
    pub fn of_with_offset(size: Duration, offset: Duration) -> WindowAssigner {
        WindowAssigner::Tumbling {
            size: millis(size),
            offset: millis(offset),
            event_time: true,
        }
    }
}

/// Fixed-size, non-overlapping processing-time windows.
#[derive(Debug)]
pub struct TumblingProcessingTimeWindows;

impl TumblingProcessingTimeWindows {
    pub fn of(size: Duration) -> WindowAssigner {
        WindowAssigner::Tumbling {
            size: millis(size),
            offset: 0,
            event_time: false,
        }
    }
}

/// Windows of `size` starting every `slide` (an element is in `size / slide` of them).
#[derive(Debug)]
pub struct SlidingEventTimeWindows;

impl SlidingEventTimeWindows {
    pub fn of(size: Duration, slide: Duration) -> WindowAssigner {
        WindowAssigner::Sliding {
            size: millis(size),
            slide: millis(slide),
            offset: 0,
            event_time: true,
        }
    }
}

#[derive(Debug)]
pub struct SlidingProcessingTimeWindows;

impl SlidingProcessingTimeWindows {
    pub fn of(size: Duration, slide: Duration) -> WindowAssigner {
        WindowAssigner::Sliding {
            size: millis(size),
            slide: millis(slide),
            offset: 0,
            event_time: false,
        }
    }
}

/// Sessions: a key's elements closer than `gap` to each other share a window.
#[derive(Debug)]
pub struct EventTimeSessionWindows;

impl EventTimeSessionWindows {
    pub fn with_gap(gap: Duration) -> WindowAssigner {
        WindowAssigner::Session {
            gap: millis(gap),
            event_time: true,
        }
    }
}

#[derive(Debug)]
pub struct ProcessingTimeSessionWindows;

impl ProcessingTimeSessionWindows {
    pub fn with_gap(gap: Duration) -> WindowAssigner {
        WindowAssigner::Session {
            gap: millis(gap),
            event_time: false,
        }
    }
}

/// One window per key (Flink's `GlobalWindows`): give it a trigger, e.g. a count trigger.
#[derive(Debug)]
pub struct GlobalWindows;

impl GlobalWindows {
    pub fn create() -> WindowAssigner {
        WindowAssigner::Global
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(a: WindowAssigner, ts: i64) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        a.assign(ts, 0, &mut out).unwrap();
        out.iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn tumbling_windows_cover_time_once_with_offsets_and_negative_times() {
        let t = TumblingEventTimeWindows::of(Duration::from_millis(10));
        assert_eq!(windows(t, 0), vec![(0, 10)]);
        assert_eq!(windows(t, 9), vec![(0, 10)]);
        assert_eq!(windows(t, 10), vec![(10, 20)]);
        assert_eq!(windows(t, -1), vec![(-10, 0)]);
        let o = TumblingEventTimeWindows::of_with_offset(Duration::from_millis(10), Duration::from_millis(3));
        assert_eq!(windows(o, 2), vec![(-7, 3)]);
        assert_eq!(windows(o, 3), vec![(3, 13)]);
    }

    #[test]
    fn sliding_windows_hold_an_element_size_over_slide_times() {
        let s = SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(5));
        assert_eq!(windows(s, 7), vec![(5, 15), (0, 10)]);
        assert_eq!(windows(s, 5), vec![(5, 15), (0, 10)]);
        assert_eq!(windows(s, 4), vec![(0, 10), (-5, 5)]);
        let uneven = SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(3));
        assert_eq!(windows(uneven, 9), vec![(9, 19), (6, 16), (3, 13), (0, 10)]);
    }

    #[test]
    fn sessions_start_at_the_element_and_event_time_needs_a_timestamp() {
        let s = EventTimeSessionWindows::with_gap(Duration::from_millis(30));
        assert_eq!(windows(s, 100), vec![(100, 130)]);
        let err = s.assign(MIN_WATERMARK, 0, &mut Vec::new()).unwrap_err();
        assert!(
            err.to_string().contains("assign_timestamps_and_watermarks"),
            "{err}"
        );
        // Processing-time windows take the clock.
        let p = TumblingProcessingTimeWindows::of(Duration::from_millis(10));
        let mut out = Vec::new();
        p.assign(MIN_WATERMARK, 1_234, &mut out).unwrap();
        assert_eq!((out[0].start, out[0].end), (1_230, 1_240));
        assert!(TumblingEventTimeWindows::of(Duration::ZERO).check().is_err());
    }
}
