//! How to reach the server, at which isolation level its sessions run, and
//! what connecting does to the tables.

use std::fmt;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use tenure_lease_core::backend::url::{refuse_unknown_parameters, take_parameter};
use tenure_lease_core::redact::redact_url;
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::error::store_error;

/// How long a whole operation may take unless told otherwise.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL schemes of a MySQL or MariaDB server.
pub const URL_SCHEMES: &[&str] = &["mysql", "mariadb"];

/// The URL parameter that is [`MySqlConfig::isolation`].
const ISOLATION_PARAMETER: &str = "isolation";

/// The query parameters a MySQL URL may carry: tenure's (`isolation`,
/// `tls_ca`, `tls_cert`, `tls_key`) and those sqlx reads. Any other is
/// refused at connect: a misspelt one would otherwise be dropped without a
/// word.
pub const URL_PARAMETERS: &[&str] = &[
    ISOLATION_PARAMETER,
    "tls_ca",
    "tls_cert",
    "tls_key",
    "sslmode",
    "ssl-mode",
    "sslca",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "charset",
    "collation",
    "statement-cache-capacity",
    "socket",
];

/// The isolation level the store's sessions run their transactions at.
///
/// Every decision reads what it decides on with locking reads
/// (`SELECT … FOR UPDATE`), which see the latest committed rows at every
/// level, so the store is correct at each of them; they differ in how
/// often contending transactions deadlock (and are retried): REPEATABLE READ
/// and SERIALIZABLE also lock the gaps between rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Isolation {
    /// `READ COMMITTED`, set for each session the store opens: the fewest
    /// locks. The default.
    #[default]
    ReadCommitted,
    /// `REPEATABLE READ` (InnoDB's own default), set for each session.
    RepeatableRead,
    /// `SERIALIZABLE`, set for each session.
    Serializable,
    /// Whatever the server and the user's account give a new session: the
    /// store sets nothing.
    ServerDefault,
}

impl Isolation {
    /// The statement a new session runs, if any.
    pub(crate) fn session_statement(self) -> Option<&'static str> {
        match self {
            Isolation::ReadCommitted => {
                Some("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            }
            Isolation::RepeatableRead => {
                Some("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            }
            Isolation::Serializable => Some("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Isolation::ServerDefault => None,
        }
    }

    /// The level named `value` in a URL (`read_committed`,
    /// `repeatable_read`, `serializable`, `server_default`).
    fn parse(value: &str) -> Result<Self> {
        match value {
            "read_committed" => Ok(Isolation::ReadCommitted),
            "repeatable_read" => Ok(Isolation::RepeatableRead),
            "serializable" => Ok(Isolation::Serializable),
            "server_default" => Ok(Isolation::ServerDefault),
            other => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "isolation={other:?} in the MySQL URL is not a level this store knows: \
                     write read_committed, repeatable_read, serializable or server_default"
                ),
            )),
        }
    }
}

/// What [`MySqlStore::connect`](crate::MySqlStore::connect) does to the
/// tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MigrationMode {
    /// Creates the tables if missing and applies the migrations they lack:
    /// the account needs `CREATE`, `ALTER` and `INDEX` on the database. The
    /// default.
    #[default]
    Apply,
    /// Changes nothing: checks that the tables carry every migration of
    /// this version and none it does not know, and answers
    /// [`ErrorKind::Incompatible`] naming the first one missing otherwise.
    /// For an application account holding only the grants the crate docs
    /// list ([Least privilege](crate#least-privilege)); apply the
    /// migrations beforehand with
    /// [`MySqlStore::apply_migrations`](crate::MySqlStore::apply_migrations).
    VerifyOnly,
}

/// What [`MySqlStore::connect`](crate::MySqlStore::connect) needs: the
/// server URL (its path names the database the tables live in), the
/// sessions' isolation level, and the pool's bounds.
///
/// `Debug` shows the URL with its password replaced by `***`, so a config
/// can be logged safely.
///
/// ```
/// use std::time::Duration;
/// use tenure_backend_mysql::MySqlConfig;
///
/// let config = MySqlConfig::new("mysql://app:s3cret@db.internal:3306/jobs")
///     .max_connections(8)
///     .acquire_timeout(Duration::from_secs(5))
///     .operation_timeout(Duration::from_secs(3));
/// let shown = format!("{config:?}");
/// assert!(!shown.contains("s3cret"));
/// assert!(shown.contains("app:***@db.internal"));
/// ```
#[derive(Clone)]
pub struct MySqlConfig {
    url: String,
    isolation: Isolation,
    /// An `isolation=` value of the URL that names no level, refused at
    /// connect (where errors are answered).
    unknown_isolation: Option<String>,
    max_connections: u32,
    acquire_timeout: Duration,
    operation_timeout: Duration,
    migration_mode: MigrationMode,
    tls: Option<TlsCertificates>,
}

impl MySqlConfig {
    /// A config for the server at `url`
    /// (`mysql://user:password@host:port/database`, or `mariadb://…`, with
    /// any query parameter sqlx understands), sessions at
    /// [`Isolation::ReadCommitted`], at most 10 connections, 10 s to get
    /// one, [`DEFAULT_OPERATION_TIMEOUT`] per operation.
    ///
    /// TLS is sqlx's: `ssl-mode=required` encrypts, `verify_ca` also checks
    /// the server's certificate against `ssl-ca=/path/ca.pem`,
    /// `verify_identity` its host name too; `ssl-cert=` and `ssl-key=`
    /// present a client certificate. The `tls_ca=`, `tls_cert=` and
    /// `tls_key=` parameters every tenure backend takes (see
    /// [`tenure_lease_core::tls`]), like [`tls`](Self::tls), verify in full.
    ///
    /// `isolation=read_committed|repeatable_read|serializable|server_default`
    /// in the URL is [`isolation`](Self::isolation), which a later call
    /// overrides; any other value is refused at connect, as is a parameter
    /// not in [`URL_PARAMETERS`].
    pub fn new(url: impl Into<String>) -> Self {
        let (url, isolation) = take_parameter(&url.into(), ISOLATION_PARAMETER);
        let mut config = MySqlConfig {
            url,
            isolation: Isolation::default(),
            unknown_isolation: None,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            migration_mode: MigrationMode::default(),
            tls: None,
        };
        match isolation.as_deref().map(Isolation::parse) {
            Some(Ok(level)) => config.isolation = level,
            Some(Err(_)) => config.unknown_isolation = isolation,
            None => {}
        }
        config
    }

    /// Verifies the server against `certificates` (their authorities, and
    /// a client identity if they carry one), by host name, over TLS.
    pub fn tls(mut self, certificates: TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
    }

    /// The isolation level every session of the store runs at.
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self.unknown_isolation = None;
        self
    }

    /// At most `max` connections at once (at least 1).
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// How long an operation waits for a free connection before it answers
    /// [`ErrorKind::Timeout`]; also how long connecting may take.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// How long a whole operation may take before it answers
    /// [`ErrorKind::Timeout`] (its transaction is then rolled back, or its
    /// outcome is unknown if the commit was already sent).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// What connecting does to the tables.
    pub fn migrations(mut self, mode: MigrationMode) -> Self {
        self.migration_mode = mode;
        self
    }

    /// What connecting does to the tables.
    pub fn migration_mode(&self) -> MigrationMode {
        self.migration_mode
    }

    /// The URL, as given (with its password: do not log it; `Debug` hides
    /// it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The isolation level the store's sessions run at.
    pub fn isolation_level(&self) -> Isolation {
        self.isolation
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

    /// sqlx's options for the URL, with TLS as configured.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] for a URL that cannot be parsed, names no
    /// database, or carries a parameter this store does not know.
    pub(crate) fn connect_options(&self) -> Result<MySqlConnectOptions> {
        if let Some(Err(error)) = self.unknown_isolation.as_deref().map(Isolation::parse) {
            return Err(error);
        }
        refuse_unknown_parameters(&self.url, "MySQL", URL_PARAMETERS)?;
        let url = match self.url.strip_prefix("mariadb://") {
            Some(rest) => format!("mysql://{rest}"),
            None => self.url.clone(),
        };
        let (url, from_url) = TlsCertificates::split_from_url(&url)?;
        let mut options: MySqlConnectOptions = url.parse().map_err(|error| {
            let error = store_error(error);
            Error::new(
                ErrorKind::Config,
                format!(
                    "the MySQL URL {} cannot be read ({}): write \
                     mysql://USER:PASSWORD@HOST:PORT/DATABASE",
                    redact_url(&self.url),
                    error.message()
                ),
            )
            .with_source(error)
        })?;
        if options.get_database().is_none_or(str::is_empty) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the MySQL URL {} names no database to keep the tables in: write \
                     mysql://USER:PASSWORD@HOST:PORT/DATABASE",
                    redact_url(&self.url)
                ),
            ));
        }
        if let Some(certificates) = self.tls.clone().or(from_url) {
            options = options.ssl_mode(MySqlSslMode::VerifyIdentity);
            if let Some(roots) = certificates.roots() {
                options = options.ssl_ca_from_pem(roots.to_vec());
            }
            if let Some((certificate, key)) = certificates.identity() {
                options = options
                    .ssl_client_cert_from_pem(certificate)
                    .ssl_client_key_from_pem(key);
            }
        }
        Ok(options)
    }
}

impl From<&str> for MySqlConfig {
    /// [`MySqlConfig::new`]`(url)`, with every default.
    fn from(url: &str) -> Self {
        MySqlConfig::new(url)
    }
}

impl From<String> for MySqlConfig {
    /// [`MySqlConfig::new`]`(url)`, with every default.
    fn from(url: String) -> Self {
        MySqlConfig::new(url)
    }
}

impl fmt::Debug for MySqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlConfig")
            .field("url", &redact_url(&self.url))
            .field("isolation", &self.isolation)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .field("migration_mode", &self.migration_mode)
            .field("tls", &self.tls)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_password() {
        let config = MySqlConfig::new("mysql://app:hunter2@db/jobs");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn the_url_names_the_isolation_level() {
        let config = MySqlConfig::new("mysql://h/db?isolation=serializable&ssl-mode=disabled");
        assert_eq!(config.isolation_level(), Isolation::Serializable);
        assert_eq!(config.url(), "mysql://h/db?ssl-mode=disabled");
        assert!(config.connect_options().is_ok());
        let bad = MySqlConfig::new("mysql://h/db?isolation=snapshot");
        let error = bad.connect_options().expect_err("no such level");
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(error.message().contains("snapshot"), "{error}");
    }

    #[test]
    fn a_url_without_a_database_or_with_an_unknown_parameter_is_refused() {
        for url in [
            "mysql://app:secret@db",
            "mysql://app:secret@db/",
            "mysql://app:secret@db/jobs?shema=x",
        ] {
            let error = MySqlConfig::new(url).connect_options().expect_err(url);
            assert_eq!(error.kind(), ErrorKind::Config, "{url}: {error}");
            assert!(!error.message().contains("secret"), "{url}: {error}");
        }
        for url in ["mysql://app@db/jobs", "mariadb://app@127.0.0.1:3306/jobs"] {
            let answer = MySqlConfig::new(url).connect_options();
            assert!(answer.is_ok(), "{url}: {:?}", answer.err());
        }
    }
}
