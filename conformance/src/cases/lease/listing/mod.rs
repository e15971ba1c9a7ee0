//! Conformance cases: the read side (`list_expired`, `get`, `list_by_scope`,
//! `list_active`), `purge`, and what must survive a trip through any store
//! unchanged: timestamps, metadata, ids and scopes
//! ([contract §2, §6 and §8](tenure_lease_core::contract); §13 invariant 7).
//!
//! Every case must also hold on a store whose clock only moves in real time,
//! so leases are crossed with [`SHORT_TTL`] and waits stay within a few
//! seconds; records meant to have distinct creation times are admitted a
//! few milliseconds of store time apart. Where a case needs something to be
//! *not yet* old enough (a grace, a retention), the margin is
//! `SLOW_MACHINE_MARGIN`, which a starved machine does not eat up between
//! two calls.

use std::time::Duration;

use chrono::{FixedOffset, TimeZone, Timelike, Utc};
use serde_json::json;
use tenure_lease_core::backend::rules;
use tenure_lease_core::{
    clock, AdmitRequest, AdmitStrategy, ExpiredQuery, LeaseRecord, LeaseStore, ManualClock,
    Renewal, Status, StatusChange, TakeoverRequest, Timestamp, Transition, TransitionRejection,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, ensure_footprint_kept, ensure_scope_held_by,
    ensure_scopes_free, expect_invalid, expire, get, micro_before, snapshot, take_over, LONG_GRACE,
    LONG_TTL, NEEDS_MANUAL_CLOCK, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};
use tenure_lease_core::limits::MAX_RETENTION;

mod expired;
mod purge;
mod round_trip;
mod scans;

// The kit's case list names cases by area, module and name only.
pub use expired::*;
pub use purge::*;
pub use round_trip::*;
pub use scans::*;

/// Store time between admissions that must have distinct creation times.
const TICK: Duration = Duration::from_millis(3);

/// How long something stays "too young" (within a grace, under a retention)
/// while a case makes the call that must see it so: far longer than a
/// starved machine stalls between two calls.
const SLOW_MACHINE_MARGIN: Duration = Duration::from_secs(2);

/// The ids of `records`, in order.
fn ids_of(records: &[LeaseRecord]) -> Vec<&str> {
    records.iter().map(|record| record.id.as_str()).collect()
}

/// Fails the case unless every record in `records` reads back equal by `get`.
async fn ensure_read_back<S: LeaseStore>(
    ctx: &Ctx<S>,
    records: &[LeaseRecord],
    source: &str,
) -> CaseResult {
    for record in records {
        ensure_eq!(
            get(ctx, &record.id).await?,
            *record,
            "{source} answers the record as get reads it"
        );
    }
    Ok(())
}
