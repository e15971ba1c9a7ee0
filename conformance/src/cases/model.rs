//! Conformance cases: model.
use crate::harness::{CaseResult, Ctx, Failure};
use lease_core::LeaseStore;

/// TODO: describe.
pub async fn model_based_random_operations<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let _ = ctx;
    Err(Failure("not written yet".into()))
}
