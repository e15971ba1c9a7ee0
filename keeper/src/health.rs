//! What the keeper does when its own background work panics, and how a host
//! learns about it.
//!
//! The heartbeat, the reconciler and the recovery callback run in tasks the
//! caller never awaits, so a panic there would otherwise vanish into a
//! `JoinHandle` nobody reads, leaving the keeper half-alive (a reconciler
//! whose single-flight flag is never released, leases whose renewal flag
//! stays set). Instead every such panic is caught where it happens, logged
//! with `tracing::error!`, counted (`tenure.keeper.task_panics`) and
//! remembered for [`Keeper::health`](super::Keeper::health), and the work
//! goes on:
//!
//! * a store call that panics counts as a call that failed with an unknown
//!   outcome: a renewal is judged "unknown" (the lease is kept only until its
//!   confirmed deadline, never extended), a scan or takeover is an error of
//!   that pass;
//! * a reconciler pass that panics ends that pass (answered
//!   [`ReconcileError::Panicked`](super::ReconcileError::Panicked)), its
//!   flight flag is released, the next pass runs as usual;
//! * a recovery callback that panics counts as a failed callback; an adopted
//!   guard it held is dropped, so the lease is left to expire (never kept
//!   alive by nobody);
//! * the heartbeat or reconciler loop itself is restarted.
//!
//! Flags are released by drop guards, so they are also released when the
//! work is cancelled (shutdown) rather than finished.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use futures_util::FutureExt;

use super::telemetry;
use tenure_lease_core::Error;

/// Where a caught panic happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Task {
    Heartbeat,
    Reconciler,
    RecoveryCallback,
}

impl Task {
    /// The `task` label of the panic counter.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Task::Heartbeat => "heartbeat",
            Task::Reconciler => "reconciler",
            Task::RecoveryCallback => "recovery_callback",
        }
    }
}

/// The panics caught so far, per task.
#[derive(Debug, Default)]
pub(crate) struct PanicLog {
    heartbeat: AtomicU64,
    reconciler: AtomicU64,
    recovery_callback: AtomicU64,
    last: Mutex<Option<String>>,
}

impl PanicLog {
    /// Logs, counts and remembers one caught panic; answers its message.
    pub(crate) fn record(&self, task: Task, payload: &(dyn Any + Send), what: &str) -> String {
        let message = panic_message(payload);
        let count = match task {
            Task::Heartbeat => &self.heartbeat,
            Task::Reconciler => &self.reconciler,
            Task::RecoveryCallback => &self.recovery_callback,
        };
        count.fetch_add(1, Ordering::Relaxed);
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(format!("{}: {message}", task.label()));
        log_surviving_hooks(|| {
            telemetry::task_panic(task.label());
            tracing::error!(task = task.label(), panic = %message, "{what}");
        });
        message
    }

    fn count(&self, task: Task) -> u64 {
        match task {
            Task::Heartbeat => &self.heartbeat,
            Task::Reconciler => &self.reconciler,
            Task::RecoveryCallback => &self.recovery_callback,
        }
        .load(Ordering::Relaxed)
    }

    fn last(&self) -> Option<String> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Runs `report` (a log line, a metric), surviving a log or metrics hook
/// that panics: the panic may be why the task is reporting at all, and must
/// not take the task (and with it the fail-stop of what it holds) down too.
pub(crate) fn log_surviving_hooks(report: impl FnOnce()) {
    // Unwind safety: `report` only reads the values it logs.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(report));
}

/// Polls `future` to its end, answering `Err(payload)` if it panics.
pub(crate) async fn catch<F: Future>(future: F) -> Result<F::Output, Box<dyn Any + Send>> {
    // Unwind safety: after a caught panic the keeper only reads state that
    // is consistent at every await point (std mutexes are never held across
    // one, and poisoned ones are recovered), and the panicked future is
    // dropped, never polled again.
    AssertUnwindSafe(future).catch_unwind().await
}

/// A store call made by background `task`: a panic inside it is caught,
/// recorded, and answered as an `Unavailable` error (outcome unknown), so the
/// caller handles it like any store failure.
pub(crate) async fn store_call<T, F>(
    log: &PanicLog,
    task: Task,
    call: &'static str,
    future: F,
) -> Result<T, Error>
where
    F: Future<Output = Result<T, Error>>,
{
    match catch(future).await {
        Ok(answer) => answer,
        Err(payload) => {
            let message = log.record(
                task,
                &*payload,
                "a store call panicked; treated as a failure of unknown outcome",
            );
            Err(Error::unavailable(format!(
                "{call} panicked inside the store ({message}); its outcome is unknown"
            )))
        }
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&'static str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-text payload".to_owned()
    }
}

/// Whether the keeper is doing its job, for a host to poll (a readiness or
/// liveness probe); see [`Keeper::health`](super::Keeper::health).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeeperState {
    /// Accepting work; the heartbeat (when there is a ttl) and the
    /// reconciler are running.
    Running,
    /// [`Keeper::shutdown`](super::Keeper::shutdown) has begun (or ended):
    /// no new work, background tasks stopping or stopped.
    Stopping,
    /// A background task ended although nobody stopped it: the keeper no
    /// longer renews leases (`heartbeat`) or recovers orphans
    /// (`reconciler`). Every panic is caught and the task restarted, except
    /// a heartbeat loop that panics three times in a row before finishing a
    /// round: it gives up, stopping everything held at once and refusing new
    /// leases. A host seeing this should stop this keeper and start a new
    /// one.
    Failed {
        /// `heartbeat` or `reconciler`.
        task: &'static str,
    },
}

/// The answer of [`Keeper::health`](super::Keeper::health): the keeper's
/// state and the panics its background work survived.
///
/// A caught panic does not make the keeper unhealthy by itself (the work
/// that panicked was failed closed and the task went on), but a growing
/// count is a bug to chase: the same numbers are exported as
/// `tenure.keeper.task_panics` by `tenure.task`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeeperHealth {
    /// Running, stopping, or failed.
    pub state: KeeperState,
    /// Panics caught in the heartbeat (a renewal call, or the loop itself,
    /// which was restarted). No lease was extended by a call that panicked.
    pub heartbeat_panics: u64,
    /// Panics caught in the reconciler (a scan, a takeover, a whole pass, or
    /// the loop itself, which was restarted).
    pub reconciler_panics: u64,
    /// Panics caught in the recovery callback (each also counted as a
    /// failed callback and reported in
    /// [`ReconcileReport::callback_failed`](super::ReconcileReport::callback_failed)).
    pub recovery_callback_panics: u64,
    /// The last caught panic, as `task: message`.
    pub last_panic: Option<String>,
}

impl KeeperHealth {
    /// True while the keeper runs normally (state [`KeeperState::Running`]).
    pub fn is_running(&self) -> bool {
        self.state == KeeperState::Running
    }

    pub(crate) fn new(state: KeeperState, log: &PanicLog) -> Self {
        KeeperHealth {
            state,
            heartbeat_panics: log.count(Task::Heartbeat),
            reconciler_panics: log.count(Task::Reconciler),
            recovery_callback_panics: log.count(Task::RecoveryCallback),
            last_panic: log.last(),
        }
    }
}
