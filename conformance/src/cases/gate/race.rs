//! Racing checks: one atomic step each, so the highest fence wins, every
//! refusal names a fence that was really accepted, and no check lands
//! below one already accepted.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

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

/// How many checks each of the two climbers of
/// [`race_gate_climbers_never_land_below_an_accepted_fence`] makes per round.
const CLIMB: u64 = 32;

/// One check of a climber: its fence, when it was sent and answered, and
/// whether it was accepted.
struct Timed {
    fence: u64,
    sent: Instant,
    answered: Instant,
    accepted: bool,
}

/// Two writers climb one gate at once, one through the odd fences and one
/// through the even, each check awaited before the next, over several
/// rounds. Whatever the interleaving, the answers are those of an atomic
/// gate in real time: a check sent after a check of a greater fence was
/// answered `Accepted` is refused, and the gate ends at the greatest
/// fence. A gate that reads and then writes in two steps lets a climber
/// write its fence over a greater one the other had just been granted,
/// and its own next check is then accepted below it.
pub async fn race_gate_climbers_never_land_below_an_accepted_fence<
    S: LeaseStore + FenceStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    for round in 0..UNLIKE_RACE_ROUNDS / 2 {
        let resource = format!("climb-{round}");
        let start = StartLine::new(2);
        let climbers: Vec<_> = [1_u64, 2]
            .into_iter()
            .map(|first| {
                let store = Arc::clone(&ctx.store);
                let start = Arc::clone(&start);
                let resource = resource.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    let mut checks = Vec::new();
                    for step in 0..CLIMB {
                        let fence = first + 2 * step;
                        let sent = Instant::now();
                        let answer = store.check_fence(&resource, fence).await?;
                        checks.push(Timed {
                            fence,
                            sent,
                            answered: Instant::now(),
                            accepted: matches!(answer, FenceCheck::Accepted),
                        });
                    }
                    Ok::<_, tenure_lease_core::Error>(checks)
                })
            })
            .collect();
        let mut checks = Vec::new();
        for climber in climbers {
            checks.extend(
                climber
                    .await
                    .map_err(|error| Failure(format!("a climbing check panicked: {error}")))??,
            );
        }
        for granted in checks.iter().filter(|check| check.accepted) {
            if let Some(below) = checks.iter().find(|check| {
                check.accepted && check.fence < granted.fence && check.sent > granted.answered
            }) {
                return Err(Failure(format!(
                    "round {round}: fence {} was accepted by a check sent after fence {} had \
                     been accepted; expected Stale (a gate never goes back), got Accepted",
                    below.fence, granted.fence
                )));
            }
        }
        ensure_eq!(
            ctx.store.highest_fence(&resource).await?,
            Some(2 * CLIMB),
            "round {round}: the gate ends at the greatest fence either climber presented"
        );
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
