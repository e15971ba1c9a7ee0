//! The work a keeper holds, as Python sees it: `Run` (a run's lease) and
//! `JobRun` (a job's claim), both subclasses of `Held`, which has what the
//! two share: the identity, the loss, `check()` and `async with`.
//!
//! Each wraps the Rust guard in a [`Slot`] that the keeper's loop watch
//! can empty: a guard dropped there gives the lease up (the keeper stops
//! renewing it), and every later write of the work is refused as lost.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tokio_util::sync::CancellationToken;

use tenure::keeper::{JobGuard, JobWriteError, LossCause, OwnershipLost};
use tenure::queue::Job;
use tenure::{ErrorKind, RunGuard, TransitionRejection, WriteError};

use crate::bridge::{self, Failure, TaskWatch, WatchEnd};
use crate::convert;
use crate::errors;
use crate::keeper::LoopWatch;
use crate::store;

/// The loss cause reported for work given up because its loop stalled.
const LOOP_STALLED: &str = "event_loop_stalled";

/// What a slot holds: a run's lease or a job's claim.
enum Guard {
    Run(RunGuard),
    Job(JobGuard),
}

impl Guard {
    fn token(&self) -> CancellationToken {
        match self {
            Guard::Run(guard) => guard.token(),
            Guard::Job(guard) => guard.token(),
        }
    }

    fn loss(&self) -> Option<LossCause> {
        match self {
            Guard::Run(guard) => guard.loss(),
            Guard::Job(guard) => guard.loss(),
        }
    }

    async fn check(&self) -> Result<(), OwnershipLost> {
        match self {
            Guard::Run(guard) => guard.check().await,
            Guard::Job(guard) => guard.check().await,
        }
    }

    /// Reports `progress` with a fenced renewal of the run's lease or the
    /// job's claim.
    async fn report_progress(
        &self,
        id: String,
        progress: &serde_json::Value,
        url: &Arc<str>,
    ) -> Result<(), Failure> {
        match self {
            Guard::Run(guard) => guard
                .report_progress(progress)
                .await
                .map_err(|error| write_error(id, error, url)),
            Guard::Job(guard) => guard
                .report_progress(progress)
                .await
                .map_err(|error| job_write_error(id, error, url)),
        }
    }
}

/// One piece of held work, as the loop watch sees it.
pub(crate) struct Slot {
    id: String,
    /// `None` once given up for a stall.
    guard: Mutex<Option<Arc<Guard>>>,
    /// Cancelled when the work loses its lease, however.
    token: CancellationToken,
    stalled: AtomicBool,
    /// A terminal write (complete, fail) wrote: nothing left to give up.
    settled: AtomicBool,
}

impl Slot {
    fn new(id: String, guard: Guard) -> Arc<Slot> {
        let token = guard.token();
        Arc::new(Slot {
            id,
            guard: Mutex::new(Some(Arc::new(guard))),
            token,
            stalled: AtomicBool::new(false),
            settled: AtomicBool::new(false),
        })
    }

    fn guard(&self) -> PyResult<Arc<Guard>> {
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| errors::ownership_lost(&self.id, LOOP_STALLED))
    }

    /// Gives the lease up: the keeper stops renewing it once no guard is
    /// left, and the work's task is cancelled.
    pub(crate) fn give_up_for_stall(&self) {
        if self.settled.load(Ordering::SeqCst) {
            return;
        }
        let guard = self
            .guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if guard.is_some() {
            self.stalled.store(true, Ordering::SeqCst);
            tracing::warn!(id = %self.id, "the event loop stalled past loop_stall_limit: the lease is given up");
            self.token.cancel();
        }
    }

    fn loss(&self) -> Option<&'static str> {
        if self.stalled.load(Ordering::SeqCst) {
            return Some(LOOP_STALLED);
        }
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|guard| guard.loss())
            .map(|cause| cause.label())
    }
}

/// Held work: what `Run` and `JobRun` share.
#[pyclass(module = "tenure._tenure", name = "Held", subclass, frozen)]
pub(crate) struct PyHeld {
    slot: Arc<Slot>,
    fence: u64,
    url: Arc<str>,
    watch: Mutex<Option<TaskWatch>>,
}

impl PyHeld {
    fn new(guard: Guard, id: String, fence: u64, registry: &LoopWatch, url: &Arc<str>) -> Self {
        let slot = Slot::new(id, guard);
        registry.register(&slot);
        PyHeld {
            slot,
            fence,
            url: Arc::clone(url),
            watch: Mutex::new(None),
        }
    }

    /// Runs a fenced write of the work off the GIL; marks the work settled
    /// when it wrote, and converts what it answers with `convert`.
    fn write<'py, T, F, Fut, C>(
        slf: &Bound<'py, PyHeld>,
        write: F,
        convert: C,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Guard>, String, Arc<str>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(T, bool), Failure>> + Send + 'static,
        C: for<'a> FnOnce(Python<'a>, &T) -> PyResult<Bound<'a, PyAny>> + Send + 'static,
    {
        let held = slf.get();
        let guard = held.slot.guard()?;
        let (id, url) = (held.slot.id.clone(), Arc::clone(&held.url));
        let owner = slf.clone().unbind();
        bridge::spawn(
            slf.py(),
            async move {
                let (answer, settles) = write(guard, id, url).await?;
                if settles {
                    owner.get().slot.settled.store(true, Ordering::SeqCst);
                }
                Ok(answer)
            },
            move |py, answer| convert(py, &answer),
        )
    }

    /// Enters or leaves a guarded block through `tenure._guard`, where its
    /// asyncio side (which task to cancel, uncancelling) is written.
    fn guard_call<'py>(
        py: Python<'py>,
        function: &str,
        args: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        py.import("tenure._guard")?
            .getattr(function)?
            .call1(PyTuple::new(py, args)?)
    }
}

#[pymethods]
impl PyHeld {
    /// The run's or job's id.
    #[getter]
    fn id(&self) -> &str {
        &self.slot.id
    }

    /// The fencing token: present it to every resource the work writes.
    #[getter]
    fn fence(&self) -> u64 {
        self.fence
    }

    /// Why the lease was lost (`"owner_changed"`, `"deadline_passed"`,
    /// `"event_loop_stalled"`, ...), or `None` while held.
    #[getter]
    fn loss(&self) -> Option<&'static str> {
        self.slot.loss()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let held = slf.get();
        Ok(format!(
            "<tenure.{} id={:?} fence={} loss={:?}>",
            slf.get_type().name()?,
            held.slot.id,
            held.fence,
            held.slot.loss()
        ))
    }

    /// Raises `OwnershipLostError` once the lease is lost; call it between
    /// items of long work. Cheap: reads the store at most every tenth of a
    /// beat.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let guard = self.slot.guard()?;
        let id = self.slot.id.clone();
        bridge::spawn(
            py,
            async move {
                guard
                    .check()
                    .await
                    .map_err(|lost| Failure::Lost(id, lost.cause.label()))
            },
            |py, ()| Ok(py.None().into_bound(py)),
        )
    }

    /// Reports `progress` (any JSON value but `None`) with a fenced renewal:
    /// others read it on the record or job (`tenure show`). Raises
    /// `OwnershipLostError` when the lease is lost (nothing is written).
    fn report_progress<'py>(
        &self,
        py: Python<'py>,
        progress: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let progress = convert::json_value(progress, "progress")?;
        let guard = self.slot.guard()?;
        let (id, url) = (self.slot.id.clone(), Arc::clone(&self.url));
        bridge::spawn(
            py,
            async move { guard.report_progress(id, &progress, &url).await },
            |py, ()| Ok(py.None().into_bound(py)),
        )
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::guard_call(slf.py(), "enter", vec![slf.clone().into_any()])
    }

    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: Bound<'py, PyAny>,
        exc: Bound<'py, PyAny>,
        traceback: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::guard_call(
            slf.py(),
            "exit",
            vec![slf.clone().into_any(), exc_type, exc, traceback],
        )
    }

    /// Cancels `task` the moment the lease is lost, until `_unwatch`.
    fn _watch(&self, py: Python<'_>, task: Py<PyAny>) -> PyResult<()> {
        let watch = TaskWatch::start(py, self.slot.token.clone(), task)?;
        *self.watch.lock().unwrap_or_else(PoisonError::into_inner) = Some(watch);
        Ok(())
    }

    /// Ends the watch: `"held"`, `"lost"` or `"lost_cancelled"` (the loss
    /// cancelled the task).
    fn _unwatch(&self) -> &'static str {
        let watch = self
            .watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match watch.map(TaskWatch::end) {
            Some(WatchEnd::LostCancelled) => "lost_cancelled",
            Some(WatchEnd::LostUncancelled) => "lost",
            Some(WatchEnd::Held) | None if self.slot.loss().is_some() && !self._settled() => "lost",
            Some(WatchEnd::Held) | None => "held",
        }
    }

    /// Whether a terminal write (complete, fail) wrote.
    #[getter]
    fn _settled(&self) -> bool {
        self.slot.settled.load(Ordering::SeqCst)
    }

    /// The `OwnershipLostError` for this work's loss.
    fn _lost_error(&self, py: Python<'_>) -> Py<PyAny> {
        errors::ownership_lost(&self.slot.id, self.slot.loss().unwrap_or("unknown"))
            .into_value(py)
            .into_any()
    }
}

/// A run's lease held by a keeper; see `tenure.Run`.
#[pyclass(module = "tenure._tenure", name = "Run", extends = PyHeld, frozen)]
pub(crate) struct PyRun {
    claim: tenure::Claim,
}

impl PyRun {
    pub(crate) fn hold<'py>(
        py: Python<'py>,
        guard: RunGuard,
        registry: &LoopWatch,
        url: &Arc<str>,
    ) -> PyResult<Bound<'py, PyRun>> {
        let claim = guard.claim().clone();
        let held = PyHeld::new(
            Guard::Run(guard),
            claim.id.clone(),
            claim.fence,
            registry,
            url,
        );
        Bound::new(
            py,
            PyClassInitializer::from(held).add_subclass(PyRun { claim }),
        )
    }
}

fn run_guard(guard: &Guard) -> Result<&RunGuard, Failure> {
    match guard {
        Guard::Run(run) => Ok(run),
        Guard::Job(_) => Err(Failure::Store(
            tenure::Error::new(
                ErrorKind::Incompatible,
                "a run holds a job's guard: report this as a bug of the Python package",
            ),
            None,
        )),
    }
}

fn write_error(id: String, error: WriteError, url: &Arc<str>) -> Failure {
    match error {
        WriteError::OwnershipLost(cause) => Failure::Lost(id, cause.label()),
        WriteError::TakenOver | WriteError::Rejected(TransitionRejection::Stale) => {
            Failure::Lost(id, "taken_over")
        }
        WriteError::Rejected(TransitionRejection::Missing) => Failure::Lost(id, "missing"),
        WriteError::Rejected(TransitionRejection::Terminal(_)) => Failure::Lost(id, "terminal"),
        WriteError::Unconfirmed(error) | WriteError::Invalid(error) => Failure::store(error, url),
        other => Failure::store(
            tenure::Error::new(ErrorKind::InvalidInput, other.to_string()),
            url,
        ),
    }
}

#[pymethods]
impl PyRun {
    /// The claim its fenced writes present.
    #[getter]
    fn claim<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::claim(py, &self.claim)
    }

    /// The fenced `pending → running` write; answers the record.
    fn mark_running<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        PyHeld::write(
            slf.as_super(),
            |guard, id, url| async move {
                let record = run_guard(&guard)?
                    .mark_running()
                    .await
                    .map_err(|error| write_error(id, error, &url))?;
                Ok((record, false))
            },
            convert::record,
        )
    }

    /// The fenced terminal write (`"succeeded"` by default, `"failed"` with
    /// `error`, `"interrupted"`); answers the record. Raises
    /// `OwnershipLostError` when the run lost its lease or a peer took it
    /// over.
    #[pyo3(signature = (status=None, *, error=None, stop_reason=None))]
    fn complete<'py>(
        slf: &Bound<'py, Self>,
        status: Option<&Bound<'py, PyAny>>,
        error: Option<String>,
        stop_reason: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let status = match status {
            Some(status) => convert::status_arg(status)?,
            None => tenure::Status::Succeeded,
        };
        let change = store::status_change(status, error, stop_reason);
        PyHeld::write(
            slf.as_super(),
            |guard, id, url| async move {
                let record = run_guard(&guard)?
                    .complete(change)
                    .await
                    .map_err(|error| write_error(id, error, &url))?;
                Ok((record, true))
            },
            convert::record,
        )
    }
}

/// A job claim held by a keeper; see `tenure.JobRun`.
#[pyclass(module = "tenure._tenure", name = "JobRun", extends = PyHeld, frozen)]
pub(crate) struct PyJobRun {
    job: Py<PyAny>,
    claim: tenure::queue::JobClaim,
}

impl PyJobRun {
    pub(crate) fn hold<'py>(
        py: Python<'py>,
        guard: JobGuard,
        registry: &LoopWatch,
        url: &Arc<str>,
    ) -> PyResult<Bound<'py, PyJobRun>> {
        let job = convert::job(py, guard.job())?.unbind();
        let claim = guard.claim().clone();
        let held = PyHeld::new(
            Guard::Job(guard),
            claim.id.clone(),
            claim.fence,
            registry,
            url,
        );
        Bound::new(
            py,
            PyClassInitializer::from(held).add_subclass(PyJobRun { job, claim }),
        )
    }

    /// A fenced settle of the job (complete or fail).
    fn settle<'py, F, Fut>(slf: &Bound<'py, Self>, settle: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: FnOnce(Arc<Guard>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Job, JobWriteError>> + Send + 'static,
    {
        PyHeld::write(
            slf.as_super(),
            |guard, id, url| async move {
                let job = settle(guard)
                    .await
                    .map_err(|error| job_write_error(id, error, &url))?;
                Ok((job, true))
            },
            convert::job,
        )
    }
}

fn job_guard(guard: &Guard) -> Result<&JobGuard, JobWriteError> {
    match guard {
        Guard::Job(job) => Ok(job),
        Guard::Run(_) => Err(JobWriteError::Invalid(tenure::Error::new(
            ErrorKind::Incompatible,
            "a job run holds a run's guard: report this as a bug of the Python package",
        ))),
    }
}

fn job_write_error(id: String, error: JobWriteError, url: &Arc<str>) -> Failure {
    match error {
        JobWriteError::OwnershipLost(cause) => Failure::Lost(id, cause.label()),
        JobWriteError::TakenAway(loss) => Failure::Lost(id, loss.label()),
        JobWriteError::Unconfirmed(error) | JobWriteError::Invalid(error) => {
            Failure::store(error, url)
        }
        other => Failure::store(
            tenure::Error::new(ErrorKind::InvalidInput, other.to_string()),
            url,
        ),
    }
}

#[pymethods]
impl PyJobRun {
    /// The job as claimed.
    #[getter]
    fn job(&self, py: Python<'_>) -> Py<PyAny> {
        self.job.clone_ref(py)
    }

    /// The claim its writes present.
    #[getter]
    fn claim<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::job_claim(py, &self.claim)
    }

    /// The fenced completion; answers the job.
    fn complete<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::settle(
            slf,
            |guard| async move { job_guard(&guard)?.complete().await },
        )
    }

    /// The fenced failure: queued again after `backoff` seconds while
    /// attempts are left, else (or with `dead_letter=True`) dead-lettered.
    #[pyo3(signature = (error, *, backoff=None, dead_letter=false))]
    fn fail<'py>(
        slf: &Bound<'py, Self>,
        error: String,
        backoff: Option<&Bound<'py, PyAny>>,
        dead_letter: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let action = store::fail_action(backoff, dead_letter)?;
        Self::settle(slf, move |guard| async move {
            job_guard(&guard)?.fail(&error, action).await
        })
    }
}
