//! The Redis backend in a fresh namespace, deleted at cleanup. The baseline
//! runs on a connection of its own, with keys under the store's namespace
//! (so the cleanup removes them too): `SET NX PX` for admit, `EVALSHA` of a
//! minimal compare-and-set script for the fenced writes, `LMOVE` for the
//! bare claim. The peer lock is `SET NX PX` with a compare-and-delete.
//! Waiters queue in a list per scope, each as the key of its own wake-up
//! list, which it `BLPOP`s on a connection of its own. With `--redis-floor`
//! the baselines are the script floors instead ([`floor`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Script};
use tenure_backend_redis::{RedisConfig, RedisStore};

use super::{
    Backend, PeerLock, PeerSession, RawBaseline, ServerTime, Teardown, WakeSession, WakeUps,
};
use crate::options::BackendKind;
use crate::BenchResult;

mod floor;

/// Extends the key's expiry when its value is the expected `owner:fence`.
const CAS_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

/// Deletes the key when its value is the caller's token.
const RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('DEL', KEYS[1]) end return 0";

/// Pops the head of a wait queue and pushes a wake-up onto the list it
/// names. The popped name is a key the script was not given: it shares the
/// namespace's hash tag, so it lives in the queue's slot.
const WAKE_NEXT_SCRIPT: &str = "local waiter = redis.call('LPOP', KEYS[1]) \
     if waiter then redis.call('RPUSH', waiter, 1) return 1 end return 0";

/// A store in a fresh namespace and a bare connection beside it; the
/// baselines are the script floors when `floor` is set.
pub(super) async fn open(url: &str, floor: bool) -> BenchResult<Backend> {
    let namespace = super::unique_name("bench");
    let store = Arc::new(RedisStore::connect(RedisConfig::new(url, namespace.as_str())).await?);
    let client = redis::Client::open(url)?;
    let connection = ConnectionManager::new(client.clone()).await?;
    let raw = Arc::new(RawRedis {
        client,
        connection,
        prefix: format!("tenure:{{{namespace}}}:raw:"),
        cas: Script::new(CAS_SCRIPT),
        release: Script::new(RELEASE_SCRIPT),
        wake_next: Script::new(WAKE_NEXT_SCRIPT),
    });
    let baseline: Arc<dyn RawBaseline> = if floor {
        floor::ScriptFloor::new(RawRedis::clone(&raw))
    } else {
        raw.clone()
    };
    Ok(Backend {
        kind: BackendKind::Redis,
        store: store.clone(),
        queue: store.clone(),
        raw: baseline,
        peer: raw.clone(),
        wake_ups: raw.clone(),
        tables: None,
        server_time: Some(raw),
        teardown: Box::new(DeleteNamespace(store)),
    })
}

/// Deletes the run's namespace (the raw keys live in it too).
struct DeleteNamespace(Arc<RedisStore>);

#[async_trait]
impl Teardown for DeleteNamespace {
    async fn teardown(&self) -> BenchResult<()> {
        self.0.delete_namespace().await?;
        Ok(())
    }
}

#[derive(Clone)]
struct RawRedis {
    /// Opens the waiters' own connections.
    client: redis::Client,
    connection: ConnectionManager,
    prefix: String,
    cas: Script,
    release: Script,
    wake_next: Script,
}

impl RawRedis {
    fn key(&self, family: &str, name: &str) -> String {
        format!("{}{family}:{name}", self.prefix)
    }
}

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[async_trait]
impl RawBaseline for RawRedis {
    fn describe(&self) -> &'static str {
        "SET NX PX / EVALSHA compare-and-set / LMOVE claim"
    }

    async fn insert(&self, key: &str, owner: &str, ttl: Duration) -> BenchResult<bool> {
        let set: Option<String> = redis::cmd("SET")
            .arg(self.key("lease", key))
            .arg(format!("{owner}:1"))
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl))
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(set.is_some())
    }

    async fn cas(&self, key: &str, owner: &str, fence: u64, ttl: Duration) -> BenchResult<bool> {
        let extended: i64 = self
            .cas
            .key(self.key("lease", key))
            .arg(format!("{owner}:{fence}"))
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(extended == 1)
    }

    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()> {
        let key = self.key("queued", queue);
        let ids: Vec<String> = (0..count).map(|n| n.to_string()).collect();
        for chunk in ids.chunks(1000) {
            let _: i64 = redis::cmd("RPUSH")
                .arg(&key)
                .arg(chunk)
                .query_async(&mut self.connection.clone())
                .await?;
        }
        Ok(())
    }

    async fn claim_job(&self, queue: &str, _worker: &str) -> BenchResult<Option<String>> {
        let claimed: Option<String> = redis::cmd("LMOVE")
            .arg(self.key("queued", queue))
            .arg(self.key("claimed", queue))
            .arg("LEFT")
            .arg("RIGHT")
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(claimed)
    }

    async fn complete_job(&self, queue: &str, id: &str, _worker: &str) -> BenchResult<bool> {
        let removed: i64 = redis::cmd("LREM")
            .arg(self.key("claimed", queue))
            .arg(1)
            .arg(id)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(removed == 1)
    }

    fn describe_batch(&self) -> &'static str {
        "n × LMOVE in one pipeline; n × LREM in one pipeline"
    }

    async fn claim_jobs(
        &self,
        queue: &str,
        _worker: &str,
        limit: usize,
    ) -> BenchResult<Vec<String>> {
        let mut pipeline = redis::pipe();
        for _ in 0..limit {
            pipeline
                .cmd("LMOVE")
                .arg(self.key("queued", queue))
                .arg(self.key("claimed", queue))
                .arg("LEFT")
                .arg("RIGHT");
        }
        let claimed: Vec<Option<String>> =
            pipeline.query_async(&mut self.connection.clone()).await?;
        Ok(claimed.into_iter().flatten().collect())
    }

    async fn complete_jobs(
        &self,
        queue: &str,
        ids: &[String],
        _worker: &str,
    ) -> BenchResult<Vec<bool>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipeline = redis::pipe();
        for id in ids {
            pipeline
                .cmd("LREM")
                .arg(self.key("claimed", queue))
                .arg(1)
                .arg(id);
        }
        let removed: Vec<i64> = pipeline.query_async(&mut self.connection.clone()).await?;
        Ok(removed.into_iter().map(|removed| removed == 1).collect())
    }
}

#[async_trait]
impl ServerTime for RawRedis {
    /// The main thread's CPU time (`INFO cpu`), which serves every command
    /// and does the network I/O. `INFO commandstats` would count a script's
    /// inner commands twice (in the script's time and in their own) and
    /// leave out reading and answering requests.
    async fn busy_usec(&self) -> BenchResult<u64> {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut self.connection.clone())
            .await?;
        let seconds = |field: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|value| value.trim().parse::<f64>().ok())
                .ok_or_else(|| format!("INFO cpu has no {field}"))
        };
        let busy = seconds("used_cpu_user_main_thread")? + seconds("used_cpu_sys_main_thread")?;
        Ok((busy * 1e6).round() as u64)
    }
}

#[async_trait]
impl PeerLock for RawRedis {
    fn describe(&self) -> &'static str {
        "SET NX PX / compare-and-delete script"
    }

    async fn session(&self) -> BenchResult<Box<dyn PeerSession>> {
        Ok(Box::new(RedisPeer {
            raw: self.clone(),
            token: super::unique_name("peer"),
        }))
    }
}

struct RedisPeer {
    raw: RawRedis,
    token: String,
}

#[async_trait]
impl PeerSession for RedisPeer {
    async fn try_acquire(&mut self, scope: &str, ttl: Duration) -> BenchResult<bool> {
        let set: Option<String> = redis::cmd("SET")
            .arg(self.raw.key("lock", scope))
            .arg(&self.token)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl))
            .query_async(&mut self.raw.connection.clone())
            .await?;
        Ok(set.is_some())
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        let _: i64 = self
            .raw
            .release
            .key(self.raw.key("lock", scope))
            .arg(&self.token)
            .invoke_async(&mut self.raw.connection.clone())
            .await?;
        Ok(())
    }
}

#[async_trait]
impl WakeUps for RawRedis {
    fn describe(&self) -> &'static str {
        "RPUSH to a list per scope; a script pops the head and RPUSHes to its list, BLPOPed on a connection per worker"
    }

    async fn session(&self) -> BenchResult<Box<dyn WakeSession>> {
        // BLPOP's own timeout bounds every wait; a response timeout shorter
        // than it would abandon a BLPOP that may still pop a wake-up.
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let blocking = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Box::new(RedisWaiter {
            raw: self.clone(),
            blocking,
            wake_up: self.key("wake", &super::unique_name("waiter")),
            queued: None,
        }))
    }
}

struct RedisWaiter {
    raw: RawRedis,
    /// Used by this session alone, so a `BLPOP` blocks no one else.
    blocking: MultiplexedConnection,
    /// This session's wake-up list, the name it queues under.
    wake_up: String,
    /// The queue this session is in.
    queued: Option<String>,
}

#[async_trait]
impl WakeSession for RedisWaiter {
    async fn enqueue(&mut self, scope: &str) -> BenchResult<()> {
        let queue = self.raw.key("waiters", scope);
        let _: i64 = redis::cmd("RPUSH")
            .arg(&queue)
            .arg(&self.wake_up)
            .query_async(&mut self.blocking)
            .await?;
        self.queued = Some(queue);
        Ok(())
    }

    async fn wait(&mut self, timeout: Duration) -> BenchResult<bool> {
        let queue = self.queued.take().ok_or("wait without enqueue")?;
        // BLPOP counts in seconds; 0 would mean forever.
        let seconds = timeout.as_secs_f64().max(0.001);
        let popped: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(&self.wake_up)
            .arg(format!("{seconds:.3}"))
            .query_async(&mut self.blocking)
            .await?;
        if popped.is_some() {
            return Ok(true);
        }
        let left: i64 = redis::cmd("LREM")
            .arg(&queue)
            .arg(1)
            .arg(&self.wake_up)
            .query_async(&mut self.blocking)
            .await?;
        if left == 1 {
            return Ok(false);
        }
        // A release popped this session as the wait ended; the same script
        // pushed its wake-up, which is there to take.
        let late: Option<String> = redis::cmd("LPOP")
            .arg(&self.wake_up)
            .query_async(&mut self.blocking)
            .await?;
        Ok(late.is_some())
    }

    async fn wake_next(&mut self, scope: &str) -> BenchResult<bool> {
        let woke: i64 = self
            .raw
            .wake_next
            .key(self.raw.key("waiters", scope))
            .invoke_async(&mut self.blocking)
            .await?;
        Ok(woke == 1)
    }
}
