//! Tracing for every store operation, as a wrapper that is itself a store.
//!
//! [`Instrumented`] opens one `tracing` span per operation (fields `lease.id`,
//! `owner`, `fence`, `outcome`) and logs failures, so no backend repeats
//! that code. Wrap any store with [`LeaseStoreExt::instrumented`].

use std::time::Duration;

use async_trait::async_trait;
use tracing::{field, Instrument, Span};

use crate::clock::Timestamp;
use crate::error::Result;
use crate::outcome::{Admission, ExpiredScan, Renewal, Takeover, Transition};
use crate::record::{Claim, LeaseRecord};
use crate::request::{AdmitRequest, ExpiredQuery, StatusChange, TakeoverRequest};
use crate::store::LeaseStore;

/// A store whose every operation is traced: one `tracing` span per
/// operation with fields `lease.id`, `owner`, `fence` and `outcome`.
#[derive(Debug, Clone)]
pub struct Instrumented<S> {
    inner: S,
}

impl<S> Instrumented<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Instrumented { inner }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the store.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// Conveniences on every [`LeaseStore`].
pub trait LeaseStoreExt: LeaseStore + Sized {
    /// Wraps the store so each operation is traced.
    fn instrumented(self) -> Instrumented<Self> {
        Instrumented::new(self)
    }
}

impl<S: LeaseStore> LeaseStoreExt for S {}

fn span(operation: &'static str, id: &str, owner: &str, fence: Option<u64>) -> Span {
    let span = tracing::debug_span!(
        "tenure.store",
        operation,
        lease.id = id,
        owner = owner,
        fence = field::Empty,
        outcome = field::Empty,
    );
    if let Some(fence) = fence {
        span.record("fence", fence);
    }
    span
}

/// Records the outcome label (or the error) on the current span.
fn finish<T>(result: Result<T>, label: impl FnOnce(&T) -> &'static str) -> Result<T> {
    let span = Span::current();
    match &result {
        Ok(value) => {
            span.record("outcome", label(value));
        }
        Err(error) => {
            span.record("outcome", error.kind().as_str());
            tracing::warn!(%error, "store operation failed");
        }
    }
    result
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for Instrumented<S> {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        let span = span("admit", &request.id, &request.owner, None);
        async {
            let result = self.inner.admit(request).await;
            if let Ok(Admission::Admitted { record, .. }) = &result {
                Span::current().record("fence", record.fence);
            }
            finish(result, Admission::label)
        }
        .instrument(span)
        .await
    }

    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        let span = span("renew", &claim.id, &claim.owner, Some(claim.fence));
        async { finish(self.inner.renew(claim, ttl).await, Renewal::label) }
            .instrument(span)
            .await
    }

    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        let span = tracing::debug_span!(
            "tenure.store",
            operation = "renew_many",
            claims = claims.len(),
            outcome = field::Empty
        );
        async { finish(self.inner.renew_many(claims, ttl).await, |_| "answered") }
            .instrument(span)
            .await
    }

    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        let span = span("transition", &claim.id, &claim.owner, Some(claim.fence));
        async {
            finish(
                self.inner.transition(claim, change).await,
                Transition::label,
            )
        }
        .instrument(span)
        .await
    }

    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        let span = span("claim_for_takeover", &request.id, &request.claimer, None);
        async {
            let result = self.inner.claim_for_takeover(request).await;
            if let Ok(Takeover::Taken(record)) = &result {
                Span::current().record("fence", record.fence);
            }
            finish(result, Takeover::label)
        }
        .instrument(span)
        .await
    }

    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        let span = tracing::debug_span!(
            "tenure.store",
            operation = "list_expired",
            outcome = field::Empty
        );
        async { finish(self.inner.list_expired(query).await, |_| "listed") }
            .instrument(span)
            .await
    }

    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
        let span = span("get", id, "", None);
        async {
            finish(self.inner.get(id).await, |found| {
                if found.is_some() {
                    "found"
                } else {
                    "missing"
                }
            })
        }
        .instrument(span)
        .await
    }

    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
        let span = tracing::debug_span!(
            "tenure.store",
            operation = "list_by_scope",
            scope,
            outcome = field::Empty
        );
        async { finish(self.inner.list_by_scope(scope).await, |_| "listed") }
            .instrument(span)
            .await
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let span = tracing::debug_span!(
            "tenure.store",
            operation = "list_active",
            outcome = field::Empty
        );
        async { finish(self.inner.list_active().await, |_| "listed") }
            .instrument(span)
            .await
    }

    async fn now(&self) -> Result<Timestamp> {
        self.inner.now().await
    }

    async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
        let span =
            tracing::debug_span!("tenure.store", operation = "purge", outcome = field::Empty);
        async { finish(self.inner.purge(terminal_older_than).await, |_| "purged") }
            .instrument(span)
            .await
    }
}
