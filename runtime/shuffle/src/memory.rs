//! Memory accounting: the backpressure test and the heartbeat report what the shuffle holds, so a
//! buffer is counted from the moment it enters a queue until it leaves it, by RAII, on every path
//! (handed on, released, dropped with a failed task).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;

/// Bytes held now and at most since start. Cheap: two atomics.
#[derive(Debug, Default)]
pub(crate) struct MemoryCounter {
    current: AtomicU64,
    peak: AtomicU64,
}

impl MemoryCounter {
    fn add(&self, n: u64) {
        let now = self.current.fetch_add(n, Ordering::AcqRel) + n;
        self.peak.fetch_max(now, Ordering::AcqRel);
    }

    fn sub(&self, n: u64) {
        self.current.fetch_sub(n, Ordering::AcqRel);
    }

    pub(crate) fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }
}

/// A buffer counted in a [`MemoryCounter`] while it lives; on the producer side it also holds its
/// queue slots, given back when the buffer leaves the queue.
#[derive(Debug)]
pub(crate) struct TrackedBuffer {
    data: Bytes,
    len: u64,
    memory: Arc<MemoryCounter>,
    _slots: Option<OwnedSemaphorePermit>,
}

impl TrackedBuffer {
    pub(crate) fn new(data: Bytes, memory: Arc<MemoryCounter>, slots: Option<OwnedSemaphorePermit>) -> Self {
        let len = data.len() as u64;
        memory.add(len);
        TrackedBuffer {
            data,
            len,
            memory,
            _slots: slots,
        }
    }

    /// Hands the bytes on: from here they are no longer the shuffle's.
    pub(crate) fn into_bytes(mut self) -> Bytes {
        std::mem::take(&mut self.data)
    }
}

impl Drop for TrackedBuffer {
    fn drop(&mut self) {
        self.memory.sub(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_until_handed_on_or_dropped() {
        let memory = Arc::new(MemoryCounter::default());
        let a = TrackedBuffer::new(Bytes::from_static(b"abcd"), memory.clone(), None);
        let b = TrackedBuffer::new(Bytes::from_static(b"xy"), memory.clone(), None);
        assert_eq!(memory.current(), 6);
        assert_eq!(a.into_bytes(), Bytes::from_static(b"abcd"));
        assert_eq!(memory.current(), 2);
        drop(b);
        assert_eq!(memory.current(), 0);
        assert_eq!(memory.peak(), 6);
    }
}
