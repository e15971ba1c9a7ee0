//! Proof that the kit catches bugs.
//!
//! Each test runs the whole kit against a memory store with one deliberate
//! bug (an honest [`MemoryStore`] behind a wrapper that breaks one
//! behaviour) and expects at least one case that passes on the honest store
//! to fail on the broken one. A kit that let such a store through would
//! certify backends with the same bug.

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_backend_memory::MemoryStore;
use tenure_conformance::memory::MemoryFactory;
use tenure_conformance::{CaseOutcome, ClockControl, Factory, Report, Subject};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, ExpiredQuery, ExpiredScan, LeaseRecord,
    LeaseStore, ManualClock, Renewal, Result, StatusChange, Takeover, TakeoverRequest, Timestamp,
    Transition, TransitionRejection,
};
use tokio::sync::OnceCell;

/// One deliberate bug. Every operation defaults to the honest store; a bug
/// overrides the one operation it breaks.
#[async_trait]
trait Bug: Default + Send + Sync + 'static {
    async fn admit(&self, honest: &MemoryStore, request: &AdmitRequest) -> Result<Admission> {
        honest.admit(request).await
    }

    async fn renew(&self, honest: &MemoryStore, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        honest.renew(claim, ttl).await
    }

    async fn transition(
        &self,
        honest: &MemoryStore,
        claim: &Claim,
        change: &StatusChange,
    ) -> Result<Transition> {
        honest.transition(claim, change).await
    }

    async fn claim_for_takeover(
        &self,
        honest: &MemoryStore,
        request: &TakeoverRequest,
    ) -> Result<Takeover> {
        honest.claim_for_takeover(request).await
    }

    async fn list_expired(
        &self,
        honest: &MemoryStore,
        query: &ExpiredQuery,
    ) -> Result<ExpiredScan> {
        honest.list_expired(query).await
    }
}

/// A memory store that behaves honestly except where `B` breaks it.
struct Broken<B> {
    honest: MemoryStore,
    bug: B,
}

// Written by hand (it changes answers, not only wraps them): every
// method is spelled out, so none silently falls back to a default.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<B: Bug> LeaseStore for Broken<B> {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        self.bug.admit(&self.honest, request).await
    }

    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        self.bug.renew(&self.honest, claim, ttl).await
    }

    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        self.honest.renew_many(claims, ttl).await
    }

    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        self.bug.transition(&self.honest, claim, change).await
    }

    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        self.bug.claim_for_takeover(&self.honest, request).await
    }

    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        self.bug.list_expired(&self.honest, query).await
    }

    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
        self.honest.get(id).await
    }

    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
        self.honest.list_by_scope(scope).await
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        self.honest.list_active().await
    }

    async fn now(&self) -> Result<Timestamp> {
        self.honest.now().await
    }

    async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
        self.honest.purge(terminal_older_than).await
    }
}

/// Creates a fresh [`Broken`] store with bug `B` on a manual clock per case.
struct BrokenFactory<B>(PhantomData<fn() -> B>);

impl<B> Default for BrokenFactory<B> {
    fn default() -> Self {
        BrokenFactory(PhantomData)
    }
}

#[async_trait]
impl<B: Bug> Factory for BrokenFactory<B> {
    type Store = Broken<B>;

    async fn create(&self) -> Result<Subject<Broken<B>>> {
        let clock = Arc::new(ManualClock::starting_now());
        Ok(Subject {
            store: Broken {
                honest: MemoryStore::with_clock(clock.clone()),
                bug: B::default(),
            },
            clock: ClockControl::Manual(clock),
        })
    }
}

/// Interrupt admission that mutates before checking: fails every
/// reclaimable holder of the requested scopes, then asks the honest store,
/// which may still answer `Conflict` (or reject the request).
#[derive(Default)]
struct InterruptMutatesFirst;

#[async_trait]
impl Bug for InterruptMutatesFirst {
    async fn admit(&self, honest: &MemoryStore, request: &AdmitRequest) -> Result<Admission> {
        if request.strategy == AdmitStrategy::Interrupt {
            for scope in &request.scopes {
                for holder in honest.list_by_scope(scope).await? {
                    if holder.is_active() {
                        let takeover =
                            TakeoverRequest::fail(holder.id, request.owner.clone(), "interrupted")
                                .grace(request.grace);
                        honest.claim_for_takeover(&takeover).await?;
                    }
                }
            }
        }
        honest.admit(request).await
    }
}

/// Renew that ignores the fence: renews with the stored fence whenever the
/// owner matches, so a stale copy keeps renewing.
#[derive(Default)]
struct RenewIgnoresFence;

#[async_trait]
impl Bug for RenewIgnoresFence {
    async fn renew(&self, honest: &MemoryStore, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        let stored_fence = honest
            .get(&claim.id)
            .await?
            .filter(|record| record.owner.as_deref() == Some(claim.owner.as_str()))
            .map(|record| record.fence);
        let claim = Claim {
            fence: stored_fence.unwrap_or(claim.fence),
            ..claim.clone()
        };
        honest.renew(&claim, ttl).await
    }
}

/// Takeover that ignores grace: judges every lease with no grace at all.
#[derive(Default)]
struct TakeoverIgnoresGrace;

#[async_trait]
impl Bug for TakeoverIgnoresGrace {
    async fn claim_for_takeover(
        &self,
        honest: &MemoryStore,
        request: &TakeoverRequest,
    ) -> Result<Takeover> {
        let request = TakeoverRequest {
            grace: Duration::ZERO,
            ..request.clone()
        };
        honest.claim_for_takeover(&request).await
    }
}

/// Transition that overwrites terminal rows: answers `Applied` with the
/// requested status where the honest answer is `Rejected(Terminal)`.
#[derive(Default)]
struct TransitionOverwritesTerminal;

#[async_trait]
impl Bug for TransitionOverwritesTerminal {
    async fn transition(
        &self,
        honest: &MemoryStore,
        claim: &Claim,
        change: &StatusChange,
    ) -> Result<Transition> {
        let answer = honest.transition(claim, change).await?;
        let Transition::Rejected(TransitionRejection::Terminal(_)) = answer else {
            return Ok(answer);
        };
        let Some(mut record) = honest.get(&claim.id).await? else {
            return Ok(answer);
        };
        record.status = change.status;
        Ok(Transition::Applied(record))
    }
}

/// Takeover without a fence bump: answers `Taken` with the record's old
/// fence, so the new owner's claim is indistinguishable from the old one.
#[derive(Default)]
struct TakeoverKeepsFence;

#[async_trait]
impl Bug for TakeoverKeepsFence {
    async fn claim_for_takeover(
        &self,
        honest: &MemoryStore,
        request: &TakeoverRequest,
    ) -> Result<Takeover> {
        let old_fence = honest.get(&request.id).await?.map(|record| record.fence);
        match honest.claim_for_takeover(request).await? {
            Takeover::Taken(mut record) => {
                record.fence = old_fence.unwrap_or(record.fence);
                Ok(Takeover::Taken(record))
            }
            other => Ok(other),
        }
    }
}

/// Admission without scope exclusion: admits with the scopes stripped and
/// answers as if they were held.
#[derive(Default)]
struct AdmitIgnoresScopes;

#[async_trait]
impl Bug for AdmitIgnoresScopes {
    async fn admit(&self, honest: &MemoryStore, request: &AdmitRequest) -> Result<Admission> {
        let stripped = AdmitRequest {
            scopes: BTreeSet::new(),
            ..request.clone()
        };
        match honest.admit(&stripped).await? {
            Admission::Admitted {
                mut record,
                interrupted,
            } => {
                record.scopes = request.scopes.clone();
                Ok(Admission::Admitted {
                    record,
                    interrupted,
                })
            }
            other => Ok(other),
        }
    }
}

/// The reaper's scan ignoring grace: lists leases that are still within it.
#[derive(Default)]
struct ListExpiredIgnoresGrace;

#[async_trait]
impl Bug for ListExpiredIgnoresGrace {
    async fn list_expired(
        &self,
        honest: &MemoryStore,
        query: &ExpiredQuery,
    ) -> Result<ExpiredScan> {
        let query = ExpiredQuery {
            grace: Duration::ZERO,
            ..query.clone()
        };
        honest.list_expired(&query).await
    }
}

/// The kit against the honest memory store, run once and shared by every test.
async fn honest_report() -> &'static Report {
    static HONEST: OnceCell<Report> = OnceCell::const_new();
    HONEST
        .get_or_init(|| tenure_conformance::run_all(&MemoryFactory))
        .await
}

/// Runs the kit against bug `B` and fails unless some case that passes on
/// the honest store fails on the broken one; prints which cases caught it.
async fn assert_caught<B: Bug>() {
    let bug = std::any::type_name::<B>()
        .rsplit("::")
        .next()
        .unwrap_or("bug");
    let honest = honest_report().await;
    let broken = tenure_conformance::run_all(&BrokenFactory::<B>::default()).await;
    let passes_honestly = |name: &str| {
        honest
            .cases
            .iter()
            .any(|case| case.name == name && case.outcome == CaseOutcome::Passed)
    };
    let caught: Vec<&str> = broken
        .failures()
        .into_iter()
        .map(|case| case.name)
        .filter(|name| passes_honestly(name))
        .collect();
    println!("{bug} caught by {} case(s): {caught:?}", caught.len());
    assert!(
        !caught.is_empty(),
        "no case that passes on the honest store caught {bug}:\n{broken}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_interrupt_that_mutates_before_checking() {
    assert_caught::<InterruptMutatesFirst>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_renew_that_ignores_the_fence() {
    assert_caught::<RenewIgnoresFence>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_takeover_that_ignores_grace() {
    assert_caught::<TakeoverIgnoresGrace>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_transition_that_overwrites_terminal_records() {
    assert_caught::<TransitionOverwritesTerminal>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_takeover_without_fence_bump() {
    assert_caught::<TakeoverKeepsFence>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_admission_without_scope_exclusion() {
    assert_caught::<AdmitIgnoresScopes>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_list_expired_that_ignores_grace() {
    assert_caught::<ListExpiredIgnoresGrace>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_memory_store_passes_every_case() {
    let report = honest_report().await;
    // Memory keeps typed values, so it cannot hold damage: the damage cases
    // are skipped, every other case passes.
    let damage_case = |name: &str| name.starts_with("fault_damaged_");
    assert!(
        report.cases.iter().all(|case| match case.outcome {
            CaseOutcome::Passed => true,
            CaseOutcome::Skipped(_) => damage_case(case.name),
            _ => false,
        }),
        "{report}"
    );
    assert_eq!(report.skipped(), 1, "{report}");
}
