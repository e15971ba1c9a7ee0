//! At most N jobs running at once, across workers, built on a counted
//! scope ([contract §17](crate::contract)).
//!
//! A [`ConcurrencyLimit`] is a counted scope of its own key: a claim
//! through it first admits a **slot lease** into one of the scope's slots
//! (as any counted admission, atomically, so racing workers never hold
//! more slots than the capacity), and only then claims one job; the job
//! runs while its worker holds both, and the slot frees when the worker
//! completes, fails or releases it. The key is any name: a queue's, to
//! limit the queue, or one shared by claims on several queues (a tenant,
//! an external API), to limit them together.
//!
//! The slot is a lease like any other, with its own fence, listed by
//! `tenure leases` under the key's scope. A worker that dies stops renewing
//! both its job and its slot: once the slot's lease has lapsed, the next
//! claim through the limit takes the slot over (failing the dead worker's
//! slot lease with a new fence) rather than waiting for anyone. So the
//! limit counts the jobs whose workers hold their slot, as a lease counts
//! its owner: a worker stalled past its ttl no longer counts, and must stop
//! when its renewal answers that it lost the slot.

use std::time::Duration;

use crate::error::Result;
use crate::outcome::{Admission, Renewal, Transition};
use crate::record::{Claim, LeaseRecord};
use crate::request::{AdmitRequest, StatusChange, TakeoverRequest};

use super::{ClaimRequest, ClaimedJob, FailAction, JobQueue, JobRenewal, JobSettle};

/// The kind of the slot leases a [`ConcurrencyLimit`] admits.
pub const SLOT_LEASE_KIND: &str = "concurrency_slot";

/// The error a slot lease is failed with when a claim takes over the slot
/// of a worker whose lease lapsed.
pub const SLOT_LAPSED: &str = "the worker holding this concurrency slot stopped renewing it";

/// At most [`capacity`](Self::capacity) jobs claimed through this limit
/// running at once, across every worker and queue naming its
/// [`key`](Self::key).
///
/// ```no_run
/// use std::time::Duration;
/// use tenure_lease_core::queue::{ClaimRequest, ConcurrencyLimit, JobQueue, LimitedClaim};
///
/// # async fn work(queue: &impl JobQueue) -> tenure_lease_core::Result<()> {
/// // At most 3 exports at once, however many workers poll the queue.
/// let limit = ConcurrencyLimit::new("exports", 3);
/// let request = ClaimRequest::new("exports", "worker-a", Duration::from_secs(30));
/// if let LimitedClaim::Claimed(running) = limit.claim(queue, &request).await? {
///     // ... run running.job.job, renewing with running.renew(queue, ttl) ...
///     running.complete(queue).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConcurrencyLimit {
    /// The counted scope the slots are taken in: a name, shared by every
    /// claim (and lease) naming it.
    pub key: String,
    /// How many jobs run at once, 1 to
    /// [`MAX_SCOPE_CAPACITY`](crate::limits::MAX_SCOPE_CAPACITY).
    pub capacity: u32,
}

/// The answer of [`ConcurrencyLimit::claim`].
#[allow(clippy::large_enum_variant)] // short-lived, matched at once
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LimitedClaim {
    /// A slot was free and a job was claimed: run it.
    Claimed(RunningJob),
    /// Every slot is held: nothing was claimed. `holder` is the holder
    /// that frees first, and `retry_after` when its lease ends; `None` when
    /// it holds no valid lease yet is not a lapsed slot lease this limit
    /// takes over (a lease of another kind, or one without a ttl, on the
    /// key), or when another claim took the lapsed slot first.
    Full {
        /// The slot lease that frees first.
        holder: LeaseRecord,
        /// When its lease (store time) ends.
        retry_after: Option<Duration>,
    },
    /// A slot was free but the queue had no job to claim; the slot was
    /// given back. The slot lease stays as a finished record until
    /// [`purge`](crate::LeaseStore::purge), as every claim's does.
    NoJob,
}

/// A job claimed through a [`ConcurrencyLimit`], with the slot lease its
/// worker holds while it runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunningJob {
    /// The job and its claim.
    pub job: ClaimedJob,
    /// The slot lease, as admitted.
    pub slot: LeaseRecord,
}

impl ConcurrencyLimit {
    /// At most `capacity` jobs through `key` at once.
    pub fn new(key: impl Into<String>, capacity: u32) -> Self {
        ConcurrencyLimit {
            key: key.into(),
            capacity,
        }
    }

    /// Takes a slot of the limit for `request.worker` under
    /// `request.ttl`, taking over a lapsed worker's slot when none is free
    /// (a slot lease of this kind, [`SLOT_LEASE_KIND`], whose lease has
    /// ended: failed with [`SLOT_LAPSED`] under a new fence; never a lease
    /// of another kind on the key), then claims one job with `request`
    /// (its `limit` is ignored: one job per slot). A claim that finds no
    /// job gives the slot back. Each call that takes a slot leaves a slot
    /// lease record, finished once given back, until `purge`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// bad request (a rate limit included: claim with
    /// [`claim_limited`](JobQueue::claim_limited) for that) or a bad key
    /// (field `scope`) or capacity (field `capacities`), nothing changed;
    /// the store's errors. A store error after the slot was taken gives it back
    /// when it can (else its lease lapses after `request.ttl`).
    pub async fn claim<Q: JobQueue + ?Sized>(
        &self,
        queue: &Q,
        request: &ClaimRequest,
    ) -> Result<LimitedClaim> {
        let one = ClaimRequest {
            limit: 1,
            ..request.clone()
        };
        crate::backend::validate::unlimited_claim_request(&one)?;
        let slot = match self.take_slot(queue, request).await? {
            Ok(slot) => slot,
            Err(full) => return Ok(full),
        };
        let claimed = queue.claim(&one).await;
        let job = match claimed {
            Ok(mut jobs) if !jobs.is_empty() => jobs.swap_remove(0),
            Ok(_) => {
                give_back(queue, &slot).await?;
                return Ok(LimitedClaim::NoJob);
            }
            Err(error) => {
                // The claim's error is what the caller must hear; the slot
                // lapses on its own if it cannot be given back now.
                let _ = give_back(queue, &slot).await;
                return Err(error);
            }
        };
        Ok(LimitedClaim::Claimed(RunningJob { job, slot }))
    }

    /// Admits a slot lease, taking over a lapsed slot once when the scope
    /// is full; the `Full` answer when every slot's lease is valid.
    async fn take_slot<Q: JobQueue + ?Sized>(
        &self,
        queue: &Q,
        request: &ClaimRequest,
    ) -> Result<std::result::Result<LeaseRecord, LimitedClaim>> {
        let admission = AdmitRequest::with_generated_id(request.worker.as_str())
            .counted_scope(self.key.as_str(), self.capacity)
            .kind(SLOT_LEASE_KIND)
            .ttl(request.ttl);
        let mut took_over = false;
        loop {
            match queue.admit(&admission).await? {
                Admission::Admitted { record, .. } => return Ok(Ok(record)),
                Admission::Conflict {
                    holder,
                    retry_after: None,
                } if !took_over && lapsed_slot_lease(&holder) => {
                    took_over = true;
                    let takeover = TakeoverRequest::fail(
                        holder.id.as_str(),
                        request.worker.as_str(),
                        SLOT_LAPSED,
                    );
                    // Taken or not (renewed or ended meanwhile), the next
                    // admission decides afresh.
                    queue.claim_for_takeover(&takeover).await?;
                }
                Admission::Conflict {
                    holder,
                    retry_after,
                } => {
                    return Ok(Err(LimitedClaim::Full {
                        holder,
                        retry_after,
                    }))
                }
                other => {
                    return Err(crate::Error::corrupt(format!(
                        "a slot admission without a rate limit answered {other:?}"
                    )))
                }
            }
        }
    }
}

/// Whether `holder`, blocking without a valid lease, is a slot lease whose
/// lease ended: what a limit takes over. A lease of another kind on the
/// key, or one without a ttl, is someone else's to end.
fn lapsed_slot_lease(holder: &LeaseRecord) -> bool {
    holder.kind == SLOT_LEASE_KIND && holder.lease_expires_at.is_some()
}

/// Ends a slot lease, freeing its slot.
async fn give_back<Q: JobQueue + ?Sized>(queue: &Q, slot: &LeaseRecord) -> Result<Transition> {
    let claim = slot_claim(slot);
    queue.transition(&claim, &StatusChange::succeeded()).await
}

fn slot_claim(slot: &LeaseRecord) -> Claim {
    Claim::new(
        slot.id.as_str(),
        slot.owner.as_deref().unwrap_or_default(),
        slot.fence,
    )
}

impl RunningJob {
    /// The claim on the slot lease.
    pub fn slot_claim(&self) -> Claim {
        slot_claim(&self.slot)
    }

    /// Renews the slot for `ttl`, then, only while the slot is still
    /// held, the job: the slot's answer, and the job's when it was asked.
    /// The worker keeps running the job only while both answer renewed: a
    /// lost slot means another claim took it over, so the job no longer
    /// counts and is left to lapse (`None`).
    ///
    /// # Errors
    ///
    /// The store's errors (the slot may then be renewed and the job not).
    pub async fn renew<Q: JobQueue + ?Sized>(
        &self,
        queue: &Q,
        ttl: Duration,
    ) -> Result<(Renewal, Option<JobRenewal>)> {
        let slot = queue.renew(&self.slot_claim(), ttl).await?;
        if !matches!(slot, Renewal::Renewed { .. }) {
            return Ok((slot, None));
        }
        let job = queue.renew_job(&self.job.claim, ttl).await?;
        Ok((slot, Some(job)))
    }

    /// Completes the job, then gives the slot back. The answer is the
    /// job's: a slot the store could not give back is logged and lapses
    /// after its ttl.
    ///
    /// # Errors
    ///
    /// The store's errors completing the job (the slot then stays until
    /// released or lapsed).
    pub async fn complete<Q: JobQueue + ?Sized>(&self, queue: &Q) -> Result<JobSettle> {
        let settled = queue.complete(&self.job.claim).await?;
        self.release_after_settling(queue).await;
        Ok(settled)
    }

    /// Fails the job with `action`, then gives the slot back.
    ///
    /// # Errors
    ///
    /// As [`complete`](Self::complete).
    pub async fn fail<Q: JobQueue + ?Sized>(
        &self,
        queue: &Q,
        error: &str,
        action: FailAction,
    ) -> Result<JobSettle> {
        let settled = queue.fail(&self.job.claim, error, action).await?;
        self.release_after_settling(queue).await;
        Ok(settled)
    }

    /// Gives the slot back once the job has settled, logging a store that
    /// could not say: the job's answer is what the caller must hear.
    async fn release_after_settling<Q: JobQueue + ?Sized>(&self, queue: &Q) {
        if let Err(error) = self.release(queue).await {
            tracing::warn!(
                slot = %self.slot.id,
                %error,
                "the job settled, but its concurrency slot could not be given back; \
                 it frees when its lease lapses"
            );
        }
    }

    /// Gives the slot back (the job left as it is): `Applied` when the
    /// worker still held it, `Rejected` when another claim had taken it
    /// over.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn release<Q: JobQueue + ?Sized>(&self, queue: &Q) -> Result<Transition> {
        give_back(queue, &self.slot).await
    }
}
