//! Conformance cases: renew and renew_many, the heartbeat
//! ([contract §4](tenure_lease_core::contract)).
//!
//! A renewal extends only a lease its claim still holds; every other answer is
//! a typed `Lost` that changes nothing (§13 invariants 4 and 6).
use std::time::Duration;

use tenure_lease_core::{
    clock, AdmitRequest, AdmitStrategy, Claim, LeaseRecord, LeaseStore, LossReason, Renewal,
    Status, StatusChange, TakeoverRequest,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, expect_lost, expire, get, renew_confirmed, snapshot,
    take_over, LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Enough store time for a renewal's expiry to land strictly after the
/// admission's.
const TICK: Duration = Duration::from_millis(5);

/// Renewing a running record answers `Renewed` with an expiry of store
/// `now + ttl`, later than before, and changes nothing but the lease.
pub async fn renew_extends_lease<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(LONG_TTL),
    )
    .await?;
    let claim = claim_of(&admitted)?;
    let running = apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    ctx.advance(TICK).await?;
    let expires_at = renew_confirmed(&ctx, &claim, LONG_TTL).await?;
    let after = ctx.store.now().await?;
    ensure!(
        Some(expires_at) > admitted.lease_expires_at,
        "the renewed expiry {expires_at} moves past the admitted one {:?}",
        admitted.lease_expires_at
    );
    let renewed = get(&ctx, "op-1").await?;
    ensure!(
        running.updated_at <= renewed.updated_at && renewed.updated_at <= after,
        "updated_at stays store time"
    );
    ensure_eq!(
        renewed.clone(),
        LeaseRecord {
            lease_expires_at: Some(expires_at),
            updated_at: renewed.updated_at,
            ..running
        },
        "renew changes nothing but the lease"
    );
    // A second heartbeat extends again, from the newer now.
    ctx.advance(TICK).await?;
    let again = renew_confirmed(&ctx, &claim, LONG_TTL).await?;
    ensure!(again > expires_at, "each renewal moves the expiry forward");
    Ok(())
}

/// A `Pending` record (admitted, work not started) is renewable and stays
/// `Pending`.
pub async fn renew_pending_record<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(LONG_TTL),
    )
    .await?;
    ctx.advance(TICK).await?;
    let expires_at = renew_confirmed(&ctx, &claim_of(&admitted)?, LONG_TTL).await?;
    ensure!(
        Some(expires_at) > admitted.lease_expires_at,
        "the renewal moves the expiry forward"
    );
    let renewed = get(&ctx, "op-1").await?;
    ensure_eq!(renewed.status, Status::Pending);
    ensure_eq!(renewed.owner, admitted.owner);
    ensure_eq!(renewed.fence, admitted.fence);
    Ok(())
}

/// A claim naming another owner is `Lost(OwnerChanged)`, whatever its
/// fence, and changes nothing.
pub async fn renew_wrong_owner_is_owner_changed<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(LONG_TTL),
    )
    .await?;
    let fence = admitted.fence;
    let other_owner = Claim::new("op-1", "worker-b", fence);
    expect_lost(&ctx, &other_owner, LossReason::OwnerChanged).await?;
    let other_owner_and_fence = Claim::new("op-1", "worker-b", fence + 1);
    expect_lost(&ctx, &other_owner_and_fence, LossReason::OwnerChanged).await?;
    ensure_eq!(
        get(&ctx, "op-1").await?,
        admitted,
        "the record is untouched"
    );
    Ok(())
}

/// A claim with the right owner but an older or newer fence is
/// `Lost(FenceChanged)` and changes nothing.
pub async fn renew_wrong_fence_is_fence_changed<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    // An earlier admission guarantees the record's fence is at least 2, so a
    // lower fence is still a valid claim.
    admit(&ctx, AdmitRequest::new("op-0", "worker-z").ttl(LONG_TTL)).await?;
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(LONG_TTL),
    )
    .await?;
    ensure!(admitted.fence >= 2, "fences grow store-wide");
    for fence in [admitted.fence - 1, admitted.fence + 1] {
        expect_lost(
            &ctx,
            &Claim::new("op-1", "worker-a", fence),
            LossReason::FenceChanged,
        )
        .await?;
    }
    ensure_eq!(
        get(&ctx, "op-1").await?,
        admitted,
        "the record is untouched"
    );
    Ok(())
}

/// A finished record answers `Lost(Terminal(status))` to its own owner's
/// exact claim, `OwnerChanged` / `FenceChanged` to a stale one (a peer that
/// failed the run took it over), and changes nothing.
pub async fn renew_terminal_is_terminal<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let finishes = [
        ("op-succeeded", StatusChange::succeeded()),
        ("op-failed", StatusChange::failed("boom")),
    ];
    for (id, finish) in finishes {
        let admitted = admit(
            &ctx,
            AdmitRequest::new(id, "worker-a")
                .scope(format!("scope-of-{id}"))
                .ttl(LONG_TTL),
        )
        .await?;
        let claim = claim_of(&admitted)?;
        let finished = apply_transition(&ctx, &claim, &finish).await?;
        expect_lost(&ctx, &claim, LossReason::Terminal(finish.status)).await?;
        // A stale owner or fence is told so, terminal or not.
        let other_owner = Claim::new(id, "worker-b", claim.fence);
        expect_lost(&ctx, &other_owner, LossReason::OwnerChanged).await?;
        let newer_fence = Claim::new(id, "worker-a", claim.fence + 1);
        expect_lost(&ctx, &newer_fence, LossReason::FenceChanged).await?;
        ensure_eq!(get(&ctx, id).await?, finished, "the record is untouched");
    }
    Ok(())
}

/// An interrupted record answers `Lost(Interrupted)`: to the interrupted
/// holder's old claim (interrupted by an admission), to the interrupter's
/// claim, and to an owner that interrupted its own run.
pub async fn renew_interrupted_is_interrupted<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let holder = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &holder, Duration::ZERO).await?;
    admit(
        &ctx,
        AdmitRequest::new("op-2", "worker-b")
            .scope("thread:1")
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt),
    )
    .await?;
    let interrupted = get(&ctx, "op-1").await?;
    ensure_eq!(interrupted.status, Status::Interrupted);
    // Interrupted outranks the owner change the interrupt also made.
    expect_lost(&ctx, &claim_of(&holder)?, LossReason::Interrupted).await?;
    expect_lost(&ctx, &claim_of(&interrupted)?, LossReason::Interrupted).await?;

    let own = admit(
        &ctx,
        AdmitRequest::new("op-3", "worker-c")
            .scope("thread:3")
            .ttl(LONG_TTL),
    )
    .await?;
    let claim = claim_of(&own)?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    apply_transition(&ctx, &claim, &StatusChange::interrupted("user_cancelled")).await?;
    expect_lost(&ctx, &claim, LossReason::Interrupted).await?;
    Ok(())
}

/// A claim on an id the store never saw answers `Lost(Missing)` and creates
/// nothing.
pub async fn renew_missing_is_missing<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    admit(&ctx, AdmitRequest::new("op-1", "worker-a").ttl(LONG_TTL)).await?;
    let claim = Claim::new("op-never-admitted", "worker-a", 1);
    expect_lost(&ctx, &claim, LossReason::Missing).await?;
    ensure_eq!(ctx.store.get("op-never-admitted").await?, None);
    Ok(())
}

/// An expired lease nobody took over still renews; once a peer takes it
/// over, the old claim is `Lost(OwnerChanged)` and the new owner's record is
/// untouched.
pub async fn renew_after_expiry_until_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(SHORT_TTL),
    )
    .await?;
    let claim = claim_of(&admitted)?;
    expire(&ctx, &admitted, Duration::ZERO).await?;
    let expires_at = renew_confirmed(&ctx, &claim, SHORT_TTL).await?;
    ensure_eq!(
        get(&ctx, "op-1").await?.fence,
        admitted.fence,
        "renewing keeps the fence"
    );

    ctx.advance_past(expires_at).await?;
    let taken = take_over(
        &ctx,
        &TakeoverRequest::adopt("op-1", "worker-b", Some(LONG_TTL)),
    )
    .await?;
    expect_lost(&ctx, &claim, LossReason::OwnerChanged).await?;
    ensure_eq!(
        get(&ctx, "op-1").await?,
        taken,
        "the adopter's record is untouched"
    );
    Ok(())
}

/// `renew_many` answers one outcome per claim, in order: valid claims (a
/// duplicate included) are renewed and really extended, lost ones answer
/// their reason and stay unchanged; an empty batch answers nothing.
pub async fn renew_many_answers_per_claim<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    ensure_eq!(
        ctx.store.renew_many(&[], LONG_TTL).await?,
        Vec::<Renewal>::new(),
        "an empty batch"
    );
    let mut valid = Vec::new();
    for id in ["op-valid-1", "op-valid-2"] {
        let record = admit(&ctx, AdmitRequest::new(id, "worker-a").ttl(LONG_TTL)).await?;
        valid.push(claim_of(&record)?);
    }
    let fenced = admit(
        &ctx,
        AdmitRequest::new("op-fenced", "worker-a").ttl(LONG_TTL),
    )
    .await?;
    let done = admit(&ctx, AdmitRequest::new("op-done", "worker-a").ttl(LONG_TTL)).await?;
    let done_claim = claim_of(&done)?;
    apply_transition(&ctx, &done_claim, &StatusChange::succeeded()).await?;

    let ids = [
        "op-valid-1",
        "op-valid-2",
        "op-fenced",
        "op-done",
        "op-missing",
    ];
    let before = snapshot(&ctx, &ids).await?;
    let claims = [
        valid[0].clone(),
        Claim::new("op-fenced", "worker-a", fenced.fence + 1),
        Claim::new("op-missing", "worker-a", 1),
        valid[1].clone(),
        done_claim,
        valid[0].clone(),
    ];
    ctx.advance(TICK).await?;
    let now_before = ctx.store.now().await?;
    let outcomes = ctx.store.renew_many(&claims, LONG_TTL).await?;
    let now_after = ctx.store.now().await?;
    ensure_eq!(outcomes.len(), claims.len(), "one outcome per claim");
    ensure_eq!(
        &outcomes[1..3],
        &[
            Renewal::Lost(LossReason::FenceChanged),
            Renewal::Lost(LossReason::Missing)
        ][..]
    );
    ensure_eq!(
        outcomes[4],
        Renewal::Lost(LossReason::Terminal(Status::Succeeded))
    );
    let after = snapshot(&ctx, &ids).await?;
    ensure_eq!(&after[2..], &before[2..], "lost claims change nothing");

    let mut expiries = Vec::new();
    for position in [0, 3, 5] {
        let Renewal::Renewed { expires_at } = outcomes[position] else {
            return Err(Failure(format!(
                "claim #{position} ({:?}) should be renewed, got {:?}",
                claims[position], outcomes[position]
            )));
        };
        ensure!(
            clock::add(now_before, LONG_TTL) <= expires_at
                && expires_at <= clock::add(now_after, LONG_TTL),
            "claim #{position}: expiry {expires_at} is not store now + ttl ({now_before} .. {now_after})"
        );
        expiries.push(expires_at);
    }
    let lease_of = |records: &[Option<LeaseRecord>], index: usize| {
        records[index]
            .as_ref()
            .and_then(|record| record.lease_expires_at)
    };
    ensure_eq!(
        lease_of(&after, 1),
        Some(expiries[1]),
        "get reads the expiry answered for op-valid-2"
    );
    ensure_eq!(
        lease_of(&after, 0),
        Some(expiries[2]),
        "for a duplicated claim, get reads the expiry of its last answer"
    );
    ensure!(
        expiries[0] <= expiries[2],
        "renewals in one batch never move a lease back"
    );
    for index in [0, 1] {
        ensure!(
            lease_of(&after, index) > lease_of(&before, index),
            "{}: the stored lease moved forward",
            ids[index]
        );
    }
    Ok(())
}
