//! What the keeper holds, whatever its kind: a run's lease or a job's claim.
//!
//! Both kinds live by the same rules (confirmed deadline, phases, loss
//! signalling, settling before the terminal write), so that part is one
//! type, [`HeldCore`], and one code path; only the store calls differ. A
//! [`Held`] pairs the core with its kind's item (the run's claim, or the
//! job's queue and claim), and the keeper's table holds both kinds as
//! [`Entry`].
//!
//! Each core's state sits behind a std mutex that is only ever held for a
//! few field reads and writes, never across an `.await`, so the heartbeat
//! can never be kept waiting by the work, nor the work by the heartbeat.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::job_guard::JobItem;
use super::loss::{LossCause, OwnershipLost};
use super::Shared;
use tenure_lease_core::{Claim, Status};
use tenure_lease_core::{Error, ErrorKind};

/// Where a held thing is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Held,
    /// The terminal write is in flight: heartbeat answers no longer stop
    /// the work.
    Settling,
    Finished,
    Lost(LossCause),
}

/// The table key: run ids and job ids are separate namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum HeldKey {
    Run(String),
    Job(String),
}

impl HeldKey {
    pub(crate) fn id(&self) -> &str {
        match self {
            HeldKey::Run(id) | HeldKey::Job(id) => id,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            HeldKey::Run(_) => "run",
            HeldKey::Job(_) => "job",
        }
    }
}

impl fmt::Display for HeldKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind(), self.id())
    }
}

#[derive(Debug)]
pub(crate) struct CoreState {
    pub(crate) phase: Phase,
    /// The instant the last confirmed renewal (or the claim) was sent plus
    /// the ttl; `None` when there is no lease (single-worker mode).
    pub(crate) deadline: Option<Instant>,
    /// The last time the store confirmed ownership (renewal or check read),
    /// or `check()` claimed the right to read it.
    pub(crate) last_confirmed: Instant,
    pub(crate) task: Option<AbortHandle>,
}

/// The kind-independent part of a held run or job.
#[derive(Debug)]
pub(crate) struct HeldCore {
    pub(crate) key: HeldKey,
    pub(crate) fence: u64,
    pub(crate) token: CancellationToken,
    /// A renewal is in flight; the next beat skips it.
    pub(crate) renewing: AtomicBool,
    state: Mutex<CoreState>,
}

/// What the answer to a successful renewal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirmation {
    Extended {
        time_left: Duration,
    },
    /// It landed after the confirmed deadline: nothing is revived.
    Late,
    /// The work already finished or stopped.
    Ignored,
}

impl HeldCore {
    pub(crate) fn new(key: HeldKey, fence: u64, deadline: Option<Instant>, now: Instant) -> Self {
        HeldCore {
            key,
            fence,
            token: CancellationToken::new(),
            renewing: AtomicBool::new(false),
            state: Mutex::new(CoreState {
                phase: Phase::Held,
                deadline,
                last_confirmed: now,
                task: None,
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, CoreState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn phase(&self) -> Phase {
        self.state().phase
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.state().deadline
    }

    pub(crate) fn loss(&self) -> Option<LossCause> {
        match self.phase() {
            Phase::Lost(cause) => Some(cause),
            _ => None,
        }
    }

    /// A renewal sent while it was still ours answered `Renewed`.
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

    /// Registers the task doing the work: aborted at the loss, or at once
    /// when the loss already happened.
    pub(crate) fn register_task(&self, task: AbortHandle) {
        let mut state = self.state();
        if matches!(state.phase, Phase::Lost(_)) {
            drop(state);
            task.abort();
        } else {
            state.task = Some(task);
        }
    }

    fn lost(&self, cause: LossCause) -> OwnershipLost {
        OwnershipLost {
            id: self.key.id().to_owned(),
            cause,
        }
    }

    fn verdict(&self) -> Result<(), OwnershipLost> {
        match self.loss() {
            Some(cause) => Err(self.lost(cause)),
            None => Ok(()),
        }
    }

    /// The work's own ownership check, shared by both kinds: reads the store
    /// (through `read`, which answers the store's verdict) at most every
    /// `check_interval`, bounded by the confirmed deadline; a read that fails
    /// is not evidence of loss, the confirmed deadline decides.
    pub(crate) async fn check<F, Fut>(&self, shared: &Shared, read: F) -> Result<(), OwnershipLost>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Result<(), LossCause>, Error>>,
    {
        let now = Instant::now();
        let read_bound = {
            let mut state = self.state();
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
            shared.lose(self, LossCause::DeadlinePassed, false);
            return self.verdict();
        };
        match tokio::time::timeout_at(read_bound, read()).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(cause))) => {
                shared.lose(self, cause, false);
            }
            Ok(Err(error)) => {
                tracing::debug!(held = %self.key, %error, "check could not read the store; answering from the last renewal");
            }
            Err(_) => {
                tracing::debug!(held = %self.key, "check read timed out; answering from the last renewal");
            }
        }
        if self
            .deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
        {
            shared.lose(self, LossCause::DeadlinePassed, false);
        }
        self.verdict()
    }

    /// The terminal write, shared by both kinds: marks the core settling,
    /// so a renewal answering "lost" because this very write committed is
    /// not taken for a loss, then makes `write` under the store timeout.
    ///
    /// `Ok(Ok(_))`: applied, the keeper stops holding it. `Ok(Err(refusal))`:
    /// the store refused; the core stays settling and the caller decides.
    /// An unconfirmed write (an `Err` that may have happened, or no answer)
    /// loses ownership (fail closed); an invalid one goes back to held. So
    /// does a settle whose future is dropped before the write answered (the
    /// caller gave up on it, or the store call panicked): the write may have
    /// happened, and a settling lease nobody settles must not be renewed
    /// for ever.
    pub(crate) async fn settle<T, R, Fut>(
        &self,
        shared: &Shared,
        operation: &'static str,
        write: Fut,
    ) -> Result<Result<T, R>, SettleFailure>
    where
        Fut: Future<Output = Result<Result<T, R>, Error>>,
    {
        {
            let mut state = self.state();
            match state.phase {
                Phase::Held => state.phase = Phase::Settling,
                Phase::Lost(cause) => return Err(SettleFailure::OwnershipLost(cause)),
                Phase::Settling | Phase::Finished => return Err(SettleFailure::AlreadySettled),
            }
        }
        let unanswered = UnansweredSettle { core: self, shared };
        let answer = tokio::time::timeout(shared.config.store_timeout, write).await;
        std::mem::forget(unanswered);
        match answer {
            Ok(Ok(Ok(done))) => {
                self.state().phase = Phase::Finished;
                shared.release(self);
                Ok(Ok(done))
            }
            Ok(Ok(Err(refusal))) => Ok(Err(refusal)),
            Ok(Err(error)) if !error.is_outcome_unknown() => {
                self.state().phase = Phase::Held;
                Err(SettleFailure::Invalid(error))
            }
            Ok(Err(error)) => {
                shared.lose(self, LossCause::UnconfirmedWrite, true);
                Err(SettleFailure::Unconfirmed(error))
            }
            Err(_) => {
                shared.lose(self, LossCause::UnconfirmedWrite, true);
                Err(SettleFailure::Unconfirmed(timeout_error(operation)))
            }
        }
    }

    /// Undoes `settle`'s mark after a refusal that leaves it held.
    pub(crate) fn unsettle(&self) {
        let mut state = self.state();
        if state.phase == Phase::Settling {
            state.phase = Phase::Held;
        }
    }
}

/// Armed while a settle's write is in flight: dropped there (the settle
/// future dropped or unwinding), it fails the settle closed.
struct UnansweredSettle<'a> {
    core: &'a HeldCore,
    shared: &'a Shared,
}

impl Drop for UnansweredSettle<'_> {
    fn drop(&mut self) {
        self.shared
            .lose(self.core, LossCause::UnconfirmedWrite, true);
    }
}

/// Why [`HeldCore::settle`] wrote nothing, or could not say.
#[derive(Debug)]
pub(crate) enum SettleFailure {
    OwnershipLost(LossCause),
    AlreadySettled,
    Invalid(Error),
    Unconfirmed(Error),
}

/// An answer of a variant this keeper does not know (a newer
/// `tenure-lease-core` added it): `Incompatible`, so the outcome counts as
/// unknown and the keeper fails closed, as for any unconfirmed write.
pub(crate) fn unknown_answer(operation: &str, answer: &impl std::fmt::Debug) -> Error {
    Error::new(
        ErrorKind::Incompatible,
        format!(
            "{operation} answered {answer:?}, which this keeper does not know: use the \
             tenure-keeper release that matches tenure-lease-core"
        ),
    )
}

/// A store call the keeper stopped waiting for: the one wording of every
/// time limit the keeper puts on a call.
pub(crate) fn timeout_error(operation: &str) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "{operation} got no answer within the keeper's bound (its store timeout, or the \
             lease's confirmed deadline); its outcome is unknown (call again, or raise \
             KeeperConfig::store_timeout)"
        ),
    )
}

/// A held run or job: the shared core plus its kind's item.
#[derive(Debug)]
pub(crate) struct Held<T> {
    pub(crate) item: T,
    core: HeldCore,
}

impl<T> Held<T> {
    pub(crate) fn new(item: T, core: HeldCore) -> Self {
        Held { item, core }
    }
}

impl<T> Deref for Held<T> {
    type Target = HeldCore;

    fn deref(&self) -> &HeldCore {
        &self.core
    }
}

/// A run's item: its claim and the status the keeper last wrote.
#[derive(Debug)]
pub(crate) struct RunItem {
    pub(crate) claim: Claim,
    pub(crate) status: Mutex<Status>,
}

impl RunItem {
    pub(crate) fn status(&self) -> Status {
        *self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn set_status(&self, status: Status) {
        *self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = status;
    }
}

pub(crate) type HeldRun = Held<RunItem>;
pub(crate) type HeldJob = Held<JobItem>;

/// One row of the keeper's table.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    Run(Arc<HeldRun>),
    Job(Arc<HeldJob>),
}

impl Entry {
    pub(crate) fn core(&self) -> &HeldCore {
        match self {
            Entry::Run(run) => run,
            Entry::Job(job) => job,
        }
    }
}
