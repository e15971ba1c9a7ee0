//! Damaged rows: each column of `leases` and of `jobs` in turn holds a value
//! the store cannot represent (PostgreSQL's `infinity` and `-infinity`, an
//! unknown status, malformed JSON shapes, NULL array elements, out-of-range
//! counts and fences), or an unusual one it can (NULL where allowed, the
//! largest fence). No read path may panic: point reads answer `Corrupt`,
//! scans leave the row out (`list_expired` reporting it as skipped), every
//! other call gives a typed answer, and nothing but the damaged row's own
//! writes changes.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenure_backend_postgres::PgStore;
use tenure_lease_core::queue::{ClaimRequest, FailAction, JobQueue, NewJob, UniquePolicy};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    clock, Admission, AdmitRequest, AdmitStrategy, Claim, ErrorKind, ExpiredQuery, LeaseStore,
    Renewal, StatusChange, TakeoverRequest,
};

use support::{execute, with_store, DROP_JOB_CHECKS, DROP_LEASE_CHECKS};

const LONG: Duration = Duration::from_secs(600);

/// The row of `table` with `id`, as PostgreSQL prints it.
async fn row_text(store: &PgStore, table: &str, id: &str) -> Option<String> {
    sqlx::query_scalar(&format!(
        "SELECT t::text FROM \"{}\".{table} t WHERE t.id = $1",
        store.schema()
    ))
    .bind(id)
    .fetch_optional(store.pool())
    .await
    .expect("read row")
}

/// One damage: `column` set to the SQL expression `value`; `corrupt` when
/// no record can represent it.
struct Damage {
    column: &'static str,
    value: &'static str,
    corrupt: bool,
}

const fn damage(column: &'static str, value: &'static str, corrupt: bool) -> Damage {
    Damage {
        column,
        value,
        corrupt,
    }
}

/// Every column of `leases` the store reads, with values it cannot or can
/// represent. (`id` is the primary key; `is_active` is generated.)
const LEASE_DAMAGES: &[Damage] = &[
    damage("lease_expires_at", "'infinity'", true),
    damage("lease_expires_at", "'-infinity'", true),
    damage("lease_expires_at", "NULL", false),
    damage("created_at", "'infinity'", true),
    damage("created_at", "'-infinity'", true),
    damage("updated_at", "'infinity'", true),
    damage("updated_at", "'-infinity'", true),
    damage("status", "'bogus'", true),
    damage("fence", "0", true),
    damage("fence", "-5", true),
    damage("fence", "9223372036854775807", false),
    damage("metadata", "'[1, 2]'", true),
    damage("metadata", "'\"text\"'", true),
    damage("metadata", "'null'", true),
    damage("scopes", "'{NULL}'", true),
    damage("scopes", "'{v, NULL}'", true),
    damage("owner", "NULL", false),
    damage("kind", "''", false),
    damage("error", "NULL", false),
    damage("stop_reason", "NULL", false),
    damage("slots", "'[1, 2]'", true),
    damage("slots", "'\"text\"'", true),
    damage("slots", "'null'", true),
    damage("slots", "'{\"v\": -1}'", true),
    damage("slots", "'{\"v\": 4294967296}'", true),
    damage("slots", "'{\"v\": 1.5}'", true),
    damage("slots", "'{\"v\": \"1\"}'", true),
    damage("slots", "'{\"w\": 1}'", true),
    damage("slots", "'{\"v\": 4294967295}'", true),
    damage("slots", "'{\"v\": 1000}'", true),
    damage("slots", "'{}'", false),
    damage("slots", "'{\"v\": 999}'", false),
];

/// Every column of `jobs` the store reads.
const JOB_DAMAGES: &[Damage] = &[
    damage("run_at", "'infinity'", true),
    damage("run_at", "'-infinity'", true),
    damage("lease_expires_at", "'infinity'", true),
    damage("lease_expires_at", "'-infinity'", true),
    damage("created_at", "'infinity'", true),
    damage("created_at", "'-infinity'", true),
    damage("updated_at", "'infinity'", true),
    damage("updated_at", "'-infinity'", true),
    damage("run_at", "'270000-01-01 00:00:00+00'", true),
    damage("created_at", "'270000-01-01 00:00:00+00'", true),
    damage("state", "'bogus'", true),
    damage("dead_reason", "'bogus'", true),
    damage("attempt", "-1", true),
    damage("attempt", "1001", true),
    damage("attempt", "2147483647", true),
    damage("attempt", "1000", false),
    damage("max_attempts", "-1", true),
    damage("max_attempts", "1001", true),
    damage("fence", "-1", true),
    damage("fence", "9223372036854775807", false),
    damage("required_capabilities", "'{NULL}'", true),
    damage("required_capabilities", "'{gpu, NULL}'", true),
    damage("payload", "'null'", false),
    damage("owner", "NULL", false),
    damage("last_error", "NULL", false),
    damage("dead_reason", "NULL", false),
];

/// Damages of a job's uniqueness columns (migration 0012), each a `SET`
/// list applied to a job enqueued with a key held for an hour, and whether
/// it leaves a uniqueness no job can have.
const UNIQUE_DAMAGES: &[(&str, bool)] = &[
    ("unique_policy = 'bogus'", true),
    ("unique_policy = 'FOR_PERIOD'", true),
    ("unique_until = NULL", true),
    ("unique_policy = 'while_queued'", true),
    ("unique_until = created_at", true),
    ("unique_until = created_at - interval '1 second'", true),
    ("unique_until = 'infinity'", true),
    ("unique_key = NULL", true),
    ("unique_policy = NULL, unique_until = NULL", true),
    ("unique_key = NULL, unique_policy = NULL", true),
    (
        "unique_until = created_at + interval '1001 microseconds'",
        true,
    ),
    ("unique_until = created_at + interval '367 days'", true),
    ("unique_key = ''", true),
    ("unique_key = E'line\\nbreak'", true),
    ("unique_key = repeat('k', 257)", true),
    (
        "unique_key = NULL, unique_policy = NULL, unique_until = NULL",
        false,
    ),
    (
        "unique_policy = 'while_unfinished', unique_until = NULL",
        false,
    ),
    ("unique_until = created_at + interval '1 day'", false),
];

/// Damages of a rate log (migration 0013), each a `SET` list applied to
/// the log of a limit of two permits an hour holding one use, and the
/// permits it leaves, or `None` for a log no store keeps. `$earliest` and
/// `$latest` stand for the first and last instants the crate can
/// represent, in microseconds.
const RATE_LOG_DAMAGES: &[(&str, Option<usize>)] = &[
    ("uses = NULL", None),
    ("uses = '{NULL}'", None),
    ("uses = uses || NULL::bigint", None),
    ("uses = ARRAY[uses, uses]", None),
    ("uses = uses || uses || uses", None),
    ("uses = ARRAY[$latest + 1]", None),
    ("uses = ARRAY[$earliest - 1]", None),
    ("uses = ARRAY[9223372036854775807]", None),
    ("uses = ARRAY[-9223372036854775808]", None),
    ("uses = '{}'", Some(2)),
    ("uses = ARRAY[$latest]", Some(1)),
    ("uses = ARRAY[$earliest]", Some(2)),
    ("uses = uses || uses", Some(0)),
    ("uses = '[0:0]={1}'", Some(2)),
    ("ends_at = 'infinity'", Some(1)),
];

/// Values of `slots` (migration 0014) no record can hold, each set on the
/// holder of slot 1 of a full counted scope `$scope`.
const SLOTS_DAMAGES: &[&str] = &[
    "'[1]'",
    "'1'",
    "'\"text\"'",
    "'null'",
    "'{\"$scope\": null}'",
    "'{\"$scope\": -1}'",
    "'{\"$scope\": 4294967296}'",
    "'{\"$scope\": 1.5}'",
    "'{\"$scope\": 1.0}'",
    "'{\"$scope\": \"1\"}'",
    "'{\"$scope\": [1]}'",
    "'{\"$scope\": 1, \"elsewhere\": 1}'",
];

/// Every `held_scopes` row, as PostgreSQL prints it, by key.
async fn held_rows(store: &PgStore) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "SELECT h::text FROM \"{}\".held_scopes h ORDER BY h.scope",
        store.schema()
    ))
    .fetch_all(store.pool())
    .await
    .expect("read held_scopes")
}

/// The rate log of `key`, as PostgreSQL prints it.
async fn rate_log_text(store: &PgStore, key: &str) -> Option<String> {
    sqlx::query_scalar(&format!(
        "SELECT r::text FROM \"{}\".rate_logs r WHERE r.key = $1",
        store.schema()
    ))
    .bind(key)
    .fetch_optional(store.pool())
    .await
    .expect("read rate log")
}

/// A refusal of the damaged rate log of `key` names it and says why, as
/// the crate decodes it: the server refused no log the crate would accept.
fn assert_log_refused_for_its_reason<T>(
    answer: &tenure_lease_core::Result<T>,
    key: &str,
    what: &str,
) {
    if let Err(error) = answer {
        let message = error.message();
        assert!(
            message.contains(key) && !message.contains("disagree"),
            "{what}: {error}"
        );
    }
}

fn assert_corrupt_or<T: std::fmt::Debug>(
    answer: tenure_lease_core::Result<T>,
    corrupt: bool,
    what: &str,
) -> Option<T> {
    match answer {
        Err(error) if corrupt => {
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{what}: {error}");
            None
        }
        Err(error) => panic!("{what}: a representable value answered {error}"),
        Ok(value) if corrupt => panic!("{what}: an unrepresentable value answered {value:?}"),
        Ok(value) => Some(value),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_lease_column_is_corrupt_or_skipped_never_a_panic() {
    with_store(
        "every_damaged_lease_column_is_corrupt_or_skipped_never_a_panic",
        |store, url| async move {
            execute(&url, &store, DROP_LEASE_CHECKS).await;
            // No lease: the control is always due for `list_expired`.
            let control = match store
                .admit(&AdmitRequest::new("control", "worker-a"))
                .await
                .expect("admit control")
            {
                Admission::Admitted { record, .. } => record,
                other => panic!("{other:?}"),
            };
            let control_row = row_text(&store, "leases", "control").await;
            for (case, damage) in LEASE_DAMAGES.iter().enumerate() {
                let what = format!("leases.{} = {}", damage.column, damage.value);
                let victim = format!("victim-{case}");
                let record = match store
                    .admit(&AdmitRequest::new(&victim, "worker-a").scope("v"))
                    .await
                    .expect("admit victim")
                {
                    Admission::Admitted { record, .. } => record,
                    other => panic!("{what}: {other:?}"),
                };
                // The victim keeps its scope's history but holds it no more:
                // a status no longer active must not keep a held row.
                execute(
                    &url,
                    &store,
                    &format!(
                        "DELETE FROM $schema.held_scopes WHERE lease_id = '{victim}'; \
                         UPDATE $schema.leases SET {} = {} WHERE id = '{victim}';",
                        damage.column, damage.value
                    ),
                )
                .await;
                let damaged_row = row_text(&store, "leases", &victim).await;

                // Point read.
                assert_corrupt_or(store.get(&victim).await, damage.corrupt, &what);
                // Scans: the victim is never listed when corrupt, the control
                // always is; `list_expired` reports what it skipped.
                let scan = store
                    .list_expired(&ExpiredQuery::new(Duration::ZERO))
                    .await
                    .unwrap_or_else(|error| panic!("{what}: list_expired: {error}"));
                assert!(
                    scan.records.iter().any(|record| record.id == "control"),
                    "{what}: {scan:?}"
                );
                if damage.corrupt {
                    assert!(
                        scan.records.iter().all(|record| record.id != victim),
                        "{what}: {scan:?}"
                    );
                }
                let skipped: Vec<&str> = scan.skipped.iter().map(|s| s.id.as_str()).collect();
                assert!(
                    skipped.iter().all(|id| *id == victim),
                    "{what}: skipped {skipped:?}"
                );
                if !skipped.is_empty() {
                    assert!(
                        scan.skipped[0].reason.contains(damage.column),
                        "{what}: {:?}",
                        scan.skipped
                    );
                }
                let by_scope = store.list_by_scope("v").await;
                if let Ok(listed) = &by_scope {
                    assert!(
                        !damage.corrupt || listed.iter().all(|record| record.id != victim),
                        "{what}: {listed:?}"
                    );
                } else if let Err(error) = &by_scope {
                    assert_eq!(error.kind(), ErrorKind::Corrupt, "{what}: {error}");
                }
                match store.list_active().await {
                    Ok(active) => assert!(
                        !damage.corrupt || active.iter().all(|record| record.id != victim),
                        "{what}: {active:?}"
                    ),
                    Err(error) => assert_eq!(error.kind(), ErrorKind::Corrupt, "{what}: {error}"),
                }
                assert_eq!(
                    row_text(&store, "leases", &victim).await,
                    damaged_row,
                    "{what}: a read changed the damaged row"
                );
                assert_eq!(
                    row_text(&store, "leases", "control").await,
                    control_row,
                    "{what}: a read changed another row"
                );

                // Writes on the victim, or reading it back: typed answers.
                let claim = record.claim().expect("claim");
                let _ = store.renew(&claim, LONG).await;
                let _ = store
                    .renew_many(&[claim.clone(), Claim::new("ghost", "worker-a", 1)], LONG)
                    .await;
                let _ = store.transition(&claim, &StatusChange::running()).await;
                let _ = store
                    .claim_for_takeover(&TakeoverRequest::adopt(&victim, "worker-b", Some(LONG)))
                    .await;
                let _ = store
                    .admit(
                        &AdmitRequest::new(format!("successor-{case}"), "worker-a")
                            .scope("v")
                            .strategy(AdmitStrategy::Interrupt),
                    )
                    .await;
                assert_eq!(
                    row_text(&store, "leases", "control").await,
                    control_row,
                    "{what}: a write on the victim changed another row"
                );
                assert_eq!(
                    store.get("control").await.expect("get control"),
                    Some(control.clone())
                );
                execute(
                    &url,
                    &store,
                    "DELETE FROM $schema.held_scopes; \
                     UPDATE $schema.leases SET status = 'failed', fence = 1, scopes = '{v}', \
                     slots = NULL, metadata = '{}', lease_expires_at = NULL, created_at = now(), \
                     updated_at = now() WHERE id <> 'control';",
                )
                .await;
            }
            assert!(store.purge(Duration::ZERO).await.is_ok());
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_job_column_is_corrupt_or_skipped_never_a_panic() {
    with_store(
        "every_damaged_job_column_is_corrupt_or_skipped_never_a_panic",
        |store, url| async move {
            execute(&url, &store, DROP_JOB_CHECKS).await;
            for (case, damage) in JOB_DAMAGES.iter().enumerate() {
                let what = format!("jobs.{} = {}", damage.column, damage.value);
                let queue = format!("q{case}");
                let (victim, control) = (format!("victim-{case}"), format!("control-{case}"));
                let (dead_victim, dead_control) = (
                    format!("dead-victim-{case}"),
                    format!("dead-control-{case}"),
                );
                let jobs: Vec<NewJob> = [&victim, &control, &dead_victim, &dead_control]
                    .into_iter()
                    .map(|id| NewJob::new(&queue, serde_json::json!({ "id": id })).id(id))
                    .collect();
                store.enqueue_batch(&jobs).await.expect("enqueue");
                // Two of them dead-lettered, for list_dead_letters.
                execute(
                    &url,
                    &store,
                    &format!(
                        "UPDATE $schema.jobs SET state = 'dead_lettered', dead_reason = 'failed' \
                         WHERE id IN ('{dead_victim}', '{dead_control}'); \
                         UPDATE $schema.jobs SET {column} = {value} \
                         WHERE id IN ('{victim}', '{dead_victim}');",
                        column = damage.column,
                        value = damage.value
                    ),
                )
                .await;
                let control_row = row_text(&store, "jobs", &dead_control).await;
                let victim_row = row_text(&store, "jobs", &victim).await;

                assert_corrupt_or(store.get_job(&victim).await, damage.corrupt, &what);
                assert_corrupt_or(store.get_job(&dead_victim).await, damage.corrupt, &what);
                let dead = store
                    .list_dead_letters(&queue, 10)
                    .await
                    .unwrap_or_else(|error| panic!("{what}: list_dead_letters: {error}"));
                let dead: Vec<&str> = dead.iter().map(|job| job.id.as_str()).collect();
                assert!(dead.contains(&dead_control.as_str()), "{what}: {dead:?}");
                if damage.corrupt {
                    assert!(!dead.contains(&dead_victim.as_str()), "{what}: {dead:?}");
                }

                // Claims and the reaper skip what they cannot represent: the
                // control is always claimed, then reaped.
                let claimed = store
                    .claim(&ClaimRequest::new(&queue, "worker-a", LONG).limit(10))
                    .await
                    .unwrap_or_else(|error| panic!("{what}: claim: {error}"));
                // (A claim rewrites some columns, repairing them: a victim
                // it answers must then be the job as stored.)
                let claimed_ids: Vec<&str> = claimed.iter().map(|c| c.job.id.as_str()).collect();
                assert!(
                    claimed_ids.contains(&control.as_str()),
                    "{what}: {claimed_ids:?}"
                );
                for each in &claimed {
                    let stored = store
                        .get_job(&each.job.id)
                        .await
                        .expect("answered job reads");
                    assert_eq!(stored.as_ref(), Some(&each.job), "{what}");
                }
                if damage.corrupt {
                    assert_eq!(
                        row_text(&store, "jobs", &victim).await,
                        victim_row,
                        "{what}: claim rewrote a row it cannot answer"
                    );
                }
                execute(
                    &url,
                    &store,
                    &format!(
                        "UPDATE $schema.jobs SET lease_expires_at = now() - interval '1 hour' \
                         WHERE queue = '{queue}' AND state = 'claimed';"
                    ),
                )
                .await;
                let report = store
                    .reap(Duration::ZERO)
                    .await
                    .unwrap_or_else(|error| panic!("{what}: reap: {error}"));
                let reaped: Vec<&str> = report
                    .requeued
                    .iter()
                    .chain(&report.dead_lettered)
                    .map(|job| job.id.as_str())
                    .collect();
                assert!(reaped.contains(&control.as_str()), "{what}: {reaped:?}");
                for job in report.requeued.iter().chain(&report.dead_lettered) {
                    let stored = store.get_job(&job.id).await.expect("answered job reads");
                    assert_eq!(stored.as_ref(), Some(job), "{what}");
                }
                assert_eq!(
                    row_text(&store, "jobs", &dead_control).await,
                    control_row,
                    "{what}: another row changed"
                );

                // Fenced writes and operator calls on the victims: typed answers.
                let claim = tenure_lease_core::queue::JobClaim {
                    id: victim.clone(),
                    owner: "worker-a".to_owned(),
                    fence: 1,
                    attempt: 1,
                };
                let _ = store.renew_job(&claim, LONG).await;
                let _ = store.complete(&claim).await;
                let _ = store.fail(&claim, "boom", FailAction::DeadLetter).await;
                let _ = store
                    .defer(&claim, &BTreeSet::from(["gpu".to_owned()]))
                    .await;
                let _ = store.take_back(&claim, LONG).await;
                let _ = store.retry_dead_letter(&dead_victim).await;
                assert_eq!(
                    row_text(&store, "jobs", &dead_control).await,
                    control_row,
                    "{what}: a write on a victim changed another row"
                );
            }
        },
    )
    .await;
}

/// A job whose uniqueness columns do not decode is `Corrupt` to a point
/// read, left out of listings and claims (its row untouched), and passed
/// over when another job with its key is enqueued; one whose columns are a
/// uniqueness (or none) reads back as it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_uniqueness_is_corrupt_or_skipped_never_a_panic() {
    with_store(
        "every_damaged_uniqueness_is_corrupt_or_skipped_never_a_panic",
        |store, url| async move {
            execute(&url, &store, DROP_JOB_CHECKS).await;
            let hour = UniquePolicy::ForPeriod(Duration::from_secs(3600));
            for (case, (set, corrupt)) in UNIQUE_DAMAGES.iter().enumerate() {
                let what = format!("SET {set}");
                let queue = format!("q{case}");
                let (victim, control) = (format!("victim-{case}"), format!("control-{case}"));
                let jobs = [
                    NewJob::new(&queue, serde_json::json!({}))
                        .id(&victim)
                        .unique("k", hour),
                    NewJob::new(&queue, serde_json::json!({})).id(&control),
                ];
                store.enqueue_unique_batch(&jobs).await.expect("enqueue");
                execute(
                    &url,
                    &store,
                    &format!("UPDATE $schema.jobs SET {set} WHERE id = '{victim}';"),
                )
                .await;
                let victim_row = row_text(&store, "jobs", &victim).await;

                let read = assert_corrupt_or(store.get_job(&victim).await, *corrupt, &what);
                let listed = store
                    .list_jobs(&queue, None, 10)
                    .await
                    .unwrap_or_else(|error| panic!("{what}: list_jobs: {error}"));
                let listed: Vec<&str> = listed.iter().map(|job| job.id.as_str()).collect();
                assert_eq!(
                    listed.contains(&victim.as_str()),
                    !corrupt,
                    "{what}: {listed:?}"
                );

                // Another job with the key: a victim that does not decode
                // holds nothing; one that does is judged by what it says.
                let rival = NewJob::new(&queue, serde_json::json!({}))
                    .id(format!("rival-{case}"))
                    .unique("k", UniquePolicy::WhileQueued);
                let answer = store
                    .enqueue_unique(&rival)
                    .await
                    .unwrap_or_else(|error| panic!("{what}: enqueue_unique: {error}"));
                let held_by_victim = read
                    .flatten()
                    .is_some_and(|job| job.unique.is_some_and(|unique| unique.key == "k"));
                assert_eq!(answer.is_created(), !held_by_victim, "{what}: {answer:?}");

                let claimed = store
                    .claim(&ClaimRequest::new(&queue, "worker-a", LONG).limit(10))
                    .await
                    .unwrap_or_else(|error| panic!("{what}: claim: {error}"));
                let claimed: Vec<&str> = claimed.iter().map(|c| c.job.id.as_str()).collect();
                assert!(claimed.contains(&control.as_str()), "{what}: {claimed:?}");
                assert_eq!(
                    claimed.contains(&victim.as_str()),
                    !corrupt,
                    "{what}: {claimed:?}"
                );
                if *corrupt {
                    assert_eq!(
                        row_text(&store, "jobs", &victim).await,
                        victim_row,
                        "{what}: a call rewrote a row it cannot answer"
                    );
                }
            }
        },
    )
    .await;
}

/// A rate log that does not decode is `Corrupt` to an admission (into
/// free scopes, or one that would interrupt a holder) and to a claim, and
/// they change nothing: no record, no interruption, no claim, the log as
/// it was. It is read only once the id and the scopes admit: a taken id
/// and a blocking holder are answered as ever. One that decodes is
/// judged by what it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_rate_log_is_corrupt_and_changes_nothing() {
    with_store(
        "every_damaged_rate_log_is_corrupt_and_changes_nothing",
        |store, url| async move {
            execute(
                &url,
                &store,
                "ALTER TABLE $schema.rate_logs ALTER COLUMN uses DROP NOT NULL;",
            )
            .await;
            let earliest = clock::to_micros(DateTime::<Utc>::MIN_UTC);
            let latest = clock::to_micros(DateTime::<Utc>::MAX_UTC);
            for (case, (set, left)) in RATE_LOG_DAMAGES.iter().enumerate() {
                let (what, corrupt) = (format!("SET {set}"), &left.is_none());
                let key = format!("log-{case}");
                let limit = RateLimit::new(&key, 2, Duration::from_secs(3600));
                let (scope, queue) = (format!("s-{case}"), format!("q-{case}"));
                let first = store
                    .admit(
                        &AdmitRequest::new(format!("first-{case}"), "worker-a")
                            .rate_limit(limit.clone()),
                    )
                    .await
                    .expect("admit the log's first use");
                assert!(first.admitted().is_some(), "{what}: {first:?}");
                let holder = format!("holder-{case}");
                store
                    .admit(
                        &AdmitRequest::new(&holder, "worker-a")
                            .scope(&scope)
                            .ttl(LONG),
                    )
                    .await
                    .expect("admit the holder");
                let job = store
                    .enqueue(&NewJob::new(&queue, serde_json::json!({})))
                    .await
                    .expect("enqueue");
                let set = set
                    .replace("$earliest", &earliest.to_string())
                    .replace("$latest", &latest.to_string());
                execute(
                    &url,
                    &store,
                    &format!("UPDATE $schema.rate_logs SET {set} WHERE key = '{key}';"),
                )
                .await;
                let log = rate_log_text(&store, &key).await;
                let holder_row = row_text(&store, "leases", &holder).await;
                let job_row = row_text(&store, "jobs", &job.id).await;

                // The id and the scopes first, as without a limit.
                let taken = store
                    .admit(
                        &AdmitRequest::new(format!("first-{case}"), "worker-a")
                            .rate_limit(limit.clone()),
                    )
                    .await
                    .expect_err("a taken id");
                assert_eq!(taken.kind(), ErrorKind::AlreadyExists, "{what}: {taken}");
                let blocked = store
                    .admit(
                        &AdmitRequest::new(format!("blocked-{case}"), "worker-b")
                            .scope(&scope)
                            .strategy(AdmitStrategy::Interrupt)
                            .rate_limit(limit.clone()),
                    )
                    .await
                    .unwrap_or_else(|error| panic!("{what}: blocked admission: {error}"));
                assert!(
                    matches!(blocked, Admission::Conflict { .. }),
                    "{what}: {blocked:?}"
                );
                assert_eq!(rate_log_text(&store, &key).await, log, "{what}");

                let free = store
                    .admit(
                        &AdmitRequest::new(format!("free-{case}"), "worker-a")
                            .rate_limit(limit.clone()),
                    )
                    .await;
                let interrupting = store
                    .admit(
                        &AdmitRequest::new(format!("successor-{case}"), "worker-a")
                            .scope(&scope)
                            .strategy(AdmitStrategy::Interrupt)
                            .rate_limit(limit.clone()),
                    )
                    .await;
                let claimed = store
                    .claim_limited(
                        &ClaimRequest::new(&queue, "worker-a", LONG)
                            .limit(2)
                            .rate_limit(limit.clone()),
                    )
                    .await;
                for answer in [&free, &interrupting] {
                    assert_log_refused_for_its_reason(answer, &key, &what);
                }
                assert_log_refused_for_its_reason(&claimed, &key, &what);
                let free = assert_corrupt_or(free, *corrupt, &format!("{what}: free admission"));
                let interrupting = assert_corrupt_or(
                    interrupting,
                    *corrupt,
                    &format!("{what}: interrupting admission"),
                );
                let claimed = assert_corrupt_or(claimed, *corrupt, &format!("{what}: claim"));
                if *corrupt {
                    assert_eq!(rate_log_text(&store, &key).await, log, "{what}: the log");
                    assert_eq!(
                        row_text(&store, "leases", &holder).await,
                        holder_row,
                        "{what}: the holder"
                    );
                    assert_eq!(
                        row_text(&store, "jobs", &job.id).await,
                        job_row,
                        "{what}: the job"
                    );
                    for id in [format!("free-{case}"), format!("successor-{case}")] {
                        assert_eq!(
                            row_text(&store, "leases", &id).await,
                            None,
                            "{what}: {id} was admitted"
                        );
                    }
                } else {
                    // The admissions use the permits left, in turn; none is
                    // left for the job.
                    let admitted = [free.expect("an answer"), interrupting.expect("an answer")]
                        .iter()
                        .filter(|admission| admission.admitted().is_some())
                        .count();
                    assert_eq!(Some(admitted), *left, "{what}");
                    let claimed = claimed.expect("an answer");
                    assert!(
                        claimed.jobs.is_empty() && claimed.retry_after.is_some(),
                        "{what}: {claimed:?}"
                    );
                    assert_eq!(
                        row_text(&store, "jobs", &job.id).await,
                        job_row,
                        "{what}: the job"
                    );
                }
            }
        },
    )
    .await;
}

/// A record whose `slots` do not decode (migration 0014) is `Corrupt` to a
/// point read, and to the listings that would answer it; an admission
/// that must judge it (its counted scope is full, so every slot's holder
/// counts) is `Corrupt` whether it rejects or interrupts, and changes
/// nothing: no record, no interruption, every key held as before. An
/// admission that does not reach it (slot 0 alone, exclusively) is
/// answered as ever, and the other holder works on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_slots_value_is_corrupt_and_changes_nothing() {
    with_store(
        "every_damaged_slots_value_is_corrupt_and_changes_nothing",
        |store, url| async move {
            for (case, value) in SLOTS_DAMAGES.iter().enumerate() {
                let scope = format!("c{case}");
                let value = value.replace("$scope", &scope);
                let what = format!("slots = {value}");
                let counted = |id: &str, owner: &str| {
                    AdmitRequest::new(format!("{id}-{case}"), owner)
                        .counted_scope(&scope, 2)
                        .ttl(LONG)
                };
                let mut holders = Vec::new();
                for id in ["h0", "h1"] {
                    match store
                        .admit(&counted(id, "worker-a"))
                        .await
                        .expect("admit a holder")
                    {
                        Admission::Admitted { record, .. } => holders.push(record),
                        other => panic!("{what}: {other:?}"),
                    }
                }
                let (h0, h1) = (holders[0].id.clone(), holders[1].id.clone());
                assert_eq!(holders[1].slot(&scope), Some(1), "{what}");
                execute(
                    &url,
                    &store,
                    &format!("UPDATE $schema.leases SET slots = {value} WHERE id = '{h1}';"),
                )
                .await;
                let rows = (
                    row_text(&store, "leases", &h0).await,
                    row_text(&store, "leases", &h1).await,
                    held_rows(&store).await,
                );

                assert_corrupt_or(store.get(&h1).await, true, &what);
                assert_corrupt_or(store.list_by_scope(&scope).await, true, &what);
                assert_corrupt_or(store.list_active().await, true, &what);
                let scan = store
                    .list_expired(&ExpiredQuery::new(Duration::ZERO))
                    .await
                    .unwrap_or_else(|error| panic!("{what}: list_expired: {error}"));
                assert!(scan.skipped.is_empty(), "{what}: a live lease is not due");

                for strategy in [AdmitStrategy::Reject, AdmitStrategy::Interrupt] {
                    let request = counted("new", "worker-b").strategy(strategy);
                    assert_corrupt_or(
                        store.admit(&request).await,
                        true,
                        &format!("{what}: {strategy:?} admission"),
                    );
                    assert_eq!(
                        row_text(&store, "leases", &request.id).await,
                        None,
                        "{what}: {strategy:?} admission stored a record"
                    );
                }
                let exclusive = store
                    .admit(&AdmitRequest::new(format!("slot-0-{case}"), "worker-b").scope(&scope))
                    .await
                    .unwrap_or_else(|error| panic!("{what}: exclusive admission: {error}"));
                assert!(
                    matches!(&exclusive, Admission::Conflict { holder, .. } if holder.id == h0),
                    "{what}: {exclusive:?}"
                );
                assert_eq!(
                    (
                        row_text(&store, "leases", &h0).await,
                        row_text(&store, "leases", &h1).await,
                        held_rows(&store).await,
                    ),
                    rows,
                    "{what}: the holders and their keys"
                );
                let renewed = store
                    .renew(&holders[0].claim().expect("a claim"), LONG)
                    .await
                    .unwrap_or_else(|error| panic!("{what}: renew: {error}"));
                assert!(matches!(renewed, Renewal::Renewed { .. }), "{what}");
                // Out of the way of the next case's listings.
                execute(
                    &url,
                    &store,
                    &format!(
                        "DELETE FROM $schema.held_scopes; \
                         UPDATE $schema.leases SET status = 'failed', slots = NULL \
                         WHERE id IN ('{h0}', '{h1}');"
                    ),
                )
                .await;
            }
        },
    )
    .await;
}
