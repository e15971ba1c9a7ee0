//! Fence gates: [`GateBackend`] for [`MySqlStore`].
//!
//! A check is one statement, outside any transaction: a conditional upsert
//! that raises the gate and hands the fence it leaves back in the reply,
//! through `LAST_INSERT_ID(expr)` (set by the inserted row's value, then by
//! the update's when the gate exists). A damaged gate, holding no positive
//! fence, is left as it is and answers 0 there; it is then read for the
//! error. No lock outlives the statement, so a
//! client paused mid-check holds up no other check of the gate.
//!
//! A listing is one read of the primary key's range: `resource` is
//! `VARBINARY`, so the key's order, and `>` on it, are the byte order of
//! the names the contract lists them in.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::MySqlRow;
use sqlx::Row;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::clock::{self, micros_rounded_up};
use tenure_lease_core::{Error, FenceCheck, GateRecord, Result};
use tenure_sql_sessions::server_answered;

use crate::error::store_error;
use crate::runner::NOW_MICROS;
use crate::MySqlStore;

/// Raises the gate of `?` to the fence `?`, stamped with the server's
/// clock, and answers the fence it leaves as the reply's last insert id.
/// MySQL applies the assignments in order, so `checked_at` is judged
/// against the fence as it was.
fn check_fence_sql() -> String {
    format!(
        "INSERT INTO tenure_fence_gates (resource, fence, checked_at) \
         VALUES (?, LAST_INSERT_ID(?), {NOW_MICROS}) \
         ON DUPLICATE KEY UPDATE \
         checked_at = IF(fence > 0 AND fence <= VALUES(fence), VALUES(checked_at), checked_at), \
         fence = IF(fence > 0, LAST_INSERT_ID(GREATEST(fence, VALUES(fence))), \
                    fence + CAST(LAST_INSERT_ID(0) AS SIGNED))"
    )
}

const HIGHEST_FENCE: &str = "SELECT fence FROM tenure_fence_gates WHERE resource = ?";

/// The first `?` gates in byte order of their resources (the primary key's
/// order), each as its resource, fence and `checked_at`.
const LIST_FENCES: &str = "SELECT resource, fence, checked_at FROM tenure_fence_gates \
     ORDER BY resource LIMIT ?";

/// As [`LIST_FENCES`], from the first gate whose resource sorts after the
/// first `?`, byte for byte.
const LIST_FENCES_AFTER: &str = "SELECT resource, fence, checked_at FROM tenure_fence_gates \
     WHERE resource > ? ORDER BY resource LIMIT ?";

#[async_trait]
impl GateBackend for MySqlStore {
    async fn check_fence(
        &self,
        resource: Checked<&str>,
        fence: Checked<u64>,
    ) -> Result<FenceCheck> {
        let (resource, fence) = (resource.get(), fence.get());
        let presented = i64::try_from(fence)
            .map_err(|_| Error::invalid_input("fence", "beyond MySQL's BIGINT"))?;
        let mut session = self.runner.session().await.map_err(store_error)?;
        let checked = match sqlx::query(&check_fence_sql())
            .bind(resource.as_bytes())
            .bind(presented)
            .execute(&mut *session)
            .await
        {
            Ok(checked) => checked,
            Err(error) => {
                session.keep_if(server_answered(&error));
                return Err(store_error(error));
            }
        };
        // 0 when the gate is damaged (left as it was): read what it holds
        // for the error.
        let stored = match i64::try_from(checked.last_insert_id()) {
            Ok(0) | Err(_) => {
                let stored = sqlx::query_scalar(HIGHEST_FENCE)
                    .bind(resource.as_bytes())
                    .fetch_optional(&mut *session)
                    .await;
                session.keep_after(&stored);
                stored.map_err(store_error)?.unwrap_or(0)
            }
            Ok(fence) => {
                session.keep_if(true);
                fence
            }
        };
        let stored = gate_rules::stored_gate_fence(resource, stored)?;
        gate_rules::judge_stored(resource, stored, fence)
    }

    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>> {
        let resource = resource.get();
        let stored: Option<i64> = sqlx::query_scalar(HIGHEST_FENCE)
            .bind(resource.as_bytes())
            .fetch_optional(self.runner.pool())
            .await
            .map_err(store_error)?;
        stored
            .map(|stored| gate_rules::stored_gate_fence(resource, stored))
            .transpose()
    }

    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64> {
        let purged = sqlx::query(&format!(
            "DELETE FROM tenure_fence_gates WHERE checked_at <= {NOW_MICROS} - ?"
        ))
        .bind(micros_rounded_up(unused_for.get()))
        .execute(self.runner.pool())
        .await
        .map_err(store_error)?;
        Ok(purged.rows_affected())
    }

    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<GateRecord>> {
        let query = match after.map(Checked::get) {
            Some(after) => sqlx::query(LIST_FENCES_AFTER).bind(after.as_bytes()),
            None => sqlx::query(LIST_FENCES),
        };
        query
            .bind(u64::try_from(limit.get()).unwrap_or(u64::MAX))
            .fetch_all(self.runner.pool())
            .await
            .map_err(store_error)?
            .iter()
            .map(listed_gate)
            .collect()
    }
}

/// The gate a row of [`LIST_FENCES`] holds.
///
/// # Errors
///
/// `Corrupt` naming the gate when its name is not UTF-8, its fence is out
/// of range, or its `checked_at` is no instant.
fn listed_gate(row: &MySqlRow) -> Result<GateRecord> {
    let name: Vec<u8> = row.try_get(0).map_err(store_error)?;
    let resource = String::from_utf8(name).map_err(|error| {
        gate_rules::undecodable_gate(
            &String::from_utf8_lossy(error.as_bytes()),
            "its resource is not UTF-8",
        )
    })?;
    let fence = gate_rules::stored_gate_fence(&resource, row.try_get(1).map_err(store_error)?)?;
    let micros: i64 = row.try_get(2).map_err(store_error)?;
    let checked_at = clock::from_micros(micros).ok_or_else(|| {
        gate_rules::undecodable_gate(
            &resource,
            &format!("checked_at {micros} µs since 1970 is no instant"),
        )
    })?;
    Ok(GateRecord::new(resource, fence, checked_at))
}
