//! Helpers shared by the cases: standard durations, admitting with an
//! expectation, snapshots for "nothing changed" checks.

use std::time::Duration;

use lease_core::{Admission, AdmitRequest, Claim, LeaseRecord, LeaseStore};

use crate::harness::{Ctx, Failure};

/// A lease that stays valid for the whole case.
pub const LONG_TTL: Duration = Duration::from_secs(600);
/// A lease the case lets expire (then moves the clock past it).
pub const SHORT_TTL: Duration = Duration::from_millis(50);
/// A grace long enough to cover the whole case.
pub const LONG_GRACE: Duration = Duration::from_secs(600);

/// Admits `request`, failing the case unless it is `Admitted`.
pub async fn admit<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: AdmitRequest,
) -> Result<LeaseRecord, Failure> {
    match ctx.store.admit(&request).await? {
        Admission::Admitted { record, .. } => Ok(record),
        other => Err(Failure(format!(
            "expected {:?} to be admitted, got {other:?}",
            request.id
        ))),
    }
}

/// The claim of an admitted or taken record.
pub fn claim_of(record: &LeaseRecord) -> Result<Claim, Failure> {
    record
        .claim()
        .ok_or_else(|| Failure(format!("record {:?} has no owner", record.id)))
}

/// Reads `id`, failing the case when it is missing.
pub async fn get<S: LeaseStore>(ctx: &Ctx<S>, id: &str) -> Result<LeaseRecord, Failure> {
    ctx.store
        .get(id)
        .await?
        .ok_or_else(|| Failure(format!("record {id:?} is missing")))
}

/// Every record the store can see for `ids`, for before/after comparisons.
pub async fn snapshot<S: LeaseStore>(
    ctx: &Ctx<S>,
    ids: &[&str],
) -> Result<Vec<Option<LeaseRecord>>, Failure> {
    let mut records = Vec::with_capacity(ids.len());
    for id in ids {
        records.push(ctx.store.get(id).await?);
    }
    Ok(records)
}

/// Lets `record`'s lease run out beyond `grace` on the store's clock.
pub async fn expire<S: LeaseStore>(
    ctx: &Ctx<S>,
    record: &LeaseRecord,
    grace: Duration,
) -> Result<(), Failure> {
    let expires = record
        .lease_expires_at
        .ok_or_else(|| Failure(format!("record {:?} has no lease to expire", record.id)))?;
    ctx.advance_past(lease_core::clock::add(expires, grace))
        .await
}
