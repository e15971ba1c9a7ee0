//! How a [`Keeper`](super::Keeper) behaves: lease length, beat, grace,
//! reconciler, batching, and the worker id it claims leases under.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::validate;
use crate::error::{Error, Result};

/// What the reconciler does with an orphan it wins.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReconcileAction {
    /// Mark it `Failed` with this error text.
    Fail {
        /// Error text stored on the record.
        error: String,
    },
    /// Resume it here: the keeper holds and renews it, and the recovery
    /// callback receives a [`RunGuard`](super::RunGuard) for it.
    Adopt,
}

impl Default for ReconcileAction {
    fn default() -> Self {
        ReconcileAction::Fail {
            error: "orphaned: owner's lease expired".to_owned(),
        }
    }
}

/// Settings of a [`Keeper`](super::Keeper).
///
/// Build one with [`KeeperConfig::with_ttl`] (leases renewed by a heartbeat)
/// or [`KeeperConfig::single_worker`] (no lease at all), then the chained
/// setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeeperConfig {
    /// Lease length; `None` is single-worker mode: records carry no expiry and
    /// nothing is renewed.
    pub ttl: Option<Duration>,
    /// Time between heartbeats; `None` means `ttl / 3`.
    pub renew_interval: Option<Duration>,
    /// How long past its expiry another worker's lease still counts as valid
    /// (admission, reconciler, `cancel`'s retry-after).
    pub grace: Duration,
    /// Time between reconciler passes.
    pub reconcile_interval: Duration,
    /// Whether the reconciler runs by itself (at start, then every
    /// `reconcile_interval`). When false, only
    /// [`Keeper::reconcile_now`](super::Keeper::reconcile_now) runs a pass.
    pub auto_reconcile: bool,
    /// What the reconciler does with the orphans it wins.
    pub reconcile_action: ReconcileAction,
    /// Most orphans one reconciler pass looks at.
    pub reconcile_limit: usize,
    /// Most claims per `renew_many` call.
    pub renew_batch_size: usize,
    /// A beat renewing at most this many leases renews each with its own
    /// `renew` call, so a slow or hung claim delays nobody else; larger beats
    /// use `renew_many` in chunks of `renew_batch_size`.
    pub solo_renewal_limit: usize,
    /// Bound on writes and reads that have no lease deadline to bound them
    /// (terminal writes, scans, takeovers, `cancel`'s reads).
    pub store_timeout: Duration,
    /// The worker id leases are claimed under; `None` generates
    /// `hostname:pid:random`, unique per keeper.
    pub worker_id: Option<String>,
}

impl KeeperConfig {
    /// Leases of `ttl`, renewed every `ttl / 3`, no grace, reconciler every
    /// `ttl` failing orphans.
    pub fn with_ttl(ttl: Duration) -> Self {
        KeeperConfig {
            ttl: Some(ttl),
            renew_interval: None,
            grace: Duration::ZERO,
            reconcile_interval: ttl,
            auto_reconcile: true,
            reconcile_action: ReconcileAction::default(),
            reconcile_limit: 100,
            renew_batch_size: 1000,
            solo_renewal_limit: 32,
            store_timeout: ttl.max(Duration::from_secs(1)),
            worker_id: None,
        }
    }

    /// Single-worker mode: no lease, no heartbeat; the reconciler (at start,
    /// then every minute) adopts the records a crashed predecessor left,
    /// since records without a lease are always reclaimable.
    pub fn single_worker() -> Self {
        KeeperConfig {
            ttl: None,
            reconcile_interval: Duration::from_secs(60),
            reconcile_action: ReconcileAction::Adopt,
            store_timeout: Duration::from_secs(30),
            ..Self::with_ttl(Duration::from_secs(30))
        }
    }

    /// Sets the beat.
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// Sets the grace.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets the time between reconciler passes.
    pub fn reconcile_interval(mut self, interval: Duration) -> Self {
        self.reconcile_interval = interval;
        self
    }

    /// Turns the self-running reconciler on or off.
    pub fn auto_reconcile(mut self, enabled: bool) -> Self {
        self.auto_reconcile = enabled;
        self
    }

    /// Sets what the reconciler does with orphans.
    pub fn reconcile_action(mut self, action: ReconcileAction) -> Self {
        self.reconcile_action = action;
        self
    }

    /// Sets the most orphans one pass looks at.
    pub fn reconcile_limit(mut self, limit: usize) -> Self {
        self.reconcile_limit = limit;
        self
    }

    /// Sets the most claims per `renew_many` call.
    pub fn renew_batch_size(mut self, size: usize) -> Self {
        self.renew_batch_size = size;
        self
    }

    /// Sets the beat size up to which leases are renewed one call each.
    pub fn solo_renewal_limit(mut self, limit: usize) -> Self {
        self.solo_renewal_limit = limit;
        self
    }

    /// Sets the bound on store calls that have no lease deadline.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Sets the worker id.
    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.worker_id = Some(worker_id.into());
        self
    }

    /// The beat: the configured interval, else `ttl / 3`.
    pub fn effective_renew_interval(&self) -> Option<Duration> {
        self.ttl.map(|ttl| self.renew_interval.unwrap_or(ttl / 3))
    }

    /// Checks every setting; the error names the bad field.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(ttl) = self.ttl {
            validate::ttl(ttl)?;
            let beat = self.renew_interval.unwrap_or(ttl / 3);
            if beat.is_zero() || beat >= ttl {
                return Err(Error::invalid_input(
                    "renew_interval",
                    format_args!("{beat:?} must be above zero and below the ttl {ttl:?}"),
                ));
            }
        }
        validate::grace(self.grace)?;
        if self.reconcile_interval.is_zero() {
            return Err(Error::invalid_input(
                "reconcile_interval",
                "must be above zero",
            ));
        }
        if self.reconcile_limit == 0 || self.reconcile_limit > validate::MAX_LIST_LIMIT {
            return Err(Error::invalid_input(
                "reconcile_limit",
                format_args!(
                    "{} is outside 1..={}",
                    self.reconcile_limit,
                    validate::MAX_LIST_LIMIT
                ),
            ));
        }
        if self.renew_batch_size == 0 || self.renew_batch_size > validate::MAX_BATCH {
            return Err(Error::invalid_input(
                "renew_batch_size",
                format_args!(
                    "{} is outside 1..={}",
                    self.renew_batch_size,
                    validate::MAX_BATCH
                ),
            ));
        }
        if self.store_timeout.is_zero() {
            return Err(Error::invalid_input("store_timeout", "must be above zero"));
        }
        if let Some(worker_id) = &self.worker_id {
            validate::owner("worker_id", worker_id)?;
        }
        Ok(())
    }
}

/// A worker id no other keeper shares: `hostname:pid:random`, the random part
/// made unique within the process by a sequence number.
pub(crate) fn generate_worker_id() -> String {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let random = uuid::Uuid::now_v7().simple().to_string();
    let random = &random[random.len() - 12..];
    format!("{}:{}:{random}{sequence:x}", hostname(), std::process::id())
}

fn hostname() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    from_kernel
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| {
            name.trim()
                .chars()
                .filter(|c| !c.is_control() && !c.is_whitespace() && *c != ':')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .map_or_else(
            || "localhost".to_owned(),
            |name| name.chars().take(64).collect(),
        )
}
