//! `reap` and the dead-letter list: lapsed claims requeued or dead-lettered, operator retries.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::queue::{
    ClaimRequest, DeadReason, FailAction, Job, JobLoss, JobSettle, JobState, NewJob, OperatorRetry,
};
use tenure_lease_core::JobQueue;

use super::{
    claim, enqueue, enqueue_and_claim, ensure_within, expire_job, get_job, ids, job,
    job_of_its_own, jobs, reap, renew_job_confirmed, settled, QUEUE, TICK,
};
use crate::cases::util::{race_two, LONG_GRACE, LONG_TTL, SHORT_TTL, UNLIKE_RACE_ROUNDS};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// `reap(grace)` leaves claims whose lease plus grace still runs, then
/// requeues expired claims with attempts left and dead-letters
/// (`LeaseExpired`) those on their last attempt; other jobs are untouched.
pub async fn queue_reap_requeues_or_dead_letters_by_attempts_left<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let valid = enqueue_and_claim(&ctx, job("valid").max_attempts(1), "worker-a", LONG_TTL).await?;
    let done = enqueue_and_claim(&ctx, job("done").max_attempts(1), "worker-a", SHORT_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    let retry =
        enqueue_and_claim(&ctx, job("retry").max_attempts(2), "worker-b", SHORT_TTL).await?;
    let last = enqueue_and_claim(&ctx, job("last").max_attempts(1), "worker-c", SHORT_TTL).await?;
    enqueue(&ctx, job("waiting")).await?;
    expire_job(&ctx, &retry.job).await?;
    expire_job(&ctx, &last.job).await?;

    let others = ["valid", "done", "waiting"];
    let others_before = jobs(&ctx, &others).await?;
    let expired = ["retry", "last"];
    let expired_before = jobs(&ctx, &expired).await?;
    reap(&ctx, LONG_GRACE, &[], &[]).await?;
    ensure_eq!(
        jobs(&ctx, &expired).await?,
        expired_before,
        "within grace nothing is reaped"
    );

    let before = ctx.store.now().await?;
    let report = reap(&ctx, Duration::ZERO, &["retry"], &["last"]).await?;
    let after = ctx.store.now().await?;
    let (Some(requeued), Some(dead)) = (report.requeued.first(), report.dead_lettered.first())
    else {
        return Err(Failure(format!("unexpected reap report {report:?}")));
    };
    ensure_eq!(
        *requeued,
        Job {
            state: JobState::Queued,
            lease_expires_at: None,
            run_at: requeued.run_at,
            updated_at: requeued.updated_at,
            ..retry.job.clone()
        },
        "requeued, visible at once, lease cleared; owner, fence and attempt kept"
    );
    ensure_within(requeued.run_at, before, after, "the requeued job's run_at")?;
    ensure_eq!(
        *dead,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::LeaseExpired),
            lease_expires_at: None,
            updated_at: dead.updated_at,
            ..last.job.clone()
        },
        "dead-lettered by the reaper, lease cleared; owner, fence and attempt kept"
    );
    ensure_within(dead.updated_at, before, after, "updated_at")?;
    ensure_eq!(
        jobs(&ctx, &others).await?,
        others_before,
        "a valid lease, a completed job and a queued job are left alone"
    );
    reap(&ctx, Duration::ZERO, &[], &[]).await?;
    renew_job_confirmed(&ctx, &valid.claim, LONG_TTL).await?;
    Ok(())
}

/// `list_dead_letters` lists one queue's dead letters oldest update first, up
/// to `limit`; `retry_dead_letter` requeues one (attempt 0, visible at once)
/// and answers `NotDeadLettered(state)` for any other job, `Missing` for none.
pub async fn queue_dead_letters_listed_and_retried<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    // Dead-lettered in this order, which is not the order of their ids.
    for id in ["dead-2", "dead-1", "dead-3"] {
        let held = enqueue_and_claim(&ctx, job(id), "worker-a", LONG_TTL).await?;
        let outcome = ctx
            .store
            .fail(&held.claim, "broken", FailAction::DeadLetter)
            .await?;
        settled(&ctx, outcome, "fail with dead-letter").await?;
        ctx.advance(TICK).await?;
    }
    let elsewhere = NewJob::new("other-queue", json!(0)).id("elsewhere");
    let held = enqueue_and_claim(&ctx, elsewhere, "worker-a", LONG_TTL).await?;
    let outcome = ctx
        .store
        .fail(&held.claim, "broken", FailAction::DeadLetter)
        .await?;
    settled(&ctx, outcome, "fail with dead-letter").await?;
    let done = enqueue_and_claim(&ctx, job("done"), "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    enqueue_and_claim(&ctx, job("claimed"), "worker-a", LONG_TTL).await?;
    enqueue(&ctx, job("waiting")).await?;

    let listed = ctx.store.list_dead_letters(QUEUE, 10).await?;
    ensure_eq!(
        ids(&listed),
        ["dead-2", "dead-1", "dead-3"],
        "dead letters, oldest update first"
    );
    for job in &listed {
        ensure_eq!(
            get_job(&ctx, &job.id).await?,
            *job,
            "get_job reads the listed job"
        );
    }
    ensure_eq!(
        ids(&ctx.store.list_dead_letters(QUEUE, 2).await?),
        ["dead-2", "dead-1"],
        "the limit keeps the oldest"
    );
    ensure_eq!(
        ids(&ctx.store.list_dead_letters("other-queue", 10).await?),
        ["elsewhere"],
        "each queue lists its own"
    );
    ensure_eq!(
        ctx.store.list_dead_letters("no-such-queue", 10).await?,
        Vec::<Job>::new()
    );

    ctx.advance(TICK).await?;
    let before = ctx.store.now().await?;
    let outcome = ctx.store.retry_dead_letter("dead-1").await?;
    let after = ctx.store.now().await?;
    let OperatorRetry::Requeued(retried) = outcome else {
        return Err(Failure(format!(
            "expected dead-1 to be requeued, got {outcome:?}"
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
            ..listed[1].clone()
        },
        "an operator's retry: queued, attempts reset, nothing else changed"
    );
    ensure_within(retried.run_at, before, after, "the retried job's run_at")?;
    ensure_eq!(
        get_job(&ctx, "dead-1").await?,
        retried,
        "get_job reads the retried job"
    );
    ensure_eq!(
        ids(&ctx.store.list_dead_letters(QUEUE, 10).await?),
        ["dead-2", "dead-3"],
        "a retried job is no dead letter"
    );

    for (id, state) in [
        ("dead-1", JobState::Queued),
        ("done", JobState::Completed),
        ("claimed", JobState::Claimed),
        ("waiting", JobState::Queued),
    ] {
        let before = get_job(&ctx, id).await?;
        ensure_eq!(
            ctx.store.retry_dead_letter(id).await?,
            OperatorRetry::NotDeadLettered(state),
            "retrying {id}"
        );
        ensure_eq!(
            get_job(&ctx, id).await?,
            before,
            "a refused retry changes nothing"
        );
    }
    ensure_eq!(
        ctx.store.retry_dead_letter("never-enqueued").await?,
        OperatorRetry::Missing
    );
    let claimed = claim(
        &ctx,
        &ClaimRequest::new(QUEUE, "worker-b", LONG_TTL).limit(10),
        &["waiting", "dead-1"],
    )
    .await?;
    ensure_eq!(
        claimed[1].claim.attempt,
        1,
        "attempts restart after a retry"
    );
    Ok(())
}

/// A `complete` and a `reap` of one lapsed claim, released together, many
/// times: either the completion wins (`Settled` as completed, and the reaper
/// leaves the job alone) or the reaper does (the job requeued, and the
/// completion answers `Requeued`); never both, never neither.
pub async fn race_complete_vs_reap_exactly_one_wins<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for round in 0..UNLIKE_RACE_ROUNDS {
        let id = format!("complete-vs-reap-{round}");
        let held = enqueue_and_claim(
            &ctx,
            job_of_its_own(&id).max_attempts(3),
            "worker-a",
            SHORT_TTL,
        )
        .await?;
        expire_job(&ctx, &held.job).await?;
        let store = Arc::clone(&ctx.store);
        let claim = held.claim.clone();
        let completion = async move { store.complete(&claim).await };
        let store = Arc::clone(&ctx.store);
        let reaper = async move { store.reap(Duration::ZERO).await };
        let (completion, reaped) = race_two(round, completion, reaper).await?;
        let (completion, reaped) = (completion?, reaped?);
        let stored = get_job(&ctx, &id).await?;
        let requeued = reaped.requeued.iter().any(|job| job.id == id);
        match (&completion, requeued) {
            (JobSettle::Settled(done), false) => {
                ensure_eq!(done.state, JobState::Completed, "the completion won {id}");
                ensure_eq!(&stored, done, "get_job reads the completion");
            }
            (JobSettle::Rejected(JobLoss::Requeued), true) => {
                ensure_eq!(
                    stored.state,
                    JobState::Queued,
                    "the reaper won {id}: it is queued"
                );
            }
            _ => {
                return Err(Failure(format!(
                    "exactly one of a completion and a reap of {id} wins, and the other answers \
                     its truth; got complete {completion:?} and reap {reaped:?}"
                )))
            }
        }
        ensure!(
            reaped.dead_lettered.is_empty(),
            "a job with attempts left is never dead-lettered by the reaper: {reaped:?}"
        );
    }
    Ok(())
}
