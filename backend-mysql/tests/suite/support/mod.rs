//! Shared by the server tests: the server URL (or one skip line), a fresh
//! database per test, its removal afterwards, raw SQL behind the store's
//! back, and the conformance kit's factory.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_backend_mysql::{MySqlConfig, MySqlStore};
use tenure_conformance::damage::{Damage, DamageOutcome, Damager, Target};
use tenure_conformance::offset_clock::{ClockOffsetter, OffsetStore};
use tenure_conformance::reopen::Reopener;
use tenure_conformance::suites::deployment::{DeploymentSupport, Misdeployment};
use tenure_conformance::suites::nemesis::NemesisSupport;
use tenure_conformance::suites::network::{
    BehindFaults, CutAfter, NetworkProfile, NetworkSupport, RoundTrips, ScopeAfterCut,
};
use tenure_conformance::suites::process::{ProcessSupport, SharedStore};
use tenure_conformance::suites::restart::{PrivateServer, RestartSupport};
use tenure_conformance::{ClockControl, Factory, Subject};
use tenure_lease_core::{Clock, Error, ErrorKind};
use tenure_test_support::servers::PrivateMariadb;
use tenure_test_support::FaultProxy;

/// Connections per test store: the server is shared by concurrent tests.
pub const POOL_SIZE: u32 = 4;

/// A database name no other test or run uses.
pub fn fresh_database() -> String {
    format!(
        "tenure_test_{}",
        tenure_lease_core::generate_id().replace('-', "")
    )
}

/// `url` with its database replaced by `database` (the query kept).
pub fn on_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(base, query)| (base, Some(query)));
    let (authority, _) = base.rsplit_once('/').unwrap_or((base, ""));
    match query {
        Some(query) => format!("{authority}/{database}?{query}"),
        None => format!("{authority}/{database}"),
    }
}

/// Runs `sql` on a connection of its own to the server at `url`.
pub async fn execute(url: &str, sql: &str) -> Result<(), sqlx::Error> {
    // A pool of one rather than a bare connection: its future is `Send`,
    // as the kit's factory needs.
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&plain(url))
        .await?;
    let outcome = sqlx::raw_sql(sql).execute(&pool).await.map(drop);
    pool.close().await;
    outcome
}

/// `url` without tenure's own parameters, as sqlx reads it.
fn plain(url: &str) -> String {
    let (url, _) = tenure_lease_core::backend::url::take_parameter(url, "isolation");
    url.replacen("mariadb://", "mysql://", 1)
}

/// Creates the database `database` on the server at `url`.
pub async fn create_database(url: &str, database: &str) -> tenure_lease_core::Result<()> {
    execute(url, &format!("CREATE DATABASE `{database}`"))
        .await
        .map_err(|error| Error::unavailable(format!("cannot create {database}")).with_source(error))
}

/// Drops the database `database` on the server at `url`.
pub async fn drop_database(url: &str, database: &str) -> tenure_lease_core::Result<()> {
    execute(url, &format!("DROP DATABASE IF EXISTS `{database}`"))
        .await
        .map_err(|error| Error::unavailable(format!("cannot drop {database}")).with_source(error))
}

/// A migrated store in `database` on the server at `url`, with a small
/// pool.
pub async fn connect(url: &str, database: &str) -> tenure_lease_core::Result<MySqlStore> {
    MySqlStore::connect(MySqlConfig::new(on_database(url, database)).max_connections(POOL_SIZE))
        .await
}

/// A store in a fresh database on the server at `url`, and the
/// database's name (for [`drop_database`] once the store is closed).
pub async fn store_in_fresh_database(url: &str) -> (MySqlStore, String) {
    let database = fresh_database();
    create_database(url, &database).await.expect("create");
    let store = connect(url, &database).await.expect("connect");
    (store, database)
}

/// The database a store keeps its tables in.
pub fn database_of(store: &MySqlStore) -> String {
    let url = store.config().url();
    let base = url.split('?').next().unwrap_or(url);
    base.rsplit('/').next().unwrap_or_default().to_owned()
}

/// The conformance kit's factory: a fresh database per case on the server
/// at `TENURE_MYSQL_URL` (else the binary's private server), dropped at
/// teardown. The server's clock cannot be moved: cases wait on it.
pub struct MySqlFactory {
    /// The server, or why there is none.
    url: Result<String, String>,
}

impl MySqlFactory {
    /// A factory for the server named by `TENURE_MYSQL_URL`, else the
    /// binary's private server.
    pub fn from_env() -> Self {
        MySqlFactory {
            url: tenure_test_support::shared::mysql_url(),
        }
    }

    /// A factory for the server at `url`, or one whose cases skip (fail,
    /// under `TENURE_REQUIRE_SERVICES=1`) for the reason given.
    pub fn on_url(url: Result<String, String>) -> Self {
        MySqlFactory { url }
    }

    /// A factory whose cases skip for `why`.
    pub fn unavailable(why: String) -> Self {
        MySqlFactory { url: Err(why) }
    }

    /// [`from_env`](Self::from_env)'s server, the store's sessions at
    /// `isolation` (`isolation=` in the URL).
    pub fn from_env_at_isolation(isolation: &str) -> Self {
        MySqlFactory {
            url: tenure_test_support::shared::mysql_url().map(|url| {
                let separator = if url.contains('?') { '&' } else { '?' };
                format!("{url}{separator}isolation={isolation}")
            }),
        }
    }

    fn url(&self) -> tenure_lease_core::Result<&str> {
        self.url
            .as_deref()
            .map_err(|why| Error::unavailable(why.clone()))
    }
}

#[async_trait]
impl Factory for MySqlFactory {
    type Store = MySqlStore;

    fn unavailable_reason(&self) -> Option<String> {
        self.url.as_ref().err().cloned()
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<MySqlStore>> {
        let url = self.url()?;
        let database = fresh_database();
        create_database(url, &database).await?;
        match connect(url, &database).await {
            Ok(store) => Ok(Subject {
                store,
                clock: ClockControl::Real,
            }),
            Err(error) => {
                drop(drop_database(url, &database).await);
                Err(error)
            }
        }
    }

    async fn teardown(&self, store: &MySqlStore) -> tenure_lease_core::Result<()> {
        store.close().await;
        drop_database(self.url()?, &database_of(store)).await
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<MySqlStore>> {
        Some(self)
    }

    fn network(&self) -> Option<&dyn NetworkSupport<MySqlStore>> {
        Some(self)
    }

    fn processes(&self) -> Option<&dyn ProcessSupport<MySqlStore>> {
        Some(self)
    }

    fn restart(&self) -> Option<&dyn RestartSupport<MySqlStore>> {
        Some(self)
    }

    fn deployment(&self) -> Option<&dyn DeploymentSupport> {
        Some(self)
    }

    /// A private MariaDB whose clock runs `offset` from the host's, the
    /// store on a database of the same name there, kept running as long as
    /// the store.
    fn clock_offset(&self) -> Option<ClockOffsetter<MySqlStore>> {
        if PrivateMariadb::unavailable_reason().is_some() {
            return None;
        }
        Some(Arc::new(
            |store: Arc<MySqlStore>, offset: chrono::TimeDelta| {
                Box::pin(async move {
                    let micros = offset.num_microseconds().ok_or_else(|| {
                        Error::new(
                            ErrorKind::Config,
                            format!("a clock offset of {offset} is too large"),
                        )
                    })?;
                    let server = PrivateMariadb::start_with_clock_offset(micros)
                        .await
                        .map_err(|error| {
                            Error::unavailable("cannot start a private MariaDB on an offset clock")
                                .with_source(error)
                        })?;
                    let database = database_of(&store);
                    create_database(&server.url(), &database).await?;
                    let offset_store = connect(&server.url(), &database).await?;
                    Ok(OffsetStore::keeping(offset_store, server))
                })
            },
        ))
    }

    /// Damage to a record's or job's JSON body, on a connection of its own.
    fn damager(&self) -> Option<Damager<MySqlStore>> {
        let url = self.url.clone().unwrap_or_default();
        Some(Arc::new(
            move |store: Arc<MySqlStore>, target: Target, damage: Damage| {
                let url = url.clone();
                Box::pin(async move { damage_body(&url, &store, &target, damage).await })
            },
        ))
    }

    /// A second store, with a pool of its own, on the case's database.
    fn reopen(&self) -> Option<Reopener<MySqlStore>> {
        Some(Arc::new(move |store: Arc<MySqlStore>| {
            Box::pin(async move { MySqlStore::connect(store.config().clone()).await })
        }))
    }
}

#[async_trait]
impl NemesisSupport<MySqlStore> for MySqlFactory {
    async fn create_on_clock(
        &self,
        _clock: Arc<dyn Clock>,
    ) -> tenure_lease_core::Result<MySqlStore> {
        Ok(self.create().await?.store)
    }
}

/// Applies the kit's `damage` to the body of `target` in `store`'s
/// database, read and written back on a connection of its own.
async fn damage_body(
    url: &str,
    store: &MySqlStore,
    target: &Target,
    damage: Damage,
) -> tenure_lease_core::Result<DamageOutcome> {
    let (table, id, job) = match target {
        Target::Lease(id) => ("tenure_leases", id, false),
        Target::Job(id) => ("tenure_jobs", id, true),
        _ => return Ok(DamageOutcome::CannotHold),
    };
    let Some((field, bad)) = damage.in_json_document(job) else {
        return Ok(DamageOutcome::CannotHold);
    };
    let failed = |error: sqlx::Error| {
        Error::unavailable(format!("cannot damage {target:?} with {damage}")).with_source(error)
    };
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&plain(&on_database(url, &database_of(store))))
        .await
        .map_err(failed)?;
    let body: Vec<u8> = sqlx::query_scalar(&format!("SELECT body FROM {table} WHERE id = ?"))
        .bind(id.as_bytes())
        .fetch_one(&pool)
        .await
        .map_err(failed)?;
    let mut document: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|error| Error::corrupt(format!("{target:?} is not JSON: {error}")))?;
    document[field] = bad;
    sqlx::query(&format!("UPDATE {table} SET body = ? WHERE id = ?"))
        .bind(document.to_string().into_bytes())
        .bind(id.as_bytes())
        .execute(&pool)
        .await
        .map_err(failed)?;
    pool.close().await;
    Ok(DamageOutcome::Applied)
}

/// How long a store behind faults waits for a connection, and how long
/// each of its operations may take: a silent server answers `Timeout`
/// within this bound.
pub const CONNECTION_WAIT: Duration = Duration::from_millis(500);
/// Tries at connecting a store behind faults.
const CONNECT_ATTEMPTS: u32 = 10;
/// Connections of a pool behind faults.
const PROXIED_POOL_SIZE: u32 = 2;
/// Bound on each call and on waiting for a connection to the private
/// server of the restart suite, so calls during the outage fail quickly.
const RESTART_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// The request that commits a transaction: sqlx sends `COMMIT` as a text
/// query (`COM_QUERY`, 0x03) in a packet of its own, length 7, sequence 0.
pub const COMMIT: &[u8] = b"\x07\x00\x00\x00\x03COMMIT";
/// The request that interrupts the holders inside an admission's
/// transaction: the only one carrying the interrupted records' stop reason.
pub const INTERRUPT: &[u8] = tenure_lease_core::backend::rules::INTERRUPTED_BY_ADMISSION.as_bytes();
/// A migration version no release of tenure has: the mark of tables
/// written by a newer one.
const FUTURE_MIGRATION: i64 = 99_990_101;

/// Connects a store, trying again while connecting fails retryably: on a
/// busy machine a new session can take longer than the short
/// [`CONNECTION_WAIT`] the fault scenarios need.
pub async fn connect_patiently(config: &MySqlConfig) -> tenure_lease_core::Result<MySqlStore> {
    let mut attempts_left = CONNECT_ATTEMPTS;
    loop {
        attempts_left -= 1;
        match MySqlStore::connect(config.clone()).await {
            Err(error) if error.is_retryable() && attempts_left > 0 => {}
            answer => return answer,
        }
    }
}

/// An admission locks the new id's row first (the first request naming
/// it), then, inside the same transaction, interrupts the holders and
/// inserts the record: cut after the lock or after the interrupt (before
/// its `COMMIT`), it leaves the scope as before; cut after the `COMMIT`,
/// it lands whole.
#[async_trait]
impl NetworkSupport<MySqlStore> for MySqlFactory {
    fn profile(&self) -> NetworkProfile {
        NetworkProfile {
            admission_cuts: vec![
                (CutAfter::NewId, ScopeAfterCut::AsBefore),
                (CutAfter::Bytes(INTERRUPT), ScopeAfterCut::AsBefore),
                (CutAfter::Bytes(COMMIT), ScopeAfterCut::FullyAdmitted),
            ],
            commit: CutAfter::Bytes(COMMIT),
            // A statement per round trip inside each write's transaction:
            // BEGIN, the locking reads, the clock, the writes, COMMIT.
            round_trips: Some(RoundTrips {
                admit: 10,
                renew: 5,
                mark_running: 5,
                get: 1,
                finish: 6,
                takeover: 6,
            }),
        }
    }

    async fn connect_behind_faults(
        &self,
        direct: &MySqlStore,
    ) -> tenure_lease_core::Result<BehindFaults<MySqlStore>> {
        let url = on_database(self.url()?, &database_of(direct));
        let (proxy, proxied_url) = FaultProxy::in_front_of(&url)
            .await
            .map_err(|error| Error::unavailable("cannot start the proxy").with_source(error))?;
        // In plain text: the proxy finds its markers in the bytes it
        // forwards.
        let separator = if proxied_url.contains('?') { '&' } else { '?' };
        let config = MySqlConfig::new(format!("{proxied_url}{separator}ssl-mode=disabled"))
            .max_connections(PROXIED_POOL_SIZE)
            .acquire_timeout(CONNECTION_WAIT)
            .operation_timeout(CONNECTION_WAIT);
        Ok(BehindFaults {
            store: connect_patiently(&config).await?,
            faults: Arc::new(proxy),
        })
    }
}

/// A fresh database, its URL named to the children.
#[async_trait]
impl ProcessSupport<MySqlStore> for MySqlFactory {
    async fn create_shared(&self) -> tenure_lease_core::Result<SharedStore<MySqlStore>> {
        let store = self.create().await?.store;
        Ok(SharedStore {
            address: store.config().url().to_owned(),
            store,
        })
    }

    /// The store at the URL the parent named: children start no private
    /// server of their own when the parent runs on one.
    async fn open_shared(&self, url: &str) -> tenure_lease_core::Result<MySqlStore> {
        MySqlStore::connect(MySqlConfig::new(url).max_connections(POOL_SIZE)).await
    }
}

/// `mariadb-install-db` + `mariadbd` in a temporary directory; the shared
/// server is never stopped.
#[async_trait]
impl RestartSupport<MySqlStore> for MySqlFactory {
    fn unavailable_reason(&self) -> Option<String> {
        PrivateMariadb::unavailable_reason()
    }

    async fn start_private(&self) -> tenure_lease_core::Result<PrivateServer<MySqlStore>> {
        let server = PrivateMariadb::start().await.map_err(|error| {
            Error::unavailable("cannot start a private MariaDB").with_source(error)
        })?;
        let store = MySqlStore::connect(
            MySqlConfig::new(server.url())
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

/// Tables written by a newer version of tenure, and tables on an engine
/// without transactions, in fresh databases on the shared server, dropped
/// afterwards; a read-only private server, and one logging statements.
#[async_trait]
impl DeploymentSupport for MySqlFactory {
    fn unavailable_reason(&self) -> Option<String> {
        Factory::unavailable_reason(self)
    }

    fn misdeployments(&self) -> Vec<Misdeployment> {
        let mut staged = vec![
            Misdeployment::new(
                "tables written by a newer version of tenure",
                ErrorKind::Incompatible,
                [FUTURE_MIGRATION.to_string(), "upgrade".to_owned()],
            ),
            Misdeployment::new(
                "a table on MyISAM, which has no transactions",
                ErrorKind::Incompatible,
                ["MyISAM", "InnoDB"],
            ),
        ];
        if PrivateMariadb::unavailable_reason().is_none() {
            staged.push(Misdeployment::new(
                "a read-only server (a replica)",
                ErrorKind::Config,
                ["read-only", "primary"],
            ));
            staged.push(Misdeployment::new(
                "a statement-based binary log",
                ErrorKind::Config,
                ["binlog_format = ROW"],
            ));
        }
        staged
    }

    async fn connect_misdeployed(&self, which: &Misdeployment) -> tenure_lease_core::Result<()> {
        let private = match which.name.as_str() {
            "a read-only server (a replica)" => Some(&["--read-only"][..]),
            "a statement-based binary log" => Some(
                &[
                    "--log-bin=binlog",
                    "--binlog-format=STATEMENT",
                    "--server-id=1",
                ][..],
            ),
            _ => None,
        };
        if let Some(options) = private {
            let server = PrivateMariadb::start_with(options).await.map_err(|error| {
                Error::unavailable("cannot start a private MariaDB").with_source(error)
            })?;
            return MySqlStore::connect(server.url()).await.map(drop);
        }
        let url = self.url()?;
        let store = self.create().await?.store;
        let database = database_of(&store);
        let staging = if which.name.starts_with("a table on MyISAM") {
            format!("ALTER TABLE `{database}`.tenure_fence_gates ENGINE = MyISAM")
        } else {
            format!(
                "INSERT INTO `{database}`.tenure_migrations (version, description) \
                 VALUES ({FUTURE_MIGRATION}, 'from a newer tenure')"
            )
        };
        store.close().await;
        let staged = execute(url, &staging)
            .await
            .map_err(|error| Error::unavailable("cannot stage the tables").with_source(error));
        let again = match staged {
            Ok(()) => connect(url, &database).await.map(drop),
            Err(error) => Err(error),
        };
        drop_database(url, &database).await?;
        again
    }
}
