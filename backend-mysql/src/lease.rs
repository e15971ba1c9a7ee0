//! [`LeaseBackend`] for [`MySqlStore`]: the writes are the shared
//! [`engine`]'s over one locking transaction each ([`crate::runner`]); the
//! scans read committed rows, locking nothing.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::TryStreamExt as _;
use sqlx::{MySqlConnection, Row};
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::engine::{self, RecordTransaction};
use tenure_lease_core::backend::rate_rules::RateLogs;
use tenure_lease_core::backend::rules;
use tenure_lease_core::backend::stores::LeaseBackend;
use tenure_lease_core::clock::{micros_rounded_up, to_micros};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, Renewal, Result,
    SkippedRecord, StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

use crate::error::store_error;
use crate::rate;
use crate::rows::{self, decode_lease};
use crate::runner::{bound, placeholders, read_now, Reads, View, Write, IDS_PER_READ};
use crate::MySqlStore;

/// A decision's [`View`] as the [engine](engine)'s records.
struct Records<'v, 's>(&'v mut View<'s>);

impl RecordTransaction for Records<'_, '_> {
    fn exists(&mut self, id: &str) -> Result<bool> {
        self.0.lease_exists(id)
    }

    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        self.0.lease(id)
    }

    fn holder_of(&mut self, scope: &str) -> Result<Option<String>> {
        self.0.holder_of(scope)
    }

    fn next_fence(&mut self) -> Result<u64> {
        Ok(self.0.next_fence())
    }

    fn insert(&mut self, record: &LeaseRecord) -> Result<()> {
        self.0.write(Write::InsertLease(record.clone()));
        Ok(())
    }

    fn save(&mut self, record: &LeaseRecord) -> Result<()> {
        self.0.write(Write::UpdateLease(record.clone()));
        Ok(())
    }
}

impl RateLogs for Records<'_, '_> {
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        self.0.rate_log(limit)
    }

    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()> {
        self.0.save_rate_log(limit, uses);
        Ok(())
    }
}

/// Decides `operation` over the records of `view`, at its instant.
fn over_records<T>(
    view: &mut View<'_>,
    operation: impl FnOnce(&mut Records<'_, '_>, Timestamp) -> Result<T>,
) -> Result<T> {
    let now = view.now();
    operation(&mut Records(view), now)
}

impl MySqlStore {
    /// The records `sql` selects (`id, body`, with `bind` bound), decoded,
    /// or `Corrupt` for the first that cannot be (there is no partial
    /// answer).
    async fn decoded(&self, sql: &str, bind: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let mut query = sqlx::query(sql);
        if let Some(value) = bind {
            query = query.bind(value.as_bytes());
        }
        let mut session = self.runner.session().await.map_err(store_error)?;
        let rows = query.fetch_all(&mut *session).await;
        session.keep_after(&rows);
        rows.map_err(store_error)?
            .iter()
            .map(|row| {
                let id = rows::text(row, 0)?;
                let body: Vec<u8> = row.try_get(1).map_err(store_error)?;
                decode_lease(&id, &body)
            })
            .collect()
    }
}

#[async_trait]
impl LeaseBackend for MySqlStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let (request, metadata) = (request.get(), metadata.get());
        let reads = Reads::default()
            .rate_log(request.rate_limit.as_ref())
            .leases([request.id.as_str()])
            .scopes(request.scopes.iter().map(String::as_str))
            // Capacity 1 counts slot 0 alone, the scope itself.
            .counted_scopes(
                request
                    .capacities
                    .iter()
                    .filter(|(_, capacity)| **capacity > 1)
                    .map(|(scope, _)| scope.as_str()),
            );
        self.runner
            .run(reads, |view| {
                over_records(view, |records, now| {
                    engine::admit(records, now, request, metadata.clone())
                })
            })
            .await
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.runner
            .run(Reads::default().leases([claim.id.as_str()]), |view| {
                over_records(view, |records, now| engine::renew(records, now, claim, ttl))
            })
            .await
    }

    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        self.runner
            .run(Reads::default().leases([claim.id.as_str()]), |view| {
                over_records(view, |records, now| {
                    engine::renew_with_progress(records, now, claim, ttl, progress)
                })
            })
            .await
    }

    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        let reads = Reads::default().leases(claims.iter().map(|claim| claim.id.as_str()));
        self.runner
            .run(reads, |view| {
                over_records(view, |records, now| {
                    engine::renew_many(records, now, claims, ttl)
                })
            })
            .await
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        self.runner
            .run(Reads::default().leases([claim.id.as_str()]), |view| {
                over_records(view, |records, now| {
                    engine::transition(records, now, claim, change)
                })
            })
            .await
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get();
        self.runner
            .run(Reads::default().leases([request.id.as_str()]), |view| {
                over_records(view, |records, now| {
                    engine::claim_for_takeover(records, now, request)
                })
            })
            .await
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get();
        let mut connection = self.runner.pool().acquire().await.map_err(store_error)?;
        let now = read_now(&mut *connection).await?;
        let expired_before = to_micros(now).saturating_sub(micros_rounded_up(query.grace));
        let mut rows = sqlx::query(
            "SELECT id, body FROM tenure_leases \
             WHERE active AND (expires_at IS NULL OR expires_at <= ?) \
             ORDER BY expires_at, id",
        )
        .bind(expired_before)
        .fetch(&mut *connection);
        let mut scan = ExpiredScan::default();
        while scan.records.len() < query.limit {
            let Some(row) = rows.try_next().await.map_err(store_error)? else {
                break;
            };
            let id = rows::text(&row, 0)?;
            let body: Vec<u8> = row.try_get(1).map_err(store_error)?;
            match decode_lease(&id, &body) {
                Ok(record) => {
                    if rules::matches_expired(&record, query.grace, query.created_before, now) {
                        scan.records.push(record);
                    }
                }
                Err(error) => {
                    tracing::warn!(lease.id = %id, %error, "list_expired skipped a stored lease it cannot decode; it needs an operator's attention");
                    scan.skipped.push(SkippedRecord {
                        id,
                        reason: error.message().to_owned(),
                    });
                }
            }
        }
        scan.records
            .sort_by(|a, b| rules::expired_order(a).cmp(&rules::expired_order(b)));
        Ok(scan)
    }

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get();
        Ok(self
            .decoded("SELECT id, body FROM tenure_leases WHERE id = ?", Some(id))
            .await?
            .pop())
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let mut records = self
            .decoded(
                "SELECT l.id, l.body FROM tenure_lease_scopes s \
                 JOIN tenure_leases l ON l.id = s.lease_id WHERE s.scope = ?",
                Some(scope.get()),
            )
            .await?;
        records.sort_by_key(rules::newest_first);
        Ok(records)
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        self.decoded(
            "SELECT id, body FROM tenure_leases WHERE active ORDER BY id",
            None,
        )
        .await
    }

    async fn now(&self) -> Result<Timestamp> {
        let mut session = self.runner.session().await.map_err(store_error)?;
        let now = read_now(&mut *session).await;
        session.keep_if(now.is_ok());
        now
    }

    /// Deletes the dead rate logs first, uncounted.
    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        rate::delete_dead(self.runner.pool()).await?;
        let mut tx = self.runner.pool().begin().await.map_err(store_error)?;
        let ids = purgeable(&mut tx, terminal_older_than.get(), " FOR UPDATE").await?;
        for part in ids.chunks(IDS_PER_READ) {
            for table in [
                "tenure_lease_scopes WHERE lease_id",
                "tenure_leases WHERE id",
            ] {
                sqlx::query_with(
                    &format!("DELETE FROM {table} IN {}", placeholders(part.len())),
                    bound(part)?,
                )
                .execute(&mut *tx)
                .await
                .map_err(store_error)?;
            }
        }
        tx.commit().await.map_err(store_error)?;
        Ok(ids.len() as u64)
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let mut connection = self.runner.pool().acquire().await.map_err(store_error)?;
        Ok(purgeable(&mut connection, terminal_older_than.get(), "")
            .await?
            .len() as u64)
    }
}

/// The ids of the records `purge` deletes now ([`rules::purgeable`]),
/// read with `lock` after the query (`" FOR UPDATE"`, or nothing). A
/// record that cannot be decoded cannot be judged, and stays.
async fn purgeable(
    connection: &mut MySqlConnection,
    older_than: Duration,
    lock: &str,
) -> Result<Vec<String>> {
    let now = read_now(&mut *connection).await?;
    let cutoff = to_micros(now).saturating_sub(micros_rounded_up(older_than));
    let found = sqlx::query(&format!(
        "SELECT id, body FROM tenure_leases WHERE NOT active AND updated_at <= ?{lock}"
    ))
    .bind(cutoff)
    .fetch_all(&mut *connection)
    .await
    .map_err(store_error)?;
    let mut ids = Vec::new();
    for row in &found {
        let id = rows::text(row, 0)?;
        let body: Vec<u8> = row.try_get(1).map_err(store_error)?;
        if decode_lease(&id, &body).is_ok_and(|record| rules::purgeable(&record, older_than, now)) {
            ids.push(id);
        }
    }
    Ok(ids)
}
