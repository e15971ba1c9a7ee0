//! # tenure-keeper
//!
//! The keeper: the client-side runtime that holds a worker's leases, keeps
//! them alive, stops work the moment ownership is gone, and recovers other
//! workers' orphans ([contract §12](tenure_lease_core::contract)). It needs nothing but
//! a [`LeaseStore`], so it behaves the same on every backend.
//!
//! It holds job claims the same way ([`Keeper::claim_jobs`],
//! [`JobGuard`]): one heartbeat, one confirmed deadline per claim, one loss
//! path; only the store calls differ (`renew_job`, or `renew_jobs` in
//! chunks as for runs, and the fenced `complete` / `fail` / `defer`).
//!
//! It is its own crate, over `tenure-lease-core`'s traits only: no backend
//! depends on it, and users reach it as `tenure::keeper` (its main types
//! are re-exported at the facade's root too).
//!
//! Two helpers build on it ([contract §14](tenure_lease_core::contract)): [`Election`]
//! (one leader among campaigners, fenced by its term) and [`Schedule`] /
//! [`Ticker`] (each tick of a named schedule delivered once across hosts).
//!
//! Why it is shaped this way:
//! * **Confirmed deadline.** Each lease carries a local monotonic deadline:
//!   the instant the last *confirmed* renewal was sent, plus the ttl. The
//!   store set its expiry from a later instant, so while this deadline is
//!   ahead no peer can have taken the lease over. A renewal answered `Err`
//!   or not at all keeps the run only while that deadline is ahead
//!   (fail-stop after it); every renewal call is cut at it, and a success
//!   landing after it revives nothing.
//! * **No shared locks.** The heartbeat, the reconciler and the work run in
//!   separate tasks; the keeper's table and each lease's state are std
//!   mutexes held for a few field accesses, never across an `.await`. The
//!   keeper never touches the work's own locks, so a long side effect under
//!   the work's lock cannot look like a store failure.
//! * **Few round trips.** Large beats go through
//!   [`LeaseStore::renew_many`] in chunks (job claims through
//!   [`JobQueue::renew_jobs`](tenure_lease_core::JobQueue::renew_jobs), one chunk per
//!   queue), so one worker can hold tens of thousands of leases; outcomes
//!   stay per lease.
//! * **Fail closed.** Whoever notices a loss first (heartbeat,
//!   [`RunGuard::check`] / [`JobGuard::check`], a refused or unconfirmed
//!   write) cancels the token, aborts the registered task and stops holding
//!   the claim, so no later write is made for it.
//!
//! # Late renewals: how long an orphan can wait
//!
//! Cutting a renewal call at the confirmed deadline stops *waiting* for it;
//! it does not take back a request already written to the store's
//! connection. Such a renewal (sent while the deadline was ahead, then held
//! up in the network, the server's queue, a paused server, or answered too
//! late because this process was paused) may still be applied after this
//! keeper has fail-stopped the run, and it extends the store's lease by a
//! full ttl from the instant it is applied. Nothing runs the orphan
//! meanwhile, and no peer may take it over until that lease (plus grace)
//! ends. The bound, for ttl `T`, grace `G`, and `δ` the longest a renewal
//! spends between leaving this keeper and being applied by the store (on
//! one time line: clocks running at the same rate):
//!
//! * the last confirmed renewal was sent at `D − T`, where `D` is the
//!   confirmed deadline at which the keeper fail-stops; without a late
//!   renewal the orphan is reclaimable from `D + δ₀ + G` (`δ₀`: that
//!   renewal's own transit, typically a one-way latency);
//! * every later renewal is sent before `D` (none is sent at or after it,
//!   settling runs included), so the latest one applied lands before
//!   `D + δ` and sets an expiry before `D + δ + T`;
//! * the orphan therefore becomes reclaimable less than `T + δ + G` after
//!   the keeper fail-stopped it: **the extra wait is below `T + δ`**, plus
//!   up to one reconciler interval until a peer's next pass looks;
//! * `δ` is bounded by the transport, not by tenure: a backend's operation
//!   timeout only stops the client waiting; a request the server already
//!   received is applied when the server gets to it, and one still unsent
//!   when its connection dies is never applied.
//!
//! It costs liveness, never safety: a late renewal is applied only while the
//! record still carries this keeper's owner and fence (a renewal after a
//! takeover answers `Lost` and changes nothing), it changes no fence, and the
//! keeper has already stopped the work and refuses every later write for the
//! claim. A resource guarded by the fence ([`FenceGate`](tenure_lease_core::FenceGate))
//! refuses a paused holder's write once a successor has written with a newer
//! fence. Refusing late renewals outright would need a renewal that carries
//! the deadline its sender still trusts (a change of [`LeaseStore::renew`]
//! on every backend); it is not done.
//!
//! # Metrics
//!
//! Recorded through the [`metrics`] facade (install any exporter) under the
//! names of [`telemetry::METRICS`], each listed there with its unit and
//! labels (`tenure.keeper.renewals` by `tenure.outcome`,
//! `tenure.keeper.losses` by `tenure.loss.reason`,
//! `tenure.keeper.held_leases`, ...); the facade's `tenure::telemetry`
//! lists them beside the stores' metrics, and the guide shows an exporter.
//!
//! Losses, fail-stops, recoveries, silent releases (with `lease.kind` and
//! `action = "release"`), cancelling takeovers and failed callbacks are also
//! logged with `tracing`, with the lease (or job) id; caught panics with
//! `tracing::error!`.
//!
//! # Panics in background work
//!
//! No panic in the heartbeat, the reconciler or a recovery callback (or in a
//! store call they make) leaves the keeper half-alive: it is caught, logged,
//! counted, the work it interrupted is failed closed, and the task goes on
//! (see [`Keeper::health`] for what a host can poll). In short: a renewal
//! that panicked is an unknown answer (the lease is kept only until its
//! confirmed deadline, never extended); a pass that panicked answers
//! [`ReconcileError::Panicked`] and releases the single-flight flag; a
//! callback that panicked is a failed callback whose adopted guard is
//! dropped (the lease expires); a heartbeat or reconciler loop that panicked
//! is restarted.

mod accessors;
mod builder;
mod cancel;
mod config;
mod election;
mod health;
mod heartbeat;
mod held;
mod job_guard;
mod loss;
mod reconciler;
mod run_guard;
mod schedule;
mod table;
pub mod telemetry;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use builder::KeeperBuilder;
pub use cancel::CancelAnywhereOutcome;
pub use config::{KeeperConfig, OrphanHandling, ReconcileAction, ReconcileKinds};
pub use election::{Election, ElectionBuilder, Leadership, Term, TermEnd, DEPOSED, ELECTION_KIND};
pub use health::{KeeperHealth, KeeperState};
pub use job_guard::{JobGuard, JobWriteError};
pub use loss::{LossCause, OwnershipLost};
pub use reconciler::{
    ReconcileError, ReconcileReport, Recovered, RecoveryCallback, RecoveryError, RecoveryFuture,
};
pub use run_guard::{RunGuard, WriteError};
pub use schedule::{
    Firing, Missed, Schedule, Tick, TickOutcome, Ticker, TickerBuilder, TickerReport,
    DEFAULT_LOOKBACK, LATE, MAX_INTERVAL, MAX_LOOKBACK, MIN_INTERVAL, SCHEDULE_KIND,
};

use held::{Entry, Phase};
pub(crate) use table::Shared;
use tenure_lease_core::backend::rules;
use tenure_lease_core::AdmitRequest;
use tenure_lease_core::LeaseStore;
use tenure_lease_core::{Admission, LossReason, Transition, TransitionRejection};
use tenure_lease_core::{Claim, LeaseRecord, Status};
use tenure_lease_core::{Error, ErrorKind};

/// The reason written on records stopped by [`Keeper::cancel`].
pub const CANCELLED: &str = "cancelled";

/// The stop reason written on orphans the reconciler fails
/// ([`ReconcileAction::Fail`]).
pub const ORPHANED: &str = "orphaned";

/// The stop reason written on orphans the reconciler releases silently
/// ([`OrphanHandling::ReleaseSilently`]).
pub const RELEASED: &str = "released";

/// The error text written on orphans the reconciler releases silently.
pub const RELEASED_ERROR: &str = "released: owner's lease expired; finalised without recovery";

/// Why a keeper call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeeperError {
    /// The store failed or did not answer in time; for `admit`, the record
    /// may or may not exist (if it does, its lease expires unrenewed).
    #[error(transparent)]
    Store(#[from] Error),
    /// [`Keeper::shutdown`] has begun: no new leases.
    #[error("the keeper is shutting down")]
    ShuttingDown,
    /// The keeper's heartbeat kept panicking and gave up
    /// ([`KeeperState::Failed`]): nothing would renew a new lease. Replace
    /// this keeper.
    #[error(
        "the keeper's heartbeat failed; no new leases: shut this keeper down and start another"
    )]
    HeartbeatFailed,
    /// Job claims need a lease for the reaper to judge, and this keeper has
    /// no ttl (single-worker mode).
    #[error("holding jobs needs a keeper with a ttl")]
    NoTtl,
}

/// `?` from a keeper call into a function answering [`tenure_lease_core::Result`]: a
/// store error is answered as it was; a keeper that is shutting down or
/// whose heartbeat failed is [`ErrorKind::Stopped`]; holding jobs without a
/// ttl is [`ErrorKind::Config`]. The `KeeperError` stays the source
/// ([`Error::downcast_source`]).
impl From<KeeperError> for Error {
    fn from(error: KeeperError) -> Self {
        let kind = match error {
            KeeperError::Store(store) => return store,
            KeeperError::ShuttingDown | KeeperError::HeartbeatFailed => ErrorKind::Stopped,
            KeeperError::NoTtl => ErrorKind::Config,
        };
        Error::converted(kind, error)
    }
}

/// The answer of [`Keeper::admit`].
#[derive(Debug)]
#[non_exhaustive]
pub enum AdmitOutcome {
    /// The record was created and is now held and renewed.
    Admitted {
        /// The run's lease.
        guard: RunGuard,
        /// Records interrupted to make room, as they now are.
        interrupted: Vec<LeaseRecord>,
        /// The record as admitted (its status, fence and expiry then).
        record: LeaseRecord,
    },
    /// A scope is held by another active record; nothing changed.
    Conflict {
        /// The blocking record.
        holder: LeaseRecord,
        /// When its lease (plus grace) ends, if valid.
        retry_after: Option<Duration>,
    },
    /// The request's [rate limit](tenure_lease_core::AdmitRequest::rate_limit)
    /// has no permit left; nothing changed.
    RateLimited {
        /// The limit's key.
        key: String,
        /// When a permit frees (store time).
        retry_after: Duration,
    },
}

/// The answer of [`Keeper::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// This keeper held the run: it was stopped and marked `Interrupted`
    /// (`Failed` if it had not started), with stop reason [`CANCELLED`].
    Cancelled,
    /// An active record not held here whose owner's lease is gone: nobody is
    /// running it; the reconciler will recover it.
    /// [`Keeper::cancel_anywhere`] cancels such a run instead.
    NotActiveLocally,
    /// Another worker runs it under a valid lease; ask again after
    /// `retry_after` (the holder's expiry plus grace), e.g. HTTP 409 with
    /// `Retry-After`.
    LeaseValidElsewhere {
        /// Time until the holder's lease (plus grace) ends.
        retry_after: Duration,
    },
    /// A peer took the lease over while it was being cancelled here; the
    /// local copy is stopped, the peer's record untouched.
    TakenOver,
    /// Nothing to cancel: the record is finished, interrupted, completing,
    /// or does not exist (`status: None`).
    NotCancellable {
        /// The record's status, when known.
        status: Option<Status>,
    },
    /// The store could not say. A local run is stopped anyway (fail closed).
    Unknown,
}

/// What [`Keeper::shutdown`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every run finished before the deadline.
    pub drained: bool,
    /// Runs still going at the deadline, stopped (their leases are left to
    /// expire).
    pub stopped_runs: Vec<String>,
    /// Jobs still held at the deadline, stopped (their leases are left to
    /// expire; the reaper requeues them).
    pub stopped_jobs: Vec<String>,
    /// The reconciler (a pass or a callback) had to be cancelled at the
    /// deadline.
    pub reconciler_cancelled: bool,
}

/// Holds a worker's leases and keeps them alive
/// ([contract §12](tenure_lease_core::contract)); see the [crate docs](crate).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use tenure_backend_memory::MemoryStore;
/// use tenure_keeper::{AdmitOutcome, Keeper, KeeperConfig, ReconcileAction, WriteError};
/// use tenure_lease_core::StatusChange;
///
/// let store = Arc::new(MemoryStore::new());
/// let config = KeeperConfig::with_ttl(Duration::from_secs(30))
///     .grace(Duration::from_secs(2))
///     .reconcile_action(ReconcileAction::Adopt);
/// let keeper = Keeper::builder(store, config)
///     // Orphans of crashed workers come back here, already held by this keeper.
///     .on_recovered(|recovered| async move {
///         if let Some(guard) = recovered.guard {
///             // ... resume from the record's checkpoint ...
///             guard.complete(StatusChange::succeeded()).await?;
///         }
///         Ok::<(), WriteError>(())
///     })
///     .start()?;
///
/// let request = keeper.request("report-2026-11-29").scope("cron:nightly-report");
/// let AdmitOutcome::Admitted { guard, .. } = keeper.admit(request).await? else {
///     return Ok(()); // another worker runs it
/// };
/// // The keeper renews the lease from now on, pending or running. A loss
/// // cancels `guard.token()` and aborts the spawned task at once.
/// let run = guard.spawn(|guard| async move {
///     guard.mark_running().await?;
///     for _item in 0..3 {
///         guard.check().await?; // cheap: reads the store at most every beat / 10
///         // ... write the item, presenting guard.fence() to the resource ...
///     }
///     guard.complete(StatusChange::succeeded()).await?;
///     Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// });
/// run.await?.map_err(|error| error.to_string())?;
///
/// let report = keeper.shutdown(tokio::time::Instant::now() + Duration::from_secs(10)).await;
/// assert!(report.drained);
/// # Ok(())
/// # }
/// ```
pub struct Keeper {
    shared: Arc<Shared>,
    stop_heartbeat: CancellationToken,
    stop_reconciler: CancellationToken,
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    reconciler: Mutex<Option<JoinHandle<()>>>,
    reconcile_requests: mpsc::Sender<reconciler::PassReply>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper")
            .field("worker_id", &self.shared.worker_id)
            .field("config", &self.shared.config)
            .field("held", &self.held_count())
            .finish()
    }
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

fn has_ended(slot: &Mutex<Option<JoinHandle<()>>>) -> bool {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .is_some_and(JoinHandle::is_finished)
}

impl Keeper {
    /// A keeper over `store` (any `Arc<impl LeaseStore>` coerces).
    pub fn builder(store: Arc<dyn LeaseStore>, config: KeeperConfig) -> KeeperBuilder {
        KeeperBuilder::new(store, config)
    }

    /// The worker id this keeper claims leases under.
    pub fn worker_id(&self) -> &str {
        &self.shared.worker_id
    }

    /// The keeper's configuration.
    pub fn config(&self) -> &KeeperConfig {
        &self.shared.config
    }

    /// How many runs and jobs it holds right now.
    pub fn held_count(&self) -> usize {
        self.shared.held_count()
    }

    /// Whether it holds run `id`.
    pub fn holds(&self, id: &str) -> bool {
        self.shared.holds(id)
    }

    /// Whether the keeper is doing its job, and which panics its background
    /// work survived: poll it from a readiness or liveness probe.
    ///
    /// Every panic in the heartbeat, the reconciler or a recovery callback
    /// (including inside a store call they make) is caught, logged with
    /// `tracing::error!`, counted here and in
    /// `tenure.keeper.task_panics` by `tenure.task`, and the interrupted work is
    /// failed closed: a renewal that panicked extends no lease (the lease is
    /// kept only until its confirmed deadline, then fail-stopped unless a
    /// later renewal confirms it), a reconciler pass that panicked answers
    /// [`ReconcileError::Panicked`] and frees the single-flight flag, a
    /// callback that panicked counts as failed and drops the adopted guard it
    /// held (the lease is left to expire). A panicking heartbeat or
    /// reconciler loop is restarted; a heartbeat loop that panics three
    /// times in a row without finishing a round gives up instead, stopping
    /// everything held ([`LossCause::HeartbeatFailed`]) and refusing new
    /// leases ([`KeeperError::HeartbeatFailed`]). [`KeeperState::Failed`]
    /// means a background task ended; stop the keeper and start another.
    pub fn health(&self) -> KeeperHealth {
        let state = if !self.shared.is_accepting() {
            KeeperState::Stopping
        } else if has_ended(&self.heartbeat) {
            KeeperState::Failed { task: "heartbeat" }
        } else if has_ended(&self.reconciler) {
            KeeperState::Failed { task: "reconciler" }
        } else {
            KeeperState::Running
        };
        KeeperHealth::new(state, &self.shared.panics)
    }

    /// An admission request for `id` carrying this keeper's worker id, ttl
    /// and grace; add scopes, kind, strategy and metadata to it.
    pub fn request(&self, id: impl Into<String>) -> AdmitRequest {
        let request =
            AdmitRequest::new(id, self.shared.worker_id.clone()).grace(self.shared.config.grace);
        match self.shared.config.ttl {
            Some(ttl) => request.ttl(ttl),
            None => request,
        }
    }

    /// Admits a run and, when admitted, holds its lease: renewed from now on
    /// (also while pending). The request's owner, ttl and grace are the
    /// keeper's, whatever `request` says.
    ///
    /// Runs of this keeper that the admission interrupted are stopped.
    pub async fn admit(&self, request: AdmitRequest) -> Result<AdmitOutcome, KeeperError> {
        self.shared.ensure_accepting()?;
        let request = AdmitRequest {
            owner: self.shared.worker_id.clone(),
            ttl: self.shared.config.ttl,
            grace: self.shared.config.grace,
            ..request
        };
        let sent = Instant::now();
        let admission = self
            .shared
            .bounded("admit", self.shared.store.admit(&request))
            .await?;
        match admission {
            Admission::Admitted {
                record,
                interrupted,
            } => {
                for stopped in &interrupted {
                    if let Some(lease) = self.shared.lookup(&stopped.id) {
                        self.shared
                            .lose(&lease, LossCause::Lost(LossReason::Interrupted), false);
                    }
                }
                let guard = self.shared.hold(&record, sent)?;
                Ok(AdmitOutcome::Admitted {
                    guard,
                    interrupted,
                    record,
                })
            }
            Admission::Conflict {
                holder,
                retry_after,
            } => Ok(AdmitOutcome::Conflict {
                holder,
                retry_after,
            }),
            Admission::RateLimited { key, retry_after } => {
                Ok(AdmitOutcome::RateLimited { key, retry_after })
            }
            other => Err(held::unknown_answer("admit", &other).into()),
        }
    }

    /// Cancels run `id`: stops it here if held here (then writes the fenced
    /// stop), otherwise says who has it. See [`CancelOutcome`]. It never
    /// writes over another worker's record; to cancel a crashed worker's run
    /// too, use [`cancel_anywhere`](Keeper::cancel_anywhere).
    pub async fn cancel(&self, id: &str) -> CancelOutcome {
        let shared = &self.shared;
        if let Some(run) = shared.lookup(id) {
            let held = match run.phase() {
                Phase::Held => true,
                Phase::Settling | Phase::Finished => {
                    return CancelOutcome::NotCancellable { status: None }
                }
                Phase::Lost(_) => false,
            };
            if held && shared.lose(&run, LossCause::Cancelled, false) {
                return self.write_cancel(&run.item.claim, run.item.status()).await;
            }
        }
        self.cancel_elsewhere(id).await
    }

    async fn write_cancel(&self, claim: &Claim, status: Status) -> CancelOutcome {
        match cancel::write_cancel(&self.shared, claim, status).await {
            Ok(Transition::Applied(_)) => CancelOutcome::Cancelled,
            Ok(Transition::Rejected(TransitionRejection::Stale)) => CancelOutcome::TakenOver,
            Ok(Transition::Rejected(TransitionRejection::Terminal(status))) => {
                CancelOutcome::NotCancellable {
                    status: Some(status),
                }
            }
            Ok(Transition::Rejected(TransitionRejection::NotAllowed { from, .. })) => {
                CancelOutcome::NotCancellable { status: Some(from) }
            }
            Ok(Transition::Rejected(_)) => CancelOutcome::NotCancellable { status: None },
            Ok(_) | Err(_) => CancelOutcome::Unknown,
        }
    }

    async fn cancel_elsewhere(&self, id: &str) -> CancelOutcome {
        let store = &self.shared.store;
        let bound = self.shared.config.store_timeout;
        let read = async { Ok::<_, Error>((store.get(id).await?, store.now().await?)) };
        match tokio::time::timeout(bound, read).await {
            Ok(Ok((None, _))) => CancelOutcome::NotCancellable { status: None },
            Ok(Ok((Some(record), _))) if !record.is_active() => CancelOutcome::NotCancellable {
                status: Some(record.status),
            },
            Ok(Ok((Some(record), now))) => {
                match rules::retry_after(&record, self.shared.config.grace, now) {
                    Some(retry_after) => CancelOutcome::LeaseValidElsewhere { retry_after },
                    None => CancelOutcome::NotActiveLocally,
                }
            }
            Ok(Err(_)) | Err(_) => CancelOutcome::Unknown,
        }
    }

    /// Runs one reconciler pass now (in the reconciler's task) and answers
    /// what it did, once its callbacks have returned. Single-flight: while
    /// another pass runs this does nothing and answers
    /// [`ReconcileError::AlreadyRunning`].
    pub async fn reconcile_now(&self) -> Result<ReconcileReport, ReconcileError> {
        if !self.shared.is_accepting() {
            return Err(ReconcileError::Stopped);
        }
        if !self.shared.claim_reconcile_flight() {
            return Err(ReconcileError::AlreadyRunning);
        }
        let (reply, answer) = oneshot::channel();
        if self.reconcile_requests.try_send(reply).is_err() {
            self.shared.reconciling.store(false, Ordering::Release);
            return Err(ReconcileError::Stopped);
        }
        answer.await.unwrap_or(Err(ReconcileError::Stopped))
    }

    /// [`shutdown`](Self::shutdown) with a deadline `grace` from now: the
    /// usual call, `keeper.shutdown_within(Duration::from_secs(10))`.
    pub async fn shutdown_within(&self, grace: Duration) -> ShutdownReport {
        self.shutdown(Instant::now() + grace).await
    }

    /// Stops the keeper under one shared `deadline`: no new leases or
    /// reconciler takeovers from now on; running work may finish until the deadline;
    /// a reconciler pass (or its callback) still running at the deadline is
    /// cancelled; runs still going are then stopped (token cancelled, task
    /// aborted, lease left to expire) and the heartbeat ends, aborting any
    /// renewal in flight.
    pub async fn shutdown(&self, deadline: Instant) -> ShutdownReport {
        self.shared.stop_accepting();
        self.stop_reconciler.cancel();
        let mut held = self.shared.watch_held_count();
        // Answers a plain bool so the watch borrow `wait_for` yields (not
        // `Send`) never lives across an await of this future.
        let drain = async {
            tokio::time::timeout_at(deadline, held.wait_for(|count| *count == 0))
                .await
                .is_ok_and(|changed| changed.is_ok())
        };
        let reconciler = take(&self.reconciler);
        let stop_reconciler = async {
            match reconciler {
                Some(mut task) => match tokio::time::timeout_at(deadline, &mut task).await {
                    Ok(_) => false,
                    Err(_) => {
                        task.abort();
                        let _ = task.await;
                        true
                    }
                },
                None => false,
            }
        };
        let (drained, reconciler_cancelled) = tokio::join!(drain, stop_reconciler);
        let mut stopped_runs = Vec::new();
        let mut stopped_jobs = Vec::new();
        for entry in self.shared.snapshot() {
            if self.shared.lose(entry.core(), LossCause::Shutdown, true) {
                let stopped = match &entry {
                    Entry::Run(_) => &mut stopped_runs,
                    Entry::Job(_) => &mut stopped_jobs,
                };
                stopped.push(entry.core().key.id().to_owned());
            }
        }
        stopped_runs.sort();
        stopped_jobs.sort();
        self.stop_heartbeat.cancel();
        if let Some(heartbeat) = take(&self.heartbeat) {
            heartbeat.abort();
            let _ = heartbeat.await;
        }
        tracing::info!(worker_id = %self.shared.worker_id, drained, stopped_runs = stopped_runs.len(), stopped_jobs = stopped_jobs.len(), reconciler_cancelled, "keeper shut down");
        ShutdownReport {
            drained,
            stopped_runs,
            stopped_jobs,
            reconciler_cancelled,
        }
    }
}

impl Drop for Keeper {
    /// Dropping a keeper without [`shutdown`](Keeper::shutdown) stops it
    /// like a crash would, minus the surprise: every run is stopped locally
    /// and nothing more is written.
    fn drop(&mut self) {
        self.shared.stop_accepting();
        self.stop_heartbeat.cancel();
        self.stop_reconciler.cancel();
        for task in [take(&self.heartbeat), take(&self.reconciler)]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
        for entry in self.shared.snapshot() {
            self.shared.lose(entry.core(), LossCause::Shutdown, true);
        }
    }
}
