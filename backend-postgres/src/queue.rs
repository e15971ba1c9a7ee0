//! The [`QueueBackend`] operations.
//!
//! Every operation is one statement. `claim` and `reap` pick their jobs with
//! `FOR UPDATE SKIP LOCKED`, so concurrent claimers (and reapers) each take
//! different jobs without waiting on each other, and a job being renewed or
//! settled is simply left for the next pass. The fenced writes (`renew_job`,
//! `complete`, `fail`, `defer`, `take_back`, `retry_dead_letter`) are
//! conditional updates whose conditions are `tenure_lease_core::backend::queue_rules`'
//! judgements; only a refused write reads the job back to say why, with
//! those same rules. The choices `fail` and `reap` make per job (requeue or
//! dead-letter) are the rules' `attempt < max_attempts`, written as `CASE`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::Row;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::stores::QueueBackend;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobLoss, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack,
};
use tenure_lease_core::{clock, Error, ErrorKind, Result, Timestamp};

use crate::decode::{self, Undecodable};
use crate::error::{constraint, sqlstate, store_error, UNIQUE_VIOLATION};
use crate::lease::{fence_param, interval, interval_rounded_up};
use crate::statement::{self, PgQuery};
use crate::PgStore;

/// The primary key whose violation means a job id is taken.
const JOBS_PRIMARY_KEY: &str = "jobs_pkey";

impl PgStore {
    async fn read_job(&self, id: &str) -> Result<Option<Job>> {
        let row = self
            .fetch_optional(|| sqlx::query(&self.sql.jobs.get).bind(id))
            .await?;
        row.as_ref().map(decode::trusted_job).transpose()
    }

    /// After a fenced write matched no row: why `claim` no longer holds its
    /// job, or `None` when the job as read back would have allowed the write
    /// (it changed in between).
    async fn job_loss(&self, claim: &JobClaim) -> Result<Option<JobLoss>> {
        let job = self.read_job(&claim.id).await?;
        Ok(rules::judge_job(job.as_ref(), claim).err())
    }

    /// Runs a fenced write answering the job; a refusal is explained by
    /// [`rules::judge_job`].
    async fn settle<'q>(
        &self,
        operation: &str,
        claim: &JobClaim,
        write: impl Fn() -> PgQuery<'q> + Send,
    ) -> Result<JobSettle> {
        self.write_or_explain(
            (operation, &claim.id),
            write,
            |row| Ok(JobSettle::Settled(decode::trusted_job(row)?)),
            move || async move { Ok(self.job_loss(claim).await?.map(JobSettle::Rejected)) },
        )
        .await
    }

    /// `renew_job` of a valid claim, recording `progress` when given.
    async fn renew_one(
        &self,
        claim: &JobClaim,
        ttl: Duration,
        progress: Option<&serde_json::Value>,
    ) -> Result<JobRenewal> {
        self.write_or_explain(
            ("job renewal", &claim.id),
            || {
                statement::renewal(
                    (&self.sql.jobs.renew, &self.sql.jobs.renew_with_progress),
                    (&claim.id, &claim.owner, claim.fence),
                    ttl,
                    progress,
                )
            },
            |row| {
                let expires_at = decode::instant(row, "lease_expires_at").map_err(store_error)?;
                Ok(JobRenewal::Renewed { expires_at })
            },
            move || async move { Ok(self.job_loss(claim).await?.map(JobRenewal::Lost)) },
        )
        .await
    }

    /// `complete` of a valid claim.
    async fn complete_one(&self, claim: &JobClaim) -> Result<JobSettle> {
        let fence = fence_param(claim.fence);
        self.settle("complete", claim, || {
            sqlx::query(&self.sql.jobs.complete)
                .bind(&claim.id)
                .bind(&claim.owner)
                .bind(fence)
        })
        .await
    }

    /// The jobs of a multi-job answer; an undecodable row is left out of the
    /// answer with a warning. It stays in the table for an operator; one a
    /// claim took goes back through the reaper when its lease ends.
    fn jobs_skipping_undecodable(&self, operation: &str, rows: &[PgRow]) -> Vec<Job> {
        rows.iter()
            .filter_map(|row| match decode::job(row) {
                Ok(job) => Some(job),
                Err(Undecodable { id, reason }) => {
                    tracing::warn!(
                        schema = self.schema(),
                        id = %id,
                        reason = %reason,
                        "{operation} skipped an undecodable job"
                    );
                    None
                }
            })
            .collect()
    }

    /// The error of an enqueue that hit an existing id: names the first id
    /// of the batch that exists.
    async fn duplicate_job(&self, ids: &[&str], violation: sqlx::Error) -> Error {
        let rows = match self
            .fetch_all(|| sqlx::query(&self.sql.jobs.existing_ids).bind(ids))
            .await
        {
            Ok(rows) => rows,
            Err(error) => return error,
        };
        let existing: Vec<String> = match rows.iter().map(|row| row.try_get("id")).collect() {
            Ok(existing) => existing,
            Err(error) => return store_error(error),
        };
        let existing: HashSet<&str> = existing.iter().map(String::as_str).collect();
        let error = match ids.iter().find(|id| existing.contains(**id)) {
            Some(id) => Error::job_already_exists(id),
            None => Error::new(
                ErrorKind::AlreadyExists,
                "a job id of the batch already exists",
            ),
        };
        error.with_source(violation)
    }
}

/// A job claim's proof, from the job as a claim or take-back left it.
fn claimed(job: Job) -> Result<ClaimedJob> {
    let claim = job.claim().ok_or_else(|| {
        Error::corrupt(format!(
            "job {:?} was claimed but reads back {} without an owner",
            job.id, job.state
        ))
    })?;
    Ok(ClaimedJob { job, claim })
}

#[async_trait]
impl QueueBackend for PgStore {
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Job>> {
        let jobs = jobs.get();
        let ids: Vec<&str> = jobs.iter().map(|job| job.id.as_str()).collect();
        let queues: Vec<&str> = jobs.iter().map(|job| job.queue.as_str()).collect();
        let payloads: Vec<Json<&serde_json::Value>> =
            jobs.iter().map(|job| Json(&job.payload)).collect();
        let priorities: Vec<i32> = jobs.iter().map(|job| job.priority).collect();
        let run_ats: Vec<Option<Timestamp>> = jobs
            .iter()
            .map(|job| job.run_at.map(clock::truncate_to_micros))
            .collect();
        // Validated to at most `rules::MAX_ATTEMPTS`.
        let max_attempts: Vec<i32> = jobs
            .iter()
            .map(|job| i32::try_from(job.max_attempts).unwrap_or(i32::MAX))
            .collect();
        let capabilities: Vec<Json<&BTreeSet<String>>> = jobs
            .iter()
            .map(|job| Json(&job.required_capabilities))
            .collect();
        let rows = self
            .fetch_all_raw(|| {
                sqlx::query(&self.sql.jobs.enqueue)
                    .bind(&ids)
                    .bind(&queues)
                    .bind(&payloads)
                    .bind(&priorities)
                    .bind(&run_ats)
                    .bind(&max_attempts)
                    .bind(&capabilities)
            })
            .await;
        match rows {
            Ok(rows) => rows.iter().map(decode::trusted_job).collect(),
            Err(error)
                if sqlstate(&error).as_deref() == Some(UNIQUE_VIOLATION)
                    && constraint(&error) == Some(JOBS_PRIMARY_KEY) =>
            {
                Err(self.duplicate_job(&ids, error).await)
            }
            Err(error) => Err(store_error(error)),
        }
    }

    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Vec<ClaimedJob>> {
        let request = request.get();
        let capabilities: Vec<&str> = request.capabilities.iter().map(String::as_str).collect();
        let rows = self
            .fetch_all(|| {
                sqlx::query(&self.sql.jobs.claim)
                    .bind(&request.queue)
                    .bind(&capabilities)
                    // Validated to at most `rules::MAX_CLAIM`.
                    .bind(request.limit as i64)
                    .bind(&request.worker)
                    .bind(interval(request.ttl))
            })
            .await?;
        self.jobs_skipping_undecodable("claim", &rows)
            .into_iter()
            .map(claimed)
            .collect()
    }

    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.renew_one(claim, ttl, None).await
    }

    async fn renew_job_with_progress(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<JobRenewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        self.renew_one(claim, ttl, Some(progress)).await
    }

    async fn renew_jobs(
        &self,
        claims: Checked<&[JobClaim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<JobRenewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, owners, fences) = claim_columns(claims);
        let rows = self
            .fetch_all(|| {
                sqlx::query(&self.sql.jobs.renew_many)
                    .bind(&ids)
                    .bind(&owners)
                    .bind(&fences)
                    .bind(interval(ttl))
            })
            .await?;
        let mut renewed = HashMap::with_capacity(rows.len());
        for row in &rows {
            let id: String = row.try_get("id").map_err(store_error)?;
            let expires_at = decode::instant(row, "lease_expires_at").map_err(store_error)?;
            renewed.insert(id, expires_at);
        }
        // The claims the statement did not renew are lost: one read of
        // their jobs says why.
        let missed: Vec<&str> = claims
            .iter()
            .map(|claim| claim.id.as_str())
            .filter(|id| !renewed.contains_key(*id))
            .collect();
        let mut read = HashMap::with_capacity(missed.len());
        if !missed.is_empty() {
            let rows = self
                .fetch_all(|| sqlx::query(&self.sql.jobs.get_many).bind(&missed))
                .await?;
            for row in &rows {
                let job = decode::trusted_job(row)?;
                read.insert(job.id.clone(), job);
            }
        }
        let mut answers = Vec::with_capacity(claims.len());
        for claim in claims {
            if let Some(expires_at) = renewed.remove(&claim.id) {
                answers.push(JobRenewal::Renewed { expires_at });
                continue;
            }
            answers.push(match rules::judge_job(read.get(&claim.id), claim) {
                Err(loss) => JobRenewal::Lost(loss),
                // It changed between the two statements: decide it alone.
                Ok(()) => self.renew_one(claim, ttl, None).await?,
            });
        }
        Ok(answers)
    }

    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle> {
        let claim = claim.get();
        self.complete_one(claim).await
    }

    async fn complete_many(&self, claims: Checked<&[JobClaim]>) -> Result<Vec<JobSettle>> {
        let claims = claims.get();
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, owners, fences) = claim_columns(claims);
        let rows = self
            .fetch_all(|| {
                sqlx::query(&self.sql.jobs.complete_many)
                    .bind(&ids)
                    .bind(&owners)
                    .bind(&fences)
            })
            .await?;
        let mut completed = HashMap::with_capacity(rows.len());
        for row in &rows {
            let job = decode::trusted_job(row)?;
            completed.insert(job.id.clone(), job);
        }
        // A claim the statement did not complete is refused: `complete`
        // explains it (and settles the rare claim that changed under it).
        let mut answers = Vec::with_capacity(claims.len());
        for claim in claims {
            answers.push(match completed.remove(&claim.id) {
                Some(job) => JobSettle::Settled(job),
                None => self.complete_one(claim).await?,
            });
        }
        Ok(answers)
    }

    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle> {
        let (claim, error, action) = (claim.get(), error.get(), action.get());
        let (retry, backoff) = match action {
            FailAction::Retry { backoff } => (true, backoff),
            FailAction::DeadLetter => (false, Duration::ZERO),
        };
        let fence = fence_param(claim.fence);
        self.settle("fail", claim, || {
            sqlx::query(&self.sql.jobs.fail)
                .bind(&claim.id)
                .bind(&claim.owner)
                .bind(fence)
                .bind(error)
                .bind(retry)
                .bind(interval(backoff))
        })
        .await
    }

    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle> {
        let (claim, missing) = (claim.get(), missing.get());
        let fence = fence_param(claim.fence);
        let missing: Vec<&str> = missing.iter().map(String::as_str).collect();
        self.settle("defer", claim, || {
            sqlx::query(&self.sql.jobs.defer)
                .bind(&claim.id)
                .bind(&claim.owner)
                .bind(fence)
                .bind(&missing)
        })
        .await
    }

    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport> {
        let grace = grace.get();
        let rows = self
            .fetch_all(|| {
                sqlx::query(&self.sql.jobs.reap)
                    .bind(interval_rounded_up(grace))
                    .bind(rules::MAX_REAP as i64)
            })
            .await?;
        let (requeued, dead_lettered) = self
            .jobs_skipping_undecodable("reap", &rows)
            .into_iter()
            .partition(|job| job.state == JobState::Queued);
        Ok(ReapReport {
            requeued,
            dead_lettered,
        })
    }

    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.write_or_explain(
            ("take-back", &claim.id),
            || {
                sqlx::query(&self.sql.jobs.take_back)
                    .bind(&claim.id)
                    .bind(&claim.owner)
                    .bind(fence_param(claim.fence))
                    .bind(interval(ttl))
            },
            |row| Ok(TakeBack::Taken(claimed(decode::trusted_job(row)?)?)),
            move || async move {
                let job = self.read_job(&claim.id).await?;
                Ok(rules::judge_take_back(job.as_ref(), claim)
                    .err()
                    .map(TakeBack::NotTaken))
            },
        )
        .await
    }

    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>> {
        let id = id.get();
        self.read_job(id).await
    }

    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let rows = self
            .fetch_all(|| {
                sqlx::query(&self.sql.jobs.list_dead_letters)
                    .bind(queue)
                    // Checked to at most `limits::MAX_LIST_LIMIT`.
                    .bind(limit as i64)
            })
            .await?;
        Ok(self.jobs_skipping_undecodable("list_dead_letters", &rows))
    }

    async fn list_jobs(
        &self,
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let rows = self
            .fetch_all(|| {
                sqlx::query(&self.sql.jobs.list_jobs)
                    .bind(queue)
                    .bind(state.map(JobState::as_str))
                    // Checked to at most `limits::MAX_LIST_LIMIT`.
                    .bind(limit as i64)
            })
            .await?;
        Ok(self.jobs_skipping_undecodable("list_jobs", &rows))
    }

    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        let rows = self
            .fetch_all(|| sqlx::query(&self.sql.jobs.count_jobs))
            .await?;
        let groups = rows.iter().filter_map(|row| {
            let group = (
                row.try_get::<String, _>("queue"),
                row.try_get::<String, _>("state"),
                row.try_get::<i64, _>("jobs"),
            );
            match group {
                (Ok(queue), Ok(state), Ok(jobs)) => {
                    Some((queue, state, u64::try_from(jobs).unwrap_or(0)))
                }
                _ => {
                    tracing::warn!(
                        schema = self.schema(),
                        "count_jobs left out a group of jobs it cannot decode; they need an \
                         operator's attention"
                    );
                    None
                }
            }
        });
        Ok(rules::count_stored_states("postgres", groups))
    }

    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry> {
        let id = id.get();
        self.write_or_explain(
            ("dead-letter retry", id),
            || sqlx::query(&self.sql.jobs.retry_dead_letter).bind(id),
            |row| Ok(OperatorRetry::Requeued(decode::trusted_job(row)?)),
            move || async move {
                Ok(match self.read_job(id).await? {
                    None => Some(OperatorRetry::Missing),
                    Some(job) if job.state != JobState::DeadLettered => {
                        Some(OperatorRetry::NotDeadLettered(job.state))
                    }
                    Some(_) => None,
                })
            },
        )
        .await
    }

    /// One `DELETE` on the finished-jobs index (migration 0004). A job
    /// retried or taken back while the statement waits for its row is
    /// re-checked on its new version and stays.
    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64> {
        let finished_older_than = finished_older_than.get();
        self.purge_older_than(&self.sql.jobs.purge_finished, finished_older_than)
            .await
    }
}

/// The ids, owners and fences of `claims`, as the array parameters of a
/// statement over many claims (`unnest`).
fn claim_columns(claims: &[JobClaim]) -> (Vec<&str>, Vec<&str>, Vec<i64>) {
    (
        claims.iter().map(|claim| claim.id.as_str()).collect(),
        claims.iter().map(|claim| claim.owner.as_str()).collect(),
        claims
            .iter()
            .map(|claim| fence_param(claim.fence))
            .collect(),
    )
}
