//! # backend-memory
//!
//! An in-process [`LeaseStore`](tenure_lease_core::LeaseStore) and [`JobQueue`](tenure_lease_core::JobQueue):
//! every operation is one critical section under a mutex, so it is atomic
//! across tasks and threads of one process. Leases and jobs share that
//! state and its one fence sequence, so a job claim never reuses a fence a
//! lease holds, and the reverse.
//! Nothing survives the process, so it suits tests, single-process
//! deployments and the conformance kit's reference runs. Through the
//! facade it is `tenure::memory::MemoryStore` (the default feature), also
//! opened by `tenure::connect("memory:")`.
//!
//! Its clock is injectable ([`MemoryStore::with_clock`]): tests move time
//! with a [`ManualClock`](tenure_lease_core::ManualClock), or with tokio's paused
//! clock through a [`TokioClock`](tenure_lease_core::TokioClock).
//!
//! ## The clock: wall-clock steps move expiry
//!
//! Expiry is judged by the store's clock: `admit` and `renew` store
//! `now + ttl`, and takeover, `list_expired`, admission over an expired
//! holder and the queue's `claim` (`run_at`) and `reap` compare it with
//! `now`. [`MemoryStore::new`] reads [`SystemClock`], the host's wall clock,
//! while a keeper (`tenure-keeper`) trusts its lease by tokio's
//! monotonic clock (the send instant of its last confirmed renewal plus
//! the ttl). A *step* of the wall clock moves the store's judgement and not
//! the keeper's:
//!
//! * **Forward by `S`**: every lease and job claim looks `S` older. With
//!   `S` larger than the grace a taker allows, a lease can be taken over (a
//!   job reaped and claimed again) up to `S − grace` before its holder stops
//!   trusting it: for that long two workers each believe they hold it.
//! * **Backward by `S`**: everything looks `S` younger; a live holder loses
//!   nothing, but orphans are taken over, expired jobs reaped, `run_at` and
//!   backoffs reached and retention over `S` late.
//!
//! Fences still protect what the lease guards: the taker holds a newer,
//! larger fence, so a resource that checks fences (a
//! [`FenceGate`](tenure_lease_core::FenceGate), a conditional write) refuses the
//! displaced holder's writes once it has seen the taker's, and that
//! holder's next renewal answers `Lost`, which fail-stops its keeper.
//!
//! The store is also a [`FenceStore`](tenure_lease_core::FenceStore): its
//! gates live in the same state, so they are shared by every clone of the
//! store (and, like everything else, gone with the process).
//!
//! Everything sharing a memory store lives in one process, so it can avoid
//! the problem altogether: `MemoryStore::with_clock(Arc::new(TokioClock::new()))`
//! (created inside the runtime) judges expiry by the same monotonic clock as
//! the keeper, and stamps records with the wall-clock time of its creation
//! moved on by that clock. With the default clock, run the host with a clock
//! that is **slewed, never stepped**: chrony with steps limited to boot
//! (`makestep 1 3`) or disabled (no `makestep`), keeping the grace above
//! `ttl × maxslewrate` (83,333 ppm by default) or lowering `maxslewrate`;
//! ntpd with `-x` (slews offsets up to 600 s instead of stepping); never
//! `date -s` or `ntpdate` on a running host.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_memory::MemoryStore;
//! use tenure_lease_core::{AdmitRequest, LeaseStore, Renewal};
//!
//! let store = MemoryStore::new();
//! let admission = store
//!     .admit(&AdmitRequest::new("job-1", "worker-a").scope("thread:42").ttl(Duration::from_secs(30)))
//!     .await?;
//! let claim = admission.admitted().and_then(|record| record.claim()).expect("admitted");
//! assert!(matches!(store.renew(&claim, Duration::from_secs(30)).await?, Renewal::Renewed { .. }));
//! # Ok(()) }
//! ```
//!
//! The same store is a job queue: enqueue, claim with a lease, then settle
//! the job by presenting the claim.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_memory::MemoryStore;
//! use tenure_lease_core::queue::{ClaimRequest, JobQueue, JobSettle, JobState, NewJob};
//!
//! let store = MemoryStore::new();
//! store.enqueue(&NewJob::new("emails", serde_json::json!({ "to": "a@example.com" }))).await?;
//! let claimed = store
//!     .claim(&ClaimRequest::new("emails", "worker-a", Duration::from_secs(30)))
//!     .await?;
//! assert_eq!(claimed.len(), 1);
//! match store.complete(&claimed[0].claim).await? {
//!     JobSettle::Settled(job) => assert_eq!(job.state, JobState::Completed),
//!     other => panic!("not completed: {other:?}"),
//! }
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex, MutexGuard};

use tenure_lease_core::backend::rate_rules::RateLogs;
use tenure_lease_core::backend::rules;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::release::ReleaseBoard;
use tenure_lease_core::{Clock, LeaseRecord, Result, SystemClock, Timestamp};

mod gate;
mod lease;
mod queue;

/// The in-memory store. Cloning shares the same records.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

impl tenure_lease_core::backend::stores::Backend for MemoryStore {
    const NAME: &'static str = "memory";
    const SYSTEM: &'static str = "memory";
}

tenure_lease_core::serve_backend!(MemoryStore);

/// Every map hashes with foldhash: SipHash of the id was an eighth of a
/// renewal's cost. foldhash is randomly seeded but only minimally
/// resistant to keys chosen to collide; ids here come from the embedding
/// process, which could slow only itself.
#[derive(Debug, Default)]
struct State {
    records: foldhash::HashMap<String, LeaseRecord>,
    /// Active holder (record id) of each held scope.
    holders: foldhash::HashMap<String, String>,
    /// Jobs; their ids are a namespace apart from the records'.
    jobs: queue::Jobs,
    /// Last fence handed out, to leases and job claims alike.
    last_fence: u64,
    /// Fence gates by resource: the highest fence accepted and when.
    gates: gate::Gates,
    /// Where freed scopes are announced to waiters.
    releases: ReleaseBoard,
    /// Rate logs: the uses of each limit that may still count.
    rate_logs: foldhash::HashMap<RateLimit, Vec<Timestamp>>,
}

/// The engine's view of the rate logs, for admissions and claims alike.
impl RateLogs for State {
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        Ok(self.rate_logs.get(limit).cloned().unwrap_or_default())
    }

    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()> {
        self.rate_logs.insert(limit.clone(), uses.to_vec());
        Ok(())
    }
}

impl State {
    fn next_fence(&mut self) -> u64 {
        self.last_fence += 1;
        self.last_fence
    }

    fn hold_scopes(&mut self, record: &LeaseRecord) {
        for key in rules::held_keys(record) {
            self.holders.insert(key.into_owned(), record.id.clone());
        }
    }

    fn release_scopes(&mut self, record: &LeaseRecord) {
        for (scope, key) in record.scopes.iter().zip(rules::held_keys(record)) {
            if self.holders.get(key.as_ref()) == Some(&record.id) {
                self.holders.remove(key.as_ref());
                self.releases.freed(scope);
            }
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store reading time from `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            state: Arc::new(Mutex::new(State::default())),
            clock,
        }
    }

    /// How many entries the store keeps, per structure (`records`, `holders`
    /// of scopes, `jobs`, `queues` with queued jobs, `unique keys` of stored
    /// jobs, fence `gates`, `rate logs`): what a
    /// test reads to check that, after `purge`, `purge_jobs` and
    /// `purge_fences`, nothing grows with the work the store has done.
    pub fn footprint(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let state = self.lock();
        let (jobs, queues, unique_keys) = state.jobs.footprint();
        std::collections::BTreeMap::from([
            ("records", state.records.len()),
            ("holders", state.holders.len()),
            ("jobs", jobs),
            ("queues", queues),
            ("unique keys", unique_keys),
            ("gates", state.gates.len()),
            ("rate logs", state.rate_logs.len()),
        ])
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied
        // operation: every operation decides before it mutates.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}
