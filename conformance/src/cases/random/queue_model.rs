//! Conformance case: random sequences of queue operations against a
//! reference model ([contract §9](tenure_lease_core::contract)).
//!
//! The queue's other cases check one rule at a time; this one checks that
//! they compose, as the lease side's model-based case does for §3 to §8.
//! proptest draws sequences of enqueue (single and batch, ids colliding),
//! claim (queues, capabilities, limits, short and long leases), renew,
//! progress reports and `renew_jobs`, complete and `complete_many`, fail (retry now, retry later,
//! dead-letter), defer, reap, take-back, an operator's retry and purge;
//! each is played against the store and against an independent model of
//! §9 (the `reference` submodule). Every answer is compared whole (every
//! field of every job an answer carries), and after every step every job
//! of the run is read back and compared whole, and so is every listing of
//! every queue (each state filter and none, dead letters, limits 1 and
//! 100), so a field or a trace an operation forgets (attempts, errors,
//! take-back marks, requirements) or a listing that filters, orders or
//! limits wrongly (or a progress report a later write loses) is caught at
//! the step that shows it. A difference fails
//! the case with the shortest sequence proptest shrinks the run to.
//!
//! Time: every step runs strictly after the last one on the store's clock,
//! so the model can order what the store stamped; a short lease is waited
//! out at once (not on a store whose own timers keep leases, where that
//! takes seconds), a long one and a far `run_at` outlast the run.

mod ops;
mod reference;
mod runner;

use tenure_lease_core::JobQueue;

use super::model::{explore, Plan};
use crate::harness::{CaseResult, ClockControl, Ctx};

/// Random sequences of every queue operation answer exactly what an
/// independent model of [contract §9](tenure_lease_core::contract) predicts,
/// and after every step every job reads back as the model holds it.
pub async fn queue_model_based_random_operations<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let plan = Plan::for_clock(ctx.clock())?;
    let short_leases = !matches!(ctx.clock(), ClockControl::Timers { .. });
    // A queue run needs jobs before it can exercise them: twice the steps
    // of a lease run.
    let max_steps = 2 * plan.max_steps;
    let sequences = move || ops::sequence(max_steps, short_leases);
    explore(ctx, plan, sequences, |ctx, prefix, ops, highest_fence| {
        Box::pin(runner::run(ctx, prefix, ops, highest_fence))
    })
    .await
}
