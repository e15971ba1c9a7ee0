//! How records and jobs are kept in rows: the whole value as JSON in
//! `body`, beside the columns the indexes and the server-side filters read
//! (derived from it on every write, never read back into it).
//!
//! The body is the truth: decisions read it, and a body that does not
//! decode, or decodes to values no operation writes, is `Corrupt`. The
//! columns only find rows (the rules re-judge every row found), so a column
//! out of step with its body can hide a row from a scan, never let a
//! decision rest on it.

use serde::de::DeserializeOwned;
use sqlx::mysql::MySqlRow;
use sqlx::Row;
use tenure_lease_core::backend::stored;
use tenure_lease_core::clock::to_micros;
use tenure_lease_core::queue::{Job, JobState};
use tenure_lease_core::{Error, LeaseRecord, Result};

use crate::error::store_error;

/// The derived columns of a record's row.
pub(crate) struct LeaseColumns {
    pub(crate) active: bool,
    /// Kept for active records only: the index of `list_expired`.
    pub(crate) expires_at: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) body: Vec<u8>,
}

impl LeaseColumns {
    pub(crate) fn of(record: &LeaseRecord) -> Self {
        LeaseColumns {
            active: record.is_active(),
            expires_at: record
                .lease_expires_at
                .filter(|_| record.is_active())
                .map(to_micros),
            created_at: to_micros(record.created_at),
            updated_at: to_micros(record.updated_at),
            body: encode(record),
        }
    }
}

/// The derived columns of a job's row.
pub(crate) struct JobColumns {
    pub(crate) state: &'static str,
    /// Priority negated, so one ascending index walks jobs in claim order.
    pub(crate) priority_rank: i64,
    pub(crate) run_at: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    /// Kept for claimed jobs only: the index of `reap`.
    pub(crate) expires_at: Option<i64>,
    /// The required capabilities, as a JSON array.
    pub(crate) capabilities: String,
    /// The uniqueness key, if any: the index `enqueue` finds the jobs that
    /// may hold it by.
    pub(crate) unique_key: Option<Vec<u8>>,
    /// The kind of its policy
    /// ([`UniquePolicy::kind`](tenure_lease_core::queue::UniquePolicy::kind)),
    /// with the key.
    pub(crate) unique_policy: Option<&'static str>,
    /// When a period's key is released ([`Job::unique_until`]): until then
    /// `enqueue` reads the job whatever its state, and `purge_jobs` keeps it.
    pub(crate) unique_until: Option<i64>,
    pub(crate) body: Vec<u8>,
}

impl JobColumns {
    pub(crate) fn of(job: &Job) -> Self {
        JobColumns {
            state: job.state.as_str(),
            priority_rank: -i64::from(job.priority),
            run_at: to_micros(job.run_at),
            created_at: to_micros(job.created_at),
            updated_at: to_micros(job.updated_at),
            expires_at: job
                .lease_expires_at
                .filter(|_| job.state == JobState::Claimed)
                .map(to_micros),
            capabilities: serde_json::to_string(&job.required_capabilities).unwrap_or_default(),
            unique_key: job
                .unique
                .as_ref()
                .map(|unique| unique.key.clone().into_bytes()),
            unique_policy: job.unique.as_ref().map(|unique| unique.policy.kind()),
            unique_until: job.unique_until().map(to_micros),
            body: encode(job),
        }
    }
}

/// `value` as JSON.
fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Records and jobs are plain data: serialising them cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

fn decode<T: DeserializeOwned>(what: &str, id: &str, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|error| undecodable(what, id, &error.to_string()))
}

/// `Corrupt`: the stored `what` with `id` cannot be decoded, for `why`.
pub(crate) fn undecodable(what: &str, id: &str, why: &str) -> Error {
    Error::corrupt(format!(
        "the stored {what} {id:?} cannot be decoded ({why}); nothing was written over it, \
         and it needs an operator's attention"
    ))
}

/// The record stored under `id`.
///
/// # Errors
///
/// `Corrupt` when its body does not decode to a record the contract could
/// have written.
pub(crate) fn decode_lease(id: &str, body: &[u8]) -> Result<LeaseRecord> {
    let record: LeaseRecord = decode("lease record", id, body)?;
    stored::check_record(id, &record).map_err(|why| undecodable("lease record", id, &why))?;
    Ok(record)
}

/// The job stored under `id`.
///
/// # Errors
///
/// `Corrupt` when its body does not decode to a job the contract could
/// have written.
pub(crate) fn decode_job(id: &str, body: &[u8]) -> Result<Job> {
    let job: Job = decode("job", id, body)?;
    stored::check_job(id, &job).map_err(|why| undecodable("job", id, &why))?;
    Ok(job)
}

/// Column `index` of `row`, an id, scope or queue kept as bytes.
///
/// # Errors
///
/// `Corrupt` when the bytes are not UTF-8 (no operation writes such).
pub(crate) fn text(row: &MySqlRow, index: usize) -> Result<String> {
    let bytes: Vec<u8> = row.try_get(index).map_err(store_error)?;
    String::from_utf8(bytes).map_err(|error| {
        Error::corrupt(format!(
            "a stored name is not UTF-8 ({error}); it needs an operator's attention"
        ))
    })
}
