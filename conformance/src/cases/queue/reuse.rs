//! Ids after the end: a finished job keeps its id until it is purged, and
//! the id then starts a new job with nothing of the old one.

use std::time::Duration;

use tenure_lease_core::queue::{ClaimRequest, FailAction, JobState, TakeBack};
use tenure_lease_core::JobQueue;

use super::{enqueue_and_claim, expect_already_exists, get_job, job, settled, QUEUE, TICK};
use crate::cases::util::{LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// How each finished job of [`queue_an_id_is_reused_only_after_its_job_is_purged`]
/// finished.
const FINISHES: [&str; 5] = [
    "completed",
    "failed to a dead letter",
    "out of attempts",
    "reaped on its last attempt",
    "taken back, then completed",
];

/// An id stays in use through every finished state (completed;
/// dead-lettered by a worker, out of attempts, or by the reaper; completed
/// after a take-back left its trace): enqueuing it again is
/// `AlreadyExists` and changes nothing. Once `purge_jobs` deleted the job,
/// the id is enqueued afresh: attempt 0, fence 0, no owner, error, dead
/// reason, lease or take-back trace of the old job, and it is claimed
/// under a fence above every earlier one.
pub async fn queue_an_id_is_reused_only_after_its_job_is_purged<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut highest_fence = 0;
    for (index, finish) in FINISHES.iter().enumerate() {
        let id = format!("reused-{index}");
        let one_attempt = job(&id).max_attempts(1);
        let held = enqueue_and_claim(&ctx, one_attempt, "worker-a", SHORT_TTL).await?;
        highest_fence = highest_fence.max(held.claim.fence);
        match index {
            0 => {
                settled(&ctx, ctx.store.complete(&held.claim).await?, "complete").await?;
            }
            1 => {
                let failed = ctx
                    .store
                    .fail(&held.claim, "broken", FailAction::DeadLetter)
                    .await?;
                settled(&ctx, failed, "fail with dead-letter").await?;
            }
            2 => {
                let retry = FailAction::Retry {
                    backoff: Duration::ZERO,
                };
                let failed = ctx.store.fail(&held.claim, "broken", retry).await?;
                settled(&ctx, failed, "fail on the last attempt").await?;
            }
            _ => {
                let ends = get_job(&ctx, &id)
                    .await?
                    .lease_expires_at
                    .ok_or_else(|| Failure(format!("claimed job {id:?} has no lease")))?;
                ctx.advance_past(ends).await?;
                ctx.store.reap(Duration::ZERO).await?;
                if index == 4 {
                    let TakeBack::Taken(taken) = ctx.store.take_back(&held.claim, LONG_TTL).await?
                    else {
                        return Err(Failure(format!(
                            "the live copy of reaped job {id:?} was not taken back"
                        )));
                    };
                    highest_fence = highest_fence.max(taken.claim.fence);
                    settled(&ctx, ctx.store.complete(&taken.claim).await?, "complete").await?;
                }
            }
        }
        let finished = get_job(&ctx, &id).await?;
        ensure!(
            matches!(finished.state, JobState::Completed | JobState::DeadLettered),
            "job {id:?} ({finish}) is finished, not {:?}",
            finished.state
        );
        expect_already_exists(
            ctx.store.enqueue(&job(&id)).await,
            &format!("enqueue of the id of a job {finish}"),
        )?;
        ensure_eq!(
            get_job(&ctx, &id).await?,
            finished,
            "a refused enqueue leaves the job {finish} as it was"
        );
    }

    ctx.advance(TICK).await?;
    ensure_eq!(
        ctx.store.purge_jobs(Duration::ZERO).await?,
        FINISHES.len() as u64,
        "purge_jobs deletes every finished job"
    );
    for (index, finish) in FINISHES.iter().enumerate() {
        let id = format!("reused-{index}");
        let again = ctx.store.enqueue(&job(&id)).await?;
        let fresh = (
            again.state,
            again.attempt,
            again.fence,
            again.owner.clone(),
            again.last_error.clone(),
            again.dead_reason,
            again.lease_expires_at,
            again.taken_back,
            again.taken_back_at,
        );
        ensure_eq!(
            fresh,
            (JobState::Queued, 0, 0, None, None, None, None, 0, None),
            "the id of a purged job ({finish}) is enqueued afresh: state, attempt, fence, owner, \
             error, dead reason, lease, take-back count and instant"
        );
        ensure_eq!(
            get_job(&ctx, &id).await?,
            again,
            "get_job reads the new job"
        );
        let reclaimed = enqueue_claim_existing(&ctx, &id).await?;
        ensure!(
            reclaimed > highest_fence,
            "the new job's first claim carries fence {reclaimed}, not above {highest_fence} of \
             the purged jobs' claims"
        );
        highest_fence = reclaimed;
    }
    Ok(())
}

/// Claims the queued job `id` (of [`QUEUE`], nothing else queued there);
/// answers the claim's fence.
async fn enqueue_claim_existing<S: JobQueue>(ctx: &Ctx<S>, id: &str) -> Result<u64, Failure> {
    let request = ClaimRequest::new(QUEUE, "worker-b", LONG_TTL);
    let claimed = ctx.store.claim(&request).await?;
    match claimed.as_slice() {
        [only] if only.job.id == id => Ok(only.claim.fence),
        other => Err(Failure(format!(
            "claiming {id:?} from {QUEUE:?} answered {:?}",
            other.iter().map(|each| &each.job.id).collect::<Vec<_>>()
        ))),
    }
}
