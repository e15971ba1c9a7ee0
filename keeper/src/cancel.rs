//! Cancelling a run wherever it is ([`Keeper::cancel_anywhere`]): stopped
//! here when this keeper holds it, taken over and failed when its owner is
//! gone, reported with a retry-after when its owner is alive.
//!
//! The remote path is a single [`claim_for_takeover`] that fails the record
//! with stop reason [`CANCELLED`] under the fence the takeover draws: the
//! store decides, in one atomic step, whether the owner's lease has lapsed
//! beyond grace, so there is no window between a read and a write in which
//! an owner's renewal, a peer's takeover or the run's own end could be
//! overwritten. Its refusal says what happened instead, and that is what the
//! caller hears.
//!
//! [`claim_for_takeover`]: tenure_lease_core::LeaseStore::claim_for_takeover

use std::time::Duration;

use super::held::Phase;
use super::loss::LossCause;
use super::{telemetry, Keeper, Shared, CANCELLED};
use crate::held::unknown_answer;
use tenure_lease_core::backend::validate;
use tenure_lease_core::Error;
use tenure_lease_core::{Claim, LeaseRecord, Status};
use tenure_lease_core::{NotTakenReason, Takeover, Transition, TransitionRejection};
use tenure_lease_core::{StatusChange, TakeoverAction, TakeoverRequest};

/// The answer of [`Keeper::cancel_anywhere`]: what happened to the run,
/// never more than did.
///
/// For an HTTP front: `Cancelled` and `CancelledByTakeover` are 200,
/// `LeaseValidElsewhere` is 409 with `Retry-After`, `NotCancellable` and
/// `Completing` are 409, `NotFound` is 404, `InvalidInput` is 400, `Unknown`
/// is 503 (retry).
// Answered once per call and matched at once, like the store's `Takeover`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[non_exhaustive]
pub enum CancelAnywhereOutcome {
    /// This keeper held the run: its token fired, its task was aborted, and
    /// the fenced stop was written (`Interrupted`, or `Failed` while it was
    /// pending, stop reason [`CANCELLED`]), as [`Keeper::cancel`] does.
    Cancelled {
        /// The record as written.
        record: LeaseRecord,
    },
    /// Another worker owned the run and its lease had lapsed beyond grace:
    /// this keeper took it over (a new, greater fence) and wrote it `Failed`
    /// with error and stop reason [`CANCELLED`], in the takeover's one
    /// atomic step. The dead owner's writes are refused from now on.
    CancelledByTakeover {
        /// The record as written: owner this keeper, the new fence,
        /// terminal.
        record: LeaseRecord,
    },
    /// A live owner holds the run (its lease, plus grace, is still valid;
    /// this includes a peer that adopted it meanwhile); nothing changed. Ask
    /// again after `retry_after`, e.g. HTTP 409 with `Retry-After`.
    LeaseValidElsewhere {
        /// Time until the owner's lease plus grace ends, by store time, as
        /// the store judged it in the refused takeover.
        retry_after: Duration,
    },
    /// Nothing to cancel: the record is terminal (it finished, or a peer
    /// failed it meanwhile) or `Interrupted` (already stopped, holding no
    /// scopes, run by nobody). Nothing changed.
    NotCancellable {
        /// The record's status.
        status: Status,
    },
    /// This keeper's run is writing its own terminal status right now
    /// ([`RunGuard::complete`](super::RunGuard::complete)); it is not
    /// stopped. Read the record for how it ended.
    Completing,
    /// No record has this id.
    NotFound,
    /// The id can name no record (empty, too long, control characters);
    /// nothing was read or written.
    InvalidInput {
        /// Names the bad field.
        error: Error,
    },
    /// The store could not say (an error, or no answer within
    /// [`KeeperConfig::store_timeout`](super::KeeperConfig::store_timeout)).
    /// A run held here is stopped anyway (fail closed). A takeover whose
    /// reply was lost may have been applied: call again; a repeated call
    /// answers `NotCancellable { status: Failed }` once it was, and the
    /// record then shows this keeper as owner and stop reason
    /// [`CANCELLED`].
    Unknown {
        /// What the store answered.
        error: Error,
    },
}

impl CancelAnywhereOutcome {
    /// Short name of the outcome, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            CancelAnywhereOutcome::Cancelled { .. } => "cancelled",
            CancelAnywhereOutcome::CancelledByTakeover { .. } => "cancelled_by_takeover",
            CancelAnywhereOutcome::LeaseValidElsewhere { .. } => "lease_valid_elsewhere",
            CancelAnywhereOutcome::NotCancellable { .. } => "not_cancellable",
            CancelAnywhereOutcome::Completing => "completing",
            CancelAnywhereOutcome::NotFound => "not_found",
            CancelAnywhereOutcome::InvalidInput { .. } => "invalid_input",
            CancelAnywhereOutcome::Unknown { .. } => "unknown",
        }
    }
}

/// Writes the cancellation of a run held here, which was `status`:
/// `Failed` while pending, else `Interrupted`, stop reason [`CANCELLED`].
pub(super) async fn write_cancel(
    shared: &Shared,
    claim: &Claim,
    status: Status,
) -> Result<Transition, Error> {
    let change = match status {
        Status::Pending => StatusChange::failed(CANCELLED).stop_reason(CANCELLED),
        _ => StatusChange::interrupted(CANCELLED),
    };
    let answer = shared
        .bounded("the cancel write", shared.store.transition(claim, &change))
        .await;
    if let Err(error) = &answer {
        tracing::warn!(lease.id = %claim.id, %error, "cancel write could not be confirmed; the local run is stopped");
    }
    answer
}

impl Keeper {
    /// Cancels run `id` wherever it runs, and says what happened
    /// ([`CancelAnywhereOutcome`]; contract §12):
    ///
    /// * held here: stopped and written as [`cancel`](Keeper::cancel) does
    ///   (`Cancelled`); if a peer took it over meanwhile, the local copy is
    ///   stopped and the record is then judged like any record held
    ///   elsewhere;
    /// * held elsewhere by an owner whose lease has lapsed beyond the
    ///   keeper's grace (a crashed worker): taken over with
    ///   [`claim_for_takeover`](tenure_lease_core::LeaseStore::claim_for_takeover) and
    ///   failed under the new fence (`CancelledByTakeover`);
    /// * held elsewhere by a live owner: `LeaseValidElsewhere` with the
    ///   time until its lease plus grace ends;
    /// * terminal or `Interrupted`: `NotCancellable`; no record:
    ///   `NotFound`; the store could not say: `Unknown`.
    ///
    /// Every race is answered by the store's own verdict, in the same
    /// atomic step as the write: an owner that renewed, a peer that adopted
    /// the run (`LeaseValidElsewhere`), a peer that failed it or a run that
    /// finished (`NotCancellable`), a record purged (`NotFound`). It never
    /// answers a cancellation it did not write.
    ///
    /// Unlike [`cancel`](Keeper::cancel), which only ever stops what this
    /// keeper holds, this one writes over another worker's record, so call
    /// it where cancelling a dead worker's run is what the caller asked for.
    /// It works during [`shutdown`](Keeper::shutdown) too: its takeover
    /// leaves nothing to hold. A takeover it wins is counted in
    /// `tenure.keeper.takeovers` with `tenure.takeover.action` `cancel`.
    ///
    /// # Cancellation
    ///
    /// Dropping the future after a held run was stopped leaves the run
    /// stopped and its cancel write possibly unsent (its lease then
    /// expires); dropping it during the takeover leaves the takeover
    /// applied or not, as for any dropped store call.
    pub async fn cancel_anywhere(&self, id: &str) -> CancelAnywhereOutcome {
        if let Err(error) = validate::lease_id(id) {
            return CancelAnywhereOutcome::InvalidInput { error };
        }
        let shared = &self.shared;
        if let Some(run) = shared.lookup(id) {
            match run.phase() {
                Phase::Held if shared.lose(&run, LossCause::Cancelled, false) => {
                    match write_cancel(shared, &run.item.claim, run.item.status()).await {
                        Ok(Transition::Applied(record)) => {
                            return CancelAnywhereOutcome::Cancelled { record }
                        }
                        // A peer took the run over: judge its record below.
                        Ok(Transition::Rejected(TransitionRejection::Stale)) => {}
                        Ok(Transition::Rejected(TransitionRejection::Missing)) => {
                            return CancelAnywhereOutcome::NotFound
                        }
                        Ok(Transition::Rejected(
                            TransitionRejection::Terminal(status)
                            | TransitionRejection::NotAllowed { from: status, .. },
                        )) => return CancelAnywhereOutcome::NotCancellable { status },
                        Ok(other) => {
                            return CancelAnywhereOutcome::Unknown {
                                error: unknown_answer("transition", &other),
                            }
                        }
                        Err(error) => return CancelAnywhereOutcome::Unknown { error },
                    }
                }
                Phase::Settling => return CancelAnywhereOutcome::Completing,
                Phase::Held | Phase::Finished | Phase::Lost(_) => {}
            }
        }
        self.cancel_by_takeover(id).await
    }

    async fn cancel_by_takeover(&self, id: &str) -> CancelAnywhereOutcome {
        let shared = &self.shared;
        let request = TakeoverRequest {
            id: id.to_owned(),
            claimer: shared.worker_id.clone(),
            grace: shared.config.grace,
            action: TakeoverAction::Fail {
                error: CANCELLED.to_owned(),
                stop_reason: Some(CANCELLED.to_owned()),
            },
        };
        let call = shared.store.claim_for_takeover(&request);
        match shared.bounded("the cancelling takeover", call).await {
            Ok(Takeover::Taken(record)) => {
                telemetry::takeover("cancel");
                tracing::info!(lease.id = %record.id, fence = record.fence, "cancelled a run held elsewhere by taking it over");
                CancelAnywhereOutcome::CancelledByTakeover { record }
            }
            Ok(Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after })) => {
                CancelAnywhereOutcome::LeaseValidElsewhere { retry_after }
            }
            Ok(Takeover::NotTaken(NotTakenReason::Terminal(status))) => {
                CancelAnywhereOutcome::NotCancellable { status }
            }
            Ok(Takeover::NotTaken(NotTakenReason::Interrupted)) => {
                CancelAnywhereOutcome::NotCancellable {
                    status: Status::Interrupted,
                }
            }
            Ok(Takeover::NotTaken(NotTakenReason::Missing)) => CancelAnywhereOutcome::NotFound,
            Ok(other) => CancelAnywhereOutcome::Unknown {
                error: unknown_answer("claim_for_takeover", &other),
            },
            Err(error) => {
                tracing::warn!(lease.id = %id, %error, "cancelling takeover could not be confirmed");
                CancelAnywhereOutcome::Unknown { error }
            }
        }
    }
}
