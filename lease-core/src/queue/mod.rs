//! The job queue ([contract §9](crate::contract)).
//!
//! A queue is a lease store whose records are claimed by whoever comes
//! first. Jobs share the store's fence sequence with leases, so every claim
//! (and every re-claim after a requeue) holds a fence greater than any copy
//! before it, and a stale copy of a worker can always be told apart.
//!
//! Like [`LeaseStore`], every operation is atomic, validates its input first
//! ([`validate`](crate::backend::validate) and this module's checks), and answers
//! contention as typed outcomes; `Err` means the store could not say.

pub mod concurrency;
mod types;

pub use concurrency::{ConcurrencyLimit, LimitedClaim, RunningJob};
pub use types::{
    ClaimRequest, Claimed, ClaimedJob, DeadReason, Enqueued, FailAction, Job, JobClaim, JobLoss,
    JobRenewal, JobSettle, JobState, JobUnique, NewJob, OperatorRetry, QueueCounts, ReapReport,
    TakeBack, TakeBackRefusal, UniquePolicy, DEFAULT_MAX_ATTEMPTS,
};

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::store::LeaseStore;

/// A store of jobs ([contract §9](crate::contract)), implemented by the
/// same stores as [`LeaseStore`] so both share one fence sequence and one
/// clock.
///
/// As for leases, every operation is atomic and validates its input first
/// ([`ErrorKind::InvalidInput`], nothing changed). A claim that no longer
/// holds its job is a typed answer ([`JobLoss`]), never an error. Besides
/// what each method's `# Errors` section names, any call may answer the
/// [store errors](LeaseStore#store-errors) (`Unavailable`, `Timeout`,
/// `Corrupt`, `Incompatible`, `Config`), and dropping a call's future is an
/// unknown outcome, like a `Timeout` (see each method's `# Cancellation`).
///
/// [`ErrorKind::InvalidInput`]: crate::ErrorKind::InvalidInput
#[async_trait]
pub trait JobQueue: LeaseStore {
    /// Adds a job: `Queued`, attempt 0, fence 0, visible from `run_at` (at
    /// once when unset). Answers the job as stored.
    ///
    /// The default enqueues a batch of one; backends override it only where
    /// a single job has a cheaper path.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad id or queue, `max_attempts` outside 1 to
    ///   [`MAX_ATTEMPTS`](crate::limits::MAX_ATTEMPTS), bad or too many required
    ///   capabilities, a payload over
    ///   [`MAX_PAYLOAD_BYTES`](crate::limits::MAX_PAYLOAD_BYTES), too deep or holding
    ///   a NUL, or a `run_at` outside the years 1 to 9999; for a job with a
    ///   [uniqueness key](NewJob::unique) (field `unique`: enqueue it with
    ///   [`enqueue_unique`](JobQueue::enqueue_unique));
    /// * [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) when a
    ///   job with this id exists;
    /// * the [store errors](LeaseStore#store-errors).
    ///
    /// # Cancellation
    ///
    /// A dropped enqueue may or may not have stored the job. Retrying the
    /// same [`NewJob`] (its id was drawn when it was built) is safe: it
    /// answers `AlreadyExists` when the first one landed.
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        crate::backend::validate::new_job(job)?;
        self.enqueue_batch(std::slice::from_ref(job))
            .await?
            .pop()
            .ok_or_else(|| Error::unavailable(format!("enqueue of {:?} answered no job", job.id)))
    }

    /// Adds several jobs, all or none (one transaction or script), as
    /// [`enqueue`](JobQueue::enqueue) does one.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for more
    ///   than [`MAX_LIST_LIMIT`](crate::limits::MAX_LIST_LIMIT) jobs, any
    ///   invalid job, or an id twice in the batch;
    /// * [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) when
    ///   any of the ids exists;
    /// * the [store errors](LeaseStore#store-errors).
    ///
    /// On any of them no job of the batch is stored.
    ///
    /// # Cancellation
    ///
    /// A dropped batch was stored whole or not at all; retrying the same
    /// batch is safe and answers `AlreadyExists` when the first one landed.
    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>>;

    /// Adds a job unless another job of its queue holds its uniqueness key
    /// ([contract §9, unique jobs](crate::contract)): the check and the insert are one
    /// atomic step, so of racing enqueues with one key exactly one is
    /// [`Created`](Enqueued::Created) while the key is held. A job without
    /// a key is simply created. The default enqueues a batch of one.
    ///
    /// A job holds its key from its enqueue while its
    /// [`UniquePolicy`] is met, judged at the store's clock:
    ///
    /// ```
    /// # async fn example(store: &impl tenure_lease_core::JobQueue) -> tenure_lease_core::Result<()> {
    /// use std::time::Duration;
    /// use tenure_lease_core::queue::{Enqueued, NewJob, UniquePolicy};
    ///
    /// let digest = |day: &str| {
    ///     NewJob::new("digests", serde_json::json!({ "user": 7 }))
    ///         .unique(format!("user-7/{day}"), UniquePolicy::ForPeriod(Duration::from_secs(86_400)))
    /// };
    /// let first = store.enqueue_unique(&digest("2026-12-06")).await?;
    /// match store.enqueue_unique(&digest("2026-12-06")).await? {
    ///     Enqueued::Duplicate(holder) => assert_eq!(&holder.id, &first.job().id),
    ///     other => panic!("the key is held: {other:?}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`enqueue`](JobQueue::enqueue), besides a key that is no valid name
    /// or a period outside
    /// [`MIN_UNIQUE_PERIOD`](crate::limits::MIN_UNIQUE_PERIOD) to
    /// [`MAX_UNIQUE_PERIOD`](crate::limits::MAX_UNIQUE_PERIOD) or not whole
    /// milliseconds ([`InvalidInput`](crate::ErrorKind::InvalidInput), field
    /// `unique`). `AlreadyExists` answers a taken id, even when the job
    /// would have been a duplicate.
    ///
    /// # Cancellation
    ///
    /// As [`enqueue`](JobQueue::enqueue): retrying the same [`NewJob`]
    /// answers `AlreadyExists` when the first one landed (or `Duplicate`
    /// when another job took the key first).
    async fn enqueue_unique(&self, job: &NewJob) -> Result<Enqueued> {
        crate::backend::validate::new_unique_job(job)?;
        self.enqueue_unique_batch(std::slice::from_ref(job))
            .await?
            .pop()
            .ok_or_else(|| Error::unavailable(format!("enqueue of {:?} answered no job", job.id)))
    }

    /// [`enqueue_unique`](JobQueue::enqueue_unique) for several jobs in one
    /// atomic step, answering one [`Enqueued`] per job, in order. Ids are
    /// checked first: any taken id refuses the whole batch. Then each job
    /// is judged in turn, seeing the jobs created before it in the batch: a
    /// key twice in the batch is created once, the later job a
    /// `Duplicate` of the earlier.
    ///
    /// # Errors
    ///
    /// As [`enqueue_batch`](JobQueue::enqueue_batch) and
    /// [`enqueue_unique`](JobQueue::enqueue_unique); on any of them no job of
    /// the batch is stored.
    ///
    /// # Cancellation
    ///
    /// As [`enqueue_batch`](JobQueue::enqueue_batch).
    async fn enqueue_unique_batch(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>>;

    /// Claims up to `limit` visible jobs of a queue, best first (priority
    /// descending, then `run_at`, then creation, then id), whose required
    /// capabilities are a subset of the worker's: owner, lease, `attempt + 1`
    /// and a new fence each. Concurrent claimers never get the same job. An
    /// empty answer means nothing was claimable (within the bound on what
    /// one Redis claim looks at, [contract §9](crate::contract)).
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad queue, worker, capability or ttl, a limit outside 1 to
    ///   [`MAX_CLAIM`](crate::limits::MAX_CLAIM), or a request with a
    ///   [rate limit](ClaimRequest::rate_limit) (field `rate_limit`: use
    ///   [`claim_limited`](JobQueue::claim_limited), which says how long the
    ///   limit holds jobs back);
    /// * the [store errors](LeaseStore#store-errors). A job that cannot be
    ///   decoded is no error: it is passed over, left as it is and logged.
    ///
    /// # Cancellation
    ///
    /// A dropped claim may have claimed jobs whose claims were in the lost
    /// answer, and there is no way to ask for them again. Nobody renews
    /// them: each stays claimed until its lease ends plus the reaper's
    /// grace, then [`reap`](JobQueue::reap) requeues it (or dead-letters it,
    /// [`DeadReason::LeaseExpired`], on its last attempt); the attempt is
    /// spent. A retry is a new claim, of other jobs.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>>;

    /// [`claim`](JobQueue::claim) within the request's
    /// [rate limit](ClaimRequest::rate_limit), if it has one: each job
    /// claimed uses one permit ([`crate::rate`]), so at most as many jobs
    /// as permits are left are claimed, in the same atomic step as the
    /// judgement. [`Claimed::retry_after`] says when the next permit frees
    /// when the limit held back a claimable job; a claim that finds nothing
    /// claimable uses no permit. Without a rate limit it claims as `claim`
    /// does.
    ///
    /// # Errors
    ///
    /// As [`claim`](JobQueue::claim), with a rate limit accepted:
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) (field
    /// `rate_limit`) for a key that is no name, permits outside 1 to
    /// [`MAX_RATE_PERMITS`](crate::limits::MAX_RATE_PERMITS), or a period
    /// outside [`MIN_RATE_PERIOD`](crate::limits::MIN_RATE_PERIOD) to
    /// [`MAX_RATE_PERIOD`](crate::limits::MAX_RATE_PERIOD) or not whole
    /// milliseconds; [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when
    /// the limit's stored log cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// As [`claim`](JobQueue::claim); the permits of the lost claims are
    /// used.
    async fn claim_limited(&self, request: &ClaimRequest) -> Result<Claimed>;

    /// Extends a claimed job's lease to `now + ttl` while the claim holds it
    /// (`Claimed`, same owner and fence); otherwise answers
    /// [`JobRenewal::Lost`] with the [`JobLoss`], changing nothing.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim (id, owner, fence 0) or ttl;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the job
    ///   cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// As for [`LeaseStore::renew`]: a dropped renewal may still be applied,
    /// only while the claim holds the job, and a retry with the same claim
    /// is safe.
    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal>;

    /// [`renew_job`](JobQueue::renew_job), recording `progress` on the job
    /// in the same fenced write: a `Renewed` answer means both happened, a
    /// `Lost` one that neither did. Readers see it as [`Job::progress`]
    /// until the next report. Any JSON value but `null`, at most
    /// [`MAX_PROGRESS_BYTES`](crate::limits::MAX_PROGRESS_BYTES).
    ///
    /// # Errors
    ///
    /// As [`renew_job`](JobQueue::renew_job)'s, and
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// `null` or oversized progress; nothing changed.
    ///
    /// # Cancellation
    ///
    /// As for [`renew_job`](JobQueue::renew_job).
    async fn renew_job_with_progress(
        &self,
        claim: &JobClaim,
        ttl: Duration,
        progress: &serde_json::Value,
    ) -> Result<JobRenewal>;

    /// Renews many job claims in one call, each fenced by its own claim: the
    /// batched [`renew_job`](JobQueue::renew_job), for workers that hold
    /// jobs claimed in batches. Every backend of this workspace but etcd
    /// answers it in one round trip and one atomic step; etcd keeps this
    /// default.
    ///
    /// Answers one [`JobRenewal`] per claim, in the order given, each what
    /// `renew_job` would have answered for that claim alone: a claim that
    /// still holds its job is renewed to `now + ttl` (one `now` for the
    /// batch), one that does not is [`JobRenewal::Lost`] with its
    /// [`JobLoss`] and its job unchanged, and the others are still renewed.
    /// Each job may appear once per call, as in
    /// [`complete_many`](JobQueue::complete_many).
    ///
    /// The default renews the claims one by one, for backends without a
    /// batched path.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim (id, owner, fence 0) or ttl, a job named twice, or more
    ///   than [`MAX_BATCH`](crate::limits::MAX_BATCH) claims;
    ///   nothing changed;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when one of
    ///   the jobs cannot be decoded: the outcome of every claim is then
    ///   unknown.
    ///
    /// # Cancellation
    ///
    /// As for `renew_job`, for each claim: a dropped batch may have renewed
    /// some or all of the claims that held their jobs, never another, and
    /// retrying the same claims is safe.
    async fn renew_jobs(&self, claims: &[JobClaim], ttl: Duration) -> Result<Vec<JobRenewal>> {
        crate::backend::validate::job_claims(claims)?;
        crate::backend::validate::ttl(ttl)?;
        let mut renewed = Vec::with_capacity(claims.len());
        for claim in claims {
            renewed.push(self.renew_job(claim, ttl).await?);
        }
        Ok(renewed)
    }

    /// Marks the job completed (fenced by the claim); a claim that no longer
    /// holds it is answered [`JobSettle::Rejected`], nothing changed.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the job
    ///   cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A dropped write may or may not have completed the job. Retrying with
    /// the same claim is safe: when the first one landed it answers
    /// `Rejected(Finished(Completed))`.
    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle>;

    /// Completes many jobs in one call, each fenced by its own claim: the
    /// batched [`complete`](JobQueue::complete), for workers that claim
    /// jobs in batches. Every backend of this workspace answers it in one
    /// round trip and one atomic step.
    ///
    /// Answers one [`JobSettle`] per claim, in the order given, each what
    /// `complete` would have answered for that claim alone; a claim that no
    /// longer holds its job is `Rejected` and the others still complete.
    /// Each job may appear once per call.
    ///
    /// The default completes the claims one by one, for backends without a
    /// batched path.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim, a job named twice, or more than
    ///   [`MAX_BATCH`](crate::limits::MAX_BATCH) claims; nothing
    ///   changed;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when one of
    ///   the jobs cannot be decoded: the outcome of every claim is then
    ///   unknown.
    ///
    /// # Cancellation
    ///
    /// As for `complete`, for each claim: retrying the same claims is safe,
    /// and those that landed answer `Rejected(Finished(Completed))`.
    async fn complete_many(&self, claims: &[JobClaim]) -> Result<Vec<JobSettle>> {
        crate::backend::validate::job_claims(claims)?;
        let mut settled = Vec::with_capacity(claims.len());
        for claim in claims {
            settled.push(self.complete(claim).await?);
        }
        Ok(settled)
    }

    /// Records a failed attempt: back to the queue after `backoff` when
    /// attempts are left and the action is `Retry`, else dead-lettered
    /// (fenced by the claim; a claim that no longer holds the job is
    /// answered [`JobSettle::Rejected`], nothing changed).
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim, an error text over
    ///   [`MAX_TEXT_BYTES`](crate::limits::MAX_TEXT_BYTES) or holding a
    ///   NUL, or a backoff over [`MAX_TTL`](crate::limits::MAX_TTL);
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the job
    ///   cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A dropped write may or may not have been applied. Retrying with the
    /// same claim is safe and never records the attempt twice: once the first
    /// one landed the claim no longer holds the job, so the retry is
    /// rejected (`Requeued`, `Finished(DeadLettered)`, or whoever claimed it
    /// since).
    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle>;

    /// The worker cannot run the job: un-claim it, refund the attempt, add
    /// `missing` to its required capabilities, visible again at once
    /// (fenced by the claim; a claim that no longer holds the job is
    /// answered [`JobSettle::Rejected`], nothing changed).
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim, or bad or too many capabilities in `missing`;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the job
    ///   cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A dropped deferral may or may not have been applied. Retrying with
    /// the same claim is safe and refunds at most once: once the first one
    /// landed the retry is rejected (`Requeued`, or whoever claimed it
    /// since).
    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle>;

    /// Jobs whose lease expired beyond `grace`: requeued when attempts are
    /// left, else dead-lettered with [`DeadReason::LeaseExpired`]. Handles at
    /// most [`MAX_REAP`](crate::limits::MAX_REAP) jobs per call, oldest expiry first.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   grace over [`MAX_GRACE`](crate::limits::MAX_GRACE);
    /// * the [store errors](LeaseStore#store-errors). A job that cannot be
    ///   decoded is no error: it is passed over, left as it is and logged.
    ///
    /// # Cancellation
    ///
    /// A dropped reap handled all of its jobs or none, and its report is
    /// lost. Retrying is safe: it handles what is still due.
    async fn reap(&self, grace: Duration) -> Result<ReapReport>;

    /// A live copy takes back a job the reaper dead-lettered (a false "dead"
    /// after an outage longer than the lease): only when the job is still
    /// dead-lettered by the reaper, nobody claimed it since (same fence), and
    /// no operator retried it. Answers a new claim with a new fence, and
    /// leaves a durable trace on the job: [`Job::taken_back`] counts up and
    /// [`Job::taken_back_at`] becomes now, as every later read shows.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    ///   bad claim or ttl;
    /// * the [store errors](LeaseStore#store-errors), `Corrupt` when the job
    ///   or the fence counter cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A dropped take-back may have won the job, and its new fence was in the
    /// lost answer. A retry then answers `NotTaken(NotDeadLettered(Claimed))`;
    /// [`get_job`](JobQueue::get_job) shows the job claimed by this worker,
    /// and its [`claim`](Job::claim) is the new one. Left alone, nobody
    /// renews it and the reaper deals with it again when its lease ends.
    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack>;

    /// The job with this id, if any.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// invalid id; the [store errors](LeaseStore#store-errors), `Corrupt`
    /// when the job cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn get_job(&self, id: &str) -> Result<Option<Job>>;

    /// Dead-lettered jobs of a queue, oldest update first, at most `limit`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// invalid queue or a limit outside 1 to
    /// [`MAX_LIST_LIMIT`](crate::limits::MAX_LIST_LIMIT); the
    /// [store errors](LeaseStore#store-errors). A dead letter that cannot be
    /// decoded makes SQLite and Redis answer `Corrupt`; PostgreSQL leaves it
    /// out with a warning.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>>;

    /// A queue's jobs, in `state` or in any state, oldest first (by
    /// creation, then id), at most `limit`: the operator's view of a queue
    /// ([contract §9](crate::contract)). A read meant for people and
    /// tools, not for workers' hot paths: its cost grows with the queue's
    /// jobs (on Redis, with every claimed and finished job of the
    /// namespace too).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad
    /// queue name or a limit of 0 or over
    /// [`MAX_LIST_LIMIT`](crate::limits::MAX_LIST_LIMIT); the
    /// [store errors](LeaseStore#store-errors), with undecodable jobs
    /// treated as `list_dead_letters` treats them on that backend.
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn list_jobs(
        &self,
        queue: &str,
        state: Option<JobState>,
        limit: usize,
    ) -> Result<Vec<Job>>;

    /// Every queue holding at least one job, with its jobs counted by
    /// state, ordered by queue name (byte order); an empty store answers
    /// an empty list ([contract §9](crate::contract)). The operator's
    /// overview (`tenure queues`), not a worker's read: it reads every job
    /// (a whole-table scan on the SQL stores), and on Redis `SCAN`s the
    /// server's whole keyspace, a page of 1000 keys per script call, so
    /// its cost grows with every key of the database, not only this
    /// namespace's.
    ///
    /// Memory, SQLite, the file store, etcd and PostgreSQL count in one
    /// snapshot. Redis walks page by page, so a job that changes state
    /// during the walk is counted in its old state or its new one, one
    /// enqueued or purged meanwhile may or may not be counted, and a
    /// failover during the walk may leave keys out; a quiet queue is
    /// counted exactly. A job is counted by its stored queue and state:
    /// etcd and the file store leave out a job they cannot decode, the
    /// others count it unless its state itself is no state's name (then it
    /// is left out); whatever is left out is logged as a warning.
    ///
    /// # Errors
    ///
    /// The [store errors](LeaseStore#store-errors).
    ///
    /// # Cancellation
    ///
    /// A read: dropping it changes nothing.
    async fn count_jobs(&self) -> Result<Vec<QueueCounts>>;

    /// An operator's retry of a dead letter: back to the queue with its
    /// attempts reset, visible at once. A job that is not dead-lettered is
    /// answered [`OperatorRetry::NotDeadLettered`], nothing changed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// invalid id; the [store errors](LeaseStore#store-errors), `Corrupt`
    /// when the job cannot be decoded.
    ///
    /// # Cancellation
    ///
    /// A dropped retry may or may not have requeued the job. Retrying is
    /// safe: when the first one landed it answers `NotDeadLettered` with the
    /// job's new state.
    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry>;

    /// Retention ([contract §9](crate::contract)): deletes the finished jobs
    /// (completed or dead-lettered) that finished at least
    /// `finished_older_than` ago, with every index entry the store keeps for
    /// them; answers how many.
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
    /// retention over [`MAX_RETENTION`](crate::limits::MAX_RETENTION)
    /// (nothing is deleted); otherwise the
    /// [store errors](LeaseStore#store-errors). A backend that deletes in
    /// batches (Redis, 1000 jobs per script) may have deleted some batches
    /// before an error.
    ///
    /// # Cancellation
    ///
    /// A dropped purge may have deleted all, none or some batches of what
    /// it would have, whole jobs only. Retrying is safe: it deletes what is
    /// left and counts only that.
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
            async fn enqueue_unique(&self, job: &NewJob) -> Result<Enqueued> {
                (**self).enqueue_unique(job).await
            }
            async fn enqueue_unique_batch(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
                (**self).enqueue_unique_batch(jobs).await
            }
            async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
                (**self).claim(request).await
            }
            async fn claim_limited(&self, request: &ClaimRequest) -> Result<Claimed> {
                (**self).claim_limited(request).await
            }
            async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
                (**self).renew_job(claim, ttl).await
            }
            async fn renew_job_with_progress(
                &self,
                claim: &JobClaim,
                ttl: Duration,
                progress: &serde_json::Value,
            ) -> Result<JobRenewal> {
                (**self).renew_job_with_progress(claim, ttl, progress).await
            }
            async fn renew_jobs(&self, claims: &[JobClaim], ttl: Duration) -> Result<Vec<JobRenewal>> {
                (**self).renew_jobs(claims, ttl).await
            }
            async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
                (**self).complete(claim).await
            }
            async fn complete_many(&self, claims: &[JobClaim]) -> Result<Vec<JobSettle>> {
                (**self).complete_many(claims).await
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
            async fn list_jobs(&self, queue: &str, state: Option<JobState>, limit: usize) -> Result<Vec<Job>> {
                (**self).list_jobs(queue, state, limit).await
            }
            async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
                (**self).count_jobs().await
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
