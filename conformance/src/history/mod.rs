//! Histories: every call a set of clients made to a store and what each was
//! answered, and a checker that tells whether the answers, taken together,
//! keep the contract's safety promises.
//!
//! A test (or a user's own soak) wraps each client's store in the
//! [`Recording`] hook of one shared [`History`]; every operation is then
//! written down with the client's name, the monotonic instants it was sent
//! and answered, what it asked and what it got. An `Err` is written as
//! [`Reply::Unknown`]: the call may or may not have been applied, and the
//! [checker](check) allows both. [`check`] then judges the whole history
//! against four properties ([`Property`]) and names each violation with the
//! few entries that show it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tenure_conformance::history::{check, History};
//! use tenure_lease_core::{AdmitRequest, LayerExt, LeaseStore};
//!
//! let store = Arc::new(tenure_backend_memory::MemoryStore::new());
//! let history = History::new();
//! let worker = Arc::clone(&store).layer(history.client("worker-a"));
//! worker.admit(&AdmitRequest::new("run-1", "worker-a").ttl(Duration::from_secs(30))).await?;
//! let verdict = check(&history.entries());
//! assert!(verdict.is_clean(), "{verdict}");
//! assert_eq!(verdict.calls, 1);
//! # Ok(()) }
//! ```
//!
//! Instants are nanoseconds of the host's monotonic clock
//! (`CLOCK_MONOTONIC`), which every process of one host shares, so the
//! histories of child processes merge with their parent's. A history is
//! written and read as JSON lines ([`write_json_lines`], [`read_json_lines`]),
//! one [`Entry`] a line, and `tenure check-history FILE` checks a file.

mod check;

pub use check::{check, Property, Verdict, Violation};

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tenure_lease_core::layer::{Answer, AnswerView, Hook, Input, Operation, Pending};
use tenure_lease_core::queue::{
    FailAction, Job, JobClaim, JobRenewal, JobSettle, JobState, TakeBack,
};
use tenure_lease_core::{
    Admission, Claim, ErrorKind, FenceCheck, LeaseRecord, Renewal, Status, Takeover,
    TakeoverAction, Transition,
};

/// Nanoseconds of the host's monotonic clock, the time base of every
/// [`Entry`]: comparable across the processes of one host.
pub fn monotonic_nanos() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// `duration` in whole microseconds, as entries keep ttls.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// One call and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The client that made the call (a worker, a process, the checker's
    /// final reads).
    pub client: String,
    /// When the call was sent, in [`monotonic_nanos`].
    pub sent: u64,
    /// When its answer came back (or the call was given up).
    pub answered: u64,
    /// What was asked.
    pub call: Call,
    /// What was answered.
    pub reply: Reply,
}

/// What a call asked, as much of it as the checker reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Call {
    /// `admit`.
    Admit {
        /// The record's id.
        id: String,
        /// The requester.
        owner: String,
        /// The scopes asked for.
        scopes: BTreeSet<String>,
        /// The lease asked for, in microseconds; `None` for no lease.
        ttl_us: Option<u64>,
    },
    /// `renew` and `renew_many`.
    Renew {
        /// The claims renewed.
        claims: Vec<Claim>,
        /// The lease asked for, in microseconds.
        ttl_us: u64,
    },
    /// `transition`.
    Transition {
        /// The claim writing.
        claim: Claim,
        /// The status asked for.
        to: Status,
    },
    /// `claim_for_takeover`.
    Takeover {
        /// The orphan's id.
        id: String,
        /// The claimer.
        claimer: String,
        /// Whether the claimer adopts it (else it fails it).
        adopt: bool,
        /// The adopter's lease, in microseconds; `None` for no lease (and
        /// for a failing takeover).
        ttl_us: Option<u64>,
    },
    /// `enqueue` and `enqueue_batch`.
    Enqueue {
        /// The jobs' ids.
        ids: Vec<String>,
    },
    /// `claim` (jobs).
    ClaimJobs {
        /// The queue.
        queue: String,
        /// The worker.
        worker: String,
        /// The lease asked for, in microseconds.
        ttl_us: u64,
    },
    /// `renew_job` and `renew_jobs`.
    RenewJobs {
        /// The claims renewed.
        claims: Vec<JobClaim>,
        /// The lease asked for, in microseconds.
        ttl_us: u64,
    },
    /// `complete`, `complete_many`, `fail` and `defer`.
    Settle {
        /// The claims settling.
        claims: Vec<JobClaim>,
        /// How.
        how: Settlement,
    },
    /// `take_back`.
    TakeBack {
        /// The old copy's claim.
        claim: JobClaim,
        /// The lease asked for, in microseconds.
        ttl_us: u64,
    },
    /// `check_fence`.
    CheckFence {
        /// The gate's resource.
        resource: String,
        /// The fence presented.
        fence: u64,
    },
    /// A write to a resource that checks no fence at all, recorded by the
    /// workload itself ([`History::record_unchecked_write`]): what the
    /// kit's control runs do instead of `check_fence`.
    UncheckedWrite {
        /// The resource.
        resource: String,
        /// The fence the writer held.
        fence: u64,
    },
    /// `get`.
    Get {
        /// The id read.
        id: String,
    },
    /// `get_job`.
    GetJob {
        /// The id read.
        id: String,
    },
    /// Any other operation, by name (listings, sweeps, `now`).
    Other {
        /// The operation's name.
        name: String,
    },
}

/// How a [`Call::Settle`] settles its claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settlement {
    /// `complete` or `complete_many`.
    Complete,
    /// `fail` with a retry.
    Retry,
    /// `fail` to the dead letters.
    DeadLetter,
    /// `defer`.
    Defer,
}

/// A lease record as an answer showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSeen {
    /// Its id.
    pub id: String,
    /// Its owner.
    pub owner: Option<String>,
    /// Its fence.
    pub fence: u64,
    /// Its status.
    pub status: Status,
    /// Its scopes.
    pub scopes: BTreeSet<String>,
}

impl From<&LeaseRecord> for RecordSeen {
    fn from(record: &LeaseRecord) -> Self {
        RecordSeen {
            id: record.id.clone(),
            owner: record.owner.clone(),
            fence: record.fence,
            status: record.status,
            scopes: record.scopes.clone(),
        }
    }
}

/// A job as an answer showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSeen {
    /// Its id.
    pub id: String,
    /// Its state.
    pub state: JobState,
    /// Its owner.
    pub owner: Option<String>,
    /// Its fence.
    pub fence: u64,
}

impl From<&Job> for JobSeen {
    fn from(job: &Job) -> Self {
        JobSeen {
            id: job.id.clone(),
            state: job.state,
            owner: job.owner.clone(),
            fence: job.fence,
        }
    }
}

/// What a call was answered, as much of it as the checker reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// An `Err` that may hide an applied write (unavailable, timeout,
    /// corrupt...), or a call dropped before its answer: the outcome is
    /// unknown.
    Unknown {
        /// The error's kind (`unavailable`, `timeout`...).
        kind: String,
        /// The error's message.
        error: String,
    },
    /// An `Err` the contract says changed nothing (`invalid_input`,
    /// `already_exists`).
    Refused {
        /// The error's kind.
        kind: String,
    },
    /// `admit` answered `Admitted`.
    Admitted {
        /// The new record.
        record: RecordSeen,
        /// The records it interrupted, as they now are.
        interrupted: Vec<RecordSeen>,
    },
    /// `admit` answered `Conflict`.
    Conflict,
    /// `renew`/`renew_many`: per claim, whether it was renewed.
    Renewals {
        /// One flag per claim, in order.
        renewed: Vec<bool>,
    },
    /// `transition` answered `Applied` (the record as written) or `Rejected`.
    Transitioned {
        /// The record as written, when applied.
        record: Option<RecordSeen>,
    },
    /// `claim_for_takeover` answered `Taken`.
    Taken {
        /// The record as taken.
        record: RecordSeen,
    },
    /// `claim_for_takeover` answered `NotTaken`; `take_back` answered
    /// `NotTaken`.
    NotTaken,
    /// `claim` (jobs) or `take_back`: the claims handed out.
    Claimed {
        /// One claim per job handed out.
        claims: Vec<JobClaim>,
    },
    /// `renew_job`/`renew_jobs`: per claim, whether it was renewed.
    JobRenewals {
        /// One flag per claim, in order.
        renewed: Vec<bool>,
    },
    /// A settlement: per claim, the job as settled, or `None` when refused.
    Settles {
        /// One per claim, in order.
        settled: Vec<Option<JobSeen>>,
    },
    /// `check_fence` answered `Accepted`, or a [`Call::UncheckedWrite`].
    Accepted,
    /// `check_fence` answered `Stale`.
    Stale {
        /// The highest fence the gate had seen.
        highest: u64,
    },
    /// `get`: the record, if any.
    Record {
        /// The record read.
        record: Option<RecordSeen>,
    },
    /// `get_job`, `enqueue`: the jobs read or written.
    Jobs {
        /// The jobs.
        jobs: Vec<JobSeen>,
    },
    /// Any other answer, by label.
    Other {
        /// The answer's label.
        label: String,
    },
}

impl Reply {
    /// Whether the call's outcome is unknown.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Reply::Unknown { .. })
    }

    fn of_error(error: &tenure_lease_core::Error) -> Reply {
        match error.kind() {
            ErrorKind::InvalidInput | ErrorKind::AlreadyExists => Reply::Refused {
                kind: error.kind().as_str().to_owned(),
            },
            kind => Reply::Unknown {
                kind: kind.as_str().to_owned(),
                error: error.to_string(),
            },
        }
    }

    fn of_answer(view: AnswerView<'_>, label: &str) -> Reply {
        let settled = |settle: &JobSettle| match settle {
            JobSettle::Settled(job) => Some(JobSeen::from(job)),
            _ => None,
        };
        match view {
            AnswerView::Admission(Admission::Admitted {
                record,
                interrupted,
            }) => Reply::Admitted {
                record: record.into(),
                interrupted: interrupted.iter().map(RecordSeen::from).collect(),
            },
            AnswerView::Admission(Admission::Conflict { .. }) => Reply::Conflict,
            AnswerView::Renewals(renewals) => Reply::Renewals {
                renewed: renewals
                    .iter()
                    .map(|renewal| matches!(renewal, Renewal::Renewed { .. }))
                    .collect(),
            },
            AnswerView::Transition(transition) => Reply::Transitioned {
                record: match transition {
                    Transition::Applied(record) => Some(record.into()),
                    _ => None,
                },
            },
            AnswerView::Takeover(Takeover::Taken(record)) => Reply::Taken {
                record: record.into(),
            },
            AnswerView::Takeover(_) | AnswerView::TakeBack(TakeBack::NotTaken(_)) => {
                Reply::NotTaken
            }
            AnswerView::Claimed(claimed) => Reply::Claimed {
                claims: claimed.iter().map(|each| each.claim.clone()).collect(),
            },
            AnswerView::TakeBack(TakeBack::Taken(claimed)) => Reply::Claimed {
                claims: vec![claimed.claim.clone()],
            },
            AnswerView::JobRenewals(renewals) => Reply::JobRenewals {
                renewed: renewals
                    .iter()
                    .map(|renewal| matches!(renewal, JobRenewal::Renewed { .. }))
                    .collect(),
            },
            AnswerView::Settles(settles) => Reply::Settles {
                settled: settles.iter().map(settled).collect(),
            },
            AnswerView::FenceCheck(FenceCheck::Accepted) => Reply::Accepted,
            AnswerView::FenceCheck(FenceCheck::Stale(stale)) => Reply::Stale {
                highest: stale.highest_seen,
            },
            AnswerView::Record(record) => Reply::Record {
                record: record.map(RecordSeen::from),
            },
            AnswerView::JobFound(job) => Reply::Jobs {
                jobs: job.map(JobSeen::from).into_iter().collect(),
            },
            AnswerView::Jobs(jobs) => Reply::Jobs {
                jobs: jobs.iter().map(JobSeen::from).collect(),
            },
            _ => Reply::Other {
                label: label.to_owned(),
            },
        }
    }
}

impl Call {
    fn of(operation: &Operation<'_>) -> Call {
        match operation.input {
            Input::Admit(request) => Call::Admit {
                id: request.id.clone(),
                owner: request.owner.clone(),
                scopes: request.scopes.clone(),
                ttl_us: request.ttl.map(micros),
            },
            Input::Renew { claims, ttl, .. } => Call::Renew {
                claims: claims.to_vec(),
                ttl_us: micros(ttl),
            },
            Input::Transition { claim, change } => Call::Transition {
                claim: claim.clone(),
                to: change.status,
            },
            Input::Takeover(request) => Call::Takeover {
                id: request.id.clone(),
                claimer: request.claimer.clone(),
                adopt: matches!(request.action, TakeoverAction::Adopt { .. }),
                ttl_us: match &request.action {
                    TakeoverAction::Adopt { ttl } => ttl.map(micros),
                    TakeoverAction::Fail { .. } => None,
                },
            },
            Input::Enqueue(jobs) => Call::Enqueue {
                ids: jobs.iter().map(|job| job.id.clone()).collect(),
            },
            Input::Claim(request) => Call::ClaimJobs {
                queue: request.queue.clone(),
                worker: request.worker.clone(),
                ttl_us: micros(request.ttl),
            },
            Input::RenewJobs { claims, ttl, .. } => Call::RenewJobs {
                claims: claims.to_vec(),
                ttl_us: micros(ttl),
            },
            Input::Complete(claims) => Call::Settle {
                claims: claims.to_vec(),
                how: Settlement::Complete,
            },
            Input::Fail { claim, action, .. } => Call::Settle {
                claims: vec![claim.clone()],
                how: match action {
                    FailAction::DeadLetter => Settlement::DeadLetter,
                    _ => Settlement::Retry,
                },
            },
            Input::Defer { claim, .. } => Call::Settle {
                claims: vec![claim.clone()],
                how: Settlement::Defer,
            },
            Input::TakeBack { claim, ttl } => Call::TakeBack {
                claim: claim.clone(),
                ttl_us: micros(ttl),
            },
            Input::CheckFence { resource, fence } => Call::CheckFence {
                resource: resource.to_owned(),
                fence,
            },
            Input::GetJob(id) => Call::GetJob { id: id.to_owned() },
            Input::Get(id) => Call::Get { id: id.to_owned() },
            _ => Call::Other {
                name: operation.name.to_owned(),
            },
        }
    }
}

/// The entries of one run, shared by every client recording into it.
/// Clones share the same entries.
#[derive(Debug, Clone, Default)]
pub struct History {
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// The hook recording `client`'s calls into this history: layer it
    /// outermost over that client's store (`store.layer(history.client(..))`),
    /// so it sees what the client sees, time limits and injected faults
    /// included.
    pub fn client(&self, client: impl Into<String>) -> Recording {
        Recording {
            history: self.clone(),
            client: client.into(),
        }
    }

    /// Writes down a write of `client` to `resource` holding `fence` that
    /// no gate checked, sent at `sent` and applied now; the control runs'
    /// stand-in for a fence-checking resource.
    pub fn record_unchecked_write(&self, client: &str, resource: &str, fence: u64, sent: u64) {
        self.push(Entry {
            client: client.to_owned(),
            sent,
            answered: monotonic_nanos(),
            call: Call::UncheckedWrite {
                resource: resource.to_owned(),
                fence,
            },
            reply: Reply::Accepted,
        });
    }

    /// Adds entries recorded elsewhere (by a child process).
    pub fn extend(&self, entries: impl IntoIterator<Item = Entry>) {
        lock(&self.entries).extend(entries);
    }

    /// Every entry so far, in the order the answers came.
    pub fn entries(&self) -> Vec<Entry> {
        lock(&self.entries).clone()
    }

    /// How many entries so far.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Whether nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push(&self, entry: Entry) {
        lock(&self.entries).push(entry);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes `entries` as JSON lines, one entry a line.
///
/// # Errors
///
/// When `out` cannot be written.
pub fn write_json_lines<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    mut out: impl Write,
) -> std::io::Result<()> {
    for entry in entries {
        serde_json::to_writer(&mut out, entry)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads a history written by [`write_json_lines`]; blank lines are
/// skipped.
///
/// # Errors
///
/// When `input` cannot be read, or a line is not an entry (the error names
/// the line).
pub fn read_json_lines(input: impl BufRead) -> std::io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for (number, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let entry = serde_json::from_str(&line).map_err(|error| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "line {} is not a history entry ({error}); a history has one JSON \
                     object a line, as `write_json_lines` writes it",
                    number + 1
                ),
            )
        })?;
        entries.push(entry);
    }
    Ok(entries)
}

/// The hook that records one client's calls into a [`History`]; made by
/// [`History::client`].
#[derive(Debug, Clone)]
pub struct Recording {
    history: History,
    client: String,
}

impl Recording {
    /// The client this hook records as.
    pub fn name(&self) -> &str {
        &self.client
    }

    /// The history it records into.
    pub fn history(&self) -> &History {
        &self.history
    }
}

/// A call on its way: written down when answered, or as unknown when
/// dropped first.
struct InFlight<'a> {
    recording: &'a Recording,
    sent: u64,
    call: Option<Call>,
}

impl InFlight<'_> {
    fn finish(&mut self, reply: Reply) {
        if let Some(call) = self.call.take() {
            self.recording.history.push(Entry {
                client: self.recording.client.clone(),
                sent: self.sent,
                answered: monotonic_nanos(),
                call,
                reply,
            });
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.finish(Reply::Unknown {
            kind: "dropped".to_owned(),
            error: "the caller dropped the call before its answer".to_owned(),
        });
    }
}

impl Hook for Recording {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        let written = Call::of(&operation);
        Box::pin(async move {
            let mut in_flight = InFlight {
                recording: self,
                sent: monotonic_nanos(),
                call: Some(written),
            };
            let answer = call.await;
            in_flight.finish(match &answer {
                Ok(value) => Reply::of_answer(value.view(), value.label()),
                Err(error) => Reply::of_error(error),
            });
            answer
        })
    }
}

#[cfg(test)]
mod tests;
