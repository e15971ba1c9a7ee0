//! hot-key: N workers race for M scopes: acquire, hold h, release, again.
//!
//! The ceiling is M / h acquisitions per second (every scope always held).
//! What falls short of it is the hand-off: the release's round trip, the
//! losers' retry delay, and the winner's acquire. Three retry strategies are
//! compared (a fixed short poll, a jittered exponential backoff, and a FIFO
//! wake-up on release built here), and tenure's admission is compared with
//! the lock people use instead on the same store (advisory locks, `SET NX
//! PX`, …). A fourth, for tenure's lock only, is the library's own waiting
//! admission ([`Waiter`]), one shared by the cell's workers.
//!
//! The pollers leave a single hot scope to whoever releases it: that worker
//! asks again at once while the others sleep. Waking on release takes turns
//! instead: a loser queues on the scope and sleeps until a release wakes it
//! (or a fallback timeout, so a lost wake-up costs time, never the cell);
//! a releaser that woke someone does not ask for that scope again before
//! its turn: it tries another scope, or with only one, queues behind them.
//! The queues live where a deployment would keep them (see
//! [`WakeUps`](crate::backend::WakeUps)).
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
use serde::Serialize;
use tenure_lease_core::wait::Waiter;
use tenure_lease_core::{Admission, AdmitRequest, Claim, LeaseStore, StatusChange, Transition};

use crate::backend::{Backend, PeerSession, WakeSession};
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
/// A queued waiter retries unwoken after this many turns of the whole queue
/// (every worker holding once and handing over), far longer than its turn
/// can take, so a timeout means a lost wake-up (a waiter that queued just
/// after the release that would have woken it) rather than a long queue.
/// The wait is also capped at [`FALLBACK_CELL_SHARE`] of the cell, so that
/// with many workers a lost wake-up still times out, and is counted, before
/// the cell ends.
const FALLBACK_TURNS: u32 = 4;
/// The longest fallback, as a fraction (1/n) of the cell.
const FALLBACK_CELL_SHARE: u32 = 2;
/// What one hand-over is allowed on top of the hold, in a turn: a slow
/// store's release, wake-up and admission (PostgreSQL's, under load).
const HANDOFF_ALLOWANCE: Duration = Duration::from_millis(5);

/// How a loser waits before trying again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryStrategy {
    /// Sleep `POLL` after each failure.
    FixedPoll,
    /// Sleep a uniform random time up to a delay that doubles per failure.
    JitteredBackoff,
    /// Queue on the scope (FIFO) and sleep until a release wakes the head;
    /// a releaser that woke a waiter lets it have the scope.
    WakeOnRelease,
    /// tenure's own waiting admission (`tenure::wait::Waiter`, one shared by
    /// the cell's workers): its FIFO line, woken by the store's release
    /// notices, polling where the store has none. tenure's lock only.
    TenureWaiter,
}

impl RetryStrategy {
    /// Every strategy, in report order.
    pub const ALL: [RetryStrategy; 4] = [
        RetryStrategy::FixedPoll,
        RetryStrategy::JitteredBackoff,
        RetryStrategy::WakeOnRelease,
        RetryStrategy::TenureWaiter,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            RetryStrategy::FixedPoll => "fixed-poll",
            RetryStrategy::JitteredBackoff => "jittered-backoff",
            RetryStrategy::WakeOnRelease => "wake-on-release",
            RetryStrategy::TenureWaiter => "tenure-waiter",
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

/// Figures of one (lock, strategy, M, N) cell.
#[derive(Debug, Clone, Serialize)]
pub struct HotKeyCell {
    /// Which lock.
    pub lock: LockKind,
    /// How losers retried.
    pub strategy: RetryStrategy,
    /// Scopes raced for.
    pub scopes: usize,
    /// Workers racing.
    pub workers: usize,
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
    /// Longest time any worker went without a win, in µs.
    pub longest_starvation_us: f64,
    /// Moments two workers held one scope (must be 0).
    pub overlaps: u64,
    /// Acquire or release calls answered `Err` (counted as failed attempts;
    /// must be 0: a lost race is an outcome, never an error).
    pub errors: u64,
    /// Wake-ups sent by releasers (0 unless waking on release).
    pub wakes_sent: u64,
    /// Waits ended by a wake-up (equal to `wakes_sent` when none was lost).
    pub wake_ups: u64,
    /// Waits that ran out their fallback timeout unwoken.
    pub wake_timeouts: u64,
}

/// The hot-key report.
#[derive(Debug, Clone, Serialize)]
pub struct HotKeyReport {
    /// How long a winner holds, in µs.
    pub hold_us: f64,
    /// What the peer lock is.
    pub peer_lock: &'static str,
    /// Where `wake-on-release` waiters queue and how they are woken.
    pub wake_channel: &'static str,
    /// Every cell.
    pub cells: Vec<HotKeyCell>,
}

/// One worker's way to take and give back a scope.
#[async_trait]
trait Contender: Send {
    /// Takes `scope` if it is free, or (a tenure waiter) once it comes
    /// free before `deadline`. True when taken.
    async fn try_acquire(&mut self, scope: &str, deadline: Instant) -> BenchResult<bool>;
    async fn release(&mut self, scope: &str) -> BenchResult<()>;
}

struct TenureContender {
    store: Arc<dyn LeaseStore>,
    /// The cell's shared waiter, when the strategy is
    /// [`RetryStrategy::TenureWaiter`].
    waiter: Option<Arc<Waiter<Arc<dyn LeaseStore>>>>,
    worker: String,
    attempts: u64,
    held: Option<Claim>,
}

#[async_trait]
impl Contender for TenureContender {
    async fn try_acquire(&mut self, scope: &str, deadline: Instant) -> BenchResult<bool> {
        self.attempts += 1;
        let request = AdmitRequest::new(format!("{}-{}", self.worker, self.attempts), &self.worker)
            .scope(scope)
            .ttl(LEASE_TTL);
        let answer = match &self.waiter {
            Some(waiter) => {
                let left = deadline.saturating_duration_since(Instant::now());
                waiter.admit(&request, left).await?
            }
            None => self.store.admit(&request).await?,
        };
        match answer {
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
    async fn try_acquire(&mut self, scope: &str, _: Instant) -> BenchResult<bool> {
        self.session.try_acquire(scope, LEASE_TTL).await
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        self.session.release(scope).await
    }
}

/// What one worker saw.
#[derive(Default)]
struct WorkerTally {
    wins: u64,
    failures: u64,
    longest_starvation: Duration,
    overlaps: u64,
    errors: u64,
    wakes_sent: u64,
    wake_ups: u64,
    wake_timeouts: u64,
}

/// Which scope a worker asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Any, at random.
    Any,
    /// The one it queued for and was woken (or timed out) on.
    Same,
    /// Any but the one it just released, whose head it woke.
    Other,
}

/// How one worker waits: after a lost attempt, and after a release.
enum Waiting {
    /// The contender waited already (tenure's waiter).
    InAcquire,
    FixedPoll,
    JitteredBackoff {
        /// Upper bound of the next random delay.
        delay: Duration,
        cap: Duration,
    },
    WakeOnRelease {
        session: Box<dyn WakeSession>,
        fallback: Duration,
        /// Whether the cell has one scope, so a releaser has nowhere else to go.
        lone_scope: bool,
    },
}

impl Waiting {
    async fn new(
        strategy: RetryStrategy,
        backend: &Backend,
        sizes: &Sizes,
        scopes: usize,
        workers: usize,
    ) -> BenchResult<Self> {
        Ok(match strategy {
            RetryStrategy::TenureWaiter => Waiting::InAcquire,
            RetryStrategy::FixedPoll => Waiting::FixedPoll,
            RetryStrategy::JitteredBackoff => Waiting::JitteredBackoff {
                delay: BACKOFF_BASE,
                cap: (sizes.hold * BACKOFF_CAP_HOLDS).max(BACKOFF_BASE),
            },
            RetryStrategy::WakeOnRelease => Waiting::WakeOnRelease {
                session: backend.wake_ups.clone().session().await?,
                fallback: ((sizes.hold + HANDOFF_ALLOWANCE)
                    * FALLBACK_TURNS
                    * u32::try_from(workers)?)
                .min(sizes.cell / FALLBACK_CELL_SHARE),
                lone_scope: scopes == 1,
            },
        })
    }

    /// Waits after a failed attempt on `scope`.
    async fn after_failure(
        &mut self,
        scope: &str,
        deadline: Instant,
        tally: &mut WorkerTally,
    ) -> BenchResult<Next> {
        match self {
            // Refused at the end of the cell, or answered an error: a
            // pause, so errors never spin.
            Waiting::InAcquire => {
                tokio::time::sleep(POLL).await;
                return Ok(Next::Same);
            }
            Waiting::FixedPoll => tokio::time::sleep(POLL).await,
            Waiting::JitteredBackoff { delay, cap } => {
                let jitter = fastrand::u64(..=delay.as_micros() as u64);
                tokio::time::sleep(Duration::from_micros(jitter)).await;
                *delay = (*delay * 2).min(*cap);
            }
            Waiting::WakeOnRelease {
                session, fallback, ..
            } => {
                wait_for_release(session.as_mut(), scope, *fallback, deadline, tally).await?;
                return Ok(Next::Same);
            }
        }
        Ok(Next::Any)
    }

    /// Goes on after releasing `scope`.
    async fn after_release(
        &mut self,
        scope: &str,
        deadline: Instant,
        tally: &mut WorkerTally,
    ) -> BenchResult<Next> {
        match self {
            // Asking again joins the back of the waiter's line.
            Waiting::InAcquire | Waiting::FixedPoll => Ok(Next::Any),
            Waiting::JitteredBackoff { delay, .. } => {
                *delay = BACKOFF_BASE;
                Ok(Next::Any)
            }
            Waiting::WakeOnRelease {
                session,
                fallback,
                lone_scope,
            } => {
                if !session.wake_next(scope).await? {
                    return Ok(Next::Any);
                }
                tally.wakes_sent += 1;
                // Asking for `scope` again now would beat the waiter just
                // woken: go elsewhere, or queue behind it.
                if !*lone_scope {
                    return Ok(Next::Other);
                }
                wait_for_release(session.as_mut(), scope, *fallback, deadline, tally).await?;
                Ok(Next::Same)
            }
        }
    }
}

/// Queues on `scope` and sleeps until woken, the fallback timeout, or the
/// end of the cell.
async fn wait_for_release(
    session: &mut dyn WakeSession,
    scope: &str,
    fallback: Duration,
    deadline: Instant,
    tally: &mut WorkerTally,
) -> BenchResult<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Ok(());
    }
    session.enqueue(scope).await?;
    let limit = fallback.min(left);
    if session.wait(limit).await? {
        tally.wake_ups += 1;
    } else if limit == fallback {
        tally.wake_timeouts += 1;
    }
    Ok(())
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
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<HotKeyReport> {
    let mut cells = Vec::new();
    let mut round = 0_usize;
    for lock in [LockKind::Tenure, LockKind::Peer] {
        for strategy in RetryStrategy::ALL {
            if lock == LockKind::Peer && strategy == RetryStrategy::TenureWaiter {
                continue;
            }
            for &scopes in &sizes.hot_scopes {
                for &racers in &sizes.hot_workers {
                    round += 1;
                    progress.cell(format!(
                        "hot-key: {lock:?} {} M={scopes} N={racers}",
                        strategy.name()
                    ));
                    let mut workers = Vec::with_capacity(racers);
                    let waiter = (strategy == RetryStrategy::TenureWaiter)
                        .then(|| Arc::new(Waiter::new(backend.store.clone())));
                    for worker in 0..racers {
                        let contender: Box<dyn Contender> = match lock {
                            LockKind::Tenure => Box::new(TenureContender {
                                store: backend.store.clone(),
                                waiter: waiter.clone(),
                                worker: format!("hot-{round}-w{worker}"),
                                attempts: 0,
                                held: None,
                            }),
                            LockKind::Peer => Box::new(PeerContender {
                                session: backend.peer.clone().session().await?,
                            }),
                        };
                        let waiting =
                            Waiting::new(strategy, backend, sizes, scopes, racers).await?;
                        workers.push((contender, waiting));
                    }
                    let scope_names = (0..scopes)
                        .map(|m| format!("hot-{round}-scope-{m}"))
                        .collect();
                    cells.push(race(lock, strategy, scope_names, workers, sizes).await?);
                }
            }
        }
    }
    Ok(HotKeyReport {
        hold_us: crate::stats::micros(sizes.hold),
        peer_lock: backend.peer.clone().describe(),
        wake_channel: backend.wake_ups.clone().describe(),
        cells,
    })
}

async fn race(
    lock: LockKind,
    strategy: RetryStrategy,
    scopes: Vec<String>,
    workers: Vec<(Box<dyn Contender>, Waiting)>,
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
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|(contender, waiting)| {
            let arena = Arc::clone(&arena);
            tokio::spawn(contend(contender, waiting, arena, hold, started, deadline))
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
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .summary();
    let total = |figure: fn(&WorkerTally) -> u64| tallies.iter().map(figure).sum();
    Ok(HotKeyCell {
        lock,
        strategy,
        scopes: count,
        workers: tallies.len(),
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
        longest_starvation_us: crate::stats::micros(
            tallies
                .iter()
                .map(|tally| tally.longest_starvation)
                .max()
                .unwrap_or_default(),
        ),
        overlaps: total(|tally| tally.overlaps),
        errors: total(|tally| tally.errors),
        wakes_sent: total(|tally| tally.wakes_sent),
        wake_ups: total(|tally| tally.wake_ups),
        wake_timeouts: total(|tally| tally.wake_timeouts),
    })
}

async fn contend(
    mut contender: Box<dyn Contender>,
    mut waiting: Waiting,
    arena: Arc<Arena>,
    hold: Duration,
    started: Instant,
    deadline: Instant,
) -> BenchResult<WorkerTally> {
    let mut tally = WorkerTally::default();
    let mut last_win = started;
    let count = arena.scopes.len();
    let mut index = 0;
    let mut next = Next::Any;
    while Instant::now() < deadline {
        index = match next {
            Next::Any => fastrand::usize(..count),
            Next::Same => index,
            Next::Other => (index + 1 + fastrand::usize(..count - 1)) % count,
        };
        let scope = &arena.scopes[index];
        let acquired = contender
            .try_acquire(scope, deadline)
            .await
            .unwrap_or_else(|_| {
                tally.errors += 1;
                false
            });
        next = if acquired {
            let won = Instant::now();
            if arena.holders[index].fetch_add(1, Ordering::SeqCst) != 0 {
                tally.overlaps += 1;
            }
            let released = *arena.released_at[index]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(released) = released {
                arena
                    .gaps
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .record(won.saturating_duration_since(released));
            }
            tally.wins += 1;
            tally.longest_starvation = tally.longest_starvation.max(won - last_win);
            last_win = won;
            tokio::time::sleep(hold).await;
            arena.holders[index].fetch_sub(1, Ordering::SeqCst);
            *arena.released_at[index]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
            if contender.release(scope).await.is_err() {
                tally.errors += 1;
            }
            waiting.after_release(scope, deadline, &mut tally).await?
        } else {
            tally.failures += 1;
            waiting.after_failure(scope, deadline, &mut tally).await?
        };
    }
    tally.longest_starvation = tally.longest_starvation.max(Instant::now() - last_win);
    Ok(tally)
}
