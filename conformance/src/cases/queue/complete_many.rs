//! `complete_many`: a batch of fenced completions, each answered as
//! `complete` would answer it alone.

use tenure_lease_core::backend::validate::MAX_BATCH;
use tenure_lease_core::queue::{JobClaim, JobLoss, JobSettle, JobState};
use tenure_lease_core::JobQueue;

use super::twins::{ensure_twins_agree, twin_claims, twin_view, Twins};
use super::{enqueue_and_claim, get_job, job, settled};
use crate::cases::util::{expect_invalid, LONG_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Each claim of a batch is judged on its own, in order: live claims
/// complete, a stale fence, a finished job and a missing one are refused
/// with their reasons and change nothing; the same batch again refuses the
/// completed ones as `Finished(Completed)`.
pub async fn queue_complete_many_settles_each_claim_as_complete_would<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first = enqueue_and_claim(&ctx, job("first"), "worker-a", LONG_TTL).await?;
    let stale = enqueue_and_claim(&ctx, job("stale"), "worker-a", LONG_TTL).await?;
    let done = enqueue_and_claim(&ctx, job("done"), "worker-a", LONG_TTL).await?;
    let last = enqueue_and_claim(&ctx, job("last"), "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    let stale_claim = JobClaim {
        fence: stale.claim.fence + 1,
        ..stale.claim.clone()
    };
    let missing = JobClaim {
        id: "never-enqueued".into(),
        ..first.claim.clone()
    };
    let stale_before = get_job(&ctx, "stale").await?;

    let batch = [
        first.claim.clone(),
        stale_claim,
        done.claim.clone(),
        missing,
        last.claim.clone(),
    ];
    let answers = ctx.store.complete_many(&batch).await?;
    ensure_eq!(answers.len(), batch.len(), "one answer per claim");
    for (answer, claim) in [(&answers[0], &first.claim), (&answers[4], &last.claim)] {
        let JobSettle::Settled(completed) = answer else {
            return Err(Failure(format!(
                "{} was not completed: {answer:?}",
                claim.id
            )));
        };
        ensure_eq!(&completed.id, &claim.id, "answers are in the batch's order");
        ensure_eq!(
            completed.state,
            JobState::Completed,
            "a live claim completes"
        );
        ensure_eq!(
            get_job(&ctx, &claim.id).await?.state,
            JobState::Completed,
            "the store holds {} completed",
            claim.id
        );
    }
    ensure_eq!(
        &answers[1],
        &JobSettle::Rejected(JobLoss::FenceChanged),
        "a stale fence is refused"
    );
    ensure_eq!(
        &answers[2],
        &JobSettle::Rejected(JobLoss::Finished(JobState::Completed)),
        "a finished job is refused"
    );
    ensure_eq!(
        &answers[3],
        &JobSettle::Rejected(JobLoss::Missing),
        "a missing job is refused"
    );
    ensure_eq!(
        get_job(&ctx, "stale").await?,
        stale_before,
        "a refused claim changes nothing"
    );

    let again = ctx
        .store
        .complete_many(&[first.claim.clone(), last.claim.clone()])
        .await?;
    ensure!(
        again
            .iter()
            .all(|answer| *answer == JobSettle::Rejected(JobLoss::Finished(JobState::Completed))),
        "a retried batch answers Finished(Completed) for what landed: {again:?}"
    );
    Ok(())
}

/// A batch naming a job twice, or longer than `MAX_BATCH`, is
/// `InvalidInput` naming `claims` and completes nothing; an empty batch
/// answers nothing.
pub async fn queue_complete_many_refuses_bad_batches<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("held"), "worker-a", LONG_TTL).await?;
    let before = get_job(&ctx, "held").await?;

    let twice = [held.claim.clone(), held.claim.clone()];
    expect_invalid(
        ctx.store.complete_many(&twice).await,
        "claims",
        "complete_many: a job named twice",
    )?;
    let too_many: Vec<JobClaim> = (0..=MAX_BATCH)
        .map(|n| JobClaim {
            id: format!("job-{n}"),
            ..held.claim.clone()
        })
        .collect();
    expect_invalid(
        ctx.store.complete_many(&too_many).await,
        "claims",
        "complete_many: over MAX_BATCH claims",
    )?;
    ensure_eq!(
        get_job(&ctx, "held").await?,
        before,
        "a refused batch completes nothing"
    );
    ensure_eq!(
        ctx.store.complete_many(&[]).await?,
        Vec::<JobSettle>::new(),
        "an empty batch answers nothing"
    );
    Ok(())
}

/// `answer` with its job (if any) seen as [`twin_view`] does.
fn twin_answer(answer: &JobSettle) -> JobSettle {
    match answer {
        JobSettle::Settled(job) => JobSettle::Settled(twin_view(job)),
        other => other.clone(),
    }
}

/// Twins, one completed alone and one in a batch: for a job held, retried,
/// dead-lettered, completed, held by another worker's name and presented
/// with a stale fence, `complete_many` answers what `complete` answers for
/// its twin, and leaves the job as `complete` leaves the twin (ids, fences
/// and instants aside).
pub async fn queue_complete_many_answers_and_writes_as_complete_does_for_twins<
    S: JobQueue + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let (singles, batch) = twin_claims(&ctx, "twins").await?;
    let mut alone = Vec::with_capacity(singles.len());
    for claim in &singles {
        alone.push(ctx.store.complete(claim).await?);
    }
    let together = ctx.store.complete_many(&batch).await?;
    ensure_twins_agree(
        &ctx,
        Twins {
            batch: &batch,
            singles: &singles,
            together: &together,
            alone: &alone,
        },
        twin_answer,
        ("complete_many", "complete"),
    )
    .await
}
