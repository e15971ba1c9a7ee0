//! Fences checked downstream ([contract §7](crate::contract)).
//!
//! A fencing token protects nothing unless the resource being written checks
//! it. [`FenceGate`] is that check for resources that live in this process: it
//! remembers the highest fence seen per resource and refuses any write that
//! carries a lower one, so a paused or partitioned stale owner cannot corrupt
//! a resource after it resumes.

use std::collections::HashMap;
use std::sync::Mutex;

/// A write refused by a [`FenceGate`]: its fence is older than one already seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fence {presented} for this resource: fence {highest_seen} already wrote; the presenting worker no longer owns the lease and must stop")]
pub struct StaleFence {
    /// The fence the refused write carried.
    pub presented: u64,
    /// The highest fence the gate has accepted for the resource.
    pub highest_seen: u64,
}

/// Remembers the highest fence seen per resource and refuses lower ones.
///
/// ```
/// use tenure_lease_core::FenceGate;
///
/// let gate = FenceGate::new();
/// gate.admit("report.csv", 7).unwrap();
/// gate.admit("report.csv", 7).unwrap(); // the same owner may write again
/// assert!(gate.admit("report.csv", 6).is_err()); // a stale owner may not
/// gate.admit("report.csv", 9).unwrap(); // a newer owner may
/// ```
#[derive(Debug, Default)]
pub struct FenceGate {
    highest: Mutex<HashMap<String, u64>>,
}

impl FenceGate {
    /// An empty gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts a write to `resource` carrying `fence` when no higher fence was
    /// seen for it, and remembers `fence`. Check and record are one atomic
    /// step; do the write only after `Ok`.
    pub fn admit(&self, resource: &str, fence: u64) -> Result<(), StaleFence> {
        let mut highest = self
            .highest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match highest.get_mut(resource) {
            Some(seen) if *seen > fence => Err(StaleFence {
                presented: fence,
                highest_seen: *seen,
            }),
            Some(seen) => {
                *seen = fence;
                Ok(())
            }
            None => {
                highest.insert(resource.to_owned(), fence);
                Ok(())
            }
        }
    }

    /// The highest fence accepted for `resource`, if any.
    pub fn highest_seen(&self, resource: &str) -> Option<u64> {
        self.highest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(resource)
            .copied()
    }
}
