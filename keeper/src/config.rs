//! How a [`Keeper`](super::Keeper) behaves: lease length, beat, grace,
//! reconciler, batching, and the worker id it claims leases under.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::election::ELECTION_KIND;
use super::schedule::SCHEDULE_KIND;
use tenure_lease_core::backend::validate;
use tenure_lease_core::queue::concurrency::SLOT_LEASE_KIND;
use tenure_lease_core::{Error, Result};

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

/// What the reconciler does with an orphan of one kind (see
/// [`ReconcileKinds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OrphanHandling {
    /// Take it over as [`KeeperConfig::reconcile_action`] says and hand it
    /// to the recovery callback.
    #[default]
    Recover,
    /// Take it over and write it `Failed` with stop reason
    /// [`RELEASED`](super::RELEASED) (error text
    /// [`RELEASED_ERROR`](super::RELEASED_ERROR)), never calling the
    /// recovery callback: for the keeper's internal reservations, which a
    /// host has nothing to resume.
    ReleaseSilently,
}

/// Which orphans the reconciler recovers and which it releases silently,
/// by record kind ([`LeaseRecord::kind`](tenure_lease_core::LeaseRecord::kind)).
///
/// A kind in [`recover`](Self::recover) is recovered, one in
/// [`release_silently`](Self::release_silently) is released silently, and
/// every other kind is handled as [`unlisted`](Self::unlisted) says
/// ([`OrphanHandling::Recover`] by default). By default reservations are
/// released silently, the keeper's own ([`ELECTION_KIND`] terms and
/// [`SCHEDULE_KIND`] ticks) and a concurrency limit's slot leases
/// ([`SLOT_LEASE_KIND`]): a lapsed term, an abandoned tick or a dead
/// worker's slot is nothing a host can resume (a new term is campaigned
/// for, a tick is never delivered twice, the slot goes to the next
/// claim). Either way the orphan is taken over and
/// finalised, so the scan always moves past it. A kind in both lists is a
/// configuration error ([`KeeperBuilder::start`](super::KeeperBuilder::start)
/// refuses it).
///
/// ```
/// use tenure_keeper::{KeeperConfig, OrphanHandling};
/// # use std::time::Duration;
///
/// let config = KeeperConfig::with_ttl(Duration::from_secs(30))
///     .release_kinds_silently(["checkpoint_write"]);
/// assert_eq!(config.reconcile_kinds.handling("checkpoint_write"), OrphanHandling::ReleaseSilently);
/// assert_eq!(config.reconcile_kinds.handling("run"), OrphanHandling::Recover);
/// assert_eq!(config.reconcile_kinds.handling("election"), OrphanHandling::ReleaseSilently);
/// assert_eq!(
///     config.reconcile_kinds.handling("concurrency_slot"),
///     OrphanHandling::ReleaseSilently
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileKinds {
    /// Kinds recovered (taken over and handed to the recovery callback).
    pub recover: BTreeSet<String>,
    /// Kinds released silently (taken over and failed, no callback).
    pub release_silently: BTreeSet<String>,
    /// How kinds in neither list are handled.
    pub unlisted: OrphanHandling,
}

impl Default for ReconcileKinds {
    fn default() -> Self {
        Self {
            recover: BTreeSet::new(),
            release_silently: [ELECTION_KIND, SCHEDULE_KIND, SLOT_LEASE_KIND]
                .into_iter()
                .map(str::to_owned)
                .collect(),
            unlisted: OrphanHandling::Recover,
        }
    }
}

impl ReconcileKinds {
    /// How an orphan of `kind` is handled.
    pub fn handling(&self, kind: &str) -> OrphanHandling {
        if self.recover.contains(kind) {
            OrphanHandling::Recover
        } else if self.release_silently.contains(kind) {
            OrphanHandling::ReleaseSilently
        } else {
            self.unlisted
        }
    }

    /// Whether some kind may be recovered, so the recovery callback can be
    /// called.
    pub(crate) fn recovers_any(&self) -> bool {
        self.unlisted == OrphanHandling::Recover || !self.recover.is_empty()
    }

    /// Checks every kind is a valid kind name and none is in both lists.
    fn validate(&self) -> Result<()> {
        for kind in self.recover.iter().chain(&self.release_silently) {
            validate::kind(FIELD_KINDS, kind)?;
        }
        if let Some(kind) = self.recover.intersection(&self.release_silently).next() {
            return Err(Error::invalid_input(
                FIELD_KINDS,
                format_args!(
                    "kind {kind:?} is both recovered and released silently; list it in one of \
                     recover_kinds or release_kinds_silently"
                ),
            ));
        }
        Ok(())
    }
}

/// The field named by errors of [`ReconcileKinds`].
const FIELD_KINDS: &str = "reconcile_kinds";

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
    /// (admission, reconciler, `cancel`'s retry-after, `cancel_anywhere`'s
    /// takeover).
    pub grace: Duration,
    /// Time between reconciler passes.
    pub reconcile_interval: Duration,
    /// Whether the reconciler runs by itself (at start, then every
    /// `reconcile_interval`). When false, only
    /// [`Keeper::reconcile_now`](super::Keeper::reconcile_now) runs a pass.
    pub auto_reconcile: bool,
    /// What the reconciler does with the orphans it wins.
    pub reconcile_action: ReconcileAction,
    /// Which orphans the reconciler recovers and which it releases
    /// silently, by kind; by default it recovers every kind but the
    /// keeper's own election terms and schedule ticks, which it releases
    /// silently.
    pub reconcile_kinds: ReconcileKinds,
    /// Most orphans one reconciler pass looks at.
    pub reconcile_limit: usize,
    /// Most claims per `renew_many` or `renew_jobs` call.
    pub renew_batch_size: usize,
    /// Most `renew_many` and `renew_jobs` calls of one beat in flight at
    /// once, both counted together: the others wait their turn, earliest
    /// deadline first, so a keeper holding a million leases never queues a
    /// thousand calls on its store at once (each would wait behind the
    /// others and time out).
    pub renew_batches_in_flight: usize,
    /// A beat renewing at most this many leases renews each with its own
    /// `renew` call, so a slow or hung claim delays nobody else; larger beats
    /// use `renew_many` in chunks of `renew_batch_size`. Job claims are
    /// counted apart, the same way: `renew_job` each, or `renew_jobs` in
    /// chunks.
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
            reconcile_kinds: ReconcileKinds::default(),
            reconcile_limit: 100,
            renew_batch_size: 1000,
            renew_batches_in_flight: 8,
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

    /// Adds kinds the reconciler recovers (see [`ReconcileKinds`]); a kind
    /// named here is no longer released silently.
    pub fn recover_kinds<I, K>(mut self, kinds: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let lists = &mut self.reconcile_kinds;
        for kind in kinds.into_iter().map(Into::into) {
            lists.release_silently.remove(&kind);
            lists.recover.insert(kind);
        }
        self
    }

    /// Adds kinds the reconciler releases silently, never calling the
    /// recovery callback for them (see [`ReconcileKinds`]); a kind named
    /// here is no longer recovered.
    pub fn release_kinds_silently<I, K>(mut self, kinds: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let lists = &mut self.reconcile_kinds;
        for kind in kinds.into_iter().map(Into::into) {
            lists.recover.remove(&kind);
            lists.release_silently.insert(kind);
        }
        self
    }

    /// Sets how the reconciler handles kinds in neither list
    /// ([`OrphanHandling::Recover`] unless set).
    pub fn unlisted_kinds(mut self, handling: OrphanHandling) -> Self {
        self.reconcile_kinds.unlisted = handling;
        self
    }

    /// Sets the most orphans one pass looks at.
    pub fn reconcile_limit(mut self, limit: usize) -> Self {
        self.reconcile_limit = limit;
        self
    }

    /// Sets the most claims per `renew_many` or `renew_jobs` call.
    pub fn renew_batch_size(mut self, size: usize) -> Self {
        self.renew_batch_size = size;
        self
    }

    /// Sets the most `renew_many` and `renew_jobs` calls of one beat in
    /// flight at once.
    pub fn renew_batches_in_flight(mut self, calls: usize) -> Self {
        self.renew_batches_in_flight = calls;
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
        self.reconcile_kinds.validate()?;
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
        if self.renew_batches_in_flight == 0 {
            return Err(Error::invalid_input(
                "renew_batches_in_flight",
                "must be at least 1",
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
