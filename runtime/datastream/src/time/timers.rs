//! The keyed timer service (Flink's `InternalTimerService` with heap timers): event-time and
//! processing-time timers per key, at most one per key and timestamp, fired in timestamp order
//! (then key order, so a run is deterministic).
//!
//! Timers live in memory in both state backends (Flink's `state.backend.rocksdb.timer-service.factory:
//! HEAP`); they are checkpointed as keyed state entries (state [`EVENT_TIMERS`] /
//! [`PROCESSING_TIMERS`], key = the record key's encoding followed by the timestamp, in the key's key
//! group), so a restore, a rescale and a savepoint upgrade give each timer to the subtask that owns
//! its key, with the one restore mechanism every keyed state uses.

use std::collections::BTreeSet;
use std::hash::Hash;

use crate::data::Data;
use crate::error::{Error, Result};
use crate::types::KeyMap;

/// State name of event-time timers in a keyed snapshot.
pub(crate) const EVENT_TIMERS: &str = "timers/event";
/// State name of processing-time timers in a keyed snapshot.
pub(crate) const PROCESSING_TIMERS: &str = "timers/processing";

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    EventTime,
    ProcessingTime,
}

impl TimeDomain {
    pub(crate) fn state_name(self) -> &'static str {
        match self {
            TimeDomain::EventTime => EVENT_TIMERS,
            TimeDomain::ProcessingTime => PROCESSING_TIMERS,
        }
    }
}

/// The snapshot key of a timer: the record key's encoding, then the timestamp (big-endian with the
/// sign flipped, so a byte-ordered store lists one key's timers in time order).
pub(crate) fn timer_entry_key<K: Data>(key: &K, timestamp: i64, out: &mut Vec<u8>) {
    out.clear();
    key.encode(out);
    out.extend_from_slice(&((timestamp as u64) ^ (1 << 63)).to_be_bytes());
}

pub(crate) fn decode_timer_entry<K: Data>(mut entry: &[u8]) -> Result<(K, i64)> {
    let key = K::decode(&mut entry)?;
    let bytes: [u8; 8] = entry.try_into().map_err(|_| {
        Error::State(format!(
            "timer entry: {} bytes after the key, expected 8",
            entry.len()
        ))
    })?;
    Ok((key, (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64))
}

/// The timers of one domain: ordered by time (then key) for firing, and a hash set of the same
/// timers so that registering one again, what a window does for every element, costs one hash
/// lookup (Flink's `HeapPriorityQueueSet` pairs its heap with a hash map the same way; the ordered
/// set alone spent most of a sliding-window task's time searching).
#[derive(Debug)]
struct Queue<K> {
    order: BTreeSet<(i64, K)>,
    present: KeyMap<(i64, K), ()>,
}

impl<K> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            order: BTreeSet::new(),
            present: KeyMap::default(),
        }
    }
}

/// The timers of one task's keys, both domains.
#[derive(Debug)]
pub(crate) struct Timers<K> {
    event: Queue<K>,
    processing: Queue<K>,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Timers {
            event: Queue::default(),
            processing: Queue::default(),
        }
    }
}

impl<K: Ord + Clone + Hash> Timers<K> {
    fn queue(&mut self, domain: TimeDomain) -> &mut Queue<K> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers a timer; `false` when this key had one at this time already.
    pub(crate) fn register(&mut self, domain: TimeDomain, key: K, timestamp: i64) -> bool {
        let q = self.queue(domain);
        let timer = (timestamp, key);
        if q.present.contains_key(&timer) {
            return false;
        }
        q.present.insert(timer.clone(), ());
        q.order.insert(timer)
    }

    /// Deletes a timer; `false` when there was none.
    pub(crate) fn delete(&mut self, domain: TimeDomain, key: &K, timestamp: i64) -> bool {
        let q = self.queue(domain);
        let timer = (timestamp, key.clone());
        q.present.remove(&timer).is_some() && q.order.remove(&timer)
    }

    /// Removes and returns the earliest timer of `domain` at or before `time`.
    pub(crate) fn pop_due(&mut self, domain: TimeDomain, time: i64) -> Option<(i64, K)> {
        let q = self.queue(domain);
        match q.order.first() {
            Some((ts, _)) if *ts <= time => {
                let timer = q.order.pop_first()?;
                q.present.remove(&timer);
                Some(timer)
            }
            _ => None,
        }
    }

    /// The earliest timer of `domain`.
    #[cfg(test)]
    pub(crate) fn next(&self, domain: TimeDomain) -> Option<i64> {
        match domain {
            TimeDomain::EventTime => self.event.order.first().map(|t| t.0),
            TimeDomain::ProcessingTime => self.processing.order.first().map(|t| t.0),
        }
    }

    pub(crate) fn iter(&self, domain: TimeDomain) -> impl Iterator<Item = &(i64, K)> {
        match domain {
            TimeDomain::EventTime => self.event.order.iter(),
            TimeDomain::ProcessingTime => self.processing.order.iter(),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.event.order.len() + self.processing.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_timestamp_then_key_order_once_per_key_and_time() {
        let mut t = Timers::default();
        assert!(t.register(TimeDomain::EventTime, "b".to_string(), 20));
        assert!(t.register(TimeDomain::EventTime, "a".to_string(), 20));
        assert!(t.register(TimeDomain::EventTime, "c".to_string(), 5));
        assert!(
            !t.register(TimeDomain::EventTime, "c".to_string(), 5),
            "one per key and time"
        );
        assert!(t.register(TimeDomain::EventTime, "d".to_string(), 30));
        assert!(t.register(TimeDomain::ProcessingTime, "a".to_string(), 1));
        assert!(t.delete(TimeDomain::EventTime, &"d".to_string(), 30));
        assert!(!t.delete(TimeDomain::EventTime, &"d".to_string(), 30));
        let mut fired = Vec::new();
        while let Some(timer) = t.pop_due(TimeDomain::EventTime, 25) {
            fired.push(timer);
        }
        assert_eq!(
            fired,
            vec![(5, "c".to_string()), (20, "a".to_string()), (20, "b".to_string())]
        );
        assert_eq!(t.next(TimeDomain::EventTime), None);
        assert_eq!(t.next(TimeDomain::ProcessingTime), Some(1), "domains are apart");
    }

    #[test]
    fn timer_entries_sort_by_time_within_a_key_and_read_back() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        timer_entry_key(&7u64, -5, &mut a);
        timer_entry_key(&7u64, 3, &mut b);
        assert!(a < b, "negative times sort first");
        assert_eq!(decode_timer_entry::<u64>(&a).unwrap(), (7, -5));
        assert_eq!(decode_timer_entry::<u64>(&b).unwrap(), (7, 3));
        assert!(decode_timer_entry::<u64>(&a[..a.len() - 1]).is_err());
    }
}
