//! The job queue contract (SPEC §3).
//!
//! A queue is a lease store whose records are claimed by whoever comes
//! first. Jobs share the store's fence sequence with leases, so every claim
//! (and every re-claim after a requeue) holds a fence greater than any copy
//! before it, and a stale copy of a worker can always be told apart.
//!
//! Like [`LeaseStore`], every operation is atomic, validates its input first
//! ([`validate`](crate::backend::validate) and this module's checks), and answers
//! contention as typed outcomes; `Err` means the store could not say.

mod types;

pub use types::{
    ClaimRequest, ClaimedJob, DeadReason, FailAction, Job, JobClaim, JobLoss, JobRenewal,
    JobSettle, JobState, NewJob, OperatorRetry, ReapReport, TakeBack, TakeBackRefusal,
    DEFAULT_MAX_ATTEMPTS,
};

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::store::LeaseStore;

/// A store of jobs (SPEC §3), implemented by the same stores as
/// [`LeaseStore`] so both share one fence sequence and one clock.
#[async_trait]
pub trait JobQueue: LeaseStore {
    /// Adds a job. A duplicate id is an
    /// [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) error.
    ///
    /// The default enqueues a batch of one; backends override it only where
    /// a single job has a cheaper path.
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        crate::backend::validate::new_job(job)?;
        self.enqueue_batch(std::slice::from_ref(job))
            .await?
            .pop()
            .ok_or_else(|| Error::unavailable(format!("enqueue of {:?} answered no job", job.id)))
    }

    /// Adds several jobs, all or none (one transaction or script).
    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>>;

    /// Claims up to `limit` visible jobs of a queue, best first (priority
    /// descending, then `run_at`, then creation, then id), whose required
    /// capabilities are a subset of the worker's: owner, lease, `attempt + 1`
    /// and a new fence each. Concurrent claimers never get the same job.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>>;

    /// Extends a claimed job's lease when the claim still holds it.
    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal>;

    /// Marks the job completed (fenced by the claim).
    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle>;

    /// Records a failed attempt: back to the queue after `backoff` when
    /// attempts are left and the action is `Retry`, else dead-lettered.
    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle>;

    /// The worker cannot run the job: un-claim it, refund the attempt, add
    /// `missing` to its required capabilities, visible again at once.
    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle>;

    /// Jobs whose lease expired beyond `grace`: requeued when attempts are
    /// left, else dead-lettered with [`DeadReason::LeaseExpired`]. Handles at
    /// most [`MAX_REAP`](crate::backend::queue_rules::MAX_REAP) jobs per call, oldest expiry first.
    async fn reap(&self, grace: Duration) -> Result<ReapReport>;

    /// A live copy takes back a job the reaper dead-lettered (a false "dead"
    /// after an outage longer than the lease): only when the job is still
    /// dead-lettered by the reaper, nobody claimed it since (same fence), and
    /// no operator retried it. Answers a new claim with a new fence.
    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack>;

    /// The job with this id, if any.
    async fn get_job(&self, id: &str) -> Result<Option<Job>>;

    /// Dead-lettered jobs of a queue, oldest update first, at most `limit`.
    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>>;

    /// An operator's retry of a dead letter: back to the queue with its
    /// attempts reset, visible at once.
    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry>;

    /// Retention: deletes the finished jobs (completed or dead-lettered)
    /// that finished at least `finished_older_than` ago, with every index
    /// entry the store keeps for them; answers how many.
    ///
    /// Age counts from when the job finished (its last settle, the
    /// `updated_at` of a finished job, which nothing changes afterwards),
    /// never from when it was enqueued: a job that ran for longer than the
    /// retention and has just finished stays. A job finished exactly
    /// `finished_older_than` ago is deleted ([`job_purgeable`](crate::backend::queue_rules::job_purgeable)).
    /// Queued and claimed jobs are never touched, whatever their age; a
    /// dead letter that an operator retries or a live copy takes back is no
    /// longer finished and its age starts again when it finishes next.
    ///
    /// A purged job is gone: [`get_job`](JobQueue::get_job) answers `None`,
    /// a dead letter is no longer listed nor retryable, and a stale claim on
    /// it is answered [`JobLoss::Missing`]. Its id may be enqueued again.
    /// Fences never repeat: the fence sequence is untouched. Run it
    /// periodically (e.g. hourly with a retention of a few days), with a
    /// retention longer than the time operators need to inspect dead
    /// letters.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// retention over [`MAX_RETENTION`](crate::backend::validate::MAX_RETENTION)
    /// (nothing is deleted); otherwise the store's errors. A backend that
    /// deletes in batches may have deleted some batches before an error.
    async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64>;
}

macro_rules! forward_job_queue {
    ($($pointer:tt)*) => {
        #[async_trait]
        impl<Q: JobQueue + ?Sized> JobQueue for $($pointer)*<Q> {
            async fn enqueue(&self, job: &NewJob) -> Result<Job> {
                (**self).enqueue(job).await
            }
            async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
                (**self).enqueue_batch(jobs).await
            }
            async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
                (**self).claim(request).await
            }
            async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
                (**self).renew_job(claim, ttl).await
            }
            async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
                (**self).complete(claim).await
            }
            async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
                (**self).fail(claim, error, action).await
            }
            async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
                (**self).defer(claim, missing).await
            }
            async fn reap(&self, grace: Duration) -> Result<ReapReport> {
                (**self).reap(grace).await
            }
            async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
                (**self).take_back(claim, ttl).await
            }
            async fn get_job(&self, id: &str) -> Result<Option<Job>> {
                (**self).get_job(id).await
            }
            async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
                (**self).list_dead_letters(queue, limit).await
            }
            async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
                (**self).retry_dead_letter(id).await
            }
            async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64> {
                (**self).purge_jobs(finished_older_than).await
            }
        }
    };
}

forward_job_queue!(std::sync::Arc);
forward_job_queue!(Box);
