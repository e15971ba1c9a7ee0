//! Conformance cases: admit ([contract §3](tenure_lease_core::contract); §13
//! invariants 1, 3, 5, 7).
//!
//! Admission is where mutual exclusion is won or lost, so each case builds
//! holders of a known kind, asks for an admission, and checks both the answer
//! and that nothing else moved. The race cases release many admissions at
//! once from a start line and check the invariants afterwards.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::backend::rules;
use tenure_lease_core::{
    clock, Admission, AdmitRequest, AdmitStrategy, ErrorKind, LeaseRecord, LeaseStore, LossReason,
    Status, StatusChange, DEFAULT_KIND,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, expect_lost, expire, get, micro_before, refused, snapshot,
    StartLine, LONG_GRACE, LONG_TTL, MICROSECOND, NEEDS_MANUAL_CLOCK, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

mod create;
mod interrupt;
mod race;
mod reject;

// The kit's case list names cases by area, module and name only.
pub use create::*;
pub use interrupt::*;
pub use race::*;
pub use reject::*;

/// The owner of the admissions the single-requester cases make.
const REQUESTER: &str = "worker-a";

/// How far below its upper bound a `retry_after` may fall: more than the time
/// a case takes between admitting a holder and being answered about it.
const RETRY_AFTER_SLACK: Duration = Duration::from_secs(60);

/// Everything a case can observe about some ids and scopes, for "nothing
/// changed" comparisons.
#[derive(Debug, PartialEq)]
struct View {
    records: Vec<Option<LeaseRecord>>,
    by_scope: Vec<Vec<LeaseRecord>>,
    active: Vec<LeaseRecord>,
}

async fn view<S: LeaseStore>(ctx: &Ctx<S>, ids: &[&str], scopes: &[&str]) -> Result<View, Failure> {
    let mut by_scope = Vec::with_capacity(scopes.len());
    for scope in scopes {
        by_scope.push(ctx.store.list_by_scope(scope).await?);
    }
    Ok(View {
        records: snapshot(ctx, ids).await?,
        by_scope,
        active: ctx.store.list_active().await?,
    })
}

fn admitted(admission: Admission, id: &str) -> Result<(LeaseRecord, Vec<LeaseRecord>), Failure> {
    match admission {
        Admission::Admitted {
            record,
            interrupted,
        } => Ok((record, interrupted)),
        other => Err(Failure(format!(
            "expected {id:?} to be admitted, got {other:?}"
        ))),
    }
}

fn conflict(admission: Admission, id: &str) -> Result<(LeaseRecord, Option<Duration>), Failure> {
    match admission {
        Admission::Conflict {
            holder,
            retry_after,
        } => Ok((holder, retry_after)),
        other => Err(Failure(format!(
            "expected {id:?} to conflict, got {other:?}"
        ))),
    }
}

fn ids_of<'a>(records: impl IntoIterator<Item = &'a LeaseRecord>) -> Vec<&'a str> {
    records
        .into_iter()
        .map(|record| record.id.as_str())
        .collect()
}

/// Fails unless `retry_after` is `Some` and within `RETRY_AFTER_SLACK` below
/// `bound` (the holder's remaining lease plus grace when it was admitted).
fn ensure_retry_after_up_to(retry_after: Option<Duration>, bound: Duration) -> CaseResult {
    let lowest = bound.saturating_sub(RETRY_AFTER_SLACK);
    ensure!(
        retry_after.is_some_and(|retry_after| lowest < retry_after && retry_after <= bound),
        "retry_after {retry_after:?} should lie in ({lowest:?}, {bound:?}]"
    );
    Ok(())
}

async fn active_holders_of<S: LeaseStore>(
    ctx: &Ctx<S>,
    scope: &str,
) -> Result<Vec<LeaseRecord>, Failure> {
    let mut active = ctx.store.list_active().await?;
    active.retain(|record| record.scopes.contains(scope));
    Ok(active)
}

/// Fails unless every scope (every slot of a counted one) has at most one
/// active holder (invariant 1).
async fn ensure_one_holder_per_scope<S: LeaseStore>(ctx: &Ctx<S>) -> CaseResult {
    let active = ctx.store.list_active().await?;
    let mut holders: BTreeMap<(&str, Option<u32>), &str> = BTreeMap::new();
    for record in &active {
        for scope in &record.scopes {
            let slot = record.slot(scope);
            if let Some(other) = holders.insert((scope, slot), &record.id) {
                return Err(Failure(format!(
                    "slot {slot:?} of scope {scope:?} has two active holders: {other:?} and {:?}",
                    record.id
                )));
            }
        }
    }
    Ok(())
}
