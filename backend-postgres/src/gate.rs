//! Fence gates in the store's schema: [`GateBackend`] for [`PgStore`], and
//! [`PgStore::check_fence_in`], the same statement inside a transaction of
//! the caller's.
//!
//! The check is one statement: an upsert that raises the gate unless it
//! holds a higher fence and answers the gate's fence after it. A refusal
//! rewrites the row with its own values, so the refusal and the highest
//! fence it answers come from the same locked row version: a conditional
//! upsert that skipped the row (`DO UPDATE ... WHERE`) would have to read
//! the highest in a second statement, which under `READ COMMITTED` may see
//! a later fence, or no gate at all after a purge.
//!
//! A listing is one read of the primary key's index, from the first name
//! after `after` on: the key is `COLLATE "C"`, so its order is the byte
//! order of the names the contract lists in.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row;
use tenure_lease_core::backend::checked::{fence_check, Checked};
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::{Error, FenceCheck, GateRecord, Result};

use crate::decode;
use crate::error::store_error;
use crate::statement::PgQuery;
use crate::PgStore;

/// The gates' statements, schema-qualified.
#[derive(Debug)]
pub(crate) struct GateStatements {
    /// `$1` resource, `$2` fence → `fence`, the gate's fence after the
    /// statement: `$2` when accepted (stamped `statement_timestamp()`, not
    /// `now()`, so a check inside a long transaction of the caller's is
    /// stamped when it ran), the higher fence when refused (the row
    /// unchanged).
    check: String,
    /// [`check`](Self::check), the gate raised first to the floor of the
    /// server's WAL timeline: every fence drawn on an earlier timeline
    /// (before a promotion) is refused.
    check_on_timeline: String,
    /// `$1` resource → `fence`.
    highest: String,
    /// `$1` retention → `purged`, the count of deleted gates.
    purge: String,
    /// `$1` limit → `resource`, `fence`, `checked_at` of the first gates
    /// in byte order of their names.
    list: String,
    /// `$1` after, `$2` limit → [`list`](Self::list) of the gates whose
    /// names sort after `$1`. Its own statement, not `$1 IS NULL OR ...`
    /// in one, so that a generic plan still starts the index scan at `$1`.
    list_after: String,
}

impl GateStatements {
    pub(crate) fn new(s: &str) -> Self {
        let check = |raised: &str| {
            format!(
                "INSERT INTO {s}.fence_gates AS gate (resource, fence, checked_at) \
                 VALUES ($1, {raised}, statement_timestamp()) \
                 ON CONFLICT (resource) DO UPDATE SET \
                   fence = GREATEST(gate.fence, EXCLUDED.fence), \
                   checked_at = CASE WHEN gate.fence <= EXCLUDED.fence \
                     THEN EXCLUDED.checked_at ELSE gate.checked_at END \
                 RETURNING fence"
            )
        };
        GateStatements {
            check: check("$2"),
            // The timeline's floor is no fence of its own: the timeline's
            // first fence is one above it (migration 0008).
            check_on_timeline: check(&format!("GREATEST($2, {s}.timeline_floor())")),
            highest: format!("SELECT fence FROM {s}.fence_gates WHERE resource = $1"),
            purge: format!(
                "WITH purged AS (DELETE FROM {s}.fence_gates \
                   WHERE checked_at <= now() - $1::interval RETURNING 1) \
                 SELECT count(*) AS purged FROM purged"
            ),
            list: format!(
                "SELECT resource, fence, checked_at FROM {s}.fence_gates \
                 ORDER BY resource COLLATE \"C\" LIMIT $1"
            ),
            list_after: format!(
                "SELECT resource, fence, checked_at FROM {s}.fence_gates \
                 WHERE resource > $1 COLLATE \"C\" \
                 ORDER BY resource COLLATE \"C\" LIMIT $2"
            ),
        }
    }
}

impl PgStore {
    /// The check statement this store's gates run.
    fn gate_check(&self) -> &str {
        if self.gates_refuse_earlier_timelines {
            &self.sql.gates.check_on_timeline
        } else {
            &self.sql.gates.check
        }
    }
}

/// The check statement with its parameters bound; input already validated
/// (a gate fence fits a `bigint`).
fn check_query<'q>(sql: &'q str, resource: &'q str, fence: u64) -> PgQuery<'q> {
    sqlx::query(sql)
        .bind(resource)
        .bind(i64::try_from(fence).unwrap_or(i64::MAX))
}

/// The answer of the check statement's row to `fence`.
fn judged(row: Option<&PgRow>, resource: &str, fence: u64) -> Result<FenceCheck> {
    let row = row.ok_or_else(|| Error::corrupt("the fence check answered no row"))?;
    gate_rules::judge_stored(resource, decode_fence(row, resource)?, fence)
}

/// A stored gate's fence, checked ([`gate_rules::stored_gate_fence`]).
fn decode_fence(row: &PgRow, resource: &str) -> Result<u64> {
    gate_rules::stored_gate_fence(resource, row.try_get("fence").map_err(store_error)?)
}

/// A listed gate's row as a [`GateRecord`]: a fence or a stamp it cannot
/// hold is `Corrupt` naming the resource, as
/// [`highest_fence`](GateBackend::highest_fence) answers it.
fn listed_gate(row: &PgRow) -> Result<GateRecord> {
    let resource: String = row.try_get("resource").map_err(store_error)?;
    let fence = decode_fence(row, &resource)?;
    let checked_at = decode::instant(row, "checked_at").map_err(|error| {
        gate_rules::undecodable_gate(&resource, &format!("checked_at: {error}"))
    })?;
    Ok(GateRecord::new(resource, fence, checked_at))
}

impl PgStore {
    /// [`FenceStore::check_fence`](tenure_lease_core::FenceStore::check_fence)
    /// inside the caller's transaction on this store's database: pass `&mut *transaction` of a
    /// `sqlx::Transaction<'_, Postgres>` (or any connection). The gate is
    /// raised only if that transaction commits, so a write made in it after
    /// an `Accepted` check and the gate commit or roll back together, and a
    /// stale owner's write is refused by the database itself.
    ///
    /// ```no_run
    /// # async fn example(store: &tenure_backend_postgres::PgStore, fence: u64) -> Result<(), Box<dyn std::error::Error>> {
    /// use tenure_lease_core::FenceCheck;
    ///
    /// let mut transaction = store.pool().begin().await?;
    /// match store.check_fence_in(&mut transaction, "invoices", fence).await? {
    ///     FenceCheck::Accepted => {
    ///         sqlx::query("INSERT INTO invoices (total) VALUES (100)")
    ///             .execute(&mut *transaction)
    ///             .await?;
    ///         transaction.commit().await?;
    ///     }
    ///     refused => return Err(format!("not written: {refused:?}").into()),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// The check locks the resource's gate row until the transaction ends:
    /// transactions guarding the same resource take turns, and each one's
    /// check sees what the one before committed. Run the check early in the
    /// transaction, before the guarded write, and keep the transaction
    /// short. Not bounded by the store's operation timeout (the transaction
    /// is the caller's); the connection is used as it is.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](tenure_lease_core::ErrorKind::InvalidInput),
    ///   as for `check_fence`, before touching the connection;
    /// * [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) when
    ///   the stored gate cannot be decoded;
    /// * the server's errors, classified as for every operation. A
    ///   `REPEATABLE READ` or `SERIALIZABLE` transaction may answer a
    ///   serialization failure (retryable `Unavailable`) when a concurrent
    ///   check raised the gate: retry the whole transaction.
    ///
    /// An error aborts the transaction: roll it back.
    pub async fn check_fence_in(
        &self,
        connection: &mut PgConnection,
        resource: &str,
        fence: u64,
    ) -> Result<FenceCheck> {
        let (resource, fence) = fence_check(resource, fence)?;
        let (resource, fence) = (resource.get(), fence.get());
        let row = check_query(self.gate_check(), resource, fence)
            .fetch_optional(connection)
            .await
            .map_err(store_error)?;
        judged(row.as_ref(), resource, fence)
    }
}

#[async_trait]
impl GateBackend for PgStore {
    async fn check_fence(
        &self,
        resource: Checked<&str>,
        fence: Checked<u64>,
    ) -> Result<FenceCheck> {
        let (resource, fence) = (resource.get(), fence.get());
        let row = self
            .fetch_optional(|| check_query(self.gate_check(), resource, fence))
            .await?;
        judged(row.as_ref(), resource, fence)
    }

    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>> {
        let resource = resource.get();
        self.fetch_optional(|| sqlx::query(&self.sql.gates.highest).bind(resource))
            .await?
            .map(|row| decode_fence(&row, resource))
            .transpose()
    }

    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64> {
        let unused_for = unused_for.get();
        self.purge_older_than(&self.sql.gates.purge, unused_for)
            .await
    }

    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<GateRecord>> {
        let (after, limit) = (after.map(Checked::get), limit.get());
        // Checked to at most `limits::MAX_LIST_LIMIT`.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let gates = &self.sql.gates;
        let rows = self
            .fetch_all(|| match after {
                None => sqlx::query(&gates.list).bind(limit),
                Some(after) => sqlx::query(&gates.list_after).bind(after).bind(limit),
            })
            .await?;
        rows.iter().map(listed_gate).collect()
    }
}
