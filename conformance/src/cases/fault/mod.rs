//! Conformance cases: the store seen through injected faults and damage
//! ([contract §10](tenure_lease_core::contract)).
//!
//! The other cases treat every `Err` as a failure, so they cannot check what
//! the contract promises when the store could not say: that an `Err` is
//! never taken for an outcome, that a write whose reply was lost is resolved
//! by reading or retrying it, that a call cut off before it reached the
//! store changed nothing, and that a record the store cannot decode is
//! reported, never served wrong. These cases make such errors happen on any
//! backend by wrapping the case's store in the [`Faults`] layer (and
//! [`Timeout`](tenure_lease_core::layer::Timeout) where a hang must end),
//! and, where the factory can, by damaging stored records behind the
//! store's back ([`crate::damage`]).
//!
//! * [`errors`]: the lease side and the keeper;
//! * [`queue`]: the job queue;
//! * [`damage`]: damaged records and jobs.

use std::sync::Arc;

use tenure_lease_core::layer::{Faults, LayerExt, Layered};
use tenure_lease_core::{ErrorKind, LeaseStore};

use crate::harness::{Ctx, Failure};

pub mod damage;
pub mod errors;
pub mod queue;

/// The case's store behind a [`Faults`] layer, shareable like the store.
pub type Faulty<S> = Arc<Layered<Arc<S>, Faults>>;

/// The case's store behind a fresh [`Faults`] layer with no rules yet.
pub fn faulty<S: LeaseStore>(ctx: &Ctx<S>) -> Faulty<S> {
    Arc::new(Arc::clone(&ctx.store).layer(Faults::new()))
}

/// Fails the case unless `answer` is an error whose outcome is unknown and
/// which may be retried, as every injected loss or outage must be; `what`
/// names the call.
pub fn expect_unknown<T: std::fmt::Debug>(
    answer: tenure_lease_core::Result<T>,
    what: &str,
) -> Result<(), Failure> {
    match answer {
        Err(error) if error.is_retryable() && error.is_outcome_unknown() => Ok(()),
        other => Err(Failure(format!(
            "{what}: expected a retryable error of unknown outcome, got {other:?}"
        ))),
    }
}

/// Fails the case unless `answer` is an error of `kind`; `what` names the
/// call.
pub fn expect_kind<T: std::fmt::Debug>(
    answer: tenure_lease_core::Result<T>,
    kind: ErrorKind,
    what: &str,
) -> Result<(), Failure> {
    match answer {
        Err(error) if error.kind() == kind => Ok(()),
        other => Err(Failure(format!("{what}: expected {kind}, got {other:?}"))),
    }
}
