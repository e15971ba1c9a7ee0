//! Opening a store from a URL, whichever backend it names.
//!
//! An application that reads its store's location from configuration
//! should not need a `match` over backends of its own: [`connect`] (or
//! [`Connect`], for the few options that are not part of the URL) reads the
//! scheme, opens that backend, and answers an [`Arc<dyn Store>`](Store):
//! one type that is a [`LeaseStore`], a [`JobQueue`] and a [`FenceStore`]
//! whatever the backend. A trait object rather than an enum of the
//! backends, so the answer's type does not change with the Cargo features
//! enabled, and the layers ([`LayerExt`](crate::LayerExt)) wrap it like any
//! other store.
//!
//! Errors never show the URL's credentials: they name the scheme, or the
//! URL with its password replaced by `***`.

use std::fmt;
use std::sync::Arc;

use tenure_lease_core::redact::redact_url;
use tenure_lease_core::{Clock, Error, ErrorKind, FenceStore, JobQueue, LeaseStore, Result};

/// A store that is every kind of store: what [`connect`] answers.
///
/// Implemented by everything that implements the three traits (every
/// backend, and every layer over one), so `Arc<dyn Store>` is itself a
/// [`LeaseStore`], a [`JobQueue`] and a [`FenceStore`] through the
/// forwarding impls for [`Arc`].
pub trait Store: LeaseStore + JobQueue + FenceStore + fmt::Debug {}

impl<S: LeaseStore + JobQueue + FenceStore + fmt::Debug + ?Sized> Store for S {}

/// Opens the store `url` names, with the backend's defaults.
///
/// | URL | backend | feature |
/// |-----|---------|---------|
/// | `memory:` | [`MemoryStore`](crate::memory::MemoryStore), a new empty store | `memory` |
/// | `sqlite:///abs/path`, `sqlite://rel/path`, `sqlite:rel/path` | `SqliteStore` | `sqlite` |
/// | `postgres://...`, `postgresql://...` (`?schema=NAME`, `?require_synchronous_standby=true`) | `PgStore` | `postgres` |
/// | `redis://...`, `rediss://...`, `redis+unix://...`, `redis+sentinel://HOST:PORT,.../SERVICE`, `rediss+sentinel://...`, `redis+cluster://HOST:PORT,...`, `rediss+cluster://...` (`?namespace=NAME`) | `RedisStore` | `redis` |
/// | `etcd://[user:password@]host:port[,host:port...][/prefix]` (`?max_txn_ops=N`) | `EtcdStore` | `etcd` |
/// | `mysql://user:password@host:port/database`, `mariadb://...` (`?isolation=LEVEL`) | `MySqlStore` | `mysql` |
///
/// The `schema` (PostgreSQL) and `namespace` (Redis) query parameters are
/// taken out of the URL before it reaches the driver; the builder's
/// [`schema`](Connect::schema) and [`namespace`](Connect::namespace) win
/// over them. Without either, PostgreSQL uses the schema `tenure` and Redis
/// the namespace `tenure`. A parameter no backend reads (a typo such as
/// `?schmea=`) is refused as [`ErrorKind::Config`], naming the closest known
/// one and the list (`tenure_backend_postgres::URL_PARAMETERS`,
/// `tenure_backend_redis::URL_PARAMETERS`,
/// `tenure_backend_mysql::URL_PARAMETERS`; SQLite, etcd and memory refuse
/// theirs too). Every other setting is the backend's default; a
/// store that needs more (pool bounds, timeouts, durability) is built with
/// its backend's config and `connect`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// use tenure::{AdmitRequest, LeaseStore};
///
/// let store = tenure::connect("memory:").await?;
/// let admission = store
///     .admit(&AdmitRequest::new("report-1", "worker-a").ttl(Duration::from_secs(30)))
///     .await?;
/// assert!(admission.admitted().is_some());
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`ErrorKind::Config`]: a malformed URL or an unknown scheme (the message
/// lists the accepted ones), a scheme whose Cargo feature is not enabled
/// (the message names it), or what the backend's `connect` refuses; and
/// whatever else that `connect` answers (e.g. [`ErrorKind::Unavailable`]
/// for a server that cannot be reached).
///
/// # Cancellation
///
/// Dropping the future drops the half-opened store; nothing is left behind
/// but what the backend's own `connect` leaves (a created, migrated schema
/// or file).
pub async fn connect(url: &str) -> Result<Arc<dyn Store>> {
    Connect::new(url).open().await
}

/// [`connect`] with options the URL does not carry.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::sync::Arc;
/// use tenure::{LeaseStore, SystemClock};
///
/// let store = tenure::Connect::new("memory:").clock(Arc::new(SystemClock)).open().await?;
/// # let _ = store.now().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connect {
    pub(crate) url: String,
    schema: Option<String>,
    namespace: Option<String>,
    clock: Option<Arc<dyn Clock>>,
    migrate_schema: bool,
}

impl Connect {
    /// Options for the store at `url`, all unset.
    pub fn new(url: impl Into<String>) -> Self {
        Connect {
            url: url.into(),
            schema: None,
            namespace: None,
            clock: None,
            migrate_schema: true,
        }
    }

    /// The PostgreSQL schema to keep the records in, over any `?schema=`
    /// of the URL. Another backend refuses it.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The Redis namespace to keep the keys under, over any `?namespace=`
    /// of the URL. Another backend refuses it.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The clock that judges expiry, for the memory, SQLite and etcd
    /// backends (etcd has no clock of its own, contract §2); PostgreSQL
    /// and Redis read the server's clock and refuse it.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Whether opening a PostgreSQL or MySQL store may create its schema
    /// (tables) and apply the migrations it lacks (the default, `true`).
    /// With `false` it changes nothing and answers
    /// [`ErrorKind::Incompatible`] for a schema that lacks any (the
    /// backend's `MigrationMode::VerifyOnly`), for a
    /// role that may not create tables and for tools that must not change
    /// what they inspect; [`Connect::migrate`] applies them. The other
    /// backends have no migrations to hold back: SQLite creates or upgrades
    /// its file's tables whatever this says.
    pub fn migrate_schema(mut self, migrate: bool) -> Self {
        self.migrate_schema = migrate;
        self
    }

    /// Opens the store.
    ///
    /// # Errors
    ///
    /// As [`connect`]; an option the backend does not take (a schema for
    /// Redis, a clock for PostgreSQL, ...) is [`ErrorKind::Config`].
    ///
    /// # Cancellation
    ///
    /// As [`connect`].
    pub async fn open(self) -> Result<Arc<dyn Store>> {
        #[cfg_attr(
            not(any(feature = "memory", feature = "sqlite")),
            allow(unused_variables)
        )]
        let (backend, rest) = self.backend()?;
        match backend {
            #[cfg(feature = "memory")]
            Backend::Memory => {
                if !matches!(rest, "" | "//") {
                    return Err(config_error(
                        "`memory:` takes nothing after the scheme: write `memory:`",
                    ));
                }
                Ok(Arc::new(match self.clock {
                    Some(clock) => crate::memory::MemoryStore::with_clock(clock),
                    None => crate::memory::MemoryStore::new(),
                }))
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                let config = self.sqlite_config(rest)?;
                Ok(Arc::new(crate::sqlite::SqliteStore::connect(config).await?))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let config = self.postgres_config()?;
                Ok(Arc::new(crate::postgres::PgStore::connect(config).await?))
            }
            #[cfg(feature = "redis")]
            Backend::Redis => {
                let config = self.redis_config();
                Ok(Arc::new(crate::redis::RedisStore::connect(config).await?))
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd => Ok(Arc::new(
                crate::etcd::EtcdStore::connect(self.etcd_config()).await?,
            )),
            #[cfg(feature = "mysql")]
            Backend::Mysql => Ok(Arc::new(
                crate::mysql::MySqlStore::connect(self.mysql_config()).await?,
            )),
            #[allow(unreachable_patterns)] // with every backend's feature on
            disabled => Err(feature_disabled(disabled)),
        }
    }

    /// The backend the URL names, with what follows the scheme's `:`,
    /// once the options are checked against it.
    pub(crate) fn backend(&self) -> Result<(Backend, &str)> {
        let (scheme, rest) = split_scheme(&self.url)?;
        let backend = Backend::of(&scheme)?;
        let server = !matches!(backend, Backend::Memory | Backend::Sqlite);
        if server && !rest.starts_with("//") {
            // What follows may be a password: the message does not show it.
            return Err(config_error(format!(
                "a `{scheme}:` URL names a server: write `{scheme}://[user[:password]@]host[:port]...`"
            )));
        }
        self.check_options(backend)?;
        Ok((backend, rest))
    }

    /// The SQLite config of the location `rest` (what follows `sqlite:`).
    #[cfg(feature = "sqlite")]
    pub(crate) fn sqlite_config(&self, rest: &str) -> Result<crate::sqlite::SqliteConfig> {
        // The scheme in the lower case `from_url` reads.
        let url = format!("sqlite:{rest}");
        let mut config = crate::sqlite::SqliteConfig::from_url(&url)?;
        if let Some(clock) = &self.clock {
            config = config.clock(Arc::clone(clock));
        }
        Ok(config)
    }

    /// The PostgreSQL config of the URL (which reads `?schema=`), with the
    /// schema given here over it.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_config(&self) -> Result<crate::postgres::PgStoreConfig> {
        use crate::postgres::{MigrationMode, PgStoreConfig};
        let mut config = PgStoreConfig::new(self.url.clone());
        if let Some(schema) = self.schema.clone() {
            config = config.schema(schema);
        }
        if !self.migrate_schema {
            config = config.migrations(MigrationMode::VerifyOnly);
        }
        Ok(config)
    }

    /// The Redis config of the URL (which reads `?namespace=`), with the
    /// namespace given here over it.
    #[cfg(feature = "redis")]
    pub(crate) fn redis_config(&self) -> crate::redis::RedisConfig {
        use crate::redis::RedisConfig;
        match &self.namespace {
            Some(namespace) => RedisConfig::new(self.url.as_str(), namespace.as_str()),
            None => RedisConfig::from(self.url.as_str()),
        }
    }

    /// The etcd config of the URL, on the clock given.
    #[cfg(feature = "etcd")]
    pub(crate) fn etcd_config(&self) -> crate::etcd::EtcdConfig {
        let config = crate::etcd::EtcdConfig::from(self.url.as_str());
        match &self.clock {
            Some(clock) => config.clock(Arc::clone(clock)),
            None => config,
        }
    }

    /// The MySQL config of the URL; without migrating, it only verifies
    /// the tables.
    #[cfg(feature = "mysql")]
    pub(crate) fn mysql_config(&self) -> crate::mysql::MySqlConfig {
        use crate::mysql::{MigrationMode, MySqlConfig};
        let config = MySqlConfig::new(self.url.clone());
        if self.migrate_schema {
            config
        } else {
            config.migrations(MigrationMode::VerifyOnly)
        }
    }

    /// Refuses the options `backend` does not take, naming the one that does.
    fn check_options(&self, backend: Backend) -> Result<()> {
        let refuse = |option: &str, takes: &str| {
            Err(config_error(format!(
                "the {} backend takes no {option}; {takes}",
                backend.name()
            )))
        };
        if self.schema.is_some() && backend != Backend::Postgres {
            return refuse("schema", "only PostgreSQL does");
        }
        if self.namespace.is_some() && backend != Backend::Redis {
            return refuse("namespace", "only Redis does");
        }
        if self.clock.is_some()
            && matches!(backend, Backend::Postgres | Backend::Redis | Backend::Mysql)
        {
            return refuse("clock", "it reads the server's clock");
        }
        Ok(())
    }
}

impl fmt::Debug for Connect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connect")
            .field("url", &redact_url(&self.url))
            .field("schema", &self.schema)
            .field("namespace", &self.namespace)
            .field("clock", &self.clock.is_some())
            .field("migrate_schema", &self.migrate_schema)
            .finish()
    }
}

/// The backends a URL may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Memory,
    Sqlite,
    Postgres,
    Redis,
    Etcd,
    Mysql,
}

/// Every scheme and its backend. Each backend crate declares its own
/// (`URL_SCHEMES`); they are repeated here so that a scheme whose backend's
/// feature is off can name the feature, and a unit test keeps the two
/// equal.
const SCHEMES: [(&str, Backend); 15] = [
    ("memory", Backend::Memory),
    ("sqlite", Backend::Sqlite),
    ("postgres", Backend::Postgres),
    ("postgresql", Backend::Postgres),
    ("redis", Backend::Redis),
    ("rediss", Backend::Redis),
    ("redis+unix", Backend::Redis),
    ("redis+sentinel", Backend::Redis),
    ("rediss+sentinel", Backend::Redis),
    ("redis+cluster", Backend::Redis),
    ("rediss+cluster", Backend::Redis),
    ("etcd", Backend::Etcd),
    ("etcds", Backend::Etcd),
    ("mysql", Backend::Mysql),
    ("mariadb", Backend::Mysql),
];

/// What the errors list as accepted.
const ACCEPTED: &str = "`memory:`, `sqlite:PATH` (or `sqlite:///ABSOLUTE/PATH`), \
                        `postgres://` / `postgresql://`, `redis://` / `rediss://` / `redis+unix://` / \
                        `redis+sentinel://` / `rediss+sentinel://` / `redis+cluster://` / \
                        `rediss+cluster://`, `etcd://` / `etcds://` and `mysql://` / `mariadb://`";

impl Backend {
    /// The backend of `scheme` (lower case); an unknown one is
    /// [`ErrorKind::Config`] listing the accepted ones.
    fn of(scheme: &str) -> Result<Self> {
        SCHEMES
            .iter()
            .find(|(known, _)| *known == scheme)
            .map(|&(_, backend)| backend)
            .ok_or_else(|| {
                config_error(format!(
                    "unknown store URL scheme `{scheme}:`; tenure::connect accepts {ACCEPTED}"
                ))
            })
    }

    /// The Cargo feature of the `tenure` crate that brings the backend.
    fn feature(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Redis => "redis",
            Backend::Etcd => "etcd",
            Backend::Mysql => "mysql",
        }
    }

    /// The backend's name in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
            Backend::Redis => "Redis",
            Backend::Etcd => "etcd",
            Backend::Mysql => "MySQL",
        }
    }
}

/// The error for a URL whose backend's feature is off.
pub(crate) fn feature_disabled(backend: Backend) -> Error {
    let feature = backend.feature();
    config_error(format!(
        "{} URLs need the `{feature}` feature of the tenure crate, which is not enabled; \
         enable it in Cargo.toml: tenure = {{ version = \"...\", features = [\"{feature}\"] }}",
        backend.name()
    ))
}

/// The URL's scheme, in lower case, and what follows its `:`. Only the
/// scheme ever appears in the error, never the rest (it may hold a
/// password).
fn split_scheme(url: &str) -> Result<(String, &str)> {
    let malformed = || {
        config_error(format!(
            "not a store URL: it must start with a scheme; tenure::connect accepts {ACCEPTED}"
        ))
    };
    let (scheme, rest) = url.split_once(':').ok_or_else(malformed)?;
    let well_formed = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !well_formed {
        return Err(malformed());
    }
    Ok((scheme.to_ascii_lowercase(), rest))
}

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disabled_feature_is_named_with_how_to_enable_it() {
        let error = feature_disabled(Backend::Postgres);
        assert_eq!(error.kind(), ErrorKind::Config);
        assert!(
            error.message().contains("`postgres` feature")
                && error.message().contains("features = [\"postgres\"]"),
            "{error}"
        );
    }

    /// The facade's table holds exactly the schemes each backend declares.
    #[cfg(all(
        feature = "sqlite",
        feature = "postgres",
        feature = "redis",
        feature = "etcd",
        feature = "mysql"
    ))]
    #[test]
    fn every_backend_declares_the_schemes_the_facade_dispatches() {
        let declared: [(Backend, &[&str]); 6] = [
            (Backend::Memory, &["memory"]),
            (Backend::Sqlite, tenure_backend_sqlite::URL_SCHEMES),
            (Backend::Postgres, tenure_backend_postgres::URL_SCHEMES),
            (Backend::Redis, tenure_backend_redis::URL_SCHEMES),
            (Backend::Etcd, tenure_backend_etcd::URL_SCHEMES),
            (Backend::Mysql, tenure_backend_mysql::URL_SCHEMES),
        ];
        for (backend, schemes) in declared {
            let dispatched: Vec<&str> = SCHEMES
                .iter()
                .filter(|(_, to)| *to == backend)
                .map(|(scheme, _)| *scheme)
                .collect();
            assert_eq!(dispatched, schemes, "{}", backend.name());
            for scheme in schemes {
                assert!(ACCEPTED.contains(&format!("`{scheme}:")), "{scheme}");
            }
        }
    }

    #[test]
    fn schemes_are_case_insensitive_and_must_be_well_formed() {
        assert_eq!(
            split_scheme("SQLite:x.db").ok().map(|(s, _)| s).as_deref(),
            Some("sqlite")
        );
        for url in ["", "no scheme", "://host", "1abc:x", "a b:c"] {
            let error = split_scheme(url).expect_err(url);
            assert_eq!(error.kind(), ErrorKind::Config, "{url}");
        }
    }
}
