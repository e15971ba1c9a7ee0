//! The [`RunGuard`] the work of a run holds, and the loss and write errors
//! both kinds of guard answer. The state behind it is
//! [`HeldCore`](super::held::HeldCore), shared with job claims.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::held::{HeldRun, Phase, SettleFailure};
use super::Shared;
use crate::backend::rules;
use crate::error::Error;
use crate::outcome::{LossReason, Transition, TransitionRejection};
use crate::queue::{JobLoss, JobState};
use crate::record::{Claim, LeaseRecord, Status};
use crate::request::StatusChange;

/// Why a run (or a job) no longer owns its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossCause {
    /// The store said so (a renewal or a `check()` read).
    Lost(LossReason),
    /// The queue said so for a job claim (a renewal, a `check()` read, or a
    /// refused settle write): requeued by the reaper, re-claimed, finished
    /// or gone.
    JobLost(JobLoss),
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
    /// Every guard was dropped without settling: nobody renews it any more.
    Abandoned,
    /// The keeper's heartbeat kept panicking and gave up, so nothing renews
    /// the lease or would stop the work at its deadline: stopped at once.
    HeartbeatFailed,
}

impl LossCause {
    /// Short name, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            LossCause::Lost(reason) => reason.label(),
            LossCause::JobLost(loss) => job_loss_label(*loss),
            LossCause::DeadlinePassed => "deadline_passed",
            LossCause::TakenOver => "taken_over",
            LossCause::UnconfirmedWrite => "unconfirmed_write",
            LossCause::Cancelled => "cancelled",
            LossCause::Shutdown => "shutdown",
            LossCause::Abandoned => "abandoned",
            LossCause::HeartbeatFailed => "heartbeat_failed",
        }
    }
}

fn job_loss_label(loss: JobLoss) -> &'static str {
    match loss {
        JobLoss::Missing => "missing",
        JobLoss::Finished(JobState::Completed) => "completed",
        JobLoss::Finished(JobState::DeadLettered) => "dead_lettered",
        JobLoss::Finished(_) => "finished",
        JobLoss::Requeued => "requeued",
        JobLoss::OwnerChanged => "owner_changed",
        JobLoss::FenceChanged => "fence_changed",
    }
}

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The answer of [`RunGuard::check`] (and
/// [`JobGuard::check`](super::JobGuard::check)) once ownership is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{id} is no longer owned here ({cause})")]
pub struct OwnershipLost {
    /// The lease (or job) id.
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
    run: Arc<HeldRun>,
}

impl Drop for GuardInner {
    fn drop(&mut self) {
        if self.shared.lose(&self.run, LossCause::Abandoned, false) {
            tracing::warn!(
                lease.id = %self.run.item.claim.id,
                "every guard of the run was dropped without complete(); the lease is left to expire"
            );
        }
    }
}

impl fmt::Debug for RunGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunGuard")
            .field("claim", self.claim())
            .field("phase", &self.run().phase())
            .finish()
    }
}

impl RunGuard {
    pub(crate) fn new(shared: Arc<Shared>, run: Arc<HeldRun>) -> Self {
        RunGuard {
            inner: Arc::new(GuardInner { shared, run }),
        }
    }

    fn run(&self) -> &HeldRun {
        &self.inner.run
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The lease id.
    pub fn id(&self) -> &str {
        &self.claim().id
    }

    /// The claim every fenced write presents.
    pub fn claim(&self) -> &Claim {
        &self.run().item.claim
    }

    /// The fencing token, for downstream resources that check it.
    pub fn fence(&self) -> u64 {
        self.claim().fence
    }

    /// A token cancelled the moment the run loses its lease (never on a
    /// normal completion).
    pub fn token(&self) -> CancellationToken {
        self.run().token.clone()
    }

    /// Why the run lost its lease, if it did.
    pub fn loss(&self) -> Option<LossCause> {
        self.run().loss()
    }

    /// The local instant until which the lease is confirmed (`None` without
    /// a lease). Conservative: the send instant of the last confirmed
    /// renewal plus the ttl.
    pub fn confirmed_deadline(&self) -> Option<Instant> {
        self.run().deadline()
    }

    /// Registers the task doing the work: it is aborted the moment the lease
    /// is lost. A task registered after the loss is aborted at once.
    pub fn register_task(&self, task: AbortHandle) {
        self.run().register_task(task);
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
        let claim = self.claim();
        let store = &self.shared().store;
        self.run()
            .check(self.shared(), || async move {
                let record = store.get(&claim.id).await?;
                Ok(rules::judge_renewal(record.as_ref(), claim).map_err(LossCause::Lost))
            })
            .await
    }

    /// The fenced `Pending → Running` write. The run keeps its lease whatever
    /// the answer, except when the store says a peer took over.
    pub async fn mark_running(&self) -> Result<LeaseRecord, WriteError> {
        let run = self.run();
        let shared = self.shared();
        let bound = {
            let state = run.state();
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
                .transition(self.claim(), &StatusChange::running()),
        )
        .await;
        match answer {
            Ok(Ok(Transition::Applied(record))) => {
                run.item.set_status(record.status);
                Ok(record)
            }
            Ok(Ok(Transition::Rejected(rejection))) => Err(self.rejected(rejection, false)),
            Ok(Err(error)) if !error.is_outcome_unknown() => Err(WriteError::Invalid(error)),
            Ok(Err(error)) => Err(WriteError::Unconfirmed(error)),
            Err(_) => Err(WriteError::Unconfirmed(super::held::timeout_error(
                "mark_running",
            ))),
        }
    }

    /// Ends the run with a fenced terminal (or `Interrupted`) write.
    ///
    /// Marks the lease *settling* first, so a renewal answering `Lost`
    /// because this very write committed is not taken for a loss. On
    /// success the keeper stops renewing. `Rejected(Stale)` answers
    /// [`WriteError::TakenOver`]. An `Err` (or no answer within the store
    /// timeout) is unconfirmed: the run is marked lost (fail closed) and
    /// reported so; the store row stays as the store has it. So is a call
    /// whose future is dropped (or whose store call panics) before the store
    /// answered: the keeper stops renewing the lease rather than keep a
    /// settling lease nobody settles.
    pub async fn complete(&self, change: StatusChange) -> Result<LeaseRecord, WriteError> {
        if change.status.is_active() {
            return Err(WriteError::NotFinal(change.status));
        }
        let shared = self.shared();
        let write = async {
            Ok(
                match shared.store.transition(self.claim(), &change).await? {
                    Transition::Applied(record) => Ok(record),
                    Transition::Rejected(rejection) => Err(rejection),
                },
            )
        };
        match self.run().settle(shared, "complete", write).await {
            Ok(Ok(record)) => Ok(record),
            Ok(Err(rejection)) => Err(self.rejected(rejection, true)),
            Err(SettleFailure::OwnershipLost(cause)) => Err(WriteError::OwnershipLost(cause)),
            Err(SettleFailure::AlreadySettled) => Err(WriteError::AlreadyCompleted),
            Err(SettleFailure::Invalid(error)) => Err(WriteError::Invalid(error)),
            Err(SettleFailure::Unconfirmed(error)) => Err(WriteError::Unconfirmed(error)),
        }
    }

    /// Handles a refused write: stale, missing or terminal records end the
    /// run; `NotAllowed` leaves it held.
    fn rejected(&self, rejection: TransitionRejection, settling: bool) -> WriteError {
        let run = self.run();
        let cause = match rejection {
            TransitionRejection::Stale => LossCause::TakenOver,
            TransitionRejection::Missing => LossCause::Lost(LossReason::Missing),
            TransitionRejection::Terminal(status) => LossCause::Lost(LossReason::Terminal(status)),
            _ => {
                if settling {
                    run.unsettle();
                }
                return WriteError::Rejected(rejection);
            }
        };
        self.shared().lose(run, cause, settling);
        match rejection {
            TransitionRejection::Stale => WriteError::TakenOver,
            other => WriteError::Rejected(other),
        }
    }
}

/// Lets work that checks ownership between items (`guard.check().await?`)
/// return the same error as its final write.
impl From<OwnershipLost> for WriteError {
    fn from(lost: OwnershipLost) -> Self {
        WriteError::OwnershipLost(lost.cause)
    }
}
