//! `Store.claim_within`'s answers: a `RunningJob` (defined here: the job
//! claimed through a `tenure.ConcurrencyLimit`, its slot lease, and the
//! writes that renew or end both), `Full` or `None`.
//!
//! A `RunningJob` keeps the Rust [`RunningJob`] it wraps, so its renewal,
//! completion, failure and release are the core's own
//! (`tenure_lease_core::queue::concurrency`), in the core's order.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use tenure::queue::{JobRenewal, LimitedClaim, RunningJob};
use tenure::{Renewal, Store};

use crate::convert::{self, args};
use crate::store;

/// `claim_within`'s answer as Python sees it: a `RunningJob`, `Full` or
/// `None` (no job was due; the slot was given back).
pub(crate) fn limited_claim(
    py: Python<'_>,
    claim: LimitedClaim,
    store: Arc<dyn Store>,
    url: Arc<str>,
) -> PyResult<Bound<'_, PyAny>> {
    match claim {
        LimitedClaim::Claimed(running) => {
            Ok(Bound::new(py, PyRunningJob::new(py, running, store, url)?)?.into_any())
        }
        LimitedClaim::Full {
            holder,
            retry_after,
        } => convert::make(
            py,
            "Full",
            args![
                py,
                convert::record(py, &holder)?,
                retry_after.map(|after| after.as_secs_f64())
            ],
        ),
        LimitedClaim::NoJob => Ok(py.None().into_bound(py)),
        other => Err(convert::unknown_answer(
            "claim_within",
            &format!("{other:?}"),
        )),
    }
}

/// A job claimed through a concurrency limit, with the slot lease its
/// worker holds while it runs.
#[pyclass(module = "tenure._tenure", name = "RunningJob", frozen)]
pub(crate) struct PyRunningJob {
    running: RunningJob,
    /// `running.job` as a `ClaimedJob`, converted once.
    job: Py<PyAny>,
    /// `running.slot` as a `LeaseRecord`, converted once.
    slot: Py<PyAny>,
    store: Arc<dyn Store>,
    url: Arc<str>,
}

impl PyRunningJob {
    fn new(
        py: Python<'_>,
        running: RunningJob,
        store: Arc<dyn Store>,
        url: Arc<str>,
    ) -> PyResult<Self> {
        Ok(PyRunningJob {
            job: convert::claimed_job(py, &running.job)?.unbind(),
            slot: convert::record(py, &running.slot)?.unbind(),
            running,
            store,
            url,
        })
    }
}

#[pymethods]
impl PyRunningJob {
    /// `case tenure.RunningJob(job, slot):`.
    #[classattr]
    fn __match_args__() -> (&'static str, &'static str) {
        ("job", "slot")
    }

    /// The job and its claim (a `ClaimedJob`, as `claim` answers it).
    #[getter]
    fn job(&self, py: Python<'_>) -> Py<PyAny> {
        self.job.clone_ref(py)
    }

    /// The slot lease (a `LeaseRecord`), as admitted.
    #[getter]
    fn slot(&self, py: Python<'_>) -> Py<PyAny> {
        self.slot.clone_ref(py)
    }

    /// The claim on the slot lease.
    #[getter]
    fn slot_claim<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::claim(py, &self.running.slot_claim())
    }

    fn __repr__(&self) -> String {
        let slot = &self.running.slot;
        let held = slot
            .slots
            .iter()
            .map(|(scope, number)| format!("{scope}#{number}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "<tenure.RunningJob job {:?} of queue {:?} in slot {held}>",
            self.running.job.job.id, self.running.job.job.queue
        )
    }

    /// Renews the slot for `ttl` seconds, then, while the slot is held, the
    /// job: a pair `(slot_renewal, job_renewal)`, each `Renewed` or `Lost`,
    /// the job's `None` when the slot was lost (the job is left to lapse).
    fn renew<'py>(&self, py: Python<'py>, ttl: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let ttl = convert::duration(ttl, "ttl")?;
        let running = self.running.clone();
        let store = Arc::clone(&self.store);
        store::answer(
            py,
            &self.url,
            async move { running.renew(&*store, ttl).await },
            |py, (slot, job): &(Renewal, Option<JobRenewal>)| {
                let job = match job {
                    Some(job) => convert::job_renewal(py, job)?,
                    None => py.None().into_bound(py),
                };
                let pair = [convert::renewal(py, slot)?, job];
                Ok(PyTuple::new(py, pair)?.into_any())
            },
        )
    }

    /// Completes the job, then gives the slot back: the job's `Settled` or
    /// `Rejected`.
    fn complete<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let running = self.running.clone();
        let store = Arc::clone(&self.store);
        store::answer(
            py,
            &self.url,
            async move { running.complete(&*store).await },
            convert::job_settle,
        )
    }

    /// Fails the job as `Store.fail` does, then gives the slot back: the
    /// job's `Settled` or `Rejected`.
    #[pyo3(signature = (error, *, backoff=None, dead_letter=false))]
    fn fail<'py>(
        &self,
        py: Python<'py>,
        error: String,
        backoff: Option<&Bound<'py, PyAny>>,
        dead_letter: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let action = store::fail_action(backoff, dead_letter)?;
        let running = self.running.clone();
        let store = Arc::clone(&self.store);
        store::answer(
            py,
            &self.url,
            async move { running.fail(&*store, &error, action).await },
            convert::job_settle,
        )
    }

    /// Gives the slot back, the job left as it is: `Applied` while the
    /// worker held the slot, `Rejected` once another claim took it over.
    fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let running = self.running.clone();
        let store = Arc::clone(&self.store);
        store::answer(
            py,
            &self.url,
            async move { running.release(&*store).await },
            convert::transition,
        )
    }
}
