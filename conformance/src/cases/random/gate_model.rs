//! Conformance case: random sequences of fence-gate operations against a
//! reference model ([contract §7](tenure_lease_core::contract)).
//!
//! proptest draws checks (fences equal to, one above and one below the
//! gate's highest, small ones, the largest a gate takes, and the invalid 0
//! and one past it), reads of the highest fence, and purges, over resource
//! names chosen to trip a store that mixes names up: two differing only in
//! case, one a prefix of another, one of non-ASCII characters and
//! characters key and SQL syntaxes escape, and one exactly at the length
//! limit. A gate model (the highest accepted fence per resource, and when
//! it was last accepted) predicts every answer; after every step every
//! resource's highest fence is read back. A difference fails the case with
//! the shortest sequence proptest shrinks the run to.
//!
//! Purges: with no retention every gate goes, with one beyond the run none
//! does; on a clock the kit moves, a purge may also take exactly the age of
//! an earlier step, so the gates last accepted at or before that step go
//! and the later ones (and those only refused since) stay.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use tenure_lease_core::backend::validate::{MAX_GATE_FENCE, MAX_NAME_BYTES};
use tenure_lease_core::{
    clock, ErrorKind, FenceCheck, FenceStore, LeaseStore, StaleFence, Timestamp,
};

use super::model::{explore, Plan};
use crate::cases::util::LONG_TTL;
use crate::harness::{CaseResult, Ctx};

/// The resource names of a run, after its prefix: each trips a different
/// way of mixing names up (the last is padded to the length limit).
const RESOURCES: [&str; 6] = [
    "report",
    "Report",
    "report/2026",
    "rapport-\u{e9}t\u{e9} \u{1f4c4} 'q' \"d\" %_*?[]{}\\",
    "report:",
    "",
];

/// Which fence a check presents, relative to the gate's highest.
#[derive(Debug, Clone, Copy)]
enum FenceChoice {
    Equal,
    Above,
    Below,
    Small(u64),
    Largest,
    /// 0 or one past the largest: refused as invalid.
    Invalid(bool),
}

#[derive(Debug, Clone)]
enum Op {
    Check(usize, FenceChoice),
    Highest(usize),
    /// Purge with no retention (true) or one beyond the run (false).
    Purge(bool),
    /// Purge with exactly the age of an earlier step (clocks the kit moves).
    PurgeSince(Index),
    /// List the gates after a resource's name (or from the start), at most
    /// this many.
    List(Option<usize>, usize),
}

fn fence_choice() -> impl Strategy<Value = FenceChoice> {
    prop_oneof![
        3 => Just(FenceChoice::Equal),
        4 => Just(FenceChoice::Above),
        3 => Just(FenceChoice::Below),
        2 => (1..=20_u64).prop_map(FenceChoice::Small),
        1 => Just(FenceChoice::Largest),
        3 => any::<bool>().prop_map(FenceChoice::Invalid),
    ]
}

fn sequence(max_steps: usize, exact_purges: bool) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        8 => (0..RESOURCES.len(), fence_choice()).prop_map(|(at, fence)| Op::Check(at, fence)),
        2 => (0..RESOURCES.len()).prop_map(Op::Highest),
        2 => (proptest::option::of(0..RESOURCES.len()), 1..=RESOURCES.len() + 1)
            .prop_map(|(after, limit)| Op::List(after, limit)),
        1 => any::<bool>().prop_map(Op::Purge),
        2 => any::<Index>().prop_map(move |step| if exact_purges {
            Op::PurgeSince(step)
        } else {
            Op::Purge(false)
        }),
    ];
    prop::collection::vec(op, 1..=max_steps)
}

/// Random checks, reads and purges of fence gates over names that differ
/// only slightly answer exactly what a model of [contract
/// §7](tenure_lease_core::contract) predicts, and every gate reads back as
/// the model holds it after every step.
pub async fn gate_model_based_random_operations<S: LeaseStore + FenceStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let plan = Plan::for_clock(ctx.clock())?;
    let exact_purges = ctx.manual_clock().is_some();
    let max_steps = plan.max_steps;
    explore(
        ctx,
        plan,
        move || sequence(max_steps, exact_purges),
        |ctx, prefix, ops, _| Box::pin(run(ctx, prefix, ops)),
    )
    .await
}

/// One gate as the model holds it.
#[derive(Debug, Clone, Copy)]
struct Gate {
    highest: u64,
    /// The instant of the step that last accepted a check.
    last_accepted: Timestamp,
}

async fn run<S: LeaseStore + FenceStore>(
    ctx: &Ctx<S>,
    prefix: String,
    ops: &[Op],
) -> Result<(), String> {
    let names: Vec<String> = RESOURCES
        .iter()
        .map(|&suffix| match suffix {
            // Padded to exactly the length limit.
            "" => format!("{prefix}{}", "x".repeat(MAX_NAME_BYTES - prefix.len())),
            suffix => format!("{prefix}{suffix}"),
        })
        .collect();
    let mut transcript = Vec::new();
    let outcome = play(ctx, &names, ops, &mut transcript).await;
    outcome.map_err(|divergence| format!("{}\n{divergence}", transcript.join("\n")))
}

fn failed(operation: &str, error: &tenure_lease_core::Error) -> String {
    format!("{operation} answered an error: {error}")
}

async fn play<S: LeaseStore + FenceStore>(
    ctx: &Ctx<S>,
    names: &[String],
    ops: &[Op],
    transcript: &mut Vec<String>,
) -> Result<(), String> {
    // Earlier runs' gates are older than this run: purged first, so this
    // run's purges count its own.
    ctx.store
        .purge_fences(Duration::ZERO)
        .await
        .map_err(|error| failed("purge_fences", &error))?;
    let mut gates: BTreeMap<usize, Gate> = BTreeMap::new();
    // The instant of each step (on a clock the kit moves, a call reads one
    // instant throughout).
    let mut instants: Vec<Timestamp> = Vec::new();
    let mut last: Option<Timestamp> = None;
    for (step, op) in ops.iter().enumerate() {
        let before = match last {
            Some(last) => strictly_after(ctx, last).await?,
            None => now(ctx).await?,
        };
        let line = match op {
            Op::Check(at, choice) => {
                let current = gates.get(at).map(|gate| gate.highest);
                let fence = match (choice, current) {
                    (FenceChoice::Equal, highest) => highest.unwrap_or(1),
                    (FenceChoice::Above, highest) => highest.map_or(1, |fence| fence + 1),
                    (FenceChoice::Below, highest) => {
                        highest.map_or(1, |fence| fence.saturating_sub(1).max(1))
                    }
                    (FenceChoice::Small(fence), _) => *fence,
                    (FenceChoice::Largest, _) => MAX_GATE_FENCE,
                    (FenceChoice::Invalid(zero), _) => {
                        if *zero {
                            0
                        } else {
                            MAX_GATE_FENCE + 1
                        }
                    }
                };
                let answer = ctx.store.check_fence(&names[*at], fence).await;
                let what = format!("check_fence(resource {at}, {fence})");
                let valid = (1..=MAX_GATE_FENCE).contains(&fence);
                match (valid, current, answer) {
                    (false, _, Err(error)) if error.kind() == ErrorKind::InvalidInput => {
                        format!("{what} -> InvalidInput")
                    }
                    (true, Some(highest), Ok(FenceCheck::Stale(stale))) if fence < highest => {
                        let expected = StaleFence {
                            presented: fence,
                            highest_seen: highest,
                        };
                        if stale != expected {
                            return Err(format!(
                                "{step}: {what} refused with {stale:?}; the model expects \
                                 {expected:?}"
                            ));
                        }
                        format!("{what} -> Stale (highest {highest})")
                    }
                    (true, current, Ok(FenceCheck::Accepted))
                        if current.is_none_or(|highest| fence >= highest) =>
                    {
                        gates.insert(
                            *at,
                            Gate {
                                highest: fence,
                                last_accepted: before,
                            },
                        );
                        format!("{what} -> Accepted")
                    }
                    (_, current, answer) => {
                        return Err(format!(
                            "{step}: {what} answered {answer:?}; the model holds the gate's \
                             highest as {current:?}"
                        ))
                    }
                }
            }
            Op::Highest(at) => format!("highest_fence(resource {at}) (read back below)"),
            Op::List(after, limit) => {
                let after_name = after.map(|at| names[at].as_str());
                let listed: Vec<(String, u64)> = ctx
                    .store
                    .list_fences(after_name, *limit)
                    .await
                    .map_err(|error| failed("list_fences", &error))?
                    .into_iter()
                    .map(|gate| (gate.resource, gate.fence))
                    .collect();
                let mut expected: Vec<(String, u64)> = gates
                    .iter()
                    .map(|(at, gate)| (names[*at].clone(), gate.highest))
                    .filter(|(name, _)| after_name.is_none_or(|after| name.as_str() > after))
                    .collect();
                expected.sort();
                expected.truncate(*limit);
                if listed != expected {
                    return Err(format!(
                        "{step}: list_fences(after resource {after:?}, {limit}) listed \
                         {listed:?}; the model expects {expected:?}"
                    ));
                }
                format!(
                    "list_fences(after resource {after:?}, {limit}) -> {} gates",
                    listed.len()
                )
            }
            Op::Purge(all) => {
                let retention = if *all { Duration::ZERO } else { LONG_TTL };
                let purged = ctx
                    .store
                    .purge_fences(retention)
                    .await
                    .map_err(|error| failed("purge_fences", &error))?;
                let expected = if *all {
                    let count = gates.len() as u64;
                    gates.clear();
                    count
                } else {
                    0
                };
                if purged != expected {
                    return Err(format!(
                        "{step}: purge_fences({retention:?}) purged {purged}; the model \
                         expects {expected}"
                    ));
                }
                format!("purge_fences({retention:?}) -> {purged}")
            }
            Op::PurgeSince(index) => {
                let Some(&since) = (!instants.is_empty()).then(|| index.get(&instants)) else {
                    transcript.push(format!("{step}: purge since an earlier step: none yet"));
                    last = Some(before);
                    instants.push(before);
                    continue;
                };
                let retention = clock::until(since, before);
                let purged = ctx
                    .store
                    .purge_fences(retention)
                    .await
                    .map_err(|error| failed("purge_fences", &error))?;
                let before_count = gates.len();
                gates.retain(|_, gate| gate.last_accepted > since);
                let expected = (before_count - gates.len()) as u64;
                if purged != expected {
                    return Err(format!(
                        "{step}: purge_fences({retention:?}), exactly the age of the gates \
                         last accepted at {since}, purged {purged}; the model expects {expected}"
                    ));
                }
                format!("purge_fences({retention:?}) -> {purged}")
            }
        };
        transcript.push(format!("{step}: {line}"));
        instants.push(before);
        last = Some(now(ctx).await?);
        for (at, name) in names.iter().enumerate() {
            let highest = ctx
                .store
                .highest_fence(name)
                .await
                .map_err(|error| failed("highest_fence", &error))?;
            let expected = gates.get(&at).map(|gate| gate.highest);
            if highest != expected {
                return Err(format!(
                    "after step {step}, resource {at} ({name:?}) reads back highest fence \
                     {highest:?}; the model expects {expected:?}"
                ));
            }
        }
    }
    Ok(())
}

async fn now<S: LeaseStore>(ctx: &Ctx<S>) -> Result<Timestamp, String> {
    ctx.store.now().await.map_err(|error| failed("now", &error))
}

/// Moves (a clock the kit moves) or waits until the store's clock reads
/// strictly after `instant`; answers the store's clock then.
async fn strictly_after<S: LeaseStore>(
    ctx: &Ctx<S>,
    instant: Timestamp,
) -> Result<Timestamp, String> {
    if ctx.manual_clock().is_some() {
        ctx.advance_past(instant)
            .await
            .map_err(|failure| failure.0)?;
        return now(ctx).await;
    }
    loop {
        let now = now(ctx).await?;
        if now > instant {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
