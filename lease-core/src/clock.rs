//! Time as the store sees it.
//!
//! Expiry is always judged by the store's clock. Server-backed stores read
//! their server's clock; embedded stores (memory, SQLite) read a [`Clock`],
//! which tests replace with a [`ManualClock`] to move time without sleeping.
//!
//! Every timestamp a store hands out is truncated to whole microseconds, the
//! precision all backends can round-trip unchanged.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A UTC instant with microsecond precision.
pub type Timestamp = DateTime<Utc>;

/// Truncates `instant` to whole microseconds.
pub fn truncate_to_micros(instant: Timestamp) -> Timestamp {
    from_micros(instant.timestamp_micros()).unwrap_or(instant)
}

/// Microseconds since the Unix epoch: the integer form stores persist.
pub fn to_micros(instant: Timestamp) -> i64 {
    instant.timestamp_micros()
}

/// The inverse of [`to_micros`]; `None` when out of chrono's range.
pub fn from_micros(micros: i64) -> Option<Timestamp> {
    DateTime::from_timestamp_micros(micros)
}

/// `instant + duration` truncated to microseconds (the precision every store
/// keeps), saturating at chrono's maximum instant.
pub fn add(instant: Timestamp, duration: Duration) -> Timestamp {
    let sum = chrono::Duration::from_std(duration)
        .ok()
        .and_then(|d| instant.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    truncate_to_micros(sum)
}

/// `later - earlier` as a [`Duration`], zero when `later` is not later.
pub fn until(earlier: Timestamp, later: Timestamp) -> Duration {
    (later - earlier).to_std().unwrap_or(Duration::ZERO)
}

/// Whether `now` is strictly before `start + span`, computed exactly (no
/// truncation of `span`): the test behind "lease still valid with grace".
/// Stores that must compare in whole microseconds get the same answer by
/// rounding `span` **up** ([`micros_rounded_up`]), since store instants are
/// whole microseconds.
pub fn is_before_end(start: Timestamp, span: Duration, now: Timestamp) -> bool {
    now < start || until(start, now) < span
}

/// `duration` in whole microseconds, rounded up and saturating: the form in
/// which stores compare durations against microsecond instants so they agree
/// with [`is_before_end`].
pub fn micros_rounded_up(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap_or(i64::MAX)
}

/// A source of the current time for embedded stores.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant, truncated to microseconds.
    fn now(&self) -> Timestamp;
}

/// The process's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        truncate_to_micros(Utc::now())
    }
}

/// A clock that moves only when told to: for tests that cross expiry
/// deadlines without sleeping.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A manual clock starting at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Mutex::new(truncate_to_micros(start)),
        }
    }

    /// A manual clock starting at the current wall-clock time.
    pub fn starting_now() -> Self {
        Self::new(Utc::now())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now = add(*now, by);
    }

    /// Sets the clock to `instant`, if that is later than its current time.
    /// Time never runs backwards.
    pub fn advance_to(&self, instant: Timestamp) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        if instant > *now {
            *now = truncate_to_micros(instant);
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wall-clock time as of creation, moved forward by tokio's clock: under
/// `tokio::time::pause()` it advances only with `tokio::time::advance` or
/// auto-advance, so timing tests need no real sleeps.
///
/// Must be created inside a tokio runtime.
#[derive(Debug)]
pub struct TokioClock {
    base: Timestamp,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading the current wall-clock time now, then following tokio's clock.
    pub fn new() -> Self {
        TokioClock {
            base: truncate_to_micros(Utc::now()),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        add(self.base, self.start.elapsed())
    }
}
