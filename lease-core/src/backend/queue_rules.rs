//! The queue contract's decisions as pure functions
//! ([contract §9](crate::contract)), shared by every backend that decides in
//! Rust and mirrored by those that cannot (Redis Lua), as [`crate::backend::rules`] is
//! for leases.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::time::Duration;

use crate::clock::{self, Timestamp};
use crate::queue::{
    DeadReason, FailAction, Job, JobClaim, JobLoss, JobState, JobUnique, NewJob, QueueCounts,
    TakeBackRefusal, UniquePolicy,
};

pub use crate::limits::{MAX_ATTEMPTS, MAX_CLAIM, MAX_PAYLOAD_BYTES, MAX_REAP};

/// An attempt count (`attempt` or `max_attempts`) read from a store, checked
/// as every backend decodes it: the contract never writes one above
/// [`MAX_ATTEMPTS`], so a larger one is damage (and `claim`'s `attempt + 1`
/// cannot overflow).
///
/// # Errors
///
/// The reason, naming `field`, when `count` is above [`MAX_ATTEMPTS`]; the
/// backend reports it as a `Corrupt` record.
pub fn stored_attempt_count(field: &str, count: u32) -> Result<u32, String> {
    if count > MAX_ATTEMPTS {
        return Err(format!(
            "{field} is {count}, above the largest max_attempts ({MAX_ATTEMPTS})"
        ));
    }
    Ok(count)
}

/// [`count_jobs`](crate::JobQueue::count_jobs)'s answer from `(queue,
/// state, count)` rows as a store keeps them, the state by its stored name
/// ([`JobState::as_str`]), a queue's states possibly on several rows. A row
/// whose state is no state's name is left out, with a warning naming
/// `backend`: the contract never writes one, so it is damage.
pub fn count_stored_states(
    backend: &str,
    rows: impl IntoIterator<Item = (String, String, u64)>,
) -> Vec<QueueCounts> {
    QueueCounts::tally(rows.into_iter().filter_map(|(queue, state, count)| {
        match state.parse::<JobState>() {
            Ok(state) => Some((queue, state, count)),
            Err(_) => {
                tracing::warn!(
                    backend,
                    queue = %queue,
                    state = %state,
                    jobs = count,
                    "count_jobs left out jobs whose stored state is no state's name; they \
                     need an operator's attention"
                );
                None
            }
        }
    }))
}

/// The job `enqueue` stores.
pub fn new_job(new: &NewJob, now: Timestamp) -> Job {
    Job {
        id: new.id.clone(),
        queue: new.queue.clone(),
        payload: new.payload.clone(),
        priority: new.priority,
        run_at: new.run_at.map_or(now, clock::truncate_to_micros),
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
    }
}

/// Whether `job` holds its uniqueness key at `now` ([contract
/// §9, unique jobs](crate::contract)): it has one, and its policy is met (queued;
/// queued or claimed; `now` before its creation plus the period).
pub fn holds_unique_key(job: &Job, now: Timestamp) -> bool {
    let Some(unique) = &job.unique else {
        return false;
    };
    match unique.policy {
        UniquePolicy::WhileQueued => job.state == JobState::Queued,
        UniquePolicy::WhileUnfinished => matches!(job.state, JobState::Queued | JobState::Claimed),
        UniquePolicy::ForPeriod(period) => clock::is_before_end(job.created_at, period, now),
    }
}

/// The take-back trace (`taken_back`, `taken_back_at`) read from a store,
/// checked as every backend decodes it: a count without an instant, or an
/// instant without a count, is damage (the contract writes both or
/// neither). A store that keeps no trace for a job (one written by an
/// older version) reads as `(0, None)`.
///
/// # Errors
///
/// The reason, when one is given without the other; the backend reports
/// it as a `Corrupt` record.
pub fn stored_take_back_trace(
    taken_back: u32,
    taken_back_at: Option<Timestamp>,
) -> Result<(u32, Option<Timestamp>), String> {
    match (taken_back, taken_back_at) {
        (0, Some(_)) => Err("taken_back_at is set but taken_back is 0".to_owned()),
        (1.., None) => Err(format!(
            "taken_back is {taken_back} but taken_back_at is missing"
        )),
        trace => Ok(trace),
    }
}

/// A job's uniqueness key read from the three parts a store keeps (the
/// key, the [kind](UniquePolicy::kind) of policy, and the period's end,
/// [`Job::unique_until`]), checked as every backend decodes it: all
/// absent is a job without a key; a key without a kind or the reverse, an
/// unknown kind, an end without `for_period` or the reverse, an end not
/// after `created_at`, or a key or period no enqueue accepts is damage.
///
/// # Errors
///
/// The reason; the backend reports it as a `Corrupt` record.
pub fn stored_unique(
    key: Option<String>,
    kind: Option<&str>,
    until: Option<Timestamp>,
    created_at: Timestamp,
) -> Result<Option<JobUnique>, String> {
    let (key, kind) = match (key, kind) {
        (None, None) if until.is_none() => return Ok(None),
        (Some(key), Some(kind)) => (key, kind),
        _ => {
            return Err(
                "unique_key, unique_policy and unique_until are set only in part".to_owned(),
            )
        }
    };
    let policy = match (kind, until) {
        ("while_queued", None) => UniquePolicy::WhileQueued,
        ("while_unfinished", None) => UniquePolicy::WhileUnfinished,
        ("for_period", Some(until)) if until > created_at => {
            UniquePolicy::ForPeriod(clock::until(created_at, until))
        }
        ("for_period", _) => {
            return Err(format!(
                "unique_until {until:?} does not end a period after created_at {created_at}"
            ))
        }
        (kind, _) => {
            return Err(format!(
                "unique_policy {kind:?} is no policy this version knows, or has an end"
            ))
        }
    };
    let unique = JobUnique { key, policy };
    super::validate::job_unique(&unique).map_err(|error| error.message().to_owned())?;
    Ok(Some(unique))
}

/// Whether `claim` still holds `job`, else why not.
pub fn judge_job(job: Option<&Job>, claim: &JobClaim) -> Result<(), JobLoss> {
    let job = job.ok_or(JobLoss::Missing)?;
    match job.state {
        JobState::Completed | JobState::DeadLettered => Err(JobLoss::Finished(job.state)),
        JobState::Queued => Err(JobLoss::Requeued),
        _ if job.owner.as_deref() != Some(claim.owner.as_str()) => Err(JobLoss::OwnerChanged),
        _ if job.fence != claim.fence => Err(JobLoss::FenceChanged),
        _ => Ok(()),
    }
}

/// Whether a worker with `capabilities` may claim `job` from `queue` at `now`.
pub fn claimable(job: &Job, queue: &str, capabilities: &BTreeSet<String>, now: Timestamp) -> bool {
    job.state == JobState::Queued
        && job.queue == queue
        && job.run_at <= now
        && job.required_capabilities.is_subset(capabilities)
        // Never true of a job the contract wrote (a queued job has attempts
        // left, and max_attempts is at most MAX_ATTEMPTS); a damaged count
        // must not be claimed into one no store can read back.
        && job.attempt < MAX_ATTEMPTS
}

/// Sort key of `claim`: priority descending, then `run_at`, creation, id.
pub fn claim_order(job: &Job) -> (Reverse<i32>, Timestamp, Timestamp, &str) {
    (
        Reverse(job.priority),
        job.run_at,
        job.created_at,
        job.id.as_str(),
    )
}

/// Applies a claim: owner, lease, `attempt + 1`, the new fence.
pub fn claim_job(
    job: &mut Job,
    worker: &str,
    ttl: Duration,
    fence: u64,
    now: Timestamp,
) -> JobClaim {
    job.state = JobState::Claimed;
    job.owner = Some(worker.to_owned());
    job.fence = fence;
    job.attempt = job.attempt.saturating_add(1);
    job.lease_expires_at = Some(clock::add(now, ttl));
    job.dead_reason = None;
    job.updated_at = now;
    JobClaim {
        id: job.id.clone(),
        owner: worker.to_owned(),
        fence,
        attempt: job.attempt,
    }
}

/// Applies a renewal; answers the new expiry.
pub fn renew_job(job: &mut Job, ttl: Duration, now: Timestamp) -> Timestamp {
    let expires_at = clock::add(now, ttl);
    job.lease_expires_at = Some(expires_at);
    job.updated_at = now;
    expires_at
}

/// Applies `complete`.
pub fn complete_job(job: &mut Job, now: Timestamp) {
    job.state = JobState::Completed;
    job.lease_expires_at = None;
    job.updated_at = now;
}

/// Applies `fail`.
pub fn fail_job(job: &mut Job, error: &str, action: FailAction, now: Timestamp) {
    job.last_error = Some(error.to_owned());
    job.lease_expires_at = None;
    job.updated_at = now;
    match action {
        FailAction::Retry { backoff } if job.attempt < job.max_attempts => {
            job.state = JobState::Queued;
            job.run_at = clock::add(now, backoff);
        }
        FailAction::Retry { .. } => dead_letter(job, DeadReason::AttemptsExhausted),
        FailAction::DeadLetter => dead_letter(job, DeadReason::Failed),
    }
}

fn dead_letter(job: &mut Job, reason: DeadReason) {
    job.state = JobState::DeadLettered;
    job.dead_reason = Some(reason);
}

/// Applies `defer`: un-claimed, attempt refunded, requirement stamped,
/// visible at once.
pub fn defer_job(job: &mut Job, missing: &BTreeSet<String>, now: Timestamp) {
    job.state = JobState::Queued;
    job.attempt = job.attempt.saturating_sub(1);
    job.required_capabilities.extend(missing.iter().cloned());
    job.run_at = now;
    job.lease_expires_at = None;
    job.updated_at = now;
}

/// Whether the reaper should handle `job` at `now`: claimed, lease expired
/// beyond `grace`.
pub fn reapable(job: &Job, grace: Duration, now: Timestamp) -> bool {
    job.state == JobState::Claimed
        && job
            .lease_expires_at
            .is_some_and(|expires| !clock::is_before_end(expires, grace, now))
}

/// Sort key of `reap`: oldest expiry first, then id.
pub fn reap_order(job: &Job) -> (Option<Timestamp>, &str) {
    (job.lease_expires_at, job.id.as_str())
}

/// Applies the reaper: requeued (visible at once) when attempts are left,
/// else dead-lettered with [`DeadReason::LeaseExpired`]. Answers whether it
/// was requeued. The owner and fence stay, so the live copy can prove it
/// held the reaped claim in [`judge_take_back`].
pub fn reap_job(job: &mut Job, now: Timestamp) -> bool {
    job.lease_expires_at = None;
    job.updated_at = now;
    if job.attempt < job.max_attempts {
        job.state = JobState::Queued;
        job.run_at = now;
        true
    } else {
        dead_letter(job, DeadReason::LeaseExpired);
        false
    }
}

/// Whether `claim` may take back `job`, else why not.
pub fn judge_take_back(job: Option<&Job>, claim: &JobClaim) -> Result<(), TakeBackRefusal> {
    let job = job.ok_or(TakeBackRefusal::Missing)?;
    if job.state != JobState::DeadLettered {
        return Err(TakeBackRefusal::NotDeadLettered(job.state));
    }
    match job.dead_reason {
        Some(DeadReason::LeaseExpired) => {}
        Some(other) => return Err(TakeBackRefusal::NotByReaper(other)),
        None => return Err(TakeBackRefusal::NotDeadLettered(job.state)),
    }
    if job.owner.as_deref() != Some(claim.owner.as_str()) || job.fence != claim.fence {
        return Err(TakeBackRefusal::NotTheReapedClaim);
    }
    Ok(())
}

/// Applies a take-back: claimed again by the same worker under a new fence,
/// attempt unchanged, and the trace of it left on the job (`taken_back`
/// counted up, saturating, `taken_back_at` now).
pub fn take_back_job(job: &mut Job, ttl: Duration, fence: u64, now: Timestamp) -> JobClaim {
    job.taken_back = job.taken_back.saturating_add(1);
    job.taken_back_at = Some(now);
    job.state = JobState::Claimed;
    job.dead_reason = None;
    job.fence = fence;
    job.lease_expires_at = Some(clock::add(now, ttl));
    job.updated_at = now;
    JobClaim {
        id: job.id.clone(),
        owner: job.owner.clone().unwrap_or_default(),
        fence,
        attempt: job.attempt,
    }
}

/// Applies an operator's retry of a dead letter: queued, attempts reset,
/// visible at once.
pub fn retry_dead_letter(job: &mut Job, now: Timestamp) {
    job.state = JobState::Queued;
    job.dead_reason = None;
    job.attempt = 0;
    job.run_at = now;
    job.updated_at = now;
}

/// The first `limit` of `jobs` in [`claim_order`]: what a store that
/// cannot walk its queued jobs in that order answers the queue engine's
/// `claim_candidates` with.
pub fn first_in_claim_order(mut jobs: Vec<Job>, limit: usize) -> Vec<Job> {
    jobs.sort_by(|a, b| claim_order(a).cmp(&claim_order(b)));
    jobs.truncate(limit);
    jobs
}

/// The first `limit` of `jobs` in [`reap_order`], as
/// [`first_in_claim_order`] for `reap_candidates`.
pub fn first_in_reap_order(mut jobs: Vec<Job>, limit: usize) -> Vec<Job> {
    jobs.sort_by(|a, b| reap_order(a).cmp(&reap_order(b)));
    jobs.truncate(limit);
    jobs
}

/// Sort key of `list_jobs`: oldest first, then id.
pub fn job_listing_order(job: &Job) -> (Timestamp, &str) {
    (job.created_at, job.id.as_str())
}

/// Sort key of `list_dead_letters`: oldest update first, then id.
pub fn dead_letter_order(job: &Job) -> (Timestamp, &str) {
    (job.updated_at, job.id.as_str())
}

/// Whether `job` is finished (completed or dead-lettered) and finished at
/// least `older_than` before `now`, so
/// [`purge_jobs`](crate::queue::JobQueue::purge_jobs) deletes it. A finished job's
/// `updated_at` is its finish time: no operation changes a finished job
/// without making it unfinished. A job holding its
/// [`ForPeriod`](UniquePolicy::ForPeriod) key stays until the period ends,
/// since deleting it would release the key early.
pub fn job_purgeable(job: &Job, older_than: Duration, now: Timestamp) -> bool {
    matches!(job.state, JobState::Completed | JobState::DeadLettered)
        && !clock::is_before_end(job.updated_at, older_than, now)
        && job.unique_until().is_none_or(|until| until <= now)
}
