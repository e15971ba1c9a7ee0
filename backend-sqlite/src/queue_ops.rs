//! The job queue operations, run on the connection thread inside their
//! transaction.
//!
//! Same shape as the lease operations: the writes are the shared [queue
//! engine](tenure_lease_core::backend::queue_engine)'s, over the connection
//! as its [`JobTransaction`]; SQL only finds candidate rows through the
//! indexes, and the rules have the last word on each, so this backend
//! claims, settles and reaps exactly as the reference backend does. The
//! reads (listings, the purge) are SQL of their own.

use std::time::Duration;

use rusqlite::{params, Connection};
use tenure_lease_core::backend::queue_engine::JobTransaction;
use tenure_lease_core::backend::queue_rules;
use tenure_lease_core::clock::to_micros;
use tenure_lease_core::queue::{Job, JobState, QueueCounts};
use tenure_lease_core::{Result, Timestamp};

use crate::error::map_sqlite_error;
use crate::jobs::{self, decode_job, select_jobs};
use crate::lease_ops::{finished_cutoff, micros};
use crate::records::{self, Records, Undecodable};

/// Queued jobs of queue `?1` visible at `?2`, in
/// [`queue_rules::claim_order`](tenure_lease_core::backend::queue_rules::claim_order).
/// A `run_at` that is no instant (not an integer, or beyond `?3`, the latest
/// instant there is) is let through, so a hand-edited row is reported rather
/// than silently never claimed.
const CLAIM_CANDIDATES: &str = select_jobs!(
    "INDEXED BY jobs_claim_order WHERE state = 'queued' AND queue = ?1",
    " AND (typeof(run_at) <> 'integer' OR run_at <= ?2 OR run_at > ?3)",
    " ORDER BY priority DESC, run_at, created_at, id"
);

/// Claimed jobs whose lease ended at or before `?1` (or whose expiry is no
/// instant: not an integer, or beyond `?2`), in
/// [`queue_rules::reap_order`](tenure_lease_core::backend::queue_rules::reap_order).
const REAP_CANDIDATES: &str = select_jobs!(
    "INDEXED BY jobs_claimed_by_expiry WHERE state = 'claimed'",
    " AND (typeof(lease_expires_at) NOT IN ('integer', 'null') OR lease_expires_at <= ?1",
    " OR lease_expires_at > ?2)",
    " ORDER BY lease_expires_at, id"
);

/// Dead letters of queue `?1` in
/// [`queue_rules::dead_letter_order`](tenure_lease_core::backend::queue_rules::dead_letter_order),
/// at most `?2`.
const DEAD_LETTERS: &str = select_jobs!(
    "INDEXED BY jobs_dead_letters WHERE state = 'dead_lettered' AND queue = ?1",
    " ORDER BY updated_at, id LIMIT ?2"
);

/// Jobs of queue `?1` with the uniqueness key `?2`.
const WITH_UNIQUE_KEY: &str =
    select_jobs!("INDEXED BY jobs_by_unique_key WHERE queue = ?1 AND unique_key = ?2");

/// `?1` queue, `?2` state or NULL for any, `?3` limit.
const JOBS_OF_A_QUEUE: &str = select_jobs!(
    "WHERE queue = ?1 AND (?2 IS NULL OR state = ?2)",
    " ORDER BY created_at, id LIMIT ?3"
);

impl JobTransaction for Records<'_> {
    fn job_exists(&mut self, id: &str) -> Result<bool> {
        jobs::job_exists(self.0, id)
    }

    fn load_job(&mut self, id: &str) -> Result<Option<Job>> {
        jobs::load_job(self.0, id)
    }

    fn insert_job(&mut self, job: &Job) -> Result<()> {
        jobs::insert_job(self.0, job)
    }

    fn save_job(&mut self, job: &Job) -> Result<()> {
        jobs::save_job(self.0, job)
    }

    fn unique_holders(&mut self, queue: &str, key: &str) -> Result<Vec<Job>> {
        select_wanted(
            self.0,
            "unique",
            WITH_UNIQUE_KEY,
            params![queue, key],
            usize::MAX,
            &|_| true,
        )
    }

    fn next_fence(&mut self) -> Result<u64> {
        records::next_fence(self.0)
    }

    /// Capabilities are judged by `claimable`, not in SQL: candidates the
    /// worker cannot run are passed over, and the walk stops as soon as
    /// `limit` jobs are chosen.
    fn claim_candidates(
        &mut self,
        queue: &str,
        now: Timestamp,
        limit: usize,
        claimable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        select_wanted(
            self.0,
            "claim",
            CLAIM_CANDIDATES,
            params![queue, to_micros(now), records::latest_micros()],
            limit,
            claimable,
        )
    }

    /// The SQL bound is a superset of `reapable`, which has the last word
    /// on every decoded row.
    fn reap_candidates(
        &mut self,
        grace: Duration,
        now: Timestamp,
        limit: usize,
        reapable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let expired_before = to_micros(now).saturating_sub(micros(grace));
        select_wanted(
            self.0,
            "reap",
            REAP_CANDIDATES,
            params![expired_before, records::latest_micros()],
            limit,
            reapable,
        )
    }
}

/// Up to `limit` of the jobs `sql` selects that `wanted` keeps, in the
/// order selected; a row that cannot be decoded is passed over and logged.
fn select_wanted(
    connection: &Connection,
    operation: &str,
    sql: &str,
    params: impl rusqlite::Params,
    limit: usize,
    wanted: &dyn Fn(&Job) -> bool,
) -> Result<Vec<Job>> {
    let mut chosen = Vec::with_capacity(limit.min(16));
    let mut statement = connection.prepare_cached(sql).map_err(map_sqlite_error)?;
    let mut rows = statement.query(params).map_err(map_sqlite_error)?;
    while chosen.len() < limit {
        let Some(row) = rows.next().map_err(map_sqlite_error)? else {
            break;
        };
        match decode_job(row) {
            Ok(job) if wanted(&job) => chosen.push(job),
            Ok(_) => {}
            Err(undecodable) => warn_skipped(operation, &undecodable),
        }
    }
    Ok(chosen)
}

/// Dead letters of `queue`, oldest update first. A damaged row makes the answer
/// [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) rather than
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

/// Every queue's jobs counted by state. A group whose queue or state is
/// not text (a hand-edited row) is left out, with a warning.
pub(crate) fn count_jobs(connection: &Connection) -> Result<Vec<QueueCounts>> {
    const COUNTS: &str = "SELECT queue, state, count(*) FROM jobs GROUP BY queue, state";
    let mut statement = connection
        .prepare_cached(COUNTS)
        .map_err(map_sqlite_error)?;
    let mut rows = statement.query([]).map_err(map_sqlite_error)?;
    let mut groups = Vec::new();
    while let Some(row) = rows.next().map_err(map_sqlite_error)? {
        let text = |index| -> Option<String> {
            row.get_ref(index)
                .ok()
                .and_then(|value| value.as_str().ok())
                .map(str::to_owned)
        };
        let count = row
            .get::<_, i64>(2)
            .ok()
            .and_then(|count| u64::try_from(count).ok())
            .unwrap_or(0);
        match (text(0), text(1)) {
            (Some(queue), Some(state)) => groups.push((queue, state, count)),
            _ => tracing::warn!(
                jobs = count,
                "count_jobs left out jobs whose queue or state is not text; they need an \
                 operator's attention"
            ),
        }
    }
    Ok(queue_rules::count_stored_states("sqlite", groups))
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

fn warn_skipped(operation: &str, undecodable: &Undecodable) {
    tracing::warn!(
        job.id = %undecodable.id,
        reason = %undecodable.reason,
        "{operation} skipped a stored job it cannot decode; it needs an operator's attention"
    );
}

/// Finished jobs (`queue_rules::job_purgeable`) whose finish time, their last
/// update, is at or before `?1`. A row whose `updated_at` is not an integer
/// (edited by hand) compares greater than any integer and stays, for an
/// operator to see. A job row is the only thing the file keeps for a job
/// (its indexes are SQLite's own), so deleting the row leaves nothing behind.
const PURGE_FINISHED: &str = "DELETE FROM jobs INDEXED BY jobs_finished_by_update \
     WHERE state IN ('completed', 'dead_lettered') AND updated_at <= ?1 \
     AND (unique_until IS NULL OR unique_until <= ?2)";

/// Deletes the jobs
/// [`queue_rules::job_purgeable`](tenure_lease_core::backend::queue_rules::job_purgeable)
/// allows: finished with `updated_at + older_than <= now`, and not holding
/// a period's uniqueness key; answers how many.
pub(crate) fn purge_finished(
    connection: &Connection,
    now: Timestamp,
    older_than: Duration,
) -> Result<u64> {
    let deleted = connection
        .prepare_cached(PURGE_FINISHED)
        .map_err(map_sqlite_error)?
        .execute(params![finished_cutoff(now, older_than), to_micros(now)])
        .map_err(map_sqlite_error)?;
    Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
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
                WITH_UNIQUE_KEY,
                "USING INDEX jobs_by_unique_key (queue=? AND unique_key=?)",
            ),
            (
                PURGE_FINISHED,
                "USING INDEX jobs_finished_by_update (updated_at<?)",
            ),
        ];
        let statements: Vec<&str> = expectations.iter().map(|(sql, _)| *sql).collect();
        assert_plans(&expectations, &statements);
    }
}
