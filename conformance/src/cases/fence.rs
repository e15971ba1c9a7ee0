//! Conformance cases: fence.
use crate::harness::{CaseResult, Ctx, Failure};
use lease_core::LeaseStore;

/// TODO: describe.
pub async fn fence_increases_across_takeover_chain<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn fence_increases_across_readmissions_and_purge<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}

/// TODO: describe.
pub async fn fence_is_store_wide<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}
