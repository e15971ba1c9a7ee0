//! Time as the store sees it.
//!
//! Expiry is always judged by the store's clock. Server-backed stores read
//! their server's clock; embedded stores (memory, SQLite) read a [`Clock`],
//! which tests replace with a [`ManualClock`] to move time without sleeping.
//!
//! Every timestamp a store hands out is truncated to whole microseconds, the
//! precision all backends can round-trip unchanged.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    let checked_add = |duration: Duration| {
        chrono::Duration::from_std(duration)
            .ok()
            .and_then(|d| instant.checked_add_signed(d))
    };
    if is_whole_micros(instant) {
        // As every store instant is: then the truncated sum is the instant
        // plus the duration's whole microseconds, which needs no truncation
        // (two calendar conversions fewer, on every renewal).
        let whole_micros = Duration::new(duration.as_secs(), duration.subsec_micros() * 1_000);
        if let Some(sum) = checked_add(whole_micros) {
            return sum;
        }
    }
    truncate_to_micros(checked_add(duration).unwrap_or(DateTime::<Utc>::MAX_UTC))
}

/// Whether `instant` has no part finer than a microsecond (and is no leap
/// second, which chrono counts as more than a billion nanoseconds).
fn is_whole_micros(instant: Timestamp) -> bool {
    let nanos = instant.timestamp_subsec_nanos();
    nanos < 1_000_000_000 && nanos % 1_000 == 0
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
        // Whole microseconds since the epoch straight from the system clock:
        // one calendar conversion where `truncate_to_micros(Utc::now())`
        // makes three, on every operation of an embedded store.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|since_epoch| i64::try_from(since_epoch.as_micros()).ok())
            .and_then(from_micros)
            // A clock before the epoch or beyond chrono's range: chrono's way.
            .unwrap_or_else(|| truncate_to_micros(Utc::now()))
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
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now = add(*now, by);
    }

    /// Sets the clock to `instant`, if that is later than its current time.
    /// Time never runs backwards.
    pub fn advance_to(&self, instant: Timestamp) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if instant > *now {
            *now = truncate_to_micros(instant);
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    /// [`add`] by its definition: chrono's sum, truncated, saturating.
    fn add_by_definition(instant: Timestamp, duration: Duration) -> Timestamp {
        let sum = chrono::Duration::from_std(duration)
            .ok()
            .and_then(|d| instant.checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        truncate_to_micros(sum)
    }

    #[test]
    fn add_agrees_with_its_definition() {
        let day = NaiveDate::from_ymd_opt(2016, 12, 31).expect("a date");
        let at = |nanos| {
            day.and_hms_nano_opt(23, 59, 59, nanos)
                .expect("a time")
                .and_utc()
        };
        let instants = [
            at(0),
            at(123_456_000),
            at(123_456_789),
            at(999_999_999),
            // A leap second, which chrono counts past a billion nanoseconds.
            at(1_000_000_000),
            at(1_999_999_000),
            DateTime::<Utc>::MIN_UTC,
            truncate_to_micros(DateTime::<Utc>::MAX_UTC),
            DateTime::<Utc>::MAX_UTC,
        ];
        let durations = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(999),
            Duration::from_nanos(1_001),
            Duration::from_millis(200),
            Duration::from_secs(30 * 24 * 3600) + Duration::from_nanos(1_500),
            Duration::from_secs(u64::MAX / 2),
            Duration::MAX,
        ];
        for instant in instants {
            for duration in durations {
                assert_eq!(
                    add(instant, duration),
                    add_by_definition(instant, duration),
                    "{instant:?} + {duration:?}"
                );
            }
        }
    }

    #[test]
    fn system_clock_reads_the_wall_clock_in_whole_microseconds() {
        let before = truncate_to_micros(Utc::now());
        let now = SystemClock.now();
        let after = Utc::now();
        assert_eq!(truncate_to_micros(now), now);
        assert!(
            before <= now && now <= after,
            "{before} <= {now} <= {after}"
        );
    }
}
