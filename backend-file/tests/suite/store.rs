//! What the kit does not see of the file backend: files that are not a
//! store's, paths that name no file, and what a crashed writer leaves.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tenure_backend_file::FileStore;
use tenure_lease_core::{AdmitRequest, ErrorKind, LeaseStore};

fn directory() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

#[tokio::test]
async fn a_file_that_is_no_store_is_corrupt_and_never_written_over() {
    let directory = directory();
    let path = directory.path().join("store.json");
    let store = FileStore::open(&path).await.expect("a new store");
    for garbage in [
        &b"not json at all"[..],
        b"{\"format\": 1, \"last_fence\": \"x\"}",
        b"[]",
    ] {
        std::fs::write(&path, garbage).expect("garbage written");
        let error = FileStore::open(&path).await.expect_err("garbage opened");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
        assert!(
            error.message().contains("restore it"),
            "says what to do: {error}"
        );
        let error = store
            .admit(&AdmitRequest::new("op", "worker-a").scope("s"))
            .await
            .expect_err("admitted into garbage");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
        assert_eq!(
            std::fs::read(&path).expect("the file"),
            garbage,
            "left as it was"
        );
    }
}

#[tokio::test]
async fn a_store_of_another_format_is_incompatible() {
    let directory = directory();
    let path = directory.path().join("store.json");
    std::fs::write(&path, br#"{"format": 2, "last_fence": 0}"#).expect("written");
    let error = FileStore::open(&path).await.expect_err("opened format 2");
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
}

#[tokio::test]
async fn a_path_naming_no_file_is_a_config_error() {
    let error = FileStore::open(Path::new("/")).await.expect_err("opened /");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
}

#[tokio::test]
async fn a_missing_directory_is_unavailable() {
    let directory = directory();
    let path = directory.path().join("absent").join("store.json");
    let error = FileStore::open(&path)
        .await
        .expect_err("opened in no directory");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
}

/// A writer that died between writing the temporary file and renaming it
/// leaves the store as it was, and the next writer goes on.
#[tokio::test]
async fn a_crashed_writers_temporary_file_changes_nothing() {
    let directory = directory();
    let path = directory.path().join("store.json");
    let store = FileStore::open(&path).await.expect("a new store");
    let request = AdmitRequest::new("op-1", "worker-a")
        .scope("s")
        .ttl(Duration::from_secs(30));
    let first = store.admit(&request).await.expect("admitted");
    std::fs::write(directory.path().join("store.json.tmp"), b"{half a docu").expect("torn");
    let reopened = FileStore::open(&path).await.expect("reopened");
    assert_eq!(
        reopened.get("op-1").await.expect("read").as_ref(),
        first.admitted()
    );
    let second = reopened
        .admit(&AdmitRequest::new("op-2", "worker-b").scope("t"))
        .await
        .expect("admitted");
    let fences =
        |admission: &tenure_lease_core::Admission| admission.admitted().map(|record| record.fence);
    assert!(
        fences(&second) > fences(&first),
        "{second:?} after {first:?}"
    );
}

/// A damaged gate answers `Corrupt` for its resource, is never written
/// over (not even by a purge), and leaves every other gate working.
#[tokio::test]
async fn a_damaged_gate_is_corrupt_and_contained() {
    use tenure_lease_core::FenceStore;

    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).expect("the file")).expect("JSON")
    };
    for bad in [json!(0), json!(-3), json!(1_u64 << 60), json!("seven")] {
        let directory = directory();
        let path = directory.path().join("store.json");
        let store = FileStore::open(&path).await.expect("a new store");
        for resource in ["victim", "bystander"] {
            let check = store.check_fence(resource, 7).await.expect("checked");
            assert!(check.is_accepted());
        }
        let mut document = read(&path);
        document["gates"]["victim"]["fence"] = bad.clone();
        std::fs::write(&path, serde_json::to_vec(&document).expect("encoded")).expect("damaged");

        let error = store.check_fence("victim", 9).await.expect_err("checked");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{bad}: {error}");
        let error = store.highest_fence("victim").await.expect_err("read");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{bad}: {error}");
        assert_eq!(store.purge_fences(Duration::ZERO).await.expect("purged"), 1);
        let check = store.check_fence("bystander", 8).await.expect("checked");
        assert!(check.is_accepted(), "{bad}: the healthy gate works");
        assert_eq!(
            read(&path)["gates"]["victim"],
            document["gates"]["victim"],
            "{bad}: kept"
        );
    }
}

/// A damaged gate makes a listing that reaches it `Corrupt`, with the very
/// error `highest_fence` gives for it, naming the gate; a page that ends
/// before it is served, and the file does not change.
#[tokio::test]
async fn a_damaged_gate_is_corrupt_for_a_listing_that_reaches_it() {
    use tenure_lease_core::FenceStore;

    let damages = [
        ("fence", json!(0)),
        ("fence", json!(-3)),
        ("fence", json!(1_u64 << 60)),
        ("fence", json!("seven")),
        ("checked_at", json!("yesterday")),
        ("checked_at", json!(17)),
    ];
    for (field, bad) in damages {
        let directory = directory();
        let path = directory.path().join("store.json");
        let store = FileStore::open(&path).await.expect("a new store");
        for resource in ["bystander", "victim"] {
            let check = store.check_fence(resource, 7).await.expect("checked");
            assert!(check.is_accepted());
        }
        let mut document: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the file")).expect("JSON");
        document["gates"]["victim"][field] = bad.clone();
        let damaged = serde_json::to_vec(&document).expect("encoded");
        std::fs::write(&path, &damaged).expect("damaged");

        let listed = store.list_fences(None, 10).await.expect_err("listed");
        assert_eq!(listed.kind(), ErrorKind::Corrupt, "{bad}: {listed}");
        assert!(listed.message().contains("\"victim\""), "{bad}: {listed}");
        let after = store
            .list_fences(Some("bystander"), 1)
            .await
            .expect_err("listed after the bystander");
        assert_eq!(after.message(), listed.message(), "{bad}");
        let read = store.highest_fence("victim").await.expect_err("read");
        assert_eq!(read.message(), listed.message(), "{bad}: as highest_fence");
        let page = store
            .list_fences(None, 1)
            .await
            .expect("the page before it");
        let page: Vec<(&str, u64)> = page
            .iter()
            .map(|gate| (gate.resource.as_str(), gate.fence))
            .collect();
        assert_eq!(page, [("bystander", 7)], "{bad}");
        assert_eq!(
            std::fs::read(&path).expect("the file"),
            damaged,
            "{bad}: kept"
        );
    }
}

/// A damaged rate log answers `Corrupt` naming it, for an admission and a
/// claim within its limit, and the file does not change; `purge` drops
/// logs whose uses all stopped counting and keeps the others, damaged ones
/// too.
#[tokio::test]
async fn a_damaged_rate_log_is_corrupt_and_purge_keeps_what_still_counts() {
    use tenure_lease_core::queue::{ClaimRequest, JobQueue, NewJob};
    use tenure_lease_core::rate::RateLimit;

    let limit = RateLimit::new("api", 2, Duration::from_secs(600));
    for bad in [
        json!({ "uses": "x" }),
        json!({}),
        json!({ "uses": [1, 2, 3] }),
        json!({ "uses": [i64::MAX] }),
        json!([1]),
    ] {
        let directory = directory();
        let path = directory.path().join("store.json");
        let store = FileStore::open(&path).await.expect("a new store");
        let first = AdmitRequest::new("first", "worker-a").rate_limit(limit.clone());
        assert!(store
            .admit(&first)
            .await
            .expect("admitted")
            .admitted()
            .is_some());
        store
            .enqueue(&NewJob::new("q", json!({})).id("job"))
            .await
            .expect("enqueued");
        let mut document: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the file")).expect("JSON");
        document["rate_logs"]["2:600000:api"] = bad.clone();
        let damaged = serde_json::to_vec(&document).expect("encoded");
        std::fs::write(&path, &damaged).expect("damaged");

        let second = AdmitRequest::new("second", "worker-a").rate_limit(limit.clone());
        let error = store.admit(&second).await.expect_err("admitted");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{bad}: {error}");
        assert!(
            error.message().contains("2:600000:api"),
            "{bad}: names the log: {error}"
        );
        let claim =
            ClaimRequest::new("q", "worker-a", Duration::from_secs(60)).rate_limit(limit.clone());
        let error = store.claim_limited(&claim).await.expect_err("claimed");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{bad}: {error}");
        assert_eq!(
            std::fs::read(&path).expect("the file"),
            damaged,
            "{bad}: unchanged"
        );
        assert_eq!(store.purge(Duration::ZERO).await.expect("purged"), 0);
        let kept: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the file")).expect("JSON");
        assert_eq!(
            kept["rate_logs"]["2:600000:api"], bad,
            "{bad}: a damaged log is kept"
        );
    }

    let directory = directory();
    let path = directory.path().join("store.json");
    let clock = std::sync::Arc::new(tenure_lease_core::ManualClock::starting_now());
    let store = FileStore::open_with_clock(&path, clock.clone())
        .await
        .expect("a new store");
    let short = RateLimit::new("short", 1, Duration::from_millis(1));
    let long = RateLimit::new("long", 1, Duration::from_secs(600));
    for (id, limit) in [("a", &short), ("b", &long)] {
        let request = AdmitRequest::new(id, "worker-a").rate_limit(limit.clone());
        assert!(store
            .admit(&request)
            .await
            .expect("admitted")
            .admitted()
            .is_some());
    }
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        store
            .purge(Duration::from_secs(3600))
            .await
            .expect("purged"),
        0
    );
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("the file")).expect("JSON");
    let logs: Vec<&String> = document["rate_logs"]
        .as_object()
        .expect("the logs")
        .keys()
        .collect();
    assert_eq!(logs, ["1:600000:long"], "only the ended log went");
}

/// Counted scopes in the file: a record keeps its slots in its entry
/// (absent when it holds none), the scope index is by slot key, and a
/// record written before counted scopes existed (no `slots`, indexed by its
/// scope) holds slot 0.
#[tokio::test]
async fn slots_are_kept_in_the_entry_and_the_index_is_by_slot_key() {
    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).expect("the file")).expect("JSON")
    };
    let directory = directory();
    let path = directory.path().join("store.json");
    let store = FileStore::open(&path).await.expect("a new store");
    let old = store
        .admit(&AdmitRequest::new("old", "worker-a").scope("s"))
        .await
        .expect("admitted");
    assert!(old.admitted().is_some());
    let document = read(&path);
    assert!(
        document["records"]["old"].get("slots").is_none(),
        "no slots, as every record before counted scopes: {document}"
    );

    let counted = |id: &str| {
        AdmitRequest::new(id, "worker-b")
            .counted_scope("s", 3)
            .ttl(Duration::from_secs(30))
    };
    for (id, slot) in [("one", 1), ("two", 2)] {
        let admission = store.admit(&counted(id)).await.expect("admitted");
        assert_eq!(
            admission.admitted().and_then(|record| record.slot("s")),
            Some(slot),
            "{admission:?}"
        );
    }
    let conflict = store.admit(&counted("three")).await.expect("answered");
    assert!(
        matches!(&conflict, tenure_lease_core::Admission::Conflict { holder, .. } if holder.id == "one"),
        "the holder that frees first: {conflict:?}"
    );
    let document = read(&path);
    assert_eq!(document["records"]["two"]["slots"], json!({ "s": 2 }));
    assert_eq!(
        document["holders"],
        json!({ "s": "old", "s\u{1f}1": "one", "s\u{1f}2": "two" })
    );

    let reopened = FileStore::open(&path).await.expect("reopened");
    let two = reopened.get("two").await.expect("read").expect("two");
    assert_eq!(two.slots, [("s".to_owned(), 2)].into());
    let claim = two.claim().expect("owned");
    reopened
        .transition(&claim, &tenure_lease_core::StatusChange::succeeded())
        .await
        .expect("finished");
    assert_eq!(
        read(&path)["holders"],
        json!({ "s": "old", "s\u{1f}1": "one" }),
        "a finished holder frees its slot's key alone"
    );
    let listed = reopened.list_by_scope("s").await.expect("listed");
    assert_eq!(listed.len(), 3, "every record naming s: {listed:?}");
}

/// A record whose slots cannot be read answers `Corrupt` naming them, for
/// itself and for every admission counting its slot, and the file does not
/// change; the record holding another slot still works.
#[tokio::test]
async fn a_damaged_slots_value_is_corrupt_and_changes_nothing() {
    use tenure_lease_core::{ExpiredQuery, Renewal};

    for bad in [
        json!({ "c": -1 }),
        json!({ "c": "1" }),
        json!({ "c": 1.5 }),
        json!({ "c": 4_294_967_296_u64 }),
        json!({ "c": 1000 }),
        json!({ "elsewhere": 1 }),
        json!([1]),
        json!("c"),
    ] {
        let directory = directory();
        let path = directory.path().join("store.json");
        let store = FileStore::open(&path).await.expect("a new store");
        let counted = |id: &str| {
            AdmitRequest::new(id, "worker-a")
                .counted_scope("c", 2)
                .ttl(Duration::from_secs(600))
        };
        let first = store.admit(&counted("first")).await.expect("admitted");
        let first = first.admitted().expect("slot 0").clone();
        let victim = store.admit(&counted("victim")).await.expect("admitted");
        let victim = victim.admitted().expect("slot 1").clone();
        let mut document: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the file")).expect("JSON");
        document["records"]["victim"]["slots"] = bad.clone();
        let damaged = serde_json::to_vec(&document).expect("encoded");
        std::fs::write(&path, &damaged).expect("damaged");

        let corrupt = |error: tenure_lease_core::Error, operation: &str| {
            assert_eq!(
                error.kind(),
                ErrorKind::Corrupt,
                "{bad}: {operation}: {error}"
            );
            assert!(
                error.message().contains("\"victim\"") && error.message().contains("slots"),
                "{bad}: {operation}: names the record and its slots: {error}"
            );
        };
        corrupt(store.get("victim").await.expect_err("read"), "get");
        corrupt(
            store.list_by_scope("c").await.expect_err("listed"),
            "list_by_scope",
        );
        corrupt(
            store.list_active().await.expect_err("listed"),
            "list_active",
        );
        for request in [
            AdmitRequest::new("third", "worker-b").counted_scope("c", 2),
            AdmitRequest::new("third", "worker-a")
                .counted_scope("c", 2)
                .strategy(tenure_lease_core::AdmitStrategy::Interrupt),
        ] {
            corrupt(store.admit(&request).await.expect_err("admitted"), "admit");
        }
        corrupt(
            store
                .renew(&victim.claim().expect("owned"), Duration::from_secs(60))
                .await
                .expect_err("renewed"),
            "renew",
        );
        let scan = store
            .list_expired(&ExpiredQuery::new(Duration::ZERO))
            .await
            .expect("scanned");
        assert_eq!(
            scan.skipped
                .iter()
                .map(|skipped| skipped.id.as_str())
                .collect::<Vec<_>>(),
            ["victim"],
            "{bad}"
        );
        assert_eq!(
            std::fs::read(&path).expect("the file"),
            damaged,
            "{bad}: unchanged"
        );
        assert_eq!(store.purge(Duration::ZERO).await.expect("purged"), 0);
        let kept: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the file")).expect("JSON");
        assert_eq!(kept, document, "{bad}: the purge kept everything");
        assert!(matches!(
            store
                .renew(&first.claim().expect("owned"), Duration::from_secs(60))
                .await,
            Ok(Renewal::Renewed { .. })
        ));
        let elsewhere = AdmitRequest::new("elsewhere", "worker-b").counted_scope("d", 2);
        assert!(store
            .admit(&elsewhere)
            .await
            .expect("admitted")
            .admitted()
            .is_some());
    }
}
