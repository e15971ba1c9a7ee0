//! `RedisStore::write_fenced`: the gate check and the `SET` of the caller's
//! key in one script, so a stale owner's value is never written; and
//! damaged gate keys, which answer `Corrupt` and write nothing.

use crate::scratch;

use std::sync::Arc;

use redis::AsyncCommands as _;
use tenure_lease_core::{ErrorKind, FenceCheck, FenceStore, StaleFence};
use tokio::sync::Barrier;

use scratch::{with_namespace, Scratch};

/// A key of the caller's, outside the store's namespace.
fn caller_key() -> String {
    format!("test-fenced-write:{}", tenure_lease_core::generate_id())
}

async fn value(scratch: &Scratch, key: &str) -> Option<Vec<u8>> {
    scratch.raw.clone().get(key).await.expect("GET")
}

async fn remove(scratch: &Scratch, key: &str) {
    let _: () = scratch.raw.clone().del(key).await.expect("DEL");
}

#[tokio::test]
async fn an_accepted_fence_writes_and_a_stale_one_does_not() {
    with_namespace(
        "an_accepted_fence_writes_and_a_stale_one_does_not",
        |config| config,
        |scratch| async move {
            let key = caller_key();
            let store = &scratch.store;
            assert_eq!(
                store
                    .write_fenced("report", 7, &key, b"seven")
                    .await
                    .unwrap(),
                FenceCheck::Accepted
            );
            assert_eq!(value(&scratch, &key).await.as_deref(), Some(&b"seven"[..]));
            assert_eq!(
                store
                    .write_fenced("report", 5, &key, b"five")
                    .await
                    .unwrap(),
                FenceCheck::Stale(StaleFence {
                    presented: 5,
                    highest_seen: 7
                })
            );
            assert_eq!(
                value(&scratch, &key).await.as_deref(),
                Some(&b"seven"[..]),
                "a stale owner's value is never written"
            );
            assert!(store
                .write_fenced("report", 7, &key, b"seven again")
                .await
                .unwrap()
                .is_accepted());
            assert!(store
                .write_fenced("report", 9, &key, b"nine")
                .await
                .unwrap()
                .is_accepted());
            assert_eq!(value(&scratch, &key).await.as_deref(), Some(&b"nine"[..]));
            assert_eq!(store.highest_fence("report").await.unwrap(), Some(9));
            remove(&scratch, &key).await;
        },
    )
    .await;
}

#[tokio::test]
async fn write_fenced_shares_the_gate_of_check_fence() {
    with_namespace(
        "write_fenced_shares_the_gate_of_check_fence",
        |config| config,
        |scratch| async move {
            let key = caller_key();
            let store = &scratch.store;
            assert!(store.check_fence("report", 9).await.unwrap().is_accepted());
            assert_eq!(
                store
                    .write_fenced("report", 5, &key, b"late")
                    .await
                    .unwrap(),
                FenceCheck::Stale(StaleFence {
                    presented: 5,
                    highest_seen: 9
                })
            );
            assert_eq!(value(&scratch, &key).await, None, "nothing written");
            assert!(store
                .write_fenced("report", 10, &key, b"ten")
                .await
                .unwrap()
                .is_accepted());
            assert!(matches!(
                store.check_fence("report", 9).await.unwrap(),
                FenceCheck::Stale(StaleFence {
                    highest_seen: 10,
                    ..
                })
            ));
            remove(&scratch, &key).await;
        },
    )
    .await;
}

/// Writers with different fences, released together, each write their
/// fence as the value: the value left is the highest fence's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_fenced_writes_leave_the_highest_fences_value() {
    with_namespace(
        "racing_fenced_writes_leave_the_highest_fences_value",
        |config| config,
        |scratch| async move {
            for round in 0..8_u64 {
                let key = caller_key();
                let resource = format!("race-{round}");
                let fences: Vec<u64> = (1..=6)
                    .map(|step| (step * 37 + round * 11) % 97 + 1)
                    .collect();
                let barrier = Arc::new(Barrier::new(fences.len()));
                let mut writers = Vec::new();
                for &fence in &fences {
                    let store = scratch.store.clone();
                    let barrier = Arc::clone(&barrier);
                    let (key, resource) = (key.clone(), resource.clone());
                    writers.push(tokio::spawn(async move {
                        barrier.wait().await;
                        let answer = store
                            .write_fenced(&resource, fence, &key, fence.to_string().as_bytes())
                            .await;
                        (fence, answer)
                    }));
                }
                for writer in writers {
                    let (fence, answer) = writer.await.expect("a writer ran");
                    if let FenceCheck::Stale(stale) = answer.expect("write_fenced answers") {
                        assert!(stale.presented == fence && stale.highest_seen > fence);
                    }
                }
                let highest = fences.iter().copied().max().unwrap_or_default();
                assert_eq!(
                    value(&scratch, &key).await,
                    Some(highest.to_string().into_bytes()),
                    "round {round}: fences {fences:?}"
                );
                remove(&scratch, &key).await;
            }
        },
    )
    .await;
}

#[tokio::test]
async fn bad_keys_and_bad_input_are_refused_and_write_nothing() {
    with_namespace(
        "bad_keys_and_bad_input_are_refused_and_write_nothing",
        |config| config,
        |scratch| async move {
            let key = caller_key();
            let store = &scratch.store;
            let inside = format!("{}rec:victim", scratch.prefix);
            for (resource, fence, key, field) in [
                ("report", 1, "", "key"),
                ("report", 1, inside.as_str(), "key"),
                ("", 1, key.as_str(), "resource"),
                ("report", 0, key.as_str(), "fence"),
            ] {
                let error = store
                    .write_fenced(resource, fence, key, b"value")
                    .await
                    .expect_err("bad input");
                assert_eq!(
                    (error.kind(), error.field()),
                    (ErrorKind::InvalidInput, Some(field))
                );
            }
            assert_eq!(value(&scratch, &key).await, None);
            assert_eq!(value(&scratch, &inside).await, None);
            assert_eq!(store.highest_fence("report").await.unwrap(), None);
        },
    )
    .await;
}

#[tokio::test]
async fn damaged_gates_are_corrupt_and_nothing_is_written() {
    with_namespace(
        "damaged_gates_are_corrupt_and_nothing_is_written",
        |config| config,
        |scratch| async move {
            let key = caller_key();
            let store = &scratch.store;
            let gate = format!("{}gate:report", scratch.prefix);
            let mut raw = scratch.raw.clone();
            for damage in [
                "garbage",
                "0",
                "-3",
                "1.5",
                "9007199254740992",
                "12345678901234567",
            ] {
                let _: () = raw.set(&gate, damage).await.expect("damage the gate");
                for answer in [
                    store.check_fence("report", 5).await.map(drop),
                    store.highest_fence("report").await.map(drop),
                    store
                        .write_fenced("report", 5, &key, b"value")
                        .await
                        .map(drop),
                ] {
                    let error = answer.expect_err(damage);
                    assert_eq!(error.kind(), ErrorKind::Corrupt, "{damage}: {error}");
                }
                let stored: String = raw.get(&gate).await.expect("GET");
                assert_eq!(stored, damage, "nothing written over it");
                assert_eq!(
                    value(&scratch, &key).await,
                    None,
                    "{damage}: nothing written"
                );
            }
            let _: () = raw.del(&gate).await.expect("DEL");
            let _: () = raw
                .hset(&gate, "fence", "5")
                .await
                .expect("a hash for a gate");
            let error = store
                .check_fence("report", 5)
                .await
                .expect_err("wrong type");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            let _: () = raw.del(&gate).await.expect("DEL");

            let index = format!("{}gates", scratch.prefix);
            let _: () = raw
                .set(&index, "not a sorted set")
                .await
                .expect("damage the index");
            let error = store
                .write_fenced("report", 5, &key, b"value")
                .await
                .expect_err("a damaged index");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            assert_eq!(
                store.highest_fence("report").await.unwrap(),
                None,
                "no gate raised"
            );
            assert_eq!(value(&scratch, &key).await, None, "nothing written");
        },
    )
    .await;
}
