//! The `LeaseStore` trait: narrow, atomic operations every backend provides.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::outcome::{Admission, ExpiredScan, Renewal, Takeover, Transition};
use crate::record::{Claim, LeaseRecord};
use crate::release::Releases;
use crate::request::{AdmitRequest, ExpiredQuery, StatusChange, TakeoverRequest};

/// A store of lease records: the operations of
/// [contract §3 to §8](crate::contract).
///
/// Every operation is atomic: one transaction, one script, one critical
/// section, applied whole or not at all. Every operation validates its input
/// first (limits in contract §11; a backend gets this from the validating
/// [front](crate::backend::stores::front), once for every store) and answers
/// [`ErrorKind::InvalidInput`] without changing anything when it is bad.
/// `Ok` carries a typed outcome, contention included: a conflict, a lost
/// lease or a refused write is never an error. `Err` means the store could
/// not say (contract §10, [`crate::Error`]).
///
/// Implementations run the conformance kit (the `conformance` crate) to prove
/// they honour the contract.
///
/// # Store errors
///
/// Besides what each method's own `# Errors` section names, any call to a
/// store with a server or a file behind it may answer:
///
/// * [`ErrorKind::Unavailable`] or [`ErrorKind::Timeout`]: the store could
///   not be reached, failed, or did not answer in time. Retryable; for a
///   write the outcome is unknown (applied whole or not at all);
/// * [`ErrorKind::Corrupt`]: something the call had to read (the record, a
///   scope's holder, the fence counter) cannot be decoded. Nothing is
///   written over it;
/// * [`ErrorKind::Incompatible`] or [`ErrorKind::Config`]: the schema, the
///   server or the store's privileges changed under it. Not retryable.
///
/// The in-memory store answers none of these.
///
/// # Cancellation
///
/// Dropping a call's future mid-flight is an unknown outcome, like
/// [`ErrorKind::Timeout`]: a write may have been applied (whole) or not, and
/// a read changes nothing either way. Each method says what a retry does.
///
/// [`ErrorKind::InvalidInput`]: crate::ErrorKind::InvalidInput
/// [`ErrorKind::Unavailable`]: crate::ErrorKind::Unavailable
/// [`ErrorKind::Timeout`]: crate::ErrorKind::Timeout
/// [`ErrorKind::Corrupt`]: crate::ErrorKind::Corrupt
/// [`ErrorKind::Incompatible`]: crate::ErrorKind::Incompatible
/// [`ErrorKind::Config`]: crate::ErrorKind::Config
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Creates a record, with per-scope admission
    /// ([contract §3](crate::contract)): [`Admission::Admitted`] with the
    /// holders it interrupted, or [`Admission::Conflict`] with the blocking
    /// holder and nothing changed.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad id, owner, kind, scope, ttl, grace or metadata;
    /// * [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) when
    ///   the id is taken, whatever the scopes say;
    /// * the [store errors](LeaseStore#store-errors). PostgreSQL also answers
    ///   a retryable `Unavailable` when an admission on free scopes kept
    ///   losing races (contract §3).
    ///
    /// Nothing changes on any of them. A blocked admission is not an error.
    ///
    /// # Cancellation
    ///
    /// A dropped admission may or may not have happened, interruptions
    /// included, never in part. Retrying the same request is safe: it answers
    /// `AlreadyExists` when the first one landed, and [`get`](LeaseStore::get)
    /// then shows the record, owned by the requester, with the fence of its
    /// claim. A record admitted that way that nobody renews becomes
    /// reclaimable when its lease ends (at once without a ttl).
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission>;

    /// Extends the lease of an active record the claim still holds to
    /// `now + ttl` ([contract §4](crate::contract)); otherwise answers
    /// [`Renewal::Lost`] with the reason, changing nothing. The fence never
    /// changes.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim (id, owner, fence 0) or ttl;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the
    ///   record cannot be decoded.
    ///
    /// A claim that no longer holds is not an error.
    ///
    /// # Cancellation
    ///
    /// A dropped renewal may still be applied, later than its sender
    /// expected, but only while the claim still holds the record; it
    /// changes no fence, so retrying with the same claim is safe. Count the
    /// lease as extended only from an answered `Renewed`, measured from when
    /// the call was sent (contract §12).
    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal>;

    /// [`renew`](LeaseStore::renew), recording `progress` on the record in
    /// the same fenced write ([contract §4](crate::contract)): a `Renewed`
    /// answer means both happened, a `Lost` one that neither did. Readers
    /// see it as [`LeaseRecord::progress`] until the next report. Any JSON
    /// value but `null`, at most
    /// [`MAX_PROGRESS_BYTES`](crate::limits::MAX_PROGRESS_BYTES).
    ///
    /// # Errors
    ///
    /// As [`renew`](LeaseStore::renew)'s, and
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// `null` or oversized progress; nothing changed.
    ///
    /// # Cancellation
    ///
    /// As for [`renew`](LeaseStore::renew): a dropped call may still be
    /// applied, whole, only while the claim holds the record; a retry with
    /// the same claim and progress is safe.
    async fn renew_with_progress(
        &self,
        claim: &Claim,
        ttl: Duration,
        progress: &serde_json::Value,
    ) -> Result<Renewal>;

    /// [`renew`](LeaseStore::renew) for many claims, one outcome per claim in
    /// the same order. One claim's loss never affects another's renewal.
    ///
    /// The default renews one by one; backends override it with one round
    /// trip.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for more
    ///   than [`MAX_BATCH`](crate::limits::MAX_BATCH) claims, a bad claim
    ///   or a bad ttl; nothing is renewed;
    /// * the [store errors](LeaseStore#store-errors). A claim whose record
    ///   cannot be decoded makes the whole call answer `Corrupt`: renew such
    ///   a batch claim by claim to keep the healthy ones (the keeper does).
    ///
    /// The default stops at the first error, after renewing the claims
    /// before it; Redis renews 1000 claims per script, so an error there may
    /// follow renewals of earlier parts. Either way the answer is `Err`,
    /// outcome unknown for every claim.
    ///
    /// # Cancellation
    ///
    /// As for [`renew`](LeaseStore::renew), claim by claim: a dropped batch
    /// may have renewed all, none or (default, Redis) a leading part of its
    /// claims; a retry is safe.
    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        crate::backend::validate::claims(claims)?;
        crate::backend::validate::ttl(ttl)?;
        let mut outcomes = Vec::with_capacity(claims.len());
        for claim in claims {
            outcomes.push(self.renew(claim, ttl).await?);
        }
        Ok(outcomes)
    }

    /// The fenced status write ([contract §5](crate::contract)):
    /// [`Transition::Applied`] with the record as now stored, or
    /// [`Transition::Rejected`] (`Missing`, `Stale`, `Terminal`,
    /// `NotAllowed`, in that order) with nothing changed.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim, a `Pending` target, or an error or stop reason over
    ///   [`MAX_TEXT_BYTES`](crate::limits::MAX_TEXT_BYTES) or holding a NUL;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the
    ///   record cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A dropped write may or may not have been applied. Retrying the same
    /// change with the same claim is safe and never applies it twice: after
    /// a landed terminal write the retry answers `Rejected(Terminal(..))`,
    /// after a landed `Running` or `Interrupted` `Rejected(NotAllowed { .. })`;
    /// a peer that took over meanwhile makes it `Stale`. Until an answer
    /// says otherwise, treat the run as no longer owned (fail closed, as the
    /// keeper does).
    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition>;

    /// Orphan recovery ([contract §6](crate::contract)): takes an active
    /// record whose lease is none or ended at least `grace` ago, giving it a
    /// new fence and applying the action; answers [`Takeover::Taken`] with
    /// the record as now stored, or [`Takeover::NotTaken`] with the reason,
    /// nothing changed. Among racing claimers exactly one is answered
    /// `Taken`.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad id or claimer, a grace over
    ///   [`MAX_GRACE`](crate::limits::MAX_GRACE), a bad error or stop
    ///   reason (`Fail`) or ttl (`Adopt`);
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the
    ///   record or the fence counter cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A dropped takeover may have won, and its proof, the new fence, was in
    /// the lost answer: read the record with [`get`](LeaseStore::get) (the
    /// claimer as owner under a fence above the one it had means it was
    /// taken, and its [`claim`](LeaseRecord::claim) is the new one). A retry
    /// is a fresh attempt: after a landed `Fail` it answers
    /// `NotTaken(Terminal(Failed))`, after a landed `Adopt` with a ttl
    /// `NotTaken(LeaseValid { .. })`, after one without a ttl it takes the
    /// record again under a newer fence. An adopted record nobody renews
    /// becomes reclaimable again when its lease ends.
    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover>;

    /// The orphan scan ([contract §6](crate::contract)): active records
    /// whose lease is none or ended at least `grace` ago, created at or
    /// before `created_before` when given; those without a lease first, then
    /// by expiry, then by id; at most `limit`. It decides nothing: a
    /// takeover judges again.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   grace over [`MAX_GRACE`](crate::limits::MAX_GRACE) or a limit
    ///   outside 1 to [`MAX_LIST_LIMIT`](crate::limits::MAX_LIST_LIMIT);
    /// * the [store errors](LeaseStore#store-errors). A record that cannot be
    ///   decoded is no error: it is left out, listed in
    ///   [`ExpiredScan::skipped`] and logged.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan>;

    /// The record with this id, if any ([contract §8](crate::contract)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// invalid id; the [store errors](LeaseStore#store-errors), `Corrupt`
    /// when the record cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>>;

    /// Every record naming `scope`, in any status, newest first (by
    /// creation, then fence; [contract §8](crate::contract)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// invalid scope; the [store errors](LeaseStore#store-errors), `Corrupt`
    /// when one of those records cannot be decoded (there is no partial
    /// answer).
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>>;

    /// Every active record, by id ([contract §8](crate::contract)).
    ///
    /// # Errors
    ///
    /// The [store errors](LeaseStore#store-errors), `Corrupt` when a record
    /// that is, or may be, active cannot be decoded (there is no partial
    /// answer).
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn list_active(&self) -> Result<Vec<LeaseRecord>>;

    /// The store's clock, the one every expiry is judged by
    /// ([contract §2](crate::contract)).
    ///
    /// # Errors
    ///
    /// The [store errors](LeaseStore#store-errors) of server backends
    /// (PostgreSQL `SELECT now()`, Redis `TIME`); memory and SQLite read
    /// their [`Clock`](crate::Clock) and never fail.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn now(&self) -> Result<Timestamp>;

    /// Retention ([contract §8](crate::contract)): deletes the terminal and
    /// interrupted records whose `updated_at` (when they finished or were
    /// interrupted) is at least `terminal_older_than` ago, exactly that age
    /// included, with their scope entries; answers how many. Active records
    /// stay, and the fence sequence is untouched, so a purged id admitted
    /// again gets a greater fence.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   retention over [`MAX_RETENTION`](crate::limits::MAX_RETENTION);
    ///   nothing is deleted;
    /// * the [store errors](LeaseStore#store-errors). Redis deletes in
    ///   batches of 1000, one script each: an error after the first batch
    ///   leaves the earlier batches deleted.
    ///
    /// # Cancellation
    ///
    /// A dropped purge may have deleted all, none or (Redis) some batches of
    /// what it would have, whole records only. Retrying is safe: it deletes
    /// what is left and counts only that.
    async fn purge(&self, terminal_older_than: Duration) -> Result<u64>;

    /// How many records [`purge`](LeaseStore::purge) with the same
    /// retention would delete if it ran now, by the store's clock; deletes
    /// nothing. For an operator's dry run (`tenure purge --dry-run`): the
    /// records may finish, or be purged, before a real purge runs.
    ///
    /// # Errors
    ///
    /// As [`purge`](LeaseStore::purge) for its input and the store's.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn count_purgeable(&self, terminal_older_than: Duration) -> Result<u64>;

    /// A receiver of the store's release notices from now on, or `None`
    /// when the store announces none (then a [`Waiter`](crate::wait::Waiter)
    /// polls). A notice names a scope a release freed; notices are hints
    /// that may be lost, never proof (see [`crate::release`]). The default
    /// answers `None`; wrappers hand the call on.
    ///
    /// # Errors
    ///
    /// The [store errors](LeaseStore#store-errors) of a store that must
    /// start listening first (PostgreSQL opens a connection for `LISTEN`,
    /// Redis one for `SUBSCRIBE`).
    ///
    /// # Cancellation
    ///
    /// Dropping it changes nothing in the store.
    async fn releases(&self) -> Result<Option<Releases>> {
        Ok(None)
    }

    /// The kind of store, as OpenTelemetry's `db.system.name` names it
    /// (`postgresql`, `redis`, `sqlite`, `mysql`, `mariadb`; `etcd`,
    /// `memory` and `file` are tenure's own values, not registered ones):
    /// what a [`Tracing`](crate::layer::Tracing) layer labels its
    /// spans and metrics with (see [`telemetry`](crate::telemetry)). The
    /// default answers `other`; wrappers hand the call on.
    fn system_name(&self) -> &'static str {
        "other"
    }
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
            async fn renew_with_progress(
                &self,
                claim: &Claim,
                ttl: Duration,
                progress: &serde_json::Value,
            ) -> Result<Renewal> {
                (**self).renew_with_progress(claim, ttl, progress).await
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
            async fn count_purgeable(&self, terminal_older_than: Duration) -> Result<u64> {
                (**self).count_purgeable(terminal_older_than).await
            }
            async fn releases(&self) -> Result<Option<Releases>> {
                (**self).releases().await
            }
            fn system_name(&self) -> &'static str {
                (**self).system_name()
            }
        }
    };
}

forward_lease_store!(Arc);
forward_lease_store!(Box);
