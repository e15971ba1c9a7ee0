//! What the server must be for the store to keep the contract, checked at
//! connect (a writable server, InnoDB tables), and what it may lose in a
//! crash or a failover, read on demand for deployment checks
//! (`tenure check`).

use sqlx::{MySqlConnection, Row};
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::config::Isolation;
use crate::error::store_error;
use crate::schema::TABLES;
use crate::MySqlStore;

/// One row of the settings [`ServerSettings`] holds.
const SETTINGS: &str = "SELECT VERSION(), @@read_only, @@innodb_flush_log_at_trx_commit, \
     @@log_bin, @@binlog_format, @@sync_binlog";

/// The server's settings that decide what a crash or a failover loses, as
/// [`MySqlStore::server_settings`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerSettings {
    /// `VERSION()`: MariaDB's carries `MariaDB`.
    pub version: String,
    /// `read_only`: a replica, or a primary fenced off by a failover tool.
    pub read_only: bool,
    /// `innodb_flush_log_at_trx_commit`: anything but 1 acknowledges
    /// commits a crash may lose (fences among them: a crash could hand
    /// them out again).
    pub flush_log_at_commit: u64,
    /// `log_bin`: whether the server keeps a binary log (replicates).
    pub binary_log: bool,
    /// `binlog_format`: `ROW` or `MIXED` (`STATEMENT` cannot log
    /// READ COMMITTED transactions).
    pub binlog_format: String,
    /// `sync_binlog`: anything but 1, with the binary log on, lets a crash
    /// lose commits from the log a replica reads.
    pub sync_binlog: u64,
}

impl ServerSettings {
    /// Whether the server is MariaDB (its version says so).
    pub fn is_mariadb(&self) -> bool {
        self.version.contains("MariaDB")
    }

    /// Whether an acknowledged commit survives a crash of the server: the
    /// redo log flushed at each commit, and the binary log too when there
    /// is one.
    pub fn durable(&self) -> bool {
        self.flush_log_at_commit == 1 && (!self.binary_log || self.sync_binlog == 1)
    }
}

/// Reads the settings on `connection`.
async fn read_settings(connection: &mut MySqlConnection) -> Result<ServerSettings> {
    let row = sqlx::query(SETTINGS)
        .fetch_one(&mut *connection)
        .await
        .map_err(store_error)?;
    let number = |index: usize| -> Result<u64> {
        row.try_get::<u64, _>(index)
            .or_else(|_| row.try_get::<i64, _>(index).map(i64::unsigned_abs))
            .map_err(store_error)
    };
    Ok(ServerSettings {
        version: row.try_get(0).map_err(store_error)?,
        read_only: number(1)? != 0,
        flush_log_at_commit: number(2)?,
        binary_log: number(3)? != 0,
        binlog_format: row.try_get(4).map_err(store_error)?,
        sync_binlog: number(5)?,
    })
}

/// Refuses a server every write would fail on: a read-only one, and one
/// whose statement-based binary log cannot log the READ COMMITTED
/// transactions of sessions at `isolation`.
pub(crate) async fn refuse_unsafe_server(
    connection: &mut MySqlConnection,
    isolation: Isolation,
) -> Result<ServerSettings> {
    let settings = read_settings(connection).await?;
    if isolation == Isolation::ReadCommitted
        && settings.binary_log
        && settings.binlog_format.eq_ignore_ascii_case("STATEMENT")
    {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the MySQL server ({}) logs statements (binlog_format = STATEMENT), which \
                 cannot log the store's READ COMMITTED transactions: set binlog_format = ROW, \
                 or run the store's sessions at another isolation level (?isolation=)",
                settings.version
            ),
        ));
    }
    if settings.read_only {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the MySQL server ({}) is read-only (read_only = ON): it is a replica, or a \
                 primary a failover fenced off; point the store at the writable primary",
                settings.version
            ),
        ));
    }
    Ok(settings)
}

/// Refuses tables that are not InnoDB (a server without InnoDB, or with
/// `NO_ENGINE_SUBSTITUTION` off, may have created them as MyISAM, which
/// has no transactions and no row locks).
pub(crate) async fn refuse_other_engines(connection: &mut MySqlConnection) -> Result<()> {
    let names = TABLES
        .iter()
        .map(|table| format!("'{table}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let others = sqlx::query(&format!(
        "SELECT table_name, engine FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name IN ({names}) \
         AND UPPER(engine) <> 'INNODB'"
    ))
    .fetch_all(&mut *connection)
    .await
    .map_err(store_error)?;
    if let Some(row) = others.first() {
        let table: String = row.try_get(0).map_err(store_error)?;
        let engine: Option<String> = row.try_get(1).map_err(store_error)?;
        return Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "the table {table} uses the {} engine, which has no transactions or row \
                 locks: the store needs InnoDB (ALTER TABLE {table} ENGINE = InnoDB)",
                engine.unwrap_or_else(|| "unknown".to_owned())
            ),
        ));
    }
    Ok(())
}

impl MySqlStore {
    /// Reads the server's durability and replication settings.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn server_settings(&self) -> Result<ServerSettings> {
        let mut session = self.session().await?;
        tenure_lease_core::layer::bounded(
            self.config.operation_limit(),
            "reading the server's settings on MySQL",
            read_settings(&mut session),
        )
        .await
    }
}
