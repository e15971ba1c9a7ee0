//! Conformance cases: listing.
use crate::harness::{CaseResult, Ctx, Failure};
use lease_core::LeaseStore;

/// TODO: describe.
pub async fn list_expired_respects_grace<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn list_expired_includes_no_lease<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn list_expired_created_before_is_a_timestamp<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn list_expired_limit_and_order<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn list_expired_excludes_inactive<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn list_by_scope_newest_first_with_finished<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn list_active_only_active<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn purge_removes_old_terminal_only<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn timestamps_round_trip_at_microseconds<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn metadata_round_trips<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn verbatim_ids_and_scopes_never_collide<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}
