//! How to reach the server and where to keep the records.
//!
//! The schema name is the one piece of SQL text a caller controls that cannot
//! be a bound parameter, so it is checked to be a plain identifier before it
//! is ever quoted into a statement.

use std::fmt;
use std::time::Duration;

pub(crate) use tenure_lease_core::redact::redact_url;
use tenure_lease_core::{Error, ErrorKind, Result};

/// The schema a store uses unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "tenure";

/// How long a whole operation may take unless told otherwise.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest schema name PostgreSQL keeps without truncating it (`NAMEDATALEN - 1`).
const MAX_SCHEMA_BYTES: usize = 63;

/// What [`PgStore::connect`](crate::PgStore::connect) needs: the server URL,
/// the schema, and the pool's bounds.
///
/// `Debug` shows the URL with its password replaced by `***`, so a config can
/// be logged safely.
///
/// ```
/// use std::time::Duration;
/// use tenure_backend_postgres::PgStoreConfig;
///
/// let config = PgStoreConfig::new("postgres://app:s3cret@db.internal:5432/jobs")
///     .schema("tenure_leases")
///     .max_connections(8)
///     .acquire_timeout(Duration::from_secs(5))
///     .operation_timeout(Duration::from_secs(3));
/// let shown = format!("{config:?}");
/// assert!(!shown.contains("s3cret"));
/// assert!(shown.contains("app:***@db.internal"));
/// ```
#[derive(Clone)]
pub struct PgStoreConfig {
    url: String,
    schema: String,
    max_connections: u32,
    acquire_timeout: Duration,
    operation_timeout: Duration,
    migration_mode: MigrationMode,
}

/// What [`PgStore::connect`](crate::PgStore::connect) does to the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MigrationMode {
    /// Creates the schema if missing and applies the migrations it lacks:
    /// the role needs `CREATE` on the database (or an existing schema it
    /// owns). The default.
    #[default]
    Apply,
    /// Changes nothing: checks that the schema carries every migration of
    /// this version and none it does not know, and answers
    /// [`ErrorKind::Incompatible`] naming the first one missing otherwise.
    /// For an application role holding only the grants the crate docs list
    /// ([Least privilege](crate#least-privilege)); apply the migrations
    /// beforehand with
    /// [`PgStore::apply_migrations`](crate::PgStore::apply_migrations).
    VerifyOnly,
}

impl PgStoreConfig {
    /// A config for the server at `url` (`postgres://user:password@host:port/database`,
    /// with any libpq-style query parameters sqlx understands, e.g. `sslmode`),
    /// schema [`DEFAULT_SCHEMA`], at most 10 connections, 10 s to get one,
    /// [`DEFAULT_OPERATION_TIMEOUT`] per operation.
    pub fn new(url: impl Into<String>) -> Self {
        PgStoreConfig {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            migration_mode: MigrationMode::Apply,
        }
    }

    /// Keeps the records in `schema` (created if missing). Must be a plain
    /// identifier: ASCII letters, digits and `_`, not starting with a digit
    /// or `pg_`, at most 63 bytes. Checked when connecting.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Opens at most `max` connections (at least 1).
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// Waits at most `timeout` for a free connection; past it an operation
    /// answers [`ErrorKind::Timeout`]. Also bounds the first connection
    /// [`PgStore::connect`](crate::PgStore::connect) opens: past it, connecting
    /// answers [`ErrorKind::Unavailable`].
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Bounds each whole store operation (every [`LeaseStore`] and
    /// [`JobQueue`] call): waiting for a connection, every statement, and
    /// any retries it makes. Past it the call answers
    /// [`ErrorKind::Timeout`], its outcome unknown: the server may or may
    /// not have applied it (see [`PgStore`](crate::PgStore) on what happens
    /// to the cut statement). Without it, a server or network that goes
    /// silent after a statement was sent keeps the call waiting for as long
    /// as the operating system keeps the TCP connection open.
    ///
    /// [`LeaseStore`]: tenure_lease_core::LeaseStore
    /// [`JobQueue`]: tenure_lease_core::queue::JobQueue
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Prepares the schema at connect as `mode` says (default
    /// [`MigrationMode::Apply`]).
    pub fn migrations(mut self, mode: MigrationMode) -> Self {
        self.migration_mode = mode;
        self
    }

    /// What connecting does to the schema.
    pub fn migration_mode(&self) -> MigrationMode {
        self.migration_mode
    }

    /// The server URL, password included.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema name, as given.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// The pool's connection bound.
    pub fn connection_limit(&self) -> u32 {
        self.max_connections
    }

    /// How long an operation waits for a free connection.
    pub fn connection_wait(&self) -> Duration {
        self.acquire_timeout
    }

    /// How long a whole operation may take.
    pub fn operation_limit(&self) -> Duration {
        self.operation_timeout
    }
}

impl From<&str> for PgStoreConfig {
    /// [`PgStoreConfig::new`]`(url)`, with every default.
    fn from(url: &str) -> Self {
        PgStoreConfig::new(url)
    }
}

impl From<String> for PgStoreConfig {
    /// [`PgStoreConfig::new`]`(url)`, with every default.
    fn from(url: String) -> Self {
        PgStoreConfig::new(url)
    }
}

impl fmt::Debug for PgStoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStoreConfig")
            .field("url", &redact_url(&self.url))
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .field("migration_mode", &self.migration_mode)
            .finish()
    }
}

/// A schema name checked to be a plain identifier, safe to quote into SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SchemaName(String);

impl SchemaName {
    /// Checks `name`; [`ErrorKind::Config`] naming the rule it breaks.
    pub(crate) fn parse(name: &str) -> Result<Self> {
        let reject = |why: &str| {
            Err(Error::new(
                ErrorKind::Config,
                format!("schema name {name:?} {why}"),
            ))
        };
        let Some(first) = name.chars().next() else {
            return reject("is empty");
        };
        if name.len() > MAX_SCHEMA_BYTES {
            return reject("is longer than 63 bytes");
        }
        if !(first.is_ascii_alphabetic() || first == '_') {
            return reject("must start with an ASCII letter or `_`");
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return reject("may contain only ASCII letters, digits and `_`");
        }
        if name.to_ascii_lowercase().starts_with("pg_") {
            return reject("must not start with `pg_` (reserved for system schemas)");
        }
        Ok(SchemaName(name.to_owned()))
    }

    /// The name as given.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as a quoted SQL identifier. Quoting keeps its case; the
    /// character check in [`parse`](Self::parse) leaves nothing to escape.
    pub(crate) fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_password() {
        let config = PgStoreConfig::new("postgres://app:hunter2@db/jobs?password=hunter2");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("schema: \"tenure\""), "{shown}");
    }

    #[test]
    fn schema_names_must_be_plain_identifiers() {
        for good in ["tenure", "Tenure_2", "_x", &"a".repeat(63)] {
            assert_eq!(
                SchemaName::parse(good).map(|s| s.quoted()).ok(),
                Some(format!("\"{good}\""))
            );
        }
        for bad in [
            "",
            "1abc",
            "a-b",
            "a\"b",
            "a;drop",
            "pg_catalog",
            "PG_x",
            "ünï",
            &"a".repeat(64),
        ] {
            let error = SchemaName::parse(bad).expect_err(bad);
            assert_eq!(error.kind(), ErrorKind::Config, "{bad}");
        }
    }
}
