//! [`QueueBackend`] for [`SqliteStore`]: input checked on the caller's
//! task (by the shared front), then one transaction on the connection
//! thread per operation, like the lease side. Jobs live in the same file and draw fences from the same counter
//! as leases.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::queue_engine as engine;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::stores::QueueBackend;
use tenure_lease_core::queue::{
    ClaimRequest, Claimed, Enqueued, FailAction, Job, JobClaim, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack,
};
use tenure_lease_core::Result;

use crate::records::Records;
use crate::{jobs, queue_ops, SqliteStore};

#[async_trait]
impl QueueBackend for SqliteStore {
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>> {
        let jobs = jobs.get().to_vec();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::enqueue_batch(&mut Records(transaction), &jobs, now)
                })
            })
            .await
    }

    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed> {
        let request = request.get().clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::claim(&mut Records(transaction), &request, request.limit, now)
                })
            })
            .await
    }

    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let claim = claim.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew_job(&mut Records(transaction), &claim, ttl, now)
                })
            })
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
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew_job_with_progress(
                        &mut Records(transaction),
                        &claim,
                        ttl,
                        now,
                        &progress,
                    )
                })
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

    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle> {
        let claim = claim.get().clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::complete(&mut Records(transaction), &claim, now)
                })
            })
            .await
    }

    async fn complete_many(&self, claims: Checked<&[JobClaim]>) -> Result<Vec<JobSettle>> {
        let claims = claims.get().to_vec();
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

    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle> {
        let (claim, error, action) = (claim.get(), error.get(), action.get());
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

    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle> {
        let (claim, missing) = (claim.get(), missing.get());
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

    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport> {
        let grace = grace.get();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::reap(&mut Records(transaction), grace, rules::MAX_REAP, now)
                })
            })
            .await
    }

    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let claim = claim.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::take_back(&mut Records(transaction), &claim, ttl, now)
                })
            })
            .await
    }

    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>> {
        let id = id.get().to_owned();
        self.connection
            .run(move |session| session.read(|connection, _| jobs::load_job(connection, &id)))
            .await
    }

    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
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
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let queue = queue.to_owned();
        self.connection
            .run(move |session| {
                session.read(|connection, _| queue_ops::list_jobs(connection, &queue, state, limit))
            })
            .await
    }

    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        self.connection
            .run(|session| session.read(|connection, _| queue_ops::count_jobs(connection)))
            .await
    }

    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry> {
        let id = id.get().to_owned();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::retry_dead_letter(&mut Records(transaction), &id, now)
                })
            })
            .await
    }

    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64> {
        let finished_older_than = finished_older_than.get();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    queue_ops::purge_finished(transaction, now, finished_older_than)
                })
            })
            .await
    }
}
