//! [`LeaseStore`] for [`MemoryStore`]: the writes are the shared
//! [`engine`]'s, with the locked state as the transaction; the scans read
//! the maps directly.

use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::engine::{self, RecordTransaction};
use tenure_lease_core::backend::rules;
use tenure_lease_core::backend::validate::operation as validate;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, LeaseStore, Renewal,
    Result, StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

use crate::{MemoryStore, State};

/// The engine's view of the records: the locked state is the transaction
/// (every operation decides before it mutates, so there is nothing to roll
/// back).
impl RecordTransaction for State {
    fn exists(&mut self, id: &str) -> Result<bool> {
        Ok(self.records.contains_key(id))
    }

    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        Ok(self.records.get(id).cloned())
    }

    fn holder_of(&mut self, scope: &str) -> Result<Option<String>> {
        Ok(self.holders.get(scope).cloned())
    }

    fn next_fence(&mut self) -> Result<u64> {
        Ok(State::next_fence(self))
    }

    fn insert(&mut self, record: &LeaseRecord) -> Result<()> {
        self.hold_scopes(record);
        self.records.insert(record.id.clone(), record.clone());
        Ok(())
    }

    fn save(&mut self, record: &LeaseRecord) -> Result<()> {
        if !record.is_active() {
            self.release_scopes(record);
        }
        self.records.insert(record.id.clone(), record.clone());
        Ok(())
    }

    fn update<T>(
        &mut self,
        id: &str,
        change: impl FnOnce(&mut LeaseRecord) -> (T, bool),
    ) -> Result<Option<T>> {
        let Some(record) = self.records.get_mut(id) else {
            return Ok(None);
        };
        let (answer, write) = change(record);
        if write && !record.is_active() {
            let finished = record.clone();
            self.release_scopes(&finished);
        }
        Ok(Some(answer))
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        let metadata = validate::admit(request)?.clone();
        let now = self.now();
        engine::admit(&mut *self.lock(), now, request, metadata)
    }

    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        validate::renew(claim, ttl)?;
        let now = self.now();
        engine::renew(&mut *self.lock(), now, claim, ttl)
    }

    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        validate::renew_many(claims, ttl)?;
        let now = self.now();
        engine::renew_many(&mut *self.lock(), now, claims, ttl)
    }

    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        validate::transition(claim, change)?;
        let now = self.now();
        engine::transition(&mut *self.lock(), now, claim, change)
    }

    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        validate::claim_for_takeover(request)?;
        let now = self.now();
        engine::claim_for_takeover(&mut *self.lock(), now, request)
    }

    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        validate::list_expired(query)?;
        let now = self.now();
        let state = self.lock();
        let mut records: Vec<LeaseRecord> = state
            .records
            .values()
            .filter(|record| rules::matches_expired(record, query.grace, query.created_before, now))
            .cloned()
            .collect();
        records.sort_by(|a, b| rules::expired_order(a).cmp(&rules::expired_order(b)));
        records.truncate(query.limit);
        Ok(ExpiredScan {
            records,
            skipped: Vec::new(),
        })
    }

    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
        validate::get(id)?;
        Ok(self.lock().records.get(id).cloned())
    }

    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
        validate::list_by_scope(scope)?;
        let mut records: Vec<LeaseRecord> = self
            .lock()
            .records
            .values()
            .filter(|record| record.scopes.contains(scope))
            .cloned()
            .collect();
        records.sort_by_key(rules::newest_first);
        Ok(records)
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let mut records: Vec<LeaseRecord> = self
            .lock()
            .records
            .values()
            .filter(|record| record.is_active())
            .cloned()
            .collect();
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    async fn now(&self) -> Result<Timestamp> {
        Ok(MemoryStore::now(self))
    }

    async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
        validate::purge(terminal_older_than)?;
        let now = self.now();
        let mut state = self.lock();
        let before = state.records.len();
        state
            .records
            .retain(|_, record| !rules::purgeable(record, terminal_older_than, now));
        Ok((before - state.records.len()) as u64)
    }
}
