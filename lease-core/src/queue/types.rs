//! Jobs, claims on them, and the typed answers of queue operations.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::Error;
use crate::rate::RateLimit;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum JobState {
    /// Waiting in its queue; visible once `run_at` has passed.
    Queued,
    /// Held by a worker under a lease.
    Claimed,
    /// Finished well. Final.
    Completed,
    /// Given up on; inspectable, and an operator may retry it.
    DeadLettered,
}

impl JobState {
    /// Every state.
    pub const ALL: [JobState; 4] = [
        JobState::Queued,
        JobState::Claimed,
        JobState::Completed,
        JobState::DeadLettered,
    ];

    /// Stable lower-case name, the form stores persist.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Claimed => "claimed",
            JobState::Completed => "completed",
            JobState::DeadLettered => "dead_lettered",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == text)
            .ok_or_else(|| Error::corrupt(format!("unknown job state {text:?}")))
    }
}

/// Why a job was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DeadReason {
    /// The reaper found its lease expired on the last attempt. The live copy
    /// may still [`take_back`](super::JobQueue::take_back) such a job.
    LeaseExpired,
    /// A worker failed it with `Retry` on its last attempt.
    AttemptsExhausted,
    /// A worker failed it with `DeadLetter`.
    Failed,
}

impl DeadReason {
    /// Every reason.
    pub const ALL: [DeadReason; 3] = [
        DeadReason::LeaseExpired,
        DeadReason::AttemptsExhausted,
        DeadReason::Failed,
    ];

    /// Stable lower-case name, the form stores persist.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::LeaseExpired => "lease_expired",
            DeadReason::AttemptsExhausted => "attempts_exhausted",
            DeadReason::Failed => "failed",
        }
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeadReason {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DeadReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == text)
            .ok_or_else(|| Error::corrupt(format!("unknown dead-letter reason {text:?}")))
    }
}

/// A job to enqueue. Build one with [`NewJob::new`] and the chained setters.
///
/// ```
/// use tenure_lease_core::queue::NewJob;
///
/// let job = NewJob::new("emails", serde_json::json!({ "to": "a@example.com" }))
///     .priority(5)
///     .max_attempts(3)
///     .require("smtp");
/// assert_eq!(job.queue, "emails");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Unique id (generated UUIDv7 unless set).
    pub id: String,
    /// The queue it belongs to.
    pub queue: String,
    /// What the worker needs to run it; any JSON value.
    pub payload: serde_json::Value,
    /// Not visible before this instant; `None` means at once.
    pub run_at: Option<Timestamp>,
    /// How many claims it may take in all (1 ..= 1000; default 3).
    pub max_attempts: u32,
    /// Higher runs first (default 0).
    pub priority: i32,
    /// Capabilities a worker must have to claim it.
    pub required_capabilities: BTreeSet<String>,
    /// Its uniqueness key and policy, if it has one: such a job is enqueued
    /// with [`enqueue_unique`](super::JobQueue::enqueue_unique) only.
    pub unique: Option<JobUnique>,
}

/// Default [`NewJob::max_attempts`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

impl NewJob {
    /// A job for `queue` with `payload`, a generated id, visible at once,
    /// [`DEFAULT_MAX_ATTEMPTS`], priority 0, no requirements.
    pub fn new(queue: impl Into<String>, payload: serde_json::Value) -> Self {
        NewJob {
            id: crate::request::generate_id(),
            queue: queue.into(),
            payload,
            run_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            priority: 0,
            required_capabilities: BTreeSet::new(),
            unique: None,
        }
    }

    /// Sets the id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets when it becomes visible.
    pub fn run_at(mut self, run_at: Timestamp) -> Self {
        self.run_at = Some(run_at);
        self
    }

    /// Sets the number of attempts.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Adds a required capability.
    pub fn require(mut self, capability: impl Into<String>) -> Self {
        self.required_capabilities.insert(capability.into());
        self
    }

    /// Gives it a uniqueness key in its queue, held as `policy` says; enqueue
    /// it with [`enqueue_unique`](super::JobQueue::enqueue_unique).
    pub fn unique(mut self, key: impl Into<String>, policy: UniquePolicy) -> Self {
        self.unique = Some(JobUnique {
            key: key.into(),
            policy,
        });
        self
    }
}

/// How long a job holds its uniqueness key: while it does,
/// [`enqueue_unique`](super::JobQueue::enqueue_unique) of another job with
/// the same key in the same queue answers [`Enqueued::Duplicate`] naming it
/// ([contract §9, unique jobs](crate::contract)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UniquePolicy {
    /// While it is [`Queued`](JobState::Queued), visible yet or not: one
    /// job waiting per key, another may be enqueued once it is claimed.
    WhileQueued,
    /// While it is [`Queued`](JobState::Queued) or
    /// [`Claimed`](JobState::Claimed): one job unfinished per key.
    WhileUnfinished,
    /// From its enqueue (the store's clock) for this long, whatever its
    /// state (`purge_jobs` keeps it until then): at most one job per key
    /// and period
    /// ([`MIN_UNIQUE_PERIOD`](crate::limits::MIN_UNIQUE_PERIOD) to
    /// [`MAX_UNIQUE_PERIOD`](crate::limits::MAX_UNIQUE_PERIOD)).
    ForPeriod(Duration),
}

impl UniquePolicy {
    /// Stable lower-case name of the kind of policy, the form stores
    /// persist (a period's length is kept apart, as its end).
    pub fn kind(self) -> &'static str {
        match self {
            UniquePolicy::WhileQueued => "while_queued",
            UniquePolicy::WhileUnfinished => "while_unfinished",
            UniquePolicy::ForPeriod(_) => "for_period",
        }
    }
}

impl fmt::Display for UniquePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UniquePolicy::ForPeriod(period) => write!(f, "for_period({period:?})"),
            _ => f.write_str(self.kind()),
        }
    }
}

/// A job's uniqueness key in its queue and how long it holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobUnique {
    /// The key, a name (1 to [`MAX_NAME_BYTES`](crate::limits::MAX_NAME_BYTES)
    /// bytes, no control characters), scoped to the job's queue.
    pub key: String,
    /// How long the job holds it.
    pub policy: UniquePolicy,
}

/// The answer of [`enqueue_unique`](super::JobQueue::enqueue_unique), one
/// per job.
#[allow(clippy::large_enum_variant)] // answered once, matched at once
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Enqueued {
    /// Stored: the job as it now is.
    Created(Job),
    /// Not stored: this job, with the same key in the same queue, holds
    /// the key (as it now is).
    Duplicate(Job),
}

impl Enqueued {
    /// The job stored, or the one holding the key.
    pub fn job(&self) -> &Job {
        match self {
            Enqueued::Created(job) | Enqueued::Duplicate(job) => job,
        }
    }

    /// Whether the job was stored.
    pub fn is_created(&self) -> bool {
        matches!(self, Enqueued::Created(_))
    }
}

/// A stored job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Unique id.
    pub id: String,
    /// Its queue.
    pub queue: String,
    /// What the worker needs to run it.
    pub payload: serde_json::Value,
    /// Higher runs first.
    pub priority: i32,
    /// Not visible before this instant.
    pub run_at: Timestamp,
    /// Claims taken so far (a deferral refunds one).
    pub attempt: u32,
    /// Claims it may take in all.
    pub max_attempts: u32,
    /// Capabilities a worker must have to claim it.
    pub required_capabilities: BTreeSet<String>,
    /// Where it is in its life.
    pub state: JobState,
    /// The worker holding it (or that last held it), if any.
    pub owner: Option<String>,
    /// Fence of the latest claim; 0 before the first.
    pub fence: u64,
    /// End of the current claim's lease.
    pub lease_expires_at: Option<Timestamp>,
    /// The latest failure's error text.
    pub last_error: Option<String>,
    /// Why it was dead-lettered, while it is.
    pub dead_reason: Option<DeadReason>,
    /// When it was enqueued (store time).
    pub created_at: Timestamp,
    /// When it last changed (store time).
    pub updated_at: Timestamp,
    /// How many times its worker [took it back](super::JobQueue::take_back)
    /// after the reaper dead-lettered it while that worker was still alive
    /// (a false dead letter): 0 for a job never taken back, and for jobs
    /// stored by a version that kept no such count. Nothing resets it.
    #[serde(default)]
    pub taken_back: u32,
    /// When it was last taken back (store time); `None` exactly when
    /// `taken_back` is 0.
    #[serde(default)]
    pub taken_back_at: Option<Timestamp>,
    /// The latest progress its holder reported
    /// ([`renew_job_with_progress`](super::JobQueue::renew_job_with_progress)),
    /// kept until the next report, through later attempts too; `None`
    /// until the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
    /// Its uniqueness key and policy, as enqueued; `None` for a job
    /// enqueued without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<JobUnique>,
}

impl Job {
    /// When its [`ForPeriod`](UniquePolicy::ForPeriod) key is released:
    /// its creation plus the period. `None` for other policies and for a
    /// job without a key.
    pub fn unique_until(&self) -> Option<Timestamp> {
        match self.unique.as_ref()?.policy {
            UniquePolicy::ForPeriod(period) => Some(crate::clock::add(self.created_at, period)),
            _ => None,
        }
    }

    /// The claim of its current holder, when it is claimed.
    pub fn claim(&self) -> Option<JobClaim> {
        match (&self.state, &self.owner) {
            (JobState::Claimed, Some(owner)) => Some(JobClaim {
                id: self.id.clone(),
                owner: owner.clone(),
                fence: self.fence,
                attempt: self.attempt,
            }),
            _ => None,
        }
    }
}

/// What a worker holds after claiming a job: the proof of ownership every
/// fenced job write must present.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobClaim {
    /// The job id.
    pub id: String,
    /// The worker holding it.
    pub owner: String,
    /// The fence of this claim.
    pub fence: u64,
    /// Which attempt this claim is (1 for the first).
    pub attempt: u32,
}

/// A job handed to a claimer, with the claim to present for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedJob {
    /// The job as it now is.
    pub job: Job,
    /// The claim on it.
    pub claim: JobClaim,
}

/// The answer of [`claim_limited`](super::JobQueue::claim_limited).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Claimed {
    /// The jobs claimed, best first, as [`claim`](super::JobQueue::claim)
    /// answers them.
    pub jobs: Vec<ClaimedJob>,
    /// `Some` when the request's [rate limit](ClaimRequest::rate_limit)
    /// held back a claimable job: the time until the next permit frees
    /// (store time). `None` when the limit held nothing back.
    pub retry_after: Option<Duration>,
}

impl Claimed {
    /// Jobs claimed, with nothing held back.
    pub fn jobs(jobs: Vec<ClaimedJob>) -> Self {
        Claimed {
            jobs,
            retry_after: None,
        }
    }

    /// Jobs claimed, more held back by the rate limit until `retry_after`.
    pub fn rate_limited(jobs: Vec<ClaimedJob>, retry_after: Duration) -> Self {
        Claimed {
            jobs,
            retry_after: Some(retry_after),
        }
    }
}

/// Input of [`claim`](super::JobQueue::claim) and
/// [`claim_limited`](super::JobQueue::claim_limited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The queue to claim from.
    pub queue: String,
    /// The claiming worker.
    pub worker: String,
    /// What the worker can do; jobs requiring more are left alone.
    pub capabilities: BTreeSet<String>,
    /// Lease length of each claim.
    pub ttl: Duration,
    /// At most this many jobs (1 ..= [`MAX_CLAIM`](crate::limits::MAX_CLAIM)).
    pub limit: usize,
    /// A rate limit the claim must fit in, one permit per job claimed:
    /// only [`claim_limited`](super::JobQueue::claim_limited) takes one.
    pub rate_limit: Option<RateLimit>,
}

impl ClaimRequest {
    /// Claim one job of `queue` for `worker`, no capabilities, under `ttl`.
    pub fn new(queue: impl Into<String>, worker: impl Into<String>, ttl: Duration) -> Self {
        ClaimRequest {
            queue: queue.into(),
            worker: worker.into(),
            capabilities: BTreeSet::new(),
            ttl,
            limit: 1,
            rate_limit: None,
        }
    }

    /// Adds capabilities.
    pub fn capabilities<I, S>(mut self, capabilities: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.capabilities
            .extend(capabilities.into_iter().map(Into::into));
        self
    }

    /// Sets the limit.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Claims only within `limit` ([`rate_limit`](Self::rate_limit)).
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.rate_limit = Some(limit);
        self
    }
}

/// Why a job claim no longer holds its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobLoss {
    /// No job with that id.
    Missing,
    /// The job is completed or dead-lettered.
    Finished(JobState),
    /// The job went back to its queue (reaped, retried, deferred).
    Requeued,
    /// Another worker holds it now.
    OwnerChanged,
    /// Same worker name, newer claim: this copy is stale.
    FenceChanged,
}

impl JobLoss {
    /// Short name of the loss, for logs and metrics: the finished state's
    /// name (`completed`, `dead_lettered`) for a finished job.
    pub fn label(&self) -> &'static str {
        match self {
            JobLoss::Missing => "missing",
            JobLoss::Finished(JobState::Completed) => "completed",
            JobLoss::Finished(JobState::DeadLettered) => "dead_lettered",
            JobLoss::Finished(_) => "finished",
            JobLoss::Requeued => "requeued",
            JobLoss::OwnerChanged => "owner_changed",
            JobLoss::FenceChanged => "fence_changed",
        }
    }
}

/// The answer of [`renew_job`](super::JobQueue::renew_job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobRenewal {
    /// The claim's lease now runs until `expires_at`.
    Renewed {
        /// New end of the lease.
        expires_at: Timestamp,
    },
    /// The claim no longer holds the job; stop working on it.
    Lost(JobLoss),
}

/// The answer of [`complete`](super::JobQueue::complete),
/// [`fail`](super::JobQueue::fail) and [`defer`](super::JobQueue::defer).
#[allow(clippy::large_enum_variant)] // answered once, matched at once
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum JobSettle {
    /// The write happened; the job as it now is.
    Settled(Job),
    /// Nothing changed: the claim no longer holds the job.
    Rejected(JobLoss),
}

/// What [`fail`](super::JobQueue::fail) does with the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailAction {
    /// Back to the queue, visible after `backoff`, when attempts are left;
    /// dead-lettered ([`DeadReason::AttemptsExhausted`]) otherwise.
    Retry {
        /// Delay before it is visible again.
        backoff: Duration,
    },
    /// Dead-letter it now ([`DeadReason::Failed`]).
    DeadLetter,
}

/// How many jobs one queue holds in each state: a line of
/// [`count_jobs`](super::JobQueue::count_jobs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueCounts {
    /// The queue.
    pub queue: String,
    /// Waiting in the queue, visible or not yet.
    pub queued: u64,
    /// Held by a worker.
    pub claimed: u64,
    /// Finished well (until purged).
    pub completed: u64,
    /// Given up on (until retried or purged).
    pub dead_lettered: u64,
}

impl QueueCounts {
    /// A queue with no job counted yet.
    pub fn new(queue: impl Into<String>) -> Self {
        QueueCounts {
            queue: queue.into(),
            queued: 0,
            claimed: 0,
            completed: 0,
            dead_lettered: 0,
        }
    }

    /// The count of `state`.
    pub fn get(&self, state: JobState) -> u64 {
        match state {
            JobState::Queued => self.queued,
            JobState::Claimed => self.claimed,
            JobState::Completed => self.completed,
            JobState::DeadLettered => self.dead_lettered,
        }
    }

    /// Adds `count` jobs in `state`.
    pub fn add(&mut self, state: JobState, count: u64) {
        let slot = match state {
            JobState::Queued => &mut self.queued,
            JobState::Claimed => &mut self.claimed,
            JobState::Completed => &mut self.completed,
            JobState::DeadLettered => &mut self.dead_lettered,
        };
        *slot = slot.saturating_add(count);
    }

    /// Every job of the queue, whatever its state.
    pub fn total(&self) -> u64 {
        JobState::ALL
            .iter()
            .fold(0_u64, |total, state| total.saturating_add(self.get(*state)))
    }

    /// Gathers `(queue, state, count)` rows, a queue's states possibly on
    /// several rows, into one line per queue with a job, ordered by queue
    /// name (byte order): the answer of
    /// [`count_jobs`](super::JobQueue::count_jobs).
    ///
    /// ```
    /// use tenure_lease_core::queue::{JobState, QueueCounts};
    ///
    /// let counts = QueueCounts::tally([
    ///     ("mail", JobState::Queued, 2),
    ///     ("Mail", JobState::Claimed, 1),
    ///     ("mail", JobState::DeadLettered, 1),
    ///     ("empty", JobState::Completed, 0),
    /// ]);
    /// // Byte order: upper case first; no line for a queue without a job.
    /// assert_eq!(counts.len(), 2);
    /// assert_eq!((counts[0].queue.as_str(), counts[0].total()), ("Mail", 1));
    /// assert_eq!((counts[1].queued, counts[1].dead_lettered), (2, 1));
    /// ```
    pub fn tally<Q: Into<String>>(rows: impl IntoIterator<Item = (Q, JobState, u64)>) -> Vec<Self> {
        let mut queues = std::collections::BTreeMap::<String, QueueCounts>::new();
        for (queue, state, count) in rows {
            let queue = queue.into();
            queues
                .entry(queue.clone())
                .or_insert_with(|| QueueCounts::new(queue))
                .add(state, count);
        }
        queues
            .into_values()
            .filter(|counts| counts.total() > 0)
            .collect()
    }
}

/// What [`reap`](super::JobQueue::reap) did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReapReport {
    /// Jobs put back in their queue (attempts left), as they now are.
    pub requeued: Vec<Job>,
    /// Jobs dead-lettered with [`DeadReason::LeaseExpired`], as they now are.
    pub dead_lettered: Vec<Job>,
}

/// Why [`take_back`](super::JobQueue::take_back) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TakeBackRefusal {
    /// No job with that id.
    Missing,
    /// The job is not dead-lettered (requeued, re-claimed, retried by an
    /// operator, or completed).
    NotDeadLettered(JobState),
    /// Dead-lettered, but not by the reaper.
    NotByReaper(DeadReason),
    /// The claim is not the one the reaper found (owner or fence differ).
    NotTheReapedClaim,
}

/// The answer of [`take_back`](super::JobQueue::take_back).
#[allow(clippy::large_enum_variant)] // answered once, matched at once
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TakeBack {
    /// The copy holds the job again, under a new claim.
    Taken(ClaimedJob),
    /// Nothing changed; the copy must stop.
    NotTaken(TakeBackRefusal),
}

/// The answer of [`retry_dead_letter`](super::JobQueue::retry_dead_letter).
#[allow(clippy::large_enum_variant)] // answered once, matched at once
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OperatorRetry {
    /// Back in its queue with attempts reset, as it now is.
    Requeued(Job),
    /// The job is not dead-lettered; nothing changed.
    NotDeadLettered(JobState),
    /// No job with that id.
    Missing,
}
