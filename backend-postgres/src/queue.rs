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
//!
//! An enqueue whose jobs have no uniqueness key is one statement too. One
//! with keys is a `READ COMMITTED` transaction: it takes an advisory lock
//! per (queue, key) of the batch, in ascending key order (see
//! [`scope_locks`](crate::scope_locks)), so enqueues sharing a key take
//! turns and crossed batches never wait on each other in a cycle; then
//! reads the taken ids, the stored jobs that may hold the keys and its
//! instant (`clock_timestamp()`), all in one statement whose snapshot
//! follows the lock waits, so it sees what the enqueue before it committed;
//! judges each job with the rules' `holds_unique_key`; and inserts those
//! that hold no key, stamped with that instant.
//!
//! A claim with a rate limit is one statement too, which locks the limit's
//! log, claims within its permits and writes their uses (see the crate
//! docs, [Rate limits](crate#rate-limits)); a plain claim never touches a
//! log.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::types::Json;
use sqlx::{Connection as _, Row};
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::backend::stores::QueueBackend;
use tenure_lease_core::queue::{
    ClaimRequest, Claimed, ClaimedJob, Enqueued, FailAction, Job, JobClaim, JobLoss, JobRenewal,
    JobSettle, JobState, NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack, UniquePolicy,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{clock, Error, ErrorKind, Result, Timestamp};

use crate::decode::{self, Undecodable};
use crate::error::{constraint, sqlstate, store_error, UNIQUE_VIOLATION};
use crate::lease::{fence_param, interval, interval_rounded_up};
use crate::rate;
use crate::statement::{self, PgQuery, BEGIN_READ_COMMITTED};
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
    fn jobs_skipping_undecodable<'r>(
        &self,
        operation: &str,
        rows: impl IntoIterator<Item = &'r PgRow>,
    ) -> Vec<Job> {
        rows.into_iter()
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

    /// The claims of a claim's job `rows`; an undecodable row is left out
    /// ([`jobs_skipping_undecodable`](Self::jobs_skipping_undecodable)).
    fn claimed_jobs<'r>(
        &self,
        rows: impl IntoIterator<Item = &'r PgRow>,
    ) -> Result<Vec<ClaimedJob>> {
        self.jobs_skipping_undecodable("claim", rows)
            .into_iter()
            .map(claimed)
            .collect()
    }

    /// What the `rows` of a claim within `limit`
    /// ([`JobStatements::claim_limited`](crate::sql::JobStatements)) answer:
    /// the jobs claimed and, when the limit held one back, when the next
    /// permit frees with their uses counted
    /// ([`RateWindow::retry_after_spending`](rate_rules::RateWindow::retry_after_spending)).
    fn claimed_within(&self, limit: &RateLimit, rows: &[PgRow]) -> Result<Claimed> {
        let first = rows
            .first()
            .ok_or_else(|| Error::corrupt("a rate-limited claim answered no row"))?;
        if first
            .try_get::<bool, _>("rate_log_damaged")
            .map_err(store_error)?
        {
            return Err(rate::damaged(first, limit));
        }
        let mut job_rows = Vec::with_capacity(rows.len());
        for row in rows {
            if row
                .try_get::<Option<String>, _>("id")
                .map_err(store_error)?
                .is_some()
            {
                job_rows.push(row);
            }
        }
        let spent = job_rows.len();
        let jobs = self.claimed_jobs(job_rows)?;
        if !first.try_get::<bool, _>("held_back").map_err(store_error)? {
            return Ok(Claimed::jobs(jobs));
        }
        let uses = rate::stored_log(first, limit)?;
        let now = decode::instant(first, "store_now").map_err(store_error)?;
        let retry_after = rate_rules::retry_after_spending(&uses, limit, now, spent);
        Ok(Claimed::rate_limited(jobs, retry_after))
    }

    /// Inserts `jobs` in one statement, stamped with `now` (`None`: the
    /// statement's `now()`), on `session` or, without one, on a session of
    /// the store's, and answers the created jobs in batch order.
    async fn insert_jobs(
        &self,
        jobs: &[&NewJob],
        now: Option<Timestamp>,
        session: Option<&mut PgConnection>,
    ) -> std::result::Result<Vec<PgRow>, sqlx::Error> {
        let columns = EnqueueColumns::new(jobs);
        let statement = || {
            sqlx::query(&self.sql.jobs.enqueue)
                .bind(&columns.ids)
                .bind(&columns.queues)
                .bind(&columns.payloads)
                .bind(&columns.priorities)
                .bind(&columns.run_ats)
                .bind(&columns.max_attempts)
                .bind(&columns.capabilities)
                .bind(&columns.unique_keys)
                .bind(&columns.unique_policies)
                .bind(&columns.unique_periods)
                .bind(now)
        };
        match session {
            Some(session) => statement().fetch_all(session).await,
            None => self.fetch_all_raw(statement).await,
        }
    }

    /// Creates `jobs` judging their uniqueness keys, in one transaction
    /// (see the [module](self) docs).
    async fn enqueue_judging_keys(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let mut session = self.sessions.take().await.map_err(store_error)?;
        let answer = self.enqueue_judging_keys_on(&mut session, jobs).await;
        // A failure may leave the transaction open (its ROLLBACK only
        // queued), holding the key locks: the pool's check sends it at once.
        session.keep_if(answer.is_ok());
        match answer {
            Ok(answer) => answer,
            Err(error) => Err(self.enqueue_error(jobs, error).await),
        }
    }

    /// [`enqueue_judging_keys`](Self::enqueue_judging_keys) on `session`:
    /// the store's answer, or the server error that ended the transaction.
    async fn enqueue_judging_keys_on(
        &self,
        session: &mut PgConnection,
        jobs: &[NewJob],
    ) -> std::result::Result<Result<Vec<Enqueued>>, sqlx::Error> {
        let pairs: BTreeSet<(&str, &str)> = jobs
            .iter()
            .filter_map(|job| Some((job.queue.as_str(), job.unique.as_ref()?.key.as_str())))
            .collect();
        let lock_keys = self.scope_locks.unique_job_keys(pairs.iter().copied());
        let (queues, keys): (Vec<&str>, Vec<&str>) = pairs.into_iter().unzip();
        let ids: Vec<&str> = jobs.iter().map(|job| job.id.as_str()).collect();

        let mut tx = session.begin_with(BEGIN_READ_COMMITTED).await?;
        sqlx::query(&self.sql.jobs.lock_unique_keys)
            .bind(&lock_keys)
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query(&self.sql.jobs.unique_holders)
            .bind(&ids)
            .bind(&queues)
            .bind(&keys)
            .fetch_all(&mut *tx)
            .await?;
        let Some(first) = rows.first() else {
            tx.rollback().await?;
            return Ok(Err(Error::corrupt(
                "the read of uniqueness keys' holders answered no row",
            )));
        };
        let now = decode::instant(first, "store_now")?;
        let taken: Vec<String> = first.try_get("taken_ids")?;
        if let Some(id) = ids.iter().find(|id| taken.iter().any(|taken| taken == *id)) {
            tx.rollback().await?;
            return Ok(Err(Error::job_already_exists(id)));
        }
        let mut holder_rows = Vec::with_capacity(rows.len());
        for row in &rows {
            if row.try_get::<Option<String>, _>("id")?.is_some() {
                holder_rows.push(row);
            }
        }
        let stored = self.jobs_skipping_undecodable("enqueue_unique", holder_rows);
        let verdicts = judge_unique_keys(jobs, stored, now);
        let creating: Vec<&NewJob> = jobs
            .iter()
            .zip(&verdicts)
            .filter(|(_, verdict)| matches!(verdict, Verdict::Create))
            .map(|(job, _)| job)
            .collect();
        let created = if creating.is_empty() {
            Vec::new()
        } else {
            self.insert_jobs(&creating, Some(now), Some(&mut *tx))
                .await?
        };
        tx.commit().await?;
        Ok(answer_verdicts(verdicts, &created))
    }

    /// The error of an enqueue of `jobs` that failed with `error`: a taken
    /// id (the primary key violated) names the first id of the batch that
    /// exists.
    async fn enqueue_error(&self, jobs: &[NewJob], error: sqlx::Error) -> Error {
        if sqlstate(&error).as_deref() != Some(UNIQUE_VIOLATION)
            || constraint(&error) != Some(JOBS_PRIMARY_KEY)
        {
            return store_error(error);
        }
        let ids: Vec<&str> = jobs.iter().map(|job| job.id.as_str()).collect();
        self.duplicate_job(&ids, error).await
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

/// The statement parameters of an enqueue, one array per column (see
/// [`JobStatements::enqueue`](crate::sql::JobStatements)).
struct EnqueueColumns<'j> {
    ids: Vec<&'j str>,
    queues: Vec<&'j str>,
    payloads: Vec<Json<&'j serde_json::Value>>,
    priorities: Vec<i32>,
    run_ats: Vec<Option<Timestamp>>,
    max_attempts: Vec<i32>,
    capabilities: Vec<Json<&'j BTreeSet<String>>>,
    unique_keys: Vec<Option<&'j str>>,
    unique_policies: Vec<Option<&'static str>>,
    unique_periods: Vec<Option<PgInterval>>,
}

impl<'j> EnqueueColumns<'j> {
    fn new(jobs: &[&'j NewJob]) -> Self {
        fn column<'j, T>(jobs: &[&'j NewJob], value: impl Fn(&'j NewJob) -> T) -> Vec<T> {
            jobs.iter().map(|job| value(job)).collect()
        }
        EnqueueColumns {
            ids: column(jobs, |job| job.id.as_str()),
            queues: column(jobs, |job| job.queue.as_str()),
            payloads: column(jobs, |job| Json(&job.payload)),
            priorities: column(jobs, |job| job.priority),
            run_ats: column(jobs, |job| job.run_at.map(clock::truncate_to_micros)),
            // Validated to at most `rules::MAX_ATTEMPTS`.
            max_attempts: column(jobs, |job| {
                i32::try_from(job.max_attempts).unwrap_or(i32::MAX)
            }),
            capabilities: column(jobs, |job| Json(&job.required_capabilities)),
            unique_keys: column(jobs, |job| {
                job.unique.as_ref().map(|unique| unique.key.as_str())
            }),
            unique_policies: column(jobs, |job| {
                job.unique.as_ref().map(|unique| unique.policy.kind())
            }),
            unique_periods: column(jobs, |job| match job.unique.as_ref()?.policy {
                // Validated to whole milliseconds.
                UniquePolicy::ForPeriod(period) => Some(interval(period)),
                _ => None,
            }),
        }
    }
}

/// What becomes of one job of a batch enqueued with uniqueness keys.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// It is created.
    Create,
    /// This stored job holds its key.
    HeldBy(Box<Job>),
    /// The job at this position of the batch, created, holds its key.
    HeldByBatch(usize),
}

/// The [`Verdict`] on each of `jobs`, in order, as the contract judges a
/// batch: a job with a key is held by the earliest created (then least id)
/// of the `stored` jobs of its queue with that key that
/// [hold it](rules::holds_unique_key) at `now`, or else by the first job of
/// the batch created with it (which holds it at `now`, its creation).
fn judge_unique_keys(jobs: &[NewJob], stored: Vec<Job>, now: Timestamp) -> Vec<Verdict> {
    let mut holding: Vec<Job> = stored
        .into_iter()
        .filter(|job| rules::holds_unique_key(job, now))
        .collect();
    holding.sort_by(|a, b| rules::job_listing_order(a).cmp(&rules::job_listing_order(b)));
    let mut held: HashMap<(String, String), Verdict> = HashMap::new();
    for job in holding {
        let Some(key) = job.unique.as_ref().map(|unique| unique.key.clone()) else {
            continue;
        };
        held.entry((job.queue.clone(), key))
            .or_insert(Verdict::HeldBy(Box::new(job)));
    }
    jobs.iter()
        .enumerate()
        .map(|(position, job)| {
            let Some(unique) = &job.unique else {
                return Verdict::Create;
            };
            match held.entry((job.queue.clone(), unique.key.clone())) {
                Entry::Occupied(holder) => holder.get().clone(),
                Entry::Vacant(free) => {
                    free.insert(Verdict::HeldByBatch(position));
                    Verdict::Create
                }
            }
        })
        .collect()
}

/// The answers of a batch judged `verdicts`, `created` holding the rows
/// inserted for the jobs judged [`Verdict::Create`], in batch order.
fn answer_verdicts(verdicts: Vec<Verdict>, created: &[PgRow]) -> Result<Vec<Enqueued>> {
    let mut created = created.iter().map(decode::trusted_job);
    let mut by_position: Vec<Option<Job>> = Vec::with_capacity(verdicts.len());
    let mut answers = Vec::with_capacity(verdicts.len());
    for verdict in verdicts {
        let (answer, job) = match verdict {
            Verdict::Create => {
                let job = created.next().ok_or_else(|| {
                    Error::corrupt("an enqueue answered fewer jobs than it created")
                })??;
                (Enqueued::Created(job.clone()), Some(job))
            }
            Verdict::HeldBy(holder) => (Enqueued::Duplicate(*holder), None),
            Verdict::HeldByBatch(position) => {
                let holder = by_position
                    .get(position)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| Error::corrupt("a job's holder in its batch was not created"))?;
                (Enqueued::Duplicate(holder), None)
            }
        };
        by_position.push(job);
        answers.push(answer);
    }
    Ok(answers)
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
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>> {
        let jobs = jobs.get();
        if jobs.iter().any(|job| job.unique.is_some()) {
            return self.enqueue_judging_keys(jobs).await;
        }
        let batch: Vec<&NewJob> = jobs.iter().collect();
        match self.insert_jobs(&batch, None, None).await {
            Ok(rows) => rows
                .iter()
                .map(|row| decode::trusted_job(row).map(Enqueued::Created))
                .collect(),
            Err(error) => Err(self.enqueue_error(jobs, error).await),
        }
    }

    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed> {
        let request = request.get();
        let capabilities: Vec<&str> = request.capabilities.iter().map(String::as_str).collect();
        let statement = match request.rate_limit {
            None => &self.sql.jobs.claim,
            Some(_) => &self.sql.jobs.claim_limited,
        };
        let rows = self
            .fetch_all(|| {
                let query = sqlx::query(statement)
                    .bind(&request.queue)
                    .bind(&capabilities)
                    // Validated to at most `rules::MAX_CLAIM`.
                    .bind(request.limit as i64)
                    .bind(&request.worker)
                    .bind(interval(request.ttl));
                match &request.rate_limit {
                    None => query,
                    Some(limit) => rate::bind(query, &self.scope_locks, limit),
                }
            })
            .await?;
        match &request.rate_limit {
            None => Ok(Claimed::jobs(self.claimed_jobs(&rows)?)),
            Some(limit) => self.claimed_within(limit, &rows),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_timestamp(1_700_000_000 + second, 0).expect("an instant")
    }

    fn keyed(queue: &str, id: &str, key: &str) -> NewJob {
        NewJob::new(queue, serde_json::json!({}))
            .id(id)
            .unique(key, UniquePolicy::WhileQueued)
    }

    fn stored(id: &str, key: &str, created: i64, state: JobState) -> Job {
        let mut job = rules::new_job(&keyed("q", id, key), at(created));
        job.state = state;
        job
    }

    #[test]
    fn the_earliest_holder_stored_or_created_in_the_batch_holds_each_key() {
        let earliest = stored("h1", "a", 1, JobState::Queued);
        let stored_jobs = vec![
            stored("h2", "a", 2, JobState::Queued),
            earliest.clone(),
            stored("claimed", "a", 0, JobState::Claimed),
            stored("done", "b", 0, JobState::Completed),
        ];
        let batch = [
            NewJob::new("q", serde_json::json!({})).id("plain"),
            keyed("q", "n1", "a"),
            keyed("q", "n2", "b"),
            keyed("q", "n3", "b"),
            keyed("other", "n4", "b"),
        ];
        assert_eq!(
            judge_unique_keys(&batch, stored_jobs, at(10)),
            [
                Verdict::Create,
                Verdict::HeldBy(Box::new(earliest)),
                Verdict::Create,
                Verdict::HeldByBatch(2),
                Verdict::Create,
            ]
        );
    }
}
