//! Racing checks: one atomic step each, so the highest fence wins and every
//! refusal names a fence that was really accepted.

use std::collections::BTreeSet;
use std::sync::Arc;

use tenure_lease_core::{FenceCheck, FenceStore, LeaseStore};

use crate::cases::util::{StartLine, UNLIKE_RACE_ROUNDS};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// How many writers race at one gate per round.
const WRITERS: usize = 8;

/// Writers with different fences check one fresh resource at once, released
/// from a start line, over many rounds with the fences in a different order each
/// time. Afterwards the highest fence was accepted and the gate holds it,
/// and every refusal names its own fence and, as the highest, a greater
/// fence some writer was accepted with. (Those are exactly the answers
/// some one-at-a-time order of the checks gives: accepted fences in
/// ascending order, each refusal after the fence it names.) A gate that
/// reads and then writes in two steps lets a lower fence overwrite a
/// higher one, or names a highest nobody was accepted with.
pub async fn race_gate_checks_leave_the_highest_and_refusals_are_truthful<
    S: LeaseStore + FenceStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    for round in 0..UNLIKE_RACE_ROUNDS {
        let resource = format!("race-{round}");
        let fences = fences_of_round(round);
        let start = StartLine::new(WRITERS);
        let mut writers = Vec::with_capacity(WRITERS);
        for &fence in &fences {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let resource = resource.clone();
            writers.push(tokio::spawn(async move {
                start.wait().await;
                (fence, store.check_fence(&resource, fence).await)
            }));
        }
        let mut accepted = BTreeSet::new();
        let mut refusals = Vec::new();
        for writer in writers {
            let (fence, answer) = writer
                .await
                .map_err(|error| Failure(format!("a racing check panicked: {error}")))?;
            match answer? {
                FenceCheck::Accepted => {
                    accepted.insert(fence);
                }
                FenceCheck::Stale(stale) => {
                    ensure_eq!(
                        stale.presented,
                        fence,
                        "a refusal names the fence presented"
                    );
                    refusals.push(stale);
                }
                other => {
                    return Err(Failure(format!(
                        "round {round}: fence {fence} answered {other:?}"
                    )))
                }
            }
        }
        let highest = fences.iter().copied().max().unwrap_or_default();
        ensure!(
            accepted.contains(&highest),
            "round {round}: the highest fence {highest} was refused (accepted {accepted:?})"
        );
        ensure_eq!(
            ctx.store.highest_fence(&resource).await?,
            Some(highest),
            "round {round}: the gate keeps the highest fence"
        );
        for stale in &refusals {
            ensure!(
                stale.highest_seen > stale.presented && accepted.contains(&stale.highest_seen),
                "round {round}: refusal {stale:?} names as the highest a fence that was not \
                 accepted (accepted {accepted:?})"
            );
        }
    }
    Ok(())
}

/// The fences of round `round`: `WRITERS` distinct values, ordered
/// differently in each round (the writers start in this order).
fn fences_of_round(round: usize) -> Vec<u64> {
    let base = 1_000 * (round as u64 + 1);
    let mut fences: Vec<u64> = (1..=WRITERS as u64).map(|step| base + step * 7).collect();
    let len = fences.len();
    fences.rotate_left(round % len);
    if round % 2 == 1 {
        fences.reverse();
    }
    fences
}
