//! The [`JobQueue`] side of [`EtcdStore`]: one key per job beside the
//! leases, fences from the same sequence, decisions from the shared
//! [`queue_rules`](rules); each operation one optimistic transaction.

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

use crate::kv::{Reads, Tx};
use crate::records::{decode, encode, keep_live, live_until};
use crate::EtcdStore;

impl EtcdStore {
    /// The job with `id`, as this attempt sees it.
    fn load_job(&self, tx: &mut Tx<'_>, id: &str) -> Result<Option<Job>> {
        let key = self.keys.job(id);
        tx.read(&key)?.map(|bytes| decode(&key, &bytes)).transpose()
    }

    /// Writes `job` back, and its liveness key with it: attached while it
    /// is claimed, removed once it is not.
    fn save_job(&self, tx: &mut Tx<'_>, job: &Job) {
        tx.put(&self.keys.job(&job.id), encode(job));
        let claimed = job
            .lease_expires_at
            .filter(|_| job.state == JobState::Claimed);
        keep_live(tx, &self.keys.live_job(&job.id), claimed);
    }

    /// What an operation on the job `id` reads first: the job and its
    /// liveness key.
    fn job_keys(&self, id: &str) -> [String; 2] {
        [self.keys.job(id), self.keys.live_job(id)]
    }

    /// How many jobs one transaction may write: each with its liveness key.
    fn jobs_per_transaction(&self) -> usize {
        (self.runner.max_txn_ops / 2).max(1)
    }

    /// Every job that can be decoded, in id order; the others are logged
    /// and passed over.
    fn scan_jobs(&self, tx: &Tx<'_>) -> Vec<Job> {
        tx.scan(self.keys.jobs())
            .filter_map(|(key, bytes)| match decode::<Job>(key, bytes) {
                Ok(job) => Some(job),
                Err(error) => {
                    tracing::warn!(key, %error, "passing over an undecodable job");
                    None
                }
            })
            .collect()
    }

    /// Applies `write` to the job `claim` holds, if it still holds it.
    async fn write_claimed<T: Send>(
        &self,
        claim: &JobClaim,
        write: impl Fn(&mut Job, Timestamp) -> T + Send + Sync,
    ) -> Result<std::result::Result<(Job, T), JobLoss>> {
        self.runner
            .run(Reads::keys(self.job_keys(&claim.id)), |tx| {
                let job = self.load_job(tx, &claim.id)?;
                if let Err(loss) = rules::judge_job(job.as_ref(), claim) {
                    return Ok(Err(loss));
                }
                let Some(mut job) = job else {
                    return Ok(Err(JobLoss::Missing));
                };
                let answer = write(&mut job, tx.now());
                self.save_job(tx, &job);
                Ok(Ok((job, answer)))
            })
            .await
    }

    async fn settle(
        &self,
        claim: &JobClaim,
        write: impl Fn(&mut Job, Timestamp) + Send + Sync,
    ) -> Result<JobSettle> {
        Ok(match self.write_claimed(claim, write).await? {
            Ok((job, ())) => JobSettle::Settled(job),
            Err(loss) => JobSettle::Rejected(loss),
        })
    }
}

#[async_trait]
impl JobQueue for EtcdStore {
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        validate::enqueue(job)?;
        self.enqueue_batch(std::slice::from_ref(job))
            .await?
            .pop()
            .ok_or_else(|| Error::unavailable(format!("enqueue of {:?} answered no job", job.id)))
    }

    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
        validate::enqueue_batch(jobs)?;
        let reads = Reads::keys(jobs.iter().map(|job| self.keys.job(&job.id)));
        self.runner
            .run(reads, |tx| {
                for job in jobs {
                    if tx.read(&self.keys.job(&job.id))?.is_some() {
                        return Err(Error::job_already_exists(&job.id));
                    }
                }
                let now = tx.now();
                let created: Vec<Job> = jobs.iter().map(|job| rules::new_job(job, now)).collect();
                for job in &created {
                    self.save_job(tx, job);
                }
                Ok(created)
            })
            .await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        validate::claim(request)?;
        let limit = request.limit.min(self.jobs_per_transaction());
        let reads = Reads::default()
            .prefix(self.keys.jobs())
            .prefix(self.keys.live_jobs());
        self.runner
            .run(reads, |tx| {
                let now = tx.now();
                let mut chosen: Vec<Job> = self
                    .scan_jobs(tx)
                    .into_iter()
                    .filter(|job| rules::claimable(job, &request.queue, &request.capabilities, now))
                    .collect();
                chosen.sort_by(|a, b| rules::claim_order(a).cmp(&rules::claim_order(b)));
                chosen.truncate(limit);
                let mut claimed = Vec::with_capacity(chosen.len());
                for mut job in chosen {
                    let fence = tx.next_fence();
                    let claim =
                        rules::claim_job(&mut job, &request.worker, request.ttl, fence, now);
                    self.save_job(tx, &job);
                    claimed.push(ClaimedJob { job, claim });
                }
                Ok(claimed)
            })
            .await
    }

    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
        validate::renew_job(claim, ttl)?;
        Ok(
            match self
                .write_claimed(claim, |job, now| rules::renew_job(job, ttl, now))
                .await?
            {
                Ok((_, expires_at)) => JobRenewal::Renewed { expires_at },
                Err(loss) => JobRenewal::Lost(loss),
            },
        )
    }

    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
        validate::complete(claim)?;
        self.settle(claim, rules::complete_job).await
    }

    async fn complete_many(&self, claims: &[JobClaim]) -> Result<Vec<JobSettle>> {
        validate::complete_many(claims)?;
        let mut settled = Vec::with_capacity(claims.len());
        // One transaction per part that fits in one; within a part, claims
        // are settled in order, each seeing the ones before it.
        for part in claims.chunks(self.jobs_per_transaction()) {
            let reads = Reads::keys(part.iter().flat_map(|claim| self.job_keys(&claim.id)));
            let answers = self
                .runner
                .run(reads, |tx| {
                    let mut answers = Vec::with_capacity(part.len());
                    for claim in part {
                        let job = self.load_job(tx, &claim.id)?;
                        answers.push(match (rules::judge_job(job.as_ref(), claim), job) {
                            (Ok(()), Some(mut job)) => {
                                rules::complete_job(&mut job, tx.now());
                                self.save_job(tx, &job);
                                JobSettle::Settled(job)
                            }
                            (Err(loss), _) => JobSettle::Rejected(loss),
                            (Ok(()), None) => JobSettle::Rejected(JobLoss::Missing),
                        });
                    }
                    Ok(answers)
                })
                .await?;
            settled.extend(answers);
        }
        Ok(settled)
    }

    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
        validate::fail(claim, error, action)?;
        self.settle(claim, |job, now| rules::fail_job(job, error, action, now))
            .await
    }

    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
        validate::defer(claim, missing)?;
        self.settle(claim, |job, now| rules::defer_job(job, missing, now))
            .await
    }

    async fn reap(&self, grace: Duration) -> Result<ReapReport> {
        validate::reap(grace)?;
        let limit = rules::MAX_REAP.min(self.jobs_per_transaction());
        let reads = Reads::default()
            .prefix(self.keys.jobs())
            .prefix(self.keys.live_jobs());
        self.runner
            .run(reads, |tx| {
                let now = tx.now();
                let mut expired = Vec::new();
                for job in self.scan_jobs(tx) {
                    // A claim etcd still keeps alive is not over, whatever
                    // the clock says.
                    if rules::reapable(&job, grace, now)
                        && live_until(tx, &self.keys.live_job(&job.id), now)?.is_none()
                    {
                        expired.push(job);
                    }
                }
                expired.sort_by(|a, b| rules::reap_order(a).cmp(&rules::reap_order(b)));
                let mut report = ReapReport::default();
                for mut job in expired.into_iter().take(limit) {
                    if rules::reap_job(&mut job, now) {
                        report.requeued.push(job.clone());
                    } else {
                        report.dead_lettered.push(job.clone());
                    }
                    self.save_job(tx, &job);
                }
                Ok(report)
            })
            .await
    }

    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
        validate::take_back(claim, ttl)?;
        let reads = Reads::keys(self.job_keys(&claim.id));
        self.runner
            .run(reads, |tx| {
                let Some(mut job) = self.load_job(tx, &claim.id)? else {
                    return Ok(TakeBack::NotTaken(TakeBackRefusal::Missing));
                };
                if let Err(refusal) = rules::judge_take_back(Some(&job), claim) {
                    return Ok(TakeBack::NotTaken(refusal));
                }
                let fence = tx.next_fence();
                let claim = rules::take_back_job(&mut job, ttl, fence, tx.now());
                self.save_job(tx, &job);
                Ok(TakeBack::Taken(ClaimedJob { job, claim }))
            })
            .await
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::get_job(id)?;
        self.runner
            .run(Reads::keys([self.keys.job(id)]), |tx| self.load_job(tx, id))
            .await
    }

    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
        validate::list_dead_letters(queue, limit)?;
        self.runner
            .run(Reads::default().prefix(self.keys.jobs()), |tx| {
                let mut dead: Vec<Job> = self
                    .scan_jobs(tx)
                    .into_iter()
                    .filter(|job| job.queue == queue && job.state == JobState::DeadLettered)
                    .collect();
                dead.sort_by(|a, b| rules::dead_letter_order(a).cmp(&rules::dead_letter_order(b)));
                dead.truncate(limit);
                Ok(dead)
            })
            .await
    }

    async fn list_jobs(
        &self,
        queue: &str,
        state: Option<JobState>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        validate::list_jobs(queue, limit)?;
        self.runner
            .run(Reads::default().prefix(self.keys.jobs()), |tx| {
                let mut listed: Vec<Job> = self
                    .scan_jobs(tx)
                    .into_iter()
                    .filter(|job| {
                        job.queue == queue && state.is_none_or(|state| job.state == state)
                    })
                    .collect();
                listed
                    .sort_by(|a, b| rules::job_listing_order(a).cmp(&rules::job_listing_order(b)));
                listed.truncate(limit);
                Ok(listed)
            })
            .await
    }

    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
        validate::retry_dead_letter(id)?;
        self.runner
            .run(Reads::keys([self.keys.job(id)]), |tx| {
                let Some(mut job) = self.load_job(tx, id)? else {
                    return Ok(OperatorRetry::Missing);
                };
                if job.state != JobState::DeadLettered {
                    return Ok(OperatorRetry::NotDeadLettered(job.state));
                }
                rules::retry_dead_letter(&mut job, tx.now());
                self.save_job(tx, &job);
                Ok(OperatorRetry::Requeued(job))
            })
            .await
    }

    async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64> {
        validate::purge_jobs(finished_older_than)?;
        self.delete_in_parts(self.keys.jobs(), |key, bytes, now| {
            decode::<Job>(key, bytes)
                .is_ok_and(|job| rules::job_purgeable(&job, finished_older_than, now))
        })
        .await
    }
}
