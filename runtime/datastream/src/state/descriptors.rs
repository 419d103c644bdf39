//! Descriptors of per-entry keyed state (Flink's `MapStateDescriptor` and friends): a state's
//! name, its kind and types, and its time to live ([`StateTtlConfig`]). The stored name is
//! `{kind}:{name}`, or `{kind}+ttl:{name}` with a time to live (see [`floe_state::ttl`]).

use std::marker::PhantomData;
use std::sync::Arc;

use super::ttl::StateTtlConfig;
use crate::data::Data;
use crate::operators::window::AggregateFunction;

/// The longest state name a descriptor takes (the backend's key layout keeps a name in 255
/// bytes, with its kind).
pub const MAX_STATE_NAME_BYTES: usize = 200;

fn state_name(kind: &str, name: &str) -> String {
    assert!(
        !name.is_empty() && name.len() <= MAX_STATE_NAME_BYTES,
        "state descriptor name {name:?}: expected 1 to {MAX_STATE_NAME_BYTES} bytes"
    );
    format!("{kind}:{name}")
}

/// The stored name of a state named `name` (`{kind}:{user name}`) once it has a time to live.
fn with_ttl(name: &str) -> String {
    match name.split_once(':') {
        Some((kind, user)) => format!("{kind}{}:{user}", floe_state::ttl::KIND_SUFFIX),
        None => name.to_string(),
    }
}

/// The stored name of the same state with the time to live switched (on to off, off to on): a
/// restored state under it was checkpointed with the other setting.
pub(crate) fn other_variant(name: &str) -> String {
    match name.split_once(':') {
        Some((kind, user)) => match kind.strip_suffix(floe_state::ttl::KIND_SUFFIX) {
            Some(plain) => format!("{plain}:{user}"),
            None => with_ttl(name),
        },
        None => name.to_string(),
    }
}

/// The user's name of a stored state name (`visits` of `map+ttl:visits`).
pub(crate) fn user_name(name: &str) -> &str {
    name.split_once(':').map_or(name, |(_, user)| user)
}

/// Declares a map per key (Flink's `MapStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Debug, Clone)]
pub struct MapStateDescriptor<UK, UV> {
    pub(crate) name: String,
    pub(crate) ttl: Option<StateTtlConfig>,
    _t: PhantomData<fn() -> (UK, UV)>,
}

impl<UK: Data, UV: Data> MapStateDescriptor<UK, UV> {
    pub fn new(name: &str) -> Self {
        MapStateDescriptor {
            name: state_name("map", name),
            ttl: None,
            _t: PhantomData,
        }
    }

    /// Values of this state expire `ttl.ttl()` after their last write (Flink's
    /// `enableTimeToLive`); see [`StateTtlConfig`].
    pub fn enable_time_to_live(mut self, ttl: StateTtlConfig) -> Self {
        if self.ttl.is_none() {
            self.name = with_ttl(&self.name);
        }
        self.ttl = Some(ttl);
        self
    }
}

/// Declares a list per key (Flink's `ListStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Debug, Clone)]
pub struct ListStateDescriptor<T> {
    pub(crate) name: String,
    pub(crate) ttl: Option<StateTtlConfig>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Data> ListStateDescriptor<T> {
    pub fn new(name: &str) -> Self {
        ListStateDescriptor {
            name: state_name("list", name),
            ttl: None,
            _t: PhantomData,
        }
    }

    /// Values of this state expire `ttl.ttl()` after their last write (Flink's
    /// `enableTimeToLive`); see [`StateTtlConfig`].
    pub fn enable_time_to_live(mut self, ttl: StateTtlConfig) -> Self {
        if self.ttl.is_none() {
            self.name = with_ttl(&self.name);
        }
        self.ttl = Some(ttl);
        self
    }
}

/// Declares one value per key (Flink's `ValueStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Debug, Clone)]
pub struct ValueStateDescriptor<T> {
    pub(crate) name: String,
    pub(crate) ttl: Option<StateTtlConfig>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Data> ValueStateDescriptor<T> {
    pub fn new(name: &str) -> Self {
        ValueStateDescriptor {
            name: state_name("value", name),
            ttl: None,
            _t: PhantomData,
        }
    }

    /// Values of this state expire `ttl.ttl()` after their last write (Flink's
    /// `enableTimeToLive`); see [`StateTtlConfig`].
    pub fn enable_time_to_live(mut self, ttl: StateTtlConfig) -> Self {
        if self.ttl.is_none() {
            self.name = with_ttl(&self.name);
        }
        self.ttl = Some(ttl);
        self
    }
}

type ReduceFn<T> = Arc<dyn Fn(T, T) -> T + Send + Sync>;

/// Declares a value per key that every added element is reduced into (Flink's
/// `ReducingStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
#[derive(Clone)]
pub struct ReducingStateDescriptor<T> {
    pub(crate) name: String,
    pub(crate) reduce: ReduceFn<T>,
    pub(crate) ttl: Option<StateTtlConfig>,
}

impl<T> std::fmt::Debug for ReducingStateDescriptor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReducingStateDescriptor")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<T: Data> ReducingStateDescriptor<T> {
    pub fn new(name: &str, reduce: impl Fn(T, T) -> T + Send + Sync + 'static) -> Self {
        ReducingStateDescriptor {
            name: state_name("reducing", name),
            reduce: Arc::new(reduce),
            ttl: None,
        }
    }

    /// Values of this state expire `ttl.ttl()` after their last write (Flink's
    /// `enableTimeToLive`); see [`StateTtlConfig`].
    pub fn enable_time_to_live(mut self, ttl: StateTtlConfig) -> Self {
        if self.ttl.is_none() {
            self.name = with_ttl(&self.name);
        }
        self.ttl = Some(ttl);
        self
    }
}

/// Declares an accumulator per key that every added element is aggregated into with an
/// [`AggregateFunction`] (Flink's `AggregatingStateDescriptor`).
///
/// # Panics
/// `new` panics when `name` is empty or longer than [`MAX_STATE_NAME_BYTES`].
pub struct AggregatingStateDescriptor<IN, F> {
    pub(crate) name: String,
    pub(crate) function: Arc<F>,
    pub(crate) ttl: Option<StateTtlConfig>,
    _t: PhantomData<fn(IN)>,
}

impl<IN, F> Clone for AggregatingStateDescriptor<IN, F> {
    fn clone(&self) -> Self {
        AggregatingStateDescriptor {
            name: self.name.clone(),
            function: self.function.clone(),
            ttl: self.ttl,
            _t: PhantomData,
        }
    }
}

impl<IN, F> std::fmt::Debug for AggregatingStateDescriptor<IN, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatingStateDescriptor")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<IN, F: AggregateFunction<IN>> AggregatingStateDescriptor<IN, F> {
    pub fn new(name: &str, function: F) -> Self {
        AggregatingStateDescriptor {
            name: state_name("aggregating", name),
            function: Arc::new(function),
            ttl: None,
            _t: PhantomData,
        }
    }

    /// Values of this state expire `ttl.ttl()` after their last write (Flink's
    /// `enableTimeToLive`); see [`StateTtlConfig`].
    pub fn enable_time_to_live(mut self, ttl: StateTtlConfig) -> Self {
        if self.ttl.is_none() {
            self.name = with_ttl(&self.name);
        }
        self.ttl = Some(ttl);
        self
    }
}
