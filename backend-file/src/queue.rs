//! [`QueueBackend`] for [`FileStore`]: jobs live in the document beside the
//! leases and draw fences from the same sequence, so a job claim never
//! shares a fence with a lease. The writes are the shared [queue
//! engine](engine)'s, over the document as its [`JobTransaction`]; this
//! module only finds the jobs the engine asks for, passing over (and
//! logging) jobs it cannot decode.

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
}

impl JobTransaction for Document {
    fn job_exists(&mut self, id: &str) -> Result<bool> {
        Ok(self.jobs.contains_key(id))
    }

    fn load_job(&mut self, id: &str) -> Result<Option<Job>> {
        Document::load_job(self, id)
    }

    fn insert_job(&mut self, job: &Job) -> Result<()> {
        self.put_job(job)
    }

    fn save_job(&mut self, job: &Job) -> Result<()> {
        self.put_job(job)
    }

    fn unique_holders(&mut self, queue: &str, key: &str) -> Result<Vec<Job>> {
        Ok(self.decoded_jobs("enqueue_unique", Some(queue), |job| {
            job.queue == queue && job.unique.as_ref().is_some_and(|held| held.key == key)
        }))
    }

    fn next_fence(&mut self) -> Result<u64> {
        Document::next_fence(self)
    }

    fn claim_candidates(
        &mut self,
        queue: &str,
        _now: Timestamp,
        limit: usize,
        claimable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let chosen = self.decoded_jobs("claim", Some(queue), claimable);
        Ok(rules::first_in_claim_order(chosen, limit))
    }

    fn reap_candidates(
        &mut self,
        _grace: Duration,
        _now: Timestamp,
        limit: usize,
        reapable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let expired = self.decoded_jobs("reap", None, reapable);
        Ok(rules::first_in_reap_order(expired, limit))
    }
}

#[async_trait]
impl QueueBackend for FileStore {
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>> {
        let jobs = jobs.get().to_vec();
        self.write(move |document, now| engine::enqueue_batch(document, &jobs, now))
            .await
    }

    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed> {
        let request = request.get().clone();
        self.write(move |document, now| engine::claim(document, &request, request.limit, now))
            .await
    }

    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let claim = claim.clone();
        self.write(move |document, now| engine::renew_job(document, &claim, ttl, now))
            .await
    }

    async fn renew_job_with_progress(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<JobRenewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        let (claim, progress) = (claim.clone(), progress.clone());
        self.write(move |document, now| {
            engine::renew_job_with_progress(document, &claim, ttl, now, &progress)
        })
        .await
    }

    async fn renew_jobs(
        &self,
        claims: Checked<&[JobClaim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<JobRenewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        let claims = claims.to_vec();
        // One write of the document: a job that cannot be decoded fails the
        // call before the file is replaced, so nothing is renewed.
        self.write(move |document, now| {
            claims
                .iter()
                .map(|claim| engine::renew_job(document, claim, ttl, now))
                .collect()
        })
        .await
    }

    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle> {
        let claim = claim.get().clone();
        self.write(move |document, now| engine::complete(document, &claim, now))
            .await
    }

    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle> {
        let (claim, error, action) = (claim.get(), error.get(), action.get());
        let claim = claim.clone();
        let error = error.to_owned();
        self.write(move |document, now| engine::fail(document, &claim, &error, action, now))
            .await
    }

    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle> {
        let (claim, missing) = (claim.get(), missing.get());
        let claim = claim.clone();
        let missing = missing.clone();
        self.write(move |document, now| engine::defer(document, &claim, &missing, now))
            .await
    }

    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport> {
        let grace = grace.get();
        self.write(move |document, now| engine::reap(document, grace, rules::MAX_REAP, now))
            .await
    }

    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let claim = claim.clone();
        self.write(move |document, now| engine::take_back(document, &claim, ttl, now))
            .await
    }

    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>> {
        let id = id.get().to_owned();
        self.read(move |document, _| document.load_job(&id)).await
    }

    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
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
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
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

    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        self.read(|document, _| {
            let jobs = document.decoded_jobs("count_jobs", None, |_| true);
            Ok(QueueCounts::tally(
                jobs.into_iter().map(|job| (job.queue, job.state, 1)),
            ))
        })
        .await
    }

    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry> {
        let id = id.get().to_owned();
        self.write(move |document, now| engine::retry_dead_letter(document, &id, now))
            .await
    }

    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64> {
        let finished_older_than = finished_older_than.get();
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
