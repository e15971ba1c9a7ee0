//! The PostgreSQL backend in a fresh schema, dropped at cleanup. The
//! baseline's tables live in the same schema and run on the store's own
//! pool: the bare conditional `UPDATE`, `INSERT … ON CONFLICT DO NOTHING`,
//! and a bare `FOR UPDATE SKIP LOCKED` claim. The peer lock is
//! `pg_try_advisory_lock` on a connection per worker.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backend_postgres::{PgStore, PgStoreConfig};
use lease_core::{JobQueue, LeaseStore};
use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

use super::{Backend, PeerLock, PeerSession, RawBaseline};
use crate::options::BackendKind;
use crate::BenchResult;

/// Enough connections for the largest worker count of `scaling` (32) plus
/// the keeper's and the scenario's own calls.
const POOL_SIZE: u32 = 40;

/// A store in a fresh schema and the bare statements beside it.
pub(super) struct PgBackend {
    store: Arc<PgStore>,
    raw: Arc<RawPg>,
}

impl PgBackend {
    pub(super) async fn open(url: &str) -> BenchResult<Self> {
        let schema = super::unique_name("tenure_bench");
        let config = PgStoreConfig::new(url)
            .schema(schema.as_str())
            .max_connections(POOL_SIZE);
        let store = PgStore::connect(&config).await?;
        let raw = RawPg {
            pool: store.pool().clone(),
            schema: format!("\"{schema}\""),
        };
        raw.create_tables().await?;
        Ok(PgBackend {
            store: Arc::new(store),
            raw: Arc::new(raw),
        })
    }
}

#[async_trait]
impl Backend for PgBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
    }

    fn store(&self) -> Arc<dyn LeaseStore> {
        self.store.clone()
    }

    fn queue(&self) -> Arc<dyn JobQueue> {
        self.store.clone()
    }

    fn raw(&self) -> Arc<dyn RawBaseline> {
        self.raw.clone()
    }

    fn peer(&self) -> Arc<dyn PeerLock> {
        self.raw.clone()
    }

    async fn cleanup(&self) -> BenchResult<()> {
        let dropped = sqlx::query(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.raw.schema
        ))
        .execute(&self.raw.pool)
        .await;
        self.store.close().await;
        dropped?;
        Ok(())
    }
}

struct RawPg {
    pool: PgPool,
    /// The quoted schema name.
    schema: String,
}

impl RawPg {
    async fn create_tables(&self) -> BenchResult<()> {
        let s = &self.schema;
        for statement in [
            format!(
                "CREATE TABLE {s}.raw_leases (id text PRIMARY KEY, owner text NOT NULL, \
                 fence bigint NOT NULL, expires_at timestamptz NOT NULL)"
            ),
            format!(
                "CREATE TABLE {s}.raw_jobs (id bigserial PRIMARY KEY, queue text NOT NULL, \
                 state text NOT NULL, owner text)"
            ),
            format!("CREATE INDEX ON {s}.raw_jobs (queue, id) WHERE state = 'queued'"),
        ] {
            sqlx::query(&statement).execute(&self.pool).await?;
        }
        Ok(())
    }
}

fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

#[async_trait]
impl RawBaseline for RawPg {
    fn describe(&self) -> &'static str {
        "INSERT … ON CONFLICT DO NOTHING / conditional UPDATE / FOR UPDATE SKIP LOCKED claim (sqlx)"
    }

    async fn insert(&self, key: &str, owner: &str, ttl: Duration) -> BenchResult<bool> {
        let done = sqlx::query(&format!(
            "INSERT INTO {}.raw_leases (id, owner, fence, expires_at) \
             VALUES ($1, $2, 1, now() + $3 * interval '1 microsecond') ON CONFLICT (id) DO NOTHING",
            self.schema
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
            "UPDATE {}.raw_leases SET expires_at = now() + $4 * interval '1 microsecond' \
             WHERE id = $1 AND owner = $2 AND fence = $3",
            self.schema
        ))
        .bind(key)
        .bind(owner)
        .bind(i64::try_from(fence)?)
        .bind(micros(ttl))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()> {
        sqlx::query(&format!(
            "INSERT INTO {}.raw_jobs (queue, state) SELECT $1, 'queued' FROM generate_series(1, $2)",
            self.schema
        ))
        .bind(queue)
        .bind(i64::try_from(count)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>> {
        let s = &self.schema;
        let claimed: Option<(i64,)> = sqlx::query_as(&format!(
            "UPDATE {s}.raw_jobs SET state = 'claimed', owner = $2 WHERE id = \
             (SELECT id FROM {s}.raw_jobs WHERE queue = $1 AND state = 'queued' \
              ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
        ))
        .bind(queue)
        .bind(worker)
        .fetch_optional(&self.pool)
        .await?;
        Ok(claimed.map(|(id,)| id.to_string()))
    }

    async fn complete_job(&self, _queue: &str, id: &str, worker: &str) -> BenchResult<bool> {
        let done = sqlx::query(&format!(
            "UPDATE {}.raw_jobs SET state = 'completed' WHERE id = $1 AND owner = $2 AND state = 'claimed'",
            self.schema
        ))
        .bind(id.parse::<i64>()?)
        .bind(worker)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl PeerLock for RawPg {
    fn describe(&self) -> &'static str {
        "pg_try_advisory_lock / pg_advisory_unlock (one connection per worker)"
    }

    async fn session(&self) -> BenchResult<Box<dyn PeerSession>> {
        Ok(Box::new(PgPeer {
            connection: self.pool.acquire().await?,
            namespace: self.schema.clone(),
        }))
    }
}

struct PgPeer {
    connection: PoolConnection<Postgres>,
    /// Keeps the lock keys of concurrent runs apart.
    namespace: String,
}

#[async_trait]
impl PeerSession for PgPeer {
    async fn try_acquire(&mut self, scope: &str, _ttl: Duration) -> BenchResult<bool> {
        let (taken,): (bool,) =
            sqlx::query_as("SELECT pg_try_advisory_lock(hashtextextended($1 || ':' || $2, 0))")
                .bind(&self.namespace)
                .bind(scope)
                .fetch_one(&mut *self.connection)
                .await?;
        Ok(taken)
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1 || ':' || $2, 0))")
            .bind(&self.namespace)
            .bind(scope)
            .execute(&mut *self.connection)
            .await?;
        Ok(())
    }
}
