//! Proof that the kit's gate cases catch bugs: each test runs them against
//! a store whose gate has one deliberate bug, and expects the case aimed at
//! it to fail, where the honest memory store passes every one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tenure_backend_memory::MemoryStore;
use tenure_conformance::{run_gate_all, CaseOutcome, ClockControl, Factory, Report, Subject};
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, FenceCheck, FenceStore, GateRecord,
    LeaseRecord, LeaseStore, ManualClock, Renewal, Result, StaleFence, StatusChange, Takeover,
    TakeoverRequest, Timestamp, Transition,
};

/// A gate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// Reads the highest, then writes in a second step. A check of an odd
    /// fence holds between the two until another check lands (at most
    /// [`TORN_HOLD`]), so the race cases meet the interleaving however the
    /// machine schedules them.
    TornCheck,
    /// Refuses an equal fence.
    EqualRefused,
    /// Purges every gate, whatever the retention.
    PurgesEverything,
    /// Checks no input.
    NoValidation,
    /// Takes two names differing only in case for one resource.
    CaseFolded,
    /// Stamps a gate when it is created and on an equal fence, not when a
    /// higher one raises it.
    RaisedKeepsItsStamp,
    /// Lists gates from `after` itself, not after it, and in the order of
    /// its map.
    ListsFromAfterUnordered,
}

/// The longest a [`Bug::TornCheck`] check of an odd fence waits, between
/// its read and its write, for another check to land.
const TORN_HOLD: Duration = Duration::from_millis(5);

/// The honest memory store, with a gate of its own carrying `bug`: per
/// resource the highest fence accepted and when it last accepted one.
struct Broken {
    honest: MemoryStore,
    bug: Bug,
    gates: Mutex<HashMap<String, (u64, Timestamp)>>,
    /// How many checks have written the gate: a torn check waits for it to
    /// move.
    landed: tokio::sync::watch::Sender<u64>,
}

impl Broken {
    fn gates(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Timestamp)>> {
        self.gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The key `resource` is kept under.
    fn key(&self, resource: &str) -> String {
        if self.bug == Bug::CaseFolded {
            resource.to_lowercase()
        } else {
            resource.to_owned()
        }
    }

    fn highest(&self, resource: &str) -> Option<u64> {
        self.gates()
            .get(&self.key(resource))
            .map(|&(fence, _)| fence)
    }
}

#[async_trait]
impl FenceStore for Broken {
    async fn check_fence(&self, resource: &str, fence: u64) -> Result<FenceCheck> {
        if self.bug != Bug::NoValidation {
            tenure_lease_core::backend::checked::fence_check(resource, fence)?;
        }
        let mut landed = self.landed.subscribe();
        let highest = self.highest(resource);
        let refused = match highest {
            Some(seen) if self.bug == Bug::EqualRefused => seen >= fence,
            Some(seen) => seen > fence,
            None => false,
        };
        if refused {
            return Ok(FenceCheck::Stale(StaleFence {
                presented: fence,
                highest_seen: highest.unwrap_or_default(),
            }));
        }
        if self.bug == Bug::TornCheck && fence % 2 == 1 {
            // Timing out is the point: the write happens either way.
            let _ = tokio::time::timeout(TORN_HOLD, landed.changed()).await;
        }
        let mut now = self.honest.now().await?;
        let key = self.key(resource);
        let mut gates = self.gates();
        if let Some(&(seen, stamped)) = gates.get(&key) {
            if self.bug == Bug::RaisedKeepsItsStamp && fence > seen {
                now = stamped;
            }
        }
        gates.insert(key, (fence, now));
        drop(gates);
        self.landed.send_modify(|count| *count += 1);
        Ok(FenceCheck::Accepted)
    }

    async fn highest_fence(&self, resource: &str) -> Result<Option<u64>> {
        tenure_lease_core::backend::validate::resource(resource)?;
        Ok(self.highest(resource))
    }

    async fn purge_fences(&self, unused_for: Duration) -> Result<u64> {
        tenure_lease_core::backend::validate::gate_retention(unused_for)?;
        let now = self.honest.now().await?;
        let mut gates = self.gates();
        let before = gates.len();
        gates.retain(|_, &mut (_, checked_at)| {
            self.bug != Bug::PurgesEverything
                && !tenure_lease_core::backend::gate_rules::gate_purgeable(
                    checked_at, unused_for, now,
                )
        });
        Ok((before - gates.len()) as u64)
    }

    async fn list_fences(&self, after: Option<&str>, limit: usize) -> Result<Vec<GateRecord>> {
        if self.bug != Bug::NoValidation {
            if let Some(after) = after {
                tenure_lease_core::backend::validate::resource(after)?;
            }
            tenure_lease_core::backend::validate::limit(limit)?;
        }
        let sloppy = self.bug == Bug::ListsFromAfterUnordered;
        let mut gates: Vec<GateRecord> = self
            .gates()
            .iter()
            .filter(|(resource, _)| {
                after.is_none_or(|after| {
                    if sloppy {
                        resource.as_str() >= after
                    } else {
                        resource.as_str() > after
                    }
                })
            })
            .map(|(resource, &(fence, checked_at))| {
                GateRecord::new(resource.clone(), fence, checked_at)
            })
            .collect();
        if !sloppy {
            gates.sort_by(|a, b| a.resource.cmp(&b.resource));
        }
        gates.truncate(limit);
        Ok(gates)
    }
}

#[async_trait]
impl LeaseStore for Broken {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        self.honest.admit(request).await
    }
    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        self.honest.renew(claim, ttl).await
    }
    async fn renew_with_progress(
        &self,
        claim: &Claim,
        ttl: Duration,
        progress: &serde_json::Value,
    ) -> Result<Renewal> {
        self.honest.renew_with_progress(claim, ttl, progress).await
    }
    fn system_name(&self) -> &'static str {
        self.honest.system_name()
    }
    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        self.honest.transition(claim, change).await
    }
    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        self.honest.claim_for_takeover(request).await
    }
    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        self.honest.list_expired(query).await
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
    async fn count_purgeable(&self, terminal_older_than: Duration) -> Result<u64> {
        self.honest.count_purgeable(terminal_older_than).await
    }
}

struct BrokenFactory(Bug);

#[async_trait]
impl Factory for BrokenFactory {
    type Store = Broken;

    async fn create(&self) -> Result<Subject<Broken>> {
        let clock = std::sync::Arc::new(ManualClock::starting_now());
        Ok(Subject {
            store: Broken {
                honest: MemoryStore::with_clock(clock.clone()),
                bug: self.0,
                gates: Mutex::default(),
                landed: tokio::sync::watch::Sender::new(0),
            },
            clock: ClockControl::Manual(clock),
        })
    }
}

fn failed(report: &Report) -> Vec<&str> {
    report
        .failures()
        .into_iter()
        .map(|case| case.name)
        .collect()
}

async fn assert_caught(bug: Bug, expected: &[&str]) {
    let honest = run_gate_all(&tenure_conformance::memory::MemoryFactory).await;
    assert!(
        honest
            .cases
            .iter()
            .all(|case| case.outcome == CaseOutcome::Passed),
        "the honest store fails:\n{honest}"
    );
    let broken = run_gate_all(&BrokenFactory(bug)).await;
    for expected in expected {
        assert!(
            failed(&broken).contains(expected),
            "{expected} did not catch {bug:?}:\n{broken}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_check_is_caught_by_the_race() {
    assert_caught(
        Bug::TornCheck,
        &[
            "race_gate_checks_leave_the_highest_and_refusals_are_truthful",
            "race_gate_climbers_never_land_below_an_accepted_fence",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_refused_equal_fence_is_caught() {
    assert_caught(
        Bug::EqualRefused,
        &[
            "gate_accepts_an_equal_fence",
            "gate_model_based_random_operations",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_purge_ignoring_retention_is_caught() {
    assert_caught(
        Bug::PurgesEverything,
        &[
            "gate_purge_removes_only_gates_unused_past_retention",
            "gate_model_based_random_operations",
        ],
    )
    .await;
}

#[tokio::test]
async fn missing_validation_is_caught() {
    assert_caught(
        Bug::NoValidation,
        &[
            "gate_invalid_input_is_rejected_and_changes_nothing",
            "gate_model_based_random_operations",
        ],
    )
    .await;
}

#[tokio::test]
async fn names_differing_only_in_case_taken_for_one_are_caught() {
    assert_caught(Bug::CaseFolded, &["gate_model_based_random_operations"]).await;
}

#[tokio::test]
async fn a_raised_gate_that_keeps_its_old_stamp_is_caught() {
    assert_caught(
        Bug::RaisedKeepsItsStamp,
        &["gate_a_raised_fence_refreshes_the_gate"],
    )
    .await;
}

#[tokio::test]
async fn a_listing_from_after_itself_out_of_order_is_caught() {
    assert_caught(
        Bug::ListsFromAfterUnordered,
        &[
            "gate_list_names_every_gate_in_name_order",
            "gate_list_pages_by_after_and_limit",
        ],
    )
    .await;
}
