//! Fence gates in the store's file: [`GateBackend`] for [`SqliteStore`], and
//! [`FenceTable`], the same check inside a transaction of the caller's.
//!
//! Both run [`CHECK_FENCE`], one conditional upsert that raises the gate and
//! answers the highest fence in the same statement, so the store's own
//! transaction and the caller's hold exactly the same rule.
//!
//! A listing is one range of the primary key ([`LIST_FENCES`],
//! [`LIST_FENCES_AFTER`]): the resource column compares with SQLite's
//! `BINARY` collation, byte by byte, the order Rust gives names.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};
use tenure_lease_core::backend::checked::{fence_check, Checked};
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::clock::{from_micros, micros_rounded_up, to_micros};
use tenure_lease_core::{Clock, Error, FenceCheck, GateRecord, Result, Timestamp};

use crate::error::map_sqlite_error;
use crate::SqliteStore;

/// Raises the gate of resource `?1` to fence `?2` at `?3` (microseconds)
/// unless it holds a higher fence, and answers the gate's fence after the
/// statement: `?2` when accepted, the higher fence when refused (a refusal
/// rewrites the row unchanged, so the answer and the refusal are one atomic
/// step). A stored fence that is not a positive integer is left as it is and
/// answers no row.
const CHECK_FENCE: &str =
    "INSERT INTO fence_gates (resource, fence, checked_at) VALUES (?1, ?2, ?3)
     ON CONFLICT (resource) DO UPDATE SET
         fence = max(fence_gates.fence, excluded.fence),
         checked_at = CASE WHEN fence_gates.fence <= excluded.fence
             THEN excluded.checked_at ELSE fence_gates.checked_at END
     WHERE typeof(fence_gates.fence) = 'integer' AND fence_gates.fence > 0
     RETURNING fence";

/// The fence of resource `?1`'s gate.
const HIGHEST_FENCE: &str = "SELECT fence FROM fence_gates WHERE resource = ?1";

/// Gates last accepted at or before `?1` (microseconds).
const PURGE_FENCES: &str = "DELETE FROM fence_gates WHERE checked_at <= ?1";

/// The first `?1` gates by resource (`BINARY`: byte order), columns in the
/// order [`decode_gate`] reads them.
const LIST_FENCES: &str =
    "SELECT resource, fence, checked_at FROM fence_gates ORDER BY resource LIMIT ?1";

/// The first `?2` gates whose resource sorts after `?1`, as [`LIST_FENCES`]:
/// a range of the primary key. (One statement with `?1 IS NULL OR` would
/// walk the table from its first gate.)
const LIST_FENCES_AFTER: &str = "SELECT resource, fence, checked_at FROM fence_gates
     WHERE resource > ?1 ORDER BY resource LIMIT ?2";

/// Runs [`CHECK_FENCE`] on `connection` at `now`; input already validated.
fn check(
    connection: &Connection,
    now: Timestamp,
    resource: &str,
    fence: u64,
) -> Result<FenceCheck> {
    let presented = i64::try_from(fence)
        .map_err(|_| Error::invalid_input("fence", "beyond SQLite's integers"))?;
    let mut statement = connection
        .prepare_cached(CHECK_FENCE)
        .map_err(map_sqlite_error)?;
    let stored = statement
        .query_row(params![resource, presented, to_micros(now)], |row| {
            Ok(decode_fence(row.get_ref(0)?, resource))
        })
        .optional()
        .map_err(map_sqlite_error)?
        .ok_or_else(|| {
            gate_rules::undecodable_gate(resource, "the fence is not a positive integer")
        })??;
    gate_rules::judge_stored(resource, stored, fence)
}

/// A stored fence, checked: an integer ([`gate_rules::stored_gate_fence`]).
fn decode_fence(value: ValueRef<'_>, resource: &str) -> Result<u64> {
    let ValueRef::Integer(fence) = value else {
        return Err(gate_rules::undecodable_gate(
            resource,
            "the fence is not an integer",
        ));
    };
    gate_rules::stored_gate_fence(resource, fence)
}

/// A row of [`LIST_FENCES`] as a [`GateRecord`]; a gate that cannot be
/// decoded is `Corrupt` as [`highest_fence`](GateBackend::highest_fence)
/// answers it (a resource that is not UTF-8 text is named as far as it
/// reads).
fn decode_gate(row: &rusqlite::Row<'_>) -> Result<GateRecord> {
    let resource = match row.get_ref(0).map_err(map_sqlite_error)? {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .map_err(|_| {
                gate_rules::undecodable_gate(
                    &String::from_utf8_lossy(bytes),
                    "the resource is not UTF-8",
                )
            })?
            .to_owned(),
        ValueRef::Blob(bytes) => {
            return Err(gate_rules::undecodable_gate(
                &String::from_utf8_lossy(bytes),
                "the resource is not text",
            ))
        }
        _ => {
            return Err(gate_rules::undecodable_gate(
                "<unreadable resource>",
                "the resource is not text",
            ))
        }
    };
    let fence = decode_fence(row.get_ref(1).map_err(map_sqlite_error)?, &resource)?;
    let ValueRef::Integer(micros) = row.get_ref(2).map_err(map_sqlite_error)? else {
        return Err(gate_rules::undecodable_gate(
            &resource,
            "the check time is not an integer",
        ));
    };
    let checked_at = from_micros(micros).ok_or_else(|| {
        gate_rules::undecodable_gate(
            &resource,
            &format!("the check time, {micros} microseconds, is out of range"),
        )
    })?;
    Ok(GateRecord::new(resource, fence, checked_at))
}

/// Runs [`LIST_FENCES`], or [`LIST_FENCES_AFTER`] when `after` is given,
/// on `connection`; input already validated.
fn list(connection: &Connection, after: Option<&str>, limit: usize) -> Result<Vec<GateRecord>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = if after.is_some() {
        LIST_FENCES_AFTER
    } else {
        LIST_FENCES
    };
    let mut statement = connection.prepare_cached(sql).map_err(map_sqlite_error)?;
    let mut rows = match after {
        Some(after) => statement.query(params![after, limit]),
        None => statement.query(params![limit]),
    }
    .map_err(map_sqlite_error)?;
    let mut gates = Vec::new();
    while let Some(row) = rows.next().map_err(map_sqlite_error)? {
        gates.push(decode_gate(row)?);
    }
    Ok(gates)
}

#[async_trait]
impl GateBackend for SqliteStore {
    async fn check_fence(
        &self,
        resource: Checked<&str>,
        fence: Checked<u64>,
    ) -> Result<FenceCheck> {
        let (resource, fence) = (resource.get(), fence.get());
        let resource = resource.to_owned();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| check(transaction, now, &resource, fence))
            })
            .await
    }

    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>> {
        let resource = resource.get().to_owned();
        self.connection
            .run(move |session| {
                session.read(|connection, _| {
                    let mut statement = connection
                        .prepare_cached(HIGHEST_FENCE)
                        .map_err(map_sqlite_error)?;
                    statement
                        .query_row([&resource], |row| {
                            Ok(decode_fence(row.get_ref(0)?, &resource))
                        })
                        .optional()
                        .map_err(map_sqlite_error)?
                        .transpose()
                })
            })
            .await
    }

    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64> {
        let unused_for = unused_for.get();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    let cutoff = to_micros(now).saturating_sub(micros_rounded_up(unused_for));
                    let purged = transaction
                        .prepare_cached(PURGE_FENCES)
                        .and_then(|mut statement| statement.execute([cutoff]))
                        .map_err(map_sqlite_error)?;
                    Ok(purged as u64)
                })
            })
            .await
    }

    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<GateRecord>> {
        let after = after.map(|after| after.get().to_owned());
        let limit = limit.get();
        self.connection
            .run(move |session| {
                session.read(|connection, _| list(connection, after.as_deref(), limit))
            })
            .await
    }
}

/// The store's fence gates, checked on a connection of the caller's: inside
/// the caller's own transaction, so the guarded write and the gate commit
/// (or roll back) together, and a stale owner's write is refused by the
/// database itself. Get it with [`SqliteStore::fence_table`].
///
/// The connection must be open on the store's file (its
/// [`path`](SqliteStore::path)), after the store opened it at least once
/// (which creates the [`TABLE`](Self::TABLE)). Run the check first in the
/// transaction, then the write, then commit:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tenure_backend_sqlite::rusqlite::{Connection, TransactionBehavior};
/// use tenure_backend_sqlite::SqliteStore;
/// use tenure_lease_core::{FenceCheck, FenceStore};
///
/// let directory = tempfile::tempdir()?;
/// let store = SqliteStore::connect(directory.path().join("app.db")).await?;
/// let gates = store.fence_table();
///
/// let mut connection = Connection::open(store.path())?;
/// connection.execute_batch("CREATE TABLE IF NOT EXISTS invoices (id INTEGER PRIMARY KEY, total INTEGER)")?;
/// let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
/// match gates.check(&transaction, "invoices", 7)? {
///     FenceCheck::Accepted => {
///         transaction.execute("INSERT INTO invoices (total) VALUES (100)", [])?;
///         transaction.commit()?;
///     }
///     refused => return Err(format!("not written: {refused:?}").into()),
/// }
/// assert_eq!(store.highest_fence("invoices").await?, Some(7));
/// # Ok(()) }
/// ```
///
/// Begin the transaction `IMMEDIATE` (as above): the check writes, and a
/// deferred transaction that read first may then find another writer
/// holding the file (`SQLITE_BUSY`). A refused check changes nothing the
/// caller's transaction would commit but the gate row rewritten unchanged;
/// roll back, or leave the transaction to be dropped.
#[derive(Clone)]
pub struct FenceTable {
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for FenceTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceTable")
            .field("table", &Self::TABLE)
            .finish_non_exhaustive()
    }
}

impl FenceTable {
    /// The table of the store's file that keeps the gates: `resource TEXT
    /// PRIMARY KEY`, `fence INTEGER` (the highest accepted), `checked_at
    /// INTEGER` (microseconds since the epoch, by the store's clock, of the
    /// last accepted check). Read it freely; write it only through the
    /// checks.
    pub const TABLE: &'static str = "fence_gates";

    /// [`FenceStore::check_fence`](tenure_lease_core::FenceStore::check_fence)
    /// on `connection`, in whatever transaction it has open (a [`rusqlite::Transaction`] derefs to the
    /// [`Connection`] this takes): the gate is raised only if that
    /// transaction commits. Stamped with the store's clock.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](tenure_lease_core::ErrorKind::InvalidInput),
    ///   as for `check_fence`, before touching the connection;
    /// * [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) when
    ///   the stored gate cannot be decoded (nothing written over it);
    /// * [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable)
    ///   when the statement failed: the file is locked by another writer
    ///   beyond the connection's busy timeout (retryable), or the connection
    ///   is not on a store's file (no `fence_gates` table).
    ///
    /// After an error, roll the transaction back.
    pub fn check(&self, connection: &Connection, resource: &str, fence: u64) -> Result<FenceCheck> {
        let (resource, fence) = fence_check(resource, fence)?;
        check(connection, self.clock.now(), resource.get(), fence.get())
    }
}

impl SqliteStore {
    /// The store's fence gates, for checks inside transactions of the
    /// caller's on the same file ([`FenceTable`]).
    pub fn fence_table(&self) -> FenceTable {
        FenceTable {
            clock: Arc::clone(&self.clock),
        }
    }
}
