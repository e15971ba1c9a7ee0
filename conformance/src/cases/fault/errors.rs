//! Fault cases on the lease side: the error rules of
//! [contract §10](tenure_lease_core::contract) and the keeper's answer to
//! errors (§12), with faults injected around the case's store.
//!
//! A lost reply is the hard case for a caller: the write happened, the
//! caller saw an `Err`. The contract's answer is that an `Err` is never an
//! outcome (the keeper neither renews nor loses on it), and that the next
//! call resolves it: a retried admission answers `AlreadyExists` and finds
//! the record whole, a retried transition answers the rejection its own
//! success causes, a takeover whose answer was lost is read back with `get`.
//! A call cut off before it reached the store (hung, then dropped by a time
//! limit) must have changed nothing.
//!
//! Keeper cases run in real tokio time with a short ttl and wait on signals
//! (the guard's token) under generous bounds: a loaded machine makes them
//! slower, never wrong, and nothing asserts on speed. The one timing check
//! is a lower bound: a fail-stop never comes before the confirmed deadline.

use std::sync::Arc;
use std::time::Duration;

use tenure_keeper::{AdmitOutcome, Keeper, KeeperConfig, LossCause, RunGuard};
use tenure_lease_core::layer::{Fault, Faults, LayerExt};
use tenure_lease_core::{
    AdmitRequest, ErrorKind, LeaseStore, LossReason, Renewal, Status, StatusChange, Timestamp,
    Transition, TransitionRejection,
};
use tokio::time::Instant;

use super::{expect_kind, expect_unknown, faulty, Faulty};
use crate::cases::util::{
    admit, claim_of, ensure_scope_held_by, ensure_scopes_free, expect_lost, get, LONG_TTL,
    SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The keepers' lease: short, so a fail-stop comes within seconds.
const TTL: Duration = Duration::from_secs(1);
/// The keepers' lease where they must ride an outage out: long against the
/// outage (two failed beats), so only a machine starved for most of it
/// makes the keeper fail-stop.
const RIDE_TTL: Duration = Duration::from_secs(3);
/// The keepers' beat.
const BEAT: Duration = Duration::from_millis(100);
/// The longest a case waits for a keeper's signal.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a case looks for an effect nothing signals (a call count, a
/// renewed expiry).
const POLL: Duration = Duration::from_millis(10);
/// The operations a keeper's heartbeat renews with.
const RENEWALS: [&str; 2] = ["renew", "renew_many"];

/// Starts a keeper with `ttl` over `store`, its reconciler off. Its store
/// calls may take as long as a loaded server needs (a renewal is bounded
/// by the lease's confirmed deadline all the same): only the injected
/// faults fail them, never the machine's load (the default bound is the
/// ttl, one second here, which an admission on a busy server can exceed).
fn start<S: LeaseStore + 'static>(store: &Faulty<S>, ttl: Duration) -> Result<Keeper, Failure> {
    let config = KeeperConfig::with_ttl(ttl)
        .renew_interval(BEAT)
        .store_timeout(SIGNAL_TIMEOUT)
        .auto_reconcile(false);
    Keeper::builder(store.clone(), config)
        .start()
        .map_err(|error| Failure(format!("the keeper did not start: {error}")))
}

/// Admits `id` through `keeper`, failing the case unless it is admitted.
async fn hold(keeper: &Keeper, id: &str) -> Result<RunGuard, Failure> {
    match keeper.admit(keeper.request(id)).await {
        Ok(AdmitOutcome::Admitted { guard, .. }) => Ok(guard),
        other => Err(Failure(format!(
            "expected {id:?} to be admitted, got {other:?}"
        ))),
    }
}

/// Makes every renewal meet `fault`.
fn fail_renewals(faults: &Faults, fault: Fault) {
    for operation in RENEWALS {
        faults.inject(operation, None, fault);
    }
}

/// How many renewals the keeper has sent so far.
fn renewals_sent(faults: &Faults) -> usize {
    RENEWALS
        .iter()
        .map(|operation| faults.calls(operation))
        .sum()
}

/// Waits for `guard`'s run to be stopped; answers why.
async fn stopped(guard: &RunGuard) -> Result<Option<LossCause>, Failure> {
    tokio::time::timeout(SIGNAL_TIMEOUT, guard.token().cancelled())
        .await
        .map_err(|_| {
            Failure(format!(
                "{:?} was not stopped within {SIGNAL_TIMEOUT:?}",
                guard.id()
            ))
        })?;
    Ok(guard.loss())
}

/// Shuts `keeper` down, failing the case unless nothing was left running.
async fn shut_down(keeper: Keeper) -> CaseResult {
    let report = keeper.shutdown(Instant::now() + SIGNAL_TIMEOUT).await;
    ensure!(
        report.drained && report.stopped_runs.is_empty(),
        "nothing was left running: {report:?}"
    );
    Ok(())
}

/// The record's lease expiry, failing the case when it has none.
fn expiry_of(record: &tenure_lease_core::LeaseRecord) -> Result<Timestamp, Failure> {
    record
        .lease_expires_at
        .ok_or_else(|| Failure(format!("record {:?} has no lease", record.id)))
}

/// Runs a keeper whose renewals all meet `fault` until it stops the run;
/// checks the stop is the fail-stop at the confirmed deadline (never
/// earlier, never a loss the store did not answer) and that the keeper
/// wrote nothing over the record. Answers the record's expiry when the
/// fault began, and the record at the end.
async fn fail_stop_under<S: LeaseStore + 'static>(
    ctx: &Ctx<S>,
    id: &str,
    fault: Fault,
) -> Result<(Timestamp, tenure_lease_core::LeaseRecord), Failure> {
    let store = faulty(ctx);
    let keeper = start(&store, TTL)?;
    let guard = hold(&keeper, id).await?;
    let admitted = get(ctx, id).await?;
    let deadline = guard.confirmed_deadline();
    fail_renewals(store.hook(), fault);
    // Store time moves on, so a renewal applied from now on shows.
    ctx.advance(Duration::from_millis(10)).await?;
    let cause = stopped(&guard).await?;
    ensure_eq!(
        cause,
        Some(LossCause::DeadlinePassed),
        "a renewal that answered Err is neither a loss nor a renewal: the run stops at its \
         confirmed deadline"
    );
    if let Some(deadline) = deadline {
        ensure!(
            Instant::now() >= deadline,
            "the fail-stop never comes before the confirmed deadline"
        );
    }
    ensure!(!keeper.holds(id), "a fail-stopped run is no longer held");
    let after = get(ctx, id).await?;
    ensure_eq!(
        (after.status, after.owner.as_deref(), after.fence),
        (admitted.status, admitted.owner.as_deref(), admitted.fence),
        "the keeper wrote nothing over the record it stopped holding"
    );
    shut_down(keeper).await?;
    Ok((expiry_of(&admitted)?, after))
}

/// A keeper whose renewals all fail (`Unavailable`) keeps the run while its
/// confirmed deadline is ahead and fail-stops it when it passes
/// (`DeadlinePassed`, not `Lost`); it writes nothing over the record.
pub async fn fault_keeper_fail_stops_at_its_deadline_when_renewals_fail<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    fail_stop_under(&ctx, "fault-renewals-fail", Fault::Unavailable)
        .await
        .map(drop)
}

/// Renewals that the store applies but whose replies are lost never count
/// as confirmed: the store's lease moves on, yet the keeper fail-stops at
/// its confirmed deadline all the same.
pub async fn fault_keeper_never_counts_a_lost_renewal_reply_as_renewed<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let (expiry, after) =
        fail_stop_under(&ctx, "fault-renewal-replies-lost", Fault::ReplyLost).await?;
    ensure!(
        expiry_of(&after)? > expiry,
        "the renewals whose replies were lost were applied: expiry {:?} after {expiry}",
        after.lease_expires_at
    );
    Ok(())
}

/// An outage of a couple of beats, shorter than the ttl, is ridden out: the
/// run stays held, and once the store answers again the heartbeat renews it.
pub async fn fault_keeper_rides_through_a_short_outage<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-short-outage";
    let store = faulty(&ctx);
    let keeper = start(&store, RIDE_TTL)?;
    let guard = hold(&keeper, id).await?;
    let deadline = guard.confirmed_deadline();
    let expiry = expiry_of(&get(&ctx, id).await?)?;
    let sent = renewals_sent(store.hook());
    fail_renewals(store.hook(), Fault::Unavailable);
    let give_up = Instant::now() + SIGNAL_TIMEOUT;
    while renewals_sent(store.hook()) < sent + 2 {
        ensure!(
            Instant::now() < give_up,
            "the keeper sent no renewals within {SIGNAL_TIMEOUT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    let cleared = Instant::now();
    store.hook().clear();
    if deadline.is_some_and(|deadline| deadline <= cleared) {
        // The machine was starved for the whole ttl: the fail-stop is right.
        ensure_eq!(guard.loss(), Some(LossCause::DeadlinePassed));
        return shut_down(keeper).await;
    }
    ctx.advance(Duration::from_millis(10)).await?;
    loop {
        ensure_eq!(guard.loss(), None, "the run is held through the outage");
        if expiry_of(&get(&ctx, id).await?)? > expiry {
            break;
        }
        ensure!(
            Instant::now() < give_up,
            "no renewal landed within {SIGNAL_TIMEOUT:?} after the outage"
        );
        tokio::time::sleep(POLL).await;
    }
    ensure!(keeper.holds(id), "the run is still held");
    guard
        .complete(StatusChange::succeeded())
        .await
        .map_err(|error| Failure(format!("complete after the outage: {error}")))?;
    shut_down(keeper).await
}

/// An admission whose reply was lost is resolved by the retry: it answers
/// `AlreadyExists`, and the record is whole (every scope held and listed,
/// metadata and owner as asked).
pub async fn fault_admission_reply_lost_retry_answers_already_exists<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-admitted-unseen";
    let scopes = ["fault-scope-a", "fault-scope-b", "fault-scope-c"];
    let metadata = serde_json::json!({ "attempt": 1, "tags": ["x"] });
    let request = AdmitRequest::new(id, "worker-a")
        .scopes(scopes)
        .ttl(LONG_TTL)
        .metadata(metadata.clone());
    let store = faulty(&ctx);
    store.hook().inject("admit", Some(id), Fault::ReplyLost);
    expect_unknown(
        store.admit(&request).await,
        "the admission whose reply was lost",
    )?;
    store.hook().clear();
    expect_kind(
        store.admit(&request).await,
        ErrorKind::AlreadyExists,
        "the retried admission",
    )?;
    let record = get(&ctx, id).await?;
    ensure_eq!(record.status, Status::Pending);
    ensure_eq!(record.owner.as_deref(), Some("worker-a"));
    ensure_eq!(
        record.scopes,
        scopes.iter().map(|scope| (*scope).to_owned()).collect(),
        "every scope was taken"
    );
    ensure_eq!(serde_json::Value::Object(record.metadata.clone()), metadata);
    for scope in scopes {
        ensure_eq!(
            ctx.store.list_by_scope(scope).await?,
            vec![record.clone()],
            "list_by_scope({scope:?}) lists the record"
        );
        ensure_scope_held_by(&ctx, scope, id).await?;
    }
    Ok(())
}

/// An admission that hung and was cut off by a time limit never reached the
/// store: it changed nothing, and the same admission then goes through.
pub async fn fault_timed_out_admission_changed_nothing<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-hung-admission";
    let scope = "fault-hung-scope";
    let request = AdmitRequest::new(id, "worker-a").scope(scope).ttl(LONG_TTL);
    let faults = faulty(&ctx);
    faults.hook().inject("admit", Some(id), Fault::Hang);
    let store = Arc::clone(&faults).with_timeout(Duration::from_millis(100));
    expect_kind(
        store.admit(&request).await,
        ErrorKind::Timeout,
        "the hung admission",
    )?;
    ensure_eq!(
        faults.hook().hangs_dropped(),
        1,
        "the hung call was dropped"
    );
    faults.hook().release_hangs();
    ensure_eq!(ctx.store.get(id).await?, None, "nothing was admitted");
    ensure_eq!(ctx.store.list_by_scope(scope).await?, vec![]);
    ensure_scopes_free(&ctx, "fault-hung-probe", &[scope]).await?;
    let probe = get(&ctx, "fault-hung-probe").await?;
    ctx.store
        .transition(&claim_of(&probe)?, &StatusChange::failed("probe done"))
        .await?;
    admit(&ctx, request).await.map(drop)
}

/// A takeover whose reply was lost won: `get` reads the claimer as owner
/// under a greater fence, that claim renews, the old one is lost, and a
/// retried takeover does not take it again.
pub async fn fault_takeover_reply_lost_is_read_back_by_get<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-taken-unseen";
    let orphan = admit(&ctx, AdmitRequest::new(id, "worker-gone")).await?;
    let store = faulty(&ctx);
    store
        .hook()
        .inject("claim_for_takeover", Some(id), Fault::ReplyLost);
    let request = tenure_lease_core::TakeoverRequest::adopt(id, "worker-b", Some(LONG_TTL));
    expect_unknown(
        store.claim_for_takeover(&request).await,
        "the takeover whose reply was lost",
    )?;
    store.hook().clear();
    let taken = get(&ctx, id).await?;
    ensure_eq!(
        taken.owner.as_deref(),
        Some("worker-b"),
        "the takeover landed"
    );
    ensure_eq!(taken.status, Status::Running, "adopted");
    ensure!(taken.fence > orphan.fence, "under a greater fence");
    let retried = store.claim_for_takeover(&request).await?;
    ensure!(
        matches!(retried, tenure_lease_core::Takeover::NotTaken(_)),
        "a retried takeover does not take a valid lease again: {retried:?}"
    );
    ensure_eq!(get(&ctx, id).await?, taken, "the retry changed nothing");
    ensure!(
        matches!(
            ctx.store.renew(&claim_of(&taken)?, LONG_TTL).await?,
            Renewal::Renewed { .. }
        ),
        "the claim read back holds the record"
    );
    expect_lost(&ctx, &claim_of(&orphan)?, LossReason::OwnerChanged).await
}

/// A transition whose reply was lost was applied: the retry answers the
/// rejection its own success causes, the record is finished and its scope
/// free.
pub async fn fault_transition_reply_lost_retry_answers_terminal<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-finished-unseen";
    let scope = "fault-finished-scope";
    let record = admit(
        &ctx,
        AdmitRequest::new(id, "worker-a").scope(scope).ttl(LONG_TTL),
    )
    .await?;
    let claim = claim_of(&record)?;
    let store = faulty(&ctx);
    store
        .hook()
        .inject("transition", Some(id), Fault::ReplyLost);
    let change = StatusChange::succeeded();
    expect_unknown(
        store.transition(&claim, &change).await,
        "the transition whose reply was lost",
    )?;
    store.hook().clear();
    ensure_eq!(
        store.transition(&claim, &change).await?,
        Transition::Rejected(TransitionRejection::Terminal(Status::Succeeded)),
        "the retry answers the rejection the first write's success causes"
    );
    let finished = get(&ctx, id).await?;
    ensure_eq!(finished.status, Status::Succeeded);
    ensure_eq!(
        (finished.owner.as_deref(), finished.fence),
        (record.owner.as_deref(), record.fence),
        "owner and fence stay"
    );
    ensure_scopes_free(&ctx, "fault-finished-probe", &[scope]).await
}

/// A renewal whose reply was lost was applied: the record's lease reads
/// extended, and the retry renews again.
pub async fn fault_renew_reply_lost_extended_the_lease<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let id = "fault-renewed-unseen";
    let record = admit(&ctx, AdmitRequest::new(id, "worker-a").ttl(SHORT_TTL)).await?;
    let claim = claim_of(&record)?;
    let store = faulty(&ctx);
    store.hook().inject("renew", Some(id), Fault::ReplyLost);
    let before = ctx.store.now().await?;
    expect_unknown(
        store.renew(&claim, LONG_TTL).await,
        "the renewal whose reply was lost",
    )?;
    store.hook().clear();
    let renewed = get(&ctx, id).await?;
    ensure!(
        expiry_of(&renewed)? >= tenure_lease_core::clock::add(before, LONG_TTL),
        "the lost renewal was applied: expiry {:?}, store time before it {before}",
        renewed.lease_expires_at
    );
    ensure_eq!(
        (renewed.owner.as_deref(), renewed.fence, renewed.status),
        (record.owner.as_deref(), record.fence, record.status),
        "a renewal changes nothing but the lease"
    );
    ensure!(
        matches!(
            store.renew(&claim, LONG_TTL).await?,
            Renewal::Renewed { .. }
        ),
        "the retry renews again"
    );
    Ok(())
}
