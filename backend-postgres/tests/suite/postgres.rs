//! PostgreSQL-specific behaviour the conformance kit cannot reach: migrations
//! racing, schema checks, hostile strings, undecodable rows, and a backend
//! killed in the middle of an admission.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tenure_backend_postgres::{PgStore, PgStoreConfig};
use tenure_lease_core::backend::rules;
use tenure_lease_core::queue::{
    ClaimRequest, Enqueued, JobClaim, JobQueue, NewJob, TakeBack, UniquePolicy,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::release::ReleaseNotice;
use tenure_lease_core::telemetry::{attribute, ADMIT_RETRIES};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, ErrorKind, ExpiredQuery, LeaseRecord, LeaseStore,
    Renewal, Status, StatusChange, Transition,
};

use support::{execute, fresh_schema, server_url, with_store};

const LONG: Duration = Duration::from_secs(600);

fn admitted(admission: Admission) -> LeaseRecord {
    match admission {
        Admission::Admitted { record, .. } => record,
        other => panic!("expected Admitted, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_schema_name_is_a_config_error_before_connecting() {
    // Port 1 on localhost: connecting would fail, so a Config answer proves
    // the name was refused first.
    let config = PgStoreConfig::new("postgres://nobody@127.0.0.1:1/none").schema("x\"; DROP");
    let error = PgStore::connect(config).await.expect_err("bad schema");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_migrate_one_schema_concurrently() {
    let Some(url) = server_url("two_pools_migrate_one_schema_concurrently") else {
        return;
    };
    let schema = fresh_schema();
    // One from a URL, one from an application pool whose search_path is
    // elsewhere: both must end up on the same, fully migrated schema.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .expect("pool");
    let (from_url, from_pool) = tokio::join!(
        support::connect(&url, &schema),
        PgStore::from_pool(pool, &schema)
    );
    let (from_url, from_pool) = (from_url.expect("migrate"), from_pool.expect("migrate"));
    let applied: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{schema}\"._sqlx_migrations WHERE success"
    ))
    .fetch_one(from_pool.pool())
    .await
    .expect("count");
    let record = admitted(
        from_url
            .admit(&AdmitRequest::new("op-1", "worker-a").scope("s"))
            .await
            .expect("admit"),
    );
    let seen = from_pool.get("op-1").await.expect("get");
    // Migrating again finds nothing to do.
    from_pool.migrate().await.expect("re-migrate");
    from_url.drop_schema().await.expect("drop");
    from_pool.close().await;
    assert_eq!(applied, 14);
    assert_eq!(seen, Some(record));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_temporary_table_cannot_stand_in_for_the_schemas() {
    let Some(url) = server_url("a_sessions_temporary_table_cannot_stand_in_for_the_schemas") else {
        return;
    };
    let schema = fresh_schema();
    // One connection: the temporary table lives in the session every call uses.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("pool");
    let store = PgStore::from_pool(pool.clone(), &schema)
        .await
        .expect("migrate");
    sqlx::query(&format!(
        "CREATE TEMP TABLE leases (LIKE \"{schema}\".leases INCLUDING ALL)"
    ))
    .execute(&pool)
    .await
    .expect("temporary table");
    let answer = store
        .admit(&AdmitRequest::new("op-1", "worker-a").scope("s"))
        .await;
    let count = |table: String| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .expect("count")
        }
    };
    let (in_schema, in_temporary) = (
        count(format!("\"{schema}\".leases")).await,
        count("pg_temp.leases".to_owned()).await,
    );
    store.drop_schema().await.expect("drop");
    pool.close().await;
    admitted(answer.expect("admit"));
    assert_eq!((in_schema, in_temporary), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_ids_and_scopes_are_stored_verbatim() {
    with_store("hostile_ids_and_scopes_are_stored_verbatim", |store, _| async move {
        let id = "op'); DROP TABLE leases; -- \\\" $1 %s ünïcødé 🦀";
        let scope = "scope'; DELETE FROM held_scopes; --\\ \"q\" 名前";
        let owner = "worker';--\\\"🦀";
        let record = admitted(
            store
                .admit(&AdmitRequest::new(id, owner).scope(scope).ttl(LONG))
                .await
                .expect("admit"),
        );
        assert_eq!(record.id, id);
        assert_eq!(record.owner.as_deref(), Some(owner));
        assert_eq!(record.scopes.iter().next().map(String::as_str), Some(scope));
        assert_eq!(store.get(id).await.expect("get"), Some(record.clone()));
        assert_eq!(store.list_by_scope(scope).await.expect("by scope"), vec![record.clone()]);
        // A neighbouring scope is a different scope; the same one is held.
        let neighbour = format!("{scope}x");
        admitted(
            store
                .admit(&AdmitRequest::new("other", "worker-b").scope(neighbour.as_str()))
                .await
                .expect("admit neighbour"),
        );
        let conflict = store
            .admit(&AdmitRequest::new("third", "worker-b").scope(scope))
            .await
            .expect("admit again");
        assert!(
            matches!(&conflict, Admission::Conflict { holder, .. } if holder.id == id),
            "{conflict:?}"
        );
        let claim = record.claim().expect("claim");
        assert!(matches!(
            store.renew(&claim, LONG).await.expect("renew"),
            Renewal::Renewed { .. }
        ));
        let done = store
            .transition(&claim, &StatusChange::failed("it's \"broken\"; --"))
            .await
            .expect("transition");
        assert!(
            matches!(&done, Transition::Applied(r) if r.error.as_deref() == Some("it's \"broken\"; --")),
            "{done:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_expired_skips_undecodable_rows() {
    with_store(
        "list_expired_skips_undecodable_rows",
        |store, url| async move {
            for id in ["a", "b", "c", "d"] {
                // No lease: reclaimable at once, listed in id order.
                admitted(
                    store
                        .admit(&AdmitRequest::new(id, "worker-a"))
                        .await
                        .expect("admit"),
                );
            }
            execute(
                &url,
                &store,
                "ALTER TABLE $schema.leases DROP CONSTRAINT leases_status_known; \
             ALTER TABLE $schema.leases DROP CONSTRAINT leases_metadata_object; \
             UPDATE $schema.leases SET status = 'bogus' WHERE id = 'b'; \
             UPDATE $schema.leases SET metadata = '[1, 2]' WHERE id = 'c';",
            )
            .await;
            let scan = store
                .list_expired(&ExpiredQuery::new(Duration::ZERO).limit(2))
                .await
                .expect("scan");
            let listed: Vec<&str> = scan.records.iter().map(|r| r.id.as_str()).collect();
            let skipped: Vec<&str> = scan.skipped.iter().map(|s| s.id.as_str()).collect();
            assert_eq!(listed, ["a", "d"]);
            assert_eq!(skipped, ["b", "c"]);
            assert!(
                scan.skipped[0].reason.contains("status"),
                "{:?}",
                scan.skipped
            );
            assert!(
                scan.skipped[1].reason.contains("metadata"),
                "{:?}",
                scan.skipped
            );
            let error = store.get("b").await.expect_err("undecodable");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_admissions_in_opposite_orders_answer_one_admitted() {
    with_store(
        "racing_admissions_in_opposite_orders_answer_one_admitted",
        |store, _| async move {
            let racers: Vec<_> = (0..8)
                .map(|n| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let scopes = if n % 2 == 0 { ["x", "y"] } else { ["y", "x"] };
                        store
                            .admit(
                                &AdmitRequest::new(format!("op-{n}"), format!("worker-{n}"))
                                    .scopes(scopes)
                                    .ttl(LONG),
                            )
                            .await
                    })
                })
                .collect();
            let mut admitted = 0;
            for racer in racers {
                match racer.await.expect("join").expect("never a raw error") {
                    Admission::Admitted { .. } => admitted += 1,
                    Admission::Conflict { .. } => {}
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(admitted, 1);
            assert_eq!(store.list_active().await.expect("active").len(), 1);
        },
    )
    .await;
}

/// Starts an admission that `blocker_sql` (run in an open transaction on its
/// own connection) makes wait on a lock, checks the admission waits in its
/// call of `admit_if_free` (every admission lock is taken there), kills its
/// backend there, and answers the admission's result once the blocker is
/// gone.
async fn kill_blocked_admission(
    url: &str,
    store: &PgStore,
    blocker_sql: &str,
    request: AdmitRequest,
) -> tenure_lease_core::Result<Admission> {
    let mut blocker = PgConnection::connect(url).await.expect("blocker");
    sqlx::query("BEGIN")
        .execute(&mut blocker)
        .await
        .expect("begin");
    let blocker_sql = blocker_sql.replace("$schema", &format!("\"{}\"", store.schema()));
    sqlx::raw_sql(&blocker_sql)
        .execute(&mut blocker)
        .await
        .expect("block");

    let admission = tokio::spawn({
        let store = store.clone();
        async move { store.admit(&request).await }
    });

    let mut watcher = PgConnection::connect(url).await.expect("watcher");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (pid, query): (i32, String) = loop {
        let waiting: Option<(i32, String)> = sqlx::query_as(
            "SELECT pid, query FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
             AND state = 'active' AND position($1 in query) > 0 AND pid <> pg_backend_pid()",
        )
        .bind(store.schema())
        .fetch_optional(&mut watcher)
        .await
        .expect("pg_stat_activity");
        if let Some(found) = waiting {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "the admission never waited on the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut watcher)
        .await
        .expect("terminate");
    assert!(killed);
    assert!(query.contains("admit_if_free"), "waiting in {query}");
    let outcome = admission.await.expect("join");
    sqlx::query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .expect("rollback");
    blocker.close().await.expect("close blocker");
    watcher.close().await.expect("close watcher");
    outcome
}

/// Admits the holder both kill tests start from: no lease, so an
/// `Interrupt` admission will take it.
async fn admit_interruptible_holder(store: &PgStore) -> LeaseRecord {
    admitted(
        store
            .admit(&AdmitRequest::new("holder", "worker-a").scopes(["s1", "s2"]))
            .await
            .expect("admit holder"),
    )
}

fn takeover_request() -> AdmitRequest {
    AdmitRequest::new("newcomer", "worker-b")
        .scopes(["s2", "s3"])
        .ttl(LONG)
        .strategy(AdmitStrategy::Interrupt)
}

/// After a killed admission: everything exactly as before it, and the store
/// still admits (taking the holder this time).
async fn assert_untouched_then_working(
    store: &PgStore,
    holder: &LeaseRecord,
    outcome: tenure_lease_core::Result<Admission>,
) {
    let error = outcome.expect_err("a killed admission answers Err");
    assert!(error.is_retryable(), "{error}");
    assert_eq!(
        store.get("holder").await.expect("get"),
        Some(holder.clone())
    );
    assert_eq!(store.get("newcomer").await.expect("get"), None);
    assert_eq!(
        store.list_active().await.expect("active"),
        vec![holder.clone()]
    );
    for scope in ["s2", "s3"] {
        let named: Vec<String> = store
            .list_by_scope(scope)
            .await
            .expect("by scope")
            .into_iter()
            .map(|r| r.id)
            .collect();
        let expected: Vec<&str> = if scope == "s2" {
            vec!["holder"]
        } else {
            vec![]
        };
        assert_eq!(named, expected, "{scope}");
    }
    match store
        .admit(&takeover_request())
        .await
        .expect("admit after kill")
    {
        Admission::Admitted {
            record,
            interrupted,
        } => {
            assert!(record.fence > holder.fence);
            assert_eq!(interrupted.len(), 1);
            assert_eq!(interrupted[0].status, Status::Interrupted);
        }
        other => panic!("expected Admitted, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_killed_while_locking_holders_changes_nothing() {
    with_store(
        "admission_killed_while_locking_holders_changes_nothing",
        |store, url| async move {
            let holder = admit_interruptible_holder(&store).await;
            let outcome = kill_blocked_admission(
                &url,
                &store,
                "SELECT 1 FROM $schema.leases WHERE id = 'holder' FOR UPDATE",
                takeover_request(),
            )
            .await;
            assert_untouched_then_working(&store, &holder, outcome).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_killed_after_interrupting_rolls_back_whole() {
    with_store(
        "admission_killed_after_interrupting_rolls_back_whole",
        |store, url| async move {
            let holder = admit_interruptible_holder(&store).await;
            // An uncommitted row with the newcomer's id: the admission cannot see
            // it, interrupts the holder (its first write), then waits on this
            // row's key when it inserts its own record.
            let outcome = kill_blocked_admission(
            &url,
            &store,
            "INSERT INTO $schema.leases (id, kind, status, owner, fence, created_at, updated_at) \
             VALUES ('newcomer', 'run', 'pending', 'intruder', 1, now(), now())",
            takeover_request(),
        )
        .await;
            assert_untouched_then_working(&store, &holder, outcome).await;
        },
    )
    .await;
}

/// A pool whose sessions default to SERIALIZABLE, as some servers are
/// configured.
async fn serializable_pool(url: &str, connections: u32) -> sqlx::PgPool {
    let options: PgConnectOptions = url.parse().expect("url");
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(options.options([("default_transaction_isolation", "serializable")]))
        .await
        .expect("serializable pool")
}

/// In a REPEATABLE READ or SERIALIZABLE transaction every statement shares
/// one snapshot, so `admit_if_free` cannot see past its lock waits there:
/// it does nothing, and the store decides in a READ COMMITTED transaction
/// of its own instead, with the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_on_serializable_sessions_answer_alike() {
    with_store(
        "admissions_on_serializable_sessions_answer_alike",
        |store, url| async move {
            let serializable = PgStore::from_pool(serializable_pool(&url, 2).await, store.schema())
                .await
                .expect("serializable store");
            let holder = admitted(
                serializable
                    .admit(&AdmitRequest::new("holder", "worker-a").scope("s").ttl(LONG))
                    .await
                    .expect("admit into a free scope"),
            );
            match serializable
                .admit(&AdmitRequest::new("rejected", "worker-b").scope("s"))
                .await
                .expect("admit into a held scope")
            {
                Admission::Conflict {
                    holder: blocking, ..
                } => assert_eq!(blocking, holder),
                other => panic!("expected Conflict, got {other:?}"),
            }
            match serializable
                .admit(
                    &AdmitRequest::new("successor", "worker-a")
                        .scope("s")
                        .strategy(AdmitStrategy::Interrupt),
                )
                .await
                .expect("admit over its own holder")
            {
                Admission::Admitted {
                    record,
                    interrupted,
                } => {
                    assert_eq!(interrupted.len(), 1);
                    assert_eq!(interrupted[0].id, holder.id);
                    assert_eq!(interrupted[0].status, Status::Interrupted);
                    assert!(record.fence > interrupted[0].fence);
                }
                other => panic!("expected Admitted, got {other:?}"),
            }
            let error = serializable
                .admit(&AdmitRequest::new("holder", "worker-c").scope("t"))
                .await
                .expect_err("a duplicate id");
            assert_eq!(error.kind(), ErrorKind::AlreadyExists, "{error}");

            let mut transaction = serializable.pool().begin().await.expect("begin");
            let rows: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM \"{}\".admit_if_free('{{}}', 'ghost', '{{}}', 'run', \
                 'worker-a', NULL, '{{}}', false)",
                store.schema()
            ))
            .fetch_one(&mut *transaction)
            .await
            .expect("call admit_if_free");
            transaction.commit().await.expect("commit");
            assert_eq!(rows, 0);
            assert_eq!(store.get("ghost").await.expect("get"), None);
            serializable.close().await;
        },
    )
    .await;
}

/// Scope sets of the admission storm: overlapping, several named in
/// opposite orders.
const STORM_SCOPE_SETS: [&[&str]; 8] = [
    &["a", "b"],
    &["b", "a"],
    &["b", "c", "d"],
    &["d", "c", "b"],
    &["c", "a"],
    &["e", "a", "d"],
    &["a", "b", "c", "d", "e"],
    &["e"],
];

/// Fails unless the active records hold pairwise disjoint scopes.
fn assert_disjoint_holders(active: &[LeaseRecord], when: &str) {
    let mut holder_of: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for record in active {
        for scope in &record.scopes {
            if let Some(other) = holder_of.insert(scope, &record.id) {
                panic!(
                    "{when}: scope {scope:?} has two active holders, {other:?} and {:?}",
                    record.id
                );
            }
        }
    }
}

/// One storm admission: `n` picks the store, scopes, strategy, owner and
/// lease, so every round mixes all of them.
async fn storm_admission(store: PgStore, round: usize, n: usize) -> (AdmitRequest, Admission) {
    let scopes = STORM_SCOPE_SETS[(n + round) % STORM_SCOPE_SETS.len()];
    let strategy = if n % 2 == 0 {
        AdmitStrategy::Interrupt
    } else {
        AdmitStrategy::Reject
    };
    let mut request = AdmitRequest::new(format!("r{round}-{n}"), format!("worker-{}", n % 5))
        .scopes(scopes.iter().copied())
        .strategy(strategy);
    // A third hold a long lease; the rest none, so any owner may interrupt them.
    if n % 3 == 0 {
        request = request.ttl(LONG);
    }
    match store.admit(&request).await {
        Ok(answer) => (request, answer),
        Err(error) => panic!("admission {:?} answered Err: {error}", request.id),
    }
}

/// Moves one active record along, as its worker or a reaper would: finish it,
/// renew it, or take it over. Every answer is an outcome, never an error.
async fn storm_lifecycle(store: PgStore, record: LeaseRecord, n: usize) {
    let Some(claim) = record.claim() else { return };
    let outcome = match n % 3 {
        0 => store
            .transition(&claim, &StatusChange::succeeded())
            .await
            .map(drop),
        1 => store.renew(&claim, LONG).await.map(drop),
        _ => store
            .claim_for_takeover(&tenure_lease_core::TakeoverRequest::adopt(
                record.id.as_str(),
                "reaper",
                None,
            ))
            .await
            .map(drop),
    };
    if let Err(error) = outcome {
        panic!(
            "lifecycle step {n} on {:?} answered Err: {error}",
            record.id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_storm_answers_admitted_or_conflict_never_err() {
    const ROUNDS: usize = 12;
    const RACERS: usize = 32;
    with_store(
        "admission_storm_answers_admitted_or_conflict_never_err",
        |store, url| async move {
            // A second pool on the same schema, as a second host would have,
            // whose sessions default to SERIALIZABLE: its admissions all take
            // the transactional path, racing the other pool's single calls.
            let second = PgStore::from_pool(serializable_pool(&url, 8).await, store.schema())
                .await
                .expect("second store");
            let (mut admitted, mut conflicts, mut interrupted) = (0, 0, 0);
            for round in 0..ROUNDS {
                let before = store.list_active().await.expect("active");
                let storm_over = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                // Watches the invariant while the storm runs: every
                // `list_active` is one snapshot of the store.
                let watcher = tokio::spawn({
                    let store = store.clone();
                    let storm_over = storm_over.clone();
                    async move {
                        let mut looks = 0;
                        while !storm_over.load(std::sync::atomic::Ordering::Acquire) {
                            let active = store.list_active().await.expect("active");
                            assert_disjoint_holders(&active, &format!("round {round}, mid-storm"));
                            looks += 1;
                        }
                        looks
                    }
                });
                let lifecycle: Vec<_> = before
                    .into_iter()
                    .enumerate()
                    .map(|(n, record)| {
                        tokio::spawn(storm_lifecycle(store.clone(), record, n + round))
                    })
                    .collect();
                let racers: Vec<_> = (0..RACERS)
                    .map(|n| {
                        let on = if n % 2 == 0 { &store } else { &second };
                        tokio::spawn(storm_admission(on.clone(), round, n))
                    })
                    .collect();
                for (request, answer) in futures_util::future::join_all(racers)
                    .await
                    .into_iter()
                    .map(|joined| joined.expect("racer"))
                {
                    match answer {
                        Admission::Admitted {
                            record,
                            interrupted: taken,
                        } => {
                            admitted += 1;
                            assert_eq!(record.status, Status::Pending);
                            for holder in &taken {
                                assert_eq!(holder.status, Status::Interrupted, "{request:?}");
                                assert_eq!(holder.owner.as_deref(), Some(request.owner.as_str()));
                                assert!(holder.fence < record.fence, "{holder:?} {record:?}");
                            }
                            interrupted += taken.len();
                        }
                        Admission::Conflict { holder, .. } => {
                            conflicts += 1;
                            assert!(
                                holder.scopes.intersection(&request.scopes).next().is_some(),
                                "{request:?} conflicted with {holder:?}"
                            );
                        }
                        other => panic!("{other:?}"),
                    }
                }
                for step in futures_util::future::join_all(lifecycle).await {
                    step.expect("lifecycle");
                }
                storm_over.store(true, std::sync::atomic::Ordering::Release);
                let looks = watcher.await.expect("watcher");
                assert!(looks > 0, "round {round}: the watcher never looked");
                let active = store.list_active().await.expect("active");
                assert_disjoint_holders(&active, &format!("after round {round}"));
                // The server-side lock table agrees: exactly the active
                // records' scopes are held, each by its record.
                let mut held: Vec<(String, String)> = sqlx::query_as(&format!(
                    "SELECT scope, lease_id FROM \"{}\".held_scopes ORDER BY scope",
                    store.schema()
                ))
                .fetch_all(store.pool())
                .await
                .expect("held scopes");
                let mut expected: Vec<(String, String)> = active
                    .iter()
                    .flat_map(|record| {
                        record
                            .scopes
                            .iter()
                            .map(|scope| (scope.clone(), record.id.clone()))
                    })
                    .collect();
                held.sort();
                expected.sort();
                assert_eq!(held, expected, "after round {round}");
            }
            second.close().await;
            // The storm exercised every path it is meant to.
            assert!(admitted > ROUNDS, "{admitted} admitted");
            assert!(conflicts > 0, "no conflicts");
            assert!(interrupted > 0, "nothing interrupted");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_expired_before_postgres_calendar_is_empty_not_an_error() {
    with_store(
        "list_expired_before_postgres_calendar_is_empty_not_an_error",
        |store, _| async move {
            admitted(
                store
                    .admit(&AdmitRequest::new("op", "worker-a"))
                    .await
                    .expect("admit"),
            );
            // 4714-11-24 BC, midnight UTC: PostgreSQL's first instant.
            const EARLIEST: i64 = -210_866_803_200_000_000;
            for micros in [EARLIEST - 1, EARLIEST, i64::MIN / 2] {
                let bound = tenure_lease_core::clock::from_micros(micros).expect("instant");
                let scan = store
                    .list_expired(&ExpiredQuery::new(Duration::ZERO).created_before(bound))
                    .await
                    .unwrap_or_else(|error| panic!("{bound}: {error}"));
                assert!(
                    scan.records.is_empty() && scan.skipped.is_empty(),
                    "{bound}: {scan:?}"
                );
            }
        },
    )
    .await;
}

/// Records each renewer holds a claim on.
const BATCH_RECORDS: usize = 24;
/// Records one intruding admission interrupts (one scope each).
const INTERRUPTED_PER_ADMISSION: usize = 6;

/// Renews `claims` as one batch, over and over, until `interrupts_done` and
/// at least once after; every answer must be an outcome.
async fn renew_batches_until(
    store: PgStore,
    claims: Vec<tenure_lease_core::Claim>,
    mut interrupts_done: tokio::sync::watch::Receiver<bool>,
) -> usize {
    let mut batches = 0;
    loop {
        let finished = *interrupts_done.borrow_and_update();
        match store.renew_many(&claims, LONG).await {
            Ok(outcomes) => assert_eq!(outcomes.len(), claims.len()),
            Err(error) => panic!("renew_many batch {batches} answered Err: {error}"),
        }
        batches += 1;
        if finished {
            return batches;
        }
    }
}

/// `renew_many` locks its records in id order whatever order the claims
/// come in, as admissions lock holders: two batches over the same records
/// in opposite orders, and admissions interrupting some of them, wait for
/// one another and never deadlock (which would answer `Err`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_many_in_opposite_orders_with_admissions_never_errs() {
    with_store(
        "renew_many_in_opposite_orders_with_admissions_never_errs",
        |store, _| async move {
            let mut claims = Vec::with_capacity(BATCH_RECORDS);
            for n in 0..BATCH_RECORDS {
                let record = admitted(
                    store
                        .admit(
                            &AdmitRequest::new(format!("rec-{n:02}"), "worker")
                                .scope(format!("s-{n:02}"))
                                .ttl(LONG),
                        )
                        .await
                        .expect("admit"),
                );
                claims.push(record.claim().expect("an admitted record has a claim"));
            }
            let ascending = claims.clone();
            let descending: Vec<_> = claims.iter().rev().cloned().collect();
            let (interrupts_done, watch_done) = tokio::sync::watch::channel(false);
            let renewers = [ascending, descending].map(|batch| {
                tokio::spawn(renew_batches_until(
                    store.clone(),
                    batch,
                    watch_done.clone(),
                ))
            });
            // The same owner interrupts even holders with valid leases.
            for (n, chunk) in (0..BATCH_RECORDS)
                .collect::<Vec<_>>()
                .chunks(INTERRUPTED_PER_ADMISSION)
                .enumerate()
            {
                let request = AdmitRequest::new(format!("intruder-{n}"), "worker")
                    .scopes(chunk.iter().map(|k| format!("s-{k:02}")))
                    .strategy(AdmitStrategy::Interrupt)
                    .ttl(LONG);
                match store.admit(&request).await {
                    Ok(Admission::Admitted { interrupted, .. }) => {
                        assert_eq!(interrupted.len(), chunk.len(), "{:?}", request.id);
                    }
                    other => panic!("{:?} answered {other:?}", request.id),
                }
            }
            interrupts_done.send_replace(true);
            for renewer in renewers {
                assert!(renewer.await.expect("join") >= 1);
            }
            let outcomes = store.renew_many(&claims, LONG).await.expect("renew_many");
            assert!(
                outcomes
                    .iter()
                    .all(|outcome| *outcome
                        == Renewal::Lost(tenure_lease_core::LossReason::Interrupted)),
                "{outcomes:?}"
            );
        },
    )
    .await;
}

/// What migration 0014 undoes, to stand a fresh schema back at version 13:
/// the records' slots, `admit_counted`, and release notices naming the
/// whole key.
const BACK_TO_VERSION_13: &str = "DROP FUNCTION $schema.admit_counted(bigint[], text, text[], \
       integer[], integer[], text, text, interval, jsonb, boolean, bigint, text, integer, \
       bigint, bigint, bigint); \
     ALTER TABLE $schema.leases DROP COLUMN slots; \
     CREATE OR REPLACE FUNCTION $schema.announce_release() RETURNS trigger \
       LANGUAGE plpgsql VOLATILE AS $$ BEGIN \
       PERFORM pg_notify('tenure_released_' || md5(TG_TABLE_SCHEMA), OLD.scope); \
       RETURN NULL; END $$; \
     DELETE FROM $schema._sqlx_migrations WHERE version >= 14;";

/// What migration 0013 undoes, after [`BACK_TO_VERSION_13`], to stand a
/// fresh schema back at version 12: the rate logs and their functions.
const BACK_TO_VERSION_12: &str = "DROP FUNCTION $schema.admit_if_free_limited(bigint[], text, \
       text[], text, text, interval, jsonb, boolean, bigint, text, integer, bigint, bigint, \
       bigint); \
     DROP FUNCTION $schema.lock_rate_log(bigint, text, integer, bigint, bigint, bigint); \
     DROP FUNCTION $schema.spent_rate_log(bigint[], integer, bigint, timestamptz, bigint, \
       bigint); \
     DROP TABLE $schema.rate_logs; \
     DELETE FROM $schema._sqlx_migrations WHERE version >= 13;";

/// What migration 0012 undoes, after [`BACK_TO_VERSION_12`], to stand a
/// fresh schema back at version 11: the uniqueness columns, their check
/// and their index.
const BACK_TO_VERSION_11: &str = "DROP INDEX $schema.jobs_unique_key; \
     ALTER TABLE $schema.jobs DROP COLUMN unique_key, DROP COLUMN unique_policy, \
     DROP COLUMN unique_until; \
     DELETE FROM $schema._sqlx_migrations WHERE version >= 12;";

/// What migrations 0006 and 0008 to 0011 undo, after [`BACK_TO_VERSION_11`],
/// to stand a fresh schema back at version 5 (0007 only replaces a function, so forgetting it is
/// enough; 0008 replaces it again and adds the three functions dropped
/// here; 0009 adds the release trigger; 0010 drops the side tables' foreign
/// keys, their target and an index, and adds `draw_fence` and `draw_fences`;
/// 0011 adds the progress columns).
const BACK_TO_VERSION_5: &str = "ALTER TABLE $schema.leases DROP COLUMN progress; \
     ALTER TABLE $schema.jobs DROP COLUMN progress, DROP COLUMN taken_back, \
     DROP COLUMN taken_back_at; \
     ALTER TABLE $schema.leases ADD CONSTRAINT leases_id_activity UNIQUE (id, is_active); \
     ALTER TABLE $schema.lease_scopes ADD FOREIGN KEY (lease_id) \
       REFERENCES $schema.leases (id) ON DELETE CASCADE; \
     CREATE INDEX lease_scopes_by_lease ON $schema.lease_scopes (lease_id); \
     ALTER TABLE $schema.held_scopes ADD COLUMN lease_active boolean NOT NULL DEFAULT true \
         CONSTRAINT held_scopes_only_active CHECK (lease_active), \
       ADD CONSTRAINT held_scopes_named_by_lease FOREIGN KEY (scope, lease_id) \
         REFERENCES $schema.lease_scopes (scope, lease_id) ON DELETE CASCADE, \
       ADD CONSTRAINT held_scopes_lease_is_active FOREIGN KEY (lease_id, lease_active) \
         REFERENCES $schema.leases (id, is_active); \
     DROP FUNCTION $schema.draw_fence(); \
     DROP FUNCTION $schema.draw_fences(bigint); \
     DROP INDEX $schema.leases_finished_age; \
     CREATE INDEX leases_terminal_age ON $schema.leases (updated_at) \
       WHERE status IN ('succeeded', 'failed'); \
     DROP FUNCTION $schema.next_fence(); \
     DROP FUNCTION $schema.timeline_floor(); \
     DROP FUNCTION $schema.wal_timeline(); \
     DROP TRIGGER held_scope_released ON $schema.held_scopes; \
     DROP FUNCTION $schema.announce_release(); \
     DELETE FROM $schema._sqlx_migrations WHERE version >= 6;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_5_schema_upgrades_keeping_its_jobs_and_purging_old_interruptions() {
    with_store(
        "a_version_5_schema_upgrades_keeping_its_jobs_and_purging_old_interruptions",
        |store, url| async move {
            execute(&url, &store, BACK_TO_VERSION_13).await;
            execute(&url, &store, BACK_TO_VERSION_12).await;
            execute(&url, &store, BACK_TO_VERSION_11).await;
            execute(&url, &store, BACK_TO_VERSION_5).await;
            execute(
                &url,
                &store,
                "INSERT INTO $schema.leases (id, kind, status, owner, fence, created_at, \
                   updated_at, stop_reason) \
                 VALUES ('stopped', 'run', 'interrupted', 'worker-b', 4, \
                   '2023-11-14 22:13:20+00', '2023-11-14 22:13:20+00', 'interrupted_by_admission'); \
                 INSERT INTO $schema.jobs (id, queue, payload, priority, run_at, attempt, \
                   max_attempts, state, owner, fence, dead_reason, created_at, updated_at) \
                 VALUES ('reaped', 'q', '{}', 0, now(), 1, 1, 'dead_lettered', 'worker-a', 5, \
                   'lease_expired', now(), now()); \
                 SELECT setval('$schema.fence_seq', 5);",
            )
            .await;
            let upgraded = support::connect(&url, store.schema())
                .await
                .expect("the version 5 schema upgrades");
            let reaped = upgraded
                .get_job("reaped")
                .await
                .expect("get_job")
                .expect("the old job");
            assert_eq!(
                (reaped.taken_back, reaped.taken_back_at),
                (0, None),
                "a job stored before the trace existed was never taken back"
            );
            let claim = JobClaim {
                id: "reaped".into(),
                owner: "worker-a".into(),
                fence: 5,
                attempt: 1,
            };
            let taken = match upgraded.take_back(&claim, LONG).await.expect("take_back") {
                TakeBack::Taken(taken) => taken,
                other => panic!("the live copy takes its job back: {other:?}"),
            };
            assert_eq!(
                (taken.job.taken_back, taken.job.taken_back_at),
                (1, Some(taken.job.updated_at))
            );
            assert_eq!(
                upgraded.purge(Duration::from_secs(24 * 3600)).await.expect("purge"),
                1,
                "the record interrupted long ago is purged"
            );
            assert_eq!(upgraded.get("stopped").await.expect("get"), None);
            upgraded.close().await;
        },
    )
    .await;
}

/// A schema at version 11 takes migration 0012 with its jobs: one stored
/// before reads back without a key, and keys are judged from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_11_schema_upgrades_to_unique_jobs_keeping_its_jobs() {
    with_store(
        "a_version_11_schema_upgrades_to_unique_jobs_keeping_its_jobs",
        |store, url| async move {
            let old = store
                .enqueue(&NewJob::new("q", serde_json::json!({})).id("old"))
                .await
                .expect("enqueue before the downgrade");
            execute(&url, &store, BACK_TO_VERSION_13).await;
            execute(&url, &store, BACK_TO_VERSION_12).await;
            execute(&url, &store, BACK_TO_VERSION_11).await;
            let upgraded = support::connect(&url, store.schema())
                .await
                .expect("the version 11 schema upgrades");
            let read = upgraded.get_job("old").await.expect("get_job");
            assert_eq!(
                read.as_ref(),
                Some(&old),
                "the old job reads back as it was"
            );
            assert_eq!(old.unique, None);
            let keyed =
                || NewJob::new("q", serde_json::json!({})).unique("k", UniquePolicy::WhileQueued);
            let first = upgraded
                .enqueue_unique(&keyed())
                .await
                .expect("enqueue_unique");
            assert!(first.is_created(), "{first:?}");
            match upgraded
                .enqueue_unique(&keyed())
                .await
                .expect("enqueue_unique")
            {
                Enqueued::Duplicate(holder) => assert_eq!(&holder, first.job()),
                other => panic!("the key is held: {other:?}"),
            }
            upgraded.close().await;
        },
    )
    .await;
}

/// A schema at version 12 takes migration 0013 with its records: one
/// admitted before reads back as it was, and rate limits are judged from
/// then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_12_schema_upgrades_to_rate_limits_keeping_its_records() {
    with_store(
        "a_version_12_schema_upgrades_to_rate_limits_keeping_its_records",
        |store, url| async move {
            let old = admitted(
                store
                    .admit(&AdmitRequest::new("old", "worker-a").scope("s"))
                    .await
                    .expect("admit before the downgrade"),
            );
            execute(&url, &store, BACK_TO_VERSION_13).await;
            execute(&url, &store, BACK_TO_VERSION_12).await;
            let upgraded = support::connect(&url, store.schema())
                .await
                .expect("the version 12 schema upgrades");
            assert_eq!(upgraded.get("old").await.expect("get"), Some(old));
            let limit = RateLimit::new("k", 1, Duration::from_secs(3600));
            let first = upgraded
                .admit(&AdmitRequest::new("first", "worker-a").rate_limit(limit.clone()))
                .await
                .expect("admit within the limit");
            assert!(first.admitted().is_some(), "{first:?}");
            let second = upgraded
                .admit(&AdmitRequest::new("second", "worker-a").rate_limit(limit))
                .await
                .expect("admit beyond the limit");
            assert!(
                matches!(second, Admission::RateLimited { .. }),
                "{second:?}"
            );
            upgraded.close().await;
        },
    )
    .await;
}

/// A schema at version 13 takes migration 0014 with its records: one
/// admitted before (an exclusive holder: slot 0 of its scope) reads back
/// as it was, with no slots, and counted admissions count it from then on;
/// its release is announced under its scope, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_13_schema_upgrades_to_counted_scopes_keeping_its_records() {
    with_store(
        "a_version_13_schema_upgrades_to_counted_scopes_keeping_its_records",
        |store, url| async move {
            let old = admitted(
                store
                    .admit(&AdmitRequest::new("old", "worker-a").scope("s").ttl(LONG))
                    .await
                    .expect("admit before the downgrade"),
            );
            execute(&url, &store, BACK_TO_VERSION_13).await;
            let upgraded = support::connect(&url, store.schema())
                .await
                .expect("the version 13 schema upgrades");
            assert_eq!(upgraded.get("old").await.expect("get"), Some(old.clone()));
            assert!(old.slots.is_empty(), "{old:?}");
            let counted = |id: &str| {
                AdmitRequest::new(id, "worker-b")
                    .counted_scope("s", 2)
                    .ttl(LONG)
            };
            let new = admitted(upgraded.admit(&counted("new")).await.expect("admit"));
            assert_eq!(new.slot("s"), Some(1), "the old holder holds slot 0");
            match upgraded.admit(&counted("third")).await.expect("admit") {
                Admission::Conflict { holder, .. } => {
                    assert_eq!(holder.id, "old", "the old holder's lease ends first");
                }
                other => panic!("the scope is full: {other:?}"),
            }
            let mut releases = upgraded
                .releases()
                .await
                .expect("subscribe")
                .expect("notices");
            let claim = old.claim().expect("a claim");
            upgraded
                .transition(&claim, &StatusChange::succeeded())
                .await
                .expect("release the old holder");
            assert_eq!(
                tokio::time::timeout(Duration::from_secs(20), releases.next()).await,
                Ok(ReleaseNotice::Freed("s".into()))
            );
            let third = admitted(upgraded.admit(&counted("third")).await.expect("admit"));
            assert_eq!(third.slot("s"), Some(0), "the old holder's slot is free");
            upgraded.close().await;
        },
    )
    .await;
}

/// The `held_scopes` rows of `store`: (key, record), by key.
async fn held_keys(store: &PgStore) -> Vec<(String, String)> {
    sqlx::query_as(&format!(
        "SELECT scope, lease_id FROM \"{}\".held_scopes ORDER BY scope",
        store.schema()
    ))
    .fetch_all(store.pool())
    .await
    .expect("read held_scopes")
}

/// A counted scope's holders are held under their slots' keys (the scope
/// for slot 0, else the scope, U+001F and the slot), each record keeping
/// its slot in `slots`; `lease_scopes` names the scope. A holder's release
/// deletes its own key alone and is announced under the scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counted_holders_are_held_under_slot_keys_and_released_under_their_scope() {
    with_store(
        "counted_holders_are_held_under_slot_keys_and_released_under_their_scope",
        |store, _url| async move {
            let mut releases = store.releases().await.expect("subscribe").expect("notices");
            let mut holders = Vec::new();
            for n in 0..3 {
                let request = AdmitRequest::new(format!("h{n}"), "worker-a")
                    .counted_scope("pool", 3)
                    .scope(format!("own-{n}"))
                    .ttl(LONG);
                holders.push(admitted(store.admit(&request).await.expect("admit")));
            }
            let stored: Vec<(String, Option<serde_json::Value>)> = sqlx::query_as(&format!(
                "SELECT id, slots FROM \"{}\".leases ORDER BY id",
                store.schema()
            ))
            .fetch_all(store.pool())
            .await
            .expect("read slots");
            assert_eq!(
                stored,
                (0..3)
                    .map(|n| (format!("h{n}"), Some(serde_json::json!({ "pool": n }))))
                    .collect::<Vec<_>>(),
                "each record keeps its counted scope's slot, and no other scope's"
            );
            // The keys are the rules' own, so every store agrees on them.
            let pair = |key: &str, id: &str| (key.to_owned(), id.to_owned());
            let key = |slot: u32| rules::slot_key("pool", slot).into_owned();
            assert_eq!(key(1), "pool\u{1f}1");
            assert_eq!(
                held_keys(&store).await,
                [
                    pair("own-0", "h0"),
                    pair("own-1", "h1"),
                    pair("own-2", "h2"),
                    pair(&key(0), "h0"),
                    pair(&key(1), "h1"),
                    pair(&key(2), "h2"),
                ]
            );
            let listed = store.list_by_scope("pool").await.expect("list_by_scope");
            assert_eq!(listed.len(), 3, "{listed:?}");
            let claim = holders[1].claim().expect("a claim");
            store
                .transition(&claim, &StatusChange::succeeded())
                .await
                .expect("release slot 1");
            let wait = Duration::from_secs(20);
            let mut heard = Vec::new();
            for _ in 0..2 {
                match tokio::time::timeout(wait, releases.next()).await {
                    Ok(ReleaseNotice::Freed(scope)) => heard.push(scope.to_string()),
                    other => panic!("expected a release, heard {other:?}"),
                }
            }
            heard.sort();
            assert_eq!(heard, ["own-1", "pool"], "each scope announced by name");
            assert_eq!(
                held_keys(&store).await,
                [
                    pair("own-0", "h0"),
                    pair("own-2", "h2"),
                    pair(&key(0), "h0"),
                    pair(&key(2), "h2"),
                ]
            );
        },
    )
    .await;
}

/// The uses and end of the rate log of `limit`, as stored.
async fn rate_log(
    store: &PgStore,
    limit: &RateLimit,
) -> Option<(Vec<i64>, chrono::DateTime<chrono::Utc>)> {
    sqlx::query_as(&format!(
        "SELECT uses, ends_at FROM \"{}\".rate_logs \
         WHERE key = $1 AND permits = $2 AND period_ms = $3",
        store.schema()
    ))
    .bind(&limit.key)
    .bind(i32::try_from(limit.permits).expect("permits"))
    .bind(i64::try_from(limit.period.as_millis()).expect("period"))
    .fetch_optional(store.pool())
    .await
    .expect("read the rate log")
}

/// A rate log keeps the instants of its uses, ascending, each the instant
/// of the admission or the claim that used it (the records' creation, the
/// claims' update), and ends a period after the newest. A purge deletes
/// the logs that ended, without counting them, and keeps the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_logs_keep_their_uses_and_purge_deletes_the_dead_ones() {
    with_store(
        "rate_logs_keep_their_uses_and_purge_deletes_the_dead_ones",
        |store, _url| async move {
            let hour = Duration::from_secs(3600);
            let live = RateLimit::new("live", 3, hour);
            let record = admitted(
                store
                    .admit(&AdmitRequest::new("admitted", "worker-a").rate_limit(live.clone()))
                    .await
                    .expect("admit"),
            );
            for _ in 0..3 {
                store
                    .enqueue(&NewJob::new("q", serde_json::json!({})))
                    .await
                    .expect("enqueue");
            }
            let claimed = store
                .claim_limited(
                    &ClaimRequest::new("q", "worker-a", LONG)
                        .limit(3)
                        .rate_limit(live.clone()),
                )
                .await
                .expect("claim");
            assert_eq!(claimed.jobs.len(), 2, "{claimed:?}");
            assert_eq!(
                claimed.retry_after,
                Some(
                    hour - (claimed.jobs[0].job.updated_at - record.created_at)
                        .to_std()
                        .expect("ascending")
                ),
                "{claimed:?}"
            );
            let claimed_at = claimed.jobs[0].job.updated_at;
            assert!(claimed
                .jobs
                .iter()
                .all(|claimed| claimed.job.updated_at == claimed_at));
            let (uses, ends_at) = rate_log(&store, &live).await.expect("the live log");
            assert_eq!(
                uses,
                [record.created_at, claimed_at, claimed_at]
                    .map(|instant| instant.timestamp_micros())
            );
            assert_eq!(ends_at, claimed_at + hour);

            let dead = RateLimit::new("dead", 1, Duration::from_millis(1));
            let briefly = store
                .admit(&AdmitRequest::new("briefly", "worker-a").rate_limit(dead.clone()))
                .await
                .expect("admit");
            assert!(briefly.admitted().is_some(), "{briefly:?}");
            assert!(rate_log(&store, &dead).await.is_some());
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(
                store.purge(Duration::ZERO).await.expect("purge"),
                0,
                "a log is no record"
            );
            assert_eq!(rate_log(&store, &dead).await, None, "the dead log stays");
            assert!(
                rate_log(&store, &live).await.is_some(),
                "the live log is gone"
            );
        },
    )
    .await;
}

/// The count of `lease_scopes` pairs naming `id`.
async fn scope_pairs(store: &PgStore, id: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{}\".lease_scopes WHERE lease_id = $1",
        store.schema()
    ))
    .bind(id)
    .fetch_one(store.pool())
    .await
    .expect("count the pairs")
}

/// Since migration 0010 no foreign key cascades a purge to `lease_scopes`:
/// the purge deletes the pairs itself. A purge by code of version 9 (a
/// bare delete of the record) leaves its pairs behind; a listing does not
/// answer them, and admitting the id again, on other scopes, is not
/// refused by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_delete_scope_pairs_and_pairs_left_behind_are_ignored() {
    with_store(
        "purges_delete_scope_pairs_and_pairs_left_behind_are_ignored",
        |store, url| async move {
            hold_and_release(&store, "purged", "s").await;
            assert_eq!(scope_pairs(&store, "purged").await, 1);
            assert_eq!(store.purge(Duration::ZERO).await.expect("purge"), 1);
            assert_eq!(
                scope_pairs(&store, "purged").await,
                0,
                "the purge left pairs"
            );

            hold_and_release(&store, "again", "s").await;
            execute(
                &url,
                &store,
                "DELETE FROM $schema.leases WHERE id = 'again'",
            )
            .await;
            assert_eq!(scope_pairs(&store, "again").await, 1, "a version 9 purge");
            let readmitted = store
                .admit(&AdmitRequest::new("again", "worker-b").scope("t").scope("s"))
                .await
                .expect("admit the purged id again");
            assert!(readmitted.admitted().is_some(), "{readmitted:?}");
            hold_and_release(&store, "other", "u").await;
            execute(
                &url,
                &store,
                "DELETE FROM $schema.leases WHERE id = 'other'",
            )
            .await;
            let readmitted = store
                .admit(&AdmitRequest::new("other", "worker-b").scope("v"))
                .await
                .expect("admit another purged id again");
            assert!(readmitted.admitted().is_some(), "{readmitted:?}");
            let listed = |scope: &'static str| {
                let store = store.clone();
                async move {
                    store
                        .list_by_scope(scope)
                        .await
                        .expect("list")
                        .into_iter()
                        .map(|record| record.id)
                        .collect::<Vec<_>>()
                }
            };
            assert_eq!(listed("s").await, ["again"]);
            assert_eq!(listed("t").await, ["again"]);
            assert!(
                listed("u").await.is_empty(),
                "a pair left behind was listed"
            );
            assert_eq!(listed("v").await, ["other"]);
        },
    )
    .await;
}

/// Since migration 0010 no foreign key stops a holder's record from being
/// deleted, or finished, by hand while its `held_scopes` rows stay (nor
/// its id from being admitted again on other scopes): the next admission
/// of those scopes drops the rows (nothing holds the scopes) instead of
/// failing on them for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_scopes_of_records_deleted_or_finished_by_hand_hold_nothing() {
    with_store(
        "held_scopes_of_records_deleted_or_finished_by_hand_hold_nothing",
        |store, url| async move {
            for (holder, by_hand) in [
                ("deleted", "DELETE FROM $schema.leases WHERE id = 'deleted'"),
                (
                    "finished",
                    "UPDATE $schema.leases SET status = 'failed' WHERE id = 'finished'",
                ),
                // The id admitted again, on another scope, once its record
                // was deleted: its rows of the first scopes hold nothing.
                ("reused", "DELETE FROM $schema.leases WHERE id = 'reused'"),
            ] {
                let admitted = store
                    .admit(
                        &AdmitRequest::new(holder, "worker-a")
                            .scope(holder)
                            .scope("both"),
                    )
                    .await
                    .expect("admit the holder");
                assert!(admitted.admitted().is_some(), "{admitted:?}");
                execute(&url, &store, by_hand).await;
                if holder == "reused" {
                    let again = store
                        .admit(&AdmitRequest::new(holder, "worker-a").scope("elsewhere"))
                        .await
                        .expect("admit the id again");
                    assert!(again.admitted().is_some(), "{again:?}");
                }
                let next = format!("after-{holder}");
                let admitted = store
                    .admit(
                        &AdmitRequest::new(&next, "worker-b")
                            .scope(holder)
                            .scope("both"),
                    )
                    .await
                    .unwrap_or_else(|error| panic!("{holder}: {error}"));
                assert!(admitted.admitted().is_some(), "{holder}: {admitted:?}");
                let claim = admitted
                    .admitted()
                    .and_then(LeaseRecord::claim)
                    .expect("admitted");
                store
                    .transition(&claim, &StatusChange::succeeded())
                    .await
                    .expect("release");
            }
        },
    )
    .await;
}

/// Counts `tenure.store.admit.retries` per `db.system.name`.
#[derive(Default)]
struct AdmitRetries(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl AdmitRetries {
    fn of(&self, backend: &str) -> u64 {
        self.0
            .lock()
            .expect("counters")
            .get(backend)
            .map_or(0, |count| count.load(Ordering::SeqCst))
    }
}

impl Recorder for AdmitRetries {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != ADMIT_RETRIES.name {
            return Counter::noop();
        }
        let backend = key
            .labels()
            .find(|label| label.key() == attribute::DB_SYSTEM_NAME)
            .map_or_else(String::new, |label| label.value().to_owned());
        Counter::from_arc(Arc::clone(
            self.0.lock().expect("counters").entry(backend).or_default(),
        ))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// A writer that takes no scope locks (as an older version of this crate
/// did) holds scope `s` in a transaction it has not committed: the
/// admission's lock on `s` does not keep it out, its insert waits on the
/// writer's row, loses when the writer commits, and is decided again, which
/// the retry counter shows. Uncontended admissions count nothing. The
/// runtime is current-thread, so the recorder (local to this thread) sees
/// the admission's task.
/// Waits until a session on `store`'s schema waits for a lock: the
/// admission under test, queued behind a writer's open transaction.
/// Polls the server, which has no signal to give.
async fn until_an_admission_waits_on_a_lock(url: &str, store: &PgStore) {
    let mut watcher = PgConnection::connect(url).await.expect("watcher");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
             AND state = 'active' AND position($1 in query) > 0 \
             AND pid <> pg_backend_pid()",
        )
        .bind(store.schema())
        .fetch_optional(&mut watcher)
        .await
        .expect("pg_stat_activity");
        if waiting.is_some() {
            watcher.close().await.expect("close the watcher");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the admission never waited on the lockless writer"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_admission_that_loses_a_race_counts_its_retry() {
    let retries = AdmitRetries::default();
    let _recorder = metrics::set_default_local_recorder(&retries);
    let retries = &retries;
    with_store(
        "an_admission_that_loses_a_race_counts_its_retry",
        |store, url| async move {
            admitted(
                store
                    .admit(&AdmitRequest::new("calm", "worker-a").scope("other"))
                    .await
                    .expect("admit"),
            );
            let conflict = store
                .admit(&AdmitRequest::new("calm-rival", "worker-b").scope("other"))
                .await
                .expect("admit");
            assert!(
                matches!(conflict, Admission::Conflict { .. }),
                "{conflict:?}"
            );
            assert_eq!(
                retries.of("postgresql"),
                0,
                "uncontended admissions retry nothing"
            );

            let mut lockless = PgConnection::connect(&url).await.expect("lockless writer");
            let writes = "BEGIN; \
                 INSERT INTO $schema.leases (id, scopes, kind, status, owner, fence, \
                   created_at, updated_at) \
                 VALUES ('lockless', '{s}', 'run', 'running', 'worker-z', \
                   nextval('$schema.fence_seq'), now(), now()); \
                 INSERT INTO $schema.lease_scopes (scope, lease_id) VALUES ('s', 'lockless'); \
                 INSERT INTO $schema.held_scopes (scope, lease_id) VALUES ('s', 'lockless');"
                .replace("$schema", &format!("\"{}\"", store.schema()));
            sqlx::raw_sql(&writes)
                .execute(&mut lockless)
                .await
                .expect("the lockless writes");
            let admission = tokio::spawn({
                let store = store.clone();
                async move {
                    store
                        .admit(&AdmitRequest::new("op", "worker-a").scope("s"))
                        .await
                }
            });
            until_an_admission_waits_on_a_lock(&url, &store).await;
            sqlx::query("COMMIT")
                .execute(&mut lockless)
                .await
                .expect("commit");
            let answer = admission.await.expect("join").expect("admit");
            assert!(
                matches!(&answer, Admission::Conflict { holder, .. } if holder.id == "lockless"),
                "decided again, the admission sees the writer's holder: {answer:?}"
            );
            assert_eq!(
                retries.of("postgresql"),
                1,
                "the lost race is counted once, under the backend's label"
            );
            lockless.close().await.expect("close the writer");
        },
    )
    .await;
}

/// As [`an_admission_that_loses_a_race_counts_its_retry`], in a counted
/// scope: a writer that takes no scope locks holds slot 1 of `s` (its key,
/// `s`, U+001F, `1`) in a transaction it has not committed, so the
/// admission contends for slot 1 (the lowest it sees free), waits on the
/// writer's key, loses when the writer commits, and decides again: the
/// scope is full, and the conflict names the holder that frees first (slot
/// 0's, whose lease ends; the writer's record has none).
#[tokio::test]
async fn a_counted_admission_that_loses_a_race_decides_again() {
    let retries = AdmitRetries::default();
    let _recorder = metrics::set_default_local_recorder(&retries);
    let retries = &retries;
    with_store(
        "a_counted_admission_that_loses_a_race_decides_again",
        |store, url| async move {
            let counted = |id: &str| {
                AdmitRequest::new(id, "worker-a")
                    .counted_scope("s", 2)
                    .ttl(LONG)
            };
            admitted(store.admit(&counted("first")).await.expect("admit"));
            let mut lockless = PgConnection::connect(&url).await.expect("lockless writer");
            let writes = "BEGIN; \
                 INSERT INTO $schema.leases (id, scopes, slots, kind, status, owner, fence, \
                   created_at, updated_at) \
                 VALUES ('lockless', '{s}', '{\"s\": 1}', 'run', 'running', 'worker-z', \
                   nextval('$schema.fence_seq'), now(), now()); \
                 INSERT INTO $schema.lease_scopes (scope, lease_id) VALUES ('s', 'lockless'); \
                 INSERT INTO $schema.held_scopes (scope, lease_id) \
                 VALUES ('s' || chr(31) || '1', 'lockless');"
                .replace("$schema", &format!("\"{}\"", store.schema()));
            sqlx::raw_sql(&writes)
                .execute(&mut lockless)
                .await
                .expect("the lockless writes");
            let admission = tokio::spawn({
                let store = store.clone();
                async move { store.admit(&counted("op")).await }
            });
            until_an_admission_waits_on_a_lock(&url, &store).await;
            sqlx::query("COMMIT")
                .execute(&mut lockless)
                .await
                .expect("commit");
            let answer = admission.await.expect("join").expect("admit");
            assert!(
                matches!(&answer, Admission::Conflict { holder, .. } if holder.id == "first"),
                "decided again, the admission finds the scope full: {answer:?}"
            );
            assert_eq!(store.get("op").await.expect("get"), None);
            assert_eq!(retries.of("postgresql"), 1, "the lost race is counted once");
            lockless.close().await.expect("close the writer");
        },
    )
    .await;
}

/// The store keeps the connection its statements used, out of the pool,
/// for its next statement; it gives it back once unused for a moment. On a
/// pool of one, the caller's own transaction on [`PgStore::pool`] therefore
/// gets the connection soon after the store's last call (it would wait out
/// its acquire timeout and fail if the store kept it), and the store works
/// again once the caller is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_gives_a_pool_of_one_back_to_the_callers_transaction() {
    const TEST: &str = "a_store_gives_a_pool_of_one_back_to_the_callers_transaction";
    /// Far beyond the quarter of a second a connection is kept unused.
    const ACQUIRE: Duration = Duration::from_secs(20);
    let Some(url) = server_url(TEST) else { return };
    let config = PgStoreConfig::new(url.as_str())
        .schema(fresh_schema())
        .max_connections(1)
        .acquire_timeout(ACQUIRE);
    let store = PgStore::connect(config).await.expect("connect");
    let record = admitted(
        store
            .admit(&AdmitRequest::new("kept", "worker").scope("kept").ttl(LONG))
            .await
            .expect("admit"),
    );
    let mut transaction = store
        .pool()
        .begin()
        .await
        .expect("the caller's transaction gets the pool's one connection back");
    let (seen,): (i64,) = sqlx::query_as(&format!(
        "SELECT count(*) FROM \"{}\".leases WHERE id = $1",
        store.schema()
    ))
    .bind(&record.id)
    .fetch_one(&mut *transaction)
    .await
    .expect("read in the caller's transaction");
    assert_eq!(seen, 1);
    transaction.commit().await.expect("commit");
    let claim = record.claim().expect("claim");
    let renewal = store.renew(&claim, LONG).await.expect("renew");
    assert!(matches!(renewal, Renewal::Renewed { .. }), "{renewal:?}");
    store.drop_schema().await.expect("drop the schema");
}

/// A store whose connections are kept between statements can be dropped
/// where no tokio runtime is current (a Python object freed on the event
/// loop's thread, a store dropped after `block_on`): its connections go
/// back through the runtime it was made in, without a panic.
#[test]
fn a_store_with_kept_connections_drops_outside_the_runtime() {
    const TEST: &str = "a_store_with_kept_connections_drops_outside_the_runtime";
    let Some(url) = server_url(TEST) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let config = PgStoreConfig::new(url.as_str()).schema(fresh_schema());
    let store = runtime.block_on(async {
        let store = PgStore::connect(config.clone()).await.expect("connect");
        // Two connections at once, both kept afterwards.
        let (first, second) = tokio::join!(store.now(), store.now());
        first.expect("now");
        second.expect("now");
        store
    });
    drop(store);
    runtime.block_on(async {
        let cleanup = PgStore::connect(config).await.expect("connect again");
        cleanup.drop_schema().await.expect("drop the schema");
    });
}

/// Far more operations at once than the pool has connections all get one:
/// a connection the store keeps after a statement reaches the next
/// operation waiting, which waits in the store's own queue (the pool's
/// would never hear of a kept connection and time out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_operations_share_a_pool_of_two() {
    const TEST: &str = "many_operations_share_a_pool_of_two";
    const OPERATIONS: usize = 64;
    /// Generous for a loaded machine, far below what the operations would
    /// wait without their turn.
    const ACQUIRE: Duration = Duration::from_secs(20);
    let Some(url) = server_url(TEST) else { return };
    let config = PgStoreConfig::new(url.as_str())
        .schema(fresh_schema())
        .max_connections(2)
        .acquire_timeout(ACQUIRE);
    let store = PgStore::connect(config).await.expect("connect");
    let mut admissions = tokio::task::JoinSet::new();
    for n in 0..OPERATIONS {
        let store = store.clone();
        admissions.spawn(async move {
            let request = AdmitRequest::new(format!("shared-{n}"), "worker")
                .scope(format!("shared-{n}"))
                .ttl(LONG);
            store.admit(&request).await
        });
    }
    while let Some(answer) = admissions.join_next().await {
        let admission = answer
            .expect("task")
            .expect("every admission gets a connection");
        admitted(admission);
    }
    store.drop_schema().await.expect("drop the schema");
}

/// Release notices cross processes and stay within their schema: a second
/// store on the schema (another process, as far as the server knows) hears
/// the first one's release; a store on another schema hears only its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_notices_reach_every_store_of_the_schema_and_no_other() {
    with_store(
        "release_notices_reach_every_store_of_the_schema_and_no_other",
        |store, url| async move {
            let same = support::connect(&url, store.schema())
                .await
                .expect("a second store on the schema");
            let other = support::connect(&url, &fresh_schema())
                .await
                .expect("a store on another schema");
            let mut same_hears = same.releases().await.expect("subscribe").expect("notices");
            let mut other_hears = other.releases().await.expect("subscribe").expect("notices");
            for (store, id) in [(&store, "in-schema"), (&other, "elsewhere")] {
                hold_and_release(store, id, id).await;
            }
            let wait = Duration::from_secs(20);
            let heard = |notice: ReleaseNotice| match notice {
                ReleaseNotice::Freed(scope) => scope.to_string(),
                other => panic!("unexpected notice {other:?}"),
            };
            let same_heard = tokio::time::timeout(wait, same_hears.next()).await;
            assert_eq!(same_heard.map(heard).ok().as_deref(), Some("in-schema"));
            // Released after "in-schema": had the other schema's notice
            // reached it, it would come first.
            let other_heard = tokio::time::timeout(wait, other_hears.next()).await;
            assert_eq!(other_heard.map(heard).ok().as_deref(), Some("elsewhere"));
            other.drop_schema().await.expect("drop the other schema");
            same.close().await;
        },
    )
    .await;
}

/// The listening session ends (a server restart, an idle-session killer,
/// an operator): receivers are told notices were missed, the store listens
/// again on a new session, and a release after that is heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listening_session_is_announced_and_listening_resumes() {
    with_store(
        "a_lost_listening_session_is_announced_and_listening_resumes",
        |store, url| async move {
            let application = format!("listener-{}", store.schema());
            let separator = if url.contains('?') { '&' } else { '?' };
            let listening = support::connect(
                &format!("{url}{separator}application_name={application}"),
                store.schema(),
            )
            .await
            .expect("a store naming its sessions");
            let mut releases = listening
                .releases()
                .await
                .expect("subscribe")
                .expect("notices");
            let mut admin = PgConnection::connect(&url).await.expect("an admin session");
            let listeners = "SELECT pid FROM pg_stat_activity \
                WHERE application_name = $1 AND query ILIKE 'LISTEN%'";
            let first: Vec<i32> = sqlx::query_scalar(listeners)
                .bind(&application)
                .fetch_all(&mut admin)
                .await
                .expect("the listening session");
            assert_eq!(first.len(), 1, "one listening session: {first:?}");
            sqlx::query("SELECT pg_terminate_backend($1)")
                .bind(first[0])
                .execute(&mut admin)
                .await
                .expect("end the listening session");
            let wait = Duration::from_secs(20);
            assert_eq!(
                tokio::time::timeout(wait, releases.next()).await,
                Ok(ReleaseNotice::Missed)
            );
            let again = tokio::time::timeout(wait, async {
                loop {
                    let sessions: Vec<i32> = sqlx::query_scalar(listeners)
                        .bind(&application)
                        .fetch_all(&mut admin)
                        .await
                        .expect("the listening sessions");
                    if sessions.iter().any(|&pid| pid != first[0]) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            assert!(
                again.is_ok(),
                "the store did not listen again within {wait:?}"
            );
            hold_and_release(&store, "after", "heard again").await;
            assert_eq!(
                tokio::time::timeout(wait, releases.next()).await,
                Ok(ReleaseNotice::Freed("heard again".into()))
            );
            listening.close().await;
        },
    )
    .await;
}

/// Admits `id` on `scope` and finishes it, freeing the scope.
async fn hold_and_release(store: &PgStore, id: &str, scope: &str) {
    let admitted = store
        .admit(&AdmitRequest::new(id, "worker-a").scope(scope))
        .await
        .expect("admit");
    let claim = admitted
        .admitted()
        .and_then(LeaseRecord::claim)
        .expect("admitted");
    let released = store
        .transition(&claim, &StatusChange::succeeded())
        .await
        .expect("release");
    assert!(matches!(released, Transition::Applied(_)), "{released:?}");
}
