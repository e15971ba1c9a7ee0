//! Batches name each job once, wherever in the batch a repeat sits.

use tenure_lease_core::queue::{JobClaim, NewJob};
use tenure_lease_core::JobQueue;

use super::{enqueue_and_claim, job, jobs};
use crate::cases::util::{expect_invalid, LONG_TTL};
use crate::ensure_eq;
use crate::harness::{CaseResult, Ctx};

/// Distinct jobs each batch is made of.
const DISTINCT: usize = 4;

/// Every way to repeat one element of `items` once: a copy of element
/// `from` inserted at every position after it, so repeats sit side by
/// side, apart, and at both ends.
fn with_a_repeat<T: Clone>(items: &[T], alter: impl Fn(&T) -> T) -> Vec<(String, Vec<T>)> {
    let mut batches = Vec::new();
    for from in 0..items.len() {
        for at in from + 1..=items.len() {
            let mut batch = items.to_vec();
            batch.insert(at, alter(&items[from]));
            batches.push((format!("element {from} repeated at position {at}"), batch));
        }
    }
    batches
}

/// Makes the repeated claim of a batch from the one it repeats.
type AlterClaim = fn(&JobClaim) -> JobClaim;

/// Another claim on `claim`'s job: an older fence, when there is one, and
/// another worker (so it differs from `claim` even at fence 1).
fn stale_copy(claim: &JobClaim) -> JobClaim {
    JobClaim {
        owner: format!("{}-before", claim.owner),
        fence: claim.fence.saturating_sub(1).max(1),
        ..claim.clone()
    }
}

/// `complete_many`, `renew_jobs` and `enqueue_batch` refuse a batch naming
/// a job twice, wherever the repeat sits (side by side, apart, first and
/// last) and whether the repeat is the same claim or another one on the
/// same job (a stale fence), as `InvalidInput` naming the batch's field,
/// and change nothing: every job stays as it was and no job of a refused
/// enqueue exists.
pub async fn queue_batches_with_a_job_named_twice_anywhere_are_refused_whole<
    S: JobQueue + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut claims = Vec::with_capacity(DISTINCT);
    for index in 0..DISTINCT {
        let held =
            enqueue_and_claim(&ctx, job(&format!("held-{index}")), "worker-a", LONG_TTL).await?;
        claims.push(held.claim);
    }
    let held_ids: Vec<String> = claims.iter().map(|claim| claim.id.clone()).collect();
    let held_refs: Vec<&str> = held_ids.iter().map(String::as_str).collect();
    let before = jobs(&ctx, &held_refs).await?;

    let repeats: [(&str, AlterClaim); 2] = [
        ("the same claim", JobClaim::clone),
        ("a stale claim", stale_copy),
    ];
    for (repeat, alter) in repeats {
        for (position, batch) in with_a_repeat(&claims, alter) {
            expect_invalid(
                ctx.store.complete_many(&batch).await,
                "claims",
                &format!("complete_many: {repeat}, {position}"),
            )?;
            expect_invalid(
                ctx.store.renew_jobs(&batch, LONG_TTL).await,
                "claims",
                &format!("renew_jobs: {repeat}, {position}"),
            )?;
        }
    }
    ensure_eq!(
        jobs(&ctx, &held_refs).await?,
        before,
        "refused batches change no job"
    );

    let fresh: Vec<NewJob> = (0..DISTINCT)
        .map(|index| job(&format!("fresh-{index}")))
        .collect();
    for (position, batch) in with_a_repeat(&fresh, NewJob::clone) {
        expect_invalid(
            ctx.store.enqueue_batch(&batch).await,
            "id",
            &format!("enqueue_batch: an id twice, {position}"),
        )?;
    }
    let fresh_ids: Vec<String> = fresh.iter().map(|new| new.id.clone()).collect();
    let fresh_refs: Vec<&str> = fresh_ids.iter().map(String::as_str).collect();
    ensure_eq!(
        jobs(&ctx, &fresh_refs).await?,
        vec![None; DISTINCT],
        "a refused enqueue_batch enqueues none of its jobs"
    );
    Ok(())
}
