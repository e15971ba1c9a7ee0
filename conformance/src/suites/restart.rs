//! The restart suite: the server goes away in the middle of a busy run and
//! comes back.
//!
//! Workers admit, renew and finish records on a few shared scopes while a
//! [`Keeper`] holds leases of its own, the server is restarted in the
//! middle, and the run goes on. Errors while the server is down are
//! expected and counted; what must hold is what the contract promises
//! across a restart: nothing admitted is lost (every record a worker saw
//! admitted is still there, as last written), fences handed out afterwards
//! are greater than every fence before, no scope ever has two active
//! holders, and a keeper whose leases outlive the outage loses none of them.
//!
//! A shared server serves other tests at once and must never be stopped,
//! so the factory starts a private one ([`RestartSupport`]) the kit may
//! restart ([`RestartableServer`]).
//!
//! The only waits that are not signals are the phases' lengths and the
//! backoff between retries, all bounded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_keeper::Keeper;
use tenure_keeper::{AdmitOutcome, KeeperConfig, KeeperError};
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ErrorKind, LeaseRecord, LeaseStore, Renewal, Status,
    StatusChange, Timestamp, Transition,
};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{define_suite, report_note, unsupported};
pub use crate::capability::restart::{PrivateServer, RestartSupport, RestartableServer};
use crate::harness::{conclude, guarded, runtime, unavailable, CaseOutcome, Factory};

define_suite! {$
    /// Expands to one `#[test]` per scenario of the [restart
    /// suite](crate::suites::restart), named after it, each on a private
    /// server from [`Factory::restart`]; skipped with the reason when the
    /// factory offers none.
    ///
    /// ```ignore
    /// tenure_conformance::tenure_restart_conformance!(MyFactory::from_env());
    /// ```
    tenure_restart_conformance => restart [workload_and_keeper_ride_through_a_server_restart]
}

/// The body of each test [`tenure_restart_conformance!`](crate::tenure_restart_conformance)
/// generates.
#[doc(hidden)]
pub fn run_named<F, G, Fut>(factory: F, _module: &str, name: &str, scenario: G)
where
    F: Factory,
    G: FnOnce(Arc<dyn LeaseStore>, Box<dyn RestartableServer>) -> Fut,
    Fut: Future<Output = String> + Send + 'static,
{
    let outcome = runtime().block_on(run_scenario(&factory, name, scenario));
    conclude(name, outcome);
}

/// A private server from `factory`'s [`RestartSupport`], or the outcome to
/// report without one.
pub(crate) async fn start_private<F: Factory>(
    factory: &F,
) -> Result<PrivateServer<F::Store>, CaseOutcome> {
    let Some(restart) = factory.restart() else {
        return Err(unsupported("private server to restart", "restart"));
    };
    if let Some(reason) = restart.unavailable_reason() {
        return Err(unavailable(reason));
    }
    restart.start_private().await.map_err(|error| {
        CaseOutcome::Failed(format!("factory could not start a private server: {error}"))
    })
}

/// Runs one restart `scenario` (one of this module's public functions) on
/// a private server from `factory`; reports what it counted under `name`.
pub async fn run_scenario<F, G, Fut>(factory: &F, name: &str, scenario: G) -> CaseOutcome
where
    F: Factory,
    G: FnOnce(Arc<dyn LeaseStore>, Box<dyn RestartableServer>) -> Fut,
    Fut: Future<Output = String> + Send + 'static,
{
    let private = match start_private(factory).await {
        Ok(private) => private,
        Err(outcome) => return outcome,
    };
    let store: Arc<dyn LeaseStore> = Arc::new(private.store);
    let name = name.to_owned();
    guarded(async move {
        let report = scenario(store, private.server).await;
        report_note(&name, &report);
        Ok(())
    })
    .await
}

/// Workers and a keeper on the private server's store, the server restarted
/// in the middle: the promises of the [module docs](self) hold. Answers the
/// summary line of what it counted.
pub async fn workload_and_keeper_ride_through_a_server_restart(
    store: Arc<dyn LeaseStore>,
    mut server: Box<dyn RestartableServer>,
) -> String {
    rides_through_restart(store, server.restart(DOWN_FOR))
        .await
        .to_string()
}

/// Workers admitting and finishing records.
const WORKERS: usize = 4;
/// Scopes the workers compete for.
const SCOPES: usize = 3;
/// Leases the keeper holds through the restart.
const KEEPER_LEASES: usize = 3;
/// The keeper's lease: the outage must be well under it.
const KEEPER_TTL: Duration = Duration::from_secs(3);
/// The keeper's beat: several per ttl, so a renewal lands after the
/// restart before the confirmed deadline passes.
const KEEPER_BEAT: Duration = Duration::from_millis(300);
/// Lease of the workers' records: longer than the run, so none expires.
const RECORD_TTL: Duration = Duration::from_secs(60);
/// How long the workload runs before the restart.
const BEFORE_RESTART: Duration = Duration::from_millis(1500);
/// How long it runs after the server is back.
const AFTER_RESTART: Duration = Duration::from_secs(2);
/// How long the restart should keep the server down: several of the
/// keeper's beats, well under its ttl.
const DOWN_FOR: Duration = Duration::from_millis(800);
/// The most the whole restart (stop, [`DOWN_FOR`], start) may take: the
/// keeper needs a beat and a reconnection after it, before its ttl runs out.
const OUTAGE_BOUND: Duration = Duration::from_millis(2000);
/// The most a worker may take to finish its record once told to stop, and
/// the most any check call may keep failing.
const SETTLE_BOUND: Duration = Duration::from_secs(10);
/// Pause between retries of a failed call, or after a conflict.
const BACKOFF: Duration = Duration::from_millis(20);
/// Pause between two looks at the active records.
const SCAN_EVERY: Duration = Duration::from_millis(100);

/// Where the run is relative to the restart.
const BEFORE: u8 = 0;
const RESTARTING: u8 = 1;
const AFTER: u8 = 2;

/// What the scenario counted; [`fmt::Display`] gives the one summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RestartReport {
    /// Store calls made by the workers and the scope checker.
    operations: u64,
    /// Those answered `Err` (all retryable).
    errors: u64,
    /// Records admitted (seen `Admitted`, or found to exist after an
    /// admission whose answer was lost).
    admitted: u64,
    /// Admissions refused because the scope was held.
    conflicts: u64,
    /// Records the workers finished (`Succeeded`).
    finished: u64,
    /// Admissions whose answer was lost but which had happened.
    ambiguous_admissions: u64,
    /// Looks at the active records (none found two holders of a scope).
    scope_checks: u64,
    /// How long the restart took, server down to server up.
    outage: Duration,
    /// Highest fence handed out before the restart began.
    last_fence_before: u64,
    /// Lowest fence handed out after the server was back.
    first_fence_after: u64,
    /// Keeper leases held through the restart (none lost).
    keeper_leases: usize,
}

impl fmt::Display for RestartReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "restart: outage {} ms, {} ops, {} errors, {} admitted ({} ambiguous), {} conflicts, \
             {} finished, {} scope checks, fences {} before / {} after, keeper {}/{} leases kept",
            self.outage.as_millis(),
            self.operations,
            self.errors,
            self.admitted,
            self.ambiguous_admissions,
            self.conflicts,
            self.finished,
            self.scope_checks,
            self.last_fence_before,
            self.first_fence_after,
            self.keeper_leases,
            KEEPER_LEASES,
        )
    }
}

/// A fence and when it was handed out relative to the restart.
#[derive(Debug, Clone, Copy)]
struct FenceSeen {
    fence: u64,
    /// The call answered before the restart began.
    before: bool,
    /// The call was sent after the server was back.
    after: bool,
}

/// What the workers share.
struct Shared {
    store: Arc<dyn LeaseStore>,
    phase: AtomicU8,
    operations: AtomicU64,
    errors: AtomicU64,
    conflicts: AtomicU64,
    ambiguous: AtomicU64,
    scope_checks: AtomicU64,
    fences: Mutex<Vec<FenceSeen>>,
    /// Every record a worker saw admitted, as it last saw it written.
    seen: Mutex<HashMap<String, (u64, Status)>>,
    stop: CancellationToken,
}

impl Shared {
    fn phase(&self) -> u8 {
        self.phase.load(Ordering::SeqCst)
    }

    /// Counts one call's answer; panics on an error the contract does not
    /// allow here (anything but "could not say").
    fn count<T>(&self, what: &str, answer: &tenure_lease_core::Result<T>) {
        self.operations.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = answer {
            self.errors.fetch_add(1, Ordering::Relaxed);
            assert!(
                error.is_retryable(),
                "{what}: a restart may only cause retryable errors, got {error}"
            );
        }
    }

    fn note_fence(&self, fence: u64, sent_in: u8) {
        let seen = FenceSeen {
            fence,
            before: self.phase() == BEFORE,
            after: sent_in == AFTER,
        };
        lock(&self.fences).push(seen);
    }

    fn note_record(&self, record: &LeaseRecord) {
        lock(&self.seen).insert(record.id.clone(), (record.fence, record.status));
    }

    /// `call` until it answers `Ok`, retrying errors (counted) with a
    /// backoff; panics after [`SETTLE_BOUND`] of failures.
    async fn until_ok<T, F, Fut>(&self, what: &str, mut call: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = tenure_lease_core::Result<T>>,
    {
        let give_up = Instant::now() + SETTLE_BOUND;
        loop {
            let answer = call().await;
            self.count(what, &answer);
            match answer {
                Ok(value) => return value,
                Err(error) if Instant::now() >= give_up => {
                    panic!("{what}: still failing after {SETTLE_BOUND:?}: {error}")
                }
                Err(_) => tokio::time::sleep(BACKOFF).await,
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the workload on `store`, awaits `restart` in the middle (it should
/// keep the server down for [`DOWN_FOR`] and answer once the server accepts
/// connections again), checks the promises
/// in the [module docs](self) and answers what it counted. Panics on a
/// broken promise.
///
/// `store` must reach the server directly, with operation timeouts of about
/// a second or less, so calls during the outage fail rather than hang.
async fn rides_through_restart<R>(store: Arc<dyn LeaseStore>, restart: R) -> RestartReport
where
    R: Future<Output = std::io::Result<()>>,
{
    let run = tenure_lease_core::generate_id();
    let shared = Arc::new(Shared {
        store: Arc::clone(&store),
        phase: AtomicU8::new(BEFORE),
        operations: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        conflicts: AtomicU64::new(0),
        ambiguous: AtomicU64::new(0),
        scope_checks: AtomicU64::new(0),
        fences: Mutex::new(Vec::new()),
        seen: Mutex::new(HashMap::new()),
        stop: CancellationToken::new(),
    });

    let keeper = Keeper::builder(
        Arc::clone(&store),
        KeeperConfig::with_ttl(KEEPER_TTL)
            .renew_interval(KEEPER_BEAT)
            .auto_reconcile(false)
            .worker_id(format!("keeper-{run}")),
    )
    .start()
    .expect("a valid keeper configuration");
    let mut guards = Vec::new();
    for index in 0..KEEPER_LEASES {
        let request = keeper
            .request(format!("held-{index}-{run}"))
            .scope(format!("held-{index}-{run}"));
        match keeper.admit(request).await {
            Ok(AdmitOutcome::Admitted { guard, .. }) => {
                shared.note_fence(guard.fence(), BEFORE);
                guards.push(guard);
            }
            Ok(other) => panic!("keeper admit on a fresh scope: {other:?}"),
            Err(KeeperError::Store(error)) => panic!("keeper admit before the restart: {error}"),
            Err(other) => panic!("keeper admit: {other}"),
        }
    }

    let scopes: Vec<String> = (0..SCOPES).map(|k| format!("scope-{k}-{run}")).collect();
    let mut tasks = JoinSet::new();
    for worker in 0..WORKERS {
        tasks.spawn(work(
            Arc::clone(&shared),
            format!("worker-{worker}-{run}"),
            scopes.clone(),
            worker,
        ));
    }
    tasks.spawn(check_scopes(Arc::clone(&shared)));

    tokio::time::sleep(BEFORE_RESTART).await;
    shared.phase.store(RESTARTING, Ordering::SeqCst);
    let down = Instant::now();
    restart.await.expect("restart the server");
    let outage = down.elapsed();
    shared.phase.store(AFTER, Ordering::SeqCst);
    assert!(
        outage < OUTAGE_BOUND,
        "the restart took {outage:?}: too long for the keeper's {KEEPER_TTL:?} leases"
    );
    let back = shared
        .until_ok("now after the restart", || store.now())
        .await;

    tokio::time::sleep(AFTER_RESTART).await;
    shared.stop.cancel();
    let settled = tokio::time::timeout(SETTLE_BOUND, async {
        while let Some(joined) = tasks.join_next().await {
            if let Err(error) = joined {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "workers did not settle within {SETTLE_BOUND:?}"
    );

    let keeper_leases = check_keeper(&shared, &keeper, &guards, back).await;
    let (last_fence_before, first_fence_after) = check_fences(&shared);
    let admitted = check_admitted(&shared).await;
    assert_one_holder_per_scope(
        &shared
            .until_ok("list_active at the end", || store.list_active())
            .await,
    );

    for guard in &guards {
        let change = StatusChange::succeeded();
        if let Err(error) = guard.complete(change).await {
            panic!("completing keeper lease {}: {error}", guard.id());
        }
    }
    keeper.shutdown(Instant::now() + SETTLE_BOUND).await;

    let finished = lock(&shared.seen)
        .values()
        .filter(|(_, status)| *status == Status::Succeeded)
        .count() as u64;
    RestartReport {
        operations: shared.operations.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        admitted,
        conflicts: shared.conflicts.load(Ordering::Relaxed),
        finished,
        ambiguous_admissions: shared.ambiguous.load(Ordering::Relaxed),
        scope_checks: shared.scope_checks.load(Ordering::Relaxed),
        outage,
        last_fence_before,
        first_fence_after,
        keeper_leases,
    }
}

/// One worker: admit a record on the next scope, renew it, mark it running,
/// finish it; again until told to stop. Every step is retried until it
/// answers, so no record is left holding a scope.
async fn work(shared: Arc<Shared>, owner: String, scopes: Vec<String>, first_scope: usize) {
    let mut turn = first_scope;
    let mut serial = 0;
    while !shared.stop.is_cancelled() {
        let scope = &scopes[turn % scopes.len()];
        turn += 1;
        serial += 1;
        let request = AdmitRequest::new(format!("{owner}-{serial}"), owner.clone())
            .scope(scope.clone())
            .ttl(RECORD_TTL);
        let Some(record) = admit(&shared, &request).await else {
            tokio::time::sleep(BACKOFF).await;
            continue;
        };
        let claim = Claim::new(record.id.clone(), owner.clone(), record.fence);
        let renewal = shared
            .until_ok("renew", || shared.store.renew(&claim, RECORD_TTL))
            .await;
        assert!(
            matches!(renewal, Renewal::Renewed { .. }),
            "renewing {}: {renewal:?}",
            claim.id
        );
        for change in [StatusChange::running(), StatusChange::succeeded()] {
            let transition = shared
                .until_ok("transition", || shared.store.transition(&claim, &change))
                .await;
            match transition {
                Transition::Applied(record) => shared.note_record(&record),
                Transition::Rejected(rejection) => {
                    // A retried write whose first answer was lost.
                    let current = shared
                        .until_ok("get after a rejected transition", || {
                            shared.store.get(&claim.id)
                        })
                        .await;
                    let applied = current
                        .as_ref()
                        .is_some_and(|record| record.status == change.status);
                    assert!(
                        applied,
                        "{} -> {:?}: {rejection:?}",
                        claim.id, change.status
                    );
                    if let Some(record) = current {
                        shared.note_record(&record);
                    }
                }
                other => panic!("transition: unexpected answer {other:?}"),
            }
        }
    }
}

/// Admits `request`, retrying errors; a retry that finds the id taken means
/// the lost attempt went through. `None` on a conflict.
async fn admit(shared: &Shared, request: &AdmitRequest) -> Option<LeaseRecord> {
    let give_up = Instant::now() + SETTLE_BOUND;
    let mut lost_answer = false;
    loop {
        let sent_in = shared.phase();
        let answer = shared.store.admit(request).await;
        if let Err(error) = &answer {
            if error.kind() == ErrorKind::AlreadyExists && lost_answer {
                shared.operations.fetch_add(1, Ordering::Relaxed);
                shared.ambiguous.fetch_add(1, Ordering::Relaxed);
                let record = shared
                    .until_ok("get after a lost admission", || {
                        shared.store.get(&request.id)
                    })
                    .await
                    .expect("a record found to exist is still there");
                shared.note_record(&record);
                return Some(record);
            }
        }
        shared.count("admit", &answer);
        match answer {
            Ok(Admission::Admitted { record, .. }) => {
                shared.note_fence(record.fence, sent_in);
                shared.note_record(&record);
                return Some(record);
            }
            Ok(Admission::Conflict { .. }) => {
                shared.conflicts.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Ok(other) => panic!("admit: unexpected answer {other:?}"),
            Err(error) if Instant::now() >= give_up => {
                panic!("admit: still failing after {SETTLE_BOUND:?}: {error}")
            }
            Err(_) => {
                lost_answer = true;
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

/// Looks at the active records until told to stop: never two holders of a
/// scope. Errors (the server is down) are counted and skipped.
async fn check_scopes(shared: Arc<Shared>) {
    while !shared.stop.is_cancelled() {
        let answer = shared.store.list_active().await;
        shared.count("list_active", &answer);
        if let Ok(active) = answer {
            assert_one_holder_per_scope(&active);
            shared.scope_checks.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(SCAN_EVERY).await;
    }
}

fn assert_one_holder_per_scope(active: &[LeaseRecord]) {
    let mut holders: BTreeMap<&str, &str> = BTreeMap::new();
    for record in active {
        for scope in &record.scopes {
            if let Some(other) = holders.insert(scope, &record.id) {
                panic!(
                    "scope {scope} has two active holders: {other} and {}",
                    record.id
                );
            }
        }
    }
}

/// The keeper lost nothing, and renewed every lease after the server came
/// back (at store time `back`). Answers how many leases it kept.
async fn check_keeper(
    shared: &Shared,
    keeper: &Keeper,
    guards: &[tenure_keeper::RunGuard],
    back: Timestamp,
) -> usize {
    for guard in guards {
        let id = guard.id();
        assert_eq!(guard.loss(), None, "keeper lease {id} was lost");
        assert!(
            !guard.token().is_cancelled(),
            "keeper lease {id}: token cancelled"
        );
        assert!(keeper.holds(id), "the keeper no longer holds {id}");
        let record = shared
            .until_ok("get a keeper lease", || shared.store.get(id))
            .await
            .unwrap_or_else(|| panic!("keeper lease {id} is gone"));
        assert!(record.is_active(), "keeper lease {id}: {record:?}");
        assert_eq!(record.owner.as_deref(), Some(keeper.worker_id()));
        assert_eq!(
            record.fence,
            guard.fence(),
            "keeper lease {id}: fence moved"
        );
        let renewed_after_restart = record
            .lease_expires_at
            .is_some_and(|expiry| expiry > back + KEEPER_TTL);
        assert!(
            renewed_after_restart,
            "keeper lease {id} was not renewed after the restart: expires {:?}, back at {back:?}",
            record.lease_expires_at
        );
    }
    guards.len()
}

/// Fences handed out after the restart exceed every fence before it.
/// Answers (highest before, lowest after).
fn check_fences(shared: &Shared) -> (u64, u64) {
    let fences = lock(&shared.fences);
    let last_before = fences
        .iter()
        .filter(|seen| seen.before)
        .map(|seen| seen.fence)
        .max()
        .expect("fences handed out before the restart");
    let first_after = fences
        .iter()
        .filter(|seen| seen.after)
        .map(|seen| seen.fence)
        .min()
        .expect("admissions after the restart: the workload did not resume");
    assert!(
        first_after > last_before,
        "fence {first_after} handed out after the restart, {last_before} before it"
    );
    (last_before, first_after)
}

/// Every record a worker saw admitted is still there, with the fence and
/// status it last saw written. Answers how many.
async fn check_admitted(shared: &Shared) -> u64 {
    let seen: BTreeMap<String, (u64, Status)> = lock(&shared.seen)
        .iter()
        .map(|(id, seen)| (id.clone(), *seen))
        .collect();
    let mut ids = BTreeSet::new();
    for (id, (fence, status)) in &seen {
        let record = shared
            .until_ok("get an admitted record", || shared.store.get(id))
            .await
            .unwrap_or_else(|| panic!("record {id} was admitted, and is gone after the restart"));
        assert_eq!(
            (record.fence, record.status),
            (*fence, *status),
            "record {id} changed after the restart"
        );
        ids.insert(id);
    }
    ids.len() as u64
}
