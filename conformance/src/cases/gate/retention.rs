//! Retention of gates: `purge_fences` removes the gates unused for at least
//! the retention, by the store's clock, and leaves the others working.

use std::time::Duration;

use tenure_lease_core::{clock, FenceStore, LeaseStore};

use super::{accepted, refused};
use crate::cases::util::{micro_before, NEEDS_MANUAL_CLOCK};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The first retention tried on a real clock, doubled after each try whose
/// timing proved nothing.
const RETENTION: Duration = Duration::from_millis(250);

/// How many tries the retention case gets (250 ms up to 4 s).
const TRIES: u32 = 5;

/// Gates last accepted more than a retention ago go, gates accepted since
/// stay; a refused check does not keep a gate, an accepted equal one does.
/// Afterwards a purged resource accepts any fence (the trade-off of
/// retention), a kept one still refuses lower fences, and a retention
/// longer than every gate's age purges nothing.
///
/// On a real clock the case reads the store's clock around each step, and
/// asserts a gate kept only when the time from its check to the end of the
/// purge was below the retention; otherwise it tries again on fresh
/// resources with twice the retention.
pub async fn gate_purge_removes_only_gates_unused_past_retention<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut retention = RETENTION;
    for attempt in 0..TRIES {
        if purge_round(&ctx, &format!("try-{attempt}:"), retention).await? {
            return Ok(());
        }
        tracing::debug!(?retention, "a purge round came too late to prove anything");
        retention *= 2;
    }
    Err(Failure(format!(
        "in {TRIES} tries, no purge ran within the retention of the gates it should keep \
         (the last {:?}): the store or the machine is too slow for this case",
        retention / 2
    )))
}

/// One try; `Ok(false)` when the timing proved nothing.
async fn purge_round<S: LeaseStore + FenceStore>(
    ctx: &Ctx<S>,
    tag: &str,
    retention: Duration,
) -> Result<bool, Failure> {
    let [old, refused_only, renewed, recent] =
        ["old", "refused-only", "renewed", "recent"].map(|name| format!("{tag}{name}"));
    accepted(ctx, &old, 5).await?;
    accepted(ctx, &refused_only, 9).await?;
    accepted(ctx, &renewed, 4).await?;
    let old_checked = ctx.store.now().await?;
    ensure_eq!(
        ctx.store
            .purge_fences(Duration::from_secs(24 * 3600))
            .await?,
        0,
        "no gate is a day old"
    );

    ctx.advance_past(clock::add(old_checked, retention)).await?;
    let recent_from = ctx.store.now().await?;
    refused(ctx, &refused_only, 2, 9).await?;
    accepted(ctx, &renewed, 4).await?;
    accepted(ctx, &recent, 3).await?;
    let purged = ctx.store.purge_fences(retention).await?;
    let purge_ended = ctx.store.now().await?;
    if clock::until(recent_from, purge_ended) >= retention {
        // The kept gates may have aged past the retention by the purge.
        return Ok(false);
    }
    ensure_eq!(
        purged,
        2,
        "the gates last accepted before the retention, and only those, are purged"
    );
    for gone in [&old, &refused_only] {
        ensure_eq!(
            ctx.store.highest_fence(gone).await?,
            None,
            "{gone:?} is purged"
        );
    }
    ensure_eq!(ctx.store.highest_fence(&renewed).await?, Some(4));
    ensure_eq!(ctx.store.highest_fence(&recent).await?, Some(3));
    accepted(ctx, &old, 1).await?;
    refused(ctx, &recent, 2, 3).await?;
    refused(ctx, &renewed, 3, 4).await?;
    Ok(true)
}

/// A higher fence accepted refreshes a gate as an equal one does: a gate
/// first accepted more than a retention ago and raised since is kept by
/// the purge, at its new fence; one only refused since goes. (A store that
/// stamps a gate when it creates it, or only on an equal fence, purges the
/// raised gate.) On a real clock it tries again, with twice the retention,
/// when its timing proved nothing.
pub async fn gate_a_raised_fence_refreshes_the_gate<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut retention = RETENTION;
    for attempt in 0..TRIES {
        let [raised, refused_only] =
            ["raised", "refused-only"].map(|name| format!("try-{attempt}:{name}"));
        accepted(&ctx, &raised, 5).await?;
        accepted(&ctx, &refused_only, 5).await?;
        let first_checked = ctx.store.now().await?;
        ctx.advance_past(clock::add(first_checked, retention))
            .await?;
        let raised_at = ctx.store.now().await?;
        accepted(&ctx, &raised, 6).await?;
        refused(&ctx, &refused_only, 4, 5).await?;
        let purged = ctx.store.purge_fences(retention).await?;
        if clock::until(raised_at, ctx.store.now().await?) >= retention {
            retention *= 2;
            continue;
        }
        ensure_eq!(
            ctx.store.highest_fence(&raised).await?,
            Some(6),
            "a gate raised within the retention is kept, at its new fence"
        );
        ensure_eq!(
            ctx.store.highest_fence(&refused_only).await?,
            None,
            "a gate only refused since its check a retention ago is purged"
        );
        ensure_eq!(purged, 1, "the purge removes the refused-only gate alone");
        return Ok(());
    }
    Err(Failure(format!(
        "in {TRIES} tries, no purge ran within the retention of the gate it should keep \
         (the last {:?}): the store or the machine is too slow for this case",
        retention / 2
    )))
}

/// A gate whose last accepted check is exactly the retention ago is
/// purged; one a microsecond younger is not. Needs a clock the kit can
/// place.
pub async fn gate_purge_boundary_is_exact_to_the_microsecond<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let retention = Duration::from_secs(60);
    let checked = ctx.store.now().await?;
    accepted(&ctx, "edge", 6).await?;
    manual.advance_to(micro_before(clock::add(checked, retention)));
    ensure_eq!(
        ctx.store.purge_fences(retention).await?,
        0,
        "a microsecond short of the retention"
    );
    manual.advance_to(clock::add(checked, retention));
    ensure_eq!(
        ctx.store.purge_fences(retention).await?,
        1,
        "exactly at the retention"
    );
    ensure!(
        ctx.store.highest_fence("edge").await?.is_none(),
        "the purged gate is gone"
    );
    Ok(())
}
