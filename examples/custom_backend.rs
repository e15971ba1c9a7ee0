//! Your own backend, proven by the conformance kit in a few lines.
//!
//! Here the "backend" is a thin layer over the memory store that counts
//! operations: any type implementing `LeaseStore` runs the same way. Give the
//! kit a `Factory` that creates a fresh, isolated store per case, then either
//! call `tenure_conformance::run_all` (below) or put
//! `tenure_conformance::tenure_conformance!(CountingFactory);` in a test file to get
//! one named test per case.
//!
//! `cargo run --example custom_backend`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_conformance::{ClockControl, Factory, Subject};
use tenure::memory::MemoryStore;
use tenure::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, LeaseStore,
    ManualClock, Renewal, StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

/// A store that counts every operation it forwards.
struct CountingStore {
    inner: MemoryStore,
    operations: AtomicU64,
}

impl CountingStore {
    fn count(&self) {
        self.operations.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl LeaseStore for CountingStore {
    async fn admit(&self, request: &AdmitRequest) -> tenure::Result<Admission> {
        self.count();
        self.inner.admit(request).await
    }
    async fn renew(&self, claim: &Claim, ttl: Duration) -> tenure::Result<Renewal> {
        self.count();
        self.inner.renew(claim, ttl).await
    }
    async fn transition(&self, claim: &Claim, change: &StatusChange) -> tenure::Result<Transition> {
        self.count();
        self.inner.transition(claim, change).await
    }
    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> tenure::Result<Takeover> {
        self.count();
        self.inner.claim_for_takeover(request).await
    }
    async fn list_expired(&self, query: &ExpiredQuery) -> tenure::Result<ExpiredScan> {
        self.count();
        self.inner.list_expired(query).await
    }
    async fn get(&self, id: &str) -> tenure::Result<Option<LeaseRecord>> {
        self.count();
        self.inner.get(id).await
    }
    async fn list_by_scope(&self, scope: &str) -> tenure::Result<Vec<LeaseRecord>> {
        self.count();
        self.inner.list_by_scope(scope).await
    }
    async fn list_active(&self) -> tenure::Result<Vec<LeaseRecord>> {
        self.count();
        self.inner.list_active().await
    }
    async fn now(&self) -> tenure::Result<Timestamp> {
        self.inner.now().await
    }
    async fn purge(&self, terminal_older_than: Duration) -> tenure::Result<u64> {
        self.count();
        self.inner.purge(terminal_older_than).await
    }
}

/// A fresh store per case, on a clock the kit may move.
struct CountingFactory;

#[async_trait]
impl Factory for CountingFactory {
    type Store = CountingStore;

    async fn create(&self) -> tenure::Result<Subject<CountingStore>> {
        let clock = Arc::new(ManualClock::starting_now());
        Ok(Subject {
            store: CountingStore {
                inner: MemoryStore::with_clock(clock.clone()),
                operations: AtomicU64::new(0),
            },
            clock: ClockControl::Manual(clock),
        })
    }
}

#[tokio::main]
async fn main() {
    let report = tenure_conformance::run_all(&CountingFactory).await;
    println!("{report}");
    if !report.all_passed() {
        std::process::exit(1);
    }
}
