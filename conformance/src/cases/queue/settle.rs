//! Settling a claimed job: `renew_job`, `complete`, `fail` (retry or dead letter) and `defer`.

use std::time::Duration;

use tenure_lease_core::queue::{
    ClaimRequest, DeadReason, FailAction, Job, JobClaim, JobLoss, JobState, OperatorRetry,
    TakeBackRefusal,
};
use tenure_lease_core::{clock, JobQueue};

use super::{
    capabilities, claim, claim_one, enqueue_and_claim, ensure_within, expect_every_write_refused,
    expect_job_lost, expect_not_taken_back, expire_job, get_job, job, judged_before, not_yet, reap,
    renew_job_confirmed, settled, Landed, NotYetTry, QUEUE, TICK,
};
use crate::cases::util::{LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// `renew_job` extends a claim's lease to store now + ttl (even past its
/// expiry, until the reaper acts); otherwise it answers why the claim lost the
/// job (Missing, Finished(Completed), Finished(DeadLettered), Requeued,
/// OwnerChanged, FenceChanged) and changes nothing.
pub async fn queue_renew_and_loss_reasons<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let live = enqueue_and_claim(&ctx, job("live"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    let expires_at = renew_job_confirmed(&ctx, &live.claim, LONG_TTL).await?;
    ensure!(
        Some(expires_at) > live.job.lease_expires_at,
        "the renewed expiry {expires_at} moves past the claimed one {:?}",
        live.job.lease_expires_at
    );

    let late = enqueue_and_claim(&ctx, job("late"), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &late.job).await?;
    renew_job_confirmed(&ctx, &late.claim, LONG_TTL).await?;

    let nobody = JobClaim {
        id: "never-enqueued".into(),
        ..live.claim.clone()
    };
    expect_job_lost(&ctx, &nobody, JobLoss::Missing).await?;

    let done = enqueue_and_claim(&ctx, job("done"), "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    expect_job_lost(&ctx, &done.claim, JobLoss::Finished(JobState::Completed)).await?;

    let dead = enqueue_and_claim(&ctx, job("dead"), "worker-a", LONG_TTL).await?;
    let outcome = ctx
        .store
        .fail(&dead.claim, "broken", FailAction::DeadLetter)
        .await?;
    settled(&ctx, outcome, "fail with dead-letter").await?;
    expect_job_lost(&ctx, &dead.claim, JobLoss::Finished(JobState::DeadLettered)).await?;

    let other_owner = JobClaim {
        owner: "worker-b".into(),
        ..live.claim.clone()
    };
    expect_job_lost(&ctx, &other_owner, JobLoss::OwnerChanged).await?;
    let other_fence = JobClaim {
        fence: live.claim.fence + 1,
        ..live.claim.clone()
    };
    expect_job_lost(&ctx, &other_fence, JobLoss::FenceChanged).await?;

    // Last: a requeued job is visible, and would be claimed by the helpers above.
    let requeued = enqueue_and_claim(&ctx, job("requeued"), "worker-a", LONG_TTL).await?;
    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    settled(
        &ctx,
        ctx.store.fail(&requeued.claim, "flaky", retry).await?,
        "fail with retry",
    )
    .await?;
    expect_job_lost(&ctx, &requeued.claim, JobLoss::Requeued).await?;

    renew_job_confirmed(&ctx, &live.claim, LONG_TTL).await?;
    Ok(())
}

/// Writes with another owner's or another fence's claim are refused
/// (`OwnerChanged`, `FenceChanged`); `complete` and `fail` with the right
/// claim settle, after which every write answers `Finished` and changes nothing.
pub async fn queue_complete_and_fail_are_fenced<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("job-1"), "worker-a", LONG_TTL).await?;
    let other_owner = JobClaim {
        owner: "worker-b".into(),
        ..held.claim.clone()
    };
    expect_every_write_refused(&ctx, &other_owner, JobLoss::OwnerChanged).await?;
    let other_fence = JobClaim {
        fence: held.claim.fence + 1,
        ..held.claim.clone()
    };
    expect_every_write_refused(&ctx, &other_fence, JobLoss::FenceChanged).await?;

    let before = ctx.store.now().await?;
    let done = settled(&ctx, ctx.store.complete(&held.claim).await?, "complete").await?;
    let after = ctx.store.now().await?;
    ensure_eq!(
        done,
        Job {
            state: JobState::Completed,
            lease_expires_at: None,
            updated_at: done.updated_at,
            ..held.job.clone()
        },
        "completed with its lease cleared; owner, fence and attempt kept"
    );
    ensure_within(done.updated_at, before, after, "updated_at")?;
    expect_every_write_refused(&ctx, &held.claim, JobLoss::Finished(JobState::Completed)).await?;
    expect_not_taken_back(
        &ctx,
        &held.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Completed),
    )
    .await?;
    ensure_eq!(
        ctx.store.retry_dead_letter("job-1").await?,
        OperatorRetry::NotDeadLettered(JobState::Completed),
        "an operator cannot retry a completed job"
    );
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        done,
        "a completed job never changes"
    );
    claim(
        &ctx,
        &ClaimRequest::new(QUEUE, "worker-b", LONG_TTL).limit(10),
        &[],
    )
    .await?;

    let failing = enqueue_and_claim(&ctx, job("job-2"), "worker-a", LONG_TTL).await?;
    let before = ctx.store.now().await?;
    let outcome = ctx
        .store
        .fail(&failing.claim, "no such customer", FailAction::DeadLetter)
        .await?;
    let failed = settled(&ctx, outcome, "fail with dead-letter").await?;
    let after = ctx.store.now().await?;
    ensure_eq!(
        failed,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::Failed),
            last_error: Some("no such customer".into()),
            lease_expires_at: None,
            updated_at: failed.updated_at,
            ..failing.job.clone()
        },
        "failed for good: dead-lettered, error kept, lease cleared"
    );
    ensure_within(failed.updated_at, before, after, "updated_at")?;
    expect_every_write_refused(
        &ctx,
        &failing.claim,
        JobLoss::Finished(JobState::DeadLettered),
    )
    .await?;
    Ok(())
}

/// Renewing after `complete` answers `Lost(Finished(Completed))`; the job
/// stays Completed, also once its old lease would have run out and the reaper ran.
pub async fn queue_renewal_after_complete_answers_finished<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("job-1"), "worker-a", SHORT_TTL).await?;
    let done = settled(&ctx, ctx.store.complete(&held.claim).await?, "complete").await?;
    expect_job_lost(&ctx, &held.claim, JobLoss::Finished(JobState::Completed)).await?;
    expire_job(&ctx, &held.job).await?;
    reap(&ctx, Duration::ZERO, &[], &[]).await?;
    expect_job_lost(&ctx, &held.claim, JobLoss::Finished(JobState::Completed)).await?;
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        done,
        "the job stays completed"
    );
    Ok(())
}

/// `fail` with `Retry` and attempts left requeues the job with its error
/// kept, visible only from store now + backoff: not claimable before, then
/// claimable as the next attempt.
pub async fn queue_fail_retry_backoff_delays_visibility<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    not_yet(|attempt| fail_retry_backoff_delays_visibility(&ctx, attempt)).await
}

/// One try of [`queue_fail_retry_backoff_delays_visibility`].
async fn fail_retry_backoff_delays_visibility<S: JobQueue>(
    ctx: &Ctx<S>,
    attempt: NotYetTry,
) -> Result<Landed, Failure> {
    let held = enqueue_and_claim(
        ctx,
        attempt.job("job-1").max_attempts(3),
        "worker-a",
        LONG_TTL,
    )
    .await?;
    let backoff = attempt.delay;
    let retry = FailAction::Retry { backoff };
    let before = ctx.store.now().await?;
    let outcome = ctx.store.fail(&held.claim, "smtp timed out", retry).await?;
    let after = ctx.store.now().await?;
    let failed = settled(ctx, outcome, "fail with retry").await?;
    ensure_eq!(
        failed,
        Job {
            state: JobState::Queued,
            last_error: Some("smtp timed out".into()),
            lease_expires_at: None,
            run_at: failed.run_at,
            updated_at: failed.updated_at,
            ..held.job.clone()
        },
        "requeued with the error kept and the lease cleared; owner, fence and attempt kept"
    );
    ensure_within(
        failed.run_at,
        clock::add(before, backoff),
        clock::add(after, backoff),
        "the retry's run_at (store now + backoff)",
    )?;
    let worker = ClaimRequest::new(attempt.queue.as_str(), "worker-b", LONG_TTL).limit(10);
    let observed: CaseResult = async {
        claim(ctx, &worker, &[]).await?;
        ensure_eq!(
            get_job(ctx, &failed.id).await?,
            failed,
            "a job backing off is left alone"
        );
        Ok(())
    }
    .await;
    if judged_before(ctx, failed.run_at, observed).await? == Landed::TooLate {
        return Ok(Landed::TooLate);
    }

    ctx.advance_past(failed.run_at).await?;
    let again = claim(ctx, &worker, &[failed.id.as_str()]).await?;
    let again = again
        .first()
        .ok_or_else(|| Failure("the retry was not claimed".into()))?;
    ensure_eq!(again.claim.attempt, 2, "the retry is attempt 2");
    ensure!(
        again.claim.fence > held.claim.fence,
        "the retry's fence {} is greater than {}",
        again.claim.fence,
        held.claim.fence
    );
    ensure_eq!(
        again.job.last_error,
        failed.last_error,
        "the last error stays until the next failure"
    );
    Ok(Landed::InTime)
}

/// `fail` with `DeadLetter` dead-letters at once (`Failed`), `Retry` on the
/// last attempt dead-letters too (`AttemptsExhausted`); both keep the last
/// error, leave the queue, and are not the reaper's, so never taken back.
pub async fn queue_fail_dead_letter_and_attempts_exhausted<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let broken =
        enqueue_and_claim(&ctx, job("broken").max_attempts(3), "worker-a", LONG_TTL).await?;
    let outcome = ctx
        .store
        .fail(&broken.claim, "malformed payload", FailAction::DeadLetter)
        .await?;
    let dead = settled(&ctx, outcome, "fail with dead-letter").await?;
    ensure_eq!(
        dead,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::Failed),
            last_error: Some("malformed payload".into()),
            lease_expires_at: None,
            updated_at: dead.updated_at,
            ..broken.job.clone()
        },
        "dead-lettered at once, attempts left or not"
    );

    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    let flaky = enqueue_and_claim(&ctx, job("flaky").max_attempts(2), "worker-a", LONG_TTL).await?;
    let outcome = ctx.store.fail(&flaky.claim, "first failure", retry).await?;
    settled(&ctx, outcome, "fail with retry").await?;
    let last = claim_one(&ctx, "worker-b", LONG_TTL, "flaky").await?;
    ensure_eq!(last.claim.attempt, 2, "the last attempt");
    let outcome = ctx.store.fail(&last.claim, "second failure", retry).await?;
    let exhausted = settled(&ctx, outcome, "fail with retry on the last attempt").await?;
    ensure_eq!(
        exhausted,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::AttemptsExhausted),
            last_error: Some("second failure".into()),
            lease_expires_at: None,
            updated_at: exhausted.updated_at,
            ..last.job.clone()
        },
        "a retry with no attempt left dead-letters the job"
    );

    claim(
        &ctx,
        &ClaimRequest::new(QUEUE, "worker-c", LONG_TTL).limit(10),
        &[],
    )
    .await?;
    ensure_eq!(
        ctx.store.list_dead_letters(QUEUE, 10).await?,
        vec![dead, exhausted],
        "both are listed as dead letters"
    );
    expect_not_taken_back(
        &ctx,
        &broken.claim,
        TakeBackRefusal::NotByReaper(DeadReason::Failed),
    )
    .await?;
    expect_not_taken_back(
        &ctx,
        &last.claim,
        TakeBackRefusal::NotByReaper(DeadReason::AttemptsExhausted),
    )
    .await?;
    Ok(())
}

/// `defer` un-claims the job, refunds its attempt and adds the missing
/// capabilities to its requirements, visible at once: a worker lacking them
/// skips it, one having them claims it.
pub async fn queue_defer_refunds_attempt_and_stamps_requirement<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("job-1").require("linux"), "worker-a", LONG_TTL).await?;
    let before = ctx.store.now().await?;
    let outcome = ctx
        .store
        .defer(&held.claim, &capabilities(&["gpu"]))
        .await?;
    let after = ctx.store.now().await?;
    let deferred = settled(&ctx, outcome, "defer").await?;
    ensure_eq!(
        deferred,
        Job {
            state: JobState::Queued,
            attempt: 0,
            required_capabilities: capabilities(&["gpu", "linux"]),
            lease_expires_at: None,
            run_at: deferred.run_at,
            updated_at: deferred.updated_at,
            ..held.job.clone()
        },
        "deferred: queued, attempt refunded, requirement added, lease cleared"
    );
    ensure_within(deferred.run_at, before, after, "the deferred job's run_at")?;
    expect_job_lost(&ctx, &held.claim, JobLoss::Requeued).await?;

    let lacking = ClaimRequest::new(QUEUE, "worker-a", LONG_TTL)
        .capabilities(["linux", "ssd"])
        .limit(10);
    claim(&ctx, &lacking, &[]).await?;
    let having = ClaimRequest::new(QUEUE, "worker-gpu", LONG_TTL).capabilities(["gpu", "linux"]);
    let taken = claim(&ctx, &having, &["job-1"]).await?;
    ensure_eq!(
        taken[0].claim.attempt,
        1,
        "the refunded attempt is not counted"
    );
    ensure!(
        taken[0].claim.fence > held.claim.fence,
        "the new claim's fence {} is greater than {}",
        taken[0].claim.fence,
        held.claim.fence
    );
    Ok(())
}
