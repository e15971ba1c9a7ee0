//! The contract's decisions as pure functions
//! ([contract §3 to §8](crate::contract)).
//!
//! Backends that read records into Rust and decide there (memory, SQLite,
//! PostgreSQL's read paths) call these, so every backend judges validity,
//! loss reasons and admission the same way. Backends that must decide inside
//! the server (Redis Lua scripts) mirror them, and the conformance kit checks
//! that they agree.

use std::borrow::{Borrow, Cow};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock::{self, Timestamp};
use crate::outcome::{LossReason, NotTakenReason, TransitionRejection};
use crate::record::{Claim, LeaseRecord, Status};
use crate::request::{AdmitRequest, AdmitStrategy, StatusChange, TakeoverAction};

/// True when `record`'s owner still holds a valid lease at `now`:
/// active, with an expiry, and `expiry + grace > now`.
pub fn lease_valid(record: &LeaseRecord, grace: Duration, now: Timestamp) -> bool {
    record.is_active()
        && record
            .lease_expires_at
            .is_some_and(|expires| clock::is_before_end(expires, grace, now))
}

/// True when `record` may be reclaimed at `now`: active, and its lease is
/// none or ended at least `grace` ago.
pub fn reclaimable(record: &LeaseRecord, grace: Duration, now: Timestamp) -> bool {
    record.is_active() && !lease_valid(record, grace, now)
}

/// How long until `record`'s lease (plus grace) ends, when it is valid.
pub fn retry_after(record: &LeaseRecord, grace: Duration, now: Timestamp) -> Option<Duration> {
    if !lease_valid(record, grace, now) {
        return None;
    }
    // Exact: `expires + grace - now`, without truncating the grace.
    record.lease_expires_at.map(|expires| {
        if now <= expires {
            clock::until(now, expires) + grace
        } else {
            grace.saturating_sub(clock::until(expires, now))
        }
    })
}

/// Whether `claim` still holds `record` (renew's check), else why not.
///
/// An interrupted record answers `Interrupted` to every claim (the
/// interruption redrew its owner and fence). Otherwise a claim whose owner
/// or fence is not the record's hears `OwnerChanged` / `FenceChanged`
/// whatever the status, terminal included: a peer that took the run over,
/// even by failing it, is a takeover, not the run's own end. `Terminal` is
/// the answer to the record's own claim.
pub fn judge_renewal(record: Option<&LeaseRecord>, claim: &Claim) -> Result<(), LossReason> {
    let record = record.ok_or(LossReason::Missing)?;
    match record.status {
        Status::Interrupted => Err(LossReason::Interrupted),
        _ if record.owner.as_deref() != Some(claim.owner.as_str()) => Err(LossReason::OwnerChanged),
        _ if record.fence != claim.fence => Err(LossReason::FenceChanged),
        status if status.is_terminal() => Err(LossReason::Terminal(status)),
        _ => Ok(()),
    }
}

/// Whether `claim` may move `record` to `to`, else why not.
///
/// A claim whose owner or fence is not the record's is `Stale` whatever the
/// record's status, terminal included: a peer that took the run over (even
/// by failing it) must be reported as a takeover, not as the run's own end.
/// `Terminal` is the answer to the record's own claim.
pub fn judge_transition(
    record: Option<&LeaseRecord>,
    claim: &Claim,
    to: Status,
) -> Result<(), TransitionRejection> {
    let record = record.ok_or(TransitionRejection::Missing)?;
    if record.owner.as_deref() != Some(claim.owner.as_str()) || record.fence != claim.fence {
        return Err(TransitionRejection::Stale);
    }
    if record.status.is_terminal() {
        return Err(TransitionRejection::Terminal(record.status));
    }
    if !record.status.can_become(to) {
        return Err(TransitionRejection::NotAllowed {
            from: record.status,
            to,
        });
    }
    Ok(())
}

/// Whether `record` may be taken over at `now`, else why not.
pub fn judge_takeover(
    record: Option<&LeaseRecord>,
    grace: Duration,
    now: Timestamp,
) -> Result<(), NotTakenReason> {
    let record = record.ok_or(NotTakenReason::Missing)?;
    match record.status {
        status if status.is_terminal() => Err(NotTakenReason::Terminal(status)),
        Status::Interrupted => Err(NotTakenReason::Interrupted),
        _ => match retry_after(record, grace, now) {
            Some(retry_after) => Err(NotTakenReason::LeaseValid { retry_after }),
            None => Ok(()),
        },
    }
}

/// What `admit` must do, decided before anything is written.
#[allow(clippy::large_enum_variant)] // short-lived, matched at once
#[derive(Debug, Clone, PartialEq)]
pub enum AdmissionPlan {
    /// Answer `Conflict` with this holder; write nothing.
    Conflict {
        /// The blocking record.
        holder: LeaseRecord,
        /// When its lease (plus grace) ends, if valid.
        retry_after: Option<Duration>,
    },
    /// Interrupt these holders (ids, deduplicated), then insert.
    Proceed {
        /// Ids of the holders to interrupt.
        interrupt: Vec<String>,
    },
}

/// What separates a counted scope's name from its slot number in the key
/// a slot above 0 is held under ([`slot_key`]): a control character, which
/// no name may contain (contract §11), so no scope's key is another's.
pub const SLOT_SEPARATOR: char = '\u{1f}';

/// The key under which a record holds slot `slot` of `scope`
/// ([contract §17](crate::contract)): the scope itself for slot 0 (so an
/// exclusive scope is slot 0 of the counted scope of that name), else
/// `scope`, [`SLOT_SEPARATOR`] and the slot number in decimal. A store
/// keeps its scope index (which active record holds what) by these keys.
pub fn slot_key(scope: &str, slot: u32) -> Cow<'_, str> {
    if slot == 0 {
        Cow::Borrowed(scope)
    } else {
        Cow::Owned(format!("{scope}{SLOT_SEPARATOR}{slot}"))
    }
}

/// The keys `record` holds while active, one per scope ([`slot_key`] of
/// the slot it holds there), in scope order.
pub fn held_keys(record: &LeaseRecord) -> impl Iterator<Item = Cow<'_, str>> + '_ {
    record
        .scopes
        .iter()
        .map(|scope| slot_key(scope, record.slots.get(scope).copied().unwrap_or(0)))
}

/// Which slot of the counted `scope` an admission contends for, given the
/// active holder of each of its slots as this request counts them
/// (`holders[k]` holds slot `k`; as many as the request's capacity): the
/// lowest free slot; when none is free, under
/// [`AdmitStrategy::Interrupt`] the lowest whose holder it may interrupt
/// (its own, or one whose lease is gone); otherwise the slot whose holder
/// frees first (the earliest expiry, holders without a lease last), whose
/// holder then blocks the admission ([`plan_admission`]).
pub fn choose_slot<R: Borrow<LeaseRecord>>(
    request: &AdmitRequest,
    holders: &[Option<R>],
    now: Timestamp,
) -> u32 {
    let slot_of = |index: usize| u32::try_from(index).unwrap_or(u32::MAX);
    if let Some(free) = holders.iter().position(Option::is_none) {
        return slot_of(free);
    }
    let held = || {
        holders
            .iter()
            .enumerate()
            .filter_map(|(slot, holder)| Some((slot, holder.as_ref()?.borrow())))
    };
    if request.strategy == AdmitStrategy::Interrupt {
        if let Some((slot, _)) = held().find(|(_, holder)| interruptible(request, holder, now)) {
            return slot_of(slot);
        }
    }
    held()
        .min_by_key(|(slot, holder)| {
            (
                holder.lease_expires_at.is_none(),
                holder.lease_expires_at,
                *slot,
            )
        })
        .map_or(0, |(slot, _)| slot_of(slot))
}

/// Whether an admission under `Interrupt` may interrupt `holder`: it is the
/// requester's own, or its lease is not valid under the request's grace.
fn interruptible(request: &AdmitRequest, holder: &LeaseRecord, now: Timestamp) -> bool {
    holder.owner.as_deref() == Some(request.owner.as_str())
        || !lease_valid(holder, request.grace, now)
}

/// Decides an admission from the active holders of the requested scopes.
///
/// `slots` is the slot chosen in each counted scope ([`choose_slot`]);
/// `holders` is every active record holding the key of a requested scope
/// (its chosen slot, 0 for an exclusive scope), in any order (as stored, or
/// as [judged](super::engine::as_judged)); the first blocking holder in
/// scope order is reported.
pub fn plan_admission<R: Borrow<LeaseRecord>>(
    request: &AdmitRequest,
    slots: &BTreeMap<String, u32>,
    holders: &[R],
    now: Timestamp,
) -> AdmissionPlan {
    let mut ordered: Vec<&LeaseRecord> = Vec::new();
    for scope in &request.scopes {
        let slot = slots.get(scope).copied().unwrap_or(0);
        for holder in holders
            .iter()
            .map(Borrow::borrow)
            .filter(|h: &&LeaseRecord| h.slot(scope) == Some(slot))
        {
            if !ordered.iter().any(|seen| seen.id == holder.id) {
                ordered.push(holder);
            }
        }
    }
    let blocking = ordered.iter().find(|holder| match request.strategy {
        AdmitStrategy::Reject => true,
        AdmitStrategy::Interrupt => !interruptible(request, holder, now),
    });
    match blocking {
        Some(holder) => AdmissionPlan::Conflict {
            holder: (*holder).clone(),
            retry_after: retry_after(holder, request.grace, now),
        },
        None => AdmissionPlan::Proceed {
            interrupt: ordered.iter().map(|holder| holder.id.clone()).collect(),
        },
    }
}

/// The record `admit` inserts.
///
/// `slots` is the slot won in each counted scope ([`choose_slot`]).
pub fn new_record(
    request: &AdmitRequest,
    slots: BTreeMap<String, u32>,
    metadata: serde_json::Map<String, serde_json::Value>,
    fence: u64,
    now: Timestamp,
) -> LeaseRecord {
    LeaseRecord {
        id: request.id.clone(),
        scopes: request.scopes.clone(),
        slots,
        kind: request.kind.clone(),
        status: Status::Pending,
        owner: Some(request.owner.clone()),
        fence,
        lease_expires_at: request.ttl.map(|ttl| clock::add(now, ttl)),
        created_at: now,
        updated_at: now,
        error: None,
        stop_reason: None,
        metadata,
        progress: None,
    }
}

/// The stop reason stored on records interrupted by an admission.
pub const INTERRUPTED_BY_ADMISSION: &str = "interrupted_by_admission";

/// Applies an admission's interrupt to a holder: `Interrupted`, owner :=
/// the requester, new fence.
pub fn interrupt(holder: &mut LeaseRecord, requester: &str, fence: u64, now: Timestamp) {
    holder.status = Status::Interrupted;
    holder.owner = Some(requester.to_owned());
    holder.fence = fence;
    holder.stop_reason = Some(INTERRUPTED_BY_ADMISSION.to_owned());
    holder.updated_at = now;
}

/// Applies a renewal.
pub fn renew(record: &mut LeaseRecord, ttl: Duration, now: Timestamp) -> Timestamp {
    let expires_at = clock::add(now, ttl);
    record.lease_expires_at = Some(expires_at);
    record.updated_at = now;
    expires_at
}

/// Applies a status write.
pub fn transition(record: &mut LeaseRecord, change: &StatusChange, now: Timestamp) {
    record.status = change.status;
    if change.error.is_some() {
        record.error.clone_from(&change.error);
    }
    if change.stop_reason.is_some() {
        record.stop_reason.clone_from(&change.stop_reason);
    }
    record.updated_at = now;
}

/// Applies a won takeover.
pub fn take_over(
    record: &mut LeaseRecord,
    claimer: &str,
    action: &TakeoverAction,
    fence: u64,
    now: Timestamp,
) {
    record.owner = Some(claimer.to_owned());
    record.fence = fence;
    record.updated_at = now;
    match action {
        TakeoverAction::Fail { error, stop_reason } => {
            record.status = Status::Failed;
            record.error = Some(error.clone());
            if stop_reason.is_some() {
                record.stop_reason.clone_from(stop_reason);
            }
        }
        TakeoverAction::Adopt { ttl } => {
            record.status = Status::Running;
            record.lease_expires_at = ttl.map(|ttl| clock::add(now, ttl));
        }
    }
}

/// Sort key of [`ExpiredScan::records`](crate::ExpiredScan): records with no
/// lease first, then by expiry, then by id.
pub fn expired_order(record: &LeaseRecord) -> (Option<Timestamp>, &str) {
    (record.lease_expires_at, record.id.as_str())
}

/// Whether `record` belongs in a `list_expired` answer.
pub fn matches_expired(
    record: &LeaseRecord,
    grace: Duration,
    created_before: Option<Timestamp>,
    now: Timestamp,
) -> bool {
    reclaimable(record, grace, now)
        && created_before.is_none_or(|cutoff| record.created_at <= cutoff)
}

/// Whether `record` is old enough for `purge`: it is terminal or
/// interrupted, and its `updated_at` is at least `older_than` before `now`.
///
/// An interrupted record holds no scope and waits only for the claim its
/// interruption handed out to finalise it as `Failed`, which nothing
/// obliges anyone to do. It therefore goes once its interruption (its
/// `updated_at`: nothing but that `Failed` write changes an interrupted
/// record) is as old as the retention; until then it may still be
/// finalised, and a `Failed` written in time restarts its age.
pub fn purgeable(record: &LeaseRecord, older_than: Duration, now: Timestamp) -> bool {
    (record.status.is_terminal() || record.status == Status::Interrupted)
        && !clock::is_before_end(record.updated_at, older_than, now)
}

/// Sort key of `list_by_scope`: newest first (by creation, then by fence).
pub fn newest_first(
    record: &LeaseRecord,
) -> (std::cmp::Reverse<Timestamp>, std::cmp::Reverse<u64>) {
    (
        std::cmp::Reverse(record.created_at),
        std::cmp::Reverse(record.fence),
    )
}
