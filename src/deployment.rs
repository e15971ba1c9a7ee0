//! What an operator runs against a deployment: the checks a store makes
//! when it connects, reported one by one, and the migrations applied
//! ahead of time. The `tenure` command line's `check` and `migrate` are
//! these.
//!
//! The checks are the backends' own, not copies: PostgreSQL's schema
//! verification (`MigrationMode::VerifyOnly`), SQLite's schema version,
//! Redis's eviction-policy refusal and its persistence settings
//! (`RedisStore::durability`), and every store's clock
//! ([`LeaseStore::now`]).

use std::fmt;

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
use tenure_lease_core::ErrorKind;
#[cfg(any(
    feature = "memory",
    feature = "sqlite",
    feature = "postgres",
    feature = "redis"
))]
use tenure_lease_core::LeaseStore;
use tenure_lease_core::Result;
#[cfg(any(feature = "postgres", feature = "redis"))]
use tenure_lease_core::{Clock, SystemClock};

#[cfg(any(
    feature = "memory",
    feature = "sqlite",
    feature = "postgres",
    feature = "redis"
))]
use crate::connect::Backend;
use crate::connect::{feature_disabled, Connect};

/// How far a server's clock may be from this host's before
/// [`Connect::check`] warns.
pub const CLOCK_SKEW_WARNING: std::time::Duration = std::time::Duration::from_secs(1);

/// One finding of [`Connect::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What was checked: `schema`, `eviction policy`, `persistence` or
    /// `clock`.
    pub check: &'static str,
    /// What was found.
    pub verdict: Verdict,
    /// What the check saw, and what to do when it is not a pass.
    pub detail: String,
}

/// How a [`Finding`] judges the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// As it should be.
    Pass,
    /// Works, with a risk the detail names.
    Warn,
    /// The store refuses to run this way (its `connect` fails).
    Fail,
}

impl Verdict {
    /// `pass`, `warn` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Finding {
    #[cfg_attr(
        not(any(
            feature = "memory",
            feature = "sqlite",
            feature = "postgres",
            feature = "redis"
        )),
        allow(dead_code)
    )]
    fn new(check: &'static str, verdict: Verdict, detail: impl Into<String>) -> Self {
        Finding {
            check,
            verdict,
            detail: detail.into(),
        }
    }
}

impl Connect {
    /// Runs the deployment checks the store makes when it connects, and
    /// answers each as a [`Finding`] instead of stopping at the first
    /// refusal: the schema (PostgreSQL: every migration of this version
    /// applied, verified without changing anything; SQLite: the file's
    /// schema version, created or upgraded as at any connect), the eviction
    /// policy and persistence (Redis), a quorum read (etcd), and the
    /// store's clock against this host's.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use tenure::{Connect, Verdict};
    ///
    /// let findings = Connect::new("memory:").check().await?;
    /// assert!(findings.iter().all(|finding| finding.verdict != Verdict::Fail));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// What [`open`](Connect::open) answers when the store cannot be
    /// reached or its URL is wrong ([`ErrorKind::Config`],
    /// [`ErrorKind::Unavailable`], ...); a refusal a check stands for
    /// ([`ErrorKind::Incompatible`]) is a [`Verdict::Fail`] instead.
    pub async fn check(self) -> Result<Vec<Finding>> {
        #[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
        let (backend, rest) = self.backend()?;
        match backend {
            #[cfg(feature = "memory")]
            Backend::Memory => {
                let store = self.open().await?;
                Ok(vec![
                    Finding::new(
                        "persistence",
                        Verdict::Warn,
                        "the memory store lives in one process: each process that opens \
                         `memory:` gets a new empty store, gone when it exits",
                    ),
                    local_clock(&*store).await?,
                ])
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                let config = self.sqlite_config(rest)?;
                let path = config.path().display().to_string();
                match crate::sqlite::SqliteStore::connect(config).await {
                    Ok(store) => Ok(vec![
                        Finding::new(
                            "schema",
                            Verdict::Pass,
                            format!("{path} carries this version's schema"),
                        ),
                        local_clock(&store).await?,
                    ]),
                    Err(error) if error.kind() == ErrorKind::Incompatible => {
                        Ok(vec![Finding::new("schema", Verdict::Fail, error.message())])
                    }
                    Err(error) => Err(error),
                }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let config = self.migrate_schema(false).postgres_config();
                let schema = config.schema_name().to_owned();
                match crate::postgres::PgStore::connect(config).await {
                    Ok(store) => {
                        let clock = server_clock(&store, "PostgreSQL").await;
                        store.close().await;
                        Ok(vec![
                            Finding::new(
                                "schema",
                                Verdict::Pass,
                                format!(
                                    "schema {schema:?} carries every migration of this version"
                                ),
                            ),
                            clock?,
                        ])
                    }
                    Err(error) if error.kind() == ErrorKind::Incompatible => {
                        Ok(vec![Finding::new(
                            "schema",
                            Verdict::Fail,
                            format!(
                                "{}; the operator CLI applies them with `tenure migrate`",
                                error.message()
                            ),
                        )])
                    }
                    Err(error) => Err(error),
                }
            }
            #[cfg(feature = "redis")]
            Backend::Redis => {
                let config = self.redis_config();
                match crate::redis::RedisStore::connect(config).await {
                    Ok(store) => {
                        let durability = store.durability();
                        Ok(vec![
                            Finding::new(
                                "eviction policy",
                                Verdict::Pass,
                                format!(
                                    "maxmemory-policy {} never evicts tenure's keys",
                                    durability.eviction_policy
                                ),
                            ),
                            redis_persistence(durability),
                            server_clock(&store, "Redis").await?,
                        ])
                    }
                    // The one refusal of a reachable server's settings.
                    Err(error) if error.kind() == ErrorKind::Incompatible => {
                        Ok(vec![Finding::new(
                            "eviction policy",
                            Verdict::Fail,
                            error.message(),
                        )])
                    }
                    Err(error) => Err(error),
                }
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd => {
                let store = self.open().await?;
                // A read through the store: it answers only with a quorum.
                store.list_active().await?;
                Ok(vec![Finding::new(
                    "clock",
                    Verdict::Pass,
                    "leases end on etcd's own lease timers, whatever a host's clock says \
                     (contract §2); hosts' clocks only stamp the records and can delay a \
                     takeover, so keep them synchronised",
                )])
            }
            #[allow(unreachable_patterns)] // with every backend's feature on
            disabled => Err(feature_disabled(disabled)),
        }
    }

    /// Prepares the store's schema ahead of time, for deployments whose
    /// application role may not: PostgreSQL creates the schema if missing
    /// and applies the migrations it lacks
    /// (`PgStore::apply_migrations`), idempotent and safe to run from
    /// several processes; SQLite creates or upgrades the file's tables, as
    /// any connect does. Memory, Redis and etcd keep no schema: their
    /// `migrate` only checks that the store opens.
    ///
    /// Run it with a role that may create tables (the URL's user); the
    /// application then connects with
    /// [`migrate_schema(false)`](Connect::migrate_schema).
    ///
    /// # Errors
    ///
    /// As [`open`](Connect::open); a role that lacks the privileges the
    /// migrations need is [`ErrorKind::Config`].
    pub async fn migrate(self) -> Result<()> {
        match self.backend()?.0 {
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                crate::postgres::PgStore::apply_migrations(&self.postgres_config()).await
            }
            _ => self.open().await.map(drop),
        }
    }
}

/// The clock of a store that reads this host's (memory, SQLite).
#[cfg(any(feature = "memory", feature = "sqlite"))]
async fn local_clock(store: &dyn LeaseStore) -> Result<Finding> {
    let now = store.now().await?;
    Ok(Finding::new(
        "clock",
        Verdict::Pass,
        format!(
            "expiry is judged by this host's clock (now {}): every process sharing the \
             store reads the same one",
            now.format("%Y-%m-%d %H:%M:%S%.3f UTC")
        ),
    ))
}

/// The server's clock against this host's: expiry is judged by the server's
/// alone, so a skew only misleads people comparing timestamps with local
/// logs, but a large one often means an unsynchronised server.
#[cfg(any(feature = "postgres", feature = "redis"))]
async fn server_clock(store: &dyn LeaseStore, server: &str) -> Result<Finding> {
    let before = SystemClock.now();
    let now = store.now().await?;
    let after = SystemClock.now();
    // The server read its clock somewhere between `before` and `after`.
    let skew = if now < before {
        (before - now).to_std().unwrap_or_default()
    } else if now > after {
        (now - after).to_std().unwrap_or_default()
    } else {
        std::time::Duration::ZERO
    };
    let verdict = if skew > CLOCK_SKEW_WARNING {
        Verdict::Warn
    } else {
        Verdict::Pass
    };
    let mut detail = format!(
        "expiry is judged by the {server} server's clock alone; it is {} from this host's",
        if skew.is_zero() {
            "within a round trip".to_owned()
        } else {
            format!("{skew:.3?} away")
        }
    );
    if verdict == Verdict::Warn {
        detail.push_str(
            ": leases stay safe, but timestamps will not match local logs; \
             synchronise the clocks (NTP)",
        );
    }
    Ok(Finding::new("clock", verdict, detail))
}

/// What a Redis server's persistence settings keep across a restart.
#[cfg(feature = "redis")]
fn redis_persistence(durability: &crate::redis::Durability) -> Finding {
    if durability.survives_a_crash() {
        return Finding::new(
            "persistence",
            Verdict::Pass,
            format!("{durability}: a crash loses no acknowledged write"),
        );
    }
    let risk = if durability.keeps_nothing_on_disk() {
        "a restart loses every lease record and job (fences stay monotonic)"
    } else {
        "a crash may lose the last acknowledged writes"
    };
    Finding::new(
        "persistence",
        Verdict::Warn,
        format!(
            "{durability}: {risk}; set `appendonly yes` and `appendfsync always` for records \
             that survive a crash"
        ),
    )
}
