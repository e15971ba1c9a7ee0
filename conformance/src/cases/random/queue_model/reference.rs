//! The reference: contract §9 written down a second time, as plainly as it
//! reads, over whole [`Job`] values, independent of the shared rules the
//! backends use. Every change takes the instant and the fences the store
//! drew (the runner checks those against the step's window and the fence
//! order first), so the model predicts every other field exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tenure_lease_core::queue::{
    DeadReason, FailAction, Job, JobClaim, JobLoss, JobState, NewJob, QueueCounts, TakeBackRefusal,
    UniquePolicy,
};
use tenure_lease_core::{clock, Timestamp};

/// Why an enqueue is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnqueueRefusal {
    /// An id of the batch is in use.
    AlreadyExists,
    /// An id appears twice in the batch.
    DuplicateInBatch,
}

/// Whether `job` holds its uniqueness key at `now`: queued (while
/// queued), queued or claimed (while unfinished), or before its creation
/// plus the period.
fn holds_its_key(job: &Job, now: Timestamp) -> bool {
    match job.unique.as_ref().map(|unique| unique.policy) {
        Some(UniquePolicy::WhileQueued) => job.state == JobState::Queued,
        Some(UniquePolicy::WhileUnfinished) => {
            matches!(job.state, JobState::Queued | JobState::Claimed)
        }
        Some(UniquePolicy::ForPeriod(period)) => now < clock::add(job.created_at, period),
        _ => false,
    }
}

/// The jobs the store should hold.
#[derive(Debug, Default)]
pub(crate) struct Model {
    jobs: BTreeMap<String, Job>,
}

impl Model {
    pub(crate) fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id)
    }

    /// Whether `jobs` would all be enqueued, else why not (duplicates
    /// judged first: they make the request itself wrong).
    pub(crate) fn judge_enqueue(&self, jobs: &[NewJob]) -> Result<(), EnqueueRefusal> {
        let mut seen = BTreeSet::new();
        if !jobs.iter().all(|job| seen.insert(job.id.as_str())) {
            return Err(EnqueueRefusal::DuplicateInBatch);
        }
        if jobs.iter().any(|job| self.jobs.contains_key(&job.id)) {
            return Err(EnqueueRefusal::AlreadyExists);
        }
        Ok(())
    }

    /// Enqueues `jobs` (already judged) at `now`; answers them as stored.
    pub(crate) fn enqueue(&mut self, jobs: &[NewJob], now: Timestamp) -> Vec<Job> {
        jobs.iter().map(|new| self.create(new, now)).collect()
    }

    /// `enqueue_unique_batch` of `jobs` (ids already judged) at `now`: in
    /// order, each created unless a job of its queue holds its key (that
    /// job named, the earliest created, then least id); answers whether
    /// each was created, with the job created or named.
    pub(crate) fn enqueue_unique(&mut self, jobs: &[NewJob], now: Timestamp) -> Vec<(bool, Job)> {
        jobs.iter()
            .map(|new| match self.key_holder(new, now) {
                Some(holder) => (false, holder),
                None => (true, self.create(new, now)),
            })
            .collect()
    }

    /// The job of `new`'s queue holding `new`'s key at `now`, if it has one.
    fn key_holder(&self, new: &NewJob, now: Timestamp) -> Option<Job> {
        let key = &new.unique.as_ref()?.key;
        self.jobs
            .values()
            .filter(|job| job.queue == new.queue)
            .filter(|job| job.unique.as_ref().is_some_and(|held| &held.key == key))
            .filter(|job| holds_its_key(job, now))
            .min_by_key(|job| (job.created_at, job.id.clone()))
            .cloned()
    }

    /// Stores the job `new` describes at `now`; answers it.
    fn create(&mut self, new: &NewJob, now: Timestamp) -> Job {
        let job = Job {
            id: new.id.clone(),
            queue: new.queue.clone(),
            payload: new.payload.clone(),
            priority: new.priority,
            run_at: new.run_at.unwrap_or(now),
            attempt: 0,
            max_attempts: new.max_attempts,
            required_capabilities: new.required_capabilities.clone(),
            state: JobState::Queued,
            owner: None,
            fence: 0,
            lease_expires_at: None,
            last_error: None,
            dead_reason: None,
            created_at: now,
            updated_at: now,
            taken_back: 0,
            taken_back_at: None,
            progress: None,
            unique: new.unique.clone(),
        };
        self.jobs.insert(job.id.clone(), job.clone());
        job
    }

    /// The ids `claim` hands out at `now`, best first: queued jobs of
    /// `queue`, due, needing nothing `capabilities` lacks; higher priority,
    /// then earlier `run_at`, then earlier creation, then id.
    pub(crate) fn claimable(
        &self,
        queue: &str,
        capabilities: &BTreeSet<String>,
        limit: usize,
        now: Timestamp,
    ) -> Vec<String> {
        let mut due: Vec<&Job> = self
            .jobs
            .values()
            .filter(|job| {
                job.state == JobState::Queued
                    && job.queue == queue
                    && job.run_at <= now
                    && job.required_capabilities.is_subset(capabilities)
            })
            .collect();
        due.sort_by_key(|job| {
            (
                Reverse(job.priority),
                job.run_at,
                job.created_at,
                job.id.clone(),
            )
        });
        due.into_iter()
            .take(limit)
            .map(|job| job.id.clone())
            .collect()
    }

    /// `worker` claims `id` under `fence` for `ttl` at `now`.
    pub(crate) fn claim(
        &mut self,
        id: &str,
        worker: &str,
        fence: u64,
        ttl: Duration,
        now: Timestamp,
    ) -> Option<Job> {
        let job = self.jobs.get_mut(id)?;
        job.state = JobState::Claimed;
        job.owner = Some(worker.to_owned());
        job.fence = fence;
        job.attempt += 1;
        job.lease_expires_at = Some(clock::add(now, ttl));
        job.dead_reason = None;
        job.updated_at = now;
        Some(job.clone())
    }

    /// Whether `claim` still holds its job, else the first reason it does
    /// not: gone, finished, back in the queue, another owner, another fence.
    pub(crate) fn judge(&self, claim: &JobClaim) -> Result<(), JobLoss> {
        let Some(job) = self.jobs.get(&claim.id) else {
            return Err(JobLoss::Missing);
        };
        match job.state {
            JobState::Queued => Err(JobLoss::Requeued),
            JobState::Claimed if job.owner.as_deref() != Some(&claim.owner) => {
                Err(JobLoss::OwnerChanged)
            }
            JobState::Claimed if job.fence != claim.fence => Err(JobLoss::FenceChanged),
            JobState::Claimed => Ok(()),
            finished => Err(JobLoss::Finished(finished)),
        }
    }

    /// Renews the (held) job `id` for `ttl` at `now`, recording `progress`
    /// when there is one.
    pub(crate) fn renew(
        &mut self,
        id: &str,
        ttl: Duration,
        now: Timestamp,
        progress: Option<&serde_json::Value>,
    ) -> Option<Timestamp> {
        let job = self.jobs.get_mut(id)?;
        let expires_at = clock::add(now, ttl);
        job.lease_expires_at = Some(expires_at);
        if let Some(progress) = progress {
            job.progress = Some(progress.clone());
        }
        job.updated_at = now;
        Some(expires_at)
    }

    /// Completes the (held) job `id` at `now`.
    pub(crate) fn complete(&mut self, id: &str, now: Timestamp) -> Option<Job> {
        let job = self.jobs.get_mut(id)?;
        job.state = JobState::Completed;
        job.lease_expires_at = None;
        job.updated_at = now;
        Some(job.clone())
    }

    /// Fails the (held) job `id` with `error` at `now`.
    pub(crate) fn fail(
        &mut self,
        id: &str,
        error: &str,
        action: FailAction,
        now: Timestamp,
    ) -> Option<Job> {
        let job = self.jobs.get_mut(id)?;
        job.last_error = Some(error.to_owned());
        job.lease_expires_at = None;
        job.updated_at = now;
        match action {
            FailAction::Retry { backoff } if job.attempt < job.max_attempts => {
                job.state = JobState::Queued;
                job.run_at = clock::add(now, backoff);
            }
            FailAction::Retry { .. } => {
                job.state = JobState::DeadLettered;
                job.dead_reason = Some(DeadReason::AttemptsExhausted);
            }
            FailAction::DeadLetter => {
                job.state = JobState::DeadLettered;
                job.dead_reason = Some(DeadReason::Failed);
            }
        }
        Some(job.clone())
    }

    /// Defers the (held) job `id`, `missing` capabilities, at `now`.
    pub(crate) fn defer(
        &mut self,
        id: &str,
        missing: &BTreeSet<String>,
        now: Timestamp,
    ) -> Option<Job> {
        let job = self.jobs.get_mut(id)?;
        job.state = JobState::Queued;
        job.attempt = job.attempt.saturating_sub(1);
        job.required_capabilities.extend(missing.iter().cloned());
        job.run_at = now;
        job.lease_expires_at = None;
        job.updated_at = now;
        Some(job.clone())
    }

    /// The ids `reap` with no grace handles at `now`: claimed jobs whose
    /// lease ended.
    pub(crate) fn reapable(&self, now: Timestamp) -> Vec<String> {
        self.jobs
            .values()
            .filter(|job| {
                job.state == JobState::Claimed
                    && job.lease_expires_at.is_some_and(|expires| expires <= now)
            })
            .map(|job| job.id.clone())
            .collect()
    }

    /// Reaps `id` at `now`: requeued while attempts are left, else
    /// dead-lettered; owner and fence kept.
    pub(crate) fn reap(&mut self, id: &str, now: Timestamp) -> Option<Job> {
        let job = self.jobs.get_mut(id)?;
        job.lease_expires_at = None;
        job.updated_at = now;
        if job.attempt < job.max_attempts {
            job.state = JobState::Queued;
            job.run_at = now;
        } else {
            job.state = JobState::DeadLettered;
            job.dead_reason = Some(DeadReason::LeaseExpired);
        }
        Some(job.clone())
    }

    /// Whether `claim`'s copy may take its job back.
    pub(crate) fn judge_take_back(&self, claim: &JobClaim) -> Result<(), TakeBackRefusal> {
        let Some(job) = self.jobs.get(&claim.id) else {
            return Err(TakeBackRefusal::Missing);
        };
        match (job.state, job.dead_reason) {
            (JobState::DeadLettered, Some(DeadReason::LeaseExpired)) => {}
            (JobState::DeadLettered, Some(other)) => {
                return Err(TakeBackRefusal::NotByReaper(other))
            }
            (state, _) => return Err(TakeBackRefusal::NotDeadLettered(state)),
        }
        if job.owner.as_deref() != Some(&claim.owner) || job.fence != claim.fence {
            return Err(TakeBackRefusal::NotTheReapedClaim);
        }
        Ok(())
    }

    /// Takes `id` back under `fence` for `ttl` at `now`.
    pub(crate) fn take_back(
        &mut self,
        id: &str,
        fence: u64,
        ttl: Duration,
        now: Timestamp,
    ) -> Option<Job> {
        let job = self.jobs.get_mut(id)?;
        job.state = JobState::Claimed;
        job.dead_reason = None;
        job.fence = fence;
        job.lease_expires_at = Some(clock::add(now, ttl));
        job.updated_at = now;
        job.taken_back = job.taken_back.saturating_add(1);
        job.taken_back_at = Some(now);
        Some(job.clone())
    }

    /// The state an operator's retry of `id` finds, if the job exists.
    pub(crate) fn state_of(&self, id: &str) -> Option<JobState> {
        self.jobs.get(id).map(|job| job.state)
    }

    /// An operator retries the dead letter `id` at `now`.
    pub(crate) fn retry_dead_letter(&mut self, id: &str, now: Timestamp) -> Option<Job> {
        let job = self.jobs.get_mut(id)?;
        job.state = JobState::Queued;
        job.dead_reason = None;
        job.attempt = 0;
        job.run_at = now;
        job.updated_at = now;
        Some(job.clone())
    }

    /// Deletes every finished job (all of them: each finished at an earlier
    /// step) but those holding a period's key at `now`; answers how many.
    pub(crate) fn purge_finished(&mut self, now: Timestamp) -> u64 {
        let before = self.jobs.len();
        self.jobs.retain(|_, job| {
            let finished = matches!(job.state, JobState::Completed | JobState::DeadLettered);
            let period_held = matches!(
                job.unique.as_ref().map(|unique| unique.policy),
                Some(UniquePolicy::ForPeriod(_))
            ) && holds_its_key(job, now);
            !finished || period_held
        });
        (before - self.jobs.len()) as u64
    }

    /// `count_jobs`: every queue with a job, its jobs counted by state.
    pub(crate) fn count_jobs(&self) -> Vec<QueueCounts> {
        QueueCounts::tally(
            self.jobs
                .values()
                .map(|job| (job.queue.as_str(), job.state, 1)),
        )
    }

    /// `list_jobs`: the jobs of `queue` (in `state`, if given), oldest
    /// first, then by id, at most `limit`.
    pub(crate) fn list_jobs(&self, queue: &str, state: Option<JobState>, limit: usize) -> Vec<Job> {
        let mut jobs: Vec<&Job> = self
            .jobs
            .values()
            .filter(|job| job.queue == queue && state.is_none_or(|state| job.state == state))
            .collect();
        jobs.sort_by_key(|job| (job.created_at, job.id.clone()));
        jobs.into_iter().take(limit).cloned().collect()
    }

    /// `list_dead_letters`: the dead letters of `queue`, oldest update
    /// first, then by id, at most `limit`.
    pub(crate) fn list_dead_letters(&self, queue: &str, limit: usize) -> Vec<Job> {
        let mut jobs: Vec<&Job> = self
            .jobs
            .values()
            .filter(|job| job.queue == queue && job.state == JobState::DeadLettered)
            .collect();
        jobs.sort_by_key(|job| (job.updated_at, job.id.clone()));
        jobs.into_iter().take(limit).cloned().collect()
    }
}
