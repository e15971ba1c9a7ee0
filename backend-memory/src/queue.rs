//! The [`JobQueue`] side of [`MemoryStore`].
//!
//! Jobs live beside the leases in the same state, under the same mutex, and
//! draw fences from the same counter, so a job claim and a lease admission
//! never share a fence and every operation is one critical section. The
//! decisions are [`lease_core::queue::rules`]; this module only finds the
//! jobs they apply to. Linear scans over the map are fine for a store that
//! lives in one process's memory.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::queue::{
    rules, ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobLoss, JobQueue, JobRenewal,
    JobSettle, JobState, NewJob, OperatorRetry, ReapReport, TakeBack, TakeBackRefusal,
};
use lease_core::{validate, Error, Result, Timestamp};

use crate::{MemoryStore, State};

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
        let mut state = self.lock();
        let Some(job) = state.jobs.get_mut(&claim.id) else {
            return Err(JobLoss::Missing);
        };
        rules::judge_job(Some(job), claim)?;
        let answer = write(job, now);
        Ok((job.clone(), answer))
    }

    fn settle(&self, claim: &JobClaim, write: impl FnOnce(&mut Job, Timestamp)) -> JobSettle {
        match self.write_claimed(claim, write) {
            Ok((job, ())) => JobSettle::Settled(job),
            Err(loss) => JobSettle::Rejected(loss),
        }
    }
}

impl State {
    fn reject_known_job_ids<'a>(&self, mut ids: impl Iterator<Item = &'a str>) -> Result<()> {
        match ids.find(|id| self.jobs.contains_key(*id)) {
            Some(id) => Err(Error::job_already_exists(id)),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl JobQueue for MemoryStore {
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        validate::new_job(job)?;
        let now = self.now();
        let mut state = self.lock();
        state.reject_known_job_ids(std::iter::once(job.id.as_str()))?;
        let job = rules::new_job(job, now);
        state.jobs.insert(job.id.clone(), job.clone());
        Ok(job)
    }

    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
        validate::new_jobs(jobs)?;
        let now = self.now();
        let mut state = self.lock();
        state.reject_known_job_ids(jobs.iter().map(|job| job.id.as_str()))?;
        let created: Vec<Job> = jobs.iter().map(|job| rules::new_job(job, now)).collect();
        for job in &created {
            state.jobs.insert(job.id.clone(), job.clone());
        }
        Ok(created)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        validate::claim_request(request)?;
        let now = self.now();
        let mut state = self.lock();
        let mut visible: Vec<Job> = state
            .jobs
            .values()
            .filter(|job| rules::claimable(job, &request.queue, &request.capabilities, now))
            .cloned()
            .collect();
        visible.sort_by(|a, b| rules::claim_order(a).cmp(&rules::claim_order(b)));
        visible.truncate(request.limit);
        let mut claimed = Vec::with_capacity(visible.len());
        for mut job in visible {
            let fence = state.next_fence();
            let claim = rules::claim_job(&mut job, &request.worker, request.ttl, fence, now);
            state.jobs.insert(job.id.clone(), job.clone());
            claimed.push(ClaimedJob { job, claim });
        }
        Ok(claimed)
    }

    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
        validate::job_claim(claim)?;
        validate::ttl(ttl)?;
        Ok(
            match self.write_claimed(claim, |job, now| rules::renew_job(job, ttl, now)) {
                Ok((_, expires_at)) => JobRenewal::Renewed { expires_at },
                Err(loss) => JobRenewal::Lost(loss),
            },
        )
    }

    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
        validate::job_claim(claim)?;
        Ok(self.settle(claim, rules::complete_job))
    }

    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
        validate::job_failure(claim, error, action)?;
        Ok(self.settle(claim, |job, now| rules::fail_job(job, error, action, now)))
    }

    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
        validate::job_claim(claim)?;
        validate::capabilities(missing)?;
        Ok(self.settle(claim, |job, now| rules::defer_job(job, missing, now)))
    }

    async fn reap(&self, grace: Duration) -> Result<ReapReport> {
        validate::grace(grace)?;
        let now = self.now();
        let mut state = self.lock();
        let mut expired: Vec<&mut Job> = state
            .jobs
            .values_mut()
            .filter(|job| rules::reapable(job, grace, now))
            .collect();
        expired.sort_by(|a, b| rules::reap_order(a).cmp(&rules::reap_order(b)));
        let mut report = ReapReport::default();
        for job in expired.into_iter().take(rules::MAX_REAP) {
            if rules::reap_job(job, now) {
                report.requeued.push(job.clone());
            } else {
                report.dead_lettered.push(job.clone());
            }
        }
        Ok(report)
    }

    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
        validate::job_claim(claim)?;
        validate::ttl(ttl)?;
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
        state.jobs.insert(job.id.clone(), job.clone());
        Ok(TakeBack::Taken(ClaimedJob { job, claim }))
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::lease_id(id)?;
        Ok(self.lock().jobs.get(id).cloned())
    }

    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
        validate::queue(queue)?;
        validate::limit(limit)?;
        let state = self.lock();
        let mut dead: Vec<&Job> = state
            .jobs
            .values()
            .filter(|job| job.queue == queue && job.state == JobState::DeadLettered)
            .collect();
        dead.sort_by(|a, b| rules::dead_letter_order(a).cmp(&rules::dead_letter_order(b)));
        Ok(dead.into_iter().take(limit).cloned().collect())
    }

    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
        validate::lease_id(id)?;
        let now = self.now();
        let mut state = self.lock();
        let Some(job) = state.jobs.get_mut(id) else {
            return Ok(OperatorRetry::Missing);
        };
        if job.state != JobState::DeadLettered {
            return Ok(OperatorRetry::NotDeadLettered(job.state));
        }
        rules::retry_dead_letter(job, now);
        Ok(OperatorRetry::Requeued(job.clone()))
    }
}
