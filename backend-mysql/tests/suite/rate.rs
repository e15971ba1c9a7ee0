//! Rate limits where the kit cannot reach: a damaged log (admissions and
//! claims answer `Corrupt` and change nothing), the dead logs `purge`
//! deletes, and the migration that added the logs over tables of the one
//! before.

use std::time::Duration;

use tenure_backend_mysql::{MigrationMode, MySqlConfig, MySqlStore};
use tenure_lease_core::queue::{ClaimRequest, JobState, NewJob};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{AdmitRequest, AdmitStrategy, ErrorKind, JobQueue, LeaseStore};

use crate::support;

/// A period no test waits out.
const LONG: Duration = Duration::from_secs(3600);

/// Stored logs no operation writes, with why; each for a limit of 2
/// permits.
const DAMAGES: &[(&str, &[u8])] = &[
    ("no JSON", b"not json"),
    ("no array", b"{}"),
    ("no numbers", br#"["1"]"#),
    ("no instant", b"[9223372036854775807]"),
    ("more uses than permits", b"[1, 2, 3]"),
    ("not UTF-8", b"[\xff]"),
];

/// The uses stored in `limit`'s log, if it has a row.
async fn stored_log(store: &MySqlStore, limit: &RateLimit) -> Option<Vec<u8>> {
    sqlx::query_scalar(
        "SELECT uses FROM tenure_rate_logs WHERE rate_key = ? AND permits = ? AND period_ms = ?",
    )
    .bind(limit.key.as_bytes())
    .bind(limit.permits)
    .bind(i64::try_from(limit.period.as_millis()).expect("a period in range"))
    .fetch_optional(store.pool())
    .await
    .expect("read the log")
}

/// Writes `damage` over the uses of `limit`'s log.
async fn damage_log(store: &MySqlStore, limit: &RateLimit, damage: &[u8]) {
    let damaged = sqlx::query(
        "UPDATE tenure_rate_logs SET uses = ? \
         WHERE rate_key = ? AND permits = ? AND period_ms = ?",
    )
    .bind(damage)
    .bind(limit.key.as_bytes())
    .bind(limit.permits)
    .bind(i64::try_from(limit.period.as_millis()).expect("a period in range"))
    .execute(store.pool())
    .await
    .expect("damage the log");
    assert_eq!(damaged.rows_affected(), 1, "the log has a row");
}

/// The keys of the logs stored, in order.
async fn log_keys(store: &MySqlStore) -> Vec<Vec<u8>> {
    sqlx::query_scalar("SELECT rate_key FROM tenure_rate_logs ORDER BY rate_key")
        .fetch_all(store.pool())
        .await
        .expect("read the logs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_rate_log_refuses_admissions_and_changes_nothing() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "a_damaged_rate_log_refuses_admissions_and_changes_nothing",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    for (index, (why, damage)) in DAMAGES.iter().enumerate() {
        let limit = RateLimit::new(format!("k-{index}"), 2, LONG);
        let scope = format!("s-{index}");
        let holder = format!("holder-{index}");
        let admitted = store
            .admit(
                &AdmitRequest::new(&holder, "worker-a")
                    .scope(&scope)
                    .ttl(LONG)
                    .rate_limit(limit.clone()),
            )
            .await
            .expect("admit");
        assert!(admitted.admitted().is_some(), "{why}: {admitted:?}");
        damage_log(&store, &limit, damage).await;
        // Would interrupt the holder (same owner) and use the last permit.
        let next = format!("next-{index}");
        let refused = store
            .admit(
                &AdmitRequest::new(&next, "worker-a")
                    .scope(&scope)
                    .ttl(LONG)
                    .strategy(AdmitStrategy::Interrupt)
                    .rate_limit(limit.clone()),
            )
            .await
            .expect_err(why);
        assert_eq!(refused.kind(), ErrorKind::Corrupt, "{why}: {refused}");
        assert!(refused.message().contains("rate log"), "{why}: {refused}");
        assert_eq!(store.get(&next).await.expect("read"), None, "{why}");
        let kept = store.get(&holder).await.expect("read").expect("kept");
        assert!(kept.is_active(), "{why}: the holder was not interrupted");
        assert_eq!(
            stored_log(&store, &limit).await.as_deref(),
            Some(*damage),
            "{why}: the log is left as it was"
        );
        // The same key with other permits is another log, still whole.
        let other = RateLimit::new(limit.key.clone(), 3, LONG);
        let beside = store
            .admit(&AdmitRequest::new(format!("beside-{index}"), "worker-a").rate_limit(other))
            .await
            .expect("another log");
        assert!(beside.admitted().is_some(), "{why}: {beside:?}");
    }
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_rate_log_refuses_claims_and_changes_nothing() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "a_damaged_rate_log_refuses_claims_and_changes_nothing",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    for (index, (why, damage)) in DAMAGES.iter().enumerate() {
        let limit = RateLimit::new(format!("k-{index}"), 2, LONG);
        let queue = format!("q-{index}");
        for job in ["first", "second"] {
            store
                .enqueue(&NewJob::new(&queue, serde_json::json!({})).id(format!("{job}-{index}")))
                .await
                .expect("enqueue");
        }
        let request = ClaimRequest::new(&queue, "worker", LONG).rate_limit(limit.clone());
        let claimed = store.claim_limited(&request).await.expect("claim");
        assert_eq!(claimed.jobs.len(), 1, "{why}: {claimed:?}");
        damage_log(&store, &limit, damage).await;
        let refused = store.claim_limited(&request).await.expect_err(why);
        assert_eq!(refused.kind(), ErrorKind::Corrupt, "{why}: {refused}");
        assert!(refused.message().contains("rate log"), "{why}: {refused}");
        let queued = store
            .list_jobs(&queue, Some(JobState::Queued), 10)
            .await
            .expect("list");
        assert_eq!(queued.len(), 1, "{why}: the second job is still queued");
        assert_eq!(queued[0].attempt, 0, "{why}: {queued:?}");
        assert_eq!(
            stored_log(&store, &limit).await.as_deref(),
            Some(*damage),
            "{why}: the log is left as it was"
        );
        // A claim without the limit is not held up by its log.
        assert_eq!(
            store
                .claim(&ClaimRequest::new(&queue, "worker", LONG))
                .await
                .expect("claim without a limit")
                .len(),
            1,
            "{why}"
        );
    }
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_dead_rate_logs_and_keeps_live_ones() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "purge_deletes_dead_rate_logs_and_keeps_live_ones",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let dead = RateLimit::new("dead", 1, Duration::from_millis(1));
    let live = RateLimit::new("live", 1, LONG);
    for (id, limit) in [("a", &dead), ("b", &live)] {
        let admitted = store
            .admit(&AdmitRequest::new(id, "worker-a").rate_limit(limit.clone()))
            .await
            .expect("admit");
        assert!(admitted.admitted().is_some(), "{admitted:?}");
    }
    // A claim's log dies and is purged as an admission's does.
    store
        .enqueue(&NewJob::new("q", serde_json::json!({})).id("job"))
        .await
        .expect("enqueue");
    let claimed = store
        .claim_limited(
            &ClaimRequest::new("q", "worker", LONG).rate_limit(RateLimit::new(
                "claims",
                1,
                Duration::from_millis(1),
            )),
        )
        .await
        .expect("claim");
    assert_eq!(claimed.jobs.len(), 1, "{claimed:?}");
    assert_eq!(
        log_keys(&store).await,
        [b"claims".to_vec(), b"dead".to_vec(), b"live".to_vec()]
    );
    tokio::time::sleep(Duration::from_millis(20)).await;

    assert_eq!(
        store.purge(LONG).await.expect("purge"),
        0,
        "logs are not counted"
    );
    assert_eq!(
        log_keys(&store).await,
        [b"live".to_vec()],
        "the logs whose uses all stopped counting are deleted"
    );
    // A deleted log is as good as a dead one; the live one still holds.
    let again = store
        .admit(&AdmitRequest::new("c", "worker-a").rate_limit(dead))
        .await
        .expect("admit");
    assert!(again.admitted().is_some(), "{again:?}");
    let held = store
        .admit(&AdmitRequest::new("d", "worker-a").rate_limit(live))
        .await
        .expect("admit");
    assert!(held.admitted().is_none(), "{held:?}");
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limits_migration_applies_over_the_tables_before_it() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "the_rate_limits_migration_applies_over_the_tables_before_it",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    store
        .admit(&AdmitRequest::new("old", "worker-a"))
        .await
        .expect("admit");
    store.close().await;
    let on_database = support::on_database(&url, &database);
    // The tables as migration 2 left them, a record in them.
    support::execute(
        &on_database,
        "DROP TABLE tenure_rate_logs; DELETE FROM tenure_migrations WHERE version = 3;",
    )
    .await
    .expect("back to migration 2");
    let refused =
        MySqlStore::connect(MySqlConfig::new(&on_database).migrations(MigrationMode::VerifyOnly))
            .await
            .expect_err("migration 3 is missing");
    assert_eq!(refused.kind(), ErrorKind::Incompatible, "{refused}");
    assert!(refused.message().contains("migration 3"), "{refused}");

    let store = support::connect(&url, &database).await.expect("migrates");
    assert!(store.get("old").await.expect("read").is_some());
    let limit = RateLimit::new("k", 1, LONG);
    let first = store
        .admit(&AdmitRequest::new("new", "worker-a").rate_limit(limit.clone()))
        .await
        .expect("admit");
    assert!(first.admitted().is_some(), "{first:?}");
    let second = store
        .admit(&AdmitRequest::new("newer", "worker-a").rate_limit(limit))
        .await
        .expect("admit");
    assert!(second.admitted().is_none(), "{second:?}");
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM tenure_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .expect("versions");
    assert_eq!(versions, [1, 2, 3, 4]);
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}
