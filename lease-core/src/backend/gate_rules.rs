//! The gates' decisions as pure functions ([contract §7](crate::contract)):
//! what [`FenceGate`](crate::FenceGate) and the memory and SQLite stores
//! decide in Rust, and PostgreSQL's statement and Redis's scripts mirror.

use std::time::Duration;

use crate::backend::validate::MAX_GATE_FENCE;
use crate::clock::{self, Timestamp};
use crate::error::{Error, Result};
use crate::fence::{FenceCheck, StaleFence};

/// The answer to `presented` at a gate whose highest accepted fence is
/// `highest` (`None`: no gate yet): stale when lower, accepted otherwise,
/// an equal fence included.
pub fn judge_fence(highest: Option<u64>, presented: u64) -> FenceCheck {
    match highest {
        Some(highest_seen) if highest_seen > presented => FenceCheck::Stale(StaleFence {
            presented,
            highest_seen,
        }),
        _ => FenceCheck::Accepted,
    }
}

/// The fence stored on the gate of `resource`, checked: 1 to
/// [`MAX_GATE_FENCE`], else `Corrupt`.
pub fn stored_gate_fence(resource: &str, stored: i64) -> Result<u64> {
    u64::try_from(stored)
        .ok()
        .filter(|fence| (1..=MAX_GATE_FENCE).contains(fence))
        .ok_or_else(|| undecodable_gate(resource, &format!("fence {stored} is out of range")))
}

/// The answer to `presented` from the fence a check statement left stored
/// (the greater of the two, as the statement keeps it): `Corrupt` when the
/// stored fence is below the one presented, which no honest check leaves.
pub fn judge_stored(resource: &str, stored: u64, presented: u64) -> Result<FenceCheck> {
    if stored < presented {
        return Err(undecodable_gate(
            resource,
            "the gate answered a fence below the one presented",
        ));
    }
    Ok(judge_fence(Some(stored), presented))
}

/// `Corrupt`: the stored gate of `resource` cannot be decoded, for `why`.
/// Worded for any layout (a table, keys, a file), so every backend answers
/// damage to a gate alike.
pub fn undecodable_gate(resource: &str, why: &str) -> Error {
    Error::corrupt(format!(
        "the stored fence gate of {resource:?} cannot be decoded ({why}); \
         nothing was written over it, and it needs an operator's attention"
    ))
}

/// Whether a gate last accepted at `checked_at` is old enough for
/// `purge_fences(unused_for)` at `now`: at least `unused_for` ago, exactly
/// that age included.
pub fn gate_purgeable(checked_at: Timestamp, unused_for: Duration, now: Timestamp) -> bool {
    !clock::is_before_end(checked_at, unused_for, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_fences_are_stale_equal_and_higher_accepted() {
        assert_eq!(judge_fence(None, 1), FenceCheck::Accepted);
        assert_eq!(judge_fence(Some(5), 5), FenceCheck::Accepted);
        assert_eq!(judge_fence(Some(5), 6), FenceCheck::Accepted);
        assert_eq!(
            judge_fence(Some(5), 4),
            FenceCheck::Stale(StaleFence {
                presented: 4,
                highest_seen: 5
            })
        );
    }

    #[test]
    fn a_gate_exactly_at_retention_is_purgeable() {
        let checked = clock::from_micros(1_700_000_000_000_000).expect("an instant");
        let retention = Duration::from_secs(60);
        let at = clock::add(checked, retention);
        assert!(gate_purgeable(checked, retention, at));
        assert!(!gate_purgeable(
            checked,
            retention,
            at - chrono::Duration::microseconds(1)
        ));
    }
}
