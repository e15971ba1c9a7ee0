//! [`JobQueue`] for [`FileStore`]: jobs live in the document beside the
//! leases and draw fences from the same sequence, so a job claim never
//! shares a fence with a lease. The decisions are the shared
//! [`queue_rules`](rules); this module only finds the jobs they apply to,
//! passing over (and logging) jobs it cannot decode.

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

use crate::document::{self, Document};
use crate::FileStore;

impl Document {
    /// The job with `id`, if any.
    fn load_job(&self, id: &str) -> Result<Option<Job>> {
        self.jobs
            .get(id)
            .map(|value| {
                document::job(id, value).map_err(|why| document::undecodable("job", id, &why))
            })
            .transpose()
    }

    fn put_job(&mut self, job: &Job) -> Result<()> {
        self.jobs.insert(job.id.clone(), document::encode(job)?);
        Ok(())
    }

    /// Every job that decodes and `wanted` keeps; those that do not decode
    /// are passed over and logged when they may be ones `operation` wanted
    /// (`queue`, when given, is theirs or cannot be read).
    fn decoded_jobs(
        &self,
        operation: &str,
        queue: Option<&str>,
        wanted: impl Fn(&Job) -> bool,
    ) -> Vec<Job> {
        let mut jobs = Vec::new();
        for (id, value) in &self.jobs {
            match document::job(id, value) {
                Ok(job) => {
                    if wanted(&job) {
                        jobs.push(job);
                    }
                }
                Err(why) => {
                    let theirs = document::peek_queue(value);
                    if queue.is_none() || theirs.is_none() || theirs == queue {
                        tracing::warn!(
                            job.id = %id,
                            reason = %why,
                            "{operation} passed over a stored job it cannot decode; \
                             it needs an operator's attention"
                        );
                    }
                }
            }
        }
        jobs
    }

    fn reject_known_job_ids<'a>(&self, mut ids: impl Iterator<Item = &'a str>) -> Result<()> {
        match ids.find(|id| self.jobs.contains_key(*id)) {
            Some(id) => Err(Error::job_already_exists(id)),
            None => Ok(()),
        }
    }
}

impl FileStore {
    /// Runs a fenced write on the job `claim` names: when
    /// [`rules::judge_job`] says the claim still holds it, applies `change`
    /// and answers the job as it now is with `change`'s answer; otherwise
    /// changes nothing and answers why.
    async fn write_claimed<T: Send + 'static>(
        &self,
        claim: &JobClaim,
        change: impl FnOnce(&mut Job, Timestamp) -> T + Send + 'static,
    ) -> Result<std::result::Result<(Job, T), JobLoss>> {
        let claim = claim.clone();
        self.write(move |document, now| {
            let job = document.load_job(&claim.id)?;
            if let Err(loss) = rules::judge_job(job.as_ref(), &claim) {
                return Ok(Err(loss));
            }
            let Some(mut job) = job else {
                return Ok(Err(JobLoss::Missing));
            };
            let answer = change(&mut job, now);
            document.put_job(&job)?;
            Ok(Ok((job, answer)))
        })
        .await
    }

    async fn settle(
        &self,
        claim: &JobClaim,
        change: impl FnOnce(&mut Job, Timestamp) + Send + 'static,
    ) -> Result<JobSettle> {
        Ok(match self.write_claimed(claim, change).await? {
            Ok((job, ())) => JobSettle::Settled(job),
            Err(loss) => JobSettle::Rejected(loss),
        })
    }
}

#[async_trait]
impl JobQueue for FileStore {
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        validate::enqueue(job)?;
        let job = job.clone();
        self.write(move |document, now| {
            document.reject_known_job_ids(std::iter::once(job.id.as_str()))?;
            let job = rules::new_job(&job, now);
            document.put_job(&job)?;
            Ok(job)
        })
        .await
    }

    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
        validate::enqueue_batch(jobs)?;
        let jobs = jobs.to_vec();
        self.write(move |document, now| {
            document.reject_known_job_ids(jobs.iter().map(|job| job.id.as_str()))?;
            let created: Vec<Job> = jobs.iter().map(|job| rules::new_job(job, now)).collect();
            for job in &created {
                document.put_job(job)?;
            }
            Ok(created)
        })
        .await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        validate::claim(request)?;
        let request = request.clone();
        self.write(move |document, now| {
            let mut chosen = document.decoded_jobs("claim", Some(&request.queue), |job| {
                rules::claimable(job, &request.queue, &request.capabilities, now)
            });
            chosen.sort_by(|a, b| rules::claim_order(a).cmp(&rules::claim_order(b)));
            chosen.truncate(request.limit);
            let mut claimed = Vec::with_capacity(chosen.len());
            for mut job in chosen {
                let fence = document.next_fence()?;
                let claim = rules::claim_job(&mut job, &request.worker, request.ttl, fence, now);
                document.put_job(&job)?;
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
                .write_claimed(claim, move |job, now| rules::renew_job(job, ttl, now))
                .await?
            {
                Ok((_, expires_at)) => JobRenewal::Renewed { expires_at },
                Err(loss) => JobRenewal::Lost(loss),
            },
        )
    }

    async fn renew_jobs(&self, claims: &[JobClaim], ttl: Duration) -> Result<Vec<JobRenewal>> {
        validate::renew_jobs(claims, ttl)?;
        let claims = claims.to_vec();
        // One write of the document: a job that cannot be decoded fails the
        // call before the file is replaced, so nothing is renewed.
        self.write(move |document, now| {
            let mut answers = Vec::with_capacity(claims.len());
            for claim in &claims {
                let job = document.load_job(&claim.id)?;
                let answer = match (rules::judge_job(job.as_ref(), claim), job) {
                    (Ok(()), Some(mut job)) => {
                        let expires_at = rules::renew_job(&mut job, ttl, now);
                        document.put_job(&job)?;
                        JobRenewal::Renewed { expires_at }
                    }
                    (Err(loss), _) => JobRenewal::Lost(loss),
                    (Ok(()), None) => JobRenewal::Lost(JobLoss::Missing),
                };
                answers.push(answer);
            }
            Ok(answers)
        })
        .await
    }

    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
        validate::complete(claim)?;
        self.settle(claim, rules::complete_job).await
    }

    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
        validate::fail(claim, error, action)?;
        let error = error.to_owned();
        self.settle(claim, move |job, now| {
            rules::fail_job(job, &error, action, now);
        })
        .await
    }

    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
        validate::defer(claim, missing)?;
        let missing = missing.clone();
        self.settle(claim, move |job, now| rules::defer_job(job, &missing, now))
            .await
    }

    async fn reap(&self, grace: Duration) -> Result<ReapReport> {
        validate::reap(grace)?;
        self.write(move |document, now| {
            let mut expired =
                document.decoded_jobs("reap", None, |job| rules::reapable(job, grace, now));
            expired.sort_by(|a, b| rules::reap_order(a).cmp(&rules::reap_order(b)));
            let mut report = ReapReport::default();
            for mut job in expired.into_iter().take(rules::MAX_REAP) {
                let requeued = rules::reap_job(&mut job, now);
                document.put_job(&job)?;
                if requeued {
                    report.requeued.push(job);
                } else {
                    report.dead_lettered.push(job);
                }
            }
            Ok(report)
        })
        .await
    }

    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
        validate::take_back(claim, ttl)?;
        let claim = claim.clone();
        self.write(move |document, now| {
            let job = document.load_job(&claim.id)?;
            if let Err(refusal) = rules::judge_take_back(job.as_ref(), &claim) {
                return Ok(TakeBack::NotTaken(refusal));
            }
            let Some(mut job) = job else {
                return Ok(TakeBack::NotTaken(TakeBackRefusal::Missing));
            };
            let fence = document.next_fence()?;
            let claim = rules::take_back_job(&mut job, ttl, fence, now);
            document.put_job(&job)?;
            Ok(TakeBack::Taken(ClaimedJob { job, claim }))
        })
        .await
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::get_job(id)?;
        let id = id.to_owned();
        self.read(move |document, _| document.load_job(&id)).await
    }

    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
        validate::list_dead_letters(queue, limit)?;
        let queue = queue.to_owned();
        self.read(move |document, _| {
            let mut dead = document.decoded_jobs("list_dead_letters", Some(&queue), |job| {
                job.queue == queue && job.state == JobState::DeadLettered
            });
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
        let queue = queue.to_owned();
        self.read(move |document, _| {
            let mut listed = document.decoded_jobs("list_jobs", Some(&queue), |job| {
                job.queue == queue && state.is_none_or(|state| job.state == state)
            });
            listed.sort_by(|a, b| rules::job_listing_order(a).cmp(&rules::job_listing_order(b)));
            listed.truncate(limit);
            Ok(listed)
        })
        .await
    }

    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
        validate::retry_dead_letter(id)?;
        let id = id.to_owned();
        self.write(move |document, now| {
            let Some(mut job) = document.load_job(&id)? else {
                return Ok(OperatorRetry::Missing);
            };
            if job.state != JobState::DeadLettered {
                return Ok(OperatorRetry::NotDeadLettered(job.state));
            }
            rules::retry_dead_letter(&mut job, now);
            document.put_job(&job)?;
            Ok(OperatorRetry::Requeued(job))
        })
        .await
    }

    async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64> {
        validate::purge_jobs(finished_older_than)?;
        self.write(move |document, now| {
            let before = document.jobs.len();
            // What cannot be decoded cannot be judged: it stays.
            document.jobs.retain(|id, value| {
                !document::job(id, value)
                    .is_ok_and(|job| rules::job_purgeable(&job, finished_older_than, now))
            });
            Ok((before - document.jobs.len()) as u64)
        })
        .await
    }
}
