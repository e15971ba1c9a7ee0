//! The [`QueueBackend`] side of [`MySqlStore`]: one row per job beside the
//! leases, fences from the same counter, the writes the shared [queue
//! engine](engine)'s over one locking transaction each. A claim reads the
//! best queued jobs a worker can run with `FOR UPDATE SKIP LOCKED`, so
//! concurrent claimers take different jobs instead of queueing on the same
//! rows; a reap reads the oldest expired claims the same way.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::TryStreamExt as _;
use sqlx::{MySqlConnection, Row};
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::queue_engine::{self as engine, JobTransaction};
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::rate_rules::RateLogs;
use tenure_lease_core::backend::stores::QueueBackend;
use tenure_lease_core::clock::{micros_rounded_up, to_micros};
use tenure_lease_core::queue::{
    ClaimRequest, Claimed, Enqueued, FailAction, Job, JobClaim, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{Result, Timestamp};

use crate::error::store_error;
use crate::rows::{self, decode_job};
use crate::runner::{
    bound, placeholders, read_now, ClaimQuery, Reads, ReapQuery, UniqueKey, View, Write,
    IDS_PER_READ,
};
use crate::MySqlStore;

/// A decision's [`View`] as the [queue engine](engine)'s jobs.
struct Jobs<'v, 's>(&'v mut View<'s>);

impl JobTransaction for Jobs<'_, '_> {
    fn job_exists(&mut self, id: &str) -> Result<bool> {
        self.0.job_exists(id)
    }

    fn load_job(&mut self, id: &str) -> Result<Option<Job>> {
        self.0.job(id)
    }

    fn insert_job(&mut self, job: &Job) -> Result<()> {
        self.0.write(Write::InsertJob(job.clone()));
        Ok(())
    }

    fn save_job(&mut self, job: &Job) -> Result<()> {
        self.0.write(Write::UpdateJob(job.clone()));
        Ok(())
    }

    fn unique_holders(&mut self, queue: &str, key: &str) -> Result<Vec<Job>> {
        self.0.unique_holders(queue, key)
    }

    fn next_fence(&mut self) -> Result<u64> {
        Ok(self.0.next_fence())
    }

    fn claim_candidates(
        &mut self,
        _queue: &str,
        _now: Timestamp,
        limit: usize,
        claimable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let chosen = self
            .0
            .candidates()
            .into_iter()
            .filter(|job| claimable(job))
            .collect();
        Ok(rules::first_in_claim_order(chosen, limit))
    }

    fn reap_candidates(
        &mut self,
        _grace: Duration,
        _now: Timestamp,
        limit: usize,
        reapable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let expired = self
            .0
            .candidates()
            .into_iter()
            .filter(|job| reapable(job))
            .collect();
        Ok(rules::first_in_reap_order(expired, limit))
    }
}

impl RateLogs for Jobs<'_, '_> {
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        self.0.rate_log(limit)
    }

    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()> {
        self.0.save_rate_log(limit, uses);
        Ok(())
    }
}

impl MySqlStore {
    /// Runs `operation` in one locking transaction reading `reads`, on the
    /// jobs as the queue engine's [`JobTransaction`].
    async fn with_jobs<T: Send>(
        &self,
        reads: Reads,
        operation: impl Fn(&mut Jobs<'_, '_>, Timestamp) -> Result<T> + Send + Sync,
    ) -> Result<T> {
        self.runner
            .run(reads, |view| {
                let now = view.now();
                operation(&mut Jobs(view), now)
            })
            .await
    }

    /// The jobs `sql` selects (`id, body`, ids and queues bound as `binds`),
    /// decoded, that `keep` keeps, at most `limit`; those that cannot be
    /// decoded are logged and passed over.
    async fn listed(
        &self,
        sql: &str,
        binds: &[&str],
        limit: usize,
        keep: impl Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let mut query = sqlx::query(sql);
        for value in binds {
            query = query.bind(value.as_bytes());
        }
        let mut rows = query.fetch(self.runner.pool());
        let mut listed = Vec::new();
        while listed.len() < limit {
            let Some(row) = rows.try_next().await.map_err(store_error)? else {
                break;
            };
            let id = rows::text(&row, 0)?;
            let body: Vec<u8> = row.try_get(1).map_err(store_error)?;
            match decode_job(&id, &body) {
                Ok(job) if keep(&job) => listed.push(job),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(job.id = %id, %error, "passing over an undecodable job");
                }
            }
        }
        Ok(listed)
    }
}

#[async_trait]
impl QueueBackend for MySqlStore {
    /// Locks the slot of every uniqueness key of the batch, in order,
    /// before the engine judges the first job.
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>> {
        let jobs = jobs.get();
        let reads = Reads::default()
            .jobs(jobs.iter().map(|job| job.id.as_str()))
            .unique_keys(jobs.iter().filter_map(|job| {
                let unique = job.unique.as_ref()?;
                Some((job.queue.clone(), unique.key.clone()))
            }));
        self.with_jobs(reads, |stored, now| {
            engine::enqueue_batch(stored, jobs, now)
        })
        .await
    }

    /// Locks the rate log, if any, before reading the candidates: claimers
    /// of one log take turns, each seeing the best jobs left.
    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed> {
        let request = request.get();
        let reads = Reads::default()
            .rate_log(request.rate_limit.as_ref())
            .claimable(ClaimQuery {
                queue: request.queue.clone(),
                capabilities: serde_json::to_string(&request.capabilities).unwrap_or_default(),
                limit: request.limit,
            });
        self.with_jobs(reads, |jobs, now| {
            engine::claim(jobs, request, request.limit, now)
        })
        .await
    }

    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.with_jobs(Reads::default().jobs([claim.id.as_str()]), |jobs, now| {
            engine::renew_job(jobs, claim, ttl, now)
        })
        .await
    }

    async fn renew_job_with_progress(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<JobRenewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        self.with_jobs(Reads::default().jobs([claim.id.as_str()]), |jobs, now| {
            engine::renew_job_with_progress(jobs, claim, ttl, now, progress)
        })
        .await
    }

    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle> {
        let claim = claim.get();
        self.with_jobs(Reads::default().jobs([claim.id.as_str()]), |jobs, now| {
            engine::complete(jobs, claim, now)
        })
        .await
    }

    async fn complete_many(&self, claims: Checked<&[JobClaim]>) -> Result<Vec<JobSettle>> {
        let claims = claims.get();
        let reads = Reads::default().jobs(claims.iter().map(|claim| claim.id.as_str()));
        // In order, each seeing the ones before it, in one transaction.
        self.with_jobs(reads, |jobs, now| {
            claims
                .iter()
                .map(|claim| engine::complete(jobs, claim, now))
                .collect()
        })
        .await
    }

    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle> {
        let (claim, error, action) = (claim.get(), error.get(), action.get());
        self.with_jobs(Reads::default().jobs([claim.id.as_str()]), |jobs, now| {
            engine::fail(jobs, claim, error, action, now)
        })
        .await
    }

    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle> {
        let (claim, missing) = (claim.get(), missing.get());
        self.with_jobs(Reads::default().jobs([claim.id.as_str()]), |jobs, now| {
            engine::defer(jobs, claim, missing, now)
        })
        .await
    }

    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport> {
        let grace = grace.get();
        let reads = Reads::default().reapable(ReapQuery {
            grace,
            limit: rules::MAX_REAP,
        });
        self.with_jobs(reads, |jobs, now| {
            engine::reap(jobs, grace, rules::MAX_REAP, now)
        })
        .await
    }

    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.with_jobs(Reads::default().jobs([claim.id.as_str()]), |jobs, now| {
            engine::take_back(jobs, claim, ttl, now)
        })
        .await
    }

    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>> {
        let id = id.get();
        let mut session = self.runner.session().await.map_err(store_error)?;
        let row = sqlx::query("SELECT body FROM tenure_jobs WHERE id = ?")
            .bind(id.as_bytes())
            .fetch_optional(&mut *session)
            .await;
        session.keep_after(&row);
        let row = row.map_err(store_error)?;
        row.map(|row| {
            let body: Vec<u8> = row.try_get(0).map_err(store_error)?;
            decode_job(id, &body)
        })
        .transpose()
    }

    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        self.listed(
            "SELECT id, body FROM tenure_jobs WHERE queue = ? AND state = 'dead_lettered' \
             ORDER BY updated_at, id",
            &[queue],
            limit,
            |job| job.queue == queue && job.state == JobState::DeadLettered,
        )
        .await
    }

    async fn list_jobs(
        &self,
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let keep = |job: &Job| job.queue == queue && state.is_none_or(|state| job.state == state);
        match state {
            Some(state) => {
                self.listed(
                    "SELECT id, body FROM tenure_jobs WHERE queue = ? AND state = ? \
                     ORDER BY created_at, id",
                    &[queue, state.as_str()],
                    limit,
                    keep,
                )
                .await
            }
            None => {
                self.listed(
                    "SELECT id, body FROM tenure_jobs WHERE queue = ? ORDER BY created_at, id",
                    &[queue],
                    limit,
                    keep,
                )
                .await
            }
        }
    }

    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        let groups = sqlx::query(
            "SELECT queue, state, COUNT(*) FROM tenure_jobs GROUP BY queue, state \
             ORDER BY queue, state",
        )
        .fetch_all(self.runner.pool())
        .await
        .map_err(store_error)?
        .iter()
        .map(|row| {
            let count: i64 = row.try_get(2).map_err(store_error)?;
            Ok((
                rows::text(row, 0)?,
                row.try_get::<String, _>(1).map_err(store_error)?,
                u64::try_from(count).unwrap_or_default(),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
        Ok(rules::count_stored_states("mysql", groups))
    }

    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry> {
        let id = id.get();
        self.with_jobs(Reads::default().jobs([id]), |jobs, now| {
            engine::retry_dead_letter(jobs, id, now)
        })
        .await
    }

    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64> {
        let older_than = finished_older_than.get();
        let mut tx = self.runner.pool().begin().await.map_err(store_error)?;
        let purged = purgeable_jobs(&mut tx, older_than).await?;
        let ids: Vec<String> = purged.iter().map(|job| job.id.clone()).collect();
        for part in ids.chunks(IDS_PER_READ) {
            sqlx::query_with(
                &format!(
                    "DELETE FROM tenure_jobs WHERE id IN {}",
                    placeholders(part.len())
                ),
                bound(part)?,
            )
            .execute(&mut *tx)
            .await
            .map_err(store_error)?;
        }
        tx.commit().await.map_err(store_error)?;
        let keys: BTreeSet<UniqueKey> = purged
            .into_iter()
            .filter_map(|job| Some((job.queue, job.unique?.key)))
            .collect();
        if let Err(error) = delete_unused_slots(self.runner.pool(), &keys).await {
            tracing::warn!(
                %error,
                "purge_jobs left the slots of the uniqueness keys it freed; a later purge \
                 of a job with one of those keys deletes them"
            );
        }
        Ok(ids.len() as u64)
    }
}

/// Deletes the slots of `keys` that no job names any more, after the jobs'
/// deletion committed: each slot is locked before the jobs naming it are
/// read, in the order enqueues lock them. Should the read miss a job an
/// enqueue has just committed, the next enqueue of its key upserts the
/// slot again: a slot holds nothing but its lock.
async fn delete_unused_slots(pool: &sqlx::MySqlPool, keys: &BTreeSet<UniqueKey>) -> Result<()> {
    let keys: Vec<&UniqueKey> = keys.iter().collect();
    for part in keys.chunks(IDS_PER_READ) {
        sqlx::query_with(
            &format!(
                "DELETE FROM tenure_unique_slots WHERE ({}) AND NOT EXISTS (SELECT 1 \
                 FROM tenure_jobs j WHERE j.queue = tenure_unique_slots.queue \
                 AND j.unique_key = tenure_unique_slots.unique_key)",
                vec!["(queue = ? AND unique_key = ?)"; part.len()].join(" OR ")
            ),
            bound(part.iter().flat_map(|(queue, key)| [queue, key]))?,
        )
        .execute(pool)
        .await
        .map_err(store_error)?;
    }
    Ok(())
}

/// The jobs `purge_jobs` deletes now ([`rules::job_purgeable`]: finished
/// long enough, and past their uniqueness period), locked. A job that
/// cannot be decoded cannot be judged, and stays.
async fn purgeable_jobs(
    connection: &mut MySqlConnection,
    older_than: Duration,
) -> Result<Vec<Job>> {
    let now = read_now(&mut *connection).await?;
    let cutoff = to_micros(now).saturating_sub(micros_rounded_up(older_than));
    let found = sqlx::query(
        "SELECT id, body FROM tenure_jobs WHERE state IN ('completed', 'dead_lettered') \
         AND updated_at <= ? AND (unique_until IS NULL OR unique_until <= ?) FOR UPDATE",
    )
    .bind(cutoff)
    .bind(to_micros(now))
    .fetch_all(&mut *connection)
    .await
    .map_err(store_error)?;
    let mut purgeable = Vec::new();
    for row in &found {
        let id = rows::text(row, 0)?;
        let body: Vec<u8> = row.try_get(1).map_err(store_error)?;
        match decode_job(&id, &body) {
            Ok(job) if rules::job_purgeable(&job, older_than, now) => purgeable.push(job),
            _ => {}
        }
    }
    Ok(purgeable)
}
