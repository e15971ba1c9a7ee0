//! Rows damaged by hand, one column at a time: SQLite stores any value in
//! any column (type affinity), so every column of `leases`, `jobs` and the
//! side tables is overwritten in turn with each kind of value the store
//! cannot represent, in a fresh file, and every read path is called on it.
//! Point reads and writes that need the row answer `Corrupt`, naming it;
//! scans skip it (reporting it where their answer can) and serve the other
//! rows, but for a listing of gates, which answers `Corrupt` when it reaches
//! a damaged one; nothing panics, and neither the damaged row nor any other
//! changes.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::types::ValueRef;
use tempfile::TempDir;
use tenure_backend_sqlite::{Durability, SqliteConfig, SqliteStore};
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, Job, JobClaim, JobQueue, NewJob,
};
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, Error, ErrorKind, ExpiredQuery, LeaseRecord, LeaseStore,
    ManualClock, Renewal, StatusChange, TakeoverRequest,
};

const TTL: Duration = Duration::from_secs(1);
const LONG_TTL: Duration = Duration::from_secs(600);

/// SQL for a value no column may hold: text that is not UTF-8.
const INVALID_UTF8: &str = "CAST(X'FF00FE' AS TEXT)";
const BLOB: &str = "X'00FF'";
const I64_MAX: &str = "9223372036854775807";
const I64_MIN: &str = "(-9223372036854775807 - 1)";

/// Values no timestamp column may hold: not integers, or integers beyond
/// every instant a `Timestamp` can represent.
const BAD_TIMESTAMPS: &[&str] = &["'garbage'", "1.5", BLOB, I64_MAX, I64_MIN];
const BAD_FENCES: &[&str] = &["-1", I64_MIN, "'garbage'", "2.5", BLOB];
const BAD_TEXT: &[&str] = &[BLOB, INVALID_UTF8];
/// Values no `slots` column may hold for a record whose one scope is `v`:
/// not a JSON object of slot numbers (0 to 2^32 − 1), a slot in a scope
/// the record does not name, or one no capacity reaches.
const BAD_SLOTS: &[&str] = &[
    "'not json'",
    "'null'",
    "'[1]'",
    "'{\"v\":-1}'",
    "'{\"v\":4294967296}'",
    "'{\"v\":1.5}'",
    "'{\"v\":\"1\"}'",
    "'{\"elsewhere\":1}'",
    "'{\"v\":1000}'",
    "5",
    BLOB,
    INVALID_UTF8,
];

/// One damage: `UPDATE {table} SET {column} = {value} WHERE {filter}`, and
/// the text every error or skip report must contain.
#[derive(Debug, Clone)]
struct Damage {
    table: &'static str,
    column: &'static str,
    value: &'static str,
    filter: &'static str,
    reported_as: &'static str,
}

fn damages(
    table: &'static str,
    filter: &'static str,
    columns: &[(&'static str, &[&'static str])],
) -> Vec<Damage> {
    columns
        .iter()
        .flat_map(|&(column, values)| {
            values.iter().map(move |&value| Damage {
                table,
                column,
                value,
                filter,
                reported_as: column,
            })
        })
        .collect()
}

impl Damage {
    fn apply(&self, path: &Path) {
        let sql = format!(
            "UPDATE {} SET {} = {} WHERE {}",
            self.table, self.column, self.value, self.filter
        );
        let changed = raw_connection(path)
            .execute(&sql, [])
            .unwrap_or_else(|error| panic!("{sql}: {error}"));
        assert!(changed > 0, "{sql} damaged nothing");
    }
}

/// A connection that writes what it is told (see [`common::raw_connection`]).
fn raw_connection(path: &Path) -> rusqlite::Connection {
    common::raw_connection(path).expect("a second connection to the file")
}

/// A stored value as it is, text that is not UTF-8 included (which
/// rusqlite's own `Value` refuses): its type and its content.
#[derive(Debug, Clone, PartialEq)]
enum Stored {
    Null,
    Integer(i64),
    Real(f64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl From<ValueRef<'_>> for Stored {
    fn from(value: ValueRef<'_>) -> Self {
        match value {
            ValueRef::Null => Stored::Null,
            ValueRef::Integer(integer) => Stored::Integer(integer),
            ValueRef::Real(real) => Stored::Real(real),
            ValueRef::Text(text) => Stored::Text(text.to_vec()),
            ValueRef::Blob(blob) => Stored::Blob(blob.to_vec()),
        }
    }
}

/// Every row of `table` matching `filter`, every column, as stored.
fn rows(path: &Path, table: &str, filter: &str) -> Vec<Vec<Stored>> {
    let connection = raw_connection(path);
    let mut statement = connection
        .prepare(&format!(
            "SELECT * FROM {table} WHERE {filter} ORDER BY 1, 2"
        ))
        .expect("select rows");
    let width = statement.column_count();
    statement
        .query_map([], |row| {
            (0..width)
                .map(|index| row.get_ref(index).map(Stored::from))
                .collect::<rusqlite::Result<Vec<Stored>>>()
        })
        .expect("query rows")
        .collect::<rusqlite::Result<_>>()
        .expect("read rows")
}

/// The whole file's rows, table by table.
fn everything(path: &Path, tables: &[&str]) -> Vec<Vec<Vec<Stored>>> {
    tables
        .iter()
        .map(|table| rows(path, table, "1 = 1"))
        .collect()
}

fn assert_corrupt<T: std::fmt::Debug>(
    answer: tenure_lease_core::Result<T>,
    damage: &Damage,
    operation: &str,
    names: &str,
) {
    let error: Error = match answer {
        Ok(answer) => panic!("{damage:?}: {operation} answered {answer:?}, not Corrupt"),
        Err(error) => error,
    };
    assert_eq!(
        error.kind(),
        ErrorKind::Corrupt,
        "{damage:?}: {operation}: {error}"
    );
    assert!(
        error.message().contains(names),
        "{damage:?}: {operation}: the error names {names:?}: {error}"
    );
    assert!(
        error.message().contains(damage.reported_as),
        "{damage:?}: {operation}: the error names the column: {error}"
    );
}

async fn open(path: &Path, clock: &Arc<ManualClock>) -> SqliteStore {
    SqliteStore::connect(
        SqliteConfig::new(path)
            .clock(clock.clone())
            .durability(Durability::Normal),
    )
    .await
    .expect("a new file opens")
}

async fn admitted(store: &SqliteStore, request: AdmitRequest) -> LeaseRecord {
    match store.admit(&request).await.expect("admit answers") {
        Admission::Admitted { record, .. } => record,
        other => panic!("expected {:?} to be admitted, got {other:?}", request.id),
    }
}

/// A file with two expired leases: `victim` (scope `v`), to be damaged,
/// and `bystander` (scope `b`).
struct Leases {
    _directory: TempDir,
    path: PathBuf,
    store: SqliteStore,
    victim: Claim,
    bystander: LeaseRecord,
}

impl Leases {
    async fn new() -> Self {
        let directory = TempDir::new().expect("a temporary directory");
        let path = directory.path().join("leases.db");
        let clock = Arc::new(ManualClock::starting_now());
        let store = open(&path, &clock).await;
        let lease = |id: &str, scope: &str| {
            AdmitRequest::new(id, "worker-a")
                .kind("run")
                .scope(scope)
                .ttl(TTL)
                .metadata(serde_json::json!({ "k": 1 }))
        };
        let victim = admitted(&store, lease("victim", "v")).await;
        let bystander = admitted(&store, lease("bystander", "b")).await;
        clock.advance(TTL * 2);
        Leases {
            _directory: directory,
            path,
            store,
            victim: victim.claim().expect("an owned record"),
            bystander,
        }
    }
}

const LEASE_TABLES: &[&str] = &["leases", "lease_scopes", "held_scopes", "fence_counter"];

fn lease_damages() -> Vec<Damage> {
    let mut all = damages(
        "leases",
        "id = 'victim'",
        &[
            ("kind", BAD_TEXT),
            (
                "status",
                &["'bogus'", "''", "7", BLOB, INVALID_UTF8] as &[&str],
            ),
            ("owner", BAD_TEXT),
            ("fence", BAD_FENCES),
            ("lease_expires_at", BAD_TIMESTAMPS),
            ("created_at", BAD_TIMESTAMPS),
            ("updated_at", BAD_TIMESTAMPS),
            ("error", BAD_TEXT),
            ("stop_reason", BAD_TEXT),
            (
                "metadata",
                &[
                    "'not json'",
                    "'[1]'",
                    "'\"text\"'",
                    "''",
                    BLOB,
                    INVALID_UTF8,
                ],
            ),
            ("slots", BAD_SLOTS),
        ],
    );
    all.extend(
        damages(
            "lease_scopes",
            "lease_id = 'victim'",
            &[("scope", &[BLOB] as &[&str])],
        )
        .into_iter()
        .map(|damage| Damage {
            reported_as: "scopes",
            ..damage
        }),
    );
    all
}

#[tokio::test]
async fn every_damaged_lease_column_is_corrupt_for_point_reads_and_skipped_by_scans() {
    for damage in lease_damages() {
        let leases = Leases::new().await;
        let store = &leases.store;
        damage.apply(&leases.path);
        let damaged = everything(&leases.path, LEASE_TABLES);

        let names = "\"victim\"";
        assert_corrupt(store.get("victim").await, &damage, "get", names);
        assert_eq!(
            store.get("bystander").await.expect("get"),
            Some(leases.bystander.clone()),
            "{damage:?}"
        );

        let scan = store
            .list_expired(&ExpiredQuery::new(Duration::ZERO))
            .await
            .unwrap_or_else(|error| panic!("{damage:?}: the scan failed: {error}"));
        assert_eq!(
            scan.records,
            vec![leases.bystander.clone()],
            "{damage:?}: the scan serves the other rows"
        );
        assert_eq!(scan.skipped.len(), 1, "{damage:?}: {scan:?}");
        assert_eq!(scan.skipped[0].id, "victim", "{damage:?}");
        assert!(
            scan.skipped[0].reason.contains(damage.reported_as),
            "{damage:?}: the skip report names the column: {}",
            scan.skipped[0].reason
        );
        let now = store.now().await.expect("now");
        let bounded = store
            .list_expired(&ExpiredQuery::new(Duration::ZERO).created_before(now))
            .await
            .unwrap_or_else(|error| panic!("{damage:?}: the bounded scan failed: {error}"));
        assert_eq!(
            (bounded.records.len(), bounded.skipped.len()),
            (1, 1),
            "{damage:?}: a bound on creation still reports the damaged row: {bounded:?}"
        );

        assert_corrupt(store.list_active().await, &damage, "list_active", names);
        if damage.table == "leases" {
            assert_corrupt(
                store.list_by_scope("v").await,
                &damage,
                "list_by_scope",
                names,
            );
        }
        assert_eq!(
            store.list_by_scope("b").await.expect("list_by_scope"),
            vec![leases.bystander.clone()],
            "{damage:?}"
        );

        assert_corrupt(
            store
                .admit(&AdmitRequest::new("intruder", "worker-b").scope("v"))
                .await,
            &damage,
            "admit over its scope",
            names,
        );
        let same_id = store
            .admit(&AdmitRequest::new("victim", "worker-b").scope("elsewhere"))
            .await
            .expect_err("a damaged row's id is still taken");
        assert_eq!(same_id.kind(), ErrorKind::AlreadyExists, "{damage:?}");
        assert_corrupt(
            store.renew(&leases.victim, LONG_TTL).await,
            &damage,
            "renew",
            names,
        );
        let bystander_claim = leases.bystander.claim().expect("an owned record");
        assert_corrupt(
            store
                .renew_many(&[bystander_claim.clone(), leases.victim.clone()], LONG_TTL)
                .await,
            &damage,
            "renew_many",
            names,
        );
        assert_corrupt(
            store
                .transition(&leases.victim, &StatusChange::succeeded())
                .await,
            &damage,
            "transition",
            names,
        );
        for takeover in [
            TakeoverRequest::adopt("victim", "worker-b", Some(LONG_TTL)),
            TakeoverRequest::fail("victim", "worker-b", "orphaned"),
        ] {
            assert_corrupt(
                store.claim_for_takeover(&takeover).await,
                &damage,
                "claim_for_takeover",
                names,
            );
        }
        assert_eq!(store.purge(Duration::ZERO).await.expect("purge"), 0);
        assert_eq!(
            everything(&leases.path, LEASE_TABLES),
            damaged,
            "{damage:?}: nothing changed, the damaged row included"
        );

        assert!(
            matches!(
                store.renew(&bystander_claim, LONG_TTL).await,
                Ok(Renewal::Renewed { .. })
            ),
            "{damage:?}: the other lease still works"
        );
    }
}

#[tokio::test]
async fn a_damaged_scope_holder_is_corrupt_for_admissions_over_that_scope() {
    for (value, names) in [(BLOB, "lease_id"), ("'ghost'", "does not exist")] {
        let leases = Leases::new().await;
        raw_connection(&leases.path)
            .execute(
                &format!("UPDATE held_scopes SET lease_id = {value} WHERE scope = 'v'"),
                [],
            )
            .expect("damage the holder of scope v");
        let damaged = everything(&leases.path, LEASE_TABLES);
        let error = leases
            .store
            .admit(&AdmitRequest::new("intruder", "worker-b").scope("v"))
            .await
            .expect_err("a damaged holder cannot be judged");
        assert_eq!(error.kind(), ErrorKind::Corrupt, "{value}: {error}");
        assert!(
            error.message().contains("\"v\"") && error.message().contains(names),
            "{value}: the error names the scope and what is wrong: {error}"
        );
        assert_eq!(everything(&leases.path, LEASE_TABLES), damaged, "{value}");
        admitted(
            &leases.store,
            AdmitRequest::new("elsewhere", "worker-b").scope("w"),
        )
        .await;
    }
}

/// A counted scope's holder whose `slots` value cannot be decoded: every
/// admission that finds the scope full, and so must judge it (rejecting or
/// interrupting), answers `Corrupt` naming it and changes nothing; the
/// slot's key stays held, the holder of slot 0 is untouched, and
/// admissions elsewhere go on.
#[tokio::test]
async fn a_damaged_slots_value_is_corrupt_for_admissions_counting_its_slot() {
    for &value in BAD_SLOTS {
        let directory = TempDir::new().expect("a temporary directory");
        let path = directory.path().join("slots.db");
        let clock = Arc::new(ManualClock::starting_now());
        let store = open(&path, &clock).await;
        let counted = |id: &str| {
            AdmitRequest::new(id, "worker-a")
                .counted_scope("c", 2)
                .scope("v")
                .ttl(LONG_TTL)
        };
        let first = admitted(
            &store,
            AdmitRequest::new("first", "worker-a")
                .counted_scope("c", 2)
                .ttl(LONG_TTL),
        )
        .await;
        let victim = admitted(&store, counted("victim")).await;
        assert_eq!((first.slot("c"), victim.slot("c")), (Some(0), Some(1)));
        let held: Vec<Vec<Stored>> = rows(&path, "held_scopes", "1 = 1");
        assert_eq!(
            held,
            vec![
                vec![Stored::Text(b"c".to_vec()), Stored::Text(b"first".to_vec())],
                vec![
                    Stored::Text(b"c\x1f1".to_vec()),
                    Stored::Text(b"victim".to_vec())
                ],
                vec![
                    Stored::Text(b"v".to_vec()),
                    Stored::Text(b"victim".to_vec())
                ],
            ],
            "held_scopes is by slot key"
        );
        let damage = Damage {
            table: "leases",
            column: "slots",
            value,
            filter: "id = 'victim'",
            reported_as: "slots",
        };
        damage.apply(&path);
        let damaged = everything(&path, LEASE_TABLES);

        let names = "\"victim\"";
        assert_corrupt(store.get("victim").await, &damage, "get", names);
        assert_corrupt(
            store.list_by_scope("c").await,
            &damage,
            "list_by_scope",
            names,
        );
        for request in [
            AdmitRequest::new("third", "worker-b").counted_scope("c", 2),
            AdmitRequest::new("third", "worker-a")
                .counted_scope("c", 2)
                .strategy(tenure_lease_core::AdmitStrategy::Interrupt),
        ] {
            assert_corrupt(store.admit(&request).await, &damage, "admit", names);
        }
        assert_corrupt(
            store.renew(&victim.claim().expect("owned"), LONG_TTL).await,
            &damage,
            "renew",
            names,
        );
        assert_eq!(
            everything(&path, LEASE_TABLES),
            damaged,
            "{damage:?}: nothing changed"
        );
        assert_eq!(store.get("first").await.expect("get"), Some(first.clone()));
        assert!(matches!(
            store.renew(&first.claim().expect("owned"), LONG_TTL).await,
            Ok(Renewal::Renewed { .. })
        ));
        admitted(
            &store,
            AdmitRequest::new("elsewhere", "worker-b").counted_scope("d", 2),
        )
        .await;
    }
}

/// Fails before the fence counter was guarded: SQLite reads text as 0 in
/// `last_fence + 1`, so the sequence silently restarted at 1.
#[tokio::test]
async fn a_damaged_fence_counter_is_corrupt_and_never_restarts_the_sequence() {
    for value in ["'garbage'", "1.5", BLOB, "-5", I64_MAX] {
        let leases = Leases::new().await;
        let store = &leases.store;
        store
            .enqueue(&NewJob::new("q", serde_json::json!({})).id("job"))
            .await
            .expect("enqueue");
        raw_connection(&leases.path)
            .execute(
                &format!("UPDATE fence_counter SET last_fence = {value}"),
                [],
            )
            .expect("damage the fence counter");
        let tables = [
            "leases",
            "lease_scopes",
            "held_scopes",
            "fence_counter",
            "jobs",
        ];
        let damaged = everything(&leases.path, &tables);

        let check = |answer: tenure_lease_core::Result<String>, operation: &str| {
            let error = answer.expect_err(operation);
            assert_eq!(
                error.kind(),
                ErrorKind::Corrupt,
                "{value}: {operation}: {error}"
            );
            assert!(
                error.message().contains("fence counter"),
                "{value}: {operation}: {error}"
            );
        };
        check(
            store
                .admit(&AdmitRequest::new("new", "worker-b").scope("n"))
                .await
                .map(|answer| format!("{answer:?}")),
            "admit",
        );
        check(
            store
                .claim_for_takeover(&TakeoverRequest::adopt("victim", "worker-b", None))
                .await
                .map(|answer| format!("{answer:?}")),
            "claim_for_takeover",
        );
        check(
            store
                .claim(&ClaimRequest::new("q", "worker-b", LONG_TTL))
                .await
                .map(|answer| format!("{answer:?}")),
            "claim",
        );
        assert_eq!(everything(&leases.path, &tables), damaged, "{value}");
    }
}

/// A file with six jobs in queue `q`: `victim-` and `good-` each of
/// `queued`, `claimed` (lease expired) and `dead`.
struct Jobs {
    _directory: TempDir,
    path: PathBuf,
    store: SqliteStore,
    victim_claim: JobClaim,
    good: Vec<Job>,
}

const JOB_TABLES: &[&str] = &["jobs", "fence_counter"];
const VICTIMS: [&str; 3] = ["victim-queued", "victim-claimed", "victim-dead"];

impl Jobs {
    async fn new() -> Self {
        let directory = TempDir::new().expect("a temporary directory");
        let path = directory.path().join("jobs.db");
        let clock = Arc::new(ManualClock::starting_now());
        let store = open(&path, &clock).await;
        let job = |id: &str, priority: i32| {
            NewJob::new("q", serde_json::json!({ "id": id }))
                .id(id)
                .priority(priority)
                .max_attempts(3)
        };
        store
            .enqueue_batch(&[
                job("good-claimed", 10),
                job("victim-claimed", 10),
                job("good-dead", 5),
                job("victim-dead", 5),
                job("good-queued", 0),
                job("victim-queued", 0),
            ])
            .await
            .expect("enqueue");
        let claim = |limit| {
            let store = store.clone();
            async move {
                store
                    .claim(&ClaimRequest::new("q", "worker-a", TTL).limit(limit))
                    .await
                    .expect("claim")
            }
        };
        let claimed: Vec<ClaimedJob> = claim(2).await;
        for dead in claim(2).await {
            store
                .fail(&dead.claim, "boom", FailAction::DeadLetter)
                .await
                .expect("dead-letter");
        }
        clock.advance(TTL * 2);
        let victim_claim = claimed
            .iter()
            .find(|claimed| claimed.job.id == "victim-claimed")
            .map(|claimed| claimed.claim.clone())
            .expect("victim-claimed was claimed first");
        let mut good = Vec::new();
        for id in ["good-queued", "good-claimed", "good-dead"] {
            good.push(store.get_job(id).await.expect("get_job").expect(id));
        }
        Jobs {
            _directory: directory,
            path,
            store,
            victim_claim,
            good,
        }
    }
}

fn job_damages() -> Vec<Damage> {
    let counts: &[&str] = &[
        "-1",
        "1001",
        "4294967295",
        I64_MAX,
        "'garbage'",
        "1.5",
        BLOB,
    ];
    let enums: &[&str] = &["'bogus'", "7", BLOB, INVALID_UTF8];
    damages(
        "jobs",
        "id LIKE 'victim-%'",
        &[
            ("queue", BAD_TEXT),
            ("payload", &["'not json'", "''", BLOB, INVALID_UTF8]),
            ("priority", &[I64_MAX, I64_MIN, "'garbage'", "1.5", BLOB]),
            ("run_at", BAD_TIMESTAMPS),
            ("attempt", counts),
            ("max_attempts", counts),
            (
                "required_capabilities",
                &["'not json'", "'[1]'", "'{}'", BLOB, INVALID_UTF8],
            ),
            ("state", enums),
            ("owner", BAD_TEXT),
            ("fence", BAD_FENCES),
            ("lease_expires_at", BAD_TIMESTAMPS),
            ("last_error", BAD_TEXT),
            ("dead_reason", enums),
            ("created_at", BAD_TIMESTAMPS),
            ("updated_at", BAD_TIMESTAMPS),
            ("unique_key", &["'k'", BLOB, INVALID_UTF8]),
            ("unique_policy", &["'while_queued'", "'for_period'", BLOB]),
            ("unique_until", &["5", "'garbage'", "1.5"]),
        ],
    )
}

fn ids(jobs: &[Job]) -> Vec<&str> {
    jobs.iter().map(|job| job.id.as_str()).collect()
}

#[tokio::test]
async fn every_damaged_job_column_is_corrupt_for_point_reads_and_passed_over_by_scans() {
    for damage in job_damages() {
        let jobs = Jobs::new().await;
        let store = &jobs.store;
        damage.apply(&jobs.path);
        let damaged = everything(&jobs.path, JOB_TABLES);

        for id in VICTIMS {
            assert_corrupt(store.get_job(id).await, &damage, "get_job", id);
        }
        for good in &jobs.good {
            assert_eq!(
                store.get_job(&good.id).await.expect("get_job").as_ref(),
                Some(good),
                "{damage:?}"
            );
        }
        // Scans of one queue or one state do not see a job whose queue or
        // state is damaged; every other damaged dead letter spoils the list.
        let dead_letters = store.list_dead_letters("q", 10).await;
        if matches!(damage.column, "queue" | "state") {
            let dead_letters = dead_letters.expect("list_dead_letters");
            assert_eq!(ids(&dead_letters), vec!["good-dead"], "{damage:?}");
        } else {
            assert_corrupt(dead_letters, &damage, "list_dead_letters", "victim-dead");
        }

        let claim = &jobs.victim_claim;
        let names = "victim-claimed";
        assert_corrupt(
            store.renew_job(claim, LONG_TTL).await,
            &damage,
            "renew_job",
            names,
        );
        assert_corrupt(store.complete(claim).await, &damage, "complete", names);
        for action in [
            FailAction::Retry {
                backoff: Duration::ZERO,
            },
            FailAction::DeadLetter,
        ] {
            assert_corrupt(
                store.fail(claim, "boom", action).await,
                &damage,
                "fail",
                names,
            );
        }
        assert_corrupt(
            store.defer(claim, &["gpu".to_owned()].into()).await,
            &damage,
            "defer",
            names,
        );
        assert_corrupt(
            store.take_back(claim, LONG_TTL).await,
            &damage,
            "take_back",
            names,
        );
        assert_corrupt(
            store.retry_dead_letter("victim-dead").await,
            &damage,
            "retry_dead_letter",
            "victim-dead",
        );
        let same_id = store
            .enqueue(&NewJob::new("q", serde_json::json!({})).id("victim-queued"))
            .await
            .expect_err("a damaged job's id is still taken");
        assert_eq!(same_id.kind(), ErrorKind::AlreadyExists, "{damage:?}");
        assert_eq!(
            everything(&jobs.path, JOB_TABLES),
            damaged,
            "{damage:?}: nothing changed, the damaged rows included"
        );

        let claimed = store
            .claim(&ClaimRequest::new("q", "worker-b", LONG_TTL).limit(10))
            .await
            .unwrap_or_else(|error| panic!("{damage:?}: claim failed: {error}"));
        let claimed: Vec<&str> = claimed.iter().map(|c| c.job.id.as_str()).collect();
        assert_eq!(claimed, vec!["good-queued"], "{damage:?}");
        let report = store
            .reap(Duration::ZERO)
            .await
            .unwrap_or_else(|error| panic!("{damage:?}: reap failed: {error}"));
        assert_eq!(
            (ids(&report.requeued), ids(&report.dead_lettered)),
            (vec!["good-claimed"], vec![]),
            "{damage:?}"
        );
        assert_eq!(
            rows(&jobs.path, "jobs", "id LIKE 'victim-%'"),
            damaged[0]
                .iter()
                .filter(|row| matches!(&row[0], Stored::Text(id) if id.starts_with(b"victim-")))
                .cloned()
                .collect::<Vec<_>>(),
            "{damage:?}: claim and reap left the damaged rows alone"
        );
    }
}

/// A damaged rate log is `Corrupt`, naming the log, for an admission and a
/// claim within its limit, and nothing changes (no record, no claim, the
/// log as it was); another limit's log still serves. `purge` deletes logs
/// whose uses all stopped counting and keeps the others, damaged ones too.
#[tokio::test]
async fn a_damaged_rate_log_is_corrupt_and_purge_drops_only_ended_logs() {
    use tenure_lease_core::rate::RateLimit;

    let limit = RateLimit::new("api", 3, LONG_TTL);
    let damages: &[(&str, &str)] = &[
        ("'not json'", "no array"),
        ("'{\"a\":1}'", "no array"),
        ("'[\"x\"]'", "no array"),
        ("'[1,2,3,4]'", "above its 3 permits"),
        ("'[9223372036854775807]'", "no instant"),
        (BLOB, "not text"),
        (INVALID_UTF8, "not UTF-8"),
        ("5", "no array"),
    ];
    for &(value, reason) in damages {
        let directory = TempDir::new().expect("a temporary directory");
        let path = directory.path().join("rate.db");
        let clock = Arc::new(ManualClock::starting_now());
        let store = open(&path, &clock).await;
        admitted(
            &store,
            AdmitRequest::new("first", "worker-a").rate_limit(limit.clone()),
        )
        .await;
        store
            .enqueue(&NewJob::new("q", serde_json::json!({})).id("job"))
            .await
            .expect("enqueue");
        raw_connection(&path)
            .execute(&format!("UPDATE rate_logs SET uses = {value}"), [])
            .expect("damage the log");
        let tables = ["leases", "jobs", "rate_logs"];
        let damaged = everything(&path, &tables);
        let check = |answer: tenure_lease_core::Result<String>, operation: &str| {
            let error = answer.expect_err(operation);
            assert_eq!(
                error.kind(),
                ErrorKind::Corrupt,
                "{value}: {operation}: {error}"
            );
            assert!(
                error.message().contains("3:600000:api") && error.message().contains(reason),
                "{value}: {operation}: the error names the log and what is wrong: {error}"
            );
        };
        check(
            store
                .admit(&AdmitRequest::new("second", "worker-a").rate_limit(limit.clone()))
                .await
                .map(|answer| format!("{answer:?}")),
            "admit",
        );
        let claim = ClaimRequest::new("q", "worker-a", LONG_TTL).rate_limit(limit.clone());
        check(
            store
                .claim_limited(&claim)
                .await
                .map(|answer| format!("{answer:?}")),
            "claim_limited",
        );
        assert_eq!(
            everything(&path, &tables),
            damaged,
            "{value}: nothing changed"
        );
        let other = RateLimit::new("api", 4, LONG_TTL);
        admitted(
            &store,
            AdmitRequest::new("other", "worker-a").rate_limit(other),
        )
        .await;
    }

    let directory = TempDir::new().expect("a temporary directory");
    let path = directory.path().join("purge.db");
    let clock = Arc::new(ManualClock::starting_now());
    let store = open(&path, &clock).await;
    let short = RateLimit::new("short", 1, Duration::from_millis(10));
    let long = RateLimit::new("long", 1, LONG_TTL);
    admitted(
        &store,
        AdmitRequest::new("a", "worker-a").rate_limit(short.clone()),
    )
    .await;
    admitted(
        &store,
        AdmitRequest::new("b", "worker-a").rate_limit(long.clone()),
    )
    .await;
    clock.advance(Duration::from_millis(10));
    assert_eq!(
        store.purge(LONG_TTL).await.expect("purge"),
        0,
        "logs are not counted"
    );
    let keys: Vec<Vec<Stored>> = rows(&path, "rate_logs", "1 = 1");
    assert_eq!(keys.len(), 1, "only the ended log went: {keys:?}");
    assert_eq!(keys[0][0], Stored::Text(b"long".to_vec()));
    let refused = store
        .admit(&AdmitRequest::new("c", "worker-a").rate_limit(long))
        .await
        .expect("admit answers");
    assert!(
        matches!(refused, Admission::RateLimited { .. }),
        "{refused:?}"
    );
}

/// Every column of a gate damaged in turn: a listing that reaches it is
/// `Corrupt`, naming the gate (when its resource reads) and what is wrong,
/// with the very error `highest_fence` gives for a damaged fence; a page
/// that ends before it is served, and nothing changes.
#[tokio::test]
async fn a_damaged_gate_is_corrupt_for_a_listing_that_reaches_it() {
    use tenure_lease_core::FenceStore;

    let bad_fences: Vec<&str> = BAD_FENCES
        .iter()
        .copied()
        .chain(["0", "9007199254740992"])
        .collect();
    let columns: [(&str, &[&str], &str); 3] = [
        ("resource", BAD_TEXT, "resource"),
        ("fence", &bad_fences, "fence"),
        ("checked_at", BAD_TIMESTAMPS, "check time"),
    ];
    for (column, values, reported_as) in columns {
        for &value in values {
            let damage = Damage {
                table: "fence_gates",
                column,
                value,
                filter: "resource = 'victim'",
                reported_as,
            };
            let directory = TempDir::new().expect("a temporary directory");
            let path = directory.path().join("gates.db");
            let clock = Arc::new(ManualClock::starting_now());
            let store = open(&path, &clock).await;
            for resource in ["bystander", "victim"] {
                let check = store.check_fence(resource, 7).await.expect("check");
                assert!(check.is_accepted(), "{resource}");
            }
            damage.apply(&path);
            let damaged = everything(&path, &["fence_gates"]);
            let names = if column == "resource" {
                ""
            } else {
                "\"victim\""
            };
            assert_corrupt(
                store.list_fences(None, 10).await,
                &damage,
                "list_fences",
                names,
            );
            assert_corrupt(
                store.list_fences(Some("bystander"), 1).await,
                &damage,
                "list_fences after the bystander",
                names,
            );
            if column == "fence" {
                let listed = store.list_fences(None, 10).await.expect_err("listed");
                let read = store.highest_fence("victim").await.expect_err("read");
                assert_eq!(listed.message(), read.message(), "{damage:?}");
            }
            let page = store
                .list_fences(None, 1)
                .await
                .unwrap_or_else(|error| panic!("{damage:?}: the page before it: {error}"));
            let page: Vec<(&str, u64)> = page
                .iter()
                .map(|gate| (gate.resource.as_str(), gate.fence))
                .collect();
            assert_eq!(page, [("bystander", 7)], "{damage:?}");
            assert_eq!(
                everything(&path, &["fence_gates"]),
                damaged,
                "{damage:?}: nothing changed"
            );
        }
    }
}
