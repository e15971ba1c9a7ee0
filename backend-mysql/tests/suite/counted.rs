//! Counted scopes where the kit cannot reach: a record whose stored slots
//! cannot be decoded (reads and the admissions that need it answer
//! `Corrupt` and change nothing), the scope index kept by slot key (the
//! longest key fits, a freed slot leaves no row behind), and the migration
//! that made room for slot keys over the tables of the one before.

use std::time::Duration;

use tenure_backend_mysql::{MigrationMode, MySqlConfig, MySqlStore};
use tenure_lease_core::backend::rules::{slot_key, SLOT_SEPARATOR};
use tenure_lease_core::limits::{MAX_NAME_BYTES, MAX_SCOPE_CAPACITY};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, ErrorKind, LeaseRecord, LeaseStore, StatusChange,
    TakeoverRequest, Transition,
};

use crate::support;

/// A lease no test waits out.
const LONG: Duration = Duration::from_secs(3600);

/// Stored `slots` values no operation writes, with why.
const DAMAGES: &[(&str, &str)] = &[
    ("no object", r#""s""#),
    ("a list", "[1]"),
    ("a negative slot", r#"{"SCOPE": -1}"#),
    ("a slot beyond u32", r#"{"SCOPE": 4294967296}"#),
    ("a slot as text", r#"{"SCOPE": "1"}"#),
    ("a fractional slot", r#"{"SCOPE": 1.5}"#),
    ("no slot", r#"{"SCOPE": null}"#),
];

/// A request for `id` by `owner` on the counted `scope` of `capacity`.
fn counted(id: &str, owner: &str, scope: &str, capacity: u32) -> AdmitRequest {
    AdmitRequest::new(id, owner)
        .counted_scope(scope, capacity)
        .ttl(LONG)
}

/// Admits `request`, which must be admitted.
async fn admitted(store: &MySqlStore, request: &AdmitRequest) -> LeaseRecord {
    let answer = store.admit(request).await.expect("admit");
    answer
        .admitted()
        .unwrap_or_else(|| panic!("{} is admitted: {answer:?}", request.id))
        .clone()
}

/// The stored body of the record `id`.
async fn body(store: &MySqlStore, id: &str) -> Vec<u8> {
    sqlx::query_scalar("SELECT body FROM tenure_leases WHERE id = ?")
        .bind(id.as_bytes())
        .fetch_one(store.pool())
        .await
        .expect("read the body")
}

/// Writes `slots` (JSON text) as the `slots` of the record `id`'s body.
async fn damage_slots(store: &MySqlStore, id: &str, slots: &str) {
    let mut document: serde_json::Value =
        serde_json::from_slice(&body(store, id).await).expect("a JSON body");
    document["slots"] = serde_json::from_str(slots).expect("JSON damage");
    let damaged = sqlx::query("UPDATE tenure_leases SET body = ? WHERE id = ?")
        .bind(document.to_string().into_bytes())
        .bind(id.as_bytes())
        .execute(store.pool())
        .await
        .expect("damage the body");
    assert_eq!(damaged.rows_affected(), 1, "{id} has a row");
}

/// The keys of `tenure_held_scopes` and their holders, in key order.
async fn held(store: &MySqlStore) -> Vec<(String, String)> {
    let rows: Vec<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("SELECT scope, lease_id FROM tenure_held_scopes ORDER BY scope")
            .fetch_all(store.pool())
            .await
            .expect("read the held scopes");
    rows.into_iter()
        .map(|(key, id)| {
            (
                String::from_utf8(key).expect("a UTF-8 key"),
                String::from_utf8(id).expect("a UTF-8 id"),
            )
        })
        .collect()
}

/// `(key, holder)` pairs as [`held`] answers them.
fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(key, id)| ((*key).to_owned(), (*id).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_slots_answer_corrupt_and_change_nothing() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "damaged_slots_answer_corrupt_and_change_nothing",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    for (index, (why, damage)) in DAMAGES.iter().enumerate() {
        let scope = format!("s-{index}");
        let first = admitted(&store, &counted(&format!("a-{index}"), "w", &scope, 3)).await;
        let second = admitted(&store, &counted(&format!("b-{index}"), "w", &scope, 3)).await;
        assert_eq!(second.slot(&scope), Some(1), "{why}");
        damage_slots(&store, &second.id, &damage.replace("SCOPE", &scope)).await;
        let damaged = body(&store, &second.id).await;
        let held_before = held(&store).await;

        let corrupt = |answer: tenure_lease_core::Error, what: &str| {
            assert_eq!(answer.kind(), ErrorKind::Corrupt, "{why}, {what}: {answer}");
            assert!(
                answer.message().contains(&second.id),
                "{why}, {what}: {answer}"
            );
        };
        corrupt(store.get(&second.id).await.expect_err(why), "get");
        corrupt(
            store.list_by_scope(&scope).await.expect_err(why),
            "list_by_scope",
        );
        // Every damaged record so far is active: this one or another is named.
        let listed = store.list_active().await.expect_err(why);
        assert_eq!(listed.kind(), ErrorKind::Corrupt, "{why}: {listed}");
        // A full scope's holders must be read (a free slot would be taken
        // without reading them).
        let next = format!("c-{index}");
        for request in [
            counted(&next, "w", &scope, 2),
            counted(&next, "w", &scope, 2).strategy(AdmitStrategy::Interrupt),
        ] {
            corrupt(store.admit(&request).await.expect_err(why), "admit");
        }
        let claim = second.claim().expect("a claim");
        corrupt(store.renew(&claim, LONG).await.expect_err(why), "renew");
        corrupt(
            store
                .transition(&claim, &StatusChange::succeeded())
                .await
                .expect_err(why),
            "transition",
        );
        corrupt(
            store
                .claim_for_takeover(&TakeoverRequest::adopt(&second.id, "other", Some(LONG)))
                .await
                .expect_err(why),
            "takeover",
        );
        assert_eq!(store.get(&next).await.expect("read"), None, "{why}");
        assert_eq!(
            body(&store, &second.id).await,
            damaged,
            "{why}: kept as it was"
        );
        assert_eq!(
            store.get(&first.id).await.expect("read"),
            Some(first.clone()),
            "{why}: the other holder is untouched"
        );
        assert_eq!(
            held(&store).await,
            held_before,
            "{why}: no slot changed hands"
        );
        // An admission that counts only the sound holder's slot is judged.
        let exclusive = store
            .admit(&AdmitRequest::new(&next, "w").scope(&scope).ttl(LONG))
            .await
            .expect("an exclusive admission reads slot 0 alone");
        assert_eq!(
            conflict_holder(&exclusive),
            Some(first.id.as_str()),
            "{why}: {exclusive:?}"
        );
    }
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}

/// The record `id`, by its claim, writes `Succeeded`, freeing its slot.
async fn finish(store: &MySqlStore, record: &LeaseRecord) {
    let claim = record.claim().expect("a claim");
    let answer = store
        .transition(&claim, &StatusChange::succeeded())
        .await
        .expect("finish");
    assert!(matches!(answer, Transition::Applied(_)), "{answer:?}");
}

/// The id of the holder a conflict names.
fn conflict_holder(answer: &Admission) -> Option<&str> {
    match answer {
        Admission::Conflict { holder, .. } => Some(holder.id.as_str()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scope_index_is_kept_by_slot_key() {
    let Some(url) =
        tenure_test_support::shared::mysql_url_for("the_scope_index_is_kept_by_slot_key")
    else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let slot1 = format!("s{SLOT_SEPARATOR}1");
    let slot2 = format!("s{SLOT_SEPARATOR}2");
    let a = admitted(&store, &counted("a", "w", "s", 3).scope("t")).await;
    let b = admitted(&store, &counted("b", "w", "s", 3)).await;
    admitted(&store, &counted("c", "w", "s", 3)).await;
    assert_eq!(
        held(&store).await,
        pairs(&[("s", "a"), (&slot1, "b"), (&slot2, "c"), ("t", "a")])
    );
    // A refused admission leaves no row behind, of a slot or of a scope.
    let refused = store
        .admit(&counted("d", "w", "s", 3).scope("u"))
        .await
        .expect("admit");
    assert_eq!(conflict_holder(&refused), Some("a"), "{refused:?}");
    finish(&store, &b).await;
    assert_eq!(
        held(&store).await,
        pairs(&[("s", "a"), (&slot2, "c"), ("t", "a")]),
        "an end frees the holder's slot key alone"
    );
    let d = admitted(&store, &counted("d", "w", "s", 3)).await;
    assert_eq!(d.slot("s"), Some(1));
    // Full: the lowest holder it may interrupt (its owner's) goes.
    let answer = store
        .admit(&counted("e", "w", "s", 3).strategy(AdmitStrategy::Interrupt))
        .await
        .expect("admit");
    let Admission::Admitted { interrupted, .. } = &answer else {
        panic!("expected the interruption, got {answer:?}");
    };
    assert_eq!(interrupted.len(), 1, "{answer:?}");
    assert_eq!(interrupted[0].id, a.id);
    assert_eq!(
        held(&store).await,
        pairs(&[("s", "e"), (&slot1, "d"), (&slot2, "c")]),
        "the interrupted holder frees every key it held"
    );
    let mut listed: Vec<String> = store
        .list_by_scope("s")
        .await
        .expect("list")
        .into_iter()
        .map(|record| record.id)
        .collect();
    listed.sort();
    assert_eq!(listed, ["a", "b", "c", "d", "e"], "every slot's records");

    // The longest key: the longest name's last slot.
    let long = "x".repeat(MAX_NAME_BYTES);
    let first = admitted(&store, &counted("h", "w", &long, MAX_SCOPE_CAPACITY)).await;
    // Slots 1 to 998 held by `h` too, behind the store's back.
    let keys: Vec<String> = (1..MAX_SCOPE_CAPACITY - 1)
        .map(|slot| slot_key(&long, slot).into_owned())
        .collect();
    let mut insert = sqlx::QueryBuilder::new("INSERT INTO tenure_held_scopes (scope, lease_id) ");
    insert.push_values(&keys, |mut row, key| {
        row.push_bind(key.as_bytes()).push_bind(first.id.as_bytes());
    });
    insert
        .build()
        .execute(store.pool())
        .await
        .expect("fill the slots");
    let last = admitted(&store, &counted("last", "w", &long, MAX_SCOPE_CAPACITY)).await;
    assert_eq!(last.slot(&long), Some(MAX_SCOPE_CAPACITY - 1));
    let last_key = slot_key(&long, MAX_SCOPE_CAPACITY - 1).into_owned();
    assert_eq!(last_key.len(), MAX_NAME_BYTES + 4);
    assert!(
        held(&store)
            .await
            .contains(&(last_key.clone(), "last".to_owned())),
        "the longest key is kept whole"
    );
    let full = store
        .admit(&counted("more", "v", &long, MAX_SCOPE_CAPACITY))
        .await
        .expect("admit");
    assert_eq!(conflict_holder(&full), Some("h"), "{full:?}");
    finish(&store, &last).await;
    assert!(!held(&store).await.iter().any(|(key, _)| *key == last_key));
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counted_scopes_migration_applies_over_the_tables_before_it() {
    let Some(url) = tenure_test_support::shared::mysql_url_for(
        "the_counted_scopes_migration_applies_over_the_tables_before_it",
    ) else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let old = admitted(&store, &AdmitRequest::new("old", "w").scope("s").ttl(LONG)).await;
    store.close().await;
    let on_database = support::on_database(&url, &database);
    // The tables as migration 3 left them, a record in them.
    support::execute(
        &on_database,
        "ALTER TABLE tenure_held_scopes MODIFY scope VARBINARY(256) NOT NULL; \
         DELETE FROM tenure_migrations WHERE version = 4;",
    )
    .await
    .expect("back to migration 3");
    let refused =
        MySqlStore::connect(MySqlConfig::new(&on_database).migrations(MigrationMode::VerifyOnly))
            .await
            .expect_err("migration 4 is missing");
    assert_eq!(refused.kind(), ErrorKind::Incompatible, "{refused}");
    assert!(refused.message().contains("migration 4"), "{refused}");

    let store = support::connect(&url, &database).await.expect("migrates");
    let width: String = sqlx::query_scalar(
        "SELECT CAST(COLUMN_TYPE AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tenure_held_scopes' \
         AND COLUMN_NAME = 'scope'",
    )
    .fetch_one(store.pool())
    .await
    .expect("the column");
    assert_eq!(width, "varbinary(261)");
    // A record stored before has no slots, and holds slot 0.
    let read = store.get("old").await.expect("read").expect("kept");
    assert!(read.slots.is_empty());
    assert_eq!(read, old);
    let new = admitted(&store, &counted("new", "w", "s", 2)).await;
    assert_eq!(new.slot("s"), Some(1));
    assert_eq!(store.get("new").await.expect("read"), Some(new));
    store.close().await;

    // An apply that stopped after the migration's `ALTER`, before
    // recording it, is completed.
    support::execute(
        &on_database,
        "DELETE FROM tenure_migrations WHERE version = 4;",
    )
    .await
    .expect("half of migration 4");
    let store = support::connect(&url, &database).await.expect("migrates");
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM tenure_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .expect("versions");
    assert_eq!(versions, [1, 2, 3, 4]);
    let full = store
        .admit(&counted("newer", "v", "s", 2))
        .await
        .expect("admit");
    assert_eq!(conflict_holder(&full), Some("old"), "{full:?}");
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}
