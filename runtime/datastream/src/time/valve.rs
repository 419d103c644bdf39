//! How a task combines the watermarks of its input channels (Flink's `StatusWatermarkValve`): the
//! task's watermark is the minimum over its active channels, it only moves forward, and a task
//! whose channels are all idle is idle itself.

use super::{MIN_WATERMARK, TimeEvent};

#[derive(Debug, Clone, Copy)]
struct Channel {
    watermark: i64,
    idle: bool,
}

/// The input side of one task's watermark: one entry per input channel, across all its inputs.
#[derive(Debug)]
pub(crate) struct WatermarkValve {
    channels: Vec<Channel>,
    /// The last watermark handed to the chain.
    current: i64,
    /// Whether the chain was last told that the task is idle.
    idle: bool,
}

impl WatermarkValve {
    pub(crate) fn new(channels: usize) -> Self {
        WatermarkValve {
            channels: vec![
                Channel {
                    watermark: MIN_WATERMARK,
                    idle: false,
                };
                channels.max(1)
            ],
            current: MIN_WATERMARK,
            idle: false,
        }
    }

    /// The watermark handed to the chain so far.
    pub(crate) fn current(&self) -> i64 {
        self.current
    }

    /// Channel `channel` delivered `event`; what the chain must hear, in order, goes to `out`.
    pub(crate) fn input(&mut self, channel: usize, event: TimeEvent, out: &mut Vec<TimeEvent>) {
        let Some(ch) = self.channels.get_mut(channel) else {
            return;
        };
        match event {
            TimeEvent::Watermark(w) => {
                // A channel that sends a watermark has data again, whatever it said before.
                let was_idle = std::mem::replace(&mut ch.idle, false);
                ch.watermark = ch.watermark.max(w);
                if was_idle {
                    self.activate(out);
                }
                self.advance(out);
            }
            TimeEvent::Idle => {
                ch.idle = true;
                if self.channels.iter().all(|c| c.idle) {
                    // Nothing holds the watermark back any more: it may go to the furthest
                    // channel's before the task goes idle (so what those channels delivered
                    // fires downstream).
                    let max = self
                        .channels
                        .iter()
                        .map(|c| c.watermark)
                        .max()
                        .unwrap_or(MIN_WATERMARK);
                    if max > self.current {
                        self.current = max;
                        out.push(TimeEvent::Watermark(max));
                    }
                    if !self.idle {
                        self.idle = true;
                        out.push(TimeEvent::Idle);
                    }
                } else {
                    self.advance(out);
                }
            }
            TimeEvent::Active => {
                ch.idle = false;
                self.activate(out);
            }
            TimeEvent::ProcessingTime(_) => {}
        }
    }

    fn activate(&mut self, out: &mut Vec<TimeEvent>) {
        if self.idle {
            self.idle = false;
            out.push(TimeEvent::Active);
        }
    }

    fn advance(&mut self, out: &mut Vec<TimeEvent>) {
        let min = self
            .channels
            .iter()
            .filter(|c| !c.idle)
            .map(|c| c.watermark)
            .min();
        if let Some(min) = min
            && min > self.current
        {
            self.current = min;
            out.push(TimeEvent::Watermark(min));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TimeEvent::{Active, Idle, Watermark};

    fn feed(valve: &mut WatermarkValve, channel: usize, event: TimeEvent) -> Vec<TimeEvent> {
        let mut out = Vec::new();
        valve.input(channel, event, &mut out);
        out
    }

    #[test]
    fn the_watermark_is_the_minimum_over_channels_and_only_moves_forward() {
        let mut v = WatermarkValve::new(3);
        assert_eq!(feed(&mut v, 0, Watermark(10)), vec![]);
        assert_eq!(feed(&mut v, 1, Watermark(5)), vec![]);
        assert_eq!(feed(&mut v, 2, Watermark(7)), vec![Watermark(5)]);
        assert_eq!(feed(&mut v, 1, Watermark(20)), vec![Watermark(7)]);
        // A channel going back changes nothing.
        assert_eq!(feed(&mut v, 2, Watermark(1)), vec![]);
        assert_eq!(feed(&mut v, 2, Watermark(30)), vec![Watermark(10)]);
        assert_eq!(v.current(), 10);
    }

    #[test]
    fn idle_channels_do_not_hold_the_watermark_back() {
        let mut v = WatermarkValve::new(2);
        assert_eq!(feed(&mut v, 0, Watermark(100)), vec![]);
        // Channel 1 never sends anything: once idle, channel 0 alone decides.
        assert_eq!(feed(&mut v, 1, Idle), vec![Watermark(100)]);
        assert_eq!(feed(&mut v, 0, Watermark(150)), vec![Watermark(150)]);
        // Channel 1 comes back behind: it is part of the minimum again, which does not go back.
        assert_eq!(feed(&mut v, 1, Active), vec![]);
        assert_eq!(feed(&mut v, 0, Watermark(200)), vec![]);
        assert_eq!(feed(&mut v, 1, Watermark(180)), vec![Watermark(180)]);
    }

    #[test]
    fn a_task_whose_channels_are_all_idle_is_idle_until_one_has_data() {
        let mut v = WatermarkValve::new(2);
        feed(&mut v, 0, Watermark(3));
        feed(&mut v, 1, Watermark(9));
        assert_eq!(v.current(), 3);
        assert_eq!(feed(&mut v, 0, Idle), vec![Watermark(9)]);
        assert_eq!(feed(&mut v, 1, Idle), vec![Idle]);
        assert_eq!(feed(&mut v, 1, Watermark(12)), vec![Active, Watermark(12)]);
    }

    #[test]
    fn end_of_input_fires_everything() {
        let mut v = WatermarkValve::new(2);
        feed(&mut v, 0, Watermark(MAX));
        assert_eq!(feed(&mut v, 1, Watermark(MAX)), vec![Watermark(MAX)]);
    }

    use crate::time::MAX_WATERMARK as MAX;
}
