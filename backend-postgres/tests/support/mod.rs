//! Shared by the server tests: the server URL (or one skip line), a fresh
//! schema per test, its removal afterwards, raw SQL behind the store's back
//! (to damage rows), and the conformance kit's factory.
//!
//! Each test binary uses a subset of these helpers.
#![allow(dead_code)]

use std::future::Future;
use std::io::Write as _;
use std::panic::AssertUnwindSafe;

use async_trait::async_trait;
use futures_util::FutureExt as _;
use tenure_backend_postgres::{PgStore, PgStoreConfig};
use tenure_conformance::damage::{BadTime, Damage, DamageOutcome, Damager, Target, TimeField};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};

/// Runs `sql`, with `$schema` standing for the store's quoted schema, on a
/// connection of its own (to damage or inspect what the store keeps).
pub async fn execute(url: &str, store: &PgStore, sql: &str) {
    try_execute(url, store, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

/// [`execute`], answering the error instead of panicking.
pub async fn try_execute(url: &str, store: &PgStore, sql: &str) -> Result<(), sqlx::Error> {
    // A pool of one rather than a bare connection: its future is `Send`,
    // as the kit's damager needs.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?;
    let sql = sql.replace("$schema", &format!("\"{}\"", store.schema()));
    let outcome = sqlx::raw_sql(&sql).execute(&pool).await.map(drop);
    pool.close().await;
    outcome
}

/// Lifts the checks of `leases` that every damage would otherwise trip.
pub const DROP_LEASE_CHECKS: &str = "ALTER TABLE $schema.leases \
     DROP CONSTRAINT IF EXISTS leases_status_known, \
     DROP CONSTRAINT IF EXISTS leases_fence_positive, \
     DROP CONSTRAINT IF EXISTS leases_metadata_object;";
/// Lifts the checks of `jobs` that every damage would otherwise trip.
pub const DROP_JOB_CHECKS: &str = "ALTER TABLE $schema.jobs \
     DROP CONSTRAINT IF EXISTS jobs_attempt_counted, \
     DROP CONSTRAINT IF EXISTS jobs_max_attempts_positive, \
     DROP CONSTRAINT IF EXISTS jobs_state_known, \
     DROP CONSTRAINT IF EXISTS jobs_fence_counted, \
     DROP CONSTRAINT IF EXISTS jobs_dead_reason_known;";

/// The SQL that applies the kit's `damage` to `target`, or `None` when a
/// column's type cannot hold it (text for a timestamp, a fence beyond
/// `bigint`, a payload that is not JSON in `jsonb`).
fn damage_sql(target: &Target, damage: Damage) -> Option<String> {
    let (table, checks, id) = match target {
        Target::Lease(id) => ("leases", DROP_LEASE_CHECKS, id),
        Target::Job(id) => ("jobs", DROP_JOB_CHECKS, id),
        _ => return None,
    };
    let is_job = table == "jobs";
    let id = id.replace('\'', "''");
    let mut before = String::new();
    let (column, value) = match damage {
        Damage::Timestamp(field, bad) => {
            let column = match field {
                TimeField::CreatedAt => "created_at",
                TimeField::UpdatedAt => "updated_at",
                TimeField::LeaseExpiresAt => "lease_expires_at",
                TimeField::RunAt if is_job => "run_at",
                _ => return None,
            };
            let value = match bad {
                BadTime::OutOfRange => "'270000-01-01 00:00:00+00'",
                BadTime::NotFinite => "'infinity'",
                _ => return None,
            };
            (column, value)
        }
        Damage::UnknownStatus if is_job => ("state", "'bogus'"),
        Damage::UnknownStatus => {
            // A record no longer active may not keep a held scope.
            before = format!("DELETE FROM $schema.held_scopes WHERE lease_id = '{id}';");
            ("status", "'bogus'")
        }
        Damage::NegativeFence => ("fence", "-5"),
        Damage::NegativeAttempt if is_job => ("attempt", "-1"),
        Damage::HugeAttempt if is_job => ("attempt", "1001"),
        Damage::MalformedScopes if !is_job => ("scopes", "'{NULL}'"),
        Damage::MalformedMetadata if !is_job => ("metadata", "'[1, 2]'"),
        Damage::MalformedCapabilities if is_job => ("required_capabilities", "'{NULL}'"),
        _ => return None,
    };
    Some(format!(
        "{checks} {before} UPDATE $schema.{table} SET {column} = {value} WHERE id = '{id}';"
    ))
}

/// The environment variable holding the test server's URL.
pub const URL_VAR: &str = "TENURE_PG_URL";

/// Connections per test store: the server is shared by concurrent test runs.
pub const POOL_SIZE: u32 = 4;

/// The server URL, or `None` after printing one skip line for `test` (past
/// the harness's capture). Panics instead when services are required.
pub fn server_url(test: &str) -> Option<String> {
    if let Some(url) = tenure_conformance::service_url(URL_VAR) {
        return Some(url);
    }
    if tenure_conformance::services_required() {
        panic!(
            "{test}: {URL_VAR} is not set, but {}=1 requires it",
            tenure_conformance::REQUIRE_SERVICES_VAR
        );
    }
    let line = format!("SKIPPED {test}: {URL_VAR} is not set\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    None
}

/// `url` with a startup option making `isolation` its sessions' default
/// (spaces escaped for the option, then percent-encoded for the URL).
pub fn with_isolation(url: &str, isolation: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    let value = isolation.replace(' ', "%5C%20");
    format!("{url}{separator}options=-c%20default_transaction_isolation%3D{value}")
}

/// A schema name no other test or run uses.
pub fn fresh_schema() -> String {
    format!(
        "tenure_test_{}",
        tenure_lease_core::generate_id().replace('-', "")
    )
}

/// A migrated store in `schema`, with a small pool.
pub async fn connect(url: &str, schema: &str) -> tenure_lease_core::Result<PgStore> {
    PgStore::connect(
        &PgStoreConfig::new(url)
            .schema(schema)
            .max_connections(POOL_SIZE),
    )
    .await
}

/// Runs `body` on a store in a fresh schema, dropped afterwards even when
/// the body panics (the panic is then re-raised). Skips when no server is
/// configured.
pub async fn with_store<F, Fut>(test: &str, body: F)
where
    F: FnOnce(PgStore, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(url) = server_url(test) else { return };
    let store = match connect(&url, &fresh_schema()).await {
        Ok(store) => store,
        Err(error) => panic!("{test}: could not create a store: {error}"),
    };
    let outcome = AssertUnwindSafe(body(store.clone(), url))
        .catch_unwind()
        .await;
    if let Err(error) = store.drop_schema().await {
        panic!("{test}: {error}");
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The conformance kit's factory: a fresh schema per case on the server at
/// `TENURE_PG_URL`, dropped at teardown. The server's clock cannot be moved:
/// cases wait on it.
pub struct PgFactory {
    url: Option<String>,
}

impl PgFactory {
    /// A factory for the server named by [`URL_VAR`], if any.
    pub fn from_env() -> Self {
        PgFactory {
            url: tenure_conformance::service_url(URL_VAR),
        }
    }

    /// A factory for the server named by [`URL_VAR`], if any, whose
    /// sessions default to `isolation` (a startup option in the URL, as a
    /// deployment might set it).
    pub fn from_env_at_isolation(isolation: &str) -> Self {
        PgFactory {
            url: tenure_conformance::service_url(URL_VAR)
                .map(|url| with_isolation(&url, isolation)),
        }
    }
}

#[async_trait]
impl Factory for PgFactory {
    type Store = PgStore;

    fn unavailable_reason(&self) -> Option<String> {
        match self.url {
            Some(_) => None,
            None => Some(format!("{URL_VAR} is not set")),
        }
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<PgStore>> {
        let url = self.url.as_deref().ok_or_else(|| {
            tenure_lease_core::Error::new(tenure_lease_core::ErrorKind::Config, "no server URL")
        })?;
        Ok(Subject {
            store: connect(url, &fresh_schema()).await?,
            clock: ClockControl::Real,
        })
    }

    async fn teardown(&self, store: &PgStore) -> tenure_lease_core::Result<()> {
        store.drop_schema().await
    }

    /// Damage by SQL on a connection of its own, the checks that would
    /// refuse it lifted first.
    fn damager(&self) -> Option<Damager<PgStore>> {
        let url = self.url.clone().unwrap_or_default();
        Some(std::sync::Arc::new(
            move |store: std::sync::Arc<PgStore>, target: Target, damage: Damage| {
                let url = url.clone();
                Box::pin(async move {
                    let Some(sql) = damage_sql(&target, damage) else {
                        return Ok(DamageOutcome::CannotHold);
                    };
                    try_execute(&url, &store, &sql).await.map_err(|error| {
                        tenure_lease_core::Error::unavailable(format!(
                            "cannot damage {target:?} with {damage}"
                        ))
                        .with_source(error)
                    })?;
                    Ok(DamageOutcome::Applied)
                })
            },
        ))
    }

    /// Rows per table of the case's schema.
    fn footprint_probe(&self) -> Option<FootprintProbe<PgStore>> {
        Some(std::sync::Arc::new(|store: std::sync::Arc<PgStore>| {
            Box::pin(async move { count_rows(&store).await })
        }))
    }
}

/// Rows per table of `store`'s schema.
async fn count_rows(store: &PgStore) -> tenure_lease_core::Result<Footprint> {
    let failed = |error: sqlx::Error| {
        tenure_lease_core::Error::unavailable("cannot count the rows of the case's schema")
            .with_source(error)
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY tablename",
    )
    .bind(store.schema())
    .fetch_all(store.pool())
    .await
    .map_err(failed)?;
    let mut footprint = Footprint::new();
    for table in tables {
        let rows: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM \"{}\".\"{table}\"",
            store.schema()
        ))
        .fetch_one(store.pool())
        .await
        .map_err(failed)?;
        footprint.insert(table, u64::try_from(rows).unwrap_or(u64::MAX));
    }
    Ok(footprint)
}
