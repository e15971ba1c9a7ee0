//! The reference model: what contract §3 to §8 say each operation answers
//! ([`tenure_lease_core::contract`]), written out plainly over a `BTreeMap`, without
//! `tenure_lease_core::backend::rules` or `backend-memory`, so that it is a second opinion
//! rather than a copy of the code it checks.
//!
//! Two simplifications keep it exact on every backend, real clocks included:
//!
//! * values a store draws while it answers (fences, timestamps) cannot be
//!   predicted; the model marks them [`Drawn::Fresh`], the runner checks the
//!   store's value against what the contract allows and teaches it to the
//!   model, which predicts it exactly from then on;
//! * time is coarse: the runner keeps every lease clearly in one
//!   [`Standing`] and grace is either zero or [`LONG_GRACE`], so no outcome
//!   ever depends on reading a clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use tenure_lease_core::{
    clock, AdmitStrategy, Claim, LossReason, NotTakenReason, Status, Timestamp, TransitionRejection,
};

use crate::cases::util::{LONG_GRACE, LONG_TTL, SHORT_TTL};

/// The stop reason [contract §3](tenure_lease_core::contract) gives records
/// interrupted by an admission: part of the contract's vocabulary, not of its
/// logic.
const INTERRUPTED_BY_ADMISSION: &str = tenure_lease_core::backend::rules::INTERRUPTED_BY_ADMISSION;

/// A lease length the model knows how to age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ttl {
    /// Valid for the whole run.
    Long,
    /// Expired as soon as the step that set it ends: the runner moves the
    /// store's clock past it.
    Short,
}

impl Ttl {
    /// The lease length sent to the store.
    pub(crate) fn duration(self) -> Duration {
        match self {
            Ttl::Long => LONG_TTL,
            Ttl::Short => SHORT_TTL,
        }
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ttl::Long => "long",
            Ttl::Short => "short",
        })
    }
}

/// A grace the model can judge without a clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grace {
    /// No grace.
    Zero,
    /// [`LONG_GRACE`]: longer than the whole run.
    Long,
}

impl Grace {
    /// The grace sent to the store.
    pub(crate) fn duration(self) -> Duration {
        match self {
            Grace::Zero => Duration::ZERO,
            Grace::Long => LONG_GRACE,
        }
    }
}

impl fmt::Display for Grace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Grace::Zero => "0",
            Grace::Long => "long",
        })
    }
}

/// Where a lease stands on the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Not expired yet.
    Valid,
    /// Expired, less than [`LONG_GRACE`] ago.
    Lapsed,
    /// Expired at least [`LONG_GRACE`] ago.
    Gone,
}

impl Standing {
    /// Where a lease ending at `expires_at` stands at `now`.
    pub(crate) fn at(expires_at: Timestamp, now: Timestamp) -> Standing {
        if expires_at > now {
            Standing::Valid
        } else if clock::add(expires_at, LONG_GRACE) > now {
            Standing::Lapsed
        } else {
            Standing::Gone
        }
    }

    /// Whether the owner still holds the lease when `grace` is allowed
    /// past its end.
    fn holds_with(self, grace: Grace) -> bool {
        match self {
            Standing::Valid => true,
            Standing::Lapsed => grace == Grace::Long,
            Standing::Gone => false,
        }
    }
}

/// A value the store draws while it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drawn<T> {
    /// Learned from an earlier answer.
    Known(T),
    /// Drawn during the current step; not learned yet.
    Fresh,
}

impl<T: Copy> Drawn<T> {
    /// The value, once learned.
    pub(crate) fn known(&self) -> Option<T> {
        match self {
            Drawn::Known(value) => Some(*value),
            Drawn::Fresh => None,
        }
    }
}

/// A lease as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lease {
    /// When it ends, in store time.
    pub(crate) expires_at: Drawn<Timestamp>,
    /// The length it was last set with.
    pub(crate) ttl: Ttl,
    /// Where it stands now.
    pub(crate) standing: Standing,
}

impl Lease {
    fn fresh(ttl: Ttl) -> Lease {
        Lease {
            expires_at: Drawn::Fresh,
            ttl,
            // A short lease is expired by the time anyone looks again: the
            // runner moves the clock past it before the step ends.
            standing: match ttl {
                Ttl::Long => Standing::Valid,
                Ttl::Short => Standing::Lapsed,
            },
        }
    }
}

/// A record as the model expects the store to hold it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModelRecord {
    pub(crate) id: String,
    pub(crate) scopes: BTreeSet<String>,
    /// The slot held in each counted scope.
    pub(crate) slots: BTreeMap<String, u32>,
    pub(crate) kind: String,
    pub(crate) status: Status,
    /// Every record of this model has an owner: admission sets one and no
    /// operation clears it.
    pub(crate) owner: String,
    pub(crate) fence: Drawn<u64>,
    pub(crate) lease: Option<Lease>,
    pub(crate) created_at: Drawn<Timestamp>,
    pub(crate) updated_at: Drawn<Timestamp>,
    pub(crate) error: Option<String>,
    pub(crate) stop_reason: Option<String>,
    pub(crate) metadata: serde_json::Map<String, serde_json::Value>,
    /// The last progress reported; kept by every later write.
    pub(crate) progress: Option<serde_json::Value>,
}

impl ModelRecord {
    fn is_active(&self) -> bool {
        matches!(self.status, Status::Pending | Status::Running)
    }

    fn is_terminal(&self) -> bool {
        matches!(self.status, Status::Succeeded | Status::Failed)
    }

    /// Whether the record, active, holds slot `slot` of `scope` (an
    /// exclusive scope is slot 0).
    fn holds_slot(&self, scope: &str, slot: u32) -> bool {
        self.is_active()
            && self.scopes.contains(scope)
            && self.slots.get(scope).copied().unwrap_or(0) == slot
    }

    /// Whether the owner still holds the lease, allowing `grace`.
    fn holds_lease(&self, grace: Grace) -> bool {
        self.is_active()
            && self
                .lease
                .as_ref()
                .is_some_and(|lease| lease.standing.holds_with(grace))
    }

    /// When the lease stops holding under `grace`, if it still holds.
    fn holds_until(&self, grace: Grace) -> Option<Timestamp> {
        if !self.holds_lease(grace) {
            return None;
        }
        let expires_at = self.lease.as_ref()?.expires_at.known()?;
        Some(clock::add(expires_at, grace.duration()))
    }

    /// Records a write: the store stamps it with its clock.
    fn touch(&mut self) {
        self.updated_at = Drawn::Fresh;
    }

    /// Records a change of owner: the store draws a new fence.
    fn hand_to(&mut self, owner: &str) {
        owner.clone_into(&mut self.owner);
        self.fence = Drawn::Fresh;
        self.touch();
    }
}

/// An admission request, in the model's terms.
#[derive(Debug, Clone)]
pub(crate) struct Admit {
    pub(crate) id: String,
    pub(crate) owner: String,
    pub(crate) scopes: BTreeSet<String>,
    /// The counted scopes among `scopes`, with their capacities.
    pub(crate) capacities: BTreeMap<String, u32>,
    pub(crate) kind: String,
    pub(crate) strategy: AdmitStrategy,
    pub(crate) ttl: Option<Ttl>,
    pub(crate) grace: Grace,
    pub(crate) metadata: serde_json::Map<String, serde_json::Value>,
    /// The rate limit's key and permits (its period outlasts the run).
    pub(crate) rate_limit: Option<(String, u32)>,
}

/// What `admit` should answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AdmitExpectation {
    /// `Err(AlreadyExists)`.
    AlreadyExists,
    /// `Conflict` with this holder; `retry_until` is when its lease stops
    /// holding (expiry + grace), `None` when it no longer holds.
    Conflict {
        holder: String,
        retry_until: Option<Timestamp>,
    },
    /// `Admitted`, after interrupting these holders, in this order.
    Admitted { interrupted: Vec<String> },
    /// `RateLimited` naming this key.
    RateLimited { key: String },
}

/// What a takeover does to the record it wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TakeoverAct {
    /// Mark it failed.
    Fail {
        error: String,
        stop_reason: Option<String>,
    },
    /// Resume it under a new lease, or none.
    Adopt { ttl: Option<Ttl> },
}

/// Why `claim_for_takeover` should not take the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotTaken {
    /// `LeaseValid`, with a `retry_after` that ends at `retry_until`.
    LeaseValid { retry_until: Option<Timestamp> },
    /// Any other reason, exactly.
    Because(NotTakenReason),
}

/// The state machine of [contract §5](tenure_lease_core::contract).
fn may_become(from: Status, to: Status) -> bool {
    match from {
        Status::Pending => matches!(to, Status::Running | Status::Succeeded | Status::Failed),
        Status::Running => matches!(to, Status::Succeeded | Status::Failed | Status::Interrupted),
        Status::Interrupted => to == Status::Failed,
        _ => false,
    }
}

/// Every live (admitted, not purged) record, by id.
#[derive(Debug, Default)]
pub(crate) struct Model {
    records: BTreeMap<String, ModelRecord>,
    /// Permits used of each rate limit, by key ([contract §16](tenure_lease_core::contract)).
    rate_uses: BTreeMap<String, u32>,
}

impl Model {
    /// The record with this id, if live.
    pub(crate) fn get(&self, id: &str) -> Option<&ModelRecord> {
        self.records.get(id)
    }

    /// The record with this id, to teach it drawn values.
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut ModelRecord> {
        self.records.get_mut(id)
    }

    /// Active records, ordered by id.
    pub(crate) fn active(&self) -> Vec<&ModelRecord> {
        self.records
            .values()
            .filter(|record| record.is_active())
            .collect()
    }

    /// Records that are not terminal yet, ordered by id.
    pub(crate) fn unfinished(&self) -> Vec<&ModelRecord> {
        self.records
            .values()
            .filter(|record| !record.is_terminal())
            .collect()
    }

    /// The slot of the counted `scope` an admission contends for
    /// ([contract §17](tenure_lease_core::contract)): the lowest free one;
    /// when all are held, under `Interrupt` the lowest whose holder it may
    /// interrupt; else the one whose holder's lease ends first (no lease
    /// last, then the lowest).
    fn slot_for(&self, request: &Admit, scope: &str, capacity: u32) -> u32 {
        let holder_of = |slot: u32| {
            self.records
                .values()
                .find(|record| record.holds_slot(scope, slot))
        };
        let mut held = Vec::new();
        for slot in 0..capacity {
            match holder_of(slot) {
                None => return slot,
                Some(holder) => held.push((slot, holder)),
            }
        }
        if request.strategy == AdmitStrategy::Interrupt {
            if let Some((slot, _)) = held.iter().find(|(_, holder)| {
                holder.owner == request.owner || !holder.holds_lease(request.grace)
            }) {
                return *slot;
            }
        }
        held.iter()
            .min_by_key(|(slot, holder)| {
                let ends = holder.lease.as_ref().map(|lease| lease.expires_at.known());
                (ends.is_none(), ends, *slot)
            })
            .map_or(0, |(slot, _)| *slot)
    }

    /// [Contract §3](tenure_lease_core::contract), admit.
    pub(crate) fn admit(&mut self, request: &Admit) -> AdmitExpectation {
        if self.records.contains_key(&request.id) {
            return AdmitExpectation::AlreadyExists;
        }
        // The slot contended for in each counted scope (§17), then the
        // active holders of the slots requested, in scope order, each once.
        let slots: BTreeMap<String, u32> = request
            .capacities
            .iter()
            .map(|(scope, &capacity)| (scope.clone(), self.slot_for(request, scope, capacity)))
            .collect();
        let mut holders: Vec<&ModelRecord> = Vec::new();
        for scope in &request.scopes {
            let slot = slots.get(scope).copied().unwrap_or(0);
            for record in self.records.values() {
                let holds = record.holds_slot(scope, slot);
                if holds && !holders.iter().any(|seen| seen.id == record.id) {
                    holders.push(record);
                }
            }
        }
        let blocking = holders.iter().find(|holder| match request.strategy {
            AdmitStrategy::Interrupt => {
                holder.owner != request.owner && holder.holds_lease(request.grace)
            }
            _ => true,
        });
        if let Some(holder) = blocking {
            return AdmitExpectation::Conflict {
                holder: holder.id.clone(),
                retry_until: holder.holds_until(request.grace),
            };
        }
        if let Some((key, permits)) = &request.rate_limit {
            let used = self.rate_uses.entry(key.clone()).or_default();
            if *used >= *permits {
                return AdmitExpectation::RateLimited { key: key.clone() };
            }
            *used += 1;
        }
        let interrupted: Vec<String> = holders.iter().map(|holder| holder.id.clone()).collect();
        for id in &interrupted {
            if let Some(holder) = self.records.get_mut(id) {
                holder.status = Status::Interrupted;
                holder.stop_reason = Some(INTERRUPTED_BY_ADMISSION.to_owned());
                holder.hand_to(&request.owner);
            }
        }
        self.records.insert(
            request.id.clone(),
            ModelRecord {
                id: request.id.clone(),
                scopes: request.scopes.clone(),
                slots,
                kind: request.kind.clone(),
                status: Status::Pending,
                owner: request.owner.clone(),
                fence: Drawn::Fresh,
                lease: request.ttl.map(Lease::fresh),
                created_at: Drawn::Fresh,
                updated_at: Drawn::Fresh,
                error: None,
                stop_reason: None,
                metadata: request.metadata.clone(),
                progress: None,
            },
        );
        AdmitExpectation::Admitted { interrupted }
    }

    /// [Contract §4](tenure_lease_core::contract), renew (with `progress`,
    /// renew_with_progress): `Ok` when the claim holds and the lease is
    /// extended (and the progress recorded).
    pub(crate) fn renew(
        &mut self,
        claim: &Claim,
        ttl: Ttl,
        progress: Option<&serde_json::Value>,
    ) -> Result<(), LossReason> {
        let record = self.records.get_mut(&claim.id).ok_or(LossReason::Missing)?;
        if record.status == Status::Interrupted {
            return Err(LossReason::Interrupted);
        }
        if record.owner != claim.owner {
            return Err(LossReason::OwnerChanged);
        }
        if record.fence != Drawn::Known(claim.fence) {
            return Err(LossReason::FenceChanged);
        }
        if record.is_terminal() {
            return Err(LossReason::Terminal(record.status));
        }
        record.lease = Some(Lease::fresh(ttl));
        if let Some(progress) = progress {
            record.progress = Some(progress.clone());
        }
        record.touch();
        Ok(())
    }

    /// [Contract §5](tenure_lease_core::contract), transition: `Ok` when the write
    /// is applied.
    pub(crate) fn transition(
        &mut self,
        claim: &Claim,
        to: Status,
        error: Option<&str>,
        stop_reason: Option<&str>,
    ) -> Result<(), TransitionRejection> {
        let record = self
            .records
            .get_mut(&claim.id)
            .ok_or(TransitionRejection::Missing)?;
        if record.owner != claim.owner || record.fence != Drawn::Known(claim.fence) {
            return Err(TransitionRejection::Stale);
        }
        if record.is_terminal() {
            return Err(TransitionRejection::Terminal(record.status));
        }
        if !may_become(record.status, to) {
            return Err(TransitionRejection::NotAllowed {
                from: record.status,
                to,
            });
        }
        record.status = to;
        if let Some(error) = error {
            record.error = Some(error.to_owned());
        }
        if let Some(stop_reason) = stop_reason {
            record.stop_reason = Some(stop_reason.to_owned());
        }
        record.touch();
        Ok(())
    }

    /// [Contract §6](tenure_lease_core::contract), claim_for_takeover: `Ok` when
    /// `claimer` wins the record.
    pub(crate) fn take_over(
        &mut self,
        id: &str,
        claimer: &str,
        grace: Grace,
        act: &TakeoverAct,
    ) -> Result<(), NotTaken> {
        let record = self
            .records
            .get_mut(id)
            .ok_or(NotTaken::Because(NotTakenReason::Missing))?;
        if record.is_terminal() {
            return Err(NotTaken::Because(NotTakenReason::Terminal(record.status)));
        }
        if record.status == Status::Interrupted {
            return Err(NotTaken::Because(NotTakenReason::Interrupted));
        }
        if record.holds_lease(grace) {
            return Err(NotTaken::LeaseValid {
                retry_until: record.holds_until(grace),
            });
        }
        record.hand_to(claimer);
        match act {
            TakeoverAct::Fail { error, stop_reason } => {
                record.status = Status::Failed;
                record.error = Some(error.clone());
                if stop_reason.is_some() {
                    record.stop_reason.clone_from(stop_reason);
                }
            }
            TakeoverAct::Adopt { ttl } => {
                record.status = Status::Running;
                record.lease = ttl.map(Lease::fresh);
            }
        }
        Ok(())
    }

    /// [Contract §6](tenure_lease_core::contract), list_expired: active records
    /// whose lease no longer holds under `grace`, created at or before
    /// `created_before`; those without a lease first, then by expiry, then by
    /// id.
    pub(crate) fn expired(
        &self,
        grace: Grace,
        created_before: Option<Timestamp>,
    ) -> Vec<&ModelRecord> {
        let mut records: Vec<&ModelRecord> = self
            .records
            .values()
            .filter(|record| record.is_active() && !record.holds_lease(grace))
            .filter(|record| match (created_before, record.created_at.known()) {
                (Some(cutoff), Some(created_at)) => created_at <= cutoff,
                _ => true,
            })
            .collect();
        records.sort_by_key(|record| {
            let expires_at = record.lease.as_ref().and_then(|l| l.expires_at.known());
            (expires_at, record.id.clone())
        });
        records
    }

    /// [Contract §8](tenure_lease_core::contract), list_by_scope: every record
    /// naming `scope`, newest first.
    pub(crate) fn by_scope(&self, scope: &str) -> Vec<&ModelRecord> {
        let mut records: Vec<&ModelRecord> = self
            .records
            .values()
            .filter(|record| record.scopes.contains(scope))
            .collect();
        records.sort_by_key(|record| {
            (
                Reverse(record.created_at.known()),
                Reverse(record.fence.known()),
            )
        });
        records
    }

    /// [Contract §8](tenure_lease_core::contract), purge with a retention of zero:
    /// every terminal and every interrupted record goes.
    pub(crate) fn purge_finished(&mut self) -> u64 {
        let before = self.records.len();
        self.records.retain(|_, record| record.is_active());
        (before - self.records.len()) as u64
    }

    /// The store's clock moved past every lease and every grace.
    pub(crate) fn outlive_every_lease(&mut self) {
        for lease in self.records.values_mut().filter_map(|r| r.lease.as_mut()) {
            lease.standing = Standing::Gone;
        }
    }
}
