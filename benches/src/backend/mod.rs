//! One adapter per backend: the store under test, and beside it the raw
//! baseline and the peer lock measured in the same run, through the same
//! driver, on the same server or file, and the wake-up channel the
//! `wake-on-release` retry strategy of `hot-key` waits on.
//!
//! The raw baseline is the bare statement a hand-rolled lease would run
//! (an insert-if-absent for admit, a conditional update for the fenced
//! writes, a bare claim for the queue), so each ratio says what tenure's
//! contract (typed outcomes, fences, scopes, validation) costs on top of the
//! cheapest correct-looking thing the same store can do.

mod etcd;
mod memory;
mod mysql;
mod postgres;
mod redis;
mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::{JobQueue, LeaseStore};

use crate::options::{BackendKind, Options};
use crate::BenchResult;

/// A backend opened for one scenario: a fresh store (temp file, schema or
/// namespace), its raw baseline and its peer lock.
pub struct Backend {
    /// Which backend this is.
    pub kind: BackendKind,
    /// The store under test.
    pub store: Arc<dyn LeaseStore>,
    /// The same store's job queue.
    pub queue: Arc<dyn JobQueue>,
    /// The bare statements of the same store.
    pub raw: Arc<dyn RawBaseline>,
    /// The lock people use instead of leases on this store.
    pub peer: Arc<dyn PeerLock>,
    /// Where waiters for a held scope sleep until a release wakes them.
    pub wake_ups: Arc<dyn WakeUps>,
    /// The server's statistics of the run's tables, where it keeps them
    /// (PostgreSQL).
    pub tables: Option<Arc<dyn TableStats>>,
    /// The time the server spent running commands, where it counts it
    /// (Redis).
    pub server_time: Option<Arc<dyn ServerTime>>,
    /// What removes everything the run created.
    teardown: Box<dyn Teardown>,
}

impl Backend {
    /// Removes everything the run created (schema, namespace, file).
    ///
    /// # Errors
    ///
    /// The store's or the file system's.
    pub async fn cleanup(&self) -> BenchResult<()> {
        self.teardown.teardown().await
    }
}

/// Removes what one backend's run created.
#[async_trait]
trait Teardown: Send + Sync {
    async fn teardown(&self) -> BenchResult<()>;
}

/// The bare statements a hand-rolled lease table would run.
#[async_trait]
pub trait RawBaseline: Send + Sync {
    /// What the statements are, for the report.
    fn describe(&self) -> &'static str;
    /// Inserts `key` (owner `owner`, fence 1, expiry now + `ttl`) unless it
    /// exists: admit's bare equivalent. True when inserted.
    async fn insert(&self, key: &str, owner: &str, ttl: Duration) -> BenchResult<bool>;
    /// Extends `key` to now + `ttl` when owner and fence match: the bare
    /// equivalent of the fenced writes (renew, transition, takeover).
    async fn cas(&self, key: &str, owner: &str, fence: u64, ttl: Duration) -> BenchResult<bool>;
    /// Transition's bare equivalent for `key`, held by `owner` with
    /// `fence`: the compare-and-set unless a baseline has a closer one
    /// (Redis's script floor moves the record to running and answers it).
    async fn transition(
        &self,
        key: &str,
        owner: &str,
        fence: u64,
        ttl: Duration,
    ) -> BenchResult<bool> {
        self.cas(key, owner, fence, ttl).await
    }
    /// Takeover's bare equivalent for `key`, held by `owner` with `fence`:
    /// the compare-and-set unless a baseline has a closer one (Redis's
    /// script floor judges the lease's lapse, draws a fence, hands the
    /// record over and answers it).
    async fn take_over(
        &self,
        key: &str,
        owner: &str,
        fence: u64,
        ttl: Duration,
    ) -> BenchResult<bool> {
        self.cas(key, owner, fence, ttl).await
    }
    /// Queues `count` bare jobs in `queue`.
    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()>;
    /// Claims the oldest queued job of `queue`, if any: the bare claim.
    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>>;
    /// Marks a claimed job done. True when it was claimed by `worker`.
    async fn complete_job(&self, queue: &str, id: &str, worker: &str) -> BenchResult<bool>;
    /// What the batched claim and completion run, for the report.
    fn describe_batch(&self) -> &'static str {
        "the bare claim and completion, once per job"
    }
    /// Claims up to `limit` of the oldest queued jobs of `queue`, in one
    /// round trip where the store has one: the bare batch claim. The
    /// default repeats [`claim_job`](RawBaseline::claim_job).
    async fn claim_jobs(
        &self,
        queue: &str,
        worker: &str,
        limit: usize,
    ) -> BenchResult<Vec<String>> {
        let mut claimed = Vec::with_capacity(limit);
        while claimed.len() < limit {
            match self.claim_job(queue, worker).await? {
                Some(id) => claimed.push(id),
                None => break,
            }
        }
        Ok(claimed)
    }
    /// Marks claimed jobs done, in one round trip where the store has one;
    /// answers, per id, whether it was claimed by `worker`. The default
    /// repeats [`complete_job`](RawBaseline::complete_job).
    async fn complete_jobs(
        &self,
        queue: &str,
        ids: &[String],
        worker: &str,
    ) -> BenchResult<Vec<bool>> {
        let mut done = Vec::with_capacity(ids.len());
        for id in ids {
            done.push(self.complete_job(queue, id, worker).await?);
        }
        Ok(done)
    }
}

/// The server's own count of the time it spent running commands: what a
/// single-threaded server (Redis) can do per second, whatever the clients
/// do.
#[async_trait]
pub trait ServerTime: Send + Sync {
    /// Microseconds of CPU time the server has spent serving clients since
    /// it started: every client's, so the difference over a run is the
    /// run's own only on a server nothing else uses.
    async fn busy_usec(&self) -> BenchResult<u64>;
}

/// What `long-run` reads and sets on a store whose tables a server keeps
/// statistics of (PostgreSQL): only the run's own tables, never a server
/// setting.
#[async_trait]
pub trait TableStats: Send + Sync {
    /// Turns autovacuum on or off for every table of the run's schema
    /// (`ALTER TABLE … SET (autovacuum_enabled = …)`).
    async fn set_autovacuum(&self, enabled: bool) -> BenchResult<()>;
    /// `pg_stat_user_tables` of every table of the run's schema.
    async fn table_stats(&self) -> BenchResult<Vec<TableStat>>;
    /// `VACUUM (ANALYZE)` of every table of the run's schema.
    async fn vacuum(&self) -> BenchResult<()>;
    /// A server setting, read (`SHOW`), never changed.
    async fn server_setting(&self, name: &str) -> BenchResult<String>;
    /// `EXPLAIN (ANALYZE, BUFFERS)` of read-only equivalents of the two hot
    /// reads: the claim's walk of `queue`'s claim index to its first queued
    /// job, and the admission's read of `scope`'s holder.
    async fn probe(&self, queue: &str, scope: &str) -> BenchResult<Probe>;
}

/// What [`TableStats::probe`] measured: shared buffers touched (hit +
/// read) and execution time of each read.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Probe {
    /// Buffers the claim's index walk touched.
    pub claim_buffers: i64,
    /// Its execution time, in µs.
    pub claim_us: f64,
    /// Buffers the holder read touched.
    pub holder_buffers: i64,
    /// Its execution time, in µs.
    pub holder_us: f64,
}

/// One table's `pg_stat_user_tables` counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableStat {
    /// The table.
    pub table: String,
    /// Sequential scans started.
    pub seq_scan: i64,
    /// Live rows those scans read.
    pub seq_tup_read: i64,
    /// Index scans started.
    pub idx_scan: i64,
    /// Rows updated.
    pub n_tup_upd: i64,
    /// Rows updated HOT (no index entry written).
    pub n_tup_hot_upd: i64,
    /// Live rows, estimated.
    pub n_live_tup: i64,
    /// Dead rows, estimated.
    pub n_dead_tup: i64,
    /// Times autovacuum vacuumed the table.
    pub autovacuum_count: i64,
    /// Times autovacuum analyzed the table.
    pub autoanalyze_count: i64,
}

impl TableStat {
    /// The counters of `self` since `before` (the row estimates as of now).
    pub fn since(&self, before: Option<&TableStat>) -> TableStat {
        let Some(before) = before else {
            return self.clone();
        };
        TableStat {
            table: self.table.clone(),
            seq_scan: self.seq_scan - before.seq_scan,
            seq_tup_read: self.seq_tup_read - before.seq_tup_read,
            idx_scan: self.idx_scan - before.idx_scan,
            n_tup_upd: self.n_tup_upd - before.n_tup_upd,
            n_tup_hot_upd: self.n_tup_hot_upd - before.n_tup_hot_upd,
            n_live_tup: self.n_live_tup,
            n_dead_tup: self.n_dead_tup,
            autovacuum_count: self.autovacuum_count - before.autovacuum_count,
            autoanalyze_count: self.autoanalyze_count - before.autoanalyze_count,
        }
    }
}

/// A plain mutual-exclusion lock, the peer tenure is compared with in `hot-key`.
#[async_trait]
pub trait PeerLock: Send + Sync {
    /// What the lock is, for the report.
    fn describe(&self) -> &'static str;
    /// A session for one worker (PostgreSQL advisory locks belong to a
    /// connection, so each worker needs its own).
    async fn session(&self) -> BenchResult<Box<dyn PeerSession>>;
}

/// One worker's handle on a [`PeerLock`].
#[async_trait]
pub trait PeerSession: Send {
    /// Takes `scope` unless someone holds it. True when taken.
    async fn try_acquire(&mut self, scope: &str, ttl: Duration) -> BenchResult<bool>;
    /// Releases `scope`, held by this session.
    async fn release(&mut self, scope: &str) -> BenchResult<()>;
}

/// Per-scope FIFO wait queues and a way to wake their heads, kept where a
/// deployment of the store would keep them: in process for the embedded
/// stores (one process uses them), in the server for PostgreSQL and Redis
/// (the waiters are in other processes).
#[async_trait]
pub trait WakeUps: Send + Sync {
    /// What the queues and the wake-up are, for the report.
    fn describe(&self) -> &'static str;
    /// A session for one worker (a waiter blocks its own connection).
    async fn session(&self) -> BenchResult<Box<dyn WakeSession>>;
}

/// One worker's place in the wait queues of a [`WakeUps`]: in at most one
/// queue at a time, from [`enqueue`](WakeSession::enqueue) until its
/// [`wait`](WakeSession::wait) ends.
#[async_trait]
pub trait WakeSession: Send {
    /// Joins the tail of `scope`'s wait queue.
    async fn enqueue(&mut self, scope: &str) -> BenchResult<()>;
    /// Waits until a [`wake_next`](WakeSession::wake_next) pops this session
    /// or `timeout` passes. True when woken. On a timeout the session leaves
    /// the queue, so the next release wakes someone still waiting; a wake-up
    /// that races the timeout is taken, never lost.
    async fn wait(&mut self, timeout: Duration) -> BenchResult<bool>;
    /// Pops the head of `scope`'s wait queue and wakes it. True when someone
    /// was waiting.
    async fn wake_next(&mut self, scope: &str) -> BenchResult<bool>;
}

/// Opens `kind` afresh for one scenario.
pub async fn open(kind: BackendKind, options: &Options) -> BenchResult<Backend> {
    match kind {
        BackendKind::Memory => Ok(memory::open()),
        BackendKind::Sqlite => sqlite::open().await,
        BackendKind::Postgres => {
            let url = options
                .pg_url
                .as_deref()
                .ok_or_else(|| missing_url(crate::options::PG_URL_VAR))?;
            let hot_racers = options.sizes.hot_workers.iter().copied().max().unwrap_or(0);
            postgres::open(url, hot_racers).await
        }
        BackendKind::Redis => {
            let url = options
                .redis_url
                .as_deref()
                .ok_or_else(|| missing_url(crate::options::REDIS_URL_VAR))?;
            redis::open(url, options.redis_floor).await
        }
        BackendKind::Etcd => {
            let url = options
                .etcd_url
                .as_deref()
                .ok_or_else(|| missing_url(crate::options::ETCD_URL_VAR))?;
            etcd::open(url).await
        }
        BackendKind::Mysql => {
            let url = options
                .mysql_url
                .as_deref()
                .ok_or_else(|| missing_url(crate::options::MYSQL_URL_VAR))?;
            let hot_racers = options.sizes.hot_workers.iter().copied().max().unwrap_or(0);
            mysql::open(url, hot_racers).await
        }
    }
}

/// Why `kind` cannot run with `options`, if it cannot.
pub fn unavailable_reason(kind: BackendKind, options: &Options) -> Option<String> {
    match kind {
        BackendKind::Postgres if options.pg_url.is_none() => {
            Some(format!("{} is not set", crate::options::PG_URL_VAR))
        }
        BackendKind::Redis if options.redis_url.is_none() => {
            Some(format!("{} is not set", crate::options::REDIS_URL_VAR))
        }
        BackendKind::Etcd if options.etcd_url.is_none() => {
            Some(format!("{} is not set", crate::options::ETCD_URL_VAR))
        }
        BackendKind::Mysql if options.mysql_url.is_none() => {
            Some(format!("{} is not set", crate::options::MYSQL_URL_VAR))
        }
        _ => None,
    }
}

fn missing_url(var: &str) -> crate::BenchError {
    format!("{var} is not set (or pass the URL on the command line)").into()
}

/// A name no other run uses, for schemas, namespaces and owners.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        tenure_lease_core::generate_id().replace('-', "")
    )
}
