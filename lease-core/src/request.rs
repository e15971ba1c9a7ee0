//! The inputs of store operations, with builders for the common shapes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::clock::Timestamp;
use crate::rate::RateLimit;
use crate::record::{Status, DEFAULT_KIND};

/// How `admit` treats scopes that already have an active holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AdmitStrategy {
    /// Any active holder of a requested scope blocks the admission.
    #[default]
    Reject,
    /// Holders whose lease is gone (expired beyond grace, no lease) or that
    /// the requester owns are interrupted; a valid lease of another worker
    /// still blocks, and then nothing changes at all.
    Interrupt,
}

/// Everything `admit` needs. Build one with [`AdmitRequest::new`] and the
/// chained setters.
///
/// ```
/// use std::time::Duration;
/// use tenure_lease_core::{AdmitRequest, AdmitStrategy};
///
/// let request = AdmitRequest::new("nightly-report-2026-11-29", "worker-a")
///     .scope("cron:nightly-report")
///     .ttl(Duration::from_secs(30))
///     .strategy(AdmitStrategy::Interrupt)
///     .metadata(serde_json::json!({ "attempt": 1 }));
/// assert_eq!(request.kind, "run");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AdmitRequest {
    /// Unique id of the operation.
    pub id: String,
    /// Admission keys to hold (may be empty): exclusively, or, for those
    /// in [`capacities`](Self::capacities), one slot of several.
    pub scopes: BTreeSet<String>,
    /// The **counted** scopes among [`scopes`](Self::scopes), with the
    /// number of holders each admits at once, as this request judges it
    /// (1 to [`MAX_SCOPE_CAPACITY`](crate::limits::MAX_SCOPE_CAPACITY));
    /// the record holds one numbered slot of each
    /// ([contract §17](crate::contract)). Every key must also be in
    /// `scopes`.
    pub capacities: BTreeMap<String, u32>,
    /// Free-form label, `"run"` by default.
    pub kind: String,
    /// The admitting worker, owner of the new record.
    pub owner: String,
    /// Lease length; `None` for no lease (single-worker mode).
    pub ttl: Option<Duration>,
    /// What to do about active holders of the scopes.
    pub strategy: AdmitStrategy,
    /// Caller data; must be a JSON object.
    pub metadata: serde_json::Value,
    /// How long past its expiry a holder's lease still counts as valid.
    pub grace: Duration,
    /// A rate limit the admission must fit in: judged once the scopes
    /// admit the request, it uses one permit when admitted; with no permit
    /// left the answer is [`Admission::RateLimited`](crate::Admission::RateLimited)
    /// and nothing changes.
    pub rate_limit: Option<RateLimit>,
}

impl AdmitRequest {
    /// A request for `id` by `owner`: no scopes, kind `"run"`, no lease,
    /// strategy `Reject`, empty metadata, no grace, no rate limit.
    pub fn new(id: impl Into<String>, owner: impl Into<String>) -> Self {
        AdmitRequest {
            id: id.into(),
            scopes: BTreeSet::new(),
            capacities: BTreeMap::new(),
            kind: DEFAULT_KIND.to_owned(),
            owner: owner.into(),
            ttl: None,
            strategy: AdmitStrategy::Reject,
            metadata: serde_json::Value::Object(Default::default()),
            grace: Duration::ZERO,
            rate_limit: None,
        }
    }

    /// A request with a freshly generated, time-ordered id (UUIDv7).
    pub fn with_generated_id(owner: impl Into<String>) -> Self {
        Self::new(generate_id(), owner)
    }

    /// Adds one scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scopes.insert(scope.into());
        self
    }

    /// Adds several scopes.
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes.extend(scopes.into_iter().map(Into::into));
        self
    }

    /// Adds a **counted** scope: one that admits up to `capacity` holders
    /// at once, each in a numbered slot (`0` to `capacity - 1`) of its
    /// own, with its own fence ([contract §17](crate::contract)). The
    /// record holds the lowest free slot
    /// ([`LeaseRecord::slot`](crate::LeaseRecord::slot)); an exclusive
    /// scope of the same name is its slot 0, so capacity 1 is the plain
    /// [`scope`](Self::scope).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tenure_lease_core::AdmitRequest;
    ///
    /// // At most 3 exports run at once, across every worker.
    /// let request = AdmitRequest::with_generated_id("worker-a")
    ///     .counted_scope("exports", 3)
    ///     .ttl(Duration::from_secs(30));
    /// assert_eq!(request.capacities["exports"], 3);
    /// ```
    pub fn counted_scope(mut self, scope: impl Into<String>, capacity: u32) -> Self {
        let scope = scope.into();
        self.scopes.insert(scope.clone());
        self.capacities.insert(scope, capacity);
        self
    }

    /// How many holders `scope` admits at once as this request judges it:
    /// its capacity when counted, 1 otherwise.
    pub fn capacity_of(&self, scope: &str) -> u32 {
        self.capacities.get(scope).copied().unwrap_or(1)
    }

    /// Sets the kind label.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = kind.into();
        self
    }

    /// Sets the lease length.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets the admission strategy.
    pub fn strategy(mut self, strategy: AdmitStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Sets the metadata (must be a JSON object).
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// Sets the grace added to holders' expiry when judging them.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Admits only within `limit` ([`rate_limit`](Self::rate_limit)).
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.rate_limit = Some(limit);
        self
    }
}

/// A new time-ordered unique id (UUIDv7, hyphenated).
pub fn generate_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The status write of [`transition`](crate::LeaseStore::transition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusChange {
    /// The status to move to.
    pub status: Status,
    /// Why it failed (kept on the record).
    pub error: Option<String>,
    /// Why it stopped (kept on the record).
    pub stop_reason: Option<String>,
}

impl StatusChange {
    /// `→ Running`.
    pub fn running() -> Self {
        Self::to(Status::Running)
    }

    /// `→ Succeeded`.
    pub fn succeeded() -> Self {
        Self::to(Status::Succeeded)
    }

    /// `→ Failed` with an error text.
    pub fn failed(error: impl Into<String>) -> Self {
        StatusChange {
            error: Some(error.into()),
            ..Self::to(Status::Failed)
        }
    }

    /// `→ Interrupted` with a stop reason.
    pub fn interrupted(stop_reason: impl Into<String>) -> Self {
        StatusChange {
            stop_reason: Some(stop_reason.into()),
            ..Self::to(Status::Interrupted)
        }
    }

    /// `→ status` with no error or stop reason.
    pub fn to(status: Status) -> Self {
        StatusChange {
            status,
            error: None,
            stop_reason: None,
        }
    }

    /// Sets the stop reason.
    pub fn stop_reason(mut self, stop_reason: impl Into<String>) -> Self {
        self.stop_reason = Some(stop_reason.into());
        self
    }
}

/// What a successful takeover does to the orphan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeoverAction {
    /// Mark it `Failed` (owner := claimer).
    Fail {
        /// Error text stored on the record.
        error: String,
        /// Stop reason stored on the record.
        stop_reason: Option<String>,
    },
    /// Resume it: `Running`, owner := claimer, lease := now + ttl
    /// (`None`: no lease, single-worker mode).
    Adopt {
        /// The claimer's lease length.
        ttl: Option<Duration>,
    },
}

/// Input of [`claim_for_takeover`](crate::LeaseStore::claim_for_takeover).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeoverRequest {
    /// The orphan's id.
    pub id: String,
    /// The worker claiming it.
    pub claimer: String,
    /// How long past its expiry the current lease still counts as valid.
    pub grace: Duration,
    /// What to do with it when taken.
    pub action: TakeoverAction,
}

impl TakeoverRequest {
    /// Take over `id` and mark it failed with `error`.
    pub fn fail(
        id: impl Into<String>,
        claimer: impl Into<String>,
        error: impl Into<String>,
    ) -> Self {
        TakeoverRequest {
            id: id.into(),
            claimer: claimer.into(),
            grace: Duration::ZERO,
            action: TakeoverAction::Fail {
                error: error.into(),
                stop_reason: None,
            },
        }
    }

    /// Take over `id` and resume it under a lease of `ttl`.
    pub fn adopt(id: impl Into<String>, claimer: impl Into<String>, ttl: Option<Duration>) -> Self {
        TakeoverRequest {
            id: id.into(),
            claimer: claimer.into(),
            grace: Duration::ZERO,
            action: TakeoverAction::Adopt { ttl },
        }
    }

    /// Sets the grace.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

/// Input of [`list_expired`](crate::LeaseStore::list_expired).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredQuery {
    /// A lease counts as expired once `lease_expires_at + grace <= now`.
    pub grace: Duration,
    /// Only records created at or before this instant.
    pub created_before: Option<Timestamp>,
    /// At most this many records (1 ..= [`MAX_LIST_LIMIT`](crate::backend::validate::MAX_LIST_LIMIT)).
    pub limit: usize,
}

impl ExpiredQuery {
    /// Expired beyond `grace`, any creation time, at most 100.
    pub fn new(grace: Duration) -> Self {
        ExpiredQuery {
            grace,
            created_before: None,
            limit: 100,
        }
    }

    /// Sets the creation cut-off.
    pub fn created_before(mut self, instant: Timestamp) -> Self {
        self.created_before = Some(instant);
        self
    }

    /// Sets the limit.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
}
