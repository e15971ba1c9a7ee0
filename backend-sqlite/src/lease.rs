//! [`LeaseBackend`] for [`SqliteStore`]: input checked on the caller's
//! task (by the shared front), then one transaction on the connection
//! thread per operation. The writes are
//! the shared [`engine`]'s over [`Records`]; the scans and retention are in
//! [`lease_ops`](crate::lease_ops).

use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::engine;
use tenure_lease_core::backend::stores::LeaseBackend;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, Renewal, Result,
    StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

use crate::records::{self, Records};
use crate::{lease_ops, SqliteStore};

#[async_trait]
impl LeaseBackend for SqliteStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let (request, metadata) = (request.get().clone(), metadata.get().clone());
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::admit(&mut Records(transaction), now, &request, metadata)
                })
            })
            .await
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let claim = claim.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew(&mut Records(transaction), now, &claim, ttl)
                })
            })
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
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew_with_progress(
                        &mut Records(transaction),
                        now,
                        &claim,
                        ttl,
                        &progress,
                    )
                })
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
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew_many(&mut Records(transaction), now, &claims, ttl)
                })
            })
            .await
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        let claim = claim.clone();
        let change = change.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::transition(&mut Records(transaction), now, &claim, &change)
                })
            })
            .await
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get().clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::claim_for_takeover(&mut Records(transaction), now, &request)
                })
            })
            .await
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get().clone();
        self.connection
            .run(move |session| {
                session.read(|connection, now| lease_ops::list_expired(connection, now, &query))
            })
            .await
    }

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get().to_owned();
        self.connection
            .run(move |session| session.read(|connection, _| records::load(connection, &id)))
            .await
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let scope = scope.get().to_owned();
        self.connection
            .run(move |session| {
                session.read(|connection, _| lease_ops::list_by_scope(connection, &scope))
            })
            .await
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        self.connection
            .run(|session| session.read(|connection, _| lease_ops::list_active(connection)))
            .await
    }

    async fn now(&self) -> Result<Timestamp> {
        Ok(self.clock.now())
    }

    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    lease_ops::purge(transaction, now, terminal_older_than)
                })
            })
            .await
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        self.connection
            .run(move |session| {
                session.read(|connection, now| {
                    lease_ops::count_purgeable(connection, now, terminal_older_than)
                })
            })
            .await
    }
}
