//! Rows back into records and jobs, checking everything the schema does not.
//!
//! A row the code cannot trust (unknown status, non-object metadata, a fence
//! out of range, a null capability, a timestamp such as `infinity` that no
//! [`Timestamp`] can hold...) is an [`Undecodable`] with the reason, never a
//! panic: scans skip it and report it, point reads answer
//! [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt).
//!
//! Every `timestamptz` is read as a [`StoredInstant`], never through sqlx's
//! own chrono decoding, which panics on values outside chrono's range
//! (`infinity`, `-infinity`, or years beyond ±262,143).

use std::collections::{BTreeMap, BTreeSet};

use sqlx::error::BoxDynError;
use sqlx::postgres::{PgRow, PgTypeInfo, PgValueFormat, PgValueRef, Postgres};
use sqlx::{Decode, Row, Type};
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::stored;
use tenure_lease_core::queue::{DeadReason, Job, JobState};
use tenure_lease_core::{Error, LeaseRecord, SkippedRecord, Status, Timestamp};

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC), the
/// origin of a binary `timestamptz`.
const POSTGRES_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// A `timestamptz` decoded without panicking: any stored value a
/// [`Timestamp`] cannot hold is a decode error naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredInstant(pub(crate) Timestamp);

impl Type<Postgres> for StoredInstant {
    fn type_info() -> PgTypeInfo {
        <Timestamp as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Timestamp as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for StoredInstant {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        match value.format() {
            PgValueFormat::Binary => {
                let since_postgres_epoch = <i64 as Decode<Postgres>>::decode(value)?;
                instant_from_postgres_micros(since_postgres_epoch)
                    .map(StoredInstant)
                    .ok_or_else(|| {
                        format!(
                            "timestamp {since_postgres_epoch} µs from 2000-01-01 \
                             (infinity, -infinity or far out of range) is not representable"
                        )
                        .into()
                    })
            }
            // Text is parsed, never computed: an unparsable value is an error.
            PgValueFormat::Text => {
                <Timestamp as Decode<Postgres>>::decode(value).map(StoredInstant)
            }
        }
    }
}

/// The instant `micros` after PostgreSQL's epoch, if a [`Timestamp`] can
/// hold it (`infinity` is `i64::MAX`, `-infinity` `i64::MIN`).
fn instant_from_postgres_micros(micros: i64) -> Option<Timestamp> {
    micros
        .checked_add(POSTGRES_EPOCH_UNIX_MICROS)
        .and_then(Timestamp::from_timestamp_micros)
}

/// Reads the `timestamptz` column `column` of `row` without panicking.
pub(crate) fn instant(row: &PgRow, column: &str) -> Result<Timestamp, sqlx::Error> {
    row.try_get::<StoredInstant, _>(column)
        .map(|stored| stored.0)
}

/// Reads the nullable `timestamptz` column `column` of `row` without
/// panicking.
pub(crate) fn optional_instant(
    row: &PgRow,
    column: &str,
) -> Result<Option<Timestamp>, sqlx::Error> {
    row.try_get::<Option<StoredInstant>, _>(column)
        .map(|stored| stored.map(|stored| stored.0))
}

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
    let scopes: BTreeSet<String> = scopes.into_iter().collect();
    let slots = slots(get!("slots"), &scopes).map_err(|reason| fail("slots", reason))?;
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
    macro_rules! at {
        ($name:literal) => {
            instant(row, $name).map_err(|error| fail($name, error.to_string()))?
        };
        ($name:literal, nullable) => {
            optional_instant(row, $name).map_err(|error| fail($name, error.to_string()))?
        };
    }
    let lease_expires_at = at!("lease_expires_at", nullable);
    let created_at = at!("created_at");
    let updated_at = at!("updated_at");
    Ok(LeaseRecord {
        scopes,
        slots,
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
        progress: progress(get!("progress")).map_err(|reason| fail("progress", reason))?,
        id,
    })
}

/// The slots column's value (migration 0014): SQL `NULL` for a record
/// without counted scopes, else a JSON object naming, for scopes the
/// record names, slots an admission hands out ([`stored::check_slots`]).
/// Anything else is damage.
fn slots(
    value: Option<serde_json::Value>,
    scopes: &BTreeSet<String>,
) -> Result<BTreeMap<String, u32>, String> {
    let Some(value) = value else {
        return Ok(BTreeMap::new());
    };
    let serde_json::Value::Object(slots) = value else {
        return Err(format!("{value} is not a JSON object"));
    };
    let slots = slots
        .into_iter()
        .map(|(scope, slot)| {
            let number = slot
                .as_u64()
                .and_then(|slot| u32::try_from(slot).ok())
                .ok_or_else(|| format!("the slot of {scope:?}, {slot}, is not a slot number"))?;
            Ok((scope, number))
        })
        .collect::<Result<BTreeMap<_, _>, String>>()?;
    stored::check_slots(scopes, &slots)?;
    Ok(slots)
}

/// The progress column's value: SQL `NULL` until the first report; a JSON
/// `null` is damage, as no write stores one.
fn progress(value: Option<serde_json::Value>) -> Result<Option<serde_json::Value>, String> {
    match value {
        Some(serde_json::Value::Null) => Err("a JSON null, which no write stores".to_owned()),
        other => Ok(other),
    }
}

/// Reads a row that is known to hold a record (point reads, writes):
/// undecodable means [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt).
pub(crate) fn trusted_record(row: &PgRow) -> tenure_lease_core::Result<LeaseRecord> {
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
            let count =
                u32::try_from(value).map_err(|_| fail($name, format!("{value} is negative")))?;
            rules::stored_attempt_count($name, count).map_err(|reason| fail($name, reason))?
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
    macro_rules! at {
        ($name:literal) => {
            instant(row, $name).map_err(|error| fail($name, error.to_string()))?
        };
        ($name:literal, nullable) => {
            optional_instant(row, $name).map_err(|error| fail($name, error.to_string()))?
        };
    }
    let capabilities: Vec<String> = get!("required_capabilities");
    let created_at = at!("created_at");
    let unique_policy: Option<String> = get!("unique_policy");
    let unique = rules::stored_unique(
        get!("unique_key"),
        unique_policy.as_deref(),
        at!("unique_until", nullable),
        created_at,
    )
    .map_err(|reason| fail("unique_key", reason))?;
    let taken_back: i64 = get!("taken_back");
    let (taken_back, taken_back_at) = rules::stored_take_back_trace(
        u32::try_from(taken_back)
            .map_err(|_| fail("taken_back", format!("{taken_back} is not a count")))?,
        at!("taken_back_at", nullable),
    )
    .map_err(|reason| fail("taken_back", reason))?;
    Ok(Job {
        queue: get!("queue"),
        payload: get!("payload"),
        priority: get!("priority"),
        run_at: at!("run_at"),
        attempt: count!("attempt"),
        max_attempts: count!("max_attempts"),
        required_capabilities: capabilities.into_iter().collect(),
        state,
        owner: get!("owner"),
        fence,
        lease_expires_at: at!("lease_expires_at", nullable),
        last_error: get!("last_error"),
        dead_reason,
        created_at,
        updated_at: at!("updated_at"),
        taken_back,
        taken_back_at,
        progress: progress(get!("progress")).map_err(|reason| fail("progress", reason))?,
        unique,
        id,
    })
}

/// Reads a row that is known to hold a job (point reads, fenced writes):
/// undecodable means [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt).
pub(crate) fn trusted_job(row: &PgRow) -> tenure_lease_core::Result<Job> {
    job(row).map_err(|undecodable| undecodable.into_corrupt("job"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infinities_and_far_instants_are_not_representable() {
        for micros in [
            i64::MAX,
            i64::MIN,
            i64::MAX - POSTGRES_EPOCH_UNIX_MICROS + 1,
        ] {
            assert_eq!(instant_from_postgres_micros(micros), None, "{micros}");
        }
        // PostgreSQL's latest timestamptz (294276 AD) lies beyond chrono's.
        assert_eq!(
            instant_from_postgres_micros(9_223_371_331_200_000_000),
            None
        );
    }

    #[test]
    fn instants_in_range_convert_exactly() {
        assert_eq!(
            instant_from_postgres_micros(0),
            Timestamp::from_timestamp_micros(POSTGRES_EPOCH_UNIX_MICROS)
        );
        assert_eq!(
            instant_from_postgres_micros(-POSTGRES_EPOCH_UNIX_MICROS),
            Timestamp::from_timestamp_micros(0)
        );
    }
}
