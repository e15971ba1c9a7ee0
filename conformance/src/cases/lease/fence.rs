//! Conformance cases: fences ([contract §7](tenure_lease_core::contract); §13
//! invariant 2).
//!
//! A fence is only worth something if it never goes back: these cases walk a
//! lease, a scope and a whole store through every way fences are handed out
//! (admission, interrupt, takeover, readmission after purge) and check each
//! new one is greater than every one before.

use std::time::Duration;

use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, LeaseRecord, LeaseStore, LossReason, Status,
    StatusChange, TakeoverRequest,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, expect_lost, expire, get, renew_confirmed, take_over,
    LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Claimers adopting an expired lease one after another (one of them a former
/// owner) each get a greater fence; every earlier claim's renewal is `Lost`.
pub async fn fence_increases_across_takeover_chain<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut current = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-0")
            .scope("chain")
            .ttl(SHORT_TTL),
    )
    .await?;
    let mut old_claims = Vec::new();
    for claimer in ["worker-1", "worker-2", "worker-0", "worker-3"] {
        expire(&ctx, &current, Duration::ZERO).await?;
        let taken = take_over(
            &ctx,
            &TakeoverRequest::adopt("op-1", claimer, Some(SHORT_TTL)),
        )
        .await?;
        ensure!(
            taken.fence > current.fence,
            "adopted by {claimer}: fence {} is not greater than {}",
            taken.fence,
            current.fence
        );
        ensure_eq!(taken.owner.as_deref(), Some(claimer));
        ensure_eq!(taken.status, Status::Running);
        old_claims.push(claim_of(&current)?);
        for claim in &old_claims {
            // A former owner's name with an old fence is told apart by the fence.
            let reason = if claim.owner == claimer {
                LossReason::FenceChanged
            } else {
                LossReason::OwnerChanged
            };
            expect_lost(&ctx, claim, reason).await?;
        }
        current = taken;
    }
    renew_confirmed(&ctx, &claim_of(&current)?, LONG_TTL).await?;
    Ok(())
}

/// Fences keep growing on one scope through admit, finish, interrupt,
/// `purge(0)` and readmission of the same ids: each new one is greater than
/// every one handed out before.
pub async fn fence_increases_across_readmissions_and_purge<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut highest = 0;
    for round in 0..3 {
        let a = admit(
            &ctx,
            AdmitRequest::new("op-a", "worker-a")
                .scope("p")
                .ttl(LONG_TTL),
        )
        .await?;
        ensure_above(&mut highest, &a, round)?;
        apply_transition(&ctx, &claim_of(&a)?, &StatusChange::succeeded()).await?;

        let b = admit(
            &ctx,
            AdmitRequest::new("op-b", "worker-b")
                .scope("p")
                .ttl(LONG_TTL),
        )
        .await?;
        ensure_above(&mut highest, &b, round)?;

        // worker-b replaces its own op-b: two fences, interrupted one first.
        let request = AdmitRequest::new("op-c", "worker-b")
            .scope("p")
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt);
        let (c, interrupted) = match ctx.store.admit(&request).await? {
            Admission::Admitted {
                record,
                interrupted,
            } => (record, interrupted),
            other => {
                return Err(Failure(format!(
                    "round {round}: expected op-c to be admitted, got {other:?}"
                )))
            }
        };
        let [b_interrupted] = interrupted.as_slice() else {
            return Err(Failure(format!(
                "round {round}: expected op-b to be interrupted, got {interrupted:?}"
            )));
        };
        ensure_above(&mut highest, b_interrupted, round)?;
        ensure_above(&mut highest, &c, round)?;
        apply_transition(
            &ctx,
            &claim_of(b_interrupted)?,
            &StatusChange::failed("superseded"),
        )
        .await?;
        apply_transition(&ctx, &claim_of(&c)?, &StatusChange::failed("done")).await?;

        let purged = ctx.store.purge(Duration::ZERO).await?;
        ensure_eq!(
            purged,
            3,
            "round {round}: purge(0) removes the three finished records"
        );
        for id in ["op-a", "op-b", "op-c"] {
            ensure_eq!(ctx.store.get(id).await?, None, "round {round}: {id} purged");
        }
    }
    Ok(())
}

/// Fences from sequential operations on different ids and scopes (admissions
/// with and without scopes or leases, an interrupt, a takeover) strictly
/// increase in the order the answers came: one store-wide sequence.
pub async fn fence_is_store_wide<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let mut highest = 0;
    let admissions = [
        AdmitRequest::new("op-a", "worker-a")
            .scope("w:1")
            .ttl(LONG_TTL),
        AdmitRequest::new("op-b", "worker-b").scope("w:2"),
        AdmitRequest::new("op-c", "worker-c").ttl(LONG_TTL),
        AdmitRequest::new("op-d", "worker-a")
            .scopes(["w:3", "w:4"])
            .ttl(LONG_TTL),
        AdmitRequest::new("op-e", "worker-e").ttl(LONG_TTL),
    ];
    for request in admissions {
        let record = admit(&ctx, request).await?;
        ensure_above(&mut highest, &record, 0)?;
    }

    // Interrupts op-b (no lease): its new fence, then op-f's.
    let request = AdmitRequest::new("op-f", "worker-f")
        .scope("w:2")
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    match ctx.store.admit(&request).await? {
        Admission::Admitted {
            record,
            interrupted,
        } => {
            ensure_eq!(
                interrupted
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>(),
                vec!["op-b"]
            );
            ensure_above(&mut highest, &interrupted[0], 0)?;
            ensure_above(&mut highest, &record, 0)?;
        }
        other => {
            return Err(Failure(format!(
                "expected op-f to be admitted, got {other:?}"
            )))
        }
    }

    let lease_less = admit(&ctx, AdmitRequest::new("op-g", "worker-g").scope("w:5")).await?;
    ensure_above(&mut highest, &lease_less, 0)?;
    let taken = take_over(
        &ctx,
        &TakeoverRequest::adopt("op-g", "worker-h", Some(LONG_TTL)),
    )
    .await?;
    ensure_above(&mut highest, &taken, 0)?;

    let last = admit(
        &ctx,
        AdmitRequest::new("op-i", "worker-a")
            .scope("w:6")
            .ttl(LONG_TTL),
    )
    .await?;
    ensure_above(&mut highest, &last, 0)?;
    let first = get(&ctx, "op-a").await?;
    ensure!(
        first.fence < last.fence,
        "op-a keeps its smaller fence {} (last handed out: {})",
        first.fence,
        last.fence
    );
    Ok(())
}

/// Fails unless `record`'s fence is greater than `highest`, then raises
/// `highest` to it.
fn ensure_above(highest: &mut u64, record: &LeaseRecord, round: usize) -> CaseResult {
    ensure!(
        record.fence > *highest,
        "round {round}: {:?} got fence {}, not greater than the {} handed out before",
        record.id,
        record.fence,
        *highest
    );
    *highest = record.fence;
    Ok(())
}
