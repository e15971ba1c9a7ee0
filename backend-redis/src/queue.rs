//! The [`QueueBackend`] side of [`RedisStore`]: one Lua script per operation,
//! in the same namespace and hash slot as the leases, drawing fences from the
//! same counter.
//!
//! The scripts mirror [`tenure_lease_core::backend::queue_rules`] (same precedence, same
//! state changes) and judge before they write. Two bounds keep one `claim`
//! from blocking the server for long, each the price of an index that needs
//! no background process:
//!
//! * jobs enqueued for later wait in a per-queue delayed index, and each
//!   claim first moves at most [`PROMOTE_BATCH`] of the now-due ones into
//!   the ready index, earliest first; only when more than that many fall due
//!   between two claims can a later-due job of higher priority wait for the
//!   next claim;
//! * the ready index is ordered for claim (priority, `run_at`, creation,
//!   id) but not by capabilities, so a claim looks at no more than
//!   [`CLAIM_SCAN_PER_JOB`] × `limit` ready jobs: a worker lacking the
//!   capabilities of every one of them gets fewer jobs than it could (none
//!   at worst) until capable workers have taken those.
//!
//! `enqueue_unique` finds a key's holder in the key's index of jobs, walked
//! oldest first up to the first job that holds the key: one that stopped
//! holding it (claimed, finished, its period over) is looked at on every
//! enqueue with that key until [`purge_jobs`](QueueBackend::purge_jobs)
//! deletes it, so purging finished jobs keeps that walk short. A batch
//! judges each job after writing the ones before it, which is why the
//! script checks every id and every index it will touch before its first
//! write and reads the indexed jobs without failing on a damaged one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use redis::FromRedisValue;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::stores::QueueBackend;
use tenure_lease_core::queue::{
    ClaimRequest, Claimed, Enqueued, FailAction, Job, JobClaim, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack, UniquePolicy,
};
use tenure_lease_core::{clock, Error, Result};

use crate::decode::jobs as decode;
use crate::scripts::SCRIPTS;
use crate::{micros, RedisStore, SCAN_COUNT};

/// Most ready jobs one `claim` looks at per job asked for: a claim of
/// `limit` jobs judges at most `limit × CLAIM_SCAN_PER_JOB` of them.
pub const CLAIM_SCAN_PER_JOB: usize = 50;

/// Most delayed jobs one `claim` moves into its queue's ready index.
pub const PROMOTE_BATCH: usize = 10_000;

/// `run_at` in the claim rank form the scripts sort by (see
/// `lua/queue_common.lua`): `p` and 19 digits for instants at or after the
/// epoch, else `n` and the 19 digits of 10^19 + micros, so byte order is
/// time order over the whole range of timestamps.
fn run_at_rank(micros: i64) -> String {
    if micros >= 0 {
        format!("p{micros:019}")
    } else {
        format!(
            "n{:019}",
            10_000_000_000_000_000_000_i128 + i128::from(micros)
        )
    }
}

impl RedisStore {
    /// `renew_job` of one claim, recording `progress` when given.
    async fn renew_one_job(
        &self,
        claim: &JobClaim,
        ttl: Duration,
        progress: Option<&serde_json::Value>,
    ) -> Result<JobRenewal> {
        let mut invocation = SCRIPTS.renew_job.prepare_invoke();
        invocation
            .key(self.keys.job(&claim.id))
            .key(self.keys.claimed_jobs())
            .arg(&claim.id)
            .arg(&claim.owner)
            .arg(claim.fence)
            .arg(micros(ttl))
            .arg(progress.map_or_else(String::new, serde_json::Value::to_string));
        decode::job_renewal(self.script(&invocation).await?)
    }

    /// Adds each of `claims` to a batch script's call, in order: its job's
    /// key, and its id, owner and fence as three arguments.
    fn add_claims(&self, invocation: &mut crate::scripts::Invocation<'_>, claims: &[JobClaim]) {
        for claim in claims {
            invocation
                .key(self.keys.job(&claim.id))
                .arg(&claim.id)
                .arg(&claim.owner)
                .arg(claim.fence);
        }
    }

    /// One script call adding `jobs` (already validated, at least one),
    /// each judged against the holders of its uniqueness key, if it has one.
    async fn enqueue_valid(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let mut invocation = SCRIPTS.enqueue.prepare_invoke();
        invocation.arg(self.keys.prefix());
        let mut indexes = Vec::new();
        for job in jobs {
            let (run_at, rank) = match job.run_at {
                Some(run_at) => {
                    let micros = clock::to_micros(run_at);
                    (micros.to_string(), run_at_rank(micros))
                }
                None => (String::new(), String::new()),
            };
            let capabilities = serde_json::to_string(&job.required_capabilities)
                .map_err(|error| Error::corrupt(format!("capabilities as JSON: {error}")))?;
            invocation
                .key(self.keys.job(&job.id))
                .arg(&job.id)
                .arg(&job.queue)
                .arg(job.payload.to_string())
                .arg(job.priority)
                .arg(run_at)
                .arg(rank)
                .arg(job.max_attempts)
                .arg(capabilities);
            match &job.unique {
                Some(unique) => {
                    let period = match unique.policy {
                        UniquePolicy::ForPeriod(period) => micros(period).to_string(),
                        _ => String::new(),
                    };
                    invocation
                        .arg(&unique.key)
                        .arg(unique.policy.kind())
                        .arg(period);
                    indexes.push(self.keys.unique(&job.queue, &unique.key));
                }
                None => {
                    invocation.arg("").arg("").arg("");
                }
            }
        }
        for index in indexes {
            invocation.key(index);
        }
        decode::enqueued(self.script(&invocation).await?, jobs)
    }

    async fn settle(&self, invocation: &crate::scripts::Invocation<'_>) -> Result<JobSettle> {
        decode::settle(self.script(invocation).await?)
    }
}

#[async_trait]
impl QueueBackend for RedisStore {
    async fn enqueue_batch(&self, jobs: Checked<&[NewJob]>) -> Result<Vec<Enqueued>> {
        let jobs = jobs.get();
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.enqueue_valid(jobs).await
    }

    async fn claim(&self, request: Checked<&ClaimRequest>) -> Result<Claimed> {
        let request = request.get();
        let mut invocation = SCRIPTS.claim.prepare_invoke();
        invocation
            .key(self.keys.ready(&request.queue))
            .key(self.keys.delayed(&request.queue))
            .key(self.keys.fence())
            .key(self.keys.claimed_jobs())
            .arg(self.keys.prefix())
            .arg(&request.queue)
            .arg(&request.worker)
            .arg(micros(request.ttl))
            .arg(request.limit)
            .arg(request.limit.saturating_mul(CLAIM_SCAN_PER_JOB))
            .arg(PROMOTE_BATCH);
        self.add_rate_limit(&mut invocation, request.rate_limit.as_ref());
        for capability in &request.capabilities {
            invocation.arg(capability);
        }
        decode::claimed(self.script(&invocation).await?, request.rate_limit.as_ref())
    }

    async fn renew_job(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<JobRenewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.renew_one_job(claim, ttl, None).await
    }

    async fn renew_job_with_progress(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<JobRenewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        self.renew_one_job(claim, ttl, Some(progress)).await
    }

    async fn renew_jobs(
        &self,
        claims: Checked<&[JobClaim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<JobRenewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = SCRIPTS.renew_jobs.prepare_invoke();
        invocation.key(self.keys.claimed_jobs()).arg(micros(ttl));
        self.add_claims(&mut invocation, claims);
        decode::job_renewals(self.script(&invocation).await?)
    }

    async fn complete(&self, claim: Checked<&JobClaim>) -> Result<JobSettle> {
        let claim = claim.get();
        let mut invocation = SCRIPTS.complete.prepare_invoke();
        invocation
            .key(self.keys.job(&claim.id))
            .key(self.keys.claimed_jobs())
            .key(self.keys.finished_jobs())
            .arg(&claim.id)
            .arg(&claim.owner)
            .arg(claim.fence);
        self.settle(&invocation).await
    }

    async fn complete_many(&self, claims: Checked<&[JobClaim]>) -> Result<Vec<JobSettle>> {
        let claims = claims.get();
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = SCRIPTS.complete_many.prepare_invoke();
        invocation
            .key(self.keys.claimed_jobs())
            .key(self.keys.finished_jobs());
        self.add_claims(&mut invocation, claims);
        decode::settles(self.script(&invocation).await?)
    }

    async fn fail(
        &self,
        claim: Checked<&JobClaim>,
        error: Checked<&str>,
        action: Checked<FailAction>,
    ) -> Result<JobSettle> {
        let (claim, error, action) = (claim.get(), error.get(), action.get());
        let (action, backoff) = match action {
            FailAction::Retry { backoff } => ("retry", micros(backoff)),
            FailAction::DeadLetter => ("dead_letter", 0),
        };
        let mut invocation = SCRIPTS.fail.prepare_invoke();
        invocation
            .key(self.keys.job(&claim.id))
            .arg(self.keys.prefix())
            .arg(&claim.id)
            .arg(&claim.owner)
            .arg(claim.fence)
            .arg(action)
            .arg(backoff)
            .arg(error);
        self.settle(&invocation).await
    }

    async fn defer(
        &self,
        claim: Checked<&JobClaim>,
        missing: Checked<&BTreeSet<String>>,
    ) -> Result<JobSettle> {
        let (claim, missing) = (claim.get(), missing.get());
        let mut invocation = SCRIPTS.defer.prepare_invoke();
        invocation
            .key(self.keys.job(&claim.id))
            .arg(self.keys.prefix())
            .arg(&claim.id)
            .arg(&claim.owner)
            .arg(claim.fence);
        for capability in missing {
            invocation.arg(capability);
        }
        self.settle(&invocation).await
    }

    async fn reap(&self, grace: Checked<Duration>) -> Result<ReapReport> {
        let grace = grace.get();
        let mut invocation = SCRIPTS.reap.prepare_invoke();
        invocation
            .key(self.keys.claimed_jobs())
            .arg(self.keys.prefix())
            .arg(tenure_lease_core::clock::micros_rounded_up(grace))
            .arg(tenure_lease_core::backend::queue_rules::MAX_REAP);
        decode::reaped(self.script(&invocation).await?)
    }

    async fn take_back(
        &self,
        claim: Checked<&JobClaim>,
        ttl: Checked<Duration>,
    ) -> Result<TakeBack> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let mut invocation = SCRIPTS.take_back.prepare_invoke();
        invocation
            .key(self.keys.job(&claim.id))
            .key(self.keys.fence())
            .key(self.keys.claimed_jobs())
            .arg(self.keys.prefix())
            .arg(&claim.id)
            .arg(&claim.owner)
            .arg(claim.fence)
            .arg(micros(ttl));
        decode::take_back(self.script(&invocation).await?)
    }

    async fn get_job(&self, id: Checked<&str>) -> Result<Option<Job>> {
        let id = id.get();
        let mut invocation = SCRIPTS.get.prepare_invoke();
        invocation.key(self.keys.job(id)).arg(id);
        Ok(decode::jobs(self.script(&invocation).await?)?.pop())
    }

    async fn list_dead_letters(
        &self,
        queue: Checked<&str>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let mut invocation = SCRIPTS.list_dead_letters.prepare_invoke();
        invocation
            .key(self.keys.dead_letters(queue))
            .arg(self.keys.prefix())
            .arg(limit);
        decode::jobs(self.script(&invocation).await?)
    }

    async fn list_jobs(
        &self,
        queue: Checked<&str>,
        state: Option<JobState>,
        limit: Checked<usize>,
    ) -> Result<Vec<Job>> {
        let (queue, limit) = (queue.get(), limit.get());
        let mut invocation = SCRIPTS.list_jobs.prepare_invoke();
        invocation
            .key(self.keys.ready(queue))
            .key(self.keys.delayed(queue))
            .key(self.keys.claimed_jobs())
            .key(self.keys.finished_jobs())
            .key(self.keys.dead_letters(queue))
            .arg(self.keys.prefix())
            .arg(queue)
            .arg(state.map_or("", JobState::as_str))
            .arg(limit);
        decode::jobs(self.script(&invocation).await?)
    }

    /// Walks the job hashes a page at a time (`count_jobs.lua`), keeping
    /// the keys seen so far: `SCAN` may hand a key out twice while the
    /// keyspace is resized.
    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        let pattern = self.keys.jobs_pattern();
        let mut seen = HashSet::new();
        let mut groups = HashMap::<(String, String), u64>::new();
        let mut cursor = "0".to_owned();
        loop {
            let mut invocation = SCRIPTS.count_jobs.prepare_invoke();
            invocation
                .key(self.keys.finished_jobs())
                .arg(&cursor)
                .arg(&pattern)
                .arg(SCAN_COUNT);
            let (next, page) = decode::count_page(self.script(&invocation).await?)?;
            for (key, queue, state) in page {
                if !seen.insert(key) {
                    continue;
                }
                if queue.is_empty() {
                    tracing::warn!(
                        "count_jobs left out a job hash without a readable queue; it needs an \
                         operator's attention"
                    );
                    continue;
                }
                *groups.entry((queue, state)).or_default() += 1;
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        Ok(rules::count_stored_states(
            "redis",
            groups
                .into_iter()
                .map(|((queue, state), count)| (queue, state, count)),
        ))
    }

    async fn retry_dead_letter(&self, id: Checked<&str>) -> Result<OperatorRetry> {
        let id = id.get();
        let mut invocation = SCRIPTS.retry_dead_letter.prepare_invoke();
        invocation
            .key(self.keys.job(id))
            .arg(self.keys.prefix())
            .arg(id);
        decode::operator_retry(self.script(&invocation).await?)
    }

    /// Deletes in batches of up to 1000 jobs,
    /// one script call each, until a batch finds fewer, as
    /// [`purge`](tenure_lease_core::LeaseStore::purge) does for records: each batch
    /// is atomic, the whole purge need not be (a due finished job stays due).
    /// A due job still holding its `ForPeriod` key stays in the finished
    /// index, ahead of the due jobs not yet looked at, so each later batch
    /// passes over those kept so far; the next purge looks at them again.
    /// Only jobs finished by this version or later are in the finished
    /// index this walks: a job finished under an older version stays until
    /// an operator deletes it or [`RedisStore::delete_namespace`] runs.
    async fn purge_jobs(&self, finished_older_than: Checked<Duration>) -> Result<u64> {
        let finished_older_than = finished_older_than.get();
        let mut purged = 0_u64;
        let mut kept_so_far = 0_u64;
        loop {
            let mut invocation = SCRIPTS.purge_jobs.prepare_invoke();
            invocation
                .key(self.keys.finished_jobs())
                .arg(self.keys.prefix())
                .arg(clock::micros_rounded_up(finished_older_than))
                .arg(crate::PURGE_BATCH)
                .arg(kept_so_far);
            let (deleted, looked_at, unreadable, kept) =
                <(u64, u64, u64, u64)>::from_redis_value(self.script(&invocation).await?)
                    .map_err(|error| Error::corrupt(format!("purge_jobs.lua answered {error}")))?;
            kept_so_far = kept_so_far.saturating_add(kept);
            if unreadable > 0 {
                tracing::warn!(
                    unreadable,
                    prefix = self.keys.prefix(),
                    "purge_jobs met finished job ids whose key is not a hash; left them in place and dropped them from the finished index"
                );
            }
            purged = purged.saturating_add(deleted);
            if looked_at < crate::PURGE_BATCH as u64 {
                return Ok(purged);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_at_ranks_sort_as_instants() {
        let instants = [
            i64::MIN,
            -10_000_000_000,
            -1,
            0,
            1,
            1_700_000_000_000_000,
            i64::MAX,
        ];
        let ranks: Vec<String> = instants.iter().map(|&micros| run_at_rank(micros)).collect();
        assert!(ranks.iter().all(|rank| rank.len() == 20), "{ranks:?}");
        assert!(ranks.windows(2).all(|pair| pair[0] < pair[1]), "{ranks:?}");
        // The form the scripts build for store times (lua/queue_common.lua).
        assert_eq!(run_at_rank(1_700_000_000_000_000), "p0001700000000000000");
    }
}
