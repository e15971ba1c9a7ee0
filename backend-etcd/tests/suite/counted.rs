//! Counted scopes where the kit cannot reach: how the store keeps them
//! (each record's `slots` in its JSON, the scope index by slot key), a
//! damaged `slots` value (written straight into etcd) answering `Corrupt`
//! to every read and write of the record, which then change nothing, and
//! admissions racing from separate connections for the last slots.

use std::time::Duration;

use etcd_client::{Client, GetOptions};
use tenure_backend_etcd::EtcdStore;
use tenure_lease_core::backend::rules::slot_key;
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, ErrorKind, ExpiredQuery, LeaseRecord, LeaseStore,
    StatusChange, TakeoverRequest, Transition,
};

use crate::common::{store_and_client, value};

/// `slots` values that cannot be decoded (the record holds `pool`).
const DAMAGES: [&str; 11] = [
    "\"1\"",
    "-1",
    "4294967296",
    "1.5",
    "null",
    "[0]",
    "{\"pool\": \"1\"}",
    "{\"pool\": -1}",
    "{\"pool\": 4294967296}",
    "{\"pool\": 1.5}",
    "{\"pool\": null}",
];

/// The key of the record `id` in `store`.
fn record_key(store: &EtcdStore, id: &str) -> String {
    format!("{}/r/{id}", store.config().key_prefix())
}

/// The scope index entry of slot `slot` of `scope` in `store`.
fn index_key(store: &EtcdStore, scope: &str, slot: u32) -> String {
    format!(
        "{}/s/{}",
        store.config().key_prefix(),
        slot_key(scope, slot)
    )
}

/// Every scope index entry of `store`, key past the index prefix and value.
async fn index(client: &mut Client, store: &EtcdStore) -> Vec<(String, String)> {
    let prefix = format!("{}/s/", store.config().key_prefix());
    let got = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("get the index");
    got.kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().expect("a text key")[prefix.len()..].to_owned(),
                kv.value_str().expect("a text value").to_owned(),
            )
        })
        .collect()
}

/// Admits `request`, which must be admitted; the record.
async fn admitted(store: &EtcdStore, request: &AdmitRequest) -> LeaseRecord {
    match store.admit(request).await.expect("admit") {
        Admission::Admitted { record, .. } => record,
        other => panic!("{} is admitted: {other:?}", request.id),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_kept_in_the_record_and_the_index_is_kept_by_slot_key() {
    let Some((store, mut client)) =
        store_and_client("slots_are_kept_in_the_record_and_the_index_is_kept_by_slot_key").await
    else {
        return;
    };
    let ttl = Duration::from_secs(30);
    let pool = |id: &str| AdmitRequest::new(id, "w").counted_scope("pool", 3).ttl(ttl);
    let a = admitted(&store, &pool("a")).await;
    let b = admitted(&store, &pool("b").scope("solo")).await;
    admitted(&store, &AdmitRequest::new("x", "w").scope("other").ttl(ttl)).await;
    assert_eq!((a.slot("pool"), b.slot("pool")), (Some(0), Some(1)));

    // The slots are a field of the record's JSON, absent without counted
    // scopes (as in records written before them), and read back.
    let stored = |bytes: Option<Vec<u8>>| -> serde_json::Value {
        serde_json::from_slice(&bytes.expect("the record")).expect("JSON")
    };
    let b_stored = stored(value(&mut client, &record_key(&store, "b")).await);
    assert_eq!(b_stored["slots"], serde_json::json!({ "pool": 1 }));
    let x_stored = stored(value(&mut client, &record_key(&store, "x")).await);
    assert!(x_stored.get("slots").is_none(), "{x_stored}");
    assert_eq!(store.get("b").await.expect("get"), Some(b.clone()));
    let x_read = store.get("x").await.expect("get").expect("x");
    assert!(x_read.slots.is_empty(), "{x_read:?}");

    // Slot 0 under the scope's name, slot 1 under its slot key.
    let held = |key: String, id: &str| (key, id.to_owned());
    assert_eq!(
        index(&mut client, &store).await,
        vec![
            held("other".into(), "x"),
            held("pool".into(), "a"),
            held(slot_key("pool", 1).into_owned(), "b"),
            held("solo".into(), "b"),
        ]
    );

    // Finishing frees the record's own slot and scopes alone.
    let finished = store
        .transition(&b.claim().expect("a claim"), &StatusChange::succeeded())
        .await
        .expect("transition");
    assert!(matches!(finished, Transition::Applied(_)), "{finished:?}");
    assert_eq!(
        index(&mut client, &store).await,
        vec![held("other".into(), "x"), held("pool".into(), "a")]
    );
    let listed: Vec<String> = store
        .list_by_scope("pool")
        .await
        .expect("list")
        .into_iter()
        .map(|record| record.id)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.contains(&"a".to_owned()) && listed.contains(&"b".to_owned()));

    // The freed slot is the lowest free one again.
    let c = admitted(&store, &pool("c")).await;
    assert_eq!(c.slot("pool"), Some(1));
    assert_eq!(
        value(&mut client, &index_key(&store, "pool", 1)).await,
        Some(b"c".to_vec())
    );
    store.delete_prefix().await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_slots_answer_corrupt_and_change_nothing() {
    let Some((store, mut client)) =
        store_and_client("damaged_slots_answer_corrupt_and_change_nothing").await
    else {
        return;
    };
    let ttl = Duration::from_secs(30);
    let pool = |id: &str, owner: &str| {
        AdmitRequest::new(id, owner)
            .counted_scope("pool", 3)
            .ttl(ttl)
    };
    let a = admitted(&store, &pool("a", "w")).await;
    let b = admitted(&store, &pool("b", "w")).await;
    let b_key = record_key(&store, "b");
    let mut b_json: serde_json::Value =
        serde_json::from_slice(&value(&mut client, &b_key).await.expect("b")).expect("JSON");
    let index_before = index(&mut client, &store).await;
    let a_before = value(&mut client, &record_key(&store, "a")).await;

    for (n, damage) in DAMAGES.into_iter().enumerate() {
        b_json["slots"] = serde_json::from_str(damage).expect("a JSON damage");
        let damaged = serde_json::to_vec(&b_json).expect("JSON");
        client
            .put(b_key.as_str(), damaged.clone(), None)
            .await
            .expect("damage");
        let corrupt = |what: &str, error: tenure_lease_core::Error| {
            assert_eq!(
                error.kind(),
                ErrorKind::Corrupt,
                "{damage}, {what}: {error}"
            );
            assert!(
                error.message().contains(&b_key),
                "{damage}, {what}: {error}"
            );
        };
        corrupt("get", store.get("b").await.expect_err(damage));
        corrupt(
            "list_by_scope",
            store.list_by_scope("pool").await.expect_err(damage),
        );
        corrupt("list_active", store.list_active().await.expect_err(damage));
        let claim = b.claim().expect("a claim");
        corrupt("renew", store.renew(&claim, ttl).await.expect_err(damage));
        corrupt(
            "transition",
            store
                .transition(&claim, &StatusChange::succeeded())
                .await
                .expect_err(damage),
        );
        corrupt(
            "takeover",
            store
                .claim_for_takeover(&TakeoverRequest::adopt("b", "t", Some(ttl)))
                .await
                .expect_err(damage),
        );
        // An admission that finds the scope full (capacity 2) judges the
        // holders of both slots, and cannot judge slot 1's.
        let request = AdmitRequest::new(format!("new-{n}"), "other")
            .counted_scope("pool", 2)
            .ttl(ttl)
            .strategy(AdmitStrategy::Interrupt);
        corrupt("admit", store.admit(&request).await.expect_err(damage));
        assert_eq!(store.get(&request.id).await.expect("get"), None, "{damage}");
        // The expiry scan skips what it cannot decode.
        let scan = store
            .list_expired(&ExpiredQuery::new(Duration::ZERO))
            .await
            .expect("list_expired");
        assert!(scan.records.is_empty(), "{damage}: {scan:?}");
        assert!(
            scan.skipped.iter().any(|skipped| skipped.id == "b"),
            "{damage}: {scan:?}"
        );

        assert_eq!(value(&mut client, &b_key).await, Some(damaged), "{damage}");
        assert_eq!(
            value(&mut client, &record_key(&store, "a")).await,
            a_before,
            "{damage}"
        );
        assert_eq!(index(&mut client, &store).await, index_before, "{damage}");
    }
    assert_eq!(store.get("a").await.expect("get"), Some(a));
    store.delete_prefix().await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_racing_from_separate_connections_share_the_slots() {
    let Some((store, mut client)) =
        store_and_client("admissions_racing_from_separate_connections_share_the_slots").await
    else {
        return;
    };
    const CAPACITY: u32 = 4;
    const RACERS: u32 = 9;
    let ttl = Duration::from_secs(30);
    let taken = admitted(
        &store,
        &AdmitRequest::new("exclusive", "w").scope("pool").ttl(ttl),
    )
    .await;
    assert_eq!(taken.slot("pool"), Some(0));
    let mut racers = Vec::new();
    for n in 0..RACERS {
        let config = store.config().clone();
        racers.push(tokio::spawn(async move {
            let store = EtcdStore::connect(config).await.expect("connect");
            let request = AdmitRequest::new(format!("racer-{n}"), format!("w-{n}"))
                .counted_scope("pool", CAPACITY)
                .ttl(ttl);
            store.admit(&request).await.expect("admit")
        }));
    }
    let mut slots = Vec::new();
    let mut conflicts = 0;
    for racer in racers {
        match racer.await.expect("a racer") {
            Admission::Admitted {
                record,
                interrupted,
            } => {
                assert!(interrupted.is_empty(), "{interrupted:?}");
                slots.push(record.slot("pool").expect("a slot"));
            }
            Admission::Conflict { .. } => conflicts += 1,
            other => panic!("{other:?}"),
        }
    }
    slots.sort_unstable();
    // Slot 0 is the exclusive holder's: three slots were left.
    assert_eq!(slots, vec![1, 2, 3]);
    assert_eq!(conflicts, RACERS - 3);
    let holders = index(&mut client, &store).await;
    assert_eq!(holders.len(), 4, "{holders:?}");
    store.delete_prefix().await.expect("clean up");
}
