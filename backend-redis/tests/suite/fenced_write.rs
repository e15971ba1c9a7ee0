//! `RedisStore::write_fenced`: the gate check and the `SET` of the caller's
//! key in one script, so a stale owner's value is never written; and
//! damaged gate keys, which answer `Corrupt` and write nothing (and which
//! `list_fences` answers `Corrupt` for once a page reaches them).

use crate::scratch;

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands as _;
use tenure_lease_core::limits::MAX_LIST_LIMIT;
use tenure_lease_core::{ErrorKind, FenceCheck, FenceStore, GateRecord, StaleFence};
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

/// Every key of the namespace with its type and content (strings, sorted
/// sets with their scores, hashes), to compare.
async fn gate_snapshot(raw: &mut MultiplexedConnection, prefix: &str) -> BTreeMap<Vec<u8>, String> {
    let keys: Vec<Vec<u8>> = raw.keys(format!("{prefix}*")).await.expect("KEYS");
    let mut contents = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(raw)
            .await
            .expect("TYPE");
        let content = match kind.as_str() {
            "string" => format!("{:?}", raw.get::<_, Vec<u8>>(&key).await.expect("GET")),
            "zset" => format!(
                "{:?}",
                raw.zrange_withscores::<_, Vec<(Vec<u8>, String)>>(&key, 0, -1)
                    .await
                    .expect("ZRANGE")
            ),
            "hash" => format!(
                "{:?}",
                raw.hgetall::<_, BTreeMap<Vec<u8>, Vec<u8>>>(&key)
                    .await
                    .expect("HGETALL")
            ),
            other => other.to_owned(),
        };
        contents.insert(key, content);
    }
    contents
}

fn names(gates: &[GateRecord]) -> Vec<&str> {
    gates.iter().map(|gate| gate.resource.as_str()).collect()
}

/// Lists the gates of `scratch`, whose gate "report" is damaged, between
/// the healthy "audit" and "sales": `Corrupt` once a page reaches it, the
/// pages before and after it as `healthy` lists them, and nothing changed.
async fn listed_is_corrupt(scratch: &Scratch, healthy: &[GateRecord], what: &str) {
    let (store, mut raw) = (&scratch.store, scratch.raw.clone());
    let before = gate_snapshot(&mut raw, &scratch.prefix).await;
    let error = store
        .list_fences(None, MAX_LIST_LIMIT)
        .await
        .expect_err(what);
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{what}: {error}");
    assert_eq!(
        store.list_fences(None, 1).await.unwrap(),
        healthy[..1],
        "{what}: a page before the damage"
    );
    assert_eq!(
        store.list_fences(Some("report"), 2).await.unwrap(),
        healthy[2..],
        "{what}: a page after it"
    );
    assert_eq!(
        gate_snapshot(&mut raw, &scratch.prefix).await,
        before,
        "{what}: nothing changed"
    );
}

/// A damaged gate a listing reaches (a fence `highest_fence` refuses, a
/// key of the wrong type, a stamp that is no time in microseconds, a name
/// that is not UTF-8, an index of the wrong type) answers `Corrupt` and
/// changes nothing; pages that stop before the damage, or start after it,
/// are listed as before.
#[tokio::test]
async fn a_damaged_gate_listed_is_corrupt_and_changes_nothing() {
    with_namespace(
        "a_damaged_gate_listed_is_corrupt_and_changes_nothing",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let mut raw = scratch.raw.clone();
            let prefix = scratch.prefix.clone();
            let gate = format!("{prefix}gate:report");
            let index = format!("{prefix}gates");
            for (resource, fence) in [("audit", 3), ("report", 4), ("sales", 5)] {
                assert!(store
                    .check_fence(resource, fence)
                    .await
                    .unwrap()
                    .is_accepted());
            }
            let healthy = store.list_fences(None, MAX_LIST_LIMIT).await.unwrap();
            assert_eq!(names(&healthy), ["audit", "report", "sales"]);
            let stamp: String = raw.zscore(&index, "report").await.expect("ZSCORE");

            for damage in [
                "garbage",
                "0",
                "-3",
                "1.5",
                "9007199254740992",
                "12345678901234567",
            ] {
                let _: () = raw.set(&gate, damage).await.expect("damage the gate");
                let highest = store.highest_fence("report").await.expect_err(damage);
                assert_eq!(highest.kind(), ErrorKind::Corrupt, "{damage}: {highest}");
                listed_is_corrupt(&scratch, &healthy, &format!("the fence {damage:?}")).await;
            }
            let _: () = raw.del(&gate).await.expect("DEL");
            let _: () = raw
                .hset(&gate, "fence", "4")
                .await
                .expect("a hash for a gate");
            listed_is_corrupt(&scratch, &healthy, "a hash for a gate").await;
            let _: () = raw.del(&gate).await.expect("DEL");
            let _: () = raw.set(&gate, "4").await.expect("SET");

            for damage in ["1.5", "+inf", "-inf", "1e300"] {
                let _: () = raw
                    .zadd(&index, "report", damage)
                    .await
                    .expect("damage the stamp");
                listed_is_corrupt(&scratch, &healthy, &format!("the stamp {damage:?}")).await;
            }
            let _: () = raw.zadd(&index, "report", &stamp).await.expect("ZADD");
            assert_eq!(
                store.list_fences(None, MAX_LIST_LIMIT).await.unwrap(),
                healthy,
                "repaired"
            );

            // A name that is not UTF-8, listed right after "report".
            let odd_gate = [gate.as_bytes(), b"\xff"].concat();
            let _: () = raw.set(&odd_gate, "7").await.expect("SET");
            let _: () = raw
                .zadd(&index, &b"report\xff"[..], &stamp)
                .await
                .expect("ZADD");
            let before = gate_snapshot(&mut raw, &prefix).await;
            let error = store
                .list_fences(Some("report"), MAX_LIST_LIMIT)
                .await
                .expect_err("a name that is not UTF-8");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            assert!(error.to_string().contains("not UTF-8"), "{error}");
            assert_eq!(
                store.list_fences(None, 2).await.unwrap(),
                healthy[..2],
                "a page before it"
            );
            assert_eq!(gate_snapshot(&mut raw, &prefix).await, before);
            let _: () = raw.del(&odd_gate).await.expect("DEL");
            let _: () = raw.zrem(&index, &b"report\xff"[..]).await.expect("ZREM");

            let _: () = raw.del(&index).await.expect("DEL");
            let _: () = raw
                .set(&index, "not a sorted set")
                .await
                .expect("damage the index");
            let before = gate_snapshot(&mut raw, &prefix).await;
            let error = store
                .list_fences(None, MAX_LIST_LIMIT)
                .await
                .expect_err("a damaged index");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            assert_eq!(gate_snapshot(&mut raw, &prefix).await, before);
        },
    )
    .await;
}
