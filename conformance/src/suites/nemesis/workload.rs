//! The recorded workload every nemesis runs: a few clients racing for two
//! scopes and one queue, each write going through a fence gate, some owners
//! walking away mid-lease and writing again once a successor has written
//! (the stale writes a gate exists to refuse), and final reads of
//! everything touched.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::layer::{Faults, LayerExt, Layered, Timeout};
use tenure_lease_core::queue::{ClaimRequest, JobQueue, NewJob};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, ExpiredQuery, FenceCheck, FenceStore, LeaseStore,
    Renewal, StatusChange, Takeover, TakeoverRequest,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::history::{monotonic_nanos, Call, History, Recording};

/// What a nemesis's store must be: leases, jobs and gates.
pub trait Store: LeaseStore + JobQueue + FenceStore + 'static {}
impl<S: LeaseStore + JobQueue + FenceStore + 'static> Store for S {}

/// A client's store: the base store, injected faults, a time limit, and
/// the recorder outermost, so the history holds what the client saw.
pub(crate) type ClientStore<S> = Layered<Layered<Layered<Arc<S>, Faults>, Timeout>, Recording>;

/// The scopes the clients race for.
const SCOPES: [&str; 2] = ["scope-a", "scope-b"];
/// The queue the clients share.
const QUEUE: &str = "nemesis";
/// The lease of every admission, takeover and job claim.
pub(crate) const TTL: Duration = Duration::from_millis(200);
/// The grace of every admission, takeover, scan and reap.
pub(crate) const GRACE: Duration = Duration::from_millis(50);
/// How long past the run's length the clients go on while the workload has
/// not raced yet.
const RACE_BOUND: Duration = Duration::from_secs(20);
/// How long after the clients stop a walker still waits for a successor.
const WALKERS_OUTLAST_THE_RUN: Duration = Duration::from_millis(500);
/// One owner in this many walks away instead of finishing.
const WALK_AWAY_ONE_IN: u8 = 5;
/// The time limit on one call: a hung call becomes an unknown outcome.
pub(crate) const CALL_LIMIT: Duration = Duration::from_millis(800);
/// Attempts at one final read before it counts as unanswered.
const FINAL_READ_ATTEMPTS: usize = 20;
/// Pause between two attempts at a final read.
const FINAL_READ_PAUSE: Duration = Duration::from_millis(250);
/// How long an owner that walked away waits for a successor's write before
/// it gives up its stale write: long enough for etcd's whole-second timers.
const SUCCESSOR_WAIT: Duration = Duration::from_secs(4);

/// How the clients' writes reach their resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writes {
    /// Through the store's fence gate (`check_fence`).
    Gated,
    /// Straight to the resource, no fence checked: the control run.
    Unchecked,
}

/// What the workload counted besides the history.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Owners that walked away and wrote again after a successor had.
    pub(crate) stale_writes: AtomicUsize,
}

/// One run's shared state.
pub(crate) struct Workload<S> {
    pub(crate) history: History,
    pub(crate) clients: Vec<(String, Arc<ClientStore<S>>)>,
    pub(crate) writes: Writes,
    pub(crate) tally: Tally,
    /// The highest fence written to each resource, for owners that walked
    /// away to wait on (a signal, not a sleep).
    written: watch::Sender<std::collections::HashMap<String, u64>>,
    /// The owners that walked away, still waiting to write.
    walkers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// When the clients stop; walkers give up soon after.
    until: std::sync::OnceLock<Instant>,
}

impl<S: Store> Workload<S> {
    /// One client per base store, named `client-0`..., each behind its own
    /// [`Faults`] and recorded into a new history.
    pub(crate) fn new(bases: &[Arc<S>], writes: Writes) -> Self {
        let history = History::new();
        let clients = bases
            .iter()
            .enumerate()
            .map(|(index, base)| {
                let name = format!("client-{index}");
                let store = Arc::clone(base)
                    .layer(Faults::new())
                    .with_timeout(CALL_LIMIT)
                    .layer(history.client(name.clone()));
                (name, Arc::new(store))
            })
            .collect();
        Workload {
            history,
            clients,
            writes,
            tally: Tally::default(),
            written: watch::Sender::new(std::collections::HashMap::new()),
            walkers: std::sync::Mutex::default(),
            until: std::sync::OnceLock::new(),
        }
    }

    /// The faults of client `index`'s store.
    pub(crate) fn faults(&self, index: usize) -> &Faults {
        self.clients[index].1.inner().inner().hook()
    }

    /// Runs every client for `run_for`, then heals every injected fault
    /// and reads back everything the history touched.
    pub(crate) async fn play(self: &Arc<Self>, run_for: Duration, seed: u64) {
        let until = Instant::now() + run_for;
        let until = *self.until.get_or_init(|| until);
        let mut clients = tokio::task::JoinSet::new();
        for index in 0..self.clients.len() {
            let workload = Arc::clone(self);
            clients.spawn(async move { workload.client(index, until, seed).await });
        }
        while let Some(joined) = clients.join_next().await {
            propagate_panic(joined);
        }
        let walkers = std::mem::take(
            &mut *self
                .walkers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for walker in walkers {
            propagate_panic(walker.await);
        }
        for index in 0..self.clients.len() {
            self.faults(index).release_hangs();
        }
    }

    /// Reads back, through `reader` (recorded into the same history), every
    /// record and job the history names; a read the store could not answer
    /// (a retryable error: a failover may still be settling) is tried again,
    /// up to [`FINAL_READ_ATTEMPTS`] times.
    pub(crate) async fn read_back(&self, reader: &impl JobQueue) {
        let mut records = BTreeSet::new();
        let mut jobs = BTreeSet::new();
        for entry in self.history.entries() {
            match entry.call {
                Call::Admit { id, .. } => {
                    records.insert(id);
                }
                Call::Enqueue { ids } => jobs.extend(ids),
                _ => {}
            }
        }
        for id in &records {
            until_answered(|| reader.get(id)).await;
        }
        for id in &jobs {
            until_answered(|| reader.get_job(id)).await;
        }
    }

    async fn client(self: &Arc<Self>, index: usize, until: Instant, seed: u64) {
        let (name, store) = &self.clients[index];
        let mut dice = fastrand::Rng::with_seed(seed ^ (index as u64).wrapping_mul(0x9e37_79b9));
        let mut round = 0u64;
        while self.goes_on(until) {
            round += 1;
            match dice.u8(0..10) {
                0..=3 => self.lease_round(index, round, &mut dice).await,
                4..=5 => self.takeover_round(store, name, &mut dice).await,
                6..=8 => self.job_round(index, round, &mut dice).await,
                _ => {
                    let _ = store.reap(GRACE).await;
                }
            }
            // Pacing, so the clients interleave on a two-core machine.
            tokio::time::sleep(Duration::from_millis(dice.u64(1..8))).await;
        }
    }

    async fn lease_round(self: &Arc<Self>, index: usize, round: u64, dice: &mut fastrand::Rng) {
        let (name, store) = &self.clients[index];
        let scope = SCOPES[dice.usize(0..SCOPES.len())];
        let request = AdmitRequest::new(format!("{name}-lease-{round}"), name)
            .scope(scope)
            .ttl(TTL)
            .grace(GRACE)
            .strategy(AdmitStrategy::Interrupt)
            .metadata(json!({ "round": round }));
        let Ok(Admission::Admitted { record, .. }) = store.admit(&request).await else {
            return;
        };
        let Some(claim) = record.claim() else { return };
        for _ in 0..dice.usize(1..4) {
            if !self.write(store, name, scope, claim.fence).await {
                return;
            }
            if !matches!(store.renew(&claim, TTL).await, Ok(Renewal::Renewed { .. })) {
                return;
            }
        }
        if dice.u8(0..WALK_AWAY_ONE_IN) == 0 {
            return self.walk_away(index, scope, claim.fence);
        }
        let _ = store.transition(&claim, &StatusChange::succeeded()).await;
    }

    async fn takeover_round(&self, store: &ClientStore<S>, name: &str, dice: &mut fastrand::Rng) {
        let Ok(scan) = store.list_expired(&ExpiredQuery::new(GRACE).limit(3)).await else {
            return;
        };
        for orphan in scan.records {
            let request = TakeoverRequest::adopt(&orphan.id, name, Some(TTL)).grace(GRACE);
            let Ok(Takeover::Taken(taken)) = store.claim_for_takeover(&request).await else {
                continue;
            };
            let Some(claim) = taken.claim() else { continue };
            let resource = taken.scopes.first().cloned().unwrap_or(taken.id.clone());
            if self.write(store, name, &resource, claim.fence).await && dice.bool() {
                let _ = store.transition(&claim, &StatusChange::succeeded()).await;
            }
        }
    }

    async fn job_round(self: &Arc<Self>, index: usize, round: u64, dice: &mut fastrand::Rng) {
        let (name, store) = &self.clients[index];
        let job = NewJob::new(QUEUE, json!({ "round": round }))
            .id(format!("{name}-job-{round}"))
            .max_attempts(4);
        let _ = store.enqueue(&job).await;
        let request = ClaimRequest::new(QUEUE, name, TTL).limit(1);
        let Ok(claimed) = store.claim(&request).await else {
            return;
        };
        for job in claimed {
            let claim = job.claim;
            if !self.write(store, name, &claim.id, claim.fence).await {
                continue;
            }
            if dice.u8(0..WALK_AWAY_ONE_IN) == 0 {
                self.walk_away(index, &claim.id, claim.fence);
                continue;
            }
            if matches!(
                store.renew_job(&claim, TTL).await,
                Ok(tenure_lease_core::queue::JobRenewal::Renewed { .. })
            ) {
                let _ = store.complete(&claim).await;
            }
        }
    }

    /// Client `index`'s owner of `resource` stops renewing and goes on in
    /// the background: it waits until a successor has written to
    /// `resource` with a greater fence (or gives up), then writes with its
    /// old `fence`, the write a gate must refuse.
    fn walk_away(self: &Arc<Self>, index: usize, resource: &str, fence: u64) {
        let workload = Arc::clone(self);
        let resource = resource.to_owned();
        let walker = tokio::spawn(async move {
            workload.write_once_overtaken(index, &resource, fence).await;
        });
        self.walkers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(walker);
    }

    async fn write_once_overtaken(&self, index: usize, resource: &str, fence: u64) {
        let (name, store) = &self.clients[index];
        let mut written = self.written.subscribe();
        let overtaken = async {
            written
                .wait_for(|written| written.get(resource).is_some_and(|&top| top > fence))
                .await
                .is_ok()
        };
        // Once the workload has raced, walkers left at the end give up soon.
        let raced = self.tally.stale_writes.load(Ordering::Relaxed) > 0;
        let give_up = match self.until.get() {
            Some(&until) if raced => {
                (until + WALKERS_OUTLAST_THE_RUN).min(Instant::now() + SUCCESSOR_WAIT)
            }
            _ => Instant::now() + SUCCESSOR_WAIT,
        };
        if tokio::time::timeout_at(give_up, overtaken)
            .await
            .unwrap_or(false)
        {
            self.tally.stale_writes.fetch_add(1, Ordering::Relaxed);
            self.write(store, name, resource, fence).await;
        }
    }

    /// Whether the clients go on: until `until`, and past it (for at most
    /// [`RACE_BOUND`]) while no owner that walked away has yet seen a
    /// successor write, so that a slow machine still races.
    fn goes_on(&self, until: Instant) -> bool {
        let now = Instant::now();
        now < until
            || (self.tally.stale_writes.load(Ordering::Relaxed) == 0 && now < until + RACE_BOUND)
    }

    /// Writes to `resource` holding `fence`; answers whether the write was
    /// accepted.
    async fn write(&self, store: &ClientStore<S>, name: &str, resource: &str, fence: u64) -> bool {
        let accepted = match self.writes {
            Writes::Gated => matches!(
                store.check_fence(resource, fence).await,
                Ok(FenceCheck::Accepted)
            ),
            Writes::Unchecked => {
                let sent = monotonic_nanos();
                self.history
                    .record_unchecked_write(name, resource, fence, sent);
                true
            }
        };
        if accepted {
            self.written.send_modify(|written| {
                let top = written.entry(resource.to_owned()).or_default();
                *top = (*top).max(fence);
            });
        }
        accepted
    }
}

/// Re-raises a task's panic; a cancelled task is no news.
fn propagate_panic<T>(joined: Result<T, tokio::task::JoinError>) {
    if let Err(error) = joined {
        if error.is_panic() {
            std::panic::resume_unwind(error.into_panic());
        }
    }
}

/// Calls `read` until it answers or fails for good, at most
/// [`FINAL_READ_ATTEMPTS`] times.
async fn until_answered<T, Read, Fut>(mut read: Read)
where
    Read: FnMut() -> Fut,
    Fut: std::future::Future<Output = tenure_lease_core::Result<T>>,
{
    for _ in 0..FINAL_READ_ATTEMPTS {
        match read().await {
            Err(error) if error.is_retryable() => tokio::time::sleep(FINAL_READ_PAUSE).await,
            _ => return,
        }
    }
}
