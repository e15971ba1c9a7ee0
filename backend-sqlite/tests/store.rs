//! What the conformance kit cannot see: the file across reopenings, schema
//! versions, a write lock held by another connection, and lease and job rows
//! damaged by hand.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use backend_sqlite::{SqliteConfig, SqliteStore, SCHEMA_VERSION};
use lease_core::queue::{ClaimRequest, JobQueue, NewJob};
use lease_core::{
    Admission, AdmitRequest, Claim, ErrorKind, ExpiredQuery, LeaseRecord, LeaseStore, ManualClock,
    StatusChange, Transition,
};
use tempfile::TempDir;

const LONG_TTL: Duration = Duration::from_secs(600);

fn database(directory: &TempDir) -> PathBuf {
    directory.path().join("leases.db")
}

fn raw_connection(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).expect("a second connection to the file")
}

async fn admitted(store: &SqliteStore, request: AdmitRequest) -> LeaseRecord {
    match store.admit(&request).await.expect("admit answers") {
        Admission::Admitted { record, .. } => record,
        other => panic!("expected {:?} to be admitted, got {other:?}", request.id),
    }
}

async fn finish(store: &SqliteStore, record: &LeaseRecord) {
    let claim = record.claim().expect("an owned record");
    let answer = store
        .transition(&claim, &StatusChange::succeeded())
        .await
        .expect("transition answers");
    assert!(matches!(answer, Transition::Applied(_)), "{answer:?}");
}

#[tokio::test]
async fn reopening_keeps_records_held_scopes_and_the_fence_sequence() {
    let directory = TempDir::new().expect("a temporary directory");
    let path = database(&directory);
    let (finished, holding) = {
        let store = SqliteStore::open(SqliteConfig::new(&path))
            .await
            .expect("a new file opens");
        let finished = admitted(&store, AdmitRequest::new("first", "worker-a").scope("s")).await;
        finish(&store, &finished).await;
        let holding = admitted(
            &store,
            AdmitRequest::new("second", "worker-a")
                .scope("s")
                .ttl(LONG_TTL),
        )
        .await;
        (
            store.get("first").await.expect("get").expect("first"),
            holding,
        )
    };

    let location = format!("sqlite://{}", path.display());
    let store = SqliteStore::connect(&location)
        .await
        .expect("the file reopens through a URL");
    assert_eq!(store.get("first").await.expect("get"), Some(finished));
    assert_eq!(
        store.get("second").await.expect("get"),
        Some(holding.clone())
    );
    let blocked = store
        .admit(&AdmitRequest::new("third", "worker-b").scope("s"))
        .await
        .expect("admit answers");
    assert!(
        matches!(&blocked, Admission::Conflict { holder, .. } if holder.id == "second"),
        "the scope is still held after reopening: {blocked:?}"
    );

    finish(&store, &holding).await;
    assert_eq!(store.purge(Duration::ZERO).await.expect("purge"), 2);
    let readmitted = admitted(&store, AdmitRequest::new("second", "worker-b").scope("s")).await;
    assert!(
        readmitted.fence > holding.fence,
        "fences keep growing across reopening and purge: {} after {}",
        readmitted.fence,
        holding.fence
    );
}

#[tokio::test]
async fn a_newer_schema_version_is_incompatible_and_left_untouched() {
    let directory = TempDir::new().expect("a temporary directory");
    let path = database(&directory);
    drop(
        SqliteStore::open(SqliteConfig::new(&path))
            .await
            .expect("a new file opens"),
    );
    let newer = SCHEMA_VERSION + 1;
    raw_connection(&path)
        .pragma_update(None, "user_version", newer)
        .expect("set user_version");

    let error = SqliteStore::open(SqliteConfig::new(&path))
        .await
        .expect_err("a newer schema is refused");
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    assert!(error.message().contains("newer"), "{error}");
    let on_disk: i64 = raw_connection(&path)
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("read user_version");
    assert_eq!(on_disk, newer, "the file is never downgraded");
}

#[tokio::test]
async fn a_lock_held_beyond_the_busy_timeout_is_unavailable_and_changes_nothing() {
    let directory = TempDir::new().expect("a temporary directory");
    let path = database(&directory);
    let store = SqliteStore::open(SqliteConfig::new(&path).busy_timeout(Duration::from_millis(50)))
        .await
        .expect("a new file opens");
    let record = admitted(
        &store,
        AdmitRequest::new("held", "worker-a")
            .scope("s")
            .ttl(LONG_TTL),
    )
    .await;
    let claim = record.claim().expect("an owned record");

    let blocker = raw_connection(&path);
    blocker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("the second connection takes the write lock");
    let admission = store
        .admit(&AdmitRequest::new("blocked", "worker-b").scope("t"))
        .await
        .expect_err("admit cannot take the lock");
    assert_eq!(admission.kind(), ErrorKind::Unavailable, "{admission}");
    assert!(admission.is_retryable());
    let renewal = store
        .renew(&claim, LONG_TTL)
        .await
        .expect_err("a busy renewal is an error, never Lost");
    assert_eq!(renewal.kind(), ErrorKind::Unavailable, "{renewal}");
    assert_eq!(
        store
            .get("held")
            .await
            .expect("reads do not wait for the writer"),
        Some(record.clone())
    );
    blocker.execute_batch("COMMIT").expect("release the lock");

    admitted(&store, AdmitRequest::new("blocked", "worker-b").scope("t")).await;
    assert!(matches!(
        store.renew(&claim, LONG_TTL).await,
        Ok(lease_core::Renewal::Renewed { .. })
    ));
}

#[tokio::test]
async fn undecodable_rows_are_skipped_by_the_scan_and_corrupt_elsewhere() {
    let directory = TempDir::new().expect("a temporary directory");
    let path = database(&directory);
    let clock = Arc::new(ManualClock::starting_now());
    let store = SqliteStore::open(SqliteConfig::new(&path).clock(clock.clone()))
        .await
        .expect("a new file opens");
    let ttl = Duration::from_secs(1);
    let mut claims: Vec<Claim> = Vec::new();
    for id in [
        "good",
        "bogus-status",
        "garbage-expiry",
        "far-future-creation",
    ] {
        let record = admitted(&store, AdmitRequest::new(id, "worker-a").scope(id).ttl(ttl)).await;
        claims.push(record.claim().expect("an owned record"));
    }
    raw_connection(&path)
        .execute_batch(
            "UPDATE leases SET status = 'bogus' WHERE id = 'bogus-status';
             UPDATE leases SET lease_expires_at = 'garbage' WHERE id = 'garbage-expiry';
             UPDATE leases SET created_at = 9223372036854775807 WHERE id = 'far-future-creation';",
        )
        .expect("damage three rows by hand");
    clock.advance(ttl * 2);

    let scan = store
        .list_expired(&ExpiredQuery::new(Duration::ZERO))
        .await
        .expect("the scan survives damaged rows");
    let found: Vec<&str> = scan.records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(found, vec!["good"]);
    let mut skipped: Vec<&str> = scan.skipped.iter().map(|s| s.id.as_str()).collect();
    skipped.sort_unstable();
    assert_eq!(
        skipped,
        vec!["bogus-status", "far-future-creation", "garbage-expiry"]
    );
    for (id, column) in [
        ("bogus-status", "status"),
        ("garbage-expiry", "lease_expires_at"),
        ("far-future-creation", "created_at"),
    ] {
        let skipped = scan
            .skipped
            .iter()
            .find(|skipped| skipped.id == id)
            .expect("reported");
        assert!(
            skipped.reason.contains(&format!("column {column}")),
            "the reason for {id} names its column: {}",
            skipped.reason
        );
    }

    for id in ["bogus-status", "garbage-expiry", "far-future-creation"] {
        let error = store.get(id).await.expect_err("get of a damaged row");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{id}: {error}");
        assert!(error.message().contains(id), "{error}");
    }
    let renewal = store
        .renew(&claims[1], ttl)
        .await
        .expect_err("a damaged row is never reported as lost");
    assert_eq!(renewal.kind(), ErrorKind::Corrupt);
    let blocked = store
        .admit(&AdmitRequest::new("next", "worker-b").scope("bogus-status"))
        .await
        .expect_err("a scope held by a damaged row cannot be judged");
    assert_eq!(blocked.kind(), ErrorKind::Corrupt);
    assert_eq!(
        store.get("good").await.expect("get").map(|r| r.id),
        Some("good".to_owned()),
        "undamaged rows read as before"
    );
}

#[tokio::test]
async fn undecodable_job_rows_are_skipped_by_claim_and_reap_and_corrupt_for_get_job() {
    let directory = TempDir::new().expect("a temporary directory");
    let path = database(&directory);
    let clock = Arc::new(ManualClock::starting_now());
    let store = SqliteStore::open(SqliteConfig::new(&path).clock(clock.clone()))
        .await
        .expect("a new file opens");
    let job = |id: &str, queue: &str, priority: i32| {
        NewJob::new(queue, serde_json::json!({ "id": id }))
            .id(id)
            .priority(priority)
    };
    store
        .enqueue_batch(&[
            job("bad-payload", "q", 9),
            job("bad-run-at", "q", 9),
            job("good-1", "q", 1),
            job("good-2", "q", 0),
            job("reap-bad", "r", 1),
            job("reap-good", "r", 0),
        ])
        .await
        .expect("enqueue");
    let ttl = Duration::from_secs(1);
    let held = store
        .claim(&ClaimRequest::new("r", "worker-a", ttl).limit(2))
        .await
        .expect("claim the reaper's jobs");
    assert_eq!(held.len(), 2);
    raw_connection(&path)
        .execute_batch(
            "UPDATE jobs SET payload = 'not json' WHERE id = 'bad-payload';
             UPDATE jobs SET run_at = 'garbage' WHERE id = 'bad-run-at';
             UPDATE jobs SET required_capabilities = '[1, 2' WHERE id = 'reap-bad';",
        )
        .expect("damage three rows by hand");

    let claimed = store
        .claim(&ClaimRequest::new("q", "worker-b", LONG_TTL).limit(10))
        .await
        .expect("claim survives damaged rows");
    let ids: Vec<&str> = claimed.iter().map(|c| c.job.id.as_str()).collect();
    assert_eq!(
        ids,
        vec!["good-1", "good-2"],
        "damaged rows are passed over"
    );

    clock.advance(ttl * 2);
    let report = store.reap(Duration::ZERO).await.expect("reap survives");
    let requeued: Vec<&str> = report.requeued.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(requeued, vec!["reap-good"]);
    assert!(report.dead_lettered.is_empty());

    for (id, column) in [
        ("bad-payload", "payload"),
        ("bad-run-at", "run_at"),
        ("reap-bad", "required_capabilities"),
    ] {
        let error = store
            .get_job(id)
            .await
            .expect_err("get_job of a damaged row");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{id}: {error}");
        assert!(error.message().contains(id), "{error}");
        assert!(
            error.message().contains(&format!("column {column}")),
            "{error}"
        );
    }
    let damaged_claim = held
        .iter()
        .find(|claimed| claimed.job.id == "reap-bad")
        .map(|claimed| &claimed.claim)
        .expect("reap-bad was claimed");
    let settle = store
        .complete(damaged_claim)
        .await
        .expect_err("a damaged job is never reported as lost");
    assert_eq!(settle.kind(), ErrorKind::Corrupt);
}
