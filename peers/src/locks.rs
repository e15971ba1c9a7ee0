//! The lock rows: tenure's lease as a lock (`admit` with one scope,
//! released by a fenced `transition`) beside the lock people pick instead
//! on the same server: sqlx's `PgAdvisoryLock` on PostgreSQL, `rslock`
//! (Redlock, here on one Redis server) on Redis.
//!
//! Every side runs the same loop, so the figures compare the stores'
//! round trips and not retry policies: try once, and on a conflict sleep
//! 1 ms and try again (the benches' `fixed-poll`). `PgAdvisoryLock` is also
//! run with its blocking `acquire` (the server queues the waiters), the
//! way most users call it, and tenure beside it with its own waiting
//! admission (`tenure::wait::Waiter`, one shared by the workers: a FIFO
//! line woken by the store's release notices).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgAdvisoryLock, PgAdvisoryLockGuard, PgConnection};
use sqlx::{Connection, Either};
use tenure::wait::Waiter;
use tenure::{Admission, AdmitRequest, Claim, StatusChange, Store, Transition};

use crate::stats::{jain, Latencies};
use crate::Result;

/// The ttl every lock is taken with: far longer than a hold, so no lock
/// ever expires while held in these runs.
const TTL: Duration = Duration::from_secs(10);
/// How long a winner holds the hot key.
pub const HOLD: Duration = Duration::from_millis(5);
/// How long a loser sleeps before trying again.
const RETRY: Duration = Duration::from_millis(1);

/// Which lock a worker takes.
#[derive(Clone)]
pub enum Kind {
    /// A tenure store (PostgreSQL or Redis).
    Tenure(Arc<dyn Store>),
    /// A tenure store through one waiter shared by every worker.
    TenureWaiting(Arc<Waiter<Arc<dyn Store>>>),
    /// `PgAdvisoryLock::try_acquire`, one connection per worker.
    Advisory(String),
    /// `PgAdvisoryLock::acquire` (blocks until granted), one connection per worker.
    AdvisoryBlocking(String),
    /// `rslock::LockManager::lock` with one attempt per call.
    Redlock(rslock::LockManager),
}

/// One worker's handle on one lock.
enum Locker {
    Tenure {
        store: Arc<dyn Store>,
        waiter: Option<Arc<Waiter<Arc<dyn Store>>>>,
        owner: String,
        scope: String,
        held: Option<Claim>,
    },
    Advisory {
        lock: PgAdvisoryLock,
        blocking: bool,
        conn: Option<PgConnection>,
        held: Option<PgAdvisoryLockGuard<PgConnection>>,
    },
    Redlock {
        manager: rslock::LockManager,
        resource: String,
        held: Option<rslock::Lock>,
    },
}

impl Locker {
    async fn open(kind: &Kind, owner: String, key: &str) -> Result<Self> {
        Ok(match kind {
            Kind::Tenure(store) => Locker::Tenure {
                store: Arc::clone(store),
                waiter: None,
                owner,
                scope: key.to_owned(),
                held: None,
            },
            Kind::TenureWaiting(waiter) => Locker::Tenure {
                store: Arc::clone(waiter.store()),
                waiter: Some(Arc::clone(waiter)),
                owner,
                scope: key.to_owned(),
                held: None,
            },
            Kind::Advisory(url) | Kind::AdvisoryBlocking(url) => Locker::Advisory {
                lock: PgAdvisoryLock::new(key),
                blocking: matches!(kind, Kind::AdvisoryBlocking(_)),
                conn: Some(PgConnection::connect(url).await?),
                held: None,
            },
            Kind::Redlock(manager) => {
                let mut manager = manager.clone();
                // One attempt per call: this loop does the retrying.
                manager.set_retry(1, Duration::from_millis(1));
                Locker::Redlock {
                    manager,
                    resource: key.to_owned(),
                    held: None,
                }
            }
        })
    }

    /// Tries once (or, for the blocking advisory lock and tenure's waiter,
    /// waits, the waiter until `deadline`); answers whether the lock is now
    /// held.
    async fn try_acquire(&mut self, deadline: Instant) -> Result<bool> {
        match self {
            Locker::Tenure {
                store,
                waiter,
                owner,
                scope,
                held,
            } => {
                let request = AdmitRequest::new(tenure::generate_id(), owner.as_str())
                    .scope(scope.as_str())
                    .ttl(TTL);
                let answer = match waiter {
                    Some(waiter) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        waiter.admit(&request, left).await?
                    }
                    None => store.admit(&request).await?,
                };
                match answer {
                    Admission::Admitted { record, .. } => {
                        *held = Some(record.claim().ok_or("admitted record has no owner")?);
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            Locker::Advisory {
                lock,
                blocking,
                conn,
                held,
            } => {
                let connection = conn.take().ok_or("advisory lock already held")?;
                if *blocking {
                    *held = Some(lock.acquire(connection).await?);
                    return Ok(true);
                }
                match lock.try_acquire(connection).await? {
                    Either::Left(guard) => {
                        *held = Some(guard);
                        Ok(true)
                    }
                    Either::Right(connection) => {
                        *conn = Some(connection);
                        Ok(false)
                    }
                }
            }
            Locker::Redlock {
                manager,
                resource,
                held,
            } => match manager.lock(resource.as_bytes(), TTL).await {
                Ok(lock) => {
                    *held = Some(lock);
                    Ok(true)
                }
                Err(rslock::LockError::Unavailable) => Ok(false),
                Err(error) => Err(error.into()),
            },
        }
    }

    async fn release(&mut self) -> Result<()> {
        match self {
            Locker::Tenure { store, held, .. } => {
                let claim = held.take().ok_or("release without a held lease")?;
                match store.transition(&claim, &StatusChange::succeeded()).await? {
                    Transition::Applied(_) => Ok(()),
                    other => Err(format!("release of a held lease answered {other:?}").into()),
                }
            }
            Locker::Advisory { conn, held, .. } => {
                let guard = held.take().ok_or("release without a held advisory lock")?;
                *conn = Some(guard.release_now().await?);
                Ok(())
            }
            Locker::Redlock { held, .. } => {
                // rslock's release answers nothing: it is best effort.
                held.take()
                    .ok_or("release without a held Redlock")?
                    .release()
                    .await;
                Ok(())
            }
        }
    }
}

/// One slice of the hot-key race.
pub struct Race {
    pub acquisitions_per_sec: f64,
    pub jain: f64,
    /// Two holders at once (must be 0).
    pub overlaps: u64,
}

/// `workers` workers race for one key for `cell`: acquire, hold
/// [`HOLD`], release; a loser sleeps [`RETRY`] and tries again.
pub async fn race(kind: &Kind, key: &str, workers: usize, cell: Duration) -> Result<Race> {
    let mut lockers = Vec::with_capacity(workers);
    for worker in 0..workers {
        lockers.push(Locker::open(kind, format!("hot-worker-{worker}"), key).await?);
    }
    let held = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + cell;
    let tasks: Vec<_> = lockers
        .into_iter()
        .map(|mut locker| {
            let (held, overlaps) = (Arc::clone(&held), Arc::clone(&overlaps));
            tokio::spawn(async move {
                let mut wins = 0u64;
                while Instant::now() < deadline {
                    if !locker.try_acquire(deadline).await? {
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                    if held.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    let won_in_time = Instant::now() < deadline;
                    tokio::time::sleep(HOLD).await;
                    held.store(false, Ordering::SeqCst);
                    locker.release().await?;
                    wins += u64::from(won_in_time);
                }
                Ok::<_, crate::Error>(wins)
            })
        })
        .collect();
    let mut wins = Vec::with_capacity(workers);
    for task in tasks {
        wins.push(task.await??);
    }
    Ok(Race {
        acquisitions_per_sec: wins.iter().sum::<u64>() as f64 / cell.as_secs_f64(),
        jain: jain(&wins),
        overlaps: overlaps.load(Ordering::SeqCst),
    })
}

/// Acquire and release latencies of one uncontended lock.
#[derive(Default)]
pub struct Latency {
    pub acquire: Latencies,
    pub release: Latencies,
}

/// One worker takes and releases `key` `times` times, nobody else.
pub async fn latency(kind: &Kind, key: &str, times: usize) -> Result<Latency> {
    let mut locker = Locker::open(kind, "latency-worker".to_owned(), key).await?;
    let mut figures = Latency::default();
    for _ in 0..times {
        let sent = Instant::now();
        if !locker.try_acquire(sent).await? {
            return Err(format!("an uncontended lock on {key:?} was refused").into());
        }
        figures.acquire.record(sent.elapsed());
        let sent = Instant::now();
        locker.release().await?;
        figures.release.record(sent.elapsed());
    }
    Ok(figures)
}

/// Checks, before anything is timed, that `kind` really excludes: a
/// second worker is refused while the first holds `key`, the server shows
/// the peer's lock while it is held (a row of `pg_locks`, the Redis key),
/// and the second worker wins once the first released.
pub async fn check(kind: &Kind, key: &str) -> Result<()> {
    let mut first = Locker::open(kind, "check-first".to_owned(), key).await?;
    let mut second = Locker::open(kind, "check-second".to_owned(), key).await?;
    // A waiter asks once and answers at once.
    let now = Instant::now();
    if !first.try_acquire(now).await? {
        return Err(format!("{key}: the first try on a free lock was refused").into());
    }
    // The blocking advisory lock would wait here: its exclusion is that of
    // the same advisory lock, checked with `try_acquire`.
    let excluded = matches!(kind, Kind::AdvisoryBlocking(_)) || !second.try_acquire(now).await?;
    let visible = match kind {
        Kind::Tenure(store) => !store.list_by_scope(key).await?.is_empty(),
        Kind::TenureWaiting(waiter) => !waiter.store().list_by_scope(key).await?.is_empty(),
        Kind::Advisory(url) | Kind::AdvisoryBlocking(url) => {
            let mut conn = PgConnection::connect(url).await?;
            let held: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted",
            )
            .fetch_one(&mut conn)
            .await?;
            held > 0
        }
        Kind::Redlock(manager) => manager
            .query_redis_for_key_value(key.as_bytes())
            .await?
            .is_some(),
    };
    first.release().await?;
    if !excluded || !visible {
        return Err(format!("{key}: excluded {excluded}, visible on the server {visible}").into());
    }
    if !second.try_acquire(Instant::now()).await? {
        return Err(format!("{key}: refused after the holder released").into());
    }
    second.release().await
}
