//! What a backend implements: the store operations over [`Checked`] input,
//! and the one validating front that turns them into the user traits.
//!
//! A backend implements [`LeaseBackend`], [`QueueBackend`] and
//! [`GateBackend`], then writes [`serve_backend!`](crate::serve_backend)
//! for its store type. The macro implements [`LeaseStore`](crate::LeaseStore),
//! [`JobQueue`](crate::JobQueue) and [`FenceStore`](crate::FenceStore) by
//! calling the functions of this module, each of which runs the
//! operation's input checks (contract §11) and then the backend's method
//! within the backend's [time limit](Backend::time_limit). The checks and
//! the time limit live here once; through the user traits a backend's
//! methods are reached only with input that passed them, because only a
//! check builds a [`Checked`] value (see [`checked`](super::checked) for
//! what the type does not record).
//!
//! The user traits stay implementable by hand for wrappers (layers, test
//! stores): a wrapper hands each call on to a store that checks it, or
//! checks it itself with [`super::validate`].

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

#[doc(hidden)]
pub use async_trait::async_trait;
#[doc(hidden)]
pub use serde_json;

use super::checked::Checked;
use super::validate;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::fence::FenceCheck;
use crate::outcome::{Admission, ExpiredScan, Renewal, Takeover, Transition};
use crate::queue::{
    ClaimRequest, Claimed, ClaimedJob, Enqueued, FailAction, Job, JobClaim, JobRenewal, JobSettle,
    JobState, NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack,
};
use crate::record::{Claim, LeaseRecord};
use crate::release::{Freed, ReleaseBoard};
use crate::request::{AdmitRequest, ExpiredQuery, StatusChange, TakeoverRequest};

/// What every backend says about itself to the validating front.
pub trait Backend: Send + Sync {
    /// The backend's name in messages (`"PostgreSQL"`, `"Redis"`).
    const NAME: &'static str;

    /// The store's kind as OpenTelemetry's `db.system.name` names it
    /// (`"postgresql"`, `"redis"`): what [`system_name`](Self::system_name)
    /// answers unless the server connected to says more.
    const SYSTEM: &'static str;

    /// What [`LeaseStore::system_name`](crate::LeaseStore::system_name)
    /// answers: [`SYSTEM`](Self::SYSTEM) by default; a backend serving
    /// several kinds of server names the one it connected to (the MySQL
    /// store answers `"mariadb"` on MariaDB).
    fn system_name(&self) -> &'static str {
        Self::SYSTEM
    }

    /// The limit on one whole operation, if the backend has one: past it the
    /// front drops the call and answers
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) (outcome unknown).
    /// None by default.
    fn time_limit(&self) -> Option<Duration> {
        None
    }

    /// Where the front announces the releases made through this store (and
    /// its clones), when the store has no notices of its own that reach
    /// every process: the front reads what each admission, transition and
    /// takeover answered, and [`LeaseBackend::releases`] subscribes here by
    /// default. `None` by default: no notices.
    fn releases_in_process(&self) -> Option<&ReleaseBoard> {
        None
    }
}

/// The lease operations of [`LeaseStore`](crate::LeaseStore) over checked
/// input; each method does what the user trait's method of the same name
/// documents, input checks excepted.
///
/// # Errors
///
/// Every method answers the [store errors](crate::LeaseStore#store-errors);
/// what each may answer besides is in the user trait's documentation.
#[async_trait]
pub trait LeaseBackend: Backend {
    /// [`LeaseStore::admit`](crate::LeaseStore::admit); `metadata` is the
    /// request's metadata object.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission>;

    /// [`LeaseStore::renew`](crate::LeaseStore::renew).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal>;

    /// [`LeaseStore::renew_with_progress`](crate::LeaseStore::renew_with_progress).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal>;

    /// [`LeaseStore::renew_many`](crate::LeaseStore::renew_many). The
    /// default renews one by one; override it with one round trip.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        let mut outcomes = Vec::with_capacity(claims.len());
        for claim in claims.each() {
            outcomes.push(self.renew(claim, ttl).await?);
        }
        Ok(outcomes)
    }

    /// [`LeaseStore::transition`](crate::LeaseStore::transition).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition>;

    /// [`LeaseStore::claim_for_takeover`](crate::LeaseStore::claim_for_takeover).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover>;

    /// [`LeaseStore::list_expired`](crate::LeaseStore::list_expired).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan>;

    /// [`LeaseStore::get`](crate::LeaseStore::get).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>>;

    /// [`LeaseStore::list_by_scope`](crate::LeaseStore::list_by_scope).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>>;

    /// [`LeaseStore::list_active`](crate::LeaseStore::list_active).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn list_active(&self) -> Result<Vec<LeaseRecord>>;

    /// [`LeaseStore::now`](crate::LeaseStore::now).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn now(&self) -> Result<Timestamp>;

    /// [`LeaseStore::purge`](crate::LeaseStore::purge).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64>;

    /// [`LeaseStore::count_purgeable`](crate::LeaseStore::count_purgeable).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64>;

    /// [`LeaseStore::releases`](crate::LeaseStore::releases); by default
    /// a receiver of [`Backend::releases_in_process`], if any.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn releases(&self) -> Result<Option<crate::release::Releases>> {
        Ok(self.releases_in_process().map(ReleaseBoard::subscribe))
    }
}

/// The job operations of [`JobQueue`](crate::JobQueue) over checked input;
/// each method does what the user trait's method of the same name
/// documents, input checks excepted.
///
/// # Errors
///
/// Every method answers the [store errors](crate::LeaseStore#store-errors);
/// what each may answer besides is in the user trait's documentation.
#[async_trait]
pub trait QueueBackend: LeaseBackend {
    /// [`JobQueue::enqueue_unique`](crate::JobQueue::enqueue_unique), which
    /// [`JobQueue::enqueue`](crate::JobQueue::enqueue) is too for a job
    /// without a key. The default enqueues a batch of one.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn enqueue(&self, job: Checked<&NewJob>) -> Result<Enqueued> {
        let batch = Checked::new(std::slice::from_ref(job.get()));
        self.enqueue_batch(batch)
            .await?
            .pop()
            .ok_or_else(|| Error::unavailable(format!("enqueue of {:?} answered no job", job.id)))
    }

    /// [`JobQueue::enqueue_unique_batch`](crate::JobQueue::enqueue_unique_batch),
    /// which [`JobQueue::enqueue_batch`](crate::JobQueue::enqueue_batch) is
    /// too for jobs without keys.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>>;

    /// [`JobQueue::claim_limited`](crate::JobQueue::claim_limited), which
    /// [`JobQueue::claim`](crate::JobQueue::claim) is too for requests
    /// without a rate limit.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed>;

    /// [`JobQueue::renew_job`](crate::JobQueue::renew_job).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal>;

    /// [`JobQueue::renew_job_with_progress`](crate::JobQueue::renew_job_with_progress).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn renew_job_with_progress(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<JobRenewal>;

    /// [`JobQueue::renew_jobs`](crate::JobQueue::renew_jobs). The default
    /// renews one by one.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn renew_jobs(
        &self,
        claims: Checked<&[JobClaim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<JobRenewal>> {
        let mut renewed = Vec::with_capacity(claims.len());
        for claim in claims.each() {
            renewed.push(self.renew_job(claim, ttl).await?);
        }
        Ok(renewed)
    }

    /// [`JobQueue::complete`](crate::JobQueue::complete).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle>;

    /// [`JobQueue::complete_many`](crate::JobQueue::complete_many). The
    /// default completes one by one.
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn complete_many(&self, claims: Checked<&[JobClaim]>) -> Result<Vec<JobSettle>> {
        let mut settled = Vec::with_capacity(claims.len());
        for claim in claims.each() {
            settled.push(self.complete(claim).await?);
        }
        Ok(settled)
    }

    /// [`JobQueue::fail`](crate::JobQueue::fail).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle>;

    /// [`JobQueue::defer`](crate::JobQueue::defer).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle>;

    /// [`JobQueue::reap`](crate::JobQueue::reap).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport>;

    /// [`JobQueue::take_back`](crate::JobQueue::take_back).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack>;

    /// [`JobQueue::get_job`](crate::JobQueue::get_job).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>>;

    /// [`JobQueue::list_dead_letters`](crate::JobQueue::list_dead_letters).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>>;

    /// [`JobQueue::list_jobs`](crate::JobQueue::list_jobs).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn list_jobs(
        &self,
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>>;

    /// [`JobQueue::count_jobs`](crate::JobQueue::count_jobs).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn count_jobs(&self) -> Result<Vec<QueueCounts>>;

    /// [`JobQueue::retry_dead_letter`](crate::JobQueue::retry_dead_letter).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry>;

    /// [`JobQueue::purge_jobs`](crate::JobQueue::purge_jobs).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64>;
}

/// The gate operations of [`FenceStore`](crate::FenceStore) over checked
/// input; each method does what the user trait's method of the same name
/// documents, input checks excepted.
///
/// # Errors
///
/// Every method answers the [store errors](crate::LeaseStore#store-errors);
/// what each may answer besides is in the user trait's documentation.
#[async_trait]
pub trait GateBackend: Backend {
    /// [`FenceStore::check_fence`](crate::FenceStore::check_fence).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn check_fence(&self, resource: Checked<&str>, fence: Checked<u64>)
        -> Result<FenceCheck>;

    /// [`FenceStore::highest_fence`](crate::FenceStore::highest_fence).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>>;

    /// [`FenceStore::purge_fences`](crate::FenceStore::purge_fences).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64>;

    /// [`FenceStore::list_fences`](crate::FenceStore::list_fences).
    ///
    /// # Errors
    ///
    /// As the user trait's.
    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<crate::GateRecord>>;
}

/// Runs one backend operation, `operation` naming it, within the backend's
/// time limit.
async fn within<B: Backend + ?Sized, T>(
    backend: &B,
    operation: &str,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    match backend.time_limit() {
        Some(limit) => {
            let what = format!("{operation} on {}", B::NAME);
            crate::layer::bounded(limit, &what, work).await
        }
        None => work.await,
    }
}

/// The validating front: one function per user-trait method, called by the
/// implementations [`serve_backend!`](crate::serve_backend) writes. Each
/// checks the operation's input (contract §11), answering
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the
/// field with nothing touched, then runs the backend's method within its
/// time limit.
///
/// # Errors
///
/// Every function answers `InvalidInput` for bad input, else the backend's
/// own answer, or [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) past
/// the backend's time limit.
pub mod front {
    use super::*;

    /// Checks and runs [`LeaseBackend::admit`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn admit<B: LeaseBackend>(backend: &B, request: &AdmitRequest) -> Result<Admission> {
        let metadata = validate::admit(request)?;
        let answer = within(
            backend,
            "admit",
            backend.admit(Checked::new(request), Checked::new(metadata)),
        )
        .await;
        announce(backend, answer.as_ref().map(Freed::Admission));
        answer
    }

    /// Checks and runs [`LeaseBackend::renew`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn renew<B: LeaseBackend>(
        backend: &B,
        claim: &Claim,
        ttl: Duration,
    ) -> Result<Renewal> {
        validate::claim(claim)?;
        validate::ttl(ttl)?;
        within(
            backend,
            "renew",
            backend.renew(Checked::new(claim), Checked::new(ttl)),
        )
        .await
    }

    /// Checks and runs [`LeaseBackend::renew_with_progress`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn renew_with_progress<B: LeaseBackend>(
        backend: &B,
        claim: &Claim,
        ttl: Duration,
        progress: &serde_json::Value,
    ) -> Result<Renewal> {
        validate::claim(claim)?;
        validate::ttl(ttl)?;
        validate::progress(progress)?;
        within(
            backend,
            "renew_with_progress",
            backend.renew_with_progress(
                Checked::new(claim),
                Checked::new(ttl),
                Checked::new(progress),
            ),
        )
        .await
    }

    /// Checks and runs [`LeaseBackend::renew_many`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn renew_many<B: LeaseBackend>(
        backend: &B,
        claims: &[Claim],
        ttl: Duration,
    ) -> Result<Vec<Renewal>> {
        validate::claims(claims)?;
        validate::ttl(ttl)?;
        within(
            backend,
            "renew_many",
            backend.renew_many(Checked::new(claims), Checked::new(ttl)),
        )
        .await
    }

    /// Checks and runs [`LeaseBackend::transition`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn transition<B: LeaseBackend>(
        backend: &B,
        claim: &Claim,
        change: &StatusChange,
    ) -> Result<Transition> {
        validate::claim(claim)?;
        validate::status_change(change)?;
        let answer = within(
            backend,
            "transition",
            backend.transition(Checked::new(claim), Checked::new(change)),
        )
        .await;
        announce(backend, answer.as_ref().map(Freed::Transition));
        answer
    }

    /// Checks and runs [`LeaseBackend::claim_for_takeover`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn claim_for_takeover<B: LeaseBackend>(
        backend: &B,
        request: &TakeoverRequest,
    ) -> Result<Takeover> {
        validate::takeover(request)?;
        let answer = within(
            backend,
            "claim_for_takeover",
            backend.claim_for_takeover(Checked::new(request)),
        )
        .await;
        announce(backend, answer.as_ref().map(Freed::Takeover));
        answer
    }

    /// Announces on the backend's in-process board what a write's answer
    /// freed, or, when its outcome is unknown (it may have freed scopes),
    /// that notices may have been missed.
    fn announce<B: Backend>(backend: &B, answer: std::result::Result<Freed<'_>, &Error>) {
        let Some(board) = backend.releases_in_process() else {
            return;
        };
        match answer {
            Ok(freed) => board.announce(freed),
            Err(error) if error.is_outcome_unknown() => board.missed(),
            Err(_) => {}
        }
    }

    /// Checks and runs [`LeaseBackend::list_expired`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn list_expired<B: LeaseBackend>(
        backend: &B,
        query: &ExpiredQuery,
    ) -> Result<ExpiredScan> {
        validate::expired_query(query)?;
        within(
            backend,
            "list_expired",
            backend.list_expired(Checked::new(query)),
        )
        .await
    }

    /// Checks and runs [`LeaseBackend::get`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn get<B: LeaseBackend>(backend: &B, id: &str) -> Result<Option<LeaseRecord>> {
        validate::lease_id(id)?;
        within(backend, "get", backend.get(Checked::new(id))).await
    }

    /// Checks and runs [`LeaseBackend::list_by_scope`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn list_by_scope<B: LeaseBackend>(
        backend: &B,
        scope: &str,
    ) -> Result<Vec<LeaseRecord>> {
        validate::scope(scope)?;
        within(
            backend,
            "list_by_scope",
            backend.list_by_scope(Checked::new(scope)),
        )
        .await
    }

    /// Runs [`LeaseBackend::list_active`] (it takes no input).
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn list_active<B: LeaseBackend>(backend: &B) -> Result<Vec<LeaseRecord>> {
        within(backend, "list_active", backend.list_active()).await
    }

    /// Runs [`LeaseBackend::now`] (it takes no input).
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn now<B: LeaseBackend>(backend: &B) -> Result<Timestamp> {
        within(backend, "now", backend.now()).await
    }

    /// Checks and runs [`LeaseBackend::purge`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn purge<B: LeaseBackend>(backend: &B, terminal_older_than: Duration) -> Result<u64> {
        validate::retention(terminal_older_than)?;
        within(
            backend,
            "purge",
            backend.purge(Checked::new(terminal_older_than)),
        )
        .await
    }

    /// Checks and runs [`LeaseBackend::count_purgeable`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn count_purgeable<B: LeaseBackend>(
        backend: &B,
        terminal_older_than: Duration,
    ) -> Result<u64> {
        validate::retention(terminal_older_than)?;
        within(
            backend,
            "count_purgeable",
            backend.count_purgeable(Checked::new(terminal_older_than)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::enqueue`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn enqueue<B: QueueBackend>(backend: &B, job: &NewJob) -> Result<Job> {
        validate::new_job(job)?;
        within(backend, "enqueue", backend.enqueue(Checked::new(job)))
            .await
            .and_then(created)
    }

    /// Checks and runs [`QueueBackend::enqueue_batch`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn enqueue_batch<B: QueueBackend>(backend: &B, jobs: &[NewJob]) -> Result<Vec<Job>> {
        validate::new_jobs(jobs)?;
        within(
            backend,
            "enqueue_batch",
            backend.enqueue_batch(Checked::new(jobs)),
        )
        .await?
        .into_iter()
        .map(created)
        .collect()
    }

    /// Checks and runs [`QueueBackend::enqueue`] for a job that may have a
    /// uniqueness key.
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn enqueue_unique<B: QueueBackend>(backend: &B, job: &NewJob) -> Result<Enqueued> {
        validate::new_unique_job(job)?;
        within(
            backend,
            "enqueue_unique",
            backend.enqueue(Checked::new(job)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::enqueue_batch`] for jobs that may
    /// have uniqueness keys.
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn enqueue_unique_batch<B: QueueBackend>(
        backend: &B,
        jobs: &[NewJob],
    ) -> Result<Vec<Enqueued>> {
        validate::new_unique_jobs(jobs)?;
        within(
            backend,
            "enqueue_unique_batch",
            backend.enqueue_batch(Checked::new(jobs)),
        )
        .await
    }

    /// The job a plain enqueue created: a job without a key is never a
    /// duplicate, so a store answering one is broken.
    fn created(answer: Enqueued) -> Result<Job> {
        match answer {
            Enqueued::Created(job) => Ok(job),
            Enqueued::Duplicate(holder) => Err(Error::corrupt(format!(
                "the store answered a job without a uniqueness key as a duplicate of {:?}",
                holder.id
            ))),
        }
    }

    /// Checks and runs [`QueueBackend::claim`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn claim<B: QueueBackend>(
        backend: &B,
        request: &ClaimRequest,
    ) -> Result<Vec<ClaimedJob>> {
        validate::unlimited_claim_request(request)?;
        let claimed = within(backend, "claim", backend.claim(Checked::new(request))).await?;
        Ok(claimed.jobs)
    }

    /// Checks and runs [`QueueBackend::claim`] for
    /// [`JobQueue::claim_limited`](crate::JobQueue::claim_limited).
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn claim_limited<B: QueueBackend>(
        backend: &B,
        request: &ClaimRequest,
    ) -> Result<Claimed> {
        validate::claim_request(request)?;
        within(
            backend,
            "claim_limited",
            backend.claim(Checked::new(request)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::renew_job`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn renew_job<B: QueueBackend>(
        backend: &B,
        claim: &JobClaim,
        ttl: Duration,
    ) -> Result<JobRenewal> {
        validate::job_claim(claim)?;
        validate::ttl(ttl)?;
        within(
            backend,
            "renew_job",
            backend.renew_job(Checked::new(claim), Checked::new(ttl)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::renew_job_with_progress`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn renew_job_with_progress<B: QueueBackend>(
        backend: &B,
        claim: &JobClaim,
        ttl: Duration,
        progress: &serde_json::Value,
    ) -> Result<JobRenewal> {
        validate::job_claim(claim)?;
        validate::ttl(ttl)?;
        validate::progress(progress)?;
        within(
            backend,
            "renew_job_with_progress",
            backend.renew_job_with_progress(
                Checked::new(claim),
                Checked::new(ttl),
                Checked::new(progress),
            ),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::renew_jobs`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn renew_jobs<B: QueueBackend>(
        backend: &B,
        claims: &[JobClaim],
        ttl: Duration,
    ) -> Result<Vec<JobRenewal>> {
        validate::job_claims(claims)?;
        validate::ttl(ttl)?;
        within(
            backend,
            "renew_jobs",
            backend.renew_jobs(Checked::new(claims), Checked::new(ttl)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::complete`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn complete<B: QueueBackend>(backend: &B, claim: &JobClaim) -> Result<JobSettle> {
        validate::job_claim(claim)?;
        within(backend, "complete", backend.complete(Checked::new(claim))).await
    }

    /// Checks and runs [`QueueBackend::complete_many`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn complete_many<B: QueueBackend>(
        backend: &B,
        claims: &[JobClaim],
    ) -> Result<Vec<JobSettle>> {
        validate::job_claims(claims)?;
        within(
            backend,
            "complete_many",
            backend.complete_many(Checked::new(claims)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::fail`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn fail<B: QueueBackend>(
        backend: &B,
        claim: &JobClaim,
        error: &str,
        action: FailAction,
    ) -> Result<JobSettle> {
        validate::job_failure(claim, error, action)?;
        within(
            backend,
            "fail",
            backend.fail(
                Checked::new(claim),
                Checked::new(error),
                Checked::new(action),
            ),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::defer`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn defer<B: QueueBackend>(
        backend: &B,
        claim: &JobClaim,
        missing: &BTreeSet<String>,
    ) -> Result<JobSettle> {
        validate::job_claim(claim)?;
        validate::capabilities(missing)?;
        within(
            backend,
            "defer",
            backend.defer(Checked::new(claim), Checked::new(missing)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::reap`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn reap<B: QueueBackend>(backend: &B, grace: Duration) -> Result<ReapReport> {
        validate::grace(grace)?;
        within(backend, "reap", backend.reap(Checked::new(grace))).await
    }

    /// Checks and runs [`QueueBackend::take_back`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn take_back<B: QueueBackend>(
        backend: &B,
        claim: &JobClaim,
        ttl: Duration,
    ) -> Result<TakeBack> {
        validate::job_claim(claim)?;
        validate::ttl(ttl)?;
        within(
            backend,
            "take_back",
            backend.take_back(Checked::new(claim), Checked::new(ttl)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::get_job`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn get_job<B: QueueBackend>(backend: &B, id: &str) -> Result<Option<Job>> {
        validate::lease_id(id)?;
        within(backend, "get_job", backend.get_job(Checked::new(id))).await
    }

    /// Checks and runs [`QueueBackend::list_dead_letters`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn list_dead_letters<B: QueueBackend>(
        backend: &B,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<Job>> {
        validate::queue(queue)?;
        validate::limit(limit)?;
        within(
            backend,
            "list_dead_letters",
            backend.list_dead_letters(Checked::new(queue), Checked::new(limit)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::list_jobs`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn list_jobs<B: QueueBackend>(
        backend: &B,
        queue: &str,
        state: Option<JobState>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        validate::queue(queue)?;
        validate::limit(limit)?;
        within(
            backend,
            "list_jobs",
            backend.list_jobs(Checked::new(queue), state, Checked::new(limit)),
        )
        .await
    }

    /// Runs [`QueueBackend::count_jobs`] (it takes no input to check).
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn count_jobs<B: QueueBackend>(backend: &B) -> Result<Vec<QueueCounts>> {
        within(backend, "count_jobs", backend.count_jobs()).await
    }

    /// Checks and runs [`QueueBackend::retry_dead_letter`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn retry_dead_letter<B: QueueBackend>(
        backend: &B,
        id: &str,
    ) -> Result<OperatorRetry> {
        validate::lease_id(id)?;
        within(
            backend,
            "retry_dead_letter",
            backend.retry_dead_letter(Checked::new(id)),
        )
        .await
    }

    /// Checks and runs [`QueueBackend::purge_jobs`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn purge_jobs<B: QueueBackend>(
        backend: &B,
        finished_older_than: Duration,
    ) -> Result<u64> {
        validate::job_retention(finished_older_than)?;
        within(
            backend,
            "purge_jobs",
            backend.purge_jobs(Checked::new(finished_older_than)),
        )
        .await
    }

    /// Checks and runs [`GateBackend::check_fence`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn check_fence<B: GateBackend>(
        backend: &B,
        resource: &str,
        fence: u64,
    ) -> Result<FenceCheck> {
        let (resource, fence) = crate::backend::checked::fence_check(resource, fence)?;
        within(backend, "check_fence", backend.check_fence(resource, fence)).await
    }

    /// Checks and runs [`GateBackend::highest_fence`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn highest_fence<B: GateBackend>(backend: &B, resource: &str) -> Result<Option<u64>> {
        validate::resource(resource)?;
        within(
            backend,
            "highest_fence",
            backend.highest_fence(Checked::new(resource)),
        )
        .await
    }

    /// Checks and runs [`GateBackend::purge_fences`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn purge_fences<B: GateBackend>(backend: &B, unused_for: Duration) -> Result<u64> {
        validate::gate_retention(unused_for)?;
        within(
            backend,
            "purge_fences",
            backend.purge_fences(Checked::new(unused_for)),
        )
        .await
    }

    /// Checks and runs [`GateBackend::list_fences`].
    ///
    /// # Errors
    ///
    /// As the [module](self) says.
    pub async fn list_fences<B: GateBackend>(
        backend: &B,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<crate::GateRecord>> {
        if let Some(after) = after {
            validate::resource(after)?;
        }
        validate::limit(limit)?;
        within(
            backend,
            "list_fences",
            backend.list_fences(after.map(Checked::new), Checked::new(limit)),
        )
        .await
    }
}

/// Implements [`LeaseStore`](crate::LeaseStore) for a type that implements
/// [`LeaseBackend`](crate::backend::stores::LeaseBackend), every method
/// through the validating [`front`](crate::backend::stores::front).
#[macro_export]
macro_rules! serve_lease_store {
    ($store:ty) => {
        #[$crate::backend::stores::async_trait]
        impl $crate::LeaseStore for $store {
            async fn admit(
                &self,
                request: &$crate::AdmitRequest,
            ) -> $crate::Result<$crate::Admission> {
                $crate::backend::stores::front::admit(self, request).await
            }
            async fn renew(
                &self,
                claim: &$crate::Claim,
                ttl: ::std::time::Duration,
            ) -> $crate::Result<$crate::Renewal> {
                $crate::backend::stores::front::renew(self, claim, ttl).await
            }
            async fn renew_with_progress(
                &self,
                claim: &$crate::Claim,
                ttl: ::std::time::Duration,
                progress: &$crate::backend::stores::serde_json::Value,
            ) -> $crate::Result<$crate::Renewal> {
                $crate::backend::stores::front::renew_with_progress(self, claim, ttl, progress)
                    .await
            }
            async fn renew_many(
                &self,
                claims: &[$crate::Claim],
                ttl: ::std::time::Duration,
            ) -> $crate::Result<::std::vec::Vec<$crate::Renewal>> {
                $crate::backend::stores::front::renew_many(self, claims, ttl).await
            }
            async fn transition(
                &self,
                claim: &$crate::Claim,
                change: &$crate::StatusChange,
            ) -> $crate::Result<$crate::Transition> {
                $crate::backend::stores::front::transition(self, claim, change).await
            }
            async fn claim_for_takeover(
                &self,
                request: &$crate::TakeoverRequest,
            ) -> $crate::Result<$crate::Takeover> {
                $crate::backend::stores::front::claim_for_takeover(self, request).await
            }
            async fn list_expired(
                &self,
                query: &$crate::ExpiredQuery,
            ) -> $crate::Result<$crate::ExpiredScan> {
                $crate::backend::stores::front::list_expired(self, query).await
            }
            async fn get(
                &self,
                id: &str,
            ) -> $crate::Result<::std::option::Option<$crate::LeaseRecord>> {
                $crate::backend::stores::front::get(self, id).await
            }
            async fn list_by_scope(
                &self,
                scope: &str,
            ) -> $crate::Result<::std::vec::Vec<$crate::LeaseRecord>> {
                $crate::backend::stores::front::list_by_scope(self, scope).await
            }
            async fn list_active(&self) -> $crate::Result<::std::vec::Vec<$crate::LeaseRecord>> {
                $crate::backend::stores::front::list_active(self).await
            }
            async fn now(&self) -> $crate::Result<$crate::Timestamp> {
                $crate::backend::stores::front::now(self).await
            }
            async fn purge(
                &self,
                terminal_older_than: ::std::time::Duration,
            ) -> $crate::Result<u64> {
                $crate::backend::stores::front::purge(self, terminal_older_than).await
            }
            async fn count_purgeable(
                &self,
                terminal_older_than: ::std::time::Duration,
            ) -> $crate::Result<u64> {
                $crate::backend::stores::front::count_purgeable(self, terminal_older_than).await
            }
            async fn releases(
                &self,
            ) -> $crate::Result<::std::option::Option<$crate::release::Releases>> {
                $crate::backend::stores::LeaseBackend::releases(self).await
            }
            fn system_name(&self) -> &'static str {
                $crate::backend::stores::Backend::system_name(self)
            }
        }
    };
}

/// Implements [`JobQueue`](crate::JobQueue) for a type that implements
/// [`QueueBackend`](crate::backend::stores::QueueBackend), every method
/// through the validating [`front`](crate::backend::stores::front).
#[macro_export]
macro_rules! serve_job_queue {
    ($store:ty) => {
        #[$crate::backend::stores::async_trait]
        impl $crate::JobQueue for $store {
            async fn enqueue(
                &self,
                job: &$crate::queue::NewJob,
            ) -> $crate::Result<$crate::queue::Job> {
                $crate::backend::stores::front::enqueue(self, job).await
            }
            async fn enqueue_batch(
                &self,
                jobs: &[$crate::queue::NewJob],
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::Job>> {
                $crate::backend::stores::front::enqueue_batch(self, jobs).await
            }
            async fn enqueue_unique(
                &self,
                job: &$crate::queue::NewJob,
            ) -> $crate::Result<$crate::queue::Enqueued> {
                $crate::backend::stores::front::enqueue_unique(self, job).await
            }
            async fn enqueue_unique_batch(
                &self,
                jobs: &[$crate::queue::NewJob],
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::Enqueued>> {
                $crate::backend::stores::front::enqueue_unique_batch(self, jobs).await
            }
            async fn claim(
                &self,
                request: &$crate::queue::ClaimRequest,
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::ClaimedJob>> {
                $crate::backend::stores::front::claim(self, request).await
            }
            async fn claim_limited(
                &self,
                request: &$crate::queue::ClaimRequest,
            ) -> $crate::Result<$crate::queue::Claimed> {
                $crate::backend::stores::front::claim_limited(self, request).await
            }
            async fn renew_job(
                &self,
                claim: &$crate::queue::JobClaim,
                ttl: ::std::time::Duration,
            ) -> $crate::Result<$crate::queue::JobRenewal> {
                $crate::backend::stores::front::renew_job(self, claim, ttl).await
            }
            async fn renew_job_with_progress(
                &self,
                claim: &$crate::queue::JobClaim,
                ttl: ::std::time::Duration,
                progress: &$crate::backend::stores::serde_json::Value,
            ) -> $crate::Result<$crate::queue::JobRenewal> {
                $crate::backend::stores::front::renew_job_with_progress(self, claim, ttl, progress)
                    .await
            }
            async fn renew_jobs(
                &self,
                claims: &[$crate::queue::JobClaim],
                ttl: ::std::time::Duration,
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::JobRenewal>> {
                $crate::backend::stores::front::renew_jobs(self, claims, ttl).await
            }
            async fn complete(
                &self,
                claim: &$crate::queue::JobClaim,
            ) -> $crate::Result<$crate::queue::JobSettle> {
                $crate::backend::stores::front::complete(self, claim).await
            }
            async fn complete_many(
                &self,
                claims: &[$crate::queue::JobClaim],
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::JobSettle>> {
                $crate::backend::stores::front::complete_many(self, claims).await
            }
            async fn fail(
                &self,
                claim: &$crate::queue::JobClaim,
                error: &str,
                action: $crate::queue::FailAction,
            ) -> $crate::Result<$crate::queue::JobSettle> {
                $crate::backend::stores::front::fail(self, claim, error, action).await
            }
            async fn defer(
                &self,
                claim: &$crate::queue::JobClaim,
                missing: &::std::collections::BTreeSet<::std::string::String>,
            ) -> $crate::Result<$crate::queue::JobSettle> {
                $crate::backend::stores::front::defer(self, claim, missing).await
            }
            async fn reap(
                &self,
                grace: ::std::time::Duration,
            ) -> $crate::Result<$crate::queue::ReapReport> {
                $crate::backend::stores::front::reap(self, grace).await
            }
            async fn take_back(
                &self,
                claim: &$crate::queue::JobClaim,
                ttl: ::std::time::Duration,
            ) -> $crate::Result<$crate::queue::TakeBack> {
                $crate::backend::stores::front::take_back(self, claim, ttl).await
            }
            async fn get_job(
                &self,
                id: &str,
            ) -> $crate::Result<::std::option::Option<$crate::queue::Job>> {
                $crate::backend::stores::front::get_job(self, id).await
            }
            async fn list_dead_letters(
                &self,
                queue: &str,
                limit: usize,
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::Job>> {
                $crate::backend::stores::front::list_dead_letters(self, queue, limit).await
            }
            async fn list_jobs(
                &self,
                queue: &str,
                state: ::std::option::Option<$crate::queue::JobState>,
                limit: usize,
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::Job>> {
                $crate::backend::stores::front::list_jobs(self, queue, state, limit).await
            }
            async fn count_jobs(
                &self,
            ) -> $crate::Result<::std::vec::Vec<$crate::queue::QueueCounts>> {
                $crate::backend::stores::front::count_jobs(self).await
            }
            async fn retry_dead_letter(
                &self,
                id: &str,
            ) -> $crate::Result<$crate::queue::OperatorRetry> {
                $crate::backend::stores::front::retry_dead_letter(self, id).await
            }
            async fn purge_jobs(
                &self,
                finished_older_than: ::std::time::Duration,
            ) -> $crate::Result<u64> {
                $crate::backend::stores::front::purge_jobs(self, finished_older_than).await
            }
        }
    };
}

/// Implements [`FenceStore`](crate::FenceStore) for a type that implements
/// [`GateBackend`](crate::backend::stores::GateBackend), every method
/// through the validating [`front`](crate::backend::stores::front).
#[macro_export]
macro_rules! serve_fence_store {
    ($store:ty) => {
        #[$crate::backend::stores::async_trait]
        impl $crate::FenceStore for $store {
            async fn check_fence(
                &self,
                resource: &str,
                fence: u64,
            ) -> $crate::Result<$crate::FenceCheck> {
                $crate::backend::stores::front::check_fence(self, resource, fence).await
            }
            async fn highest_fence(
                &self,
                resource: &str,
            ) -> $crate::Result<::std::option::Option<u64>> {
                $crate::backend::stores::front::highest_fence(self, resource).await
            }
            async fn purge_fences(&self, unused_for: ::std::time::Duration) -> $crate::Result<u64> {
                $crate::backend::stores::front::purge_fences(self, unused_for).await
            }
            async fn list_fences(
                &self,
                after: ::std::option::Option<&str>,
                limit: usize,
            ) -> $crate::Result<::std::vec::Vec<$crate::GateRecord>> {
                $crate::backend::stores::front::list_fences(self, after, limit).await
            }
        }
    };
}

/// Implements [`LeaseStore`](crate::LeaseStore),
/// [`JobQueue`](crate::JobQueue) and [`FenceStore`](crate::FenceStore) for
/// a store type that implements the three [backend
/// traits](crate::backend::stores): [`serve_lease_store!`](crate::serve_lease_store),
/// [`serve_job_queue!`](crate::serve_job_queue) and
/// [`serve_fence_store!`](crate::serve_fence_store) together: write
/// `tenure_lease_core::serve_backend!(MyStore);` beside the store type.
#[macro_export]
macro_rules! serve_backend {
    ($store:ty) => {
        $crate::serve_lease_store!($store);
        $crate::serve_job_queue!($store);
        $crate::serve_fence_store!($store);
    };
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::error::ErrorKind;
    use crate::LeaseStore;

    /// A backend that counts the calls reaching it and never answers
    /// `admit` (a server that hangs).
    #[derive(Default)]
    struct Hanging {
        reached: AtomicUsize,
    }

    impl Backend for Hanging {
        const NAME: &'static str = "hanging";
        const SYSTEM: &'static str = "hanging";

        fn time_limit(&self) -> Option<Duration> {
            Some(Duration::from_secs(2))
        }
    }

    impl Hanging {
        fn reached<T>(&self) -> Result<T> {
            self.reached.fetch_add(1, Ordering::SeqCst);
            Err(Error::unavailable("the test backend answers nothing"))
        }
    }

    #[async_trait]
    impl LeaseBackend for Hanging {
        async fn admit(
            &self,
            _: Checked<&AdmitRequest>,
            _: Checked<&serde_json::Map<String, serde_json::Value>>,
        ) -> Result<Admission> {
            self.reached.fetch_add(1, Ordering::SeqCst);
            std::future::pending().await
        }
        async fn renew(&self, _: Checked<&Claim>, _: Checked<Duration>) -> Result<Renewal> {
            self.reached()
        }
        async fn renew_with_progress(
            &self,
            _: Checked<&Claim>,
            _: Checked<Duration>,
            _: Checked<&serde_json::Value>,
        ) -> Result<Renewal> {
            self.reached()
        }
        async fn transition(
            &self,
            _: Checked<&Claim>,
            _: Checked<&StatusChange>,
        ) -> Result<Transition> {
            self.reached()
        }
        async fn claim_for_takeover(&self, _: Checked<&TakeoverRequest>) -> Result<Takeover> {
            self.reached()
        }
        async fn list_expired(&self, _: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
            self.reached()
        }
        async fn get(&self, _: Checked<&str>) -> Result<Option<LeaseRecord>> {
            self.reached()
        }
        async fn list_by_scope(&self, _: Checked<&str>) -> Result<Vec<LeaseRecord>> {
            self.reached()
        }
        async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
            self.reached()
        }
        async fn now(&self) -> Result<Timestamp> {
            self.reached()
        }
        async fn purge(&self, _: Checked<Duration>) -> Result<u64> {
            self.reached()
        }
        async fn count_purgeable(&self, _: Checked<Duration>) -> Result<u64> {
            self.reached()
        }
    }

    crate::serve_lease_store!(Hanging);

    #[tokio::test]
    async fn bad_input_never_reaches_the_backend() {
        let backend = Hanging::default();
        let store: &dyn LeaseStore = &backend;
        let refused = [
            store.get("").await.map(drop),
            store.list_by_scope("a\0b").await.map(drop),
            store
                .renew(&Claim::new("run", "worker", 0), Duration::from_secs(1))
                .await
                .map(drop),
            store
                .renew_many(&[Claim::new("run", "worker", 1)], Duration::ZERO)
                .await
                .map(drop),
            store
                .admit(&AdmitRequest::new("", "worker"))
                .await
                .map(drop),
            store.purge(Duration::MAX).await.map(drop),
        ];
        for answer in refused {
            let error = answer.expect_err("bad input is refused");
            assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        }
        assert_eq!(backend.reached.load(Ordering::SeqCst), 0);

        let answer = store.get("run").await;
        assert_eq!(
            answer.map(drop).map_err(|error| error.kind()),
            Err(ErrorKind::Unavailable)
        );
        assert_eq!(backend.reached.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_front_bounds_each_operation_by_the_backends_time_limit() {
        let backend = Hanging::default();
        let error = LeaseStore::admit(&backend, &AdmitRequest::new("run", "worker"))
            .await
            .expect_err("a hanging admission is cut at the time limit");
        assert_eq!(error.kind(), ErrorKind::Timeout);
        assert!(error.to_string().contains("admit on hanging"), "{error}");
        assert_eq!(backend.reached.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_checked_batch_hands_out_each_claim_checked() {
        let claims = [Claim::new("a", "w", 1), Claim::new("b", "w", 2)];
        let batch = Checked::new(&claims[..]);
        let ids: Vec<&str> = batch.each().map(|claim| claim.get().id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
    }
}
