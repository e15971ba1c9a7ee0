//! `tenure.Keeper`, and the watch over the event loop it serves.
//!
//! The Rust keeper renews leases on tokio threads, so a Python event loop
//! that stalls (a blocking `time.sleep`, a long computation) would not stop
//! its renewals: a stuck run would keep its lease for ever. The keeper
//! therefore watches its loop: the Python side pulses at a fraction of the
//! limit, and when no pulse came for `loop_stall_limit` every lease held
//! from that loop and not yet settled is given up (its guard dropped, so
//! the keeper stops renewing it and it expires), and callbacks awaited from
//! Rust (a term, a delivery, a recovery) stop being waited for. When the
//! loop runs again the work finds itself lost: its task is cancelled and
//! its fenced writes are refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use tenure::keeper::{OrphanHandling, ReconcileAction, Recovered};
use tenure::queue::JobQueue;
use tenure::{AdmitOutcome, ErrorKind, Keeper, KeeperConfig, KeeperError, KeeperState, Store};

use crate::bridge::{self, call_on_loop, Failure, Inbox};
use crate::convert::{self, args, make};
use crate::errors::{self, IntoPyResult};
use crate::held::{PyJobRun, PyRun, Slot};
use crate::store::{self, PyStore};

/// A keeper's ttl when none is given.
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The shortest stall limit: a loop is not expected to answer faster.
const MIN_STALL_LIMIT: Duration = Duration::from_millis(20);

/// How long `shutdown` lets work finish when no grace is given.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How often the loop pulses, and the watchdog looks, per stall limit.
const CHECKS_PER_LIMIT: u32 = 4;

/// The event loop's pulse and the work held from it.
pub(crate) struct LoopWatch {
    started: Instant,
    /// Milliseconds after `started` of the last pulse.
    last_pulse: AtomicU64,
    held: Mutex<Vec<Weak<Slot>>>,
    /// Cancelled when the loop is found stalled (callbacks waited on from
    /// Rust stop waiting); replaced by a fresh one when it pulses again.
    given_up: Mutex<CancellationToken>,
}

impl LoopWatch {
    fn new() -> Self {
        LoopWatch {
            started: Instant::now(),
            last_pulse: AtomicU64::new(0),
            held: Mutex::new(Vec::new()),
            given_up: Mutex::new(CancellationToken::new()),
        }
    }

    fn pulse(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_pulse.store(now, Ordering::SeqCst);
        let mut given_up = self.given_up.lock().unwrap_or_else(PoisonError::into_inner);
        if given_up.is_cancelled() {
            *given_up = CancellationToken::new();
        }
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_pulse.load(Ordering::SeqCst));
        self.started.elapsed().saturating_sub(last)
    }

    pub(crate) fn register(&self, slot: &Arc<Slot>) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.retain(|slot| slot.strong_count() > 0);
        held.push(Arc::downgrade(slot));
    }

    /// A token cancelled when the loop is found stalled from now on: a
    /// callback awaited from Rust (a term, a delivery, a recovery) stops
    /// being waited for, so its lease is given up too.
    pub(crate) fn given_up(&self) -> CancellationToken {
        self.given_up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn give_up_everything(&self) {
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for slot in held.iter().filter_map(Weak::upgrade) {
            slot.give_up_for_stall();
        }
        self.given_up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cancel();
    }

    /// Gives up every held lease whenever the loop is silent past `limit`.
    async fn watch(self: Arc<Self>, limit: Duration, stop: CancellationToken) {
        let period = limit / CHECKS_PER_LIMIT;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            if self.silent_for() > limit {
                self.give_up_everything();
            }
        }
    }
}

/// Holds a worker's leases and keeps them alive; see `tenure.Keeper`.
#[pyclass(module = "tenure._tenure", name = "Keeper", subclass, frozen)]
pub(crate) struct PyKeeper {
    pub(crate) keeper: Arc<Keeper>,
    store: Arc<dyn Store>,
    pub(crate) url: Arc<str>,
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) watch: Arc<LoopWatch>,
    stall_limit: Option<Duration>,
    stop_watch: CancellationToken,
}

#[pymethods]
impl PyKeeper {
    #[new]
    #[pyo3(signature = (
        store, *, ttl=None, single_worker=false, grace=None, renew_interval=None, store_timeout=None,
        worker_id=None, reconcile="fail", orphan_error=None, recover_kinds=None,
        release_kinds=None, release_unlisted=false, reconcile_interval=None,
        auto_reconcile=true, on_recovered=None, loop_stall_limit=None
    ))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        py: Python<'_>,
        store: &Bound<'_, PyStore>,
        ttl: Option<&Bound<'_, PyAny>>,
        single_worker: bool,
        grace: Option<&Bound<'_, PyAny>>,
        renew_interval: Option<&Bound<'_, PyAny>>,
        store_timeout: Option<&Bound<'_, PyAny>>,
        worker_id: Option<String>,
        reconcile: &str,
        orphan_error: Option<String>,
        recover_kinds: Option<&Bound<'_, PyAny>>,
        release_kinds: Option<&Bound<'_, PyAny>>,
        release_unlisted: bool,
        reconcile_interval: Option<&Bound<'_, PyAny>>,
        auto_reconcile: bool,
        on_recovered: Option<Py<PyAny>>,
        loop_stall_limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let event_loop = bridge::running_loop(py).map_err(|_| {
            errors::new(
                ErrorKind::Config,
                "a Keeper is started from a coroutine: create it inside the running event loop it serves",
            )
        })?;
        let inbox = bridge::inbox_of(&event_loop)?;
        let ttl = match (single_worker, convert::optional_duration(ttl, "ttl")?) {
            (true, None) => None,
            (true, Some(_)) => return Err(convert::invalid(
                "ttl",
                "a single-worker keeper holds no lease: give ttl or single_worker=True, not both",
            )),
            (false, ttl) => Some(ttl.unwrap_or(DEFAULT_TTL)),
        };
        let mut config = match ttl {
            Some(ttl) => KeeperConfig::with_ttl(ttl),
            None => KeeperConfig::single_worker(),
        };
        config = config
            .grace(convert::optional_duration(grace, "grace")?.unwrap_or_default())
            .auto_reconcile(auto_reconcile)
            .recover_kinds(convert::strings(recover_kinds, "recover_kinds")?)
            .release_kinds_silently(convert::strings(release_kinds, "release_kinds")?);
        if release_unlisted {
            config = config.unlisted_kinds(OrphanHandling::ReleaseSilently);
        }
        if let Some(interval) = convert::optional_duration(renew_interval, "renew_interval")? {
            config = config.renew_interval(interval);
        }
        if let Some(timeout) = convert::optional_duration(store_timeout, "store_timeout")? {
            config = config.store_timeout(timeout);
        }
        if let Some(interval) =
            convert::optional_duration(reconcile_interval, "reconcile_interval")?
        {
            config = config.reconcile_interval(interval);
        }
        if let Some(worker_id) = worker_id {
            config = config.worker_id(worker_id);
        }
        config = config.reconcile_action(match (reconcile, orphan_error) {
            ("adopt", None) => ReconcileAction::Adopt,
            ("fail", None) => ReconcileAction::default(),
            ("fail", Some(error)) => ReconcileAction::Fail { error },
            (other, _) => {
                return Err(convert::invalid(
                    "reconcile",
                    format_args!("{other:?}: \"fail\" (optionally with orphan_error) or \"adopt\""),
                ))
            }
        });
        let stall_limit = match loop_stall_limit {
            Some(value) if value.is_none() => None,
            Some(value) => Some(convert::duration(value, "loop_stall_limit")?),
            None => ttl,
        };
        if stall_limit.is_some_and(|limit| limit < MIN_STALL_LIMIT) {
            return Err(convert::invalid(
                "loop_stall_limit",
                format_args!(
                    "must be at least {MIN_STALL_LIMIT:?} (None turns stall detection off)"
                ),
            ));
        }
        let watch = Arc::new(LoopWatch::new());
        let store_ref = store.get();
        let mut builder = Keeper::builder(Arc::clone(&store_ref.store) as _, config);
        if let Some(callback) = on_recovered {
            let inbox = Arc::clone(&inbox);
            let callback = Arc::new(callback);
            let watch = Arc::clone(&watch);
            let url = Arc::clone(&store_ref.url);
            builder = builder.on_recovered(move |recovered: Recovered| {
                let (inbox, callback) = (Arc::clone(&inbox), Arc::clone(&callback));
                let (watch, url) = (Arc::clone(&watch), Arc::clone(&url));
                let given_up = watch.given_up();
                async move {
                    call_on_loop(&inbox, &callback, given_up, move |py| {
                        let run = match recovered.guard {
                            Some(guard) => Some(PyRun::hold(py, guard, &watch, &url)?.into_any()),
                            None => None,
                        };
                        make(
                            py,
                            "Recovered",
                            args![py, convert::record(py, &recovered.record)?, run],
                        )
                    })
                    .await
                }
            });
        }
        let keeper = {
            let _runtime = bridge::runtime().enter();
            builder.start().or_raise(&store_ref.url)?
        };
        let stop_watch = CancellationToken::new();
        if let Some(limit) = stall_limit {
            watch.pulse();
            bridge::runtime().spawn(Arc::clone(&watch).watch(limit, stop_watch.clone()));
        }
        Ok(PyKeeper {
            keeper: Arc::new(keeper),
            store: Arc::clone(&store_ref.store),
            url: Arc::clone(&store_ref.url),
            inbox,
            watch,
            stall_limit,
            stop_watch,
        })
    }

    /// The worker id every lease of this keeper carries.
    #[getter]
    fn worker_id(&self) -> &str {
        self.keeper.worker_id()
    }

    /// How many runs and jobs it holds now.
    #[getter]
    fn held_count(&self) -> usize {
        self.keeper.held_count()
    }

    /// `"running"`, `"stopping"` or `"failed"`.
    #[getter]
    fn state(&self) -> &'static str {
        match self.keeper.health().state {
            KeeperState::Running => "running",
            KeeperState::Stopping => "stopping",
            _ => "failed",
        }
    }

    /// How often the event loop must pulse (`None`: stall detection off).
    #[getter]
    fn _pulse_period(&self) -> Option<f64> {
        self.stall_limit
            .map(|limit| (limit / CHECKS_PER_LIMIT).as_secs_f64())
    }

    /// The event loop is alive.
    fn _pulse(&self) {
        self.watch.pulse();
    }

    /// Whether it holds run or job `id`.
    fn holds(&self, id: &str) -> bool {
        self.keeper.holds(id) || self.keeper.holds_job(id)
    }

    /// Admits run `id` and holds it: `Admitted` (its `run` renewed from now
    /// on), `Conflict`, `RateLimited` or `AlreadyExists`.
    #[pyo3(signature = (id, *, scopes=None, kind=None, strategy="reject", metadata=None, rate_limit=None, counted_scopes=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn _admit<'py>(
        &self,
        py: Python<'py>,
        id: String,
        scopes: Option<&Bound<'py, PyAny>>,
        kind: Option<String>,
        strategy: &str,
        metadata: Option<&Bound<'py, PyAny>>,
        rate_limit: Option<&Bound<'py, PyAny>>,
        counted_scopes: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = store::admit_request(
            self.keeper.request(id.clone()),
            scopes,
            kind,
            strategy,
            metadata,
            rate_limit,
            counted_scopes,
        )?;
        let keeper = Arc::clone(&self.keeper);
        let watch = Arc::clone(&self.watch);
        let url = Arc::clone(&self.url);
        let shown = Arc::clone(&url);
        bridge::spawn(
            py,
            async move {
                match keeper.admit(request).await {
                    Ok(outcome) => Ok(Some(outcome)),
                    Err(KeeperError::Store(error)) if error.kind() == ErrorKind::AlreadyExists => {
                        Ok(None)
                    }
                    Err(error) => Err(Failure::store(error.into(), &shown)),
                }
            },
            move |py, outcome| {
                match outcome {
                Some(AdmitOutcome::Admitted {
                    guard,
                    interrupted,
                    record,
                    ..
                }) => {
                    let run = PyRun::hold(py, guard, &watch, &url)?.into_any();
                    convert::admitted(py, &record, &interrupted, Some(run))
                }
                Some(AdmitOutcome::Conflict {
                    holder,
                    retry_after,
                }) => convert::conflict(py, &holder, retry_after),
                Some(AdmitOutcome::RateLimited { key, retry_after }) => {
                    convert::rate_limited(py, &key, retry_after)
                }
                None => convert::already_exists(py, &id),
                Some(_) => Err(errors::new(
                    ErrorKind::Incompatible,
                    "the keeper answered an admission this version of the Python package does not know: upgrade it",
                )),
            }
            },
        )
    }

    /// Claims up to `limit` jobs of `queue` and holds them: a list of
    /// `JobRun`, each renewed until settled.
    #[pyo3(signature = (queue, *, limit=1, capabilities=None))]
    fn claim_jobs<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        limit: usize,
        capabilities: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // The worker and ttl are the keeper's; these two are placeholders.
        let request = tenure::queue::ClaimRequest::new(queue, "", Duration::from_secs(1))
            .limit(limit)
            .capabilities(convert::strings(capabilities, "capabilities")?);
        let keeper = Arc::clone(&self.keeper);
        let queue_store: Arc<dyn JobQueue> = Arc::clone(&self.store) as _;
        let watch = Arc::clone(&self.watch);
        let url = Arc::clone(&self.url);
        let shown = Arc::clone(&url);
        bridge::spawn(
            py,
            async move {
                keeper
                    .claim_jobs(queue_store, request)
                    .await
                    .map_err(|error| Failure::store(error.into(), &shown))
            },
            move |py, guards| {
                let runs = guards
                    .into_iter()
                    .map(|guard| PyJobRun::hold(py, guard, &watch, &url))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyList::new(py, runs)?.into_any())
            },
        )
    }

    /// Cancels run `id` if this keeper holds it (stops it, writes the fenced
    /// stop); else says who has it. A `CancelResult`.
    fn cancel<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let keeper = Arc::clone(&self.keeper);
        bridge::spawn(
            py,
            async move { Ok(keeper.cancel(&id).await) },
            |py, outcome| convert::cancel_outcome(py, &outcome),
        )
    }

    /// Cancels run `id` wherever it runs: here, or, when its owner's lease
    /// has lapsed, by taking it over and failing it. A `CancelResult`.
    fn cancel_anywhere<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let keeper = Arc::clone(&self.keeper);
        bridge::spawn(
            py,
            async move { Ok(keeper.cancel_anywhere(&id).await) },
            |py, outcome| convert::cancel_anywhere_outcome(py, &outcome),
        )
    }

    /// Runs one reconciler pass now: a `ReconcileReport` once the
    /// `on_recovered` callbacks have returned.
    fn reconcile_now<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let keeper = Arc::clone(&self.keeper);
        let url = Arc::clone(&self.url);
        bridge::spawn(
            py,
            async move {
                keeper
                    .reconcile_now()
                    .await
                    .map_err(|error| Failure::store(error.into(), &url))
            },
            |py, report| convert::reconcile_report(py, &report),
        )
    }

    /// Stops the keeper: no new leases; running work may finish within
    /// `grace` seconds, then is stopped (its leases left to expire). A
    /// `ShutdownReport`.
    #[pyo3(signature = (grace=None))]
    fn shutdown<'py>(
        &self,
        py: Python<'py>,
        grace: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let grace = convert::optional_duration(grace, "grace")?.unwrap_or(DEFAULT_SHUTDOWN_GRACE);
        let keeper = Arc::clone(&self.keeper);
        let stop_watch = self.stop_watch.clone();
        bridge::spawn(
            py,
            async move {
                let report = keeper.shutdown_within(grace).await;
                stop_watch.cancel();
                Ok(report)
            },
            |py, report| convert::shutdown_report(py, &report),
        )
    }
}

impl Drop for PyKeeper {
    fn drop(&mut self) {
        self.stop_watch.cancel();
    }
}
