//! Expiry on etcd's own clock: the liveness timers.
//!
//! etcd has no clock to read, but it does end leases of its own: an etcd
//! lease is granted for whole seconds, counted by the cluster's leader, and
//! every key attached to it is deleted when it ends. So beside each active
//! tenure lease (and each claimed job) the store keeps a **liveness key**
//! attached to an etcd lease that ends no sooner than the tenure lease's
//! ttl after the write was sent: a holder's lease is valid while etcd keeps
//! that key, whatever any caller's clock says, and a takeover or a reap
//! commits only on the key's absence, compared in its transaction. A host
//! whose clock runs ahead therefore cannot end a lease early; clocks only
//! decide what the records' timestamps say.
//!
//! etcd users who attach tens of thousands of keys to per-key leases, kept
//! alive one by one, meet keep-alive storms. Here no etcd lease is ever kept
//! alive: a store grants one etcd lease per ttl (in whole seconds) per
//! *epoch*, a few seconds long, and attaches every liveness key written in
//! that epoch to it; a renewal re-attaches its key to the current epoch's
//! lease in the renewal's own transaction, and old etcd leases simply end.
//! A store holding a million leases of one ttl keeps a handful of etcd
//! leases alive at once.
//!
//! An etcd lease granted for `G` seconds at local instant `g` ends no sooner
//! than `g + G` (the leader starts counting once it has applied the grant,
//! after `g`; a leader change restarts the count). A write wanting a ttl `t`
//! takes the epoch whose lease still has `t` to run when the write is
//! about to be sent, so its key outlives the holder's deadline. The lease
//! asked for is `t` rounded up to whole seconds plus a slack (an eighth of
//! it, at least one second) that decides how often a new one is granted: a
//! key outlives its ttl by at most that rounding, the slack, and the half
//! second etcd's leader takes to notice an ended lease, unless a leader
//! change restarts the count. etcd raises a ttl below its minimum (about
//! two seconds with default election settings) to that minimum.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tenure_lease_core::{clock, Clock, Result, Timestamp};

use crate::kv::Cluster;

/// How often etcd's leader looks for ended leases: a liveness key may
/// outlive its etcd lease by this much.
pub(crate) const EXPIRY_CHECK: Duration = Duration::from_millis(500);

/// An etcd lease that liveness keys are attached to, and when it ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Epoch {
    /// etcd's lease id.
    pub(crate) id: i64,
    /// The local instant before which etcd cannot end it.
    ends_no_sooner: Instant,
    /// When it should end by the caller's clock: the hint a liveness key
    /// carries, for `retry_after`.
    pub(crate) ends_about: Timestamp,
}

/// The epochs of one store, one per etcd lease ttl asked for.
#[derive(Clone)]
pub(crate) struct Timers {
    epochs: Arc<Mutex<HashMap<i64, Epoch>>>,
    clock: Arc<dyn Clock>,
}

impl Timers {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Timers {
            epochs: Arc::default(),
            clock,
        }
    }

    /// The etcd lease a liveness key for `ttl` is attached to now: one that
    /// etcd ends no sooner than `ttl` from now; granted when the current
    /// one has too little left.
    ///
    /// # Errors
    ///
    /// The store's errors, when a grant is needed and fails.
    pub(crate) async fn epoch_for(&self, cluster: &Cluster, ttl: Duration) -> Result<Epoch> {
        let asked = asked_seconds(ttl);
        if let Some(epoch) = self.current(asked, ttl) {
            return Ok(epoch);
        }
        let before = Instant::now();
        let wall = self.clock.now();
        let granted = cluster.grant(asked).await?;
        let lasts = Duration::from_secs(u64::try_from(granted.ttl).unwrap_or(0));
        let epoch = Epoch {
            id: granted.id,
            ends_no_sooner: before + lasts,
            ends_about: clock::add(wall, lasts),
        };
        let mut epochs = self.epochs.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        epochs.retain(|_, kept| kept.ends_no_sooner > now);
        epochs.insert(asked, epoch);
        Ok(epoch)
    }

    /// Forgets the epoch of etcd lease `id`: etcd refused a write to it as
    /// ended (a key attached to it would not have been written).
    pub(crate) fn forget(&self, id: i64) {
        self.epochs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, epoch| epoch.id != id);
    }

    fn current(&self, asked: i64, ttl: Duration) -> Option<Epoch> {
        let epochs = self.epochs.lock().unwrap_or_else(PoisonError::into_inner);
        epochs
            .get(&asked)
            .filter(|epoch| {
                epoch
                    .ends_no_sooner
                    .checked_duration_since(Instant::now())
                    .is_some_and(|left| left >= ttl)
            })
            .copied()
    }
}

/// The etcd lease ttl asked for liveness keys of `ttl`: `ttl` rounded up to
/// whole seconds, plus the epoch's slack.
pub(crate) fn asked_seconds(ttl: Duration) -> i64 {
    let whole = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    let slack = (whole / 8).max(1);
    i64::try_from(whole.saturating_add(slack)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_lease_covers_the_ttl_rounded_up_plus_an_eighth_at_least_a_second() {
        assert_eq!(asked_seconds(Duration::from_millis(1)), 2);
        assert_eq!(asked_seconds(Duration::from_secs(1)), 2);
        assert_eq!(asked_seconds(Duration::from_millis(1500)), 3);
        assert_eq!(asked_seconds(Duration::from_secs(30)), 33);
        assert_eq!(asked_seconds(Duration::from_secs(60)), 67);
        assert_eq!(asked_seconds(Duration::MAX), i64::MAX);
    }
}
