//! [`LeaseBackend`] for [`MemoryStore`]: the writes are the shared
//! [`engine`]'s, with the locked state as the transaction; the scans read
//! the maps directly.

use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::engine::{self, RecordTransaction};
use tenure_lease_core::backend::stores::LeaseBackend;
use tenure_lease_core::backend::{rate_rules, rules};
use tenure_lease_core::release::Releases;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, Renewal, Result,
    StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
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
impl LeaseBackend for MemoryStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let (request, metadata) = (request.get(), metadata.get().clone());
        let now = self.now();
        engine::admit(&mut *self.lock(), now, request, metadata)
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let now = self.now();
        engine::renew(&mut *self.lock(), now, claim, ttl)
    }

    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        let now = self.now();
        engine::renew_with_progress(&mut *self.lock(), now, claim, ttl, progress)
    }

    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        let now = self.now();
        engine::renew_many(&mut *self.lock(), now, claims, ttl)
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        let now = self.now();
        engine::transition(&mut *self.lock(), now, claim, change)
    }

    async fn releases(&self) -> Result<Option<Releases>> {
        Ok(Some(self.lock().releases.subscribe()))
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get();
        let now = self.now();
        engine::claim_for_takeover(&mut *self.lock(), now, request)
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get();
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

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get();
        Ok(self.lock().records.get(id).cloned())
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let scope = scope.get();
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

    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        let now = self.now();
        let mut state = self.lock();
        let before = state.records.len();
        state
            .records
            .retain(|_, record| !rules::purgeable(record, terminal_older_than, now));
        state
            .rate_logs
            .retain(|limit, uses| !rate_rules::ended(uses, limit, now));
        Ok((before - state.records.len()) as u64)
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        let now = self.now();
        let state = self.lock();
        Ok(state
            .records
            .values()
            .filter(|record| rules::purgeable(record, terminal_older_than, now))
            .count() as u64)
    }
}
