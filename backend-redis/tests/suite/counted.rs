//! Counted scopes on Redis (contract §17), beyond the kit's cases: the keys
//! a slot is held under and the `slots` field as stored, and `admit.lua`'s
//! choice of a slot checked against [`rules::choose_slot`] and
//! [`rules::plan_admission`] over many arrangements of holders (leases
//! lapsed, running, tied or absent; the requester's own; free slots;
//! `Reject` and `Interrupt`, with and without grace).
//!
//! Each test works in a fresh namespace of the shared server
//! (`TENURE_REDIS_URL`) and deletes it afterwards; without the variable it
//! prints one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::AsyncCommands;
use tenure_lease_core::backend::rules::{self, AdmissionPlan};
use tenure_lease_core::release::ReleaseNotice;
use tenure_lease_core::{
    clock, Admission, AdmitRequest, AdmitStrategy, LeaseRecord, LeaseStore, StatusChange,
};

use crate::scratch::{self, admitted, namespace_keys, with_namespace, Scratch};

const TTL: Duration = Duration::from_secs(600);
const HOUR: Duration = Duration::from_secs(3600);

fn counted(id: &str, owner: &str, scope: &str, capacity: u32) -> AdmitRequest {
    AdmitRequest::new(id, owner)
        .counted_scope(scope, capacity)
        .ttl(TTL)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_held_under_slot_keys_and_stored_only_for_counted_scopes() {
    with_namespace(
        "counted_layout",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let plain = admitted(&store, AdmitRequest::new("plain", "w").scope("x")).await;
            let first = admitted(&store, counted("a", "w", "pool", 3).scope("x2")).await;
            let second = admitted(&store, counted("b", "w", "pool", 3)).await;
            assert_eq!(first.slots, BTreeMap::from([("pool".to_owned(), 0)]));
            assert_eq!(second.slots, BTreeMap::from([("pool".to_owned(), 1)]));

            // The record hash: no `slots` field without a counted scope.
            let field = |id: &str| format!("{prefix}rec:{id}");
            let stored: Option<String> = raw.hget(field("plain"), "slots").await.expect("HGET");
            assert_eq!(stored, None, "{plain:?}");
            for record in [&first, &second] {
                let stored: String = raw.hget(field(&record.id), "slots").await.expect("HGET");
                let decoded: BTreeMap<String, u32> =
                    serde_json::from_str(&stored).expect("a JSON object of slots");
                assert_eq!(decoded, record.slots, "{stored}");
            }

            // Holder keys: slot 0 is the scope's own key, slot 1 the scope,
            // U+001F and the number.
            let mut held: BTreeSet<String> = namespace_keys(&mut raw, &format!("{prefix}holder:"))
                .await
                .into_iter()
                .map(|key| key[prefix.len() + "holder:".len()..].to_owned())
                .collect();
            let expected: BTreeSet<String> = ["x", "x2", "pool", "pool\u{1f}1"]
                .into_iter()
                .map(str::to_owned)
                .collect();
            assert_eq!(held, expected);
            for record in [&plain, &first, &second] {
                for key in rules::held_keys(record) {
                    let holder: String =
                        raw.get(format!("{prefix}holder:{key}")).await.expect("GET");
                    assert_eq!(holder, record.id, "{key:?}");
                }
            }
            // The scope index names the scope, whatever the slot.
            let listed: Vec<String> = raw
                .zrange(format!("{prefix}scope:pool"), 0, -1)
                .await
                .expect("ZRANGE");
            assert_eq!(listed, ["a", "b"]);
            let keys = namespace_keys(&mut raw, &format!("{prefix}scope:")).await;
            assert!(keys.iter().all(|key| !key.contains('\u{1f}')), "{keys:?}");

            // The end of slot 1's holder frees its key alone, and notices
            // name the scope.
            let mut releases = store
                .releases()
                .await
                .expect("releases")
                .expect("notices on Redis");
            store
                .transition(
                    &second.claim().expect("a claim"),
                    &StatusChange::succeeded(),
                )
                .await
                .expect("transition");
            held.remove("pool\u{1f}1");
            let now: BTreeSet<String> = namespace_keys(&mut raw, &format!("{prefix}holder:"))
                .await
                .into_iter()
                .map(|key| key[prefix.len() + "holder:".len()..].to_owned())
                .collect();
            assert_eq!(now, held);
            let freed = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    if let ReleaseNotice::Freed(scope) = releases.next().await {
                        return scope;
                    }
                }
            })
            .await
            .expect("a release notice in time");
            assert_eq!(&*freed, "pool", "the notice names the scope, not its key");
            let third = admitted(&store, counted("c", "w", "pool", 3)).await;
            assert_eq!(third.slot("pool"), Some(1), "the freed slot is taken again");
            assert_eq!(
                store.get("a").await.expect("get"),
                Some(first),
                "the other holder is untouched"
            );
        },
    )
    .await;
}

/// A small deterministic generator (xorshift), so a failure repeats.
struct Dice(u64);

impl Dice {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// How a holder's lease is set behind the store's back, relative to the
/// store's time when the arrangement is made.
#[derive(Debug, Clone, Copy)]
enum Lease {
    /// No lease at all.
    None,
    /// Ended this many hours ago.
    Lapsed(u32),
    /// Ends in this many hours (1 or 2: holders tie).
    Running(u32),
    /// The slot is free: its holder finished.
    Free,
}

const LEASES: &[Lease] = &[
    Lease::None,
    Lease::Lapsed(1),
    Lease::Lapsed(2),
    Lease::Running(1),
    Lease::Running(2),
    Lease::Free,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_admit_chooses_is_the_rules_choice() {
    with_namespace(
        "counted_choice",
        |config| config,
        |scratch| async move {
            let mut dice = Dice(0x5eed_1234_abcd_0042);
            let (mut admitted_count, mut conflicts, mut interrupts) = (0, 0, 0);
            for case in 0..120 {
                let scope = format!("pool-{case}");
                let capacity = 1 + u32::try_from(dice.below(4)).expect("small");
                let mut by_slot: Vec<Option<LeaseRecord>> = Vec::new();
                let now = scratch.store.now().await.expect("now");
                let mut arrangement = Vec::new();
                let mut holders = Vec::new();
                for slot in 0..capacity {
                    let owner = if dice.below(3) == 0 {
                        "requester".to_owned()
                    } else {
                        format!("worker-{slot}")
                    };
                    let id = format!("{scope}-holder-{slot}");
                    let holder =
                        admitted(&scratch.store, counted(&id, &owner, &scope, capacity)).await;
                    assert_eq!(holder.slot(&scope), Some(slot), "{holder:?}");
                    holders.push(holder);
                }
                for holder in holders {
                    let lease = LEASES[usize::try_from(dice.below(6)).expect("small")];
                    arrangement.push((holder.slot(&scope), holder.owner.clone(), lease));
                    by_slot.push(arrange(&scratch, holder, lease, now).await);
                }
                let strategy = if dice.below(2) == 0 {
                    AdmitStrategy::Reject
                } else {
                    AdmitStrategy::Interrupt
                };
                let grace = if dice.below(4) == 0 {
                    3 * HOUR
                } else {
                    Duration::ZERO
                };
                let request = counted(&format!("{scope}-new"), "requester", &scope, capacity)
                    .strategy(strategy)
                    .grace(grace);
                let what = format!("{request:?} over {arrangement:?}");

                let now = scratch.store.now().await.expect("now");
                let slot = rules::choose_slot(&request, &by_slot, now);
                let slots = BTreeMap::from([(scope.clone(), slot)]);
                let holders: Vec<&LeaseRecord> =
                    by_slot[slot as usize].as_ref().into_iter().collect();
                let plan = rules::plan_admission(&request, &slots, &holders, now);
                let answer = scratch.store.admit(&request).await.expect("admit");
                match (plan, answer) {
                    (
                        AdmissionPlan::Conflict { holder, .. },
                        Admission::Conflict { holder: got, .. },
                    ) => {
                        assert_eq!(got.id, holder.id, "{what}");
                        conflicts += 1;
                    }
                    (
                        AdmissionPlan::Proceed { interrupt },
                        Admission::Admitted {
                            record,
                            interrupted,
                        },
                    ) => {
                        assert_eq!(record.slot(&scope), Some(slot), "{what}");
                        let ids: Vec<String> =
                            interrupted.into_iter().map(|record| record.id).collect();
                        assert_eq!(ids, interrupt, "{what}");
                        interrupts += usize::from(!ids.is_empty());
                        admitted_count += 1;
                    }
                    (plan, answer) => {
                        panic!("{what}: the rules say {plan:?}, the store {answer:?}")
                    }
                }
            }
            // The arrangements reach every outcome.
            assert!(
                admitted_count > 10 && conflicts > 10 && interrupts > 5,
                "admitted {admitted_count}, conflicts {conflicts}, interrupts {interrupts}"
            );
        },
    )
    .await;
}

/// Sets `holder`'s lease as `lease` says, relative to `now`, by a raw
/// write of its `expires` field (only admission reads it here), or ends it;
/// answers the holder as the store now reads it when it still holds its
/// slot.
async fn arrange(
    scratch: &Scratch,
    holder: LeaseRecord,
    lease: Lease,
    now: tenure_lease_core::Timestamp,
) -> Option<LeaseRecord> {
    let key = scratch.record_key(&holder.id);
    let mut raw = scratch.raw.clone();
    let now = clock::to_micros(now);
    let hours = |count: u32| i64::from(count) * 3_600_000_000;
    let expires = match lease {
        Lease::Free => {
            scratch
                .store
                .transition(
                    &holder.claim().expect("a claim"),
                    &StatusChange::succeeded(),
                )
                .await
                .expect("transition");
            return None;
        }
        Lease::None => None,
        Lease::Lapsed(count) => Some(now - hours(count)),
        Lease::Running(count) => Some(now + hours(count)),
    };
    let text = expires.map(|micros| micros.to_string());
    scratch::set_field(
        &mut raw,
        &key,
        "expires",
        text.as_deref().map(str::as_bytes),
    )
    .await
    .expect("HSET or HDEL");
    let record = scratch
        .store
        .get(&holder.id)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(
        record.lease_expires_at.map(clock::to_micros),
        expires,
        "{record:?}"
    );
    Some(record)
}
