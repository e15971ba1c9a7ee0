//! How to reach the server and where to keep the records.
//!
//! The schema name is the one piece of SQL text a caller controls that cannot
//! be a bound parameter, so it is checked to be a plain identifier before it
//! is ever quoted into a statement.

use std::fmt;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgSslMode};
use tenure_lease_core::backend::url::{refuse_unknown_parameters, take_parameter};
pub(crate) use tenure_lease_core::redact::redact_url;
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::error::store_error;

/// The schema a store uses unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "tenure";

/// How long a whole operation may take unless told otherwise.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest schema name PostgreSQL keeps without truncating it (`NAMEDATALEN - 1`).
const MAX_SCHEMA_BYTES: usize = 63;

/// The URL parameter that is [`PgStoreConfig::require_synchronous_standby`].
const SYNCHRONOUS_STANDBY_PARAMETER: &str = "require_synchronous_standby";

/// The URL schemes of a PostgreSQL server.
pub const URL_SCHEMES: &[&str] = &["postgres", "postgresql"];

/// The URL parameter naming the schema.
const SCHEMA_PARAMETER: &str = "schema";

/// The query parameters a PostgreSQL URL may carry: tenure's (`schema`,
/// `require_synchronous_standby`, `tls_ca`, `tls_cert`, `tls_key`) and
/// those sqlx reads (libpq's names, `options[NAME]` for one server
/// setting). Any other is refused at connect: a misspelt one would
/// otherwise be dropped without a word.
pub const URL_PARAMETERS: &[&str] = &[
    SCHEMA_PARAMETER,
    SYNCHRONOUS_STANDBY_PARAMETER,
    "tls_ca",
    "tls_cert",
    "tls_key",
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
    "options[",
];

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
    tls: Option<TlsCertificates>,
    refuse_fences_from_before_failover: bool,
    require_synchronous_standby: bool,
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
    /// with any libpq-style query parameters sqlx understands), schema
    /// [`DEFAULT_SCHEMA`], at most 10 connections, 10 s to get one,
    /// [`DEFAULT_OPERATION_TIMEOUT`] per operation.
    ///
    /// TLS is libpq's: `sslmode=require` encrypts, `verify-ca` also checks
    /// the server's certificate against `sslrootcert=/path/ca.pem` (or the
    /// system's trust store), `verify-full` its host name too; `sslcert=`
    /// and `sslkey=` present a client certificate. The `tls_ca=`,
    /// `tls_cert=` and `tls_key=` parameters every tenure backend takes
    /// (see [`tenure_lease_core::tls`]), like [`tls`](Self::tls), verify in
    /// full.
    ///
    /// `schema=NAME` in the URL is [`schema`](Self::schema), which a later
    /// call overrides. `require_synchronous_standby=true` in the URL is
    /// [`require_synchronous_standby`](Self::require_synchronous_standby)
    /// (`false` is the default); any other value is refused at connect, as
    /// is a parameter not in [`URL_PARAMETERS`].
    pub fn new(url: impl Into<String>) -> Self {
        let (url, schema) = take_parameter(&url.into(), SCHEMA_PARAMETER);
        let (without, requirement) = take_parameter(&url, SYNCHRONOUS_STANDBY_PARAMETER);
        let (url, require_synchronous_standby) = match requirement.as_deref() {
            Some("true") => (without, true),
            Some("false") => (without, false),
            // Left in the URL, for connect to refuse.
            _ => (url, false),
        };
        PgStoreConfig {
            url,
            schema: schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_owned()),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            migration_mode: MigrationMode::Apply,
            tls: None,
            refuse_fences_from_before_failover: false,
            require_synchronous_standby,
        }
    }

    /// Encrypts every connection, trusting and presenting `certificates`
    /// (in place of any the URL names), and verifies the server's
    /// certificate and host name (`sslmode=verify-full`).
    pub fn tls(mut self, certificates: TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
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

    /// Has the store's fence gates refuse every fence drawn before the
    /// server's last promotion (default: off).
    ///
    /// Fences are drawn on the server's WAL timeline, so a promoted standby
    /// never hands out a fence again. Its gates, though, are what it had
    /// received: a successor's gate write the old primary acknowledged but
    /// never shipped is lost, and a deposed owner whose fence lies between
    /// the lost write and what the standby holds would be accepted. With
    /// this on, a gate is raised to the timeline's floor before each check:
    /// every owner from before the promotion is refused (as stale) and must
    /// take its lease again, and no deposed owner is ever accepted.
    pub fn refuse_fences_from_before_failover(mut self, refuse: bool) -> Self {
        self.refuse_fences_from_before_failover = refuse;
        self
    }

    /// Whether the store's gates refuse fences from before a promotion.
    pub fn refuses_fences_from_before_failover(&self) -> bool {
        self.refuse_fences_from_before_failover
    }

    /// Acknowledges a write only once a synchronous standby has it
    /// (default: off), so a failover to that standby loses no acknowledged
    /// admission, transition, completion or gate write.
    ///
    /// Every connection of the store then runs with `synchronous_commit`
    /// `on` or stronger (raised from `off`, `local` or `remote_write`,
    /// whatever the server's, the database's or the role's default; a
    /// `remote_apply` is kept),
    /// and [`PgStore::connect`](crate::PgStore::connect) refuses a server
    /// whose `synchronous_standby_names` is empty with
    /// [`ErrorKind::Incompatible`]: on it no commit waits for a standby.
    /// While no synchronous standby streams, every write waits for one
    /// until the [operation timeout](Self::operation_timeout) and answers
    /// [`ErrorKind::Timeout`], its outcome unknown (the commit is on the
    /// primary, and a failover may lose it); `tenure check` fails then.
    pub fn require_synchronous_standby(mut self, require: bool) -> Self {
        self.require_synchronous_standby = require;
        self
    }

    /// Whether a write is acknowledged only once a synchronous standby has
    /// it.
    pub fn requires_synchronous_standby(&self) -> bool {
        self.require_synchronous_standby
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

    /// What sqlx connects with: the URL's settings, and the certificates
    /// of [`tls`](Self::tls) or of the URL's `tls_*` parameters, verified in
    /// full.
    pub(crate) fn connect_options(&self) -> Result<PgConnectOptions> {
        if let (_, Some(value)) = take_parameter(&self.url, SYNCHRONOUS_STANDBY_PARAMETER) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                "{SYNCHRONOUS_STANDBY_PARAMETER}={value:?} in the URL: it must be true or false"
            ),
            ));
        }
        refuse_unknown_parameters(&self.url, "PostgreSQL", URL_PARAMETERS)?;
        if !names_a_server(&self.url) {
            return Err(Error::new(
                ErrorKind::Config,
                "the PostgreSQL URL names no server, and the driver's default (the local \
                 socket, the operating system's user and database) is rarely the one meant: \
                 write postgres://USER@HOST:PORT/DATABASE (for a Unix socket, \
                 postgres:///DATABASE?host=/run/postgresql&user=USER)",
            ));
        }
        let (url, from_url) = TlsCertificates::split_from_url(&self.url)?;
        let mut options: PgConnectOptions = url.parse().map_err(store_error)?;
        if let Some(certificates) = self.tls.clone().or(from_url) {
            options = options.ssl_mode(PgSslMode::VerifyFull);
            if let Some(roots) = certificates.roots() {
                options = options.ssl_root_cert_from_pem(roots.to_vec());
            }
            if let Some((certificate, key)) = certificates.identity() {
                options = options
                    .ssl_client_cert_from_pem(certificate)
                    .ssl_client_key_from_pem(key);
            }
        }
        Ok(options)
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
            .field("tls", &self.tls)
            .field(
                "refuse_fences_from_before_failover",
                &self.refuse_fences_from_before_failover,
            )
            .field(
                "require_synchronous_standby",
                &self.require_synchronous_standby,
            )
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

/// Whether `url` names a server: a host in its authority, or a `host` or
/// `hostaddr` parameter.
fn names_a_server(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = host.rsplit_once(':').map_or(host, |(host, _)| host);
    !host.is_empty()
        || ["host", "hostaddr"].iter().any(|name| {
            take_parameter(url, name)
                .1
                .is_some_and(|value| !value.is_empty())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_naming_no_server_is_refused() {
        for url in [
            "postgres://",
            "postgresql://",
            "postgres:///test",
            "postgres://app@/jobs",
            "postgres://app:secret@:5432/jobs",
            "postgres:///test?host=",
        ] {
            let error = PgStoreConfig::new(url).connect_options().expect_err(url);
            assert_eq!(error.kind(), ErrorKind::Config, "{url}");
            assert!(
                error.message().contains("names no server"),
                "{url}: {error}"
            );
            assert!(!error.message().contains("secret"), "{url}: {error}");
        }
        for url in [
            "postgres://db.internal/jobs",
            "postgres://app@127.0.0.1:5432/jobs",
            "postgres://app@[::1]:5432/jobs",
            "postgres:///jobs?host=/run/postgresql&user=app",
            "postgres:///jobs?hostaddr=127.0.0.1",
        ] {
            let answer = PgStoreConfig::new(url).connect_options();
            assert!(answer.is_ok(), "{url}: {:?}", answer.err());
        }
    }

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

    #[test]
    fn the_url_may_require_a_synchronous_standby() {
        let required =
            PgStoreConfig::new("postgres://h/db?sslmode=disable&require_synchronous_standby=true");
        assert!(required.requires_synchronous_standby());
        assert_eq!(required.url(), "postgres://h/db?sslmode=disable");
        let not = PgStoreConfig::new("postgres://h/db?require_synchronous_standby=false");
        assert!(!not.requires_synchronous_standby());
        assert_eq!(not.url(), "postgres://h/db");
        let malformed = PgStoreConfig::new("postgres://h/db?require_synchronous_standby=yes");
        assert!(!malformed.requires_synchronous_standby());
        let error = malformed.connect_options().expect_err("not a boolean");
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(error.to_string().contains("true or false"), "{error}");
    }
}
