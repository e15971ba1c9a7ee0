//! [`JobQueue`] for [`SqliteStore`]: validation on the caller's task, then
//! one transaction on the connection thread per operation, like the lease
//! side. Jobs live in the same file and draw fences from the same counter
//! as leases.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::queue_engine as engine;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::validate::operation as validate;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobQueue, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, ReapReport, TakeBack,
};
use tenure_lease_core::Result;

use crate::records::Records;
use crate::{jobs, queue_ops, SqliteStore};

#[async_trait]
impl JobQueue for SqliteStore {
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        validate::enqueue(job)?;
        let job = job.clone();
        self.connection
            .run(move |session| {
                session
                    .write(|transaction, now| engine::enqueue(&mut Records(transaction), &job, now))
            })
            .await
    }

    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
        validate::enqueue_batch(jobs)?;
        let jobs = jobs.to_vec();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::enqueue_batch(&mut Records(transaction), &jobs, now)
                })
            })
            .await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        validate::claim(request)?;
        let request = request.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::claim(&mut Records(transaction), &request, request.limit, now)
                })
            })
            .await
    }

    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
        validate::renew_job(claim, ttl)?;
        let claim = claim.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew_job(&mut Records(transaction), &claim, ttl, now)
                })
            })
            .await
    }

    async fn renew_jobs(&self, claims: &[JobClaim], ttl: Duration) -> Result<Vec<JobRenewal>> {
        validate::renew_jobs(claims, ttl)?;
        let claims = claims.to_vec();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    let mut jobs = Records(transaction);
                    claims
                        .iter()
                        .map(|claim| engine::renew_job(&mut jobs, claim, ttl, now))
                        .collect()
                })
            })
            .await
    }

    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
        validate::complete(claim)?;
        let claim = claim.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::complete(&mut Records(transaction), &claim, now)
                })
            })
            .await
    }

    async fn complete_many(&self, claims: &[JobClaim]) -> Result<Vec<JobSettle>> {
        validate::complete_many(claims)?;
        let claims = claims.to_vec();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    let mut jobs = Records(transaction);
                    claims
                        .iter()
                        .map(|claim| engine::complete(&mut jobs, claim, now))
                        .collect()
                })
            })
            .await
    }

    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
        validate::fail(claim, error, action)?;
        let claim = claim.clone();
        let error = error.to_owned();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::fail(&mut Records(transaction), &claim, &error, action, now)
                })
            })
            .await
    }

    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
        validate::defer(claim, missing)?;
        let claim = claim.clone();
        let missing = missing.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::defer(&mut Records(transaction), &claim, &missing, now)
                })
            })
            .await
    }

    async fn reap(&self, grace: Duration) -> Result<ReapReport> {
        validate::reap(grace)?;
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::reap(&mut Records(transaction), grace, rules::MAX_REAP, now)
                })
            })
            .await
    }

    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
        validate::take_back(claim, ttl)?;
        let claim = claim.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::take_back(&mut Records(transaction), &claim, ttl, now)
                })
            })
            .await
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        validate::get_job(id)?;
        let id = id.to_owned();
        self.connection
            .run(move |session| session.read(|connection, _| jobs::load_job(connection, &id)))
            .await
    }

    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
        validate::list_dead_letters(queue, limit)?;
        let queue = queue.to_owned();
        self.connection
            .run(move |session| {
                session
                    .read(|connection, _| queue_ops::list_dead_letters(connection, &queue, limit))
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
        self.connection
            .run(move |session| {
                session.read(|connection, _| queue_ops::list_jobs(connection, &queue, state, limit))
            })
            .await
    }

    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
        validate::retry_dead_letter(id)?;
        let id = id.to_owned();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::retry_dead_letter(&mut Records(transaction), &id, now)
                })
            })
            .await
    }

    async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64> {
        validate::purge_jobs(finished_older_than)?;
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    queue_ops::purge_finished(transaction, now, finished_older_than)
                })
            })
            .await
    }
}
