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
    /// Queues `count` bare jobs in `queue`.
    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()>;
    /// Claims the oldest queued job of `queue`, if any: the bare claim.
    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>>;
    /// Marks a claimed job done. True when it was claimed by `worker`.
    async fn complete_job(&self, queue: &str, id: &str, worker: &str) -> BenchResult<bool>;
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
            redis::open(url).await
        }
        BackendKind::Etcd => {
            let url = options
                .etcd_url
                .as_deref()
                .ok_or_else(|| missing_url(crate::options::ETCD_URL_VAR))?;
            etcd::open(url).await
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
