//! `take_back`: when the worker whose claim was reaped may still finish its job, and when never.

use std::time::Duration;

use tenure_lease_core::backend::queue_rules;
use tenure_lease_core::queue::{
    DeadReason, FailAction, Job, JobClaim, JobLoss, JobState, OperatorRetry, TakeBackRefusal,
};
use tenure_lease_core::JobQueue;

use super::{
    capabilities, claim_one, enqueue_and_claim, ensure_within, expect_every_write_refused,
    expect_job_lost, expect_not_taken_back, expire_job, get_job, job, job_of_its_own, reap,
    renew_job_confirmed, settled, take_back, QUEUE,
};
use crate::cases::util::{LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// A job the reaper requeued (attempts left) is lost to its old copy
/// (`Requeued`) and never taken back by it: `NotDeadLettered(Queued)`, and
/// `NotDeadLettered(Claimed)` once another worker re-claims it.
pub async fn queue_requeued_job_stops_old_copy_and_is_never_taken_back<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let old = enqueue_and_claim(&ctx, job("job-1").max_attempts(2), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &old.job).await?;
    let before = ctx.store.now().await?;
    let report = reap(&ctx, Duration::ZERO, &["job-1"], &[]).await?;
    let after = ctx.store.now().await?;
    let requeued = report
        .requeued
        .first()
        .ok_or_else(|| Failure("the reaper requeued nothing".into()))?;
    ensure_eq!(
        *requeued,
        Job {
            state: JobState::Queued,
            lease_expires_at: None,
            run_at: requeued.run_at,
            updated_at: requeued.updated_at,
            ..old.job.clone()
        },
        "requeued with its lease cleared; owner, fence and attempt kept"
    );
    ensure_within(requeued.run_at, before, after, "the requeued job's run_at")?;
    ensure_within(requeued.updated_at, before, after, "updated_at")?;

    expect_job_lost(&ctx, &old.claim, JobLoss::Requeued).await?;
    expect_not_taken_back(
        &ctx,
        &old.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Queued),
    )
    .await?;

    let reclaimed = claim_one(&ctx, "worker-b", LONG_TTL, "job-1").await?;
    expect_job_lost(&ctx, &old.claim, JobLoss::OwnerChanged).await?;
    expect_not_taken_back(
        &ctx,
        &old.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    renew_job_confirmed(&ctx, &reclaimed.claim, LONG_TTL).await?;
    Ok(())
}

/// A job re-claimed after a requeue, even by the same worker name, is never
/// taken back by the earlier copy: not while the new claim holds it, nor after
/// the reaper dead-letters the new claim (`NotTheReapedClaim`); the reaped
/// claim itself may.
pub async fn queue_reclaimed_job_is_never_taken_back<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first =
        enqueue_and_claim(&ctx, job("job-1").max_attempts(2), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &first.job).await?;
    reap(&ctx, Duration::ZERO, &["job-1"], &[]).await?;
    let second = claim_one(&ctx, "worker-a", SHORT_TTL, "job-1").await?;
    expect_not_taken_back(
        &ctx,
        &first.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;

    expire_job(&ctx, &second.job).await?;
    reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    expect_not_taken_back(&ctx, &first.claim, TakeBackRefusal::NotTheReapedClaim).await?;
    let taken = take_back(&ctx, &second.claim, LONG_TTL).await?;
    expect_not_taken_back(
        &ctx,
        &first.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    expect_job_lost(&ctx, &first.claim, JobLoss::FenceChanged).await?;
    renew_job_confirmed(&ctx, &taken.claim, LONG_TTL).await?;
    Ok(())
}

/// On its last attempt a job whose lease ran out is dead-lettered by the
/// reaper (`LeaseExpired`); the live copy takes it back under a new, greater
/// fence (same attempt), its old claim is then stale, and the new one completes it.
pub async fn queue_reaped_last_attempt_is_taken_back_and_completed<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let copy = enqueue_and_claim(&ctx, job("job-1").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &copy.job).await?;
    let before = ctx.store.now().await?;
    let report = reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    let after = ctx.store.now().await?;
    let dead = report
        .dead_lettered
        .first()
        .ok_or_else(|| Failure("the reaper dead-lettered nothing".into()))?;
    ensure_eq!(
        *dead,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::LeaseExpired),
            lease_expires_at: None,
            updated_at: dead.updated_at,
            ..copy.job.clone()
        },
        "dead-lettered by the reaper with its lease cleared; owner, fence and attempt kept"
    );
    ensure_within(dead.updated_at, before, after, "updated_at")?;
    ensure_eq!(
        ctx.store.list_dead_letters(QUEUE, 10).await?,
        vec![dead.clone()],
        "the reaped job is listed as a dead letter"
    );
    expect_job_lost(&ctx, &copy.claim, JobLoss::Finished(JobState::DeadLettered)).await?;

    let nobody = JobClaim {
        id: "never-enqueued".into(),
        ..copy.claim.clone()
    };
    expect_not_taken_back(&ctx, &nobody, TakeBackRefusal::Missing).await?;
    let other_owner = JobClaim {
        owner: "worker-b".into(),
        ..copy.claim.clone()
    };
    expect_not_taken_back(&ctx, &other_owner, TakeBackRefusal::NotTheReapedClaim).await?;

    let taken = take_back(&ctx, &copy.claim, LONG_TTL).await?;
    ensure_eq!(
        taken.job,
        Job {
            state: JobState::Claimed,
            dead_reason: None,
            fence: taken.claim.fence,
            lease_expires_at: taken.job.lease_expires_at,
            updated_at: taken.job.updated_at,
            taken_back: 1,
            taken_back_at: Some(taken.job.updated_at),
            ..dead.clone()
        },
        "taken back: claimed again under a new fence and counted, nothing else changed"
    );
    ensure_eq!(
        ctx.store.list_dead_letters(QUEUE, 10).await?,
        Vec::<Job>::new(),
        "a taken-back job is no dead letter"
    );
    expect_every_write_refused(&ctx, &copy.claim, JobLoss::FenceChanged).await?;
    expect_not_taken_back(
        &ctx,
        &copy.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    let done = settled(&ctx, ctx.store.complete(&taken.claim).await?, "complete").await?;
    ensure_eq!(done.state, JobState::Completed);
    Ok(())
}

/// An operator's retry of a reaped dead letter wins over the live copy: the
/// job is Queued with attempt 0, visible at once, and the copy's take-back is
/// refused (`NotDeadLettered`) before and after the job is claimed again.
pub async fn queue_operator_retry_beats_take_back<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let copy = enqueue_and_claim(&ctx, job("job-1").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &copy.job).await?;
    let report = reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    let dead = report
        .dead_lettered
        .first()
        .ok_or_else(|| Failure("the reaper dead-lettered nothing".into()))?;

    let before = ctx.store.now().await?;
    let outcome = ctx.store.retry_dead_letter("job-1").await?;
    let after = ctx.store.now().await?;
    let OperatorRetry::Requeued(retried) = outcome else {
        return Err(Failure(format!(
            "expected the dead letter to be requeued, got {outcome:?}"
        )));
    };
    ensure_eq!(
        retried,
        Job {
            state: JobState::Queued,
            attempt: 0,
            dead_reason: None,
            run_at: retried.run_at,
            updated_at: retried.updated_at,
            ..dead.clone()
        },
        "an operator's retry: queued, attempts reset, nothing else changed"
    );
    ensure_within(retried.run_at, before, after, "the retried job's run_at")?;
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        retried,
        "get_job reads the retried job"
    );

    expect_not_taken_back(
        &ctx,
        &copy.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Queued),
    )
    .await?;
    expect_job_lost(&ctx, &copy.claim, JobLoss::Requeued).await?;
    let again = claim_one(&ctx, "worker-b", LONG_TTL, "job-1").await?;
    ensure_eq!(
        again.claim.attempt,
        1,
        "attempts restart after an operator's retry"
    );
    ensure!(
        again.claim.fence > copy.claim.fence,
        "the new claim's fence {} is greater than the old copy's {}",
        again.claim.fence,
        copy.claim.fence
    );
    expect_not_taken_back(
        &ctx,
        &copy.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    Ok(())
}

/// A claim that lost its job is refused everything, whatever took the job
/// from it: after the reaper requeues it, after an operator retries it from
/// the dead letters, and after the worker itself defers it. Each time its
/// `renew_job`, `complete`, `fail` (both actions), `defer` and `take_back`
/// answer the refusal [`queue_rules`] gives for the job as stored, and
/// change nothing.
///
/// [`queue_rules`]: tenure_lease_core::backend::queue_rules
pub async fn queue_old_copy_is_refused_after_every_state_change<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let reaped = enqueue_and_claim(
        &ctx,
        job_of_its_own("copy-reaped").max_attempts(3),
        "worker-a",
        SHORT_TTL,
    )
    .await?;
    expire_job(&ctx, &reaped.job).await?;
    reap(&ctx, Duration::ZERO, &["copy-reaped"], &[]).await?;
    expect_old_copy_refused(&ctx, &reaped.claim, "after a reap requeued it").await?;

    let retried = enqueue_and_claim(
        &ctx,
        job_of_its_own("copy-retried").max_attempts(1),
        "worker-a",
        LONG_TTL,
    )
    .await?;
    settled(
        &ctx,
        ctx.store
            .fail(&retried.claim, "gave up", FailAction::DeadLetter)
            .await?,
        "dead-lettering",
    )
    .await?;
    ensure!(
        matches!(
            ctx.store.retry_dead_letter("copy-retried").await?,
            OperatorRetry::Requeued(_)
        ),
        "an operator retries the dead letter"
    );
    expect_old_copy_refused(&ctx, &retried.claim, "after an operator retry").await?;

    let deferred =
        enqueue_and_claim(&ctx, job_of_its_own("copy-deferred"), "worker-a", LONG_TTL).await?;
    settled(
        &ctx,
        ctx.store
            .defer(&deferred.claim, &capabilities(&["gpu"]))
            .await?,
        "deferring",
    )
    .await?;
    expect_old_copy_refused(&ctx, &deferred.claim, "after it deferred the job").await
}

/// Every write and the take-back of `claim` answer what the rules say of
/// the job as stored, and change nothing.
async fn expect_old_copy_refused<S: JobQueue>(
    ctx: &Ctx<S>,
    claim: &JobClaim,
    after: &str,
) -> CaseResult {
    let stored = ctx.store.get_job(&claim.id).await?;
    let Err(loss) = queue_rules::judge_job(stored.as_ref(), claim) else {
        return Err(Failure(format!(
            "{after}, the old claim {claim:?} no longer holds its job"
        )));
    };
    expect_every_write_refused(ctx, claim, loss).await?;
    let Err(refusal) = queue_rules::judge_take_back(stored.as_ref(), claim) else {
        return Err(Failure(format!(
            "{after}, the old claim {claim:?} may not take the job back"
        )));
    };
    expect_not_taken_back(ctx, claim, refusal).await
}

/// Fails the case unless `job` carries no take-back trace.
fn ensure_never_taken_back(job: &Job, after: &str) -> CaseResult {
    ensure_eq!(
        (job.taken_back, job.taken_back_at),
        (0, None),
        "{after}, {:?} was never taken back and shows no trace",
        job.id
    );
    Ok(())
}

/// A job that goes through every state without a take-back (queued,
/// claimed, reaped back to its queue, dead-lettered by its worker, retried
/// by an operator, completed) never shows a take-back trace, in any answer
/// or read.
pub async fn queue_job_never_taken_back_shows_no_trace<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first =
        enqueue_and_claim(&ctx, job("job-1").max_attempts(2), "worker-a", SHORT_TTL).await?;
    ensure_never_taken_back(&first.job, "once claimed")?;
    expire_job(&ctx, &first.job).await?;
    let report = reap(&ctx, Duration::ZERO, &["job-1"], &[]).await?;
    for requeued in &report.requeued {
        ensure_never_taken_back(requeued, "requeued by the reaper")?;
    }
    let second = claim_one(&ctx, "worker-a", LONG_TTL, "job-1").await?;
    let dead = settled(
        &ctx,
        ctx.store
            .fail(&second.claim, "gave up", FailAction::DeadLetter)
            .await?,
        "dead-lettering",
    )
    .await?;
    ensure_never_taken_back(&dead, "dead-lettered by its worker")?;
    for listed in ctx.store.list_dead_letters(QUEUE, 10).await? {
        ensure_never_taken_back(&listed, "listed as a dead letter")?;
    }
    let OperatorRetry::Requeued(retried) = ctx.store.retry_dead_letter("job-1").await? else {
        return Err(Failure("the dead letter was not retried".into()));
    };
    ensure_never_taken_back(&retried, "retried by an operator")?;
    let third = claim_one(&ctx, "worker-b", LONG_TTL, "job-1").await?;
    let done = settled(&ctx, ctx.store.complete(&third.claim).await?, "complete").await?;
    ensure_never_taken_back(&done, "completed")?;
    ensure_never_taken_back(&get_job(&ctx, "job-1").await?, "read back")
}

/// A take-back leaves a durable trace on its job: `taken_back` 1 and
/// `taken_back_at` the take-back's instant, in the answer, in `get_job`,
/// and still after the job completes.
pub async fn queue_take_back_trace_survives_completion<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let copy = enqueue_and_claim(&ctx, job("job-1").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &copy.job).await?;
    let report = reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    for dead in &report.dead_lettered {
        ensure_never_taken_back(dead, "dead-lettered by the reaper, before any take-back")?;
    }
    let taken = take_back(&ctx, &copy.claim, LONG_TTL).await?;
    let trace = (1, Some(taken.job.updated_at));
    ensure_eq!(
        (taken.job.taken_back, taken.job.taken_back_at),
        trace,
        "the take-back is counted once, at its instant"
    );
    let done = settled(&ctx, ctx.store.complete(&taken.claim).await?, "complete").await?;
    ensure_eq!(done.state, JobState::Completed);
    ensure_eq!(
        (done.taken_back, done.taken_back_at),
        trace,
        "the trace outlives the job's completion"
    );
    let read = get_job(&ctx, "job-1").await?;
    ensure_eq!(
        (read.taken_back, read.taken_back_at),
        trace,
        "get_job reads the trace of the completed job"
    );
    Ok(())
}

/// A job falsely dead-lettered twice and taken back twice counts both:
/// the second dead letter lists the first take-back, and the second
/// take-back counts 2, at its own (later) instant.
pub async fn queue_second_take_back_counts_again<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let copy = enqueue_and_claim(&ctx, job("job-1").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &copy.job).await?;
    reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    let first = take_back(&ctx, &copy.claim, SHORT_TTL).await?;
    expire_job(&ctx, &first.job).await?;
    let report = reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    let first_trace = (1, Some(first.job.updated_at));
    for dead in &report.dead_lettered {
        ensure_eq!(
            (dead.taken_back, dead.taken_back_at),
            first_trace,
            "dead-lettered again, the job still shows its first take-back"
        );
    }
    let listed = ctx.store.list_dead_letters(QUEUE, 10).await?;
    ensure_eq!(
        listed
            .iter()
            .map(|dead| (dead.id.as_str(), dead.taken_back, dead.taken_back_at))
            .collect::<Vec<_>>(),
        vec![("job-1", first_trace.0, first_trace.1)],
        "list_dead_letters shows the first take-back"
    );
    let second = take_back(&ctx, &first.claim, LONG_TTL).await?;
    ensure_eq!(
        second.job.taken_back,
        2,
        "the second take-back counts again"
    );
    ensure!(
        second.job.taken_back_at > first.job.taken_back_at,
        "the trace moves to the second take-back: {:?} after {:?}",
        second.job.taken_back_at,
        first.job.taken_back_at
    );
    Ok(())
}
