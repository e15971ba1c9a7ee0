//! What a store reads back, checked beyond its encoding: a record or job
//! kept as a document (the file store's JSON, MySQL's row bodies) decodes
//! into its type whatever numbers it holds, so these say which values no
//! operation of the contract writes, and the store answers such a row as
//! `Corrupt` rather than deciding on it.

use std::collections::{BTreeMap, BTreeSet};

use crate::queue::Job;
use crate::record::LeaseRecord;

use super::queue_rules;

/// The largest fence a stored record or job may carry (the largest a
/// signed 64-bit column holds, as SQL stores keep them).
pub const LAST_STORED_FENCE: u64 = i64::MAX as u64;

/// Whether `record`, read back under `id`, is one the contract could have
/// written; the reason when not.
///
/// # Errors
///
/// The reason: stored under another id, a fence beyond
/// [`LAST_STORED_FENCE`], or a slot no admission hands out ([`check_slots`]).
pub fn check_record(id: &str, record: &LeaseRecord) -> Result<(), String> {
    if record.id != id {
        return Err(format!("it is stored under another id, {:?}", record.id));
    }
    check_slots(&record.scopes, &record.slots)?;
    stored_fence(record.fence)
}

/// Whether a record's `slots` are ones an admission could have handed out
/// ([contract §17](crate::contract)): each of a scope among the record's
/// `scopes`, below [`MAX_SCOPE_CAPACITY`](crate::limits::MAX_SCOPE_CAPACITY).
///
/// # Errors
///
/// The reason, naming the first slot that is not.
pub fn check_slots(scopes: &BTreeSet<String>, slots: &BTreeMap<String, u32>) -> Result<(), String> {
    for (scope, &slot) in slots {
        if !scopes.contains(scope) {
            return Err(format!(
                "slots: slot {slot} of {scope:?}, a scope the record does not name"
            ));
        }
        if slot >= crate::limits::MAX_SCOPE_CAPACITY {
            return Err(format!(
                "slots: slot {slot} of {scope:?}, beyond the largest capacity"
            ));
        }
    }
    Ok(())
}

/// Whether `job`, read back under `id`, is one the contract could have
/// written; the reason when not.
///
/// # Errors
///
/// The reason: stored under another id, a fence beyond
/// [`LAST_STORED_FENCE`], attempt counts above the largest, half a
/// take-back trace, or a uniqueness key or period no enqueue accepts.
pub fn check_job(id: &str, job: &Job) -> Result<(), String> {
    if job.id != id {
        return Err(format!("it is stored under another id, {:?}", job.id));
    }
    stored_fence(job.fence)?;
    queue_rules::stored_attempt_count("attempt", job.attempt)?;
    queue_rules::stored_attempt_count("max_attempts", job.max_attempts)?;
    queue_rules::stored_take_back_trace(job.taken_back, job.taken_back_at)?;
    if let Some(unique) = &job.unique {
        super::validate::job_unique(unique).map_err(|error| error.message().to_owned())?;
    }
    Ok(())
}

fn stored_fence(fence: u64) -> Result<(), String> {
    if fence > LAST_STORED_FENCE {
        return Err(format!(
            "fence {fence} is beyond the last fence ({LAST_STORED_FENCE})"
        ));
    }
    Ok(())
}
