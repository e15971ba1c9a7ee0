//! `tenure.Store`: one opened store, every operation of the lease store,
//! the job queue and the fence gates as a coroutine.
//!
//! Each method reads its arguments while it holds the GIL, then runs the
//! Rust call on the shared tokio runtime without it: many tasks of one event
//! loop wait on the store at once, and never on each other.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use tenure::layer::{Fault, Faults, LayerExt, Layered};
use tenure::queue::{ClaimRequest, FailAction, JobState, NewJob};
use tenure::wait::Waiter;
use tenure::{
    AdmitRequest, AdmitStrategy, ErrorKind, ExpiredQuery, FenceStore, JobQueue, LeaseStore,
    StatusChange, Store, TakeoverRequest,
};

use crate::bridge::{self, Failure};
use crate::concurrency;
use crate::convert;
use crate::errors;

/// An opened store, from `await tenure.connect(url)`.
#[pyclass(module = "tenure._tenure", frozen, name = "Store")]
pub(crate) struct PyStore {
    pub(crate) store: Arc<dyn Store>,
    /// The URL without its password, for errors and `repr`.
    pub(crate) url: Arc<str>,
    /// Set on a store from `tenure.testing.with_faults`.
    faults: Option<Arc<Layered<Arc<dyn Store>, Faults>>>,
    /// Where `admit(..., wait_for=...)` waits: one line per set of scopes
    /// for every task of the process using this store.
    waiter: Arc<Waiter<Arc<dyn Store>>>,
}

impl PyStore {
    pub(crate) fn new(store: Arc<dyn Store>, url: &str) -> Self {
        PyStore {
            waiter: Arc::new(Waiter::new(Arc::clone(&store))),
            store,
            url: Arc::from(shown_url(url)),
            faults: None,
        }
    }
}

/// The URL as errors and `repr` show it: without its password. `memory:`
/// and `sqlite:PATH` carry none and are shown as given; anything else that
/// is not a URL (a typo, a libpq string) may, and is not shown.
pub(crate) fn shown_url(url: &str) -> String {
    let embedded = ["memory:", "sqlite:"]
        .iter()
        .any(|scheme| url.starts_with(scheme));
    if embedded {
        url.to_owned()
    } else {
        tenure::redact_url(url)
    }
}

/// Runs a store call off the GIL and converts its answer with `convert`.
pub(crate) fn answer<'py, T, F, C>(
    py: Python<'py>,
    url: &Arc<str>,
    call: F,
    convert: C,
) -> PyResult<Bound<'py, PyAny>>
where
    T: Send + 'static,
    F: Future<Output = tenure::Result<T>> + Send + 'static,
    C: for<'a> FnOnce(Python<'a>, &T) -> PyResult<Bound<'a, PyAny>> + Send + 'static,
{
    let url = Arc::clone(url);
    bridge::spawn(
        py,
        async move { call.await.map_err(|error| Failure::store(error, &url)) },
        move |py, answer| convert(py, &answer),
    )
}

fn strategy(name: &str) -> PyResult<AdmitStrategy> {
    match name {
        "reject" => Ok(AdmitStrategy::Reject),
        "interrupt" => Ok(AdmitStrategy::Interrupt),
        other => Err(convert::invalid(
            "strategy",
            format_args!("unknown strategy {other:?}: \"reject\" or \"interrupt\""),
        )),
    }
}

/// An admission request from the keyword arguments `admit` shares with
/// `Keeper.admit`.
pub(crate) fn admit_request(
    request: AdmitRequest,
    scopes: Option<&Bound<'_, PyAny>>,
    kind: Option<String>,
    strategy_name: &str,
    metadata: Option<&Bound<'_, PyAny>>,
    rate_limit: Option<&Bound<'_, PyAny>>,
    counted_scopes: Option<&Bound<'_, PyAny>>,
) -> PyResult<AdmitRequest> {
    let mut request = request
        .scopes(convert::strings(scopes, "scopes")?)
        .strategy(strategy(strategy_name)?);
    for (scope, capacity) in convert::capacities_arg(counted_scopes)? {
        request = request.counted_scope(scope, capacity);
    }
    if let Some(kind) = kind {
        request = request.kind(kind);
    }
    if let Some(metadata) = metadata.filter(|metadata| !metadata.is_none()) {
        request = request.metadata(convert::json_value(metadata, "metadata")?);
    }
    if let Some(limit) = convert::rate_limit_arg(rate_limit)? {
        request = request.rate_limit(limit);
    }
    Ok(request)
}

fn job_state(name: &str) -> PyResult<JobState> {
    JobState::ALL
        .into_iter()
        .find(|state| state.as_str() == name)
        .ok_or_else(|| {
            convert::invalid(
                "state",
                format_args!(
                    "unknown job state {name:?}: queued, claimed, completed or dead_lettered"
                ),
            )
        })
}

#[pymethods]
impl PyStore {
    /// The store's URL, its password replaced by `***`.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __repr__(&self) -> String {
        format!("<tenure.Store {}>", self.url)
    }

    /// Admits run `id` for `owner`: `Admitted`, `Conflict`, `RateLimited`
    /// (with a `rate_limit` that has no permit left) or `AlreadyExists`.
    /// `counted_scopes` (scope → capacity) are scopes held in one of
    /// `capacity` slots each (contract §17).
    /// With `wait_for` (seconds), a held scope (or a spent rate limit) is
    /// waited for, in turn with the process's other waiters of this store,
    /// up to that long (`tenure::wait::Waiter`).
    #[pyo3(signature = (id, owner, *, scopes=None, kind=None, ttl=None, strategy="reject", metadata=None, grace=None, wait_for=None, rate_limit=None, counted_scopes=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn admit<'py>(
        &self,
        py: Python<'py>,
        id: String,
        owner: String,
        scopes: Option<&Bound<'py, PyAny>>,
        kind: Option<String>,
        ttl: Option<&Bound<'py, PyAny>>,
        strategy: &str,
        metadata: Option<&Bound<'py, PyAny>>,
        grace: Option<&Bound<'py, PyAny>>,
        wait_for: Option<&Bound<'py, PyAny>>,
        rate_limit: Option<&Bound<'py, PyAny>>,
        counted_scopes: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut request = admit_request(
            AdmitRequest::new(id.clone(), owner),
            scopes,
            kind,
            strategy,
            metadata,
            rate_limit,
            counted_scopes,
        )?;
        if let Some(ttl) = convert::optional_duration(ttl, "ttl")? {
            request = request.ttl(ttl);
        }
        if let Some(grace) = convert::optional_duration(grace, "grace")? {
            request = request.grace(grace);
        }
        let wait_for = convert::optional_duration(wait_for, "wait_for")?;
        let store = Arc::clone(&self.store);
        let waiter = Arc::clone(&self.waiter);
        let url = Arc::clone(&self.url);
        bridge::spawn(
            py,
            async move {
                let admitted = match wait_for {
                    Some(wait_for) => waiter.admit(&request, wait_for).await,
                    None => store.admit(&request).await,
                };
                match admitted {
                    Ok(admission) => Ok(Some(admission)),
                    Err(error) if error.kind() == ErrorKind::AlreadyExists => Ok(None),
                    Err(error) => Err(Failure::store(error, &url)),
                }
            },
            move |py, admission| match admission {
                Some(admission) => convert::admission(py, &admission),
                None => convert::already_exists(py, &id),
            },
        )
    }

    /// Renews `claim`'s lease for `ttl` seconds: `Renewed` or `Lost`.
    fn renew<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::claim_arg(claim)?;
        let ttl = convert::duration(ttl, "ttl")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.renew(&claim, ttl).await },
            convert::renewal,
        )
    }

    /// Renews `claim`'s lease for `ttl` seconds and records `progress` (any
    /// JSON value but `None`) in the same fenced write: `Renewed` or `Lost`
    /// (then nothing was written).
    fn renew_with_progress<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        progress: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::claim_arg(claim)?;
        let ttl = convert::duration(ttl, "ttl")?;
        let progress = convert::json_value(progress, "progress")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.renew_with_progress(&claim, ttl, &progress).await },
            convert::renewal,
        )
    }

    /// Renews many claims in one call: a `Renewed` or `Lost` per claim, in order.
    fn renew_many<'py>(
        &self,
        py: Python<'py>,
        claims: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claims = claims
            .try_iter()?
            .map(|claim| convert::claim_arg(&claim?))
            .collect::<PyResult<Vec<_>>>()?;
        let ttl = convert::duration(ttl, "ttl")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.renew_many(&claims, ttl).await },
            |py, renewals: &Vec<_>| {
                let items = renewals
                    .iter()
                    .map(|renewal| convert::renewal(py, renewal))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(pyo3::types::PyList::new(py, items)?.into_any())
            },
        )
    }

    /// The fenced status write: `Applied` or `Rejected`.
    #[pyo3(signature = (claim, status, *, error=None, stop_reason=None))]
    fn transition<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
        status: &Bound<'py, PyAny>,
        error: Option<String>,
        stop_reason: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::claim_arg(claim)?;
        let change = status_change(convert::status_arg(status)?, error, stop_reason);
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.transition(&claim, &change).await },
            convert::transition,
        )
    }

    /// Takes run `id` over for `claimer` once its owner's lease (plus
    /// `grace`) has lapsed: adopts it under a lease of `ttl`, or, with
    /// `fail="why"`, marks it failed. `Taken` or `NotTaken`.
    #[pyo3(signature = (id, claimer, *, ttl=None, fail=None, grace=None))]
    fn claim_for_takeover<'py>(
        &self,
        py: Python<'py>,
        id: String,
        claimer: String,
        ttl: Option<&Bound<'py, PyAny>>,
        fail: Option<String>,
        grace: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ttl = convert::optional_duration(ttl, "ttl")?;
        let mut request = match (fail, ttl) {
            (Some(_), Some(_)) => {
                return Err(convert::invalid(
                    "ttl",
                    "a takeover that fails the run holds no lease: give ttl or fail, not both",
                ))
            }
            (Some(error), None) => TakeoverRequest::fail(id, claimer, error),
            (None, ttl) => TakeoverRequest::adopt(id, claimer, ttl),
        };
        if let Some(grace) = convert::optional_duration(grace, "grace")? {
            request = request.grace(grace);
        }
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.claim_for_takeover(&request).await },
            convert::takeover,
        )
    }

    /// Active records whose lease (plus `grace`) has lapsed: `ExpiredScan`.
    #[pyo3(signature = (grace=None, *, created_before=None, limit=None))]
    fn list_expired<'py>(
        &self,
        py: Python<'py>,
        grace: Option<&Bound<'py, PyAny>>,
        created_before: Option<&Bound<'py, PyAny>>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let grace = convert::optional_duration(grace, "grace")?.unwrap_or_default();
        let mut query = ExpiredQuery::new(grace);
        if let Some(instant) = created_before.filter(|value| !value.is_none()) {
            query = query.created_before(convert::timestamp(instant, "created_before")?);
        }
        if let Some(limit) = limit {
            query = query.limit(limit);
        }
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.list_expired(&query).await },
            convert::expired_scan,
        )
    }

    /// The record `id`, or `None`.
    fn get<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.get(&id).await },
            |py, found| {
                found.as_ref().map_or_else(
                    || Ok(py.None().into_bound(py)),
                    |record| convert::record(py, record),
                )
            },
        )
    }

    /// The records holding or having held `scope`.
    fn list_by_scope<'py>(&self, py: Python<'py>, scope: String) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.list_by_scope(&scope).await },
            |py, records: &Vec<_>| convert::records(py, records),
        )
    }

    /// Every active (pending or running) record.
    fn list_active<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.list_active().await },
            |py, records: &Vec<_>| convert::records(py, records),
        )
    }

    /// The store's clock.
    fn now<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.now().await },
            |py, now| pyo3::IntoPyObjectExt::into_bound_py_any(*now, py),
        )
    }

    /// Deletes terminal records older than `older_than` seconds; answers how many.
    fn purge<'py>(
        &self,
        py: Python<'py>,
        older_than: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let older_than = convert::duration(older_than, "older_than")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.purge(older_than).await },
            count,
        )
    }

    /// How many records `purge(older_than)` would delete.
    fn count_purgeable<'py>(
        &self,
        py: Python<'py>,
        older_than: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let older_than = convert::duration(older_than, "older_than")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.count_purgeable(older_than).await },
            count,
        )
    }

    /// Enqueues a job on `queue`; answers the `Job` as stored.
    #[pyo3(signature = (queue, payload, *, id=None, run_at=None, max_attempts=None, priority=None, requires=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn enqueue<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        payload: &Bound<'py, PyAny>,
        id: Option<String>,
        run_at: Option<&Bound<'py, PyAny>>,
        max_attempts: Option<u32>,
        priority: Option<i32>,
        requires: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let job = new_job(queue, payload, id, run_at, max_attempts, priority, requires)?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.enqueue(&job).await },
            convert::job,
        )
    }

    /// Enqueues a job on `queue` unless a job of the queue holds `key`
    /// under its policy; answers `Created(job)` or `Duplicate(holder)`.
    #[pyo3(signature = (queue, payload, *, key, policy="while_unfinished", period=None, id=None, run_at=None, max_attempts=None, priority=None, requires=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn enqueue_unique<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        payload: &Bound<'py, PyAny>,
        key: String,
        policy: &str,
        period: Option<&Bound<'py, PyAny>>,
        id: Option<String>,
        run_at: Option<&Bound<'py, PyAny>>,
        max_attempts: Option<u32>,
        priority: Option<i32>,
        requires: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let policy = convert::unique_policy(policy, period)?;
        let job = new_job(queue, payload, id, run_at, max_attempts, priority, requires)?
            .unique(key, policy);
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.enqueue_unique(&job).await },
            convert::enqueued,
        )
    }

    /// Claims up to `limit` due jobs of `queue` for `worker` under a lease
    /// of `ttl` seconds; answers a list of `ClaimedJob` (empty when none is due).
    #[pyo3(signature = (queue, worker, ttl, *, limit=1, capabilities=None))]
    fn claim<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        worker: String,
        ttl: &Bound<'py, PyAny>,
        limit: usize,
        capabilities: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = ClaimRequest::new(queue, worker, convert::duration(ttl, "ttl")?)
            .limit(limit)
            .capabilities(convert::strings(capabilities, "capabilities")?);
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.claim(&request).await },
            |py, claimed: &Vec<_>| convert::claimed_jobs(py, claimed),
        )
    }

    /// `claim` within `rate_limit` (a `RateLimit`): each job claimed uses
    /// one permit, so at most as many as are left are claimed. Answers
    /// `Claimed(jobs, retry_after)`, `retry_after` the seconds until the
    /// next permit frees when the limit held back a claimable job, else
    /// `None`.
    #[pyo3(signature = (queue, worker, ttl, *, rate_limit=None, limit=1, capabilities=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn claim_limited<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        worker: String,
        ttl: &Bound<'py, PyAny>,
        rate_limit: Option<&Bound<'py, PyAny>>,
        limit: usize,
        capabilities: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut request = ClaimRequest::new(queue, worker, convert::duration(ttl, "ttl")?)
            .limit(limit)
            .capabilities(convert::strings(capabilities, "capabilities")?);
        if let Some(rate_limit) = convert::rate_limit_arg(rate_limit)? {
            request = request.rate_limit(rate_limit);
        }
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.claim_limited(&request).await },
            convert::claimed,
        )
    }

    /// Claims one job of `queue` for `worker` under a lease of `ttl`
    /// seconds within `concurrency` (a `ConcurrencyLimit`): first a slot of the
    /// limit's counted scope (taking a lapsed worker's slot over), then
    /// the job. Answers a `RunningJob` (the job and its slot), `Full`
    /// (every slot held: the slot that frees first, `retry_after`) or
    /// `None` (no job was due; the slot was given back).
    #[pyo3(signature = (queue, worker, ttl, concurrency, *, capabilities=None))]
    fn claim_within<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        worker: String,
        ttl: &Bound<'py, PyAny>,
        concurrency: &Bound<'py, PyAny>,
        capabilities: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = ClaimRequest::new(queue, worker, convert::duration(ttl, "ttl")?)
            .capabilities(convert::strings(capabilities, "capabilities")?);
        let limit = convert::concurrency_limit_arg(concurrency)?;
        let store = Arc::clone(&self.store);
        let url = Arc::clone(&self.url);
        bridge::spawn(
            py,
            async move {
                match limit.claim(&*store, &request).await {
                    Ok(claim) => Ok((claim, store, url)),
                    Err(error) => Err(Failure::store(error, &url)),
                }
            },
            |py, (claim, store, url)| concurrency::limited_claim(py, claim, store, url),
        )
    }

    /// Renews a job claim: `Renewed` or `Lost`.
    fn renew_job<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::job_claim_arg(claim)?;
        let ttl = convert::duration(ttl, "ttl")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.renew_job(&claim, ttl).await },
            convert::job_renewal,
        )
    }

    /// Renews a job claim and records `progress` (any JSON value but
    /// `None`) in the same fenced write: `Renewed` or `Lost`.
    fn renew_job_with_progress<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        progress: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::job_claim_arg(claim)?;
        let ttl = convert::duration(ttl, "ttl")?;
        let progress = convert::json_value(progress, "progress")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.renew_job_with_progress(&claim, ttl, &progress).await },
            convert::job_renewal,
        )
    }

    /// Completes a claimed job: `Settled` or `Rejected`.
    fn complete<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::job_claim_arg(claim)?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.complete(&claim).await },
            convert::job_settle,
        )
    }

    /// Completes many claimed jobs in one call: a `Settled` or `Rejected` per claim.
    fn complete_many<'py>(
        &self,
        py: Python<'py>,
        claims: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claims = claims
            .try_iter()?
            .map(|claim| convert::job_claim_arg(&claim?))
            .collect::<PyResult<Vec<_>>>()?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.complete_many(&claims).await },
            |py, settles: &Vec<_>| {
                let items = settles
                    .iter()
                    .map(|settle| convert::job_settle(py, settle))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(pyo3::types::PyList::new(py, items)?.into_any())
            },
        )
    }

    /// Fails a claimed job: queued again after `backoff` seconds while it
    /// has attempts left, else (or with `dead_letter=True`) dead-lettered.
    /// `Settled` or `Rejected`.
    #[pyo3(signature = (claim, error, *, backoff=None, dead_letter=false))]
    fn fail<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
        error: String,
        backoff: Option<&Bound<'py, PyAny>>,
        dead_letter: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::job_claim_arg(claim)?;
        let action = fail_action(backoff, dead_letter)?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.fail(&claim, &error, action).await },
            convert::job_settle,
        )
    }

    /// Requeues or dead-letters claims whose lease (plus `grace`) lapsed.
    #[pyo3(signature = (grace=None))]
    fn reap<'py>(
        &self,
        py: Python<'py>,
        grace: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let grace = convert::optional_duration(grace, "grace")?.unwrap_or_default();
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.reap(grace).await },
            convert::reap_report,
        )
    }

    /// Claims back a job the reaper dead-lettered from `claim`, under a new
    /// fence: `TakenBack` or `NotTakenBack`.
    fn take_back<'py>(
        &self,
        py: Python<'py>,
        claim: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let claim = convert::job_claim_arg(claim)?;
        let ttl = convert::duration(ttl, "ttl")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.take_back(&claim, ttl).await },
            convert::take_back,
        )
    }

    /// The job `id`, or `None`.
    fn get_job<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.get_job(&id).await },
            |py, found| {
                found
                    .as_ref()
                    .map_or_else(|| Ok(py.None().into_bound(py)), |job| convert::job(py, job))
            },
        )
    }

    /// The dead letters of `queue`, oldest first, at most `limit`.
    #[pyo3(signature = (queue, limit=100))]
    fn list_dead_letters<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.list_dead_letters(&queue, limit).await },
            |py, jobs: &Vec<_>| convert::jobs(py, jobs),
        )
    }

    /// The jobs of `queue` (in `state`, when given), at most `limit`.
    #[pyo3(signature = (queue, state=None, limit=100))]
    fn list_jobs<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        state: Option<&Bound<'py, PyAny>>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let state = match state.filter(|value| !value.is_none()) {
            Some(state) => Some(job_state(&convert::enum_name(state)?)?),
            None => None,
        };
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.list_jobs(&queue, state, limit).await },
            |py, jobs: &Vec<_>| convert::jobs(py, jobs),
        )
    }

    /// Every queue holding a job, with its jobs counted by state.
    fn count_jobs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.count_jobs().await },
            |py, counts: &Vec<_>| convert::queue_counts(py, counts),
        )
    }

    /// An operator's retry of dead letter `id`: `Requeued` or `NotRequeued`.
    fn retry_dead_letter<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.retry_dead_letter(&id).await },
            convert::operator_retry,
        )
    }

    /// Deletes finished jobs older than `older_than` seconds; answers how many.
    fn purge_jobs<'py>(
        &self,
        py: Python<'py>,
        older_than: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let older_than = convert::duration(older_than, "older_than")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.purge_jobs(older_than).await },
            count,
        )
    }

    /// The gate of `resource`: `Accepted` when no higher fence wrote (this
    /// one is then the highest), `Stale` otherwise.
    fn check_fence<'py>(
        &self,
        py: Python<'py>,
        resource: String,
        fence: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.check_fence(&resource, fence).await },
            convert::fence_check,
        )
    }

    /// The gates kept, in byte order of resource: those after `after`, at
    /// most `limit`, each a `GateRecord`.
    #[pyo3(signature = (after=None, limit=1000))]
    fn list_fences<'py>(
        &self,
        py: Python<'py>,
        after: Option<String>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.list_fences(after.as_deref(), limit).await },
            |py, gates: &Vec<_>| convert::gates(py, gates),
        )
    }

    /// The highest fence `resource`'s gate accepted, or `None`.
    fn highest_fence<'py>(&self, py: Python<'py>, resource: String) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.highest_fence(&resource).await },
            |py, fence| pyo3::IntoPyObjectExt::into_bound_py_any(*fence, py),
        )
    }

    /// Deletes gates unused for `unused_for` seconds; answers how many.
    fn purge_fences<'py>(
        &self,
        py: Python<'py>,
        unused_for: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let unused_for = convert::duration(unused_for, "unused_for")?;
        let store = Arc::clone(&self.store);
        answer(
            py,
            &self.url,
            async move { store.purge_fences(unused_for).await },
            count,
        )
    }

    /// For `tenure.testing`: this store behind a fault-injecting layer.
    fn _with_faults(&self) -> PyStore {
        let layered = Arc::new(Arc::clone(&self.store).layer(Faults::new()));
        let store = Arc::clone(&layered) as Arc<dyn Store>;
        PyStore {
            waiter: Arc::new(Waiter::new(Arc::clone(&store))),
            store,
            url: Arc::clone(&self.url),
            faults: Some(layered),
        }
    }

    /// For `tenure.testing`: `operation` (on `id`, or any) meets `fault`
    /// (`"unavailable"`, `"corrupt"`, `"hang"`, `"reply_lost"`).
    #[pyo3(signature = (operation, fault, id=None))]
    fn _inject(&self, operation: &str, fault: &str, id: Option<&str>) -> PyResult<()> {
        let faults = self.faults()?;
        let fault = match fault {
            "unavailable" => Fault::Unavailable,
            "corrupt" => Fault::Corrupt,
            "hang" => Fault::Hang,
            "reply_lost" => Fault::ReplyLost,
            other => {
                return Err(convert::invalid(
                    "fault",
                    format_args!(
                        "unknown fault {other:?}: unavailable, corrupt, hang or reply_lost"
                    ),
                ))
            }
        };
        let operation = OPERATIONS
            .iter()
            .find(|known| **known == operation)
            .ok_or_else(|| {
                convert::invalid(
                    "operation",
                    format_args!("unknown operation {operation:?}: one of {OPERATIONS:?}"),
                )
            })?;
        faults.hook().inject(operation, id, fault);
        Ok(())
    }

    /// For `tenure.testing`: removes every fault and lets hanging calls go on.
    fn _heal(&self) -> PyResult<()> {
        self.faults()?.hook().release_hangs();
        Ok(())
    }

    /// For `tenure.testing`: how many calls of `operation` started.
    fn _calls(&self, operation: &str) -> PyResult<usize> {
        Ok(self.faults()?.hook().calls(operation))
    }
}

/// The operation names a fault can be injected into (the layer's names).
const OPERATIONS: &[&str] = &[
    "admit",
    "renew",
    "renew_with_progress",
    "renew_many",
    "transition",
    "claim_for_takeover",
    "list_expired",
    "get",
    "now",
    "claim",
    "claim_limited",
    "renew_job",
    "renew_job_with_progress",
    "renew_jobs",
    "complete",
    "fail",
    "check_fence",
];

impl PyStore {
    fn faults(&self) -> PyResult<&Layered<Arc<dyn Store>, Faults>> {
        self.faults.as_deref().ok_or_else(|| {
            errors::new(
                ErrorKind::InvalidInput,
                "this store has no fault layer: wrap it with tenure.testing.with_faults(store)",
            )
        })
    }
}

fn count<'py>(py: Python<'py>, count: &u64) -> PyResult<Bound<'py, PyAny>> {
    pyo3::IntoPyObjectExt::into_bound_py_any(*count, py)
}

pub(crate) fn status_change(
    status: tenure::Status,
    error: Option<String>,
    stop_reason: Option<String>,
) -> StatusChange {
    let mut change = StatusChange::to(status);
    change.error = error;
    if let Some(reason) = stop_reason {
        change = change.stop_reason(reason);
    }
    change
}

pub(crate) fn fail_action(
    backoff: Option<&Bound<'_, PyAny>>,
    dead_letter: bool,
) -> PyResult<FailAction> {
    if dead_letter {
        return Ok(FailAction::DeadLetter);
    }
    Ok(FailAction::Retry {
        backoff: convert::optional_duration(backoff, "backoff")?.unwrap_or(Duration::ZERO),
    })
}

/// Opens the store `url` names (every URL the Rust `tenure::connect`
/// accepts), with the same defaults and refusals.
#[pyfunction]
#[pyo3(signature = (url, *, schema=None, namespace=None, migrate=true))]
pub(crate) fn connect(
    py: Python<'_>,
    url: String,
    schema: Option<String>,
    namespace: Option<String>,
    migrate: bool,
) -> PyResult<Bound<'_, PyAny>> {
    let mut options = tenure::Connect::new(url.clone()).migrate_schema(migrate);
    if let Some(schema) = schema {
        options = options.schema(schema);
    }
    if let Some(namespace) = namespace {
        options = options.namespace(namespace);
    }
    let shown: Arc<str> = Arc::from(shown_url(&url));
    bridge::spawn(
        py,
        async move {
            options
                .open()
                .await
                .map_err(|error| Failure::store(error, &shown))
        },
        move |py, store| Ok(Bound::new(py, PyStore::new(store, &url))?.into_any()),
    )
}

/// The job `enqueue` and `enqueue_unique` describe with their keyword
/// arguments.
fn new_job(
    queue: String,
    payload: &Bound<'_, PyAny>,
    id: Option<String>,
    run_at: Option<&Bound<'_, PyAny>>,
    max_attempts: Option<u32>,
    priority: Option<i32>,
    requires: Option<&Bound<'_, PyAny>>,
) -> PyResult<NewJob> {
    let mut job = NewJob::new(queue, convert::json_value(payload, "payload")?);
    if let Some(id) = id {
        job = job.id(id);
    }
    if let Some(run_at) = run_at.filter(|value| !value.is_none()) {
        job = job.run_at(convert::timestamp(run_at, "run_at")?);
    }
    if let Some(max_attempts) = max_attempts {
        job = job.max_attempts(max_attempts);
    }
    if let Some(priority) = priority {
        job = job.priority(priority);
    }
    for capability in convert::strings(requires, "requires")? {
        job = job.require(capability);
    }
    Ok(job)
}
