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
/// when a permit is free.
pub fn next_permit_in(uses: &[Timestamp], limit: &RateLimit, now: Timestamp) -> Option<Duration> {
    let counting = counting(uses, limit.period, now);
    let permits = limit.permits as usize;
    if counting.len() < permits {
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
        let log = spent(&self.uses, self.limit, self.now, count);
        next_permit_in(&log, self.limit, self.now).unwrap_or(Duration::ZERO)
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
