//! What the server may forget, read once at connect: its eviction policy,
//! which must never drop a key of tenure's, and its persistence, which
//! decides what survives a restart.
//!
//! The settings come from `CONFIG GET`. Managed services often rename or
//! forbid `CONFIG`; then they come from `INFO memory` and `INFO
//! persistence`, which tell the eviction policy and whether the append-only
//! file is on, but not its fsync policy nor the snapshot schedule.

use std::collections::HashMap;
use std::fmt;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult};
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::error;

/// How often the server fsyncs its append-only file (`appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AppendFsync {
    /// Before every reply: an acknowledged write survives a crash.
    Always,
    /// About once a second: a crash loses up to a second of writes.
    EverySecond,
    /// When the operating system decides: a crash loses an unknown amount.
    No,
}

impl AppendFsync {
    fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "always" => Some(AppendFsync::Always),
            "everysec" => Some(AppendFsync::EverySecond),
            "no" => Some(AppendFsync::No),
            _ => None,
        }
    }
}

/// Where [`Durability`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SettingsSource {
    /// `CONFIG GET`: every field is known.
    Config,
    /// `INFO memory` and `INFO persistence` (the server refused `CONFIG`):
    /// [`Durability::append_fsync`] and [`Durability::snapshot_schedule`]
    /// are unknown.
    Info,
}

/// The server's settings that decide what it may forget, as
/// [`RedisStore::connect`](crate::RedisStore::connect) read them (see
/// [`RedisStore::durability`](crate::RedisStore::durability)).
///
/// `connect` refuses a server that may evict tenure's keys; what survives a
/// restart it only reports: a server that keeps nothing on disk loses every
/// record on restart (fences stay monotonic, see the crate docs), one with
/// `appendfsync everysec` the last second of writes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Durability {
    /// `maxmemory-policy`: `noeviction` or a `volatile-*` policy (tenure
    /// sets no expiry on its keys, so a `volatile-*` policy never evicts
    /// them).
    pub eviction_policy: String,
    /// `appendonly`: whether the server logs every write to its append-only
    /// file; `None` when it could not be read.
    pub append_only: Option<bool>,
    /// `appendfsync`; `None` when it could not be read.
    pub append_fsync: Option<AppendFsync>,
    /// `save`, the snapshot schedule (`""`: no snapshots); `None` when it
    /// could not be read.
    pub snapshot_schedule: Option<String>,
    /// Where the settings were read from.
    pub source: SettingsSource,
}

impl Durability {
    /// Whether the server is known to keep nothing on disk (no append-only
    /// file, no snapshots): a restart loses every record.
    pub fn keeps_nothing_on_disk(&self) -> bool {
        self.append_only == Some(false)
            && self
                .snapshot_schedule
                .as_deref()
                .is_some_and(|schedule| schedule.trim().is_empty())
    }

    /// Whether a crash of the server is known to lose no acknowledged write
    /// (`appendonly yes`, `appendfsync always`). A failover to a replica may
    /// lose writes all the same.
    pub fn survives_a_crash(&self) -> bool {
        self.append_only == Some(true) && self.append_fsync == Some(AppendFsync::Always)
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn shown<T: fmt::Debug>(value: &Option<T>) -> String {
            value
                .as_ref()
                .map_or_else(|| "unknown".to_owned(), |value| format!("{value:?}"))
        }
        write!(
            f,
            "maxmemory-policy {}, appendonly {}, appendfsync {}, save {} (from {:?})",
            self.eviction_policy,
            shown(&self.append_only),
            shown(&self.append_fsync),
            shown(&self.snapshot_schedule),
            self.source
        )
    }
}

/// The eviction policy of a server that does not say which it runs.
const NOT_REPORTED: &str = "<not reported>";

/// Reads the server's settings and refuses a server that may evict
/// tenure's keys.
pub(crate) async fn inspect(connection: &mut MultiplexedConnection) -> Result<Durability> {
    let durability = match from_config(connection).await {
        Ok(durability) => durability,
        Err(config_error) if may_fall_back(&config_error) => {
            from_info(connection).await.map_err(|info_error| {
                if may_fall_back(&info_error) {
                    Error::new(
                        ErrorKind::Incompatible,
                        format!(
                            "tenure could not read the server's maxmemory-policy: CONFIG GET \
                             answered {config_error} and INFO memory answered {info_error}; \
                             allow the connection's user `CONFIG GET` or `INFO` so tenure can \
                             check that the server never evicts its keys"
                        ),
                    )
                    .with_source(info_error)
                } else {
                    error::from_redis(info_error)
                }
            })?
        }
        Err(other) => return Err(error::from_redis(other)),
    };
    check_eviction_policy(&durability.eviction_policy)?;
    Ok(durability)
}

/// Whether a refused `CONFIG` (or `INFO`) leaves another way to read the
/// settings: the command is unknown (renamed or disabled) or forbidden by an
/// ACL. A dropped connection or missing credentials do not.
fn may_fall_back(error: &RedisError) -> bool {
    use redis::{ErrorKind as Kind, ServerErrorKind};
    match error.kind() {
        Kind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoPerm) => true,
        Kind::Server(_) => false,
        _ => error.code() == Some("NOPERM"),
    }
}

/// `allkeys-*` (and any policy this code does not know) may evict a record,
/// a scope's holder or the fence counter: two owners on one scope, fences
/// handed out again.
fn check_eviction_policy(policy: &str) -> Result<()> {
    let policy = policy.to_ascii_lowercase();
    if policy == "noeviction" || policy.starts_with("volatile-") {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Incompatible,
        format!(
            "the Redis server runs with maxmemory-policy {policy}, which may evict any key \
             under memory pressure: a lease record, a scope's holder or the fence counter \
             could vanish and two owners hold one scope; set `maxmemory-policy noeviction` \
             (redis.conf, `CONFIG SET maxmemory-policy noeviction`, or your provider's \
             parameter group) or a volatile-* policy (tenure sets no expiry on its keys)"
        ),
    ))
}

async fn config_value(connection: &mut MultiplexedConnection, name: &str) -> RedisResult<String> {
    let answer: HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(connection)
        .await?;
    Ok(answer.get(name).cloned().unwrap_or_default())
}

async fn from_config(connection: &mut MultiplexedConnection) -> RedisResult<Durability> {
    let eviction_policy = config_value(connection, "maxmemory-policy").await?;
    // A server that reports no policy is refused as an unknown one, by name.
    let eviction_policy = if eviction_policy.is_empty() {
        NOT_REPORTED.to_owned()
    } else {
        eviction_policy
    };
    let append_only = config_value(connection, "appendonly").await?;
    let append_fsync = config_value(connection, "appendfsync").await?;
    let snapshot_schedule = config_value(connection, "save").await?;
    Ok(Durability {
        eviction_policy,
        append_only: yes_or_no(&append_only),
        append_fsync: AppendFsync::parse(&append_fsync),
        snapshot_schedule: Some(snapshot_schedule),
        source: SettingsSource::Config,
    })
}

fn yes_or_no(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "yes" | "1" => Some(true),
        "no" | "0" => Some(false),
        _ => None,
    }
}

/// The `name:value` lines of an `INFO` section.
fn info_fields(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .collect()
}

async fn from_info(connection: &mut MultiplexedConnection) -> RedisResult<Durability> {
    let memory: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(connection)
        .await?;
    let persistence: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(connection)
        .await?;
    let memory = info_fields(&memory);
    let persistence = info_fields(&persistence);
    Ok(Durability {
        // A server that reports no policy is refused as an unknown one.
        eviction_policy: memory
            .get("maxmemory_policy")
            .map_or_else(|| NOT_REPORTED.to_owned(), |policy| (*policy).to_owned()),
        append_only: persistence
            .get("aof_enabled")
            .and_then(|value| yes_or_no(value)),
        append_fsync: None,
        snapshot_schedule: None,
        source: SettingsSource::Info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_policies_that_never_evict_tenure_keys_pass() {
        for policy in ["noeviction", "volatile-lru", "volatile-lfu", "volatile-ttl"] {
            assert!(check_eviction_policy(policy).is_ok(), "{policy}");
        }
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "<not reported>",
        ] {
            let error = check_eviction_policy(policy).expect_err(policy);
            assert_eq!(error.kind(), ErrorKind::Incompatible);
            assert!(error.message().contains("noeviction"), "{error}");
            assert!(error.message().contains("maxmemory-policy"), "{error}");
        }
    }

    #[test]
    fn info_sections_are_read_line_by_line() {
        let fields = info_fields("# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\n");
        assert_eq!(fields.get("maxmemory_policy"), Some(&"allkeys-lru"));
    }

    #[test]
    fn nothing_on_disk_only_when_known() {
        let mut durability = Durability {
            eviction_policy: "noeviction".to_owned(),
            append_only: Some(false),
            append_fsync: Some(AppendFsync::EverySecond),
            snapshot_schedule: Some(String::new()),
            source: SettingsSource::Config,
        };
        assert!(durability.keeps_nothing_on_disk());
        assert!(!durability.survives_a_crash());
        durability.snapshot_schedule = None;
        assert!(!durability.keeps_nothing_on_disk());
        durability.append_only = Some(true);
        durability.append_fsync = Some(AppendFsync::Always);
        assert!(durability.survives_a_crash());
    }
}
