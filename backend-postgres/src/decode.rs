//! Rows back into records and jobs, checking everything the schema does not.
//!
//! A row the code cannot trust (unknown status, non-object metadata, a fence
//! out of range, a null capability...) is an [`Undecodable`] with the
//! reason, never a panic: scans skip it and report it, point reads answer
//! [`ErrorKind::Corrupt`](lease_core::ErrorKind::Corrupt).

use std::collections::BTreeSet;

use lease_core::queue::{DeadReason, Job, JobState};
use lease_core::{Error, LeaseRecord, SkippedRecord, Status, Timestamp};
use sqlx::postgres::PgRow;
use sqlx::Row;

/// A row that is not a valid record, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Undecodable {
    pub(crate) id: String,
    pub(crate) reason: String,
}

impl Undecodable {
    pub(crate) fn into_error(self) -> Error {
        self.into_corrupt("lease")
    }

    /// The error of a point read of an undecodable `what` (lease, job).
    fn into_corrupt(self, what: &str) -> Error {
        Error::corrupt(format!(
            "stored {what} {:?} cannot be decoded: {}",
            self.id, self.reason
        ))
    }

    pub(crate) fn into_skipped(self) -> SkippedRecord {
        SkippedRecord {
            id: self.id,
            reason: self.reason,
        }
    }
}

/// Reads the record columns of `row` (see [`crate::sql`]).
pub(crate) fn record(row: &PgRow) -> Result<LeaseRecord, Undecodable> {
    let id: String = row.try_get("id").map_err(|error| Undecodable {
        id: "<unreadable id>".to_owned(),
        reason: error.to_string(),
    })?;
    let fail = |column: &str, reason: String| Undecodable {
        id: id.clone(),
        reason: format!("column {column}: {reason}"),
    };
    macro_rules! get {
        ($name:literal) => {
            row.try_get($name)
                .map_err(|error| fail($name, error.to_string()))?
        };
    }
    let scopes: Vec<String> = get!("scopes");
    let status_text: String = get!("status");
    let status: Status = status_text
        .parse()
        .map_err(|error: Error| fail("status", error.message().to_owned()))?;
    let fence: i64 = get!("fence");
    let fence = u64::try_from(fence)
        .ok()
        .filter(|fence| *fence > 0)
        .ok_or_else(|| fail("fence", format!("{fence} is not a valid fence")))?;
    let metadata: serde_json::Value = get!("metadata");
    let serde_json::Value::Object(metadata) = metadata else {
        return Err(fail("metadata", "is not a JSON object".to_owned()));
    };
    let lease_expires_at: Option<Timestamp> = get!("lease_expires_at");
    let created_at: Timestamp = get!("created_at");
    let updated_at: Timestamp = get!("updated_at");
    Ok(LeaseRecord {
        scopes: scopes.into_iter().collect::<BTreeSet<_>>(),
        kind: get!("kind"),
        status,
        owner: get!("owner"),
        fence,
        lease_expires_at,
        created_at,
        updated_at,
        error: get!("error"),
        stop_reason: get!("stop_reason"),
        metadata,
        id,
    })
}

/// Reads a row that is known to hold a record (point reads, writes):
/// undecodable means [`ErrorKind::Corrupt`](lease_core::ErrorKind::Corrupt).
pub(crate) fn trusted_record(row: &PgRow) -> lease_core::Result<LeaseRecord> {
    record(row).map_err(Undecodable::into_error)
}

/// Reads the job columns of `row` (see [`crate::sql`]).
pub(crate) fn job(row: &PgRow) -> Result<Job, Undecodable> {
    let id: String = row.try_get("id").map_err(|error| Undecodable {
        id: "<unreadable id>".to_owned(),
        reason: error.to_string(),
    })?;
    let fail = |column: &str, reason: String| Undecodable {
        id: id.clone(),
        reason: format!("column {column}: {reason}"),
    };
    macro_rules! get {
        ($name:literal) => {
            row.try_get($name)
                .map_err(|error| fail($name, error.to_string()))?
        };
    }
    macro_rules! count {
        ($name:literal) => {{
            let value: i32 = get!($name);
            u32::try_from(value).map_err(|_| fail($name, format!("{value} is negative")))?
        }};
    }
    let state_text: String = get!("state");
    let state: JobState = state_text
        .parse()
        .map_err(|error: Error| fail("state", error.message().to_owned()))?;
    let dead_reason_text: Option<String> = get!("dead_reason");
    let dead_reason = dead_reason_text
        .map(|text| text.parse::<DeadReason>())
        .transpose()
        .map_err(|error| fail("dead_reason", error.message().to_owned()))?;
    let fence: i64 = get!("fence");
    let fence =
        u64::try_from(fence).map_err(|_| fail("fence", format!("{fence} is not a valid fence")))?;
    let capabilities: Vec<String> = get!("required_capabilities");
    Ok(Job {
        queue: get!("queue"),
        payload: get!("payload"),
        priority: get!("priority"),
        run_at: get!("run_at"),
        attempt: count!("attempt"),
        max_attempts: count!("max_attempts"),
        required_capabilities: capabilities.into_iter().collect(),
        state,
        owner: get!("owner"),
        fence,
        lease_expires_at: get!("lease_expires_at"),
        last_error: get!("last_error"),
        dead_reason,
        created_at: get!("created_at"),
        updated_at: get!("updated_at"),
        id,
    })
}

/// Reads a row that is known to hold a job (point reads, fenced writes):
/// undecodable means [`ErrorKind::Corrupt`](lease_core::ErrorKind::Corrupt).
pub(crate) fn trusted_job(row: &PgRow) -> lease_core::Result<Job> {
    job(row).map_err(|undecodable| undecodable.into_corrupt("job"))
}
