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

use redis::aio::ConnectionLike;
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
    /// How many replicas were connected to the server (`ROLE`, or
    /// `INFO replication`); `None` when neither could be run. Without one,
    /// a lost server loses every record; with them, a failover may lose
    /// the writes they had not received yet (see RELIABILITY.md).
    pub replicas: Option<usize>,
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
            "maxmemory-policy {}, appendonly {}, appendfsync {}, save {} (from {:?}), replicas {}",
            self.eviction_policy,
            shown(&self.append_only),
            shown(&self.append_fsync),
            shown(&self.snapshot_schedule),
            self.source,
            shown(&self.replicas)
        )
    }
}

/// The eviction policy of a server that does not say which it runs.
const NOT_REPORTED: &str = "<not reported>";

/// Reads the server's settings and refuses a server that may evict
/// tenure's keys, unless `refuse_evicting` is false (a store opened only
/// to read, [`RedisStore::connect_for_reading`](crate::RedisStore::connect_for_reading)).
pub(crate) async fn inspect(
    connection: &mut (impl ConnectionLike + Send),
    refuse_evicting: bool,
) -> Result<Durability> {
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
    if refuse_evicting {
        check_eviction_policy(&durability.eviction_policy)?;
    }
    let replicas = match role(connection).await? {
        Some(Role::Primary { replicas }) => Some(replicas),
        Some(Role::Replica { primary }) => return Err(replica_refused(&primary)),
        None => None,
    };
    Ok(Durability {
        replicas,
        ..durability
    })
}

/// What the server is in its replication group.
#[derive(Debug, PartialEq, Eq)]
enum Role {
    /// It takes writes; this many replicas follow it.
    Primary { replicas: usize },
    /// It follows `primary` (`host:port`) and refuses every write.
    Replica { primary: String },
}

/// The server's role from `ROLE`, or from `INFO replication` when `ROLE` is
/// renamed or forbidden; `None` when neither may be run.
async fn role(connection: &mut (impl ConnectionLike + Send)) -> Result<Option<Role>> {
    let answer: RedisResult<redis::Value> = redis::cmd("ROLE").query_async(connection).await;
    match answer {
        Ok(value) => return Ok(role_from_answer(&value)),
        Err(error) if !may_fall_back(&error) => return Err(error::from_redis(error)),
        Err(_) => {}
    }
    let info: RedisResult<String> = redis::cmd("INFO")
        .arg("replication")
        .query_async(connection)
        .await;
    match info {
        Ok(text) => Ok(role_from_info(&info_fields(&text))),
        Err(error) if may_fall_back(&error) => Ok(None),
        Err(error) => Err(error::from_redis(error)),
    }
}

fn role_from_answer(value: &redis::Value) -> Option<Role> {
    use redis::Value;
    let Value::Array(fields) = value else {
        return None;
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::Int(number) => Some(number.to_string()),
        _ => None,
    };
    match fields.first().and_then(text)?.as_str() {
        "master" => match fields.get(2) {
            Some(Value::Array(replicas)) => Some(Role::Primary {
                replicas: replicas.len(),
            }),
            _ => None,
        },
        "slave" | "replica" => {
            let host = fields.get(1).and_then(text)?;
            let port = fields.get(2).and_then(text)?;
            Some(Role::Replica {
                primary: format!("{host}:{port}"),
            })
        }
        _ => None,
    }
}

fn role_from_info(fields: &HashMap<&str, &str>) -> Option<Role> {
    match *fields.get("role")? {
        "master" => Some(Role::Primary {
            replicas: fields.get("connected_slaves")?.parse().ok()?,
        }),
        "slave" | "replica" => Some(Role::Replica {
            primary: format!(
                "{}:{}",
                fields.get("master_host").copied().unwrap_or("?"),
                fields.get("master_port").copied().unwrap_or("?")
            ),
        }),
        _ => None,
    }
}

/// The error of connecting to a replica: every write would fail, for as
/// long as it stays one.
fn replica_refused(primary: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!(
            "the Redis server is a read-only replica of {primary}: every write tenure makes \
             would be refused; point the URL at the primary (or at an address that follows \
             it through failovers)"
        ),
    )
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
pub(crate) fn check_eviction_policy(policy: &str) -> Result<()> {
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

async fn config_value(
    connection: &mut (impl ConnectionLike + Send),
    name: &str,
) -> RedisResult<String> {
    let answer: HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(connection)
        .await?;
    Ok(answer.get(name).cloned().unwrap_or_default())
}

async fn from_config(connection: &mut (impl ConnectionLike + Send)) -> RedisResult<Durability> {
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
        replicas: None,
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

async fn from_info(connection: &mut (impl ConnectionLike + Send)) -> RedisResult<Durability> {
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
        replicas: None,
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
    fn roles_are_read_from_role_and_from_info() {
        use redis::Value;
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let primary = Value::Array(vec![
            bulk("master"),
            Value::Int(10),
            Value::Array(vec![Value::Array(vec![
                bulk("10.0.0.2"),
                bulk("6379"),
                bulk("10"),
            ])]),
        ]);
        assert_eq!(
            role_from_answer(&primary),
            Some(Role::Primary { replicas: 1 })
        );
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("10.0.0.1"),
            Value::Int(6379),
            bulk("connected"),
            Value::Int(10),
        ]);
        assert_eq!(
            role_from_answer(&replica),
            Some(Role::Replica {
                primary: "10.0.0.1:6379".to_owned()
            })
        );
        assert_eq!(role_from_answer(&Value::Nil), None);
        let info = info_fields("# Replication\r\nrole:master\r\nconnected_slaves:2\r\n");
        assert_eq!(role_from_info(&info), Some(Role::Primary { replicas: 2 }));
        let info = info_fields("role:slave\r\nmaster_host:h\r\nmaster_port:7000\r\n");
        assert_eq!(
            role_from_info(&info),
            Some(Role::Replica {
                primary: "h:7000".to_owned()
            })
        );
        assert!(replica_refused("h:1").message().contains("primary"));
    }

    #[test]
    fn nothing_on_disk_only_when_known() {
        let mut durability = Durability {
            eviction_policy: "noeviction".to_owned(),
            append_only: Some(false),
            append_fsync: Some(AppendFsync::EverySecond),
            snapshot_schedule: Some(String::new()),
            source: SettingsSource::Config,
            replicas: Some(0),
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
