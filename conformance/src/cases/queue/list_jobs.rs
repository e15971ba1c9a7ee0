//! `list_jobs`: the operator's view of a queue, by state, oldest first.

use serde_json::json;
use tenure_lease_core::queue::{FailAction, JobState, NewJob};
use tenure_lease_core::JobQueue;

use super::{enqueue, enqueue_and_claim, job, settled, QUEUE, TICK};
use crate::cases::util::{expect_invalid, LONG_TTL};
use crate::ensure_eq;
use crate::harness::{CaseResult, Ctx, Failure};

/// `list_jobs` answers a queue's jobs in any state or in one, oldest first
/// (by creation, then id), at most `limit`, and nothing of other queues;
/// a bad queue or limit is `InvalidInput`.
pub async fn queue_list_jobs_by_state_oldest_first<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let done = enqueue_and_claim(&ctx, job("done"), "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    ctx.advance(TICK).await?;
    let dead = enqueue_and_claim(&ctx, job("dead"), "worker-a", LONG_TTL).await?;
    let failed = ctx
        .store
        .fail(&dead.claim, "broken", FailAction::DeadLetter)
        .await?;
    settled(&ctx, failed, "fail with dead-letter").await?;
    ctx.advance(TICK).await?;
    enqueue_and_claim(&ctx, job("held"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    enqueue(&ctx, job("ready")).await?;
    ctx.advance(TICK).await?;
    let tomorrow = ctx.store.now().await? + chrono::TimeDelta::days(1);
    enqueue(&ctx, job("later").run_at(tomorrow)).await?;
    enqueue(&ctx, NewJob::new("other-queue", json!(1)).id("elsewhere")).await?;

    let ids = |state: Option<JobState>, limit: usize| {
        let ctx = &ctx;
        async move {
            let jobs = ctx.store.list_jobs(QUEUE, state, limit).await?;
            Ok::<_, Failure>(jobs.into_iter().map(|job| job.id).collect::<Vec<_>>())
        }
    };
    ensure_eq!(
        ids(None, 100).await?,
        ["done", "dead", "held", "ready", "later"],
        "every job of the queue, oldest first"
    );
    ensure_eq!(
        ids(Some(JobState::Queued), 100).await?,
        ["ready", "later"],
        "queued, visible or not"
    );
    ensure_eq!(
        ids(Some(JobState::Claimed), 100).await?,
        ["held"],
        "claimed"
    );
    ensure_eq!(
        ids(Some(JobState::Completed), 100).await?,
        ["done"],
        "completed"
    );
    ensure_eq!(
        ids(Some(JobState::DeadLettered), 100).await?,
        ["dead"],
        "dead-lettered"
    );
    ensure_eq!(
        ids(None, 2).await?,
        ["done", "dead"],
        "at most the limit, oldest first"
    );
    let listed = ctx.store.list_jobs("other-queue", None, 100).await?;
    ensure_eq!(
        listed.len(),
        1,
        "another queue's listing holds its own job only"
    );
    ensure_eq!(
        ctx.store.list_jobs("no-such-queue", None, 100).await?.len(),
        0,
        "a queue nobody used lists nothing"
    );

    expect_invalid(
        ctx.store.list_jobs(QUEUE, None, 0).await,
        "limit",
        "list_jobs: limit 0",
    )?;
    expect_invalid(
        ctx.store.list_jobs("", None, 10).await,
        "queue",
        "list_jobs: empty queue",
    )?;
    Ok(())
}
