//! `enqueue_unique`: a job with a uniqueness key is created only while no
//! job of its queue holds the key ([contract §9, unique jobs](tenure_lease_core::contract)).
//!
//! A check-then-insert store passes every case run one call at a time, so
//! the race cases release many enqueues with one key at once, and crossed
//! batches, and count the winners. Every duplicate must name the holder as
//! stored and store nothing; every policy is driven to the state change
//! that frees the key and checked on both sides of it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::limits::{MAX_NAME_BYTES, MAX_UNIQUE_PERIOD, MIN_UNIQUE_PERIOD};
use tenure_lease_core::queue::{
    ClaimRequest, Enqueued, FailAction, Job, JobState, NewJob, UniquePolicy,
};
use tenure_lease_core::{clock, JobQueue};

use super::{claim, get_job, job, judged_before, not_yet, settled, Landed, QUEUE};
use crate::cases::util::{expect_invalid, micro_before, LONG_TTL, NEEDS_MANUAL_CLOCK};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// A period no case waits out.
const LONG_PERIOD: Duration = Duration::from_secs(3600);

/// Job `id` of [`QUEUE`] with the uniqueness key `key` held as `policy`.
fn keyed(id: &str, key: &str, policy: UniquePolicy) -> NewJob {
    job(id).unique(key, policy)
}

/// Enqueues `new` with `enqueue_unique`, failing the case unless it is
/// created and `get_job` then reads it, key and policy included; answers it.
async fn created<S: JobQueue>(ctx: &Ctx<S>, new: &NewJob) -> Result<Job, Failure> {
    match ctx.store.enqueue_unique(new).await? {
        Enqueued::Created(job) => {
            ensure_eq!(
                job.unique,
                new.unique,
                "a created job keeps its key and policy"
            );
            ensure_eq!(
                get_job(ctx, &new.id).await?,
                job,
                "get_job reads the job enqueue_unique created"
            );
            Ok(job)
        }
        other => Err(Failure(format!(
            "expected job {:?} ({:?}) to be created, got {other:?}",
            new.id, new.unique
        ))),
    }
}

/// Enqueues `new` with `enqueue_unique`, failing the case unless it is a
/// duplicate naming `holder` as `get_job` reads it now, and nothing was
/// stored under `new`'s id.
async fn duplicate_of<S: JobQueue>(ctx: &Ctx<S>, new: &NewJob, holder: &str) -> CaseResult {
    let answer = ctx.store.enqueue_unique(new).await?;
    let Enqueued::Duplicate(named) = answer else {
        return Err(Failure(format!(
            "expected job {:?} ({:?}) to be a duplicate of {holder:?}, got {answer:?}",
            new.id, new.unique
        )));
    };
    ensure_eq!(
        named,
        get_job(ctx, holder).await?,
        "a duplicate names the holder as stored"
    );
    ensure_eq!(
        ctx.store.get_job(&new.id).await?,
        None,
        "a duplicate stores nothing"
    );
    Ok(())
}

/// While its policy holds, a job's key makes every other job with it in its
/// queue a duplicate naming the holder, whatever that job's own policy; the
/// same key in another queue, another key, and a job without a key are
/// created; the plain `enqueue` refuses a keyed job.
pub async fn queue_unique_duplicate_names_the_holder<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let policies = [
        UniquePolicy::WhileQueued,
        UniquePolicy::WhileUnfinished,
        UniquePolicy::ForPeriod(LONG_PERIOD),
    ];
    for (round, policy) in policies.into_iter().enumerate() {
        let key = format!("report-{round}");
        let holder = created(&ctx, &keyed(&format!("holder-{round}"), &key, policy)).await?;
        for (other, other_policy) in policies.into_iter().enumerate() {
            let again = keyed(&format!("again-{round}-{other}"), &key, other_policy);
            duplicate_of(&ctx, &again, &holder.id).await?;
        }
        let elsewhere = NewJob::new("elsewhere", json!({}))
            .id(format!("elsewhere-{round}"))
            .unique(&key, policy);
        created(&ctx, &elsewhere).await?;
        created(
            &ctx,
            &keyed(&format!("other-{round}"), &format!("{key}-b"), policy),
        )
        .await?;
        created(&ctx, &job(&format!("plain-{round}"))).await?;
        expect_invalid(
            ctx.store
                .enqueue(&keyed(&format!("refused-{round}"), &key, policy))
                .await,
            "unique",
            "enqueue of a job with a uniqueness key",
        )?;
        expect_invalid(
            ctx.store
                .enqueue_batch(&[keyed(&format!("refused-b-{round}"), "fresh", policy)])
                .await,
            "unique",
            "enqueue_batch of a job with a uniqueness key",
        )?;
        ensure_eq!(
            ctx.store.get_job(&format!("refused-{round}")).await?,
            None,
            "a refused enqueue stores nothing"
        );
    }
    Ok(())
}

/// `WhileQueued` frees the key when its job is claimed and holds it again
/// while a retry has it queued; `WhileUnfinished` holds it while claimed and
/// frees it when the job completes or is dead-lettered. A job created while
/// the key was free holds it in turn.
pub async fn queue_unique_key_is_freed_when_its_job_leaves_the_policy<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let request = ClaimRequest::new(QUEUE, "worker-a", LONG_TTL);

    let queued = created(&ctx, &keyed("q-1", "q", UniquePolicy::WhileQueued)).await?;
    let claimed = claim(&ctx, &request, &[queued.id.as_str()]).await?;
    let next = created(&ctx, &keyed("q-2", "q", UniquePolicy::WhileQueued)).await?;
    duplicate_of(
        &ctx,
        &keyed("q-3", "q", UniquePolicy::WhileQueued),
        &next.id,
    )
    .await?;
    let claim_of = |claimed: &[tenure_lease_core::queue::ClaimedJob]| {
        claimed
            .first()
            .map(|each| each.claim.clone())
            .ok_or_else(|| Failure("nothing was claimed".into()))
    };
    let first_claim = claim_of(&claimed)?;
    claim(&ctx, &request, &[next.id.as_str()]).await?;
    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    settled(
        &ctx,
        ctx.store.fail(&first_claim, "again", retry).await?,
        "fail with a retry",
    )
    .await?;
    duplicate_of(&ctx, &keyed("q-4", "q", UniquePolicy::WhileQueued), "q-1").await?;

    let unfinished = created(&ctx, &keyed("u-1", "u", UniquePolicy::WhileUnfinished)).await?;
    let request = ClaimRequest::new(QUEUE, "worker-b", LONG_TTL);
    let claimed = claim(&ctx, &request, &["q-1"]).await?;
    let q_claim = claim_of(&claimed)?;
    let claimed = claim(&ctx, &request, &[unfinished.id.as_str()]).await?;
    let u_claim = claim_of(&claimed)?;
    duplicate_of(
        &ctx,
        &keyed("u-2", "u", UniquePolicy::WhileUnfinished),
        "u-1",
    )
    .await?;
    settled(&ctx, ctx.store.complete(&u_claim).await?, "complete").await?;
    let after_complete = created(&ctx, &keyed("u-3", "u", UniquePolicy::WhileUnfinished)).await?;
    let claimed = claim(&ctx, &request, &[after_complete.id.as_str()]).await?;
    let dead = settled(
        &ctx,
        ctx.store
            .fail(&claim_of(&claimed)?, "broken", FailAction::DeadLetter)
            .await?,
        "fail to the dead letters",
    )
    .await?;
    ensure_eq!(dead.state, JobState::DeadLettered, "a dead-lettered job");
    created(&ctx, &keyed("u-4", "u", UniquePolicy::WhileUnfinished)).await?;
    settled(&ctx, ctx.store.complete(&q_claim).await?, "complete").await?;
    Ok(())
}

/// Two jobs may hold one key at once (a job requeued for a retry holds its
/// key again while another took it meanwhile): a duplicate names the
/// earliest created of them, and the key stays held until neither holds it.
pub async fn queue_unique_duplicate_names_the_earliest_holder<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let request = ClaimRequest::new(QUEUE, "worker-a", LONG_TTL);
    let first = created(&ctx, &keyed("e-1", "e", UniquePolicy::WhileQueued)).await?;
    let claimed = claim(&ctx, &request, &[first.id.as_str()]).await?;
    let first_claim = claimed
        .first()
        .map(|each| each.claim.clone())
        .ok_or_else(|| Failure("nothing was claimed".into()))?;
    ctx.advance(super::TICK).await?;
    let second = created(&ctx, &keyed("e-2", "e", UniquePolicy::WhileQueued)).await?;
    let retry = FailAction::Retry {
        backoff: LONG_PERIOD,
    };
    settled(
        &ctx,
        ctx.store.fail(&first_claim, "again", retry).await?,
        "fail with a retry",
    )
    .await?;
    duplicate_of(&ctx, &keyed("e-3", "e", UniquePolicy::WhileQueued), "e-1").await?;
    claim(&ctx, &request, &[second.id.as_str()]).await?;
    duplicate_of(&ctx, &keyed("e-4", "e", UniquePolicy::WhileQueued), "e-1").await?;
    Ok(())
}

/// A `ForPeriod` key is held from the holder's creation for exactly the
/// period, whatever the holder's state: the microsecond before its end a
/// job with the key is a duplicate, at its end it is created.
pub async fn queue_unique_period_ends_exactly<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let period = Duration::from_millis(40);
    let policy = UniquePolicy::ForPeriod(period);
    let holder = created(&ctx, &keyed("p-1", "p", policy)).await?;
    let until = clock::add(holder.created_at, period);
    ensure_eq!(holder.unique_until(), Some(until), "the period's end");
    let claimed = claim(
        &ctx,
        &ClaimRequest::new(QUEUE, "worker-a", LONG_TTL),
        &["p-1"],
    )
    .await?;
    let claim_of_holder = claimed
        .first()
        .map(|each| each.claim.clone())
        .ok_or_else(|| Failure("nothing was claimed".into()))?;
    // Finished half-way through: the period still counts from the creation.
    manual.advance_to(clock::add(holder.created_at, period / 2));
    settled(
        &ctx,
        ctx.store.complete(&claim_of_holder).await?,
        "complete",
    )
    .await?;
    manual.advance_to(micro_before(until));
    duplicate_of(&ctx, &keyed("p-2", "p", policy), "p-1").await?;
    manual.advance_to(until);
    created(&ctx, &keyed("p-3", "p", policy)).await?;
    Ok(())
}

/// On any clock: a `ForPeriod` key is held while the store's clock is
/// before the period's end (a check counts only when the clock still reads
/// before it afterwards) and free once the clock is past it.
pub async fn queue_unique_period_holds_then_frees<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let ctx = &ctx;
    not_yet(|attempt| async move {
        let policy = UniquePolicy::ForPeriod(attempt.delay);
        let holder = created(ctx, &attempt.job("holder").unique("period", policy)).await?;
        let until = holder
            .unique_until()
            .ok_or_else(|| Failure("a ForPeriod job has an end to its period".into()))?;
        let again = attempt.job("again").unique("period", policy);
        let observed = duplicate_of(ctx, &again, &holder.id).await;
        let landed = judged_before(ctx, until, observed).await?;
        if landed == Landed::InTime {
            ctx.advance_past(until).await?;
            created(ctx, &attempt.job("after").unique("period", policy)).await?;
        }
        Ok(landed)
    })
    .await
}

/// A batch is judged in order after its ids: a key twice in the batch is
/// created once, the later job a duplicate of the earlier; a taken id
/// refuses the whole batch, keyed jobs included.
pub async fn queue_unique_batch_is_judged_in_order<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let stored = created(&ctx, &keyed("held", "k-held", UniquePolicy::WhileQueued)).await?;
    let batch = [
        keyed("b-1", "k-1", UniquePolicy::WhileQueued),
        keyed("b-2", "k-1", UniquePolicy::WhileUnfinished),
        keyed("b-3", "k-held", UniquePolicy::ForPeriod(LONG_PERIOD)),
        keyed("b-4", "k-2", UniquePolicy::ForPeriod(LONG_PERIOD)),
        job("b-5"),
    ];
    let answers = ctx.store.enqueue_unique_batch(&batch).await?;
    let shape: Vec<(bool, &str)> = answers
        .iter()
        .map(|answer| (answer.is_created(), answer.job().id.as_str()))
        .collect();
    ensure_eq!(
        shape,
        vec![
            (true, "b-1"),
            (false, "b-1"),
            (false, stored.id.as_str()),
            (true, "b-4"),
            (true, "b-5"),
        ],
        "one answer per job, in order: created, or a duplicate naming the holder"
    );
    for answer in &answers {
        if answer.is_created() {
            ensure_eq!(
                &get_job(&ctx, &answer.job().id).await?,
                answer.job(),
                "get_job reads each job the batch created"
            );
        }
    }
    for absent in ["b-2", "b-3"] {
        ensure_eq!(
            ctx.store.get_job(absent).await?,
            None,
            "a duplicate in a batch stores nothing"
        );
    }
    super::expect_already_exists(
        ctx.store
            .enqueue_unique(&keyed("b-1", "k-1", UniquePolicy::WhileQueued))
            .await,
        "a taken id whose key is held: ids are judged first",
    )?;
    let refused = [
        keyed("c-1", "k-3", UniquePolicy::WhileQueued),
        keyed("b-1", "k-4", UniquePolicy::WhileQueued),
    ];
    let outcome = ctx.store.enqueue_unique_batch(&refused).await;
    super::expect_already_exists(outcome, "a batch naming a taken id")?;
    ensure_eq!(
        ctx.store.get_job("c-1").await?,
        None,
        "a refused batch stores none of its jobs"
    );
    created(&ctx, &keyed("c-2", "k-3", UniquePolicy::WhileQueued)).await?;
    Ok(())
}

/// How many enqueues race for one key.
const RACERS: usize = 8;

/// How many rounds of crossed batches race.
const CROSSED_ROUNDS: usize = 6;

/// Enqueues racing with one key: exactly one is created, every other answer
/// a duplicate naming it. Batches holding two keys in opposite orders race
/// too: each key is created exactly once, and neither batch fails.
pub async fn race_queue_unique_enqueues_exactly_one_wins<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let store = Arc::clone(&ctx.store);
    let barrier = Arc::new(tokio::sync::Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|racer| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            tokio::spawn(async move {
                let new = keyed(
                    &format!("racer-{racer}"),
                    "raced",
                    UniquePolicy::WhileQueued,
                );
                barrier.wait().await;
                store.enqueue_unique(&new).await
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(RACERS);
    for racer in racers {
        answers.push(
            racer
                .await
                .map_err(|error| Failure(format!("a racer panicked: {error}")))??,
        );
    }
    let winners: Vec<&Job> = answers
        .iter()
        .filter(|answer| answer.is_created())
        .map(Enqueued::job)
        .collect();
    let [winner] = winners.as_slice() else {
        return Err(Failure(format!(
            "{} of {RACERS} racing enqueues with one key were created: {:?}",
            winners.len(),
            winners.iter().map(|job| &job.id).collect::<Vec<_>>()
        )));
    };
    for answer in &answers {
        ensure_eq!(
            answer.job().id,
            winner.id,
            "every racing enqueue names the one created"
        );
    }
    let stored = ctx.store.list_jobs(QUEUE, None, RACERS + 1).await?;
    ensure_eq!(
        stored.iter().map(|job| job.id.as_str()).collect::<Vec<_>>(),
        vec![winner.id.as_str()],
        "exactly the racer created is stored"
    );

    for round in 0..CROSSED_ROUNDS {
        let (left, right) = (format!("left-{round}"), format!("right-{round}"));
        let batch = |side: &str, keys: [&str; 2]| {
            keys.map(|key| {
                keyed(
                    &format!("{side}-{round}-{key}"),
                    key,
                    UniquePolicy::WhileQueued,
                )
            })
        };
        let first = batch("a", [&left, &right]);
        let second = batch("b", [&right, &left]);
        let (one, other) = tokio::join!(
            store.enqueue_unique_batch(&first),
            store.enqueue_unique_batch(&second)
        );
        let (one, other) = (one?, other?);
        for key in [&left, &right] {
            let created = one
                .iter()
                .chain(&other)
                .filter(|answer| {
                    answer.is_created()
                        && answer
                            .job()
                            .unique
                            .as_ref()
                            .is_some_and(|held| &held.key == key)
                })
                .count();
            ensure_eq!(
                created,
                1,
                "crossed batches create key {key:?} exactly once: {one:?} {other:?}"
            );
        }
    }
    Ok(())
}

/// `purge_jobs` keeps a finished job while it holds its `ForPeriod` key
/// (deleting it would free the key early) and deletes it like any other
/// once the period is over; finished jobs of the other policies go as
/// usual.
pub async fn queue_unique_purge_keeps_period_holders<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let request = ClaimRequest::new(QUEUE, "worker-a", LONG_TTL);
    // Ids in creation order, which is claim order even when a manual clock
    // stamps all three alike.
    let long = created(
        &ctx,
        &keyed("1-long", "long", UniquePolicy::ForPeriod(LONG_PERIOD)),
    )
    .await?;
    let short_period = Duration::from_millis(30);
    let short = created(
        &ctx,
        &keyed("2-short", "short", UniquePolicy::ForPeriod(short_period)),
    )
    .await?;
    let unfinished = created(
        &ctx,
        &keyed("3-done", "done", UniquePolicy::WhileUnfinished),
    )
    .await?;
    let claimed = claim(
        &ctx,
        &request.clone().limit(3),
        &[long.id.as_str(), short.id.as_str(), unfinished.id.as_str()],
    )
    .await?;
    for each in &claimed {
        settled(&ctx, ctx.store.complete(&each.claim).await?, "complete").await?;
    }
    let short_until = short
        .unique_until()
        .ok_or_else(|| Failure("a ForPeriod job has an end to its period".into()))?;
    ctx.advance_past(short_until).await?;
    let purged = ctx.store.purge_jobs(Duration::ZERO).await?;
    ensure_eq!(
        purged,
        2,
        "purge_jobs deletes the finished jobs not holding a period key"
    );
    ensure_eq!(
        ctx.store.get_job("2-short").await?,
        None,
        "period over: purged"
    );
    ensure_eq!(
        ctx.store.get_job("3-done").await?,
        None,
        "completed: purged"
    );
    ensure!(
        ctx.store.get_job("1-long").await?.is_some(),
        "a finished job still holding its period key is kept"
    );
    duplicate_of(
        &ctx,
        &keyed("4-long", "long", UniquePolicy::WhileQueued),
        "1-long",
    )
    .await?;
    created(&ctx, &keyed("5-short", "short", UniquePolicy::WhileQueued)).await?;
    Ok(())
}

/// Keys are kept verbatim and never collide: every tricky name (case,
/// trailing space, normalisation, prefixes, separators, the length limit)
/// is its own key in one queue, and keys and queues joined with a
/// separator (`a` + `::b`, `a:` + `:b`) stay apart.
pub async fn queue_unique_tricky_keys_never_collide<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let names = super::names::names();
    let mut pairs: Vec<(String, String)> = names
        .iter()
        .map(|name| (QUEUE.to_owned(), name.clone()))
        .collect();
    for queue in ["a", "a:", "a::"] {
        for key in ["b", ":b", "::b", "a:b"] {
            pairs.push((queue.to_owned(), key.to_owned()));
        }
    }
    for (index, (queue, key)) in pairs.iter().enumerate() {
        let new = NewJob::new(queue.as_str(), json!({}))
            .id(format!("first-{index}"))
            .unique(key.as_str(), UniquePolicy::WhileQueued);
        created(&ctx, &new).await?;
    }
    for (index, (queue, key)) in pairs.iter().enumerate() {
        let again = NewJob::new(queue.as_str(), json!({}))
            .id(format!("again-{index}"))
            .unique(key.as_str(), UniquePolicy::WhileUnfinished);
        duplicate_of(&ctx, &again, &format!("first-{index}")).await?;
    }
    Ok(())
}

/// The bounds of a uniqueness key and of a period, each reached exactly
/// from both sides: a key is a name (1 to `MAX_NAME_BYTES` bytes, no
/// control character), a period whole milliseconds from
/// `MIN_UNIQUE_PERIOD` to `MAX_UNIQUE_PERIOD`. A refused job stores
/// nothing, in a batch too.
pub async fn queue_unique_bounds_are_exact<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let longest = "k".repeat(MAX_NAME_BYTES);
    created(
        &ctx,
        &keyed("key-longest", &longest, UniquePolicy::WhileQueued),
    )
    .await?;
    duplicate_of(
        &ctx,
        &keyed("key-longest-2", &longest, UniquePolicy::WhileQueued),
        "key-longest",
    )
    .await?;
    created(
        &ctx,
        &keyed("key-multibyte", "ключ ✓", UniquePolicy::WhileQueued),
    )
    .await?;
    let refused_keys = [
        String::new(),
        "k".repeat(MAX_NAME_BYTES + 1),
        "line\nbreak".to_owned(),
    ];
    for (index, key) in refused_keys.iter().enumerate() {
        let new = keyed(&format!("bad-key-{index}"), key, UniquePolicy::WhileQueued);
        expect_invalid(
            ctx.store.enqueue_unique(&new).await,
            "unique",
            &format!("a key of {} bytes", key.len()),
        )?;
    }
    for (index, period) in [MIN_UNIQUE_PERIOD, MAX_UNIQUE_PERIOD]
        .into_iter()
        .enumerate()
    {
        let new = keyed(
            &format!("period-ok-{index}"),
            &format!("period-ok-{index}"),
            UniquePolicy::ForPeriod(period),
        );
        let job = created(&ctx, &new).await?;
        ensure_eq!(
            job.unique_until(),
            Some(clock::add(job.created_at, period)),
            "the end of a {period:?} period"
        );
    }
    let micro = Duration::from_micros(1);
    let refused_periods = [
        Duration::ZERO,
        MIN_UNIQUE_PERIOD - micro,
        MAX_UNIQUE_PERIOD + Duration::from_millis(1),
        MIN_UNIQUE_PERIOD + micro,
    ];
    for (index, period) in refused_periods.into_iter().enumerate() {
        let new = keyed(
            &format!("bad-period-{index}"),
            "bad-period",
            UniquePolicy::ForPeriod(period),
        );
        expect_invalid(
            ctx.store.enqueue_unique(&new).await,
            "unique",
            &format!("a period of {period:?}"),
        )?;
        let batch = [job(&format!("fine-{index}")), new];
        expect_invalid(
            ctx.store.enqueue_unique_batch(&batch).await,
            "unique",
            &format!("a batch with a period of {period:?}"),
        )?;
        ensure_eq!(
            ctx.store.get_job(&format!("fine-{index}")).await?,
            None,
            "a refused batch stores none of its jobs"
        );
    }
    Ok(())
}
