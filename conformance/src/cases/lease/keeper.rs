//! Conformance cases: the keeper on top of the store
//! ([contract §12](tenure_lease_core::contract)).
//!
//! The keeper needs nothing but a [`LeaseStore`], so its promises (leases
//! kept alive, takeovers noticed, stale completions refused, orphans
//! recovered, cancellation answered) must hold on every backend, not only on
//! the one its unit tests use.
//!
//! Two clocks are at play: the keeper beats and judges its confirmed
//! deadlines in real tokio time, while the store judges expiry by its own
//! clock, which on a manual clock moves only when the case moves it. So the
//! cases never wait for store time to pass by itself: to make a peer see a
//! lease as expired while its keeper still believes it holds it, they shorten
//! the store's lease with a raw `renew(claim, 1 ms)` made with the keeper's
//! own claim, then [`Ctx::advance_past`] its expiry. Heartbeat effects are
//! awaited as signals (the guard's token, a renewed expiry) under generous
//! bounds, so a loaded machine slows the cases down without failing them.
//!
//! The keeper fail-stops (`DeadlinePassed`) when no renewal is confirmed
//! within a ttl of sending it, which a starved machine can cause; that is
//! correct behaviour, so the ttl is long against the beat (a renewal may be
//! late by more than ten beats before it counts), and where a case checks a
//! refusal, the fail-stop is accepted as one.

use std::sync::Arc;
use std::time::Duration;

use tenure_keeper::{
    AdmitOutcome, CancelOutcome, Keeper, KeeperConfig, LossCause, ReconcileAction, Recovered,
    RunGuard, WriteError, CANCELLED,
};
use tenure_lease_core::layer::LayerExt;
use tenure_lease_core::{
    AdmitRequest, LeaseRecord, LeaseStore, LossReason, Renewal, Status, StatusChange, Takeover,
    TakeoverRequest, Timestamp,
};
use tokio::time::Instant;

use crate::cases::util::{admit, claim_of, expire, get, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The keepers' lease: long against [`BEAT`], so that only a heartbeat
/// starved of more than ten beats misses its confirmed deadline, yet short
/// enough that a case outlives a few ttls in seconds.
pub(crate) const TTL: Duration = Duration::from_secs(3);
/// The keepers' beat (`ttl / 12`, well below the default `ttl / 3`).
const BEAT: Duration = Duration::from_millis(250);
/// The longest a case waits for a heartbeat effect: longer than the ttl, so
/// a renewal late by anything short of a fail-stop still shows up.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(6);
/// How often the store is read while waiting for a renewal to show up (the
/// heartbeat offers no signal a case could await).
const POLL: Duration = Duration::from_millis(10);
/// The bound given to every `shutdown` (it answers as soon as it drained).
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);
/// The worker that takes leases over from the keepers' runs.
pub(crate) const PEER: &str = "peer-worker";
/// The worker that admits orphans and never comes back for them.
pub(crate) const GHOST: &str = "ghost-worker";

/// A keeper config with the cases' ttl and no self-running reconciler, so
/// passes happen only when a case asks.
pub(crate) fn config() -> KeeperConfig {
    KeeperConfig::with_ttl(TTL)
        .renew_interval(BEAT)
        .auto_reconcile(false)
}

/// [`config`] for a case whose peer takes a lease over behind a keeper's
/// back ([`peer_takes_over`]): on a store whose timers outlast a beat, the
/// keeper's renewals are held back meanwhile, so its ttl also covers that
/// wait.
pub(crate) fn held_config<S: LeaseStore>(ctx: &Ctx<S>) -> KeeperConfig {
    KeeperConfig::with_ttl(TTL + ctx.timer_overrun() * 2)
        .renew_interval(BEAT)
        .auto_reconcile(false)
}

/// Starts a keeper over the case's store (behind the context's
/// [`RenewalHold`](crate::harness::RenewalHold)).
pub(crate) fn start<S: LeaseStore + 'static>(
    ctx: &Ctx<S>,
    config: KeeperConfig,
) -> Result<Keeper, Failure> {
    let store = Arc::new(Arc::clone(&ctx.store).layer(ctx.renewals.clone()));
    Keeper::builder(store, config)
        .start()
        .map_err(|error| Failure(format!("the keeper did not start: {error}")))
}

/// Admits `id` through `keeper` on its own scope, failing the case unless it
/// is `Admitted`; answers the run's guard.
pub(crate) async fn admit_held(keeper: &Keeper, id: &str) -> Result<RunGuard, Failure> {
    let request = keeper.request(id).scope(format!("keeper-case:{id}"));
    match keeper.admit(request).await {
        Ok(AdmitOutcome::Admitted { guard, .. }) => Ok(guard),
        other => Err(Failure(format!(
            "expected the keeper to admit {id:?}, got {other:?}"
        ))),
    }
}

/// Shuts `keeper` down, failing the case unless every run had finished.
///
/// Driven on a blocking thread because the future of `Keeper::shutdown` is
/// not `Send` (it keeps a `watch::Ref` across an await) while the kit runs
/// every case in a spawned task.
pub(crate) async fn shutdown_drained(keeper: Keeper) -> CaseResult {
    let report = keeper.shutdown(Instant::now() + SHUTDOWN_BOUND).await;
    ensure!(
        report.drained && report.stopped_runs.is_empty(),
        "every run had finished before shutdown: {report:?}"
    );
    Ok(())
}

/// The record's lease expiry, failing the case when it has none.
fn expiry_of(record: &LeaseRecord) -> Result<Timestamp, Failure> {
    record
        .lease_expires_at
        .ok_or_else(|| Failure(format!("record {:?} has no lease", record.id)))
}

/// Makes the store see `claim`'s lease as expired while its keeper's
/// confirmed deadline is still ahead: a raw renewal of 1 ms with the claim,
/// then store time moved past it.
async fn shorten_and_expire<S: LeaseStore>(
    ctx: &Ctx<S>,
    claim: &tenure_lease_core::Claim,
) -> Result<(), Failure> {
    match ctx.store.renew(claim, Duration::from_millis(1)).await? {
        Renewal::Renewed { expires_at } => ctx.advance_past(expires_at).await,
        other => Err(Failure(format!(
            "shortening the lease of {claim:?} answered {other:?}"
        ))),
    }
}

/// On a store whose timers outlast a beat, the keepers' renewals held back
/// until the answer is dropped; elsewhere nothing.
fn held_back<S: LeaseStore>(ctx: &Ctx<S>) -> Option<impl Drop + '_> {
    (!ctx.timer_overrun().is_zero()).then(|| ctx.renewals.hold())
}

/// Lets [`PEER`] adopt `guard`'s lease behind its keeper's back; answers the
/// record as the peer took it. Tries again when a beat renewed the lease
/// between the shortening and the takeover.
pub(crate) async fn peer_takes_over<S: LeaseStore>(
    ctx: &Ctx<S>,
    guard: &RunGuard,
) -> Result<LeaseRecord, Failure> {
    const ATTEMPTS: usize = 20;
    let request = TakeoverRequest::adopt(guard.id(), PEER, Some(TTL * 100));
    for _ in 0..ATTEMPTS {
        let _held = held_back(ctx);
        shorten_and_expire(ctx, guard.claim()).await?;
        match ctx.store.claim_for_takeover(&request).await? {
            Takeover::Taken(record) => return Ok(record),
            Takeover::NotTaken(_) => {}
            other => return Err(Failure(format!("the peer's takeover answered {other:?}"))),
        }
    }
    Err(Failure(format!(
        "the peer never won the takeover of {:?} in {ATTEMPTS} attempts",
        guard.id()
    )))
}

/// Waits until the store shows `guard`'s lease renewed to an expiry after
/// `after`; answers that expiry. Fails when the run loses its lease or no
/// renewal shows up within [`SIGNAL_TIMEOUT`].
async fn renewed_after<S: LeaseStore>(
    ctx: &Ctx<S>,
    guard: &RunGuard,
    after: Timestamp,
) -> Result<Timestamp, Failure> {
    let give_up = Instant::now() + SIGNAL_TIMEOUT;
    loop {
        ensure!(
            guard.loss().is_none(),
            "the run lost its lease while held: {:?}",
            guard.loss()
        );
        let expiry = expiry_of(&get(ctx, guard.id()).await?)?;
        if expiry > after {
            return Ok(expiry);
        }
        ensure!(
            Instant::now() < give_up,
            "no renewal of {:?} past {after} within {SIGNAL_TIMEOUT:?}",
            guard.id()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Fails the case unless the keeper keeps `guard`'s lease alive for at least
/// `span` of its own time while store time moves past the lease's current
/// expiry: store time moves a beat at a time (never far enough to expire a
/// lease renewed at the previous step) and each step must be followed by a
/// renewal extending the lease.
async fn ensure_kept_alive<S: LeaseStore>(
    ctx: &Ctx<S>,
    guard: &RunGuard,
    span: Duration,
) -> CaseResult {
    let started = Instant::now();
    let first_expiry = expiry_of(&get(ctx, guard.id()).await?)?;
    let mut expiry = first_expiry;
    while started.elapsed() < span || ctx.store.now().await? <= first_expiry {
        ctx.advance(BEAT).await?;
        expiry = renewed_after(ctx, guard, expiry).await?;
    }
    let now = ctx.store.now().await?;
    ensure!(
        expiry > now,
        "the store sees the lease valid: expiry {expiry}, now {now}"
    );
    ensure_eq!(guard.loss(), None, "the run kept its lease");
    ensure!(!guard.token().is_cancelled(), "the run's token is intact");
    Ok(())
}

/// A keeper keeps a pending lease alive across three ttls while store time
/// moves past its first expiry; `complete()` then succeeds and releases it.
pub async fn keeper_keeps_a_lease_alive_across_three_ttls<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let keeper = start(&ctx, config())?;
    let id = "keeper-alive";
    let guard = admit_held(&keeper, id).await?;
    ensure_kept_alive(&ctx, &guard, TTL * 3).await?;
    let record = get(&ctx, id).await?;
    ensure_eq!(record.status, Status::Pending, "nobody started the run");
    ensure_eq!(record.owner.as_deref(), Some(keeper.worker_id()));
    ensure_eq!(record.fence, guard.fence(), "renewals keep the fence");
    let done = guard
        .complete(StatusChange::succeeded())
        .await
        .map_err(|error| Failure(format!("complete: {error}")))?;
    ensure_eq!(done.status, Status::Succeeded);
    ensure_eq!(get(&ctx, id).await?, done, "get reads the completed record");
    ensure!(!keeper.holds(id), "a completed run is no longer held");
    shutdown_drained(keeper).await
}

/// A peer's takeover is noticed by the heartbeat through the store (the loss
/// is `OwnerChanged`, not a lapsed deadline): token fired, lease dropped,
/// nothing written over the peer's record.
pub async fn keeper_heartbeat_notices_a_takeover<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let keeper = start(&ctx, held_config(&ctx))?;
    let id = "keeper-noticed";
    let guard = admit_held(&keeper, id).await?;
    let token = guard.token();
    let taken = peer_takes_over(&ctx, &guard).await?;
    tokio::time::timeout(SIGNAL_TIMEOUT, token.cancelled())
        .await
        .map_err(|_| Failure(format!("the token did not fire within {SIGNAL_TIMEOUT:?}")))?;
    ensure_eq!(
        guard.loss(),
        Some(LossCause::Lost(LossReason::OwnerChanged)),
        "a renewal answered the loss before the confirmed deadline lapsed"
    );
    ensure!(!keeper.holds(id), "a lost lease is no longer held");
    ensure_eq!(
        get(&ctx, id).await?,
        taken,
        "the peer's record is untouched"
    );
    shutdown_drained(keeper).await
}

/// `complete()` after a peer's takeover answers stale (or the loss, when the
/// heartbeat saw it first, or the fail-stop, when a starved heartbeat let the
/// confirmed deadline pass: every one a refusal) and leaves the peer's
/// record untouched.
pub async fn keeper_complete_after_takeover_answers_stale<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let keeper = start(&ctx, held_config(&ctx))?;
    let id = "keeper-stale";
    let guard = admit_held(&keeper, id).await?;
    let taken = peer_takes_over(&ctx, &guard).await?;
    let answer = guard.complete(StatusChange::succeeded()).await;
    ensure!(
        matches!(
            answer,
            Err(WriteError::TakenOver
                | WriteError::OwnershipLost(
                    LossCause::Lost(LossReason::OwnerChanged) | LossCause::DeadlinePassed
                ))
        ),
        "expected TakenOver (or the loss, or the fail-stop), got {answer:?}"
    );
    ensure!(guard.token().is_cancelled(), "the stale run is stopped");
    ensure!(!keeper.holds(id), "a stale run is no longer held");
    ensure_eq!(
        get(&ctx, id).await?,
        taken,
        "the peer's record is untouched"
    );
    shutdown_drained(keeper).await
}

/// A run reports progress through its guard: one fenced renewal that
/// others read on the record. A report after the run's terminal write is
/// refused and writes nothing; once a peer took the lease over, a report
/// answers the loss, stops the run and leaves the peer's record untouched.
pub async fn keeper_progress_rides_on_a_fenced_renewal<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let keeper = start(&ctx, held_config(&ctx))?;
    let id = "keeper-progress";
    let guard = admit_held(&keeper, id).await?;
    let progress = serde_json::json!({ "step": 2, "of": 5 });
    guard
        .report_progress(&progress)
        .await
        .map_err(|error| Failure(format!("report_progress: {error}")))?;
    ensure_eq!(
        get(&ctx, id).await?.progress,
        Some(progress.clone()),
        "the record carries the reported progress"
    );
    let finished = admit_held(&keeper, "keeper-progress-finished").await?;
    finished
        .complete(StatusChange::succeeded())
        .await
        .map_err(|error| Failure(format!("complete: {error}")))?;
    let late = finished.report_progress(&progress).await;
    ensure!(
        matches!(late, Err(WriteError::Invalid(_))),
        "a report after the terminal write is refused, got {late:?}"
    );
    ensure_eq!(
        get(&ctx, "keeper-progress-finished").await?.progress,
        None,
        "a refused report writes nothing"
    );
    let taken = peer_takes_over(&ctx, &guard).await?;
    let answer = guard
        .report_progress(&serde_json::json!({ "step": 3, "of": 5 }))
        .await;
    ensure!(
        matches!(
            answer,
            Err(WriteError::OwnershipLost(
                LossCause::Lost(LossReason::OwnerChanged) | LossCause::DeadlinePassed
            ))
        ),
        "expected the loss (or the fail-stop), got {answer:?}"
    );
    ensure!(guard.token().is_cancelled(), "the run is stopped");
    ensure_eq!(
        get(&ctx, id).await?,
        taken,
        "the peer's record is untouched, its progress included"
    );
    shutdown_drained(keeper).await
}

/// The reconciler fails an expired orphan, owned from then on by the keeper,
/// and skips the keeper's own lease even when the store sees it expired.
pub async fn keeper_reconciler_recovers_orphans_but_never_its_own<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const ATTEMPTS: usize = 40;
    let keeper = start(&ctx, held_config(&ctx))?;
    let own_id = "keeper-own";
    let own = admit_held(&keeper, own_id).await?;
    let orphan_id = "keeper-orphan";
    let orphan = admit(&ctx, AdmitRequest::new(orphan_id, GHOST).ttl(SHORT_TTL)).await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    let report = keeper
        .reconcile_now()
        .await
        .map_err(|error| Failure(format!("reconcile_now: {error}")))?;
    ensure_eq!(report.recovered, vec![orphan_id.to_owned()]);
    let recovered = get(&ctx, orphan_id).await?;
    ensure_eq!(recovered.status, Status::Failed);
    ensure_eq!(recovered.owner.as_deref(), Some(keeper.worker_id()));
    ensure!(
        recovered.fence > orphan.fence,
        "the takeover bumped the fence"
    );
    // A beat may renew the own lease between the shortening and the scan,
    // hiding it from the scan; try again until a pass has seen it.
    let mut seen_own = false;
    for _ in 0..ATTEMPTS {
        let _held = held_back(&ctx);
        shorten_and_expire(&ctx, own.claim()).await?;
        let report = keeper
            .reconcile_now()
            .await
            .map_err(|error| Failure(format!("reconcile_now: {error}")))?;
        ensure!(
            report.recovered.is_empty(),
            "nothing else to recover: {report:?}"
        );
        if report.skipped_own == [own_id] {
            seen_own = true;
            break;
        }
    }
    ensure!(
        seen_own,
        "no pass saw the own lease expired in {ATTEMPTS} attempts"
    );
    let own_record = get(&ctx, own_id).await?;
    ensure_eq!(
        own_record.status,
        Status::Pending,
        "the own lease is intact"
    );
    ensure_eq!(own_record.owner.as_deref(), Some(keeper.worker_id()));
    ensure_eq!(own_record.fence, own.fence());
    ensure!(
        keeper.holds(own_id) && own.loss().is_none(),
        "the own run is still held"
    );
    own.complete(StatusChange::succeeded())
        .await
        .map_err(|error| Failure(format!("complete: {error}")))?;
    shutdown_drained(keeper).await
}

/// With `Adopt`, a recovered orphan is held and kept alive by the recovering
/// keeper, and completed through the guard handed to the callback.
pub async fn keeper_adopted_orphan_is_kept_alive_and_completed<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let (sender, mut adopted) = tokio::sync::mpsc::unbounded_channel::<Recovered>();
    let keeper = Keeper::builder(
        ctx.store.clone(),
        config().reconcile_action(ReconcileAction::Adopt),
    )
    .on_recovered(move |recovered| {
        let sent = sender
            .send(recovered)
            .map_err(|_| "the case stopped listening");
        async move { sent }
    })
    .start()
    .map_err(|error| Failure(format!("the keeper did not start: {error}")))?;
    let orphan_id = "keeper-adopt";
    let orphan = admit(&ctx, AdmitRequest::new(orphan_id, GHOST).ttl(SHORT_TTL)).await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    let report = keeper
        .reconcile_now()
        .await
        .map_err(|error| Failure(format!("reconcile_now: {error}")))?;
    ensure_eq!(report.recovered, vec![orphan_id.to_owned()]);
    ensure!(report.callback_failed.is_empty(), "{report:?}");
    let recovered = adopted
        .try_recv()
        .map_err(|_| Failure("the callback got nothing".into()))?;
    ensure_eq!(recovered.record.status, Status::Running);
    ensure_eq!(recovered.record.owner.as_deref(), Some(keeper.worker_id()));
    ensure!(
        recovered.record.fence > orphan.fence,
        "adoption bumped the fence"
    );
    let guard = recovered
        .guard
        .ok_or_else(|| Failure("adopted without a guard".into()))?;
    ensure_eq!(guard.claim(), &claim_of(&recovered.record)?);
    ensure!(keeper.holds(orphan_id), "the adopted run is held");
    ensure_kept_alive(&ctx, &guard, TTL * 2).await?;
    let done = guard
        .complete(StatusChange::succeeded())
        .await
        .map_err(|error| Failure(format!("complete: {error}")))?;
    ensure_eq!(done.status, Status::Succeeded);
    ensure_eq!(done.fence, recovered.record.fence);
    shutdown_drained(keeper).await
}

/// `cancel()` by another keeper reports the holder's valid lease with a
/// retry-after within ttl plus grace and changes nothing; by the holder it
/// stops the run, fails the pending record, and a second cancel finds nothing.
pub async fn keeper_cancel_stops_local_runs_and_reports_valid_leases_elsewhere<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let grace = Duration::from_millis(100);
    let holder = start(&ctx, config().grace(grace))?;
    let other = start(&ctx, config().grace(grace))?;
    let id = "keeper-cancel";
    let guard = admit_held(&holder, id).await?;
    let before = get(&ctx, id).await?;
    match other.cancel(id).await {
        CancelOutcome::LeaseValidElsewhere { retry_after } => ensure!(
            !retry_after.is_zero() && retry_after <= TTL + grace,
            "retry_after {retry_after:?} lies in (0, ttl + grace]"
        ),
        outcome => {
            return Err(Failure(format!(
                "expected LeaseValidElsewhere, got {outcome:?}"
            )))
        }
    }
    // A beat may have renewed in between: compare all but the lease times.
    let after = get(&ctx, id).await?;
    ensure_eq!(
        (after.status, &after.owner, after.fence, &after.stop_reason),
        (
            before.status,
            &before.owner,
            before.fence,
            &before.stop_reason
        ),
        "cancelling elsewhere changes nothing"
    );
    ensure!(guard.loss().is_none(), "the holder's run goes on");
    ensure_eq!(holder.cancel(id).await, CancelOutcome::Cancelled);
    ensure!(guard.token().is_cancelled(), "the run's token fired");
    ensure_eq!(guard.loss(), Some(LossCause::Cancelled));
    ensure!(!holder.holds(id), "a cancelled run is no longer held");
    let record = get(&ctx, id).await?;
    ensure_eq!(record.status, Status::Failed, "a pending run fails");
    ensure_eq!(record.stop_reason.as_deref(), Some(CANCELLED));
    ensure_eq!(record.fence, guard.fence());
    ensure_eq!(
        holder.cancel(id).await,
        CancelOutcome::NotCancellable {
            status: Some(Status::Failed)
        }
    );
    shutdown_drained(holder).await?;
    shutdown_drained(other).await
}
