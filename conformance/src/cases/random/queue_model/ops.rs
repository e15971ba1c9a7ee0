//! The operations a queue run is made of, as proptest draws them: small
//! choices (an index into the run's id pool, queues, workers and the claims
//! handed out so far) that the runner resolves against what the run has
//! seen, so a shrunk sequence still means something. The reads are not
//! among them: the runner reads every job and every listing back after
//! each step.

use proptest::prelude::*;
use proptest::sample::Index;

/// Job ids a run draws from: few enough that ids collide, get reused after
/// a purge, and batches meet ids in use.
pub(crate) const IDS: usize = 6;
/// Queues a run draws from.
pub(crate) const QUEUES: usize = 2;
/// Workers a run draws from.
pub(crate) const WORKERS: usize = 2;

/// What a claiming worker can do: nothing, `gpu`, or `gpu` and `ssd`.
pub(crate) const CAPABILITY_SETS: [&[&str]; 3] = [&[], &["gpu"], &["gpu", "ssd"]];

/// One job to enqueue.
#[derive(Debug, Clone)]
pub(crate) struct NewJobOp {
    pub(crate) id: usize,
    pub(crate) queue: usize,
    pub(crate) priority: i32,
    /// Visible only far in the future (never during the run).
    pub(crate) later: bool,
    pub(crate) max_attempts: u32,
    /// Requires `gpu`.
    pub(crate) gpu: bool,
    /// A uniqueness key (one of [`KEYS`]) and how it is held; set only for
    /// the unique enqueues.
    pub(crate) unique: Option<(usize, UniqueChoice)>,
}

/// Uniqueness keys a run draws from: few, so keys meet often.
pub(crate) const KEYS: usize = 2;

/// How a job holds its key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum UniqueChoice {
    WhileQueued,
    WhileUnfinished,
    /// For a period longer than the run.
    ForTheRun,
}

/// What `fail` does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FailChoice {
    /// Retry, visible again at once.
    RetryNow,
    /// Retry, visible again only after the run.
    RetryLater,
    /// Dead-letter at once.
    DeadLetter,
}

/// Which claim a fenced operation presents: one that still holds its job
/// (when any does), or any handed out so far, stale ones included.
#[derive(Debug, Clone)]
pub(crate) struct ClaimPick {
    pub(crate) holding: bool,
    pub(crate) index: Index,
}

fn claim_pick() -> impl Strategy<Value = ClaimPick> {
    (prop::bool::weighted(0.7), any::<Index>())
        .prop_map(|(holding, index)| ClaimPick { holding, index })
}

/// One step of a run.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Enqueue(NewJobOp),
    /// Two or three jobs; ids may repeat (refused whole) or be in use.
    EnqueueBatch(Vec<NewJobOp>),
    /// `enqueue_unique` of one job, with a key or (now and then) without.
    EnqueueUnique(NewJobOp),
    /// `enqueue_unique_batch` of two or three such jobs.
    EnqueueUniqueBatch(Vec<NewJobOp>),
    Claim {
        queue: usize,
        worker: usize,
        capabilities: usize,
        limit: usize,
        /// The lease ends before the next step.
        short: bool,
    },
    Renew(ClaimPick),
    /// `renew_job_with_progress` reporting `{"step": n}`.
    ReportProgress(ClaimPick, u8),
    /// Distinct jobs' claims (a second claim of a job already picked is
    /// dropped).
    RenewJobs(Vec<ClaimPick>),
    Complete(ClaimPick),
    CompleteMany(Vec<ClaimPick>),
    Fail(ClaimPick, FailChoice),
    /// Defers, naming `ssd` (or `gpu`) missing.
    Defer(ClaimPick, bool),
    Reap,
    /// Any claim handed out so far: a take-back is for stale copies.
    TakeBack(Index),
    RetryDeadLetter(usize),
    /// Purges every finished job (or, when false, those older than the run).
    Purge(bool),
}

/// A queue, the first three times as often as the second: jobs meet in
/// one queue often enough to be ordered against each other.
fn queue() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(0), 1 => Just(QUEUES - 1)]
}

fn new_job() -> impl Strategy<Value = NewJobOp> {
    (
        0..IDS,
        queue(),
        -1..=1_i32,
        prop::bool::weighted(0.15),
        1..=2_u32,
        prop::bool::weighted(0.3),
    )
        .prop_map(|(id, queue, priority, later, max_attempts, gpu)| NewJobOp {
            id,
            queue,
            priority,
            later,
            max_attempts,
            gpu,
            unique: None,
        })
}

fn unique_choice() -> impl Strategy<Value = UniqueChoice> {
    prop_oneof![
        Just(UniqueChoice::WhileQueued),
        Just(UniqueChoice::WhileUnfinished),
        Just(UniqueChoice::ForTheRun),
    ]
}

/// A job for the unique enqueues: keyed nine times in ten.
fn keyed_job() -> impl Strategy<Value = NewJobOp> {
    (
        new_job(),
        prop::option::weighted(0.9, (0..KEYS, unique_choice())),
    )
        .prop_map(|(job, unique)| NewJobOp { unique, ..job })
}

fn claims() -> impl Strategy<Value = Vec<ClaimPick>> {
    prop::collection::vec(claim_pick(), 1..=3)
}

fn fail_choice() -> impl Strategy<Value = FailChoice> {
    prop_oneof![
        1 => Just(FailChoice::RetryNow),
        1 => Just(FailChoice::RetryLater),
        2 => Just(FailChoice::DeadLetter),
    ]
}

/// One operation; `short_leases` when the run may wait a lease out.
fn op(short_leases: bool) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => new_job().prop_map(Op::Enqueue),
        2 => prop::collection::vec(new_job(), 2..=3).prop_map(Op::EnqueueBatch),
        4 => keyed_job().prop_map(Op::EnqueueUnique),
        2 => prop::collection::vec(keyed_job(), 2..=3).prop_map(Op::EnqueueUniqueBatch),
        6 => (queue(), 0..WORKERS, 0..CAPABILITY_SETS.len(), 1..=3_usize, prop::bool::weighted(0.4))
            .prop_map(move |(queue, worker, capabilities, limit, short)| Op::Claim {
                queue,
                worker,
                capabilities,
                limit,
                short: short && short_leases,
            }),
        1 => claim_pick().prop_map(Op::Renew),
        3 => (claim_pick(), 0u8..4).prop_map(|(claim, step)| Op::ReportProgress(claim, step)),
        2 => claims().prop_map(Op::RenewJobs),
        2 => claim_pick().prop_map(Op::Complete),
        2 => claims().prop_map(Op::CompleteMany),
        5 => (claim_pick(), fail_choice()).prop_map(|(claim, choice)| Op::Fail(claim, choice)),
        3 => (claim_pick(), any::<bool>()).prop_map(|(claim, ssd)| Op::Defer(claim, ssd)),
        2 => Just(Op::Reap),
        2 => any::<Index>().prop_map(Op::TakeBack),
        2 => (0..IDS).prop_map(Op::RetryDeadLetter),
        1 => any::<bool>().prop_map(Op::Purge),
    ]
}

/// A run of up to `max_steps` operations.
pub(crate) fn sequence(max_steps: usize, short_leases: bool) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(short_leases), 1..=max_steps)
}
