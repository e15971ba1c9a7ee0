//! Rate limits' decisions ([contract §16](crate::contract)), shared by every
//! backend, and the step a store that decides in Rust takes inside its
//! transaction ([`RateWindow`]).
//!
//! A limit's **log** keeps the instants of its last uses, store time, at
//! most `permits` of them (older ones can never count again once
//! `permits` newer ones exist). A use at `t` counts while
//! `now < t + period`; a request is judged against the uses that count,
//! and writes its own uses at `now` in the same atomic step. A log with no
//! use counting is as good as none: `purge` deletes it
//! ([`log_ends_at`]).

use std::time::Duration;

use crate::clock::{self, Timestamp};
use crate::error::Result;
use crate::rate::RateLimit;

/// A store's rate logs inside one open transaction, beside its
/// [`RecordTransaction`](super::engine::RecordTransaction) or
/// [`JobTransaction`](super::queue_engine::JobTransaction).
pub trait RateLogs {
    /// The uses recorded in `limit`'s log (its key, permits and period),
    /// in any order; empty when it has none.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when the log
    /// cannot be decoded ([`stored_uses`]); the store's errors.
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>>;

    /// Replaces `limit`'s log with `uses`: ascending, never empty, at most
    /// `permits`; the log counts until [`log_ends_at`]`(uses, limit)`.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()>;
}

/// Whether a use at `used` still counts at `now`: `now < used + period`.
pub fn counts(used: Timestamp, period: Duration, now: Timestamp) -> bool {
    clock::is_before_end(used, period, now)
}

/// The uses of `uses` that still count at `now`, ascending.
pub fn counting(uses: &[Timestamp], period: Duration, now: Timestamp) -> Vec<Timestamp> {
    let mut counting: Vec<Timestamp> = uses
        .iter()
        .copied()
        .filter(|used| counts(*used, period, now))
        .collect();
    counting.sort_unstable();
    counting
}

/// The permits of `limit` free at `now`, given its log.
pub fn permits_left(uses: &[Timestamp], limit: &RateLimit, now: Timestamp) -> usize {
    let counting = uses
        .iter()
        .filter(|used| counts(**used, limit.period, now))
        .count();
    (limit.permits as usize).saturating_sub(counting)
}

/// With no permit free at `now`, how long until one frees: when the use
/// whose leaving brings the count below `permits` stops counting. `None`
/// when a permit is free (or the limit has none, which validation
/// refuses).
pub fn next_permit_in(uses: &[Timestamp], limit: &RateLimit, now: Timestamp) -> Option<Duration> {
    let counting = counting(uses, limit.period, now);
    let permits = limit.permits as usize;
    if permits == 0 || counting.len() < permits {
        return None;
    }
    let leaving = counting[counting.len() - permits];
    Some(until_end(leaving, limit.period, now))
}

/// `used + period - now`, for a use that still counts at `now` (a use
/// stamped after `now`, by a clock that stepped back, counts from `now`).
fn until_end(used: Timestamp, period: Duration, now: Timestamp) -> Duration {
    if used >= now {
        period + clock::until(now, used)
    } else {
        period.saturating_sub(clock::until(used, now))
    }
}

/// The log after `count` more uses at `now`: the uses still counting and
/// the new ones, ascending, the newest `permits` kept.
pub fn spent(
    uses: &[Timestamp],
    limit: &RateLimit,
    now: Timestamp,
    count: usize,
) -> Vec<Timestamp> {
    let mut log = counting(uses, limit.period, now);
    log.extend(std::iter::repeat_n(now, count));
    log.sort_unstable();
    let permits = limit.permits as usize;
    if log.len() > permits {
        log.drain(..log.len() - permits);
    }
    log
}

/// How long until a permit frees once `count` more uses are written at
/// `now` (zero when one is still free): a claim's `retry_after`, the uses
/// it just wrote counted.
pub fn retry_after_spending(
    uses: &[Timestamp],
    limit: &RateLimit,
    now: Timestamp,
    count: usize,
) -> Duration {
    next_permit_in(&spent(uses, limit, now, count), limit, now).unwrap_or(Duration::ZERO)
}

/// Whether the log `uses` has stopped counting altogether at `now` (an
/// empty log has): what `purge` deletes.
pub fn ended(uses: &[Timestamp], limit: &RateLimit, now: Timestamp) -> bool {
    log_ends_at(uses, limit).is_none_or(|end| end <= now)
}

/// When the log `uses` stops counting altogether: its newest use plus the
/// period. `None` for an empty log.
pub fn log_ends_at(uses: &[Timestamp], limit: &RateLimit) -> Option<Timestamp> {
    uses.iter()
        .max()
        .map(|newest| clock::add(*newest, limit.period))
}

/// The name of `limit`'s log in a store that keys logs by one string:
/// `"<permits>:<period in ms>:<key>"`, unambiguous since the first two
/// parts are digits.
pub fn log_name(limit: &RateLimit) -> String {
    format!(
        "{}:{}:{}",
        limit.permits,
        limit.period.as_millis(),
        limit.key
    )
}

/// The period of `limit` in whole milliseconds, as stores key it.
pub fn period_millis(limit: &RateLimit) -> i64 {
    i64::try_from(limit.period.as_millis()).unwrap_or(i64::MAX)
}

/// A log as text stores keep it: a JSON array of microseconds since the
/// epoch.
pub fn encode_uses(uses: &[Timestamp]) -> String {
    serde_json::to_string(
        &uses
            .iter()
            .map(|used| clock::to_micros(*used))
            .collect::<Vec<_>>(),
    )
    .unwrap_or_else(|_| "[]".to_owned())
}

/// A log kept as text ([`encode_uses`]), checked by [`stored_uses`].
///
/// # Errors
///
/// The reason, when it is no JSON array of microsecond instants or holds
/// more uses than `limit` has permits; the backend reports it as
/// `Corrupt`.
pub fn decode_uses(text: &str, limit: &RateLimit) -> Result<Vec<Timestamp>, String> {
    let micros: Vec<i64> = serde_json::from_str(text)
        .map_err(|error| format!("rate log is no array of instants: {error}"))?;
    stored_uses(micros, limit)
}

/// A log read as microseconds since the epoch, checked as every backend
/// decodes it: each an instant, no more than `limit`'s permits (the
/// contract never keeps more).
///
/// # Errors
///
/// The reason, when it is not; the backend reports it as `Corrupt`.
pub fn stored_uses(
    micros: impl IntoIterator<Item = i64>,
    limit: &RateLimit,
) -> Result<Vec<Timestamp>, String> {
    let uses = micros
        .into_iter()
        .map(|micros| {
            clock::from_micros(micros)
                .ok_or_else(|| format!("rate log holds {micros}, which is no instant"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if uses.len() > limit.permits as usize {
        return Err(format!(
            "rate log of {:?} holds {} uses, above its {} permits",
            limit.key,
            uses.len(),
            limit.permits
        ));
    }
    Ok(uses)
}

/// A limit's log opened in a transaction at `now`: how many permits are
/// free, and the write of the uses a request takes.
#[derive(Debug)]
pub struct RateWindow<'l> {
    limit: &'l RateLimit,
    uses: Vec<Timestamp>,
    now: Timestamp,
}

impl<'l> RateWindow<'l> {
    /// Reads `limit`'s log.
    ///
    /// # Errors
    ///
    /// As [`RateLogs::rate_log`].
    pub fn open(logs: &mut impl RateLogs, limit: &'l RateLimit, now: Timestamp) -> Result<Self> {
        Ok(RateWindow {
            limit,
            uses: logs.rate_log(limit)?,
            now,
        })
    }

    /// The permits free now.
    pub fn left(&self) -> usize {
        permits_left(&self.uses, self.limit, self.now)
    }

    /// How long until a permit frees (zero when one is free).
    pub fn retry_after(&self) -> Duration {
        next_permit_in(&self.uses, self.limit, self.now).unwrap_or(Duration::ZERO)
    }

    /// How long until a permit frees once `count` more uses are written
    /// now (zero when one is still free).
    pub fn retry_after_spending(&self, count: usize) -> Duration {
        retry_after_spending(&self.uses, self.limit, self.now, count)
    }

    /// Writes `count` uses at now; nothing when `count` is zero.
    ///
    /// # Errors
    ///
    /// As [`RateLogs::save_rate_log`].
    pub fn spend(self, logs: &mut impl RateLogs, count: usize) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        logs.save_rate_log(self.limit, &spent(&self.uses, self.limit, self.now, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: i64) -> Timestamp {
        clock::from_micros(1_700_000_000_000_000 + millis * 1000).expect("an instant")
    }

    fn limit(permits: u32, period_ms: u64) -> RateLimit {
        RateLimit::new("k", permits, Duration::from_millis(period_ms))
    }

    #[test]
    fn a_use_counts_until_exactly_its_period_has_passed() {
        let limit = limit(1, 40);
        assert_eq!(permits_left(&[at(0)], &limit, at(39)), 0);
        assert_eq!(
            next_permit_in(&[at(0)], &limit, at(39)),
            Some(Duration::from_millis(1))
        );
        assert_eq!(permits_left(&[at(0)], &limit, at(40)), 1);
        assert_eq!(next_permit_in(&[at(0)], &limit, at(40)), None);
    }

    #[test]
    fn the_permit_freed_is_the_one_whose_leaving_brings_the_count_below_the_permits() {
        let limit = limit(2, 100);
        let uses = [at(0), at(30), at(60)];
        // Three counting uses for two permits (a log written under another
        // clock): two must leave before one is free.
        assert_eq!(permits_left(&uses, &limit, at(61)), 0);
        assert_eq!(
            next_permit_in(&uses, &limit, at(61)),
            Some(Duration::from_millis(69))
        );
    }

    #[test]
    fn uses_stamped_after_now_count_from_now_for_their_whole_period() {
        // The clock stepped back 10 ms after the use was written.
        let limit = limit(1, 40);
        assert_eq!(permits_left(&[at(10)], &limit, at(0)), 0);
        assert_eq!(
            next_permit_in(&[at(10)], &limit, at(0)),
            Some(Duration::from_millis(50))
        );
        // Of more uses than permits, the latest instants (those counting
        // longest) are kept.
        assert_eq!(spent(&[at(10)], &limit, at(0), 1), vec![at(10)]);
    }

    #[test]
    fn spending_keeps_the_newest_uses_up_to_the_permits() {
        let limit = limit(3, 100);
        let log = spent(&[at(0), at(50)], &limit, at(120), 2);
        assert_eq!(log, vec![at(50), at(120), at(120)]);
        assert_eq!(spent(&log, &limit, at(120), 5).len(), 3);
        assert_eq!(
            retry_after_spending(&[at(50)], &limit, at(120), 2),
            Duration::from_millis(30)
        );
        assert_eq!(retry_after_spending(&[], &limit, at(0), 1), Duration::ZERO);
    }

    #[test]
    fn a_limit_without_permits_answers_no_wait_instead_of_panicking() {
        assert_eq!(next_permit_in(&[at(0)], &limit(0, 40), at(1)), None);
    }

    #[test]
    fn a_log_ends_when_its_newest_use_stops_counting() {
        let limit = limit(2, 40);
        assert!(!ended(&[at(0), at(10)], &limit, at(49)));
        assert!(ended(&[at(0), at(10)], &limit, at(50)));
        assert!(ended(&[], &limit, at(0)));
    }

    #[test]
    fn stored_logs_are_checked() {
        let limit = limit(2, 40);
        assert!(decode_uses("[1, 2]", &limit).is_ok());
        assert!(decode_uses("[]", &limit).is_ok());
        for damaged in [
            "[1, 2, 3]",
            "{}",
            "[\"1\"]",
            "[1.5]",
            "[9223372036854775807]",
            "x",
        ] {
            assert!(decode_uses(damaged, &limit).is_err(), "{damaged}");
        }
        assert_eq!(
            decode_uses(&encode_uses(&[at(0), at(1)]), &limit),
            Ok(vec![at(0), at(1)])
        );
    }
}
