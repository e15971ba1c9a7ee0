//! The gate's rule: lower refused, equal and higher accepted, per resource,
//! and kept by the store, not by its handle.

use tenure_lease_core::{AdmitRequest, FenceStore, LeaseStore, TakeoverRequest};

use super::{accepted, refused};
use crate::cases::util::{admit, claim_of, expire, take_over, LONG_TTL, SHORT_TTL};
use crate::harness::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

/// A worker whose lease was taken over presents its old fence after the
/// taker's was accepted: refused, with the taker's fence as the highest;
/// the taker goes on writing.
pub async fn gate_refuses_a_taken_over_owner_after_the_takers_fence<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    let resource = "report.csv";
    let first = admit(
        &ctx,
        AdmitRequest::new("nightly", "worker-a").ttl(SHORT_TTL),
    )
    .await?;
    let old = claim_of(&first)?;
    accepted(&ctx, resource, old.fence).await?;
    expire(&ctx, &first, std::time::Duration::ZERO).await?;
    let taken = take_over(
        &ctx,
        &TakeoverRequest::adopt("nightly", "worker-b", Some(LONG_TTL)),
    )
    .await?;
    let new = claim_of(&taken)?;
    ensure!(new.fence > old.fence, "a takeover draws a greater fence");

    accepted(&ctx, resource, new.fence).await?;
    refused(&ctx, resource, old.fence, new.fence).await?;
    refused(&ctx, resource, 1, new.fence).await?;
    accepted(&ctx, resource, new.fence).await?;
    accepted(&ctx, resource, new.fence + 1).await?;
    refused(&ctx, resource, new.fence, new.fence + 1).await
}

/// The holders of a counted scope guard their work per slot
/// ([`LeaseRecord::slot_resource`](tenure_lease_core::LeaseRecord::slot_resource)):
/// side by side, each is accepted at its own slot's gate whatever the
/// other's fence; once a holder's lapsed slot is taken by an interrupting
/// admission and the successor has written, the old holder is refused
/// there and the other slot's holder still accepted.
pub async fn gate_per_slot_refuses_a_holder_that_lost_its_slot<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "renders";
    let lapsing = admit(
        &ctx,
        AdmitRequest::new("a", "worker-a")
            .counted_scope(scope, 2)
            .ttl(SHORT_TTL),
    )
    .await?;
    let staying = admit(
        &ctx,
        AdmitRequest::new("b", "worker-b")
            .counted_scope(scope, 2)
            .ttl(LONG_TTL),
    )
    .await?;
    let slot_of = |record: &tenure_lease_core::LeaseRecord| {
        record
            .slot_resource(scope)
            .ok_or_else(|| crate::harness::Failure(format!("{:?} names no slot", record.id)))
    };
    let (lost, kept) = (slot_of(&lapsing)?, slot_of(&staying)?);
    ensure!(lost != kept, "two holders, two slots: {lost:?}, {kept:?}");
    accepted(&ctx, &kept, staying.fence).await?;
    accepted(&ctx, &lost, lapsing.fence).await?;
    expire(&ctx, &lapsing, std::time::Duration::ZERO).await?;
    let successor = match ctx
        .store
        .admit(
            &AdmitRequest::new("c", "worker-c")
                .counted_scope(scope, 2)
                .ttl(LONG_TTL)
                .strategy(tenure_lease_core::AdmitStrategy::Interrupt),
        )
        .await?
    {
        tenure_lease_core::Admission::Admitted { record, .. } => record,
        other => {
            return Err(crate::harness::Failure(format!(
                "expected the lapsed slot to be taken, got {other:?}"
            )))
        }
    };
    ensure_eq!(
        slot_of(&successor)?,
        lost,
        "the successor holds the lost slot"
    );
    accepted(&ctx, &lost, successor.fence).await?;
    refused(&ctx, &lost, lapsing.fence, successor.fence).await?;
    accepted(&ctx, &kept, staying.fence).await
}

/// The same owner writing again presents the same fence: accepted every
/// time, the highest unchanged.
pub async fn gate_accepts_an_equal_fence<S: LeaseStore + FenceStore>(ctx: Ctx<S>) -> CaseResult {
    for _ in 0..3 {
        accepted(&ctx, "ledger", 4).await?;
    }
    refused(&ctx, "ledger", 3, 4).await?;
    accepted(&ctx, "ledger", 4).await
}

/// Each resource has its own gate: a high fence at one never refuses a
/// lower fence at another, however alike their names.
pub async fn gate_resources_are_independent<S: LeaseStore + FenceStore>(ctx: Ctx<S>) -> CaseResult {
    let names = ["a", "a:", "A", "a b", "rec:a", "{a}", "a*", "ünïcødé ✓"];
    ensure_eq!(ctx.store.highest_fence("a").await?, None, "no gate yet");
    for (index, name) in names.iter().enumerate() {
        let fence = 100 - index as u64;
        accepted(&ctx, name, fence).await?;
    }
    for (index, name) in names.iter().enumerate() {
        let fence = 100 - index as u64;
        ensure_eq!(
            ctx.store.highest_fence(name).await?,
            Some(fence),
            "{name:?} keeps its own highest"
        );
        refused(&ctx, name, fence - 1, fence).await?;
    }
    ensure_eq!(
        ctx.store.highest_fence("b").await?,
        None,
        "an unchecked resource has no gate"
    );
    accepted(&ctx, "b", 1).await
}

/// A store opened afresh on the same data, as a restarted worker or
/// another process opens it, sees the highest fence and refuses below it;
/// what it accepts, the first store sees.
pub async fn gate_survives_a_reopened_store<S: LeaseStore + FenceStore>(ctx: Ctx<S>) -> CaseResult {
    accepted(&ctx, "orders", 7).await?;
    let Some(reopened) = ctx.reopen().await? else {
        return Ok(());
    };
    ensure_eq!(
        reopened.highest_fence("orders").await?,
        Some(7),
        "the reopened store reads the highest fence"
    );
    ensure_eq!(
        reopened.check_fence("orders", 6).await?,
        tenure_lease_core::FenceCheck::Stale(tenure_lease_core::StaleFence {
            presented: 6,
            highest_seen: 7,
        }),
        "the reopened store refuses below it"
    );
    ensure!(
        reopened.check_fence("orders", 9).await?.is_accepted(),
        "the reopened store accepts above it"
    );
    drop(reopened);
    refused(&ctx, "orders", 8, 9).await
}
