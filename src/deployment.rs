//! What an operator runs against a deployment: the checks a store makes
//! when it connects, reported one by one, and the migrations applied
//! ahead of time. The `tenure` command line's `check` and `migrate` are
//! these.
//!
//! The checks are the backends' own, not copies: PostgreSQL's schema
//! verification (`MigrationMode::VerifyOnly`) and its durability, vacuum
//! and replication settings (`PgStore::server_settings`), SQLite's schema
//! version, Redis's eviction-policy refusal, its persistence settings and
//! replicas (`RedisStore::durability`), etcd's member count
//! (`EtcdStore::member_count`), MySQL's table verification and its
//! durability and binary-log settings (`MySqlStore::server_settings`), and
//! every store's clock
//! ([`LeaseStore::now`]). A replica or standby is refused at connect, with
//! the fix, before any check runs.

use std::fmt;

#[cfg(any(
    feature = "sqlite",
    feature = "postgres",
    feature = "redis",
    feature = "mysql"
))]
use tenure_lease_core::ErrorKind;
#[cfg(any(
    feature = "memory",
    feature = "sqlite",
    feature = "postgres",
    feature = "redis",
    feature = "etcd",
    feature = "mysql"
))]
use tenure_lease_core::LeaseStore;
use tenure_lease_core::Result;
#[cfg(any(feature = "postgres", feature = "redis", feature = "mysql"))]
use tenure_lease_core::{Clock, SystemClock};

#[cfg(any(
    feature = "memory",
    feature = "sqlite",
    feature = "postgres",
    feature = "redis",
    feature = "etcd",
    feature = "mysql"
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
    /// What was checked: `schema`, `durability`, `vacuum`, `replication`,
    /// `eviction policy`, `persistence`, `members` or `clock`.
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
            feature = "redis",
            feature = "mysql"
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
    /// reached or its URL is wrong ([`ErrorKind::Config`](crate::ErrorKind::Config),
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable), ...); a refusal a check stands for
    /// ([`ErrorKind::Incompatible`](crate::ErrorKind::Incompatible)) is a [`Verdict::Fail`] instead.
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
                let config = self.migrate_schema(false).postgres_config()?;
                let schema = config.schema_name().to_owned();
                // Connected without the requirement, so the check can judge
                // the replication it found against it.
                let requires_synchronous = config.requires_synchronous_standby();
                let config = config.require_synchronous_standby(false);
                match crate::postgres::PgStore::connect(config).await {
                    Ok(store) => {
                        let clock = server_clock(&store, "PostgreSQL").await;
                        let settings = store.server_settings().await;
                        store.close().await;
                        let mut findings = vec![Finding::new(
                            "schema",
                            Verdict::Pass,
                            format!("schema {schema:?} carries every migration of this version"),
                        )];
                        findings.extend(postgres_settings(&settings?, requires_synchronous));
                        findings.push(clock?);
                        Ok(findings)
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
                            redis_replication(durability, store.waits_for_replicas()),
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
                let store = crate::etcd::EtcdStore::connect(self.etcd_config()).await?;
                // A read through the store: it answers only with a quorum.
                store.list_active().await?;
                Ok(vec![
                    etcd_members(store.member_count().await?),
                    Finding::new(
                        "clock",
                        Verdict::Pass,
                        "leases end on etcd's own lease timers, whatever a host's clock says \
                     (contract §2); hosts' clocks only stamp the records and can delay a \
                     takeover, so keep them synchronised",
                    ),
                ])
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql => {
                let config = self.migrate_schema(false).mysql_config();
                match crate::mysql::MySqlStore::connect(config).await {
                    Ok(store) => {
                        let clock = server_clock(&store, "MySQL").await;
                        let settings = store.server_settings().await;
                        store.close().await;
                        let mut findings = vec![Finding::new(
                            "schema",
                            Verdict::Pass,
                            "the tables are InnoDB and carry every migration of this version",
                        )];
                        findings.extend(mysql_settings(&settings?));
                        findings.push(clock?);
                        Ok(findings)
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
            #[allow(unreachable_patterns)] // with every backend's feature on
            disabled => Err(feature_disabled(disabled)),
        }
    }

    /// Opens the store for reading only, despite a failed deployment check
    /// that makes [`open`](Connect::open) refuse a server which can still
    /// be read: the store, and each check it failed as a
    /// [`Verdict::Fail`] finding (empty when none did). For a tool that
    /// shows what a misconfigured deployment holds (the operator CLI's
    /// `leases`, `show`, `jobs`); never write through a store whose
    /// findings are not empty.
    ///
    /// Only a Redis server whose `maxmemory-policy` may evict tenure's keys
    /// is opened this way (its reads are exact until it evicts; a write
    /// there could be lost and break exclusion). Every other refusal
    /// stands, as [`open`](Connect::open) answers it: a PostgreSQL schema
    /// that lacks migrations, or a SQLite file of an unknown schema, has no
    /// tables this version can read; a replica or refused credentials
    /// cannot be read from either.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// let (store, failed) = tenure::Connect::new("memory:").open_for_reading().await?;
    /// assert!(failed.is_empty());
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`open`](Connect::open), but for the eviction policy.
    pub async fn open_for_reading(
        self,
    ) -> Result<(std::sync::Arc<dyn crate::Store>, Vec<Finding>)> {
        match self.backend()?.0 {
            #[cfg(feature = "redis")]
            Backend::Redis => {
                let (store, refusal) =
                    crate::redis::RedisStore::connect_for_reading(self.redis_config()).await?;
                let failed = refusal
                    .map(|error| Finding::new("eviction policy", Verdict::Fail, error.message()))
                    .into_iter()
                    .collect();
                Ok((std::sync::Arc::new(store), failed))
            }
            _ => Ok((self.open().await?, Vec::new())),
        }
    }

    /// Prepares the store's schema ahead of time, for deployments whose
    /// application role may not: PostgreSQL creates the schema if missing
    /// and applies the migrations it lacks
    /// (`PgStore::apply_migrations`), idempotent and safe to run from
    /// several processes, and MySQL creates its tables likewise
    /// (`MySqlStore::apply_migrations`); SQLite creates or upgrades the file's tables, as
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
    /// migrations need is [`ErrorKind::Config`](crate::ErrorKind::Config).
    pub async fn migrate(self) -> Result<()> {
        match self.backend()?.0 {
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                crate::postgres::PgStore::apply_migrations(&self.postgres_config()?).await
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql => {
                crate::mysql::MySqlStore::apply_migrations(&self.mysql_config()).await
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
#[cfg(any(feature = "postgres", feature = "redis", feature = "mysql"))]
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

/// What a MySQL server's settings lose in a crash and in a failover.
#[cfg(feature = "mysql")]
fn mysql_settings(settings: &crate::mysql::ServerSettings) -> Vec<Finding> {
    let durability = if settings.flush_log_at_commit != 1 {
        Finding::new(
            "durability",
            Verdict::Fail,
            format!(
                "innodb_flush_log_at_trx_commit is {}: a crash loses the last acknowledged \
                 commits, fences among them, which are then handed out again; set \
                 innodb_flush_log_at_trx_commit = 1",
                settings.flush_log_at_commit
            ),
        )
    } else if !settings.durable() {
        Finding::new(
            "durability",
            Verdict::Fail,
            format!(
                "sync_binlog is {} with the binary log on: a crash can lose commits from the \
                 log replicas read, and a replica promoted afterwards lacks them; set \
                 sync_binlog = 1",
                settings.sync_binlog
            ),
        )
    } else {
        Finding::new(
            "durability",
            Verdict::Pass,
            "innodb_flush_log_at_trx_commit = 1 (and sync_binlog = 1 where the binary log is \
             on): a crash loses no acknowledged commit",
        )
    };
    let replication = if !settings.binary_log {
        Finding::new(
            "replication",
            Verdict::Warn,
            "the binary log is off: no replica can follow this server, and losing it loses \
             the store; replicate it (semi-synchronously) for failover",
        )
    } else if settings.binlog_format.eq_ignore_ascii_case("STATEMENT") {
        Finding::new(
            "replication",
            Verdict::Fail,
            "binlog_format is STATEMENT, which cannot log READ COMMITTED transactions (the \
             store's writes fail); set binlog_format = ROW",
        )
    } else {
        Finding::new(
            "replication",
            Verdict::Warn,
            format!(
                "binary log on ({}): replicas follow asynchronously unless semi-synchronous \
                 replication is set up, and a failover to one that lacks the last commits can \
                 hand their fences out again (see DEPLOYING.md)",
                settings.binlog_format
            ),
        )
    };
    vec![durability, replication]
}

/// What a PostgreSQL server's settings lose in a crash, in a failover, and
/// to dead rows, for a store that `requires_synchronous` standby or not.
#[cfg(feature = "postgres")]
fn postgres_settings(
    settings: &crate::postgres::ServerSettings,
    requires_synchronous: bool,
) -> Vec<Finding> {
    let durability = if !settings.fsync {
        Finding::new(
            "durability",
            Verdict::Fail,
            "fsync is off: a crash can corrupt the database and lose acknowledged commits, \
             fences among them, which are then handed out again; set fsync = on",
        )
    } else if settings.synchronous_commit == "off" {
        Finding::new(
            "durability",
            Verdict::Fail,
            "synchronous_commit is off: a crash loses the last acknowledged commits, fences \
             among them, which are then handed out again; set synchronous_commit = on \
             (for the database or the application's role)",
        )
    } else {
        Finding::new(
            "durability",
            Verdict::Pass,
            format!(
                "fsync on, synchronous_commit {}: a crash loses no acknowledged commit",
                settings.synchronous_commit
            ),
        )
    };
    let vacuum = if settings.autovacuum {
        Finding::new(
            "vacuum",
            Verdict::Pass,
            "autovacuum reclaims the dead rows finished records and jobs leave",
        )
    } else {
        Finding::new(
            "vacuum",
            Verdict::Warn,
            "autovacuum is off: the dead rows every finished record and job leaves are never \
             reclaimed, and admissions and claims slow down; set autovacuum = on, or VACUUM \
             the schema's tables on a schedule",
        )
    };
    let replication = postgres_replication(settings, requires_synchronous);
    vec![durability, vacuum, replication]
}

/// What a failover of a PostgreSQL primary loses, from who must confirm a
/// commit and who streams: a standby counts as synchronous only while it
/// streams and the primary waits for it (`sync_state` `sync` or
/// `quorum`), not for being connected.
#[cfg(feature = "postgres")]
fn postgres_replication(
    settings: &crate::postgres::ServerSettings,
    requires_synchronous: bool,
) -> Finding {
    let names = &settings.synchronous_standby_names;
    let waits = settings.replicates_synchronously();
    let finding = |verdict, message: String| Finding::new("replication", verdict, message);
    match settings.synchronous_standbys {
        _ if requires_synchronous && names.trim().is_empty() => finding(
            Verdict::Fail,
            "the URL requires a synchronous standby, but synchronous_standby_names is empty: \
             no commit waits for a standby, and connecting refuses the server; set \
             synchronous_standby_names on the primary (e.g. 'FIRST 1 (standby1)')"
                .to_owned(),
        ),
        None if requires_synchronous || waits => finding(
            Verdict::Warn,
            format!(
                "synchronous_standby_names is {names:?}, but the store's role may not see which \
                 standbys stream (pg_stat_replication hides their state): grant it \
                 pg_read_all_stats or pg_monitor to have this checked"
            ),
        ),
        Some(0) if requires_synchronous => finding(
            Verdict::Fail,
            format!(
                "the URL requires a synchronous standby and synchronous_standby_names is \
                 {names:?}, but no standby it names streams ({} connected): every write waits \
                 for one until the operation timeout, and fails; start the standby, or name \
                 the ones that stream",
                settings.standbys
            ),
        ),
        Some(synchronous) if requires_synchronous => finding(
            Verdict::Pass,
            format!(
                "synchronous standby required and present ({names}, {synchronous} streaming): \
                 the store commits with synchronous_commit = on, so a failover to it loses no \
                 acknowledged write"
            ),
        ),
        Some(0) if waits => finding(
            Verdict::Warn,
            format!(
                "synchronous_standby_names is {names:?} but no standby it names streams ({} \
                 connected): every commit waits for one, so writes hang until it streams",
                settings.standbys
            ),
        ),
        Some(synchronous) if waits => finding(
            Verdict::Pass,
            format!(
                "synchronous standby ({names}), {synchronous} streaming: a failover to it loses \
                 no acknowledged write"
            ),
        ),
        _ if settings.standbys == 0 => finding(
            Verdict::Warn,
            "no standby streams from this server: losing it loses the store; stream to a \
             synchronous standby (synchronous_standby_names) for failovers that lose nothing"
                .to_owned(),
        ),
        _ => finding(
            Verdict::Warn,
            format!(
                "{} asynchronous standby(s): a failover may lose the last acknowledged writes. \
                 Fences stay unique (drawn on the WAL timeline), but the store's gates may roll \
                 back and accept a deposed owner: set synchronous_standby_names, or connect \
                 with refuse_fences_from_before_failover",
                settings.standbys
            ),
        ),
    }
}

/// What a Redis primary's replicas keep through a failover, given how
/// many must confirm each write.
#[cfg(feature = "redis")]
fn redis_replication(
    durability: &crate::redis::Durability,
    wait: Option<crate::redis::WaitForReplicas>,
) -> Finding {
    match (durability.replicas, wait) {
        (None, _) => Finding::new(
            "replication",
            Verdict::Warn,
            "the server would not say whether replicas follow it (ROLE and INFO refused)",
        ),
        (Some(replicas), Some(wait)) if replicas < wait.replicas as usize => Finding::new(
            "replication",
            Verdict::Fail,
            format!(
                "every write waits for {} replica(s) to confirm it, but {replicas} follow(s) \
                 this server: writes answer Unavailable until enough connect; add replicas \
                 or lower wait_replicas",
                wait.replicas
            ),
        ),
        (Some(replicas), Some(wait)) => Finding::new(
            "replication",
            Verdict::Pass,
            format!(
                "{replicas} replica(s); every write waits for {} of them to confirm it \
                 (WAIT, up to {:?}): a failover to a replica that confirmed keeps every \
                 acknowledged write",
                wait.replicas, wait.timeout
            ),
        ),
        (Some(0), None) => Finding::new(
            "replication",
            Verdict::Warn,
            "no replica follows this server: losing it loses every record and job",
        ),
        (Some(replicas), None) => Finding::new(
            "replication",
            Verdict::Warn,
            format!(
                "{replicas} replica(s), asynchronous: a failover may lose the last writes and \
                 roll the store's gates back, so the Redis gate may accept a deposed owner \
                 (fences stay monotonic, from the server's clock); connect with \
                 refuse_fences_from_before_failover, and wait_replicas to keep acknowledged \
                 writes, or keep the gate of a fence-checking resource in the resource itself"
            ),
        ),
    }
}

/// Whether an etcd cluster of `members` survives the loss of one.
#[cfg(feature = "etcd")]
fn etcd_members(members: usize) -> Finding {
    let tolerated = members.saturating_sub(1) / 2;
    if members >= 3 && members % 2 == 1 {
        Finding::new(
            "members",
            Verdict::Pass,
            format!("{members} members: the store survives the loss of {tolerated}"),
        )
    } else {
        Finding::new(
            "members",
            Verdict::Warn,
            format!(
                "{members} member(s): the store survives the loss of {tolerated}; run three or \
                 five members (an even count tolerates no more losses than one fewer)"
            ),
        )
    }
}
