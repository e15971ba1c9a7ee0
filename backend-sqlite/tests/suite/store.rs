//! What the conformance kit cannot see: the file across reopenings, schema
//! versions, a write lock held by another connection, and a step of the
//! clock the store judges expiry by. Rows damaged by
//! hand are `damaged_rows.rs`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tenure_backend_sqlite::{SqliteConfig, SqliteStore, SCHEMA_VERSION};
use tenure_lease_core::{
    Admission, AdmitRequest, ErrorKind, FenceGate, LeaseRecord, LeaseStore, LossReason,
    ManualClock, NotTakenReason, Renewal, StatusChange, Takeover, TakeoverRequest, Transition,
};

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
        let store = SqliteStore::connect(SqliteConfig::new(&path))
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
    let store = SqliteStore::connect(location)
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
        SqliteStore::connect(SqliteConfig::new(&path))
            .await
            .expect("a new file opens"),
    );
    let newer = SCHEMA_VERSION + 1;
    raw_connection(&path)
        .pragma_update(None, "user_version", newer)
        .expect("set user_version");

    let error = SqliteStore::connect(SqliteConfig::new(&path))
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
    let store =
        SqliteStore::connect(SqliteConfig::new(&path).busy_timeout(Duration::from_millis(50)))
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
        Ok(tenure_lease_core::Renewal::Renewed { .. })
    ));
}

/// Expiry is judged by the store's clock, the host's wall clock in
/// production: to the store, a step of that clock is time that passed,
/// although none passed for the holder (whose keeper counts on a monotonic
/// clock). A forward step of the lease's remaining time plus the grace makes
/// a lease renewed an instant ago takeable; the fence is what still keeps
/// the displaced holder off the resource. The crate docs say what to run.
#[tokio::test]
async fn a_forward_clock_step_beyond_the_grace_lets_a_fresh_lease_be_taken_over_and_fences_refuse_the_old_holder(
) {
    let directory = TempDir::new().expect("a temporary directory");
    let clock = Arc::new(ManualClock::starting_now());
    let store = SqliteStore::connect(SqliteConfig::new(database(&directory)).clock(clock.clone()))
        .await
        .expect("a new file opens");
    let (ttl, grace) = (Duration::from_secs(30), Duration::from_secs(5));
    let holder = admitted(
        &store,
        AdmitRequest::new("run", "worker-a").scope("s").ttl(ttl),
    )
    .await;
    let gate = FenceGate::new();
    gate.admit("resource", holder.fence)
        .expect("the holder writes to the resource");
    let takeover = TakeoverRequest::adopt("run", "worker-b", Some(ttl)).grace(grace);

    clock.advance(ttl);
    assert!(
        matches!(
            store
                .claim_for_takeover(&takeover)
                .await
                .expect("takeover answers"),
            Takeover::NotTaken(NotTakenReason::LeaseValid { .. })
        ),
        "a step within the grace leaves the lease valid"
    );
    clock.advance(grace);
    let taken = match store
        .claim_for_takeover(&takeover)
        .await
        .expect("takeover answers")
    {
        Takeover::Taken(record) => record,
        other => panic!("a step beyond ttl + grace makes the lease takeable: {other:?}"),
    };
    assert!(taken.fence > holder.fence, "the taker holds a newer fence");

    gate.admit("resource", taken.fence)
        .expect("the taker writes to the resource");
    assert!(
        gate.admit("resource", holder.fence).is_err(),
        "the displaced holder's writes are refused by fence"
    );
    let claim = holder.claim().expect("an owned record");
    assert!(
        matches!(
            store.renew(&claim, ttl).await.expect("renew answers"),
            Renewal::Lost(LossReason::OwnerChanged | LossReason::FenceChanged)
        ),
        "the displaced holder's next renewal tells it the lease is gone"
    );
}
