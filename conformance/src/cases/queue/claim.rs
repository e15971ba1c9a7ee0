//! `claim`: which job is handed out, to whom, under which fence; racing claimers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobLoss, JobState, NewJob,
};
use tenure_lease_core::{clock, Admission, AdmitRequest, AdmitStrategy, JobQueue, TakeoverRequest};

use super::{
    capabilities, claim, claim_one, earlier_by, enqueue, enqueue_and_claim, ensure_within,
    expect_every_write_refused, expect_job_lost, expire_job, get_job, job, judged_before, not_yet,
    reap, renew_job_confirmed, settled, take_back, Landed, NotYetTry, CLAIMERS, DELAY, QUEUE,
    RACED_JOBS, TICK,
};
use crate::cases::util::{
    admit, expire, micro_before, take_over, StartLine, LONG_TTL, NEEDS_MANUAL_CLOCK, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

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
    let start = StartLine::new(CLAIMERS);
    let mut claimers = Vec::with_capacity(CLAIMERS);
    for n in 0..CLAIMERS {
        let request = ClaimRequest::new(QUEUE, format!("worker-{n}"), LONG_TTL).limit(1 + n % 3);
        let store = Arc::clone(&ctx.store);
        let start = Arc::clone(&start);
        claimers.push(tokio::spawn(async move {
            start.wait().await;
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

/// The queue's time rules at their exact instants: a job enqueued with
/// `run_at` `R` is not claimable 1 µs before `R` and is at `R`; a claim
/// whose lease ends at `E` is not reaped (grace `g`) 1 µs before `E + g`
/// and is at `E + g`; a job failed with a retry backoff `b` at `F` is
/// claimable again at exactly `F + b`, not 1 µs before. Needs a clock the
/// kit can place; skipped on a server's clock.
pub async fn queue_time_rules_are_exact_to_the_microsecond<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let run_at = clock::add(ctx.store.now().await?, DELAY);
    enqueue(&ctx, job("edge-run-at").run_at(run_at)).await?;
    let request = ClaimRequest::new(QUEUE, "worker-a", SHORT_TTL);
    manual.advance_to(micro_before(run_at));
    claim(&ctx, &request, &[]).await?;
    manual.advance_to(run_at);
    let claimed = claim(&ctx, &request, &["edge-run-at"]).await?;
    let claimed = claimed
        .first()
        .ok_or_else(|| Failure("the job due now was not claimed".into()))?;

    let grace = Duration::from_millis(3);
    let expires = claimed
        .job
        .lease_expires_at
        .ok_or_else(|| Failure("a claimed job has a lease".into()))?;
    let reapable = clock::add(expires, grace);
    manual.advance_to(micro_before(reapable));
    reap(&ctx, grace, &[], &[]).await?;
    manual.advance_to(reapable);
    reap(&ctx, grace, &["edge-run-at"], &[]).await?;

    let again = claim(&ctx, &request, &["edge-run-at"]).await?;
    let again = again
        .first()
        .ok_or_else(|| Failure("the requeued job was not claimed".into()))?;
    let backoff = Duration::from_millis(9);
    let failed_at = ctx.store.now().await?;
    let retried = settled(
        &ctx,
        ctx.store
            .fail(&again.claim, "retry later", FailAction::Retry { backoff })
            .await?,
        "fail with a retry",
    )
    .await?;
    let due = clock::add(failed_at, backoff);
    ensure_eq!(
        retried.run_at,
        due,
        "the retry is due exactly one backoff after the failure"
    );
    manual.advance_to(micro_before(due));
    claim(&ctx, &request, &[]).await?;
    manual.advance_to(due);
    claim(&ctx, &request, &["edge-run-at"]).await?;
    Ok(())
}
