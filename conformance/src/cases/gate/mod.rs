//! Conformance cases: fence gates kept by a store
//! ([contract §7](tenure_lease_core::contract); §13 invariant 4 downstream).
//!
//! A gate is what makes a fence protect a resource outside the lease
//! store: once a newer owner's fence was accepted, an older one never is
//! again. The cases check the rule itself on fences a store hands out, that
//! resources do not share gates, that racing checks leave the highest fence
//! and answer truthfully, that gates outlive the store handle that wrote
//! them, that retention removes only gates unused past it, that a listing
//! names every gate kept in name order and pages exactly, and that bad
//! input changes nothing. Every case runs unchanged on manual and on real
//! (server) clocks; the one exact-instant case is skipped on the latter.

pub mod check;
pub mod input;
pub mod list;
pub mod race;
pub mod retention;

use tenure_lease_core::{FenceCheck, FenceStore, StaleFence};

use crate::ensure_eq;
use crate::harness::{Ctx, Failure};

/// Checks `fence` at `resource`, failing the case unless it is accepted and
/// the gate then reads it as the highest.
pub(crate) async fn accepted<S: FenceStore>(
    ctx: &Ctx<S>,
    resource: &str,
    fence: u64,
) -> Result<(), Failure> {
    ensure_eq!(
        ctx.store.check_fence(resource, fence).await?,
        FenceCheck::Accepted,
        "fence {fence} at {resource:?}"
    );
    ensure_eq!(
        ctx.store.highest_fence(resource).await?,
        Some(fence),
        "an accepted fence is the highest of {resource:?}"
    );
    Ok(())
}

/// Checks `fence` at `resource`, failing the case unless it is refused as
/// stale below `highest_seen` and the gate still reads `highest_seen`.
pub(crate) async fn refused<S: FenceStore>(
    ctx: &Ctx<S>,
    resource: &str,
    fence: u64,
    highest_seen: u64,
) -> Result<(), Failure> {
    ensure_eq!(
        ctx.store.check_fence(resource, fence).await?,
        FenceCheck::Stale(StaleFence {
            presented: fence,
            highest_seen,
        }),
        "fence {fence} at {resource:?}"
    );
    ensure_eq!(
        ctx.store.highest_fence(resource).await?,
        Some(highest_seen),
        "a refused fence changes nothing at {resource:?}"
    );
    Ok(())
}
