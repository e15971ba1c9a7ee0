//! The queue operations on a clock offset from the process's.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;
use tenure_lease_core::queue::{ClaimRequest, FailAction, JobQueue, JobSettle, NewJob};
use tenure_lease_core::{Clock, SystemClock};

use super::{ensure_near, expected_now, plus, OFFSETS, TTL};
use crate::ensure;
use crate::harness::{CaseResult, Ctx, Failure};

/// A queue on a clock an hour ahead of, then behind, the process's: jobs
/// are stamped by it; a `run_at` half an hour from the process's clock
/// toward the store's is due on the clock ahead and not yet on the clock
/// behind; claims end ten minutes after it, and a reap leaves them; a
/// retry's backoff runs from it; retention counts a job's age by it.
pub async fn clock_queue_decisions_follow_the_store_clock<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for (tag, offset) in OFFSETS {
        let Some(store) = ctx.offset_store(offset).await? else {
            return Ok(());
        };
        let what = |step: &str| format!("{step}, the store's clock {tag} of the process's");
        let queue = format!("clock-{tag}");
        let (now_id, halfway_id) = (format!("{queue}-now"), format!("{queue}-halfway"));
        let expected = expected_now(offset);
        let job = store
            .enqueue(&NewJob::new(&queue, json!({})).id(&now_id))
            .await?;
        ensure_near(
            job.created_at,
            expected,
            &what("an enqueued job's created_at"),
        )?;
        ensure_near(
            job.run_at,
            expected,
            &what("an enqueued job's default run_at"),
        )?;
        let process_now = SystemClock.now();
        let halfway = process_now
            .checked_add_signed(offset / 2)
            .unwrap_or(process_now);
        store
            .enqueue(
                &NewJob::new(&queue, json!({}))
                    .id(&halfway_id)
                    .run_at(halfway),
            )
            .await?;

        let claimed = store
            .claim(&ClaimRequest::new(&queue, "worker", TTL).limit(10))
            .await?;
        let ids: BTreeSet<&str> = claimed.iter().map(|held| held.job.id.as_str()).collect();
        let due: BTreeSet<&str> = if offset > TimeDelta::zero() {
            BTreeSet::from([now_id.as_str(), halfway_id.as_str()])
        } else {
            BTreeSet::from([now_id.as_str()])
        };
        ensure!(
            ids == due,
            "{}: claimed {ids:?}, but by the store's clock the due jobs are {due:?} (one runs \
             at {halfway}, half an hour from the process's clock toward the store's)",
            what("claim")
        );
        for held in &claimed {
            let Some(expires_at) = held.job.lease_expires_at else {
                return Err(Failure(format!(
                    "{}: no lease in {:?}",
                    what("claim"),
                    held.job
                )));
            };
            ensure_near(
                expires_at,
                plus(expected, TTL),
                &what("a claim's lease end"),
            )?;
        }
        let reaped = store.reap(Duration::ZERO).await?;
        ensure!(
            reaped
                .requeued
                .iter()
                .chain(&reaped.dead_lettered)
                .all(|job| !job.id.starts_with(&queue)),
            "{}: a claim with ten minutes left was reaped: {reaped:?}",
            what("reap")
        );
        let Some(now_claim) = claimed.iter().find(|held| held.job.id == now_id) else {
            return Err(Failure(format!(
                "{}: {now_id} was not claimed",
                what("claim")
            )));
        };
        let settled = store.complete(&now_claim.claim).await?;
        ensure!(
            matches!(settled, JobSettle::Settled(_)),
            "{}: the claim's completion answered {settled:?}",
            what("complete")
        );
        store.purge_jobs(TTL).await?;
        ensure!(
            store.get_job(&now_id).await?.is_some(),
            "{}: a job finished a moment ago was purged as ten minutes old",
            what("purge_jobs")
        );
        if let Some(halfway_claim) = claimed.iter().find(|held| held.job.id == halfway_id) {
            let retry = FailAction::Retry { backoff: TTL };
            let failed = store.fail(&halfway_claim.claim, "later", retry).await?;
            let JobSettle::Settled(job) = failed else {
                return Err(Failure(format!("{}: answered {failed:?}", what("fail"))));
            };
            ensure_near(job.run_at, plus(expected, TTL), &what("a retry's run_at"))?;
            let again = store
                .claim(&ClaimRequest::new(&queue, "worker", TTL).limit(10))
                .await?;
            ensure!(
                again.is_empty(),
                "{}: a job retried ten minutes from now was claimed again at once: {again:?}",
                what("claim after a retry with backoff")
            );
        }
    }
    Ok(())
}
