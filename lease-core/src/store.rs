//! The `LeaseStore` trait: narrow, atomic operations every backend provides.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::outcome::{Admission, ExpiredScan, Renewal, Takeover, Transition};
use crate::record::{Claim, LeaseRecord};
use crate::request::{AdmitRequest, ExpiredQuery, StatusChange, TakeoverRequest};

/// A store of lease records (SPEC §2).
///
/// Every operation is atomic: one transaction, one script, one critical
/// section. Every operation validates its input first (through
/// [`crate::backend::validate`]) and answers [`ErrorKind::InvalidInput`] without
/// changing anything when it is bad. `Ok` carries a typed outcome, contention
/// included; `Err` means the store could not say (see [`crate::Error`]).
///
/// Implementations run the conformance kit (the `conformance` crate) to prove
/// they honour the contract.
///
/// [`ErrorKind::InvalidInput`]: crate::ErrorKind::InvalidInput
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Creates a record, with per-scope admission (SPEC §2, admit).
    ///
    /// A duplicate id is an [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) error.
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission>;

    /// Extends the lease of an active record whose owner and fence match.
    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal>;

    /// [`renew`](LeaseStore::renew) for many claims, one outcome per claim in
    /// the same order. One claim's loss never affects another's renewal.
    ///
    /// The default renews one by one; backends override it with one round
    /// trip.
    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        crate::backend::validate::claims(claims)?;
        crate::backend::validate::ttl(ttl)?;
        let mut outcomes = Vec::with_capacity(claims.len());
        for claim in claims {
            outcomes.push(self.renew(claim, ttl).await?);
        }
        Ok(outcomes)
    }

    /// The fenced status write.
    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition>;

    /// Orphan recovery: takes an active record whose lease is none or expired
    /// beyond grace. Among racing claimers exactly one is answered `Taken`.
    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover>;

    /// The reaper's scan: active records whose lease is none or expired beyond
    /// grace. Undecodable records are skipped and reported, never fatal.
    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan>;

    /// The record with this id, if any.
    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>>;

    /// Every record naming `scope`, newest first.
    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>>;

    /// Every active record.
    async fn list_active(&self) -> Result<Vec<LeaseRecord>>;

    /// The store's clock.
    async fn now(&self) -> Result<Timestamp>;

    /// Deletes terminal records last updated at least `terminal_older_than`
    /// ago; answers how many.
    async fn purge(&self, terminal_older_than: Duration) -> Result<u64>;
}

macro_rules! forward_lease_store {
    ($($pointer:tt)*) => {
        #[async_trait]
        impl<S: LeaseStore + ?Sized> LeaseStore for $($pointer)*<S> {
            async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
                (**self).admit(request).await
            }
            async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
                (**self).renew(claim, ttl).await
            }
            async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
                (**self).renew_many(claims, ttl).await
            }
            async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
                (**self).transition(claim, change).await
            }
            async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
                (**self).claim_for_takeover(request).await
            }
            async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
                (**self).list_expired(query).await
            }
            async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
                (**self).get(id).await
            }
            async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
                (**self).list_by_scope(scope).await
            }
            async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
                (**self).list_active().await
            }
            async fn now(&self) -> Result<Timestamp> {
                (**self).now().await
            }
            async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
                (**self).purge(terminal_older_than).await
            }
        }
    };
}

forward_lease_store!(Arc);
forward_lease_store!(Box);
