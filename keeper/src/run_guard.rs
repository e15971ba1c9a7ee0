//! The [`RunGuard`] the work of a run holds, and the errors of its writes.
//! The state behind it is [`HeldCore`](super::held::HeldCore), shared with
//! job claims; the loss types are in [`loss`](super::loss).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::accessors::guard_accessors;
use super::held::{HeldRun, Phase, SettleFailure};
use super::loss::{LossCause, OwnershipLost};
use super::{heartbeat, Shared};
use crate::held::unknown_answer;
use tenure_lease_core::backend::rules;
use tenure_lease_core::StatusChange;
use tenure_lease_core::{Claim, LeaseRecord, Status};
use tenure_lease_core::{Error, ErrorKind};
use tenure_lease_core::{LossReason, Transition, TransitionRejection};

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
            .field("phase", &self.held().phase())
            .finish()
    }
}

guard_accessors!(RunGuard, Claim, "run");

impl RunGuard {
    pub(crate) fn new(shared: Arc<Shared>, run: Arc<HeldRun>) -> Self {
        RunGuard {
            inner: Arc::new(GuardInner { shared, run }),
        }
    }

    fn held(&self) -> &HeldRun {
        &self.inner.run
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
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
        self.held()
            .check(self.shared(), || async move {
                let record = store.get(&claim.id).await?;
                Ok(rules::judge_renewal(record.as_ref(), claim).map_err(LossCause::Lost))
            })
            .await
    }

    /// Reports `progress` with a renewal of the run's lease, in one fenced
    /// write ([`LeaseStore::renew_with_progress`](tenure_lease_core::LeaseStore::renew_with_progress)):
    /// others read it as [`LeaseRecord::progress`] (`tenure show` prints
    /// it) until the next report. The answer counts as a heartbeat: a
    /// renewal extends the confirmed deadline, a loss ends the run.
    ///
    /// # Errors
    ///
    /// * [`WriteError::OwnershipLost`] when the run had lost its lease
    ///   (nothing was sent) or the store answered that it did (the run is
    ///   now lost);
    /// * [`WriteError::Invalid`] for a `null` or oversized progress, or a
    ///   keeper whose leases have no ttl; the run keeps its lease;
    /// * [`WriteError::Unconfirmed`] when the store could not say; the run
    ///   keeps its lease until its confirmed deadline, as after a failed
    ///   heartbeat.
    pub async fn report_progress(&self, progress: &serde_json::Value) -> Result<(), WriteError> {
        if let Some(cause) = self.loss() {
            return Err(WriteError::OwnershipLost(cause));
        }
        let shared = self.shared();
        let report = heartbeat::report_progress(
            shared,
            self.held(),
            progress,
            "renew_with_progress",
            |ttl| async move {
                let outcome = shared
                    .store
                    .renew_with_progress(self.claim(), ttl, progress)
                    .await?;
                heartbeat::run_answer(outcome)
            },
        );
        match report.await {
            Ok(None) => Ok(()),
            Ok(Some(cause)) => Err(WriteError::OwnershipLost(cause)),
            Err(error) if error.kind() == ErrorKind::InvalidInput => {
                Err(WriteError::Invalid(error))
            }
            Err(error) => Err(WriteError::Unconfirmed(error)),
        }
    }

    /// The fenced `Pending → Running` write. The run keeps its lease whatever
    /// the answer, except when the store says a peer took over.
    pub async fn mark_running(&self) -> Result<LeaseRecord, WriteError> {
        let run = self.held();
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
            Ok(Ok(other)) => Err(WriteError::Unconfirmed(unknown_answer(
                "mark_running",
                &other,
            ))),
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
                    other => return Err(unknown_answer("complete", &other)),
                },
            )
        };
        match self.held().settle(shared, "complete", write).await {
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
        let run = self.held();
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

/// `?` from a run's write into a function answering [`tenure_lease_core::Result`]: a lost
/// or taken-over run is [`ErrorKind::OwnershipLost`], a store that could not
/// confirm keeps its kind, a misuse is [`ErrorKind::InvalidInput`]. The
/// `WriteError` stays the source ([`Error::downcast_source`]).
impl From<WriteError> for Error {
    fn from(error: WriteError) -> Self {
        let kind = match &error {
            WriteError::OwnershipLost(_)
            | WriteError::TakenOver
            | WriteError::Rejected(
                TransitionRejection::Missing
                | TransitionRejection::Terminal(_)
                | TransitionRejection::Stale,
            ) => ErrorKind::OwnershipLost,
            WriteError::Unconfirmed(store) | WriteError::Invalid(store) => store.kind(),
            WriteError::Rejected(_) | WriteError::NotFinal(_) | WriteError::AlreadyCompleted => {
                ErrorKind::InvalidInput
            }
        };
        Error::converted(kind, error)
    }
}
