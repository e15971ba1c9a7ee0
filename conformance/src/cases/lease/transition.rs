//! Conformance cases: transition, the fenced status write
//! ([contract §5](tenure_lease_core::contract)).
//!
//! Only the current claim may write, only along the state machine's edges,
//! and terminal records never change again (§13 invariant 4); a stale copy
//! can never report a late success after a peer took over.
use std::time::Duration;

use tenure_lease_core::backend::rules;
use tenure_lease_core::{
    AdmitRequest, AdmitStrategy, Claim, ErrorKind, LeaseRecord, LeaseStore, LossReason, Status,
    StatusChange, TakeoverRequest, Transition, TransitionRejection,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, ensure_scope_held_by, ensure_scopes_free, expect_lost,
    expire, get, renew_confirmed, take_over, LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Writes `change` with `claim`, failing the case unless it is
/// `Rejected(rejection)` and the record (or its absence) is unchanged.
async fn expect_rejected<S: LeaseStore>(
    ctx: &Ctx<S>,
    claim: &Claim,
    change: &StatusChange,
    rejection: TransitionRejection,
) -> Result<(), Failure> {
    let before = ctx.store.get(&claim.id).await?;
    let outcome = ctx.store.transition(claim, change).await?;
    ensure_eq!(
        outcome,
        Transition::Rejected(rejection),
        "writing {:?} with {claim:?}",
        change.status
    );
    ensure_eq!(
        ctx.store.get(&claim.id).await?,
        before,
        "a rejected write changes nothing"
    );
    Ok(())
}

/// Admits `id` for `owner` on `scope` with a long lease.
async fn admit_held<S: LeaseStore>(
    ctx: &Ctx<S>,
    id: &str,
    owner: &str,
    scope: &str,
) -> Result<LeaseRecord, Failure> {
    admit(ctx, AdmitRequest::new(id, owner).scope(scope).ttl(LONG_TTL)).await
}

/// `Pending → Running → Succeeded`: each step is `Applied` with the record as
/// `get` reads it, keeps owner, fence and lease, and stores the stop reason.
pub async fn transition_pending_running_succeeded<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let admitted = admit_held(&ctx, "op-1", "worker-a", "thread:1").await?;
    let claim = claim_of(&admitted)?;
    let before = ctx.store.now().await?;
    let running = apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    let after = ctx.store.now().await?;
    ensure_eq!(running.status, Status::Running);
    ensure!(
        before <= running.updated_at && running.updated_at <= after,
        "updated_at is store time"
    );
    ensure_eq!(
        running.clone(),
        LeaseRecord {
            status: Status::Running,
            updated_at: running.updated_at,
            ..admitted.clone()
        },
        "Running changes only status and updated_at"
    );

    let done = StatusChange::succeeded().stop_reason("completed");
    let succeeded = apply_transition(&ctx, &claim, &done).await?;
    ensure_eq!(succeeded.status, Status::Succeeded);
    ensure_eq!(succeeded.stop_reason.as_deref(), Some("completed"));
    ensure_eq!(succeeded.error, None);
    ensure_eq!(succeeded.owner, admitted.owner, "the owner is kept");
    ensure_eq!(succeeded.fence, admitted.fence, "the fence is kept");
    ensure_eq!(
        succeeded.lease_expires_at,
        admitted.lease_expires_at,
        "the lease is kept"
    );
    Ok(())
}

/// `Pending` may finish directly: `→ Succeeded`, and `→ Failed` storing its
/// error text.
pub async fn transition_pending_to_terminal<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let first = admit_held(&ctx, "op-1", "worker-a", "thread:1").await?;
    let succeeded = apply_transition(&ctx, &claim_of(&first)?, &StatusChange::succeeded()).await?;
    ensure_eq!(succeeded.status, Status::Succeeded);
    ensure_eq!(succeeded.error, None);
    ensure_eq!(succeeded.stop_reason, None);

    let second = admit_held(&ctx, "op-2", "worker-a", "thread:2").await?;
    let failed = apply_transition(
        &ctx,
        &claim_of(&second)?,
        &StatusChange::failed("input file missing"),
    )
    .await?;
    ensure_eq!(failed.status, Status::Failed);
    ensure_eq!(failed.error.as_deref(), Some("input file missing"));
    ensure_eq!(failed.stop_reason, None);
    ensure_eq!(failed.fence, second.fence);
    ensure_eq!(failed.lease_expires_at, second.lease_expires_at);
    Ok(())
}

/// Every write to a `Succeeded` or `Failed` record with its own claim is
/// `Rejected(Terminal(status))`; with another owner's or fence's claim it is
/// `Rejected(Stale)` (the stale check outranks the terminal one, so a holder
/// whose run a peer failed hears "taken over"). The record stays identical.
pub async fn transition_terminal_is_immutable<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let finishes = [
        ("op-succeeded", StatusChange::succeeded()),
        ("op-failed", StatusChange::failed("boom")),
    ];
    for (id, finish) in finishes {
        let admitted = admit_held(&ctx, id, "worker-a", id).await?;
        let claim = claim_of(&admitted)?;
        apply_transition(&ctx, &claim, &StatusChange::running()).await?;
        let finished = apply_transition(&ctx, &claim, &finish).await?;
        let stale = Claim::new(id, "worker-b", claim.fence + 1);
        for target in [
            StatusChange::running(),
            StatusChange::succeeded(),
            StatusChange::failed("second opinion"),
            StatusChange::interrupted("too late"),
        ] {
            let rejection = TransitionRejection::Terminal(finish.status);
            expect_rejected(&ctx, &claim, &target, rejection).await?;
            expect_rejected(&ctx, &stale, &target, TransitionRejection::Stale).await?;
        }
        ensure_eq!(
            get(&ctx, id).await?,
            finished,
            "the terminal record is unchanged"
        );
    }
    Ok(())
}

/// An `Interrupted` record may only become `Failed`, and only with the
/// interrupter's claim (owner and fence from the record); the interrupted
/// holder's old claim is `Stale`.
pub async fn transition_interrupted_only_to_failed<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holder = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(SHORT_TTL),
    )
    .await?;
    let original = claim_of(&holder)?;
    apply_transition(&ctx, &original, &StatusChange::running()).await?;
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
    let interrupter = claim_of(&interrupted)?;
    ensure_eq!(
        interrupter.owner,
        "worker-b",
        "the interrupter owns the record"
    );

    for target in [
        StatusChange::failed("rolled back"),
        StatusChange::succeeded(),
    ] {
        expect_rejected(&ctx, &original, &target, TransitionRejection::Stale).await?;
    }
    for to in [Status::Succeeded, Status::Running, Status::Interrupted] {
        let rejection = TransitionRejection::NotAllowed {
            from: Status::Interrupted,
            to,
        };
        expect_rejected(&ctx, &interrupter, &StatusChange::to(to), rejection).await?;
    }
    let failed = apply_transition(&ctx, &interrupter, &StatusChange::failed("rolled back")).await?;
    ensure_eq!(failed.status, Status::Failed);
    ensure_eq!(failed.error.as_deref(), Some("rolled back"));
    ensure_eq!(
        failed.stop_reason.as_deref(),
        Some(rules::INTERRUPTED_BY_ADMISSION),
        "a write without a stop reason keeps the stored one"
    );
    ensure_eq!(failed.fence, interrupted.fence);
    ensure_eq!(failed.lease_expires_at, interrupted.lease_expires_at);
    Ok(())
}

/// Edges the state machine lacks answer `NotAllowed { from, to }`; a target
/// of `Pending` is `InvalidInput`; neither changes anything.
pub async fn transition_disallowed_edges_rejected<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let pending = admit_held(&ctx, "op-pending", "worker-a", "thread:1").await?;
    let pending_claim = claim_of(&pending)?;
    let running = admit_held(&ctx, "op-running", "worker-a", "thread:2").await?;
    let running_claim = claim_of(&running)?;
    apply_transition(&ctx, &running_claim, &StatusChange::running()).await?;

    let disallowed = [
        (&pending_claim, Status::Pending, Status::Interrupted),
        (&running_claim, Status::Running, Status::Running),
    ];
    for (claim, from, to) in disallowed {
        let change = StatusChange::to(to);
        let rejection = TransitionRejection::NotAllowed { from, to };
        expect_rejected(&ctx, claim, &change, rejection).await?;
    }

    for claim in [&pending_claim, &running_claim] {
        let before = ctx.store.get(&claim.id).await?;
        match ctx
            .store
            .transition(claim, &StatusChange::to(Status::Pending))
            .await
        {
            Err(error) => {
                ensure_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
                ensure_eq!(error.field(), Some("status"), "the error names the field");
            }
            Ok(outcome) => {
                return Err(Failure(format!(
                    "going back to Pending must be InvalidInput, got {outcome:?}"
                )))
            }
        }
        ensure_eq!(ctx.store.get(&claim.id).await?, before, "nothing changed");
    }
    ensure_eq!(get(&ctx, "op-pending").await?.status, Status::Pending);
    ensure_eq!(get(&ctx, "op-running").await?.status, Status::Running);
    Ok(())
}

/// A claim with another owner or another fence is `Rejected(Stale)`, a claim
/// on an unknown id is `Rejected(Missing)`; nothing changes.
pub async fn transition_stale_claim_rejected<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    // An earlier admission guarantees the record's fence is at least 2, so a
    // lower fence is still a valid claim.
    admit_held(&ctx, "op-0", "worker-z", "thread:0").await?;
    let admitted = admit_held(&ctx, "op-1", "worker-a", "thread:1").await?;
    ensure!(admitted.fence >= 2, "fences grow store-wide");
    let stale_claims = [
        Claim::new("op-1", "worker-b", admitted.fence),
        Claim::new("op-1", "worker-a", admitted.fence - 1),
        Claim::new("op-1", "worker-a", admitted.fence + 1),
    ];
    for claim in &stale_claims {
        for change in [
            StatusChange::running(),
            StatusChange::succeeded(),
            StatusChange::failed("not mine"),
        ] {
            expect_rejected(&ctx, claim, &change, TransitionRejection::Stale).await?;
        }
    }
    let unknown = Claim::new("op-never-admitted", "worker-a", 1);
    expect_rejected(
        &ctx,
        &unknown,
        &StatusChange::succeeded(),
        TransitionRejection::Missing,
    )
    .await?;
    ensure_eq!(ctx.store.get("op-never-admitted").await?, None);
    ensure_eq!(
        get(&ctx, "op-1").await?,
        admitted,
        "the record is untouched"
    );
    Ok(())
}

/// Leaving the active states releases scopes: after `Succeeded`, `Failed`
/// or `Interrupted`, a `Reject` admission on the same scopes is admitted.
pub async fn transition_terminal_releases_scopes<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let endings = [
        ("op-succeeded", StatusChange::succeeded()),
        ("op-failed", StatusChange::failed("boom")),
        (
            "op-interrupted",
            StatusChange::interrupted("user_cancelled"),
        ),
    ];
    for (id, ending) in endings {
        let scopes = [format!("{id}:a"), format!("{id}:b")];
        let admitted = admit(
            &ctx,
            AdmitRequest::new(id, "worker-a")
                .scopes(scopes.iter().cloned())
                .ttl(LONG_TTL),
        )
        .await?;
        let claim = claim_of(&admitted)?;
        apply_transition(&ctx, &claim, &StatusChange::running()).await?;
        for scope in &scopes {
            ensure_scope_held_by(&ctx, scope, id).await?;
        }
        apply_transition(&ctx, &claim, &ending).await?;
        let scope_names: Vec<&str> = scopes.iter().map(String::as_str).collect();
        ensure_scopes_free(&ctx, &format!("{id}-successor"), &scope_names).await?;
    }
    Ok(())
}

/// After A's lease expires and B adopts the record, A can neither finish it
/// (`Stale`) nor renew it (`OwnerChanged`), B's record is untouched, and B
/// completes it.
pub async fn transition_no_late_success_after_takeover<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(SHORT_TTL),
    )
    .await?;
    let stale = claim_of(&admitted)?;
    apply_transition(&ctx, &stale, &StatusChange::running()).await?;
    expire(&ctx, &admitted, Duration::ZERO).await?;
    let adopted = take_over(
        &ctx,
        &TakeoverRequest::adopt("op-1", "worker-b", Some(LONG_TTL)),
    )
    .await?;
    ensure!(
        adopted.fence > stale.fence,
        "the adopter holds a newer fence"
    );

    for late in [StatusChange::succeeded(), StatusChange::failed("late")] {
        expect_rejected(&ctx, &stale, &late, TransitionRejection::Stale).await?;
    }
    expect_lost(&ctx, &stale, LossReason::OwnerChanged).await?;
    ensure_eq!(
        get(&ctx, "op-1").await?,
        adopted,
        "A wrote nothing on B's record"
    );

    let done = apply_transition(&ctx, &claim_of(&adopted)?, &StatusChange::succeeded()).await?;
    ensure_eq!(done.owner.as_deref(), Some("worker-b"));
    ensure_eq!(done.fence, adopted.fence);
    Ok(())
}

/// `updated_at` is the store time of the latest write ([contract
/// §2](tenure_lease_core::contract)), which purge measures age from: it
/// moves on a renewal, on every status write, on a takeover and on an
/// interruption, each time to a store instant between the clock reads just
/// before and just after the write, and never backwards.
pub async fn updated_at_moves_with_every_write<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    const ID: &str = "stamped";
    let record = admit(
        &ctx,
        AdmitRequest::new(ID, "owner-a").scope(ID).ttl(SHORT_TTL),
    )
    .await?;
    let claim = claim_of(&record)?;
    let mut last = record.updated_at;

    let before = stamp_window(&ctx).await?;
    renew_confirmed(&ctx, &claim, SHORT_TTL).await?;
    last = ensure_stamped(&ctx, "a renewal", before, last).await?;

    let before = stamp_window(&ctx).await?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    last = ensure_stamped(&ctx, "a status write", before, last).await?;

    expire(&ctx, &get(&ctx, ID).await?, Duration::ZERO).await?;
    let before = stamp_window(&ctx).await?;
    take_over(
        &ctx,
        &TakeoverRequest::adopt(ID, "owner-b", Some(SHORT_TTL)),
    )
    .await?;
    last = ensure_stamped(&ctx, "a takeover", before, last).await?;

    expire(&ctx, &get(&ctx, ID).await?, Duration::ZERO).await?;
    let before = stamp_window(&ctx).await?;
    let request = AdmitRequest::new("stamper", "owner-c")
        .scope(ID)
        .strategy(AdmitStrategy::Interrupt);
    admit(&ctx, request).await?;
    last = ensure_stamped(&ctx, "an interruption", before, last).await?;

    let before = stamp_window(&ctx).await?;
    let interrupted = claim_of(&get(&ctx, ID).await?)?;
    apply_transition(&ctx, &interrupted, &StatusChange::failed("interrupted")).await?;
    ensure_stamped(&ctx, "the final status write", before, last).await?;
    Ok(())
}

/// Lets store time move on (so a write gets a later stamp than the last)
/// and answers the store's now, the earliest stamp the next write may get.
async fn stamp_window<S: LeaseStore>(
    ctx: &Ctx<S>,
) -> Result<tenure_lease_core::Timestamp, Failure> {
    ctx.advance(Duration::from_millis(3)).await?;
    Ok(ctx.store.now().await?)
}

/// Fails the case unless the record's `updated_at` moved past `last` to an
/// instant between `before` and now; answers it.
async fn ensure_stamped<S: LeaseStore>(
    ctx: &Ctx<S>,
    write: &str,
    before: tenure_lease_core::Timestamp,
    last: tenure_lease_core::Timestamp,
) -> Result<tenure_lease_core::Timestamp, Failure> {
    let after = ctx.store.now().await?;
    let stamped = get(ctx, "stamped").await?.updated_at;
    ensure!(
        before <= stamped && stamped <= after && stamped > last,
        "after {write}, updated_at {stamped} lies between {before} and {after}, after {last}"
    );
    Ok(stamped)
}
