//! The SQLite backend in a temporary file. Its baseline is a bare rusqlite
//! connection on its own file in the same directory, with the store's
//! settings (WAL, `synchronous = FULL`, the same busy timeout), run the way
//! the store runs: one `BEGIN IMMEDIATE` … `COMMIT` per operation on a
//! dedicated thread, so the ratio counts tenure's logic, not the thread hop.
//! Its waiters queue in process, as memory's do: an embedded store has one
//! process to wake.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use tempfile::TempDir;
use tenure_backend_sqlite::{SqliteConfig, SqliteStore, DEFAULT_BUSY_TIMEOUT};
use tokio::sync::oneshot;

use super::memory::InProcessWakeUps;
use super::{Backend, PeerLock, PeerSession, RawBaseline, Teardown};
use crate::options::BackendKind;
use crate::BenchResult;

/// A fresh store file and a bare connection on a sibling file.
pub(super) async fn open() -> BenchResult<Backend> {
    let directory = tempfile::Builder::new().prefix("tenure-bench").tempdir()?;
    let store = Arc::new(
        SqliteStore::connect(SqliteConfig::new(directory.path().join("leases.db"))).await?,
    );
    let raw = Arc::new(RawSqlite::open(directory.path().join("raw.db")).await?);
    Ok(Backend {
        kind: BackendKind::Sqlite,
        store: store.clone(),
        queue: store,
        raw: raw.clone(),
        peer: raw,
        wake_ups: Arc::new(InProcessWakeUps::default()),
        tables: None,
        server_time: None,
        teardown: Box::new(TempFiles(Mutex::new(Some(directory)))),
    })
}

/// The directory holding both files, removed at cleanup.
struct TempFiles(Mutex<Option<TempDir>>);

#[async_trait]
impl Teardown for TempFiles {
    async fn teardown(&self) -> BenchResult<()> {
        let directory = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(directory) = directory {
            directory.close()?;
        }
        Ok(())
    }
}

const RAW_SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS raw_leases (
        id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,
        fence INTEGER NOT NULL, expires_at INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS raw_jobs (
        id INTEGER PRIMARY KEY, queue TEXT NOT NULL, state TEXT NOT NULL, owner TEXT);
    CREATE INDEX IF NOT EXISTS raw_jobs_queued ON raw_jobs (queue, id) WHERE state = 'queued';
    CREATE TABLE IF NOT EXISTS raw_locks (scope TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL);";

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A bare connection on its own thread.
struct RawSqlite {
    jobs: mpsc::Sender<Job>,
}

impl RawSqlite {
    async fn open(path: std::path::PathBuf) -> BenchResult<Self> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready, opened) = oneshot::channel::<rusqlite::Result<()>>();
        std::thread::Builder::new()
            .name("bench-raw-sqlite".to_owned())
            .spawn(move || {
                let connection = Connection::open(path).and_then(|connection| {
                    connection.pragma_update(None, "journal_mode", "WAL")?;
                    connection.pragma_update(None, "synchronous", "FULL")?;
                    connection.busy_timeout(DEFAULT_BUSY_TIMEOUT)?;
                    connection.execute_batch(RAW_SCHEMA)?;
                    Ok(connection)
                });
                match connection {
                    Ok(mut connection) => {
                        if ready.send(Ok(())).is_ok() {
                            while let Ok(job) = inbox.recv() {
                                job(&mut connection);
                            }
                        }
                    }
                    Err(error) => {
                        let _ = ready.send(Err(error));
                    }
                }
            })?;
        opened.await??;
        Ok(RawSqlite { jobs })
    }

    /// Runs `write` in one `BEGIN IMMEDIATE` transaction on the thread.
    async fn write<T, F>(&self, write: F) -> BenchResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |connection: &mut Connection| {
            let outcome = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .and_then(|transaction| {
                    let value = write(&transaction)?;
                    transaction.commit()?;
                    Ok(value)
                });
            let _ = answer.send(outcome);
        });
        self.jobs
            .send(job)
            .map_err(|_| "the raw SQLite thread has stopped")?;
        Ok(answered.await??)
    }
}

fn micros_from_now(ttl: Duration) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from((now + ttl).as_micros()).unwrap_or(i64::MAX)
}

#[async_trait]
impl RawBaseline for RawSqlite {
    fn describe(&self) -> &'static str {
        "rusqlite BEGIN IMMEDIATE; INSERT OR IGNORE / conditional UPDATE; COMMIT (WAL, synchronous=FULL)"
    }

    async fn insert(&self, key: &str, owner: &str, ttl: Duration) -> BenchResult<bool> {
        let (key, owner, expires_at) = (key.to_owned(), owner.to_owned(), micros_from_now(ttl));
        self.write(move |transaction| {
            let inserted = transaction.execute(
                "INSERT OR IGNORE INTO raw_leases (id, owner, fence, expires_at) VALUES (?1, ?2, 1, ?3)",
                params![key, owner, expires_at],
            )?;
            Ok(inserted == 1)
        })
        .await
    }

    async fn cas(&self, key: &str, owner: &str, fence: u64, ttl: Duration) -> BenchResult<bool> {
        let (key, owner, expires_at) = (key.to_owned(), owner.to_owned(), micros_from_now(ttl));
        let fence = i64::try_from(fence)?;
        self.write(move |transaction| {
            let updated = transaction.execute(
                "UPDATE raw_leases SET expires_at = ?4 WHERE id = ?1 AND owner = ?2 AND fence = ?3",
                params![key, owner, fence, expires_at],
            )?;
            Ok(updated == 1)
        })
        .await
    }

    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()> {
        let queue = queue.to_owned();
        self.write(move |transaction| {
            let mut insert =
                transaction.prepare("INSERT INTO raw_jobs (queue, state) VALUES (?1, 'queued')")?;
            for _ in 0..count {
                insert.execute(params![queue])?;
            }
            Ok(())
        })
        .await
    }

    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>> {
        let (queue, worker) = (queue.to_owned(), worker.to_owned());
        let claimed: Option<i64> = self
            .write(move |transaction| {
                transaction
                    .query_row(
                        "UPDATE raw_jobs SET state = 'claimed', owner = ?2 WHERE id = \
                         (SELECT id FROM raw_jobs WHERE queue = ?1 AND state = 'queued' ORDER BY id LIMIT 1) \
                         RETURNING id",
                        params![queue, worker],
                        |row| row.get(0),
                    )
                    .optional()
            })
            .await?;
        Ok(claimed.map(|id| id.to_string()))
    }

    async fn complete_job(&self, _queue: &str, id: &str, worker: &str) -> BenchResult<bool> {
        let (id, worker) = (id.parse::<i64>()?, worker.to_owned());
        self.write(move |transaction| {
            let updated = transaction.execute(
                "UPDATE raw_jobs SET state = 'completed' WHERE id = ?1 AND owner = ?2 AND state = 'claimed'",
                params![id, worker],
            )?;
            Ok(updated == 1)
        })
        .await
    }

    fn describe_batch(&self) -> &'static str {
        "rusqlite UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING id; n conditional UPDATEs \
         in one transaction"
    }

    async fn claim_jobs(
        &self,
        queue: &str,
        worker: &str,
        limit: usize,
    ) -> BenchResult<Vec<String>> {
        let (queue, worker, limit) = (queue.to_owned(), worker.to_owned(), i64::try_from(limit)?);
        let claimed: Vec<i64> = self
            .write(move |transaction| {
                let mut claim = transaction.prepare(
                    "UPDATE raw_jobs SET state = 'claimed', owner = ?2 WHERE id IN \
                     (SELECT id FROM raw_jobs WHERE queue = ?1 AND state = 'queued' \
                      ORDER BY id LIMIT ?3) RETURNING id",
                )?;
                let ids = claim
                    .query_map(params![queue, worker, limit], |row| row.get(0))?
                    .collect::<rusqlite::Result<Vec<i64>>>()?;
                Ok(ids)
            })
            .await?;
        Ok(claimed.into_iter().map(|id| id.to_string()).collect())
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
        let worker = worker.to_owned();
        self.write(move |transaction| {
            let mut complete = transaction.prepare(
                "UPDATE raw_jobs SET state = 'completed' WHERE id = ?1 AND owner = ?2 AND state = 'claimed'",
            )?;
            numbers
                .iter()
                .map(|id| Ok(complete.execute(params![id, worker])? == 1))
                .collect()
        })
        .await
    }
}

#[async_trait]
impl PeerLock for RawSqlite {
    fn describe(&self) -> &'static str {
        "rusqlite INSERT OR IGNORE / DELETE of a lock row"
    }

    async fn session(&self) -> BenchResult<Box<dyn PeerSession>> {
        Ok(Box::new(SqlitePeer {
            jobs: self.jobs.clone(),
            owner: super::unique_name("peer"),
        }))
    }
}

struct SqlitePeer {
    jobs: mpsc::Sender<Job>,
    owner: String,
}

impl SqlitePeer {
    fn raw(&self) -> RawSqlite {
        RawSqlite {
            jobs: self.jobs.clone(),
        }
    }
}

#[async_trait]
impl PeerSession for SqlitePeer {
    async fn try_acquire(&mut self, scope: &str, _ttl: Duration) -> BenchResult<bool> {
        let (scope, owner) = (scope.to_owned(), self.owner.clone());
        self.raw()
            .write(move |transaction| {
                let inserted = transaction.execute(
                    "INSERT OR IGNORE INTO raw_locks (scope, owner) VALUES (?1, ?2)",
                    params![scope, owner],
                )?;
                Ok(inserted == 1)
            })
            .await
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        let (scope, owner) = (scope.to_owned(), self.owner.clone());
        self.raw()
            .write(move |transaction| {
                transaction.execute(
                    "DELETE FROM raw_locks WHERE scope = ?1 AND owner = ?2",
                    params![scope, owner],
                )?;
                Ok(())
            })
            .await
    }
}
