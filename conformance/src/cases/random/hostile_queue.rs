//! Hostile input at every `JobQueue` entry point
//! ([contract §9](tenure_lease_core::contract), with the input limits of §11).
//!
//! The queue cases in [`crate::cases::queue`] feed each operation the values
//! their author thought of; this one feeds every entry point random and
//! adversarial values, which a backend must answer or refuse, never choke
//! on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;
use tenure_lease_core::backend::validate;
use tenure_lease_core::queue::{
    ClaimRequest, FailAction, Job, JobClaim, JobQueue, JobState, NewJob,
};
use tenure_lease_core::{clock, ErrorKind, Timestamp};
use tokio::runtime::Handle;

use super::hostile::{
    hostile_case_count, hostile_duration, hostile_metadata, hostile_text, hostile_verdict,
    owner_text, AbandonOnDrop,
};
use crate::cases::util::same_json;
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Most operations one hostile run plays.
const MAX_HOSTILE_STEPS: usize = 6;

/// Ids a hostile run draws from its own small pool, so that duplicates and
/// writes to enqueued jobs happen often.
const POOL_IDS: u8 = 4;

/// Which job an operation names.
#[derive(Debug, Clone)]
enum JobIdPick {
    /// The run's prefix and this pool number.
    Pool(u8),
    /// The run's prefix and this text; the empty text stays empty.
    Text(String),
}

/// Which queue an operation names.
#[derive(Debug, Clone)]
enum QueuePick {
    /// The run's prefix and this queue number.
    Pool(u8),
    /// This text as is.
    Text(String),
}

/// A fence a claim presents.
#[derive(Debug, Clone)]
enum FencePick {
    /// The job's current fence.
    Current,
    /// This fence.
    Exact(u64),
}

#[derive(Debug, Clone)]
struct ClaimPick {
    id: JobIdPick,
    /// The job's current owner when `None`.
    owner: Option<String>,
    fence: FencePick,
}

#[derive(Debug, Clone)]
struct JobPick {
    id: JobIdPick,
    queue: QueuePick,
    payload: Value,
    run_at: Option<Timestamp>,
    max_attempts: u32,
    priority: i32,
    capabilities: Vec<String>,
}

#[derive(Debug, Clone)]
enum Write {
    Renew(Duration),
    Complete,
    Fail(String, Option<Duration>),
    Defer(Vec<String>),
    TakeBack(Duration),
}

#[derive(Debug, Clone)]
enum HostileOp {
    Enqueue(Vec<JobPick>),
    Claim {
        queue: QueuePick,
        worker: String,
        capabilities: Vec<String>,
        ttl: Duration,
        limit: usize,
    },
    Write(ClaimPick, Write),
    Reap(Duration),
    ListDead(QueuePick, usize),
    Get(JobIdPick),
    RetryDead(JobIdPick),
}

fn job_id_pick() -> BoxedStrategy<JobIdPick> {
    prop_oneof![
        4 => (0..POOL_IDS).prop_map(JobIdPick::Pool),
        1 => hostile_text().prop_map(JobIdPick::Text),
    ]
    .boxed()
}

fn queue_pick() -> BoxedStrategy<QueuePick> {
    prop_oneof![
        4 => (0u8..2).prop_map(QueuePick::Pool),
        1 => hostile_text().prop_map(QueuePick::Text),
    ]
    .boxed()
}

fn capabilities() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        4 => proptest::collection::vec(select(vec!["gpu", "ssd", "🦀"]).prop_map(str::to_owned), 0..3),
        1 => proptest::collection::vec(hostile_text(), 0..3),
        1 => Just((0..65).map(|n| format!("cap{n}")).collect()),
    ]
    .boxed()
}

fn run_at() -> BoxedStrategy<Option<Timestamp>> {
    prop_oneof![
        3 => Just(None),
        1 => select(vec![
            DateTime::<Utc>::MIN_UTC,
            year_one(),
            DateTime::<Utc>::MAX_UTC,
            DateTime::<Utc>::UNIX_EPOCH,
        ])
        .prop_map(Some),
    ]
    .boxed()
}

/// The first instant of year 1, the earliest `run_at` the contract accepts.
fn year_one() -> Timestamp {
    chrono::NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .map_or(DateTime::<Utc>::UNIX_EPOCH, |instant| instant.and_utc())
}

fn job_pick() -> BoxedStrategy<JobPick> {
    (
        job_id_pick(),
        queue_pick(),
        hostile_metadata(),
        run_at(),
        select(vec![0, 1, 3, 1000, 1001, u32::MAX]),
        prop_oneof![select(vec![i32::MIN, -1, 0, 1, i32::MAX]), any::<i32>()],
        capabilities(),
    )
        .prop_map(
            |(id, queue, payload, run_at, max_attempts, priority, capabilities)| JobPick {
                id,
                queue,
                payload,
                run_at,
                max_attempts,
                priority,
                capabilities,
            },
        )
        .boxed()
}

fn claim_pick() -> BoxedStrategy<ClaimPick> {
    (
        job_id_pick(),
        prop_oneof![3 => Just(None), 1 => owner_text().prop_map(Some)],
        prop_oneof![
            3 => Just(FencePick::Current),
            1 => select(vec![0, 1, u64::MAX]).prop_map(FencePick::Exact),
        ],
    )
        .prop_map(|(id, owner, fence)| ClaimPick { id, owner, fence })
        .boxed()
}

fn write() -> BoxedStrategy<Write> {
    prop_oneof![
        hostile_duration().prop_map(Write::Renew),
        Just(Write::Complete),
        (hostile_text(), proptest::option::of(hostile_duration()))
            .prop_map(|(error, backoff)| Write::Fail(error, backoff)),
        capabilities().prop_map(Write::Defer),
        hostile_duration().prop_map(Write::TakeBack),
    ]
    .boxed()
}

fn hostile_op() -> BoxedStrategy<HostileOp> {
    prop_oneof![
        4 => proptest::collection::vec(job_pick(), 0..4).prop_map(HostileOp::Enqueue),
        3 => (
            queue_pick(),
            owner_text(),
            capabilities(),
            hostile_duration(),
            select(vec![0, 1, 3, 1000, 1001, usize::MAX]),
        )
            .prop_map(|(queue, worker, capabilities, ttl, limit)| HostileOp::Claim {
                queue,
                worker,
                capabilities,
                ttl,
                limit,
            }),
        4 => (claim_pick(), write()).prop_map(|(claim, write)| HostileOp::Write(claim, write)),
        1 => hostile_duration().prop_map(HostileOp::Reap),
        1 => (queue_pick(), select(vec![0, 1, 10_000, 10_001, usize::MAX]))
            .prop_map(|(queue, limit)| HostileOp::ListDead(queue, limit)),
        1 => job_id_pick().prop_map(HostileOp::Get),
        1 => job_id_pick().prop_map(HostileOp::RetryDead),
    ]
    .boxed()
}

/// Every `JobQueue` entry point, fed random and adversarial values (ids,
/// queues and capabilities from tricky to invalid, payloads that are no
/// object, nested past the depth limit or huge, `max_attempts` around its
/// bounds, extreme priorities, `run_at` at chrono's extremes, limits 0 and
/// `usize::MAX`, fences 0 and `u64::MAX`, durations up to `Duration::MAX`),
/// answers `Ok` exactly when `tenure_lease_core::backend::validate` accepts the input,
/// `InvalidInput` naming the same field otherwise (`AlreadyExists` only for
/// an existing id), never another error, never a panic; a refused call
/// changes no job, and an enqueued job reads back verbatim.
pub async fn queue_hostile_input_is_rejected_or_answered_never_panics<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let cases = hostile_case_count(ctx.clock(), 48, 12)?;
    let handle = Handle::current();
    let abandoned = Arc::new(AtomicBool::new(false));
    let _abandon_when_dropped = AbandonOnDrop(Arc::clone(&abandoned));
    tokio::task::spawn_blocking(move || explore_hostile(&ctx, &handle, cases, &abandoned))
        .await
        .map_err(|error| Failure(format!("the hostile-input run panicked: {error}")))?
}

fn explore_hostile<S: JobQueue>(
    ctx: &Ctx<S>,
    handle: &Handle,
    cases: u32,
    abandoned: &AtomicBool,
) -> CaseResult {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        max_shrink_time: 20_000,
        ..Config::default()
    });
    let runs = AtomicUsize::new(0);
    let calls = AtomicUsize::new(0);
    let refusals = AtomicUsize::new(0);
    let first_failure = Mutex::new(None);
    let started = Instant::now();
    let strategy = proptest::collection::vec(hostile_op(), 1..=MAX_HOSTILE_STEPS);
    let result = runner.run(&strategy, |ops| {
        if abandoned.load(Ordering::Relaxed) {
            return Err(TestCaseError::fail("abandoned: the case ran out of time"));
        }
        let prefix = format!("qh{}-", runs.fetch_add(1, Ordering::Relaxed));
        calls.fetch_add(ops.len(), Ordering::Relaxed);
        handle
            .block_on(play(ctx, &prefix, &ops, &refusals))
            .map_err(|why| {
                first_failure
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get_or_insert_with(|| why.0.clone());
                TestCaseError::fail(why.0)
            })
    });
    tracing::debug!(
        "queue hostile input: {} runs, {} calls ({} refused) in {:?}",
        runs.load(Ordering::Relaxed),
        calls.load(Ordering::Relaxed),
        refusals.load(Ordering::Relaxed),
        started.elapsed()
    );
    hostile_verdict("a queue", result, first_failure)
}

fn job_id(prefix: &str, pick: &JobIdPick) -> String {
    match pick {
        JobIdPick::Pool(n) => format!("{prefix}j{n}"),
        JobIdPick::Text(text) if text.is_empty() => String::new(),
        JobIdPick::Text(text) => format!("{prefix}{text}"),
    }
}

fn queue_name(prefix: &str, pick: &QueuePick) -> String {
    match pick {
        QueuePick::Pool(n) => format!("{prefix}q{n}"),
        QueuePick::Text(text) => text.clone(),
    }
}

/// Shortens a rendering for a failure message: hostile values reach 100 KiB.
fn shown(value: &impl std::fmt::Debug) -> String {
    let text = format!("{value:?}");
    match text.char_indices().nth(400) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], text.len()),
        None => text,
    }
}

/// Compares a store answer with what `validate` said of the input: `Ok`
/// when it accepted, `InvalidInput` naming the same field when it refused,
/// `AlreadyExists` only when `may_exist`.
fn judge<T: std::fmt::Debug>(
    call: &str,
    verdict: &tenure_lease_core::Result<()>,
    answer: &tenure_lease_core::Result<T>,
    may_exist: bool,
) -> CaseResult {
    match (verdict, answer) {
        (Ok(()), Ok(_)) => Ok(()),
        (Ok(()), Err(error)) if may_exist && error.kind() == ErrorKind::AlreadyExists => Ok(()),
        (Err(expected), Err(error))
            if error.kind() == ErrorKind::InvalidInput && error.field() == expected.field() =>
        {
            Ok(())
        }
        (verdict, answer) => Err(Failure(format!(
            "{call}: validate said {}, the store answered {}",
            shown(verdict),
            shown(answer)
        ))),
    }
}

async fn snapshot<S: JobQueue>(
    ctx: &Ctx<S>,
    ids: &BTreeSet<String>,
) -> Result<BTreeMap<String, Option<Job>>, Failure> {
    let mut jobs = BTreeMap::new();
    for id in ids {
        if validate::lease_id(id).is_ok() {
            jobs.insert(id.clone(), ctx.store.get_job(id).await?);
        }
    }
    Ok(jobs)
}

async fn play<S: JobQueue>(
    ctx: &Ctx<S>,
    prefix: &str,
    ops: &[HostileOp],
    refusals: &AtomicUsize,
) -> CaseResult {
    let mut touched: BTreeSet<String> = (0..POOL_IDS).map(|n| format!("{prefix}j{n}")).collect();
    for (step, op) in ops.iter().enumerate() {
        let call = format!("step {step}: {}", shown(op));
        let mut mentioned = touched.clone();
        match op {
            HostileOp::Enqueue(jobs) => {
                mentioned.extend(jobs.iter().map(|j| job_id(prefix, &j.id)));
            }
            HostileOp::Write(claim, _) => {
                mentioned.insert(job_id(prefix, &claim.id));
            }
            HostileOp::Get(id) | HostileOp::RetryDead(id) => {
                mentioned.insert(job_id(prefix, id));
            }
            _ => {}
        }
        let before = snapshot(ctx, &mentioned).await?;
        let refused = play_one(ctx, prefix, op, &before, &call).await?;
        if refused {
            refusals.fetch_add(1, Ordering::Relaxed);
            let after = snapshot(ctx, &mentioned).await?;
            ensure!(before == after, "{call}: a refused call changed a job");
        }
        touched = mentioned;
    }
    Ok(())
}

/// Plays one operation and checks its answer; answers whether the store
/// refused it (so that nothing may have changed).
async fn play_one<S: JobQueue>(
    ctx: &Ctx<S>,
    prefix: &str,
    op: &HostileOp,
    before: &BTreeMap<String, Option<Job>>,
    call: &str,
) -> Result<bool, Failure> {
    match op {
        HostileOp::Enqueue(picks) => {
            let jobs: Vec<NewJob> = picks
                .iter()
                .map(|pick| {
                    let mut job =
                        NewJob::new(queue_name(prefix, &pick.queue), pick.payload.clone())
                            .id(job_id(prefix, &pick.id))
                            .max_attempts(pick.max_attempts)
                            .priority(pick.priority);
                    job.run_at = pick.run_at;
                    job.required_capabilities = pick.capabilities.iter().cloned().collect();
                    job
                })
                .collect();
            let exists = jobs
                .iter()
                .any(|job| before.get(&job.id).is_some_and(Option::is_some));
            let (verdict, answer) = if let [job] = jobs.as_slice() {
                (
                    validate::new_job(job),
                    ctx.store.enqueue(job).await.map(|job| vec![job]),
                )
            } else {
                (
                    validate::new_jobs(&jobs),
                    ctx.store.enqueue_batch(&jobs).await,
                )
            };
            judge(call, &verdict, &answer, exists)?;
            if let Ok(stored) = &answer {
                ensure_eq!(stored.len(), jobs.len(), "{call}: one job answered per job");
                for (given, stored) in jobs.iter().zip(stored) {
                    check_enqueued(ctx, given, stored, call).await?;
                }
            }
            Ok(answer.is_err())
        }
        HostileOp::Claim {
            queue,
            worker,
            capabilities,
            ttl,
            limit,
        } => {
            let request = ClaimRequest::new(queue_name(prefix, queue), worker.clone(), *ttl)
                .capabilities(capabilities.iter().cloned())
                .limit(*limit);
            let verdict = validate::claim_request(&request);
            let answer = ctx.store.claim(&request).await;
            judge(call, &verdict, &answer, false)?;
            if let Ok(claimed) = &answer {
                ensure!(
                    claimed.len() <= *limit,
                    "{call}: {} jobs claimed",
                    claimed.len()
                );
            }
            Ok(answer.is_err())
        }
        HostileOp::Write(pick, write) => {
            let id = job_id(prefix, &pick.id);
            let current = before.get(&id).cloned().flatten();
            let claim = JobClaim {
                owner: pick.owner.clone().unwrap_or_else(|| {
                    current
                        .as_ref()
                        .and_then(|job| job.owner.clone())
                        .unwrap_or_else(|| "w".to_owned())
                }),
                fence: match pick.fence {
                    FencePick::Current => current.as_ref().map_or(1, |job| job.fence),
                    FencePick::Exact(fence) => fence,
                },
                attempt: current.as_ref().map_or(0, |job| job.attempt),
                id,
            };
            let (verdict, refused) = match write {
                Write::Renew(ttl) => {
                    let verdict = validate::job_claim(&claim).and_then(|()| validate::ttl(*ttl));
                    let answer = ctx.store.renew_job(&claim, *ttl).await;
                    judge(call, &verdict, &answer, false)?;
                    (verdict, answer.is_err())
                }
                Write::Complete => {
                    let verdict = validate::job_claim(&claim);
                    let answer = ctx.store.complete(&claim).await;
                    judge(call, &verdict, &answer, false)?;
                    (verdict, answer.is_err())
                }
                Write::Fail(error, backoff) => {
                    let action = match backoff {
                        Some(backoff) => FailAction::Retry { backoff: *backoff },
                        None => FailAction::DeadLetter,
                    };
                    let verdict = validate::job_failure(&claim, error, action);
                    let answer = ctx.store.fail(&claim, error, action).await;
                    judge(call, &verdict, &answer, false)?;
                    (verdict, answer.is_err())
                }
                Write::Defer(missing) => {
                    let missing: BTreeSet<String> = missing.iter().cloned().collect();
                    let verdict =
                        validate::job_claim(&claim).and_then(|()| validate::capabilities(&missing));
                    let answer = ctx.store.defer(&claim, &missing).await;
                    judge(call, &verdict, &answer, false)?;
                    (verdict, answer.is_err())
                }
                Write::TakeBack(ttl) => {
                    let verdict = validate::job_claim(&claim).and_then(|()| validate::ttl(*ttl));
                    let answer = ctx.store.take_back(&claim, *ttl).await;
                    judge(call, &verdict, &answer, false)?;
                    (verdict, answer.is_err())
                }
            };
            ensure_eq!(
                verdict.is_err(),
                refused,
                "{call}: refused exactly when invalid"
            );
            Ok(refused)
        }
        HostileOp::Reap(grace) => {
            let verdict = validate::grace(*grace);
            let answer = ctx.store.reap(*grace).await;
            judge(call, &verdict, &answer, false)?;
            Ok(answer.is_err())
        }
        HostileOp::ListDead(queue, limit) => {
            let queue = queue_name(prefix, queue);
            let verdict = validate::queue(&queue).and_then(|()| validate::limit(*limit));
            let answer = ctx.store.list_dead_letters(&queue, *limit).await;
            judge(call, &verdict, &answer, false)?;
            Ok(answer.is_err())
        }
        HostileOp::Get(id) => {
            let id = job_id(prefix, id);
            let answer = ctx.store.get_job(&id).await;
            judge(call, &validate::lease_id(&id), &answer, false)?;
            if let Ok(job) = &answer {
                ensure_eq!(
                    job,
                    &before.get(&id).cloned().flatten(),
                    "{call}: read back"
                );
            }
            Ok(answer.is_err())
        }
        HostileOp::RetryDead(id) => {
            let id = job_id(prefix, id);
            let answer = ctx.store.retry_dead_letter(&id).await;
            judge(call, &validate::lease_id(&id), &answer, false)?;
            Ok(answer.is_err())
        }
    }
}

/// An enqueued job answers and reads back as given.
async fn check_enqueued<S: JobQueue>(
    ctx: &Ctx<S>,
    given: &NewJob,
    stored: &Job,
    call: &str,
) -> CaseResult {
    ensure_eq!(&stored.id, &given.id, "{call}: id");
    ensure_eq!(
        &stored.queue,
        &given.queue,
        "{call}: queue of {:?}",
        given.id
    );
    ensure!(
        same_json(&stored.payload, &given.payload),
        "{call}: payload of {:?} came back as {}",
        given.id,
        shown(&stored.payload)
    );
    ensure_eq!(stored.priority, given.priority, "{call}: priority");
    ensure_eq!(
        stored.max_attempts,
        given.max_attempts,
        "{call}: max_attempts"
    );
    ensure_eq!(
        &stored.required_capabilities,
        &given.required_capabilities,
        "{call}: required capabilities"
    );
    if let Some(run_at) = given.run_at {
        ensure_eq!(
            stored.run_at,
            clock::truncate_to_micros(run_at),
            "{call}: run_at of {:?}",
            given.id
        );
    }
    ensure_eq!(stored.state, JobState::Queued, "{call}: state");
    ensure_eq!(
        (stored.attempt, stored.fence),
        (0, 0),
        "{call}: attempt and fence"
    );
    let read = ctx.store.get_job(&given.id).await?;
    ensure_eq!(
        read.as_ref(),
        Some(stored),
        "{call}: {:?} reads back as answered",
        given.id
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// The concurrent history.
