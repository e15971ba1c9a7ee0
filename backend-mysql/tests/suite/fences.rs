//! The fence counter: above the server's clock in microseconds, and
//! above every fence handed out even when the counter row itself falls
//! behind (as on a replica promoted without the old primary's last draws).

use std::time::Duration;

use tenure_lease_core::clock::to_micros;
use tenure_lease_core::{AdmitRequest, LeaseStore};

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_stay_above_the_clock_when_the_counter_falls_behind() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "fences_stay_above_the_clock_when_the_counter_falls_behind",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let admit = |id: &str| {
        let request = AdmitRequest::new(id, "worker").ttl(Duration::from_secs(30));
        let store = &store;
        async move {
            let before = store.now().await.expect("now");
            let admission = store.admit(&request).await.expect("admit");
            let fence = admission.admitted().expect("admitted").fence;
            (to_micros(before), fence)
        }
    };
    let (clock, first) = admit("first").await;
    // The counter row loses every draw, as a replica's that lagged.
    support::execute(
        &support::on_database(&url, &database),
        "UPDATE tenure_fences SET last_fence = 1",
    )
    .await
    .expect("set the counter back");
    let (_, second) = admit("second").await;
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
    assert!(
        first >= u64::try_from(clock).expect("after 1970"),
        "fence {first} is below the server's clock ({clock} µs) when it was drawn"
    );
    assert!(
        second > first,
        "fence {second} after the counter fell behind is not above {first}"
    );
}

/// A gate holding no positive fence (damaged by hand) answers `Corrupt`
/// naming what it holds, and a check leaves it as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_gate_is_corrupt_and_left_as_it_was() {
    use tenure_lease_core::{ErrorKind, FenceStore};
    let Some(url) =
        tenure_test_support::shared::mysql_url_for("a_damaged_gate_is_corrupt_and_left_as_it_was")
    else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let first = store
        .check_fence("printer", 7)
        .await
        .expect("a first check");
    assert_eq!(first, tenure_lease_core::FenceCheck::Accepted);
    let on_database = support::on_database(&url, &database);
    let mut answers = Vec::new();
    for damaged in [-5, 0] {
        support::execute(
            &on_database,
            &format!("UPDATE tenure_fence_gates SET fence = {damaged} WHERE resource = 'printer'"),
        )
        .await
        .expect("damage the gate");
        let checked = store.check_fence("printer", 9).await;
        let stored: i64 = sqlx::query_scalar("SELECT fence FROM tenure_fence_gates")
            .fetch_one(store.pool())
            .await
            .expect("read the gate");
        answers.push((damaged, checked, stored));
    }
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
    for (damaged, checked, stored) in answers {
        let error = checked.expect_err("a damaged gate");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{damaged}: {error}");
        assert!(
            error.message().contains(&format!("fence {damaged} ")),
            "{damaged}: {error}"
        );
        assert_eq!(stored, damaged, "the check wrote over the damaged gate");
    }
}

/// A listed gate holding no positive fence, a `checked_at` that is no
/// instant or a name that is not UTF-8 (damaged by hand) answers `Corrupt`
/// naming the gate, and the listing leaves every gate as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_gate_listed_is_corrupt_and_left_as_it_was() {
    use tenure_lease_core::{ErrorKind, FenceCheck, FenceStore};
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "a_damaged_gate_listed_is_corrupt_and_left_as_it_was",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let on_database = support::on_database(&url, &database);
    let gates = || async {
        sqlx::query_as::<_, (Vec<u8>, i64, i64)>(
            "SELECT resource, fence, checked_at FROM tenure_fence_gates ORDER BY resource",
        )
        .fetch_all(store.pool())
        .await
        .expect("read the gates")
    };
    let mut answers = Vec::new();
    for (damage, named, why) in [
        ("fence = -5", "\"printer\"", "fence -5 "),
        ("fence = 0", "\"printer\"", "fence 0 "),
        (
            "checked_at = 9223372036854775807",
            "\"printer\"",
            "is no instant",
        ),
        ("resource = X'FF'", "\"\u{fffd}\"", "not UTF-8"),
    ] {
        support::execute(&on_database, "DELETE FROM tenure_fence_gates")
            .await
            .expect("clear the gates");
        for (resource, fence) in [("printer", 7), ("scanner", 3)] {
            let check = store.check_fence(resource, fence).await.expect("a check");
            assert_eq!(check, FenceCheck::Accepted, "{resource}");
        }
        support::execute(
            &on_database,
            &format!("UPDATE tenure_fence_gates SET {damage} WHERE resource = 'printer'"),
        )
        .await
        .expect("damage the gate");
        let before = gates().await;
        let listed = store.list_fences(None, 10).await;
        let after = gates().await;
        answers.push((damage, [named, why], listed, before, after));
    }
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
    for (damage, [named, why], listed, before, after) in answers {
        let error = listed.expect_err("a damaged gate");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{damage}: {error}");
        assert!(
            error.message().contains(&format!("fence gate of {named}"))
                && error.message().contains(why),
            "{damage}: {error}"
        );
        assert_eq!(before.len(), 2, "{damage}: both gates are kept");
        assert_eq!(after, before, "{damage}: the listing changed the gates");
    }
}
