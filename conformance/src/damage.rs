//! Damage: what a factory can do to the bytes a store keeps, so the kit can
//! check what the contract says about records it cannot decode.
//!
//! A store only ever writes what it can read back, so through its own
//! operations no case can produce a record with an unknown status, a fence
//! out of range or malformed metadata. Yet such records happen (a hand edit,
//! a tool of another version, a disk that lied), and the contract says what
//! then: point reads answer `Corrupt`, scans skip and report or answer
//! `Corrupt`, nothing is written over the record, and every other record
//! goes on working (contract §6, §8, §9, §10). Only the factory knows how
//! the store lays its data out, so it is the factory that damages:
//! [`Factory::damager`](crate::Factory::damager) answers a [`Damager`] that
//! applies one [`Damage`] to one [`Target`], or says the store's layout
//! cannot hold that damage at all ([`DamageOutcome::CannotHold`]: a typed
//! column cannot hold text where a timestamp belongs). A store that keeps
//! typed values (memory) has no damager, and the damage cases are reported
//! skipped on it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What a damage is done to: a stored lease record or a stored job, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// The lease record with this id.
    Lease(String),
    /// The job with this id.
    Job(String),
}

/// A timestamp field of a lease record or a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeField {
    /// `created_at`, of a record or a job.
    CreatedAt,
    /// `updated_at`, of a record or a job.
    UpdatedAt,
    /// `lease_expires_at`, of a record or a job.
    LeaseExpiresAt,
    /// A job's `run_at`.
    RunAt,
    /// A job's `taken_back_at` (set on a job never taken back).
    TakenBackAt,
}

/// How a stored timestamp is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadTime {
    /// A number or date beyond every instant a `Timestamp` represents.
    OutOfRange,
    /// An infinite instant (PostgreSQL's `infinity`, an IEEE infinity).
    NotFinite,
    /// Something that is no timestamp at all (text).
    Unparseable,
}

/// One damage to one field, as the kit asks a factory for it. Each one
/// leaves a value no record or job can represent, so the store must answer
/// `Corrupt` for it, never a wrong value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// A timestamp field holds a bad value.
    Timestamp(TimeField, BadTime),
    /// The status (of a record) or state (of a job) is a name tenure does
    /// not know.
    UnknownStatus,
    /// The fence is negative.
    NegativeFence,
    /// The fence is beyond every fence a store hands out (above 2^63 − 1).
    HugeFence,
    /// A job's attempt count is negative.
    NegativeAttempt,
    /// A job's attempt count is above the contract's maximum (1000).
    HugeAttempt,
    /// A record's scopes are not a list of names.
    MalformedScopes,
    /// A record's metadata is not a JSON object.
    MalformedMetadata,
    /// A job's payload is not JSON.
    MalformedPayload,
    /// A job's required capabilities are not a set of names.
    MalformedCapabilities,
    /// A job's take-back count is negative.
    NegativeTakeBacks,
}

const BAD_TIMES: [BadTime; 3] = [
    BadTime::OutOfRange,
    BadTime::NotFinite,
    BadTime::Unparseable,
];

impl Damage {
    /// Every damage the kit does to a lease record, one field at a time.
    pub fn to_leases() -> Vec<Damage> {
        let times = [
            TimeField::CreatedAt,
            TimeField::UpdatedAt,
            TimeField::LeaseExpiresAt,
        ];
        Damage::with_times(
            &times,
            &[
                Damage::UnknownStatus,
                Damage::NegativeFence,
                Damage::HugeFence,
                Damage::MalformedScopes,
                Damage::MalformedMetadata,
            ],
        )
    }

    /// Every damage the kit does to a job, one field at a time.
    pub fn to_jobs() -> Vec<Damage> {
        let times = [
            TimeField::RunAt,
            TimeField::CreatedAt,
            TimeField::UpdatedAt,
            TimeField::LeaseExpiresAt,
            TimeField::TakenBackAt,
        ];
        Damage::with_times(
            &times,
            &[
                Damage::UnknownStatus,
                Damage::NegativeFence,
                Damage::HugeFence,
                Damage::NegativeAttempt,
                Damage::HugeAttempt,
                Damage::MalformedPayload,
                Damage::MalformedCapabilities,
                Damage::NegativeTakeBacks,
            ],
        )
    }

    fn with_times(fields: &[TimeField], others: &[Damage]) -> Vec<Damage> {
        fields
            .iter()
            .flat_map(|&field| BAD_TIMES.map(|bad| Damage::Timestamp(field, bad)))
            .chain(others.iter().copied())
            .collect()
    }
}

impl Damage {
    /// For a store that keeps records and jobs whole as JSON documents
    /// (their serde form: the file store, MySQL's row bodies): the field
    /// this damage changes in a record's or (`job`) a job's document, and
    /// the value it writes there; `None` when a JSON document cannot hold
    /// the damage (an infinite time, a malformed payload: any JSON value
    /// is a payload).
    pub fn in_json_document(self, job: bool) -> Option<(&'static str, serde_json::Value)> {
        use serde_json::json;
        let state = if job { "state" } else { "status" };
        Some(match self {
            Damage::Timestamp(field, bad) => {
                let field = match field {
                    TimeField::CreatedAt => "created_at",
                    TimeField::UpdatedAt => "updated_at",
                    TimeField::LeaseExpiresAt => "lease_expires_at",
                    TimeField::RunAt if job => "run_at",
                    TimeField::TakenBackAt if job => "taken_back_at",
                    _ => return None,
                };
                let bad = match bad {
                    BadTime::OutOfRange => json!("+270000-01-01T00:00:00Z"),
                    BadTime::Unparseable => json!("not a time"),
                    // JSON has no infinite number.
                    BadTime::NotFinite => return None,
                };
                (field, bad)
            }
            Damage::UnknownStatus => (state, json!("Vanished")),
            Damage::NegativeFence => ("fence", json!(-1)),
            Damage::HugeFence => ("fence", json!(1_u64 << 63)),
            Damage::NegativeAttempt if job => ("attempt", json!(-1)),
            Damage::HugeAttempt if job => ("attempt", json!(1001)),
            Damage::MalformedScopes if !job => ("scopes", json!("not a list")),
            Damage::MalformedMetadata if !job => ("metadata", json!([1, 2])),
            Damage::MalformedCapabilities if job => ("required_capabilities", json!(42)),
            Damage::NegativeTakeBacks if job => ("taken_back", json!(-1)),
            _ => return None,
        })
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Timestamp(field, bad) => write!(f, "{field:?} {bad:?}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// What a factory answers for one damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageOutcome {
    /// The damage is done: the target now holds the bad value.
    Applied,
    /// The store's layout cannot hold that value (a typed column, a
    /// constraint that cannot be lifted); nothing changed.
    CannotHold,
}

/// Damages a store of a factory: see [`Factory::damager`](crate::Factory::damager).
/// Answers `Err` only when the damage should have been possible and failed
/// (the target is missing, the server is unreachable).
pub type Damager<S> = Arc<
    dyn Fn(
            Arc<S>,
            Target,
            Damage,
        )
            -> Pin<Box<dyn Future<Output = tenure_lease_core::Result<DamageOutcome>> + Send>>
        + Send
        + Sync,
>;
