//! # backend-postgres
//!
//! A [`LeaseStore`](lease_core::LeaseStore) and
//! [`JobQueue`](lease_core::JobQueue) on PostgreSQL (12 or newer), through
//! sqlx with runtime-checked queries: building it needs no database.
//!
//! ## Connecting
//!
//! From a URL, with [`PgStoreConfig`] (its `Debug` redacts the password):
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> lease_core::Result<()> {
//! use std::time::Duration;
//! use backend_postgres::{PgStore, PgStoreConfig};
//! use lease_core::{AdmitRequest, LeaseStore};
//!
//! let config = PgStoreConfig::new("postgres://app:secret@db.internal:5432/jobs")
//!     .schema("tenure")
//!     .max_connections(8);
//! let store = PgStore::connect(&config).await?;
//! let admission = store
//!     .admit(&AdmitRequest::new("nightly-report", "worker-a").scope("cron:report").ttl(Duration::from_secs(30)))
//!     .await?;
//! println!("{}", admission.label());
//! # Ok(()) }
//! ```
//!
//! or on a pool the application already has:
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> lease_core::Result<()> {
//! use backend_postgres::PgStore;
//!
//! let pool = sqlx::PgPool::connect("postgres://app@db.internal/jobs")
//!     .await
//!     .expect("connect");
//! let store = PgStore::from_pool(pool, "tenure").await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! ## Schema
//!
//! All tables live in one schema (default [`DEFAULT_SCHEMA`]), created when
//! missing. Its name must be a plain identifier (checked, then quoted); every
//! statement names it explicitly, so the pool's `search_path` does not
//! matter, and several independent stores can share one database.
//!
//! * `leases`: one row per record (`timestamptz` times, `jsonb` metadata,
//!   `status` text with a `CHECK`);
//! * `lease_scopes`: every (scope, record) pair, for `list_by_scope`;
//! * `held_scopes(scope PRIMARY KEY, lease_id)`: one row per scope held by an
//!   active record, created with the record and deleted in the same
//!   statement that deactivates it. Its primary key is the "one active record
//!   per scope" rule, enforced by the server itself; a foreign key on the
//!   record's activity refuses any write that would leave a finished record
//!   holding a scope;
//! * `jobs`: one row per job (`jsonb` payload, `text[]` required
//!   capabilities, `state` and `dead_reason` text with `CHECK`s), with
//!   partial indexes for claiming (a queue's queued jobs, best first),
//!   reaping (claimed jobs by expiry) and listing dead letters, and
//!   (migration 0004) one of finished jobs by finish time for `purge_jobs`.
//!   Purging a lease deletes its `lease_scopes` rows with it (foreign-key
//!   cascade); scope locks are transaction-scoped advisory locks, so no
//!   row is kept per scope;
//! * `fence_seq`: the store-wide fence sequence, drawn by admissions,
//!   takeovers, job claims and take-backs alike.
//! * `admit_if_free(...)`: the admission's first step, or all of it (see
//!   [Admissions](#admissions-one-at-a-time-per-scope)).
//!
//! ## Migrations
//!
//! The schema is versioned with embedded sqlx migrations
//! (`backend-postgres/migrations`), applied by [`PgStore::connect`] and
//! [`PgStore::from_pool`] on a dedicated connection whose `search_path` is
//! the schema; the versions applied are kept in the schema's own
//! `_sqlx_migrations` table. sqlx takes a PostgreSQL advisory lock around the
//! run (one lock per database, so runs on different schemas take turns too),
//! and schema creation is serialised the same way, so any number of workers
//! may start at once: one applies, the others wait and find nothing left to
//! do. A schema written by a newer version of
//! this crate (unknown or modified migrations) answers
//! [`ErrorKind::Incompatible`].
//!
//! ## TLS
//!
//! The crate feature `tls` enables rustls in sqlx; then `sslmode=require`
//! (or `verify-ca`, `verify-full`, with `sslrootcert=...`) in the URL
//! encrypts the connection. Without it, use plain TCP on a trusted network
//! or a Unix socket.
//!
//! ## Time
//!
//! Every expiry decision is judged by the server's clock alone: `now()`
//! inside the statement or transaction that acts on it (one instant per
//! operation; an admission reads `clock_timestamp()` after its lock waits,
//! and one that interrupts holders stamps them at the instant it judged
//! them), never the worker's clock. [`LeaseStore::now`] answers
//! `SELECT now()`, microsecond precision like every stored timestamp.
//!
//! ## Atomicity and errors
//!
//! Every operation is one statement or one transaction. Job claims and the
//! reaper pick their rows with `FOR UPDATE SKIP LOCKED`: concurrent claimers
//! on any number of pools or hosts never share a job and never wait on one
//! another; one claim's fences ascend in claim order. A dropped connection
//! or a server error mid-transaction rolls the whole transaction back and
//! answers a retryable error
//! ([`Error::is_retryable`](lease_core::Error::is_retryable)): the outcome is
//! unknown to the caller, but nothing is half-applied.
//!
//! ## Timeouts
//!
//! Every [`LeaseStore`](lease_core::LeaseStore) and
//! [`JobQueue`](lease_core::JobQueue) call is bounded as a whole (waiting
//! for a connection, each statement, any retries) by
//! [`PgStoreConfig::operation_timeout`] (default
//! [`DEFAULT_OPERATION_TIMEOUT`]); past it the call answers
//! [`ErrorKind::Timeout`], outcome unknown.
//! Running out of time drops the call's future, and with it sqlx's work in
//! progress:
//!
//! * an open transaction (an admission) is never committed: dropping it
//!   queues a `ROLLBACK` on its connection;
//! * the connection, perhaps cut mid-statement, goes back to the pool only
//!   after sqlx has flushed what was queued (the `ROLLBACK`) and read every
//!   reply still owed up to the server's next `ReadyForQuery`; if that
//!   fails the connection is closed instead, so no later call inherits a
//!   half-read reply or an open transaction. While the server stays
//!   silent that check waits too, keeping the connection's place in the
//!   pool (later calls then answer `Timeout` as well); if the session ends
//!   instead, the server rolls the transaction back itself. Its locks stay
//!   held on the server until one or the other happens:
//!   `idle_in_transaction_session_timeout` and TCP keepalives on the
//!   server bound that.
//!
//! ## Admissions: one at a time per scope
//!
//! `admit` looks before it writes, so two overlapping admissions deciding
//! side by side would both see the scopes free (or the same holder
//! interruptible), and one of them would lose at the write. Instead,
//! admissions on a scope take turns, and each sees what the one before it
//! committed. The schema's `admit_if_free` function (a PL/pgSQL function,
//! so each of its statements takes a fresh snapshot under `READ COMMITTED`)
//!
//! 1. takes a transaction-scoped advisory lock (`pg_advisory_xact_lock`)
//!    per requested scope, in ascending key order, before it touches any
//!    row. The key is FNV-1a 64 over the schema name, a `0xFF` byte and the
//!    scope, derived by this crate; stores in other schemas never wait on
//!    it, and a colliding pair of scopes merely takes turns;
//! 2. reads the active holders of the scopes, then its instant
//!    (`clock_timestamp()`, after every wait, so never earlier than a
//!    scope's previous holder was released);
//! 3. if the id is free and nothing holds the scopes, inserts the record
//!    and its `held_scopes` rows; otherwise answers the holders (or that the
//!    id is taken) and writes nothing.
//!
//! Most admissions are that one call, in a transaction of its own: one
//! round trip admits, and one answers a conflict, judged by
//! [`lease_core::rules::plan_admission`] on the holders it read (they held
//! the scopes at that instant). An admission that interrupts holders calls
//! the function again inside a `READ COMMITTED` transaction, asking it to
//! lock the holders (`FOR UPDATE`, records only, in id order) until the
//! end; decides on them; interrupts them (each drawing a new fence); and
//! calls it once more, which now finds the scopes free and admits, with a
//! fence above theirs. In a session whose default isolation level is
//! higher, where one snapshot serves every statement, the function refuses
//! to decide and every admission takes the transactional path.
//!
//! Since an admission waits only for locks of higher keys than those it
//! holds, and for records (in id order) only once it holds all its scope
//! locks, admissions cannot deadlock on one another, and each sees all that
//! the overlapping admissions before it committed: none trips on another's
//! `held_scopes` row.
//!
//! `renew`, `transition` and `claim_for_takeover` take no scope lock, and
//! need none: each is one statement that locks one record and updates it
//! before deleting that record's `held_scopes` rows, which nothing else
//! locks. Once it holds that record it waits for nothing, so it cannot close
//! a cycle with an admission; an admission waiting for the record re-reads
//! it when the statement commits, and drops it if it was released.
//!
//! `renew_many` locks all its records in one statement, in id order like
//! an admission, before it writes any: it and an admission (or another
//! batch) wait for one another in that one order, never in a cycle.
//!
//! What can still spoil an attempt (a deadlock with a transaction that
//! locks records in another order, such as another application; an older
//! version of this crate, which takes no scope locks, admitting on the same
//! schema) is retried, at most three attempts in all.
//! Then the admission answers `Conflict` with a holder of its scopes if
//! there is one, and otherwise decides once more under the locks.
//!
//! [`LeaseStore::now`]: lease_core::LeaseStore::now

mod config;
mod decode;
mod error;
mod queue;
mod scope_locks;
mod sql;
mod store;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{Error, ErrorKind, Result};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

pub use config::{PgStoreConfig, DEFAULT_OPERATION_TIMEOUT, DEFAULT_SCHEMA};

use config::SchemaName;
use error::{migrate_error, store_error};
use scope_locks::ScopeLocks;
use sql::Statements;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Advisory-lock key serialising `CREATE SCHEMA IF NOT EXISTS` between
/// workers (two concurrent creations of one schema can otherwise fail).
const SCHEMA_CREATION_LOCK: i64 = 0x7465_6e75_7265_0001;

/// The PostgreSQL lease store. Cloning shares the pool.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    schema: SchemaName,
    sql: Arc<Statements>,
    scope_locks: ScopeLocks,
    operation_timeout: Duration,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.schema.as_str())
            .field("pool_size", &self.pool.size())
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects a pool as `config` says, creates and migrates the schema,
    /// and answers the store.
    ///
    /// A bad URL or schema name is [`ErrorKind::Config`];
    /// an unreachable server is retryable.
    pub async fn connect(config: &PgStoreConfig) -> Result<Self> {
        let schema = SchemaName::parse(config.schema_name())?;
        let options: sqlx::postgres::PgConnectOptions =
            config.url().parse().map_err(store_error)?;
        let pool = PgPoolOptions::new()
            .max_connections(config.connection_limit())
            .acquire_timeout(config.connection_wait())
            .connect_with(options)
            .await
            .map_err(store_error)?;
        let store = Self::with_schema(pool, schema).await?;
        Ok(store.with_operation_timeout(config.operation_limit()))
    }

    /// Uses an existing pool, keeping the records in `schema`, created and
    /// migrated if needed. The pool's `search_path` is left alone. Each
    /// operation may take [`DEFAULT_OPERATION_TIMEOUT`]; see
    /// [`with_operation_timeout`](Self::with_operation_timeout).
    pub async fn from_pool(pool: PgPool, schema: &str) -> Result<Self> {
        Self::with_schema(pool, SchemaName::parse(schema)?).await
    }

    async fn with_schema(pool: PgPool, schema: SchemaName) -> Result<Self> {
        let store = PgStore {
            sql: Arc::new(Statements::new(&schema)),
            scope_locks: ScopeLocks::for_schema(schema.as_str()),
            pool,
            schema,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Creates the schema if missing and applies the migrations it lacks.
    /// Idempotent, and safe to run from many workers at once.
    pub async fn migrate(&self) -> Result<()> {
        // A connection of its own: `search_path` is set for the migrator and
        // the session (with any advisory lock a failed run left) ends with it.
        let mut connection = self
            .pool
            .connect_options()
            .connect()
            .await
            .map_err(store_error)?;
        let outcome = self.migrate_on(&mut connection).await;
        // Closing can only fail if the session is already gone.
        let _ = connection.close().await;
        outcome
    }

    async fn migrate_on(&self, connection: &mut sqlx::PgConnection) -> Result<()> {
        let schema = self.schema.quoted();
        let mut creation = connection.begin().await.map_err(store_error)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SCHEMA_CREATION_LOCK)
            .execute(&mut *creation)
            .await
            .map_err(store_error)?;
        sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .execute(&mut *creation)
            .await
            .map_err(store_error)?;
        creation.commit().await.map_err(store_error)?;
        // `pg_temp` last: otherwise it is searched first, and a session's
        // temporary table could stand in for the schema's in the functions
        // the migrations create (they keep this path).
        sqlx::query(&format!("SET search_path TO {schema}, pg_temp"))
            .execute(&mut *connection)
            .await
            .map_err(store_error)?;
        // `run_direct` is `run` minus its `Acquire` bound, whose lifetime
        // makes `run` unusable in a future that must be `Send` for any
        // lifetime (sqlx documents it as the way around that).
        MIGRATOR.run_direct(connection).await.map_err(migrate_error)
    }

    /// The store with each whole operation bounded by `timeout`, as
    /// [`PgStoreConfig::operation_timeout`] describes.
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Runs one whole store operation, `operation` naming it, within the
    /// operation timeout (see the crate docs on what a cut leaves behind).
    pub(crate) async fn bounded<T>(
        &self,
        operation: &str,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.operation_timeout, work).await {
            Ok(answer) => answer,
            Err(elapsed) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "{operation} got no answer from PostgreSQL within {:?}; \
                     whether it took effect is unknown",
                    self.operation_timeout
                ),
            )
            .with_source(elapsed)),
        }
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the records.
    pub fn schema(&self) -> &str {
        self.schema.as_str()
    }

    /// Closes the pool: waits for connections in use to come back, then
    /// closes them all. Later operations answer
    /// [`ErrorKind::Unavailable`].
    pub async fn close(&self) {
        self.pool.close().await;
    }
}
