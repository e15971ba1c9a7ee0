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
//! leases alive at once. Halfway through the time an epoch can serve, the
//! next one is granted in the background, one grant at a time, so writes
//! seldom wait for one.
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
    buckets: Arc<Mutex<HashMap<i64, Bucket>>>,
    clock: Arc<dyn Clock>,
}

/// One etcd lease ttl: the epoch in use, and the lock one grant at a time
/// holds (writes that find the epoch running out wait for that grant
/// instead of each asking for one).
#[derive(Default)]
struct Bucket {
    epoch: Option<Epoch>,
    granting: Arc<tokio::sync::Mutex<()>>,
}

/// How often a grant is asked again when etcd answered it so late that the
/// lease has less than the ttl left, before the write answers `Unavailable`.
const GRANT_ATTEMPTS: u32 = 3;

impl Timers {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Timers {
            buckets: Arc::default(),
            clock,
        }
    }

    /// The etcd lease a liveness key for `ttl` is attached to now: one that
    /// etcd ends no sooner than `ttl` from now. Halfway through the time an
    /// epoch can serve, the next one is granted in the background, so
    /// writes seldom wait for a grant; a write that finds none left waits
    /// for the one grant under way.
    ///
    /// # Errors
    ///
    /// The store's errors, when a grant is needed and fails; `Unavailable`
    /// when etcd grants too slowly for the lease to cover `ttl`.
    pub(crate) async fn epoch_for(&self, cluster: &Cluster, ttl: Duration) -> Result<Epoch> {
        let asked = asked_seconds(ttl);
        let (epoch, granting) = self.look(asked, ttl);
        if let Some((epoch, left)) = epoch {
            let usable =
                Duration::from_secs(u64::try_from(asked).unwrap_or(u64::MAX)).saturating_sub(ttl);
            if left < ttl + usable / 2 {
                if let Ok(guard) = granting.try_lock_owned() {
                    let (timers, cluster) = (self.clone(), cluster.clone());
                    tokio::spawn(async move {
                        let _granting = guard;
                        if let Err(error) = timers.grant(&cluster, asked, ttl).await {
                            tracing::debug!(%error, "granting the next etcd lease ahead failed");
                        }
                    });
                }
            }
            return Ok(epoch);
        }
        let _granting = granting.lock().await;
        if let (Some((epoch, _)), _) = self.look(asked, ttl) {
            return Ok(epoch);
        }
        self.grant(cluster, asked, ttl).await
    }

    /// Grants an epoch lease of `asked` seconds that still has `ttl` to run
    /// when etcd's answer arrives, and makes it the bucket's.
    async fn grant(&self, cluster: &Cluster, asked: i64, ttl: Duration) -> Result<Epoch> {
        let mut waited = Duration::ZERO;
        for _ in 0..GRANT_ATTEMPTS {
            let before = Instant::now();
            let wall = self.clock.now();
            let granted = cluster.grant(asked).await?;
            let lasts = Duration::from_secs(u64::try_from(granted.ttl).unwrap_or(0));
            let ends_no_sooner = before.checked_add(lasts).ok_or_else(|| {
                tenure_lease_core::Error::unavailable(format!(
                    "etcd granted a lease of {} s, past what this host can count; nothing was \
                     written",
                    granted.ttl
                ))
            })?;
            let epoch = Epoch {
                id: granted.id,
                ends_no_sooner,
                ends_about: clock::add(wall, lasts),
            };
            waited = before.elapsed();
            if epoch.left().is_some_and(|left| left >= ttl) {
                self.install(asked, epoch);
                return Ok(epoch);
            }
        }
        Err(tenure_lease_core::Error::unavailable(format!(
            "etcd took {waited:?} to grant a lease of {asked} s, leaving less than the ttl of \
             {ttl:?}; nothing was written, retry"
        )))
    }

    /// The bucket's epoch if it still has `ttl` to run (and how long it
    /// has), and the bucket's grant lock.
    fn look(
        &self,
        asked: i64,
        ttl: Duration,
    ) -> (Option<(Epoch, Duration)>, Arc<tokio::sync::Mutex<()>>) {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(asked).or_default();
        let epoch = bucket
            .epoch
            .and_then(|epoch| epoch.left().map(|left| (epoch, left)))
            .filter(|(_, left)| *left >= ttl);
        (epoch, Arc::clone(&bucket.granting))
    }

    /// Makes `epoch` the one its bucket serves from, unless that one ends
    /// later; drops buckets whose epoch has ended and that no grant holds.
    fn install(&self, asked: i64, epoch: Epoch) {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        buckets.retain(|_, bucket| {
            bucket.epoch.is_some_and(|kept| kept.left().is_some())
                || Arc::strong_count(&bucket.granting) > 1
        });
        let bucket = buckets.entry(asked).or_default();
        if bucket
            .epoch
            .is_none_or(|kept| kept.ends_no_sooner < epoch.ends_no_sooner)
        {
            bucket.epoch = Some(epoch);
        }
    }

    /// Forgets the epoch of etcd lease `id`: etcd refused a write to it as
    /// ended (a key attached to it would not have been written).
    pub(crate) fn forget(&self, id: i64) {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        for bucket in buckets.values_mut() {
            if bucket.epoch.is_some_and(|epoch| epoch.id == id) {
                bucket.epoch = None;
            }
        }
    }
}

impl Epoch {
    /// How long etcd surely keeps it still; `None` once that is over.
    fn left(&self) -> Option<Duration> {
        self.ends_no_sooner
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
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
