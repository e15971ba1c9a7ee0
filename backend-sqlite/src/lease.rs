//! [`LeaseStore`] for [`SqliteStore`]: validation on the caller's task, then
//! one transaction on the connection thread per operation. The writes are
//! the shared [`engine`]'s over [`Records`]; the scans and retention are in
//! [`lease_ops`](crate::lease_ops).

use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::engine;
use tenure_lease_core::backend::validate::operation as validate;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, LeaseStore, Renewal,
    Result, StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

use crate::records::{self, Records};
use crate::{lease_ops, SqliteStore};

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        let metadata = validate::admit(request)?.clone();
        let request = request.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::admit(&mut Records(transaction), now, &request, metadata)
                })
            })
            .await
    }

    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        validate::renew(claim, ttl)?;
        let claim = claim.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew(&mut Records(transaction), now, &claim, ttl)
                })
            })
            .await
    }

    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        validate::renew_many(claims, ttl)?;
        let claims = claims.to_vec();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::renew_many(&mut Records(transaction), now, &claims, ttl)
                })
            })
            .await
    }

    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        validate::transition(claim, change)?;
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

    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        validate::claim_for_takeover(request)?;
        let request = request.clone();
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    engine::claim_for_takeover(&mut Records(transaction), now, &request)
                })
            })
            .await
    }

    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        validate::list_expired(query)?;
        let query = query.clone();
        self.connection
            .run(move |session| {
                session.read(|connection, now| lease_ops::list_expired(connection, now, &query))
            })
            .await
    }

    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
        validate::get(id)?;
        let id = id.to_owned();
        self.connection
            .run(move |session| session.read(|connection, _| records::load(connection, &id)))
            .await
    }

    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
        validate::list_by_scope(scope)?;
        let scope = scope.to_owned();
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

    async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
        validate::purge(terminal_older_than)?;
        self.connection
            .run(move |session| {
                session.write(|transaction, now| {
                    lease_ops::purge(transaction, now, terminal_older_than)
                })
            })
            .await
    }
}
