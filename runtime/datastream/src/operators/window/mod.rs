//! Windows (seed 001, Flink's `WindowOperator`): an assigner puts each element of a keyed stream
//! into windows, a trigger decides when a window's function is evaluated, an evictor may drop
//! elements first, and allowed lateness keeps a window's state past its end for late firings.
//!
//! The operator is a [`KeyedProcessFunction`] ([`WindowOperator`]) on the keyed process operator:
//! a key's windows (each with its accumulator and its trigger's state) are that key's keyed state,
//! and triggers and cleanup use the key's timers, so windows checkpoint, restore and rescale by key
//! group with everything else. A timer names only its key and time; when it fires, each of the
//! key's windows asks its trigger whether the time is one of its own (a window's end, a
//! continuous trigger's next firing), and a window whose cleanup time it is goes.

use std::marker::PhantomData;

use super::{Collector, KeyedContext, KeyedProcessFunction, OutputTag};
use crate::data::Data;
use crate::error::Result;
use crate::time::MIN_WATERMARK;
use crate::time::timers::TimeDomain;

mod assigners;
mod functions;
mod triggers;

pub use assigners::{
    EventTimeSessionWindows, GlobalWindows, ProcessingTimeSessionWindows, SlidingEventTimeWindows,
    SlidingProcessingTimeWindows, TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowAssigner,
};
pub(crate) use functions::{AggregateFn, ContentsFn, Direct, ReduceFn, ThenProcess, WindowFn, open_in};
pub use functions::{
    AggregateFunction, CountEvictor, Evictor, ProcessWindowFunction, TimeEvictor, WindowContext,
};
use triggers::NO_STATE;
pub use triggers::{
    ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountTrigger, EventTimeTrigger,
    NeverTrigger, ProcessingTimeTrigger, PurgingTrigger, Trigger, TriggerContext, TriggerResult,
    WindowTrigger,
};

/// A window of time `[start, end)` (Flink's `TimeWindow`); global windows span all time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimeWindow {
    pub start: i64,
    pub end: i64,
}

impl TimeWindow {
    pub(crate) const GLOBAL: TimeWindow = TimeWindow {
        start: i64::MIN,
        end: i64::MAX,
    };

    pub fn new(start: i64, end: i64) -> Self {
        TimeWindow { start, end }
    }

    /// The last time in the window: what its results are timestamped with (`end - 1`; a global
    /// window's is the end of time).
    pub fn max_timestamp(&self) -> i64 {
        if self.end == i64::MAX {
            i64::MAX
        } else {
            self.end - 1
        }
    }

    /// Whether two windows overlap or touch (Flink's `intersects`, for merging sessions).
    fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// One window of a key: its accumulator (`None` after a purge) and its trigger's state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WindowEntry<A> {
    window: TimeWindow,
    acc: Option<A>,
    trigger: i64,
}

/// A key's windows: its keyed state in the window operator.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Windows<A>(Vec<WindowEntry<A>>);

impl<A> Default for Windows<A> {
    fn default() -> Self {
        Windows(Vec::new())
    }
}

impl<A: Data> Data for Windows<A> {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.0.len() as u64).encode(out);
        for e in &self.0 {
            e.window.start.encode(out);
            e.window.end.encode(out);
            e.trigger.encode(out);
            match &e.acc {
                Some(acc) => {
                    true.encode(out);
                    acc.encode(out);
                }
                None => false.encode(out),
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Result<Self> {
        let n = u64::decode(input)?;
        let mut entries = Vec::with_capacity(n.min(1024) as usize);
        for _ in 0..n {
            let window = TimeWindow::new(i64::decode(input)?, i64::decode(input)?);
            let trigger = i64::decode(input)?;
            let acc = if bool::decode(input)? {
                Some(A::decode(input)?)
            } else {
                None
            };
            entries.push(WindowEntry { window, acc, trigger });
        }
        Ok(Windows(entries))
    }

    fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("{} windows", self.0.len()).as_bytes());
    }

    /// A sequence of entries; the accumulator's flag byte is an `Option`'s tag.
    fn schema() -> crate::data::Schema {
        use crate::data::{Field, Schema};
        Schema::Seq(Box::new(Schema::Struct {
            name: "WindowEntry".into(),
            fields: vec![
                Field::new("start", Schema::I64, None),
                Field::new("end", Schema::I64, None),
                Field::new("trigger", Schema::I64, None),
                Field::new("acc", Option::<A>::schema(), None),
            ],
        }))
    }
}

/// The context of a key in the window operator: its windows are its state.
pub(crate) type WindowsContext<'a, K, A> = KeyedContext<'a, K, Windows<A>>;

/// The window operator's function: see the module documentation.
pub(crate) struct WindowOperator<K, T, O, W> {
    pub assigner: WindowAssigner,
    pub trigger: Trigger,
    /// Ms a window's state is kept past its end for late elements (event time only).
    pub allowed_lateness: i64,
    pub f: W,
    /// Flink's `sideOutputLateData`: where elements too late for all their windows go instead of
    /// being dropped.
    pub late: Option<OutputTag<T>>,
    pub _types: PhantomData<fn(K, T) -> O>,
}

impl<K, T, O, W> WindowOperator<K, T, O, W>
where
    K: Data,
    T: Data,
    O: Data,
    W: WindowFn<K, T, O>,
{
    /// When a window's state goes: its end plus the allowed lateness (event time), its end
    /// (processing time), never (global windows).
    fn cleanup_time(&self, window: &TimeWindow) -> Option<(TimeDomain, i64)> {
        match self.assigner {
            WindowAssigner::Global => None,
            a if a.is_event_time() => Some((
                TimeDomain::EventTime,
                window.max_timestamp().saturating_add(self.allowed_lateness),
            )),
            _ => Some((TimeDomain::ProcessingTime, window.max_timestamp())),
        }
    }

    fn is_late(&self, window: &TimeWindow, watermark: i64) -> bool {
        self.assigner.is_event_time() && self.cleanup_time(window).is_some_and(|(_, t)| t <= watermark)
    }

    fn register(ctx: &mut WindowsContext<'_, K, W::Acc>, timers: &mut Vec<(TimeDomain, i64)>) {
        for (domain, t) in timers.drain(..) {
            match domain {
                TimeDomain::EventTime => ctx.register_event_time_timer(t),
                TimeDomain::ProcessingTime => ctx.register_processing_time_timer(t),
            }
        }
    }

    /// Evaluates the window at `index` (if it holds anything), its results timestamped with the
    /// window's last time.
    fn emit(&self, ctx: &mut WindowsContext<'_, K, W::Acc>, index: usize, out: &mut dyn Collector<O>) {
        let window = ctx.state().0[index].window;
        let Some(mut acc) = ctx.state().0[index].acc.take() else {
            return;
        };
        let wctx = WindowContext {
            window,
            current_watermark: ctx.current_watermark(),
            current_processing_time: ctx.current_processing_time(),
        };
        ctx.set_output_timestamp(window.max_timestamp());
        let key = ctx.key().clone();
        self.f.emit(ctx, &key, &wctx, &mut acc, out);
        ctx.state().0[index].acc = Some(acc);
    }

    /// Drops the accumulator of the window at `index` (a purge), and what it names.
    fn purge(&self, ctx: &mut WindowsContext<'_, K, W::Acc>, index: usize) {
        if let Some(acc) = ctx.state().0[index].acc.take() {
            self.f.purge(ctx, acc);
        }
    }

    /// Windows of the key that overlap `window` merge with it; the merged window's index.
    fn merge_into(&self, ctx: &mut WindowsContext<'_, K, W::Acc>, window: TimeWindow) -> usize {
        let watermark = ctx.current_watermark();
        let (overlapping, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut ctx.state().0)
            .into_iter()
            .partition(|e| e.window.intersects(&window));
        ctx.state().0 = rest;
        if overlapping.is_empty() {
            let entries = &mut ctx.state().0;
            entries.push(WindowEntry {
                window,
                acc: None,
                trigger: NO_STATE,
            });
            return entries.len() - 1;
        }
        let merged_window = overlapping.iter().fold(window, |w, e| w.cover(&e.window));
        let states: Vec<i64> = overlapping.iter().map(|e| e.trigger).collect();
        let mut accs: Vec<W::Acc> = overlapping.into_iter().filter_map(|e| e.acc).collect();
        let acc = match accs.len() {
            0 => None,
            1 => accs.pop(),
            _ => Some(self.f.merge(ctx, accs)),
        };
        let mut timers = Vec::new();
        let trigger = self
            .trigger
            .on_merge(&merged_window, &states, watermark, &mut timers);
        let entries = &mut ctx.state().0;
        entries.push(WindowEntry {
            window: merged_window,
            acc,
            trigger,
        });
        let index = entries.len() - 1;
        Self::register(ctx, &mut timers);
        index
    }
}

impl<K, T, O, W> KeyedProcessFunction<K, T, O> for WindowOperator<K, T, O, W>
where
    K: Data,
    T: Data,
    O: Data,
    W: WindowFn<K, T, O>,
{
    type State = Windows<W::Acc>;

    fn open(&mut self, ctx: &crate::RuntimeContext) -> crate::FunctionResult {
        self.f.open(ctx)
    }

    fn close(&mut self) -> crate::FunctionResult {
        self.f.close()
    }

    fn process_element(
        &self,
        value: T,
        ctx: &mut KeyedContext<'_, K, Self::State>,
        out: &mut dyn Collector<O>,
    ) {
        let ts = ctx.timestamp().unwrap_or(MIN_WATERMARK);
        let (watermark, now) = (ctx.current_watermark(), ctx.current_processing_time());
        let mut assigned = Vec::new();
        if let Err(e) = self.assigner.assign(ts, now, &mut assigned) {
            ctx.fail(e.to_string());
            return;
        }
        let mut timers = Vec::new();
        let mut value = Some(value);
        let mut taken = false;
        let n_assigned = assigned.len();
        let last = n_assigned.saturating_sub(1);
        for (n, window) in assigned.into_iter().enumerate() {
            let index = if self.assigner.is_merging() {
                self.merge_into(ctx, window)
            } else {
                match ctx.state().0.iter().position(|e| e.window == window) {
                    Some(i) => i,
                    None => {
                        ctx.state().0.push(WindowEntry {
                            window,
                            acc: None,
                            trigger: NO_STATE,
                        });
                        ctx.state().0.len() - 1
                    }
                }
            };
            let window = ctx.state().0[index].window;
            if self.is_late(&window, watermark) {
                // Dropped: too late for every window it belongs to (Flink's
                // `numLateRecordsDropped`); a window made for it alone goes again.
                if ctx.state().0[index].acc.is_none() {
                    ctx.state().0.remove(index);
                }
                continue;
            }
            let element = if n == last { value.take() } else { value.clone() };
            let Some(element) = element else { continue };
            taken = true;
            let acc = ctx.state().0[index].acc.take();
            let acc = self.f.add(ctx, acc, ts, element);
            let entry = &mut ctx.state().0[index];
            entry.acc = Some(acc);
            let result =
                self.trigger
                    .on_element(ts, &window, &mut entry.trigger, watermark, now, &mut timers);
            if let Some(cleanup) = self.cleanup_time(&window) {
                timers.push(cleanup);
            }
            Self::register(ctx, &mut timers);
            if result.fire {
                self.emit(ctx, index, out);
            }
            if result.purge {
                self.purge(ctx, index);
            }
        }
        if !taken && n_assigned > 0 {
            match (&self.late, value) {
                (Some(tag), Some(value)) => ctx.output(tag, value),
                _ => ctx.late_record_dropped(),
            }
        }
        if ctx.state().0.is_empty() {
            ctx.clear_state();
        }
    }

    fn on_timer(&self, time: i64, ctx: &mut KeyedContext<'_, K, Self::State>, out: &mut dyn Collector<O>) {
        let Some(domain) = ctx.time_domain() else { return };
        let (watermark, now) = (ctx.current_watermark(), ctx.current_processing_time());
        let mut timers = Vec::new();
        let mut index = 0;
        while index < ctx.state().0.len() {
            let entry = &mut ctx.state().0[index];
            let window = entry.window;
            let result = self.trigger.on_timer(
                domain,
                time,
                &window,
                &mut entry.trigger,
                watermark,
                now,
                &mut timers,
            );
            Self::register(ctx, &mut timers);
            if result.fire {
                self.emit(ctx, index, out);
            }
            if result.purge {
                self.purge(ctx, index);
            }
            if self.cleanup_time(&window) == Some((domain, time)) {
                self.purge(ctx, index);
                ctx.state().0.remove(index);
            } else {
                index += 1;
            }
        }
        if ctx.state().0.is_empty() {
            ctx.clear_state();
        }
    }
}

#[cfg(test)]
mod tests;
