//! Rate logs in `tenure_rate_logs`: one row per log (a limit's key,
//! permits and period), its uses as JSON text
//! ([`encode_uses`](rate_rules::encode_uses)) beside `ends_at`, when the
//! last of them stops counting.
//!
//! An operation with a rate limit locks its log first, before any other
//! row: the row is upserted (a log never used yet as an empty one, which
//! the rollback of an operation that spends nothing removes), then read
//! `FOR UPDATE`. Operations on one log are so judged one after the other,
//! at every isolation level; and since no transaction waits for a log while
//! holding another row, a log's lock closes no deadlock cycle.

use sqlx::mysql::MySqlArguments;
use sqlx::{Arguments, MySql, Row, Transaction};
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::clock::to_micros;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{Error, Result, Timestamp};

use crate::error::{store_error, Conflict};
use crate::rows::undecodable;
use crate::runner::{upsert_to_lock, BindResult, NOW_MICROS};

/// The columns naming a log, in its primary key's order.
const LOG_KEY: &str = "rate_key = ? AND permits = ? AND period_ms = ?";

/// Arguments binding `limit`'s log key, then `more`.
fn log_key(
    limit: &RateLimit,
    more: impl FnOnce(&mut MySqlArguments) -> BindResult,
) -> Result<MySqlArguments> {
    let mut arguments = MySqlArguments::default();
    arguments
        .add(limit.key.as_bytes())
        .and_then(|()| arguments.add(limit.permits))
        .and_then(|()| arguments.add(rate_rules::period_millis(limit)))
        .and_then(|()| more(&mut arguments))
        .map_err(|error| Error::unavailable(format!("cannot bind a rate log's key: {error}")))?;
    Ok(arguments)
}

/// Locks `limit`'s log (upserted, then read `FOR UPDATE`) and answers its
/// `uses` as stored.
pub(crate) async fn lock(
    tx: &mut Transaction<'_, MySql>,
    limit: &RateLimit,
) -> std::result::Result<Vec<u8>, Conflict> {
    upsert_to_lock(
        tx,
        (
            "tenure_rate_logs",
            "rate_key, permits, period_ms, uses, ends_at",
            "(?, ?, ?, '[]', 0)",
        ),
        1,
        log_key(limit, |_| Ok(()))?,
    )
    .await?;
    let row = sqlx::query_with(
        &format!("SELECT uses FROM tenure_rate_logs WHERE {LOG_KEY} FOR UPDATE"),
        log_key(limit, |_| Ok(()))?,
    )
    .fetch_one(&mut **tx)
    .await?;
    Ok(row.try_get(0).map_err(store_error)?)
}

/// The uses of `limit`'s log, stored as `uses`.
///
/// # Errors
///
/// `Corrupt` when they cannot be decoded
/// ([`decode_uses`](rate_rules::decode_uses)).
pub(crate) fn decode(limit: &RateLimit, uses: &[u8]) -> Result<Vec<Timestamp>> {
    let name = rate_rules::log_name(limit);
    let text = std::str::from_utf8(uses)
        .map_err(|error| undecodable("rate log", &name, &format!("not UTF-8: {error}")))?;
    rate_rules::decode_uses(text, limit).map_err(|why| undecodable("rate log", &name, &why))
}

/// Writes `uses` as `limit`'s log, over the row [`lock`] locked.
pub(crate) async fn save(
    tx: &mut Transaction<'_, MySql>,
    limit: &RateLimit,
    uses: &[Timestamp],
) -> std::result::Result<(), Conflict> {
    let ends_at = rate_rules::log_ends_at(uses, limit).map_or(0, to_micros);
    let arguments = log_key(limit, |arguments| {
        arguments.add(rate_rules::encode_uses(uses).into_bytes())?;
        arguments.add(ends_at)
    })?;
    sqlx::query_with(
        "INSERT INTO tenure_rate_logs (rate_key, permits, period_ms, uses, ends_at) \
         VALUES (?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE uses = VALUES(uses), ends_at = VALUES(ends_at)",
        arguments,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Deletes the logs whose uses all stopped counting (`ends_at` passed, by
/// the server's clock), in a statement of its own: it locks nothing but
/// logs, so it closes no deadlock cycle either.
///
/// # Errors
///
/// The server's errors.
pub(crate) async fn delete_dead(pool: &sqlx::MySqlPool) -> Result<()> {
    sqlx::query(&format!(
        "DELETE FROM tenure_rate_logs WHERE ends_at <= {NOW_MICROS}"
    ))
    .execute(pool)
    .await
    .map_err(store_error)?;
    Ok(())
}
