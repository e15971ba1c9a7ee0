//! Twins for the batch operations' second cases: one job settled or
//! renewed alone and its twin in a batch, in every situation a claim can
//! be in, must answer and end alike.

use std::fmt::Debug;

use serde_json::json;
use tenure_lease_core::queue::{FailAction, Job, JobClaim, NewJob};
use tenure_lease_core::JobQueue;

use super::{enqueue_and_claim, get_job, settled};
use crate::cases::util::LONG_TTL;
use crate::ensure_eq;
use crate::harness::{CaseResult, Ctx, Failure};

/// The situations a claim of the batch operations' twin cases is put in.
const SITUATIONS: [&str; 6] = [
    "held",
    "retried",
    "dead-lettered",
    "completed",
    "other-owner",
    "stale-fence",
];

/// Puts `held`'s job in `situation` and answers the claim to present.
async fn into_situation<S: JobQueue>(
    ctx: &Ctx<S>,
    situation: &str,
    held: JobClaim,
) -> Result<JobClaim, Failure> {
    let retry_later = FailAction::Retry { backoff: LONG_TTL };
    match situation {
        "retried" => {
            settled(
                ctx,
                ctx.store.fail(&held, "retry", retry_later).await?,
                "fail",
            )
            .await?;
        }
        "dead-lettered" => {
            let dead = FailAction::DeadLetter;
            settled(ctx, ctx.store.fail(&held, "dead", dead).await?, "fail").await?;
        }
        "completed" => {
            settled(ctx, ctx.store.complete(&held).await?, "complete").await?;
        }
        "other-owner" => {
            return Ok(JobClaim {
                owner: format!("{}-other", held.owner),
                ..held
            })
        }
        "stale-fence" => {
            return Ok(JobClaim {
                fence: held.fence + 1,
                ..held
            })
        }
        _ => {}
    }
    Ok(held)
}

/// `job` without what differs between twins made one after the other: the
/// id, the fence and the instants.
pub(super) fn twin_view(job: &Job) -> Job {
    let epoch = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
    Job {
        id: String::new(),
        fence: 0,
        run_at: epoch,
        created_at: epoch,
        updated_at: epoch,
        lease_expires_at: job.lease_expires_at.map(|_| epoch),
        taken_back_at: job.taken_back_at.map(|_| epoch),
        ..job.clone()
    }
}

/// Claims of twin jobs, one pair per situation (queue
/// `{queue_prefix}-{situation}`), each put in its situation: the claims
/// for the single operation, then those for the batch, in [`SITUATIONS`]
/// order.
pub(super) async fn twin_claims<S: JobQueue>(
    ctx: &Ctx<S>,
    queue_prefix: &str,
) -> Result<(Vec<JobClaim>, Vec<JobClaim>), Failure> {
    let mut singles = Vec::with_capacity(SITUATIONS.len());
    let mut batch = Vec::with_capacity(SITUATIONS.len());
    for situation in SITUATIONS {
        for (twin, claims) in [("single", &mut singles), ("batch", &mut batch)] {
            let new = NewJob::new(
                format!("{queue_prefix}-{situation}"),
                json!({ "twin": true }),
            )
            .id(format!("{twin}-{situation}"))
            .max_attempts(3);
            let held = enqueue_and_claim(ctx, new, "worker-a", LONG_TTL).await?;
            claims.push(into_situation(ctx, situation, held.claim).await?);
        }
    }
    Ok((singles, batch))
}

/// The claims of [`twin_claims`] and what each operation answered for them.
pub(super) struct Twins<'a, A> {
    /// The claims presented in one batch.
    pub batch: &'a [JobClaim],
    /// Their twins, presented one by one.
    pub singles: &'a [JobClaim],
    /// The batch operation's answers.
    pub together: &'a [A],
    /// The single operation's answers, in the same order.
    pub alone: &'a [A],
}

/// Fails unless every batch answer equals its twin's single answer (both
/// seen through `view`, which drops what differs between twins) and every
/// job of the batch reads as its twin does; `operations` names the batch
/// operation and the single one, for the messages.
pub(super) async fn ensure_twins_agree<S: JobQueue, A: PartialEq + Debug>(
    ctx: &Ctx<S>,
    twins: Twins<'_, A>,
    view: fn(&A) -> A,
    (batch_operation, single_operation): (&str, &str),
) -> CaseResult {
    ensure_eq!(
        twins.together.len(),
        twins.batch.len(),
        "{batch_operation}: one answer per claim"
    );
    for (((situation, single), in_batch), (claim, twin)) in SITUATIONS
        .iter()
        .zip(twins.alone)
        .zip(twins.together)
        .zip(twins.batch.iter().zip(twins.singles))
    {
        ensure_eq!(
            view(in_batch),
            view(single),
            "{batch_operation} of a job {situation} (batch answer against \
             {single_operation}'s)"
        );
        ensure_eq!(
            twin_view(&get_job(ctx, &claim.id).await?),
            twin_view(&get_job(ctx, &twin.id).await?),
            "the job {situation} after {batch_operation} (against its twin after \
             {single_operation})"
        );
    }
    Ok(())
}
