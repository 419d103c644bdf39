//! Side outputs (Flink's `OutputTag` and `ctx.output(tag, value)`): a process function, or a
//! window for its late elements, emits records of another type next to its main output, and
//! `DataStream::get_side_output(&tag)` makes them a stream.
//!
//! A side output's consumers are always fed through an exchange: the operator gets one record
//! writer per tag, for the vertex outputs that read that tag, and the writer hears the operator's
//! watermarks, end of input and flushes as the main output does.

use std::any::Any;
use std::marker::PhantomData;

use super::{BoxOp, Chunk};
use crate::data::Data;
use crate::time::TimeEvent;

/// Names a side output and the type of its records (Flink's `OutputTag`).
pub struct OutputTag<T> {
    id: String,
    _t: PhantomData<fn() -> T>,
}

impl<T> OutputTag<T> {
    /// A tag; ids are unique per operator (two tags of one id and different types are an error
    /// when a record is emitted).
    pub fn new(id: &str) -> Self {
        OutputTag {
            id: id.to_string(),
            _t: PhantomData,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag::new(&self.id)
    }
}

impl<T> std::fmt::Debug for OutputTag<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutputTag({:?}, {})", self.id, std::any::type_name::<T>())
    }
}

/// One tag's writer, its record type erased.
pub(crate) trait SideOutput: Send {
    fn on_time(&mut self, event: TimeEvent);
    fn finish(&mut self);
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>);
    /// The writer as `BoxOp<T>`, to downcast to the tag's type.
    fn as_any(&mut self) -> &mut dyn Any;
}

pub(crate) struct SideWriter<T>(pub BoxOp<T>);

impl<T: Data> SideOutput for SideWriter<T> {
    fn on_time(&mut self, event: TimeEvent) {
        self.0.on_time(event)
    }
    fn finish(&mut self) {
        self.0.finish()
    }
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.0.drain(flush, out)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        &mut self.0
    }
}

/// An operator's side outputs that something reads, by tag id.
#[derive(Default)]
pub(crate) struct SideOutputs(pub Vec<(String, Box<dyn SideOutput>)>);

impl std::fmt::Debug for SideOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(id, _)| id)).finish()
    }
}

impl SideOutputs {
    /// Emits `value` to `tag`'s consumers; a tag nothing reads drops it (as Flink). An error when
    /// the tag's consumers read another type.
    pub fn emit<T: Data>(&mut self, tag: &OutputTag<T>, value: T) -> Result<(), String> {
        let Some((_, writer)) = self.0.iter_mut().find(|(id, _)| *id == tag.id) else {
            return Ok(());
        };
        match writer.as_any().downcast_mut::<BoxOp<T>>() {
            Some(op) => {
                op.collect(value);
                Ok(())
            }
            None => Err(format!(
                "side output {:?}: emitted as {}, but its stream was taken with another type",
                tag.id,
                std::any::type_name::<T>()
            )),
        }
    }

    pub fn on_time(&mut self, event: TimeEvent) {
        self.0.iter_mut().for_each(|(_, w)| w.on_time(event));
    }

    pub fn finish(&mut self) {
        self.0.iter_mut().for_each(|(_, w)| w.finish());
    }

    pub fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.0.iter_mut().for_each(|(_, w)| w.drain(flush, out));
    }
}
