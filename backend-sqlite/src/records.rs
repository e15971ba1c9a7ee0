//! Lease records to and from rows: decoding, and the statements that read
//! and write single records inside an operation's transaction.
//!
//! A record is read with one statement: its `leases` row plus its scopes
//! aggregated as a JSON array, so every read sees one consistent snapshot.
//! Its slots in counted scopes are a column of that row, a JSON object
//! (`NULL` when it has none), and the index of what active records hold,
//! `held_scopes`, is by slot key ([`rules::held_keys`]).
//! Decoding never panics: a value written by hand (an unknown status, a
//! timestamp that is not an integer) becomes an [`Undecodable`] naming the
//! record and the column.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::types::FromSql;
use rusqlite::{params, Connection, OptionalExtension, Row};
use tenure_lease_core::backend::engine::RecordTransaction;
use tenure_lease_core::backend::{rules, stored};
use tenure_lease_core::clock::{from_micros, to_micros};
use tenure_lease_core::{Error, LeaseRecord, Result, Status, Timestamp};

use crate::error::map_sqlite_error;

/// `SELECT` of whole records (table alias `l`), followed by the given
/// clauses; columns in the order [`decode_record`] reads them.
macro_rules! select_records {
    ($($clause:expr),* $(,)?) => {
        concat!(
            "SELECT l.id, l.kind, l.status, l.owner, l.fence, l.lease_expires_at, \
             l.created_at, l.updated_at, l.error, l.stop_reason, l.metadata, \
             (SELECT json_group_array(CASE typeof(s.scope) WHEN 'text' THEN s.scope END) \
              FROM lease_scopes s WHERE s.lease_id = l.id), l.progress, l.slots \
             FROM leases l ",
            $($clause),*
        )
    };
}
pub(crate) use select_records;

/// The record with id `?1`.
pub(crate) const LOAD: &str = select_records!("WHERE l.id = ?1");

/// A stored lease or job that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Undecodable {
    /// What it is: `"lease"` or `"job"`.
    pub(crate) item: &'static str,
    /// Its id, as far as it could be read.
    pub(crate) id: String,
    /// Which column was wrong, and how.
    pub(crate) reason: String,
}

impl Undecodable {
    /// The [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) error of
    /// an operation that needed this row.
    pub(crate) fn into_error(self) -> Error {
        Error::corrupt(format!(
            "stored {} {:?} cannot be decoded ({}); it needs an operator's attention",
            self.item, self.id, self.reason
        ))
    }
}

/// Decodes a row whose first column is the id with `decode_fields`, naming
/// the row as an `item` (`"lease"`, `"job"`) when it cannot be decoded.
pub(crate) fn decode_row<T>(
    row: &Row<'_>,
    item: &'static str,
    decode_fields: impl FnOnce(&Row<'_>) -> Result<T, String>,
) -> Result<T, Undecodable> {
    decode_fields(row).map_err(|reason| Undecodable {
        item,
        id: row
            .get_ref(0)
            .ok()
            .and_then(|value| value.as_str().ok())
            .unwrap_or("<unreadable id>")
            .to_owned(),
        reason,
    })
}

/// Decodes a row selected by [`select_records!`].
pub(crate) fn decode_record(row: &Row<'_>) -> Result<LeaseRecord, Undecodable> {
    decode_row(row, "lease", decode_fields)
}

fn decode_fields(row: &Row<'_>) -> Result<LeaseRecord, String> {
    let status: String = column(row, 2, "status")?;
    let fence: i64 = column(row, 4, "fence")?;
    let metadata: String = column(row, 10, "metadata")?;
    let scopes: String = column(row, 11, "scopes")?;
    let scopes = serde_json::from_str::<BTreeSet<String>>(&scopes)
        .map_err(|error| format!("scopes: not a JSON array of strings: {error}"))?;
    let slots = slots_column(row, 13, &scopes)?;
    Ok(LeaseRecord {
        id: column(row, 0, "id")?,
        kind: column(row, 1, "kind")?,
        status: status
            .parse::<Status>()
            .map_err(|error| format!("column status: {}", error.message()))?,
        owner: column(row, 3, "owner")?,
        fence: u64::try_from(fence).map_err(|_| format!("column fence: {fence} is negative"))?,
        lease_expires_at: column::<Option<i64>>(row, 5, "lease_expires_at")?
            .map(|micros| timestamp(micros, "lease_expires_at"))
            .transpose()?,
        created_at: timestamp(column(row, 6, "created_at")?, "created_at")?,
        updated_at: timestamp(column(row, 7, "updated_at")?, "updated_at")?,
        error: column(row, 8, "error")?,
        stop_reason: column(row, 9, "stop_reason")?,
        metadata: serde_json::from_str(&metadata)
            .map_err(|error| format!("column metadata: not a JSON object: {error}"))?,
        scopes,
        slots,
        progress: progress_column(row, 12)?,
    })
}

/// The progress column at `index`: `NULL`, or JSON text.
pub(crate) fn progress_column(
    row: &Row<'_>,
    index: usize,
) -> Result<Option<serde_json::Value>, String> {
    column::<Option<String>>(row, index, "progress")?
        .map(|text| match serde_json::from_str(&text) {
            Ok(serde_json::Value::Null) => Err(NULL_PROGRESS.to_owned()),
            Ok(progress) => Ok(progress),
            Err(error) => Err(format!("column progress: not JSON: {error}")),
        })
        .transpose()
}

/// The slots column at `index` of a record naming `scopes`: `NULL` (no
/// counted scope), or a JSON object from each counted scope to the slot
/// held there ([`stored::check_slots`]).
fn slots_column(
    row: &Row<'_>,
    index: usize,
    scopes: &BTreeSet<String>,
) -> Result<BTreeMap<String, u32>, String> {
    let Some(text) = column::<Option<String>>(row, index, "slots")? else {
        return Ok(BTreeMap::new());
    };
    let slots = serde_json::from_str::<BTreeMap<String, u32>>(&text).map_err(|error| {
        format!("column slots: not a JSON object of slot numbers from 0 to 2^32 - 1: {error}")
    })?;
    stored::check_slots(scopes, &slots).map_err(|why| format!("column {why}"))?;
    Ok(slots)
}

/// The slots column of `record`: `NULL` when it holds no counted scope.
fn slots_text(record: &LeaseRecord) -> Result<Option<String>> {
    if record.slots.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(&record.slots)
        .map(Some)
        .map_err(|error| {
            Error::corrupt(format!(
                "cannot encode the slots of {:?}: {error}",
                record.id
            ))
        })
}

/// Why a stored `null` progress is damage: no write stores one (a report
/// refuses `null`; no report leaves the column `NULL`).
const NULL_PROGRESS: &str = "column progress: a JSON null, which no write stores";

/// Progress as the progress column keeps it.
pub(crate) fn progress_text(progress: Option<&serde_json::Value>) -> Option<String> {
    progress.map(serde_json::Value::to_string)
}

/// Column `index` (called `name` in the reason) of a row being decoded.
pub(crate) fn column<T: FromSql>(row: &Row<'_>, index: usize, name: &str) -> Result<T, String> {
    row.get(index)
        .map_err(|error| format!("column {name}: {error}"))
}

/// A timestamp column's microseconds as a [`Timestamp`].
pub(crate) fn timestamp(micros: i64, name: &str) -> Result<Timestamp, String> {
    from_micros(micros)
        .ok_or_else(|| format!("column {name}: {micros} microseconds is out of range"))
}

/// The latest instant a [`Timestamp`] can hold, in microseconds: scans let
/// integers beyond it through their SQL bounds, so that such a row is
/// decoded and reported rather than silently never seen.
pub(crate) fn latest_micros() -> i64 {
    to_micros(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// A fence as SQLite stores it; `item` and `id` name its owner in the error.
pub(crate) fn fence_value(fence: u64, item: &str, id: &str) -> Result<i64> {
    i64::try_from(fence).map_err(|_| {
        Error::corrupt(format!(
            "fence {fence} of {item} {id:?} does not fit SQLite's integers"
        ))
    })
}

fn metadata_text(record: &LeaseRecord) -> Result<String> {
    serde_json::to_string(&record.metadata).map_err(|error| Error::invalid_input("metadata", error))
}

/// The record with this id, if any; [`ErrorKind::Corrupt`] when it cannot
/// be decoded.
///
/// [`ErrorKind::Corrupt`]: tenure_lease_core::ErrorKind::Corrupt
pub(crate) fn load(connection: &Connection, id: &str) -> Result<Option<LeaseRecord>> {
    let mut statement = connection.prepare_cached(LOAD).map_err(map_sqlite_error)?;
    statement
        .query_row([id], |row| Ok(decode_record(row)))
        .optional()
        .map_err(map_sqlite_error)?
        .transpose()
        .map_err(Undecodable::into_error)
}

/// Whether a record with this id exists, decodable or not.
pub(crate) fn exists(connection: &Connection, id: &str) -> Result<bool> {
    let mut statement = connection
        .prepare_cached("SELECT 1 FROM leases WHERE id = ?1")
        .map_err(map_sqlite_error)?;
    statement.exists([id]).map_err(map_sqlite_error)
}

/// The id of the active record holding `key` (a scope's slot key,
/// [`rules::slot_key`]), if any; [`ErrorKind::Corrupt`] when the stored id
/// is not text.
///
/// [`ErrorKind::Corrupt`]: tenure_lease_core::ErrorKind::Corrupt
pub(crate) fn holder_of(connection: &Connection, key: &str) -> Result<Option<String>> {
    let mut statement = connection
        .prepare_cached("SELECT lease_id FROM held_scopes WHERE scope = ?1")
        .map_err(map_sqlite_error)?;
    statement
        .query_row([key], |row| Ok(column::<String>(row, 0, "lease_id")))
        .optional()
        .map_err(map_sqlite_error)?
        .transpose()
        .map_err(|reason| {
            Error::corrupt(format!(
                "the stored holder of scope key {key:?} in held_scopes cannot be decoded \
                 ({reason}); it needs an operator's attention"
            ))
        })
}

/// Largest value `fence_counter` may hold before a draw: the next fence
/// must still fit SQLite's integers.
const LAST_DRAWABLE_FENCE: i64 = i64::MAX - 1;

/// Draws the next value of the store-wide fence sequence.
///
/// Only a counter holding an integer from 0 to [`LAST_DRAWABLE_FENCE`] is
/// drawn from: SQLite would turn text into 0 (restarting the sequence) and
/// overflow into a float. Any other value is [`ErrorKind::Corrupt`], and the
/// counter is left as it is.
///
/// [`ErrorKind::Corrupt`]: tenure_lease_core::ErrorKind::Corrupt
pub(crate) fn next_fence(connection: &Connection) -> Result<u64> {
    let mut statement = connection
        .prepare_cached(
            "UPDATE fence_counter SET last_fence = last_fence + 1 \
             WHERE singleton = 1 AND typeof(last_fence) = 'integer' \
             AND last_fence BETWEEN 0 AND ?1 \
             RETURNING last_fence",
        )
        .map_err(map_sqlite_error)?;
    let fence: Option<i64> = statement
        .query_row([LAST_DRAWABLE_FENCE], |row| row.get(0))
        .optional()
        .map_err(map_sqlite_error)?;
    match fence.map(u64::try_from) {
        Some(Ok(fence)) => Ok(fence),
        Some(Err(_)) | None => Err(damaged_fence_counter(connection)),
    }
}

/// Why [`next_fence`] could not draw: the counter row is missing, or holds
/// something that is not a drawable fence.
fn damaged_fence_counter(connection: &Connection) -> Error {
    let stored: rusqlite::Result<Option<(String, String)>> = connection
        .query_row(
            "SELECT typeof(last_fence), quote(last_fence) FROM fence_counter WHERE singleton = 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional();
    match stored {
        Ok(None) => Error::corrupt(
            "the fence counter row is missing; restore it (fence_counter.last_fence at least \
             the largest fence in leases and jobs) before the store hands out fences again",
        ),
        Ok(Some((kind, value))) => Error::corrupt(format!(
            "the fence counter holds {value} ({kind}), not an integer from 0 to \
             {LAST_DRAWABLE_FENCE}; restore fence_counter.last_fence to at least the largest \
             fence in leases and jobs"
        )),
        Err(error) => map_sqlite_error(error),
    }
}

/// Inserts a new record with its scopes and slots; an active one also takes
/// its keys ([`rules::held_keys`]: each scope's, or its slot's) in
/// `held_scopes`, whose primary key refuses a second active holder.
pub(crate) fn insert(connection: &Connection, record: &LeaseRecord) -> Result<()> {
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO leases (id, kind, status, owner, fence, lease_expires_at, created_at, \
             updated_at, error, stop_reason, metadata, progress, slots) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )
        .map_err(map_sqlite_error)?;
    statement
        .execute(params![
            record.id,
            record.kind,
            record.status.as_str(),
            record.owner,
            fence_value(record.fence, "lease", &record.id)?,
            record.lease_expires_at.map(to_micros),
            to_micros(record.created_at),
            to_micros(record.updated_at),
            record.error,
            record.stop_reason,
            metadata_text(record)?,
            progress_text(record.progress.as_ref()),
            slots_text(record)?,
        ])
        .map_err(map_sqlite_error)?;
    let mut named = connection
        .prepare_cached("INSERT INTO lease_scopes (lease_id, scope) VALUES (?1, ?2)")
        .map_err(map_sqlite_error)?;
    let mut held = connection
        .prepare_cached("INSERT INTO held_scopes (scope, lease_id) VALUES (?1, ?2)")
        .map_err(map_sqlite_error)?;
    for (scope, key) in record.scopes.iter().zip(rules::held_keys(record)) {
        named
            .execute(params![record.id, scope])
            .map_err(map_sqlite_error)?;
        if record.is_active() {
            held.execute(params![key, record.id])
                .map_err(map_sqlite_error)?;
        }
    }
    Ok(())
}

/// Writes back every field an operation may change (never the slots: a
/// record keeps its slots through renewals and takeovers), and releases
/// the record's keys once it is no longer active.
pub(crate) fn save(connection: &Connection, record: &LeaseRecord) -> Result<()> {
    let mut statement = connection
        .prepare_cached(
            "UPDATE leases SET status = ?2, owner = ?3, fence = ?4, lease_expires_at = ?5, \
             updated_at = ?6, error = ?7, stop_reason = ?8, progress = ?9 WHERE id = ?1",
        )
        .map_err(map_sqlite_error)?;
    statement
        .execute(params![
            record.id,
            record.status.as_str(),
            record.owner,
            fence_value(record.fence, "lease", &record.id)?,
            record.lease_expires_at.map(to_micros),
            to_micros(record.updated_at),
            record.error,
            record.stop_reason,
            progress_text(record.progress.as_ref()),
        ])
        .map_err(map_sqlite_error)?;
    if !record.is_active() {
        let mut release = connection
            .prepare_cached("DELETE FROM held_scopes WHERE lease_id = ?1")
            .map_err(map_sqlite_error)?;
        release.execute([&record.id]).map_err(map_sqlite_error)?;
    }
    Ok(())
}

/// The engine's view of the records, on a connection inside a write
/// transaction.
pub(crate) struct Records<'a>(pub(crate) &'a Connection);

impl RecordTransaction for Records<'_> {
    fn exists(&mut self, id: &str) -> Result<bool> {
        exists(self.0, id)
    }

    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        load(self.0, id)
    }

    fn holder_of(&mut self, key: &str) -> Result<Option<String>> {
        holder_of(self.0, key)
    }

    fn next_fence(&mut self) -> Result<u64> {
        next_fence(self.0)
    }

    fn insert(&mut self, record: &LeaseRecord) -> Result<()> {
        insert(self.0, record)
    }

    fn save(&mut self, record: &LeaseRecord) -> Result<()> {
        save(self.0, record)
    }
}
