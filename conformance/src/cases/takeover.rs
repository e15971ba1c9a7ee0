//! Conformance cases: takeover.
use crate::harness::{CaseResult, Ctx, Failure};
use lease_core::LeaseStore;

/// TODO: describe.
pub async fn takeover_expired_lease_fail<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_expired_lease_adopt<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_valid_lease_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_within_grace_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_no_lease_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_terminal_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_missing_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_interrupted_not_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_renewal_between_scan_and_claim_wins<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn takeover_fail_releases_scopes<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn race_takeovers_exactly_one_taken<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}
