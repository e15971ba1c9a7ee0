//! The MySQL backend in a fresh database, dropped at cleanup. The
//! baseline's tables live in the same database and run on the store's own
//! pool: the bare `INSERT IGNORE`, conditional `UPDATE`, and a bare
//! `FOR UPDATE SKIP LOCKED` claim in a transaction. The peer lock is
//! `GET_LOCK` / `RELEASE_LOCK` on a connection per worker. Waiters queue in
//! process (MySQL has no notifications to wake them with).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlPool};
use tenure_backend_mysql::{MySqlConfig, MySqlStore};

use super::memory::InProcessWakeUps;
use super::{Backend, PeerLock, PeerSession, RawBaseline, Teardown};
use crate::options::BackendKind;
use crate::BenchResult;

/// Connections for the largest worker count of `scaling` (32) plus the
/// keeper's and the scenario's own calls.
const BASE_POOL_SIZE: u32 = 40;
/// Connections beyond the `hot-key` workers' own (a peer-lock session
/// each) for the store's calls.
const HOT_KEY_SPARE: u32 = 8;

/// A store in a fresh database on the server at `url` (whose own database
/// only serves to create it), and the bare statements beside it.
pub(super) async fn open(url: &str, hot_racers: usize) -> BenchResult<Backend> {
    let database = super::unique_name("tenure_bench");
    let admin = MySqlPool::connect(url).await?;
    sqlx::query(&format!("CREATE DATABASE `{database}`"))
        .execute(&admin)
        .await?;
    let base = url.split('?').next().unwrap_or(url);
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    let config = MySqlConfig::new(format!("{server}/{database}"))
        .max_connections(BASE_POOL_SIZE.max(u32::try_from(hot_racers)? + HOT_KEY_SPARE));
    let store = Arc::new(MySqlStore::connect(config).await?);
    let raw = Arc::new(RawMySql {
        pool: store.pool().clone(),
        namespace: database.clone(),
    });
    raw.create_tables().await?;
    Ok(Backend {
        kind: BackendKind::Mysql,
        store: store.clone(),
        queue: store.clone(),
        raw: raw.clone(),
        peer: raw,
        wake_ups: Arc::new(InProcessWakeUps::default()),
        tables: None,
        server_time: None,
        teardown: Box::new(DropDatabase {
            store,
            admin,
            database,
        }),
    })
}

/// Drops the run's database (the raw tables live in it too).
struct DropDatabase {
    store: Arc<MySqlStore>,
    admin: MySqlPool,
    database: String,
}

#[async_trait]
impl Teardown for DropDatabase {
    async fn teardown(&self) -> BenchResult<()> {
        self.store.close().await;
        sqlx::query(&format!("DROP DATABASE `{}`", self.database))
            .execute(&self.admin)
            .await?;
        self.admin.close().await;
        Ok(())
    }
}

struct RawMySql {
    pool: MySqlPool,
    /// Keeps the named locks of concurrent runs apart.
    namespace: String,
}

impl RawMySql {
    async fn create_tables(&self) -> BenchResult<()> {
        for statement in [
            "CREATE TABLE raw_leases (id VARBINARY(256) PRIMARY KEY, owner VARBINARY(256) NOT NULL, \
             fence BIGINT NOT NULL, expires_at BIGINT NOT NULL) ENGINE = InnoDB",
            "CREATE TABLE raw_jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
             queue VARBINARY(256) NOT NULL, state VARCHAR(16) NOT NULL, owner VARBINARY(256), \
             KEY (queue, state, id)) ENGINE = InnoDB",
        ] {
            sqlx::query(statement).execute(&self.pool).await?;
        }
        Ok(())
    }
}

fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

/// The server's clock plus `?` microseconds.
const NOW_PLUS: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + ?";

#[async_trait]
impl RawBaseline for RawMySql {
    fn describe(&self) -> &'static str {
        "INSERT IGNORE / conditional UPDATE / FOR UPDATE SKIP LOCKED claim in a transaction (sqlx)"
    }

    async fn insert(&self, key: &str, owner: &str, ttl: Duration) -> BenchResult<bool> {
        let done = sqlx::query(&format!(
            "INSERT IGNORE INTO raw_leases (id, owner, fence, expires_at) VALUES (?, ?, 1, {NOW_PLUS})"
        ))
        .bind(key)
        .bind(owner)
        .bind(micros(ttl))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn cas(&self, key: &str, owner: &str, fence: u64, ttl: Duration) -> BenchResult<bool> {
        let done = sqlx::query(&format!(
            "UPDATE raw_leases SET expires_at = {NOW_PLUS} WHERE id = ? AND owner = ? AND fence = ?"
        ))
        .bind(micros(ttl))
        .bind(key)
        .bind(owner)
        .bind(i64::try_from(fence)?)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()> {
        for part in (0..count).collect::<Vec<_>>().chunks(1000) {
            let values = vec!["(?, 'queued')"; part.len()].join(", ");
            let sql = format!("INSERT INTO raw_jobs (queue, state) VALUES {values}");
            let mut insert = sqlx::query(&sql);
            for _ in part {
                insert = insert.bind(queue);
            }
            insert.execute(&self.pool).await?;
        }
        Ok(())
    }

    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>> {
        Ok(self.claim_jobs(queue, worker, 1).await?.pop())
    }

    async fn complete_job(&self, _queue: &str, id: &str, worker: &str) -> BenchResult<bool> {
        let done = sqlx::query(
            "UPDATE raw_jobs SET state = 'completed' WHERE id = ? AND owner = ? AND state = 'claimed'",
        )
        .bind(id.parse::<i64>()?)
        .bind(worker)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    fn describe_batch(&self) -> &'static str {
        "SELECT … LIMIT n FOR UPDATE SKIP LOCKED; UPDATE … WHERE id IN (…); COMMIT; \
         UPDATE … WHERE id IN (…) (sqlx)"
    }

    async fn claim_jobs(
        &self,
        queue: &str,
        worker: &str,
        limit: usize,
    ) -> BenchResult<Vec<String>> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM raw_jobs WHERE queue = ? AND state = 'queued' \
             ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
        )
        .bind(queue)
        .bind(u64::try_from(limit)?)
        .fetch_all(&mut *tx)
        .await?;
        if !ids.is_empty() {
            let list = vec!["?"; ids.len()].join(", ");
            let sql =
                format!("UPDATE raw_jobs SET state = 'claimed', owner = ? WHERE id IN ({list})");
            let mut update = sqlx::query(&sql).bind(worker);
            for id in &ids {
                update = update.bind(id);
            }
            update.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(ids.iter().map(ToString::to_string).collect())
    }

    async fn complete_jobs(
        &self,
        _queue: &str,
        ids: &[String],
        worker: &str,
    ) -> BenchResult<Vec<bool>> {
        let mut done = Vec::with_capacity(ids.len());
        for id in ids {
            done.push(self.complete_job("", id, worker).await?);
        }
        Ok(done)
    }
}

#[async_trait]
impl PeerLock for RawMySql {
    fn describe(&self) -> &'static str {
        "GET_LOCK(name, 0) / RELEASE_LOCK (one connection per worker)"
    }

    async fn session(&self) -> BenchResult<Box<dyn PeerSession>> {
        Ok(Box::new(MySqlPeer {
            connection: self.pool.acquire().await?,
            namespace: self.namespace.clone(),
        }))
    }
}

struct MySqlPeer {
    connection: PoolConnection<MySql>,
    namespace: String,
}

impl MySqlPeer {
    /// The lock's name: at most 64 characters, so the scope is hashed.
    fn name(&self, scope: &str) -> String {
        format!(
            "{}:{:016x}",
            &self.namespace[..40.min(self.namespace.len())],
            {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                scope.hash(&mut hasher);
                hasher.finish()
            }
        )
    }
}

#[async_trait]
impl PeerSession for MySqlPeer {
    async fn try_acquire(&mut self, scope: &str, _ttl: Duration) -> BenchResult<bool> {
        let taken: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
            .bind(self.name(scope))
            .fetch_one(&mut *self.connection)
            .await?;
        Ok(taken == Some(1))
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        sqlx::query("DO RELEASE_LOCK(?)")
            .bind(self.name(scope))
            .execute(&mut *self.connection)
            .await?;
        Ok(())
    }
}
