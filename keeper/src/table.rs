//! The keeper's table of held runs and jobs, and the state its tasks and
//! guards share: where a lease is started being held, lost, released, and
//! fail-stopped at its confirmed deadline.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::config::KeeperConfig;
use super::held::{self, Entry, HeldCore, HeldKey, HeldRun, Phase};
use super::job_guard::{self, JobGuard};
use super::loss::LossCause;
use super::run_guard::RunGuard;
use super::{health, telemetry, KeeperError};
use tenure_lease_core::queue::{ClaimedJob, JobLoss, JobQueue};
use tenure_lease_core::Error;
use tenure_lease_core::LeaseRecord;
use tenure_lease_core::LeaseStore;
use tenure_lease_core::LossReason;

/// State shared by the keeper, its tasks and its guards.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) config: KeeperConfig,
    pub(crate) worker_id: String,
    /// How often `check()` may read the store.
    pub(crate) check_interval: Duration,
    /// Every held run and job.
    held: Mutex<HashMap<HeldKey, Entry>>,
    held_count: watch::Sender<usize>,
    accepting: AtomicBool,
    /// Set once when the heartbeat gives up (see `heartbeat::run`).
    heartbeat_gone: AtomicBool,
    pub(crate) reconciling: AtomicBool,
    pub(crate) heartbeat_wake: Notify,
    /// Panics caught in background work, for [`Keeper::health`].
    pub(crate) panics: health::PanicLog,
    /// Turns of the beat's `renew_many` and `renew_jobs` calls
    /// ([`KeeperConfig::renew_batches_in_flight`]).
    pub(crate) renew_batches: tokio::sync::Semaphore,
}

impl Shared {
    /// Runs `call` under the keeper's store timeout; no answer in time is a
    /// `Timeout` error naming `what`, whose outcome is unknown.
    pub(crate) async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::time::timeout(self.config.store_timeout, call)
            .await
            .unwrap_or_else(|_| Err(held::timeout_error(what)))
    }

    /// Holding nothing yet, accepting work.
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        config: KeeperConfig,
        worker_id: String,
        check_interval: Duration,
    ) -> Self {
        Shared {
            renew_batches: tokio::sync::Semaphore::new(config.renew_batches_in_flight),
            store,
            config,
            worker_id,
            check_interval,
            held: Mutex::new(HashMap::new()),
            held_count: watch::Sender::new(0),
            accepting: AtomicBool::new(true),
            heartbeat_gone: AtomicBool::new(false),
            reconciling: AtomicBool::new(false),
            heartbeat_wake: Notify::new(),
            panics: health::PanicLog::default(),
        }
    }

    fn table(&self) -> MutexGuard<'_, HashMap<HeldKey, Entry>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn is_accepting(&self) -> bool {
        self.accepting.load(Ordering::Acquire)
    }

    /// No new work from now on (shutdown or drop).
    pub(crate) fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Release);
    }

    /// How many runs and jobs are held.
    pub(crate) fn held_count(&self) -> usize {
        *self.held_count.borrow()
    }

    /// Follows how many runs and jobs are held.
    pub(crate) fn watch_held_count(&self) -> watch::Receiver<usize> {
        self.held_count.subscribe()
    }

    /// Whether new leases may be taken: not shutting down, and the
    /// heartbeat that would renew them has not given up.
    pub(crate) fn ensure_accepting(&self) -> Result<(), KeeperError> {
        if !self.is_accepting() {
            Err(KeeperError::ShuttingDown)
        } else if self.heartbeat_gone.load(Ordering::Acquire) {
            Err(KeeperError::HeartbeatFailed)
        } else {
            Ok(())
        }
    }

    /// The heartbeat gave up: nothing will renew or fail-stop what is held,
    /// so it is all stopped now, and nothing new is taken. Something that
    /// starts being held concurrently sees the flag in `start_holding`.
    pub(crate) fn heartbeat_failed(&self) {
        self.heartbeat_gone.store(true, Ordering::SeqCst);
        for entry in self.snapshot() {
            // Each loss is stopped even if reporting another one panics
            // (a panicking log or metrics hook may be why the loop died).
            let stopped = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.lose(entry.core(), LossCause::HeartbeatFailed, true)
            }));
            if stopped.is_err() {
                entry.core().token.cancel();
            }
        }
    }

    pub(crate) fn claim_reconcile_flight(&self) -> bool {
        self.reconciling
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether run `id` is held.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.table().contains_key(&HeldKey::Run(id.to_owned()))
    }

    pub(crate) fn holds_job(&self, id: &str) -> bool {
        self.table().contains_key(&HeldKey::Job(id.to_owned()))
    }

    pub(crate) fn lookup(&self, id: &str) -> Option<Arc<HeldRun>> {
        match self.table().get(&HeldKey::Run(id.to_owned())) {
            Some(Entry::Run(run)) => Some(Arc::clone(run)),
            _ => None,
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<Entry> {
        self.table().values().cloned().collect()
    }

    /// Starts holding `record`, won by a call sent at `sent`.
    pub(crate) fn hold(
        self: &Arc<Self>,
        record: &LeaseRecord,
        sent: Instant,
    ) -> Result<RunGuard, Error> {
        let claim = record.claim().ok_or_else(|| {
            Error::corrupt(format!("record {:?} came back without an owner", record.id))
        })?;
        let deadline = self.config.ttl.map(|ttl| sent + ttl);
        let core = HeldCore::new(
            HeldKey::Run(claim.id.clone()),
            claim.fence,
            deadline,
            Instant::now(),
        );
        let item = held::RunItem {
            claim,
            status: Mutex::new(record.status),
        };
        let run = Arc::new(HeldRun::new(item, core));
        let guard = RunGuard::new(Arc::clone(self), Arc::clone(&run));
        self.start_holding(Entry::Run(run), LossCause::Lost(LossReason::FenceChanged));
        Ok(guard)
    }

    /// Starts holding a claimed job, confirmed until `deadline`.
    pub(crate) fn hold_job(
        self: &Arc<Self>,
        queue: Arc<dyn JobQueue>,
        claimed: ClaimedJob,
        deadline: Instant,
    ) -> JobGuard {
        let ClaimedJob { job, claim } = claimed;
        let core = HeldCore::new(
            HeldKey::Job(claim.id.clone()),
            claim.fence,
            Some(deadline),
            Instant::now(),
        );
        let held = Arc::new(held::HeldJob::new(
            job_guard::JobItem { queue, claim, job },
            core,
        ));
        let guard = JobGuard::new(Arc::clone(self), Arc::clone(&held));
        self.start_holding(Entry::Job(held), LossCause::JobLost(JobLoss::FenceChanged));
        guard
    }

    /// Puts `entry` in the table (stopping an older copy of the same key
    /// with `stale`) and wakes the heartbeat; loses it at once when its
    /// confirmed deadline has already passed.
    fn start_holding(&self, entry: Entry, stale: LossCause) {
        let key = entry.core().key.clone();
        let replaced = {
            let mut table = self.table();
            let replaced = table.insert(key, entry.clone());
            if replaced.is_none() {
                telemetry::held(1.0);
            }
            self.held_count.send_replace(table.len());
            replaced
        };
        if let Some(older) = replaced {
            // A purged and re-admitted run, or a job requeued and claimed
            // again here before the older claim noticed: the store handed
            // out a newer fence, so the older copy is stale by definition.
            self.lose(older.core(), stale, true);
        }
        self.heartbeat_wake.notify_one();
        let core = entry.core();
        if self.heartbeat_gone.load(Ordering::SeqCst) {
            self.lose(core, LossCause::HeartbeatFailed, true);
        } else if core
            .deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
        {
            self.lose(core, LossCause::DeadlinePassed, false);
        }
    }

    /// Stops holding `held` (after it settled or was lost).
    pub(crate) fn release(&self, held: &HeldCore) {
        let mut table = self.table();
        if table
            .get(&held.key)
            .is_some_and(|entry| std::ptr::eq(entry.core(), held))
        {
            table.remove(&held.key);
            telemetry::held(-1.0);
            self.held_count.send_replace(table.len());
        }
    }

    /// Ends ownership: stops holding (so `holds` is already false when
    /// anyone woken by the token looks), cancels the token, aborts the
    /// owner task. False when the phase did not allow it (already over, or
    /// settling and `settling_too` is false).
    pub(crate) fn lose(&self, held: &HeldCore, cause: LossCause, settling_too: bool) -> bool {
        let Some(task) = held.lose(cause, settling_too) else {
            return false;
        };
        self.release(held);
        held.token.cancel();
        if let Some(task) = task {
            task.abort();
        }
        telemetry::loss(&cause);
        let (kind, id) = (held.key.kind(), held.key.id());
        match cause {
            LossCause::Cancelled | LossCause::Shutdown => {
                tracing::info!(kind, lease.id = %id, fence = held.fence, cause = cause.label(), "work stopped");
            }
            _ => {
                tracing::warn!(kind, lease.id = %id, fence = held.fence, cause = cause.label(), "work lost its lease and was stopped");
            }
        }
        true
    }

    /// The earliest confirmed deadline among held things that can still
    /// lose by it.
    pub(crate) fn earliest_deadline(&self) -> Option<Instant> {
        self.snapshot()
            .iter()
            .filter_map(|entry| {
                let state = entry.core().state();
                state.deadline.filter(|_| state.phase == Phase::Held)
            })
            .min()
    }

    /// Fail-stops every held run and job whose confirmed deadline has passed.
    pub(crate) fn fail_stop_overdue(&self, now: Instant) {
        for entry in self.snapshot() {
            let core = entry.core();
            let overdue = {
                let state = core.state();
                state.phase == Phase::Held && state.deadline.is_some_and(|deadline| deadline <= now)
            };
            if overdue {
                self.lose(core, LossCause::DeadlinePassed, false);
            }
        }
    }
}
