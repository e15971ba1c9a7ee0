//! The scans and retention, run on the connection thread inside their
//! transaction. (Admission, renewal, transitions and takeovers are the
//! shared [`engine`](tenure_lease_core::backend::engine)'s, over
//! [`Records`](crate::records::Records).)
//!
//! SQL only finds rows (using the indexes); the contract's decisions are
//! the shared rules', so this backend judges exactly as the reference
//! backend does.

use std::time::Duration;

use rusqlite::{params, Connection};
use tenure_lease_core::backend::rules;
use tenure_lease_core::clock::to_micros;
use tenure_lease_core::{ExpiredQuery, ExpiredScan, LeaseRecord, Result, SkippedRecord, Timestamp};

use crate::error::map_sqlite_error;
use crate::records::{self, decode_record, select_records, Undecodable};
use crate::schema::finished_statuses;

/// Unfinished records (active, or with a status nobody knows) whose expiry
/// is none, at most `?1`, or no instant at all (not an integer, or beyond
/// `?3`, the latest instant there is); created at or before `?2` when given
/// (or at no instant). Ordered as [`rules::expired_order`].
const LIST_EXPIRED: &str = select_records!(
    "INDEXED BY leases_unfinished_by_expiry WHERE l.status NOT IN ",
    finished_statuses!(),
    " AND (typeof(l.lease_expires_at) <> 'integer' OR l.lease_expires_at <= ?1",
    " OR l.lease_expires_at > ?3)",
    " AND (?2 IS NULL OR typeof(l.created_at) <> 'integer' OR l.created_at <= ?2",
    " OR l.created_at > ?3)",
    " ORDER BY l.lease_expires_at, l.id"
);

/// Every record naming scope `?1`, ordered as [`rules::newest_first`].
const LIST_BY_SCOPE: &str = select_records!(
    "JOIN lease_scopes named ON named.lease_id = l.id WHERE named.scope = ?1 ",
    "ORDER BY l.created_at DESC, l.fence DESC"
);

/// Unfinished records by id. Pinned to the partial index: without it SQLite
/// would rather walk every record in id order than sort the few active ones.
const LIST_ACTIVE: &str = select_records!(
    "INDEXED BY leases_unfinished_by_expiry WHERE l.status NOT IN ",
    finished_statuses!(),
    " ORDER BY l.id"
);

/// Interrupted and terminal records last updated at or before `?1`.
const PURGE: &str = concat!(
    "DELETE FROM leases WHERE status IN ",
    finished_statuses!(),
    " AND updated_at <= ?1"
);

/// How many records [`PURGE`] would delete with the same `?1`.
const COUNT_PURGEABLE: &str = concat!(
    "SELECT count(*) FROM leases WHERE status IN ",
    finished_statuses!(),
    " AND updated_at <= ?1"
);

/// Walks unfinished records (active, or with a status nobody knows) in
/// [`rules::expired_order`], those whose expiry cannot be an integer too, so
/// hand-edited rows are reported in `skipped` instead of silently missed.
/// The SQL bounds are a superset of [`rules::matches_expired`], which has the
/// last word on every decoded row.
pub(crate) fn list_expired(
    connection: &Connection,
    now: Timestamp,
    query: &ExpiredQuery,
) -> Result<ExpiredScan> {
    let mut statement = connection
        .prepare_cached(LIST_EXPIRED)
        .map_err(map_sqlite_error)?;
    let expired_before = to_micros(now).saturating_sub(micros(query.grace));
    let mut rows = statement
        .query(params![
            expired_before,
            query.created_before.map(to_micros),
            records::latest_micros()
        ])
        .map_err(map_sqlite_error)?;
    let mut scan = ExpiredScan::default();
    while scan.records.len() < query.limit {
        let Some(row) = rows.next().map_err(map_sqlite_error)? else {
            break;
        };
        match decode_record(row) {
            Ok(record) => {
                if rules::matches_expired(&record, query.grace, query.created_before, now) {
                    scan.records.push(record);
                }
            }
            Err(Undecodable { id, reason, .. }) => {
                tracing::warn!(
                    lease.id = %id,
                    %reason,
                    "list_expired skipped a stored lease it cannot decode; it needs an operator's attention"
                );
                scan.skipped.push(SkippedRecord { id, reason });
            }
        }
    }
    Ok(scan)
}

/// Newest first, as [`rules::newest_first`] orders them.
pub(crate) fn list_by_scope(connection: &Connection, scope: &str) -> Result<Vec<LeaseRecord>> {
    let statement = connection
        .prepare_cached(LIST_BY_SCOPE)
        .map_err(map_sqlite_error)?;
    collect_records(statement, [scope])
}

/// Active records by id. A row with an unknown status may be active, so it
/// makes the answer [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt)
/// rather than silently incomplete.
pub(crate) fn list_active(connection: &Connection) -> Result<Vec<LeaseRecord>> {
    let statement = connection
        .prepare_cached(LIST_ACTIVE)
        .map_err(map_sqlite_error)?;
    collect_records(statement, [])
}

fn collect_records<P: rusqlite::Params>(
    mut statement: rusqlite::CachedStatement<'_>,
    parameters: P,
) -> Result<Vec<LeaseRecord>> {
    let rows = statement
        .query_map(parameters, |row| Ok(decode_record(row)))
        .map_err(map_sqlite_error)?;
    let mut records = Vec::new();
    for row in rows {
        records.push(
            row.map_err(map_sqlite_error)?
                .map_err(Undecodable::into_error)?,
        );
    }
    Ok(records)
}

/// Deletes what [`rules::purgeable`] allows: interrupted and terminal
/// records whose `updated_at + older_than <= now`. Their scope rows go with them (foreign
/// key cascade); the fence counter is untouched. Rate logs that stopped
/// counting go too, uncounted.
pub(crate) fn purge(connection: &Connection, now: Timestamp, older_than: Duration) -> Result<u64> {
    crate::rate_logs::purge_ended(connection, now)?;
    delete_finished_before(connection, PURGE, now, older_than)
}

/// How many records [`purge`] would delete at `now`.
pub(crate) fn count_purgeable(
    connection: &Connection,
    now: Timestamp,
    older_than: Duration,
) -> Result<u64> {
    let count: i64 = connection
        .prepare_cached(COUNT_PURGEABLE)
        .map_err(map_sqlite_error)?
        .query_row([finished_cutoff(now, older_than)], |row| row.get(0))
        .map_err(map_sqlite_error)?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Runs `delete` (a `DELETE` whose `?1` is the latest `updated_at` to go)
/// with the cutoff `now - older_than`; answers how many rows went. Shared by
/// lease and job retention.
pub(crate) fn delete_finished_before(
    connection: &Connection,
    delete: &str,
    now: Timestamp,
    older_than: Duration,
) -> Result<u64> {
    let deleted = connection
        .prepare_cached(delete)
        .map_err(map_sqlite_error)?
        .execute([finished_cutoff(now, older_than)])
        .map_err(map_sqlite_error)?;
    Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
}

/// The latest `updated_at`, in microseconds, a row finished `older_than`
/// before `now` may have: rounded up, so a sub-microsecond retention never
/// purges early.
pub(crate) fn finished_cutoff(now: Timestamp, older_than: Duration) -> i64 {
    let older_than = tenure_lease_core::clock::micros_rounded_up(older_than);
    to_micros(now).saturating_sub(older_than)
}

/// Whole microseconds, rounded down: bounds computed with it include every
/// row the exact comparison would.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::SqliteConfig;
    use crate::records::LOAD;

    /// The plan SQLite picks for `sql`, one detail per line.
    pub(crate) fn plan(connection: &Connection, sql: &str) -> String {
        let mut statement = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("explain");
        let nulls = vec![rusqlite::types::Null; statement.parameter_count()];
        let details: Vec<String> = statement
            .query_map(rusqlite::params_from_iter(nulls), |row| {
                row.get::<_, String>(3)
            })
            .expect("plan rows")
            .collect::<rusqlite::Result<_>>()
            .expect("plan details");
        details.join("\n")
    }

    /// Asserts that each statement's plan contains its expected detail and,
    /// for those in `in_order`, sorts nothing (it walks its index in order
    /// and can stop at its limit).
    pub(crate) fn assert_plans(expectations: &[(&str, &str)], in_order: &[&str]) {
        let directory = tempfile::TempDir::new().expect("a temporary directory");
        let connection = crate::schema::open(&SqliteConfig::new(directory.path().join("plan.db")))
            .expect("open");
        for &(sql, expected) in expectations {
            let plan = plan(&connection, sql);
            assert!(
                plan.contains(expected),
                "{sql}\nplan:\n{plan}\nlacks {expected:?}"
            );
        }
        for sql in in_order {
            let plan = plan(&connection, sql);
            assert!(
                !plan.contains("TEMP B-TREE"),
                "{sql} walks its index in order and can stop early\nplan:\n{plan}"
            );
        }
    }

    #[test]
    fn every_query_uses_its_index() {
        let expectations = [
            (LOAD, "USING INDEX sqlite_autoindex_leases_1 (id=?)"),
            (LOAD, "SEARCH s USING PRIMARY KEY (lease_id=?)"),
            (LIST_EXPIRED, "USING INDEX leases_unfinished_by_expiry"),
            (LIST_ACTIVE, "USING INDEX leases_unfinished_by_expiry"),
            (LIST_BY_SCOPE, "lease_scopes_by_scope (scope=?)"),
            (
                PURGE,
                "USING INDEX leases_finished_by_update (updated_at<?)",
            ),
            (
                COUNT_PURGEABLE,
                "USING INDEX leases_finished_by_update (updated_at<?)",
            ),
        ];
        assert_plans(&expectations, &[LIST_EXPIRED]);
    }
}
