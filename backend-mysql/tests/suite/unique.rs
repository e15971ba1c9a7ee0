//! Unique jobs where the kit cannot reach: a damaged uniqueness key (or
//! one out of step with its columns), the migration that added them over
//! tables of the one before, and the slots `purge_jobs` deletes. The kit's
//! races of one key run at every isolation level through `isolation`.

use std::time::Duration;

use tenure_backend_mysql::{MigrationMode, MySqlConfig, MySqlStore};
use tenure_lease_core::queue::{ClaimRequest, NewJob, UniquePolicy};
use tenure_lease_core::{ErrorKind, JobQueue};

use crate::support;

/// A job of queue `q` with the uniqueness key `key`, held while queued.
fn keyed(id: &str, key: &str) -> NewJob {
    NewJob::new("q", serde_json::json!({}))
        .id(id)
        .unique(key, UniquePolicy::WhileQueued)
}

/// How many slot rows `store` keeps.
async fn slots(store: &MySqlStore) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM tenure_unique_slots")
        .fetch_one(store.pool())
        .await
        .expect("count the slots")
}

/// Writes `damage` (JSON) over the uniqueness key in the body of job `id`.
async fn damage_key(store: &MySqlStore, id: &str, damage: &str) {
    let body: Vec<u8> = sqlx::query_scalar("SELECT body FROM tenure_jobs WHERE id = ?")
        .bind(id.as_bytes())
        .fetch_one(store.pool())
        .await
        .expect("read the body");
    let mut document: serde_json::Value = serde_json::from_slice(&body).expect("a JSON body");
    document["unique"] = serde_json::from_str(damage).expect("JSON damage");
    sqlx::query("UPDATE tenure_jobs SET body = ? WHERE id = ?")
        .bind(document.to_string().into_bytes())
        .bind(id.as_bytes())
        .execute(store.pool())
        .await
        .expect("damage the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_uniqueness_key_reads_as_corrupt_and_holds_nothing() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "a_damaged_uniqueness_key_reads_as_corrupt_and_holds_nothing",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let damages = [
        r#"{"key": "k", "policy": "forever"}"#,
        r#"{"key": "k"}"#,
        r#"{"policy": "while_queued"}"#,
        r#"{"key": "k", "policy": {"for_period": null}}"#,
        r#""k""#,
    ];
    for (index, damage) in damages.into_iter().enumerate() {
        let id = format!("damaged-{index}");
        let key = format!("k-{index}");
        store
            .enqueue_unique(&keyed(&id, &key))
            .await
            .expect("enqueue");
        damage_key(&store, &id, damage).await;
        let read = store.get_job(&id).await.expect_err(damage);
        assert_eq!(read.kind(), ErrorKind::Corrupt, "{damage}: {read}");
        // The damaged job cannot be judged to hold its key: passed over.
        let next = store
            .enqueue_unique(&keyed(&format!("next-{index}"), &key))
            .await
            .expect("enqueue past the damaged job");
        assert!(next.is_created(), "{damage}: {next:?}");
    }
    // A body naming another key than its columns: the body decides.
    store
        .enqueue_unique(&keyed("moved", "m"))
        .await
        .expect("enqueue");
    damage_key(
        &store,
        "moved",
        r#"{"key": "elsewhere", "policy": "while_queued"}"#,
    )
    .await;
    let next = store
        .enqueue_unique(&keyed("after-moved", "m"))
        .await
        .expect("enqueue");
    assert!(next.is_created(), "{next:?}");
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unique_jobs_migration_applies_over_the_tables_before_it() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "the_unique_jobs_migration_applies_over_the_tables_before_it",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    store
        .enqueue(&NewJob::new("q", serde_json::json!({ "old": true })).id("old"))
        .await
        .expect("enqueue");
    store.close().await;
    let on_database = support::on_database(&url, &database);
    // The tables as migration 1 left them, a job in them.
    support::execute(
        &on_database,
        "ALTER TABLE tenure_jobs DROP KEY tenure_jobs_by_unique_key, DROP COLUMN unique_key, \
         DROP COLUMN unique_policy, DROP COLUMN unique_until; \
         DROP TABLE tenure_unique_slots; \
         DELETE FROM tenure_migrations WHERE version = 2;",
    )
    .await
    .expect("back to migration 1");
    let refused =
        MySqlStore::connect(MySqlConfig::new(&on_database).migrations(MigrationMode::VerifyOnly))
            .await
            .expect_err("migration 2 is missing");
    assert_eq!(refused.kind(), ErrorKind::Incompatible, "{refused}");
    assert!(refused.message().contains("migration 2"), "{refused}");

    let store = support::connect(&url, &database).await.expect("migrates");
    let old = store.get_job("old").await.expect("read").expect("kept");
    assert_eq!(old.unique, None);
    assert!(store
        .enqueue_unique(&keyed("new", "k"))
        .await
        .expect("enqueue")
        .is_created());
    assert!(!store
        .enqueue_unique(&keyed("twin", "k"))
        .await
        .expect("enqueue")
        .is_created());
    store.close().await;

    // An apply that stopped after the migration's `ALTER`, before
    // recording it, is completed.
    support::execute(
        &on_database,
        "DROP TABLE tenure_unique_slots; DELETE FROM tenure_migrations WHERE version = 2;",
    )
    .await
    .expect("half of migration 2");
    let store = support::connect(&url, &database).await.expect("migrates");
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM tenure_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .expect("versions");
    assert_eq!(versions, [1, 2, 3, 4]);
    assert!(!store
        .enqueue_unique(&keyed("third", "k"))
        .await
        .expect("enqueue")
        .is_created());
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_the_slots_no_job_names_any_more() {
    let Some(url) =
        tenure_test_support::shared::mysql_url_for("purge_deletes_the_slots_no_job_names_any_more")
    else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    for (id, key) in [("gone", "freed"), ("first", "kept")] {
        store
            .enqueue_unique(&keyed(id, key))
            .await
            .expect("enqueue");
    }
    let request = ClaimRequest::new("q", "worker", Duration::from_secs(30)).limit(2);
    for claimed in store.claim(&request).await.expect("claim") {
        store.complete(&claimed.claim).await.expect("complete");
    }
    store
        .enqueue_unique(&keyed("second", "kept"))
        .await
        .expect("enqueue");
    assert_eq!(slots(&store).await, 2);

    assert_eq!(store.purge_jobs(Duration::ZERO).await.expect("purge"), 2);
    let left: Vec<Vec<u8>> = sqlx::query_scalar("SELECT unique_key FROM tenure_unique_slots")
        .fetch_all(store.pool())
        .await
        .expect("slots");
    assert_eq!(
        left,
        [b"kept".to_vec()],
        "the slot of a key a job still names stays"
    );
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}
