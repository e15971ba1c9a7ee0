//! Shared by the server tests: the server URL (or one skip line), a fresh
//! schema per test, its removal afterwards, raw SQL behind the store's back
//! (to damage rows), and the conformance kit's factory with every
//! capability of the kit's suites: a second store through a `FaultProxy`,
//! schemas other processes open, a private server to restart, and
//! misdeployed schemas to refuse.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt as _;
use tenure_backend_postgres::{PgStore, PgStoreConfig};
use tenure_conformance::damage::{BadTime, Damage, DamageOutcome, Damager, Target, TimeField};
use tenure_conformance::offset_clock::ClockOffsetter;
use tenure_conformance::reopen::Reopener;
use tenure_conformance::suites::deployment::{DeploymentSupport, Misdeployment};
use tenure_conformance::suites::nemesis::{FailoverSupport, NemesisSupport, Topology};
use tenure_conformance::suites::network::{
    BehindFaults, CutAfter, NetworkProfile, NetworkSupport, RoundTrips, ScopeAfterCut,
};
use tenure_conformance::suites::process::{ProcessSupport, SharedStore};
use tenure_conformance::suites::restart::{PrivateServer, RestartSupport};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use tenure_lease_core::{Clock, Error, ErrorKind};
use tenure_test_support::postgres_pair::PrivatePostgresPair;
use tenure_test_support::servers::PrivatePostgres;
use tenure_test_support::FaultProxy;

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
     DROP CONSTRAINT IF EXISTS jobs_dead_reason_known, \
     DROP CONSTRAINT IF EXISTS jobs_taken_back_counted, \
     DROP CONSTRAINT IF EXISTS jobs_unique_policy_known;";

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
                TimeField::TakenBackAt if is_job => "taken_back_at",
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
        Damage::NegativeTakeBacks if is_job => ("taken_back", "-1"),
        _ => return None,
    };
    Some(format!(
        "{checks} {before} UPDATE $schema.{table} SET {column} = {value} WHERE id = '{id}';"
    ))
}

/// Connections per test store: the server is shared by concurrent test runs.
pub const POOL_SIZE: u32 = 4;

/// The server URL, or `None` after printing one skip line for `test` (past
/// the harness's capture). Panics instead when services are required.
pub fn server_url(test: &str) -> Option<String> {
    tenure_test_support::shared::postgres_url_for(test)
}

/// `url` with a startup option making `isolation` its sessions' default
/// (spaces escaped for the option, then percent-encoded for the URL).
pub fn with_isolation(url: &str, isolation: &str) -> String {
    with_option(url, &format!("default_transaction_isolation={isolation}"))
}

/// `url` with the startup option `setting` (`name=value`) for every
/// session (spaces escaped for the option, then percent-encoded for the
/// URL).
pub fn with_option(url: &str, setting: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    let value = setting.replace(' ', "%5C%20").replace('=', "%3D");
    format!("{url}{separator}options=-c%20{value}")
}

/// A schema name no other test or run uses.
pub fn fresh_schema() -> String {
    format!(
        "tenure_test_{}",
        tenure_lease_core::generate_id().replace('-', "")
    )
}

/// A migrated store in `schema`, with a small pool.
/// Offsets the server clock of `store`'s schema by `offset`, run as the
/// admin `url` names: the schema gets its own `now()`,
/// `clock_timestamp()`, `statement_timestamp()` and
/// `transaction_timestamp()` (pg_catalog's plus the offset), and the
/// store's own functions look in the schema first; a session then finds
/// them through the `search_path` of [`on_offset_clock`] (the store's
/// tables are named with their schema).
///
/// # Errors
///
/// When the admin statements fail.
pub async fn offset_schema_clock(
    url: &str,
    store: &PgStore,
    offset: chrono::TimeDelta,
) -> tenure_lease_core::Result<()> {
    let micros = offset.num_microseconds().ok_or_else(|| {
        Error::new(
            ErrorKind::Config,
            format!("a clock offset of {offset} is too large"),
        )
    })?;
    let functions: String = [
        ("now", "STABLE"),
        ("clock_timestamp", "VOLATILE"),
        ("statement_timestamp", "STABLE"),
        ("transaction_timestamp", "STABLE"),
    ]
    .iter()
    .map(|(name, volatility)| {
        format!(
            "CREATE OR REPLACE FUNCTION $schema.{name}() RETURNS timestamptz \
             LANGUAGE sql {volatility} AS \
             $$ SELECT pg_catalog.{name}() + {micros} * interval '1 microsecond' $$;"
        )
    })
    .collect();
    // The store's own functions keep the search_path they were created
    // with, where pg_catalog comes first.
    let functions = format!(
        "{functions} DO $do$ DECLARE f regprocedure; BEGIN \
         FOR f IN SELECT oid::regprocedure FROM pg_proc \
         WHERE pronamespace = '$schema'::regnamespace AND proconfig IS NOT NULL \
         LOOP EXECUTE format('ALTER FUNCTION %s SET search_path = %I, \
         pg_catalog, pg_temp', f, '{}'); END LOOP; END $do$;",
        store.schema()
    );
    try_execute(url, store, &functions)
        .await
        .map_err(|error| Error::unavailable("cannot offset the schema's clock").with_source(error))
}

/// `url` with sessions finding `schema`'s offset clock
/// ([`offset_schema_clock`]) before pg_catalog's.
pub fn on_offset_clock(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options[search_path]={schema},pg_catalog")
}

pub async fn connect(url: &str, schema: &str) -> tenure_lease_core::Result<PgStore> {
    PgStore::connect(
        PgStoreConfig::new(url)
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
/// `TENURE_PG_URL` (else the binary's private server), dropped at teardown. The server's clock cannot be moved:
/// cases wait on it.
pub struct PgFactory {
    /// The server, or why there is none.
    url: Result<String, String>,
    /// The failover topology's primary waits for its standby at every
    /// commit (`synchronous_standby_names`).
    synchronous_standby: bool,
}

impl PgFactory {
    /// A factory for the server named by `TENURE_PG_URL`, else the binary's
    /// private server.
    pub fn from_env() -> Self {
        PgFactory {
            url: tenure_test_support::shared::postgres_url(),
            synchronous_standby: false,
        }
    }

    /// [`from_env`](Self::from_env), but the failover topology's primary
    /// waits for its standby at every commit.
    pub fn with_synchronous_standby() -> Self {
        PgFactory {
            synchronous_standby: true,
            ..Self::from_env()
        }
    }

    /// [`from_env`](Self::from_env)'s server, whose sessions default to
    /// `isolation` (a startup option in the URL, as a deployment might set
    /// it).
    pub fn from_env_at_isolation(isolation: &str) -> Self {
        PgFactory {
            url: tenure_test_support::shared::postgres_url()
                .map(|url| with_isolation(&url, isolation)),
            synchronous_standby: false,
        }
    }
}

#[async_trait]
impl Factory for PgFactory {
    type Store = PgStore;

    fn unavailable_reason(&self) -> Option<String> {
        self.url.as_ref().err().cloned()
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<PgStore>> {
        Ok(Subject {
            store: connect(self.url()?, &fresh_schema()).await?,
            clock: ClockControl::Real,
        })
    }

    async fn teardown(&self, store: &PgStore) -> tenure_lease_core::Result<()> {
        store.drop_schema().await
    }

    fn network(&self) -> Option<&dyn NetworkSupport<PgStore>> {
        Some(self)
    }

    fn processes(&self) -> Option<&dyn ProcessSupport<PgStore>> {
        Some(self)
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<PgStore>> {
        Some(self)
    }

    fn restart(&self) -> Option<&dyn RestartSupport<PgStore>> {
        Some(self)
    }

    fn failover(&self) -> Option<&dyn FailoverSupport<PgStore>> {
        Some(self)
    }

    fn deployment(&self) -> Option<&dyn DeploymentSupport> {
        Some(self)
    }

    /// A second store, with a pool of its own, on the case's schema.
    fn reopen(&self) -> Option<Reopener<PgStore>> {
        let url = self.url.clone().unwrap_or_default();
        Some(std::sync::Arc::new(
            move |store: std::sync::Arc<PgStore>| {
                let url = url.clone();
                Box::pin(async move { connect(&url, store.schema()).await })
            },
        ))
    }

    /// The case's schema with its clock offset ([`offset_schema_clock`]),
    /// opened again on it.
    fn clock_offset(&self) -> Option<ClockOffsetter<PgStore>> {
        let url = self.url.clone().unwrap_or_default();
        Some(std::sync::Arc::new(
            move |store: std::sync::Arc<PgStore>, offset: chrono::TimeDelta| {
                let url = url.clone();
                Box::pin(async move {
                    offset_schema_clock(&url, &store, offset).await?;
                    connect(&on_offset_clock(&url, store.schema()), store.schema())
                        .await
                        .map(Into::into)
                })
            },
        ))
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

/// How long a store behind faults waits for a connection (checked or new).
pub const CONNECTION_WAIT: Duration = Duration::from_millis(500);
/// How long one operation of a store behind faults may take: a silent
/// server answers `Timeout` within it (the store sends its statement on a
/// connection it kept, unchecked), yet an admission on a loaded CI machine
/// fits (at 500 ms one ran out after committing, and the keeper's retry met
/// its own record).
const PROXIED_OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// Tries at connecting a store behind faults.
const CONNECT_ATTEMPTS: u32 = 10;
/// Connections of a pool behind faults.
pub const PROXIED_POOL_SIZE: u32 = 2;
/// The request that commits an admission's transaction: sqlx sends `COMMIT`
/// as a simple-query message (`Q`, length 11, the text, a NUL). The whole
/// message, because the bare word also occurs in the transaction's
/// `BEGIN ISOLATION LEVEL READ COMMITTED`.
const COMMIT: &[u8] = b"Q\x00\x00\x00\x0bCOMMIT\x00";
/// The request that interrupts the holders inside an admission's
/// transaction: the only one carrying the interrupted records' stop reason.
pub const INTERRUPT: &[u8] = tenure_lease_core::backend::rules::INTERRUPTED_BY_ADMISSION.as_bytes();
/// Bound on each call and on waiting for a connection to the private
/// server of the restart suite, so calls during the outage fail quickly.
const RESTART_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// A migration version no release of tenure has: the mark of a schema
/// written by a newer one.
const FUTURE_MIGRATION: i64 = 99_990_101_000_000;

/// The proxied URL with TLS off: the proxy finds its markers in the bytes it
/// forwards, which a TLS session (negotiated under the default
/// `sslmode=prefer` whenever the server offers it) would hide.
pub fn plaintext(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=disable")
}

/// Connects a store, trying again while connecting times out: on a busy
/// machine a new session can take longer than the short
/// [`CONNECTION_WAIT`] the fault scenarios need.
pub async fn connect_patiently(config: &PgStoreConfig) -> tenure_lease_core::Result<PgStore> {
    let mut attempts_left = CONNECT_ATTEMPTS;
    loop {
        attempts_left -= 1;
        match PgStore::connect(config.clone()).await {
            Err(error) if error.is_retryable() && attempts_left > 0 => {}
            answer => return answer,
        }
    }
}

impl PgFactory {
    fn url(&self) -> tenure_lease_core::Result<&str> {
        self.url
            .as_deref()
            .map_err(|why| Error::new(ErrorKind::Config, why.clone()))
    }
}

/// An admission that interrupts first reads the holders on its own (the
/// first request naming the new id), then interrupts them in a
/// transaction: cut after the read, or after the interrupt (before its
/// `COMMIT`), it leaves the scope as before; cut after the `COMMIT`, it
/// lands whole. An admission into a free scope is one call that commits on
/// its own: the reply to the request naming the new id is the one sent
/// after its commit.
#[async_trait]
impl NetworkSupport<PgStore> for PgFactory {
    fn profile(&self) -> NetworkProfile {
        NetworkProfile {
            admission_cuts: vec![
                (CutAfter::NewId, ScopeAfterCut::AsBefore),
                (CutAfter::Bytes(INTERRUPT), ScopeAfterCut::AsBefore),
                (CutAfter::Bytes(COMMIT), ScopeAfterCut::FullyAdmitted),
            ],
            commit: CutAfter::NewId,
            round_trips: Some(RoundTrips::ONE_EACH),
        }
    }

    async fn connect_behind_faults(
        &self,
        direct: &PgStore,
    ) -> tenure_lease_core::Result<BehindFaults<PgStore>> {
        let (proxy, proxied_url) = FaultProxy::in_front_of(self.url()?)
            .await
            .map_err(|error| Error::unavailable("cannot start the proxy").with_source(error))?;
        let config = PgStoreConfig::new(plaintext(&proxied_url))
            .schema(direct.schema())
            .max_connections(PROXIED_POOL_SIZE)
            .acquire_timeout(CONNECTION_WAIT)
            .operation_timeout(PROXIED_OPERATION_TIMEOUT);
        Ok(BehindFaults {
            store: connect_patiently(&config).await?,
            faults: Arc::new(proxy),
        })
    }
}

/// A fresh schema, named to the children.
#[async_trait]
impl ProcessSupport<PgStore> for PgFactory {
    async fn create_shared(&self) -> tenure_lease_core::Result<SharedStore<PgStore>> {
        let schema = fresh_schema();
        Ok(SharedStore {
            store: connect(self.url()?, &schema).await?,
            address: schema,
        })
    }

    async fn open_shared(&self, schema: &str) -> tenure_lease_core::Result<PgStore> {
        connect(self.url()?, schema).await
    }
}

/// `initdb` + `pg_ctl` in a temporary directory; the shared server is never
/// stopped.
#[async_trait]
impl RestartSupport<PgStore> for PgFactory {
    fn unavailable_reason(&self) -> Option<String> {
        PrivatePostgres::unavailable_reason()
    }

    async fn start_private(&self) -> tenure_lease_core::Result<PrivateServer<PgStore>> {
        let server = PrivatePostgres::start().await.map_err(|error| {
            Error::unavailable("cannot start a private PostgreSQL").with_source(error)
        })?;
        let store = PgStore::connect(
            PgStoreConfig::new(server.url())
                .schema("restart")
                .max_connections(8)
                .acquire_timeout(RESTART_CALL_TIMEOUT)
                .operation_timeout(RESTART_CALL_TIMEOUT),
        )
        .await?;
        Ok(PrivateServer {
            store,
            server: Box::new(server),
        })
    }
}

/// A private primary with a streaming standby behind a proxy that follows
/// the primary; the store's gates refuse fences from before a promotion.
/// Replication is asynchronous unless the factory asks for a synchronous
/// standby.
#[async_trait]
impl FailoverSupport<PgStore> for PgFactory {
    fn unavailable_reason(&self) -> Option<String> {
        PrivatePostgres::unavailable_reason()
    }

    async fn start_topology(&self) -> tenure_lease_core::Result<Topology<PgStore>> {
        // The server's own default stays `local`: the store requiring a
        // synchronous standby commits with `on` by itself.
        let settings: &[&str] = if self.synchronous_standby {
            &["synchronous_standby_names=*", "synchronous_commit=local"]
        } else {
            &[]
        };
        let pair = PrivatePostgresPair::start(settings)
            .await
            .map_err(|error| {
                Error::unavailable("cannot start a private PostgreSQL primary and standby")
                    .with_source(error)
            })?;
        let store = PgStore::connect(
            PgStoreConfig::new(pair.url())
                .schema("failover")
                .refuse_fences_from_before_failover(true)
                .require_synchronous_standby(self.synchronous_standby)
                .max_connections(8)
                .acquire_timeout(RESTART_CALL_TIMEOUT)
                .operation_timeout(RESTART_CALL_TIMEOUT),
        )
        .await?;
        Ok(Topology {
            store,
            control: Box::new(pair),
            asynchronous: !self.synchronous_standby,
            failover_every: Duration::from_millis(2500),
        })
    }
}

/// A schema carrying a migration no release has (written by a newer
/// version of tenure), in a fresh schema on the shared server, dropped
/// afterwards.
#[async_trait]
impl DeploymentSupport for PgFactory {
    fn unavailable_reason(&self) -> Option<String> {
        Factory::unavailable_reason(self)
    }

    fn misdeployments(&self) -> Vec<Misdeployment> {
        vec![Misdeployment::new(
            "a schema written by a newer version of tenure",
            ErrorKind::Incompatible,
            [
                FUTURE_MIGRATION.to_string(),
                "upgrade the library".to_owned(),
            ],
        )]
    }

    async fn connect_misdeployed(&self, _which: &Misdeployment) -> tenure_lease_core::Result<()> {
        let url = self.url()?;
        let store = connect(url, &fresh_schema()).await?;
        // On the store's own pool: a future of `execute`'s single
        // connection is not `Send` for every lifetime, as the trait needs.
        sqlx::query(&format!(
            "INSERT INTO \"{}\"._sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ($1, 'from a newer tenure', true, '\\x00'::bytea, 0)",
            store.schema()
        ))
        .bind(FUTURE_MIGRATION)
        .execute(store.pool())
        .await
        .map_err(|error| Error::unavailable("cannot stage the schema").with_source(error))?;
        let again = connect(url, store.schema()).await;
        store.drop_schema().await?;
        again.map(drop)
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

/// A fresh schema; the server's clock judges expiry, so the given clock is
/// not read.
#[async_trait]
impl NemesisSupport<PgStore> for PgFactory {
    async fn create_on_clock(&self, _clock: Arc<dyn Clock>) -> tenure_lease_core::Result<PgStore> {
        Ok(self.create().await?.store)
    }
}
