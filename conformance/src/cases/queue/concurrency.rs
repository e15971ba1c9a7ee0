//! At most N jobs running at once through a
//! [`ConcurrencyLimit`](tenure_lease_core::queue::ConcurrencyLimit), built
//! on a counted scope ([contract §17](tenure_lease_core::contract)).
//!
//! The limit holds on any store that keeps counted scopes: racing workers
//! are counted, a finished job's slot goes to the next claim, and a dead
//! worker's slot is taken over once its lease lapsed.

use std::sync::Arc;

use tenure_lease_core::queue::{
    ClaimRequest, ConcurrencyLimit, JobQueue, JobState, LimitedClaim, RunningJob,
};
use tenure_lease_core::{LossReason, Renewal};

use super::{enqueue, expire_job, get_job, job, QUEUE};
use crate::cases::util::{StartLine, LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Claims through `limit` for `worker`, failing the case unless a job is
/// claimed, held by the worker, and the slot lease names the limit's key.
async fn runs<S: JobQueue>(
    ctx: &Ctx<S>,
    limit: &ConcurrencyLimit,
    request: &ClaimRequest,
) -> Result<RunningJob, Failure> {
    match limit.claim(&*ctx.store, request).await? {
        LimitedClaim::Claimed(running) => {
            ensure_eq!(
                get_job(ctx, &running.job.job.id).await?.state,
                JobState::Claimed,
                "the job is claimed"
            );
            ensure!(
                running
                    .slot
                    .slot(&limit.key)
                    .is_some_and(|slot| slot < limit.capacity),
                "the slot lease holds a slot of {:?}: {:?}",
                limit.key,
                running.slot
            );
            Ok(running)
        }
        other => Err(Failure(format!(
            "expected {} to claim a job through {limit:?}, got {other:?}",
            request.worker
        ))),
    }
}

/// Claims through `limit`, failing the case unless it is full, naming the
/// slot lease of `running` that frees first (the earliest expiry, then the
/// lowest slot) and claiming nothing.
async fn full<S: JobQueue>(
    ctx: &Ctx<S>,
    limit: &ConcurrencyLimit,
    request: &ClaimRequest,
    running: &[&RunningJob],
) -> CaseResult {
    let holder = running
        .iter()
        .min_by_key(|job| (job.slot.lease_expires_at, job.slot.slot(&limit.key)))
        .ok_or_else(|| Failure("no running job to free first".into()))?;
    let queued = ctx.store.count_jobs().await?;
    match limit.claim(&*ctx.store, request).await? {
        LimitedClaim::Full {
            holder: actual,
            retry_after,
        } => {
            ensure_eq!(
                actual.id,
                holder.slot.id,
                "Full names the slot that frees first"
            );
            ensure!(retry_after.is_some(), "a valid slot has a retry_after");
        }
        other => {
            return Err(Failure(format!(
                "expected {limit:?} to be full, got {other:?}"
            )))
        }
    }
    ensure_eq!(
        ctx.store.count_jobs().await?,
        queued,
        "a full limit claims nothing"
    );
    Ok(())
}

fn request(worker: &str) -> ClaimRequest {
    ClaimRequest::new(QUEUE, worker, LONG_TTL)
}

/// A limit of 2 runs two jobs at once: the third claim finds it full; a
/// completed job's slot goes to the next claim; an empty queue gives the
/// slot back. A second queue naming the same key shares the slots.
pub async fn queue_concurrency_limit_runs_at_most_its_capacity<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for id in ["j1", "j2", "j3", "j4"] {
        enqueue(&ctx, job(id)).await?;
    }
    enqueue(
        &ctx,
        tenure_lease_core::queue::NewJob::new("other-queue", serde_json::json!({})).id("k1"),
    )
    .await?;
    let limit = ConcurrencyLimit::new("exports", 2);
    let first = runs(&ctx, &limit, &request("worker-a")).await?;
    let second = runs(&ctx, &limit, &request("worker-a")).await?;
    ensure!(
        first.slot.slot("exports") != second.slot.slot("exports"),
        "two jobs, two slots"
    );
    full(&ctx, &limit, &request("worker-b"), &[&first, &second]).await?;
    full(
        &ctx,
        &limit,
        &ClaimRequest::new("other-queue", "worker-b", LONG_TTL),
        &[&first, &second],
    )
    .await?;
    first.complete(&*ctx.store).await?;
    ensure_eq!(
        get_job(&ctx, &first.job.job.id).await?.state,
        JobState::Completed,
        "complete completes the job"
    );
    let third = runs(
        &ctx,
        &limit,
        &ClaimRequest::new("other-queue", "worker-b", LONG_TTL),
    )
    .await?;
    ensure_eq!(
        third.job.job.id,
        "k1",
        "the shared key limits the other queue too"
    );
    full(&ctx, &limit, &request("worker-c"), &[&second, &third]).await?;
    second.complete(&*ctx.store).await?;
    third.complete(&*ctx.store).await?;
    let wide = ConcurrencyLimit::new("exports", 4);
    let mut running = Vec::new();
    for worker in ["worker-a", "worker-b"] {
        running.push(runs(&ctx, &wide, &request(worker)).await?);
    }
    match wide.claim(&*ctx.store, &request("worker-c")).await? {
        LimitedClaim::NoJob => {}
        other => return Err(Failure(format!("expected NoJob, got {other:?}"))),
    }
    let active = ctx.store.list_active().await?;
    ensure_eq!(
        active
            .iter()
            .filter(|record| record.scopes.contains("exports"))
            .count(),
        2,
        "a claim that found no job gave its slot back"
    );
    Ok(())
}

/// Workers racing through a limit of 3 for more jobs than that claim
/// exactly 3, each holding a slot of its own.
pub async fn race_queue_concurrency_limit_runs_exactly_its_capacity<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const RACERS: usize = 8;
    const CAPACITY: u32 = 3;
    for index in 0..10 {
        enqueue(&ctx, job(&format!("j{index}"))).await?;
    }
    let limit = ConcurrencyLimit::new("raced", CAPACITY);
    let start = StartLine::new(RACERS);
    let tasks: Vec<_> = (0..RACERS)
        .map(|racer| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let limit = limit.clone();
            let request = request(&format!("worker-{racer}"));
            tokio::spawn(async move {
                start.wait().await;
                limit.claim(&*store, &request).await
            })
        })
        .collect();
    let mut slots = Vec::new();
    for task in tasks {
        match task
            .await
            .map_err(|error| Failure(format!("a racer panicked: {error}")))??
        {
            LimitedClaim::Claimed(running) => slots.push(running.slot.slot("raced")),
            LimitedClaim::Full { .. } => {}
            other => return Err(Failure(format!("a racer answered {other:?}"))),
        }
    }
    slots.sort_unstable();
    ensure_eq!(
        slots,
        (0..CAPACITY).map(Some).collect::<Vec<_>>(),
        "{RACERS} racers through a limit of {CAPACITY}: one job per slot"
    );
    let claimed = ctx
        .store
        .count_jobs()
        .await?
        .into_iter()
        .find(|counts| counts.queue == QUEUE)
        .map_or(0, |counts| counts.claimed);
    ensure_eq!(
        claimed,
        u64::from(CAPACITY),
        "exactly the capacity is claimed"
    );
    Ok(())
}

/// A worker that stops renewing loses its slot once the lease lapsed: the
/// next claim takes the slot over under a new fence, and the stalled
/// worker's renewal hears it lost the slot.
pub async fn queue_concurrency_limit_takes_a_lapsed_workers_slot<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for id in ["j1", "j2"] {
        enqueue(&ctx, job(id)).await?;
    }
    let limit = ConcurrencyLimit::new("solo", 1);
    let stalled = runs(
        &ctx,
        &limit,
        &ClaimRequest::new(QUEUE, "worker-a", SHORT_TTL),
    )
    .await?;
    expire_job(&ctx, &stalled.job.job).await?;
    let next = runs(&ctx, &limit, &request("worker-b")).await?;
    ensure_eq!(next.slot.slot("solo"), Some(0), "the lapsed slot is taken");
    ensure!(
        next.slot.fence > stalled.slot.fence,
        "the new holder's fence {} is above the stalled one's {}",
        next.slot.fence,
        stalled.slot.fence
    );
    let before = get_job(&ctx, &stalled.job.job.id).await?;
    let (slot, job) = stalled.renew(&*ctx.store, LONG_TTL).await?;
    ensure!(
        matches!(
            slot,
            Renewal::Lost(LossReason::OwnerChanged | LossReason::FenceChanged)
        ),
        "the stalled worker hears it lost the slot: {slot:?}"
    );
    ensure!(
        job.is_none(),
        "a job whose slot is lost is not renewed: {job:?}"
    );
    ensure_eq!(
        get_job(&ctx, &stalled.job.job.id).await?,
        before,
        "the stalled worker's job is left to lapse"
    );
    Ok(())
}
