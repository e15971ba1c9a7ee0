//! The [`JobQueue`] side of [`MemoryStore`].
//!
//! Jobs live beside the leases in the same state, under the same mutex, and
//! draw fences from the same counter, so a job claim and a lease admission
//! never share a fence and every operation is one critical section. The
//! decisions are [`tenure_lease_core::backend::queue_rules`]; this module only finds the
//! jobs they apply to.
//!
//! `claim` is the hot path, so [`Jobs`] keeps the queued jobs of each queue
//! in claim order beside the map and `claim` walks that order instead of
//! scanning and sorting every job. The rarer operator and reaper paths
//! (`reap`, `list_dead_letters`) still scan.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::validate::operation as validate;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobLoss, JobQueue, JobRenewal, JobSettle,
    JobState, NewJob, OperatorRetry, ReapReport, TakeBack, TakeBackRefusal,
};
use tenure_lease_core::{Error, Result, Timestamp};

use crate::{MemoryStore, State};

/// [`rules::claim_order`]'s key, owned.
type ClaimKey = (Reverse<i32>, Timestamp, Timestamp, String);

fn claim_key(job: &Job) -> ClaimKey {
    let (priority, run_at, created_at, id) = rules::claim_order(job);
    (priority, run_at, created_at, id.to_owned())
}

/// Every job by id, and the queued ones of each queue in claim order.
///
/// Jobs change only through [`Jobs::put`], which keeps the two in step.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    by_id: foldhash::HashMap<String, Job>,
    /// Queued jobs per queue, visible yet or not; a queue without queued
    /// jobs has no entry.
    queued: foldhash::HashMap<String, BTreeSet<ClaimKey>>,
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
        self.by_id.insert(job.id.clone(), job);
    }

    /// Deletes every job `purgeable` says may go; answers how many.
    /// Finished jobs are in no queue index, so only the map changes.
    fn purge(&mut self, purgeable: impl Fn(&Job) -> bool) -> u64 {
        let before = self.by_id.len();
        self.by_id.retain(|_, job| !purgeable(job));
        (before - self.by_id.len()) as u64
    }

    /// Entries kept: jobs, and queues with an index of queued jobs.
    pub(crate) fn footprint(&self) -> (usize, usize) {
        (self.by_id.len(), self.queued.len())
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

impl MemoryStore {
    /// Runs a fenced write on the job `claim` names: when
    /// [`rules::judge_job`] says the claim still holds it, applies `write`
    /// and answers the job as it now is with `write`'s answer; otherwise
    /// changes nothing and answers why.
    fn write_claimed<T>(
        &self,
        claim: &JobClaim,
        write: impl FnOnce(&mut Job, Timestamp) -> T,
    ) -> std::result::Result<(Job, T), JobLoss> {
        let now = self.now();
        self.lock().write_claimed(claim, now, write)
    }

    fn settle(&self, claim: &JobClaim, write: impl FnOnce(&mut Job, Timestamp)) -> JobSettle {
        settled(self.write_claimed(claim, write))
    }
}

fn settled(written: std::result::Result<(Job, ()), JobLoss>) -> JobSettle {
    match written {
        Ok((job, ())) => JobSettle::Settled(job),
        Err(loss) => JobSettle::Rejected(loss),
    }
}

impl State {
    /// [`MemoryStore::write_claimed`] under a lock already held.
    fn write_claimed<T>(
        &mut self,
        claim: &JobClaim,
        now: Timestamp,
        write: impl FnOnce(&mut Job, Timestamp) -> T,
    ) -> std::result::Result<(Job, T), JobLoss> {
        let Some(job) = self.jobs.get(&claim.id) else {
            return Err(JobLoss::Missing);
        };
        rules::judge_job(Some(job), claim)?;
        let mut job = job.clone();
        let answer = write(&mut job, now);
        self.jobs.put(job.clone());
        Ok((job, answer))
    }

    fn reject_known_job_ids<'a>(&self, mut ids: impl Iterator<Item = &'a str>) -> Result<()> {
        match ids.find(|id| self.jobs.contains(id)) {
            Some(id) => Err(Error::job_already_exists(id)),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl JobQueue for MemoryStore {
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        validate::enqueue(job)?;
        let now = self.now();
        let mut state = self.lock();
        state.reject_known_job_ids(std::iter::once(job.id.as_str()))?;
        let job = rules::new_job(job, now);
        state.jobs.put(job.clone());
        Ok(job)
    }

    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
        validate::enqueue_batch(jobs)?;
        let now = self.now();
        let mut state = self.lock();
        state.reject_known_job_ids(jobs.iter().map(|job| job.id.as_str()))?;
        let created: Vec<Job> = jobs.iter().map(|job| rules::new_job(job, now)).collect();
        for job in &created {
            state.jobs.put(job.clone());
        }
        Ok(created)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        validate::claim(request)?;
        let now = self.now();
        let mut state = self.lock();
        // Ordered by priority first, so a job not visible yet may come
        // before visible ones: skip it, don't stop there.
        let chosen: Vec<Job> = state
            .jobs
            .queued_in_claim_order(&request.queue)
            .filter(|job| rules::claimable(job, &request.queue, &request.capabilities, now))
            .take(request.limit)
            .cloned()
            .collect();
        let mut claimed = Vec::with_capacity(chosen.len());
        for mut job in chosen {
            let fence = state.next_fence();
            let claim = rules::claim_job(&mut job, &request.worker, request.ttl, fence, now);
            state.jobs.put(job.clone());
            claimed.push(ClaimedJob { job, claim });
        }
        Ok(claimed)
    }

    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
        validate::renew_job(claim, ttl)?;
        Ok(
            match self.write_claimed(claim, |job, now| rules::renew_job(job, ttl, now)) {
                Ok((_, expires_at)) => JobRenewal::Renewed { expires_at },
                Err(loss) => JobRenewal::Lost(loss),
            },
        )
    }

    async fn renew_jobs(&self, claims: &[JobClaim], ttl: Duration) -> Result<Vec<JobRenewal>> {
        validate::renew_jobs(claims, ttl)?;
        let now = self.now();
        let mut state = self.lock();
        Ok(claims
            .iter()
            .map(|claim| {
                match state.write_claimed(claim, now, |job, now| rules::renew_job(job, ttl, now)) {
                    Ok((_, expires_at)) => JobRenewal::Renewed { expires_at },
                    Err(loss) => JobRenewal::Lost(loss),
                }
            })
            .collect())
    }

    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
        validate::complete(claim)?;
        Ok(self.settle(claim, rules::complete_job))
    }

    async fn complete_many(&self, claims: &[JobClaim]) -> Result<Vec<JobSettle>> {
        validate::complete_many(claims)?;
        let now = self.now();
        let mut state = self.lock();
        Ok(claims
            .iter()
            .map(|claim| settled(state.write_claimed(claim, now, rules::complete_job)))
            .collect())
    }

    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
        validate::fail(claim, error, action)?;
        Ok(self.settle(claim, |job, now| rules::fail_job(job, error, action, now)))
    }

    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
        validate::defer(claim, missing)?;
        Ok(self.settle(claim, |job, now| rules::defer_job(job, missing, now)))
    }

    async fn reap(&self, grace: Duration) -> Result<ReapReport> {
        validate::reap(grace)?;
        let now = self.now();
        let mut state = self.lock();
        let mut expired: Vec<Job> = state
            .jobs
            .all()
            .filter(|job| rules::reapable(job, grace, now))
            .cloned()
            .collect();
        expired.sort_by(|a, b| rules::reap_order(a).cmp(&rules::reap_order(b)));
        let mut report = ReapReport::default();
        for mut job in expired.into_iter().take(rules::MAX_REAP) {
            if rules::reap_job(&mut job, now) {
                report.requeued.push(job.clone());
            } else {
                report.dead_lettered.push(job.clone());
            }
            state.jobs.put(job);
        }
        Ok(report)
    }

    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
        validate::take_back(claim, ttl)?;
        let now = self.now();
        let mut state = self.lock();
        let Some(job) = state.jobs.get(&claim.id) else {
            return Ok(TakeBack::NotTaken(TakeBackRefusal::Missing));
        };
        if let Err(refusal) = rules::judge_take_back(Some(job), claim) {
            return Ok(TakeBack::NotTaken(refusal));
        }
        let mut job = job.clone();
        let fence = state.next_fence();
        let claim = rules::take_back_job(&mut job, ttl, fence, now);
        state.jobs.put(job.clone());
        Ok(TakeBack::Taken(ClaimedJob { job, claim }))
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::get_job(id)?;
        Ok(self.lock().jobs.get(id).cloned())
    }

    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
        validate::list_dead_letters(queue, limit)?;
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
        queue: &str,
        state: Option<JobState>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        validate::list_jobs(queue, limit)?;
        let jobs = self.lock();
        let mut listed: Vec<&Job> = jobs
            .jobs
            .all()
            .filter(|job| job.queue == queue && state.is_none_or(|state| job.state == state))
            .collect();
        listed.sort_by(|a, b| rules::job_listing_order(a).cmp(&rules::job_listing_order(b)));
        Ok(listed.into_iter().take(limit).cloned().collect())
    }

    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
        validate::retry_dead_letter(id)?;
        let now = self.now();
        let mut state = self.lock();
        let Some(job) = state.jobs.get(id) else {
            return Ok(OperatorRetry::Missing);
        };
        if job.state != JobState::DeadLettered {
            return Ok(OperatorRetry::NotDeadLettered(job.state));
        }
        let mut job = job.clone();
        rules::retry_dead_letter(&mut job, now);
        state.jobs.put(job.clone());
        Ok(OperatorRetry::Requeued(job))
    }

    async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64> {
        validate::purge_jobs(finished_older_than)?;
        let now = self.now();
        Ok(self
            .lock()
            .jobs
            .purge(|job| rules::job_purgeable(job, finished_older_than, now)))
    }
}
