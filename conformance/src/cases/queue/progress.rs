//! `renew_job_with_progress`: a job renewal that records the holder's
//! progress in the same fenced write. Every lost job renewal the other
//! cases check (through `expect_job_lost`) is also tried with progress, and
//! must change nothing either.

use std::time::Duration;

use serde_json::json;
use tenure_lease_core::limits::MAX_PROGRESS_BYTES;
use tenure_lease_core::queue::{FailAction, Job, JobClaim, JobLoss, JobRenewal};
use tenure_lease_core::JobQueue;

use super::{
    claim_one, enqueue, enqueue_and_claim, expect_job_lost, get_job, job, reap, settled, QUEUE,
};
use crate::cases::util::{expect_invalid, same_json, LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Reports `progress` with `claim`, failing the case unless it is `Renewed`
/// and `get_job` then reads the progress (by value) and the answered
/// expiry; answers the job read.
async fn report<S: JobQueue>(
    ctx: &Ctx<S>,
    claim: &JobClaim,
    progress: &serde_json::Value,
) -> Result<Job, Failure> {
    let outcome = ctx
        .store
        .renew_job_with_progress(claim, LONG_TTL, progress)
        .await?;
    let JobRenewal::Renewed { expires_at } = outcome else {
        return Err(Failure(format!(
            "expected progress {progress} of {claim:?} to be recorded, got {outcome:?}"
        )));
    };
    let stored = get_job(ctx, &claim.id).await?;
    ensure_eq!(
        stored.lease_expires_at,
        Some(expires_at),
        "get_job reads the expiry renew_job_with_progress answered"
    );
    ensure!(
        stored
            .progress
            .as_ref()
            .is_some_and(|stored| same_json(stored, progress)),
        "get_job reads the progress reported: {progress}, read {:?}",
        stored.progress
    );
    Ok(stored)
}

/// A holder's report renews its job and records its progress, changing
/// nothing else; a plain renewal keeps it, the next report replaces it;
/// listings show it; a retry keeps it for the next attempt, whose claim
/// reports its own, and the old claim's report is refused; a completed job
/// keeps its last progress, and so does a job the reaper requeues.
pub async fn queue_progress_is_recorded_with_a_renewal<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let elsewhere = tenure_lease_core::queue::NewJob::new("elsewhere", json!({})).id("job-1");
    let enqueued = enqueue(&ctx, elsewhere).await?;
    ensure_eq!(enqueued.progress, None, "an enqueued job has no progress");
    let first = enqueue_and_claim(&ctx, job("job-2"), "worker-a", LONG_TTL).await?;
    ensure_eq!(
        first.job.progress,
        None,
        "a claimed job has no progress yet"
    );
    let reported = report(&ctx, &first.claim, &json!({ "rows": 100 })).await?;
    ensure_eq!(
        Job {
            lease_expires_at: first.job.lease_expires_at,
            updated_at: first.job.updated_at,
            ..reported.clone()
        },
        Job {
            progress: reported.progress.clone(),
            ..first.job.clone()
        },
        "a report changes nothing but the lease and the progress"
    );
    let renewed = ctx.store.renew_job(&first.claim, LONG_TTL).await?;
    ensure!(
        matches!(renewed, JobRenewal::Renewed { .. }),
        "a plain renewal: {renewed:?}"
    );
    ensure_eq!(
        get_job(&ctx, "job-2").await?.progress,
        reported.progress,
        "a plain renewal keeps the progress"
    );
    let latest = report(&ctx, &first.claim, &json!({ "rows": 250 })).await?;
    let listed = ctx.store.list_jobs(QUEUE, None, 10).await?;
    ensure!(
        listed
            .iter()
            .any(|job| job.id == "job-2" && job.progress == latest.progress),
        "list_jobs shows the latest progress: {listed:?}"
    );

    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    let requeued = settled(
        &ctx,
        ctx.store.fail(&first.claim, "flaky", retry).await?,
        "fail with retry",
    )
    .await?;
    ensure_eq!(
        requeued.progress,
        latest.progress,
        "a requeued job keeps its last progress"
    );
    expect_job_lost(&ctx, &first.claim, JobLoss::Requeued).await?;
    let second = claim_one(&ctx, "worker-b", LONG_TTL, "job-2").await?;
    ensure_eq!(
        second.job.progress,
        latest.progress,
        "the next attempt sees the last progress"
    );
    expect_job_lost(&ctx, &first.claim, JobLoss::OwnerChanged).await?;
    report(&ctx, &second.claim, &json!("attempt 2")).await?;
    let completed = settled(&ctx, ctx.store.complete(&second.claim).await?, "complete").await?;
    ensure!(
        completed
            .progress
            .as_ref()
            .is_some_and(|progress| same_json(progress, &json!("attempt 2"))),
        "a completed job keeps its last progress: {:?}",
        completed.progress
    );
    expect_job_lost(
        &ctx,
        &second.claim,
        JobLoss::Finished(tenure_lease_core::queue::JobState::Completed),
    )
    .await?;

    // A lapsed claim's job goes back to its queue with its progress.
    let lapsing = enqueue_and_claim(&ctx, job("job-3"), "worker-a", SHORT_TTL).await?;
    let reported = ctx
        .store
        .renew_job_with_progress(&lapsing.claim, SHORT_TTL, &json!({ "rows": 7 }))
        .await?;
    let JobRenewal::Renewed { expires_at } = reported else {
        return Err(Failure(format!("a live claim's report: {reported:?}")));
    };
    ctx.advance_past(expires_at).await?;
    reap(&ctx, Duration::ZERO, &["job-3"], &[]).await?;
    let reaped = get_job(&ctx, "job-3").await?;
    ensure!(
        reaped
            .progress
            .as_ref()
            .is_some_and(|progress| same_json(progress, &json!({ "rows": 7 }))),
        "a reaped job keeps its last progress: {:?}",
        reaped.progress
    );
    expect_job_lost(&ctx, &lapsing.claim, JobLoss::Requeued).await?;
    Ok(())
}

/// Job progress up to exactly [`MAX_PROGRESS_BYTES`] reads back as
/// reported; one byte more, `null`, a bad claim and a bad ttl are refused as
/// `InvalidInput` and change nothing.
pub async fn queue_progress_bounds_are_exact<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let claimed = enqueue_and_claim(&ctx, job("job-1"), "worker-a", LONG_TTL).await?;
    let claim = &claimed.claim;
    for value in [
        json!(1),
        json!([0.25, "phase 2"]),
        json!("q".repeat(MAX_PROGRESS_BYTES - 2)),
    ] {
        report(&ctx, claim, &value).await?;
    }
    let before = get_job(&ctx, "job-1").await?;
    let refusals = [
        (
            ctx.store
                .renew_job_with_progress(
                    claim,
                    LONG_TTL,
                    &json!("q".repeat(MAX_PROGRESS_BYTES - 1)),
                )
                .await,
            "progress",
            "progress one byte over the limit",
        ),
        (
            ctx.store
                .renew_job_with_progress(claim, LONG_TTL, &serde_json::Value::Null)
                .await,
            "progress",
            "null progress",
        ),
        (
            ctx.store
                .renew_job_with_progress(
                    &JobClaim {
                        fence: 0,
                        ..claim.clone()
                    },
                    LONG_TTL,
                    &json!(2),
                )
                .await,
            "fence",
            "a claim with fence 0",
        ),
        (
            ctx.store
                .renew_job_with_progress(claim, Duration::ZERO, &json!(2))
                .await,
            "ttl",
            "a zero ttl",
        ),
    ];
    for (answer, field, what) in refusals {
        expect_invalid(answer, field, what)?;
    }
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        before,
        "refused reports change nothing"
    );
    Ok(())
}
