//! Conformance cases: claim_for_takeover, orphan recovery
//! ([contract §6](tenure_lease_core::contract)).
//!
//! Only an active record whose lease is gone (none, or expired beyond grace)
//! is taken; taking it bumps the fence (§13 invariant 2), exactly one of many
//! racing claimers wins (invariant 3), and every refusal changes nothing.
use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::{
    clock, AdmitRequest, AdmitStrategy, ExpiredQuery, LeaseRecord, LeaseStore, LossReason,
    NotTakenReason, Status, StatusChange, Takeover, TakeoverAction, TakeoverRequest, Timestamp,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, ensure_scope_held_by, ensure_scopes_free, expect_lost,
    expire, get, micro_before, refused, renew_confirmed, take_over, StartLine, LONG_GRACE,
    LONG_TTL, MICROSECOND, NEEDS_MANUAL_CLOCK, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Claims for takeover, failing the case unless it is `NotTaken` and the
/// record (or its absence) is unchanged; answers the reason.
async fn expect_not_taken<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: &TakeoverRequest,
) -> Result<NotTakenReason, Failure> {
    let before = ctx.store.get(&request.id).await?;
    let outcome = ctx.store.claim_for_takeover(request).await?;
    let Takeover::NotTaken(reason) = outcome else {
        return Err(Failure(format!(
            "expected {request:?} not to be taken, got {outcome:?}"
        )));
    };
    ensure_eq!(
        ctx.store.get(&request.id).await?,
        before,
        "a refused takeover changes nothing"
    );
    Ok(reason)
}

/// Fails the case unless `reason` is `LeaseValid` with a retry-after that
/// ends at `valid_until` as seen from some store instant in
/// `[earliest, latest]`.
fn ensure_lease_valid_until(
    reason: NotTakenReason,
    valid_until: Timestamp,
    earliest: Timestamp,
    latest: Timestamp,
) -> Result<(), Failure> {
    let NotTakenReason::LeaseValid { retry_after } = reason else {
        return Err(Failure(format!("expected LeaseValid, got {reason:?}")));
    };
    let longest = clock::until(earliest, valid_until);
    let shortest = clock::until(latest, valid_until);
    ensure!(
        shortest <= retry_after && retry_after <= longest,
        "retry_after {retry_after:?} should lie in [{shortest:?}, {longest:?}]"
    );
    ensure!(retry_after > Duration::ZERO, "a valid lease has time left");
    Ok(())
}

/// Admits `id` for `worker-a` on `scope` with a lease of `ttl` (or none).
async fn admit_orphan<S: LeaseStore>(
    ctx: &Ctx<S>,
    id: &str,
    scope: &str,
    ttl: Option<Duration>,
) -> Result<LeaseRecord, Failure> {
    let mut request = AdmitRequest::new(id, "worker-a").scope(scope);
    request.ttl = ttl;
    admit(ctx, request).await
}

/// `Fail` on an expired lease: `Failed`, owner := claimer, fence bumped,
/// error and stop reason stored, lease_expires_at kept, scopes released.
pub async fn takeover_expired_lease_fail<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let orphan = admit_orphan(&ctx, "op-1", "thread:1", Some(SHORT_TTL)).await?;
    apply_transition(&ctx, &claim_of(&orphan)?, &StatusChange::running()).await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    let request = TakeoverRequest {
        id: "op-1".into(),
        claimer: "reaper-b".into(),
        grace: Duration::ZERO,
        action: TakeoverAction::Fail {
            error: "worker died".into(),
            stop_reason: Some("lease_expired".into()),
        },
    };
    let before = ctx.store.now().await?;
    let taken = take_over(&ctx, &request).await?;
    let after = ctx.store.now().await?;
    ensure_eq!(taken.status, Status::Failed);
    ensure_eq!(taken.owner.as_deref(), Some("reaper-b"));
    ensure!(
        taken.fence > orphan.fence,
        "the fence grows: {} -> {}",
        orphan.fence,
        taken.fence
    );
    ensure_eq!(taken.error.as_deref(), Some("worker died"));
    ensure_eq!(taken.stop_reason.as_deref(), Some("lease_expired"));
    ensure_eq!(
        taken.lease_expires_at,
        orphan.lease_expires_at,
        "Fail keeps the expired lease"
    );
    ensure!(
        before <= taken.updated_at && taken.updated_at <= after,
        "updated_at is store time"
    );
    ensure_eq!(
        (
            &taken.id,
            &taken.scopes,
            &taken.kind,
            taken.created_at,
            &taken.metadata
        ),
        (
            &orphan.id,
            &orphan.scopes,
            &orphan.kind,
            orphan.created_at,
            &orphan.metadata
        ),
        "identity and payload are kept"
    );
    ensure_scopes_free(&ctx, "op-successor", &["thread:1"]).await?;
    Ok(())
}

/// `Adopt` on an expired lease: `Running`, owner := claimer, lease := store
/// now + ttl, fence bumped, scope still held; the adopter renews and
/// completes. `Adopt { ttl: None }` leaves no lease.
pub async fn takeover_expired_lease_adopt<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let orphan = admit_orphan(&ctx, "op-1", "thread:1", Some(SHORT_TTL)).await?;
    let single = admit_orphan(&ctx, "op-2", "thread:2", Some(SHORT_TTL)).await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    expire(&ctx, &single, Duration::ZERO).await?;

    let before = ctx.store.now().await?;
    let adopted = take_over(
        &ctx,
        &TakeoverRequest::adopt("op-1", "worker-b", Some(LONG_TTL)),
    )
    .await?;
    let after = ctx.store.now().await?;
    ensure_eq!(adopted.status, Status::Running);
    ensure_eq!(adopted.owner.as_deref(), Some("worker-b"));
    ensure!(adopted.fence > orphan.fence, "the fence grows");
    let lease = adopted
        .lease_expires_at
        .ok_or_else(|| Failure("an adopted record with a ttl has a lease".into()))?;
    ensure!(
        clock::add(before, LONG_TTL) <= lease && lease <= clock::add(after, LONG_TTL),
        "adopted lease {lease} is not store now + ttl ({before} .. {after})"
    );
    ensure_scope_held_by(&ctx, "thread:1", "op-1").await?;
    expect_lost(&ctx, &claim_of(&orphan)?, LossReason::OwnerChanged).await?;
    let claim = claim_of(&adopted)?;
    renew_confirmed(&ctx, &claim, LONG_TTL).await?;
    let done = apply_transition(&ctx, &claim, &StatusChange::succeeded()).await?;
    ensure_eq!(done.owner.as_deref(), Some("worker-b"));

    let without_lease = take_over(&ctx, &TakeoverRequest::adopt("op-2", "worker-c", None)).await?;
    ensure_eq!(without_lease.status, Status::Running);
    ensure_eq!(without_lease.owner.as_deref(), Some("worker-c"));
    ensure!(without_lease.fence > single.fence, "the fence grows");
    ensure_eq!(
        without_lease.lease_expires_at,
        None,
        "Adopt without ttl leaves no lease"
    );
    Ok(())
}

/// A valid lease is not taken: `LeaseValid { retry_after }` with retry_after
/// the time left until expiry plus grace; nothing changes.
pub async fn takeover_valid_lease_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let held = admit_orphan(&ctx, "op-1", "thread:1", Some(LONG_TTL)).await?;
    let expires = held
        .lease_expires_at
        .ok_or_else(|| Failure("admitted with a ttl, so it has a lease".into()))?;
    let requests = [
        TakeoverRequest::fail("op-1", "reaper-b", "presumed dead"),
        TakeoverRequest::adopt("op-1", "worker-b", Some(LONG_TTL)),
        TakeoverRequest::fail("op-1", "reaper-b", "presumed dead").grace(LONG_GRACE),
    ];
    for request in requests {
        let earliest = ctx.store.now().await?;
        let reason = expect_not_taken(&ctx, &request).await?;
        let latest = ctx.store.now().await?;
        ensure_lease_valid_until(reason, clock::add(expires, request.grace), earliest, latest)?;
    }
    ensure_eq!(get(&ctx, "op-1").await?, held, "the record is untouched");
    Ok(())
}

/// A lease past its expiry but within the claimer's grace is not taken
/// (`LeaseValid` until expiry + grace); with no grace it is.
pub async fn takeover_within_grace_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let orphan = admit_orphan(&ctx, "op-1", "thread:1", Some(SHORT_TTL)).await?;
    let expires = orphan
        .lease_expires_at
        .ok_or_else(|| Failure("admitted with a ttl, so it has a lease".into()))?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    let request = TakeoverRequest::fail("op-1", "reaper-b", "presumed dead").grace(LONG_GRACE);
    let earliest = ctx.store.now().await?;
    let reason = expect_not_taken(&ctx, &request).await?;
    let latest = ctx.store.now().await?;
    ensure_lease_valid_until(reason, clock::add(expires, LONG_GRACE), earliest, latest)?;
    ensure_eq!(get(&ctx, "op-1").await?, orphan, "the record is untouched");

    let taken = take_over(&ctx, &request.grace(Duration::ZERO)).await?;
    ensure_eq!(
        taken.status,
        Status::Failed,
        "without grace the orphan is taken"
    );
    Ok(())
}

/// A record admitted with no lease is taken at once, whatever the grace.
pub async fn takeover_no_lease_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let failing = admit_orphan(&ctx, "op-1", "thread:1", None).await?;
    let adopting = admit_orphan(&ctx, "op-2", "thread:2", None).await?;
    ensure_eq!(failing.lease_expires_at, None);

    let failed = take_over(
        &ctx,
        &TakeoverRequest::fail("op-1", "worker-b", "restarted").grace(LONG_GRACE),
    )
    .await?;
    ensure_eq!(failed.status, Status::Failed);
    ensure_eq!(failed.owner.as_deref(), Some("worker-b"));
    ensure!(failed.fence > failing.fence, "the fence grows");
    ensure_eq!(failed.lease_expires_at, None);

    let adopted = take_over(
        &ctx,
        &TakeoverRequest::adopt("op-2", "worker-b", Some(LONG_TTL)).grace(LONG_GRACE),
    )
    .await?;
    ensure_eq!(adopted.status, Status::Running);
    ensure!(adopted.fence > adopting.fence, "the fence grows");
    ensure!(
        adopted.lease_expires_at.is_some(),
        "the adopter gets a lease"
    );
    Ok(())
}

/// A finished record is never taken: `NotTaken(Terminal(status))`, even
/// without a lease; nothing changes.
pub async fn takeover_terminal_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let finishes = [
        ("op-succeeded", StatusChange::succeeded()),
        ("op-failed", StatusChange::failed("boom")),
    ];
    for (id, finish) in finishes {
        let admitted = admit_orphan(&ctx, id, id, None).await?;
        let finished = apply_transition(&ctx, &claim_of(&admitted)?, &finish).await?;
        for request in [
            TakeoverRequest::fail(id, "reaper-b", "presumed dead"),
            TakeoverRequest::adopt(id, "worker-b", Some(LONG_TTL)),
        ] {
            let reason = expect_not_taken(&ctx, &request).await?;
            ensure_eq!(reason, NotTakenReason::Terminal(finish.status));
        }
        ensure_eq!(get(&ctx, id).await?, finished, "the record is untouched");
    }
    Ok(())
}

/// A claim on an unknown id is `NotTaken(Missing)` and creates nothing.
pub async fn takeover_missing_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    admit_orphan(&ctx, "op-1", "thread:1", None).await?;
    for request in [
        TakeoverRequest::fail("op-never-admitted", "reaper-b", "presumed dead"),
        TakeoverRequest::adopt("op-never-admitted", "worker-b", None),
    ] {
        ensure_eq!(
            expect_not_taken(&ctx, &request).await?,
            NotTakenReason::Missing
        );
    }
    ensure_eq!(ctx.store.get("op-never-admitted").await?, None);
    Ok(())
}

/// An interrupted record has no live owner to take over from:
/// `NotTaken(Interrupted)`, nothing changes.
pub async fn takeover_interrupted_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    admit_orphan(&ctx, "op-1", "thread:1", None).await?;
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
    for request in [
        TakeoverRequest::fail("op-1", "reaper-c", "presumed dead"),
        TakeoverRequest::adopt("op-1", "worker-c", Some(LONG_TTL)),
    ] {
        ensure_eq!(
            expect_not_taken(&ctx, &request).await?,
            NotTakenReason::Interrupted
        );
    }
    ensure_eq!(
        get(&ctx, "op-1").await?,
        interrupted,
        "the record is untouched"
    );
    Ok(())
}

/// The owner's renewal between a reaper's scan and its claim wins: the scan
/// lists the record, the owner renews, the claim answers `LeaseValid` and
/// changes nothing.
pub async fn takeover_renewal_between_scan_and_claim_wins<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let orphan = admit_orphan(&ctx, "op-1", "thread:1", Some(SHORT_TTL)).await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    let scan = ctx
        .store
        .list_expired(&ExpiredQuery::new(Duration::ZERO))
        .await?;
    ensure!(
        scan.records.iter().any(|record| record.id == "op-1"),
        "the scan lists the expired record, got {:?}",
        scan.records
    );

    let renewed_until = renew_confirmed(&ctx, &claim_of(&orphan)?, LONG_TTL).await?;
    let renewed = get(&ctx, "op-1").await?;
    let earliest = ctx.store.now().await?;
    let reason = expect_not_taken(
        &ctx,
        &TakeoverRequest::fail("op-1", "reaper-b", "presumed dead"),
    )
    .await?;
    let latest = ctx.store.now().await?;
    ensure_lease_valid_until(reason, renewed_until, earliest, latest)?;
    ensure_eq!(
        get(&ctx, "op-1").await?,
        renewed,
        "the owner keeps its record"
    );
    Ok(())
}

/// After a `Fail` takeover every scope of the orphan admits a new record.
pub async fn takeover_fail_releases_scopes<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let orphan = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scopes(["thread:1", "account:7"])
            .ttl(SHORT_TTL),
    )
    .await?;
    ensure_scope_held_by(&ctx, "thread:1", "op-1").await?;
    ensure_scope_held_by(&ctx, "account:7", "op-1").await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    take_over(
        &ctx,
        &TakeoverRequest::fail("op-1", "reaper-b", "worker died"),
    )
    .await?;
    ensure_scopes_free(&ctx, "op-2", &["thread:1", "account:7"]).await?;
    Ok(())
}

/// How many claimers race for each record.
const RACERS: usize = 16;
/// How many records they race for, one after another.
const RACED_RECORDS: usize = 4;

/// Sixteen claimers released together on one expired record: exactly one is
/// `Taken`, the others `NotTaken`, none `Err`, and the stored owner is the
/// winner; repeated for several records, with `Fail` and with `Adopt`.
pub async fn race_takeovers_exactly_one_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let mut orphans = Vec::with_capacity(RACED_RECORDS);
    for round in 0..RACED_RECORDS {
        let id = format!("op-{round}");
        orphans.push(admit_orphan(&ctx, &id, &id, Some(SHORT_TTL)).await?);
    }
    for orphan in &orphans {
        expire(&ctx, orphan, Duration::ZERO).await?;
    }

    for (round, orphan) in orphans.iter().enumerate() {
        let start = StartLine::new(RACERS);
        let mut racers = Vec::with_capacity(RACERS);
        for racer in 0..RACERS {
            let claimer = format!("claimer-{racer}");
            let request = if round % 2 == 0 {
                TakeoverRequest::fail(orphan.id.clone(), claimer, "worker died")
            } else {
                TakeoverRequest::adopt(orphan.id.clone(), claimer, Some(LONG_TTL))
            };
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            racers.push(tokio::spawn(async move {
                start.wait().await;
                let outcome = store.claim_for_takeover(&request).await;
                (request.claimer, outcome)
            }));
        }

        let mut winners = Vec::new();
        for racer in racers {
            let (claimer, outcome) = racer
                .await
                .map_err(|error| Failure(format!("a racing claimer panicked: {error}")))?;
            let outcome = outcome.map_err(|error| {
                Failure(format!(
                    "{claimer} got an error racing for {}: {error}",
                    orphan.id
                ))
            })?;
            if let Takeover::Taken(record) = outcome {
                winners.push((claimer, record));
            }
        }
        ensure_eq!(
            winners.len(),
            1,
            "exactly one claimer takes {} (winners: {winners:?})",
            orphan.id
        );
        let (winner, taken) = &winners[0];
        ensure_eq!(
            taken.owner.as_ref(),
            Some(winner),
            "the winner owns the taken record"
        );
        ensure!(taken.fence > orphan.fence, "the fence grows");
        ensure_eq!(
            &get(&ctx, &orphan.id).await?,
            taken,
            "get reads the winner's record"
        );
    }
    Ok(())
}

/// Grace is judged exactly, not truncated to the microseconds stores keep: a
/// lease that ended 1 µs ago is still valid under a grace of 1.5 µs and no
/// longer under 0.5 µs, with a `retry_after` of the 0.5 µs left. On a clock
/// the kit cannot move, the same sub-microsecond graces must still answer
/// (valid lease: `LeaseValid`; long-expired lease: `Taken`), never an error.
pub async fn takeover_grace_is_exact_below_a_microsecond<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let half_micro = Duration::from_nanos(500);
    let one_and_a_half = Duration::from_nanos(1_500);
    let record = admit(
        &ctx,
        AdmitRequest::new("exact-grace", "owner-a").ttl(SHORT_TTL),
    )
    .await?;
    let expires = record
        .lease_expires_at
        .ok_or_else(|| Failure("admitted with a ttl but no expiry".into()))?;
    if let crate::harness::ClockControl::Manual(manual) = ctx.clock() {
        manual.advance_to(clock::add(expires, Duration::from_micros(1)));
        let within =
            TakeoverRequest::fail("exact-grace", "claimer-b", "orphaned").grace(one_and_a_half);
        let reason = expect_not_taken(&ctx, &within).await?;
        ensure_eq!(
            reason,
            NotTakenReason::LeaseValid {
                retry_after: half_micro
            },
            "1 µs past expiry is within a 1.5 µs grace, with 0.5 µs left"
        );
        let beyond =
            TakeoverRequest::fail("exact-grace", "claimer-b", "orphaned").grace(half_micro);
        ensure!(
            matches!(
                ctx.store.claim_for_takeover(&beyond).await?,
                Takeover::Taken(_)
            ),
            "1 µs past expiry is beyond a 0.5 µs grace"
        );
        return Ok(());
    }
    let valid = admit(
        &ctx,
        AdmitRequest::new("exact-grace-valid", "owner-a").ttl(LONG_TTL),
    )
    .await?;
    let request =
        TakeoverRequest::fail(valid.id.as_str(), "claimer-b", "orphaned").grace(one_and_a_half);
    let reason = expect_not_taken(&ctx, &request).await?;
    ensure!(
        matches!(reason, NotTakenReason::LeaseValid { .. }),
        "a valid lease under a sub-microsecond grace answers LeaseValid, got {reason:?}"
    );
    expire(&ctx, &record, Duration::from_millis(1)).await?;
    let request = TakeoverRequest::fail("exact-grace", "claimer-b", "orphaned").grace(half_micro);
    ensure!(
        matches!(
            ctx.store.claim_for_takeover(&request).await?,
            Takeover::Taken(_)
        ),
        "an expired lease under a sub-microsecond grace is taken"
    );
    Ok(())
}

/// The takeover rule at its exact instant ([`rules::lease_valid`]): with
/// expiry `E` and grace `g`, 1 µs before `E + g` the lease is still valid
/// (`LeaseValid`, with exactly 1 µs left, nothing changed) and at `E + g` it
/// is taken; for no grace and for a grace of milliseconds. Needs a clock the
/// kit can place; skipped on a server's clock.
///
/// [`rules::lease_valid`]: tenure_lease_core::backend::rules::lease_valid
pub async fn takeover_boundary_is_exact_to_the_microsecond<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    for (round, grace) in [Duration::ZERO, Duration::from_millis(7)]
        .into_iter()
        .enumerate()
    {
        let id = format!("edge-{round}");
        let record = admit(
            &ctx,
            AdmitRequest::new(id.as_str(), "owner-a").ttl(SHORT_TTL),
        )
        .await?;
        let expires = record
            .lease_expires_at
            .ok_or_else(|| Failure("admitted with a ttl but no expiry".into()))?;
        let limit = clock::add(expires, grace);
        let request = TakeoverRequest::fail(id.as_str(), "claimer-b", "orphaned").grace(grace);
        manual.advance_to(micro_before(limit));
        refused(
            &ctx,
            &[&id],
            Takeover::NotTaken(NotTakenReason::LeaseValid {
                retry_after: MICROSECOND,
            }),
            &format!("1 µs before expiry + grace {grace:?}, the lease is valid"),
            ctx.store.claim_for_takeover(&request),
        )
        .await?;
        manual.advance_to(limit);
        let Takeover::Taken(taken) = ctx.store.claim_for_takeover(&request).await? else {
            return Err(Failure(format!(
                "at exactly expiry + grace {grace:?}, the lease is taken"
            )));
        };
        ensure!(taken.fence > record.fence, "the fence grows");
    }
    Ok(())
}

/// The owner of a valid lease claiming it for takeover is judged as anyone
/// else: `LeaseValid`, nothing changed. Owning a record gives no right to
/// take it over early; renewing is how an owner keeps it.
pub async fn takeover_by_the_owner_of_a_valid_lease_is_not_taken<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let record = admit(
        &ctx,
        AdmitRequest::new("own-valid", "owner-a").ttl(LONG_TTL),
    )
    .await?;
    let request = TakeoverRequest::adopt("own-valid", "owner-a", Some(LONG_TTL));
    let reason = expect_not_taken(&ctx, &request).await?;
    ensure!(
        matches!(reason, NotTakenReason::LeaseValid { .. }),
        "the owner's own valid lease answers LeaseValid, got {reason:?}"
    );
    ensure_eq!(get(&ctx, "own-valid").await?, record, "nothing changed");
    Ok(())
}
