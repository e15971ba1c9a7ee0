//! Conformance cases: the job queue ([contract §9](tenure_lease_core::contract);
//! §13 invariants 2, 3, 4).
//!
//! A queue is only as safe as its claims: each must be exclusive, and every
//! later write fenced by it, so a copy that lost its job (reaped, requeued,
//! re-claimed, finished) can never touch it again. Each case drives jobs
//! through claim, renew, complete, fail, defer, reap, take-back and operator
//! retry, checks every typed answer against `tenure_lease_core::backend::queue_rules`, and
//! checks that every refused write changed nothing. Deadlines are crossed
//! with short leases and `advance_past`, so the cases run unchanged on manual
//! and on real (server) clocks, each waiting well under a second.
//!
//! A "not yet" check (a job not claimable before its `run_at`) proves
//! something only when it lands before that instant, which a starved machine
//! cannot promise on a real clock: such a check reads the store clock after
//! its observation and, when the instant had already passed, tries again on
//! a fresh queue with twice the delay (see `not_yet`).

pub mod batches;
pub mod claim;
pub mod complete_many;
pub mod concurrency;
pub mod enqueue;
pub mod input;
pub mod list_jobs;
pub mod names;
pub mod progress;
pub mod rate;
pub mod reap;
pub mod renew_jobs;
pub mod retention;
pub mod reuse;
pub mod settle;
pub mod take_back;
mod twins;
pub mod unique;

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobLoss, JobRenewal, JobSettle, JobState,
    NewJob, ReapReport, TakeBack, TakeBackRefusal,
};
use tenure_lease_core::{clock, ErrorKind, JobQueue, Timestamp};

use crate::cases::util::{stale_progress, LONG_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The queue most cases use.
pub(crate) const QUEUE: &str = "jobs";

/// Enough store time for a later write to get a later timestamp.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// How far ahead a delayed job or a retry backoff first lies: long enough
/// that a case's "not yet" claim lands before it on a real clock unless the
/// machine is starved, short enough to wait out.
pub(crate) const DELAY: Duration = Duration::from_millis(250);

/// How many tries a "not yet" check gets, its delay doubling each time
/// (250 ms up to 8 s).
pub(crate) const NOT_YET_TRIES: u32 = 6;

/// How many workers the claim race releases at once.
pub(crate) const CLAIMERS: usize = 8;

/// How many jobs they race for.
pub(crate) const RACED_JOBS: usize = 40;

/// A job of [`QUEUE`] with id `id` and a payload naming it.
pub(crate) fn job(id: &str) -> NewJob {
    NewJob::new(QUEUE, json!({ "job": id })).id(id)
}

/// A job with id `id` alone in a queue of its own, for cases that leave
/// jobs of earlier rounds visible.
pub(crate) fn job_of_its_own(id: &str) -> NewJob {
    NewJob::new(format!("{id}-queue"), json!({ "job": id })).id(id)
}

/// The set of capabilities `names`.
pub(crate) fn capabilities(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// The ids of `jobs`, in order.
pub(crate) fn ids<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Vec<&'a str> {
    jobs.into_iter().map(|job| job.id.as_str()).collect()
}

/// `instant` moved back by `by`, for `run_at` values already in the past.
pub(crate) fn earlier_by(instant: Timestamp, by: Duration) -> Result<Timestamp, Failure> {
    chrono::Duration::from_std(by)
        .ok()
        .and_then(|by| instant.checked_sub_signed(by))
        .ok_or_else(|| Failure(format!("{instant} minus {by:?} is out of range")))
}

/// A payload using every kind of JSON value, with the awkward cases (big
/// integers, escapes, unicode keys) that a store must keep exactly.
pub(crate) fn rich_payload() -> serde_json::Value {
    json!({
        "nested": { "deeper": { "deepest": [1, { "x": "y" }, []] } },
        "array": [1, "two", 3.5, null, true, { "k": "v" }, [[]]],
        "unicode": "héllo wörld, Привет, 你好, 🦀🚀",
        "ключ 🔑": "unicode key",
        "": "empty key",
        "escapes": "quote \" backslash \\ slash / tab \t newline \n bell \u{7}",
        "max_u64": u64::MAX,
        "min_i64": i64::MIN,
        "float": 0.1,
        "huge_float": 1.5e300,
        "null": null,
        "empty_object": {},
        "empty_array": [],
    })
}

/// Fails the case unless `instant` lies between the store-clock reads
/// `before` and `after`.
pub(crate) fn ensure_within(
    instant: Timestamp,
    before: Timestamp,
    after: Timestamp,
    what: &str,
) -> CaseResult {
    ensure!(
        before <= instant && instant <= after,
        "{what} {instant} is not store time between {before} and {after}"
    );
    Ok(())
}

/// Fails the case unless `result` is an `AlreadyExists` error.
pub(crate) fn expect_already_exists<T: Debug>(
    result: tenure_lease_core::Result<T>,
    what: &str,
) -> CaseResult {
    match result {
        Err(error) if error.kind() == ErrorKind::AlreadyExists => Ok(()),
        other => Err(Failure(format!(
            "{what}: expected an AlreadyExists error, got {other:?}"
        ))),
    }
}

/// Reads job `id`, failing the case when it is missing.
pub(crate) async fn get_job<S: JobQueue>(ctx: &Ctx<S>, id: &str) -> Result<Job, Failure> {
    ctx.store
        .get_job(id)
        .await?
        .ok_or_else(|| Failure(format!("job {id:?} is missing")))
}

/// Every job `ids` names (or its absence), for "nothing changed" checks.
pub(crate) async fn jobs<S: JobQueue>(
    ctx: &Ctx<S>,
    ids: &[&str],
) -> Result<Vec<Option<Job>>, Failure> {
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        jobs.push(ctx.store.get_job(id).await?);
    }
    Ok(jobs)
}

/// One try of a "not yet" check: its own queue and job ids, so that the
/// jobs of an earlier, inconclusive try stay out of its way, and how far
/// ahead of the store clock its deadline lies.
pub(crate) struct NotYetTry {
    queue: String,
    tag: String,
    delay: Duration,
}

impl NotYetTry {
    /// A job of this try's queue, with an id made of `name` and the try's tag.
    fn job(&self, name: &str) -> NewJob {
        let id = format!("{name}{}", self.tag);
        NewJob::new(self.queue.as_str(), json!({ "job": id })).id(id)
    }
}

/// Whether a try's "not yet" observation landed before its deadline.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Landed {
    /// Before: the try's checks were judged (and passed).
    InTime,
    /// After, on a starved machine: the observation proves nothing.
    TooLate,
}

/// Runs `attempt` until one try's "not yet" observation lands in time,
/// giving each try a fresh queue and twice the delay of the one before;
/// fails when none did in [`NOT_YET_TRIES`].
pub(crate) async fn not_yet<F, Fut>(mut attempt: F) -> CaseResult
where
    F: FnMut(NotYetTry) -> Fut,
    Fut: std::future::Future<Output = Result<Landed, Failure>>,
{
    let mut delay = DELAY;
    for round in 0..NOT_YET_TRIES {
        let tag = if round == 0 {
            String::new()
        } else {
            format!("-try-{round}")
        };
        let queue = format!("{QUEUE}{tag}");
        if attempt(NotYetTry { queue, tag, delay }).await? == Landed::InTime {
            return Ok(());
        }
        tracing::debug!(
            ?delay,
            "a \"not yet\" check landed after its deadline; trying again"
        );
        delay *= 2;
    }
    Err(Failure(format!(
        "no \"not yet\" check landed before its deadline in {NOT_YET_TRIES} tries (the \
         last {:?} ahead): the store clock ran ahead of the case by that much",
        delay / 2
    )))
}

/// Judges the checks `observed` made before `deadline`: they count only when
/// the store clock still reads before it afterwards; otherwise the try came
/// too late to prove anything.
pub(crate) async fn judged_before<S: JobQueue>(
    ctx: &Ctx<S>,
    deadline: Timestamp,
    observed: CaseResult,
) -> Result<Landed, Failure> {
    if ctx.store.now().await? < deadline {
        observed.map(|()| Landed::InTime)
    } else {
        Ok(Landed::TooLate)
    }
}

/// Enqueues `new`, failing the case unless `get_job` then reads the job
/// `enqueue` answered; answers it.
pub(crate) async fn enqueue<S: JobQueue>(ctx: &Ctx<S>, new: NewJob) -> Result<Job, Failure> {
    let job = ctx.store.enqueue(&new).await?;
    ensure_eq!(
        get_job(ctx, &new.id).await?,
        job,
        "get_job reads the job enqueue answered"
    );
    Ok(job)
}

/// Claims with `request`, failing the case unless it hands out exactly the
/// jobs `expected`, in that order, each claimed by the worker under the
/// job's own claim, fences growing in answer order, each read back by
/// `get_job`.
pub(crate) async fn claim<S: JobQueue>(
    ctx: &Ctx<S>,
    request: &ClaimRequest,
    expected: &[&str],
) -> Result<Vec<ClaimedJob>, Failure> {
    let claimed = ctx.store.claim(request).await?;
    ensure_eq!(
        ids(claimed.iter().map(|each| &each.job)),
        expected,
        "{} claiming from {:?} with limit {}",
        request.worker,
        request.queue,
        request.limit
    );
    let mut previous_fence = 0;
    for each in &claimed {
        ensure_eq!(each.job.state, JobState::Claimed, "a claimed job's state");
        ensure_eq!(
            each.claim.owner,
            request.worker,
            "the claim names the claiming worker"
        );
        ensure_eq!(
            Some(&each.claim),
            each.job.claim().as_ref(),
            "the claim answered is the job's own claim"
        );
        ensure!(
            each.claim.fence > previous_fence,
            "fences grow in the order jobs are handed out: {:?}",
            claimed.iter().map(|c| c.claim.fence).collect::<Vec<_>>()
        );
        previous_fence = each.claim.fence;
        ensure_eq!(
            get_job(ctx, &each.job.id).await?,
            each.job,
            "get_job reads the claimed job"
        );
    }
    Ok(claimed)
}

/// Claims one job of [`QUEUE`] for `worker` under `ttl`, failing the case
/// unless it is job `id`.
pub(crate) async fn claim_one<S: JobQueue>(
    ctx: &Ctx<S>,
    worker: &str,
    ttl: Duration,
    id: &str,
) -> Result<ClaimedJob, Failure> {
    let claimed = claim(ctx, &ClaimRequest::new(QUEUE, worker, ttl), &[id]).await?;
    claimed
        .into_iter()
        .next()
        .ok_or_else(|| Failure(format!("{worker} claimed nothing")))
}

/// Enqueues `new` and claims it for `worker` (with the job's required
/// capabilities) under `ttl`; its queue must have no better visible job.
pub(crate) async fn enqueue_and_claim<S: JobQueue>(
    ctx: &Ctx<S>,
    new: NewJob,
    worker: &str,
    ttl: Duration,
) -> Result<ClaimedJob, Failure> {
    enqueue(ctx, new.clone()).await?;
    let request = ClaimRequest::new(new.queue.clone(), worker, ttl)
        .capabilities(new.required_capabilities.iter().cloned());
    claim(ctx, &request, &[new.id.as_str()])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Failure(format!("{worker} claimed nothing")))
}

/// Fails the case unless `outcome` (of `what`) is `Settled` with the job
/// `get_job` then reads; answers that job.
pub(crate) async fn settled<S: JobQueue>(
    ctx: &Ctx<S>,
    outcome: JobSettle,
    what: &str,
) -> Result<Job, Failure> {
    match outcome {
        JobSettle::Settled(job) => {
            ensure_eq!(
                get_job(ctx, &job.id).await?,
                job,
                "get_job reads the job {what} answered"
            );
            Ok(job)
        }
        other => Err(Failure(format!(
            "expected {what} to be settled, got {other:?}"
        ))),
    }
}

/// Lets `job`'s lease run out on the store's clock.
pub(crate) async fn expire_job<S: JobQueue>(ctx: &Ctx<S>, job: &Job) -> CaseResult {
    let expires = job
        .lease_expires_at
        .ok_or_else(|| Failure(format!("job {:?} has no lease to expire", job.id)))?;
    ctx.advance_past(expires).await
}

/// Renews `claim` for `ttl`, failing the case unless it is `Renewed` with an
/// expiry of store now + ttl that `get_job` then reads; answers that expiry.
pub(crate) async fn renew_job_confirmed<S: JobQueue>(
    ctx: &Ctx<S>,
    claim: &JobClaim,
    ttl: Duration,
) -> Result<Timestamp, Failure> {
    let before = ctx.store.now().await?;
    let outcome = ctx.store.renew_job(claim, ttl).await?;
    let after = ctx.store.now().await?;
    let JobRenewal::Renewed { expires_at } = outcome else {
        return Err(Failure(format!(
            "expected {claim:?} to be renewed, got {outcome:?}"
        )));
    };
    ensure_within(
        expires_at,
        clock::add(before, ttl),
        clock::add(after, ttl),
        "the renewed expiry (store now + ttl)",
    )?;
    ensure_eq!(
        get_job(ctx, &claim.id).await?.lease_expires_at,
        Some(expires_at),
        "get_job reads the expiry renew_job answered"
    );
    Ok(expires_at)
}

/// Renews `claim`, plainly and with progress, failing the case unless each
/// is `Lost(loss)` and the job (or its absence) reads the same before and
/// after: a lost renewal records no progress either.
pub(crate) async fn expect_job_lost<S: JobQueue>(
    ctx: &Ctx<S>,
    claim: &JobClaim,
    loss: JobLoss,
) -> CaseResult {
    let before = ctx.store.get_job(&claim.id).await?;
    let outcome = ctx.store.renew_job(claim, LONG_TTL).await?;
    ensure_eq!(outcome, JobRenewal::Lost(loss), "renewing {claim:?}");
    ensure_eq!(
        ctx.store.get_job(&claim.id).await?,
        before,
        "a lost renewal changes nothing"
    );
    let outcome = ctx
        .store
        .renew_job_with_progress(claim, LONG_TTL, &stale_progress())
        .await?;
    ensure_eq!(
        outcome,
        JobRenewal::Lost(loss),
        "renewing {claim:?} with progress"
    );
    ensure_eq!(
        ctx.store.get_job(&claim.id).await?,
        before,
        "a lost renewal with progress changes nothing, progress included"
    );
    Ok(())
}

/// The fenced writes a claim settles its job with.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FencedWrite {
    Complete,
    FailRetry,
    FailDeadLetter,
    Defer,
}

impl FencedWrite {
    const ALL: [FencedWrite; 4] = [
        FencedWrite::Complete,
        FencedWrite::FailRetry,
        FencedWrite::FailDeadLetter,
        FencedWrite::Defer,
    ];

    async fn apply<S: JobQueue>(
        self,
        ctx: &Ctx<S>,
        claim: &JobClaim,
    ) -> tenure_lease_core::Result<JobSettle> {
        match self {
            FencedWrite::Complete => ctx.store.complete(claim).await,
            FencedWrite::FailRetry => {
                let retry = FailAction::Retry {
                    backoff: Duration::ZERO,
                };
                ctx.store.fail(claim, "a retry", retry).await
            }
            FencedWrite::FailDeadLetter => {
                ctx.store
                    .fail(claim, "a dead letter", FailAction::DeadLetter)
                    .await
            }
            FencedWrite::Defer => ctx.store.defer(claim, &capabilities(&["gpu"])).await,
        }
    }
}

/// Every fenced write with `claim` (renew, complete, fail with retry and with
/// dead-letter, defer) is refused with `loss`, and the job reads the same
/// after each.
pub(crate) async fn expect_every_write_refused<S: JobQueue>(
    ctx: &Ctx<S>,
    claim: &JobClaim,
    loss: JobLoss,
) -> CaseResult {
    expect_job_lost(ctx, claim, loss).await?;
    for write in FencedWrite::ALL {
        let before = ctx.store.get_job(&claim.id).await?;
        let outcome = write.apply(ctx, claim).await?;
        ensure_eq!(
            outcome,
            JobSettle::Rejected(loss),
            "{write:?} with {claim:?}"
        );
        ensure_eq!(
            ctx.store.get_job(&claim.id).await?,
            before,
            "a refused {write:?} changes nothing"
        );
    }
    Ok(())
}

/// Takes back with `claim`, failing the case unless it is `Taken` under a
/// claim of the same worker and attempt with a greater fence, a lease of
/// store now + ttl, read back by `get_job`; answers it.
pub(crate) async fn take_back<S: JobQueue>(
    ctx: &Ctx<S>,
    claim: &JobClaim,
    ttl: Duration,
) -> Result<ClaimedJob, Failure> {
    let before = ctx.store.now().await?;
    let outcome = ctx.store.take_back(claim, ttl).await?;
    let after = ctx.store.now().await?;
    let TakeBack::Taken(taken) = outcome else {
        return Err(Failure(format!(
            "expected {claim:?} to take its job back, got {outcome:?}"
        )));
    };
    ensure!(
        taken.claim.fence > claim.fence,
        "the taken-back claim's fence {} is greater than the reaped one's {}",
        taken.claim.fence,
        claim.fence
    );
    ensure_eq!(
        taken.claim,
        JobClaim {
            fence: taken.claim.fence,
            ..claim.clone()
        },
        "a take-back keeps the worker and the attempt"
    );
    ensure_eq!(
        Some(&taken.claim),
        taken.job.claim().as_ref(),
        "the claim answered is the job's own claim"
    );
    ensure_eq!(
        taken.job.dead_reason,
        None,
        "a taken-back job is no dead letter"
    );
    let expires = taken
        .job
        .lease_expires_at
        .ok_or_else(|| Failure("a taken-back job has a lease".into()))?;
    ensure_within(
        expires,
        clock::add(before, ttl),
        clock::add(after, ttl),
        "the taken-back lease (store now + ttl)",
    )?;
    ensure!(
        taken.job.taken_back >= 1 && taken.job.taken_back_at == Some(taken.job.updated_at),
        "a take-back is counted on the job at its instant: taken_back {}, taken_back_at {:?}, \
         updated_at {}",
        taken.job.taken_back,
        taken.job.taken_back_at,
        taken.job.updated_at
    );
    ensure_within(
        taken.job.updated_at,
        before,
        after,
        "the take-back's instant",
    )?;
    ensure_eq!(
        get_job(ctx, &claim.id).await?,
        taken.job,
        "get_job reads the taken-back job"
    );
    Ok(taken)
}

/// Fails the case unless taking back with `claim` is refused with `refusal`
/// and the job (or its absence) reads the same before and after.
pub(crate) async fn expect_not_taken_back<S: JobQueue>(
    ctx: &Ctx<S>,
    claim: &JobClaim,
    refusal: TakeBackRefusal,
) -> CaseResult {
    let before = ctx.store.get_job(&claim.id).await?;
    let outcome = ctx.store.take_back(claim, LONG_TTL).await?;
    ensure_eq!(
        outcome,
        TakeBack::NotTaken(refusal),
        "taking back with {claim:?}"
    );
    ensure_eq!(
        ctx.store.get_job(&claim.id).await?,
        before,
        "a refused take-back changes nothing"
    );
    Ok(())
}

/// Reaps with `grace`, failing the case unless exactly the jobs `requeued`
/// went back to their queue and `dead_lettered` were dead-lettered (in any
/// order), each reported as `get_job` then reads it.
pub(crate) async fn reap<S: JobQueue>(
    ctx: &Ctx<S>,
    grace: Duration,
    requeued: &[&str],
    dead_lettered: &[&str],
) -> Result<ReapReport, Failure> {
    let report = ctx.store.reap(grace).await?;
    for (what, reported, expected) in [
        ("requeued", &report.requeued, requeued),
        ("dead-lettered", &report.dead_lettered, dead_lettered),
    ] {
        let mut reported_ids = ids(reported);
        reported_ids.sort_unstable();
        let mut expected = expected.to_vec();
        expected.sort_unstable();
        ensure_eq!(reported_ids, expected, "the jobs reap({grace:?}) {what}");
        for job in reported {
            ensure_eq!(
                get_job(ctx, &job.id).await?,
                *job,
                "get_job reads the {what} job as reaped"
            );
        }
    }
    Ok(report)
}
