//! The [`QueueBackend`] side of [`EtcdStore`]: one key per job beside the
//! leases, fences from the same sequence, the writes the shared [queue
//! engine](engine)'s over the jobs of one optimistic transaction.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::queue_engine::{self as engine, JobTransaction};
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::rate_rules::RateLogs;
use tenure_lease_core::backend::stores::QueueBackend;
use tenure_lease_core::queue::{
    ClaimRequest, Claimed, Enqueued, FailAction, Job, JobClaim, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{Result, Timestamp};

use crate::kv::{Reads, Tx};
use crate::records::{decode, encode, keep_live, live_until, Records};
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

    /// Runs `operation` in one optimistic transaction reading `reads`, on
    /// the jobs as the queue engine's [`JobTransaction`].
    async fn with_jobs<T: Send>(
        &self,
        reads: Reads,
        operation: impl Fn(&mut Jobs<'_, '_>, Timestamp) -> Result<T> + Send + Sync,
    ) -> Result<T> {
        self.runner
            .run(reads, |tx| {
                let now = tx.now();
                let mut jobs = Jobs {
                    store: self,
                    tx,
                    keyed: None,
                };
                operation(&mut jobs, now)
            })
            .await
    }
}

/// The jobs inside one attempt of an etcd transaction.
struct Jobs<'a, 's> {
    store: &'a EtcdStore,
    tx: &'a mut Tx<'s>,
    /// The jobs with a uniqueness key as the attempt's scan read them,
    /// decoded once for every keyed job of a batch.
    keyed: Option<Vec<Job>>,
}

impl<'s> Jobs<'_, 's> {
    /// The attempt as [`Records`], which keep the rate logs.
    fn records(&mut self) -> Records<'_, 's> {
        Records {
            tx: self.tx,
            keys: &self.store.keys,
        }
    }
}

impl RateLogs for Jobs<'_, '_> {
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        self.records().rate_log(limit)
    }

    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()> {
        self.records().save_rate_log(limit, uses)
    }
}

impl JobTransaction for Jobs<'_, '_> {
    fn job_exists(&mut self, id: &str) -> Result<bool> {
        Ok(self.tx.read(&self.store.keys.job(id))?.is_some())
    }

    fn load_job(&mut self, id: &str) -> Result<Option<Job>> {
        self.store.load_job(self.tx, id)
    }

    fn insert_job(&mut self, job: &Job) -> Result<()> {
        if job.unique.is_some() {
            self.tx
                .put(self.store.keys.unique(), job.id.clone().into_bytes());
        }
        self.store.save_job(self.tx, job);
        Ok(())
    }

    fn save_job(&mut self, job: &Job) -> Result<()> {
        self.store.save_job(self.tx, job);
        Ok(())
    }

    /// Scans every job (the enqueue read them all). A scan compares
    /// nothing at commit, so the store's one [`unique`](crate::keys::Keys::unique)
    /// key is read here and written by every keyed insert: of two enqueues
    /// judged on the same jobs, the second to commit fails its compare and
    /// is judged again.
    fn unique_holders(&mut self, queue: &str, key: &str) -> Result<Vec<Job>> {
        self.tx.read(self.store.keys.unique())?;
        let keyed = match &mut self.keyed {
            Some(keyed) => keyed,
            unread => {
                let scanned = self.store.scan_jobs(self.tx);
                unread.insert(
                    scanned
                        .into_iter()
                        .filter(|job| job.unique.is_some())
                        .collect(),
                )
            }
        };
        Ok(keyed
            .iter()
            .filter(|job| {
                job.queue == queue && job.unique.as_ref().is_some_and(|held| held.key == key)
            })
            .cloned()
            .collect())
    }

    fn next_fence(&mut self) -> Result<u64> {
        Ok(self.tx.next_fence())
    }

    fn claim_candidates(
        &mut self,
        _queue: &str,
        _now: Timestamp,
        limit: usize,
        claimable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let chosen = self
            .store
            .scan_jobs(self.tx)
            .into_iter()
            .filter(|job| claimable(job))
            .collect();
        Ok(rules::first_in_claim_order(chosen, limit))
    }

    fn reap_candidates(
        &mut self,
        _grace: Duration,
        now: Timestamp,
        limit: usize,
        reapable: &dyn Fn(&Job) -> bool,
    ) -> Result<Vec<Job>> {
        let mut expired = Vec::new();
        for job in self.store.scan_jobs(self.tx) {
            // A claim etcd still keeps alive is not over, whatever the
            // clock says.
            if reapable(&job)
                && live_until(self.tx, &self.store.keys.live_job(&job.id), now)?.is_none()
            {
                expired.push(job);
            }
        }
        Ok(rules::first_in_reap_order(expired, limit))
    }
}

#[async_trait]
impl QueueBackend for EtcdStore {
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>> {
        let jobs = jobs.get();
        let keyed = jobs.iter().any(|job| job.unique.is_some());
        let ids = jobs.iter().map(|job| self.keys.job(&job.id));
        // Keys are read before prefixes (`Cluster::fetch`), so the guard is
        // never read at a later revision than the scan of the jobs: a rival
        // that committed between them changed the guard after it was read,
        // and fails this decision's compare.
        let guard = keyed.then(|| self.keys.unique().to_owned());
        let mut reads = Reads::keys(ids.chain(guard));
        if keyed {
            reads = reads.prefix(self.keys.jobs());
        }
        self.with_jobs(reads, |stored, now| {
            engine::enqueue_batch(stored, jobs, now)
        })
        .await
    }

    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed> {
        let request = request.get();
        let log = request
            .rate_limit
            .as_ref()
            .map(|limit| self.keys.rate_log(limit));
        // The log is one more write: one job fewer when the jobs would
        // fill the transaction.
        let limit = match log {
            Some(_) => self.runner.max_txn_ops.saturating_sub(1) / 2,
            None => self.jobs_per_transaction(),
        };
        let reads = Reads::keys(log)
            .prefix(self.keys.jobs())
            .prefix(self.keys.live_jobs());
        self.with_jobs(reads, |jobs, now| engine::claim(jobs, request, limit, now))
            .await
    }

    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.with_jobs(Reads::keys(self.job_keys(&claim.id)), |jobs, now| {
            engine::renew_job(jobs, claim, ttl, now)
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
        self.with_jobs(Reads::keys(self.job_keys(&claim.id)), |jobs, now| {
            engine::renew_job_with_progress(jobs, claim, ttl, now, progress)
        })
        .await
    }

    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle> {
        let claim = claim.get();
        self.with_jobs(Reads::keys(self.job_keys(&claim.id)), |jobs, now| {
            engine::complete(jobs, claim, now)
        })
        .await
    }

    async fn complete_many(&self, claims: Checked<&[JobClaim]>) -> Result<Vec<JobSettle>> {
        let claims = claims.get();
        let mut settled = Vec::with_capacity(claims.len());
        // One transaction per part that fits in one; within a part, claims
        // are settled in order, each seeing the ones before it.
        for part in claims.chunks(self.jobs_per_transaction()) {
            let reads = Reads::keys(part.iter().flat_map(|claim| self.job_keys(&claim.id)));
            let answers = self
                .with_jobs(reads, |jobs, now| {
                    part.iter()
                        .map(|claim| engine::complete(jobs, claim, now))
                        .collect::<Result<Vec<_>>>()
                })
                .await?;
            settled.extend(answers);
        }
        Ok(settled)
    }

    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle> {
        let (claim, error, action) = (claim.get(), error.get(), action.get());
        self.with_jobs(Reads::keys(self.job_keys(&claim.id)), |jobs, now| {
            engine::fail(jobs, claim, error, action, now)
        })
        .await
    }

    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle> {
        let (claim, missing) = (claim.get(), missing.get());
        self.with_jobs(Reads::keys(self.job_keys(&claim.id)), |jobs, now| {
            engine::defer(jobs, claim, missing, now)
        })
        .await
    }

    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport> {
        let grace = grace.get();
        let limit = self.jobs_per_transaction();
        let reads = Reads::default()
            .prefix(self.keys.jobs())
            .prefix(self.keys.live_jobs());
        self.with_jobs(reads, |jobs, now| engine::reap(jobs, grace, limit, now))
            .await
    }

    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.with_jobs(Reads::keys(self.job_keys(&claim.id)), |jobs, now| {
            engine::take_back(jobs, claim, ttl, now)
        })
        .await
    }

    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>> {
        let id = id.get();
        self.runner
            .run(Reads::keys([self.keys.job(id)]), |tx| self.load_job(tx, id))
            .await
    }

    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
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
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
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

    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        self.runner
            .run(Reads::default().prefix(self.keys.jobs()), |tx| {
                Ok(QueueCounts::tally(
                    self.scan_jobs(tx)
                        .into_iter()
                        .map(|job| (job.queue, job.state, 1)),
                ))
            })
            .await
    }

    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry> {
        let id = id.get();
        self.with_jobs(Reads::keys([self.keys.job(id)]), |jobs, now| {
            engine::retry_dead_letter(jobs, id, now)
        })
        .await
    }

    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64> {
        let finished_older_than = finished_older_than.get();
        self.delete_in_parts(self.keys.jobs(), |key, bytes, now| {
            decode::<Job>(key, bytes)
                .is_ok_and(|job| rules::job_purgeable(&job, finished_older_than, now))
        })
        .await
    }
}
