//! One held lease: its local state (confirmed deadline, phase, owner task)
//! and the [`RunGuard`] the work holds.
//!
//! The state sits behind a std mutex that is only ever held for a few field
//! reads and writes, never across an `.await`, so the heartbeat can never be
//! kept waiting by the work, nor the work by the heartbeat.

use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::error::Error;
use crate::outcome::{LossReason, Transition, TransitionRejection};
use crate::record::{Claim, LeaseRecord, Status};
use crate::request::StatusChange;
use crate::rules;

/// Why a run no longer owns its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossCause {
    /// The store said so (a renewal or a `check()` read).
    Lost(LossReason),
    /// Fail-stop: the store could not confirm the lease before its confirmed
    /// deadline, so ownership is unknown and treated as gone.
    DeadlinePassed,
    /// A fenced write was refused as stale: a peer took over.
    TakenOver,
    /// A terminal write could not be confirmed (fail closed).
    UnconfirmedWrite,
    /// [`Keeper::cancel`](super::Keeper::cancel) stopped it.
    Cancelled,
    /// The keeper shut down (or was dropped) before the work finished.
    Shutdown,
    /// Every [`RunGuard`] was dropped without `complete()`: nobody renews it
    /// any more.
    Abandoned,
}

impl LossCause {
    /// Short name, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            LossCause::Lost(reason) => reason.label(),
            LossCause::DeadlinePassed => "deadline_passed",
            LossCause::TakenOver => "taken_over",
            LossCause::UnconfirmedWrite => "unconfirmed_write",
            LossCause::Cancelled => "cancelled",
            LossCause::Shutdown => "shutdown",
            LossCause::Abandoned => "abandoned",
        }
    }
}

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The answer of [`RunGuard::check`] once the run no longer owns its lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lease {id} is no longer owned here ({cause})")]
pub struct OwnershipLost {
    /// The lease id.
    pub id: String,
    /// Why.
    pub cause: LossCause,
}

/// Why [`RunGuard::complete`] or [`RunGuard::mark_running`] did not write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The run had already lost its lease; nothing was written.
    #[error("ownership already lost ({0})")]
    OwnershipLost(LossCause),
    /// The store refused the write as stale: a peer took over. The run is
    /// now marked lost.
    #[error("a peer took over the lease")]
    TakenOver,
    /// The store refused the write for another reason. `Missing` and
    /// `Terminal` mark the run lost; `NotAllowed` leaves it held.
    #[error("the store refused the write: {0:?}")]
    Rejected(TransitionRejection),
    /// The store could not say whether the write happened. For a terminal
    /// write the run is marked lost (fail closed); the store row is left as
    /// the store has it.
    #[error("the write could not be confirmed: {0}")]
    Unconfirmed(#[source] Error),
    /// The store refused the request itself (bad input); nothing changed and
    /// the run still holds its lease.
    #[error("invalid write: {0}")]
    Invalid(#[source] Error),
    /// `complete()` needs a status that ends the run (not Pending or Running).
    #[error("{0} does not end a run")]
    NotFinal(Status),
    /// `complete()` was already called for this run.
    #[error("the run is already completing or completed")]
    AlreadyCompleted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Held,
    /// `complete()` is writing: heartbeat answers no longer stop the run.
    Settling,
    Finished,
    Lost(LossCause),
}

#[derive(Debug)]
pub(crate) struct LeaseState {
    pub(crate) phase: Phase,
    pub(crate) status: Status,
    /// The instant the last confirmed renewal was sent plus the ttl; `None`
    /// when the record has no lease (single-worker mode).
    pub(crate) deadline: Option<Instant>,
    /// The last time the store confirmed ownership (renewal or check read),
    /// or `check()` claimed the right to read it.
    pub(crate) last_confirmed: Instant,
    pub(crate) task: Option<AbortHandle>,
}

/// A lease this keeper holds. The keeper's table and every [`RunGuard`] of
/// the run share it.
#[derive(Debug)]
pub(crate) struct HeldLease {
    pub(crate) claim: Claim,
    pub(crate) token: CancellationToken,
    pub(crate) renewing: AtomicBool,
    state: Mutex<LeaseState>,
}

/// What the answer to a successful renewal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirmation {
    Extended {
        time_left: Duration,
    },
    /// It landed after the confirmed deadline: the lease is not revived.
    Late,
    /// The run already finished or stopped.
    Ignored,
}

impl HeldLease {
    pub(crate) fn new(
        claim: Claim,
        status: Status,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Self {
        HeldLease {
            claim,
            token: CancellationToken::new(),
            renewing: AtomicBool::new(false),
            state: Mutex::new(LeaseState {
                phase: Phase::Held,
                status,
                deadline,
                last_confirmed: now,
                task: None,
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn phase(&self) -> Phase {
        self.state().phase
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.state().deadline
    }

    /// A renewal sent when the lease was still ours answered `Renewed`.
    pub(crate) fn confirm(&self, new_deadline: Instant, now: Instant) -> Confirmation {
        let mut state = self.state();
        if !matches!(state.phase, Phase::Held | Phase::Settling) {
            return Confirmation::Ignored;
        }
        match state.deadline {
            Some(deadline) if deadline <= now => Confirmation::Late,
            Some(deadline) => {
                state.deadline = Some(deadline.max(new_deadline));
                state.last_confirmed = now;
                Confirmation::Extended {
                    time_left: deadline - now,
                }
            }
            None => Confirmation::Ignored,
        }
    }

    /// Moves to `Lost(cause)` when the phase allows it, handing back the
    /// owner task to abort (none while settling: the owner is finishing).
    pub(crate) fn lose(&self, cause: LossCause, settling_too: bool) -> Option<Option<AbortHandle>> {
        let mut state = self.state();
        match state.phase {
            Phase::Held => {
                state.phase = Phase::Lost(cause);
                Some(state.task.take())
            }
            Phase::Settling if settling_too => {
                state.phase = Phase::Lost(cause);
                Some(None)
            }
            _ => None,
        }
    }
}

/// The lease of one run, handed out by [`Keeper::admit`](super::Keeper::admit)
/// (and to the recovery callback for adopted orphans).
///
/// Clones share the run. When the last clone is dropped before
/// [`complete`](RunGuard::complete), the keeper stops renewing the lease and
/// lets it expire, so a peer's reconciler can recover it.
#[derive(Clone)]
pub struct RunGuard {
    inner: Arc<GuardInner>,
}

struct GuardInner {
    shared: Arc<Shared>,
    lease: Arc<HeldLease>,
}

impl Drop for GuardInner {
    fn drop(&mut self) {
        if self.shared.lose(&self.lease, LossCause::Abandoned, false) {
            tracing::warn!(
                lease.id = %self.lease.claim.id,
                "every guard of the run was dropped without complete(); the lease is left to expire"
            );
        }
    }
}

impl fmt::Debug for RunGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunGuard")
            .field("claim", &self.inner.lease.claim)
            .field("phase", &self.inner.lease.phase())
            .finish()
    }
}

impl RunGuard {
    pub(crate) fn new(shared: Arc<Shared>, lease: Arc<HeldLease>) -> Self {
        RunGuard {
            inner: Arc::new(GuardInner { shared, lease }),
        }
    }

    fn lease(&self) -> &HeldLease {
        &self.inner.lease
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The lease id.
    pub fn id(&self) -> &str {
        &self.lease().claim.id
    }

    /// The claim every fenced write presents.
    pub fn claim(&self) -> &Claim {
        &self.lease().claim
    }

    /// The fencing token, for downstream resources that check it.
    pub fn fence(&self) -> u64 {
        self.lease().claim.fence
    }

    /// A token cancelled the moment the run loses its lease (never on a
    /// normal completion).
    pub fn token(&self) -> CancellationToken {
        self.lease().token.clone()
    }

    /// Why the run lost its lease, if it did.
    pub fn loss(&self) -> Option<LossCause> {
        match self.lease().phase() {
            Phase::Lost(cause) => Some(cause),
            _ => None,
        }
    }

    /// The local instant until which the lease is confirmed (`None` without
    /// a lease). Conservative: the send instant of the last confirmed
    /// renewal plus the ttl.
    pub fn confirmed_deadline(&self) -> Option<Instant> {
        self.lease().deadline()
    }

    /// Registers the task doing the work: it is aborted the moment the lease
    /// is lost. A task registered after the loss is aborted at once.
    pub fn register_task(&self, task: AbortHandle) {
        let mut state = self.lease().state();
        if matches!(state.phase, Phase::Lost(_)) {
            drop(state);
            task.abort();
        } else {
            state.task = Some(task);
        }
    }

    /// Spawns the work with a clone of this guard and registers it, so a
    /// loss aborts it at once.
    pub fn spawn<F, Fut>(&self, work: F) -> JoinHandle<Fut::Output>
    where
        F: FnOnce(RunGuard) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let handle = tokio::spawn(work(self.clone()));
        self.register_task(handle.abort_handle());
        handle
    }

    /// Whether the run still owns its lease, for work that handles many
    /// items: call it between items.
    ///
    /// Reads the store at most every tenth of a beat; in between it answers
    /// from the last confirmation. A read that fails is not evidence of loss:
    /// the answer then comes from the confirmed deadline. A loss noticed here
    /// stops the whole run (token, owner task, heartbeat) exactly as one the
    /// heartbeat notices.
    pub async fn check(&self) -> Result<(), OwnershipLost> {
        let lease = self.lease();
        let shared = self.shared();
        let now = Instant::now();
        let read_bound = {
            let mut state = lease.state();
            match state.phase {
                Phase::Lost(cause) => return Err(self.lost(cause)),
                Phase::Settling | Phase::Finished => return Ok(()),
                Phase::Held => {}
            }
            if state.deadline.is_some_and(|deadline| deadline <= now) {
                None
            } else if now.duration_since(state.last_confirmed) < shared.check_interval {
                return Ok(());
            } else {
                state.last_confirmed = now;
                Some(state.deadline.unwrap_or(now + shared.config.store_timeout))
            }
        };
        let Some(read_bound) = read_bound else {
            shared.lose(lease, LossCause::DeadlinePassed, false);
            return self.verdict();
        };
        let read = tokio::time::timeout_at(read_bound, shared.store.get(&lease.claim.id)).await;
        match read {
            Ok(Ok(record)) => {
                if let Err(reason) = rules::judge_renewal(record.as_ref(), &lease.claim) {
                    shared.lose(lease, LossCause::Lost(reason), false);
                }
            }
            Ok(Err(error)) => {
                tracing::debug!(lease.id = %lease.claim.id, %error, "check could not read the store; answering from the last renewal");
            }
            Err(_) => {
                tracing::debug!(lease.id = %lease.claim.id, "check read timed out; answering from the last renewal");
            }
        }
        if lease
            .deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
        {
            shared.lose(lease, LossCause::DeadlinePassed, false);
        }
        self.verdict()
    }

    fn verdict(&self) -> Result<(), OwnershipLost> {
        match self.lease().phase() {
            Phase::Lost(cause) => Err(self.lost(cause)),
            _ => Ok(()),
        }
    }

    fn lost(&self, cause: LossCause) -> OwnershipLost {
        OwnershipLost {
            id: self.id().to_owned(),
            cause,
        }
    }

    /// The fenced `Pending → Running` write. The run keeps its lease whatever
    /// the answer, except when the store says a peer took over.
    pub async fn mark_running(&self) -> Result<LeaseRecord, WriteError> {
        let lease = self.lease();
        let shared = self.shared();
        let bound = {
            let state = lease.state();
            match state.phase {
                Phase::Held => {}
                Phase::Lost(cause) => return Err(WriteError::OwnershipLost(cause)),
                Phase::Settling | Phase::Finished => return Err(WriteError::AlreadyCompleted),
            }
            state
                .deadline
                .unwrap_or_else(|| Instant::now() + shared.config.store_timeout)
        };
        let answer = tokio::time::timeout_at(
            bound,
            shared
                .store
                .transition(&lease.claim, &StatusChange::running()),
        )
        .await;
        match answer {
            Ok(Ok(Transition::Applied(record))) => {
                lease.state().status = record.status;
                Ok(record)
            }
            Ok(Ok(Transition::Rejected(rejection))) => Err(self.rejected(rejection, false)),
            Ok(Err(error)) if !error.is_outcome_unknown() => Err(WriteError::Invalid(error)),
            Ok(Err(error)) => Err(WriteError::Unconfirmed(error)),
            Err(_) => Err(WriteError::Unconfirmed(timeout_error("mark_running"))),
        }
    }

    /// Ends the run with a fenced terminal (or `Interrupted`) write.
    ///
    /// Marks the lease *settling* first, so a renewal answering `Lost`
    /// because this very write committed is not taken for a loss. On
    /// success the keeper stops renewing. `Rejected(Stale)` answers
    /// [`WriteError::TakenOver`]. An `Err` (or no answer within the store
    /// timeout) is unconfirmed: the run is marked lost (fail closed) and
    /// reported so; the store row stays as the store has it.
    pub async fn complete(&self, change: StatusChange) -> Result<LeaseRecord, WriteError> {
        if change.status.is_active() {
            return Err(WriteError::NotFinal(change.status));
        }
        let lease = self.lease();
        let shared = self.shared();
        {
            let mut state = lease.state();
            match state.phase {
                Phase::Held => state.phase = Phase::Settling,
                Phase::Lost(cause) => return Err(WriteError::OwnershipLost(cause)),
                Phase::Settling | Phase::Finished => return Err(WriteError::AlreadyCompleted),
            }
        }
        let answer = tokio::time::timeout(
            shared.config.store_timeout,
            shared.store.transition(&lease.claim, &change),
        )
        .await;
        match answer {
            Ok(Ok(Transition::Applied(record))) => {
                lease.state().phase = Phase::Finished;
                shared.release(lease);
                Ok(record)
            }
            Ok(Ok(Transition::Rejected(rejection))) => Err(self.rejected(rejection, true)),
            Ok(Err(error)) if !error.is_outcome_unknown() => {
                lease.state().phase = Phase::Held;
                Err(WriteError::Invalid(error))
            }
            Ok(Err(error)) => {
                shared.lose(lease, LossCause::UnconfirmedWrite, true);
                Err(WriteError::Unconfirmed(error))
            }
            Err(_) => {
                shared.lose(lease, LossCause::UnconfirmedWrite, true);
                Err(WriteError::Unconfirmed(timeout_error("complete")))
            }
        }
    }

    /// Handles a refused write: stale, missing or terminal records end the
    /// run; `NotAllowed` leaves it held.
    fn rejected(&self, rejection: TransitionRejection, settling: bool) -> WriteError {
        let lease = self.lease();
        let cause = match rejection {
            TransitionRejection::Stale => LossCause::TakenOver,
            TransitionRejection::Missing => LossCause::Lost(LossReason::Missing),
            TransitionRejection::Terminal(status) => LossCause::Lost(LossReason::Terminal(status)),
            _ => {
                if settling {
                    lease.state().phase = Phase::Held;
                }
                return WriteError::Rejected(rejection);
            }
        };
        self.shared().lose(lease, cause, settling);
        match rejection {
            TransitionRejection::Stale => WriteError::TakenOver,
            other => WriteError::Rejected(other),
        }
    }
}

fn timeout_error(operation: &str) -> Error {
    Error::new(
        crate::error::ErrorKind::Timeout,
        format!("{operation} got no answer within the keeper's bound"),
    )
}
