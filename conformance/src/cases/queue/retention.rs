//! Conformance cases: job retention, `purge_jobs`
//! ([contract §9](tenure_lease_core::contract)), and that `purge` and `purge_jobs`
//! together leave nothing behind that grows with the work a store has done.
//!
//! A queue that only ever adds rows fills its disk or its memory: finished
//! jobs must go once they are older than the retention, and with them every
//! index entry the store kept for them, while every unfinished job stays
//! whatever its age. Age counts from the finish (the job's last settle),
//! never from the enqueue.
//!
//! On a clock only the kit moves, ages are exact to the microsecond. On a
//! server's clock the kit cannot know the instant a purge judges by, only
//! that it lies between the clock reads just before and just after the
//! call: a young job is required to stay only when even the later read
//! makes it younger than the retention, so a starved machine makes a check
//! weaker, never wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::backend::validate::MAX_RETENTION;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, DeadReason, FailAction, Job, JobLoss, JobRenewal, JobSettle,
    JobState, NewJob, OperatorRetry, TakeBack, TakeBackRefusal, UniquePolicy,
};
use tenure_lease_core::{
    clock, AdmitRequest, JobQueue, LeaseRecord, StatusChange, TakeoverRequest, Timestamp,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, ensure_footprint_kept, expect_invalid, take_over,
    LONG_GRACE, LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, ClockControl, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The queue most cases use.
const QUEUE: &str = "retained";

/// The retention the cases purge with.
const RETENTION: Duration = Duration::from_millis(200);

/// Further than any case reaches: a delay or backoff that keeps a job
/// invisible, or a retention that keeps every job of a case.
const FAR: Duration = Duration::from_secs(3600);

/// A job of `queue` with id `id` and a payload naming it.
fn job_in(queue: &str, id: &str) -> NewJob {
    NewJob::new(queue, json!({ "job": id })).id(id)
}

/// A job of [`QUEUE`].
fn job(id: &str) -> NewJob {
    job_in(QUEUE, id)
}

/// Enqueues `new` and claims it (and only it) from its queue for `worker`.
async fn enqueue_and_claim<S: JobQueue>(
    ctx: &Ctx<S>,
    new: NewJob,
    worker: &str,
    ttl: Duration,
) -> Result<ClaimedJob, Failure> {
    ctx.store.enqueue(&new).await?;
    claim_only(ctx, &new.queue, worker, ttl, &new.id).await
}

/// Claims one job of `queue`, failing the case unless it is `id`.
async fn claim_only<S: JobQueue>(
    ctx: &Ctx<S>,
    queue: &str,
    worker: &str,
    ttl: Duration,
    id: &str,
) -> Result<ClaimedJob, Failure> {
    let mut claimed = ctx
        .store
        .claim(&ClaimRequest::new(queue, worker, ttl))
        .await?;
    ensure_eq!(
        claimed
            .iter()
            .map(|c| c.job.id.as_str())
            .collect::<Vec<_>>(),
        vec![id],
        "{worker} claims the one visible job of {queue:?}"
    );
    claimed
        .pop()
        .ok_or_else(|| Failure(format!("{worker} claimed nothing")))
}

/// The job a settle answered, failing the case unless it was settled into
/// `state`.
fn settled(outcome: JobSettle, state: JobState, what: &str) -> Result<Job, Failure> {
    match outcome {
        JobSettle::Settled(job) if job.state == state => Ok(job),
        other => Err(Failure(format!(
            "expected {what} to settle the job as {state}, got {other:?}"
        ))),
    }
}

/// Enqueues, claims and completes job `new`; answers the completed job.
async fn completed<S: JobQueue>(ctx: &Ctx<S>, new: NewJob) -> Result<Job, Failure> {
    let held = enqueue_and_claim(ctx, new, "worker-a", LONG_TTL).await?;
    settled(
        ctx.store.complete(&held.claim).await?,
        JobState::Completed,
        "complete",
    )
}

/// Enqueues, claims and dead-letters job `new`; answers the dead letter.
async fn dead_lettered<S: JobQueue>(ctx: &Ctx<S>, new: NewJob) -> Result<Job, Failure> {
    let held = enqueue_and_claim(ctx, new, "worker-a", LONG_TTL).await?;
    settled(
        ctx.store
            .fail(&held.claim, "gave up", FailAction::DeadLetter)
            .await?,
        JobState::DeadLettered,
        "fail with dead-letter",
    )
}

/// Enqueues and claims job `new` (one attempt) under a short lease, lets
/// the lease run out and reaps it: dead-lettered by the reaper. Answers the
/// claim the reaper found and the dead letter.
async fn reaped<S: JobQueue>(ctx: &Ctx<S>, new: NewJob) -> Result<(ClaimedJob, Job), Failure> {
    let held = enqueue_and_claim(ctx, new.max_attempts(1), "worker-a", SHORT_TTL).await?;
    let expires = held
        .job
        .lease_expires_at
        .ok_or_else(|| Failure("a claimed job has no lease".into()))?;
    ctx.advance_past(expires).await?;
    let report = ctx.store.reap(Duration::ZERO).await?;
    let dead = report
        .dead_lettered
        .into_iter()
        .find(|job| job.id == held.job.id)
        .ok_or_else(|| Failure(format!("the reaper did not dead-letter {:?}", held.job.id)))?;
    ensure_eq!(
        dead.dead_reason,
        Some(DeadReason::LeaseExpired),
        "dead-lettered by the reaper"
    );
    Ok((held, dead))
}

/// Whether `job` is finished and `older_than` old at `instant`.
fn due_at(job: &Job, older_than: Duration, instant: Timestamp) -> bool {
    matches!(job.state, JobState::Completed | JobState::DeadLettered)
        && !clock::is_before_end(job.updated_at, older_than, instant)
}

/// Purges with `older_than`, failing the case unless it deleted exactly the
/// jobs `gone` (each due before the purge began) and left every job of
/// `kept` as it was, and answered their count.
///
/// A kept job that is finished and already due by the clock read just after
/// the purge (a machine so slow that it aged past the retention during the
/// call) may have gone too; it is then counted, and must be gone entirely.
async fn purge_expecting<S: JobQueue>(
    ctx: &Ctx<S>,
    older_than: Duration,
    gone: &[&Job],
    kept: &[&Job],
) -> CaseResult {
    let before = ctx.store.now().await?;
    for job in gone {
        ensure!(
            due_at(job, older_than, before),
            "case set-up: {:?} ({}, updated {}) is not due under {older_than:?} at {before}",
            job.id,
            job.state,
            job.updated_at
        );
    }
    let purged = ctx.store.purge_jobs(older_than).await?;
    let after = ctx.store.now().await?;
    let mut expected = gone.len() as u64;
    for job in gone {
        ensure_eq!(
            ctx.store.get_job(&job.id).await?,
            None,
            "{:?} ({}, finished {}) is purged under {older_than:?} at {before}",
            job.id,
            job.state,
            job.updated_at
        );
    }
    for job in kept {
        let now = ctx.store.get_job(&job.id).await?;
        if now.is_none() && due_at(job, older_than, after) {
            expected += 1;
            continue;
        }
        ensure_eq!(
            now.as_ref(),
            Some(*job),
            "{:?} ({}, updated {}) stays, untouched, under {older_than:?} (purged between {before} and {after})",
            job.id,
            job.state,
            job.updated_at
        );
    }
    ensure_eq!(
        purged,
        expected,
        "purge_jobs({older_than:?}) counts the jobs it deleted"
    );
    Ok(())
}

/// Every queue's dead letters, by id, for "gone from the listing" checks.
async fn dead_letter_ids<S: JobQueue>(ctx: &Ctx<S>, queue: &str) -> Result<Vec<String>, Failure> {
    Ok(ctx
        .store
        .list_dead_letters(queue, 100)
        .await?
        .into_iter()
        .map(|job| job.id)
        .collect())
}

/// `purge_jobs` deletes completed and dead-lettered jobs (however they were
/// dead-lettered) that finished at least the retention ago, and counts
/// them; younger finished jobs stay, and queued (visible, delayed, waiting
/// out a retry backoff) and claimed jobs stay whatever their age, even under
/// a retention of zero. A purged job is gone for every operation: not read,
/// not listed, not retried, its stale claims answered `Missing`; its id may
/// be enqueued again and is claimed with a fence greater than any before.
pub async fn queue_purge_jobs_removes_old_finished_only<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let start = ctx.store.now().await?;
    // On a queue of its own, so the claims below never take it.
    let waiting = ctx.store.enqueue(&job_in("idle", "old-waiting")).await?;
    let delayed = ctx
        .store
        .enqueue(&job("old-delayed").run_at(clock::add(start, FAR)))
        .await?;
    let running = enqueue_and_claim(&ctx, job("old-running"), "worker-b", LONG_TTL).await?;
    let backing_off = enqueue_and_claim(&ctx, job("old-backing-off"), "worker-a", LONG_TTL).await?;
    let backing_off = settled(
        ctx.store
            .fail(
                &backing_off.claim,
                "try later",
                FailAction::Retry { backoff: FAR },
            )
            .await?,
        JobState::Queued,
        "fail with retry",
    )?;
    let old_completed = completed(&ctx, job("old-completed")).await?;
    let old_failed = dead_lettered(&ctx, job("old-failed")).await?;
    let (reaped_claim, old_reaped) = reaped(&ctx, job("old-reaped")).await?;
    let exhausted =
        enqueue_and_claim(&ctx, job("old-exhausted").max_attempts(1), "w", LONG_TTL).await?;
    let old_exhausted = settled(
        ctx.store
            .fail(
                &exhausted.claim,
                "again",
                FailAction::Retry {
                    backoff: Duration::ZERO,
                },
            )
            .await?,
        JobState::DeadLettered,
        "fail with retry on the last attempt",
    )?;
    let latest_old = [&old_completed, &old_failed, &old_reaped, &old_exhausted]
        .iter()
        .map(|job| job.updated_at)
        .max()
        .unwrap_or(start);
    ctx.advance_past(clock::add(latest_old, RETENTION)).await?;
    let young = completed(&ctx, job("young-completed")).await?;
    let running = running.job;

    purge_expecting(
        &ctx,
        RETENTION,
        &[&old_completed, &old_failed, &old_reaped, &old_exhausted],
        &[&young, &waiting, &delayed, &running, &backing_off],
    )
    .await?;
    ensure_eq!(
        dead_letter_ids(&ctx, QUEUE).await?,
        Vec::<String>::new(),
        "purged dead letters are no longer listed"
    );
    ensure_eq!(
        ctx.store.retry_dead_letter("old-failed").await?,
        OperatorRetry::Missing,
        "a purged dead letter cannot be retried"
    );
    ensure_eq!(
        ctx.store.take_back(&reaped_claim.claim, LONG_TTL).await?,
        TakeBack::NotTaken(TakeBackRefusal::Missing),
        "a purged reaped job cannot be taken back"
    );
    ensure_eq!(
        ctx.store.complete(&exhausted.claim).await?,
        JobSettle::Rejected(JobLoss::Missing),
        "a stale claim on a purged job is answered Missing"
    );
    ensure_eq!(
        ctx.store.renew_job(&exhausted.claim, LONG_TTL).await?,
        JobRenewal::Lost(JobLoss::Missing),
        "a stale renewal of a purged job is answered Missing"
    );

    purge_expecting(
        &ctx,
        RETENTION,
        &[],
        &[&young, &waiting, &delayed, &running, &backing_off],
    )
    .await?;
    // On a starved machine the young job may have aged past the retention
    // by the purge above, which then took it (as that purge allows).
    let young_left: Vec<&Job> = match ctx.store.get_job(&young.id).await? {
        Some(_) => vec![&young],
        None => Vec::new(),
    };
    purge_expecting(
        &ctx,
        Duration::ZERO,
        &young_left,
        &[&waiting, &delayed, &running, &backing_off],
    )
    .await?;

    let again = enqueue_and_claim(&ctx, job("old-completed"), "worker-c", LONG_TTL).await?;
    let highest_before = [
        &running,
        &old_completed,
        &old_reaped,
        &old_exhausted,
        &young,
    ]
    .iter()
    .map(|job| job.fence)
    .max()
    .unwrap_or(0);
    ensure!(
        again.claim.fence > highest_before,
        "a purged id enqueued again is claimed with a new fence: {} after {highest_before}",
        again.claim.fence
    );
    Ok(())
}

/// Age counts from the finish, not from the enqueue: a job that was claimed
/// for longer than the retention and has just completed stays, and so do a
/// dead letter that an operator retried and a reaped job its live copy took
/// back, each finished again only now; a job finished long ago goes.
pub async fn queue_purge_jobs_counts_age_from_the_finish<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let long_runner = enqueue_and_claim(&ctx, job("long-runner"), "worker-a", LONG_TTL).await?;
    let finished_early = completed(&ctx, job("finished-early")).await?;
    let retried = dead_lettered(&ctx, job("retried")).await?;
    let (taken_back, _) = reaped(&ctx, job("taken-back")).await?;
    ctx.advance_past(clock::add(
        retried.updated_at.max(finished_early.updated_at),
        RETENTION,
    ))
    .await?;

    let long_runner = settled(
        ctx.store.complete(&long_runner.claim).await?,
        JobState::Completed,
        "complete after a long run",
    )?;
    ensure!(
        !clock::is_before_end(long_runner.created_at, RETENTION, long_runner.updated_at),
        "case set-up: the long runner ran for longer than the retention"
    );
    ensure!(
        matches!(
            ctx.store.retry_dead_letter("retried").await?,
            OperatorRetry::Requeued(_)
        ),
        "an operator retries the old dead letter"
    );
    let retry = claim_only(&ctx, QUEUE, "worker-b", LONG_TTL, "retried").await?;
    let retried = settled(
        ctx.store.complete(&retry.claim).await?,
        JobState::Completed,
        "complete after an operator's retry",
    )?;
    let taken_back = match ctx.store.take_back(&taken_back.claim, LONG_TTL).await? {
        TakeBack::Taken(claimed) => claimed,
        other => return Err(Failure(format!("expected a take-back, got {other:?}"))),
    };
    let taken_back = settled(
        ctx.store.complete(&taken_back.claim).await?,
        JobState::Completed,
        "complete after a take-back",
    )?;

    purge_expecting(
        &ctx,
        RETENTION,
        &[&finished_early],
        &[&long_runner, &retried, &taken_back],
    )
    .await
}

/// The boundary is exact, and lies a retention after the finish: a job
/// held for longer than the retention before it completed, and finished
/// exactly the retention ago, is purged; finished a microsecond less ago,
/// it is not (though it was enqueued long before), and a retention is
/// never rounded down (half a microsecond more keeps it). On a clock the
/// kit cannot move, the boundary is the store's own reading: a retention
/// of the job's age at a clock read before the purge deletes it, one an
/// hour longer keeps it.
pub async fn queue_purge_jobs_boundary_is_exact<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("boundary"), "worker-a", LONG_TTL).await?;
    ctx.advance_past(clock::add(held.job.created_at, RETENTION))
        .await?;
    let finished = settled(
        ctx.store.complete(&held.claim).await?,
        JobState::Completed,
        "complete after a run longer than the retention",
    )?;
    let due = clock::add(finished.updated_at, RETENTION);
    if let ClockControl::Manual(manual) = ctx.clock() {
        manual.advance_to(clock::add(
            finished.updated_at,
            RETENTION - Duration::from_micros(1),
        ));
        purge_expecting(&ctx, RETENTION, &[], &[&finished]).await?;
        manual.advance_to(due);
        purge_expecting(
            &ctx,
            RETENTION + Duration::from_nanos(500),
            &[],
            &[&finished],
        )
        .await?;
        return purge_expecting(&ctx, RETENTION, &[&finished], &[]).await;
    }
    ctx.advance_past(due).await?;
    let age = clock::until(finished.updated_at, ctx.store.now().await?);
    purge_expecting(&ctx, age + FAR, &[], &[&finished]).await?;
    purge_expecting(&ctx, age, &[&finished], &[]).await
}

/// After a purge the queue works as before: the remaining jobs are claimed
/// in order, settled, reaped and listed; counts are right; leases are never
/// touched by `purge_jobs`, even one sharing an id with a purged job, and
/// `purge` never touches jobs.
pub async fn queue_purge_jobs_leaves_the_queue_working<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for id in ["done-1", "done-2"] {
        completed(&ctx, job(id)).await?;
    }
    dead_lettered(&ctx, job("dead-1")).await?;
    let shared = completed(&ctx, job("shared-id")).await?;
    let lease = admit(&ctx, AdmitRequest::new("shared-id", "worker-a").scope("s")).await?;
    apply_transition(&ctx, &claim_of(&lease)?, &StatusChange::succeeded()).await?;
    let running = enqueue_and_claim(&ctx, job("running"), "worker-a", LONG_TTL).await?;
    for (id, priority) in [("low", 0), ("high", 5), ("mid", 2)] {
        ctx.store.enqueue(&job(id).priority(priority)).await?;
    }

    ensure_eq!(
        ctx.store.purge(Duration::ZERO).await?,
        1,
        "purge deletes the finished lease only"
    );
    ensure_eq!(
        ctx.store.get_job("shared-id").await?,
        Some(shared),
        "purge never touches a job, even one sharing a purged record's id"
    );
    let lease = admit(&ctx, AdmitRequest::new("shared-id", "worker-a").scope("s")).await?;
    ensure!(lease.fence > running.claim.fence, "fences keep growing");
    ensure_eq!(
        ctx.store.purge_jobs(Duration::ZERO).await?,
        4,
        "the three finished jobs and the one sharing the lease's id"
    );
    ensure_eq!(
        ctx.store.get("shared-id").await?,
        Some(lease.clone()),
        "purge_jobs never touches a lease, even one sharing a purged job's id"
    );

    let claimed = ctx
        .store
        .claim(&ClaimRequest::new(QUEUE, "worker-b", LONG_TTL).limit(10))
        .await?;
    ensure_eq!(
        claimed
            .iter()
            .map(|c| c.job.id.as_str())
            .collect::<Vec<_>>(),
        vec!["high", "mid", "low"],
        "the queued jobs are claimed best first, and nothing else"
    );
    ensure!(
        claimed.iter().all(|c| c.claim.fence > lease.fence),
        "claims after a purge draw new fences"
    );
    settled(
        ctx.store.complete(&running.claim).await?,
        JobState::Completed,
        "complete of a job claimed before the purge",
    )?;
    let mut claims = claimed.into_iter().map(|c| c.claim);
    let (Some(high), Some(mid), Some(low)) = (claims.next(), claims.next(), claims.next()) else {
        return Err(Failure("three claims expected".into()));
    };
    settled(
        ctx.store.complete(&high).await?,
        JobState::Completed,
        "complete",
    )?;
    let dead = settled(
        ctx.store
            .fail(&mid, "broken", FailAction::DeadLetter)
            .await?,
        JobState::DeadLettered,
        "fail with dead-letter",
    )?;
    ensure_eq!(
        ctx.store.list_dead_letters(QUEUE, 10).await?,
        vec![dead],
        "only the new dead letter is listed"
    );
    ensure!(
        matches!(
            ctx.store.renew_job(&low, LONG_TTL).await?,
            JobRenewal::Renewed { .. }
        ),
        "a claim taken after the purge renews"
    );
    ensure_eq!(
        ctx.store.purge_jobs(Duration::ZERO).await?,
        3,
        "the next purge counts only what finished since: two completed, one dead letter"
    );
    ensure_eq!(
        ctx.store.get_job("low").await?.map(|job| job.state),
        Some(JobState::Claimed),
        "the claimed job stays"
    );
    Ok(())
}

/// A retention longer than
/// [`MAX_RETENTION`] (almost certainly
/// a unit mistake) is a typed `InvalidInput` naming `finished_older_than`
/// and deletes nothing; the maximum itself is accepted.
pub async fn queue_purge_jobs_invalid_retention_changes_nothing<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let finished = completed(&ctx, job("finished")).await?;
    for absurd in [
        MAX_RETENTION + Duration::from_nanos(1),
        MAX_RETENTION + Duration::from_secs(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        expect_invalid(
            ctx.store.purge_jobs(absurd).await,
            "finished_older_than",
            &format!("purge_jobs({absurd:?})"),
        )?;
        ensure_eq!(
            ctx.store.get_job("finished").await?.as_ref(),
            Some(&finished),
            "a refused purge_jobs({absurd:?}) deletes nothing"
        );
    }
    ensure_eq!(
        ctx.store.purge_jobs(MAX_RETENTION).await?,
        0,
        "the longest retention is accepted"
    );
    purge_expecting(&ctx, Duration::ZERO, &[&finished], &[]).await
}

/// One round of work for the growth case: jobs through every path to a
/// finish on three queues of their own, leases with scopes of their own
/// through every path to a terminal status; `size` multiplies the counts.
/// Answers the names it used.
async fn round_of_work<S: JobQueue>(
    ctx: &Ctx<S>,
    round: &str,
    size: usize,
) -> Result<RoundNames, Failure> {
    let mut names = RoundNames::default();
    for queue_index in 0..3 {
        let queue = format!("{round}-queue-{queue_index}");
        for n in 0..size {
            let id = |path: &str| format!("{queue}-{path}-{n}");
            completed(ctx, job_in(&queue, &id("completed"))).await?;
            dead_lettered(ctx, job_in(&queue, &id("dead"))).await?;
            // Retried once, deferred once, then completed.
            let held = enqueue_and_claim(
                ctx,
                job_in(&queue, &id("bumpy")).max_attempts(5),
                "worker-a",
                LONG_TTL,
            )
            .await?;
            let retry = FailAction::Retry {
                backoff: Duration::ZERO,
            };
            settled(
                ctx.store.fail(&held.claim, "flaky", retry).await?,
                JobState::Queued,
                "fail with retry",
            )?;
            let held = claim_only(ctx, &queue, "worker-a", LONG_TTL, &id("bumpy")).await?;
            let missing = std::iter::once("gpu".to_owned()).collect();
            settled(
                ctx.store.defer(&held.claim, &missing).await?,
                JobState::Queued,
                "defer",
            )?;
            let mut request = ClaimRequest::new(queue.clone(), "worker-b", LONG_TTL);
            request.capabilities = held.job.required_capabilities.clone();
            request.capabilities.insert("gpu".to_owned());
            let mut claimed = ctx.store.claim(&request).await?;
            let held = claimed
                .pop()
                .ok_or_else(|| Failure("the deferred job is claimed again".into()))?;
            settled(
                ctx.store.complete(&held.claim).await?,
                JobState::Completed,
                "complete",
            )?;
            // Dead-lettered by an operator's choice, retried, completed.
            dead_lettered(ctx, job_in(&queue, &id("operator"))).await?;
            ctx.store.retry_dead_letter(&id("operator")).await?;
            let held = claim_only(ctx, &queue, "worker-c", LONG_TTL, &id("operator")).await?;
            settled(
                ctx.store.complete(&held.claim).await?,
                JobState::Completed,
                "complete",
            )?;
            // Reaped, taken back, completed; reaped and left dead.
            let (held, _) = reaped(ctx, job_in(&queue, &id("taken-back"))).await?;
            if let TakeBack::Taken(again) = ctx.store.take_back(&held.claim, LONG_TTL).await? {
                settled(
                    ctx.store.complete(&again.claim).await?,
                    JobState::Completed,
                    "complete",
                )?;
            } else {
                return Err(Failure("the reaped job is taken back".into()));
            }
            reaped(ctx, job_in(&queue, &id("reaped"))).await?;
            // With uniqueness keys, whose indexes must go with their jobs.
            let policies = [
                ("unique-queued", UniquePolicy::WhileQueued),
                ("unique-unfinished", UniquePolicy::WhileUnfinished),
            ];
            for (path, policy) in policies {
                let keyed = job_in(&queue, &id(path)).unique(id(path), policy);
                ctx.store.enqueue_unique(&keyed).await?;
                let held = claim_only(ctx, &queue, "worker-d", LONG_TTL, &id(path)).await?;
                settled(
                    ctx.store.complete(&held.claim).await?,
                    JobState::Completed,
                    "complete",
                )?;
            }
            for path in [
                "completed",
                "dead",
                "bumpy",
                "operator",
                "taken-back",
                "reaped",
                "unique-queued",
                "unique-unfinished",
            ] {
                names.jobs.push(id(path));
            }
        }
        names.queues.push(queue);
    }
    for n in 0..size {
        let scope = |which: &str| format!("{round}-scope-{which}-{n}");
        let id = |path: &str| format!("{round}-lease-{path}-{n}");
        let record = admit(
            ctx,
            AdmitRequest::new(id("succeeded"), "worker-a")
                .scope(scope("a"))
                .scope(scope("b")),
        )
        .await?;
        let claim = claim_of(&record)?;
        apply_transition(ctx, &claim, &StatusChange::running()).await?;
        apply_transition(ctx, &claim, &StatusChange::succeeded()).await?;
        let record = admit(
            ctx,
            AdmitRequest::new(id("failed"), "worker-a").scope(scope("c")),
        )
        .await?;
        apply_transition(ctx, &claim_of(&record)?, &StatusChange::failed("boom")).await?;
        admit(
            ctx,
            AdmitRequest::new(id("orphan"), "worker-a").scope(scope("d")),
        )
        .await?;
        take_over(
            ctx,
            &TakeoverRequest::fail(id("orphan"), "reaper", "orphaned").grace(Duration::ZERO),
        )
        .await?;
        for path in ["succeeded", "failed", "orphan"] {
            names.records.push(id(path));
        }
        for which in ["a", "b", "c", "d"] {
            names.scopes.push(scope(which));
        }
    }
    Ok(names)
}

/// The names one [`round_of_work`] used.
#[derive(Debug, Default)]
struct RoundNames {
    jobs: Vec<String>,
    queues: Vec<String>,
    records: Vec<String>,
    scopes: Vec<String>,
}

/// Purges everything finished, failing the case unless nothing the round
/// named can be seen any more.
async fn purge_all_and_check<S: JobQueue>(ctx: &Ctx<S>, names: &RoundNames) -> CaseResult {
    ensure_eq!(
        ctx.store.purge_jobs(Duration::ZERO).await?,
        names.jobs.len() as u64,
        "every job of the round is finished, and purged"
    );
    ensure_eq!(
        ctx.store.purge(Duration::ZERO).await?,
        names.records.len() as u64,
        "every record of the round is terminal (a taken-over orphan failed), and purged"
    );
    for id in &names.jobs {
        ensure_eq!(ctx.store.get_job(id).await?, None, "job {id:?} is purged");
    }
    for queue in &names.queues {
        ensure_eq!(
            dead_letter_ids(ctx, queue).await?,
            Vec::<String>::new(),
            "no dead letter of {queue:?} is left"
        );
        ensure_eq!(
            ctx.store
                .claim(&ClaimRequest::new(queue.clone(), "probe", LONG_TTL).limit(10))
                .await?
                .len(),
            0,
            "no job of {queue:?} can be claimed"
        );
    }
    for id in &names.records {
        ensure_eq!(ctx.store.get(id).await?, None, "record {id:?} is purged");
    }
    for scope in &names.scopes {
        ensure_eq!(
            ctx.store.list_by_scope(scope).await?,
            Vec::<LeaseRecord>::new(),
            "no record is left on scope {scope:?}"
        );
    }
    ensure_eq!(
        ctx.store.list_active().await?,
        Vec::<LeaseRecord>::new(),
        "no record is active"
    );
    ensure_eq!(
        ctx.store.reap(LONG_GRACE).await?,
        Default::default(),
        "nothing is left to reap"
    );
    Ok(())
}

/// Nothing grows with the work done: after a round of jobs through every
/// path to a finish (completed, dead-lettered by a worker, by exhaustion and
/// by the reaper, retried, deferred, retried by an operator, taken back),
/// and leases with scopes through every path to a terminal status, `purge`
/// and `purge_jobs` with no retention leave no trace of them that any
/// operation can see. Where the factory can count what the store keeps
/// ([`Factory::footprint_probe`](crate::Factory::footprint_probe): rows, keys, map
/// entries), a second round twice as large, on queues and scopes of new
/// names, must leave exactly what the first left.
pub async fn queue_purge_leaves_nothing_behind<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let first = round_of_work(&ctx, "first", 1).await?;
    purge_all_and_check(&ctx, &first).await?;
    let after_first: Option<BTreeMap<String, u64>> = ctx.footprint().await?;
    let second = round_of_work(&ctx, "second", 2).await?;
    purge_all_and_check(&ctx, &second).await?;
    let after_second = ctx.footprint().await?;
    ensure_footprint_kept(
        after_first.as_ref(),
        after_second.as_ref(),
        "what the store keeps after a purge grew with the work done",
    )
}
