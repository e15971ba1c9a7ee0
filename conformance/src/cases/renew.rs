//! Conformance cases: renew.
use crate::harness::{CaseResult, Ctx, Failure};
use lease_core::LeaseStore;

/// TODO: describe.
pub async fn renew_extends_lease<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_pending_record<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_wrong_owner_is_owner_changed<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_wrong_fence_is_fence_changed<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_terminal_is_terminal<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_interrupted_is_interrupted<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_missing_is_missing<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_after_expiry_until_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn renew_many_answers_per_claim<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}
