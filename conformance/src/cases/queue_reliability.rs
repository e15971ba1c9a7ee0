//! Conformance cases: the job queue under hostile input and under
//! concurrency ([contract §9](tenure_lease_core::contract), with the input limits
//! of §11 and the fences of §7).
//!
//! The queue cases in [`super::queue`] feed each operation the values their
//! author thought of. These feed every `JobQueue` entry point random and
//! adversarial values (a backend must answer or refuse each one, never choke
//! on it), and play six workers claiming, settling, abandoning and taking
//! back jobs on two queues at once, writing through a [`FenceGate`], so that
//! the recorded answers can show that no job was ever held twice, none was
//! lost and no stale copy ever wrote.

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
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobQueue, JobSettle, JobState, NewJob,
    TakeBack,
};
use tenure_lease_core::{clock, ErrorKind, FenceGate, Timestamp};
use tokio::runtime::Handle;

use super::reliability::{
    hostile_case_count, hostile_duration, hostile_metadata, hostile_text, hostile_verdict,
    owner_text, AbandonOnDrop,
};
use super::util::{same_json, SHORT_TTL};
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

/// Workers playing at once.
const WORKERS: usize = 6;

/// Rounds of enqueue, concurrent work, and reap.
const ROUNDS: usize = 4;

/// Jobs enqueued per queue per round.
const JOBS_PER_QUEUE: usize = 5;

/// Claim attempts per worker per round.
const CLAIMS_PER_WORKER: usize = 2;

/// Capabilities jobs may require and workers may offer.
const CAPABILITIES: [&str; 2] = ["gpu", "ssd"];

/// A small deterministic random source, seeded per worker.
struct Dice(u64);

impl Dice {
    fn below(&mut self, bound: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % bound
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn capabilities(&mut self) -> BTreeSet<String> {
        CAPABILITIES
            .iter()
            .filter(|_| self.chance(50))
            .map(|c| (*c).to_owned())
            .collect()
    }
}

/// One claim answered to a worker (by `claim` or `take_back`).
#[derive(Debug, Clone)]
struct Handout {
    round: usize,
    claim: JobClaim,
}

/// What a worker recorded.
#[derive(Default)]
struct Record {
    handouts: Vec<Handout>,
    /// Jobs whose completion was answered `Settled`.
    completed: Vec<String>,
    /// Claims the worker left to expire (its "live copies").
    abandoned: Vec<JobClaim>,
    /// Jobs taken back by a live copy.
    taken_back: usize,
    calls: usize,
}

/// The shared resource: a log of writes per job, guarded by a fence gate.
#[derive(Default)]
struct Guarded {
    gate: FenceGate,
    /// (job, fence, accepted) in the order decided.
    decisions: Mutex<Vec<(String, u64, bool)>>,
}

impl Guarded {
    fn write(&self, job: &str, fence: u64) -> bool {
        let mut decisions = self
            .decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let accepted = self.gate.admit(job, fence).is_ok();
        decisions.push((job.to_owned(), fence, accepted));
        accepted
    }
}

/// Six workers claim jobs from two queues with random capabilities, then
/// complete, fail (to retry), defer or abandon them; between rounds a
/// coordinator moves the clock past every lease and reaps, and workers'
/// live copies of abandoned claims try to take them back. Every claim and
/// every take-back draws a distinct fence greater than every earlier claim
/// of the job; every write with a superseded claim is refused; every job
/// ends exactly once completed, dead-lettered or queued; and a fence gate
/// guarding a per-job log never accepts a fence below one it accepted.
pub async fn queue_concurrent_claims_keep_invariants_and_fences_guard_a_resource<
    S: JobQueue + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let started = Instant::now();
    let run = format!("qc{}-", ctx.store.now().await?.timestamp_micros());
    let queues = [format!("{run}a"), format!("{run}b")];
    let guarded = Arc::new(Guarded::default());
    let mut enqueued = Vec::new();
    let mut records: Vec<Record> = (0..WORKERS).map(|_| Record::default()).collect();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    for round in 0..ROUNDS {
        let mut jobs = Vec::new();
        for queue in &queues {
            for n in 0..JOBS_PER_QUEUE {
                let id = format!("{queue}-r{round}-{n}");
                let mut job = NewJob::new(queue.clone(), serde_json::json!({ "n": n }))
                    .id(id.clone())
                    .max_attempts(1 + dice.below(3) as u32);
                job.required_capabilities = dice.capabilities();
                jobs.push(job);
                enqueued.push(id);
            }
        }
        ctx.store.enqueue_batch(&jobs).await?;
        let tasks: Vec<_> = records
            .into_iter()
            .enumerate()
            .map(|(index, record)| {
                let ctx = ctx.clone();
                let guarded = Arc::clone(&guarded);
                let queues = queues.clone();
                let seed = (round * WORKERS + index) as u64 + 1;
                tokio::spawn(async move {
                    work(&ctx, &guarded, &queues, index, round, seed, record).await
                })
            })
            .collect();
        records = Vec::with_capacity(WORKERS);
        for task in tasks {
            records.push(
                task.await
                    .map_err(|error| Failure(format!("a worker panicked: {error}")))??,
            );
        }
        reap_all(&ctx).await?;
        // Live copies of abandoned claims try to take their jobs back and,
        // whatever the answer, to write.
        for record in &mut records {
            for claim in std::mem::take(&mut record.abandoned) {
                record.calls += 1;
                if let TakeBack::Taken(ClaimedJob { claim, .. }) =
                    ctx.store.take_back(&claim, SHORT_TTL).await?
                {
                    record.handouts.push(Handout {
                        round,
                        claim: claim.clone(),
                    });
                    record.taken_back += 1;
                    guarded.write(&claim.id, claim.fence);
                    record.calls += 1;
                    if let JobSettle::Settled(_) = ctx.store.complete(&claim).await? {
                        record.completed.push(claim.id.clone());
                    }
                } else {
                    guarded.write(&claim.id, claim.fence);
                }
            }
        }
    }
    reap_all(&ctx).await?;
    let stale_refused = audit(&ctx, &records, &enqueued, &guarded).await?;
    tracing::debug!(
        "queue concurrent history: {} calls, {} claims ({} taken back), {stale_refused} stale \
         writes refused in {:?}",
        records.iter().map(|r| r.calls).sum::<usize>(),
        records.iter().map(|r| r.handouts.len()).sum::<usize>(),
        records.iter().map(|r| r.taken_back).sum::<usize>(),
        started.elapsed()
    );
    Ok(())
}

/// Moves the clock past every lease and reaps until nothing is claimed.
async fn reap_all<S: JobQueue>(ctx: &Ctx<S>) -> CaseResult {
    let now = ctx.store.now().await?;
    ctx.advance_past(clock::add(now, SHORT_TTL)).await?;
    ctx.store.reap(Duration::ZERO).await?;
    Ok(())
}

async fn work<S: JobQueue>(
    ctx: &Ctx<S>,
    guarded: &Guarded,
    queues: &[String],
    index: usize,
    round: usize,
    seed: u64,
    mut record: Record,
) -> Result<Record, Failure> {
    let mut dice = Dice(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    for _ in 0..CLAIMS_PER_WORKER {
        let request = ClaimRequest::new(
            queues[dice.below(queues.len())].clone(),
            format!("worker-{index}"),
            SHORT_TTL,
        )
        .capabilities(dice.capabilities())
        .limit(1 + dice.below(3));
        record.calls += 1;
        for claimed in ctx.store.claim(&request).await? {
            let claim = claimed.claim;
            record.handouts.push(Handout {
                round,
                claim: claim.clone(),
            });
            guarded.write(&claim.id, claim.fence);
            tokio::task::yield_now().await;
            record.calls += 1;
            match dice.below(4) {
                0 => {
                    if let JobSettle::Settled(_) = ctx.store.complete(&claim).await? {
                        record.completed.push(claim.id.clone());
                    }
                }
                1 => {
                    let retry = FailAction::Retry {
                        backoff: Duration::ZERO,
                    };
                    ctx.store.fail(&claim, "flaky", retry).await?;
                }
                2 => {
                    let missing = BTreeSet::from(["tpu".to_owned()]);
                    ctx.store.defer(&claim, &missing).await?;
                }
                _ => record.abandoned.push(claim),
            }
        }
    }
    Ok(record)
}

async fn audit<S: JobQueue>(
    ctx: &Ctx<S>,
    records: &[Record],
    enqueued: &[String],
    guarded: &Guarded,
) -> Result<usize, Failure> {
    let handouts: Vec<&Handout> = records.iter().flat_map(|r| &r.handouts).collect();
    ensure!(!handouts.is_empty(), "no job was ever claimed");
    // Fences are distinct across every claim.
    let mut by_fence = BTreeMap::new();
    for handout in &handouts {
        if let Some(other) = by_fence.insert(handout.claim.fence, *handout) {
            return Err(Failure(format!(
                "fence {} handed out twice: {other:?} and {handout:?}",
                handout.claim.fence
            )));
        }
    }
    // Per job, claims in fence order run in round order, and every claim but
    // the last is refused on every write.
    let mut per_job: BTreeMap<&str, Vec<&Handout>> = BTreeMap::new();
    for handout in &handouts {
        per_job.entry(&handout.claim.id).or_default().push(handout);
    }
    let mut stale_refused = 0;
    for (id, claims) in &mut per_job {
        claims.sort_by_key(|h| h.claim.fence);
        for pair in claims.windows(2) {
            ensure!(
                pair[0].round <= pair[1].round,
                "job {id:?}: {:?} holds a lower fence than {:?} of an earlier round",
                pair[1],
                pair[0]
            );
        }
        let job = ctx.store.get_job(id).await?;
        let job = job.ok_or_else(|| Failure(format!("job {id:?} was lost")))?;
        let latest = &claims[claims.len() - 1].claim;
        ensure_eq!(
            job.fence,
            latest.fence,
            "job {id:?} carries its last claim's fence"
        );
        for stale in &claims[..claims.len() - 1] {
            let answer = ctx.store.complete(&stale.claim).await?;
            ensure!(
                matches!(answer, JobSettle::Rejected(_)),
                "a superseded claim {:?} completed {id:?}: {answer:?}",
                stale.claim
            );
            let renewal = ctx.store.renew_job(&stale.claim, SHORT_TTL).await?;
            ensure!(
                matches!(renewal, tenure_lease_core::queue::JobRenewal::Lost(_)),
                "a superseded claim {:?} renewed {id:?}: {renewal:?}",
                stale.claim
            );
            stale_refused += usize::from(!guarded.write(id, stale.claim.fence));
        }
    }
    // Nothing lost: each job ends once completed, dead-lettered or queued,
    // and completed exactly when one completion was answered Settled.
    let mut completions: BTreeMap<&str, usize> = BTreeMap::new();
    for id in records.iter().flat_map(|r| &r.completed) {
        *completions.entry(id).or_default() += 1;
    }
    for id in enqueued {
        let job = ctx
            .store
            .get_job(id)
            .await?
            .ok_or_else(|| Failure(format!("job {id:?} was lost")))?;
        ensure!(
            matches!(
                job.state,
                JobState::Completed | JobState::DeadLettered | JobState::Queued
            ),
            "job {id:?} ended {:?} after the final reap",
            job.state
        );
        ensure_eq!(
            completions.get(id.as_str()).copied().unwrap_or(0),
            usize::from(job.state == JobState::Completed),
            "completions answered Settled for {id:?} (now {:?})",
            job.state
        );
    }
    // The gate: per job, an accepted fence is never below an accepted one
    // before it, and a refused one always is.
    let decisions = guarded
        .decisions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
    for (job, fence, accepted) in decisions.iter() {
        let seen = highest.get(job.as_str()).copied();
        let stale = seen.is_some_and(|seen| *fence < seen);
        ensure!(
            *accepted != stale,
            "the gate decided {accepted} for fence {fence} of {job:?} after accepting {seen:?}"
        );
        if *accepted {
            highest.insert(job, *fence);
        }
    }
    ensure!(
        stale_refused > 0 || per_job.values().all(|c| c.len() == 1),
        "no stale copy's write was refused by the gate"
    );
    Ok(stale_refused)
}
