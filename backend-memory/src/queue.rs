//! The [`QueueBackend`] side of [`MemoryStore`].
//!
//! Jobs live beside the leases in the same state, under the same mutex, and
//! draw fences from the same counter, so a job claim and a lease admission
//! never share a fence and every operation is one critical section. The
//! writes are the shared [queue engine](tenure_lease_core::backend::queue_engine)'s,
//! over the state as its [`JobTransaction`]; this module only stores jobs
//! and finds the ones the engine asks for.
//!
//! `claim` is the hot path, so [`Jobs`] keeps the queued jobs of each queue
//! in claim order beside the map and `claim` walks that order instead of
//! scanning and sorting every job. The rarer operator and reaper paths
//! (`reap`, `list_dead_letters`) still scan.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::queue_engine::{self as engine, JobTransaction};
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::stores::QueueBackend;
use tenure_lease_core::queue::{
    ClaimRequest, Claimed, Enqueued, FailAction, Job, JobClaim, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack,
};
use tenure_lease_core::{Result, Timestamp};

use crate::{MemoryStore, State};

/// [`rules::claim_order`]'s key, owned.
type ClaimKey = (Reverse<i32>, Timestamp, Timestamp, String);

fn claim_key(job: &Job) -> ClaimKey {
    let (priority, run_at, created_at, id) = rules::claim_order(job);
    (priority, run_at, created_at, id.to_owned())
}

/// Every job by id, the queued ones of each queue in claim order, and the
/// jobs with each uniqueness key.
///
/// Jobs change only through [`Jobs::put`] and [`Jobs::purge`], which keep
/// the three in step.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    by_id: foldhash::HashMap<String, Job>,
    /// Queued jobs per queue, visible yet or not; a queue without queued
    /// jobs has no entry.
    queued: foldhash::HashMap<String, BTreeSet<ClaimKey>>,
    /// Ids of the jobs enqueued with each (queue, uniqueness key), until
    /// they are purged.
    keyed: foldhash::HashMap<(String, String), BTreeSet<String>>,
}

impl Jobs {
    fn get(&self, id: &str) -> Option<&Job> {
        self.by_id.get(id)
    }

    fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    fn all(&self) -> impl Iterator<Item = &Job> {
        self.by_id.values()
    }

    /// The queued jobs of `queue`, best first by [`rules::claim_order`],
    /// including those whose `run_at` has not come yet.
    fn queued_in_claim_order<'a>(&'a self, queue: &str) -> impl Iterator<Item = &'a Job> {
        self.queued
            .get(queue)
            .into_iter()
            .flatten()
            .filter_map(|(.., id)| self.by_id.get(id))
    }

    /// Stores `job`, replacing the job with its id if there is one.
    fn put(&mut self, job: Job) {
        if let Some(previous) = self.by_id.remove(&job.id) {
            if previous.state == JobState::Queued {
                self.unqueue(&previous);
            }
        }
        if job.state == JobState::Queued {
            self.queued
                .entry(job.queue.clone())
                .or_default()
                .insert(claim_key(&job));
        }
        if let Some(unique) = &job.unique {
            self.keyed
                .entry((job.queue.clone(), unique.key.clone()))
                .or_default()
                .insert(job.id.clone());
        }
        self.by_id.insert(job.id.clone(), job);
    }

    /// The jobs of `queue` enqueued with the uniqueness key `key`.
    fn with_unique_key(&self, queue: &str, key: &str) -> impl Iterator<Item = &Job> {
        self.keyed
            .get(&(queue.to_owned(), key.to_owned()))
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }

    /// Deletes every job `purgeable` says may go; answers how many.
    /// Finished jobs are in no queue index, so only the map and the
    /// uniqueness keys change.
    fn purge(&mut self, purgeable: impl Fn(&Job) -> bool) -> u64 {
        let before = self.by_id.len();
        let keyed = &mut self.keyed;
        self.by_id.retain(|_, job| {
            let purged = purgeable(job);
            if let (true, Some(unique)) = (purged, &job.unique) {
                let index = (job.queue.clone(), unique.key.clone());
                if let Some(ids) = keyed.get_mut(&index) {
                    ids.remove(&job.id);
                    if ids.is_empty() {
                        keyed.remove(&index);
                    }
                }
            }
            !purged
        });
        (before - self.by_id.len()) as u64
    }

    /// Entries kept: jobs, queues with an index of queued jobs, and
    /// uniqueness keys of stored jobs.
    pub(crate) fn footprint(&self) -> (usize, usize, usize) {
        (self.by_id.len(), self.queued.len(), self.keyed.len())
    }

    fn unqueue(&mut self, job: &Job) {
        if let Some(queued) = self.queued.get_mut(&job.queue) {
            queued.remove(&claim_key(job));
            if queued.is_empty() {
                self.queued.remove(&job.queue);
            }
        }
    }
}

impl JobTransaction for State {
    fn job_exists(&mut self, id: &str) -> Result<bool> {
        Ok(self.jobs.contains(id))
    }

    fn load_job(&mut self, id: &str) -> Result<Option<Job>> {
        Ok(self.jobs.get(id).cloned())
    }

    fn insert_job(&mut self, job: &Job) -> Result<()> {
        self.jobs.put(job.clone());
        Ok(())
    }

    fn save_job(&mut self, job: &Job) -> Result<()> {
        self.jobs.put(job.clone());
        Ok(())
    }

    fn unique_holders(&mut self, queue: &str, key: &str) -> Result<Vec<Job>> {
        Ok(self.jobs.with_unique_key(queue, key).cloned().collect())
    }

    fn next_fence(&mut self) -> Result<u64> {
        Ok(State::next_fence(self))
    }

    fn claim_candidates(
        &mut self,
        queue: &str,
        _now: Timestamp,
        limit: usize,
        claimable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        // Ordered by priority first, so a job not visible yet may come
        // before visible ones: skip it, don't stop there.
        Ok(self
            .jobs
            .queued_in_claim_order(queue)
            .filter(|job| claimable(job))
            .take(limit)
            .cloned()
            .collect())
    }

    fn reap_candidates(
        &mut self,
        _grace: Duration,
        _now: Timestamp,
        limit: usize,
        reapable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let expired = self
            .jobs
            .all()
            .filter(|job| reapable(job))
            .cloned()
            .collect();
        Ok(rules::first_in_reap_order(expired, limit))
    }
}

#[async_trait]
impl QueueBackend for MemoryStore {
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>> {
        let jobs = jobs.get();
        let now = self.now();
        engine::enqueue_batch(&mut *self.lock(), jobs, now)
    }

    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed> {
        let request = request.get();
        let now = self.now();
        engine::claim(&mut *self.lock(), request, request.limit, now)
    }

    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let now = self.now();
        engine::renew_job(&mut *self.lock(), claim, ttl, now)
    }

    async fn renew_job_with_progress(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<JobRenewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        let now = self.now();
        engine::renew_job_with_progress(&mut *self.lock(), claim, ttl, now, progress)
    }

    async fn renew_jobs(
        &self,
        claims: Checked<&[JobClaim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<JobRenewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        let now = self.now();
        let mut state = self.lock();
        claims
            .iter()
            .map(|claim| engine::renew_job(&mut *state, claim, ttl, now))
            .collect()
    }

    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle> {
        let claim = claim.get();
        let now = self.now();
        engine::complete(&mut *self.lock(), claim, now)
    }

    async fn complete_many(&self, claims: Checked<&[JobClaim]>) -> Result<Vec<JobSettle>> {
        let claims = claims.get();
        let now = self.now();
        let mut state = self.lock();
        claims
            .iter()
            .map(|claim| engine::complete(&mut *state, claim, now))
            .collect()
    }

    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle> {
        let (claim, error, action) = (claim.get(), error.get(), action.get());
        let now = self.now();
        engine::fail(&mut *self.lock(), claim, error, action, now)
    }

    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle> {
        let (claim, missing) = (claim.get(), missing.get());
        let now = self.now();
        engine::defer(&mut *self.lock(), claim, missing, now)
    }

    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport> {
        let grace = grace.get();
        let now = self.now();
        engine::reap(&mut *self.lock(), grace, rules::MAX_REAP, now)
    }

    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let now = self.now();
        engine::take_back(&mut *self.lock(), claim, ttl, now)
    }

    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>> {
        let id = id.get();
        Ok(self.lock().jobs.get(id).cloned())
    }

    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let state = self.lock();
        let mut dead: Vec<&Job> = state
            .jobs
            .all()
            .filter(|job| job.queue == queue && job.state == JobState::DeadLettered)
            .collect();
        dead.sort_by(|a, b| rules::dead_letter_order(a).cmp(&rules::dead_letter_order(b)));
        Ok(dead.into_iter().take(limit).cloned().collect())
    }

    async fn list_jobs(
        &self,
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let jobs = self.lock();
        let mut listed: Vec<&Job> = jobs
            .jobs
            .all()
            .filter(|job| job.queue == queue && state.is_none_or(|state| job.state == state))
            .collect();
        listed.sort_by(|a, b| rules::job_listing_order(a).cmp(&rules::job_listing_order(b)));
        Ok(listed.into_iter().take(limit).cloned().collect())
    }

    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        let jobs = self.lock();
        Ok(QueueCounts::tally(
            jobs.jobs
                .all()
                .map(|job| (job.queue.as_str(), job.state, 1)),
        ))
    }

    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry> {
        let id = id.get();
        let now = self.now();
        engine::retry_dead_letter(&mut *self.lock(), id, now)
    }

    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64> {
        let finished_older_than = finished_older_than.get();
        let now = self.now();
        Ok(self
            .lock()
            .jobs
            .purge(|job| rules::job_purgeable(job, finished_older_than, now)))
    }
}
