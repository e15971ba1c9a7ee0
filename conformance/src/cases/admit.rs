//! Conformance cases: admit.
use lease_core::{clock, AdmitRequest, Status};
use serde_json::json;

use super::util::{admit, get, LONG_TTL};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};
use lease_core::LeaseStore;

/// A new record is `Pending`, owned by the requester, holds its scopes, has a
/// fence and a lease of `now + ttl` in store time, and reads back unchanged.
pub async fn admit_creates_pending_record<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let before = ctx.store.now().await?;
    let record = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scopes(["thread:1", "account:7"])
            .kind("checkpoint_write")
            .ttl(LONG_TTL)
            .metadata(json!({ "step": 3 })),
    )
    .await?;
    let after = ctx.store.now().await?;
    ensure_eq!(record.status, Status::Pending);
    ensure_eq!(record.owner.as_deref(), Some("worker-a"));
    ensure_eq!(record.kind, "checkpoint_write");
    ensure_eq!(
        record.scopes.iter().map(String::as_str).collect::<Vec<_>>(),
        vec!["account:7", "thread:1"]
    );
    ensure!(record.fence > 0, "fences start above zero");
    ensure!(
        before <= record.created_at && record.created_at <= after,
        "created_at is store time"
    );
    ensure_eq!(
        record.lease_expires_at,
        Some(clock::add(record.created_at, LONG_TTL))
    );
    ensure_eq!(record.metadata.get("step"), Some(&json!(3)));
    ensure_eq!(
        get(&ctx, "op-1").await?,
        record,
        "get returns the record as admitted"
    );
    Ok(())
}

/// TODO: describe.
pub async fn admit_without_ttl_has_no_lease<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_duplicate_id_is_already_exists<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_reject_conflicts_with_any_active_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_reject_ignores_finished_holders<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_blocked_by_valid_lease_of_other<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_blocked_within_grace<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_takes_expired_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_takes_no_lease_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_takes_own_holder<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_rollback_blocker_first<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_rollback_blocker_middle<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_rollback_blocker_last<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_multi_scope_all_or_nothing<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_empty_scopes_never_conflict<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_interrupt_releases_every_scope_of_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn admit_kind_is_carried_through_answers<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn race_admissions_one_scope_exactly_one_admitted<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn race_admissions_opposite_scope_orders_never_deadlock<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn race_interrupt_admissions_answer_admitted_or_conflict<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}
