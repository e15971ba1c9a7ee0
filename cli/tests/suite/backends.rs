//! The operator's commands end to end, on every backend: the built
//! `tenure` binary against a store the test seeded through the library,
//! checking what it printed, its exit code, and what the store holds
//! afterwards.

use crate::support;

use std::time::Duration;

use predicates::prelude::*;
use predicates::str::contains;
use tenure::queue::{ClaimRequest, FailAction, JobState};
use tenure::{AdmitRequest, FenceStore as _, JobQueue as _, LeaseStore as _, Status};

use support::{json, tenure, with_postgres, with_redis, with_sqlite, Subject};

const HOUR: Duration = Duration::from_secs(3600);

/// Every lease command on one store: listing, showing, taking over,
/// purging, watching, refusing what it must.
async fn lease_story(subject: Subject) {
    let (url, store) = (subject.url.as_str(), &subject.store);
    let live = store
        .admit(
            &AdmitRequest::new("run-live", "worker-a")
                .scope("account:1")
                .kind("report")
                .ttl(HOUR),
        )
        .await
        .expect("admitted");
    let admitted = live.admitted().expect("free scope").clone();
    let progress = serde_json::json!({ "done": 7, "of": 9 });
    store
        .renew_with_progress(&admitted.claim().expect("an owner"), HOUR, &progress)
        .await
        .expect("progress reported");
    let live = store
        .get("run-live")
        .await
        .expect("read")
        .expect("still there");
    // No lease: an orphan at once, no waiting for an expiry.
    store
        .admit(&AdmitRequest::new("run-orphan", "worker-b").scope("account:2"))
        .await
        .expect("admitted");
    store
        .admit(&AdmitRequest::new("run-doomed", "worker-c"))
        .await
        .expect("admitted");

    tenure(url, &["leases"]).assert().success().stdout(
        contains("run-live")
            .and(contains("run-orphan"))
            .and(contains("ends in")),
    );
    let active = json(&mut tenure(url, &["leases", "--active", "--json"]));
    assert_eq!(active.as_array().map(Vec::len), Some(3), "{active}");
    let expired = json(&mut tenure(url, &["leases", "--expired", "--json"]));
    let ids: Vec<_> = expired
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["run-doomed", "run-orphan"]);
    let scoped = json(&mut tenure(
        url,
        &["leases", "--scope", "account:1", "--json"],
    ));
    assert_eq!(scoped[0]["id"], "run-live");
    let kind = json(&mut tenure(url, &["leases", "--kind", "report", "--json"]));
    assert_eq!(kind.as_array().map(Vec::len), Some(1), "{kind}");
    tenure(url, &["leases", "--expired", "--scope", "x"])
        .assert()
        .code(2);

    tenure(url, &["show", "run-live"])
        .assert()
        .success()
        .stdout(
            contains("worker-a")
                .and(contains("account:1"))
                .and(contains(format!("fence        {}", live.fence)))
                .and(contains(format!("progress     {progress}"))),
        );
    let shown = json(&mut tenure(url, &["show", "run-live", "--json"]));
    assert_eq!(shown["fence"], live.fence);
    assert_eq!(shown["progress"], progress, "{shown}");
    tenure(url, &["show", "no-such-run"])
        .assert()
        .code(1)
        .stderr(contains(
            "no lease record or job has the id \"no-such-run\"",
        ));

    // A live lease is refused, and left as it was.
    tenure(url, &["take-over", "run-live", "--fail", "operator"])
        .assert()
        .code(1)
        .stderr(contains("still valid").and(contains("nothing changed")));
    assert_eq!(store.get("run-live").await.unwrap(), Some(live.clone()));
    tenure(url, &["take-over", "ghost", "--fail", "operator"])
        .assert()
        .code(1)
        .stderr(contains("no lease record with that id"));
    assert_eq!(store.get("ghost").await.unwrap(), None);
    tenure(url, &["take-over", "run-orphan", "--adopt"])
        .assert()
        .code(2);
    tenure(url, &["take-over", "run-orphan"]).assert().code(2);

    let before = store
        .get("run-orphan")
        .await
        .unwrap()
        .expect("stored")
        .fence;
    let taken = tenure(
        url,
        &[
            "take-over",
            "run-orphan",
            "--adopt",
            "--ttl",
            "5m",
            "--claimer",
            "oncall",
        ],
    )
    .assert()
    .success()
    .get_output()
    .stdout
    .clone();
    let after = store.get("run-orphan").await.unwrap().expect("stored");
    assert!(after.fence > before, "{after:?}");
    assert_eq!(after.owner.as_deref(), Some("oncall"));
    assert_eq!(after.status, Status::Running);
    assert!(
        String::from_utf8_lossy(&taken).contains(&format!("fence {}", after.fence)),
        "{}",
        String::from_utf8_lossy(&taken)
    );

    tenure(url, &["take-over", "run-doomed", "--fail", "host lost"])
        .assert()
        .success()
        .stdout(contains("failed by tenure-cli"));
    assert_eq!(
        store
            .get("run-doomed")
            .await
            .unwrap()
            .expect("stored")
            .error
            .as_deref(),
        Some("host lost")
    );

    tenure(url, &["purge", "--older-than", "0s", "--dry-run"])
        .assert()
        .success()
        .stdout(contains("Nothing was deleted"));
    assert!(
        store.get("run-doomed").await.unwrap().is_some(),
        "a dry run deletes nothing"
    );
    let kept = json(&mut tenure(url, &["purge", "--older-than", "7d", "--json"]));
    assert_eq!(kept["leases"], 0);
    assert!(store.get("run-doomed").await.unwrap().is_some());
    let purged = json(&mut tenure(url, &["purge", "--older-than", "0s", "--json"]));
    assert_eq!(purged["leases"], 1, "{purged}");
    assert_eq!(store.get("run-doomed").await.unwrap(), None);
    assert!(
        store.get("run-live").await.unwrap().is_some(),
        "active records stay"
    );

    let watched = tenure(url, &["watch", "--iterations", "2", "--interval", "10ms"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let watched = String::from_utf8_lossy(&watched);
    assert_eq!(
        watched.matches("tenure watch: 2 active").count(),
        2,
        "{watched}"
    );
    assert!(watched.contains("run-live"), "{watched}");
}

/// `enqueue --unique-key`: created while the key is free, refused (exit 1,
/// naming the holder, nothing stored) while it is held; `show` and `jobs`
/// print the key with how long it is held.
async fn unique_story(url: &str, store: &std::sync::Arc<dyn tenure::Store>) {
    let enqueue = |id: &str, key: &str, policy: &[&str]| {
        let mut args = vec![
            "enqueue",
            "digests",
            "--payload",
            "{}",
            "--id",
            id,
            "--unique-key",
            key,
        ];
        args.extend_from_slice(policy);
        tenure(url, &args)
    };
    enqueue("digest-1", "user-7", &[])
        .assert()
        .success()
        .stdout("digest-1\n");
    enqueue("digest-2", "user-7", &["--unique-for", "1h"])
        .assert()
        .code(1)
        .stderr(contains("digest-1").and(contains("user-7")));
    assert_eq!(store.get_job("digest-2").await.unwrap(), None);
    enqueue("digest-3", "user-8", &["--unique-for", "1h"])
        .assert()
        .success();
    enqueue("digest-4", "user-9", &["--unique-while", "queued"])
        .assert()
        .success();
    enqueue("digest-5", "user-9", &["--unique-while", "sometimes"])
        .assert()
        .code(2);
    tenure(url, &["show", "digest-3"])
        .assert()
        .success()
        .stdout(contains(r#"unique key   "user-8" (until "#));
    tenure(url, &["jobs", "--queue", "digests"])
        .assert()
        .success()
        .stdout(
            contains("UNIQUE KEY")
                .and(contains(r#""user-7" (while unfinished)"#))
                .and(contains(r#""user-9" (while queued)"#)),
        );
}

/// The queue commands on one store: enqueue, dead letters, retry.
async fn queue_story(subject: Subject) {
    let (url, store) = (subject.url.as_str(), &subject.store);
    tenure(
        url,
        &[
            "enqueue",
            "emails",
            "--payload",
            r#"{"to":"a@example.com"}"#,
            "--id",
            "job-1",
        ],
    )
    .assert()
    .success()
    .stdout("job-1\n");
    let job = store.get_job("job-1").await.unwrap().expect("enqueued");
    assert_eq!(job.payload, serde_json::json!({"to": "a@example.com"}));
    tenure(
        url,
        &["enqueue", "emails", "--payload", "{", "--id", "job-2"],
    )
    .assert()
    .code(2)
    .stderr(contains("not JSON"));
    assert_eq!(store.get_job("job-2").await.unwrap(), None);
    tenure(
        url,
        &["enqueue", "emails", "--payload", "1", "--id", "job-1"],
    )
    .assert()
    .code(1)
    .stderr(contains("already_exists"));
    unique_story(url, store).await;

    tenure(url, &["jobs", "--queue", "emails", "--dead"])
        .assert()
        .success()
        .stdout(contains("no such jobs"));
    let listed = json(&mut tenure(url, &["jobs", "--queue", "emails", "--json"]));
    assert_eq!(listed[0]["id"], "job-1", "every job of the queue: {listed}");
    assert_eq!(listed[0]["state"], "Queued");
    let claimed = store
        .claim(&ClaimRequest::new("emails", "worker-a", HOUR))
        .await
        .unwrap()
        .pop()
        .expect("claimed");
    store
        .renew_job_with_progress(&claimed.claim, HOUR, &serde_json::json!("page 3 of 9"))
        .await
        .unwrap();
    store
        .fail(&claimed.claim, "smtp said no", FailAction::DeadLetter)
        .await
        .unwrap();

    tenure(url, &["jobs", "--queue", "emails", "--dead"])
        .assert()
        .success()
        .stdout(
            contains("job-1")
                .and(contains("smtp said no"))
                .and(contains(r#""page 3 of 9""#)),
        );
    let dead = json(&mut tenure(
        url,
        &["jobs", "--queue", "emails", "--dead", "--json"],
    ));
    assert_eq!(dead[0]["id"], "job-1");
    tenure(
        url,
        &["jobs", "--queue", "emails", "--state", "dead_lettered"],
    )
    .assert()
    .success()
    .stdout(contains("job-1").and(contains("dead_lettered")));
    tenure(url, &["jobs", "--queue", "emails", "--state", "queued"])
        .assert()
        .success()
        .stdout(contains("no such jobs"));
    tenure(url, &["jobs", "--queue", "emails", "--state", "sleeping"])
        .assert()
        .code(2)
        .stderr(contains("not a job state"));
    tenure(url, &["show", "job-1"])
        .assert()
        .success()
        .stdout(contains("dead_lettered").and(contains(r#"progress     "page 3 of 9""#)));

    tenure(url, &["retry", "job-1"])
        .assert()
        .success()
        .stdout(contains("requeued"));
    assert_eq!(
        store.get_job("job-1").await.unwrap().expect("kept").state,
        JobState::Queued
    );
    tenure(url, &["retry", "job-1"])
        .assert()
        .code(1)
        .stderr(contains("queued, not dead-lettered; nothing changed"));
    tenure(url, &["retry", "no-such-job"])
        .assert()
        .code(1)
        .stderr(contains("no job has the id"));
}

/// `check` passes on a store the library opened.
fn check_story(subject: &Subject) {
    tenure(&subject.url, &["check"])
        .assert()
        .success()
        .stdout(contains("clock"));
    let findings = json(&mut tenure(&subject.url, &["check", "--json"]));
    assert!(
        findings
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["verdict"] != "fail"),
        "{findings}"
    );
}

/// The holders of a counted scope, each with its slot, in `leases` and
/// `show`, and every slot's holder under `leases --scope`.
async fn counted_story(subject: Subject) {
    let (url, store) = (subject.url.as_str(), &subject.store);
    for (id, scopes) in [("export-1", &["tenant:7"][..]), ("export-2", &[])] {
        store
            .admit(
                &AdmitRequest::new(id, "worker-a")
                    .counted_scope("exports", 3)
                    .scopes(scopes.iter().copied())
                    .ttl(HOUR),
            )
            .await
            .expect("admitted")
            .admitted()
            .expect("a free slot");
    }
    tenure(url, &["leases"])
        .assert()
        .success()
        .stdout(contains("exports (slot 0),tenant:7").and(contains("exports (slot 1)")));
    tenure(url, &["show", "export-2"])
        .assert()
        .success()
        .stdout(contains("exports (slot 1)"));
    let scoped = json(&mut tenure(
        url,
        &["leases", "--scope", "exports", "--json"],
    ));
    let mut slots: Vec<_> = scoped
        .as_array()
        .expect("a list")
        .iter()
        .map(|record| record["slots"]["exports"].as_u64())
        .collect();
    slots.sort_unstable();
    assert_eq!(slots, [Some(0), Some(1)], "{scoped}");
}

/// `tenure gates`: every gate by resource, a page at a time.
async fn gates_story(subject: Subject) {
    let (url, store) = (subject.url.as_str(), &subject.store);
    tenure(url, &["gates"])
        .assert()
        .success()
        .stdout(contains("no gates"));
    for (resource, fence) in [("report.csv", 7), ("accounts/9", 3), ("b\u{e9}", 12)] {
        assert!(store
            .check_fence(resource, fence)
            .await
            .unwrap()
            .is_accepted());
    }
    tenure(url, &["gates"]).assert().success().stdout(
        contains("report.csv")
            .and(contains("accounts/9"))
            .and(contains("LAST ACCEPTED")),
    );
    let listed = json(&mut tenure(url, &["gates", "--json"]));
    let names: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|gate| {
            (
                gate["resource"].as_str().unwrap(),
                gate["fence"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [("accounts/9", 3), ("b\u{e9}", 12), ("report.csv", 7)]
    );
    tenure(url, &["gates", "--limit", "1"])
        .assert()
        .success()
        .stdout(contains("accounts/9").and(contains("--after \"accounts/9\"")));
    let next = json(&mut tenure(
        url,
        &["gates", "--after", "accounts/9", "--limit", "1", "--json"],
    ));
    assert_eq!(next[0]["resource"], "b\u{e9}", "{next}");
    tenure(url, &["gates", "--limit", "0"])
        .assert()
        .code(2)
        .stderr(contains("limit"));
}

#[tokio::test]
async fn sqlite_gates() {
    with_sqlite(gates_story).await;
}

#[tokio::test]
async fn postgres_gates() {
    with_postgres("postgres_gates", gates_story).await;
}

#[tokio::test]
async fn redis_gates() {
    with_redis("redis_gates", gates_story).await;
}

#[tokio::test]
async fn sqlite_counted_holders() {
    with_sqlite(counted_story).await;
}

#[tokio::test]
async fn postgres_counted_holders() {
    with_postgres("postgres_counted_holders", counted_story).await;
}

#[tokio::test]
async fn redis_counted_holders() {
    with_redis("redis_counted_holders", counted_story).await;
}

#[tokio::test]
async fn sqlite_lease_commands() {
    with_sqlite(lease_story).await;
}

#[tokio::test]
async fn sqlite_queue_commands() {
    with_sqlite(queue_story).await;
}

#[tokio::test]
async fn sqlite_check_and_migrate() {
    with_sqlite(|subject| async move {
        check_story(&subject);
        tenure(&subject.url, &["migrate"]).assert().success();
    })
    .await;
}

#[tokio::test]
async fn sqlite_missing_file_is_refused_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let url = format!("sqlite:{}", path.display());
    tenure(&url, &["leases"])
        .assert()
        .code(1)
        .stderr(contains("there is no SQLite store at").and(contains("tenure migrate")));
    assert!(!path.exists());
    tenure(&url, &["migrate"]).assert().success();
    tenure(&url, &["leases"])
        .assert()
        .success()
        .stdout("no lease records\n");
}

#[tokio::test]
async fn postgres_lease_commands() {
    with_postgres("postgres_lease_commands", lease_story).await;
}

#[tokio::test]
async fn postgres_queue_commands() {
    with_postgres("postgres_queue_commands", queue_story).await;
}

#[tokio::test]
async fn postgres_check() {
    with_postgres(
        "postgres_check",
        |subject| async move { check_story(&subject) },
    )
    .await;
}

#[tokio::test]
async fn postgres_migrate_applies_what_the_commands_refuse_to() {
    let Some(base) = support::pg_base("postgres_migrate_applies_what_the_commands_refuse_to")
    else {
        return;
    };
    let (url, config) = support::pg_fresh_url(&base);
    // The commands never create the schema: they say how to.
    tenure(&url, &["leases"])
        .assert()
        .code(1)
        .stderr(contains("holds no tenure migrations").and(contains("tenure migrate")));
    tenure(&url, &["check"])
        .assert()
        .code(1)
        .stdout(contains("fail"));
    tenure(&url, &["migrate"]).assert().success();
    tenure(&url, &["migrate"]).assert().success();
    tenure(&url, &["leases"])
        .assert()
        .success()
        .stdout("no lease records\n");
    tenure(&url, &["check"]).assert().success();
    support::drop_pg_schema(config).await;
}

#[tokio::test]
async fn redis_lease_commands() {
    with_redis("redis_lease_commands", lease_story).await;
}

#[tokio::test]
async fn redis_queue_commands() {
    with_redis("redis_queue_commands", queue_story).await;
}

#[tokio::test]
async fn redis_check_and_migrate() {
    with_redis("redis_check_and_migrate", |subject| async move {
        check_story(&subject);
        tenure(&subject.url, &["check"])
            .assert()
            .success()
            .stdout(contains("maxmemory-policy"));
        tenure(&subject.url, &["migrate"]).assert().success();
    })
    .await;
}

/// A private Redis server that may evict keys: `check` fails its eviction
/// policy (the refusal every command meets), and one that fsyncs every
/// write passes its persistence.
#[tokio::test]
async fn redis_check_judges_the_servers_settings() {
    use tenure_test_support::servers::PrivateRedis;
    let name = "redis_check_judges_the_servers_settings";
    if let Some(why) = PrivateRedis::unavailable_reason() {
        tenure::conformance::skip_unless_required(name, &format!("private Redis: {why}"));
        return;
    }
    let evicting = PrivateRedis::start_with(&["--maxmemory-policy", "allkeys-lru"])
        .await
        .expect("a private Redis server starts");
    tenure(&evicting.url(), &["check"])
        .assert()
        .code(1)
        .stdout(
            contains("eviction policy")
                .and(contains("fail"))
                .and(contains("allkeys-lru")),
        )
        .stderr(contains("1 deployment check(s) failed"));
    // The read-only commands show what it holds, warning; writes refuse.
    let (seeded, refusal) = tenure::redis::RedisStore::connect_for_reading(evicting.url())
        .await
        .expect("opened for reading");
    assert!(refusal.is_some_and(|error| error.message().contains("allkeys-lru")));
    seeded
        .admit(&AdmitRequest::new("run-kept", "worker-a").scope("account:1"))
        .await
        .expect("admitted");
    seeded
        .enqueue(&tenure::queue::NewJob::new("emails", serde_json::json!({})).id("job-kept"))
        .await
        .expect("enqueued");
    let warning = || {
        contains("warning: the store at")
            .and(contains("fails the deployment check `eviction policy`"))
            .and(contains("allkeys-lru"))
            .and(contains("commands that write refuse it"))
    };
    for (command, shows) in [
        (&["leases"][..], "run-kept"),
        (&["show", "run-kept"], "account:1"),
        (&["show", "job-kept"], "emails"),
        (&["jobs", "--queue", "emails"], "job-kept"),
        (&["watch", "--once"], "run-kept"),
    ] {
        tenure(&evicting.url(), command)
            .assert()
            .success()
            .stdout(contains(shows))
            .stderr(warning());
    }
    tenure(&evicting.url(), &["show", "no-such-id"])
        .assert()
        .code(1)
        .stderr(warning().and(contains("no lease record or job")));
    let writes: [&[&str]; 6] = [
        &["take-over", "run-kept", "--fail", "operator"],
        &["release", "run-kept", "--owner", "worker-a", "--fence", "1"],
        &["cancel", "run-kept"],
        &["enqueue", "emails", "--payload", "{}"],
        &["retry", "--all", "--queue", "emails"],
        &["purge", "--older-than", "1d", "--dry-run"],
    ];
    for command in writes {
        tenure(&evicting.url(), command)
            .assert()
            .code(1)
            .stderr(contains("maxmemory-policy noeviction").and(contains("warning").not()));
    }
    assert_eq!(
        seeded.get("run-kept").await.unwrap().map(|r| r.status),
        Some(Status::Pending),
        "the refused writes changed nothing"
    );
    drop(evicting);

    let durable = PrivateRedis::start()
        .await
        .expect("a private Redis server starts");
    let findings = json(&mut tenure(&durable.url(), &["check", "--json"]));
    let persistence = findings
        .as_array()
        .unwrap()
        .iter()
        .find(|finding| finding["check"] == "persistence")
        .expect("a persistence finding");
    assert_eq!(persistence["verdict"], "pass", "{findings}");
}
