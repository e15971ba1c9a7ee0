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

use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tenure_lease_core::LeaseStore;
use tokio::runtime::Handle;

use crate::harness::{CaseResult, ClockControl, Ctx, Failure};

/// The environment variable that sets how many random sequences
/// [`model_based_random_operations`] plays (default 24 on a clock the kit
/// moves, 8 on a real clock).
pub const MODEL_CASES_VAR: &str = "TENURE_MODEL_CASES";

/// How much random exploration a run affords on a given clock.
struct Plan {
    cases: u32,
    max_steps: usize,
    /// Whether the clock may jump past every lease (only when it moves
    /// without waiting).
    can_jump: bool,
    max_shrink_iters: u32,
}

impl Plan {
    fn for_clock(clock: &ClockControl) -> Result<Plan, Failure> {
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

/// Random sequences of admit, renew, renew_many, transition,
/// claim_for_takeover, list_expired, get, list_active, list_by_scope, purge
/// and clock moves answer exactly what an independent model of
/// [contract §3 to §8](tenure_lease_core::contract) predicts, while no scope ever
/// has two active holders, fences only grow, and every admitted record reads
/// back until purged.
pub async fn model_based_random_operations<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let plan = Plan::for_clock(ctx.clock())?;
    let handle = Handle::current();
    let abandoned = Arc::new(AtomicBool::new(false));
    let _abandon_when_dropped = AbandonOnDrop(Arc::clone(&abandoned));
    // proptest drives the runs synchronously; each run drives the store on
    // the case's runtime.
    tokio::task::spawn_blocking(move || explore(&ctx, &handle, &plan, &abandoned))
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

fn explore<S: LeaseStore>(
    ctx: &Ctx<S>,
    handle: &Handle,
    plan: &Plan,
    abandoned: &AtomicBool,
) -> CaseResult {
    let mut runner = TestRunner::new(Config {
        cases: plan.cases,
        failure_persistence: None,
        max_shrink_iters: plan.max_shrink_iters,
        max_shrink_time: MAX_SHRINK_MILLIS,
        ..Config::default()
    });
    let runs = AtomicUsize::new(0);
    let highest_fence = AtomicU64::new(0);
    let result = runner.run(&ops::sequence(plan.max_steps, plan.can_jump), |ops| {
        if abandoned.load(Ordering::Relaxed) {
            return Err(TestCaseError::fail("abandoned: the case ran out of time"));
        }
        // Every run, shrinking included, gets ids and scopes of its own.
        let prefix = format!("m{}-", runs.fetch_add(1, Ordering::Relaxed));
        handle
            .block_on(runner::run(ctx, prefix, &ops, &highest_fence))
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
