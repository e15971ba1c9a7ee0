//! The job queue's writes for a store that decides in Rust, written once.
//!
//! As the lease [engine](super::engine) does for leases: a store that holds
//! a transaction open while Rust code runs (memory's mutex, SQLite's
//! `BEGIN IMMEDIATE`, the file's lock, an etcd transaction retried until
//! its reads still hold, a MySQL transaction holding its rows locked)
//! implements [`JobTransaction`], a few synchronous steps over its storage,
//! and calls these functions inside it. Each loads
//! what it needs, judges it with [`queue_rules`](super::queue_rules) and
//! writes the result back, so every such store claims, settles, reaps and
//! takes back exactly as the contract's rules say.
//!
//! Reads (`get_job`, the listings, `purge_jobs`) stay with each store: they
//! decide nothing, and each store finds rows its own way.
//!
//! Input is validated by the caller first ([`validate`](super::validate)),
//! so a transaction is never opened for a request that would be refused.

use std::collections::BTreeSet;
use std::time::Duration;

use super::queue_rules as rules;
use super::rate_rules::{RateLogs, RateWindow};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::queue::{
    ClaimRequest, Claimed, ClaimedJob, Enqueued, FailAction, Job, JobClaim, JobLoss, JobRenewal,
    JobSettle, JobState, NewJob, OperatorRetry, ReapReport, TakeBack, TakeBackRefusal,
};

/// A store's jobs inside one open transaction: what the [queue
/// engine](self) reads and writes. Every step may fail with the store's
/// error; the caller then rolls the transaction back.
pub trait JobTransaction {
    /// Whether a job with `id` exists, decodable or not.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn job_exists(&mut self, id: &str) -> Result<bool>;

    /// The job with `id`, if any.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when it cannot be
    /// decoded; the store's errors.
    fn load_job(&mut self, id: &str) -> Result<Option<Job>>;

    /// Stores a new job.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn insert_job(&mut self, job: &Job) -> Result<()>;

    /// Writes back a job loaded in this transaction.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn save_job(&mut self, job: &Job) -> Result<()>;

    /// The jobs of `queue` enqueued with the uniqueness key `key`, those
    /// that may still [hold it](rules::holds_unique_key) at least (the
    /// rules have the last word), in any order; a job that cannot be
    /// decoded is passed over, and logged. The transaction must keep what
    /// it answers from changing until it commits, as for every read, so
    /// that two enqueues with one key are judged one after the other.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn unique_holders(&mut self, queue: &str, key: &str) -> Result<Vec<Job>>;

    /// Draws the next value of the store-wide fence sequence (the one the
    /// leases draw from).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when the counter
    /// is damaged or exhausted; the store's errors.
    fn next_fence(&mut self) -> Result<u64>;

    /// Up to `limit` queued jobs of `queue` that `claimable` accepts, in
    /// [`claim_order`](rules::claim_order). The store need only offer it
    /// those that may be visible at `now` (the rules have the last word); a
    /// job that cannot be decoded is passed over, and logged.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn claim_candidates(
        &mut self,
        queue: &str,
        now: Timestamp,
        limit: usize,
        claimable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>>;

    /// Up to `limit` claimed jobs that `reapable` accepts, in
    /// [`reap_order`](rules::reap_order). The store need only offer it
    /// those whose lease may have ended `grace` before `now`; a store whose
    /// claims end on timers of its own leaves out those its timer still
    /// keeps alive. A job that cannot be decoded is passed over, and logged.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn reap_candidates(
        &mut self,
        grace: Duration,
        now: Timestamp,
        limit: usize,
        reapable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>>;
}

/// Creates `jobs`, all or none, judging each uniqueness key ([contract
/// §9, unique jobs](crate::contract)): any id already taken refuses the whole batch
/// before anything is written; then each job in turn is created, or
/// answered as a duplicate of the job (stored, or created earlier in the
/// batch) holding its key at `now`.
///
/// # Errors
///
/// [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists), naming
/// the first id taken, by a job decodable or not; the store's errors.
pub fn enqueue_batch(
    tx: &mut impl JobTransaction,
    jobs: &[NewJob],
    now: Timestamp,
) -> Result<Vec<Enqueued>> {
    for job in jobs {
        if tx.job_exists(&job.id)? {
            return Err(Error::job_already_exists(&job.id));
        }
    }
    let mut created: Vec<Job> = Vec::with_capacity(jobs.len());
    let mut answers = Vec::with_capacity(jobs.len());
    for new in jobs {
        if let Some(holder) = unique_holder(tx, new, &created, now)? {
            answers.push(Enqueued::Duplicate(holder));
            continue;
        }
        let job = rules::new_job(new, now);
        tx.insert_job(&job)?;
        created.push(job.clone());
        answers.push(Enqueued::Created(job));
    }
    Ok(answers)
}

/// The job holding `new`'s uniqueness key at `now`, if it has one and one
/// does: the earliest created (then least id) of those stored and those
/// `created` before it in the batch.
fn unique_holder(
    tx: &mut impl JobTransaction,
    new: &NewJob,
    created: &[Job],
    now: Timestamp,
) -> Result<Option<Job>> {
    let Some(unique) = &new.unique else {
        return Ok(None);
    };
    let stored = tx.unique_holders(&new.queue, &unique.key)?;
    let batch = created
        .iter()
        .filter(|job| {
            job.queue == new.queue
                && job
                    .unique
                    .as_ref()
                    .is_some_and(|held| held.key == unique.key)
        })
        .cloned();
    Ok(stored
        .into_iter()
        .chain(batch)
        .filter(|job| rules::holds_unique_key(job, now))
        .min_by(|a, b| rules::job_listing_order(a).cmp(&rules::job_listing_order(b))))
}

/// Claims up to `limit` (at most `request.limit`) of the best visible jobs
/// `request`'s worker can run, each under a fresh fence, and no more than
/// its rate limit has permits left, using one per job; answers whether the
/// limit held back a claimable job.
///
/// # Errors
///
/// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when the rate log
/// cannot be decoded; the store's errors.
pub fn claim(
    tx: &mut (impl JobTransaction + RateLogs),
    request: &ClaimRequest,
    limit: usize,
    now: Timestamp,
) -> Result<Claimed> {
    let wanted = limit.min(request.limit);
    let window = match &request.rate_limit {
        Some(rate_limit) => Some(RateWindow::open(tx, rate_limit, now)?),
        None => None,
    };
    let permits = window.as_ref().map_or(wanted, RateWindow::left);
    // One candidate past the permits tells whether the limit held one back.
    let looked_for = if permits < wanted {
        permits + 1
    } else {
        wanted
    };
    let mut chosen = if looked_for == 0 {
        Vec::new()
    } else {
        tx.claim_candidates(&request.queue, now, looked_for, &|job| {
            rules::claimable(job, &request.queue, &request.capabilities, now)
        })?
    };
    let held_back = chosen.len() > permits;
    chosen.truncate(permits);
    let jobs = chosen
        .into_iter()
        .map(|mut job| {
            let fence = tx.next_fence()?;
            let claim = rules::claim_job(&mut job, &request.worker, request.ttl, fence, now);
            tx.save_job(&job)?;
            Ok(ClaimedJob { job, claim })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(match window {
        Some(window) => {
            let retry_after = window.retry_after_spending(jobs.len());
            window.spend(tx, jobs.len())?;
            if held_back {
                Claimed::rate_limited(jobs, retry_after)
            } else {
                Claimed::jobs(jobs)
            }
        }
        None => Claimed::jobs(jobs),
    })
}

/// Loads the job `claim` names and, when [`judge_job`](rules::judge_job)
/// says the claim still holds it, applies `write` and saves it. Answers the
/// job as it now is with `write`'s answer, or why the claim lost it (then
/// nothing changed).
///
/// # Errors
///
/// The store's errors, a job that cannot be decoded among them.
pub fn write_claimed<T>(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    write: impl FnOnce(&mut Job) -> T,
) -> Result<std::result::Result<(Job, T), JobLoss>> {
    let job = tx.load_job(&claim.id)?;
    if let Err(loss) = rules::judge_job(job.as_ref(), claim) {
        return Ok(Err(loss));
    }
    let Some(mut job) = job else {
        return Ok(Err(JobLoss::Missing));
    };
    let answer = write(&mut job);
    tx.save_job(&job)?;
    Ok(Ok((job, answer)))
}

/// Extends the claim's lease to `now + ttl`, if it still holds the job.
///
/// # Errors
///
/// As [`write_claimed`].
pub fn renew_job(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    ttl: Duration,
    now: Timestamp,
) -> Result<JobRenewal> {
    renew_job_reporting(tx, claim, ttl, now, None)
}

/// [`renew_job`], setting the job's progress in the same write.
///
/// # Errors
///
/// As [`write_claimed`].
pub fn renew_job_with_progress(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    ttl: Duration,
    now: Timestamp,
    progress: &serde_json::Value,
) -> Result<JobRenewal> {
    renew_job_reporting(tx, claim, ttl, now, Some(progress))
}

fn renew_job_reporting(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    ttl: Duration,
    now: Timestamp,
    progress: Option<&serde_json::Value>,
) -> Result<JobRenewal> {
    let renewed = write_claimed(tx, claim, |job| {
        if let Some(progress) = progress {
            job.progress = Some(progress.clone());
        }
        rules::renew_job(job, ttl, now)
    })?;
    Ok(match renewed {
        Ok((_, expires_at)) => JobRenewal::Renewed { expires_at },
        Err(loss) => JobRenewal::Lost(loss),
    })
}

/// Completes the claimed job.
///
/// # Errors
///
/// As [`write_claimed`].
pub fn complete(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    now: Timestamp,
) -> Result<JobSettle> {
    settle(tx, claim, |job| rules::complete_job(job, now))
}

/// Fails the claimed job: retried after its backoff, or dead-lettered, as
/// `action` and its attempts say.
///
/// # Errors
///
/// As [`write_claimed`].
pub fn fail(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    error: &str,
    action: FailAction,
    now: Timestamp,
) -> Result<JobSettle> {
    settle(tx, claim, |job| rules::fail_job(job, error, action, now))
}

/// Puts the claimed job back for a worker with the `missing` capabilities.
///
/// # Errors
///
/// As [`write_claimed`].
pub fn defer(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    missing: &BTreeSet<String>,
    now: Timestamp,
) -> Result<JobSettle> {
    settle(tx, claim, |job| rules::defer_job(job, missing, now))
}

fn settle(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    write: impl FnOnce(&mut Job),
) -> Result<JobSettle> {
    Ok(match write_claimed(tx, claim, write)? {
        Ok((job, ())) => JobSettle::Settled(job),
        Err(loss) => JobSettle::Rejected(loss),
    })
}

/// Requeues or dead-letters up to `limit` (at most
/// [`MAX_REAP`](rules::MAX_REAP)) jobs whose lease ended beyond `grace`,
/// oldest expiry first.
///
/// # Errors
///
/// The store's errors.
pub fn reap(
    tx: &mut impl JobTransaction,
    grace: Duration,
    limit: usize,
    now: Timestamp,
) -> Result<ReapReport> {
    let limit = limit.min(rules::MAX_REAP);
    let expired = if limit == 0 {
        Vec::new()
    } else {
        tx.reap_candidates(grace, now, limit, &|job| rules::reapable(job, grace, now))?
    };
    let mut report = ReapReport::default();
    for mut job in expired {
        let requeued = rules::reap_job(&mut job, now);
        tx.save_job(&job)?;
        if requeued {
            report.requeued.push(job);
        } else {
            report.dead_lettered.push(job);
        }
    }
    Ok(report)
}

/// Takes back, under a fresh fence, the job `claim` (an earlier claim of
/// the same worker) names, when [`judge_take_back`](rules::judge_take_back)
/// allows it.
///
/// # Errors
///
/// The store's errors, a job that cannot be decoded among them.
pub fn take_back(
    tx: &mut impl JobTransaction,
    claim: &JobClaim,
    ttl: Duration,
    now: Timestamp,
) -> Result<TakeBack> {
    let job = tx.load_job(&claim.id)?;
    if let Err(refusal) = rules::judge_take_back(job.as_ref(), claim) {
        return Ok(TakeBack::NotTaken(refusal));
    }
    let Some(mut job) = job else {
        return Ok(TakeBack::NotTaken(TakeBackRefusal::Missing));
    };
    let fence = tx.next_fence()?;
    let claim = rules::take_back_job(&mut job, ttl, fence, now);
    tx.save_job(&job)?;
    Ok(TakeBack::Taken(ClaimedJob { job, claim }))
}

/// Queues the dead-lettered job `id` again, with its attempts reset.
///
/// # Errors
///
/// The store's errors, a job that cannot be decoded among them.
pub fn retry_dead_letter(
    tx: &mut impl JobTransaction,
    id: &str,
    now: Timestamp,
) -> Result<OperatorRetry> {
    let Some(mut job) = tx.load_job(id)? else {
        return Ok(OperatorRetry::Missing);
    };
    if job.state != JobState::DeadLettered {
        return Ok(OperatorRetry::NotDeadLettered(job.state));
    }
    rules::retry_dead_letter(&mut job, now);
    tx.save_job(&job)?;
    Ok(OperatorRetry::Requeued(job))
}
