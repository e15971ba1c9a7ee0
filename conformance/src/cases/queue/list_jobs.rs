//! `list_jobs`: the operator's view of a queue, by state, oldest first.

use serde_json::json;
use tenure_lease_core::queue::{FailAction, Job, JobState, NewJob, QueueCounts};
use tenure_lease_core::JobQueue;

use super::{enqueue, enqueue_and_claim, get_job, job, settled, QUEUE, TICK};
use crate::cases::util::{expect_invalid, LONG_TTL};
use crate::ensure_eq;
use crate::harness::{CaseResult, Ctx, Failure};

/// `list_jobs` answers a queue's jobs in any state or in one, oldest first
/// (by creation, then id), at most `limit`, and nothing of other queues;
/// a bad queue or limit is `InvalidInput`.
pub async fn queue_list_jobs_by_state_oldest_first<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    one_job_in_each_state(&ctx).await?;
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

/// `count_jobs` answers every queue with a job, its jobs counted by state
/// (queued visible or not, claimed, completed, dead-lettered), in queue
/// name order, and nothing for an empty store; a queue whose last job is
/// purged is no longer answered.
pub async fn queue_counts_name_every_queue_with_its_jobs_by_state<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    ensure_eq!(
        ctx.store.count_jobs().await?,
        Vec::<QueueCounts>::new(),
        "an empty store counts no queue"
    );
    one_job_in_each_state(&ctx).await?;
    // Sorted before QUEUE ("jobs") by name, after it by creation.
    enqueue(&ctx, NewJob::new("archive", json!(1)).id("elsewhere")).await?;
    let gone = NewJob::new("z-drained", json!(1)).id("gone");
    let gone = enqueue_and_claim(&ctx, gone, "worker-a", LONG_TTL).await?;
    settled(&ctx, ctx.store.complete(&gone.claim).await?, "complete").await?;

    let counts = |queue: &str, [queued, claimed, completed, dead_lettered]: [u64; 4]| {
        let mut counts = QueueCounts::new(queue);
        counts.add(JobState::Queued, queued);
        counts.add(JobState::Claimed, claimed);
        counts.add(JobState::Completed, completed);
        counts.add(JobState::DeadLettered, dead_lettered);
        counts
    };
    ensure_eq!(
        ctx.store.count_jobs().await?,
        [
            counts("archive", [1, 0, 0, 0]),
            counts(QUEUE, [2, 1, 1, 1]),
            counts("z-drained", [0, 0, 1, 0]),
        ],
        "every queue counted by state, in name order"
    );
    ctx.store.purge_jobs(std::time::Duration::ZERO).await?;
    ensure_eq!(
        ctx.store.count_jobs().await?,
        [counts("archive", [1, 0, 0, 0]), counts(QUEUE, [2, 1, 0, 0])],
        "after a purge of every finished job: the drained queue is gone"
    );
    Ok(())
}

/// Jobs `done` (completed), `dead` (dead-lettered), `held` (claimed),
/// `ready` (queued, visible) and `later` (queued, due tomorrow) in
/// [`QUEUE`], created in that order a tick apart.
async fn one_job_in_each_state<S: JobQueue + 'static>(ctx: &Ctx<S>) -> CaseResult {
    let done = enqueue_and_claim(ctx, job("done"), "worker-a", LONG_TTL).await?;
    settled(ctx, ctx.store.complete(&done.claim).await?, "complete").await?;
    ctx.advance(TICK).await?;
    let dead = enqueue_and_claim(ctx, job("dead"), "worker-a", LONG_TTL).await?;
    let failed = ctx
        .store
        .fail(&dead.claim, "broken", FailAction::DeadLetter)
        .await?;
    settled(ctx, failed, "fail with dead-letter").await?;
    ctx.advance(TICK).await?;
    enqueue_and_claim(ctx, job("held"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    enqueue(ctx, job("ready")).await?;
    ctx.advance(TICK).await?;
    let tomorrow = ctx.store.now().await? + chrono::TimeDelta::days(1);
    enqueue(ctx, job("later").run_at(tomorrow)).await?;
    Ok(())
}

/// The state filter applies before the limit (the oldest job of the queue
/// in another state does not use up the limit), dead letters list by last
/// update and not by creation, and ties in time order by id: a batch's
/// jobs (one instant) list by id, and so do dead letters failed at one
/// instant (on a clock the kit holds still), whatever the order they were
/// given or failed in.
pub async fn queue_listings_filter_before_the_limit_and_break_ties_by_id<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    // Created in this order; dead-lettered in the reverse one.
    let oldest = enqueue_and_claim(&ctx, job("created-1"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    let middle = enqueue_and_claim(&ctx, job("created-2"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    let newest = enqueue_and_claim(&ctx, job("created-3"), "worker-a", LONG_TTL).await?;
    ctx.advance(TICK).await?;
    for held in [&newest, &oldest] {
        let failed = ctx
            .store
            .fail(&held.claim, "broken", FailAction::DeadLetter)
            .await?;
        settled(&ctx, failed, "fail with dead-letter").await?;
        ctx.advance(TICK).await?;
    }
    settled(&ctx, ctx.store.complete(&middle.claim).await?, "complete").await?;
    ctx.advance(TICK).await?;

    let listed = |state: Option<JobState>, limit: usize| {
        let ctx = &ctx;
        async move {
            let jobs = ctx.store.list_jobs(QUEUE, state, limit).await?;
            Ok::<_, Failure>(jobs.into_iter().map(|job| job.id).collect::<Vec<_>>())
        }
    };
    ensure_eq!(
        listed(Some(JobState::Completed), 1).await?,
        ["created-2"],
        "list_jobs(completed, limit 1): the oldest completed job, though an older job of \
         another state comes first in the queue"
    );
    ensure_eq!(
        listed(Some(JobState::DeadLettered), 1).await?,
        ["created-1"],
        "list_jobs(dead-lettered, limit 1): the oldest-created dead letter"
    );
    ensure_eq!(
        dead_letter_ids(&ctx, QUEUE, 10).await?,
        ["created-3", "created-1"],
        "list_dead_letters: by last update (created-3 failed first), not by creation"
    );
    ensure_eq!(
        dead_letter_ids(&ctx, QUEUE, 1).await?,
        ["created-3"],
        "list_dead_letters(limit 1): the least recently updated"
    );

    // One batch, one instant: listed by id, not in the batch's order.
    let batch_queue = "batch-queue";
    let batch: Vec<NewJob> = ["tie-c", "tie-a", "tie-b"]
        .iter()
        .map(|id| NewJob::new(batch_queue, serde_json::json!({ "job": id })).id(*id))
        .collect();
    ctx.store.enqueue_batch(&batch).await?;
    let mut expected = Vec::new();
    for new in &batch {
        let stored = get_job(&ctx, &new.id).await?;
        expected.push((stored.created_at, stored.id));
    }
    expected.sort();
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    let listed: Vec<String> = ctx
        .store
        .list_jobs(batch_queue, None, 10)
        .await?
        .into_iter()
        .map(|job| job.id)
        .collect();
    ensure_eq!(
        listed,
        expected,
        "list_jobs: oldest first, ties (a batch's one instant) by id"
    );

    // Dead letters failed at one instant, where the kit can hold the clock
    // still: listed by id.
    if ctx.manual_clock().is_some() {
        let tie_queue = "tie-dead-queue";
        let mut held = Vec::new();
        for id in ["dead-b", "dead-a"] {
            let new = NewJob::new(tie_queue, serde_json::json!({ "job": id })).id(id);
            held.push(enqueue_and_claim(&ctx, new, "worker-a", LONG_TTL).await?);
        }
        ctx.advance(TICK).await?;
        for each in &held {
            let failed = ctx
                .store
                .fail(&each.claim, "broken", FailAction::DeadLetter)
                .await?;
            settled(&ctx, failed, "fail with dead-letter").await?;
        }
        ensure_eq!(
            dead_letter_ids(&ctx, tie_queue, 10).await?,
            ["dead-a", "dead-b"],
            "list_dead_letters: updated at one instant, so by id"
        );
    }
    Ok(())
}

/// Every listing of a queue whose jobs were created in one order and
/// settled in another matches a reference built from the jobs' own stamps,
/// at every limit from one to one past the count: `list_jobs` for every
/// state (and none) is the queue's jobs in that state by creation, then id,
/// cut at the limit; `list_dead_letters` is its dead letters by last
/// update, then id. A listing cut before it filters, ordered by another
/// stamp, or holding another queue's jobs differs at some limit.
pub async fn queue_listings_match_the_reference_at_every_limit<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    // Created (and claimed) in this order; settled in `SETTLE_ORDER`.
    const CREATED: usize = 8;
    const SETTLE_ORDER: [(usize, bool); 6] = [
        (5, false),
        (2, true),
        (7, false),
        (0, false),
        (3, true),
        (6, false),
    ];
    // A clock the kit holds still is moved between steps; any other moves
    // by itself, and the reference reads the stamps the store gave.
    let step = || {
        if let Some(clock) = ctx.manual_clock() {
            clock.advance(TICK);
        }
    };
    let mut held = Vec::with_capacity(CREATED);
    for index in 0..CREATED {
        held.push(
            enqueue_and_claim(&ctx, job(&format!("ref-{index}")), "worker-a", LONG_TTL).await?,
        );
        step();
    }
    enqueue(&ctx, job("ref-queued")).await?;
    let tomorrow = ctx.store.now().await? + chrono::TimeDelta::days(1);
    enqueue(&ctx, job("ref-later").run_at(tomorrow)).await?;
    enqueue(
        &ctx,
        NewJob::new("ref-other-queue", json!(1)).id("ref-elsewhere"),
    )
    .await?;
    for (index, completes) in SETTLE_ORDER {
        step();
        let claim = &held[index].claim;
        let answer = if completes {
            ctx.store.complete(claim).await?
        } else {
            ctx.store
                .fail(claim, "broken", FailAction::DeadLetter)
                .await?
        };
        settled(&ctx, answer, "settle").await?;
    }

    let mut jobs = Vec::new();
    for id in (0..CREATED)
        .map(|index| format!("ref-{index}"))
        .chain(["ref-queued".to_owned(), "ref-later".to_owned()])
    {
        jobs.push(get_job(&ctx, &id).await?);
    }
    jobs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    let states = [
        None,
        Some(JobState::Queued),
        Some(JobState::Claimed),
        Some(JobState::Completed),
        Some(JobState::DeadLettered),
    ];
    for state in states {
        let expected: Vec<&str> = jobs
            .iter()
            .filter(|job| state.is_none_or(|state| job.state == state))
            .map(|job| job.id.as_str())
            .collect();
        for limit in 1..=expected.len() + 1 {
            let listed: Vec<String> = ctx
                .store
                .list_jobs(QUEUE, state, limit)
                .await?
                .into_iter()
                .map(|job| job.id)
                .collect();
            ensure_eq!(
                listed,
                expected[..limit.min(expected.len())],
                "list_jobs({state:?}, limit {limit}): the queue's jobs in that state by \
                 creation, then id, cut at the limit"
            );
        }
    }
    let mut dead: Vec<&Job> = jobs
        .iter()
        .filter(|job| job.state == JobState::DeadLettered)
        .collect();
    dead.sort_by(|a, b| (a.updated_at, &a.id).cmp(&(b.updated_at, &b.id)));
    let dead: Vec<&str> = dead.iter().map(|job| job.id.as_str()).collect();
    for limit in 1..=dead.len() + 1 {
        ensure_eq!(
            dead_letter_ids(&ctx, QUEUE, limit).await?,
            dead[..limit.min(dead.len())],
            "list_dead_letters(limit {limit}): the dead letters by last update, then id"
        );
    }
    Ok(())
}

/// The ids `list_dead_letters(queue, limit)` answers, in its order.
async fn dead_letter_ids<S: JobQueue>(
    ctx: &Ctx<S>,
    queue: &str,
    limit: usize,
) -> Result<Vec<String>, Failure> {
    let listed = ctx.store.list_dead_letters(queue, limit).await?;
    Ok(listed.into_iter().map(|job| job.id).collect())
}
