//! Helpers shared by the keeper test crates: a memory store behind a
//! fault-injecting wrapper (leases and jobs), a store clock that can jump
//! ahead of tokio's, and the keeper settings the tests use.
//!
//! Each test crate uses a part of these, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure_backend_memory::MemoryStore;
use tenure_lease_core::keeper::{Keeper, KeeperConfig};
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobQueue, JobRenewal, JobSettle, NewJob,
    OperatorRetry, ReapReport, TakeBack,
};
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, Clock, ExpiredQuery, ExpiredScan, LeaseRecord, LeaseStore,
    Renewal, Result, StatusChange, Takeover, TakeoverRequest, Timestamp, TokioClock, Transition,
};
use tokio::sync::watch;
use tokio::time::Instant;

pub const TTL: Duration = Duration::from_secs(3);
pub const BEAT: Duration = Duration::from_secs(1);

/// Store time = tokio time + an offset the test can jump forward, to stand
/// for a peer that sees a lease expired while its owner does not know yet.
#[derive(Debug)]
pub struct OffsetClock {
    base: TokioClock,
    offset: Mutex<Duration>,
}

impl OffsetClock {
    pub fn jump(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> Timestamp {
        tenure_lease_core::clock::add(self.base.now(), *self.offset.lock().unwrap())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Admit,
    Renew,
    RenewMany,
    Transition,
    Takeover,
    ListExpired,
    Get,
    Claim,
    RenewJob,
    Complete,
    Fail,
    Defer,
    Reap,
    TakeBack,
    GetJob,
}

#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Answer `Err(Unavailable)` without touching the store.
    Fail,
    /// Answer `Err(Corrupt)` without touching the store, as a backend does
    /// when a record it must read cannot be decoded.
    Corrupt,
    /// Never answer until `release_hangs`, then run the operation.
    Hang,
    /// Apply the operation at once, answer after this long.
    SlowAnswer(Duration),
    /// Panic inside the call without touching the store, as a buggy store
    /// (or a hook it calls) would; the rule is removed after the first panic.
    PanicOnce,
}

pub struct FaultyStore {
    pub inner: MemoryStore,
    pub clock: Arc<OffsetClock>,
    rules: Mutex<Vec<(Op, Option<String>, Fault)>>,
    calls: Mutex<HashMap<Op, usize>>,
    released: watch::Sender<bool>,
    hangs_dropped: Arc<AtomicUsize>,
}

pub struct CountDrop(pub Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl FaultyStore {
    pub fn new() -> Arc<Self> {
        let clock = Arc::new(OffsetClock {
            base: TokioClock::new(),
            offset: Mutex::new(Duration::ZERO),
        });
        Arc::new(FaultyStore {
            inner: MemoryStore::with_clock(clock.clone()),
            clock,
            rules: Mutex::new(Vec::new()),
            calls: Mutex::new(HashMap::new()),
            released: watch::Sender::new(false),
            hangs_dropped: Arc::new(AtomicUsize::new(0)),
        })
    }

    pub fn inject(&self, op: Op, id: Option<&str>, fault: Fault) {
        self.rules
            .lock()
            .unwrap()
            .push((op, id.map(str::to_owned), fault));
    }

    pub fn clear(&self) {
        self.rules.lock().unwrap().clear();
    }

    pub fn release_hangs(&self) {
        self.clear();
        self.released.send_replace(true);
    }

    pub fn calls(&self, op: Op) -> usize {
        self.calls.lock().unwrap().get(&op).copied().unwrap_or(0)
    }

    pub fn hangs_dropped(&self) -> usize {
        self.hangs_dropped.load(Ordering::SeqCst)
    }

    /// Counts the call and applies the first matching fault; answers the
    /// delay to add after the operation.
    async fn enter(&self, op: Op, ids: &[&str]) -> Result<Duration> {
        *self.calls.lock().unwrap().entry(op).or_default() += 1;
        let fault = {
            let mut rules = self.rules.lock().unwrap();
            let index = rules.iter().position(|(rule_op, id, _)| {
                *rule_op == op && id.as_deref().is_none_or(|id| ids.contains(&id))
            });
            index.map(|index| match rules[index].2 {
                Fault::PanicOnce => rules.remove(index).2,
                fault => fault,
            })
        };
        match fault {
            Some(Fault::PanicOnce) => panic!("injected panic in {op:?}"),
            None => Ok(Duration::ZERO),
            Some(Fault::Fail) => Err(tenure_lease_core::Error::unavailable("injected failure")),
            Some(Fault::Corrupt) => Err(tenure_lease_core::Error::corrupt(
                "injected undecodable record",
            )),
            Some(Fault::SlowAnswer(delay)) => Ok(delay),
            Some(Fault::Hang) => {
                let dropped = CountDrop(self.hangs_dropped.clone());
                let mut released = self.released.subscribe();
                let _ = released.wait_for(|released| *released).await;
                std::mem::forget(dropped);
                Ok(Duration::ZERO)
            }
        }
    }

    async fn answer<T>(delay: Duration, result: Result<T>) -> Result<T> {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        result
    }
}

// Written by hand (it changes answers, not only wraps them): every
// method is spelled out, so none silently falls back to a default.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl JobQueue for FaultyStore {
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        self.inner.enqueue(job).await
    }
    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
        self.inner.enqueue_batch(jobs).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        let delay = self.enter(Op::Claim, &[]).await?;
        Self::answer(delay, self.inner.claim(request).await).await
    }
    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
        let delay = self.enter(Op::RenewJob, &[&claim.id]).await?;
        Self::answer(delay, self.inner.renew_job(claim, ttl).await).await
    }
    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
        let delay = self.enter(Op::Complete, &[&claim.id]).await?;
        Self::answer(delay, self.inner.complete(claim).await).await
    }
    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
        let delay = self.enter(Op::Fail, &[&claim.id]).await?;
        Self::answer(delay, self.inner.fail(claim, error, action).await).await
    }
    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
        let delay = self.enter(Op::Defer, &[&claim.id]).await?;
        Self::answer(delay, self.inner.defer(claim, missing).await).await
    }
    async fn reap(&self, grace: Duration) -> Result<ReapReport> {
        let delay = self.enter(Op::Reap, &[]).await?;
        Self::answer(delay, self.inner.reap(grace).await).await
    }
    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
        let delay = self.enter(Op::TakeBack, &[&claim.id]).await?;
        Self::answer(delay, self.inner.take_back(claim, ttl).await).await
    }
    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        let delay = self.enter(Op::GetJob, &[id]).await?;
        Self::answer(delay, self.inner.get_job(id).await).await
    }
    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
        self.inner.list_dead_letters(queue, limit).await
    }
    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
        self.inner.retry_dead_letter(id).await
    }
    async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64> {
        self.inner.purge_jobs(finished_older_than).await
    }
}

// Written by hand (it changes answers, not only wraps them): every
// method is spelled out, so none silently falls back to a default.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LeaseStore for FaultyStore {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        let delay = self.enter(Op::Admit, &[&request.id]).await?;
        Self::answer(delay, self.inner.admit(request).await).await
    }
    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        let delay = self.enter(Op::Renew, &[&claim.id]).await?;
        Self::answer(delay, self.inner.renew(claim, ttl).await).await
    }
    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        let ids: Vec<&str> = claims.iter().map(|claim| claim.id.as_str()).collect();
        let delay = self.enter(Op::RenewMany, &ids).await?;
        Self::answer(delay, self.inner.renew_many(claims, ttl).await).await
    }
    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        let delay = self.enter(Op::Transition, &[&claim.id]).await?;
        Self::answer(delay, self.inner.transition(claim, change).await).await
    }
    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        let delay = self.enter(Op::Takeover, &[&request.id]).await?;
        Self::answer(delay, self.inner.claim_for_takeover(request).await).await
    }
    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        let delay = self.enter(Op::ListExpired, &[]).await?;
        Self::answer(delay, self.inner.list_expired(query).await).await
    }
    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
        let delay = self.enter(Op::Get, &[id]).await?;
        Self::answer(delay, self.inner.get(id).await).await
    }
    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
        self.inner.list_by_scope(scope).await
    }
    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        self.inner.list_active().await
    }
    async fn now(&self) -> Result<Timestamp> {
        self.inner.now().await
    }
    async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
        self.inner.purge(terminal_older_than).await
    }
}

/// ttl 3 s, beat 1 s, reconciler only on demand, failing orphans.
pub fn config() -> KeeperConfig {
    KeeperConfig::with_ttl(TTL).auto_reconcile(false)
}

pub fn start(store: &Arc<FaultyStore>, config: KeeperConfig) -> Keeper {
    Keeper::builder(store.clone(), config).start().unwrap()
}

pub async fn at(start: Instant, offset: Duration) {
    tokio::time::sleep_until(start + offset).await;
}

pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}
