//! Job claims held by the keeper ([contract §9 and §12](tenure_lease_core::contract)):
//! a claimed job's lease is renewed by the same heartbeat, judged by the same
//! confirmed deadline and stopped by the same loss path as a run's; only the
//! store calls differ (`renew_job` / `renew_jobs`, `get_job`, `complete` /
//! `fail` / `defer`).
//!
//! Held jobs are renewed as runs are: one call each for small beats,
//! `renew_jobs` in chunks (one queue per chunk) for large ones, each call
//! bounded by the earliest confirmed deadline it carries, so one slow queue
//! call delays no job outside it and no run. Why the keeper never takes a
//! job back is on [`JobGuard`].

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::accessors::guard_accessors;
use super::held::{HeldJob, SettleFailure};
use super::loss::{LossCause, OwnershipLost};
use super::{heartbeat, Keeper, KeeperError, Shared};
use crate::held::unknown_answer;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobLoss, JobQueue, JobSettle,
};
use tenure_lease_core::{Error, ErrorKind};

/// A job's item in the keeper's table: where it lives, the claim, and the
/// job as it was claimed.
pub(crate) struct JobItem {
    pub(crate) queue: Arc<dyn JobQueue>,
    pub(crate) claim: JobClaim,
    pub(crate) job: Job,
}

impl fmt::Debug for JobItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobItem")
            .field("claim", &self.claim)
            .finish_non_exhaustive()
    }
}

/// Why a [`JobGuard`] write did not happen, or may not have.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobWriteError {
    /// The claim had already lost the job; nothing was written.
    #[error("ownership already lost ({0})")]
    OwnershipLost(LossCause),
    /// The queue refused the write: the claim no longer holds the job (the
    /// reaper requeued or dead-lettered it, a peer claimed it, or it is
    /// gone). Nothing changed; the job is now marked lost here.
    #[error("the job was taken away ({0:?})")]
    TakenAway(JobLoss),
    /// The queue could not say whether the write happened: the job is
    /// marked lost here (fail closed); the stored job is as the queue has it.
    #[error("the write could not be confirmed: {0}")]
    Unconfirmed(#[source] Error),
    /// The queue refused the request itself (bad input); nothing changed
    /// and the job is still held.
    #[error("invalid write: {0}")]
    Invalid(#[source] Error),
    /// The job was already completed, failed or deferred through a guard.
    #[error("the job is already settling or settled")]
    AlreadySettled,
}

/// A claimed job held by the keeper, handed out by
/// [`Keeper::claim_jobs`] and [`Keeper::hold_job`].
///
/// Its lease is renewed every beat until [`complete`](JobGuard::complete),
/// [`fail`](JobGuard::fail) or [`defer`](JobGuard::defer). A loss (the
/// reaper requeued it, a renewal failed through the confirmed deadline, an
/// unconfirmed settle) cancels [`token`](JobGuard::token) and aborts the
/// registered task at once. Clones share the job; dropping the last one
/// without settling stops the renewals and leaves the lease to expire, so
/// the reaper requeues the job.
///
/// The keeper never [takes back](JobQueue::take_back) a job the reaper
/// dead-lettered. The reaper only reaps a claim whose store lease expired,
/// and the confirmed deadline ends before that store expiry, so by the time
/// a renewal could answer `Finished(DeadLettered)` the keeper has already
/// fail-stopped the job (token cancelled, task aborted): taking it back
/// then would hold a job nobody runs. A worker that wants it back calls
/// `take_back` with [`claim`](JobGuard::claim) and holds the answer with
/// [`Keeper::hold_job`], restarting the work under the new fence.
#[derive(Clone)]
pub struct JobGuard {
    inner: Arc<JobGuardInner>,
}

struct JobGuardInner {
    shared: Arc<Shared>,
    job: Arc<HeldJob>,
}

impl Drop for JobGuardInner {
    fn drop(&mut self) {
        if self.shared.lose(&self.job, LossCause::Abandoned, false) {
            tracing::warn!(
                job.id = %self.job.item.claim.id,
                "every guard of the job was dropped without settling it; the lease is left to expire"
            );
        }
    }
}

impl fmt::Debug for JobGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobGuard")
            .field("claim", self.claim())
            .field("phase", &self.held().phase())
            .finish()
    }
}

guard_accessors!(JobGuard, JobClaim, "job");

impl JobGuard {
    pub(crate) fn new(shared: Arc<Shared>, job: Arc<HeldJob>) -> Self {
        JobGuard {
            inner: Arc::new(JobGuardInner { shared, job }),
        }
    }

    fn held(&self) -> &HeldJob {
        &self.inner.job
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The job as it was when claimed (payload, attempt, requirements).
    pub fn job(&self) -> &Job {
        &self.held().item.job
    }

    /// Whether the claim still holds the job; as
    /// [`RunGuard::check`](super::RunGuard::check), reading the job at most
    /// every tenth of a beat.
    pub async fn check(&self) -> Result<(), OwnershipLost> {
        let item = &self.held().item;
        self.held()
            .check(self.shared(), || async move {
                let job = item.queue.get_job(&item.claim.id).await?;
                Ok(rules::judge_job(job.as_ref(), &item.claim).map_err(LossCause::JobLost))
            })
            .await
    }

    /// Reports `progress` with a renewal of the job's claim, in one fenced
    /// write ([`JobQueue::renew_job_with_progress`](tenure_lease_core::JobQueue::renew_job_with_progress)):
    /// others read it as [`Job::progress`] (`tenure jobs` prints it) until
    /// the next report. The answer counts as a heartbeat: a renewal extends
    /// the confirmed deadline, a loss ends the job's work.
    ///
    /// # Errors
    ///
    /// * [`JobWriteError::OwnershipLost`] when the claim had lost the job
    ///   (nothing was sent) or the store answered that it did;
    /// * [`JobWriteError::Invalid`] for a `null` or oversized progress, or
    ///   a keeper whose leases have no ttl; the claim keeps the job;
    /// * [`JobWriteError::Unconfirmed`] when the store could not say; the
    ///   claim keeps the job until its confirmed deadline.
    pub async fn report_progress(&self, progress: &serde_json::Value) -> Result<(), JobWriteError> {
        if let Some(cause) = self.loss() {
            return Err(JobWriteError::OwnershipLost(cause));
        }
        let item = &self.held().item;
        let report = heartbeat::report_progress(
            self.shared(),
            self.held(),
            progress,
            "renew_job_with_progress",
            |ttl| async move {
                let outcome = item
                    .queue
                    .renew_job_with_progress(&item.claim, ttl, progress)
                    .await?;
                heartbeat::job_answer(outcome)
            },
        );
        match report.await {
            Ok(None) => Ok(()),
            Ok(Some(cause)) => Err(JobWriteError::OwnershipLost(cause)),
            Err(error) if error.kind() == ErrorKind::InvalidInput => {
                Err(JobWriteError::Invalid(error))
            }
            Err(error) => Err(JobWriteError::Unconfirmed(error)),
        }
    }

    /// Marks the job completed (fenced by the claim). Answers the job as it
    /// now is.
    pub async fn complete(&self) -> Result<Job, JobWriteError> {
        let item = &self.held().item;
        self.settle("complete", item.queue.complete(&item.claim))
            .await
    }

    /// Records a failed attempt: requeued after the backoff when `action`
    /// is `Retry` and attempts are left, else dead-lettered.
    pub async fn fail(&self, error: &str, action: FailAction) -> Result<Job, JobWriteError> {
        let item = &self.held().item;
        self.settle("fail", item.queue.fail(&item.claim, error, action))
            .await
    }

    /// Hands the job back because this worker lacks `missing`: the attempt
    /// is refunded and the requirement stamped on the job.
    pub async fn defer(&self, missing: &BTreeSet<String>) -> Result<Job, JobWriteError> {
        let item = &self.held().item;
        self.settle("defer", item.queue.defer(&item.claim, missing))
            .await
    }

    /// The settle path shared by the three writes: settling first, then a
    /// refusal loses the job, an unconfirmed write fails closed.
    async fn settle(
        &self,
        operation: &'static str,
        write: impl Future<Output = tenure_lease_core::Result<JobSettle>>,
    ) -> Result<Job, JobWriteError> {
        let write = async {
            Ok(match write.await? {
                JobSettle::Settled(job) => Ok(job),
                JobSettle::Rejected(loss) => Err(loss),
                other => return Err(unknown_answer(operation, &other)),
            })
        };
        let held = self.held();
        match held.settle(self.shared(), operation, write).await {
            Ok(Ok(job)) => Ok(job),
            Ok(Err(loss)) => {
                self.shared().lose(held, LossCause::JobLost(loss), true);
                Err(JobWriteError::TakenAway(loss))
            }
            Err(SettleFailure::OwnershipLost(cause)) => Err(JobWriteError::OwnershipLost(cause)),
            Err(SettleFailure::AlreadySettled) => Err(JobWriteError::AlreadySettled),
            Err(SettleFailure::Invalid(error)) => Err(JobWriteError::Invalid(error)),
            Err(SettleFailure::Unconfirmed(error)) => Err(JobWriteError::Unconfirmed(error)),
        }
    }
}

impl Keeper {
    /// Claims up to `request.limit` jobs from `queue` under this keeper's
    /// worker id and ttl (whatever `request` says) and holds them: each is
    /// renewed from now on until settled. Jobs need a ttl
    /// ([`KeeperError::NoTtl`] in single-worker mode).
    ///
    /// A request with a [rate limit](ClaimRequest::rate_limit) is refused,
    /// as [`JobQueue::claim`] refuses it: claim such jobs with
    /// [`JobQueue::claim_limited`] (under this keeper's worker id and ttl),
    /// which also says how long the limit holds the rest back, and hold
    /// each with [`hold_job`](Keeper::hold_job).
    pub async fn claim_jobs(
        &self,
        queue: Arc<dyn JobQueue>,
        request: ClaimRequest,
    ) -> Result<Vec<JobGuard>, KeeperError> {
        let ttl = self.job_ttl()?;
        let request = ClaimRequest {
            worker: self.shared.worker_id.clone(),
            ttl,
            ..request
        };
        let sent = Instant::now();
        let claimed = self.shared.bounded("claim", queue.claim(&request)).await?;
        Ok(claimed
            .into_iter()
            .map(|claimed| {
                self.shared
                    .hold_job(Arc::clone(&queue), claimed, sent + ttl)
            })
            .collect())
    }

    /// Holds a job this worker claimed itself (with
    /// [`JobQueue::claim`] or [`JobQueue::take_back`]), the call having been
    /// sent at `sent`: its confirmed deadline is `sent` plus the claim's own
    /// lease length; from then on it is renewed with the keeper's ttl.
    ///
    /// The claim must name this keeper's worker id (else `InvalidInput`
    /// naming `claimed.owner`).
    pub fn hold_job(
        &self,
        queue: Arc<dyn JobQueue>,
        claimed: ClaimedJob,
        sent: Instant,
    ) -> Result<JobGuard, KeeperError> {
        self.job_ttl()?;
        if claimed.claim.owner != self.shared.worker_id {
            return Err(Error::invalid_input(
                "claimed.owner",
                format_args!(
                    "{:?} is not this keeper's worker id {:?}",
                    claimed.claim.owner, self.shared.worker_id
                ),
            )
            .into());
        }
        let lease = claimed
            .job
            .lease_expires_at
            .and_then(|expires| (expires - claimed.job.updated_at).to_std().ok())
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "claimed job {:?} came back without a lease",
                    claimed.job.id
                ))
            })?;
        Ok(self.shared.hold_job(queue, claimed, sent + lease))
    }

    /// Whether it holds job `id`.
    pub fn holds_job(&self, id: &str) -> bool {
        self.shared.holds_job(id)
    }

    fn job_ttl(&self) -> Result<std::time::Duration, KeeperError> {
        self.shared.ensure_accepting()?;
        self.shared.config.ttl.ok_or(KeeperError::NoTtl)
    }
}

/// Lets job work that checks ownership between items (`guard.check().await?`)
/// return the same error as its settling write.
impl From<OwnershipLost> for JobWriteError {
    fn from(lost: OwnershipLost) -> Self {
        JobWriteError::OwnershipLost(lost.cause)
    }
}

/// `?` from a job's write into a function answering [`tenure_lease_core::Result`]: a
/// lost job is [`ErrorKind::OwnershipLost`], a queue that could not confirm
/// keeps its kind, a second settle is [`ErrorKind::InvalidInput`]. The
/// `JobWriteError` stays the source ([`Error::downcast_source`]).
impl From<JobWriteError> for Error {
    fn from(error: JobWriteError) -> Self {
        let kind = match &error {
            JobWriteError::OwnershipLost(_) | JobWriteError::TakenAway(_) => {
                ErrorKind::OwnershipLost
            }
            JobWriteError::Unconfirmed(store) | JobWriteError::Invalid(store) => store.kind(),
            JobWriteError::AlreadySettled => ErrorKind::InvalidInput,
        };
        Error::converted(kind, error)
    }
}
