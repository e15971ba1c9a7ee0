//! `tenure.Election` and `tenure.Schedule`: the keeper's two helpers for
//! "one worker at a time" (a leader) and "once per tick" (a schedule),
//! their work written as Python coroutines run on the caller's loop and
//! cancelled the moment the lease under them is lost.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;

use tenure::keeper::{Firing, Missed};
use tenure::{Election, Leadership, Schedule, Term, TermEnd, Tick, TickOutcome};

use crate::bridge::{self, call_on_loop, Failure};
use crate::convert::{self, args, make};
use crate::errors::{self, IntoPyResult};
use crate::keeper::PyKeeper;

fn term_end<'py>(py: Python<'py>, end: &TermEnd) -> PyResult<Bound<'py, PyAny>> {
    let (reason, detail) = match end {
        TermEnd::Lost(cause) => ("lost", Some(cause.label().to_owned())),
        TermEnd::WorkReturned => ("work_returned", None),
        TermEnd::WorkFailed(error) => ("work_failed", Some(error.clone())),
        TermEnd::SteppedDown => ("stepped_down", None),
        TermEnd::StoppedAtDeadline => ("stopped_at_deadline", None),
        other => {
            return Err(convert::unknown_answer(
                "the election",
                &format!("{other:?}"),
            ))
        }
    };
    make(py, "TermEnd", args![py, reason, detail])
}

fn leadership<'py>(py: Python<'py>, leadership: &Leadership) -> PyResult<Bound<'py, PyAny>> {
    let (state, leader, fence) = match leadership {
        Leadership::Campaigning => ("campaigning", None, None),
        Leadership::Following { leader, fence } => {
            ("following", Some(leader.clone()), Some(*fence))
        }
        Leadership::Leading { claim } => ("leading", Some(claim.owner.clone()), Some(claim.fence)),
        Leadership::Stopped => ("stopped", None, None),
        other => {
            return Err(convert::unknown_answer(
                "the election",
                &format!("{other:?}"),
            ))
        }
    };
    make(py, "Leadership", args![py, state, leader, fence])
}

/// One term of leadership, handed to `on_elected`.
#[pyclass(module = "tenure._tenure", name = "Term", frozen)]
pub(crate) struct PyTerm {
    term: Term,
}

#[pymethods]
impl PyTerm {
    /// The election's name.
    #[getter]
    fn election(&self) -> &str {
        self.term.election()
    }

    /// The leader's fence: present it to every resource the leader writes.
    #[getter]
    fn fence(&self) -> u64 {
        self.term.fence()
    }

    /// The claim of the term's lease.
    #[getter]
    fn claim<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::claim(py, self.term.claim())
    }

    /// Why leadership was lost, or `None` while leading.
    #[getter]
    fn loss(&self) -> Option<&'static str> {
        self.term.loss().map(|cause| cause.label())
    }

    /// Raises `OwnershipLostError` once leadership is lost.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let term = self.term.clone();
        bridge::spawn(
            py,
            async move {
                term.check()
                    .await
                    .map_err(|lost| Failure::Lost(lost.id, lost.cause.label()))
            },
            |py, ()| Ok(py.None().into_bound(py)),
        )
    }

    /// Returns when the leader is asked to step down (the election shuts
    /// down): finish, then return from `on_elected`.
    fn stepping_down<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stepping_down = self.term.stepping_down();
        bridge::spawn(
            py,
            async move {
                stepping_down.cancelled().await;
                Ok(())
            },
            |py, ()| Ok(py.None().into_bound(py)),
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<tenure.Term election={:?} fence={}>",
            self.term.election(),
            self.term.fence()
        )
    }
}

/// A campaign for leadership; see `tenure.Election`.
#[pyclass(module = "tenure._tenure", name = "Election", frozen)]
pub(crate) struct PyElection {
    election: Arc<Election>,
}

#[pymethods]
impl PyElection {
    #[new]
    #[pyo3(signature = (keeper, name, on_elected, *, retry_interval=None, on_term_end=None))]
    fn new(
        keeper: &Bound<'_, PyKeeper>,
        name: String,
        on_elected: Py<PyAny>,
        retry_interval: Option<&Bound<'_, PyAny>>,
        on_term_end: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let keeper = keeper.get();
        let mut builder = Election::builder(Arc::clone(&keeper.keeper), name);
        if let Some(interval) = convert::optional_duration(retry_interval, "retry_interval")? {
            builder = builder.retry_interval(interval);
        }
        if let Some(hook) = on_term_end {
            let inbox = Arc::clone(&keeper.inbox);
            let hook = Arc::new(hook);
            builder = builder.on_term_end(move |end| {
                let hook = Arc::clone(&hook);
                inbox.post(move |py| {
                    // The hook's own failure is its to report: it is told, not asked.
                    if let Ok(end) = term_end(py, &end) {
                        let _ = hook.bind(py).call1((end,));
                    }
                });
            });
        }
        let (inbox, watch) = (Arc::clone(&keeper.inbox), Arc::clone(&keeper.watch));
        let on_elected = Arc::new(on_elected);
        let election = {
            let _runtime = bridge::runtime().enter();
            builder
                .start(move |term: Term| {
                    let (inbox, on_elected) = (Arc::clone(&inbox), Arc::clone(&on_elected));
                    let given_up = watch.given_up();
                    async move {
                        call_on_loop(&inbox, &on_elected, given_up, move |py| {
                            Ok(Bound::new(py, PyTerm { term })?.into_any())
                        })
                        .await
                    }
                })
                .or_raise(&keeper.url)?
        };
        Ok(PyElection {
            election: Arc::new(election),
        })
    }

    /// The election's name.
    #[getter]
    fn name(&self) -> &str {
        self.election.name()
    }

    /// Where the election stands for this worker: a `Leadership`.
    #[getter]
    fn leadership<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        leadership(py, &self.election.leadership())
    }

    /// Waits until the leadership changes, then answers it.
    fn changed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut watch = self.election.watch();
        bridge::spawn(
            py,
            async move {
                watch.changed().await.map_err(|_| {
                    Failure::Store(
                        tenure::Error::new(
                            tenure::ErrorKind::Stopped,
                            "the election has stopped: its leadership no longer changes",
                        ),
                        None,
                    )
                })?;
                let now = watch.borrow_and_update().clone();
                Ok(now)
            },
            |py, now| leadership(py, &now),
        )
    }

    /// Stops campaigning: a leader steps down (its work may finish within
    /// `grace` seconds); answers how the last term ended (a `TermEnd`) or
    /// `None` if this worker was not leading.
    #[pyo3(signature = (grace=None))]
    fn shutdown<'py>(
        &self,
        py: Python<'py>,
        grace: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let grace = convert::optional_duration(grace, "grace")?
            .unwrap_or(crate::keeper::DEFAULT_SHUTDOWN_GRACE);
        let election = Arc::clone(&self.election);
        bridge::spawn(
            py,
            async move { Ok(election.shutdown_within(grace).await) },
            |py, end| match end {
                Some(end) => term_end(py, &end),
                None => Ok(py.None().into_bound(py)),
            },
        )
    }
}

fn tick<'py>(py: Python<'py>, tick: Tick) -> PyResult<Bound<'py, PyAny>> {
    make(py, "Tick", args![py, tick.start(), tick.end()])
}

fn ticks<'py>(py: Python<'py>, missed: &Missed) -> PyResult<Bound<'py, PyAny>> {
    let items = missed
        .ticks()
        .iter()
        .map(|each| tick(py, *each))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

fn tick_outcome<'py>(py: Python<'py>, outcome: &TickOutcome) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = pyo3::types::PyDict::new(py);
    match outcome {
        TickOutcome::Delivered { fence, missed, .. } => {
            kwargs.set_item("fence", fence)?;
            kwargs.set_item("missed", ticks(py, missed)?)?;
            kwargs.set_item("delivered", true)?;
        }
        TickOutcome::DeliveryFailed {
            fence,
            missed,
            error,
            ..
        } => {
            kwargs.set_item("fence", fence)?;
            kwargs.set_item("missed", ticks(py, missed)?)?;
            kwargs.set_item("error", error)?;
            kwargs.set_item("delivered", true)?;
        }
        TickOutcome::Lost {
            fence,
            missed,
            cause,
            delivered,
            ..
        } => {
            kwargs.set_item("fence", fence)?;
            kwargs.set_item("missed", ticks(py, missed)?)?;
            kwargs.set_item("cause", cause.label())?;
            kwargs.set_item("delivered", delivered)?;
        }
        _ => {}
    }
    convert::make_with(
        py,
        "TickOutcome",
        args![py, outcome.label(), tick(py, outcome.tick())?],
        &kwargs,
    )
}

/// The tick being fired, handed to the delivery.
#[pyclass(module = "tenure._tenure", name = "Firing", frozen)]
pub(crate) struct PyFiring {
    firing: Firing,
}

#[pymethods]
impl PyFiring {
    /// The tick being fired.
    #[getter]
    fn tick<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        tick(py, self.firing.tick())
    }

    /// Earlier ticks nobody fired, as far as the schedule looks back.
    #[getter]
    fn missed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ticks(py, self.firing.missed())
    }

    /// The fence of this tick's run: present it to what the delivery writes.
    #[getter]
    fn fence(&self) -> u64 {
        self.firing.fence()
    }

    /// The claim of this tick's run.
    #[getter]
    fn claim<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::claim(py, self.firing.claim())
    }

    /// Raises `OwnershipLostError` once the tick's lease is lost.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let firing = self.firing.clone();
        bridge::spawn(
            py,
            async move {
                firing
                    .check()
                    .await
                    .map_err(|lost| Failure::Lost(lost.id, lost.cause.label()))
            },
            |py, ()| Ok(py.None().into_bound(py)),
        )
    }
}

/// Ticks claimed once each, every interval or at a cron expression's
/// times; see `tenure.Schedule`.
#[pyclass(module = "tenure._tenure", name = "Schedule", frozen)]
pub(crate) struct PySchedule {
    schedule: Arc<Schedule>,
}

impl PySchedule {
    /// `made`, looking back `lookback` ticks when given.
    fn with_lookback(made: tenure::Result<Schedule>, lookback: Option<u32>) -> PyResult<Self> {
        let schedule = made
            .and_then(|schedule| match lookback {
                Some(ticks) => schedule.lookback(ticks),
                None => Ok(schedule),
            })
            .map_err(|error| errors::to_py(&error, None))?;
        Ok(PySchedule {
            schedule: Arc::new(schedule),
        })
    }
}

#[pymethods]
impl PySchedule {
    #[new]
    #[pyo3(signature = (name, every, *, lookback=None))]
    fn new(name: String, every: &Bound<'_, PyAny>, lookback: Option<u32>) -> PyResult<Self> {
        let every: Duration = convert::duration(every, "every")?;
        Self::with_lookback(Schedule::every(name, every), lookback)
    }

    /// A schedule ticking at the times a five-field cron `expression` names
    /// on the wall clocks of `time_zone` (an IANA name, or "UTC").
    #[staticmethod]
    #[pyo3(signature = (name, expression, time_zone, *, lookback=None))]
    fn cron(
        name: String,
        expression: &str,
        time_zone: &str,
        lookback: Option<u32>,
    ) -> PyResult<Self> {
        Self::with_lookback(Schedule::cron(name, expression, time_zone), lookback)
    }

    /// How many earlier ticks a firing looks back at for missed ones.
    #[getter]
    fn lookback(&self) -> u32 {
        self.schedule.lookback_ticks()
    }

    /// The schedule's name (its runs' scope).
    #[getter]
    fn name(&self) -> &str {
        self.schedule.name()
    }

    /// The tick holding `instant` (a timezone-aware datetime).
    fn tick_at<'py>(
        &self,
        py: Python<'py>,
        instant: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        tick(
            py,
            self.schedule
                .tick_at(convert::timestamp(instant, "instant")?),
        )
    }

    /// The run id of the tick starting at `tick.start`.
    fn run_id(&self, tick: &Bound<'_, PyAny>) -> PyResult<String> {
        let instant = convert::timestamp(&tick.getattr("start")?, "tick.start")?;
        Ok(self.schedule.run_id(self.schedule.tick_at(instant)))
    }

    /// Claims the tick that is due now (by the store's clock) and, if this
    /// worker won it, awaits `deliver(firing)` under its lease: a
    /// `TickOutcome`. The delivery is cancelled the moment the lease is lost.
    fn fire_due<'py>(
        &self,
        py: Python<'py>,
        keeper: &Bound<'py, PyKeeper>,
        deliver: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let keeper = keeper.get();
        let inner = Arc::clone(&keeper.keeper);
        let inbox = Arc::clone(&keeper.inbox);
        let given_up = keeper.watch.given_up();
        let url = Arc::clone(&keeper.url);
        let schedule = Arc::clone(&self.schedule);
        let deliver = Arc::new(deliver);
        bridge::spawn(
            py,
            async move {
                schedule
                    .fire_due(&inner, move |firing: Firing| async move {
                        call_on_loop(&inbox, &deliver, given_up, move |py| {
                            Ok(Bound::new(py, PyFiring { firing })?.into_any())
                        })
                        .await
                    })
                    .await
                    .map_err(|error| Failure::store(error.into(), &url))
            },
            |py, outcome| tick_outcome(py, &outcome),
        )
    }
}
