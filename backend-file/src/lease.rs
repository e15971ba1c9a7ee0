//! [`LeaseBackend`] for [`FileStore`]: the writes are the shared [`engine`]'s,
//! with the document read under the lock as the transaction (an `Err`
//! writes nothing back, which is the rollback); the scans judge each
//! decoded record with the shared [`rules`].

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::engine::{self, RecordTransaction};
use tenure_lease_core::backend::rules;
use tenure_lease_core::backend::stores::LeaseBackend;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, Renewal, Result,
    SkippedRecord, Status, StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

use crate::document::{self, Document};
use crate::FileStore;

impl Document {
    /// Takes the keys an active `record` holds in the scope index: each
    /// scope's slot key ([`rules::held_keys`]), the scope itself unless it
    /// is a counted scope's slot above 0.
    fn hold_keys(&mut self, record: &LeaseRecord) {
        for key in rules::held_keys(record) {
            self.holders.insert(key.into_owned(), record.id.clone());
        }
    }

    /// Frees the keys `record` held, once it is no longer active.
    fn release_keys(&mut self, record: &LeaseRecord) {
        for key in rules::held_keys(record) {
            if self.holders.get(key.as_ref()) == Some(&record.id) {
                self.holders.remove(key.as_ref());
            }
        }
    }
}

/// The engine's view of the records: six steps over the document.
impl RecordTransaction for Document {
    fn exists(&mut self, id: &str) -> Result<bool> {
        Ok(self.records.contains_key(id))
    }

    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        self.records
            .get(id)
            .map(|value| {
                document::record(id, value)
                    .map_err(|why| document::undecodable("lease record", id, &why))
            })
            .transpose()
    }

    fn holder_of(&mut self, key: &str) -> Result<Option<String>> {
        Ok(self.holders.get(key).cloned())
    }

    fn next_fence(&mut self) -> Result<u64> {
        Document::next_fence(self)
    }

    fn insert(&mut self, record: &LeaseRecord) -> Result<()> {
        let value = document::encode(record)?;
        if record.is_active() {
            self.hold_keys(record);
        }
        self.records.insert(record.id.clone(), value);
        Ok(())
    }

    fn save(&mut self, record: &LeaseRecord) -> Result<()> {
        let value = document::encode(record)?;
        if !record.is_active() {
            self.release_keys(record);
        }
        self.records.insert(record.id.clone(), value);
        Ok(())
    }
}

/// A record a scan cannot decode: logged, for an operator.
fn warn_undecodable(operation: &str, id: &str, why: &str) {
    tracing::warn!(
        lease.id = %id,
        reason = %why,
        "{operation} skipped a stored lease it cannot decode; it needs an operator's attention"
    );
}

/// Whether a stored record that cannot be decoded may be active: its status
/// is one that holds scopes, or cannot be read.
fn may_be_active(value: &Value) -> bool {
    document::peek_status(value).is_none_or(Status::is_active)
}

#[async_trait]
impl LeaseBackend for FileStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let (request, metadata) = (request.get().clone(), metadata.get().clone());
        self.write(move |document, now| engine::admit(document, now, &request, metadata))
            .await
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let claim = claim.clone();
        self.write(move |document, now| engine::renew(document, now, &claim, ttl))
            .await
    }

    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        let (claim, progress) = (claim.clone(), progress.clone());
        self.write(move |document, now| {
            engine::renew_with_progress(document, now, &claim, ttl, &progress)
        })
        .await
    }

    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        let claims = claims.to_vec();
        self.write(move |document, now| engine::renew_many(document, now, &claims, ttl))
            .await
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        let (claim, change) = (claim.clone(), change.clone());
        self.write(move |document, now| engine::transition(document, now, &claim, &change))
            .await
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get().clone();
        self.write(move |document, now| engine::claim_for_takeover(document, now, &request))
            .await
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get().clone();
        self.read(move |document, now| {
            let mut scan = ExpiredScan::default();
            for (id, value) in &document.records {
                match document::record(id, value) {
                    Ok(record) => {
                        if rules::matches_expired(&record, query.grace, query.created_before, now) {
                            scan.records.push(record);
                        }
                    }
                    Err(why) if may_be_active(value) => {
                        warn_undecodable("list_expired", id, &why);
                        scan.skipped.push(SkippedRecord {
                            id: id.clone(),
                            reason: why,
                        });
                    }
                    // Finished, by its status: never a candidate.
                    Err(_) => {}
                }
            }
            scan.records
                .sort_by(|a, b| rules::expired_order(a).cmp(&rules::expired_order(b)));
            scan.records.truncate(query.limit);
            Ok(scan)
        })
        .await
    }

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get().to_owned();
        self.read(move |document, _| {
            document
                .records
                .get(&id)
                .map(|value| {
                    document::record(&id, value)
                        .map_err(|why| document::undecodable("lease record", &id, &why))
                })
                .transpose()
        })
        .await
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let scope = scope.get().to_owned();
        self.read(move |document, _| {
            let mut records = Vec::new();
            for (id, value) in &document.records {
                // Scopes that cannot be read name no scope: the record is
                // left out, which is no wrong answer.
                let names_scope =
                    document::peek_scopes(value).is_some_and(|scopes| scopes.contains(&scope));
                if names_scope {
                    records.push(
                        document::record(id, value)
                            .map_err(|why| document::undecodable("lease record", id, &why))?,
                    );
                }
            }
            records.sort_by_key(rules::newest_first);
            Ok(records)
        })
        .await
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        self.read(|document, _| {
            let mut records = Vec::new();
            for (id, value) in &document.records {
                match document::record(id, value) {
                    Ok(record) => {
                        if record.is_active() {
                            records.push(record);
                        }
                    }
                    // A status nobody knows is not active, and damage to a
                    // finished record is not this listing's: both are left
                    // out. Damage to an active one leaves no whole answer.
                    Err(why) => {
                        if document::peek_status(value).is_some_and(Status::is_active) {
                            return Err(document::undecodable("lease record", id, &why));
                        }
                    }
                }
            }
            // The map is ordered by id already.
            Ok(records)
        })
        .await
    }

    async fn now(&self) -> Result<Timestamp> {
        Ok(FileStore::now(self))
    }

    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        self.write(move |document, now| {
            document.purge_ended_rate_logs(now);
            let before = document.records.len();
            // What cannot be decoded cannot be judged: it stays.
            document.records.retain(|id, value| {
                !document::record(id, value)
                    .is_ok_and(|record| rules::purgeable(&record, terminal_older_than, now))
            });
            Ok((before - document.records.len()) as u64)
        })
        .await
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        self.read(move |document, now| {
            Ok(document
                .records
                .iter()
                .filter(|(id, value)| {
                    document::record(id, value)
                        .is_ok_and(|record| rules::purgeable(&record, terminal_older_than, now))
                })
                .count() as u64)
        })
        .await
    }
}
