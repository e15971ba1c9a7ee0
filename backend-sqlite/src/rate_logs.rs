//! Rate logs ([contract §16](tenure_lease_core::contract)) in the
//! `rate_logs` table, one row per limit (key, permits, period): the uses as
//! a JSON array of microseconds ([`rate_rules::encode_uses`]) and when the
//! newest stops counting, for [`purge_ended`].

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};
use tenure_lease_core::backend::rate_rules::{self, RateLogs};
use tenure_lease_core::clock::{to_micros, Timestamp};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{Error, Result};

use crate::error::map_sqlite_error;
use crate::records::Records;

const SELECT_LOG: &str =
    "SELECT uses FROM rate_logs WHERE key = ?1 AND permits = ?2 AND period_ms = ?3";

const UPSERT_LOG: &str = "INSERT INTO rate_logs (key, permits, period_ms, uses, ends_at) \
     VALUES (?1, ?2, ?3, ?4, ?5) \
     ON CONFLICT (key, permits, period_ms) DO UPDATE SET uses = excluded.uses, ends_at = excluded.ends_at";

const DELETE_ENDED: &str = "DELETE FROM rate_logs WHERE ends_at <= ?1";

impl RateLogs for Records<'_> {
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        let stored: Option<std::result::Result<String, String>> = self
            .0
            .prepare_cached(SELECT_LOG)
            .map_err(map_sqlite_error)?
            .query_row(
                params![limit.key, limit.permits, rate_rules::period_millis(limit)],
                |row| Ok(stored_text(row.get_ref(0)?)),
            )
            .optional()
            .map_err(map_sqlite_error)?;
        match stored {
            None => Ok(Vec::new()),
            Some(text) => text
                .and_then(|text| rate_rules::decode_uses(&text, limit))
                .map_err(|reason| undecodable(limit, &reason)),
        }
    }

    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()> {
        let ends_at = rate_rules::log_ends_at(uses, limit).map(to_micros);
        self.0
            .prepare_cached(UPSERT_LOG)
            .map_err(map_sqlite_error)?
            .execute(params![
                limit.key,
                limit.permits,
                rate_rules::period_millis(limit),
                rate_rules::encode_uses(uses),
                ends_at,
            ])
            .map_err(map_sqlite_error)?;
        Ok(())
    }
}

/// The log's uses column as text, or why it is not (read by reference:
/// text that is not UTF-8 must be refused, not converted).
fn stored_text(value: ValueRef<'_>) -> std::result::Result<String, String> {
    match value {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|error| format!("uses are not UTF-8 text: {error}")),
        other => Err(format!("uses are {:?}, not text", other.data_type())),
    }
}

fn undecodable(limit: &RateLimit, reason: &str) -> Error {
    Error::corrupt(format!(
        "stored rate log {:?} cannot be decoded ({reason}); it needs an operator's attention",
        rate_rules::log_name(limit)
    ))
}

/// Deletes the logs whose uses all stopped counting at `now`.
pub(crate) fn purge_ended(connection: &Connection, now: Timestamp) -> Result<()> {
    connection
        .prepare_cached(DELETE_ENDED)
        .map_err(map_sqlite_error)?
        .execute([to_micros(now)])
        .map_err(map_sqlite_error)?;
    Ok(())
}
