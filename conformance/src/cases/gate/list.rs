//! Listing gates: `list_fences` names every gate kept, in byte order of its
//! resource, with the highest fence it accepted and when; pages by `after`
//! and `limit` exactly; leaves out purged gates; refuses bad input.

use std::time::Duration;

use tenure_lease_core::backend::validate::{MAX_LIST_LIMIT, MAX_NAME_BYTES};
use tenure_lease_core::{FenceStore, GateRecord, LeaseStore};

use super::{accepted, refused};
use crate::cases::util::expect_invalid;
use crate::harness::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

/// Names that sort differently by bytes, by characters and by case, with
/// the separators ids and scopes use, and the longest a name may be.
fn tricky_resources() -> Vec<String> {
    vec![
        "B".to_owned(),
        "a".to_owned(),
        "a b".to_owned(),
        "a#1".to_owned(),
        "a/b?c=d&e".to_owned(),
        "z".to_owned(),
        "é".to_owned(),
        "名前".to_owned(),
        "r".repeat(MAX_NAME_BYTES),
    ]
}

/// Every gate accepted is listed once, in byte order of its resource, with
/// its highest fence and the time of its last accepted check (by the
/// store's clock, between the reads around it); a refused check changes
/// neither.
pub async fn gate_list_names_every_gate_in_name_order<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    ensure_eq!(
        ctx.store.list_fences(None, MAX_LIST_LIMIT).await?,
        Vec::new(),
        "a new store keeps no gate"
    );
    let mut expected = Vec::new();
    for (index, resource) in tricky_resources().into_iter().enumerate() {
        let fence = 10 + index as u64;
        let before = ctx.store.now().await?;
        accepted(&ctx, &resource, fence - 5).await?;
        accepted(&ctx, &resource, fence).await?;
        let after = ctx.store.now().await?;
        refused(&ctx, &resource, fence - 1, fence).await?;
        expected.push((resource, fence, before, after));
    }
    expected.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let listed = ctx.store.list_fences(None, MAX_LIST_LIMIT).await?;
    ensure_eq!(
        names(&listed),
        expected
            .iter()
            .map(|(resource, ..)| resource.clone())
            .collect::<Vec<_>>(),
        "every gate, in byte order of its resource"
    );
    for (gate, (resource, fence, before, after)) in listed.iter().zip(&expected) {
        ensure_eq!(gate.fence, *fence, "the highest fence of {resource:?}");
        ensure!(
            *before <= gate.checked_at && gate.checked_at <= *after,
            "{resource:?} last accepted at {} (a refused check is no use), not between {before} \
             and {after}",
            gate.checked_at
        );
    }
    Ok(())
}

/// `after` and `limit` page through the gates exactly: `limit` gates at
/// most, each sorting after `after` (a name that is no gate included), and
/// an empty page past the last.
pub async fn gate_list_pages_by_after_and_limit<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    let resources = ["gate-1", "gate-2", "gate-3", "gate-4", "gate-5"];
    for (index, resource) in resources.iter().enumerate() {
        accepted(&ctx, resource, index as u64 + 1).await?;
    }
    let first = ctx.store.list_fences(None, 2).await?;
    ensure_eq!(names(&first), ["gate-1", "gate-2"], "the first page of 2");
    let second = ctx.store.list_fences(Some("gate-2"), 2).await?;
    ensure_eq!(
        names(&second),
        ["gate-3", "gate-4"],
        "the page after gate-2"
    );
    let last = ctx.store.list_fences(Some("gate-4"), 2).await?;
    ensure_eq!(names(&last), ["gate-5"], "the last page, short");
    ensure_eq!(
        ctx.store.list_fences(Some("gate-5"), 2).await?,
        Vec::new(),
        "nothing after the last gate"
    );
    let between = ctx.store.list_fences(Some("gate-3a"), 1).await?;
    ensure_eq!(names(&between), ["gate-4"], "after a name that is no gate");
    let exact = ctx.store.list_fences(None, resources.len()).await?;
    ensure_eq!(names(&exact), resources, "a limit of exactly every gate");
    Ok(())
}

/// A purged gate is no longer listed; a kept one still is.
pub async fn gate_list_leaves_out_purged_gates<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    accepted(&ctx, "old", 3).await?;
    accepted(&ctx, "older", 4).await?;
    ensure_eq!(
        ctx.store.purge_fences(Duration::ZERO).await?,
        2,
        "a zero retention purges every gate"
    );
    ensure_eq!(
        ctx.store.list_fences(None, MAX_LIST_LIMIT).await?,
        Vec::new(),
        "purged gates are not listed"
    );
    accepted(&ctx, "new", 1).await?;
    ensure_eq!(
        names(&ctx.store.list_fences(None, MAX_LIST_LIMIT).await?),
        ["new"],
        "a gate raised after the purge is"
    );
    Ok(())
}

/// A limit of 0 or above the bound, and an `after` that is no valid name,
/// are refused; the bound itself and the longest name are accepted.
pub async fn gate_list_invalid_input_is_rejected<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    accepted(&ctx, "kept", 2).await?;
    expect_invalid(
        ctx.store.list_fences(None, 0).await,
        "limit",
        "a limit of 0",
    )?;
    expect_invalid(
        ctx.store.list_fences(None, MAX_LIST_LIMIT + 1).await,
        "limit",
        "a limit above the bound",
    )?;
    let long = "r".repeat(MAX_NAME_BYTES + 1);
    for (after, what) in [
        ("", "an empty name"),
        (long.as_str(), "an oversized name"),
        ("a\nb", "a name with a control character"),
    ] {
        expect_invalid(
            ctx.store.list_fences(Some(after), 1).await,
            "resource",
            what,
        )?;
    }
    ensure_eq!(
        names(&ctx.store.list_fences(None, MAX_LIST_LIMIT).await?),
        ["kept"],
        "the bound is accepted"
    );
    ensure_eq!(
        ctx.store
            .list_fences(Some(&"r".repeat(MAX_NAME_BYTES)), 1)
            .await?,
        Vec::new(),
        "the longest name is accepted as `after`"
    );
    Ok(())
}

fn names(gates: &[GateRecord]) -> Vec<String> {
    gates.iter().map(|gate| gate.resource.clone()).collect()
}
