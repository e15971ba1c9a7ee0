//! `renew_jobs`: a batch of job renewals, each answered as `renew_job`
//! would answer it alone.

use std::time::Duration;

use tenure_lease_core::backend::validate::MAX_BATCH;
use tenure_lease_core::clock;
use tenure_lease_core::queue::{FailAction, JobClaim, JobLoss, JobRenewal, JobState};
use tenure_lease_core::JobQueue;

use super::twins::{ensure_twins_agree, twin_claims, Twins};
use super::{enqueue_and_claim, ensure_within, expire_job, get_job, job, settled, TICK};
use crate::cases::util::{expect_invalid, LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Each claim of a batch is judged on its own, in the batch's order: live
/// claims (one whose lease lapsed unreaped included) are renewed to store
/// now + ttl, as `get_job` then reads; a stale fence, another owner's job, a
/// finished, a requeued and a missing job answer their losses and change
/// nothing. The same claims in the reverse order answer in the reverse
/// order.
pub async fn queue_renew_jobs_answers_each_claim_as_renew_job_would<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first = enqueue_and_claim(&ctx, job("first"), "worker-a", LONG_TTL).await?;
    let stale = enqueue_and_claim(&ctx, job("stale"), "worker-a", LONG_TTL).await?;
    let theirs = enqueue_and_claim(&ctx, job("theirs"), "worker-b", LONG_TTL).await?;
    let done = enqueue_and_claim(&ctx, job("done"), "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    let requeued = enqueue_and_claim(&ctx, job("requeued"), "worker-a", LONG_TTL).await?;
    let retry = FailAction::Retry { backoff: LONG_TTL };
    settled(
        &ctx,
        ctx.store.fail(&requeued.claim, "flaky", retry).await?,
        "fail with retry",
    )
    .await?;
    let late = enqueue_and_claim(&ctx, job("late"), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &late.job).await?;
    let last = enqueue_and_claim(&ctx, job("last"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;

    let stale_claim = JobClaim {
        fence: stale.claim.fence + 1,
        ..stale.claim.clone()
    };
    let not_mine = JobClaim {
        owner: "worker-a".into(),
        ..theirs.claim.clone()
    };
    let missing = JobClaim {
        id: "never-enqueued".into(),
        ..first.claim.clone()
    };
    let batch = [
        first.claim.clone(),
        stale_claim,
        not_mine,
        done.claim.clone(),
        late.claim.clone(),
        missing,
        requeued.claim.clone(),
        last.claim.clone(),
    ];
    let lost_at: [(usize, JobLoss); 5] = [
        (1, JobLoss::FenceChanged),
        (2, JobLoss::OwnerChanged),
        (3, JobLoss::Finished(JobState::Completed)),
        (5, JobLoss::Missing),
        (6, JobLoss::Requeued),
    ];
    let renewed_at = [0, 4, 7];
    let mut before = Vec::with_capacity(batch.len());
    for claim in &batch {
        before.push(ctx.store.get_job(&claim.id).await?);
    }

    let now_before = ctx.store.now().await?;
    let answers = ctx.store.renew_jobs(&batch, LONG_TTL).await?;
    let now_after = ctx.store.now().await?;
    ensure_eq!(answers.len(), batch.len(), "one answer per claim");
    for (position, loss) in &lost_at {
        ensure_eq!(
            &answers[*position],
            &JobRenewal::Lost(*loss),
            "claim #{position} ({:?}), in the batch's order",
            batch[*position]
        );
        ensure_eq!(
            ctx.store.get_job(&batch[*position].id).await?,
            before[*position],
            "a lost claim renews nothing: {:?}",
            batch[*position]
        );
    }
    for position in renewed_at {
        let claim = &batch[position];
        let JobRenewal::Renewed { expires_at } = answers[position] else {
            return Err(Failure(format!(
                "claim #{position} ({claim:?}) holds its job and should be renewed, got {:?}",
                answers[position]
            )));
        };
        ensure_within(
            expires_at,
            clock::add(now_before, LONG_TTL),
            clock::add(now_after, LONG_TTL),
            "a renewed expiry (store now + ttl)",
        )?;
        let stored = get_job(&ctx, &claim.id).await?;
        ensure_eq!(
            stored.lease_expires_at,
            Some(expires_at),
            "get_job reads the expiry renew_jobs answered for {}",
            claim.id
        );
        ensure_eq!(
            (stored.state, stored.owner.as_deref(), stored.fence),
            (JobState::Claimed, Some(claim.owner.as_str()), claim.fence),
            "a renewal keeps {}'s claim as it was",
            claim.id
        );
        let previous = before[position]
            .as_ref()
            .and_then(|job| job.lease_expires_at);
        ensure!(
            Some(expires_at) > previous,
            "{}'s lease moved forward: {expires_at} after {previous:?}",
            claim.id
        );
    }

    let reversed: Vec<JobClaim> = batch.iter().rev().cloned().collect();
    let again = ctx.store.renew_jobs(&reversed, LONG_TTL).await?;
    ensure_eq!(again.len(), batch.len(), "one answer per claim, reversed");
    for (position, loss) in &lost_at {
        ensure_eq!(
            &again[batch.len() - 1 - position],
            &JobRenewal::Lost(*loss),
            "answers follow the order of the batch given, reversed too"
        );
    }
    for position in renewed_at {
        ensure!(
            matches!(
                again[batch.len() - 1 - position],
                JobRenewal::Renewed { .. }
            ),
            "a claim renewed once renews again, wherever it is in the batch: {again:?}"
        );
    }
    Ok(())
}

/// A batch naming a job twice, longer than `MAX_BATCH`, holding an invalid
/// claim or asking for an invalid ttl is `InvalidInput` and renews nothing,
/// not even its valid claims; an empty batch answers nothing.
pub async fn queue_renew_jobs_refuses_bad_batches<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("held"), "worker-a", LONG_TTL).await?;
    let other = enqueue_and_claim(&ctx, job("other"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    let before = [get_job(&ctx, "held").await?, get_job(&ctx, "other").await?];

    let twice = [held.claim.clone(), other.claim.clone(), held.claim.clone()];
    expect_invalid(
        ctx.store.renew_jobs(&twice, LONG_TTL).await,
        "claims",
        "renew_jobs: a job named twice",
    )?;
    let too_many: Vec<JobClaim> = std::iter::once(held.claim.clone())
        .chain((0..MAX_BATCH).map(|n| JobClaim {
            id: format!("job-{n}"),
            ..held.claim.clone()
        }))
        .collect();
    expect_invalid(
        ctx.store.renew_jobs(&too_many, LONG_TTL).await,
        "claims",
        "renew_jobs: over MAX_BATCH claims",
    )?;
    let fence_zero = [
        held.claim.clone(),
        JobClaim {
            fence: 0,
            ..other.claim.clone()
        },
    ];
    expect_invalid(
        ctx.store.renew_jobs(&fence_zero, LONG_TTL).await,
        "fence",
        "renew_jobs: a claim with fence 0",
    )?;
    let valid = [held.claim.clone(), other.claim.clone()];
    expect_invalid(
        ctx.store.renew_jobs(&valid, Duration::ZERO).await,
        "ttl",
        "renew_jobs: a zero ttl",
    )?;
    ensure_eq!(
        [get_job(&ctx, "held").await?, get_job(&ctx, "other").await?],
        before,
        "a refused batch renews nothing"
    );
    ensure_eq!(
        ctx.store.renew_jobs(&[], LONG_TTL).await?,
        Vec::<JobRenewal>::new(),
        "an empty batch answers nothing"
    );
    Ok(())
}

/// `answer` without the instant a renewal answers (twins are renewed one
/// after the other).
fn twin_renewal(answer: &JobRenewal) -> JobRenewal {
    match answer {
        JobRenewal::Renewed { .. } => JobRenewal::Renewed {
            expires_at: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
        },
        other => *other,
    }
}

/// Twins, one renewed alone and one in a batch: for a job held, retried,
/// dead-lettered, completed, held by another worker's name and presented
/// with a stale fence, `renew_jobs` answers what `renew_job` answers for
/// its twin, and leaves the job as `renew_job` leaves the twin (ids,
/// fences and instants aside).
pub async fn queue_renew_jobs_answers_and_writes_as_renew_job_does_for_twins<
    S: JobQueue + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let (singles, batch) = twin_claims(&ctx, "renewal-twins").await?;
    let mut alone = Vec::with_capacity(singles.len());
    for claim in &singles {
        alone.push(ctx.store.renew_job(claim, LONG_TTL).await?);
    }
    let together = ctx.store.renew_jobs(&batch, LONG_TTL).await?;
    ensure_twins_agree(
        &ctx,
        Twins {
            batch: &batch,
            singles: &singles,
            together: &together,
            alone: &alone,
        },
        twin_renewal,
        ("renew_jobs", "renew_job"),
    )
    .await
}
