//! [`UnionInputGate`]: the inputs of a task with more than one (a union, a two-input operator) read
//! as one gate (Flink's `UnionInputGate`), with barriers aligned across all of them.
//!
//! Each input gate aligns its own channels already (it yields a barrier once every channel of it
//! delivered it). Across gates the alignment is the same rule one level up: a gate that yielded
//! barrier `n` is not read again until every other gate still open yielded `n` too. Not reading a
//! gate is all the holding back it needs: its channels stop getting credit, so what they send after
//! the barrier waits upstream. Channels are numbered across the gates in order (gate 0's first),
//! so a task can tell its inputs apart by channel. A gate's cancel-checkpoint marker ends the
//! alignment of its checkpoint across the gates as well.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;

use crate::{GateItem, InputGate, Result, checkpoint_of_barrier};

/// The gates of a task's inputs read as one, in JobGraph input order.
pub struct UnionInputGate {
    gates: Vec<Box<dyn InputGate>>,
    /// The first channel number of each gate.
    offsets: Vec<usize>,
    /// The checkpoint being aligned and which gates yielded its barrier.
    checkpoint: Option<u64>,
    /// The last checkpoint aligned or cancelled: a barrier not newer than it is a straggler.
    completed: Option<u64>,
    blocked: Vec<bool>,
    ended: Vec<bool>,
    /// The gate polled first next time, so no gate starves the others.
    next: usize,
}

impl std::fmt::Debug for UnionInputGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnionInputGate")
            .field("gates", &self.gates.len())
            .field("offsets", &self.offsets)
            .field("checkpoint", &self.checkpoint)
            .field("blocked", &self.blocked)
            .field("ended", &self.ended)
            .finish()
    }
}

impl UnionInputGate {
    /// Every gate's `next` must be cancel-safe (the remote gate's is): a gate that has nothing yet
    /// is polled with a fresh call each time the union is polled.
    pub fn new(gates: Vec<Box<dyn InputGate>>) -> Self {
        let mut offsets = Vec::with_capacity(gates.len());
        let mut total = 0;
        for g in &gates {
            offsets.push(total);
            total += g.num_channels();
        }
        let n = gates.len();
        UnionInputGate {
            gates,
            offsets,
            checkpoint: None,
            completed: None,
            blocked: vec![false; n],
            ended: vec![false; n],
            next: 0,
        }
    }

    /// The channel numbers of each gate, in order.
    pub fn channel_ranges(&self) -> Vec<std::ops::Range<usize>> {
        self.gates
            .iter()
            .zip(&self.offsets)
            .map(|(g, &o)| o..o + g.num_channels())
            .collect()
    }

    /// Gate `index` yielded barrier `wire`; `Some(wire)` when every gate still open has.
    fn barrier(&mut self, index: usize, wire: u64) -> Option<u64> {
        let id = checkpoint_of_barrier(wire);
        if self.completed.is_some_and(|c| id <= c) {
            return None;
        }
        match self.checkpoint.map(checkpoint_of_barrier) {
            // A straggler of a checkpoint abandoned for a newer one.
            Some(current) if id < current => return None,
            Some(current) if id > current => {
                // The older alignment was abandoned upstream: the gates held at it flow again and
                // reach their own newer barrier after the data before it.
                self.blocked.iter_mut().for_each(|b| *b = false);
                self.checkpoint = Some(wire);
            }
            Some(_) => {}
            None => self.checkpoint = Some(wire),
        }
        self.blocked[index] = true;
        self.complete()
    }

    /// A gate yielded the cancel-checkpoint marker of `id`; `Some(id)` the first time (the task
    /// sends it on), when it ends the alignment of that checkpoint or comes before any barrier
    /// of it; `None` for a checkpoint aligned or cancelled already, or older than the one being
    /// aligned.
    fn cancel(&mut self, id: u64) -> Option<u64> {
        let aligning = self.checkpoint.map(checkpoint_of_barrier);
        if self.completed.is_some_and(|c| id <= c) || aligning.is_some_and(|current| current > id) {
            return None;
        }
        self.completed = Some(id);
        if aligning.is_some() {
            self.checkpoint = None;
            self.blocked.iter_mut().for_each(|b| *b = false);
        }
        Some(id)
    }

    fn complete(&mut self) -> Option<u64> {
        let id = self.checkpoint?;
        if !self.blocked.iter().zip(&self.ended).all(|(b, e)| *b || *e) {
            return None;
        }
        self.checkpoint = None;
        self.completed = Some(checkpoint_of_barrier(id));
        self.blocked.iter_mut().for_each(|b| *b = false);
        Some(id)
    }

    /// The first gate (round robin from `next`) with something to say.
    fn poll_gates(&mut self, cx: &mut Context<'_>) -> Poll<(usize, Result<Option<GateItem>>)> {
        let n = self.gates.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.blocked[i] || self.ended[i] {
                continue;
            }
            let mut next = self.gates[i].next();
            if let Poll::Ready(item) = Pin::new(&mut next).poll(cx) {
                self.next = (i + 1) % n;
                return Poll::Ready((i, item));
            }
        }
        Poll::Pending
    }
}

#[async_trait]
impl InputGate for UnionInputGate {
    fn num_channels(&self) -> usize {
        self.gates.iter().map(|g| g.num_channels()).sum()
    }

    async fn next(&mut self) -> Result<Option<GateItem>> {
        loop {
            if self.ended.iter().all(|e| *e) {
                return Ok(None);
            }
            let (index, item) = std::future::poll_fn(|cx| self.poll_gates(cx)).await;
            match item? {
                Some(GateItem::Buffer { channel, data }) => {
                    return Ok(Some(GateItem::Buffer {
                        channel: self.offsets[index] + channel,
                        data,
                    }));
                }
                Some(GateItem::Barrier(id)) => {
                    if let Some(id) = self.barrier(index, id) {
                        return Ok(Some(GateItem::Barrier(id)));
                    }
                }
                Some(GateItem::Cancel(id)) => {
                    if let Some(id) = self.cancel(id) {
                        return Ok(Some(GateItem::Cancel(id)));
                    }
                }
                None => {
                    self.ended[index] = true;
                    if let Some(id) = self.complete() {
                        return Ok(Some(GateItem::Barrier(id)));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    /// What a scripted gate yields next, extended by the test while the union runs.
    type Script = Arc<Mutex<VecDeque<Option<GateItem>>>>;

    /// A gate over a script.
    struct Scripted {
        items: Script,
        channels: usize,
    }

    #[async_trait]
    impl InputGate for Scripted {
        async fn next(&mut self) -> Result<Option<GateItem>> {
            loop {
                if let Some(item) = self.items.lock().expect("lock").pop_front() {
                    return Ok(item);
                }
                tokio::task::yield_now().await;
            }
        }
        fn num_channels(&self) -> usize {
            self.channels
        }
    }

    fn buffer(channel: usize, text: &str) -> Option<GateItem> {
        Some(GateItem::Buffer {
            channel,
            data: Bytes::from(text.to_owned()),
        })
    }

    fn gate(channels: usize) -> (Script, Box<dyn InputGate>) {
        let items = Arc::new(Mutex::new(VecDeque::new()));
        (
            items.clone(),
            Box::new(Scripted { items, channels }) as Box<dyn InputGate>,
        )
    }

    async fn next(union: &mut UnionInputGate) -> Option<GateItem> {
        tokio::time::timeout(std::time::Duration::from_secs(5), union.next())
            .await
            .expect("the union yields")
            .expect("no error")
    }

    #[tokio::test]
    async fn a_barrier_holds_its_gate_until_every_open_gate_yielded_it() {
        let ((a, ga), (b, gb)) = (gate(2), gate(3));
        let mut union = UnionInputGate::new(vec![ga, gb]);
        assert_eq!(union.num_channels(), 5);
        assert_eq!(union.channel_ranges(), vec![0..2, 2..5]);
        // Gate a: a buffer, the barrier, then data that belongs after the checkpoint.
        a.lock().unwrap().extend([
            buffer(1, "a-before"),
            Some(GateItem::Barrier(7)),
            buffer(0, "a-after"),
        ]);
        assert_eq!(next(&mut union).await, buffer(1, "a-before"));
        // Gate b has data before its barrier: it comes through, a's later data does not.
        b.lock().unwrap().extend([buffer(2, "b-before")]);
        assert_eq!(
            next(&mut union).await,
            buffer(4, "b-before"),
            "channels of b come after a's"
        );
        b.lock()
            .unwrap()
            .extend([Some(GateItem::Barrier(7)), buffer(0, "b-after"), None]);
        assert_eq!(next(&mut union).await, Some(GateItem::Barrier(7)));
        let mut rest = vec![next(&mut union).await, next(&mut union).await];
        rest.sort_by_key(|i| format!("{i:?}"));
        assert_eq!(rest, vec![buffer(0, "a-after"), buffer(2, "b-after")]);
        // b ended; a newer barrier on a alone completes the alignment.
        a.lock().unwrap().extend([Some(GateItem::Barrier(8)), None]);
        assert_eq!(next(&mut union).await, Some(GateItem::Barrier(8)));
        assert_eq!(next(&mut union).await, None);
    }

    #[tokio::test]
    async fn a_newer_barrier_abandons_an_older_alignment_and_a_straggler_is_ignored() {
        let ((a, ga), (b, gb)) = (gate(1), gate(1));
        let mut union = UnionInputGate::new(vec![ga, gb]);
        // Checkpoint 3 was abandoned upstream of b: b's first barrier is 4. a, held at 3, flows
        // again once b yields 4, up to its own 4.
        a.lock()
            .unwrap()
            .extend([Some(GateItem::Barrier(3)), buffer(0, "a")]);
        b.lock().unwrap().extend([Some(GateItem::Barrier(4))]);
        assert_eq!(next(&mut union).await, buffer(0, "a"));
        a.lock().unwrap().extend([Some(GateItem::Barrier(4))]);
        assert_eq!(next(&mut union).await, Some(GateItem::Barrier(4)));
        // Aligning 6, a straggler 5 of b does not hold b.
        a.lock()
            .unwrap()
            .extend([Some(GateItem::Barrier(6)), buffer(0, "a-after"), None]);
        let held = tokio::time::timeout(std::time::Duration::from_millis(100), union.next()).await;
        assert!(held.is_err(), "a is held at 6 while b says nothing");
        b.lock()
            .unwrap()
            .extend([Some(GateItem::Barrier(5)), buffer(0, "b")]);
        assert_eq!(next(&mut union).await, buffer(1, "b"), "5 is a straggler");
        b.lock().unwrap().extend([Some(GateItem::Barrier(6)), None]);
        assert_eq!(next(&mut union).await, Some(GateItem::Barrier(6)));
        assert_eq!(next(&mut union).await, buffer(0, "a-after"));
        assert_eq!(next(&mut union).await, None);
        // A barrier older than the last one completed is ignored as well.
        assert_eq!(union.barrier(0, 4), None);
    }

    /// Issue 31, item 9: b's cancel-checkpoint marker of 7 releases a, held at 7, at once; b's
    /// late barrier 7 is passed over, and the marker is yielded once.
    #[tokio::test]
    async fn a_cancel_marker_releases_every_gate_held_at_its_checkpoint() {
        let ((a, ga), (b, gb)) = (gate(1), gate(1));
        let mut union = UnionInputGate::new(vec![ga, gb]);
        a.lock().unwrap().extend([
            Some(GateItem::Barrier(7)),
            buffer(0, "a-after"),
            Some(GateItem::Cancel(7)),
        ]);
        let held = tokio::time::timeout(std::time::Duration::from_millis(100), union.next()).await;
        assert!(held.is_err(), "a is held at 7 while b says nothing");
        b.lock().unwrap().extend([
            Some(GateItem::Cancel(7)),
            Some(GateItem::Barrier(7)),
            buffer(0, "b"),
        ]);
        assert_eq!(next(&mut union).await, Some(GateItem::Cancel(7)));
        let mut rest = vec![next(&mut union).await, next(&mut union).await];
        rest.sort_by_key(|i| format!("{i:?}"));
        assert_eq!(rest, [buffer(0, "a-after"), buffer(1, "b")]);
        a.lock().unwrap().push_back(None);
        b.lock().unwrap().push_back(None);
        assert_eq!(
            next(&mut union).await,
            None,
            "a's own marker of 7 is not yielded again"
        );
    }
}
