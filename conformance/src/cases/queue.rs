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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::backend::queue_rules::{MAX_ATTEMPTS, MAX_CLAIM, MAX_PAYLOAD_BYTES};
use tenure_lease_core::backend::validate::{
    MAX_GRACE, MAX_LIST_LIMIT, MAX_SCOPES, MAX_TEXT_BYTES, MAX_TTL,
};
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, DeadReason, FailAction, Job, JobClaim, JobLoss, JobRenewal,
    JobSettle, JobState, NewJob, OperatorRetry, ReapReport, TakeBack, TakeBackRefusal,
};
use tenure_lease_core::{
    clock, Admission, AdmitRequest, AdmitStrategy, ErrorKind, JobQueue, TakeoverRequest, Timestamp,
};
use tokio::sync::Barrier;

use super::util::{admit, expect_invalid, expire, get, take_over, LONG_GRACE, LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The queue most cases use.
const QUEUE: &str = "jobs";

/// Enough store time for a later write to get a later timestamp.
const TICK: Duration = Duration::from_millis(5);

/// How far ahead a delayed job or a retry backoff first lies: long enough
/// that a case's "not yet" claim lands before it on a real clock unless the
/// machine is starved, short enough to wait out.
const DELAY: Duration = Duration::from_millis(250);

/// How many tries a "not yet" check gets, its delay doubling each time
/// (250 ms up to 8 s).
const NOT_YET_TRIES: u32 = 6;

/// How many workers the claim race releases at once.
const CLAIMERS: usize = 8;

/// How many jobs they race for.
const RACED_JOBS: usize = 40;

/// A job of [`QUEUE`] with id `id` and a payload naming it.
fn job(id: &str) -> NewJob {
    NewJob::new(QUEUE, json!({ "job": id })).id(id)
}

/// The set of capabilities `names`.
fn capabilities(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// The ids of `jobs`, in order.
fn ids<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Vec<&'a str> {
    jobs.into_iter().map(|job| job.id.as_str()).collect()
}

/// `instant` moved back by `by`, for `run_at` values already in the past.
fn earlier_by(instant: Timestamp, by: Duration) -> Result<Timestamp, Failure> {
    chrono::Duration::from_std(by)
        .ok()
        .and_then(|by| instant.checked_sub_signed(by))
        .ok_or_else(|| Failure(format!("{instant} minus {by:?} is out of range")))
}

/// A payload using every kind of JSON value, with the awkward cases (big
/// integers, escapes, unicode keys) that a store must keep exactly.
fn rich_payload() -> serde_json::Value {
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
fn ensure_within(
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
fn expect_already_exists<T: Debug>(result: tenure_lease_core::Result<T>, what: &str) -> CaseResult {
    match result {
        Err(error) if error.kind() == ErrorKind::AlreadyExists => Ok(()),
        other => Err(Failure(format!(
            "{what}: expected an AlreadyExists error, got {other:?}"
        ))),
    }
}

/// Reads job `id`, failing the case when it is missing.
async fn get_job<S: JobQueue>(ctx: &Ctx<S>, id: &str) -> Result<Job, Failure> {
    ctx.store
        .get_job(id)
        .await?
        .ok_or_else(|| Failure(format!("job {id:?} is missing")))
}

/// Every job `ids` names (or its absence), for "nothing changed" checks.
async fn jobs<S: JobQueue>(ctx: &Ctx<S>, ids: &[&str]) -> Result<Vec<Option<Job>>, Failure> {
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        jobs.push(ctx.store.get_job(id).await?);
    }
    Ok(jobs)
}

/// One try of a "not yet" check: its own queue and job ids, so that the
/// jobs of an earlier, inconclusive try stay out of its way, and how far
/// ahead of the store clock its deadline lies.
struct NotYetTry {
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
enum Landed {
    /// Before: the try's checks were judged (and passed).
    InTime,
    /// After, on a starved machine: the observation proves nothing.
    TooLate,
}

/// Runs `attempt` until one try's "not yet" observation lands in time,
/// giving each try a fresh queue and twice the delay of the one before;
/// fails when none did in [`NOT_YET_TRIES`].
async fn not_yet<F, Fut>(mut attempt: F) -> CaseResult
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
async fn judged_before<S: JobQueue>(
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
async fn enqueue<S: JobQueue>(ctx: &Ctx<S>, new: NewJob) -> Result<Job, Failure> {
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
async fn claim<S: JobQueue>(
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
async fn claim_one<S: JobQueue>(
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
async fn enqueue_and_claim<S: JobQueue>(
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
async fn settled<S: JobQueue>(
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
async fn expire_job<S: JobQueue>(ctx: &Ctx<S>, job: &Job) -> CaseResult {
    let expires = job
        .lease_expires_at
        .ok_or_else(|| Failure(format!("job {:?} has no lease to expire", job.id)))?;
    ctx.advance_past(expires).await
}

/// Renews `claim` for `ttl`, failing the case unless it is `Renewed` with an
/// expiry of store now + ttl that `get_job` then reads; answers that expiry.
async fn renew_job_confirmed<S: JobQueue>(
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

/// Renews `claim`, failing the case unless it is `Lost(loss)` and the job
/// (or its absence) reads the same before and after.
async fn expect_job_lost<S: JobQueue>(ctx: &Ctx<S>, claim: &JobClaim, loss: JobLoss) -> CaseResult {
    let before = ctx.store.get_job(&claim.id).await?;
    let outcome = ctx.store.renew_job(claim, LONG_TTL).await?;
    ensure_eq!(outcome, JobRenewal::Lost(loss), "renewing {claim:?}");
    ensure_eq!(
        ctx.store.get_job(&claim.id).await?,
        before,
        "a lost renewal changes nothing"
    );
    Ok(())
}

/// The fenced writes a claim settles its job with.
#[derive(Debug, Clone, Copy)]
enum FencedWrite {
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
async fn expect_every_write_refused<S: JobQueue>(
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
async fn take_back<S: JobQueue>(
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
    ensure_eq!(
        get_job(ctx, &claim.id).await?,
        taken.job,
        "get_job reads the taken-back job"
    );
    Ok(taken)
}

/// Fails the case unless taking back with `claim` is refused with `refusal`
/// and the job (or its absence) reads the same before and after.
async fn expect_not_taken_back<S: JobQueue>(
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
async fn reap<S: JobQueue>(
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

/// `enqueue` stores every field as given (any JSON payload, priority, `run_at`
/// to the microsecond, attempts, requirements) as Queued, attempt 0, fence 0,
/// stamped with store time; `get_job` reads it back, and nothing for an unknown id.
pub async fn queue_enqueue_and_get_round_trip<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let before = ctx.store.now().await?;
    // An hour ahead, with nanoseconds a store must truncate to microseconds.
    let run_at = before
        .checked_add_signed(chrono::Duration::nanoseconds(3_600_000_000_789))
        .ok_or_else(|| Failure(format!("an hour after {before} is out of range")))?;
    let new = NewJob::new(QUEUE, rich_payload())
        .id("job-1")
        .run_at(run_at)
        .max_attempts(7)
        .priority(-7)
        .require("gpu")
        .require("ssd");
    let stored = ctx.store.enqueue(&new).await?;
    let after = ctx.store.now().await?;
    ensure_within(stored.created_at, before, after, "created_at")?;
    let expected = Job {
        id: "job-1".into(),
        queue: QUEUE.into(),
        payload: rich_payload(),
        priority: -7,
        run_at: clock::truncate_to_micros(run_at),
        attempt: 0,
        max_attempts: 7,
        required_capabilities: capabilities(&["gpu", "ssd"]),
        state: JobState::Queued,
        owner: None,
        fence: 0,
        lease_expires_at: None,
        last_error: None,
        dead_reason: None,
        created_at: stored.created_at,
        updated_at: stored.created_at,
    };
    ensure_eq!(stored, expected, "enqueue answers the job as given");
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        expected,
        "get_job reads it back"
    );

    let payloads = [
        json!(null),
        json!(true),
        json!(-42),
        json!(u64::MAX),
        json!(0.1),
        json!("text with \"quotes\", \\ and 🦀"),
        json!([1, "two", null, [[]], {}]),
        json!({}),
    ];
    for (n, payload) in payloads.into_iter().enumerate() {
        let new = NewJob::new("other-queue", payload).id(format!("payload-{n}"));
        let stored = enqueue(&ctx, new.clone()).await?;
        ensure_eq!(stored.payload, new.payload, "payload {n} round-trips");
        ensure_eq!(
            stored.run_at,
            stored.created_at,
            "without run_at a job is visible from its enqueue time"
        );
        ensure_eq!(
            (
                stored.queue.as_str(),
                stored.priority,
                stored.max_attempts,
                &stored.required_capabilities
            ),
            (
                "other-queue",
                new.priority,
                new.max_attempts,
                &new.required_capabilities
            ),
            "payload-{n} keeps the defaults it was given"
        );
    }
    ensure_eq!(
        ctx.store.get_job("never-enqueued").await?,
        None,
        "an unknown id reads as no job"
    );
    Ok(())
}

/// Enqueueing an id that exists (queued or claimed, whatever else the job
/// says) is `AlreadyExists` and changes nothing; job ids and lease ids are
/// separate namespaces.
pub async fn queue_enqueue_duplicate_is_already_exists<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let original = enqueue(&ctx, job("job-1").priority(3)).await?;
    let duplicates = [
        job("job-1").priority(3),
        NewJob::new("other-queue", json!({ "v": 2 }))
            .id("job-1")
            .max_attempts(9)
            .priority(100),
    ];
    for duplicate in &duplicates {
        expect_already_exists(
            ctx.store.enqueue(duplicate).await,
            "enqueueing a queued job's id",
        )?;
        ensure_eq!(
            get_job(&ctx, "job-1").await?,
            original,
            "a duplicate changes nothing"
        );
    }
    let claimed = claim_one(&ctx, "worker-a", LONG_TTL, "job-1").await?;
    for duplicate in &duplicates {
        expect_already_exists(
            ctx.store.enqueue(duplicate).await,
            "enqueueing a claimed job's id",
        )?;
        ensure_eq!(
            get_job(&ctx, "job-1").await?,
            claimed.job,
            "a duplicate changes nothing"
        );
    }
    claim(
        &ctx,
        &ClaimRequest::new("other-queue", "worker-b", LONG_TTL).limit(10),
        &[],
    )
    .await?;

    let lease = admit(
        &ctx,
        AdmitRequest::new("shared-id", "worker-a").ttl(LONG_TTL),
    )
    .await?;
    let shared = enqueue(&ctx, job("shared-id")).await?;
    ensure_eq!(
        get(&ctx, "shared-id").await?,
        lease,
        "a job sharing a lease's id leaves the lease alone"
    );
    admit(&ctx, AdmitRequest::new("job-1", "worker-a").ttl(LONG_TTL)).await?;
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        claimed.job,
        "a lease sharing a job's id leaves the job alone"
    );
    expect_already_exists(
        ctx.store.enqueue(&job("shared-id")).await,
        "enqueueing a job id that is also a lease id",
    )?;
    ensure_eq!(get_job(&ctx, "shared-id").await?, shared);
    Ok(())
}

/// `enqueue_batch` adds all or nothing: a batch naming a stored id
/// (`AlreadyExists`), one id twice or one invalid job (`InvalidInput`) adds
/// none; an empty batch adds none; a good batch adds every job, answered in order.
pub async fn queue_enqueue_batch_all_or_nothing<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let stored = enqueue(&ctx, job("stored")).await?;
    let fresh = ["new-a", "new-b", "new-c"];
    // `None`: refused as AlreadyExists; `Some(field)`: as InvalidInput naming it.
    let refused = [
        (
            "a batch naming a stored id",
            vec![job("new-a"), job("stored"), job("new-b")],
            None,
        ),
        (
            "a batch naming one id twice",
            vec![job("new-a"), job("new-b"), job("new-a")],
            Some("id"),
        ),
        (
            "a batch with one invalid job",
            vec![job("new-a"), job("new-b").max_attempts(0), job("new-c")],
            Some("max_attempts"),
        ),
    ];
    for (what, batch, invalid_field) in refused {
        let result = ctx.store.enqueue_batch(&batch).await;
        match invalid_field {
            None => expect_already_exists(result, what)?,
            Some(field) => expect_invalid(result, field, what)?,
        }
        ensure_eq!(
            jobs(&ctx, &fresh).await?,
            vec![None, None, None],
            "{what} adds no job"
        );
        ensure_eq!(
            get_job(&ctx, "stored").await?,
            stored,
            "{what} leaves the stored job alone"
        );
    }
    ensure_eq!(
        ctx.store.enqueue_batch(&[]).await?,
        Vec::<Job>::new(),
        "an empty batch answers no job"
    );
    ensure_eq!(
        jobs(&ctx, &fresh).await?,
        vec![None, None, None],
        "an empty batch adds no job"
    );

    let good = [job("new-a"), job("new-b").priority(2), job("new-c")];
    let before = ctx.store.now().await?;
    let added = ctx.store.enqueue_batch(&good).await?;
    let after = ctx.store.now().await?;
    ensure_eq!(
        ids(&added),
        fresh,
        "a good batch answers every job in order"
    );
    for (job, new) in added.iter().zip(&good) {
        ensure_eq!(
            (
                job.state,
                job.attempt,
                job.fence,
                job.priority,
                &job.payload
            ),
            (JobState::Queued, 0, 0, new.priority, &new.payload),
            "{} as enqueued",
            job.id
        );
        ensure_within(job.created_at, before, after, "created_at")?;
        ensure_eq!(
            get_job(&ctx, &job.id).await?,
            *job,
            "get_job reads the batch's job"
        );
    }
    Ok(())
}

/// `claim` hands out visible jobs best first (priority descending, then
/// oldest `run_at`, then earliest creation), at most `limit`, and leaves
/// other queues, future jobs and jobs needing capabilities alone.
pub async fn queue_claim_best_visible_first<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let now = ctx.store.now().await?;
    let ago = |seconds| earlier_by(now, Duration::from_secs(seconds));
    // Enqueued in an order that matches none of the rules.
    enqueue(&ctx, job("low").priority(-1).run_at(ago(5)?)).await?;
    enqueue(&ctx, job("newest").run_at(ago(1)?)).await?;
    let elsewhere = NewJob::new("other-queue", json!(1))
        .id("elsewhere")
        .priority(100)
        .run_at(ago(9)?);
    let mut untouched = vec![enqueue(&ctx, elsewhere).await?];
    enqueue(&ctx, job("urgent").priority(5).run_at(ago(1)?)).await?;
    let future = job("future")
        .priority(100)
        .run_at(clock::add(now, LONG_TTL));
    untouched.push(enqueue(&ctx, future).await?);
    enqueue(&ctx, job("tie-b").run_at(ago(2)?)).await?;
    untouched.push(enqueue(&ctx, job("needs-gpu").priority(50).require("gpu")).await?);
    enqueue(&ctx, job("oldest").run_at(ago(3)?)).await?;
    ctx.advance(TICK).await?;
    // Same priority and run_at as tie-b, created later: claimed after it.
    enqueue(&ctx, job("tie-a").run_at(ago(2)?)).await?;

    let worker = |limit| ClaimRequest::new(QUEUE, "worker-a", LONG_TTL).limit(limit);
    claim(&ctx, &worker(2), &["urgent", "oldest"]).await?;
    claim(&ctx, &worker(3), &["tie-b", "tie-a", "newest"]).await?;
    claim(&ctx, &worker(10), &["low"]).await?;
    claim(&ctx, &worker(10), &[]).await?;
    for job in &untouched {
        ensure_eq!(
            get_job(&ctx, &job.id).await?,
            *job,
            "{} is left alone",
            job.id
        );
    }
    claim(
        &ctx,
        &ClaimRequest::new("other-queue", "worker-b", LONG_TTL),
        &["elsewhere"],
    )
    .await?;
    Ok(())
}

/// A job whose `run_at` is ahead of the store clock is not claimable, even
/// with the highest priority; once the store clock passes it, it is.
pub async fn queue_claim_skips_future_run_at<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    not_yet(|attempt| claim_skips_future_run_at(&ctx, attempt)).await
}

/// One try of [`queue_claim_skips_future_run_at`].
async fn claim_skips_future_run_at<S: JobQueue>(
    ctx: &Ctx<S>,
    attempt: NotYetTry,
) -> Result<Landed, Failure> {
    let now = ctx.store.now().await?;
    let later = enqueue(
        ctx,
        attempt
            .job("later")
            .priority(10)
            .run_at(clock::add(now, attempt.delay)),
    )
    .await?;
    let due = enqueue(
        ctx,
        attempt
            .job("due")
            .run_at(earlier_by(now, Duration::from_secs(1))?),
    )
    .await?;
    let worker = ClaimRequest::new(attempt.queue.as_str(), "worker-a", LONG_TTL).limit(5);
    let observed: CaseResult = async {
        claim(ctx, &worker, &[due.id.as_str()]).await?;
        claim(ctx, &worker, &[]).await?;
        ensure_eq!(
            get_job(ctx, &later.id).await?,
            later,
            "a job not yet due is left alone"
        );
        Ok(())
    }
    .await;
    if judged_before(ctx, later.run_at, observed).await? == Landed::TooLate {
        return Ok(Landed::TooLate);
    }
    ctx.advance_past(later.run_at).await?;
    let claimed = claim(ctx, &worker, &[later.id.as_str()]).await?;
    ensure_eq!(claimed.first().map(|each| each.claim.attempt), Some(1));
    Ok(Landed::InTime)
}

/// A job with no requirements is claimable by every worker; one with
/// requirements only by a worker having all of them (a superset is fine),
/// and one missing any is left alone.
pub async fn queue_capabilities_subset_rule<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    enqueue(&ctx, job("plain-1")).await?;
    enqueue(&ctx, job("gpu").priority(1).require("gpu")).await?;
    enqueue(
        &ctx,
        job("gpu-ssd").priority(2).require("gpu").require("ssd"),
    )
    .await?;
    let tpu = enqueue(&ctx, job("tpu").priority(3).require("tpu")).await?;
    let worker = |name: &str, caps: &[&str]| {
        ClaimRequest::new(QUEUE, name, LONG_TTL)
            .capabilities(caps.iter().copied())
            .limit(10)
    };

    claim(&ctx, &worker("bare", &[]), &["plain-1"]).await?;
    claim(&ctx, &worker("ssd-only", &["ssd"]), &[]).await?;
    claim(&ctx, &worker("gpu-only", &["gpu"]), &["gpu"]).await?;
    let rich = worker("rich", &["gpu", "ssd", "extra"]);
    let claimed = claim(&ctx, &rich, &["gpu-ssd"]).await?;
    ensure_eq!(
        claimed[0].job.required_capabilities,
        capabilities(&["gpu", "ssd"]),
        "claiming leaves the requirements as they were"
    );
    ensure_eq!(
        get_job(&ctx, "tpu").await?,
        tpu,
        "a job needing a capability nobody has is left alone"
    );
    enqueue(&ctx, job("plain-2")).await?;
    claim(&ctx, &rich, &["plain-2"]).await?;
    Ok(())
}

/// A claim makes the job Claimed by the worker, with a lease of store now +
/// ttl, attempt 1 and a fence greater than every fence before (leases' too);
/// nothing else changes, and the answered claim is the job's.
pub async fn queue_claim_sets_owner_lease_attempt_fence<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let lease = admit(&ctx, AdmitRequest::new("op-1", "worker-a").ttl(LONG_TTL)).await?;
    let first = enqueue(
        &ctx,
        NewJob::new(QUEUE, json!({ "step": 1 }))
            .id("job-1")
            .max_attempts(4)
            .priority(2)
            .require("gpu"),
    )
    .await?;
    enqueue(&ctx, job("job-2").priority(1)).await?;
    ctx.advance(TICK).await?;

    let ttl = LONG_TTL + Duration::from_nanos(1_999);
    let request = ClaimRequest::new(QUEUE, "worker-a", ttl).capabilities(["gpu"]);
    let before = ctx.store.now().await?;
    let claimed = claim(&ctx, &request, &["job-1"]).await?;
    let after = ctx.store.now().await?;
    let ClaimedJob {
        job,
        claim: job_claim,
    } = &claimed[0];
    ensure_eq!(
        *job,
        Job {
            state: JobState::Claimed,
            owner: Some("worker-a".into()),
            fence: job.fence,
            attempt: 1,
            lease_expires_at: job.lease_expires_at,
            updated_at: job.updated_at,
            ..first.clone()
        },
        "a claim changes state, owner, fence, attempt, lease and updated_at only"
    );
    ensure_eq!(
        *job_claim,
        JobClaim {
            id: "job-1".into(),
            owner: "worker-a".into(),
            fence: job.fence,
            attempt: 1,
        }
    );
    ensure!(
        job.fence > lease.fence,
        "the job's fence {} is greater than the lease's {} before it",
        job.fence,
        lease.fence
    );
    let expires = job
        .lease_expires_at
        .ok_or_else(|| Failure("a claimed job has a lease".into()))?;
    ensure_within(
        expires,
        clock::add(before, ttl),
        clock::add(after, ttl),
        "the claim's lease (store now + ttl)",
    )?;
    ensure_within(job.updated_at, before, after, "updated_at")?;

    let second = claim_one(&ctx, "worker-b", LONG_TTL, "job-2").await?;
    ensure!(
        second.claim.fence > job.fence,
        "the next claim's fence {} is greater than {}",
        second.claim.fence,
        job.fence
    );
    let later = admit(&ctx, AdmitRequest::new("op-2", "worker-a").ttl(LONG_TTL)).await?;
    ensure!(
        later.fence > second.claim.fence,
        "a later admission's fence {} is greater than the claims' {}",
        later.fence,
        second.claim.fence
    );
    Ok(())
}

/// Eight workers released together claim (limits 1 to 3) until the queue is
/// empty: every one of the 40 jobs is claimed exactly once, never `Err`,
/// each owned by its claimer under its own fence.
pub async fn race_queue_claimers_never_share_a_job<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let all: Vec<NewJob> = (0..RACED_JOBS)
        .map(|n| job(&format!("job-{n:02}")))
        .collect();
    ctx.store.enqueue_batch(&all).await?;
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let mut claimers = Vec::with_capacity(CLAIMERS);
    for n in 0..CLAIMERS {
        let request = ClaimRequest::new(QUEUE, format!("worker-{n}"), LONG_TTL).limit(1 + n % 3);
        let store = Arc::clone(&ctx.store);
        let barrier = Arc::clone(&barrier);
        claimers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut won = Vec::new();
            loop {
                let batch = store.claim(&request).await.map_err(|error| {
                    Failure(format!("{} got an error claiming: {error}", request.worker))
                })?;
                if batch.is_empty() {
                    return Ok::<_, Failure>((request, won));
                }
                if batch.len() > request.limit {
                    return Err(Failure(format!(
                        "{} got {} jobs for limit {}",
                        request.worker,
                        batch.len(),
                        request.limit
                    )));
                }
                won.extend(batch);
            }
        }));
    }

    let mut claimed_by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut fences = BTreeSet::new();
    for claimer in claimers {
        let (request, won) = claimer
            .await
            .map_err(|error| Failure(format!("a racing claimer panicked: {error}")))??;
        for each in won {
            ensure_eq!(
                (each.job.owner.as_deref(), each.claim.owner.as_str()),
                (Some(request.worker.as_str()), request.worker.as_str()),
                "{} is owned by its claimer",
                each.job.id
            );
            ensure!(
                fences.insert(each.claim.fence),
                "fence {} was handed out twice",
                each.claim.fence
            );
            claimed_by
                .entry(each.job.id.clone())
                .or_default()
                .push(request.worker.clone());
        }
    }
    let shared: Vec<_> = claimed_by
        .iter()
        .filter(|(_, workers)| workers.len() > 1)
        .collect();
    ensure!(shared.is_empty(), "jobs claimed more than once: {shared:?}");
    let expected: Vec<&str> = all.iter().map(|new| new.id.as_str()).collect();
    ensure_eq!(
        claimed_by.keys().map(String::as_str).collect::<Vec<_>>(),
        expected,
        "every job is claimed"
    );
    for (id, workers) in &claimed_by {
        let stored = get_job(&ctx, id).await?;
        ensure_eq!(
            (stored.state, stored.owner.as_ref()),
            (JobState::Claimed, workers.first()),
            "get_job reads {id} as its claimer's"
        );
    }
    Ok(())
}

/// Every re-claim of a job (after the reaper requeued it, after a failed
/// attempt) holds a fence greater than every earlier copy's and the next
/// attempt number; each earlier copy is told apart.
pub async fn queue_reclaim_has_greater_fence_and_next_attempt<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first =
        enqueue_and_claim(&ctx, job("job-1").max_attempts(3), "worker-a", SHORT_TTL).await?;
    ensure_eq!(first.claim.attempt, 1, "the first claim is attempt 1");
    expire_job(&ctx, &first.job).await?;
    reap(&ctx, Duration::ZERO, &["job-1"], &[]).await?;

    let second = claim_one(&ctx, "worker-b", LONG_TTL, "job-1").await?;
    ensure!(
        second.claim.fence > first.claim.fence,
        "the claim after a reap has fence {}, not greater than {}",
        second.claim.fence,
        first.claim.fence
    );
    ensure_eq!(
        second.claim.attempt,
        2,
        "the claim after a reap is attempt 2"
    );
    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    settled(
        &ctx,
        ctx.store.fail(&second.claim, "flaky", retry).await?,
        "fail with retry",
    )
    .await?;

    let third = claim_one(&ctx, "worker-a", LONG_TTL, "job-1").await?;
    ensure!(
        third.claim.fence > second.claim.fence,
        "the claim after a failure has fence {}, not greater than {}",
        third.claim.fence,
        second.claim.fence
    );
    ensure_eq!(
        third.claim.attempt,
        3,
        "the claim after a failure is attempt 3"
    );
    expect_job_lost(&ctx, &first.claim, JobLoss::FenceChanged).await?;
    expect_job_lost(&ctx, &second.claim, JobLoss::OwnerChanged).await?;
    renew_job_confirmed(&ctx, &third.claim, LONG_TTL).await?;
    Ok(())
}

/// `renew_job` extends a claim's lease to store now + ttl (even past its
/// expiry, until the reaper acts); otherwise it answers why the claim lost the
/// job (Missing, Finished(Completed), Finished(DeadLettered), Requeued,
/// OwnerChanged, FenceChanged) and changes nothing.
pub async fn queue_renew_and_loss_reasons<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let live = enqueue_and_claim(&ctx, job("live"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    let expires_at = renew_job_confirmed(&ctx, &live.claim, LONG_TTL).await?;
    ensure!(
        Some(expires_at) > live.job.lease_expires_at,
        "the renewed expiry {expires_at} moves past the claimed one {:?}",
        live.job.lease_expires_at
    );

    let late = enqueue_and_claim(&ctx, job("late"), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &late.job).await?;
    renew_job_confirmed(&ctx, &late.claim, LONG_TTL).await?;

    let nobody = JobClaim {
        id: "never-enqueued".into(),
        ..live.claim.clone()
    };
    expect_job_lost(&ctx, &nobody, JobLoss::Missing).await?;

    let done = enqueue_and_claim(&ctx, job("done"), "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    expect_job_lost(&ctx, &done.claim, JobLoss::Finished(JobState::Completed)).await?;

    let dead = enqueue_and_claim(&ctx, job("dead"), "worker-a", LONG_TTL).await?;
    let outcome = ctx
        .store
        .fail(&dead.claim, "broken", FailAction::DeadLetter)
        .await?;
    settled(&ctx, outcome, "fail with dead-letter").await?;
    expect_job_lost(&ctx, &dead.claim, JobLoss::Finished(JobState::DeadLettered)).await?;

    let other_owner = JobClaim {
        owner: "worker-b".into(),
        ..live.claim.clone()
    };
    expect_job_lost(&ctx, &other_owner, JobLoss::OwnerChanged).await?;
    let other_fence = JobClaim {
        fence: live.claim.fence + 1,
        ..live.claim.clone()
    };
    expect_job_lost(&ctx, &other_fence, JobLoss::FenceChanged).await?;

    // Last: a requeued job is visible, and would be claimed by the helpers above.
    let requeued = enqueue_and_claim(&ctx, job("requeued"), "worker-a", LONG_TTL).await?;
    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    settled(
        &ctx,
        ctx.store.fail(&requeued.claim, "flaky", retry).await?,
        "fail with retry",
    )
    .await?;
    expect_job_lost(&ctx, &requeued.claim, JobLoss::Requeued).await?;

    renew_job_confirmed(&ctx, &live.claim, LONG_TTL).await?;
    Ok(())
}

/// A job the reaper requeued (attempts left) is lost to its old copy
/// (`Requeued`) and never taken back by it: `NotDeadLettered(Queued)`, and
/// `NotDeadLettered(Claimed)` once another worker re-claims it.
pub async fn queue_requeued_job_stops_old_copy_and_is_never_taken_back<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let old = enqueue_and_claim(&ctx, job("job-1").max_attempts(2), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &old.job).await?;
    let before = ctx.store.now().await?;
    let report = reap(&ctx, Duration::ZERO, &["job-1"], &[]).await?;
    let after = ctx.store.now().await?;
    let requeued = report
        .requeued
        .first()
        .ok_or_else(|| Failure("the reaper requeued nothing".into()))?;
    ensure_eq!(
        *requeued,
        Job {
            state: JobState::Queued,
            lease_expires_at: None,
            run_at: requeued.run_at,
            updated_at: requeued.updated_at,
            ..old.job.clone()
        },
        "requeued with its lease cleared; owner, fence and attempt kept"
    );
    ensure_within(requeued.run_at, before, after, "the requeued job's run_at")?;
    ensure_within(requeued.updated_at, before, after, "updated_at")?;

    expect_job_lost(&ctx, &old.claim, JobLoss::Requeued).await?;
    expect_not_taken_back(
        &ctx,
        &old.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Queued),
    )
    .await?;

    let reclaimed = claim_one(&ctx, "worker-b", LONG_TTL, "job-1").await?;
    expect_job_lost(&ctx, &old.claim, JobLoss::OwnerChanged).await?;
    expect_not_taken_back(
        &ctx,
        &old.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    renew_job_confirmed(&ctx, &reclaimed.claim, LONG_TTL).await?;
    Ok(())
}

/// A job re-claimed after a requeue, even by the same worker name, is never
/// taken back by the earlier copy: not while the new claim holds it, nor after
/// the reaper dead-letters the new claim (`NotTheReapedClaim`); the reaped
/// claim itself may.
pub async fn queue_reclaimed_job_is_never_taken_back<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first =
        enqueue_and_claim(&ctx, job("job-1").max_attempts(2), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &first.job).await?;
    reap(&ctx, Duration::ZERO, &["job-1"], &[]).await?;
    let second = claim_one(&ctx, "worker-a", SHORT_TTL, "job-1").await?;
    expect_not_taken_back(
        &ctx,
        &first.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;

    expire_job(&ctx, &second.job).await?;
    reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    expect_not_taken_back(&ctx, &first.claim, TakeBackRefusal::NotTheReapedClaim).await?;
    let taken = take_back(&ctx, &second.claim, LONG_TTL).await?;
    expect_not_taken_back(
        &ctx,
        &first.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    expect_job_lost(&ctx, &first.claim, JobLoss::FenceChanged).await?;
    renew_job_confirmed(&ctx, &taken.claim, LONG_TTL).await?;
    Ok(())
}

/// On its last attempt a job whose lease ran out is dead-lettered by the
/// reaper (`LeaseExpired`); the live copy takes it back under a new, greater
/// fence (same attempt), its old claim is then stale, and the new one completes it.
pub async fn queue_reaped_last_attempt_is_taken_back_and_completed<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let copy = enqueue_and_claim(&ctx, job("job-1").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &copy.job).await?;
    let before = ctx.store.now().await?;
    let report = reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    let after = ctx.store.now().await?;
    let dead = report
        .dead_lettered
        .first()
        .ok_or_else(|| Failure("the reaper dead-lettered nothing".into()))?;
    ensure_eq!(
        *dead,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::LeaseExpired),
            lease_expires_at: None,
            updated_at: dead.updated_at,
            ..copy.job.clone()
        },
        "dead-lettered by the reaper with its lease cleared; owner, fence and attempt kept"
    );
    ensure_within(dead.updated_at, before, after, "updated_at")?;
    ensure_eq!(
        ctx.store.list_dead_letters(QUEUE, 10).await?,
        vec![dead.clone()],
        "the reaped job is listed as a dead letter"
    );
    expect_job_lost(&ctx, &copy.claim, JobLoss::Finished(JobState::DeadLettered)).await?;

    let nobody = JobClaim {
        id: "never-enqueued".into(),
        ..copy.claim.clone()
    };
    expect_not_taken_back(&ctx, &nobody, TakeBackRefusal::Missing).await?;
    let other_owner = JobClaim {
        owner: "worker-b".into(),
        ..copy.claim.clone()
    };
    expect_not_taken_back(&ctx, &other_owner, TakeBackRefusal::NotTheReapedClaim).await?;

    let taken = take_back(&ctx, &copy.claim, LONG_TTL).await?;
    ensure_eq!(
        taken.job,
        Job {
            state: JobState::Claimed,
            dead_reason: None,
            fence: taken.claim.fence,
            lease_expires_at: taken.job.lease_expires_at,
            updated_at: taken.job.updated_at,
            ..dead.clone()
        },
        "taken back: claimed again under a new fence, nothing else changed"
    );
    ensure_eq!(
        ctx.store.list_dead_letters(QUEUE, 10).await?,
        Vec::<Job>::new(),
        "a taken-back job is no dead letter"
    );
    expect_every_write_refused(&ctx, &copy.claim, JobLoss::FenceChanged).await?;
    expect_not_taken_back(
        &ctx,
        &copy.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    let done = settled(&ctx, ctx.store.complete(&taken.claim).await?, "complete").await?;
    ensure_eq!(done.state, JobState::Completed);
    Ok(())
}

/// An operator's retry of a reaped dead letter wins over the live copy: the
/// job is Queued with attempt 0, visible at once, and the copy's take-back is
/// refused (`NotDeadLettered`) before and after the job is claimed again.
pub async fn queue_operator_retry_beats_take_back<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let copy = enqueue_and_claim(&ctx, job("job-1").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &copy.job).await?;
    let report = reap(&ctx, Duration::ZERO, &[], &["job-1"]).await?;
    let dead = report
        .dead_lettered
        .first()
        .ok_or_else(|| Failure("the reaper dead-lettered nothing".into()))?;

    let before = ctx.store.now().await?;
    let outcome = ctx.store.retry_dead_letter("job-1").await?;
    let after = ctx.store.now().await?;
    let OperatorRetry::Requeued(retried) = outcome else {
        return Err(Failure(format!(
            "expected the dead letter to be requeued, got {outcome:?}"
        )));
    };
    ensure_eq!(
        retried,
        Job {
            state: JobState::Queued,
            attempt: 0,
            dead_reason: None,
            run_at: retried.run_at,
            updated_at: retried.updated_at,
            ..dead.clone()
        },
        "an operator's retry: queued, attempts reset, nothing else changed"
    );
    ensure_within(retried.run_at, before, after, "the retried job's run_at")?;
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        retried,
        "get_job reads the retried job"
    );

    expect_not_taken_back(
        &ctx,
        &copy.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Queued),
    )
    .await?;
    expect_job_lost(&ctx, &copy.claim, JobLoss::Requeued).await?;
    let again = claim_one(&ctx, "worker-b", LONG_TTL, "job-1").await?;
    ensure_eq!(
        again.claim.attempt,
        1,
        "attempts restart after an operator's retry"
    );
    ensure!(
        again.claim.fence > copy.claim.fence,
        "the new claim's fence {} is greater than the old copy's {}",
        again.claim.fence,
        copy.claim.fence
    );
    expect_not_taken_back(
        &ctx,
        &copy.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Claimed),
    )
    .await?;
    Ok(())
}

/// A stale copy (same worker name, older fence, its job re-claimed by that
/// worker) is told apart by the fence: renew, complete, fail and defer all
/// answer `FenceChanged` and change nothing; the new claim still holds.
pub async fn queue_stale_copy_sees_other_claim_as_not_its_own<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let old = enqueue_and_claim(&ctx, job("job-1"), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &old.job).await?;
    reap(&ctx, Duration::ZERO, &["job-1"], &[]).await?;
    let new = claim_one(&ctx, "worker-a", LONG_TTL, "job-1").await?;
    expect_every_write_refused(&ctx, &old.claim, JobLoss::FenceChanged).await?;
    renew_job_confirmed(&ctx, &new.claim, LONG_TTL).await?;
    let done = settled(&ctx, ctx.store.complete(&new.claim).await?, "complete").await?;
    ensure_eq!(done.state, JobState::Completed);
    Ok(())
}

/// Writes with another owner's or another fence's claim are refused
/// (`OwnerChanged`, `FenceChanged`); `complete` and `fail` with the right
/// claim settle, after which every write answers `Finished` and changes nothing.
pub async fn queue_complete_and_fail_are_fenced<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("job-1"), "worker-a", LONG_TTL).await?;
    let other_owner = JobClaim {
        owner: "worker-b".into(),
        ..held.claim.clone()
    };
    expect_every_write_refused(&ctx, &other_owner, JobLoss::OwnerChanged).await?;
    let other_fence = JobClaim {
        fence: held.claim.fence + 1,
        ..held.claim.clone()
    };
    expect_every_write_refused(&ctx, &other_fence, JobLoss::FenceChanged).await?;

    let before = ctx.store.now().await?;
    let done = settled(&ctx, ctx.store.complete(&held.claim).await?, "complete").await?;
    let after = ctx.store.now().await?;
    ensure_eq!(
        done,
        Job {
            state: JobState::Completed,
            lease_expires_at: None,
            updated_at: done.updated_at,
            ..held.job.clone()
        },
        "completed with its lease cleared; owner, fence and attempt kept"
    );
    ensure_within(done.updated_at, before, after, "updated_at")?;
    expect_every_write_refused(&ctx, &held.claim, JobLoss::Finished(JobState::Completed)).await?;
    expect_not_taken_back(
        &ctx,
        &held.claim,
        TakeBackRefusal::NotDeadLettered(JobState::Completed),
    )
    .await?;
    ensure_eq!(
        ctx.store.retry_dead_letter("job-1").await?,
        OperatorRetry::NotDeadLettered(JobState::Completed),
        "an operator cannot retry a completed job"
    );
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        done,
        "a completed job never changes"
    );
    claim(
        &ctx,
        &ClaimRequest::new(QUEUE, "worker-b", LONG_TTL).limit(10),
        &[],
    )
    .await?;

    let failing = enqueue_and_claim(&ctx, job("job-2"), "worker-a", LONG_TTL).await?;
    let before = ctx.store.now().await?;
    let outcome = ctx
        .store
        .fail(&failing.claim, "no such customer", FailAction::DeadLetter)
        .await?;
    let failed = settled(&ctx, outcome, "fail with dead-letter").await?;
    let after = ctx.store.now().await?;
    ensure_eq!(
        failed,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::Failed),
            last_error: Some("no such customer".into()),
            lease_expires_at: None,
            updated_at: failed.updated_at,
            ..failing.job.clone()
        },
        "failed for good: dead-lettered, error kept, lease cleared"
    );
    ensure_within(failed.updated_at, before, after, "updated_at")?;
    expect_every_write_refused(
        &ctx,
        &failing.claim,
        JobLoss::Finished(JobState::DeadLettered),
    )
    .await?;
    Ok(())
}

/// Renewing after `complete` answers `Lost(Finished(Completed))`; the job
/// stays Completed, also once its old lease would have run out and the reaper ran.
pub async fn queue_renewal_after_complete_answers_finished<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("job-1"), "worker-a", SHORT_TTL).await?;
    let done = settled(&ctx, ctx.store.complete(&held.claim).await?, "complete").await?;
    expect_job_lost(&ctx, &held.claim, JobLoss::Finished(JobState::Completed)).await?;
    expire_job(&ctx, &held.job).await?;
    reap(&ctx, Duration::ZERO, &[], &[]).await?;
    expect_job_lost(&ctx, &held.claim, JobLoss::Finished(JobState::Completed)).await?;
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        done,
        "the job stays completed"
    );
    Ok(())
}

/// `fail` with `Retry` and attempts left requeues the job with its error
/// kept, visible only from store now + backoff: not claimable before, then
/// claimable as the next attempt.
pub async fn queue_fail_retry_backoff_delays_visibility<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    not_yet(|attempt| fail_retry_backoff_delays_visibility(&ctx, attempt)).await
}

/// One try of [`queue_fail_retry_backoff_delays_visibility`].
async fn fail_retry_backoff_delays_visibility<S: JobQueue>(
    ctx: &Ctx<S>,
    attempt: NotYetTry,
) -> Result<Landed, Failure> {
    let held = enqueue_and_claim(
        ctx,
        attempt.job("job-1").max_attempts(3),
        "worker-a",
        LONG_TTL,
    )
    .await?;
    let backoff = attempt.delay;
    let retry = FailAction::Retry { backoff };
    let before = ctx.store.now().await?;
    let outcome = ctx.store.fail(&held.claim, "smtp timed out", retry).await?;
    let after = ctx.store.now().await?;
    let failed = settled(ctx, outcome, "fail with retry").await?;
    ensure_eq!(
        failed,
        Job {
            state: JobState::Queued,
            last_error: Some("smtp timed out".into()),
            lease_expires_at: None,
            run_at: failed.run_at,
            updated_at: failed.updated_at,
            ..held.job.clone()
        },
        "requeued with the error kept and the lease cleared; owner, fence and attempt kept"
    );
    ensure_within(
        failed.run_at,
        clock::add(before, backoff),
        clock::add(after, backoff),
        "the retry's run_at (store now + backoff)",
    )?;
    let worker = ClaimRequest::new(attempt.queue.as_str(), "worker-b", LONG_TTL).limit(10);
    let observed: CaseResult = async {
        claim(ctx, &worker, &[]).await?;
        ensure_eq!(
            get_job(ctx, &failed.id).await?,
            failed,
            "a job backing off is left alone"
        );
        Ok(())
    }
    .await;
    if judged_before(ctx, failed.run_at, observed).await? == Landed::TooLate {
        return Ok(Landed::TooLate);
    }

    ctx.advance_past(failed.run_at).await?;
    let again = claim(ctx, &worker, &[failed.id.as_str()]).await?;
    let again = again
        .first()
        .ok_or_else(|| Failure("the retry was not claimed".into()))?;
    ensure_eq!(again.claim.attempt, 2, "the retry is attempt 2");
    ensure!(
        again.claim.fence > held.claim.fence,
        "the retry's fence {} is greater than {}",
        again.claim.fence,
        held.claim.fence
    );
    ensure_eq!(
        again.job.last_error,
        failed.last_error,
        "the last error stays until the next failure"
    );
    Ok(Landed::InTime)
}

/// `fail` with `DeadLetter` dead-letters at once (`Failed`), `Retry` on the
/// last attempt dead-letters too (`AttemptsExhausted`); both keep the last
/// error, leave the queue, and are not the reaper's, so never taken back.
pub async fn queue_fail_dead_letter_and_attempts_exhausted<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let broken =
        enqueue_and_claim(&ctx, job("broken").max_attempts(3), "worker-a", LONG_TTL).await?;
    let outcome = ctx
        .store
        .fail(&broken.claim, "malformed payload", FailAction::DeadLetter)
        .await?;
    let dead = settled(&ctx, outcome, "fail with dead-letter").await?;
    ensure_eq!(
        dead,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::Failed),
            last_error: Some("malformed payload".into()),
            lease_expires_at: None,
            updated_at: dead.updated_at,
            ..broken.job.clone()
        },
        "dead-lettered at once, attempts left or not"
    );

    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    let flaky = enqueue_and_claim(&ctx, job("flaky").max_attempts(2), "worker-a", LONG_TTL).await?;
    let outcome = ctx.store.fail(&flaky.claim, "first failure", retry).await?;
    settled(&ctx, outcome, "fail with retry").await?;
    let last = claim_one(&ctx, "worker-b", LONG_TTL, "flaky").await?;
    ensure_eq!(last.claim.attempt, 2, "the last attempt");
    let outcome = ctx.store.fail(&last.claim, "second failure", retry).await?;
    let exhausted = settled(&ctx, outcome, "fail with retry on the last attempt").await?;
    ensure_eq!(
        exhausted,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::AttemptsExhausted),
            last_error: Some("second failure".into()),
            lease_expires_at: None,
            updated_at: exhausted.updated_at,
            ..last.job.clone()
        },
        "a retry with no attempt left dead-letters the job"
    );

    claim(
        &ctx,
        &ClaimRequest::new(QUEUE, "worker-c", LONG_TTL).limit(10),
        &[],
    )
    .await?;
    ensure_eq!(
        ctx.store.list_dead_letters(QUEUE, 10).await?,
        vec![dead, exhausted],
        "both are listed as dead letters"
    );
    expect_not_taken_back(
        &ctx,
        &broken.claim,
        TakeBackRefusal::NotByReaper(DeadReason::Failed),
    )
    .await?;
    expect_not_taken_back(
        &ctx,
        &last.claim,
        TakeBackRefusal::NotByReaper(DeadReason::AttemptsExhausted),
    )
    .await?;
    Ok(())
}

/// `defer` un-claims the job, refunds its attempt and adds the missing
/// capabilities to its requirements, visible at once: a worker lacking them
/// skips it, one having them claims it.
pub async fn queue_defer_refunds_attempt_and_stamps_requirement<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let held = enqueue_and_claim(&ctx, job("job-1").require("linux"), "worker-a", LONG_TTL).await?;
    let before = ctx.store.now().await?;
    let outcome = ctx
        .store
        .defer(&held.claim, &capabilities(&["gpu"]))
        .await?;
    let after = ctx.store.now().await?;
    let deferred = settled(&ctx, outcome, "defer").await?;
    ensure_eq!(
        deferred,
        Job {
            state: JobState::Queued,
            attempt: 0,
            required_capabilities: capabilities(&["gpu", "linux"]),
            lease_expires_at: None,
            run_at: deferred.run_at,
            updated_at: deferred.updated_at,
            ..held.job.clone()
        },
        "deferred: queued, attempt refunded, requirement added, lease cleared"
    );
    ensure_within(deferred.run_at, before, after, "the deferred job's run_at")?;
    expect_job_lost(&ctx, &held.claim, JobLoss::Requeued).await?;

    let lacking = ClaimRequest::new(QUEUE, "worker-a", LONG_TTL)
        .capabilities(["linux", "ssd"])
        .limit(10);
    claim(&ctx, &lacking, &[]).await?;
    let having = ClaimRequest::new(QUEUE, "worker-gpu", LONG_TTL).capabilities(["gpu", "linux"]);
    let taken = claim(&ctx, &having, &["job-1"]).await?;
    ensure_eq!(
        taken[0].claim.attempt,
        1,
        "the refunded attempt is not counted"
    );
    ensure!(
        taken[0].claim.fence > held.claim.fence,
        "the new claim's fence {} is greater than {}",
        taken[0].claim.fence,
        held.claim.fence
    );
    Ok(())
}

/// `reap(grace)` leaves claims whose lease plus grace still runs, then
/// requeues expired claims with attempts left and dead-letters
/// (`LeaseExpired`) those on their last attempt; other jobs are untouched.
pub async fn queue_reap_requeues_or_dead_letters_by_attempts_left<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let valid = enqueue_and_claim(&ctx, job("valid").max_attempts(1), "worker-a", LONG_TTL).await?;
    let done = enqueue_and_claim(&ctx, job("done").max_attempts(1), "worker-a", SHORT_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    let retry =
        enqueue_and_claim(&ctx, job("retry").max_attempts(2), "worker-b", SHORT_TTL).await?;
    let last = enqueue_and_claim(&ctx, job("last").max_attempts(1), "worker-c", SHORT_TTL).await?;
    enqueue(&ctx, job("waiting")).await?;
    expire_job(&ctx, &retry.job).await?;
    expire_job(&ctx, &last.job).await?;

    let others = ["valid", "done", "waiting"];
    let others_before = jobs(&ctx, &others).await?;
    let expired = ["retry", "last"];
    let expired_before = jobs(&ctx, &expired).await?;
    reap(&ctx, LONG_GRACE, &[], &[]).await?;
    ensure_eq!(
        jobs(&ctx, &expired).await?,
        expired_before,
        "within grace nothing is reaped"
    );

    let before = ctx.store.now().await?;
    let report = reap(&ctx, Duration::ZERO, &["retry"], &["last"]).await?;
    let after = ctx.store.now().await?;
    let (Some(requeued), Some(dead)) = (report.requeued.first(), report.dead_lettered.first())
    else {
        return Err(Failure(format!("unexpected reap report {report:?}")));
    };
    ensure_eq!(
        *requeued,
        Job {
            state: JobState::Queued,
            lease_expires_at: None,
            run_at: requeued.run_at,
            updated_at: requeued.updated_at,
            ..retry.job.clone()
        },
        "requeued, visible at once, lease cleared; owner, fence and attempt kept"
    );
    ensure_within(requeued.run_at, before, after, "the requeued job's run_at")?;
    ensure_eq!(
        *dead,
        Job {
            state: JobState::DeadLettered,
            dead_reason: Some(DeadReason::LeaseExpired),
            lease_expires_at: None,
            updated_at: dead.updated_at,
            ..last.job.clone()
        },
        "dead-lettered by the reaper, lease cleared; owner, fence and attempt kept"
    );
    ensure_within(dead.updated_at, before, after, "updated_at")?;
    ensure_eq!(
        jobs(&ctx, &others).await?,
        others_before,
        "a valid lease, a completed job and a queued job are left alone"
    );
    reap(&ctx, Duration::ZERO, &[], &[]).await?;
    renew_job_confirmed(&ctx, &valid.claim, LONG_TTL).await?;
    Ok(())
}

/// `list_dead_letters` lists one queue's dead letters oldest update first, up
/// to `limit`; `retry_dead_letter` requeues one (attempt 0, visible at once)
/// and answers `NotDeadLettered(state)` for any other job, `Missing` for none.
pub async fn queue_dead_letters_listed_and_retried<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    // Dead-lettered in this order, which is not the order of their ids.
    for id in ["dead-2", "dead-1", "dead-3"] {
        let held = enqueue_and_claim(&ctx, job(id), "worker-a", LONG_TTL).await?;
        let outcome = ctx
            .store
            .fail(&held.claim, "broken", FailAction::DeadLetter)
            .await?;
        settled(&ctx, outcome, "fail with dead-letter").await?;
        ctx.advance(TICK).await?;
    }
    let elsewhere = NewJob::new("other-queue", json!(0)).id("elsewhere");
    let held = enqueue_and_claim(&ctx, elsewhere, "worker-a", LONG_TTL).await?;
    let outcome = ctx
        .store
        .fail(&held.claim, "broken", FailAction::DeadLetter)
        .await?;
    settled(&ctx, outcome, "fail with dead-letter").await?;
    let done = enqueue_and_claim(&ctx, job("done"), "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    enqueue_and_claim(&ctx, job("claimed"), "worker-a", LONG_TTL).await?;
    enqueue(&ctx, job("waiting")).await?;

    let listed = ctx.store.list_dead_letters(QUEUE, 10).await?;
    ensure_eq!(
        ids(&listed),
        ["dead-2", "dead-1", "dead-3"],
        "dead letters, oldest update first"
    );
    for job in &listed {
        ensure_eq!(
            get_job(&ctx, &job.id).await?,
            *job,
            "get_job reads the listed job"
        );
    }
    ensure_eq!(
        ids(&ctx.store.list_dead_letters(QUEUE, 2).await?),
        ["dead-2", "dead-1"],
        "the limit keeps the oldest"
    );
    ensure_eq!(
        ids(&ctx.store.list_dead_letters("other-queue", 10).await?),
        ["elsewhere"],
        "each queue lists its own"
    );
    ensure_eq!(
        ctx.store.list_dead_letters("no-such-queue", 10).await?,
        Vec::<Job>::new()
    );

    ctx.advance(TICK).await?;
    let before = ctx.store.now().await?;
    let outcome = ctx.store.retry_dead_letter("dead-1").await?;
    let after = ctx.store.now().await?;
    let OperatorRetry::Requeued(retried) = outcome else {
        return Err(Failure(format!(
            "expected dead-1 to be requeued, got {outcome:?}"
        )));
    };
    ensure_eq!(
        retried,
        Job {
            state: JobState::Queued,
            attempt: 0,
            dead_reason: None,
            run_at: retried.run_at,
            updated_at: retried.updated_at,
            ..listed[1].clone()
        },
        "an operator's retry: queued, attempts reset, nothing else changed"
    );
    ensure_within(retried.run_at, before, after, "the retried job's run_at")?;
    ensure_eq!(
        get_job(&ctx, "dead-1").await?,
        retried,
        "get_job reads the retried job"
    );
    ensure_eq!(
        ids(&ctx.store.list_dead_letters(QUEUE, 10).await?),
        ["dead-2", "dead-3"],
        "a retried job is no dead letter"
    );

    for (id, state) in [
        ("dead-1", JobState::Queued),
        ("done", JobState::Completed),
        ("claimed", JobState::Claimed),
        ("waiting", JobState::Queued),
    ] {
        let before = get_job(&ctx, id).await?;
        ensure_eq!(
            ctx.store.retry_dead_letter(id).await?,
            OperatorRetry::NotDeadLettered(state),
            "retrying {id}"
        );
        ensure_eq!(
            get_job(&ctx, id).await?,
            before,
            "a refused retry changes nothing"
        );
    }
    ensure_eq!(
        ctx.store.retry_dead_letter("never-enqueued").await?,
        OperatorRetry::Missing
    );
    let claimed = claim(
        &ctx,
        &ClaimRequest::new(QUEUE, "worker-b", LONG_TTL).limit(10),
        &["waiting", "dead-1"],
    )
    .await?;
    ensure_eq!(
        claimed[1].claim.attempt,
        1,
        "attempts restart after a retry"
    );
    Ok(())
}

/// Bad input to every queue operation (names, worker ids, attempts, payload
/// size or NUL, capabilities, limits, ttls, fence 0, backoff, grace) is
/// `InvalidInput` naming the field, and changes nothing; values at the limits pass.
pub async fn queue_invalid_input_rejected_and_changes_nothing<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    // Each valid twin of a bad request below would change one of these.
    let dead = enqueue_and_claim(&ctx, job("dead").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &dead.job).await?;
    reap(&ctx, Duration::ZERO, &[], &["dead"]).await?;
    let orphan = enqueue_and_claim(&ctx, job("orphan"), "worker-b", SHORT_TTL).await?;
    expire_job(&ctx, &orphan.job).await?;
    let held = enqueue_and_claim(&ctx, job("held"), "worker-a", LONG_TTL).await?;
    enqueue(&ctx, job("waiting")).await?;
    let observed = ["dead", "orphan", "held", "waiting", "bad-job", "good-job"];
    let before = (
        jobs(&ctx, &observed).await?,
        ctx.store.list_dead_letters(QUEUE, 100).await?,
    );

    let too_many: Vec<String> = (0..=MAX_SCOPES).map(|n| format!("cap-{n}")).collect();
    let valid_job = || job("bad-job");
    let bad_jobs = [
        ("id", "empty id", valid_job().id("")),
        (
            "id",
            "id with a control character",
            valid_job().id("bad\njob"),
        ),
        (
            "queue",
            "empty queue name",
            NewJob {
                queue: String::new(),
                ..valid_job()
            },
        ),
        (
            "queue",
            "queue name with a control character",
            NewJob {
                queue: "jo\tbs".into(),
                ..valid_job()
            },
        ),
        (
            "max_attempts",
            "max_attempts 0",
            valid_job().max_attempts(0),
        ),
        (
            "max_attempts",
            "max_attempts over the maximum",
            valid_job().max_attempts(MAX_ATTEMPTS + 1),
        ),
        (
            "payload",
            "payload over 256 KiB",
            NewJob {
                payload: json!("x".repeat(MAX_PAYLOAD_BYTES)),
                ..valid_job()
            },
        ),
        (
            "payload",
            "payload with NUL in a string",
            NewJob {
                payload: json!({ "text": "a\u{0}b" }),
                ..valid_job()
            },
        ),
        (
            "payload",
            "payload with NUL in a key",
            NewJob {
                payload: json!({ "a\u{0}b": 1 }),
                ..valid_job()
            },
        ),
        (
            "capability",
            "empty required capability",
            valid_job().require(""),
        ),
        (
            "capabilities",
            "65 required capabilities",
            NewJob {
                required_capabilities: too_many.iter().cloned().collect(),
                ..valid_job()
            },
        ),
    ];
    for (field, what, bad) in &bad_jobs {
        expect_invalid(ctx.store.enqueue(bad).await, field, what)?;
        let batch = [job("good-job"), bad.clone()];
        expect_invalid(
            ctx.store.enqueue_batch(&batch).await,
            field,
            &format!("a batch with {what}"),
        )?;
    }

    let valid_claim = || ClaimRequest::new(QUEUE, "worker-c", LONG_TTL).limit(10);
    let bad_claims = [
        (
            "queue",
            "empty queue name",
            ClaimRequest {
                queue: String::new(),
                ..valid_claim()
            },
        ),
        (
            "worker",
            "empty worker",
            ClaimRequest {
                worker: String::new(),
                ..valid_claim()
            },
        ),
        (
            "worker",
            "worker with whitespace",
            ClaimRequest {
                worker: "worker c".into(),
                ..valid_claim()
            },
        ),
        (
            "capability",
            "empty capability",
            valid_claim().capabilities([""]),
        ),
        (
            "capabilities",
            "65 capabilities",
            valid_claim().capabilities(too_many.iter().cloned()),
        ),
        (
            "ttl",
            "zero ttl",
            ClaimRequest {
                ttl: Duration::ZERO,
                ..valid_claim()
            },
        ),
        (
            "ttl",
            "ttl over 30 days",
            ClaimRequest {
                ttl: MAX_TTL + Duration::from_millis(1),
                ..valid_claim()
            },
        ),
        ("limit", "limit 0", valid_claim().limit(0)),
        (
            "limit",
            "limit over the maximum",
            valid_claim().limit(MAX_CLAIM + 1),
        ),
    ];
    for (field, what, bad) in &bad_claims {
        expect_invalid(ctx.store.claim(bad).await, field, &format!("claim: {what}"))?;
    }

    let bad_job_claims = [
        (
            "fence",
            "fence 0",
            JobClaim {
                fence: 0,
                ..held.claim.clone()
            },
        ),
        (
            "owner",
            "empty owner",
            JobClaim {
                owner: String::new(),
                ..held.claim.clone()
            },
        ),
        (
            "owner",
            "owner with whitespace",
            JobClaim {
                owner: "worker a".into(),
                ..held.claim.clone()
            },
        ),
        (
            "id",
            "empty id",
            JobClaim {
                id: String::new(),
                ..held.claim.clone()
            },
        ),
    ];
    let missing = capabilities(&["gpu"]);
    for (field, what, bad) in &bad_job_claims {
        expect_invalid(
            ctx.store.renew_job(bad, LONG_TTL).await,
            field,
            &format!("renew_job: {what}"),
        )?;
        expect_invalid(
            ctx.store.complete(bad).await,
            field,
            &format!("complete: {what}"),
        )?;
        expect_invalid(
            ctx.store.fail(bad, "boom", FailAction::DeadLetter).await,
            field,
            &format!("fail: {what}"),
        )?;
        expect_invalid(
            ctx.store.defer(bad, &missing).await,
            field,
            &format!("defer: {what}"),
        )?;
        expect_invalid(
            ctx.store.take_back(bad, LONG_TTL).await,
            field,
            &format!("take_back: {what}"),
        )?;
    }

    let live = &held.claim;
    let huge_ttl = MAX_TTL + Duration::from_millis(1);
    expect_invalid(
        ctx.store.renew_job(live, Duration::ZERO).await,
        "ttl",
        "renew_job: zero ttl",
    )?;
    expect_invalid(
        ctx.store.renew_job(live, huge_ttl).await,
        "ttl",
        "renew_job: huge ttl",
    )?;
    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    expect_invalid(
        ctx.store.fail(live, "a\u{0}b", retry).await,
        "error",
        "fail: NUL in the error",
    )?;
    let long_error = "e".repeat(MAX_TEXT_BYTES + 1);
    expect_invalid(
        ctx.store.fail(live, &long_error, retry).await,
        "error",
        "fail: error over 16 KiB",
    )?;
    let huge_backoff = FailAction::Retry {
        backoff: MAX_TTL + Duration::from_secs(1),
    };
    expect_invalid(
        ctx.store.fail(live, "boom", huge_backoff).await,
        "backoff",
        "fail: huge backoff",
    )?;
    expect_invalid(
        ctx.store.defer(live, &capabilities(&[""])).await,
        "capability",
        "defer: empty capability",
    )?;
    let too_many_missing: BTreeSet<String> = too_many.iter().cloned().collect();
    expect_invalid(
        ctx.store.defer(live, &too_many_missing).await,
        "capabilities",
        "defer: 65 capabilities",
    )?;
    expect_invalid(
        ctx.store.take_back(&dead.claim, Duration::ZERO).await,
        "ttl",
        "take_back: zero ttl",
    )?;
    expect_invalid(
        ctx.store.reap(MAX_GRACE + Duration::from_secs(1)).await,
        "grace",
        "reap: huge grace",
    )?;
    expect_invalid(ctx.store.get_job("").await, "id", "get_job: empty id")?;
    expect_invalid(
        ctx.store.list_dead_letters("", 10).await,
        "queue",
        "list_dead_letters: empty queue",
    )?;
    expect_invalid(
        ctx.store.list_dead_letters(QUEUE, 0).await,
        "limit",
        "list_dead_letters: limit 0",
    )?;
    expect_invalid(
        ctx.store.list_dead_letters(QUEUE, MAX_LIST_LIMIT + 1).await,
        "limit",
        "list_dead_letters: limit over the maximum",
    )?;
    expect_invalid(
        ctx.store.retry_dead_letter("").await,
        "id",
        "retry_dead_letter: empty id",
    )?;
    expect_invalid(
        ctx.store.retry_dead_letter("de\nad").await,
        "id",
        "retry_dead_letter: id with a control character",
    )?;

    let after = (
        jobs(&ctx, &observed).await?,
        ctx.store.list_dead_letters(QUEUE, 100).await?,
    );
    ensure_eq!(after, before, "bad input changes nothing");

    // At the limits, accepted.
    let largest_payload = json!("x".repeat(MAX_PAYLOAD_BYTES - 2));
    ensure_eq!(largest_payload.to_string().len(), MAX_PAYLOAD_BYTES);
    let at_limits = NewJob::new("limits", largest_payload)
        .id("i".repeat(tenure_lease_core::backend::validate::MAX_NAME_BYTES))
        .max_attempts(MAX_ATTEMPTS);
    enqueue(&ctx, at_limits.clone()).await?;
    claim(
        &ctx,
        &ClaimRequest::new("limits", "worker-a", MAX_TTL).limit(MAX_CLAIM),
        &[at_limits.id.as_str()],
    )
    .await?;
    Ok(())
}

/// Tracks fences in the order a store answered them.
struct FenceLog {
    last: Option<(String, u64)>,
}

impl FenceLog {
    /// Fails the case unless `fence` (what `what` answered) is greater than
    /// every fence noted before.
    fn note(&mut self, what: impl Into<String>, fence: u64) -> CaseResult {
        let what = what.into();
        if let Some((previous, last)) = &self.last {
            ensure!(
                fence > *last,
                "{what} answered fence {fence}, not greater than {previous}'s {last}"
            );
        }
        self.last = Some((what, fence));
        Ok(())
    }

    /// Notes every job of a claim answer, in answer order.
    fn note_claims(&mut self, claimed: &[ClaimedJob]) -> CaseResult {
        for each in claimed {
            self.note(format!("the claim of {}", each.job.id), each.claim.fence)?;
        }
        Ok(())
    }
}

/// Leases and jobs draw fences from one store-wide sequence: admissions,
/// interrupts, takeovers, job claims and take-backs, interleaved, answer
/// strictly increasing fences.
pub async fn queue_fences_shared_with_leases<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let batch: Vec<NewJob> = (0..5).map(|n| job(&format!("job-{n}"))).collect();
    ctx.store.enqueue_batch(&batch).await?;
    let mut log = FenceLog { last: None };
    let claim_some = |limit| {
        let ctx = ctx.clone();
        async move {
            let request = ClaimRequest::new(QUEUE, "worker-a", LONG_TTL).limit(limit);
            let claimed = ctx.store.claim(&request).await?;
            ensure_eq!(claimed.len(), limit, "jobs claimed with limit {limit}");
            Ok::<_, Failure>(claimed)
        }
    };

    let op_1 = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("s")
            .ttl(SHORT_TTL),
    )
    .await?;
    log.note("admit op-1", op_1.fence)?;
    log.note_claims(&claim_some(1).await?)?;
    let op_2 = admit(&ctx, AdmitRequest::new("op-2", "worker-b")).await?;
    log.note("admit op-2", op_2.fence)?;
    log.note_claims(&claim_some(2).await?)?;
    let reaped = enqueue_and_claim(
        &ctx,
        NewJob::new("last-try", json!(0))
            .id("reaped")
            .max_attempts(1),
        "worker-a",
        SHORT_TTL,
    )
    .await?;
    log.note("the claim of reaped", reaped.claim.fence)?;

    expire(&ctx, &op_1, Duration::ZERO).await?;
    expire_job(&ctx, &reaped.job).await?;
    let interrupting = AdmitRequest::new("op-3", "worker-c")
        .scope("s")
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    match ctx.store.admit(&interrupting).await? {
        Admission::Admitted {
            record,
            interrupted,
        } => {
            ensure_eq!(
                ids_of_records(&interrupted),
                ["op-1"],
                "op-3 interrupts op-1"
            );
            for each in &interrupted {
                log.note(format!("the interrupt of {}", each.id), each.fence)?;
            }
            log.note("admit op-3", record.fence)?;
        }
        other => {
            return Err(Failure(format!(
                "expected op-3 to be admitted, got {other:?}"
            )))
        }
    }
    log.note_claims(&claim_some(1).await?)?;
    reap(&ctx, Duration::ZERO, &[], &["reaped"]).await?;
    let taken = take_back(&ctx, &reaped.claim, LONG_TTL).await?;
    log.note("the take-back of reaped", taken.claim.fence)?;
    let adopted = take_over(
        &ctx,
        &TakeoverRequest::adopt("op-2", "worker-d", Some(LONG_TTL)),
    )
    .await?;
    log.note("the takeover of op-2", adopted.fence)?;
    log.note_claims(&claim_some(1).await?)?;
    let op_4 = admit(&ctx, AdmitRequest::new("op-4", "worker-a")).await?;
    log.note("admit op-4", op_4.fence)
}

/// The ids of lease `records`, in order.
fn ids_of_records(records: &[tenure_lease_core::LeaseRecord]) -> Vec<&str> {
    records.iter().map(|record| record.id.as_str()).collect()
}
