//! The lease operations of a store that decides in Rust, written once.
//!
//! A store that can hold a transaction open while Rust code runs (the
//! memory store's mutex, SQLite's `BEGIN IMMEDIATE`) need not restate how an
//! admission, a renewal, a transition or a takeover goes: it implements
//! [`RecordTransaction`], six small synchronous steps over its storage, and
//! calls these functions inside its transaction. Each loads what it needs,
//! judges it with [`rules`] and writes the result back, so
//! every such store decides exactly as the contract's rules do.
//!
//! Input is validated by the caller first ([`validate`](super::validate)),
//! so a transaction is never opened for a request that would be refused.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::rate_rules::{RateLogs, RateWindow};
use super::rules::{self, AdmissionPlan};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::outcome::{
    Admission, LossReason, NotTakenReason, Renewal, Takeover, Transition, TransitionRejection,
};
use crate::record::{Claim, LeaseRecord};
use crate::request::{AdmitRequest, StatusChange, TakeoverRequest};

/// Metadata of a record, as [`validate::admit`](super::validate::admit)
/// answers it.
pub type Metadata = serde_json::Map<String, serde_json::Value>;

/// A store's lease records inside one open transaction: what the
/// [engine](self) reads and writes. Every step may fail with the store's
/// error; the caller then rolls the transaction back.
pub trait RecordTransaction {
    /// Whether a record with `id` exists, decodable or not.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn exists(&mut self, id: &str) -> Result<bool>;

    /// The record with `id`, if any.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when it cannot be
    /// decoded; the store's errors.
    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>>;

    /// The id of the active record holding `scope`, if any.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn holder_of(&mut self, scope: &str) -> Result<Option<String>>;

    /// Draws the next value of the store-wide fence sequence.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when the counter
    /// is damaged or exhausted; the store's errors.
    fn next_fence(&mut self) -> Result<u64>;

    /// Stores a new record, which holds its scopes (it is active).
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn insert(&mut self, record: &LeaseRecord) -> Result<()>;

    /// Writes back a record loaded in this transaction; when it is no
    /// longer active, the scopes it held are released.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn save(&mut self, record: &LeaseRecord) -> Result<()>;

    /// Lets `change` edit the record with `id` and writes it back (as
    /// [`save`](Self::save) does) when `change` answers `true` with its
    /// answer; `change` edits nothing when it answers `false`. Answers
    /// `None` when there is no such record.
    ///
    /// The default loads a copy and saves it; a store that keeps records in
    /// memory edits them in place, sparing the hot path (renewal) two
    /// copies.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load) and [`save`](Self::save).
    fn update<T>(
        &mut self,
        id: &str,
        change: impl FnOnce(&mut LeaseRecord) -> (T, bool),
    ) -> Result<Option<T>> {
        let Some(mut record) = self.load(id)? else {
            return Ok(None);
        };
        let (answer, write) = change(&mut record);
        if write {
            self.save(&record)?;
        }
        Ok(Some(answer))
    }

    /// The instant until which the store's **own timer** keeps `record`'s
    /// lease alive, when the store has one and it still runs: once the
    /// stored expiry has passed, the rules judge the lease as ending then. A store whose leases end on a timer of its own (etcd's lease
    /// timers, which count whole seconds on the cluster's leader) answers
    /// it here, so no caller's clock can end a lease its timer still holds;
    /// the default, for stores that judge expiry by one clock alone, is
    /// `None`. Asked only of active records whose stored expiry has passed.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn kept_until(&mut self, record: &LeaseRecord, now: Timestamp) -> Result<Option<Timestamp>> {
        let _ = (record, now);
        Ok(None)
    }
}

/// `record` as the rules judge it at `now`: once its stored expiry has
/// passed, moved on to where the store's own timer still keeps it
/// ([`RecordTransaction::kept_until`]); a copy only then.
pub fn as_judged<'r>(
    records: &mut impl RecordTransaction,
    record: &'r LeaseRecord,
    now: Timestamp,
) -> Result<Cow<'r, LeaseRecord>> {
    if !record.is_active() || record.lease_expires_at.is_none() {
        return Ok(Cow::Borrowed(record));
    }
    // While the stored expiry is ahead it decides, timer or not; once it has
    // passed, a timer still running keeps the lease valid.
    if record.lease_expires_at.is_some_and(|expires| expires > now) {
        return Ok(Cow::Borrowed(record));
    }
    Ok(match records.kept_until(record, now)? {
        Some(until)
            if record
                .lease_expires_at
                .is_some_and(|expires| expires < until) =>
        {
            let mut kept = record.clone();
            kept.lease_expires_at = Some(until);
            Cow::Owned(kept)
        }
        _ => Cow::Borrowed(record),
    })
}

/// `admit` ([`LeaseStore::admit`](crate::LeaseStore::admit)): refuses a
/// taken id, chooses a slot in each counted scope, plans against the active
/// holders of the keys it would hold, judges the rate
/// limit once the plan admits, interrupts those the plan names (each under
/// a new fence) and inserts the new record, using a permit.
///
/// # Errors
///
/// [`ErrorKind::AlreadyExists`](crate::ErrorKind::AlreadyExists) for a
/// taken id; [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when a scope
/// names a holder that does not exist or cannot be decoded, or the rate
/// log cannot be decoded; the store's errors.
pub fn admit(
    records: &mut (impl RecordTransaction + RateLogs),
    now: Timestamp,
    request: &AdmitRequest,
    metadata: Metadata,
) -> Result<Admission> {
    if records.exists(&request.id)? {
        return Err(Error::already_exists(&request.id));
    }
    let mut holders = Holders::default();
    let mut slots = BTreeMap::new();
    for scope in &request.scopes {
        let slot = match request.capacities.get(scope) {
            Some(&capacity) => {
                let slot = choose_slot(records, &mut holders, request, scope, capacity, now)?;
                slots.insert(scope.clone(), slot);
                slot
            }
            None => 0,
        };
        holders.load(records, &rules::slot_key(scope, slot), now)?;
    }
    let Holders { stored, judged } = holders;
    let plan = rules::plan_admission(request, &slots, &judged, now);
    let holders = stored;
    let interrupt = match plan {
        AdmissionPlan::Conflict {
            holder,
            retry_after,
        } => {
            // Answered as stored, not as judged.
            let holder = holders
                .iter()
                .find(|stored| stored.id == holder.id)
                .cloned()
                .unwrap_or(holder);
            return Ok(Admission::Conflict {
                holder,
                retry_after,
            });
        }
        AdmissionPlan::Proceed { interrupt } => interrupt,
    };
    let permit = match &request.rate_limit {
        Some(limit) => {
            let window = RateWindow::open(records, limit, now)?;
            if window.left() == 0 {
                return Ok(Admission::RateLimited {
                    key: limit.key.clone(),
                    retry_after: window.retry_after(),
                });
            }
            Some(window)
        }
        None => None,
    };
    let mut holders: HashMap<String, LeaseRecord> = holders
        .into_iter()
        .map(|holder| (holder.id.clone(), holder))
        .collect();
    let mut interrupted = Vec::with_capacity(interrupt.len());
    for id in interrupt {
        if let Some(mut holder) = holders.remove(&id) {
            let fence = records.next_fence()?;
            rules::interrupt(&mut holder, &request.owner, fence, now);
            records.save(&holder)?;
            interrupted.push(holder);
        }
    }
    let fence = records.next_fence()?;
    let record = rules::new_record(request, slots, metadata, fence, now);
    records.insert(&record)?;
    if let Some(window) = permit {
        window.spend(records, 1)?;
    }
    Ok(Admission::Admitted {
        record,
        interrupted,
    })
}

/// The active holders an admission has read, each once: as stored (what
/// answers and writes use) and as [judged](as_judged) (what decides).
#[derive(Default)]
struct Holders {
    stored: Vec<LeaseRecord>,
    judged: Vec<LeaseRecord>,
}

impl Holders {
    /// The holder of `key`, read once per admission; its index.
    fn load(
        &mut self,
        records: &mut impl RecordTransaction,
        key: &str,
        now: Timestamp,
    ) -> Result<Option<usize>> {
        match records.holder_of(key)? {
            Some(holder_id) => self.record(records, key, &holder_id, now).map(Some),
            None => Ok(None),
        }
    }

    /// The record `holder_id`, which the scope index says holds `key`,
    /// read once per admission; its index. A record that is gone, or does
    /// not hold `key` while active, is `Corrupt`: admitting over it would
    /// put two records on one key.
    fn record(
        &mut self,
        records: &mut impl RecordTransaction,
        key: &str,
        holder_id: &str,
        now: Timestamp,
    ) -> Result<usize> {
        if let Some(index) = self.stored.iter().position(|holder| holder.id == holder_id) {
            return Ok(index);
        }
        let holder = records.load(holder_id)?.ok_or_else(|| {
            Error::corrupt(format!(
                "scope {key:?} is held by lease {holder_id:?}, which does not exist"
            ))
        })?;
        if !holder.is_active() || !rules::held_keys(&holder).any(|held| held == key) {
            return Err(Error::corrupt(format!(
                "the scope index names lease {holder_id:?} as the holder of {key:?}, which \
                 it does not hold ({}, holding {:?})",
                holder.status,
                rules::held_keys(&holder).collect::<Vec<_>>()
            )));
        }
        let judged = as_judged(records, &holder, now)?.into_owned();
        self.stored.push(holder);
        self.judged.push(judged);
        Ok(self.stored.len() - 1)
    }
}

/// The slot of the counted `scope` the admission contends for
/// ([`rules::choose_slot`]): the first free slot, read from the scope index
/// alone; only when every slot is held are their holders read and judged.
fn choose_slot(
    records: &mut impl RecordTransaction,
    holders: &mut Holders,
    request: &AdmitRequest,
    scope: &str,
    capacity: u32,
    now: Timestamp,
) -> Result<u32> {
    let mut held = Vec::new();
    for slot in 0..capacity {
        let key = rules::slot_key(scope, slot);
        match records.holder_of(&key)? {
            None => return Ok(slot),
            Some(holder_id) => held.push((key, holder_id)),
        }
    }
    let mut by_slot = Vec::with_capacity(held.len());
    for (key, holder_id) in held {
        by_slot.push(holders.record(records, &key, &holder_id, now)?);
    }
    let by_slot: Vec<_> = by_slot
        .into_iter()
        .map(|index| Some(&holders.judged[index]))
        .collect();
    Ok(rules::choose_slot(request, &by_slot, now))
}

/// `renew` ([`LeaseStore::renew`](crate::LeaseStore::renew)).
///
/// # Errors
///
/// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) for an undecodable
/// record; the store's errors.
pub fn renew(
    records: &mut impl RecordTransaction,
    now: Timestamp,
    claim: &Claim,
    ttl: Duration,
) -> Result<Renewal> {
    renew_reporting(records, now, claim, ttl, None)
}

/// `renew_with_progress`
/// ([`LeaseStore::renew_with_progress`](crate::LeaseStore::renew_with_progress)):
/// [`renew`], setting the record's progress in the same update.
///
/// # Errors
///
/// As [`renew`].
pub fn renew_with_progress(
    records: &mut impl RecordTransaction,
    now: Timestamp,
    claim: &Claim,
    ttl: Duration,
    progress: &serde_json::Value,
) -> Result<Renewal> {
    renew_reporting(records, now, claim, ttl, Some(progress))
}

fn renew_reporting(
    records: &mut impl RecordTransaction,
    now: Timestamp,
    claim: &Claim,
    ttl: Duration,
    progress: Option<&serde_json::Value>,
) -> Result<Renewal> {
    let renewal = records.update(&claim.id, |record| {
        match rules::judge_renewal(Some(record), claim) {
            Err(reason) => (Renewal::Lost(reason), false),
            Ok(()) => {
                let expires_at = rules::renew(record, ttl, now);
                if let Some(progress) = progress {
                    record.progress = Some(progress.clone());
                }
                (Renewal::Renewed { expires_at }, true)
            }
        }
    })?;
    Ok(renewal.unwrap_or(Renewal::Lost(LossReason::Missing)))
}

/// `renew_many` ([`LeaseStore::renew_many`](crate::LeaseStore::renew_many)):
/// [`renew`] for each claim, in order, in the one transaction.
///
/// # Errors
///
/// As [`renew`], for any of the claims (then nothing is renewed, once the
/// caller rolls back).
pub fn renew_many(
    records: &mut impl RecordTransaction,
    now: Timestamp,
    claims: &[Claim],
    ttl: Duration,
) -> Result<Vec<Renewal>> {
    claims
        .iter()
        .map(|claim| renew(records, now, claim, ttl))
        .collect()
}

/// `transition` ([`LeaseStore::transition`](crate::LeaseStore::transition)).
///
/// # Errors
///
/// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) for an undecodable
/// record; the store's errors.
pub fn transition(
    records: &mut impl RecordTransaction,
    now: Timestamp,
    claim: &Claim,
    change: &StatusChange,
) -> Result<Transition> {
    let Some(mut record) = records.load(&claim.id)? else {
        return Ok(Transition::Rejected(TransitionRejection::Missing));
    };
    if let Err(rejection) = rules::judge_transition(Some(&record), claim, change.status) {
        return Ok(Transition::Rejected(rejection));
    }
    rules::transition(&mut record, change, now);
    records.save(&record)?;
    Ok(Transition::Applied(record))
}

/// `claim_for_takeover`
/// ([`LeaseStore::claim_for_takeover`](crate::LeaseStore::claim_for_takeover)).
///
/// # Errors
///
/// [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) for an undecodable
/// record or a damaged fence counter; the store's errors.
pub fn claim_for_takeover(
    records: &mut impl RecordTransaction,
    now: Timestamp,
    request: &TakeoverRequest,
) -> Result<Takeover> {
    let Some(mut record) = records.load(&request.id)? else {
        return Ok(Takeover::NotTaken(NotTakenReason::Missing));
    };
    if let Err(reason) = rules::judge_takeover(
        Some(as_judged(records, &record, now)?.as_ref()),
        request.grace,
        now,
    ) {
        return Ok(Takeover::NotTaken(reason));
    }
    let fence = records.next_fence()?;
    rules::take_over(&mut record, &request.claimer, &request.action, fence, now);
    records.save(&record)?;
    Ok(Takeover::Taken(record))
}
