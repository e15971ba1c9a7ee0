//! Rate limits ([contract §16](tenure_lease_core::contract)): the
//! parameters of the schema's rate-log functions (migration 0013), and the
//! logs they answer, decoded as every backend decodes them.
//!
//! The server judges a limit and writes its uses in the statement that
//! admits or claims, with the rules of
//! [`rate_rules`] mirrored in SQL. What it answers
//! back (the log as it read it, when the crate needs it for a
//! `retry_after` or to say why it is damaged) goes through
//! [`rate_rules::stored_uses`], so a log the server refuses is `Corrupt`
//! for the same reasons on every backend.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row as _;
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{clock, Error, Result, Timestamp};

use crate::scope_locks::ScopeLocks;
use crate::statement::PgQuery;

/// Binds `limit` as the next six parameters of a rate-limited statement:
/// its log's lock key, its key, permits and period (whole milliseconds),
/// then the earliest and latest instants (microseconds since the epoch) a
/// log may hold, the range [`clock::from_micros`] accepts.
pub(crate) fn bind<'q>(
    query: PgQuery<'q>,
    locks: &ScopeLocks,
    limit: &'q RateLimit,
) -> PgQuery<'q> {
    query
        .bind(locks.rate_log_key(limit))
        .bind(limit.key.as_str())
        // Validated to at most `limits::MAX_RATE_PERMITS`.
        .bind(i32::try_from(limit.permits).unwrap_or(i32::MAX))
        .bind(rate_rules::period_millis(limit))
        .bind(clock::to_micros(DateTime::<Utc>::MIN_UTC))
        .bind(clock::to_micros(DateTime::<Utc>::MAX_UTC))
}

/// Binds no rate limit as the six parameters [`bind`] fills: all null
/// (for `admit_counted`, which takes a limit or none).
pub(crate) fn bind_none(query: PgQuery<'_>) -> PgQuery<'_> {
    query
        .bind(None::<i64>)
        .bind(None::<&str>)
        .bind(None::<i32>)
        .bind(None::<i64>)
        .bind(None::<i64>)
        .bind(None::<i64>)
}

/// The log `limit` names, as the server answered it in column `rate_uses`
/// of `row`.
///
/// # Errors
///
/// [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) when it
/// cannot be decoded.
pub(crate) fn stored_log(row: &PgRow, limit: &RateLimit) -> Result<Vec<Timestamp>> {
    decode(row, limit).map_err(|reason| corrupt(limit, &reason))
}

/// The error of the log `limit` names, which the server found damaged and
/// answered in column `rate_uses` of `row`.
pub(crate) fn damaged(row: &PgRow, limit: &RateLimit) -> Error {
    match decode(row, limit) {
        Err(reason) => corrupt(limit, &reason),
        Ok(_) => corrupt(
            limit,
            "the server refused it, yet it decodes: the schema's lock_rate_log \
             (migration 0013) and this version of the crate disagree",
        ),
    }
}

fn decode(row: &PgRow, limit: &RateLimit) -> std::result::Result<Vec<Timestamp>, String> {
    let uses: Option<Vec<Option<i64>>> = row
        .try_get("rate_uses")
        .map_err(|error| format!("it is no list of instants: {error}"))?;
    let uses = uses
        .ok_or("it is null")?
        .into_iter()
        .map(|used| used.ok_or("it holds a null use"))
        .collect::<std::result::Result<Vec<i64>, _>>()?;
    rate_rules::stored_uses(uses, limit)
}

fn corrupt(limit: &RateLimit, reason: &str) -> Error {
    Error::corrupt(format!(
        "stored rate log {:?} cannot be decoded: {reason}",
        rate_rules::log_name(limit)
    ))
}
