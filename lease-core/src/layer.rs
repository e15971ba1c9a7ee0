//! Wrapping a store, once: [`Layered`] implements [`LeaseStore`],
//! [`JobQueue`] and [`FenceStore`] by handing every operation to a [`Hook`].
//!
//! Cross-cutting concerns (tracing and metrics, a time limit, injected
//! faults in tests) belong around a store, not inside each backend, and a
//! wrapper that forwards fifteen methods by hand is easy to get subtly wrong
//! (forget `renew_many` and every batch renewal silently becomes one round
//! trip per lease). A hook sees each operation as its name and the lease or
//! job it concerns, plus the inner store's pending call, and decides what to
//! do around it: it may run code before and after, race it against a timer,
//! or answer without calling the store at all. [`Layered`] does the
//! forwarding, for every operation, exactly once.
//!
//! Hooks in this crate: [`Tracing`] (spans, warnings and metrics; see
//! [`LayerExt::instrumented`]), [`Timeout`], and [`Faults`], which injects
//! failures, hangs, slow answers and panics for tests. Layers stack: the
//! last one added runs outermost.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//! use tenure_lease_core::layer::{Answer, Hook, LayerExt, Operation, Pending};
//! # use tenure_lease_core::{AdmitRequest, LeaseStore};
//! # let store = tenure_backend_memory::MemoryStore::new();
//!
//! /// Counts the operations that reached the store.
//! #[derive(Default)]
//! struct Counting(AtomicU64);
//!
//! impl Hook for Counting {
//!     fn call<'a, T: Answer + 'a>(&'a self, _: Operation<'a>, call: Pending<'a, T>) -> Pending<'a, T> {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!         call
//!     }
//! }
//!
//! let store = store
//!     .layer(Counting::default())
//!     .with_timeout(Duration::from_secs(2))
//!     .instrumented();
//! store.admit(&AdmitRequest::new("run-1", "worker-a").ttl(Duration::from_secs(30))).await?;
//! assert_eq!(store.inner().inner().hook().0.load(Ordering::Relaxed), 1);
//! # Ok(()) }
//! ```

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::{field, Instrument};

use crate::clock::Timestamp;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::{FenceCheck, FenceStore, GateRecord};
use crate::outcome::{Admission, ExpiredScan, Renewal, Takeover, Transition};
use crate::queue::{
    ClaimRequest, Claimed, ClaimedJob, Enqueued, FailAction, Job, JobClaim, JobQueue, JobRenewal,
    JobSettle, JobState, NewJob, OperatorRetry, QueueCounts, ReapReport, TakeBack,
};
use crate::record::{Claim, LeaseRecord};
use crate::request::{AdmitRequest, ExpiredQuery, StatusChange, TakeoverRequest};
use crate::store::LeaseStore;
use crate::telemetry::{attribute, OPERATIONS, OPERATION_DURATION};

/// An operation on its way to the store: the inner store's call, not yet
/// polled. A hook awaits it (or drops it, to answer without the store).
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// One store operation, as a hook sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Operation<'a> {
    /// The trait method's name: `admit`, `renew`, `claim`, `purge_jobs`...
    pub name: &'static str,
    /// The lease or job it concerns, when it concerns one; for a gate's
    /// operations, the resource.
    pub id: Option<&'a str>,
    /// The worker asking, when the request names one.
    pub owner: Option<&'a str>,
    /// The fence of the claim it carries, when it carries one (for
    /// `check_fence`, the fence presented).
    pub fence: Option<u64>,
    /// The claims of a batch (`renew_many`); empty for every other
    /// operation.
    pub batch: &'a [Claim],
    /// The job claims of a batch (`complete_many`, `renew_jobs`); empty for
    /// every other operation.
    pub job_batch: &'a [JobClaim],
    /// Everything the call was given, for hooks that record calls whole
    /// (the conformance kit's history recorder).
    pub input: Input<'a>,
}

/// What an operation was called with: one variant per store method, each
/// holding its arguments as the caller passed them.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Input<'a> {
    /// [`LeaseStore::admit`].
    Admit(&'a AdmitRequest),
    /// [`LeaseStore::renew`] (one claim), [`LeaseStore::renew_many`] and
    /// [`LeaseStore::renew_with_progress`].
    Renew {
        /// The claims renewed.
        claims: &'a [Claim],
        /// The lease asked for.
        ttl: Duration,
        /// The progress reported with the renewal, if any.
        progress: Option<&'a serde_json::Value>,
    },
    /// [`LeaseStore::transition`].
    Transition {
        /// The claim writing.
        claim: &'a Claim,
        /// The change asked for.
        change: &'a StatusChange,
    },
    /// [`LeaseStore::claim_for_takeover`].
    Takeover(&'a TakeoverRequest),
    /// [`LeaseStore::list_expired`].
    ListExpired(&'a ExpiredQuery),
    /// [`LeaseStore::get`]: the id read.
    Get(&'a str),
    /// [`JobQueue::get_job`]: the id read.
    GetJob(&'a str),
    /// [`LeaseStore::list_by_scope`]: the scope.
    ListByScope(&'a str),
    /// [`JobQueue::enqueue`] (one job) and [`JobQueue::enqueue_batch`].
    Enqueue(&'a [NewJob]),
    /// [`JobQueue::claim`].
    Claim(&'a ClaimRequest),
    /// [`JobQueue::renew_job`] (one claim), [`JobQueue::renew_jobs`] and
    /// [`JobQueue::renew_job_with_progress`].
    RenewJobs {
        /// The claims renewed.
        claims: &'a [JobClaim],
        /// The lease asked for.
        ttl: Duration,
        /// The progress reported with the renewal, if any.
        progress: Option<&'a serde_json::Value>,
    },
    /// [`JobQueue::complete`] (one claim) and [`JobQueue::complete_many`].
    Complete(&'a [JobClaim]),
    /// [`JobQueue::fail`].
    Fail {
        /// The claim writing.
        claim: &'a JobClaim,
        /// The error text.
        error: &'a str,
        /// Retry or dead-letter.
        action: FailAction,
    },
    /// [`JobQueue::defer`].
    Defer {
        /// The claim writing.
        claim: &'a JobClaim,
        /// The capabilities the worker lacked.
        missing: &'a BTreeSet<String>,
    },
    /// [`JobQueue::take_back`].
    TakeBack {
        /// The old copy's claim.
        claim: &'a JobClaim,
        /// The lease asked for.
        ttl: Duration,
    },
    /// [`JobQueue::list_dead_letters`] and [`JobQueue::list_jobs`].
    ListJobs {
        /// The queue listed.
        queue: &'a str,
        /// The state asked for (`DeadLettered` for dead letters).
        state: Option<JobState>,
        /// At most this many.
        limit: usize,
    },
    /// [`FenceStore::check_fence`].
    CheckFence {
        /// The gate's resource.
        resource: &'a str,
        /// The fence presented.
        fence: u64,
    },
    /// A retention sweep ([`LeaseStore::purge`], [`JobQueue::reap`],
    /// [`JobQueue::purge_jobs`], [`FenceStore::purge_fences`]): its age.
    Sweep(Duration),
    /// An operation whose name ([`Operation::name`]) and `id` say all:
    /// [`LeaseStore::list_active`], [`LeaseStore::now`],
    /// [`JobQueue::retry_dead_letter`], [`FenceStore::highest_fence`],
    /// [`FenceStore::list_fences`].
    Plain,
}

impl<'a> Operation<'a> {
    fn named(name: &'static str, input: Input<'a>) -> Self {
        Operation {
            name,
            id: None,
            owner: None,
            fence: None,
            batch: &[],
            job_batch: &[],
            input,
        }
    }

    fn on(name: &'static str, id: &'a str, input: Input<'a>) -> Self {
        Operation {
            id: Some(id),
            ..Operation::named(name, input)
        }
    }

    fn by(name: &'static str, id: &'a str, owner: &'a str, input: Input<'a>) -> Self {
        Operation {
            owner: Some(owner),
            ..Operation::on(name, id, input)
        }
    }

    fn claim(name: &'static str, claim: &'a Claim, input: Input<'a>) -> Self {
        Operation {
            fence: Some(claim.fence),
            ..Operation::by(name, &claim.id, &claim.owner, input)
        }
    }

    fn job_claim(name: &'static str, claim: &'a JobClaim, input: Input<'a>) -> Self {
        Operation {
            fence: Some(claim.fence),
            ..Operation::by(name, &claim.id, &claim.owner, input)
        }
    }

    /// How many claims or jobs a batch operation carries, when it carries
    /// two or more (OpenTelemetry's `db.operation.batch.size`, never 1).
    pub fn batch_size(&self) -> Option<usize> {
        let size = match self.input {
            Input::Renew { claims, .. } => claims.len(),
            Input::RenewJobs { claims, .. } | Input::Complete(claims) => claims.len(),
            Input::Enqueue(jobs) => jobs.len(),
            _ => return None,
        };
        (size > 1).then_some(size)
    }

    /// What the operation works on, as OpenTelemetry's `db.collection.name`
    /// names it: `leases` ([`LeaseStore`]), `jobs` ([`JobQueue`]) or
    /// `fences` ([`FenceStore`]).
    pub fn collection(&self) -> &'static str {
        match self.input {
            Input::Admit(_)
            | Input::Renew { .. }
            | Input::Transition { .. }
            | Input::Takeover(_)
            | Input::ListExpired(_)
            | Input::Get(_)
            | Input::ListByScope(_) => LEASES,
            Input::GetJob(_)
            | Input::Enqueue(_)
            | Input::Claim(_)
            | Input::RenewJobs { .. }
            | Input::Complete(_)
            | Input::Fail { .. }
            | Input::Defer { .. }
            | Input::TakeBack { .. }
            | Input::ListJobs { .. } => JOBS,
            Input::CheckFence { .. } => FENCES,
            Input::Sweep(_) | Input::Plain => match self.name {
                "reap" | "purge_jobs" | "retry_dead_letter" | "count_jobs" => JOBS,
                "purge_fences" | "highest_fence" | "list_fences" => FENCES,
                _ => LEASES,
            },
        }
    }
}

const LEASES: &str = "leases";
const JOBS: &str = "jobs";
const FENCES: &str = "fences";

/// What an operation answered, as hooks that log or count see it.
pub trait Answer: Send {
    /// A short name of the answer, for logs and metric labels (`admitted`,
    /// `conflict`, `lost`, `listed`...).
    fn label(&self) -> &'static str;

    /// The fence the answer hands out, when it hands one out (an admission
    /// or a takeover won).
    fn fence(&self) -> Option<u64> {
        None
    }

    /// The answer itself, typed, for hooks that record answers whole (the
    /// conformance kit's history recorder).
    fn view(&self) -> AnswerView<'_>;
}

/// An answer as [`Answer::view`] shows it: one variant per answer type of
/// the store traits.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum AnswerView<'a> {
    /// Of [`LeaseStore::admit`].
    Admission(&'a Admission),
    /// Of [`LeaseStore::claim_for_takeover`].
    Takeover(&'a Takeover),
    /// Of [`LeaseStore::renew`], [`LeaseStore::renew_with_progress`] and
    /// [`LeaseStore::renew_many`], one per claim.
    Renewals(&'a [Renewal]),
    /// Of [`LeaseStore::transition`].
    Transition(&'a Transition),
    /// Of [`LeaseStore::list_expired`].
    ExpiredScan(&'a ExpiredScan),
    /// Of [`LeaseStore::get`].
    Record(Option<&'a LeaseRecord>),
    /// Of [`LeaseStore::list_by_scope`] and [`LeaseStore::list_active`].
    Records(&'a [LeaseRecord]),
    /// Of [`LeaseStore::now`].
    Now(Timestamp),
    /// Of a retention sweep: how many entries it removed.
    Purged(u64),
    /// Of [`JobQueue::enqueue`], [`JobQueue::enqueue_batch`],
    /// [`JobQueue::list_jobs`] and [`JobQueue::list_dead_letters`].
    Jobs(&'a [Job]),
    /// Of [`JobQueue::enqueue_unique`] and
    /// [`JobQueue::enqueue_unique_batch`], one per job.
    Enqueued(&'a [Enqueued]),
    /// Of [`JobQueue::get_job`].
    JobFound(Option<&'a Job>),
    /// Of [`JobQueue::claim`].
    Claimed(&'a [ClaimedJob]),
    /// Of [`JobQueue::claim_limited`].
    LimitedClaim(&'a Claimed),
    /// Of [`JobQueue::renew_job`], [`JobQueue::renew_job_with_progress`] and
    /// [`JobQueue::renew_jobs`], one per claim.
    JobRenewals(&'a [JobRenewal]),
    /// Of [`JobQueue::complete`], [`JobQueue::complete_many`],
    /// [`JobQueue::fail`] and [`JobQueue::defer`], one per claim.
    Settles(&'a [JobSettle]),
    /// Of [`JobQueue::reap`].
    Reaped(&'a ReapReport),
    /// Of [`JobQueue::take_back`].
    TakeBack(&'a TakeBack),
    /// Of [`JobQueue::retry_dead_letter`].
    OperatorRetry(&'a OperatorRetry),
    /// Of [`JobQueue::count_jobs`].
    QueueCounts(&'a [QueueCounts]),
    /// Of [`FenceStore::check_fence`].
    FenceCheck(&'a FenceCheck),
    /// Of [`FenceStore::highest_fence`].
    HighestFence(Option<u64>),
    /// Of [`FenceStore::list_fences`].
    Gates(&'a [GateRecord]),
}

/// A concern wrapped around every operation of a store; see the
/// [module docs](self).
pub trait Hook: Send + Sync {
    /// Runs `operation`, whose inner call is `call`, and answers for it.
    /// Return `call` itself to pass it through untouched.
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T>;
}

/// A store whose every operation goes through `hook`; built with
/// [`LayerExt::layer`]. It is a [`LeaseStore`], and a [`JobQueue`] and a
/// [`FenceStore`] when the inner store is one.
#[derive(Debug, Clone)]
pub struct Layered<S, H> {
    inner: S,
    hook: H,
}

impl<S, H> Layered<S, H> {
    /// `inner` with `hook` around each of its operations.
    pub fn new(inner: S, hook: H) -> Self {
        Layered { inner, hook }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// Unwraps the store.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// Layering on every store.
pub trait LayerExt: LeaseStore + Sized {
    /// Wraps the store so every operation goes through `hook`.
    fn layer<H: Hook>(self, hook: H) -> Layered<Self, H> {
        Layered::new(self, hook)
    }

    /// Wraps the store so every operation is traced and counted
    /// ([`Tracing`]), labelled with the store's
    /// [`system_name`](LeaseStore::system_name).
    fn instrumented(self) -> Instrumented<Self> {
        let tracing = Tracing::new(self.system_name());
        self.layer(tracing)
    }

    /// Wraps the store so no operation waits longer than `limit`
    /// ([`Timeout`]).
    fn with_timeout(self, limit: Duration) -> Layered<Self, Timeout> {
        self.layer(Timeout::new(limit))
    }
}

impl<S: LeaseStore> LayerExt for S {}

/// A store whose every operation is traced and counted ([`Tracing`]).
pub type Instrumented<S> = Layered<S, Tracing>;

/// Tracing and metrics for every operation (the span at `debug` level: a
/// filter at `info` drops it), named after OpenTelemetry's
/// database client conventions (see [`telemetry`](crate::telemetry)):
///
/// * one `tracing` span, `tenure.store`, at debug level, with the fields
///   `otel.name` (`"{operation} {collection}"`, as in `"admit leases"`),
///   `otel.kind` (`client`), `db.system.name`, `db.operation.name`,
///   `db.collection.name`, `db.operation.batch.size` (for a batch),
///   `tenure.lease.id` (the lease or job), `tenure.owner`, `tenure.fence`
///   (carried or handed out), `tenure.outcome`, `tenure.retries` (where the
///   store decided again after lost races, see
///   [`backend::telemetry`](crate::backend::telemetry)), and on failure
///   `error.type` (an [`ErrorKind`] name, or [`CANCELLED`] for a call
///   dropped before it answered) and `otel.status_code` (`error`);
/// * a warning for each failure;
/// * the metrics [`OPERATION_DURATION`] and [`OPERATIONS`].
#[derive(Debug, Clone, Copy)]
pub struct Tracing {
    system: &'static str,
}

impl Tracing {
    /// Traces the operations of a store of kind `system` (its
    /// `db.system.name`); [`LayerExt::instrumented`] passes the store's own
    /// [`system_name`](LeaseStore::system_name).
    pub fn new(system: &'static str) -> Self {
        Tracing { system }
    }

    /// The `db.system.name` it labels with.
    pub fn system(&self) -> &'static str {
        self.system
    }
}

impl Hook for Tracing {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        let collection = operation.collection();
        let span = tracing::debug_span!(
            "tenure.store",
            otel.name = %format_args!("{} {collection}", operation.name),
            otel.kind = "client",
            otel.status_code = field::Empty,
            db.system.name = self.system,
            db.operation.name = operation.name,
            db.collection.name = collection,
            db.operation.batch.size = field::Empty,
            tenure.lease.id = operation.id,
            tenure.owner = operation.owner,
            tenure.fence = operation.fence,
            tenure.outcome = field::Empty,
            tenure.retries = field::Empty,
            "error.type" = field::Empty,
        );
        if let Some(size) = operation.batch_size() {
            span.record("db.operation.batch.size", size);
        }
        let mut record = Recording {
            labels: [
                (attribute::DB_SYSTEM_NAME, self.system),
                (attribute::DB_OPERATION_NAME, operation.name),
                (attribute::DB_COLLECTION_NAME, collection),
            ],
            started: Instant::now(),
            answered: false,
        };
        let traced = async move {
            let answer = call.await;
            let span = tracing::Span::current();
            match &answer {
                Ok(value) => {
                    if let Some(fence) = value.fence() {
                        span.record("tenure.fence", fence);
                    }
                    record.answered(value.label(), None);
                }
                Err(error) => {
                    tracing::warn!(%error, "store operation failed");
                    let kind = error.kind().as_str();
                    record.answered(kind, Some(kind));
                }
            }
            answer
        };
        Box::pin(traced.instrument(span))
    }
}

/// What a [`Tracing`] layer records of one operation once it answers, or,
/// when it is dropped unanswered (a caller's time limit, a cancelled
/// task), as failed with `error.type` [`CANCELLED`].
struct Recording {
    labels: [(&'static str, &'static str); 3],
    started: Instant,
    answered: bool,
}

/// The `error.type` of an operation dropped before it answered.
pub const CANCELLED: &str = "cancelled";

impl Recording {
    /// Records the answer: its `tenure.outcome`, and its `error.type` when
    /// it failed.
    fn answered(&mut self, outcome: &'static str, error_type: Option<&'static str>) {
        self.answered = true;
        let span = tracing::Span::current();
        span.record("tenure.outcome", outcome);
        let elapsed = self.started.elapsed().as_secs_f64();
        let [system, operation, collection] = self.labels;
        match error_type {
            None => metrics::histogram!(OPERATION_DURATION.name, &self.labels).record(elapsed),
            Some(kind) => {
                span.record("error.type", kind);
                span.record("otel.status_code", "error");
                let labels = [system, operation, collection, (attribute::ERROR_TYPE, kind)];
                metrics::histogram!(OPERATION_DURATION.name, &labels).record(elapsed);
            }
        }
        let labels = [system, operation, collection, (attribute::OUTCOME, outcome)];
        metrics::counter!(OPERATIONS.name, &labels).increment(1);
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if !self.answered {
            self.answered(CANCELLED, Some(CANCELLED));
        }
    }
}

/// A time limit on every operation: one that has not answered within it is
/// dropped and answers [`ErrorKind::Timeout`] (its outcome unknown, as for
/// any dropped store call; see each operation's `# Cancellation`).
#[derive(Debug, Clone, Copy)]
pub struct Timeout {
    limit: Duration,
}

impl Timeout {
    /// At most `limit` per operation.
    pub fn new(limit: Duration) -> Self {
        Timeout { limit }
    }

    /// The limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }
}

impl Hook for Timeout {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        Box::pin(bounded(self.limit, operation.name, call))
    }
}

/// Awaits `work` for at most `limit`; past it answers
/// [`ErrorKind::Timeout`] naming `what`. The one time limit every store and
/// the keeper use.
///
/// # Errors
///
/// `work`'s own error, or the timeout.
pub async fn bounded<T>(
    limit: Duration,
    what: &str,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, work).await {
        Ok(answer) => answer,
        Err(elapsed) => Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "{what} got no answer within {limit:?}; whether it took effect is unknown \
                 (retry it, or raise the time limit if the store is just slow)"
            ),
        )
        .with_source(elapsed)),
    }
}

/// What an injected fault does to a matching call (see [`Faults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Answer [`ErrorKind::Unavailable`] without calling the store.
    Unavailable,
    /// Answer [`ErrorKind::Corrupt`] without calling the store, as a backend
    /// does when a record it must read cannot be decoded.
    Corrupt,
    /// Never answer until the next [`Faults::release_hangs`], then call the
    /// store.
    Hang,
    /// Call the store at once, answer after this long.
    SlowAnswer(Duration),
    /// Panic inside the call without calling the store, as a buggy store
    /// would; the rule is removed after its first panic.
    PanicOnce,
    /// Applied, but the reply lost: call the store, drop its answer, and
    /// answer a retryable [`ErrorKind::Unavailable`] saying the outcome is
    /// unknown, as a connection that died after the server committed does.
    /// The only fault whose `Err` hides a write that happened: what the
    /// contract's retry rules (§10) are for.
    ReplyLost,
}

/// Fault injection, for tests and examples: rules that make matching
/// operations fail, hang, answer late, panic or lose their reply, and a count of the calls of
/// each operation. A rule names an operation ([`Operation::name`]) and
/// optionally an id, which matches the operation's id or any claim of its
/// batch; the first matching rule applies. Rules can be added and cleared
/// while the store is in use.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use tenure_lease_core::layer::{Fault, Faults, LayerExt};
/// use tenure_lease_core::{AdmitRequest, ErrorKind, LeaseStore};
///
/// let store = tenure_backend_memory::MemoryStore::new().layer(Faults::new());
/// store.hook().inject("admit", None, Fault::Unavailable);
/// let request = AdmitRequest::new("run-1", "worker-a").ttl(Duration::from_secs(30));
/// let error = store.admit(&request).await.unwrap_err();
/// assert_eq!(error.kind(), ErrorKind::Unavailable);
/// assert_eq!(store.hook().calls("admit"), 1);
/// assert!(store.inner().get("run-1").await.unwrap().is_none(), "the store was not called");
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<(&'static str, Option<String>, Fault)>>,
    calls: Mutex<HashMap<&'static str, usize>>,
    /// How many times hanging calls were released.
    releases: tokio::sync::watch::Sender<u64>,
    hangs_dropped: AtomicUsize,
}

impl Faults {
    /// No rules yet: every call goes through.
    pub fn new() -> Self {
        Faults::default()
    }

    /// Adds a rule: calls of `operation` (on `id`, or any id) meet `fault`.
    pub fn inject(&self, operation: &'static str, id: Option<&str>, fault: Fault) {
        lock(&self.rules).push((operation, id.map(str::to_owned), fault));
    }

    /// Removes every rule.
    pub fn clear(&self) {
        lock(&self.rules).clear();
    }

    /// Removes every rule and lets every hanging call go on to the store.
    /// A `Hang` injected afterwards hangs again, until the next release.
    pub fn release_hangs(&self) {
        self.clear();
        self.releases.send_modify(|releases| *releases += 1);
    }

    /// How many calls of `operation` have started.
    pub fn calls(&self, operation: &str) -> usize {
        lock(&self.calls).get(operation).copied().unwrap_or(0)
    }

    /// How many hanging calls were dropped (cancelled) before release.
    pub fn hangs_dropped(&self) -> usize {
        self.hangs_dropped.load(Ordering::SeqCst)
    }

    /// Counts the call and picks the first matching rule's fault.
    fn enter(&self, operation: &Operation<'_>) -> Option<Fault> {
        *lock(&self.calls).entry(operation.name).or_default() += 1;
        let mut rules = lock(&self.rules);
        let index = rules.iter().position(|(name, id, _)| {
            *name == operation.name
                && id.as_deref().is_none_or(|id| {
                    operation.id == Some(id)
                        || operation.batch.iter().any(|claim| claim.id == id)
                        || operation.job_batch.iter().any(|claim| claim.id == id)
                })
        })?;
        Some(match rules[index].2 {
            Fault::PanicOnce => rules.remove(index).2,
            fault => fault,
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts a hanging call that is dropped before its release.
struct HangGuard<'a> {
    dropped: &'a AtomicUsize,
    released: bool,
}

impl Drop for HangGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Hook for Faults {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        Box::pin(async move {
            let releases_before = *self.releases.borrow();
            match self.enter(&operation) {
                None => call.await,
                Some(Fault::Unavailable) => Err(Error::unavailable(format!(
                    "injected failure of {}",
                    operation.name
                ))),
                Some(Fault::Corrupt) => Err(Error::corrupt(format!(
                    "injected undecodable record in {}",
                    operation.name
                ))),
                Some(Fault::SlowAnswer(delay)) => {
                    let answer = call.await;
                    tokio::time::sleep(delay).await;
                    answer
                }
                Some(Fault::Hang) => {
                    let mut guard = HangGuard {
                        dropped: &self.hangs_dropped,
                        released: false,
                    };
                    let mut releases = self.releases.subscribe();
                    // An error means the sender is gone with `self`: go on.
                    let _ = releases
                        .wait_for(|releases| *releases > releases_before)
                        .await;
                    guard.released = true;
                    call.await
                }
                Some(Fault::PanicOnce) => panic!("injected panic in {}", operation.name),
                Some(Fault::ReplyLost) => {
                    // The store's answer, whatever it was, never reaches the caller.
                    let _lost = call.await;
                    Err(Error::unavailable(format!(
                        "injected loss of the reply to {}: the store was called and may have \
                         applied it; whether it did is unknown (read or retry)",
                        operation.name
                    )))
                }
            }
        })
    }
}

#[async_trait]
impl<S: LeaseStore, H: Hook> LeaseStore for Layered<S, H> {
    async fn admit(&self, request: &AdmitRequest) -> Result<Admission> {
        let operation = Operation::by("admit", &request.id, &request.owner, Input::Admit(request));
        self.hook.call(operation, self.inner.admit(request)).await
    }

    async fn renew(&self, claim: &Claim, ttl: Duration) -> Result<Renewal> {
        let input = Input::Renew {
            claims: std::slice::from_ref(claim),
            ttl,
            progress: None,
        };
        let operation = Operation::claim("renew", claim, input);
        self.hook
            .call(operation, self.inner.renew(claim, ttl))
            .await
    }

    async fn renew_with_progress(
        &self,
        claim: &Claim,
        ttl: Duration,
        progress: &serde_json::Value,
    ) -> Result<Renewal> {
        let input = Input::Renew {
            claims: std::slice::from_ref(claim),
            ttl,
            progress: Some(progress),
        };
        let operation = Operation::claim("renew_with_progress", claim, input);
        self.hook
            .call(
                operation,
                self.inner.renew_with_progress(claim, ttl, progress),
            )
            .await
    }

    async fn renew_many(&self, claims: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        let operation = Operation {
            batch: claims,
            ..Operation::named(
                "renew_many",
                Input::Renew {
                    claims,
                    ttl,
                    progress: None,
                },
            )
        };
        self.hook
            .call(operation, self.inner.renew_many(claims, ttl))
            .await
    }

    async fn transition(&self, claim: &Claim, change: &StatusChange) -> Result<Transition> {
        let operation = Operation::claim("transition", claim, Input::Transition { claim, change });
        self.hook
            .call(operation, self.inner.transition(claim, change))
            .await
    }

    async fn claim_for_takeover(&self, request: &TakeoverRequest) -> Result<Takeover> {
        let operation = Operation::by(
            "claim_for_takeover",
            &request.id,
            &request.claimer,
            Input::Takeover(request),
        );
        self.hook
            .call(operation, self.inner.claim_for_takeover(request))
            .await
    }

    async fn list_expired(&self, query: &ExpiredQuery) -> Result<ExpiredScan> {
        let operation = Operation::named("list_expired", Input::ListExpired(query));
        self.hook
            .call(operation, self.inner.list_expired(query))
            .await
    }

    async fn get(&self, id: &str) -> Result<Option<LeaseRecord>> {
        self.hook
            .call(Operation::on("get", id, Input::Get(id)), self.inner.get(id))
            .await
    }

    async fn list_by_scope(&self, scope: &str) -> Result<Vec<LeaseRecord>> {
        let operation = Operation::named("list_by_scope", Input::ListByScope(scope));
        self.hook
            .call(operation, self.inner.list_by_scope(scope))
            .await
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let operation = Operation::named("list_active", Input::Plain);
        self.hook.call(operation, self.inner.list_active()).await
    }

    async fn now(&self) -> Result<Timestamp> {
        self.hook
            .call(Operation::named("now", Input::Plain), self.inner.now())
            .await
    }

    async fn purge(&self, terminal_older_than: Duration) -> Result<u64> {
        let operation = Operation::named("purge", Input::Sweep(terminal_older_than));
        self.hook
            .call(operation, self.inner.purge(terminal_older_than))
            .await
    }

    async fn count_purgeable(&self, terminal_older_than: Duration) -> Result<u64> {
        let operation = Operation::named("count_purgeable", Input::Sweep(terminal_older_than));
        self.hook
            .call(operation, self.inner.count_purgeable(terminal_older_than))
            .await
    }

    /// Handed on to the wrapped store as it is: a subscription, not an
    /// operation the hook should time, fault or count.
    async fn releases(&self) -> Result<Option<crate::release::Releases>> {
        self.inner.releases().await
    }

    fn system_name(&self) -> &'static str {
        self.inner.system_name()
    }
}

#[async_trait]
impl<S: JobQueue, H: Hook> JobQueue for Layered<S, H> {
    async fn enqueue(&self, job: &NewJob) -> Result<Job> {
        let input = Input::Enqueue(std::slice::from_ref(job));
        let operation = Operation::on("enqueue", &job.id, input);
        self.hook.call(operation, self.inner.enqueue(job)).await
    }

    async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Job>> {
        let operation = Operation::named("enqueue_batch", Input::Enqueue(jobs));
        self.hook
            .call(operation, self.inner.enqueue_batch(jobs))
            .await
    }

    async fn enqueue_unique(&self, job: &NewJob) -> Result<Enqueued> {
        let input = Input::Enqueue(std::slice::from_ref(job));
        let operation = Operation::on("enqueue_unique", &job.id, input);
        self.hook
            .call(operation, self.inner.enqueue_unique(job))
            .await
    }

    async fn enqueue_unique_batch(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let operation = Operation::named("enqueue_unique_batch", Input::Enqueue(jobs));
        self.hook
            .call(operation, self.inner.enqueue_unique_batch(jobs))
            .await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
        let operation = Operation {
            owner: Some(&request.worker),
            ..Operation::named("claim", Input::Claim(request))
        };
        self.hook.call(operation, self.inner.claim(request)).await
    }

    async fn claim_limited(&self, request: &ClaimRequest) -> Result<Claimed> {
        let operation = Operation {
            owner: Some(&request.worker),
            ..Operation::named("claim_limited", Input::Claim(request))
        };
        self.hook
            .call(operation, self.inner.claim_limited(request))
            .await
    }

    async fn renew_job(&self, claim: &JobClaim, ttl: Duration) -> Result<JobRenewal> {
        let input = Input::RenewJobs {
            claims: std::slice::from_ref(claim),
            ttl,
            progress: None,
        };
        let operation = Operation::job_claim("renew_job", claim, input);
        self.hook
            .call(operation, self.inner.renew_job(claim, ttl))
            .await
    }

    async fn renew_job_with_progress(
        &self,
        claim: &JobClaim,
        ttl: Duration,
        progress: &serde_json::Value,
    ) -> Result<JobRenewal> {
        let input = Input::RenewJobs {
            claims: std::slice::from_ref(claim),
            ttl,
            progress: Some(progress),
        };
        let operation = Operation::job_claim("renew_job_with_progress", claim, input);
        self.hook
            .call(
                operation,
                self.inner.renew_job_with_progress(claim, ttl, progress),
            )
            .await
    }

    async fn renew_jobs(&self, claims: &[JobClaim], ttl: Duration) -> Result<Vec<JobRenewal>> {
        let operation = Operation {
            job_batch: claims,
            ..Operation::named(
                "renew_jobs",
                Input::RenewJobs {
                    claims,
                    ttl,
                    progress: None,
                },
            )
        };
        self.hook
            .call(operation, self.inner.renew_jobs(claims, ttl))
            .await
    }

    async fn complete(&self, claim: &JobClaim) -> Result<JobSettle> {
        let input = Input::Complete(std::slice::from_ref(claim));
        let operation = Operation::job_claim("complete", claim, input);
        self.hook.call(operation, self.inner.complete(claim)).await
    }

    async fn complete_many(&self, claims: &[JobClaim]) -> Result<Vec<JobSettle>> {
        let operation = Operation {
            job_batch: claims,
            ..Operation::named("complete_many", Input::Complete(claims))
        };
        self.hook
            .call(operation, self.inner.complete_many(claims))
            .await
    }

    async fn fail(&self, claim: &JobClaim, error: &str, action: FailAction) -> Result<JobSettle> {
        let input = Input::Fail {
            claim,
            error,
            action,
        };
        let operation = Operation::job_claim("fail", claim, input);
        self.hook
            .call(operation, self.inner.fail(claim, error, action))
            .await
    }

    async fn defer(&self, claim: &JobClaim, missing: &BTreeSet<String>) -> Result<JobSettle> {
        let operation = Operation::job_claim("defer", claim, Input::Defer { claim, missing });
        self.hook
            .call(operation, self.inner.defer(claim, missing))
            .await
    }

    async fn reap(&self, grace: Duration) -> Result<ReapReport> {
        let operation = Operation::named("reap", Input::Sweep(grace));
        self.hook.call(operation, self.inner.reap(grace)).await
    }

    async fn take_back(&self, claim: &JobClaim, ttl: Duration) -> Result<TakeBack> {
        let operation = Operation::job_claim("take_back", claim, Input::TakeBack { claim, ttl });
        self.hook
            .call(operation, self.inner.take_back(claim, ttl))
            .await
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        let operation = Operation::on("get_job", id, Input::GetJob(id));
        self.hook.call(operation, self.inner.get_job(id)).await
    }

    async fn list_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<Job>> {
        let input = Input::ListJobs {
            queue,
            state: Some(JobState::DeadLettered),
            limit,
        };
        let operation = Operation::named("list_dead_letters", input);
        self.hook
            .call(operation, self.inner.list_dead_letters(queue, limit))
            .await
    }

    async fn list_jobs(
        &self,
        queue: &str,
        state: Option<JobState>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let input = Input::ListJobs {
            queue,
            state,
            limit,
        };
        let operation = Operation::named("list_jobs", input);
        self.hook
            .call(operation, self.inner.list_jobs(queue, state, limit))
            .await
    }

    async fn count_jobs(&self) -> Result<Vec<QueueCounts>> {
        let operation = Operation::named("count_jobs", Input::Plain);
        self.hook.call(operation, self.inner.count_jobs()).await
    }

    async fn retry_dead_letter(&self, id: &str) -> Result<OperatorRetry> {
        let operation = Operation::on("retry_dead_letter", id, Input::Plain);
        self.hook
            .call(operation, self.inner.retry_dead_letter(id))
            .await
    }

    async fn purge_jobs(&self, finished_older_than: Duration) -> Result<u64> {
        let operation = Operation::named("purge_jobs", Input::Sweep(finished_older_than));
        self.hook
            .call(operation, self.inner.purge_jobs(finished_older_than))
            .await
    }
}

#[async_trait]
impl<S: FenceStore, H: Hook> FenceStore for Layered<S, H> {
    async fn check_fence(&self, resource: &str, fence: u64) -> Result<FenceCheck> {
        let operation = Operation {
            fence: Some(fence),
            ..Operation::on(
                "check_fence",
                resource,
                Input::CheckFence { resource, fence },
            )
        };
        self.hook
            .call(operation, self.inner.check_fence(resource, fence))
            .await
    }

    async fn highest_fence(&self, resource: &str) -> Result<Option<u64>> {
        let operation = Operation::on("highest_fence", resource, Input::Plain);
        self.hook
            .call(operation, self.inner.highest_fence(resource))
            .await
    }

    async fn purge_fences(&self, unused_for: Duration) -> Result<u64> {
        let operation = Operation::named("purge_fences", Input::Sweep(unused_for));
        self.hook
            .call(operation, self.inner.purge_fences(unused_for))
            .await
    }

    async fn list_fences(&self, after: Option<&str>, limit: usize) -> Result<Vec<GateRecord>> {
        let operation = Operation::named("list_fences", Input::Plain);
        self.hook
            .call(operation, self.inner.list_fences(after, limit))
            .await
    }
}

macro_rules! answer {
    ($($type:ty => |$value:ident| $label:expr, view $view:expr $(, fence $fence:expr)?;)*) => {
        $(impl Answer for $type {
            fn label(&self) -> &'static str {
                let $value = self;
                $label
            }
            fn view(&self) -> AnswerView<'_> {
                let $value = self;
                $view
            }
            $(fn fence(&self) -> Option<u64> {
                let $value = self;
                $fence
            })?
        })*
    };
}

answer! {
    Admission => |answer| answer.label(), view AnswerView::Admission(answer), fence match answer {
        Admission::Admitted { record, .. } => Some(record.fence),
        _ => None,
    };
    Takeover => |answer| answer.label(), view AnswerView::Takeover(answer), fence match answer {
        Takeover::Taken(record) => Some(record.fence),
        _ => None,
    };
    Renewal => |answer| answer.label(), view AnswerView::Renewals(std::slice::from_ref(answer));
    Transition => |answer| answer.label(), view AnswerView::Transition(answer);
    Vec<Renewal> => |_answer| "answered", view AnswerView::Renewals(_answer);
    ExpiredScan => |_answer| "listed", view AnswerView::ExpiredScan(_answer);
    Vec<LeaseRecord> => |_answer| "listed", view AnswerView::Records(_answer);
    Option<LeaseRecord> => |answer| if answer.is_some() { "found" } else { "missing" },
        view AnswerView::Record(answer.as_ref());
    Timestamp => |_answer| "answered", view AnswerView::Now(*_answer);
    u64 => |_answer| "purged", view AnswerView::Purged(*_answer);
    Job => |_answer| "enqueued", view AnswerView::Jobs(std::slice::from_ref(_answer));
    Vec<Job> => |_answer| "answered", view AnswerView::Jobs(_answer);
    Enqueued => |answer| match answer {
        Enqueued::Created(_) => "enqueued",
        Enqueued::Duplicate(_) => "duplicate",
    }, view AnswerView::Enqueued(std::slice::from_ref(answer));
    Vec<Enqueued> => |_answer| "answered", view AnswerView::Enqueued(_answer);
    Vec<ClaimedJob> => |answer| if answer.is_empty() { "none" } else { "claimed" },
        view AnswerView::Claimed(answer);
    Claimed => |answer| match (answer.jobs.is_empty(), answer.retry_after) {
        (_, Some(_)) => "rate_limited",
        (true, None) => "none",
        (false, None) => "claimed",
    }, view AnswerView::LimitedClaim(answer);
    Option<Job> => |answer| if answer.is_some() { "found" } else { "missing" },
        view AnswerView::JobFound(answer.as_ref());
    JobRenewal => |answer| match answer {
        JobRenewal::Renewed { .. } => "renewed",
        JobRenewal::Lost(_) => "lost",
    }, view AnswerView::JobRenewals(std::slice::from_ref(answer));
    Vec<JobRenewal> => |_answer| "answered", view AnswerView::JobRenewals(_answer);
    JobSettle => |answer| match answer {
        JobSettle::Settled(_) => "settled",
        JobSettle::Rejected(_) => "rejected",
    }, view AnswerView::Settles(std::slice::from_ref(answer));
    Vec<JobSettle> => |_answer| "answered", view AnswerView::Settles(_answer);
    ReapReport => |_answer| "reaped", view AnswerView::Reaped(_answer);
    Vec<QueueCounts> => |_answer| "counted", view AnswerView::QueueCounts(_answer);
    TakeBack => |answer| match answer {
        TakeBack::Taken(_) => "taken",
        TakeBack::NotTaken(_) => "not_taken",
    }, view AnswerView::TakeBack(answer);
    FenceCheck => |answer| answer.label(), view AnswerView::FenceCheck(answer);
    Option<u64> => |answer| if answer.is_some() { "found" } else { "missing" },
        view AnswerView::HighestFence(*answer);
    Vec<GateRecord> => |_answer| "listed", view AnswerView::Gates(_answer);
    OperatorRetry => |answer| match answer {
        OperatorRetry::Requeued(_) => "requeued",
        OperatorRetry::NotDeadLettered(_) => "not_dead_lettered",
        OperatorRetry::Missing => "missing",
    }, view AnswerView::OperatorRetry(answer);
}
