//! Conformance cases: the reconciler configured by record kind
//! ([`ReconcileKinds`], [contract §12](tenure_lease_core::contract)).
//!
//! Hosts keep internal reservations (say kind `checkpoint_write`) beside
//! the runs their users see. A kind released silently is taken over and
//! failed with stop reason [`RELEASED`], and the recovery callback never
//! hears of it; a recovered kind reaches the callback; a kind in neither
//! list follows the configured default. The cases check each on every
//! backend, through the store's own records, and that every orphan is
//! finalised under a greater fence with its scope free.
//!
//! [`ReconcileKinds`]: tenure_keeper::ReconcileKinds

use std::time::Duration;

use tenure_keeper::{
    Keeper, KeeperConfig, OrphanHandling, ReconcileReport, Recovered, ORPHANED, RELEASED,
    RELEASED_ERROR,
};
use tenure_lease_core::{AdmitRequest, LeaseRecord, LeaseStore, Status};
use tokio::sync::mpsc;

use super::keeper::{config, shutdown_drained, GHOST};
use crate::cases::util::{admit, ensure_scopes_free, expire, get, SHORT_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The internal reservations' kind.
const INTERNAL: &str = "checkpoint_write";
/// The kind of the runs users see.
const USER_RUN: &str = "user_run";
/// A kind no keeper of these cases lists.
const UNLISTED: &str = "nightly_batch";

/// Starts a keeper with `config` whose recovery callback forwards the ids
/// it is called with; answers the keeper and the ids' receiver.
fn start_recording<S: LeaseStore + 'static>(
    ctx: &Ctx<S>,
    config: KeeperConfig,
) -> Result<(Keeper, mpsc::UnboundedReceiver<String>), Failure> {
    let (sender, called) = mpsc::unbounded_channel();
    let keeper = Keeper::builder(ctx.store.clone(), config)
        .on_recovered(move |recovered: Recovered| {
            let sent = sender
                .send(recovered.record.id)
                .map_err(|_| "the case stopped listening");
            async move { sent }
        })
        .start()
        .map_err(|error| Failure(format!("the keeper did not start: {error}")))?;
    Ok((keeper, called))
}

/// Admits one [`GHOST`] orphan per `(id, kind)`, each on its own scope, and
/// moves store time past their leases; answers them in that order.
async fn orphans<S: LeaseStore>(
    ctx: &Ctx<S>,
    runs: &[(&str, &str)],
) -> Result<Vec<LeaseRecord>, Failure> {
    let mut admitted = Vec::with_capacity(runs.len());
    for (id, kind) in runs {
        let request = AdmitRequest::new(*id, GHOST)
            .kind(*kind)
            .ttl(SHORT_TTL)
            .scope(scope_of(id));
        admitted.push(admit(ctx, request).await?);
    }
    if let Some(last) = admitted.last() {
        expire(ctx, last, Duration::ZERO).await?;
    }
    Ok(admitted)
}

fn scope_of(id: &str) -> String {
    format!("kinds-case:{id}")
}

/// Runs one pass, failing the case unless it ran.
async fn pass(keeper: &Keeper) -> Result<ReconcileReport, Failure> {
    keeper
        .reconcile_now()
        .await
        .map_err(|error| Failure(format!("reconcile_now: {error}")))
}

/// The ids the callback was called with so far, sorted.
fn called_with(called: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut ids = Vec::new();
    while let Ok(id) = called.try_recv() {
        ids.push(id);
    }
    ids.sort();
    ids
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort();
    ids
}

/// Fails the case unless `orphan` now reads as finalised by `keeper`:
/// `Failed` with `stop_reason` (and, released, [`RELEASED_ERROR`]), the
/// keeper's, a greater fence, its scope free.
async fn ensure_finalised<S: LeaseStore>(
    ctx: &Ctx<S>,
    keeper: &Keeper,
    orphan: &LeaseRecord,
    stop_reason: &str,
) -> CaseResult {
    let record = get(ctx, &orphan.id).await?;
    ensure_eq!(record.status, Status::Failed, "{}: finalised", orphan.id);
    ensure_eq!(
        record.stop_reason.as_deref(),
        Some(stop_reason),
        "{}",
        orphan.id
    );
    if stop_reason == RELEASED {
        ensure_eq!(
            record.error.as_deref(),
            Some(RELEASED_ERROR),
            "{}",
            orphan.id
        );
    }
    ensure_eq!(
        record.owner.as_deref(),
        Some(keeper.worker_id()),
        "{}",
        orphan.id
    );
    ensure!(
        record.fence > orphan.fence,
        "{}: taken over under a greater fence",
        orphan.id
    );
    ensure_eq!(record.kind, orphan.kind, "the kind is kept");
    ensure_scopes_free(
        ctx,
        &format!("probe-{}", orphan.id),
        &[&scope_of(&orphan.id)],
    )
    .await
}

/// An orphan of a kind released silently is finalised (`Failed`, stop
/// reason [`RELEASED`]) and the callback never sees it; an orphan of a
/// recovered kind and one of an unlisted kind (default: recover) reach the
/// callback and are failed as orphans.
pub async fn keeper_reconciler_releases_silent_kinds_and_recovers_the_rest<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let (keeper, mut called) = start_recording(
        &ctx,
        config()
            .recover_kinds([USER_RUN])
            .release_kinds_silently([INTERNAL]),
    )?;
    let runs = orphans(
        &ctx,
        &[
            ("kinds-internal", INTERNAL),
            ("kinds-user", USER_RUN),
            ("kinds-unlisted", UNLISTED),
        ],
    )
    .await?;
    let report = pass(&keeper).await?;
    ensure_eq!(
        report.released,
        vec!["kinds-internal".to_owned()],
        "{report:?}"
    );
    ensure_eq!(
        sorted(&report.recovered),
        vec!["kinds-unlisted".to_owned(), "kinds-user".to_owned()],
        "{report:?}"
    );
    ensure!(report.callback_failed.is_empty(), "{report:?}");
    ensure_eq!(
        called_with(&mut called),
        vec!["kinds-unlisted".to_owned(), "kinds-user".to_owned()],
        "the callback saw the recovered kinds only"
    );
    ensure_finalised(&ctx, &keeper, &runs[0], RELEASED).await?;
    for recovered in &runs[1..] {
        ensure_finalised(&ctx, &keeper, recovered, ORPHANED).await?;
    }
    let again = pass(&keeper).await?;
    ensure!(
        again.released.is_empty() && again.recovered.is_empty(),
        "finalised orphans are not met again: {again:?}"
    );
    ensure!(called_with(&mut called).is_empty(), "no more callbacks");
    shutdown_drained(keeper).await
}

/// With unlisted kinds released silently, only the kinds listed as
/// recovered reach the callback; every other orphan is released.
pub async fn keeper_reconciler_can_release_every_unlisted_kind<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let (keeper, mut called) = start_recording(
        &ctx,
        config()
            .recover_kinds([USER_RUN])
            .unlisted_kinds(OrphanHandling::ReleaseSilently),
    )?;
    let runs = orphans(
        &ctx,
        &[
            ("kinds-default-internal", INTERNAL),
            ("kinds-default-user", USER_RUN),
            ("kinds-default-unlisted", UNLISTED),
        ],
    )
    .await?;
    let report = pass(&keeper).await?;
    ensure_eq!(
        sorted(&report.released),
        vec![
            "kinds-default-internal".to_owned(),
            "kinds-default-unlisted".to_owned()
        ],
        "{report:?}"
    );
    ensure_eq!(
        report.recovered,
        vec!["kinds-default-user".to_owned()],
        "{report:?}"
    );
    ensure_eq!(
        called_with(&mut called),
        vec!["kinds-default-user".to_owned()],
        "the callback saw the recovered kind only"
    );
    ensure_finalised(&ctx, &keeper, &runs[0], RELEASED).await?;
    ensure_finalised(&ctx, &keeper, &runs[1], ORPHANED).await?;
    ensure_finalised(&ctx, &keeper, &runs[2], RELEASED).await?;
    shutdown_drained(keeper).await
}
