//! Rate logs where the kit cannot reach: a damaged log (written straight
//! into etcd) answers `Corrupt` to an admission and to a claim, which then
//! change nothing, and `purge` deletes the logs no use counts in any more,
//! keeping live ones and those it cannot decode.

use std::time::Duration;

use etcd_client::{Client, GetOptions};
use tenure_backend_etcd::EtcdStore;
use tenure_lease_core::queue::{ClaimRequest, JobQueue, NewJob};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{Admission, AdmitRequest, AdmitStrategy, ErrorKind, LeaseStore};

use crate::common::{store_and_client, value};

/// Logs that cannot be decoded, for a limit of two permits.
const DAMAGES: [&[u8]; 6] = [
    b"not json",
    b"{}",
    b"[\"yesterday\"]",
    b"[1, 2, 3]",
    b"[9223372036854775807]",
    b"\xff\xfe",
];

/// The key of `limit`'s log in `store`.
fn log_key(store: &EtcdStore, limit: &RateLimit) -> String {
    format!(
        "{}/rate/{}:{}:{}",
        store.config().key_prefix(),
        limit.permits,
        limit.period.as_millis(),
        limit.key
    )
}

/// Every rate log key of `store`.
async fn log_keys(client: &mut Client, store: &EtcdStore) -> Vec<String> {
    let prefix = format!("{}/rate/", store.config().key_prefix());
    let got = client
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .expect("get the logs");
    got.kvs()
        .iter()
        .map(|kv| kv.key_str().expect("a text key").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_refuses_an_admission_which_changes_nothing() {
    let Some((store, mut client)) =
        store_and_client("a_damaged_log_refuses_an_admission_which_changes_nothing").await
    else {
        return;
    };
    let limit = RateLimit::new("api", 2, Duration::from_secs(60));
    let key = log_key(&store, &limit);
    let Admission::Admitted { record: holder, .. } = store
        .admit(&AdmitRequest::new("holder", "a").scope("s"))
        .await
        .expect("admit")
    else {
        panic!("the holder is admitted");
    };
    for (index, damage) in DAMAGES.into_iter().enumerate() {
        let shown = String::from_utf8_lossy(damage);
        client
            .put(key.as_str(), damage, None)
            .await
            .expect("damage");
        // Admitted, it would interrupt the holder and write the log.
        let request = AdmitRequest::new(format!("new-{index}"), "b")
            .scope("s")
            .strategy(AdmitStrategy::Interrupt)
            .rate_limit(limit.clone());
        let error = store.admit(&request).await.expect_err(&shown);
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{shown}: {error}");
        assert!(error.message().contains(&key), "{shown}: {error}");
        assert_eq!(
            store.get(&holder.id).await.expect("get"),
            Some(holder.clone()),
            "{shown}: the holder is left alone"
        );
        assert_eq!(store.get(&request.id).await.expect("get"), None, "{shown}");
        assert_eq!(value(&mut client, &key).await.as_deref(), Some(damage));
    }
    // A limit with other permits is another log, and admits.
    let other = RateLimit::new("api", 3, Duration::from_secs(60));
    let admitted = store
        .admit(&AdmitRequest::new("other", "c").rate_limit(other))
        .await
        .expect("admit under another log");
    assert!(admitted.admitted().is_some(), "{admitted:?}");
    store.delete_prefix().await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_refuses_a_claim_which_changes_nothing() {
    let Some((store, mut client)) =
        store_and_client("a_damaged_log_refuses_a_claim_which_changes_nothing").await
    else {
        return;
    };
    let limit = RateLimit::new("api", 2, Duration::from_secs(60));
    let key = log_key(&store, &limit);
    store
        .enqueue(&NewJob::new("q", serde_json::json!({})).id("job"))
        .await
        .expect("enqueue");
    let queued = store.get_job("job").await.expect("get").expect("the job");
    let request = ClaimRequest::new("q", "w", Duration::from_secs(30))
        .limit(2)
        .rate_limit(limit.clone());
    for damage in DAMAGES {
        let shown = String::from_utf8_lossy(damage);
        client
            .put(key.as_str(), damage, None)
            .await
            .expect("damage");
        let error = store.claim_limited(&request).await.expect_err(&shown);
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{shown}: {error}");
        assert!(error.message().contains(&key), "{shown}: {error}");
        assert_eq!(
            store.get_job("job").await.expect("get"),
            Some(queued.clone()),
            "{shown}: the job stays queued"
        );
        assert_eq!(value(&mut client, &key).await.as_deref(), Some(damage));
    }
    store.delete_prefix().await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_dead_logs_and_keeps_live_and_undecodable_ones() {
    let Some((store, mut client)) =
        store_and_client("purge_deletes_dead_logs_and_keeps_live_and_undecodable_ones").await
    else {
        return;
    };
    let dead = RateLimit::new("brief", 1, Duration::from_millis(1));
    let live = RateLimit::new("long", 1, Duration::from_secs(3600));
    let damaged = RateLimit::new("damaged", 1, Duration::from_millis(1));
    for (id, limit) in [("a", &dead), ("b", &live)] {
        let admitted = store
            .admit(&AdmitRequest::new(id, "w").rate_limit(limit.clone()))
            .await
            .expect("admit");
        assert!(admitted.admitted().is_some(), "{admitted:?}");
    }
    let claimed = store
        .claim_limited(
            &ClaimRequest::new("q", "w", Duration::from_secs(30)).rate_limit(dead.clone()),
        )
        .await
        .expect("a claim finding nothing");
    assert!(claimed.jobs.is_empty(), "{claimed:?}");
    client
        .put(log_key(&store, &damaged), "[\"x\"]", None)
        .await
        .expect("damage");
    let footprint = store.footprint().await.expect("footprint");
    assert_eq!(footprint.get("rate_logs"), Some(&3), "{footprint:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;

    let purged = store.purge(Duration::from_secs(3600)).await.expect("purge");
    assert_eq!(purged, 0, "logs are not counted");
    let mut expected = vec![log_key(&store, &damaged), log_key(&store, &live)];
    expected.sort();
    assert_eq!(log_keys(&mut client, &store).await, expected);
    // The live log still holds its permit.
    let refused = store
        .admit(&AdmitRequest::new("c", "w").rate_limit(live.clone()))
        .await
        .expect("admit");
    assert!(
        matches!(refused, Admission::RateLimited { ref key, .. } if key == "long"),
        "{refused:?}"
    );
    store.delete_prefix().await.expect("clean up");
}
