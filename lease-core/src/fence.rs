//! Fences checked downstream ([contract §7](crate::contract)).
//!
//! A fencing token protects nothing unless the resource being written checks
//! it. A **gate** is that check: it remembers the highest fence accepted per
//! resource and refuses any write that carries a lower one, so a paused or
//! partitioned stale owner cannot corrupt a resource after it resumes.
//!
//! Two forms:
//!
//! * [`FenceGate`] keeps the highest fences in this process's memory: a
//!   cheap local check, for resources only this process writes;
//! * [`FenceStore`] keeps them in a store (each backend's store implements
//!   it), so every process that writes the resource checks against the same
//!   highest fence, and it survives restarts. The SQL backends also run the
//!   check inside the caller's own transaction, and Redis sets a value in
//!   the same script, so the check and the guarded write commit together.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::gate_rules;
use crate::clock::Timestamp;
use crate::error::Result;

/// One gate kept by a [`FenceStore`], as
/// [`list_fences`](FenceStore::list_fences) lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct GateRecord {
    /// The resource the gate guards.
    pub resource: String,
    /// The highest fence it accepted.
    pub fence: u64,
    /// When its last accepted check was, by the store's clock (what
    /// [`purge_fences`](FenceStore::purge_fences) measures from).
    pub checked_at: Timestamp,
}

impl GateRecord {
    /// A gate as a store read it.
    pub fn new(resource: impl Into<String>, fence: u64, checked_at: Timestamp) -> Self {
        GateRecord {
            resource: resource.into(),
            fence,
            checked_at,
        }
    }
}

/// A write refused by a gate: its fence is older than one already accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fence {presented} for this resource: fence {highest_seen} already wrote; the presenting worker no longer owns the lease and must stop")]
pub struct StaleFence {
    /// The fence the refused write carried.
    pub presented: u64,
    /// The highest fence the gate has accepted for the resource.
    pub highest_seen: u64,
}

/// What a gate answered: the fence may write, or it is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a stale fence must stop the write"]
pub enum FenceCheck {
    /// No higher fence was accepted for the resource: this one is now the
    /// highest (or already was, when equal), and its write may go ahead.
    Accepted,
    /// A higher fence was accepted for the resource: the presenting worker
    /// lost its lease, and must not write.
    Stale(StaleFence),
}

impl FenceCheck {
    /// True when the fence was accepted.
    pub fn is_accepted(&self) -> bool {
        matches!(self, FenceCheck::Accepted)
    }

    /// `Ok(())` when accepted, the refusal otherwise: for `?` in code whose
    /// error type takes a [`StaleFence`].
    ///
    /// # Errors
    ///
    /// The [`StaleFence`] of a refusal.
    pub fn into_result(self) -> Result<(), StaleFence> {
        match self {
            FenceCheck::Accepted => Ok(()),
            FenceCheck::Stale(stale) => Err(stale),
        }
    }

    /// A short name of the answer, for logs and metric labels: `accepted`
    /// or `stale`.
    pub fn label(&self) -> &'static str {
        match self {
            FenceCheck::Accepted => "accepted",
            FenceCheck::Stale(_) => "stale",
        }
    }
}

/// Remembers, in this process, the highest fence seen per resource and
/// refuses lower ones; [`FenceStore`] is the form shared by processes.
///
/// ```
/// use tenure_lease_core::FenceGate;
///
/// let gate = FenceGate::new();
/// gate.admit("report.csv", 7).unwrap();
/// gate.admit("report.csv", 7).unwrap(); // the same owner may write again
/// assert!(gate.admit("report.csv", 6).is_err()); // a stale owner may not
/// gate.admit("report.csv", 9).unwrap(); // a newer owner may
/// ```
#[derive(Debug, Default)]
pub struct FenceGate {
    highest: Mutex<HashMap<String, u64>>,
}

impl FenceGate {
    /// An empty gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts a write to `resource` carrying `fence` when no higher fence was
    /// seen for it, and remembers `fence`. Check and record are one atomic
    /// step; do the write only after `Ok`.
    ///
    /// # Errors
    ///
    /// The [`StaleFence`] when a higher fence was seen.
    pub fn admit(&self, resource: &str, fence: u64) -> Result<(), StaleFence> {
        let mut highest = self
            .highest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let check = gate_rules::judge_fence(highest.get(resource).copied(), fence);
        if check.is_accepted() {
            highest.insert(resource.to_owned(), fence);
        }
        check.into_result()
    }

    /// The highest fence accepted for `resource`, if any.
    pub fn highest_seen(&self, resource: &str) -> Option<u64> {
        self.highest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(resource)
            .copied()
    }
}

/// Gates kept by a store ([contract §7](crate::contract)): the highest fence
/// accepted per resource, shared by every process using the store, checked
/// and raised in one atomic step.
///
/// Before each write to a resource, the worker presents its claim's fence
/// with [`check_fence`](FenceStore::check_fence), and writes only on
/// [`FenceCheck::Accepted`]. Once a newer owner's fence was accepted, every
/// older one is refused, whatever the older owner believes about its lease.
/// A check and a write that are two steps still leave a window (the old
/// owner is accepted, pauses, and writes after the new owner): where the
/// resource lives in the store's own database, run the check inside the
/// write's transaction instead (SQLite's `FenceTable`, PostgreSQL's
/// `PgStore::check_fence_in`) or in one script (Redis's
/// `RedisStore::write_fenced`).
///
/// Resources are names of the caller's choosing, as scopes are, and a
/// namespace apart from lease ids, scopes and jobs. As for [`LeaseStore`](crate::LeaseStore),
/// every operation validates its input first ([`ErrorKind::InvalidInput`],
/// nothing changed), and `Err` means the store could not say: besides what
/// each method names, any call may answer the
/// [store errors](crate::LeaseStore#store-errors).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
/// use tenure_lease_core::{FenceCheck, FenceStore};
///
/// let store = tenure_backend_memory::MemoryStore::new();
/// assert_eq!(store.check_fence("report.csv", 7).await?, FenceCheck::Accepted);
/// assert!(store.check_fence("report.csv", 7).await?.is_accepted()); // the same owner again
/// let FenceCheck::Stale(stale) = store.check_fence("report.csv", 6).await? else {
///     panic!("a lower fence passed");
/// };
/// assert_eq!((stale.presented, stale.highest_seen), (6, 7));
/// assert_eq!(store.highest_fence("report.csv").await?, Some(7));
/// # Ok(()) }
/// ```
///
/// [`ErrorKind::InvalidInput`]: crate::ErrorKind::InvalidInput
#[async_trait]
pub trait FenceStore: Send + Sync {
    /// Checks `fence` against the highest fence accepted for `resource`:
    /// [`FenceCheck::Stale`] (with that highest) when it is lower, changing
    /// nothing; otherwise records `fence` as the highest and answers
    /// [`FenceCheck::Accepted`]. An equal fence is accepted (the same owner
    /// writing again). One atomic step: of racing checks, every one answered
    /// `Accepted` presented a fence at least as high as every one before it.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   resource that is empty, longer than
    ///   [`MAX_NAME_BYTES`](crate::limits::MAX_NAME_BYTES) or
    ///   holding control characters, or a fence of 0 or above
    ///   [`MAX_GATE_FENCE`](crate::limits::MAX_GATE_FENCE);
    /// * the [store errors](crate::LeaseStore#store-errors), `Corrupt` when
    ///   the stored highest fence cannot be decoded (nothing is written over
    ///   it).
    ///
    /// # Cancellation
    ///
    /// A dropped check may have raised the gate, or not. Retrying with the
    /// same fence is safe: an equal fence is accepted again, and a refusal
    /// then means a newer owner came meanwhile.
    async fn check_fence(&self, resource: &str, fence: u64) -> Result<FenceCheck>;

    /// The highest fence accepted for `resource`, or `None` when none was
    /// (or its gate was purged).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// invalid resource, as for [`check_fence`](FenceStore::check_fence);
    /// the [store errors](crate::LeaseStore#store-errors), `Corrupt` when the
    /// stored fence cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn highest_fence(&self, resource: &str) -> Result<Option<u64>>;

    /// Retention of gates ([contract §7](crate::contract)): deletes every
    /// gate whose last accepted check is at least `unused_for` ago by the
    /// store's clock, exactly that age included, and answers how many. A
    /// refused check does not count as a use.
    ///
    /// **A purged gate accepts any fence again**, a stale owner's included.
    /// Purge only gates of resources nobody can still write with an old
    /// fence: `unused_for` must exceed the longest a stale owner can pause
    /// and then resume writing (a GC pause, a suspended VM, a partition; in
    /// practice, longer than any lease ttl plus grace plus the longest stall
    /// you allow a worker), or that owner's late write passes.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   retention over [`MAX_RETENTION`](crate::limits::MAX_RETENTION);
    ///   nothing is deleted;
    /// * the [store errors](crate::LeaseStore#store-errors). Redis deletes in
    ///   batches of 1000, one script each: an error after the first batch
    ///   leaves the earlier batches deleted.
    ///
    /// # Cancellation
    ///
    /// A dropped purge may have deleted all, none or (Redis) some batches of
    /// what it would have. Retrying is safe: it deletes what is left.
    async fn purge_fences(&self, unused_for: Duration) -> Result<u64>;

    /// The gates kept, in byte order of their resource names: those whose
    /// name sorts after `after` (every gate when `None`), at most `limit`
    /// of them. Pass the last name of one page as `after` to read the next.
    /// Purged gates are gone; a refused check changes nothing listed.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   `limit` of 0 or above
    ///   [`MAX_LIST_LIMIT`](crate::limits::MAX_LIST_LIMIT), or an `after`
    ///   that is no valid resource name;
    /// * the [store errors](crate::LeaseStore#store-errors), `Corrupt` when
    ///   a listed gate cannot be decoded (naming its resource).
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn list_fences(&self, after: Option<&str>, limit: usize) -> Result<Vec<GateRecord>>;
}

macro_rules! forward_fence_store {
    ($($pointer:tt)*) => {
        #[async_trait]
        impl<S: FenceStore + ?Sized> FenceStore for $($pointer)*<S> {
            async fn check_fence(&self, resource: &str, fence: u64) -> Result<FenceCheck> {
                (**self).check_fence(resource, fence).await
            }
            async fn highest_fence(&self, resource: &str) -> Result<Option<u64>> {
                (**self).highest_fence(resource).await
            }
            async fn purge_fences(&self, unused_for: Duration) -> Result<u64> {
                (**self).purge_fences(unused_for).await
            }
            async fn list_fences(&self, after: Option<&str>, limit: usize) -> Result<Vec<GateRecord>> {
                (**self).list_fences(after, limit).await
            }
        }
    };
}

forward_fence_store!(Arc);
forward_fence_store!(Box);

#[async_trait]
impl<S: FenceStore + ?Sized> FenceStore for &S {
    async fn check_fence(&self, resource: &str, fence: u64) -> Result<FenceCheck> {
        (**self).check_fence(resource, fence).await
    }
    async fn highest_fence(&self, resource: &str) -> Result<Option<u64>> {
        (**self).highest_fence(resource).await
    }
    async fn purge_fences(&self, unused_for: Duration) -> Result<u64> {
        (**self).purge_fences(unused_for).await
    }
    async fn list_fences(&self, after: Option<&str>, limit: usize) -> Result<Vec<GateRecord>> {
        (**self).list_fences(after, limit).await
    }
}

/// `?` from [`FenceCheck::into_result`] into a function answering
/// [`crate::Result`]: [`ErrorKind::OwnershipLost`](crate::ErrorKind::OwnershipLost),
/// since a stale fence means its worker no longer owns the lease.
impl From<StaleFence> for crate::Error {
    fn from(stale: StaleFence) -> Self {
        crate::Error::converted(crate::ErrorKind::OwnershipLost, stale)
    }
}
