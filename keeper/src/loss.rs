//! Why held work stops: the loss causes and the error both kinds of guard
//! ([`RunGuard`](super::RunGuard), [`JobGuard`](super::JobGuard)) answer
//! once ownership is gone.

use std::fmt;

use tenure_lease_core::queue::JobLoss;
use tenure_lease_core::LossReason;
use tenure_lease_core::{Error, ErrorKind};

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
            LossCause::JobLost(loss) => loss.label(),
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

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The answer of [`RunGuard::check`](super::RunGuard::check) (and
/// [`JobGuard::check`](super::JobGuard::check)) once ownership is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{id} is no longer owned here ({cause})")]
pub struct OwnershipLost {
    /// The lease (or job) id.
    pub id: String,
    /// Why.
    pub cause: LossCause,
}

/// `?` from [`check`](super::RunGuard::check) into a function answering
/// [`tenure_lease_core::Result`]: [`ErrorKind::OwnershipLost`], with this as the source.
impl From<OwnershipLost> for Error {
    fn from(lost: OwnershipLost) -> Self {
        Error::converted(ErrorKind::OwnershipLost, lost)
    }
}
