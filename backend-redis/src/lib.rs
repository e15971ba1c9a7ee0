//! # backend-redis
//!
//! A [`LeaseStore`] and [`JobQueue`](lease_core::JobQueue) on Redis: every
//! operation is one Lua script, run with
//! `EVALSHA` (loaded again on `NOSCRIPT`), so it is atomic on the server. The
//! scripts read the time from the server (`TIME`, microseconds), never from
//! the client, and mirror [`lease_core::rules`] exactly: the same reasons in
//! the same precedence, the same retry-after. Each script judges everything
//! before its first write, because Lua does not roll back: an `Interrupt`
//! admission interrupts every holder or none.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> lease_core::Result<()> {
//! use std::time::Duration;
//! use backend_redis::{RedisConfig, RedisStore};
//! use lease_core::{AdmitRequest, LeaseStore};
//!
//! let store = RedisStore::connect(RedisConfig::new("redis://127.0.0.1:6379", "billing")).await?;
//! let admission = store
//!     .admit(&AdmitRequest::new("invoice-run-7", "worker-a").scope("account:7").ttl(Duration::from_secs(30)))
//!     .await?;
//! # let _ = admission; Ok(()) }
//! ```
//!
//! ## Keys
//!
//! A store owns the keys of one namespace, all starting with
//! `tenure:{<namespace>}:`, so they share one hash slot. Per namespace: a
//! hash per record, the active holder of each scope, a sorted set of active
//! records by expiry (`list_expired`), a sorted set per scope of its records
//! by creation (`list_by_scope`), a sorted set of active ids
//! (`list_active`), one of terminal records by last update (`purge`), and
//! one `INCR` counter, the fence sequence. Ids and scopes are kept verbatim
//! in separate key families, so none can collide with another or leave the
//! namespace. The full layout is described in `src/lua/common.lua`.
//!
//! Jobs live in their own key families of the same namespace (so a job may
//! share an id with a lease) and draw fences from the same counter: a hash
//! per job, per queue a ready sorted set whose members sort in claim order
//! and a delayed one by `run_at` (due jobs move into ready when a claim
//! runs, so no background process is needed), a sorted set of claimed jobs
//! by lease expiry (`reap`), per queue one of dead letters by last update,
//! and one of finished (completed and dead-lettered) jobs by finish time
//! (`purge_jobs`); see `src/lua/queue_common.lua`. Empty sorted sets vanish,
//! so after `purge` and `purge_jobs` no key is left for a finished record,
//! job, scope or queue. How far one `claim` looks is bounded
//! ([`CLAIM_SCAN_PER_JOB`], [`PROMOTE_BATCH`]) so it never blocks the server
//! for long. [`RedisStore::delete_namespace`] removes a namespace, jobs
//! included.
//!
//! ## Fencing needs a Redis that does not forget
//!
//! Fences come from the namespace's counter. A Redis that loses recent
//! writes loses fences: after a restart without persistence, or with
//! `appendfsync everysec`, or after a failover to a replica that had not yet
//! received the latest writes, the counter can go back and **hand out a fence
//! that was already handed out**. Two owners can then hold the same fence,
//! and a stale owner may pass a [`FenceGate`](lease_core::FenceGate) and
//! overwrite the newer owner's work; records may also lose their latest
//! renewals, takeovers and transitions. Use fences from this backend for
//! exclusion only with a single Redis running `appendonly yes` and
//! `appendfsync always`, without failover to replicas (or with a failover
//! that never promotes a lagging replica), or use a persistent backend such
//! as PostgreSQL.
//!
//! ## Errors
//!
//! A dropped connection or a server that is loading or read-only answers
//! [`ErrorKind::Unavailable`], and no answer within
//! [`RedisConfig::operation_timeout`] answers [`ErrorKind::Timeout`]: both
//! retryable, the outcome unknown; the connection reconnects by itself
//! meanwhile. A stored record that cannot be decoded answers
//! [`ErrorKind::Corrupt`] (`list_expired` skips and reports it instead, as
//! `claim` and `reap` skip and log an undecodable job).
//!
//! Requires Redis 5 or newer (scripts replicate their effects); tested on
//! Redis 7.

mod config;
mod error;
mod keys;
mod queue;
mod reply;
mod scripts;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{
    clock, rules, validate, Admission, AdmitRequest, AdmitStrategy, Claim, Error, ErrorKind,
    ExpiredQuery, ExpiredScan, LeaseRecord, LeaseStore, Renewal, Result, StatusChange, Takeover,
    TakeoverAction, TakeoverRequest, Timestamp, Transition,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisResult, ScriptInvocation, Value};

pub use config::RedisConfig;
pub use queue::{CLAIM_SCAN_PER_JOB, PROMOTE_BATCH};

use crate::config::config_error;
use crate::keys::Keys;
use crate::scripts::SCRIPTS;

/// Most claims renewed by one script call; `renew_many` splits larger
/// batches so one call never blocks the server for long.
pub const RENEW_BATCH: usize = 1000;

/// Most records (jobs) deleted by one script call of `purge` (`purge_jobs`).
const PURGE_BATCH: usize = 1000;

/// Most keys asked for by one `SCAN` step of [`RedisStore::delete_namespace`].
const SCAN_COUNT: usize = 1000;

/// The Redis store. Cloning shares the connection.
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    keys: Keys,
    config: Arc<RedisConfig>,
    /// Set when the connection may have been replaced, so the next call
    /// names the new one first.
    needs_name: Arc<AtomicBool>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the server `config` names and names the connection.
    ///
    /// Fails with [`ErrorKind::Config`] for a bad URL, namespace or client
    /// name, and with [`ErrorKind::Unavailable`] when the server cannot be
    /// reached within [`RedisConfig::connect_timeout`].
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        config.validate()?;
        let client = redis::Client::open(config.url()).map_err(|error| {
            config_error(format!(
                "invalid Redis URL {}: {}",
                config.redacted_url(),
                error.category()
            ))
        })?;
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.operation_timeout))
            .set_connection_timeout(Some(config.connect_timeout))
            .set_max_delay(Duration::from_secs(1));
        let connection = tokio::time::timeout(
            config.connect_timeout,
            ConnectionManager::new_with_config(client, manager_config),
        )
        .await
        .map_err(|_| {
            Error::unavailable(format!(
                "could not connect to {} within {:?}",
                config.redacted_url(),
                config.connect_timeout
            ))
        })?
        .map_err(error::from_redis)?;
        let store = RedisStore {
            connection,
            keys: Keys::new(config.namespace()),
            config: Arc::new(config),
            needs_name: Arc::new(AtomicBool::new(false)),
        };
        store.name_connection(&mut store.connection.clone()).await?;
        Ok(store)
    }

    /// The settings this store was connected with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Deletes every key of this store's namespace (`SCAN` + `UNLINK`) and
    /// answers how many. Not atomic: operations running meanwhile may leave
    /// keys behind.
    pub async fn delete_namespace(&self) -> Result<u64> {
        let pattern = self.keys.pattern();
        let mut cursor = 0_u64;
        let mut deleted = 0_u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys): (u64, Vec<Vec<u8>>) = self.command(&scan).await?;
            if !keys.is_empty() {
                let unlinked: u64 = self.command(redis::cmd("UNLINK").arg(&keys)).await?;
                deleted += unlinked;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    async fn name_connection(&self, connection: &mut ConnectionManager) -> Result<()> {
        let mut rename = redis::cmd("CLIENT");
        rename.arg("SETNAME").arg(self.config.connection_name());
        let named: RedisResult<()> = rename.query_async(connection).await;
        named.map_err(error::from_redis)
    }

    /// The shared connection, named again first when it may have been
    /// replaced since the last call.
    async fn connection(&self) -> ConnectionManager {
        let mut connection = self.connection.clone();
        if self.needs_name.swap(false, Ordering::AcqRel)
            && self.name_connection(&mut connection).await.is_err()
        {
            self.needs_name.store(true, Ordering::Release);
        }
        connection
    }

    /// Awaits one call to the server within the operation timeout and maps
    /// its errors.
    async fn bounded<T>(&self, call: impl Future<Output = RedisResult<T>>) -> Result<T> {
        let timeout = self.config.operation_timeout;
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if error.is_unrecoverable_error() {
                    self.needs_name.store(true, Ordering::Release);
                }
                Err(error::from_redis(error))
            }
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!("Redis did not answer within {timeout:?}; the outcome is unknown"),
            )),
        }
    }

    async fn command<T: FromRedisValue>(&self, command: &redis::Cmd) -> Result<T> {
        let mut connection = self.connection().await;
        self.bounded(command.query_async(&mut connection)).await
    }

    async fn script(&self, invocation: &ScriptInvocation<'_>) -> Result<Value> {
        let mut connection = self.connection().await;
        self.bounded(invocation.invoke_async(&mut connection)).await
    }

    /// One script call renewing `claims` (at most [`RENEW_BATCH`]).
    async fn renew_batch(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        let mut invocation = SCRIPTS.renew.prepare_invoke();
        invocation.key(self.keys.expiry()).arg(micros(ttl));
        for claim in claims {
            invocation
                .key(self.keys.record(&claim.id))
                .arg(&claim.id)
                .arg(&claim.owner)
                .arg(claim.fence);
        }
        reply::renewals(self.script(&invocation).await?, claims.len())
    }

    async fn list_index(&self, index: String) -> Result<Vec<LeaseRecord>> {
        let mut invocation = SCRIPTS.list_ids.prepare_invoke();
        invocation.key(index).arg(self.keys.prefix());
        reply::records(self.script(&invocation).await?)
    }
}

/// A duration in whole microseconds, rounded down: leases end on the
/// microsecond grid every stored time is on.
fn micros(duration: Duration) -> u128 {
    duration.as_micros()
}

/// `"1"` and the text when given, `"0"` and nothing otherwise.
fn optional(text: Option<&str>) -> (&'static str, &str) {
    match text {
        Some(text) => ("1", text),
        None => ("0", ""),
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        validate::admit(request)?;
        let strategy = match request.strategy {
            AdmitStrategy::Reject => "reject",
            AdmitStrategy::Interrupt => "interrupt",
            _ => {
                return Err(Error::invalid_input(
                    "strategy",
                    "is not supported by the Redis backend",
                ))
            }
        };
        let scopes = serde_json::Value::Array(
            request
                .scopes
                .iter()
                .cloned()
                .map(serde_json::Value::String)
                .collect(),
        );
        let mut invocation = SCRIPTS.admit.prepare_invoke();
        invocation
            .key(self.keys.fence())
            .key(self.keys.expiry())
            .key(self.keys.active())
            .key(self.keys.record(&request.id));
        for scope in &request.scopes {
            invocation.key(self.keys.holder(scope));
        }
        for scope in &request.scopes {
            invocation.key(self.keys.scope(scope));
        }
        invocation
            .arg(self.keys.prefix())
            .arg(&request.id)
            .arg(&request.owner)
            .arg(&request.kind)
            .arg(
                request
                    .ttl
                    .map(|ttl| micros(ttl).to_string())
                    .unwrap_or_default(),
            )
            .arg(strategy)
            .arg(clock::micros_rounded_up(request.grace))
            .arg(request.metadata.to_string())
            .arg(scopes.to_string())
            .arg(rules::INTERRUPTED_BY_ADMISSION);
        reply::admission(self.script(&invocation).await?, request)
    }

    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        validate::claim(claim)?;
        validate::ttl(ttl)?;
        let mut outcomes = self.renew_batch(std::slice::from_ref(claim), ttl).await?;
        outcomes
            .pop()
            .ok_or_else(|| Error::corrupt("renew.lua answered no outcome"))
    }

    /// One script call per [`RENEW_BATCH`] claims. A batch split over
    /// several calls that fails part way answers `Err`, although earlier
    /// calls may have renewed their claims (the outcome is unknown, as every
    /// `Err` says).
    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        validate::claims(claims)?;
        validate::ttl(ttl)?;
        let mut outcomes = Vec::with_capacity(claims.len());
        for batch in claims.chunks(RENEW_BATCH) {
            outcomes.extend(self.renew_batch(batch, ttl).await?);
        }
        Ok(outcomes)
    }

    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        validate::claim(claim)?;
        validate::status_change(change)?;
        let (has_error, error) = optional(change.error.as_deref());
        let (has_stop, stop) = optional(change.stop_reason.as_deref());
        let mut invocation = SCRIPTS.transition.prepare_invoke();
        invocation
            .key(self.keys.record(&claim.id))
            .key(self.keys.expiry())
            .key(self.keys.active())
            .key(self.keys.terminal())
            .arg(self.keys.prefix())
            .arg(&claim.id)
            .arg(&claim.owner)
            .arg(claim.fence)
            .arg(change.status.as_str())
            .arg(has_error)
            .arg(error)
            .arg(has_stop)
            .arg(stop);
        reply::transition(self.script(&invocation).await?)
    }

    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        validate::takeover(request)?;
        let (action, error, stop_reason, ttl) = match &request.action {
            TakeoverAction::Fail { error, stop_reason } => {
                ("fail", error.as_str(), stop_reason.as_deref(), None)
            }
            TakeoverAction::Adopt { ttl } => ("adopt", "", None, *ttl),
            _ => {
                return Err(Error::invalid_input(
                    "action",
                    "is not supported by the Redis backend",
                ))
            }
        };
        let (has_stop, stop) = optional(stop_reason);
        let mut invocation = SCRIPTS.takeover.prepare_invoke();
        invocation
            .key(self.keys.record(&request.id))
            .key(self.keys.fence())
            .key(self.keys.expiry())
            .key(self.keys.active())
            .key(self.keys.terminal())
            .arg(self.keys.prefix())
            .arg(&request.id)
            .arg(&request.claimer)
            .arg(clock::micros_rounded_up(request.grace))
            .arg(action)
            .arg(error)
            .arg(has_stop)
            .arg(stop)
            .arg(ttl.map(|ttl| micros(ttl).to_string()).unwrap_or_default());
        reply::takeover(self.script(&invocation).await?, request.grace)
    }

    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        validate::expired_query(query)?;
        let mut invocation = SCRIPTS.list_expired.prepare_invoke();
        invocation
            .key(self.keys.expiry())
            .arg(self.keys.prefix())
            .arg(clock::micros_rounded_up(query.grace))
            .arg(
                query
                    .created_before
                    .map(|cutoff| lease_core::clock::to_micros(cutoff).to_string())
                    .unwrap_or_default(),
            )
            .arg(query.limit);
        reply::expired(self.script(&invocation).await?, query)
    }

    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
        validate::lease_id(id)?;
        let mut invocation = SCRIPTS.get.prepare_invoke();
        invocation.key(self.keys.record(id)).arg(id);
        Ok(reply::records(self.script(&invocation).await?)?.pop())
    }

    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
        validate::scope(scope)?;
        let mut records = self.list_index(self.keys.scope(scope)).await?;
        records.sort_by_key(rules::newest_first);
        Ok(records)
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let mut records = self.list_index(self.keys.active()).await?;
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    async fn now(&self) -> Result<Timestamp> {
        reply::server_time(self.command(&redis::cmd("TIME")).await?)
    }

    /// Deletes in batches of up to 1000 records, one script call each, until
    /// a batch finds fewer: each batch is atomic, the whole purge is not (it
    /// needs not be: purged records are terminal and never change).
    async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
        validate::retention(terminal_older_than)?;
        let mut purged = 0_u64;
        loop {
            let mut invocation = SCRIPTS.purge.prepare_invoke();
            invocation
                .key(self.keys.terminal())
                .arg(self.keys.prefix())
                .arg(clock::micros_rounded_up(terminal_older_than))
                .arg(PURGE_BATCH);
            let deleted = u64::from_redis_value(self.script(&invocation).await?)
                .map_err(|error| Error::corrupt(format!("purge.lua answered {error}")))?;
            purged += deleted;
            if deleted < PURGE_BATCH as u64 {
                return Ok(purged);
            }
        }
    }
}
