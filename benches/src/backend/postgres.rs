//! The PostgreSQL backend in a fresh schema, dropped at cleanup. The
//! baseline's tables live in the same schema and run on the store's own
//! pool: the bare conditional `UPDATE`, `INSERT … ON CONFLICT DO NOTHING`,
//! and a bare `FOR UPDATE SKIP LOCKED` claim. The peer lock is
//! `pg_try_advisory_lock` on a connection per worker. Waiters queue as rows
//! of a table in the same schema and are woken by `pg_notify` on a channel
//! each worker `LISTEN`s to on a connection of its own.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgListener;
use sqlx::{PgPool, Postgres};
use tenure_backend_postgres::{PgStore, PgStoreConfig};

use super::{
    Backend, PeerLock, PeerSession, Probe, RawBaseline, TableStat, TableStats, Teardown,
    WakeSession, WakeUps,
};
use crate::options::BackendKind;
use crate::BenchResult;

/// Connections for the largest worker count of `scaling` (32) plus the
/// keeper's and the scenario's own calls.
const BASE_POOL_SIZE: u32 = 40;
/// Connections beyond the `hot-key` workers' own two (a peer-lock session
/// and a listening connection, which also carries its wait-queue
/// statements) for the store's calls.
const HOT_KEY_SPARE: u32 = 8;

/// A store in a fresh schema and the bare statements beside it, with a
/// pool big enough for `hot_racers` `hot-key` workers at once.
pub(super) async fn open(url: &str, hot_racers: usize) -> BenchResult<Backend> {
    let schema = super::unique_name("tenure_bench");
    let hot_key_pool = u32::try_from(hot_racers)? * 2 + HOT_KEY_SPARE;
    let config = PgStoreConfig::new(url)
        .schema(schema.as_str())
        .max_connections(BASE_POOL_SIZE.max(hot_key_pool));
    let store = Arc::new(PgStore::connect(config).await?);
    let raw = RawPg {
        pool: store.pool().clone(),
        schema: format!("\"{schema}\""),
        schema_name: schema.clone(),
    };
    raw.create_tables().await?;
    let raw = Arc::new(raw);
    Ok(Backend {
        kind: BackendKind::Postgres,
        store: store.clone(),
        queue: store.clone(),
        raw: raw.clone(),
        peer: raw.clone(),
        wake_ups: raw.clone(),
        tables: Some(raw),
        server_time: None,
        teardown: Box::new(DropSchema(store)),
    })
}

/// Drops the run's schema (the raw tables live in it too).
struct DropSchema(Arc<PgStore>);

#[async_trait]
impl Teardown for DropSchema {
    async fn teardown(&self) -> BenchResult<()> {
        self.0.drop_schema().await?;
        Ok(())
    }
}

struct RawPg {
    pool: PgPool,
    /// The quoted schema name.
    schema: String,
    /// The schema name as stored in the catalogue.
    schema_name: String,
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
            format!(
                "CREATE TABLE {s}.wait_queue (id bigserial PRIMARY KEY, scope text NOT NULL, \
                 channel text NOT NULL)"
            ),
            format!("CREATE INDEX ON {s}.wait_queue (scope, id)"),
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

    fn describe_batch(&self) -> &'static str {
        "UPDATE … WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED) RETURNING id; \
         UPDATE … WHERE id = ANY($1) (sqlx)"
    }

    async fn claim_jobs(
        &self,
        queue: &str,
        worker: &str,
        limit: usize,
    ) -> BenchResult<Vec<String>> {
        let s = &self.schema;
        let claimed: Vec<(i64,)> = sqlx::query_as(&format!(
            "UPDATE {s}.raw_jobs SET state = 'claimed', owner = $2 WHERE id IN \
             (SELECT id FROM {s}.raw_jobs WHERE queue = $1 AND state = 'queued' \
              ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING id"
        ))
        .bind(queue)
        .bind(worker)
        .bind(i64::try_from(limit)?)
        .fetch_all(&self.pool)
        .await?;
        Ok(claimed.into_iter().map(|(id,)| id.to_string()).collect())
    }

    async fn complete_jobs(
        &self,
        _queue: &str,
        ids: &[String],
        worker: &str,
    ) -> BenchResult<Vec<bool>> {
        let numbers = ids
            .iter()
            .map(|id| id.parse::<i64>())
            .collect::<Result<Vec<_>, _>>()?;
        let done: Vec<(i64,)> = sqlx::query_as(&format!(
            "UPDATE {}.raw_jobs SET state = 'completed' \
             WHERE id = ANY($1) AND owner = $2 AND state = 'claimed' RETURNING id",
            self.schema
        ))
        .bind(&numbers)
        .bind(worker)
        .fetch_all(&self.pool)
        .await?;
        let done: std::collections::HashSet<i64> = done.into_iter().map(|(id,)| id).collect();
        Ok(numbers.iter().map(|id| done.contains(id)).collect())
    }
}

impl RawPg {
    /// `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of a read with one text
    /// parameter: shared buffers touched (hit + read) and execution µs.
    async fn explain(&self, read: &str, parameter: &str) -> BenchResult<(i64, f64)> {
        let (plan,): (serde_json::Value,) =
            sqlx::query_as(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {read}"))
                .bind(parameter)
                .fetch_one(&self.pool)
                .await?;
        let top = &plan[0];
        let buffers = ["Shared Hit Blocks", "Shared Read Blocks"]
            .iter()
            .filter_map(|field| top["Plan"][field].as_i64())
            .sum();
        let millis = top["Execution Time"].as_f64().unwrap_or(f64::NAN);
        Ok((buffers, millis * 1000.0))
    }

    /// The schema's tables, each quoted and qualified.
    async fn tables(&self) -> BenchResult<Vec<String>> {
        let tables: Vec<(String,)> =
            sqlx::query_as("SELECT tablename::text FROM pg_tables WHERE schemaname = $1")
                .bind(&self.schema_name)
                .fetch_all(&self.pool)
                .await?;
        Ok(tables
            .into_iter()
            .map(|(table,)| format!("{}.\"{}\"", self.schema, table.replace('"', "\"\"")))
            .collect())
    }
}

#[async_trait]
impl TableStats for RawPg {
    async fn set_autovacuum(&self, enabled: bool) -> BenchResult<()> {
        for table in self.tables().await? {
            sqlx::query(&format!(
                "ALTER TABLE {table} SET (autovacuum_enabled = {enabled})"
            ))
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    async fn vacuum(&self) -> BenchResult<()> {
        for table in self.tables().await? {
            sqlx::query(&format!("VACUUM (ANALYZE) {table}"))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    async fn probe(&self, queue: &str, scope: &str) -> BenchResult<Probe> {
        let s = &self.schema;
        let claim = self
            .explain(
                &format!(
                    "SELECT id FROM {s}.jobs WHERE queue = $1 AND state = 'queued' \
                     AND run_at <= now() ORDER BY priority DESC, run_at, created_at, id LIMIT 1"
                ),
                queue,
            )
            .await?;
        let holder = self
            .explain(
                &format!("SELECT lease_id FROM {s}.held_scopes WHERE scope = ANY(ARRAY[$1])"),
                scope,
            )
            .await?;
        Ok(Probe {
            claim_buffers: claim.0,
            claim_us: claim.1,
            holder_buffers: holder.0,
            holder_us: holder.1,
        })
    }

    async fn server_setting(&self, name: &str) -> BenchResult<String> {
        let (value,): (String,) = sqlx::query_as("SELECT current_setting($1)")
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        Ok(value)
    }

    async fn table_stats(&self) -> BenchResult<Vec<TableStat>> {
        type Row = (String, i64, i64, i64, i64, i64, i64, i64, i64, i64);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT relname::text, coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), \
             coalesce(idx_scan, 0), n_tup_upd, n_tup_hot_upd, n_live_tup, n_dead_tup, \
             autovacuum_count, autoanalyze_count \
             FROM pg_stat_user_tables WHERE schemaname = $1 ORDER BY relname",
        )
        .bind(&self.schema_name)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    table,
                    seq_scan,
                    seq_tup_read,
                    idx_scan,
                    n_tup_upd,
                    n_tup_hot_upd,
                    n_live_tup,
                    n_dead_tup,
                    autovacuum_count,
                    autoanalyze_count,
                )| TableStat {
                    table,
                    seq_scan,
                    seq_tup_read,
                    idx_scan,
                    n_tup_upd,
                    n_tup_hot_upd,
                    n_live_tup,
                    n_dead_tup,
                    autovacuum_count,
                    autoanalyze_count,
                },
            )
            .collect())
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

#[async_trait]
impl WakeUps for RawPg {
    fn describe(&self) -> &'static str {
        "wait-queue table; pg_notify to the head's channel, LISTENed to on a connection per worker"
    }

    async fn session(&self) -> BenchResult<Box<dyn WakeSession>> {
        let channel = super::unique_name("wake");
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(&channel).await?;
        Ok(Box::new(PgWaiter {
            schema: self.schema.clone(),
            listener,
            channel,
            ticket: None,
        }))
    }
}

/// A worker's wait-queue session. Its queue statements run on its
/// listening connection, so a worker never needs a second one from the pool.
struct PgWaiter {
    schema: String,
    listener: PgListener,
    /// The channel only this session listens to.
    channel: String,
    /// The id of this session's row in the wait queue, sent back as the
    /// payload of its wake-up.
    ticket: Option<i64>,
}

impl PgWaiter {
    /// True when the wake-up for `ticket` arrives within `timeout`; a late
    /// wake-up of an earlier ticket is skipped.
    async fn woken(&mut self, ticket: i64, timeout: Duration) -> BenchResult<bool> {
        let ticket = ticket.to_string();
        let listener = &mut self.listener;
        let arrived = tokio::time::timeout(timeout, async {
            loop {
                if listener.recv().await?.payload() == ticket {
                    return Ok::<_, sqlx::Error>(());
                }
            }
        })
        .await;
        match arrived {
            Ok(received) => received.map(|()| true).map_err(Into::into),
            Err(_) => Ok(false),
        }
    }
}

#[async_trait]
impl WakeSession for PgWaiter {
    async fn enqueue(&mut self, scope: &str) -> BenchResult<()> {
        let (ticket,): (i64,) = sqlx::query_as(&format!(
            "INSERT INTO {}.wait_queue (scope, channel) VALUES ($1, $2) RETURNING id",
            self.schema
        ))
        .bind(scope)
        .bind(&self.channel)
        .fetch_one(&mut self.listener)
        .await?;
        self.ticket = Some(ticket);
        Ok(())
    }

    async fn wait(&mut self, timeout: Duration) -> BenchResult<bool> {
        let ticket = self.ticket.take().ok_or("wait without enqueue")?;
        if self.woken(ticket, timeout).await? {
            return Ok(true);
        }
        let left = sqlx::query(&format!(
            "DELETE FROM {}.wait_queue WHERE id = $1",
            self.schema
        ))
        .bind(ticket)
        .execute(&mut self.listener)
        .await?;
        if left.rows_affected() == 1 {
            return Ok(false);
        }
        // A release popped the row as the wait ended: its notification is
        // committed and on its way.
        self.woken(ticket, timeout).await
    }

    async fn wake_next(&mut self, scope: &str) -> BenchResult<bool> {
        let s = &self.schema;
        let woke = sqlx::query(&format!(
            "WITH head AS (DELETE FROM {s}.wait_queue WHERE id = \
             (SELECT id FROM {s}.wait_queue WHERE scope = $1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING id, channel) \
             SELECT pg_notify(channel, id::text) FROM head"
        ))
        .bind(scope)
        .execute(&mut self.listener)
        .await?;
        Ok(woke.rows_affected() == 1)
    }
}
