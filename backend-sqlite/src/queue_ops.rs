//! The job queue operations, run on the connection thread inside their
//! transaction.
//!
//! Same shape as the lease operations: read the jobs involved, judge them
//! with [`tenure_lease_core::backend::queue_rules`], write the result. SQL only finds
//! candidate rows through the indexes; the rules have the last word on each,
//! so this backend claims, settles and reaps exactly as the reference
//! backend does.

use std::collections::BTreeSet;
use std::time::Duration;

use rusqlite::{params, Connection};
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::clock::to_micros;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobLoss, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, ReapReport, TakeBack,
};
use tenure_lease_core::{Result, Timestamp};

use crate::error::map_sqlite_error;
use crate::jobs::{self, decode_job, select_jobs};
use crate::lease_ops::{delete_finished_before, micros};
use crate::records::{self, Undecodable};

/// Queued jobs of queue `?1` visible at `?2`, in [`rules::claim_order`]. A
/// `run_at` that is no instant (not an integer, or beyond `?3`, the latest
/// instant there is) is let through, so a hand-edited row is reported
/// rather than silently never claimed.
const CLAIM_CANDIDATES: &str = select_jobs!(
    "INDEXED BY jobs_claim_order WHERE state = 'queued' AND queue = ?1",
    " AND (typeof(run_at) <> 'integer' OR run_at <= ?2 OR run_at > ?3)",
    " ORDER BY priority DESC, run_at, created_at, id"
);

/// Claimed jobs whose lease ended at or before `?1` (or whose expiry is no
/// instant: not an integer, or beyond `?2`), in [`rules::reap_order`].
const REAP_CANDIDATES: &str = select_jobs!(
    "INDEXED BY jobs_claimed_by_expiry WHERE state = 'claimed'",
    " AND (typeof(lease_expires_at) NOT IN ('integer', 'null') OR lease_expires_at <= ?1",
    " OR lease_expires_at > ?2)",
    " ORDER BY lease_expires_at, id"
);

/// Dead letters of queue `?1` in [`rules::dead_letter_order`], at most `?2`.
const DEAD_LETTERS: &str = select_jobs!(
    "INDEXED BY jobs_dead_letters WHERE state = 'dead_lettered' AND queue = ?1",
    " ORDER BY updated_at, id LIMIT ?2"
);

/// `?1` queue, `?2` state or NULL for any, `?3` limit.
const JOBS_OF_A_QUEUE: &str = select_jobs!(
    "WHERE queue = ?1 AND (?2 IS NULL OR state = ?2)",
    " ORDER BY created_at, id LIMIT ?3"
);

pub(crate) fn enqueue(connection: &Connection, now: Timestamp, new: &NewJob) -> Result<Job> {
    jobs::refuse_existing_job(connection, &new.id)?;
    let job = rules::new_job(new, now);
    jobs::insert_job(connection, &job)?;
    Ok(job)
}

/// Claims the best visible jobs. Capabilities are judged here, not in SQL:
/// candidates the worker cannot run are passed over, and the walk stops as
/// soon as `limit` jobs are chosen.
pub(crate) fn claim(
    connection: &Connection,
    now: Timestamp,
    request: &ClaimRequest,
) -> Result<Vec<ClaimedJob>> {
    let mut chosen = Vec::with_capacity(request.limit.min(16));
    {
        let mut statement = connection
            .prepare_cached(CLAIM_CANDIDATES)
            .map_err(map_sqlite_error)?;
        let mut rows = statement
            .query(params![
                request.queue,
                to_micros(now),
                records::latest_micros()
            ])
            .map_err(map_sqlite_error)?;
        while chosen.len() < request.limit {
            let Some(row) = rows.next().map_err(map_sqlite_error)? else {
                break;
            };
            match decode_job(row) {
                Ok(job) if rules::claimable(&job, &request.queue, &request.capabilities, now) => {
                    chosen.push(job);
                }
                Ok(_) => {}
                Err(undecodable) => warn_skipped("claim", &undecodable),
            }
        }
    }
    let mut claimed = Vec::with_capacity(chosen.len());
    for mut job in chosen {
        let fence = records::next_fence(connection)?;
        let claim = rules::claim_job(&mut job, &request.worker, request.ttl, fence, now);
        jobs::save_job(connection, &job)?;
        claimed.push(ClaimedJob { job, claim });
    }
    Ok(claimed)
}

/// Loads the job `claim` names and, when [`rules::judge_job`] says the claim
/// still holds it, applies `write` and saves it. Answers the job as it now
/// is, or why the claim lost it (then nothing changed).
fn fenced_write<T>(
    connection: &Connection,
    claim: &JobClaim,
    write: impl FnOnce(&mut Job) -> T,
) -> Result<Result<(Job, T), JobLoss>> {
    let job = jobs::load_job(connection, &claim.id)?;
    if let Err(loss) = rules::judge_job(job.as_ref(), claim) {
        return Ok(Err(loss));
    }
    let Some(mut job) = job else {
        return Ok(Err(JobLoss::Missing));
    };
    let answer = write(&mut job);
    jobs::save_job(connection, &job)?;
    Ok(Ok((job, answer)))
}

fn settle(outcome: Result<(Job, ()), JobLoss>) -> JobSettle {
    match outcome {
        Ok((job, ())) => JobSettle::Settled(job),
        Err(loss) => JobSettle::Rejected(loss),
    }
}

pub(crate) fn renew_job(
    connection: &Connection,
    now: Timestamp,
    claim: &JobClaim,
    ttl: Duration,
) -> Result<JobRenewal> {
    Ok(
        match fenced_write(connection, claim, |job| rules::renew_job(job, ttl, now))? {
            Ok((_, expires_at)) => JobRenewal::Renewed { expires_at },
            Err(loss) => JobRenewal::Lost(loss),
        },
    )
}

pub(crate) fn complete(
    connection: &Connection,
    now: Timestamp,
    claim: &JobClaim,
) -> Result<JobSettle> {
    fenced_write(connection, claim, |job| rules::complete_job(job, now)).map(settle)
}

pub(crate) fn fail(
    connection: &Connection,
    now: Timestamp,
    claim: &JobClaim,
    error: &str,
    action: FailAction,
) -> Result<JobSettle> {
    fenced_write(connection, claim, |job| {
        rules::fail_job(job, error, action, now);
    })
    .map(settle)
}

pub(crate) fn defer(
    connection: &Connection,
    now: Timestamp,
    claim: &JobClaim,
    missing: &BTreeSet<String>,
) -> Result<JobSettle> {
    fenced_write(connection, claim, |job| rules::defer_job(job, missing, now)).map(settle)
}

/// Requeues or dead-letters at most [`rules::MAX_REAP`] jobs whose lease
/// ended beyond `grace`, oldest expiry first. The SQL bound is a superset of
/// [`rules::reapable`], which has the last word on every decoded row.
pub(crate) fn reap(connection: &Connection, now: Timestamp, grace: Duration) -> Result<ReapReport> {
    let expired_before = to_micros(now).saturating_sub(micros(grace));
    let mut expired = Vec::new();
    {
        let mut statement = connection
            .prepare_cached(REAP_CANDIDATES)
            .map_err(map_sqlite_error)?;
        let mut rows = statement
            .query([expired_before, records::latest_micros()])
            .map_err(map_sqlite_error)?;
        while expired.len() < rules::MAX_REAP {
            let Some(row) = rows.next().map_err(map_sqlite_error)? else {
                break;
            };
            match decode_job(row) {
                Ok(job) if rules::reapable(&job, grace, now) => expired.push(job),
                Ok(_) => {}
                Err(undecodable) => warn_skipped("reap", &undecodable),
            }
        }
    }
    let mut report = ReapReport::default();
    for mut job in expired {
        let requeued = rules::reap_job(&mut job, now);
        jobs::save_job(connection, &job)?;
        if requeued {
            report.requeued.push(job);
        } else {
            report.dead_lettered.push(job);
        }
    }
    Ok(report)
}

pub(crate) fn take_back(
    connection: &Connection,
    now: Timestamp,
    claim: &JobClaim,
    ttl: Duration,
) -> Result<TakeBack> {
    let job = jobs::load_job(connection, &claim.id)?;
    if let Err(refusal) = rules::judge_take_back(job.as_ref(), claim) {
        return Ok(TakeBack::NotTaken(refusal));
    }
    let Some(mut job) = job else {
        return Ok(TakeBack::NotTaken(
            tenure_lease_core::queue::TakeBackRefusal::Missing,
        ));
    };
    let fence = records::next_fence(connection)?;
    let claim = rules::take_back_job(&mut job, ttl, fence, now);
    jobs::save_job(connection, &job)?;
    Ok(TakeBack::Taken(ClaimedJob { job, claim }))
}

/// Dead letters of `queue`, oldest update first. A damaged row makes the
/// answer [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) rather than
/// silently incomplete, as the lease listings do.
pub(crate) fn list_dead_letters(
    connection: &Connection,
    queue: &str,
    limit: usize,
) -> Result<Vec<Job>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    select_all(connection, DEAD_LETTERS, params![queue, limit])
}

pub(crate) fn list_jobs(
    connection: &Connection,
    queue: &str,
    state: Option<JobState>,
    limit: usize,
) -> Result<Vec<Job>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let state = state.map(JobState::as_str);
    select_all(connection, JOBS_OF_A_QUEUE, params![queue, state, limit])
}

/// Every job `sql` selects; an undecodable one fails the read.
fn select_all(
    connection: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Job>> {
    let mut statement = connection.prepare_cached(sql).map_err(map_sqlite_error)?;
    let rows = statement
        .query_map(params, |row| Ok(decode_job(row)))
        .map_err(map_sqlite_error)?;
    let mut jobs = Vec::new();
    for row in rows {
        jobs.push(
            row.map_err(map_sqlite_error)?
                .map_err(Undecodable::into_error)?,
        );
    }
    Ok(jobs)
}

pub(crate) fn retry_dead_letter(
    connection: &Connection,
    now: Timestamp,
    id: &str,
) -> Result<OperatorRetry> {
    let Some(mut job) = jobs::load_job(connection, id)? else {
        return Ok(OperatorRetry::Missing);
    };
    if job.state != JobState::DeadLettered {
        return Ok(OperatorRetry::NotDeadLettered(job.state));
    }
    rules::retry_dead_letter(&mut job, now);
    jobs::save_job(connection, &job)?;
    Ok(OperatorRetry::Requeued(job))
}

fn warn_skipped(operation: &str, undecodable: &Undecodable) {
    tracing::warn!(
        job.id = %undecodable.id,
        reason = %undecodable.reason,
        "{operation} skipped a stored job it cannot decode; it needs an operator's attention"
    );
}

/// Finished jobs (`rules::job_purgeable`) whose finish time, their last
/// update, is at or before `?1`. A row whose `updated_at` is not an integer
/// (edited by hand) compares greater than any integer and stays, for an
/// operator to see. A job row is the only thing the file keeps for a job
/// (its indexes are SQLite's own), so deleting the row leaves nothing behind.
const PURGE_FINISHED: &str = "DELETE FROM jobs INDEXED BY jobs_finished_by_update \
     WHERE state IN ('completed', 'dead_lettered') AND updated_at <= ?1";

/// Deletes the jobs [`rules::job_purgeable`] allows: finished with
/// `updated_at + older_than <= now`; answers how many.
pub(crate) fn purge_finished(
    connection: &Connection,
    now: Timestamp,
    older_than: Duration,
) -> Result<u64> {
    delete_finished_before(connection, PURGE_FINISHED, now, older_than)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::LOAD_JOB;
    use crate::lease_ops::tests::assert_plans;

    #[test]
    fn every_queue_query_uses_its_index() {
        let expectations = [
            (LOAD_JOB, "USING INDEX sqlite_autoindex_jobs_1 (id=?)"),
            (CLAIM_CANDIDATES, "USING INDEX jobs_claim_order (queue=?)"),
            (REAP_CANDIDATES, "USING INDEX jobs_claimed_by_expiry"),
            (DEAD_LETTERS, "USING INDEX jobs_dead_letters (queue=?)"),
            (
                PURGE_FINISHED,
                "USING INDEX jobs_finished_by_update (updated_at<?)",
            ),
        ];
        let statements: Vec<&str> = expectations.iter().map(|(sql, _)| *sql).collect();
        assert_plans(&expectations, &statements);
    }
}
