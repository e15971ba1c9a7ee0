//! # backend-mysql
//!
//! A [`LeaseStore`](tenure_lease_core::LeaseStore),
//! [`JobQueue`](tenure_lease_core::JobQueue) and
//! [`FenceStore`](tenure_lease_core::FenceStore) on MySQL 8 or MariaDB
//! 10.6 and later (InnoDB), through sqlx. Through the facade it is
//! `tenure::mysql::MySqlStore` (feature `mysql`), also opened by
//! `tenure::connect("mysql://user:password@host:3306/database")` (or
//! `mariadb://…`).
//!
//! ## How an operation runs
//!
//! Every write is **one transaction**: the store locks the rows it decides
//! on with `SELECT … FOR UPDATE` (the record, the scopes' holders with
//! their records, the jobs; a claim's best queued jobs and a reap's oldest
//! expired claims with `FOR UPDATE SKIP LOCKED`, so claimers take different
//! jobs), reads the server's clock, decides in Rust with the rules every
//! backend shares ([`tenure_lease_core::backend`]), writes the decision
//! back and commits. Nothing is decided by `UPDATE … RETURNING` (MySQL has
//! none): the decision already knows every row it writes, because it made
//! them from rows it holds locked. Locking reads see the newest committed
//! rows at every isolation level, so the store is correct at each; it
//! sets READ COMMITTED for its sessions unless told otherwise
//! ([`MySqlConfig::isolation`]), the level with the fewest locks. A lost
//! race the server settles (a deadlock, or a key another writer inserted
//! first) rolls the transaction back, and the operation decides again.
//!
//! The statements of a write, of a read of one record or job, of `now` and
//! of a gate check go one round trip each, with nothing beside them: the
//! store keeps the connection its last operation finished with in good
//! order and sends the next one on it, rather than handing it back to
//! sqlx's pool, which pings a connection on its return (and, in the pools
//! [`MySqlStore::connect`] opens, only after a second idle on its way out).
//! A kept connection goes back to the pool once unused for a quarter of a
//! second, or after a second out of it however busy the store; one cut
//! mid-statement, or whose session the server ended, at once, through the
//! pool's check. Listings, counts and purges use the pool as it is.
//!
//! Records and jobs are kept whole as JSON in a `body` column, beside the
//! columns the indexes read; timestamps are microseconds of the server's
//! `UTC_TIMESTAMP(6)`, whatever the session's time zone. Ids, scopes,
//! queues and resources are `VARBINARY`, compared byte for byte.
//!
//! A job's uniqueness key is in its body, and in the columns `unique_key`,
//! `unique_policy` and `unique_until` (a period's end) beside it. An
//! enqueue of jobs with keys first upserts and locks one row per key of the
//! batch in `tenure_unique_slots`, in order, then reads the jobs that may
//! hold each key `FOR UPDATE`: enqueues of one key are judged one after
//! the other at every isolation level. `purge_jobs` keeps a finished job
//! until its period ends, and deletes the slots no job names any more.
//!
//! A rate limit's log (its key, permits and period together) is a row of
//! `tenure_rate_logs`: the instants of its last uses, a JSON array of
//! microseconds, and `ends_at`, when the newest of them stops counting. An
//! admission or a claim with a rate limit upserts its log's row and locks
//! it before any other row, judges it with the rules and writes its uses
//! with its other writes: calls on one log are judged one after the other
//! at every isolation level, and one waiting for a log holds nothing else,
//! so the log adds no deadlock. Calls without a rate limit never touch the
//! table. A log that does not decode is `Corrupt`, and the call changes
//! nothing. [`LeaseStore::purge`](tenure_lease_core::LeaseStore::purge)
//! first deletes the logs whose `ends_at` has passed (uncounted), in a
//! statement of its own.
//!
//! An active record holds each of its scopes by a row of
//! `tenure_held_scopes`, whose primary key is "one holder per key": the
//! scope itself, or for slot k > 0 of a counted scope
//! ([`AdmitRequest::counted_scope`](tenure_lease_core::AdmitRequest::counted_scope))
//! its slot key, the scope, U+001F and k
//! ([`slot_key`](tenure_lease_core::backend::rules::slot_key)); the
//! record's slots are in its body. `tenure_lease_scopes` keeps every
//! (record, scope) pair by name, so `list_by_scope` finds every slot's
//! holders. An admission with a counted scope locks the scope's own row
//! first (slot 0's, upserted as every admission of the scope does, counted
//! or exclusive), then reads the rows of its other slots (one range of
//! keys) with their holders, locked, and chooses its slot with the rules
//! ([`choose_slot`](tenure_lease_core::backend::rules::choose_slot)): every
//! admission that may take a slot of the scope holds the scope's row until
//! it commits, so no other can take a slot in between, and racing
//! admissions never hold more slots than their capacity. Admissions
//! without counted scopes (or of capacity 1) read nothing more.
//!
//! ## Upgrading
//!
//! Each version adds what it needs as a numbered migration (see
//! [`MigrationMode`]): 2 added unique jobs (columns of `tenure_jobs` and
//! `tenure_unique_slots`), 3 rate limits (`tenure_rate_logs`, nothing
//! changed in the other tables), 4 counted scopes (`tenure_held_scopes.scope`
//! widened to 261 bytes for slot keys; records stored before read back
//! with no slots). A process of an earlier version already
//! connected keeps working beside a migration it does not know, but one
//! connecting afterwards refuses the tables as `Incompatible`: once the
//! migration is applied, start only processes of the new version. Rate
//! limits need nothing more: earlier versions never touch their logs.
//! Counted scopes do: an earlier version knows no slots (it reads a holder
//! of any slot as holding the scope, and drops its slot when it writes the
//! record back), so admit with counted scopes only once every process runs
//! this version.
//!
//! ## Fences
//!
//! One counter row hands out every fence, leases' and jobs' alike: an
//! operation that hands some out draws them last, with one `UPDATE`
//! (`LAST_INSERT_ID(…)` answers the new value in the reply), and holds the
//! row until it commits. So a fence is greater than any stored in what the
//! operation read, and a crash never hands it out again once the commit
//! was acknowledged (with `innodb_flush_log_at_trx_commit = 1`, which
//! `tenure check` checks). The counter never falls behind the server's
//! clock in microseconds (a hybrid logical clock), so a replica promoted
//! without the old primary's last draws still draws above them, as long as
//! the servers' clocks agree to within the failover's duration: fences are
//! large numbers, with gaps.
//!
//! ## Deployment
//!
//! * InnoDB, with `innodb_flush_log_at_trx_commit = 1` (and
//!   `sync_binlog = 1` when the binary log is on): otherwise a crash may
//!   lose acknowledged commits, fences among them.
//! * A writable primary: a read-only server (a replica) is refused at
//!   connect. Replication is asynchronous unless semi-synchronous
//!   replication is set up; a failover to a replica that lacks the last
//!   commits can hand a fence out again (see DEPLOYING.md).
//! * TLS and credentials come from the URL
//!   (`mysql://user:password@host/db?ssl-mode=verify_identity&ssl-ca=ca.pem`,
//!   or the `tls_ca=` parameter every backend takes).
//!
//! ## Least privilege
//!
//! The application account needs `SELECT, INSERT, UPDATE, DELETE` on the
//! `tenure_*` tables of its database, nothing more, when it connects with
//! [`MigrationMode::VerifyOnly`]; an account with `CREATE, ALTER, INDEX`
//! applies the migrations beforehand ([`MySqlStore::apply_migrations`]).
//!
//! ```no_run
//! # async fn example() -> tenure_lease_core::Result<()> {
//! use tenure_backend_mysql::{MigrationMode, MySqlConfig, MySqlStore};
//!
//! let url = "mysql://deployer:secret@db.internal:3306/jobs";
//! MySqlStore::apply_migrations(&MySqlConfig::new(url)).await?;
//! let store = MySqlStore::connect(
//!     MySqlConfig::new("mysql://app:secret@db.internal:3306/jobs")
//!         .migrations(MigrationMode::VerifyOnly),
//! )
//! .await?;
//! # drop(store);
//! # Ok(())
//! # }
//! ```

mod config;
mod error;
mod gate;
mod lease;
mod queue;
mod rate;
mod rows;
mod runner;
mod schema;
mod server;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions as _, Connection as _, MySql, MySqlConnection};
use tenure_lease_core::release::ReleaseBoard;
use tenure_lease_core::{Error, Result};

pub use config::{
    Isolation, MigrationMode, MySqlConfig, DEFAULT_OPERATION_TIMEOUT, URL_PARAMETERS, URL_SCHEMES,
};
use error::store_error;
use runner::Runner;
pub use server::ServerSettings;
/// The sqlx this store runs on, for the caller's own statements on
/// [`MySqlStore::pool`].
pub use sqlx;
use tenure_sql_sessions::Sessions;

/// The MySQL and MariaDB store. Cloning shares the pool.
#[derive(Clone)]
pub struct MySqlStore {
    runner: Runner,
    config: MySqlConfig,
    releases: ReleaseBoard,
    /// `mysql`, or `mariadb` when the server's version says MariaDB.
    system: &'static str,
}

impl tenure_lease_core::backend::stores::Backend for MySqlStore {
    const NAME: &'static str = "MySQL";
    const SYSTEM: &'static str = "mysql";

    fn time_limit(&self) -> Option<Duration> {
        Some(self.config.operation_limit())
    }

    fn releases_in_process(&self) -> Option<&ReleaseBoard> {
        Some(&self.releases)
    }

    fn system_name(&self) -> &'static str {
        self.system
    }
}

tenure_lease_core::serve_backend!(MySqlStore);

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStore")
            .field("config", &self.config)
            .field("pool_size", &self.runner.pool().size())
            .finish_non_exhaustive()
    }
}

impl MySqlStore {
    /// Connects a pool as `config` says (a [`MySqlConfig`], or a URL with
    /// the defaults), refuses a server every write would fail on
    /// (read-only, or a statement-based binary log under READ COMMITTED
    /// sessions), prepares
    /// the tables as its [`MigrationMode`] says (by default: creates and
    /// migrates them), and answers the store.
    ///
    /// One connection is opened at once, within
    /// [`MySqlConfig::acquire_timeout`], so a server that cannot be reached
    /// answers at once, with its address and the cause.
    ///
    /// # Errors
    ///
    /// A bad URL (one naming no database among them), an unknown database
    /// or account, a refused login or a missing privilege is
    /// [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config), as is
    /// a server refused (settings that lose acknowledged commits are not
    /// refused: [`server_settings`](Self::server_settings) and `tenure
    /// check` report them);
    /// an unreachable or silent server is
    /// [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable)
    /// (retryable); tables that lack migrations this version needs (under
    /// [`MigrationMode::VerifyOnly`]), carry migrations it does not know or
    /// are not InnoDB are
    /// [`ErrorKind::Incompatible`](tenure_lease_core::ErrorKind::Incompatible).
    pub async fn connect(config: impl Into<MySqlConfig>) -> Result<Self> {
        let config = config.into();
        let options = config.connect_options()?;
        let mut first = open_session(&options, &config).await?;
        let settings = server::refuse_unsafe_server(&mut first, config.isolation_level()).await?;
        let statements = session_statements(&config, settings.is_mariadb());
        // On the first session too: a server that refuses them is refused
        // here, not at every operation.
        for statement in statements.iter() {
            sqlx::query(statement)
                .execute(&mut first)
                .await
                .map_err(store_error)?;
        }
        match config.migration_mode() {
            MigrationMode::Apply => schema::apply(&mut first).await?,
            MigrationMode::VerifyOnly => schema::verify(&mut first).await?,
        }
        server::refuse_other_engines(&mut first).await?;
        drop(first.close().await);
        let pool = MySqlPoolOptions::new()
            .max_connections(config.connection_limit())
            .acquire_timeout(config.connection_wait())
            .test_before_acquire(false)
            .before_acquire(tenure_sql_sessions::ping_if_idle::<MySql>)
            .after_connect(move |session, _| {
                let statements = statements.clone();
                Box::pin(async move {
                    for statement in statements.iter() {
                        sqlx::query(statement).execute(&mut *session).await?;
                    }
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        Ok(MySqlStore {
            runner: Runner {
                sessions: Sessions::new(pool),
            },
            releases: ReleaseBoard::in_process(),
            config,
            system: if settings.is_mariadb() {
                "mariadb"
            } else {
                <Self as tenure_lease_core::backend::stores::Backend>::SYSTEM
            },
        })
    }

    /// Creates the tables in the database `config`'s URL names and applies
    /// the migrations they lack, then closes the connection: for a
    /// deployment step run as an account that may create tables, before
    /// the application connects with [`MigrationMode::VerifyOnly`].
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn apply_migrations(config: &MySqlConfig) -> Result<()> {
        let options = config.connect_options()?;
        let mut session = open_session(&options, config).await?;
        let applied = schema::apply(&mut session).await;
        drop(session.close().await);
        applied
    }

    /// The config the store was opened with.
    pub fn config(&self) -> &MySqlConfig {
        &self.config
    }

    /// The store's connection pool (for the caller's own statements). Its
    /// sessions wait for a row lock at most half the operation timeout,
    /// and on MariaDB a transaction left idle longer than the operation
    /// timeout is ended by the server.
    ///
    /// The store keeps the connections its statements used for its next
    /// ones, out of the pool, while it is busy; each goes back to the pool
    /// within half a second of not being needed, and after a second out of
    /// it however busy the store (see the crate docs).
    pub fn pool(&self) -> &sqlx::MySqlPool {
        self.runner.pool()
    }

    /// Closes the pool: operations after it answer `Unavailable`.
    pub async fn close(&self) {
        self.runner.sessions.return_all();
        self.runner.pool().close().await;
    }

    /// Drops every table of the store, with every record, job, gate and the
    /// fence counter: for tests and for tearing a deployment down. A store
    /// connected afterwards starts from fence 1 again.
    ///
    /// # Errors
    ///
    /// The server's errors.
    pub async fn drop_tables(&self) -> Result<()> {
        self.runner.sessions.return_all();
        let mut session = self.session().await?;
        schema::drop_tables(&mut session).await
    }

    /// A connection of the pool.
    async fn session(&self) -> Result<PoolConnection<MySql>> {
        self.runner.pool().acquire().await.map_err(store_error)
    }
}

/// What each session of the store runs first: its isolation level, and
/// bounds on how long a lock can hold anyone up. A call waits for a row
/// lock at most half of what the operation may take (InnoDB's default is
/// 50 s), so a client paused mid-transaction (a stop, a long GC pause)
/// holding a row others need makes them answer a retryable `Timeout`
/// saying nothing was written, not hang; on MariaDB the server also ends a
/// transaction left idle as long as an operation may take
/// (`idle_transaction_timeout`), releasing its locks. Each within its
/// variable's range, in whole seconds.
fn session_statements(config: &MySqlConfig, mariadb: bool) -> Arc<[String]> {
    let whole_seconds = |duration: Duration, most: u64| {
        let seconds = duration
            .as_secs()
            .saturating_add(u64::from(duration.subsec_nanos() > 0));
        seconds.clamp(1, most)
    };
    let limit = config.operation_limit();
    let mut statements: Vec<String> = config
        .isolation_level()
        .session_statement()
        .map(str::to_owned)
        .into_iter()
        .collect();
    statements.push(format!(
        "SET SESSION innodb_lock_wait_timeout = {}",
        whole_seconds(limit / 2, 1_073_741_824)
    ));
    if mariadb {
        statements.push(format!(
            "SET SESSION idle_transaction_timeout = {}",
            whole_seconds(limit, 31_536_000)
        ));
    }
    statements.into()
}

/// Opens one session as `config` says, within its acquire timeout, with
/// the address in the error.
async fn open_session(
    options: &MySqlConnectOptions,
    config: &MySqlConfig,
) -> Result<MySqlConnection> {
    let wait = config.connection_wait();
    let where_to = format!("{}:{}", options.get_host(), options.get_port());
    let session = match tokio::time::timeout(wait, options.connect()).await {
        Err(_) => {
            return Err(Error::new(
                tenure_lease_core::ErrorKind::Timeout,
                format!("MySQL at {where_to} did not answer within {wait:?}"),
            ))
        }
        Ok(session) => session.map_err(|error| {
            let error = store_error(error);
            Error::new(
                error.kind(),
                format!("cannot connect to MySQL at {where_to}: {}", error.message()),
            )
            .with_source(error)
        })?,
    };
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_bounds_are_whole_seconds_within_each_variables_range() {
        let statements = |timeout: Duration, mariadb: bool| {
            session_statements(
                &MySqlConfig::new("mysql://h/db").operation_timeout(timeout),
                mariadb,
            )
            .to_vec()
        };
        assert_eq!(
            statements(Duration::from_millis(2500), true),
            [
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                "SET SESSION innodb_lock_wait_timeout = 2",
                "SET SESSION idle_transaction_timeout = 3",
            ]
        );
        assert_eq!(
            statements(Duration::from_millis(1), false),
            [
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                "SET SESSION innodb_lock_wait_timeout = 1",
            ]
        );
        assert_eq!(
            statements(Duration::MAX, true)[1..],
            [
                "SET SESSION innodb_lock_wait_timeout = 1073741824",
                "SET SESSION idle_transaction_timeout = 31536000",
            ]
        );
    }
}
