//! Conformance cases: [`Keeper::cancel_anywhere`] on top of the store
//! ([contract §12](tenure_lease_core::contract)).
//!
//! Cancelling a run held elsewhere is a takeover that fails the record, so
//! its truthfulness rests on the store's takeover verdict: these cases check
//! on every backend that a crashed owner's run is cancelled under a greater
//! fence, a live owner's is reported with a retry-after inside the bounds
//! its lease allows, terminal, interrupted and missing records are answered
//! as such, a store that cannot say is answered `Unknown` (and a lost reply
//! is resolved by calling again), and that every race (the owner renewing,
//! a peer claiming, another canceller) is answered with what happened.
//!
//! The retry-after is checked against bounds read around the call (the
//! owner's expiry before and after, store time before and after), never
//! against how fast anything ran.

use std::sync::Arc;
use std::time::Duration;

use tenure_keeper::{CancelAnywhereOutcome, Keeper, LossCause, CANCELLED};
use tenure_lease_core::clock;
use tenure_lease_core::layer::Fault;
use tenure_lease_core::{
    AdmitRequest, ErrorKind, LeaseRecord, LeaseStore, LossReason, NotTakenReason, Renewal, Status,
    StatusChange, Takeover, TakeoverRequest, Transition, TransitionRejection,
};

use super::keeper::{
    admit_held, config, held_config, peer_takes_over, shutdown_drained, start, GHOST, PEER,
};
use crate::cases::fault::{faulty, Faulty};
use crate::cases::util::{
    admit, claim_of, ensure_scopes_free, expire, get, race_two, LONG_GRACE, LONG_TTL, SHORT_TTL,
    UNLIKE_RACE_ROUNDS,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The grace of the cancelling keepers: short, so a case waits past it
/// within a fraction of a second on a server's clock.
const GRACE: Duration = Duration::from_millis(100);

/// Admits `id` for [`GHOST`], a worker that never renews, on its own scope.
async fn ghost_run<S: LeaseStore>(
    ctx: &Ctx<S>,
    id: &str,
    ttl: Duration,
) -> Result<LeaseRecord, Failure> {
    admit(
        ctx,
        AdmitRequest::new(id, GHOST)
            .ttl(ttl)
            .scope(format!("cancel-case:{id}")),
    )
    .await
}

/// Fails the case unless `outcome` is `CancelledByTakeover` of `orphan` by
/// `keeper`: terminal, the keeper's, a greater fence, stop reason
/// [`CANCELLED`], read back by `get`, its scope free, the dead owner's
/// writes refused. Answers the record.
async fn ensure_cancelled_by_takeover<S: LeaseStore>(
    ctx: &Ctx<S>,
    keeper: &Keeper,
    orphan: &LeaseRecord,
    outcome: CancelAnywhereOutcome,
) -> Result<LeaseRecord, Failure> {
    let CancelAnywhereOutcome::CancelledByTakeover { record } = outcome else {
        return Err(Failure(format!(
            "expected {:?} to be cancelled by takeover, got {outcome:?}",
            orphan.id
        )));
    };
    ensure_eq!(
        record.status,
        Status::Failed,
        "a cancelled orphan is terminal"
    );
    ensure_eq!(record.stop_reason.as_deref(), Some(CANCELLED));
    ensure_eq!(record.error.as_deref(), Some(CANCELLED));
    ensure_eq!(record.owner.as_deref(), Some(keeper.worker_id()));
    ensure!(
        record.fence > orphan.fence,
        "the takeover drew a greater fence: {} after {}",
        record.fence,
        orphan.fence
    );
    ensure_eq!(
        get(ctx, &orphan.id).await?,
        record,
        "get reads what was answered"
    );
    ensure!(!keeper.holds(&orphan.id), "a cancelled orphan is not held");
    let dead = claim_of(orphan)?;
    ensure_eq!(
        ctx.store.renew(&dead, LONG_TTL).await?,
        Renewal::Lost(LossReason::OwnerChanged),
        "the dead owner's renewal is refused"
    );
    ensure_eq!(
        ctx.store
            .transition(&dead, &StatusChange::succeeded())
            .await?,
        Transition::Rejected(TransitionRejection::Stale),
        "the dead owner's late success is refused"
    );
    Ok(record)
}

/// Calls `cancel_anywhere(id)` through `keeper` on a record a live owner
/// holds, failing the case unless it answers `LeaseValidElsewhere` with a
/// retry-after within the bounds the owner's lease allows (its expiry plus
/// `grace`, less store time, read before and after the call) and changes
/// nothing but lease times.
async fn ensure_valid_elsewhere<S: LeaseStore>(
    ctx: &Ctx<S>,
    keeper: &Keeper,
    id: &str,
    grace: Duration,
) -> CaseResult {
    let before = get(ctx, id).await?;
    let now_before = ctx.store.now().await?;
    let outcome = keeper.cancel_anywhere(id).await;
    let now_after = ctx.store.now().await?;
    let after = get(ctx, id).await?;
    let CancelAnywhereOutcome::LeaseValidElsewhere { retry_after } = outcome else {
        return Err(Failure(format!(
            "expected LeaseValidElsewhere for {id:?}, got {outcome:?}"
        )));
    };
    let expiry = |record: &LeaseRecord| {
        record
            .lease_expires_at
            .ok_or_else(|| Failure(format!("record {id:?} has no lease")))
    };
    let earliest_end = clock::add(expiry(&before)?, grace);
    let latest_end = clock::add(expiry(&after)?, grace);
    // Store time and the owner's expiry only move forward meanwhile.
    let lowest = clock::until(now_after, earliest_end);
    let highest = clock::until(now_before, latest_end);
    ensure!(
        !retry_after.is_zero() && lowest <= retry_after && retry_after <= highest,
        "retry_after {retry_after:?} lies in [{lowest:?}, {highest:?}], above zero"
    );
    ensure_eq!(
        (after.status, &after.owner, after.fence, &after.stop_reason),
        (
            before.status,
            &before.owner,
            before.fence,
            &before.stop_reason
        ),
        "a refused cancel changes nothing"
    );
    Ok(())
}

/// A crashed owner's run whose lease lapsed beyond grace is cancelled by
/// takeover: terminal, owned by the canceller under a greater fence, its
/// scope free, the dead owner's writes refused; within grace it still
/// counts as alive; a second cancel finds it finished.
pub async fn keeper_cancel_anywhere_takes_over_a_crashed_owners_run<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let keeper = start(&ctx, config().grace(GRACE))?;
    let patient = start(&ctx, config().grace(LONG_GRACE))?;
    let id = "cancel-crashed";
    let orphan = ghost_run(&ctx, id, SHORT_TTL).await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    // Expired, but not beyond the patient keeper's grace: the owner may
    // still renew, so the run counts as held.
    ensure_valid_elsewhere(&ctx, &patient, id, LONG_GRACE).await?;
    expire(&ctx, &orphan, GRACE).await?;
    let outcome = keeper.cancel_anywhere(id).await;
    ensure_cancelled_by_takeover(&ctx, &keeper, &orphan, outcome).await?;
    ensure_scopes_free(
        &ctx,
        "cancel-crashed-probe",
        &[&format!("cancel-case:{id}")],
    )
    .await?;
    let again = keeper.cancel_anywhere(id).await;
    ensure!(
        matches!(
            again,
            CancelAnywhereOutcome::NotCancellable {
                status: Status::Failed
            }
        ),
        "a second cancel finds the run finished: {again:?}"
    );
    shutdown_drained(keeper).await?;
    shutdown_drained(patient).await
}

/// A run whose owner is alive (another keeper renewing it, or a lease still
/// valid) is answered `LeaseValidElsewhere` with a retry-after within the
/// owner's remaining lease plus grace; nothing changes and the owner's run
/// goes on.
pub async fn keeper_cancel_anywhere_reports_a_live_owner_with_its_retry_after<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holder = start(&ctx, config())?;
    let canceller = start(&ctx, config().grace(GRACE))?;
    let id = "cancel-alive";
    let guard = admit_held(&holder, id).await?;
    ensure_valid_elsewhere(&ctx, &canceller, id, GRACE).await?;
    ensure!(
        guard.loss().is_none() && !guard.token().is_cancelled(),
        "the owner's run goes on"
    );
    ensure!(holder.holds(id), "the owner still holds its run");
    let long_id = "cancel-alive-long";
    ghost_run(&ctx, long_id, LONG_TTL).await?;
    ensure_valid_elsewhere(&ctx, &canceller, long_id, GRACE).await?;
    guard
        .complete(StatusChange::succeeded())
        .await
        .map_err(|error| Failure(format!("complete: {error}")))?;
    shutdown_drained(holder).await?;
    shutdown_drained(canceller).await
}

/// Runs held here are cancelled here (token fired, `Failed` while pending,
/// `Interrupted` once running, the keeper's fence); a local run a live peer
/// took over is stopped and answered `LeaseValidElsewhere`, the peer's
/// record untouched; terminal and interrupted records are `NotCancellable`,
/// an unknown id `NotFound`, an impossible id `InvalidInput`.
pub async fn keeper_cancel_anywhere_answers_local_terminal_interrupted_and_missing<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let keeper = start(&ctx, held_config(&ctx).grace(GRACE))?;
    let pending = admit_held(&keeper, "cancel-local-pending").await?;
    let running = admit_held(&keeper, "cancel-local-running").await?;
    running
        .mark_running()
        .await
        .map_err(|error| Failure(format!("mark_running: {error}")))?;
    for (guard, status) in [(&pending, Status::Failed), (&running, Status::Interrupted)] {
        let outcome = keeper.cancel_anywhere(guard.id()).await;
        let CancelAnywhereOutcome::Cancelled { record } = outcome else {
            return Err(Failure(format!(
                "expected {:?} to be cancelled here, got {outcome:?}",
                guard.id()
            )));
        };
        ensure_eq!(record.status, status, "{}", guard.id());
        ensure_eq!(record.stop_reason.as_deref(), Some(CANCELLED));
        ensure_eq!(record.fence, guard.fence(), "cancelled under its own fence");
        ensure_eq!(get(&ctx, guard.id()).await?, record);
        ensure!(guard.token().is_cancelled(), "the token fired");
        ensure_eq!(guard.loss(), Some(LossCause::Cancelled));
        ensure!(!keeper.holds(guard.id()), "a cancelled run is not held");
        let again = keeper.cancel_anywhere(guard.id()).await;
        ensure!(
            matches!(again, CancelAnywhereOutcome::NotCancellable { status: found } if found == status),
            "a second cancel of {:?} answers NotCancellable {{ {status:?} }}: {again:?}",
            guard.id()
        );
    }

    let raced = admit_held(&keeper, "cancel-local-raced").await?;
    let taken = peer_takes_over(&ctx, &raced).await?;
    let outcome = keeper.cancel_anywhere(raced.id()).await;
    ensure!(
        matches!(outcome, CancelAnywhereOutcome::LeaseValidElsewhere { retry_after } if !retry_after.is_zero()),
        "a run a live peer adopted is held elsewhere: {outcome:?}"
    );
    ensure!(raced.token().is_cancelled(), "the local copy is stopped");
    ensure!(!keeper.holds(raced.id()), "the local copy is not held");
    ensure_eq!(
        get(&ctx, raced.id()).await?,
        taken,
        "the peer's record is untouched"
    );

    let finished = ghost_run(&ctx, "cancel-finished", LONG_TTL).await?;
    ctx.store
        .transition(&claim_of(&finished)?, &StatusChange::succeeded())
        .await?;
    let interrupted = ghost_run(&ctx, "cancel-interrupted", LONG_TTL).await?;
    let claim = claim_of(&interrupted)?;
    ctx.store
        .transition(&claim, &StatusChange::running())
        .await?;
    ctx.store
        .transition(&claim, &StatusChange::interrupted("stopped by its owner"))
        .await?;
    for (id, status) in [
        ("cancel-finished", Status::Succeeded),
        ("cancel-interrupted", Status::Interrupted),
    ] {
        let before = get(&ctx, id).await?;
        let outcome = keeper.cancel_anywhere(id).await;
        ensure!(
            matches!(outcome, CancelAnywhereOutcome::NotCancellable { status: found } if found == status),
            "{id}: expected NotCancellable {{ {status:?} }}, got {outcome:?}"
        );
        ensure_eq!(get(&ctx, id).await?, before, "{id}: nothing changed");
    }
    let missing = keeper.cancel_anywhere("cancel-nobody").await;
    ensure!(
        matches!(missing, CancelAnywhereOutcome::NotFound),
        "an unknown id: {missing:?}"
    );
    ensure!(
        ctx.store.get("cancel-nobody").await?.is_none(),
        "nothing was created"
    );
    let invalid = keeper.cancel_anywhere("").await;
    ensure!(
        matches!(&invalid, CancelAnywhereOutcome::InvalidInput { error } if error.field() == Some("id")),
        "an empty id: {invalid:?}"
    );
    shutdown_drained(keeper).await
}

/// Starts a keeper over the faulty store, with a short store timeout.
fn start_faulty<S: LeaseStore + 'static>(store: &Faulty<S>) -> Result<Keeper, Failure> {
    start_faulty_within(store, Duration::from_millis(300))
}

/// [`start_faulty`] whose store calls may take `store_timeout`.
fn start_faulty_within<S: LeaseStore + 'static>(
    store: &Faulty<S>,
    store_timeout: Duration,
) -> Result<Keeper, Failure> {
    let config = config().grace(GRACE).store_timeout(store_timeout);
    Keeper::builder(store.clone(), config)
        .start()
        .map_err(|error| Failure(format!("the keeper did not start: {error}")))
}

/// Fails the case unless `outcome` is `Unknown` with an error of `kind`.
fn ensure_unknown(outcome: &CancelAnywhereOutcome, kind: ErrorKind, what: &str) -> CaseResult {
    ensure!(
        matches!(outcome, CancelAnywhereOutcome::Unknown { error } if error.kind() == kind),
        "{what}: expected Unknown with a {kind} error, got {outcome:?}"
    );
    Ok(())
}

/// A store that cannot say is answered `Unknown` with its error: a failed
/// or hung takeover changed nothing; a takeover whose reply was lost was
/// applied, and calling again resolves it (`NotCancellable { Failed }`, the
/// record the canceller's); a local run whose cancel write fails is stopped
/// anyway and its record left alone.
pub async fn keeper_cancel_anywhere_answers_unknown_when_the_store_cannot_say<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let store = faulty(&ctx);
    let keeper = start_faulty(&store)?;
    let id = "cancel-unknown";
    let orphan = ghost_run(&ctx, id, SHORT_TTL).await?;
    expire(&ctx, &orphan, GRACE).await?;

    for (fault, kind) in [
        (Fault::Unavailable, ErrorKind::Unavailable),
        (Fault::Hang, ErrorKind::Timeout),
    ] {
        store.hook().inject("claim_for_takeover", Some(id), fault);
        let outcome = keeper.cancel_anywhere(id).await;
        store.hook().release_hangs();
        ensure_unknown(&outcome, kind, &format!("{fault:?}"))?;
        ensure_eq!(
            get(&ctx, id).await?,
            orphan,
            "{fault:?}: a takeover that never reached the store changed nothing"
        );
    }

    // From here on the calls really run: a keeper that waits for them as
    // long as a loaded server may take, so only the injected faults make
    // an outcome unknown.
    let patient = start_faulty_within(&store, Duration::from_secs(10))?;
    store
        .hook()
        .inject("claim_for_takeover", Some(id), Fault::ReplyLost);
    let outcome = patient.cancel_anywhere(id).await;
    store.hook().clear();
    ensure_unknown(&outcome, ErrorKind::Unavailable, "a lost reply")?;
    let again = patient.cancel_anywhere(id).await;
    ensure!(
        matches!(
            again,
            CancelAnywhereOutcome::NotCancellable {
                status: Status::Failed
            }
        ),
        "calling again after a lost reply finds the cancellation applied: {again:?}"
    );
    let applied = get(&ctx, id).await?;
    ensure_eq!(
        (applied.owner.as_deref(), applied.stop_reason.as_deref()),
        (Some(patient.worker_id()), Some(CANCELLED)),
        "the lost takeover was the keeper's cancellation"
    );
    ensure!(applied.fence > orphan.fence, "under a greater fence");

    let local = admit_held(&patient, "cancel-unknown-local").await?;
    let held = get(&ctx, local.id()).await?;
    store
        .hook()
        .inject("transition", Some(local.id()), Fault::Unavailable);
    let outcome = patient.cancel_anywhere(local.id()).await;
    store.hook().clear();
    ensure_unknown(
        &outcome,
        ErrorKind::Unavailable,
        "an unconfirmed cancel write",
    )?;
    ensure!(
        local.token().is_cancelled(),
        "the local run is stopped anyway"
    );
    ensure!(!patient.holds(local.id()), "and no longer held");
    let after = get(&ctx, local.id()).await?;
    ensure_eq!(
        (after.status, after.owner, after.fence),
        (held.status, held.owner, held.fence),
        "the failed write changed nothing"
    );
    shutdown_drained(keeper).await?;
    shutdown_drained(patient).await
}

/// Admits one [`GHOST`] run per round named `{prefix}-{round}`, all with a
/// short lease, and moves store time past the last expiry plus `grace`.
async fn expired_ghost_runs<S: LeaseStore>(
    ctx: &Ctx<S>,
    prefix: &str,
    grace: Duration,
) -> Result<Vec<LeaseRecord>, Failure> {
    let mut runs = Vec::with_capacity(UNLIKE_RACE_ROUNDS);
    for round in 0..UNLIKE_RACE_ROUNDS {
        runs.push(ghost_run(ctx, &format!("{prefix}-{round}"), SHORT_TTL).await?);
    }
    if let Some(last) = runs.last() {
        expire(ctx, last, grace).await?;
    }
    Ok(runs)
}

/// Shuts down a keeper the races shared, once they are done with it.
async fn shutdown_shared(keeper: Arc<Keeper>) -> CaseResult {
    let keeper = Arc::try_unwrap(keeper)
        .map_err(|_| Failure("a racing task still holds the keeper".into()))?;
    shutdown_drained(keeper).await
}

/// The owner renewing its lapsed lease races the cancelling takeover:
/// exactly one wins, and each side answers accordingly (renewed and
/// `LeaseValidElsewhere` with a fresh retry-after, or lost to the owner
/// change and `CancelledByTakeover`).
pub async fn race_keeper_cancel_anywhere_vs_owner_renewal<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let keeper = Arc::new(start(&ctx, config().grace(GRACE))?);
    let runs = expired_ghost_runs(&ctx, "cancel-vs-renew", GRACE).await?;
    let (mut renewed, mut cancelled) = (0, 0);
    for (round, orphan) in runs.iter().enumerate() {
        let (store, claim) = (Arc::clone(&ctx.store), claim_of(orphan)?);
        let renewal = async move { store.renew(&claim, LONG_TTL).await };
        let (canceller, id) = (Arc::clone(&keeper), orphan.id.clone());
        let cancel = async move { canceller.cancel_anywhere(&id).await };
        let (renewal, outcome) = race_two(round, renewal, cancel).await?;
        match (renewal?, outcome) {
            (
                Renewal::Renewed { expires_at },
                CancelAnywhereOutcome::LeaseValidElsewhere { retry_after },
            ) => {
                ensure!(
                    !retry_after.is_zero() && retry_after <= LONG_TTL + GRACE,
                    "round {round}: a fresh retry_after from the renewed lease: {retry_after:?}"
                );
                let record = get(&ctx, &orphan.id).await?;
                ensure_eq!(
                    (
                        record.status,
                        record.owner.as_deref(),
                        record.fence,
                        record.lease_expires_at
                    ),
                    (orphan.status, Some(GHOST), orphan.fence, Some(expires_at)),
                    "round {round}: the owner keeps its renewed run"
                );
                renewed += 1;
            }
            (Renewal::Lost(LossReason::OwnerChanged), outcome) => {
                ensure_cancelled_by_takeover(&ctx, &keeper, orphan, outcome).await?;
                cancelled += 1;
            }
            (renewal, outcome) => {
                return Err(Failure(format!(
                    "round {round}: exactly one side wins; got {renewal:?} and {outcome:?}"
                )))
            }
        }
    }
    ensure_eq!(renewed + cancelled, UNLIKE_RACE_ROUNDS);
    shutdown_shared(keeper).await
}

/// Two keepers cancelling the same crashed owner's run, and a cancel racing
/// a peer that adopts it: exactly one takeover wins each round, and the
/// loser answers what the winner did (`NotCancellable { Failed }` after
/// another cancel, `LeaseValidElsewhere` after an adoption), never a
/// cancellation it did not write.
pub async fn race_keeper_cancel_anywhere_vs_peers<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first = Arc::new(start(&ctx, config().grace(GRACE))?);
    let second = Arc::new(start(&ctx, config().grace(GRACE))?);
    let runs = expired_ghost_runs(&ctx, "cancel-vs-cancel", GRACE).await?;
    for (round, orphan) in runs.iter().enumerate() {
        let (a, b) = (Arc::clone(&first), Arc::clone(&second));
        let (id_a, id_b) = (orphan.id.clone(), orphan.id.clone());
        let (answer_a, answer_b) = race_two(
            round,
            async move { a.cancel_anywhere(&id_a).await },
            async move { b.cancel_anywhere(&id_b).await },
        )
        .await?;
        let (winner, loser, won, lost) = match (&answer_a, &answer_b) {
            (CancelAnywhereOutcome::CancelledByTakeover { .. }, _) => {
                (&first, &second, answer_a, answer_b)
            }
            _ => (&second, &first, answer_b, answer_a),
        };
        ensure_cancelled_by_takeover(&ctx, winner, orphan, won).await?;
        ensure!(
            matches!(
                lost,
                CancelAnywhereOutcome::NotCancellable {
                    status: Status::Failed
                }
            ),
            "round {round}: the other canceller answers the run finished: {lost:?}"
        );
        ensure!(!loser.holds(&orphan.id), "round {round}: nobody holds it");
    }

    let runs = expired_ghost_runs(&ctx, "cancel-vs-adopt", GRACE).await?;
    for (round, orphan) in runs.iter().enumerate() {
        let store = Arc::clone(&ctx.store);
        let adopt = TakeoverRequest::adopt(&orphan.id, PEER, Some(LONG_TTL));
        let adoption = async move { store.claim_for_takeover(&adopt).await };
        let (canceller, id) = (Arc::clone(&first), orphan.id.clone());
        let cancel = async move { canceller.cancel_anywhere(&id).await };
        let (adoption, outcome) = race_two(round, adoption, cancel).await?;
        match (adoption?, outcome) {
            (
                Takeover::Taken(adopted),
                CancelAnywhereOutcome::LeaseValidElsewhere { retry_after },
            ) => {
                ensure!(
                    !retry_after.is_zero() && retry_after <= LONG_TTL + GRACE,
                    "round {round}: the adopter's lease: {retry_after:?}"
                );
                ensure_eq!(
                    get(&ctx, &orphan.id).await?,
                    adopted,
                    "round {round}: the adopter's record is untouched"
                );
            }
            (Takeover::NotTaken(NotTakenReason::Terminal(Status::Failed)), outcome) => {
                ensure_cancelled_by_takeover(&ctx, &first, orphan, outcome).await?;
            }
            (adoption, outcome) => {
                return Err(Failure(format!(
                    "round {round}: exactly one takeover wins; got {adoption:?} and {outcome:?}"
                )))
            }
        }
    }
    shutdown_shared(first).await?;
    shutdown_shared(second).await
}
