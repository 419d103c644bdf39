//! State time-to-live (Flink's `StateTtlConfig`): a per-entry state declared with
//! `enable_time_to_live` keeps, with every value (a map's every entry, a list's every element),
//! the processing time it expires: `ttl` after it was last written (or read, with
//! [`UpdateType::OnReadAndWrite`]). An access never sees an expired value (unless
//! [`StateVisibility::ReturnExpiredIfNotCleanedUp`]) and removes what it finds expired; expired
//! values are also removed without an access:
//!
//! - full snapshots (the heap backend's) leave them out, and a restore drops them;
//! - the heap backend checks a few keys of a state at every access to it (`cleanup_incrementally`,
//!   on by default with 5 keys, as in Flink, whose option to check at every record of the task
//!   is not here: a state no record accesses any more is cleaned by the next full snapshot);
//! - RocksDB's compactions drop them, always: a value or map entry whose time has passed, a list
//!   whose every element's has; and a compaction that merges a list's appends leaves its expired
//!   elements out, so an append-only list is trimmed as it grows (a list written whole and never
//!   appended to again keeps its expired elements until the last one expires).
//!
//! So a key that is never seen again goes after `ttl`, which is what keeps a regular join's or a
//! session function's state from growing for ever.
//!
//! The stored form of a value with a time to live is its expiry time (8 bytes, little-endian
//! milliseconds) followed by the value's encoding ([`Stamped`]), on both backends and in
//! checkpoints, under the state name `{kind}+ttl:{name}` ([`floe_state::ttl`]), so RocksDB's
//! compaction filter tells what expired from the stored bytes alone. Flink stores the last access
//! time instead, so a changed `ttl` applies to existing values at once; here it applies from each
//! value's next write. A state checkpointed without a time to live and declared with one after a
//! restore (or the other way round) is refused at its declaration, naming the state: as in Flink,
//! turning TTL on or off is not a compatible change.

use std::time::Duration;

use crate::data::Data;
use crate::error::{Error, Result};

/// When a value's time to live starts again (Flink's `StateTtlConfig.UpdateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateType {
    /// When the value is created or written (Flink's default).
    OnCreateAndWrite,
    /// On reads too.
    OnReadAndWrite,
}

/// Whether an expired value not removed yet is returned (Flink's `StateVisibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateVisibility {
    /// Never (Flink's default).
    NeverReturnExpired,
    /// Returned, once, by the access that removes it.
    ReturnExpiredIfNotCleanedUp,
}

/// The time to live of a per-entry state, in processing time (Flink's `StateTtlConfig`): build it
/// with [`StateTtlConfig::new_builder`] and give it to a descriptor's `enable_time_to_live`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTtlConfig {
    ttl_ms: i64,
    update_type: UpdateType,
    visibility: StateVisibility,
    full_snapshot: bool,
    /// Keys checked per access on the heap backend (0: none).
    incremental: usize,
}

/// Builds a [`StateTtlConfig`].
#[derive(Debug, Clone, Copy)]
pub struct StateTtlConfigBuilder(StateTtlConfig);

impl StateTtlConfig {
    /// A time to live of `ttl` (at least 1 ms), with Flink's defaults: the time starts again on
    /// create and write, expired values are never returned, and expired values are removed in
    /// the background (5 keys per access on the heap, RocksDB's compaction).
    pub fn new_builder(ttl: Duration) -> StateTtlConfigBuilder {
        StateTtlConfigBuilder(StateTtlConfig {
            ttl_ms: ttl.as_millis().clamp(1, i64::MAX as u128) as i64,
            update_type: UpdateType::OnCreateAndWrite,
            visibility: StateVisibility::NeverReturnExpired,
            full_snapshot: true,
            incremental: 5,
        })
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms as u64)
    }

    pub fn update_type(&self) -> UpdateType {
        self.update_type
    }

    pub fn state_visibility(&self) -> StateVisibility {
        self.visibility
    }

    /// The expiry time of a value written (or refreshed) at `now`.
    pub(crate) fn expiry(&self, now: i64) -> i64 {
        now.saturating_add(self.ttl_ms)
    }

    pub(crate) fn refreshes_on_read(&self) -> bool {
        self.update_type == UpdateType::OnReadAndWrite
    }

    pub(crate) fn returns_expired(&self) -> bool {
        self.visibility == StateVisibility::ReturnExpiredIfNotCleanedUp
    }

    /// Full snapshots (and restores) leave expired values out.
    pub(crate) fn cleans_full_snapshots(&self) -> bool {
        self.full_snapshot
    }

    /// Keys of the state the heap backend checks at each access to it.
    pub(crate) fn incremental_keys(&self) -> usize {
        self.incremental
    }
}

impl StateTtlConfigBuilder {
    pub fn set_update_type(mut self, update_type: UpdateType) -> Self {
        self.0.update_type = update_type;
        self
    }

    pub fn update_ttl_on_create_and_write(self) -> Self {
        self.set_update_type(UpdateType::OnCreateAndWrite)
    }

    pub fn update_ttl_on_read_and_write(self) -> Self {
        self.set_update_type(UpdateType::OnReadAndWrite)
    }

    pub fn set_state_visibility(mut self, visibility: StateVisibility) -> Self {
        self.0.visibility = visibility;
        self
    }

    pub fn never_return_expired(self) -> Self {
        self.set_state_visibility(StateVisibility::NeverReturnExpired)
    }

    pub fn return_expired_if_not_cleaned_up(self) -> Self {
        self.set_state_visibility(StateVisibility::ReturnExpiredIfNotCleanedUp)
    }

    /// Full snapshots leave expired values out (on by default).
    pub fn cleanup_full_snapshot(mut self) -> Self {
        self.0.full_snapshot = true;
        self
    }

    /// The heap backend checks `keys` keys of the state at every access to it (5 by default).
    /// Flink's second argument (a check per record as well) is what Floe does anyway: a
    /// process function's accesses are per record.
    pub fn cleanup_incrementally(mut self, keys: usize) -> Self {
        self.0.incremental = keys;
        self
    }

    /// RocksDB's compactions drop expired values: always so in Floe (the filter reads the expiry
    /// from the stored value, so it costs no lookup); kept for Flink's API.
    pub fn cleanup_in_rocksdb_compact_filter(self) -> Self {
        self
    }

    /// The heap backend removes expired values only when an access or a full snapshot finds
    /// them (RocksDB's compactions still drop them).
    pub fn disable_cleanup_in_background(mut self) -> Self {
        self.0.incremental = 0;
        self
    }

    pub fn build(self) -> StateTtlConfig {
        self.0
    }
}

/// A value with the processing time it expires: stored as the time (8 bytes, little-endian)
/// followed by the value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stamped<T> {
    pub expires: i64,
    pub value: T,
}

impl<T> Stamped<T> {
    pub(crate) fn expired(&self, now: i64) -> bool {
        self.expires <= now
    }
}

impl<T: Data> Data for Stamped<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.expires.to_le_bytes());
        self.value.encode(out);
    }

    fn decode(input: &mut &[u8]) -> Result<Self> {
        let expires = floe_state::ttl::expires(input)
            .ok_or_else(|| Error::Decode("a value with a time to live: its expiry is truncated".into()))?;
        *input = &input[8..];
        Ok(Stamped {
            expires,
            value: T::decode(input)?,
        })
    }

    fn write_text(&self, out: &mut Vec<u8>) {
        self.value.write_text(out)
    }

    /// The expiry as 8 bytes (little-endian, as `floe_state::ttl` reads it without decoding the
    /// value), then the value.
    fn schema() -> crate::data::Schema {
        use crate::data::{Field, Schema};
        Schema::Struct {
            name: "Stamped".into(),
            fields: vec![
                Field::new("expires", Schema::Array(8, Box::new(Schema::U8)), None),
                Field::new("value", T::schema(), None),
            ],
        }
    }
}

/// The processing time state TTL reads (Flink's `TtlTimeProvider`); tests move it forward.
pub(crate) fn now_ms() -> i64 {
    crate::time::now_ms() + tests_clock::offset()
}

#[cfg(not(test))]
mod tests_clock {
    pub(super) fn offset() -> i64 {
        0
    }
}

#[cfg(test)]
pub(crate) mod tests_clock {
    use std::cell::Cell;

    thread_local!(static OFFSET: Cell<i64> = const { Cell::new(0) });

    pub(crate) fn offset() -> i64 {
        OFFSET.with(Cell::get)
    }

    /// Moves this thread's TTL clock forward by `ms`.
    pub(crate) fn advance(ms: i64) {
        OFFSET.with(|o| o.set(o.get() + ms));
    }
}

#[cfg(test)]
#[path = "ttl_tests.rs"]
mod tests;
