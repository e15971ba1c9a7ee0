//! Rows back into records, checking everything the schema does not.
//!
//! A row the code cannot trust (unknown status, non-object metadata, a fence
//! out of range...) is an [`Undecodable`] with the reason, never a panic:
//! scans skip it and report it, point reads answer
//! [`ErrorKind::Corrupt`](lease_core::ErrorKind::Corrupt).

use std::collections::BTreeSet;

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
        Error::corrupt(format!(
            "stored lease {:?} cannot be decoded: {}",
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
