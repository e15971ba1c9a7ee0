//! Typed answers of store operations.
//!
//! Contention is an answer, not an error: losing a race, finding a lease
//! taken, or being refused a stale write all come back as `Ok(outcome)`.

use std::time::Duration;

use crate::clock::Timestamp;
use crate::record::{LeaseRecord, Status};

/// The answer of [`admit`](crate::LeaseStore::admit).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Admission {
    /// The record was created.
    Admitted {
        /// The new record, as stored.
        record: LeaseRecord,
        /// Records interrupted to make room, as they now are.
        interrupted: Vec<LeaseRecord>,
    },
    /// A scope is held; nothing changed.
    Conflict {
        /// The active record blocking the admission.
        holder: LeaseRecord,
        /// When the holder's lease (plus grace) ends, if it has one and it is
        /// still valid: a good moment to try again.
        retry_after: Option<Duration>,
    },
    /// The scopes would admit it, but the request's
    /// [rate limit](crate::AdmitRequest::rate_limit) has no permit left;
    /// nothing changed.
    RateLimited {
        /// The limit's key.
        key: String,
        /// When the oldest use in the window leaves it, freeing a permit
        /// (store time).
        retry_after: Duration,
    },
}

impl Admission {
    /// The admitted record, if admitted.
    pub fn admitted(&self) -> Option<&LeaseRecord> {
        match self {
            Admission::Admitted { record, .. } => Some(record),
            Admission::Conflict { .. } | Admission::RateLimited { .. } => None,
        }
    }

    /// How long to wait before asking again, when not admitted and the
    /// store can say: a valid holder's remaining lease, or the time until
    /// a permit frees.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Admission::Admitted { .. } => None,
            Admission::Conflict { retry_after, .. } => *retry_after,
            Admission::RateLimited { retry_after, .. } => Some(*retry_after),
        }
    }

    /// Short name of the outcome, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Admission::Admitted { .. } => "admitted",
            Admission::Conflict { .. } => "conflict",
            Admission::RateLimited { .. } => "rate_limited",
        }
    }
}

/// Why a claim no longer holds its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// No record with that id (never existed, or purged).
    Missing,
    /// The record finished with this status.
    Terminal(Status),
    /// The record was interrupted.
    Interrupted,
    /// Another worker owns the record now.
    OwnerChanged,
    /// Same owner name, but a newer fence: this copy is stale.
    FenceChanged,
}

impl LossReason {
    /// Short name of the reason, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            LossReason::Missing => "missing",
            LossReason::Terminal(_) => "terminal",
            LossReason::Interrupted => "interrupted",
            LossReason::OwnerChanged => "owner_changed",
            LossReason::FenceChanged => "fence_changed",
        }
    }
}

/// The answer of [`renew`](crate::LeaseStore::renew).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// The lease now runs until `expires_at` (store time).
    Renewed {
        /// New end of the lease.
        expires_at: Timestamp,
    },
    /// The claim no longer holds the lease; stop the work.
    Lost(LossReason),
}

impl Renewal {
    /// Short name of the outcome, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Renewal::Renewed { .. } => "renewed",
            Renewal::Lost(_) => "lost",
        }
    }
}

/// Why a fenced status write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransitionRejection {
    /// No record with that id.
    Missing,
    /// The record is terminal and never changes again (answered to the
    /// record's own claim; any other claim is `Stale`).
    Terminal(Status),
    /// The claim's owner or fence is not the record's: a peer took over.
    /// Answered whatever the record's status now is, terminal included (a
    /// peer that failed the run took it over too).
    Stale,
    /// The state machine does not allow `from → to`.
    NotAllowed {
        /// Current status.
        from: Status,
        /// Requested status.
        to: Status,
    },
}

/// The answer of [`transition`](crate::LeaseStore::transition).
#[allow(clippy::large_enum_variant)] // see `Takeover`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Transition {
    /// The write happened; the record as it now is.
    Applied(LeaseRecord),
    /// Nothing changed.
    Rejected(TransitionRejection),
}

impl Transition {
    /// Short name of the outcome, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Transition::Applied(_) => "applied",
            Transition::Rejected(_) => "rejected",
        }
    }
}

/// Why a takeover did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotTakenReason {
    /// The owner's lease is still valid (including grace).
    LeaseValid {
        /// Time until it stops being valid.
        retry_after: Duration,
    },
    /// The record already finished.
    Terminal(Status),
    /// The record is interrupted: no live owner to take over from.
    Interrupted,
    /// No record with that id.
    Missing,
}

/// The answer of [`claim_for_takeover`](crate::LeaseStore::claim_for_takeover).
// Answered once per call and matched at once: boxing the record would cost an
// allocation per takeover and clumsier patterns for no gain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Takeover {
    /// The claimer won; the record as it now is (new owner, new fence).
    Taken(LeaseRecord),
    /// Nothing changed.
    NotTaken(NotTakenReason),
}

impl Takeover {
    /// Short name of the outcome, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Takeover::Taken(_) => "taken",
            Takeover::NotTaken(_) => "not_taken",
        }
    }
}

/// A stored record that could not be decoded and was left out of a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// Its id, as far as it could be read.
    pub id: String,
    /// What was wrong with it.
    pub reason: String,
}

/// The answer of [`list_expired`](crate::LeaseStore::list_expired).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExpiredScan {
    /// Expired records, those without a lease first, then by expiry, then id.
    pub records: Vec<LeaseRecord>,
    /// Records that matched but could not be decoded (also logged).
    pub skipped: Vec<SkippedRecord>,
}
