//! The output side of a task: the record writer at the tail of a chain (and of each side
//! output), which serialises records once, routes them by the edge's partitioner (forward,
//! rebalance, rescale, broadcast, hash into key groups) and packs them into shuffle buffers of
//! whole records; in a timed job watermarks go to every subpartition in order with the records.

use std::sync::Arc;

use bytes::Bytes;
use floe_scheduler::Partitioner;

use crate::checkpoint::ChainSnapshot;
use crate::data::{Data, KeyGroupRouter};
use crate::error::{Error, Result};
use crate::operators::{Chunk, Collector, Op, Target};
use crate::time::element;
use crate::time::{TaskTime, TimeEvent};
use crate::types::TaskMetrics;

/// Hash of a record's key (a key selector followed by the stable key hash).
pub(crate) type KeyHasher<T> = Arc<dyn Fn(&T) -> u32 + Send + Sync>;

/// How one output of a vertex routes records (from the JobGraph edge).
#[derive(Clone)]
pub(crate) struct OutputRoute {
    pub partitioner: Partitioner,
    /// `KeyHasher<T>` of the producing stream, for `Partitioner::Hash`.
    pub key: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Key groups of the consumer.
    pub max_parallelism: u32,
    /// Which of the vertex's outputs (partition writers) the route feeds.
    pub index: usize,
}

/// What every record writer of a task is built with.
#[derive(Clone)]
pub(crate) struct WriterSetup {
    /// Per vertex output (partition writer): its subpartitions.
    pub subpartitions: Vec<u32>,
    pub subtask: u32,
    pub parallelism: u32,
    pub buffer_size: usize,
    pub flush_each_record: bool,
    pub metrics: Arc<TaskMetrics>,
    pub time: Option<Arc<TaskTime>>,
}

enum Router<T> {
    /// Always this subpartition (forward).
    Fixed(u32),
    /// Round robin over `start..start + len` (rebalance: all; rescale: the pointwise targets).
    RoundRobin {
        next: u32,
        start: u32,
        len: u32,
    },
    Broadcast(u32),
    Hash {
        key: KeyHasher<T>,
        groups: KeyGroupRouter,
    },
}

struct OutputState<T> {
    index: usize,
    router: Router<T>,
    buffers: Vec<Vec<u8>>,
}

/// The tail of a chain that feeds the vertex's outputs: serialises each record once and appends
/// it to the buffers of the subpartitions it is routed to; a buffer holds whole records and is
/// handed on when the next record would not fit.
pub(crate) struct RecordWriter<T> {
    outputs: Vec<OutputState<T>>,
    scratch: Vec<u8>,
    pending: Vec<Chunk>,
    buffer_size: usize,
    flush_each_record: bool,
    count: u64,
    metrics: Arc<TaskMetrics>,
    /// A timed job's writer: each record goes out as a stream element with its timestamp, and
    /// watermarks and status go to every subpartition in order with the records.
    time: Option<Arc<TaskTime>>,
}

/// Consumers `[start, end)` a producer subtask feeds on a pointwise edge (Flink's
/// `EdgeManagerBuildUtil.connectPointwise`).
pub(crate) fn pointwise_targets(producer: u32, producers: u32, consumers: u32) -> (u32, u32) {
    let (p, sp, tp) = (u64::from(producer), u64::from(producers), u64::from(consumers));
    if sp == tp {
        (producer, producer + 1)
    } else if sp > tp {
        let i = (0..tp)
            .find(|&i| i * sp / tp <= p && p < (i + 1) * sp / tp)
            .unwrap_or(0);
        (i as u32, i as u32 + 1)
    } else {
        ((p * tp).div_ceil(sp) as u32, ((p + 1) * tp).div_ceil(sp) as u32)
    }
}

impl<T: Data> RecordWriter<T> {
    pub(crate) fn new(routes: &[OutputRoute], setup: &WriterSetup) -> Result<Self> {
        let (subtask, parallelism) = (setup.subtask, setup.parallelism);
        let mut outputs = Vec::with_capacity(routes.len());
        for route in routes {
            let index = route.index;
            let n = setup
                .subpartitions
                .get(index)
                .copied()
                .ok_or_else(|| Error::Graph(format!("no vertex output {index}")))?
                .max(1);
            let router = match route.partitioner {
                Partitioner::Forward | Partitioner::Rescale => {
                    let (start, end) = pointwise_targets(subtask, parallelism, n);
                    let (start, end) = if end > n || start >= end {
                        (subtask % n, subtask % n + 1)
                    } else {
                        (start, end)
                    };
                    if route.partitioner == Partitioner::Forward || end - start == 1 {
                        Router::Fixed(start)
                    } else {
                        Router::RoundRobin {
                            next: 0,
                            start,
                            len: end - start,
                        }
                    }
                }
                Partitioner::Rebalance => Router::RoundRobin {
                    next: subtask % n,
                    start: 0,
                    len: n,
                },
                Partitioner::Broadcast => Router::Broadcast(n),
                Partitioner::Hash => {
                    let key = route
                        .key
                        .clone()
                        .and_then(|k| k.downcast::<KeyHasher<T>>().ok())
                        .ok_or_else(|| {
                            Error::Graph("hash edge without a key selector of this type".into())
                        })?;
                    Router::Hash {
                        key: (*key).clone(),
                        groups: KeyGroupRouter::new(route.max_parallelism.max(n), n),
                    }
                }
            };
            outputs.push(OutputState {
                index,
                router,
                buffers: (0..n).map(|_| Vec::new()).collect(),
            });
        }
        Ok(RecordWriter {
            outputs,
            scratch: Vec::new(),
            pending: Vec::new(),
            buffer_size: setup.buffer_size.max(1),
            flush_each_record: setup.flush_each_record,
            count: 0,
            metrics: setup.metrics.clone(),
            time: setup.time.clone(),
        })
    }
}

/// Bytes a shuffle buffer is allocated with beyond its size, for the one record that overflows it.
const RECORD_OVERFLOW_ROOM: usize = 1024;

/// Writes one record into a subpartition's buffer with `write` and ships full buffers to `pending`.
/// A record that overflows a non-empty buffer moves to the start of the next one, so every shipped
/// buffer holds whole records and at most `size` bytes unless one record alone is larger.
#[allow(clippy::too_many_arguments)]
fn write_record(
    buffers: &mut [Vec<u8>],
    index: usize,
    subpartition: u32,
    size: usize,
    flush_each_record: bool,
    pending: &mut Vec<Chunk>,
    write: impl FnOnce(&mut Vec<u8>),
) {
    let mut ship = |bytes: Vec<u8>| {
        pending.push(Chunk {
            target: Target::Output(index),
            subpartition,
            bytes: Bytes::from(bytes),
        })
    };
    let buf = &mut buffers[subpartition as usize];
    if buf.capacity() == 0 {
        // Room for the record that overflows a full buffer before it moves to the next one:
        // without it nearly every buffer was reallocated (and copied) to twice its size.
        buf.reserve(size + RECORD_OVERFLOW_ROOM);
    }
    let start = buf.len();
    write(buf);
    if start > 0 && buf.len() > size {
        let mut next = Vec::with_capacity(size.max(buf.len() - start));
        next.extend_from_slice(&buf[start..]);
        buf.truncate(start);
        ship(std::mem::replace(buf, next));
    }
    if flush_each_record || buf.len() >= size {
        ship(std::mem::take(buf));
    }
}

impl<T: Data> RecordWriter<T> {
    /// The one subpartition a record goes to, for every router but broadcast.
    fn route(router: &mut Router<T>, record: &T) -> Option<u32> {
        match router {
            Router::Fixed(sp) => Some(*sp),
            Router::RoundRobin { next, start, len } => {
                let sp = *start + *next;
                *next = (*next + 1) % *len;
                Some(sp)
            }
            Router::Broadcast(_) => None,
            Router::Hash { key, groups } => Some(groups.subtask(key(record))),
        }
    }
}

impl<T: Data> Collector<T> for RecordWriter<T> {
    fn collect(&mut self, record: T) {
        self.write(&record)
    }
}

impl<T: Data> RecordWriter<T> {
    fn write(&mut self, record: &T) {
        self.count += 1;
        let (size, each) = (self.buffer_size, self.flush_each_record);
        let timestamp = self.time.as_ref().map(|t| t.timestamp());
        // The common case, one output and one target: no intermediate copy of the record.
        if let [out] = self.outputs.as_mut_slice()
            && let Some(sp) = Self::route(&mut out.router, record)
        {
            let encode = |b: &mut Vec<u8>| {
                if let Some(ts) = timestamp {
                    element::write_record_header(b, ts);
                }
                record.encode(b)
            };
            write_record(
                &mut out.buffers,
                out.index,
                sp,
                size,
                each,
                &mut self.pending,
                encode,
            );
            return;
        }
        self.scratch.clear();
        if let Some(ts) = timestamp {
            element::write_record_header(&mut self.scratch, ts);
        }
        record.encode(&mut self.scratch);
        for out in &mut self.outputs {
            let targets = match Self::route(&mut out.router, record) {
                Some(sp) => sp..sp + 1,
                None => match out.router {
                    Router::Broadcast(n) => 0..n,
                    _ => 0..0,
                },
            };
            let encoded = self.scratch.as_slice();
            for sp in targets {
                let copy = |b: &mut Vec<u8>| b.extend_from_slice(encoded);
                write_record(
                    &mut out.buffers,
                    out.index,
                    sp,
                    size,
                    each,
                    &mut self.pending,
                    copy,
                );
            }
        }
    }
}

impl<T: Data> Op<T> for RecordWriter<T> {
    fn takes_reused(&self) -> bool {
        true
    }

    fn collect_reused(&mut self, record: &mut T) {
        self.write(record)
    }

    fn on_time(&mut self, event: TimeEvent) {
        if self.time.is_none() || matches!(event, TimeEvent::ProcessingTime(_)) {
            return;
        }
        let (size, each) = (self.buffer_size, self.flush_each_record);
        for out in &mut self.outputs {
            for sp in 0..out.buffers.len() as u32 {
                let write = |b: &mut Vec<u8>| element::write_event(b, event);
                write_record(
                    &mut out.buffers,
                    out.index,
                    sp,
                    size,
                    each,
                    &mut self.pending,
                    write,
                );
            }
        }
    }

    fn finish(&mut self) {}

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        if flush {
            for o in &mut self.outputs {
                for (sp, buf) in o.buffers.iter_mut().enumerate() {
                    if !buf.is_empty() {
                        self.pending.push(Chunk {
                            target: Target::Output(o.index),
                            subpartition: sp as u32,
                            bytes: Bytes::from(std::mem::take(buf)),
                        });
                    }
                }
            }
        }
        self.metrics
            .add_bytes_out(self.pending.iter().map(|c| c.bytes.len()).sum());
        out.append(&mut self.pending);
        self.metrics.add_out(std::mem::take(&mut self.count));
    }

    fn snapshot(&mut self, _checkpoint: u64, _out: &mut ChainSnapshot) -> Result<()> {
        Ok(())
    }

    fn failure(&mut self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn pointwise_targets_match_the_scheduler() {
        assert_eq!(pointwise_targets(2, 3, 3), (2, 3));
        // 5 producers, 2 consumers: consumer 0 reads producers 0..2, consumer 1 reads 2..5.
        let got: Vec<_> = (0..5).map(|p| pointwise_targets(p, 5, 2).0).collect();
        assert_eq!(got, vec![0, 0, 1, 1, 1]);
        // 2 producers, 5 consumers: producer 0 feeds 0..3, producer 1 feeds 3..5.
        assert_eq!(pointwise_targets(0, 2, 5), (0, 3));
        assert_eq!(pointwise_targets(1, 2, 5), (3, 5));
    }

    #[test]
    fn buffers_hold_whole_records_and_respect_the_size() {
        let metrics = Arc::new(TaskMetrics::default());
        let route = OutputRoute {
            partitioner: Partitioner::Rebalance,
            key: None,
            max_parallelism: 128,
            index: 0,
        };
        let setup = WriterSetup {
            subpartitions: vec![2],
            subtask: 0,
            parallelism: 1,
            buffer_size: 16,
            flush_each_record: false,
            metrics: metrics.clone(),
            time: None,
        };
        let mut w = RecordWriter::<String>::new(&[route], &setup).expect("writer");
        for i in 0..20 {
            w.collect(format!("record-{i}"));
        }
        let mut out = Vec::new();
        w.drain(true, &mut out);
        let mut decoded = Vec::new();
        for c in &out {
            assert!(c.bytes.len() <= 16, "buffer of {} bytes", c.bytes.len());
            let mut input = &c.bytes[..];
            while !input.is_empty() {
                decoded.push((c.subpartition, String::decode(&mut input).expect("whole records")));
            }
        }
        assert_eq!(decoded.len(), 20);
        assert_eq!(decoded.iter().filter(|d| d.0 == 0).count(), 10, "round robin");
        assert_eq!(metrics.records_out.load(Ordering::Relaxed), 20);
    }
}
