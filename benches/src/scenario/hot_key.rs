//! hot-key: N workers race for M scopes: acquire, hold h, release, again.
//!
//! The ceiling is M / h acquisitions per second (every scope always held).
//! What falls short of it is the hand-off: the release's round trip, the
//! losers' retry delay, and the winner's acquire. Two retry strategies are
//! compared (a fixed short poll and a jittered exponential backoff), and
//! tenure's admission is compared with the lock people use instead on the
//! same store (advisory locks, `SET NX PX`, …).
//!
//! Every winner bumps an in-process holder count of its scope before its
//! hold and drops it before releasing, so a second simultaneous holder would
//! show up as an overlap (must be 0 for both locks). A call answered `Err`
//! is counted (and treated as a failed attempt) rather than ending the cell,
//! so a backend that leaks races as errors shows it as a figure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lease_core::{Admission, AdmitRequest, Claim, LeaseStore, StatusChange, Transition};
use serde::Serialize;

use crate::backend::{Backend, PeerSession};
use crate::options::Sizes;
use crate::progress::Progress;
use crate::stats::{jain_index, Latencies, LatencySummary};
use crate::BenchResult;

/// Lease of a winner: far longer than its hold, so nothing expires mid-hold.
const LEASE_TTL: Duration = Duration::from_secs(10);
/// The fixed poll's delay after a failed attempt.
const POLL: Duration = Duration::from_millis(1);
/// The backoff's first delay; it doubles up to `hold × BACKOFF_CAP_HOLDS`.
const BACKOFF_BASE: Duration = Duration::from_millis(1);
const BACKOFF_CAP_HOLDS: u32 = 8;

/// How a loser waits before trying again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryStrategy {
    /// Sleep [`POLL`] after each failure.
    FixedPoll,
    /// Sleep a uniform random time up to a delay that doubles per failure.
    JitteredBackoff,
}

impl RetryStrategy {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            RetryStrategy::FixedPoll => "fixed-poll",
            RetryStrategy::JitteredBackoff => "jittered-backoff",
        }
    }
}

/// Which lock a cell measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockKind {
    /// tenure's `admit` with a scope, released by a fenced `transition`.
    Tenure,
    /// The backend's plain lock.
    Peer,
}

/// Figures of one (lock, strategy, M) cell.
#[derive(Debug, Clone, Serialize)]
pub struct HotKeyCell {
    /// Which lock.
    pub lock: LockKind,
    /// How losers retried.
    pub strategy: RetryStrategy,
    /// Scopes raced for.
    pub scopes: usize,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Acquisitions per second.
    pub acquisitions_per_sec: f64,
    /// M / h: every scope held all the time.
    pub ceiling_per_sec: f64,
    /// acquisitions/s ÷ ceiling.
    pub ceiling_ratio: f64,
    /// Failed attempts per acquisition.
    pub failed_per_success: f64,
    /// From a holder starting its release to the next acquisition of the scope.
    pub handoff_gap: LatencySummary,
    /// Jain's index over the workers' wins (1 = perfectly even).
    pub jain_fairness: f64,
    /// Longest time any worker went without a win, in ms.
    pub longest_starvation_ms: f64,
    /// Moments two workers held one scope (must be 0).
    pub overlaps: u64,
    /// Acquire or release calls answered `Err` (counted as failed attempts;
    /// must be 0: a lost race is an outcome, never an error).
    pub errors: u64,
}

/// The hot-key report.
#[derive(Debug, Clone, Serialize)]
pub struct HotKeyReport {
    /// Workers racing.
    pub workers: usize,
    /// How long a winner holds, in ms.
    pub hold_ms: f64,
    /// What the peer lock is.
    pub peer_lock: &'static str,
    /// Every cell.
    pub cells: Vec<HotKeyCell>,
}

/// One worker's way to take and give back a scope.
#[async_trait]
trait Contender: Send {
    async fn try_acquire(&mut self, scope: &str) -> BenchResult<bool>;
    async fn release(&mut self, scope: &str) -> BenchResult<()>;
}

struct TenureContender {
    store: Arc<dyn LeaseStore>,
    worker: String,
    attempts: u64,
    held: Option<Claim>,
}

#[async_trait]
impl Contender for TenureContender {
    async fn try_acquire(&mut self, scope: &str) -> BenchResult<bool> {
        self.attempts += 1;
        let request = AdmitRequest::new(format!("{}-{}", self.worker, self.attempts), &self.worker)
            .scope(scope)
            .ttl(LEASE_TTL);
        match self.store.admit(&request).await? {
            Admission::Admitted { record, .. } => {
                self.held = Some(record.claim().ok_or("admitted record has no owner")?);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&mut self, _scope: &str) -> BenchResult<()> {
        let claim = self.held.take().ok_or("release without a held lease")?;
        match self
            .store
            .transition(&claim, &StatusChange::succeeded())
            .await?
        {
            Transition::Applied(_) => Ok(()),
            other => Err(format!("release of a held lease answered {other:?}").into()),
        }
    }
}

struct PeerContender {
    session: Box<dyn PeerSession>,
}

#[async_trait]
impl Contender for PeerContender {
    async fn try_acquire(&mut self, scope: &str) -> BenchResult<bool> {
        self.session.try_acquire(scope, LEASE_TTL).await
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        self.session.release(scope).await
    }
}

/// What one worker saw.
struct WorkerTally {
    wins: u64,
    failures: u64,
    longest_starvation: Duration,
    overlaps: u64,
    errors: u64,
}

/// State the workers of one cell share.
struct Arena {
    scopes: Vec<String>,
    holders: Vec<AtomicUsize>,
    released_at: Vec<Mutex<Option<Instant>>>,
    gaps: Mutex<Latencies>,
}

/// Runs the scenario.
pub async fn run(
    backend: &dyn Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<HotKeyReport> {
    let mut cells = Vec::new();
    let mut round = 0_usize;
    for lock in [LockKind::Tenure, LockKind::Peer] {
        for strategy in [RetryStrategy::FixedPoll, RetryStrategy::JitteredBackoff] {
            for &scopes in &sizes.hot_scopes {
                round += 1;
                progress.cell(format!("hot-key: {lock:?} {} M={scopes}", strategy.name()));
                let mut contenders: Vec<Box<dyn Contender>> = Vec::with_capacity(sizes.hot_workers);
                for worker in 0..sizes.hot_workers {
                    contenders.push(match lock {
                        LockKind::Tenure => Box::new(TenureContender {
                            store: backend.store(),
                            worker: format!("hot-{round}-w{worker}"),
                            attempts: 0,
                            held: None,
                        }),
                        LockKind::Peer => Box::new(PeerContender {
                            session: backend.peer().session().await?,
                        }),
                    });
                }
                let scope_names = (0..scopes)
                    .map(|m| format!("hot-{round}-scope-{m}"))
                    .collect();
                cells.push(race(lock, strategy, scope_names, contenders, sizes).await?);
            }
        }
    }
    Ok(HotKeyReport {
        workers: sizes.hot_workers,
        hold_ms: sizes.hold.as_secs_f64() * 1e3,
        peer_lock: backend.peer().describe(),
        cells,
    })
}

async fn race(
    lock: LockKind,
    strategy: RetryStrategy,
    scopes: Vec<String>,
    contenders: Vec<Box<dyn Contender>>,
    sizes: &Sizes,
) -> BenchResult<HotKeyCell> {
    let count = scopes.len();
    let arena = Arc::new(Arena {
        holders: (0..count).map(|_| AtomicUsize::new(0)).collect(),
        released_at: (0..count).map(|_| Mutex::new(None)).collect(),
        gaps: Mutex::new(Latencies::new()),
        scopes,
    });
    let started = Instant::now();
    let deadline = started + sizes.cell;
    let hold = sizes.hold;
    let tasks: Vec<_> = contenders
        .into_iter()
        .map(|contender| {
            let arena = Arc::clone(&arena);
            tokio::spawn(contend(contender, arena, strategy, hold, started, deadline))
        })
        .collect();
    let mut tallies = Vec::with_capacity(tasks.len());
    for task in tasks {
        tallies.push(task.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let wins: Vec<u64> = tallies.iter().map(|tally| tally.wins).collect();
    let acquisitions: u64 = wins.iter().sum();
    let failures: u64 = tallies.iter().map(|tally| tally.failures).sum();
    let ceiling_per_sec = count as f64 / hold.as_secs_f64();
    let acquisitions_per_sec = acquisitions as f64 / elapsed;
    let handoff_gap = arena
        .gaps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .summary();
    Ok(HotKeyCell {
        lock,
        strategy,
        scopes: count,
        acquisitions,
        acquisitions_per_sec,
        ceiling_per_sec,
        ceiling_ratio: acquisitions_per_sec / ceiling_per_sec,
        failed_per_success: if acquisitions == 0 {
            failures as f64
        } else {
            failures as f64 / acquisitions as f64
        },
        handoff_gap,
        jain_fairness: jain_index(&wins),
        longest_starvation_ms: tallies
            .iter()
            .map(|tally| tally.longest_starvation)
            .max()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3,
        overlaps: tallies.iter().map(|tally| tally.overlaps).sum(),
        errors: tallies.iter().map(|tally| tally.errors).sum(),
    })
}

async fn contend(
    mut contender: Box<dyn Contender>,
    arena: Arc<Arena>,
    strategy: RetryStrategy,
    hold: Duration,
    started: Instant,
    deadline: Instant,
) -> BenchResult<WorkerTally> {
    let backoff_cap = hold * BACKOFF_CAP_HOLDS;
    let mut backoff = BACKOFF_BASE;
    let mut tally = WorkerTally {
        wins: 0,
        failures: 0,
        longest_starvation: Duration::ZERO,
        overlaps: 0,
        errors: 0,
    };
    let mut last_win = started;
    while Instant::now() < deadline {
        let index = fastrand::usize(..arena.scopes.len());
        let scope = &arena.scopes[index];
        let acquired = contender.try_acquire(scope).await.unwrap_or_else(|_| {
            tally.errors += 1;
            false
        });
        if acquired {
            let won = Instant::now();
            if arena.holders[index].fetch_add(1, Ordering::SeqCst) != 0 {
                tally.overlaps += 1;
            }
            let released = *arena.released_at[index]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(released) = released {
                arena
                    .gaps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record(won.saturating_duration_since(released));
            }
            tally.wins += 1;
            tally.longest_starvation = tally.longest_starvation.max(won - last_win);
            last_win = won;
            tokio::time::sleep(hold).await;
            arena.holders[index].fetch_sub(1, Ordering::SeqCst);
            *arena.released_at[index]
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            if contender.release(scope).await.is_err() {
                tally.errors += 1;
            }
            backoff = BACKOFF_BASE;
        } else {
            tally.failures += 1;
            match strategy {
                RetryStrategy::FixedPoll => tokio::time::sleep(POLL).await,
                RetryStrategy::JitteredBackoff => {
                    let jitter = fastrand::u64(..=backoff.as_micros() as u64);
                    tokio::time::sleep(Duration::from_micros(jitter)).await;
                    backoff = (backoff * 2).min(backoff_cap.max(BACKOFF_BASE));
                }
            }
        }
    }
    tally.longest_starvation = tally.longest_starvation.max(Instant::now() - last_win);
    Ok(tally)
}
