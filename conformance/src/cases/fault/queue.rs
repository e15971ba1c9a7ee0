//! Fault cases on the job queue: lost replies of queue writes
//! ([contract §9 and §10](tenure_lease_core::contract)).
//!
//! A settle write retried after a lost reply must answer the typed truth
//! ("already finished"), and a claim whose reply was lost must not let the
//! job go to a second worker while the first one's lease runs: the first
//! worker finds its claim with `get_job`, or the reaper hands the job on
//! once that lease ran out, under a greater fence the first claim cannot
//! write with.

use std::time::Duration;

use tenure_lease_core::layer::Fault;
use tenure_lease_core::queue::{
    ClaimRequest, Job, JobLoss, JobQueue, JobRenewal, JobSettle, JobState, NewJob,
};

use super::{expect_unknown, faulty};
use crate::cases::util::{LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The queue the cases use.
const QUEUE: &str = "fault-queue";

/// Enqueues job `id` on [`QUEUE`].
async fn enqueue<S: JobQueue>(ctx: &Ctx<S>, id: &str) -> Result<Job, Failure> {
    Ok(ctx
        .store
        .enqueue(&NewJob::new(QUEUE, serde_json::json!({ "job": id })).id(id))
        .await?)
}

/// Reads job `id`, failing the case when it is missing.
async fn get_job<S: JobQueue>(ctx: &Ctx<S>, id: &str) -> Result<Job, Failure> {
    ctx.store
        .get_job(id)
        .await?
        .ok_or_else(|| Failure(format!("job {id:?} is missing")))
}

/// A `complete` whose reply was lost was applied: the retry answers
/// `Finished(Completed)`, and the job reads completed.
pub async fn fault_queue_complete_reply_lost_retry_answers_finished<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-completed-unseen";
    enqueue(&ctx, id).await?;
    let claimed = ctx
        .store
        .claim(&ClaimRequest::new(QUEUE, "worker-a", LONG_TTL))
        .await?;
    let [claimed] = claimed.as_slice() else {
        return Err(Failure(format!(
            "expected one job claimed, got {claimed:?}"
        )));
    };
    let store = faulty(&ctx);
    store.hook().inject("complete", Some(id), Fault::ReplyLost);
    expect_unknown(
        store.complete(&claimed.claim).await,
        "the completion whose reply was lost",
    )?;
    store.hook().clear();
    ensure_eq!(
        store.complete(&claimed.claim).await?,
        JobSettle::Rejected(JobLoss::Finished(JobState::Completed)),
        "the retry answers the truth: already finished"
    );
    let job = get_job(&ctx, id).await?;
    ensure_eq!(job.state, JobState::Completed);
    ensure_eq!(
        (job.owner.as_deref(), job.fence, job.attempt),
        (Some("worker-a"), claimed.claim.fence, 1),
        "the completion kept owner, fence and attempt"
    );
    Ok(())
}

/// A claim whose reply was lost took the job: nobody else gets it while
/// that lease runs, the first worker reads its claim back with `get_job`
/// and can renew it, and once the lease ran out the reaper hands the job to
/// the next worker under a greater fence, which the first claim can no
/// longer write with.
pub async fn fault_queue_claim_reply_lost_never_hands_a_job_to_two_workers<
    S: JobQueue + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-claimed-unseen";
    enqueue(&ctx, id).await?;
    let store = faulty(&ctx);
    store.hook().inject("claim", None, Fault::ReplyLost);
    expect_unknown(
        store
            .claim(&ClaimRequest::new(QUEUE, "worker-a", SHORT_TTL))
            .await,
        "the claim whose reply was lost",
    )?;
    store.hook().clear();
    let rival = ClaimRequest::new(QUEUE, "worker-b", LONG_TTL).limit(10);
    ensure_eq!(
        store.claim(&rival).await?,
        vec![],
        "the job went to the first worker, and to nobody else"
    );
    let held = get_job(&ctx, id).await?;
    ensure_eq!(held.state, JobState::Claimed);
    ensure_eq!(held.owner.as_deref(), Some("worker-a"));
    ensure_eq!(held.attempt, 1);
    let first = held
        .claim()
        .ok_or_else(|| Failure(format!("a claimed job has a claim: {held:?}")))?;
    let expiry = match store.renew_job(&first, SHORT_TTL).await? {
        JobRenewal::Renewed { expires_at } => expires_at,
        other => {
            return Err(Failure(format!(
                "the claim read back renews, got {other:?}"
            )))
        }
    };

    ctx.advance_past(expiry).await?;
    let report = store.reap(Duration::ZERO).await?;
    ensure!(
        report.requeued.iter().any(|job| job.id == id),
        "the reaper requeued the job whose lease ran out: {report:?}"
    );
    let second = store.claim(&rival).await?;
    let [second] = second.as_slice() else {
        return Err(Failure(format!(
            "expected the second worker to claim the job, got {second:?}"
        )));
    };
    ensure_eq!(second.job.id, id);
    ensure!(
        second.claim.fence > first.fence,
        "the second claim's fence {} is above the first's {}",
        second.claim.fence,
        first.fence
    );
    ensure_eq!(
        store.complete(&first).await?,
        JobSettle::Rejected(JobLoss::OwnerChanged),
        "the first claim no longer writes"
    );
    ensure_eq!(
        get_job(&ctx, id).await?.claim(),
        Some(second.claim.clone()),
        "the job is the second worker's alone"
    );
    Ok(())
}
