//! Claims within a rate limit ([contract §16](tenure_lease_core::contract)):
//! `claim_limited` hands out at most as many jobs as the limit has permits
//! left, one use per job, atomically, and says when the limit held a
//! claimable job back.
//!
//! As for admissions, racing claimers on one limit are counted, and the
//! window's end is reached to the microsecond on a clock the kit places.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::limits::MAX_RATE_PERMITS;
use tenure_lease_core::queue::{ClaimRequest, Claimed, JobState};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{clock, Admission, AdmitRequest, JobQueue};

use super::{enqueue, get_job, ids, job, QUEUE};
use crate::cases::util::{expect_invalid, micro_before, StartLine, LONG_TTL, NEEDS_MANUAL_CLOCK};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// A period no case waits out.
const LONG_PERIOD: Duration = Duration::from_secs(3600);

/// How many claimers race on one limit.
const RACERS: usize = 8;

/// A claim of up to `limit` jobs of [`QUEUE`] within `rate_limit`.
fn limited(limit: usize, rate_limit: &RateLimit) -> ClaimRequest {
    ClaimRequest::new(QUEUE, "worker-a", LONG_TTL)
        .limit(limit)
        .rate_limit(rate_limit.clone())
}

/// [`RACERS`] claimers of up to two jobs each within `limit`, each waiting
/// at `start`.
fn racing_claimers<S: JobQueue + 'static>(
    ctx: &Ctx<S>,
    limit: &RateLimit,
    start: &Arc<StartLine>,
) -> Vec<tokio::task::JoinHandle<tenure_lease_core::Result<Claimed>>> {
    (0..RACERS)
        .map(|racer| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(start);
            let request = ClaimRequest::new(QUEUE, format!("worker-{racer}"), LONG_TTL)
                .limit(2)
                .rate_limit(limit.clone());
            tokio::spawn(async move {
                start.wait().await;
                store.claim_limited(&request).await
            })
        })
        .collect()
}

/// Claims with `request` through `claim_limited`, failing the case unless
/// it hands out exactly the jobs `expected`, in order, each claimed as
/// `get_job` reads it, and holds back exactly when `held_back` says;
/// answers the claim.
async fn claimed<S: JobQueue>(
    ctx: &Ctx<S>,
    request: &ClaimRequest,
    expected: &[&str],
    held_back: bool,
) -> Result<Claimed, Failure> {
    let claimed = ctx.store.claim_limited(request).await?;
    ensure_eq!(
        ids(claimed.jobs.iter().map(|each| &each.job)),
        expected,
        "claim_limited of up to {} within {:?}",
        request.limit,
        request.rate_limit
    );
    for each in &claimed.jobs {
        ensure_eq!(each.job.state, JobState::Claimed, "a claimed job's state");
        ensure_eq!(
            get_job(ctx, &each.job.id).await?,
            each.job,
            "get_job reads the claimed job"
        );
    }
    match (claimed.retry_after, request.rate_limit.as_ref()) {
        (Some(retry_after), Some(limit)) => {
            ensure!(
                held_back,
                "nothing claimable was held back, yet retry_after is {retry_after:?}"
            );
            ensure!(
                retry_after > Duration::ZERO && retry_after <= limit.period,
                "retry_after {retry_after:?} lies within (0, {:?}]",
                limit.period
            );
        }
        (Some(retry_after), None) => {
            return Err(Failure(format!(
                "a claim without a rate limit answered retry_after {retry_after:?}"
            )))
        }
        (None, _) => ensure!(
            !held_back,
            "the limit held a claimable job back, yet no retry_after was answered"
        ),
    }
    Ok(claimed)
}

/// `claim_limited` claims no more jobs than permits are left, best first,
/// and says when it held claimable jobs back; jobs held back stay queued;
/// without a rate limit it claims as `claim` does; a claim that finds
/// nothing uses no permit; admissions and claims naming one limit share
/// its log.
pub async fn queue_claim_limited_claims_no_more_than_the_permits<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for id in ["j-0", "j-1", "j-2", "j-3", "j-4"] {
        enqueue(&ctx, job(id)).await?;
    }
    let limit = RateLimit::new("jobs-api", 3, LONG_PERIOD);
    claimed(&ctx, &limited(10, &limit), &["j-0", "j-1", "j-2"], true).await?;
    claimed(&ctx, &limited(1, &limit), &[], true).await?;
    for id in ["j-3", "j-4"] {
        ensure_eq!(
            get_job(&ctx, id).await?.state,
            JobState::Queued,
            "a job held back stays queued"
        );
    }
    let unlimited = ClaimRequest::new(QUEUE, "worker-b", LONG_TTL).limit(10);
    claimed(&ctx, &unlimited, &["j-3", "j-4"], false).await?;

    let fresh = RateLimit::new("fresh", 2, LONG_PERIOD);
    claimed(&ctx, &limited(5, &fresh), &[], false).await?;
    enqueue(&ctx, job("k-0")).await?;
    enqueue(&ctx, job("k-1")).await?;
    enqueue(&ctx, job("k-2")).await?;
    // The empty claim used nothing: both permits are left; an admission
    // naming the limit then takes the last one.
    claimed(&ctx, &limited(1, &fresh), &["k-0"], false).await?;
    match ctx
        .store
        .admit(&AdmitRequest::new("lease", "worker-a").rate_limit(fresh.clone()))
        .await?
    {
        Admission::Admitted { .. } => {}
        other => {
            return Err(Failure(format!(
                "an admission naming the limit takes its last permit, got {other:?}"
            )))
        }
    }
    claimed(&ctx, &limited(2, &fresh), &[], true).await?;
    Ok(())
}

/// `claim` takes no rate limit: it refuses one, naming the field, and
/// claims nothing.
pub async fn queue_claim_refuses_a_rate_limit<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    enqueue(&ctx, job("only")).await?;
    let request = limited(1, &RateLimit::new("plain", 1, LONG_PERIOD));
    expect_invalid(
        ctx.store.claim(&request).await,
        "rate_limit",
        "claim with a rate limit",
    )?;
    expect_invalid(
        ctx.store
            .claim_limited(&limited(1, &RateLimit::new("none", 0, LONG_PERIOD)))
            .await,
        "rate_limit",
        "claim_limited with no permits",
    )?;
    expect_invalid(
        ctx.store
            .claim_limited(&limited(
                1,
                &RateLimit::new("too-many", MAX_RATE_PERMITS + 1, LONG_PERIOD),
            ))
            .await,
        "rate_limit",
        "claim_limited with one permit too many",
    )?;
    ensure_eq!(
        get_job(&ctx, "only").await?.state,
        JobState::Queued,
        "a refused claim claims nothing"
    );
    claimed(
        &ctx,
        &limited(1, &RateLimit::new("plain", 1, LONG_PERIOD)),
        &["only"],
        false,
    )
    .await?;
    Ok(())
}

/// On a clock the kit places: each job claimed is one use at the claim's
/// instant, counting for exactly the period, and `retry_after` counts the
/// uses just written.
pub async fn queue_claim_limited_window_is_exact_to_the_microsecond<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    for id in ["w-0", "w-1", "w-2", "w-3", "w-4"] {
        enqueue(&ctx, job(id)).await?;
    }
    let period = Duration::from_millis(40);
    let limit = RateLimit::new("window", 2, period);
    let start = ctx.store.now().await?;
    claimed(&ctx, &limited(1, &limit), &["w-0"], false).await?;
    manual.advance_to(clock::add(start, Duration::from_millis(10)));
    let second = claimed(&ctx, &limited(3, &limit), &["w-1"], true).await?;
    ensure_eq!(
        second.retry_after,
        Some(Duration::from_millis(30)),
        "the next permit frees when the first use stops counting"
    );
    let first_ends = clock::add(start, period);
    manual.advance_to(micro_before(first_ends));
    let none = claimed(&ctx, &limited(1, &limit), &[], true).await?;
    ensure_eq!(
        none.retry_after,
        Some(Duration::from_micros(1)),
        "the microsecond before the first use stops counting"
    );
    manual.advance_to(first_ends);
    let third = claimed(&ctx, &limited(2, &limit), &["w-2"], true).await?;
    ensure_eq!(
        third.retry_after,
        Some(Duration::from_millis(10)),
        "the use just written counts: the next permit is the second use's"
    );
    Ok(())
}

/// Claimers racing on one limit take exactly its permits between them,
/// never one job twice.
pub async fn race_queue_rate_limited_claims_take_exactly_the_permits<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const PERMITS: u32 = 5;
    for index in 0..12 {
        enqueue(&ctx, job(&format!("r-{index:02}"))).await?;
    }
    let limit = RateLimit::new("raced", PERMITS, LONG_PERIOD);
    let start = StartLine::new(RACERS);
    let racers = racing_claimers(&ctx, &limit, &start);
    let mut claimed_ids = Vec::new();
    for task in racers {
        let answer = task
            .await
            .map_err(|error| Failure(format!("a racer panicked: {error}")))??;
        claimed_ids.extend(answer.jobs.into_iter().map(|each| each.job.id));
    }
    ensure_eq!(
        claimed_ids.len(),
        PERMITS as usize,
        "racing claimers took exactly the permits ({claimed_ids:?})"
    );
    let distinct: BTreeSet<&String> = claimed_ids.iter().collect();
    ensure_eq!(
        distinct.len(),
        claimed_ids.len(),
        "no job was claimed twice"
    );
    let stored_claimed = ctx
        .store
        .list_jobs(QUEUE, Some(JobState::Claimed), 20)
        .await?;
    ensure_eq!(
        stored_claimed.len(),
        PERMITS as usize,
        "exactly the permits' jobs are stored as claimed"
    );
    claimed(&ctx, &limited(1, &limit), &[], true).await?;
    Ok(())
}

/// The limit holds back only jobs the claim could take: with fewer permits
/// than the claim's limit and no more claimable jobs than permits (others
/// delayed or needing a capability the worker lacks), nothing is held back;
/// with no permit left and nothing claimable, neither.
pub async fn queue_claim_limited_holds_back_only_claimable_jobs<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let later = clock::add(ctx.store.now().await?, LONG_PERIOD);
    enqueue(&ctx, job("a-0")).await?;
    enqueue(&ctx, job("a-1")).await?;
    enqueue(&ctx, job("delayed").run_at(later)).await?;
    enqueue(&ctx, job("capable").require("gpu")).await?;
    let limit = RateLimit::new("look-ahead", 2, LONG_PERIOD);
    claimed(&ctx, &limited(5, &limit), &["a-0", "a-1"], false).await?;
    claimed(&ctx, &limited(5, &limit), &[], false).await?;
    enqueue(&ctx, job("a-2")).await?;
    claimed(&ctx, &limited(5, &limit), &[], true).await?;
    Ok(())
}

/// On any clock: a claim's `retry_after` counts from the oldest use still
/// counting, the uses it just wrote included.
pub async fn queue_claim_limited_retry_after_counts_from_the_oldest_use<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for id in ["o-0", "o-1", "o-2"] {
        enqueue(&ctx, job(id)).await?;
    }
    let gap = Duration::from_millis(300);
    let period = Duration::from_secs(60);
    let limit = RateLimit::new("oldest", 2, period);
    claimed(&ctx, &limited(1, &limit), &["o-0"], false).await?;
    ctx.advance(gap).await?;
    let second = claimed(&ctx, &limited(3, &limit), &["o-1"], true).await?;
    let retry_after = second
        .retry_after
        .ok_or_else(|| Failure("a held-back claim answers a retry_after".into()))?;
    ensure!(
        retry_after <= period - gap,
        "retry_after {retry_after:?} counts from the newest use, not the oldest ({:?} at most)",
        period - gap
    );
    Ok(())
}

/// Admissions and claims racing on one limit share its permits: together
/// they use exactly them.
pub async fn race_rate_limited_admissions_and_claims_share_the_permits<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const PERMITS: u32 = 5;
    const ADMITTERS: usize = 6;
    for index in 0..12 {
        enqueue(&ctx, job(&format!("m-{index:02}"))).await?;
    }
    let limit = RateLimit::new("shared", PERMITS, LONG_PERIOD);
    let start = StartLine::new(ADMITTERS + RACERS);
    let admitters: Vec<_> = (0..ADMITTERS)
        .map(|racer| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let request =
                AdmitRequest::new(format!("lease-{racer}"), "worker-a").rate_limit(limit.clone());
            tokio::spawn(async move {
                start.wait().await;
                store.admit(&request).await
            })
        })
        .collect();
    let claimers = racing_claimers(&ctx, &limit, &start);
    let mut used = 0;
    for task in admitters {
        let answer = task
            .await
            .map_err(|error| Failure(format!("an admitter panicked: {error}")))??;
        match answer {
            Admission::Admitted { .. } => used += 1,
            Admission::RateLimited { .. } => {}
            other => {
                return Err(Failure(format!(
                    "a racing admission answered {other:?}; only Admitted or RateLimited"
                )))
            }
        }
    }
    for task in claimers {
        let answer = task
            .await
            .map_err(|error| Failure(format!("a claimer panicked: {error}")))??;
        used += answer.jobs.len();
    }
    ensure_eq!(
        used,
        PERMITS as usize,
        "racing admissions and claims together used exactly the permits"
    );
    Ok(())
}
