//! The stored lease record and the claim a worker holds on it
//! ([contract §1](crate::contract)).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::Error;

/// The label given to records admitted without an explicit kind.
pub const DEFAULT_KIND: &str = "run";

/// Lifecycle state of a lease record.
///
/// `Pending` and `Running` are **active**: they hold their scopes.
/// `Interrupted` is neither active nor terminal (it may still be finalised as
/// `Failed`, until `purge` removes it like a terminal record). `Succeeded`
/// and `Failed` are **terminal** and never change again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Status {
    /// Admitted, work not started yet. Active.
    Pending,
    /// Work in progress. Active.
    Running,
    /// Stopped by another admission or by its owner; releases its scopes.
    /// Purged once as old as the retention, like a terminal record
    /// ([contract §8](crate::contract)).
    Interrupted,
    /// Finished well. Terminal.
    Succeeded,
    /// Finished badly. Terminal.
    Failed,
}

impl Status {
    /// Every status, in lifecycle order.
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Running,
        Status::Interrupted,
        Status::Succeeded,
        Status::Failed,
    ];

    /// True for `Pending` and `Running`: the record holds its scopes.
    pub fn is_active(self) -> bool {
        matches!(self, Status::Pending | Status::Running)
    }

    /// True for `Succeeded` and `Failed`: the record never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }

    /// Stable lower-case name, the form stores persist.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Interrupted => "interrupted",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
        }
    }

    /// Whether the state machine allows `self → to`
    /// ([contract §5](crate::contract)).
    pub fn can_become(self, to: Status) -> bool {
        use Status::*;
        matches!(
            (self, to),
            (Pending, Running | Succeeded | Failed)
                | (Running, Succeeded | Failed | Interrupted)
                | (Interrupted, Failed)
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| Error::corrupt(format!("unknown lease status {text:?}")))
    }
}

/// One stored lease: "worker `owner` runs operation `id` until
/// `lease_expires_at`, holding `scopes`, under fencing token `fence`".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Unique id of the operation.
    pub id: String,
    /// Admission keys held while the record is active: exclusively, or
    /// one slot of each counted scope ([`slots`](Self::slots)).
    pub scopes: BTreeSet<String>,
    /// The slot held in each **counted** scope among
    /// [`scopes`](Self::scopes) (admitted with
    /// [`AdmitRequest::counted_scope`](crate::AdmitRequest::counted_scope)),
    /// numbered from 0 and kept through renewals and takeovers
    /// ([contract §17](crate::contract)); empty for a record with
    /// exclusive scopes only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub slots: BTreeMap<String, u32>,
    /// Free-form label, [`DEFAULT_KIND`] unless given.
    pub kind: String,
    /// Lifecycle state.
    pub status: Status,
    /// The worker holding the lease, if any.
    pub owner: Option<String>,
    /// Fencing token: grows at every change of owner, drawn from one
    /// store-wide sequence.
    pub fence: u64,
    /// End of the owner's lease in store time; `None` means no lease
    /// (always reclaimable).
    pub lease_expires_at: Option<Timestamp>,
    /// When the record was admitted (store time).
    pub created_at: Timestamp,
    /// When the record last changed (store time).
    pub updated_at: Timestamp,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Why it stopped, when it was stopped.
    pub stop_reason: Option<String>,
    /// Caller data, opaque to the store; always a JSON object.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The latest progress a holder reported
    /// ([`renew_with_progress`](crate::LeaseStore::renew_with_progress)),
    /// kept until the next report, through takeovers and the end of the
    /// run; `None` until the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
}

impl LeaseRecord {
    /// True while the record holds its scopes (`Pending` or `Running`).
    pub fn is_active(&self) -> bool {
        self.status.is_active()
    }

    /// The slot the record holds in `scope`: its slot when `scope` is
    /// counted, 0 when it holds `scope` exclusively (an exclusive scope is
    /// slot 0 of the counted scope of that name), `None` when it does not
    /// name `scope`. Held only while the record is active.
    pub fn slot(&self, scope: &str) -> Option<u32> {
        self.scopes
            .contains(scope)
            .then(|| self.slots.get(scope).copied().unwrap_or(0))
    }

    /// A [gate](crate::FenceStore) resource for the record's slot in
    /// `scope`, `"{scope}#{slot}"`, when it names `scope`: what the holders
    /// of one slot, one after the other, guard their writes with, so a
    /// holder that lost its slot is refused once its successor has written
    /// ([contract §17](crate::contract)). A resource is a name (at most 256
    /// bytes), so a counted scope guarded this way leaves room for the
    /// suffix; and resources are one namespace, so keep these apart from
    /// gates named otherwise (a plain gate `"a#1"` is slot 1 of `"a"`'s).
    pub fn slot_resource(&self, scope: &str) -> Option<String> {
        self.slot(scope).map(|slot| format!("{scope}#{slot}"))
    }

    /// The claim of the current owner, if the record has one.
    pub fn claim(&self) -> Option<Claim> {
        self.owner.as_ref().map(|owner| Claim {
            id: self.id.clone(),
            owner: owner.clone(),
            fence: self.fence,
        })
    }
}

/// What a worker holds after it wins a lease: the proof of ownership every
/// fenced write must present.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Claim {
    /// The lease id.
    pub id: String,
    /// The worker that holds it.
    pub owner: String,
    /// The fencing token current when ownership was won.
    pub fence: u64,
}

impl Claim {
    /// A claim from its parts.
    pub fn new(id: impl Into<String>, owner: impl Into<String>, fence: u64) -> Self {
        Claim {
            id: id.into(),
            owner: owner.into(),
            fence,
        }
    }
}
