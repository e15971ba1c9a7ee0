//! Conformance case: random sequences of operations against a reference
//! model ([contract §3 to §8 and §13](tenure_lease_core::contract)).
//!
//! The other cases check the contract one rule at a time; this one checks
//! that the rules compose. proptest draws sequences of operations and clock
//! moves; each is played against the store and against an independent model
//! of contract §3 to §8 (the `reference` submodule), step by step. Any
//! difference in an outcome, a record, a fence or an invariant fails the case
//! with the shortest sequence proptest can shrink the run to, and the step
//! where the store and the model parted.
//!
//! The case runs on real clocks too: every lease is either long (valid for
//! the whole run) or short (the runner waits it out at once), so a run waits
//! about one short lease per step at most.

mod ops;
mod reference;
mod runner;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use std::future::Future;
use std::pin::Pin;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tenure_lease_core::LeaseStore;
use tokio::runtime::Handle;

use crate::harness::{CaseResult, ClockControl, Ctx, Failure};

/// The environment variable that sets how many random sequences
/// [`model_based_random_operations`] plays (default 24 on a clock the kit
/// moves, 8 on a real clock).
pub const MODEL_CASES_VAR: &str = "TENURE_MODEL_CASES";

/// How much random exploration a run affords on a given clock.
pub(super) struct Plan {
    pub(super) cases: u32,
    pub(super) max_steps: usize,
    /// Whether the clock may jump past every lease (only when it moves
    /// without waiting).
    pub(super) can_jump: bool,
    max_shrink_iters: u32,
}

impl Plan {
    pub(super) fn for_clock(clock: &ClockControl) -> Result<Plan, Failure> {
        let mut plan = match clock {
            ClockControl::Manual(_) => Plan {
                cases: 24,
                max_steps: 25,
                can_jump: true,
                max_shrink_iters: 2048,
            },
            _ => Plan {
                cases: 8,
                max_steps: 20,
                can_jump: false,
                max_shrink_iters: 256,
            },
        };
        if let Ok(cases) = std::env::var(MODEL_CASES_VAR) {
            plan.cases = cases.trim().parse().map_err(|_| {
                Failure(format!(
                    "{MODEL_CASES_VAR}={cases:?} is not a number of cases"
                ))
            })?;
        }
        Ok(plan)
    }
}

/// Shrinking stops after this long, well inside the case's time limit.
const MAX_SHRINK_MILLIS: u32 = 45_000;

/// Random sequences of admit, renew (with and without progress),
/// renew_many, transition, claim_for_takeover, list_expired, get,
/// list_active, list_by_scope, purge and clock moves answer exactly what
/// an independent model of [contract §3 to §8](tenure_lease_core::contract)
/// predicts, while no scope ever has two active holders, fences only grow,
/// and every admitted record reads back until purged.
pub async fn model_based_random_operations<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let plan = Plan::for_clock(ctx.clock())?;
    let (max_steps, can_jump) = (plan.max_steps, plan.can_jump);
    let sequences = move || ops::sequence(max_steps, can_jump);
    explore(ctx, plan, sequences, |ctx, prefix, ops, highest_fence| {
        Box::pin(runner::run(ctx, prefix, ops, highest_fence))
    })
    .await
}

/// Plays one drawn sequence on the case's store, under ids starting with
/// the given prefix (no other run uses it), given the highest fence seen
/// so far across runs; `Err` is the transcript up to the divergence.
pub(super) type Play<S, Op> = for<'a> fn(
    &'a Ctx<S>,
    String,
    &'a [Op],
    &'a AtomicU64,
) -> Pin<Box<dyn Future<Output = Result<(), String>> + 'a>>;

/// Plays `plan.cases` sequences drawn from the strategy `sequences` makes
/// with `play`, and shrinks the first that fails to the shortest proptest
/// finds. (The strategy is made on the exploring thread: proptest's
/// strategies stay on one.)
pub(super) async fn explore<S, Op, Sequences>(
    ctx: Ctx<S>,
    plan: Plan,
    sequences: impl FnOnce() -> Sequences + Send + 'static,
    play: Play<S, Op>,
) -> CaseResult
where
    S: Send + Sync + 'static,
    Op: std::fmt::Debug + Clone + 'static,
    Sequences: Strategy<Value = Vec<Op>>,
{
    let handle = Handle::current();
    let abandoned = Arc::new(AtomicBool::new(false));
    let _abandon_when_dropped = AbandonOnDrop(Arc::clone(&abandoned));
    // proptest drives the runs synchronously; each run drives the store on
    // the case's runtime.
    tokio::task::spawn_blocking(move || {
        explore_blocking(&ctx, &handle, &plan, &abandoned, &sequences(), play)
    })
    .await
    .map_err(|error| Failure(format!("the model-based run panicked: {error}")))?
}

/// Tells the blocking exploration to stop when the case is dropped (its time
/// limit passed): the runtime cannot shut down while it runs.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn explore_blocking<S, Op, Sequences>(
    ctx: &Ctx<S>,
    handle: &Handle,
    plan: &Plan,
    abandoned: &AtomicBool,
    sequences: &Sequences,
    play: Play<S, Op>,
) -> CaseResult
where
    Op: std::fmt::Debug + Clone,
    Sequences: Strategy<Value = Vec<Op>>,
{
    let mut runner = TestRunner::new(Config {
        cases: plan.cases,
        failure_persistence: None,
        max_shrink_iters: plan.max_shrink_iters,
        max_shrink_time: MAX_SHRINK_MILLIS,
        ..Config::default()
    });
    let runs = AtomicUsize::new(0);
    let highest_fence = AtomicU64::new(0);
    let result = runner.run(sequences, |ops| {
        if abandoned.load(Ordering::Relaxed) {
            return Err(TestCaseError::fail("abandoned: the case ran out of time"));
        }
        // Every run, shrinking included, gets ids and scopes of its own.
        let prefix = format!("m{}-", runs.fetch_add(1, Ordering::Relaxed));
        handle
            .block_on(play(ctx, prefix, &ops, &highest_fence))
            .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, ops)) => Err(Failure(format!(
            "the store diverged from the reference model; shortest failing sequence found \
             ({} operations), as played:\n{reason}",
            ops.len()
        ))),
        Err(TestError::Abort(reason)) => {
            Err(Failure(format!("the model-based run gave up: {reason}")))
        }
    }
}
