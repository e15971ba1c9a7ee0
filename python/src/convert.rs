//! Rust values as the dataclasses of `tenure._types`, and Python arguments
//! as Rust requests.
//!
//! Every answer crosses into Python here, once, so the mapping of each
//! Rust outcome to its Python class is written down in one place.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDelta, PyDeltaAccess, PyDict, PyFrozenSet, PyList, PyModule, PyTuple};

use tenure::keeper::{CancelAnywhereOutcome, ReconcileReport, ShutdownReport};
use tenure::limits::{MAX_RATE_PERMITS, MAX_SCOPE_CAPACITY};
use tenure::queue::{
    Claimed, ClaimedJob, ConcurrencyLimit, Enqueued, Job, JobClaim, JobLoss, JobRenewal, JobSettle,
    JobState, OperatorRetry, QueueCounts, ReapReport, TakeBack, TakeBackRefusal, UniquePolicy,
};
use tenure::rate::RateLimit;
use tenure::{
    Admission, CancelOutcome, Claim, ErrorKind, ExpiredScan, FenceCheck, GateRecord, LeaseRecord,
    LossReason, NotTakenReason, Renewal, SkippedRecord, Status, Takeover, Timestamp, Transition,
    TransitionRejection,
};

use crate::errors;

static TYPES: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Calls the `tenure._types` class `name` with `args`.
pub(crate) fn make<'py>(
    py: Python<'py>,
    name: &str,
    args: Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    types(py)?.getattr(name)?.call1(PyTuple::new(py, args)?)
}

/// [`make`] with keyword arguments too.
pub(crate) fn make_with<'py>(
    py: Python<'py>,
    name: &str,
    args: Vec<Bound<'py, PyAny>>,
    kwargs: &Bound<'py, pyo3::types::PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    types(py)?
        .getattr(name)?
        .call(PyTuple::new(py, args)?, Some(kwargs))
}

fn types(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    let module =
        TYPES.get_or_try_init(py, || Ok::<_, PyErr>(py.import("tenure._types")?.unbind()))?;
    Ok(module.bind(py))
}

/// The arguments of [`make`], each converted to a Python object.
macro_rules! args {
    ($py:expr $(, $value:expr)* $(,)?) => {
        vec![$(pyo3::IntoPyObjectExt::into_bound_py_any($value, $py)?),*]
    };
}
pub(crate) use args;

fn none(py: Python<'_>) -> Bound<'_, PyAny> {
    py.None().into_bound(py)
}

fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

pub(crate) fn status<'py>(py: Python<'py>, status: Status) -> PyResult<Bound<'py, PyAny>> {
    make(py, "Status", args![py, status.as_str()])
}

fn optional_status<'py>(py: Python<'py>, value: Option<Status>) -> PyResult<Bound<'py, PyAny>> {
    value.map_or_else(|| Ok(none(py)), |value| status(py, value))
}

fn job_state<'py>(py: Python<'py>, state: JobState) -> PyResult<Bound<'py, PyAny>> {
    make(py, "JobState", args![py, state.as_str()])
}

fn json<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(pythonize::pythonize(py, value)?)
}

/// A JSON value that may be absent, as Python's `None` then.
fn optional_json<'py>(
    py: Python<'py>,
    value: Option<&serde_json::Value>,
) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Some(value) => json(py, value),
        None => Ok(py.None().into_bound(py)),
    }
}

pub(crate) fn claim<'py>(py: Python<'py>, claim: &Claim) -> PyResult<Bound<'py, PyAny>> {
    make(py, "Claim", args![py, &claim.id, &claim.owner, claim.fence])
}

pub(crate) fn record<'py>(py: Python<'py>, record: &LeaseRecord) -> PyResult<Bound<'py, PyAny>> {
    let metadata = json(py, &serde_json::Value::Object(record.metadata.clone()))?;
    make(
        py,
        "LeaseRecord",
        args![
            py,
            &record.id,
            PyFrozenSet::new(py, &record.scopes)?,
            &record.kind,
            status(py, record.status)?,
            record.owner.as_deref(),
            record.fence,
            record.lease_expires_at,
            record.created_at,
            record.updated_at,
            record.error.as_deref(),
            record.stop_reason.as_deref(),
            metadata,
            optional_json(py, record.progress.as_ref())?,
            slots(py, record)?,
        ],
    )
}

/// A record's slots, scope → slot number, as a `dict`.
fn slots<'py>(py: Python<'py>, record: &LeaseRecord) -> PyResult<Bound<'py, PyAny>> {
    let slots = PyDict::new(py);
    for (scope, slot) in &record.slots {
        slots.set_item(scope, slot)?;
    }
    Ok(slots.into_any())
}

pub(crate) fn records<'py>(
    py: Python<'py>,
    records: &[LeaseRecord],
) -> PyResult<Bound<'py, PyAny>> {
    let items = records
        .iter()
        .map(|each| record(py, each))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

fn skipped<'py>(py: Python<'py>, skipped: &[SkippedRecord]) -> PyResult<Bound<'py, PyAny>> {
    let items = skipped
        .iter()
        .map(|each| make(py, "SkippedRecord", args![py, &each.id, &each.reason]))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

/// `Admitted` (from the store), `Conflict` or `RateLimited`.
pub(crate) fn admission<'py>(
    py: Python<'py>,
    admission: &Admission,
) -> PyResult<Bound<'py, PyAny>> {
    match admission {
        Admission::Admitted {
            record,
            interrupted,
        } => admitted(py, record, interrupted, None),
        Admission::Conflict {
            holder,
            retry_after,
        } => conflict(py, holder, *retry_after),
        Admission::RateLimited { key, retry_after } => rate_limited(py, key, *retry_after),
        other => Err(unknown_answer("admit", other.label())),
    }
}

/// `Admitted`, with the `run` a keeper holds it by.
pub(crate) fn admitted<'py>(
    py: Python<'py>,
    admitted: &LeaseRecord,
    interrupted: &[LeaseRecord],
    run: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "Admitted",
        args![
            py,
            record(py, admitted)?,
            records(py, interrupted)?,
            run.unwrap_or_else(|| none(py))
        ],
    )
}

pub(crate) fn conflict<'py>(
    py: Python<'py>,
    holder: &LeaseRecord,
    retry_after: Option<Duration>,
) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "Conflict",
        args![py, record(py, holder)?, retry_after.map(seconds)],
    )
}

pub(crate) fn rate_limited<'py>(
    py: Python<'py>,
    key: &str,
    retry_after: Duration,
) -> PyResult<Bound<'py, PyAny>> {
    make(py, "RateLimited", args![py, key, seconds(retry_after)])
}

pub(crate) fn already_exists<'py>(py: Python<'py>, id: &str) -> PyResult<Bound<'py, PyAny>> {
    make(py, "AlreadyExists", args![py, id])
}

fn loss_reason<'py>(py: Python<'py>, reason: LossReason) -> PyResult<Bound<'py, PyAny>> {
    let terminal = match reason {
        LossReason::Terminal(status) => Some(status),
        _ => None,
    };
    make(
        py,
        "Lost",
        args![py, reason.label(), optional_status(py, terminal)?],
    )
}

pub(crate) fn renewal<'py>(py: Python<'py>, renewal: &Renewal) -> PyResult<Bound<'py, PyAny>> {
    match renewal {
        Renewal::Renewed { expires_at } => make(py, "Renewed", args![py, *expires_at]),
        Renewal::Lost(reason) => loss_reason(py, *reason),
        other => Err(unknown_answer("renew", other.label())),
    }
}

pub(crate) fn transition<'py>(
    py: Python<'py>,
    transition: &Transition,
) -> PyResult<Bound<'py, PyAny>> {
    let (reason, from, requested) = match transition {
        Transition::Applied(applied) => {
            return make(py, "Applied", args![py, record(py, applied)?])
        }
        Transition::Rejected(TransitionRejection::Missing) => ("missing", None, None),
        Transition::Rejected(TransitionRejection::Terminal(status)) => {
            ("terminal", Some(*status), None)
        }
        Transition::Rejected(TransitionRejection::Stale) => ("stale", None, None),
        Transition::Rejected(TransitionRejection::NotAllowed { from, to }) => {
            ("not_allowed", Some(*from), Some(*to))
        }
        other => return Err(unknown_answer("transition", other.label())),
    };
    make(
        py,
        "Rejected",
        args![
            py,
            reason,
            optional_status(py, from)?,
            optional_status(py, requested)?
        ],
    )
}

pub(crate) fn takeover<'py>(py: Python<'py>, takeover: &Takeover) -> PyResult<Bound<'py, PyAny>> {
    let (reason, retry_after, terminal) = match takeover {
        Takeover::Taken(taken) => return make(py, "Taken", args![py, record(py, taken)?]),
        Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after }) => {
            ("lease_valid", Some(seconds(*retry_after)), None)
        }
        Takeover::NotTaken(NotTakenReason::Terminal(status)) => ("terminal", None, Some(*status)),
        Takeover::NotTaken(NotTakenReason::Interrupted) => ("interrupted", None, None),
        Takeover::NotTaken(NotTakenReason::Missing) => ("missing", None, None),
        other => return Err(unknown_answer("claim_for_takeover", other.label())),
    };
    make(
        py,
        "NotTaken",
        args![py, reason, retry_after, optional_status(py, terminal)?],
    )
}

pub(crate) fn expired_scan<'py>(
    py: Python<'py>,
    scan: &ExpiredScan,
) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "ExpiredScan",
        args![py, records(py, &scan.records)?, skipped(py, &scan.skipped)?],
    )
}

pub(crate) fn fence_check<'py>(py: Python<'py>, check: &FenceCheck) -> PyResult<Bound<'py, PyAny>> {
    match check {
        FenceCheck::Accepted => make(py, "Accepted", vec![]),
        FenceCheck::Stale(stale) => {
            make(py, "Stale", args![py, stale.presented, stale.highest_seen])
        }
        other => Err(unknown_answer("check_fence", other.label())),
    }
}

pub(crate) fn job<'py>(py: Python<'py>, job: &Job) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "Job",
        args![
            py,
            &job.id,
            &job.queue,
            json(py, &job.payload)?,
            job.priority,
            job.run_at,
            job.attempt,
            job.max_attempts,
            PyFrozenSet::new(py, &job.required_capabilities)?,
            job_state(py, job.state)?,
            job.owner.as_deref(),
            job.fence,
            job.lease_expires_at,
            job.last_error.as_deref(),
            job.dead_reason.map(tenure::queue::DeadReason::as_str),
            job.created_at,
            job.updated_at,
            job.taken_back,
            optional_json(py, job.progress.as_ref())?,
            job.unique.as_ref().map(|unique| unique.key.as_str()),
            job.unique.as_ref().map(|unique| unique.policy.kind()),
            job.unique_until(),
        ],
    )
}

pub(crate) fn enqueued<'py>(py: Python<'py>, answer: &Enqueued) -> PyResult<Bound<'py, PyAny>> {
    match answer {
        Enqueued::Created(created) => make(py, "Created", args![py, job(py, created)?]),
        Enqueued::Duplicate(holder) => make(py, "Duplicate", args![py, job(py, holder)?]),
        _ => Err(unknown_answer("enqueue_unique", "unknown")),
    }
}

/// `enqueue_unique`'s `policy` and `period` keywords as a [`UniquePolicy`]:
/// a period exactly for `for_period`.
pub(crate) fn unique_policy(
    policy: &str,
    period: Option<&Bound<'_, PyAny>>,
) -> PyResult<UniquePolicy> {
    let period = period
        .filter(|value| !value.is_none())
        .map(|value| duration(value, "period"))
        .transpose()?;
    match (policy, period) {
        ("while_queued", None) => Ok(UniquePolicy::WhileQueued),
        ("while_unfinished", None) => Ok(UniquePolicy::WhileUnfinished),
        ("for_period", Some(period)) => Ok(UniquePolicy::ForPeriod(period)),
        ("for_period", None) => Err(PyValueError::new_err(
            "policy \"for_period\" needs period=SECONDS",
        )),
        ("while_queued" | "while_unfinished", Some(_)) => Err(PyValueError::new_err(format!(
            "period is for policy \"for_period\" only, not {policy:?}"
        ))),
        _ => Err(PyValueError::new_err(format!(
            "policy {policy:?} is none of \"while_queued\", \"while_unfinished\", \"for_period\""
        ))),
    }
}

pub(crate) fn jobs<'py>(py: Python<'py>, jobs: &[Job]) -> PyResult<Bound<'py, PyAny>> {
    let items = jobs
        .iter()
        .map(|each| job(py, each))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

pub(crate) fn job_claim<'py>(py: Python<'py>, claim: &JobClaim) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "JobClaim",
        args![py, &claim.id, &claim.owner, claim.fence, claim.attempt],
    )
}

pub(crate) fn claimed_job<'py>(
    py: Python<'py>,
    claimed: &ClaimedJob,
) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "ClaimedJob",
        args![py, job(py, &claimed.job)?, job_claim(py, &claimed.claim)?],
    )
}

pub(crate) fn claimed_jobs<'py>(
    py: Python<'py>,
    claimed: &[ClaimedJob],
) -> PyResult<Bound<'py, PyAny>> {
    let items = claimed
        .iter()
        .map(|each| claimed_job(py, each))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

/// `claim_limited`'s answer: `Claimed(jobs, retry_after)`.
pub(crate) fn claimed<'py>(py: Python<'py>, claimed: &Claimed) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "Claimed",
        args![
            py,
            claimed_jobs(py, &claimed.jobs)?,
            claimed.retry_after.map(seconds)
        ],
    )
}

fn job_loss<'py>(py: Python<'py>, class: &str, loss: JobLoss) -> PyResult<Bound<'py, PyAny>> {
    make(py, class, args![py, loss.label()])
}

pub(crate) fn job_renewal<'py>(
    py: Python<'py>,
    renewal: &JobRenewal,
) -> PyResult<Bound<'py, PyAny>> {
    match renewal {
        JobRenewal::Renewed { expires_at } => make(py, "Renewed", args![py, *expires_at]),
        JobRenewal::Lost(loss) => job_loss(py, "Lost", *loss),
        other => Err(unknown_answer("renew_job", &format!("{other:?}"))),
    }
}

pub(crate) fn job_settle<'py>(py: Python<'py>, settle: &JobSettle) -> PyResult<Bound<'py, PyAny>> {
    match settle {
        JobSettle::Settled(settled) => make(py, "Settled", args![py, job(py, settled)?]),
        JobSettle::Rejected(loss) => job_loss(py, "Rejected", *loss),
        other => Err(unknown_answer("settle", &format!("{other:?}"))),
    }
}

pub(crate) fn take_back<'py>(py: Python<'py>, answer: &TakeBack) -> PyResult<Bound<'py, PyAny>> {
    let (reason, state, dead_reason) = match answer {
        TakeBack::Taken(claimed) => {
            return make(
                py,
                "TakenBack",
                args![py, job(py, &claimed.job)?, job_claim(py, &claimed.claim)?],
            )
        }
        TakeBack::NotTaken(TakeBackRefusal::Missing) => ("missing", None, None),
        TakeBack::NotTaken(TakeBackRefusal::NotDeadLettered(state)) => {
            ("not_dead_lettered", Some(job_state(py, *state)?), None)
        }
        TakeBack::NotTaken(TakeBackRefusal::NotByReaper(reason)) => {
            ("not_by_reaper", None, Some(reason.as_str()))
        }
        TakeBack::NotTaken(TakeBackRefusal::NotTheReapedClaim) => {
            ("not_the_reaped_claim", None, None)
        }
        other => return Err(unknown_answer("take_back", &format!("{other:?}"))),
    };
    make(
        py,
        "NotTakenBack",
        args![py, reason, state.unwrap_or_else(|| none(py)), dead_reason],
    )
}

pub(crate) fn operator_retry<'py>(
    py: Python<'py>,
    answer: &OperatorRetry,
) -> PyResult<Bound<'py, PyAny>> {
    match answer {
        OperatorRetry::Requeued(requeued) => make(py, "Requeued", args![py, job(py, requeued)?]),
        OperatorRetry::NotDeadLettered(state) => make(
            py,
            "NotRequeued",
            args![py, "not_dead_lettered", job_state(py, *state)?],
        ),
        OperatorRetry::Missing => make(py, "NotRequeued", args![py, "missing", none(py)]),
        other => Err(unknown_answer("retry_dead_letter", &format!("{other:?}"))),
    }
}

pub(crate) fn gates<'py>(py: Python<'py>, gates: &[GateRecord]) -> PyResult<Bound<'py, PyAny>> {
    let items = gates
        .iter()
        .map(|gate| {
            make(
                py,
                "GateRecord",
                args![py, &gate.resource, gate.fence, gate.checked_at],
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

pub(crate) fn queue_counts<'py>(
    py: Python<'py>,
    counts: &[QueueCounts],
) -> PyResult<Bound<'py, PyAny>> {
    let items = counts
        .iter()
        .map(|each| {
            make(
                py,
                "QueueCounts",
                args![
                    py,
                    &each.queue,
                    each.queued,
                    each.claimed,
                    each.completed,
                    each.dead_lettered
                ],
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

pub(crate) fn reap_report<'py>(
    py: Python<'py>,
    report: &ReapReport,
) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "ReapReport",
        args![
            py,
            jobs(py, &report.requeued)?,
            jobs(py, &report.dead_lettered)?
        ],
    )
}

pub(crate) fn cancel_outcome<'py>(
    py: Python<'py>,
    outcome: &CancelOutcome,
) -> PyResult<Bound<'py, PyAny>> {
    let (label, retry_after, state) = match outcome {
        CancelOutcome::Cancelled => ("cancelled", None, None),
        CancelOutcome::NotActiveLocally => ("not_active_locally", None, None),
        CancelOutcome::LeaseValidElsewhere { retry_after } => {
            ("lease_valid_elsewhere", Some(seconds(*retry_after)), None)
        }
        CancelOutcome::TakenOver => ("taken_over", None, None),
        CancelOutcome::NotCancellable { status } => ("not_cancellable", None, *status),
        _ => ("unknown", None, None),
    };
    make(
        py,
        "CancelResult",
        args![
            py,
            label,
            retry_after,
            optional_status(py, state)?,
            none(py)
        ],
    )
}

pub(crate) fn cancel_anywhere_outcome<'py>(
    py: Python<'py>,
    outcome: &CancelAnywhereOutcome,
) -> PyResult<Bound<'py, PyAny>> {
    let (retry_after, state, written) = match outcome {
        CancelAnywhereOutcome::Cancelled { record: written }
        | CancelAnywhereOutcome::CancelledByTakeover { record: written } => {
            (None, None, Some(record(py, written)?))
        }
        CancelAnywhereOutcome::LeaseValidElsewhere { retry_after } => {
            (Some(seconds(*retry_after)), None, None)
        }
        CancelAnywhereOutcome::NotCancellable { status } => (None, Some(*status), None),
        CancelAnywhereOutcome::InvalidInput { error } => {
            return Err(errors::to_py(error, None));
        }
        _ => (None, None, None),
    };
    make(
        py,
        "CancelResult",
        args![
            py,
            outcome.label(),
            retry_after,
            optional_status(py, state)?,
            written.unwrap_or_else(|| none(py))
        ],
    )
}

pub(crate) fn shutdown_report<'py>(
    py: Python<'py>,
    report: &ShutdownReport,
) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "ShutdownReport",
        args![
            py,
            report.drained,
            &report.stopped_runs,
            &report.stopped_jobs,
            report.reconciler_cancelled
        ],
    )
}

pub(crate) fn reconcile_report<'py>(
    py: Python<'py>,
    report: &ReconcileReport,
) -> PyResult<Bound<'py, PyAny>> {
    make(
        py,
        "ReconcileReport",
        args![
            py,
            report.scanned,
            &report.recovered,
            &report.released,
            &report.skipped_own,
            skipped(py, &report.undecodable)?,
            report.not_taken,
            report.claim_errors,
            &report.callback_failed
        ],
    )
}

pub(crate) fn unknown_answer(operation: &str, label: &str) -> PyErr {
    errors::new(
        ErrorKind::Incompatible,
        format!("{operation} answered {label}, which this version of the Python package does not know: upgrade it"),
    )
}

/// A duration argument: seconds (`int` or `float`) or a `datetime.timedelta`.
pub(crate) fn duration(value: &Bound<'_, PyAny>, field: &'static str) -> PyResult<Duration> {
    seconds_arg(value).map_err(|message| invalid(field, message))
}

/// [`duration`]'s reading, its refusal a message.
fn seconds_arg(value: &Bound<'_, PyAny>) -> Result<Duration, String> {
    let secs = if let Ok(delta) = value.cast::<PyDelta>() {
        f64::from(delta.get_days()) * 86_400.0
            + f64::from(delta.get_seconds())
            + f64::from(delta.get_microseconds()) / 1e6
    } else {
        value
            .extract::<f64>()
            .map_err(|_| "must be a number of seconds or a datetime.timedelta".to_owned())?
    };
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("must be a finite, non-negative number of seconds, not {secs}"))
}

/// An optional duration argument (`None` stays `None`).
pub(crate) fn optional_duration(
    value: Option<&Bound<'_, PyAny>>,
    field: &'static str,
) -> PyResult<Option<Duration>> {
    match value {
        Some(value) if !value.is_none() => duration(value, field).map(Some),
        _ => Ok(None),
    }
}

/// A JSON argument (metadata, payloads): dicts, lists, strings, numbers,
/// booleans and `None`.
pub(crate) fn json_value(
    value: &Bound<'_, PyAny>,
    field: &'static str,
) -> PyResult<serde_json::Value> {
    pythonize::depythonize(value)
        .map_err(|error| invalid(field, format_args!("must be JSON-serialisable: {error}")))
}

/// An instant argument: a timezone-aware `datetime`.
pub(crate) fn timestamp(value: &Bound<'_, PyAny>, field: &'static str) -> PyResult<Timestamp> {
    value
        .extract::<Timestamp>()
        .map_err(|_| invalid(field, "must be a timezone-aware datetime"))
}

/// A `Claim` argument: a `tenure.Claim` (or anything with `id`, `owner`
/// and `fence`).
pub(crate) fn claim_arg(value: &Bound<'_, PyAny>) -> PyResult<Claim> {
    Ok(Claim::new(
        value.getattr("id")?.extract::<String>()?,
        value.getattr("owner")?.extract::<String>()?,
        value.getattr("fence")?.extract::<u64>()?,
    ))
}

/// A `JobClaim` argument: a `tenure.JobClaim` (or anything with `id`,
/// `owner`, `fence` and `attempt`).
pub(crate) fn job_claim_arg(value: &Bound<'_, PyAny>) -> PyResult<JobClaim> {
    Ok(JobClaim {
        id: value.getattr("id")?.extract()?,
        owner: value.getattr("owner")?.extract()?,
        fence: value.getattr("fence")?.extract()?,
        attempt: value.getattr("attempt")?.extract()?,
    })
}

/// `duration` rounded to the nearest microsecond: a period given as float
/// seconds carries the float's error (`17280000.001` reads as a few
/// nanoseconds short of whole milliseconds), which must not make a whole
/// number of milliseconds read as fractional.
fn to_whole_micros(duration: std::time::Duration) -> std::time::Duration {
    let micros = duration.as_nanos().saturating_add(500) / 1000;
    std::time::Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

/// A `rate_limit` argument: a `tenure.RateLimit` (or anything with `key`,
/// `permits` and `period` in seconds); `None` for none. Only what cannot be
/// a `RateLimit` at all is refused here, the rest by the store's front.
pub(crate) fn rate_limit_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<RateLimit>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    let part = |name: &str| {
        value.getattr(name).map_err(|_| {
            invalid(
                "rate_limit",
                "must be a tenure.RateLimit(key, permits, period), or None",
            )
        })
    };
    let key = part("key")?
        .extract::<String>()
        .map_err(|_| invalid("rate_limit", "key must be a string"))?;
    let permits = part("permits")?.extract::<u32>().map_err(|_| {
        invalid(
            "rate_limit",
            format_args!("permits must be a whole number from 1 to {MAX_RATE_PERMITS}"),
        )
    })?;
    let period = seconds_arg(&part("period")?)
        .map_err(|message| invalid("rate_limit", format_args!("period {message}")))?;
    Ok(Some(RateLimit::new(key, permits, to_whole_micros(period))))
}

/// A `counted_scopes` argument: a mapping of scope to capacity (`None`
/// for none), in the mapping's order. A capacity that is no whole number
/// from 0 to 2³² − 1 is refused here (field `capacities`); the store's
/// front refuses the rest of what is out of bounds.
pub(crate) fn capacities_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, u32)>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(Vec::new());
    };
    let not_a_mapping = || {
        invalid(
            "capacities",
            "counted_scopes must be a mapping of scope to capacity, such as {\"exports\": 3}",
        )
    };
    let items = value.call_method0("items").map_err(|_| not_a_mapping())?;
    items
        .try_iter()
        .map_err(|_| not_a_mapping())?
        .map(|item| {
            let (scope, capacity) = item?
                .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()
                .map_err(|_| not_a_mapping())?;
            let scope = scope
                .extract::<String>()
                .map_err(|_| invalid("capacities", "each counted scope must be a string"))?;
            let capacity = capacity_arg(&capacity, &scope)?;
            Ok((scope, capacity))
        })
        .collect()
}

/// One capacity: a whole number (not a `bool`) that fits a `u32`.
fn capacity_arg(value: &Bound<'_, PyAny>, scope: &str) -> PyResult<u32> {
    let whole = if value.is_instance_of::<PyBool>() {
        None
    } else {
        value.extract::<u32>().ok()
    };
    whole.ok_or_else(|| {
        invalid(
            "capacities",
            format_args!(
                "{scope:?} has capacity {}, from 1 to {MAX_SCOPE_CAPACITY} allowed",
                value
                    .repr()
                    .map_or_else(|_| "?".to_owned(), |repr| repr.to_string())
            ),
        )
    })
}

/// A `ConcurrencyLimit` argument: a `tenure.ConcurrencyLimit` (or anything
/// with `key` and `capacity`). What cannot be read as one is refused here
/// (field `limit`; a capacity that is no whole number: `capacities`), the
/// rest by the store's front (a bad key: `scope`; a capacity out of
/// bounds: `capacities`).
pub(crate) fn concurrency_limit_arg(value: &Bound<'_, PyAny>) -> PyResult<ConcurrencyLimit> {
    let part = |name: &str| {
        value.getattr(name).map_err(|_| {
            invalid(
                "concurrency",
                "must be a tenure.ConcurrencyLimit(key, capacity)",
            )
        })
    };
    let key = part("key")?
        .extract::<String>()
        .map_err(|_| invalid("concurrency", "key must be a string"))?;
    let capacity = capacity_arg(&part("capacity")?, &key)?;
    Ok(ConcurrencyLimit::new(key, capacity))
}

/// The name an enum argument gives: a `tenure.Status` / `tenure.JobState`
/// member's value, or the name itself.
pub(crate) fn enum_name(value: &Bound<'_, PyAny>) -> PyResult<String> {
    match value.getattr("value") {
        Ok(inner) => inner.extract(),
        Err(_) => value.extract(),
    }
}

/// A status argument: a `tenure.Status` or its name.
pub(crate) fn status_arg(value: &Bound<'_, PyAny>) -> PyResult<Status> {
    let name = enum_name(value)?;
    [
        Status::Pending,
        Status::Running,
        Status::Interrupted,
        Status::Succeeded,
        Status::Failed,
    ]
    .into_iter()
    .find(|status| status.as_str() == name)
    .ok_or_else(|| {
        invalid(
            "status",
            format_args!(
                "unknown status {name:?}: pending, running, interrupted, succeeded or failed"
            ),
        )
    })
}

/// An `InvalidInputError` naming `field`.
pub(crate) fn invalid(field: &'static str, message: impl std::fmt::Display) -> PyErr {
    errors::to_py(&tenure::Error::invalid_input(field, message), None)
}

/// A list argument of strings (scopes, capabilities, kinds): any iterable
/// of `str`; a lone `str` is refused (it would be read letter by letter).
pub(crate) fn strings(
    value: Option<&Bound<'_, PyAny>>,
    field: &'static str,
) -> PyResult<Vec<String>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(Vec::new());
    };
    if value.is_instance_of::<pyo3::types::PyString>() {
        return Err(invalid(field, "must be a list of strings, not one string"));
    }
    value
        .try_iter()?
        .map(|item| item?.extract::<String>())
        .collect()
}
