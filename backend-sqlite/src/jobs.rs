//! Jobs to and from rows: decoding, and the statements that read and write
//! single jobs inside an operation's transaction.
//!
//! A job is one `jobs` row, so every read is one statement and one
//! snapshot. Decoding shares the lease rows' helpers and, like them, never
//! panics: a value written by hand becomes an [`Undecodable`] naming the job
//! and the column.

use std::collections::BTreeSet;

use rusqlite::{params, Connection, OptionalExtension, Row};
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::clock::to_micros;
use tenure_lease_core::queue::{DeadReason, Job, JobState};
use tenure_lease_core::{Error, Result};

use crate::error::map_sqlite_error;
use crate::records::{
    column, decode_row, fence_value, progress_column, progress_text, timestamp, Undecodable,
};

/// `SELECT` of whole jobs, followed by the given clauses; columns in the
/// order [`decode_job`] reads them.
macro_rules! select_jobs {
    ($($clause:expr),* $(,)?) => {
        concat!(
            "SELECT id, queue, payload, priority, run_at, attempt, max_attempts, \
             required_capabilities, state, owner, fence, lease_expires_at, last_error, \
             dead_reason, created_at, updated_at, taken_back, taken_back_at, progress, \
             unique_key, unique_policy, unique_until FROM jobs ",
            $($clause),*
        )
    };
}
pub(crate) use select_jobs;

/// The job with id `?1`.
pub(crate) const LOAD_JOB: &str = select_jobs!("WHERE id = ?1");

/// Decodes a row selected by [`select_jobs!`].
pub(crate) fn decode_job(row: &Row<'_>) -> Result<Job, Undecodable> {
    decode_row(row, "job", decode_job_fields)
}

fn decode_job_fields(row: &Row<'_>) -> Result<Job, String> {
    let payload: String = column(row, 2, "payload")?;
    let capabilities: String = column(row, 7, "required_capabilities")?;
    let state: String = column(row, 8, "state")?;
    let fence: i64 = column(row, 10, "fence")?;
    let dead_reason: Option<String> = column(row, 13, "dead_reason")?;
    let taken_back: i64 = column(row, 16, "taken_back")?;
    let (taken_back, taken_back_at) = rules::stored_take_back_trace(
        u32::try_from(taken_back)
            .map_err(|_| format!("column taken_back: {taken_back} is not a count"))?,
        column::<Option<i64>>(row, 17, "taken_back_at")?
            .map(|micros| timestamp(micros, "taken_back_at"))
            .transpose()?,
    )?;
    let created_at = timestamp(column(row, 14, "created_at")?, "created_at")?;
    let unique = rules::stored_unique(
        column(row, 19, "unique_key")?,
        column::<Option<String>>(row, 20, "unique_policy")?.as_deref(),
        column::<Option<i64>>(row, 21, "unique_until")?
            .map(|micros| timestamp(micros, "unique_until"))
            .transpose()?,
        created_at,
    )?;
    Ok(Job {
        id: column(row, 0, "id")?,
        queue: column(row, 1, "queue")?,
        payload: serde_json::from_str(&payload)
            .map_err(|error| format!("column payload: not JSON: {error}"))?,
        priority: column(row, 3, "priority")?,
        run_at: timestamp(column(row, 4, "run_at")?, "run_at")?,
        attempt: rules::stored_attempt_count("column attempt", column(row, 5, "attempt")?)?,
        max_attempts: rules::stored_attempt_count(
            "column max_attempts",
            column(row, 6, "max_attempts")?,
        )?,
        required_capabilities: serde_json::from_str::<BTreeSet<String>>(&capabilities).map_err(
            |error| format!("column required_capabilities: not a JSON array of strings: {error}"),
        )?,
        state: state
            .parse::<JobState>()
            .map_err(|error| format!("column state: {}", error.message()))?,
        owner: column(row, 9, "owner")?,
        fence: u64::try_from(fence).map_err(|_| format!("column fence: {fence} is negative"))?,
        lease_expires_at: column::<Option<i64>>(row, 11, "lease_expires_at")?
            .map(|micros| timestamp(micros, "lease_expires_at"))
            .transpose()?,
        last_error: column(row, 12, "last_error")?,
        dead_reason: dead_reason
            .map(|reason| reason.parse::<DeadReason>())
            .transpose()
            .map_err(|error| format!("column dead_reason: {}", error.message()))?,
        created_at,
        updated_at: timestamp(column(row, 15, "updated_at")?, "updated_at")?,
        taken_back,
        taken_back_at,
        progress: progress_column(row, 18)?,
        unique,
    })
}

fn payload_text(job: &Job) -> Result<String> {
    serde_json::to_string(&job.payload).map_err(|error| Error::invalid_input("payload", error))
}

fn capabilities_text(job: &Job) -> Result<String> {
    serde_json::to_string(&job.required_capabilities)
        .map_err(|error| Error::invalid_input("capabilities", error))
}

/// The job with this id, if any; [`ErrorKind::Corrupt`] when it cannot be
/// decoded.
pub(crate) fn load_job(connection: &Connection, id: &str) -> Result<Option<Job>> {
    let mut statement = connection
        .prepare_cached(LOAD_JOB)
        .map_err(map_sqlite_error)?;
    statement
        .query_row([id], |row| Ok(decode_job(row)))
        .optional()
        .map_err(map_sqlite_error)?
        .transpose()
        .map_err(Undecodable::into_error)
}

/// Fails with [`ErrorKind::AlreadyExists`] when a job with this id exists,
/// decodable or not. Lease ids are another namespace and never collide.
/// Whether a job with `id` exists, decodable or not.
pub(crate) fn job_exists(connection: &Connection, id: &str) -> Result<bool> {
    let mut statement = connection
        .prepare_cached("SELECT 1 FROM jobs WHERE id = ?1")
        .map_err(map_sqlite_error)?;
    statement.exists([id]).map_err(map_sqlite_error)
}

/// Inserts a new job.
pub(crate) fn insert_job(connection: &Connection, job: &Job) -> Result<()> {
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO jobs (id, queue, payload, priority, run_at, attempt, max_attempts, \
             required_capabilities, state, owner, fence, lease_expires_at, last_error, \
             dead_reason, created_at, updated_at, taken_back, taken_back_at, progress, unique_key, \
             unique_policy, unique_until) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
             ?17, ?18, ?19, ?20, ?21, ?22)",
        )
        .map_err(map_sqlite_error)?;
    statement
        .execute(params![
            job.id,
            job.queue,
            payload_text(job)?,
            job.priority,
            to_micros(job.run_at),
            job.attempt,
            job.max_attempts,
            capabilities_text(job)?,
            job.state.as_str(),
            job.owner,
            fence_value(job.fence, "job", &job.id)?,
            job.lease_expires_at.map(to_micros),
            job.last_error,
            job.dead_reason.map(DeadReason::as_str),
            to_micros(job.created_at),
            to_micros(job.updated_at),
            job.taken_back,
            job.taken_back_at.map(to_micros),
            progress_text(job.progress.as_ref()),
            job.unique.as_ref().map(|unique| &unique.key),
            job.unique.as_ref().map(|unique| unique.policy.kind()),
            job.unique_until().map(to_micros),
        ])
        .map_err(map_sqlite_error)?;
    Ok(())
}

/// Writes back every field a queue operation may change.
pub(crate) fn save_job(connection: &Connection, job: &Job) -> Result<()> {
    let mut statement = connection
        .prepare_cached(
            "UPDATE jobs SET run_at = ?2, attempt = ?3, required_capabilities = ?4, state = ?5, \
             owner = ?6, fence = ?7, lease_expires_at = ?8, last_error = ?9, dead_reason = ?10, \
             updated_at = ?11, taken_back = ?12, taken_back_at = ?13, progress = ?14 WHERE id = ?1",
        )
        .map_err(map_sqlite_error)?;
    statement
        .execute(params![
            job.id,
            to_micros(job.run_at),
            job.attempt,
            capabilities_text(job)?,
            job.state.as_str(),
            job.owner,
            fence_value(job.fence, "job", &job.id)?,
            job.lease_expires_at.map(to_micros),
            job.last_error,
            job.dead_reason.map(DeadReason::as_str),
            to_micros(job.updated_at),
            job.taken_back,
            job.taken_back_at.map(to_micros),
            progress_text(job.progress.as_ref()),
        ])
        .map_err(map_sqlite_error)?;
    Ok(())
}
