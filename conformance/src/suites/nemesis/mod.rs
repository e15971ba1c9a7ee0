//! The nemesis suite: a recorded workload under faults, judged by the
//! [history checker](crate::history).
//!
//! Clients race for two scopes and a queue (the `workload` module), every write
//! through a fence gate, while a nemesis breaks something: replies lost after
//! the store applied the call, calls refused or hung past their time limit, the
//! network between some clients and the server cut and reset, the server killed
//! and restarted, the store's clock stepped. Every call and answer is recorded
//! ([`History`](crate::history::History)); at the end every record and job is
//! read back and the whole history is [checked](crate::history::check). A
//! scenario passes when the checker finds no violation, and the workload really
//! raced: owners that walked away wrote again after their successor had, and
//! the gate refused them. The control scenario runs the same workload with the
//! gate check turned off and passes only when the checker *does* report those
//! stale writes, so a clean verdict cannot come from a workload that never
//! races.
//!
//! Each scenario needs a capability of the factory, as the other suites do:
//!
//! | scenario | capability |
//! |---|---|
//! | [`nemesis_lost_replies_refusals_and_hangs`] | [`Factory::nemeses`] |
//! | [`nemesis_control_without_the_gate_is_caught`] | [`Factory::nemeses`] |
//! | [`nemesis_clock_steps`] | [`Factory::nemeses`], reading the clock it is given |
//! | [`nemesis_partitions_and_resets`] | [`Factory::network`] |
//! | [`nemesis_server_killed_and_restarted`] | [`Factory::restart`] |
//! | [`nemesis_failover`] | [`Factory::failover`] (Redis behind Sentinel, PostgreSQL primary and standby) |
//! | [`nemesis_paused_owner_is_refused_after_a_takeover`] | [`Factory::processes`] |
//! | [`nemesis_killed_owner_is_taken_over`] | [`Factory::processes`] |
//!
//! Each prints one line of figures: calls, faults injected, unknown
//! outcomes, stale writes refused, violations per property.
//! [`SECONDS_VAR`] sets how long the workload runs (3 s by default: the
//! CI-sized form; minutes or hours for a soak) and [`HISTORY_DIR_VAR`]
//! names a directory to write each history into as JSON lines, for
//! `tenure check-history`.

mod owners;
mod workload;

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::layer::{Fault, LayerExt as _};
use tenure_lease_core::{Clock, SystemClock, Timestamp};

pub use owners::OWNERS_VAR;
pub use workload::Store;

use super::{define_suite, report_note, unsupported};
pub use crate::capability::nemesis::{FailoverControl, FailoverSupport, NemesisSupport, Topology};
use crate::harness::{
    conclude, guarded_within, runtime, unavailable, with_cleanup, CaseOutcome, Factory, Failure,
};
use crate::history::{check, write_json_lines, Call, Property, Verdict};
use workload::{Workload, Writes, CALL_LIMIT, GRACE, TTL};

/// The environment variable setting how many seconds each nemesis
/// workload runs (default [`DEFAULT_SECONDS`]).
pub const SECONDS_VAR: &str = "TENURE_NEMESIS_SECONDS";
/// The workload's length when [`SECONDS_VAR`] is not set: the CI-sized form.
pub const DEFAULT_SECONDS: u64 = 3;
/// The environment variable naming a directory to write every scenario's
/// history into (`<scenario>-<pid>.jsonl`).
pub const HISTORY_DIR_VAR: &str = "TENURE_NEMESIS_HISTORY_DIR";
/// The client name of the reads after the run.
const FINAL_READS: &str = "final-reads";
/// Clients racing in each scenario.
const CLIENTS: usize = 4;

define_suite! {$
    /// Expands to one `#[test]` per scenario of the [nemesis
    /// suite](crate::suites::nemesis), named after it; each is skipped with
    /// the reason when the factory lacks its capability. The store must
    /// be a `JobQueue` and a `FenceStore` too.
    ///
    /// ```ignore
    /// tenure_conformance::tenure_nemesis_conformance!(MyFactory::from_env());
    /// ```
    tenure_nemesis_conformance => nemesis [
        nemesis_lost_replies_refusals_and_hangs,
        nemesis_control_without_the_gate_is_caught,
        nemesis_clock_steps,
        nemesis_partitions_and_resets,
        nemesis_server_killed_and_restarted,
        nemesis_failover,
        nemesis_paused_owner_is_refused_after_a_takeover,
        nemesis_killed_owner_is_taken_over,
    ]
}

/// The body of each test [`tenure_nemesis_conformance!`](crate::tenure_nemesis_conformance)
/// generates.
/// A test run with [`OWNER_VAR`] set is an owner process of the owner
/// scenarios, not a test.
#[doc(hidden)]
pub fn run_named<F, G, Fut>(factory: F, module: &str, name: &str, scenario: G)
where
    F: Factory,
    F::Store: Store,
    G: FnOnce(F, String) -> Fut,
    Fut: Future<Output = CaseOutcome>,
{
    if let Ok(owner) = std::env::var(OWNER_VAR) {
        return owners::play_owner(&factory, &owner);
    }
    // The test's path in its binary, for the owner processes to run.
    let test = match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_owned(),
    };
    let outcome = runtime().block_on(scenario(factory, test));
    conclude(name, outcome);
}

/// The environment variable naming an owner process of the owner
/// scenarios; set, the test plays that owner.
pub const OWNER_VAR: &str = "TENURE_NEMESIS_OWNER";

/// How long each workload runs: [`SECONDS_VAR`], else [`DEFAULT_SECONDS`].
fn run_for() -> Duration {
    let seconds = std::env::var(SECONDS_VAR)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(DEFAULT_SECONDS);
    Duration::from_secs(seconds.max(1))
}

/// How long a workload scenario may take before it counts as hung: the
/// kit's case bound, plus twice the workload's length.
fn case_bound() -> Duration {
    bound_for(run_for())
}

/// [`case_bound`] for a workload of `length`.
fn bound_for(length: Duration) -> Duration {
    crate::harness::CASE_TIMEOUT + length * 2
}

/// The run's seed: [`SEED_VAR`](crate::suites::process::SEED_VAR) when
/// set, else fresh.
fn seed() -> u64 {
    super::process::seed()
}

/// A clock the kit can step: the host's wall clock plus an offset.
#[derive(Debug, Default)]
pub struct SteppedClock {
    offset_micros: AtomicI64,
}

impl SteppedClock {
    /// Moves the clock by `micros` (negative: back).
    pub fn step(&self, micros: i64) {
        self.offset_micros.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for SteppedClock {
    fn now(&self) -> Timestamp {
        let now = SystemClock.now();
        let offset = chrono::Duration::microseconds(self.offset_micros.load(Ordering::SeqCst));
        now.checked_add_signed(offset).unwrap_or(now)
    }
}

/// What one scenario's run found: the verdict and the nemesis's counts.
struct Run {
    verdict: Verdict,
    faults: usize,
    stale_writes: usize,
    /// Final reads that got no answer in any attempt: what they should
    /// have shown is unjudged.
    unread: usize,
    seed: u64,
}

impl Run {
    fn line(&self) -> String {
        format!(
            "seed {}: {} calls, {} faults injected, {} unknown outcomes, {} ownership changes, \
             {} stale writes tried ({} refused); violations: {}",
            self.seed,
            self.verdict.calls,
            self.faults,
            self.verdict.unknown,
            self.verdict.ownership_changes,
            self.stale_writes,
            self.verdict.writes_refused,
            self.verdict.counts()
        )
    }

    /// Passes when the verdict is clean except for `allowed`, and stale
    /// writes were tried (the workload raced).
    fn judge(&self, name: &str, allowed: &[Property]) -> Result<(), Failure> {
        report_note(name, &self.line());
        let broken: Vec<_> = self
            .verdict
            .violations
            .iter()
            .filter(|violation| !allowed.contains(&violation.property))
            .collect();
        if !broken.is_empty() {
            return Err(Failure(format!(
                "the history breaks the contract (seed {}): {}",
                self.seed, self.verdict
            )));
        }
        if self.unread > 0 {
            return Err(Failure(format!(
                "{} of the final reads got no answer (seed {}), so what they should show was \
                 not judged",
                self.unread, self.seed
            )));
        }
        if self.stale_writes == 0 {
            return Err(Failure(format!(
                "no owner that walked away saw a successor write within the run (seed {}): the \
                 workload did not race, so a clean verdict proves nothing",
                self.seed
            )));
        }
        Ok(())
    }
}

/// Plays the workload on clients over `bases` while `nemesis` runs, reads
/// everything back through a fault-free client on `reader`, and checks.
async fn play<S, N, Fut>(
    name: &str,
    bases: &[Arc<S>],
    reader: Arc<S>,
    writes: Writes,
    length: Duration,
    nemesis: N,
) -> Run
where
    S: Store,
    N: FnOnce(Arc<Workload<S>>, tokio::time::Instant) -> Fut,
    Fut: Future<Output = usize> + Send + 'static,
{
    let seed = seed();
    let workload = Arc::new(Workload::new(bases, writes));
    let until = tokio::time::Instant::now() + length;
    let faults = tokio::spawn(nemesis(Arc::clone(&workload), until));
    workload.play(length, seed).await;
    let faults = counted(faults.await);
    let reader = reader
        .with_timeout(CALL_LIMIT)
        .layer(workload.history.client(FINAL_READS));
    workload.read_back(&reader).await;
    let entries = workload.history.entries();
    keep_history(name, &entries);
    let final_reads = entries.iter().filter(|entry| entry.client == FINAL_READS);
    let answered: Vec<&Call> = final_reads
        .clone()
        .filter(|entry| !entry.reply.is_unknown())
        .map(|entry| &entry.call)
        .collect();
    let mut unread: Vec<&Call> = Vec::new();
    for entry in final_reads {
        if !answered.contains(&&entry.call) && !unread.contains(&&entry.call) {
            unread.push(&entry.call);
        }
    }
    let unread = unread.len();
    Run {
        verdict: check(&entries),
        faults,
        stale_writes: workload.tally.stale_writes.load(Ordering::Relaxed),
        unread,
        seed,
    }
}

/// What a nemesis task counted; its panic, raised again.
fn counted(joined: Result<usize, tokio::task::JoinError>) -> usize {
    match joined {
        Ok(count) => count,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => 0,
    }
}

/// Writes the history to [`HISTORY_DIR_VAR`]'s directory, when set.
fn keep_history(name: &str, entries: &[crate::history::Entry]) {
    let Ok(directory) = std::env::var(HISTORY_DIR_VAR) else {
        return;
    };
    let path =
        std::path::Path::new(&directory).join(format!("{name}-{}.jsonl", std::process::id()));
    let written = std::fs::File::create(&path)
        .and_then(|file| write_json_lines(entries, std::io::BufWriter::new(file)));
    if let Err(error) = written {
        report_note(
            name,
            &format!("could not write the history to {}: {error}", path.display()),
        );
    }
}

/// A fresh real-time store from the factory's [`NemesisSupport`], or the
/// outcome to report without one.
async fn real_time_store<F: Factory>(
    factory: &F,
    clock: Arc<dyn Clock>,
) -> Result<Arc<F::Store>, CaseOutcome> {
    let Some(nemeses) = factory.nemeses() else {
        return Err(unsupported("store on the real clock", "nemeses"));
    };
    if let Some(reason) = factory.unavailable_reason() {
        return Err(unavailable(reason));
    }
    nemeses
        .create_on_clock(clock)
        .await
        .map(Arc::new)
        .map_err(|error| CaseOutcome::Failed(format!("factory could not create a store: {error}")))
}

/// Plays the workload with every client on one fresh real-time store of
/// `factory` (reading `clock` where it reads one) while `nemesis` runs,
/// judges the run with `judge`, and tears the store down.
async fn on_one_store<F, N, Fut>(
    factory: &F,
    clock: Arc<dyn Clock>,
    name: &str,
    writes: Writes,
    nemesis: N,
    judge: impl FnOnce(Run) -> Result<(), Failure>,
) -> CaseOutcome
where
    F: Factory,
    F::Store: Store,
    N: FnOnce(Arc<Workload<F::Store>>, tokio::time::Instant) -> Fut,
    Fut: Future<Output = usize> + Send + 'static,
{
    let store = match real_time_store(factory, clock).await {
        Ok(store) => store,
        Err(outcome) => return outcome,
    };
    let bases = vec![Arc::clone(&store); CLIENTS];
    let reader = Arc::clone(&store);
    let outcome = guarded_within(case_bound(), async move {
        judge(play(name, &bases, reader, writes, run_for(), nemesis).await)
    })
    .await;
    with_cleanup(outcome, factory.teardown(&store).await)
}

/// Injects one fault at a time into a random client's store, on a random
/// operation, for a few tens of milliseconds, until `until`: lost replies
/// (applied, answer dropped), refusals, hangs cut off by the time limit.
/// Answers how many it injected.
async fn inject_call_faults<S: Store>(
    workload: Arc<Workload<S>>,
    until: tokio::time::Instant,
) -> usize {
    const OPERATIONS: [&str; 10] = [
        "admit",
        "renew",
        "transition",
        "claim_for_takeover",
        "check_fence",
        "enqueue",
        "claim",
        "renew_job",
        "complete",
        "reap",
    ];
    let mut dice = fastrand::Rng::with_seed(seed());
    let mut injected = 0;
    while tokio::time::Instant::now() < until {
        let client = dice.usize(0..workload.clients.len());
        let operation = OPERATIONS[dice.usize(0..OPERATIONS.len())];
        let fault = match dice.u8(0..3) {
            0 => Fault::ReplyLost,
            1 => Fault::Unavailable,
            _ => Fault::Hang,
        };
        workload.faults(client).inject(operation, None, fault);
        injected += 1;
        tokio::time::sleep(Duration::from_millis(dice.u64(20..80))).await;
        workload.faults(client).release_hangs();
        tokio::time::sleep(Duration::from_millis(dice.u64(5..40))).await;
    }
    injected
}

/// Lost replies, refused calls and hung calls, one client at a time, on
/// any store: the contract's unknown outcomes (§10) must never add up to
/// a broken promise.
pub async fn nemesis_lost_replies_refusals_and_hangs<F: Factory>(
    factory: F,
    _test: String,
) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_lost_replies_refusals_and_hangs";
    let clock = Arc::new(SystemClock);
    on_one_store(
        &factory,
        clock,
        name,
        Writes::Gated,
        inject_call_faults,
        |run| run.judge(name, &[]),
    )
    .await
}

/// The lost-replies workload with the gate check turned off: the owners
/// that walked away write unchecked after their successors, and the
/// checker must say so. Passes only when it does.
pub async fn nemesis_control_without_the_gate_is_caught<F: Factory>(
    factory: F,
    _test: String,
) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_control_without_the_gate_is_caught";
    let clock = Arc::new(SystemClock);
    on_one_store(
        &factory,
        clock,
        name,
        Writes::Unchecked,
        inject_call_faults,
        |run| {
            report_note(name, &run.line());
            if run.verdict.count(Property::GateNeverGoesBack) == 0 {
                return Err(Failure(format!(
                    "with no gate, {} stale writes were made and the checker reported none \
                 (seed {}): {}",
                    run.stale_writes, run.seed, run.verdict
                )));
            }
            Ok(())
        },
    )
    .await
}

/// The store's clock stepped forward and back by four times the grace,
/// every few hundred milliseconds, under the lost-replies workload. The
/// contract asks for a slewed clock (§2): a forward step may end a lease
/// early, so overlapping ownerships are counted and reported, not failed.
/// What fencing promises must hold whatever the clock does: fences grow,
/// gates never go back, acknowledged writes stay.
pub async fn nemesis_clock_steps<F: Factory>(factory: F, _test: String) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_clock_steps";
    if factory
        .nemeses()
        .is_some_and(|nemeses| !nemeses.reads_given_clock())
    {
        return CaseOutcome::Skipped(
            "the store reads its server's clock, which the kit cannot step".to_owned(),
        );
    }
    let clock = Arc::new(SteppedClock::default());
    let stepping = {
        let clock = Arc::clone(&clock);
        move |workload: Arc<Workload<F::Store>>, until: tokio::time::Instant| async move {
            let step = i64::try_from(GRACE.as_micros() * 4).unwrap_or(i64::MAX);
            let faults = tokio::spawn(inject_call_faults(workload, until));
            let (mut forward, mut steps) = (true, 0);
            while tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(300)).await;
                clock.step(if forward { step } else { -step });
                forward = !forward;
                steps += 1;
            }
            counted(faults.await) + steps
        }
    };
    on_one_store(&factory, clock, name, Writes::Gated, stepping, |run| {
        run.judge(name, &[Property::ExclusiveOwnership])
    })
    .await
}

/// Half the clients reach the server through a proxy the kit cuts
/// (black-holed longer than the ttl, then healed) and resets, under the
/// lost-replies workload: a partitioned owner's lease lapses, a successor
/// takes over, and the partitioned owner's late writes are refused.
pub async fn nemesis_partitions_and_resets<F: Factory>(factory: F, _test: String) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_partitions_and_resets";
    let Some(network) = factory.network() else {
        return unsupported("network to cut", "network");
    };
    let direct = match real_time_store(&factory, Arc::new(SystemClock)).await {
        Ok(store) => store,
        Err(outcome) => return outcome,
    };
    let mut behind = Vec::new();
    for _ in 0..CLIENTS / 2 {
        match network.connect_behind_faults(&direct).await {
            Ok(connected) => behind.push((Arc::new(connected.store), connected.faults)),
            Err(error) => {
                let outcome =
                    CaseOutcome::Failed(format!("could not connect behind faults: {error}"));
                return with_cleanup(outcome, factory.teardown(&direct).await);
            }
        }
    }
    let mut bases: Vec<Arc<F::Store>> = behind.iter().map(|(store, _)| Arc::clone(store)).collect();
    bases.extend(std::iter::repeat_n(
        Arc::clone(&direct),
        CLIENTS - bases.len(),
    ));
    let proxies: Vec<_> = behind
        .iter()
        .map(|(_, faults)| Arc::clone(faults))
        .collect();
    let reader = Arc::clone(&direct);
    let outcome = guarded_within(case_bound(), async move {
        let cutting = {
            let proxies = proxies.clone();
            move |workload: Arc<Workload<F::Store>>, until: tokio::time::Instant| async move {
                let faults = tokio::spawn(inject_call_faults(workload, until));
                let mut dice = fastrand::Rng::with_seed(seed());
                let mut cuts = 0;
                while tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(dice.u64(100..300))).await;
                    let proxy = &proxies[dice.usize(0..proxies.len())];
                    if dice.bool() {
                        proxy.blackhole();
                        tokio::time::sleep(TTL * 2 + GRACE).await;
                        proxy.heal();
                    } else {
                        proxy.reset();
                    }
                    cuts += 1;
                }
                for proxy in &proxies {
                    proxy.heal();
                }
                counted(faults.await) + cuts
            }
        };
        let run = play(name, &bases, reader, Writes::Gated, run_for(), cutting).await;
        for proxy in &proxies {
            proxy.stop().await;
        }
        run.judge(name, &[])
    })
    .await;
    with_cleanup(outcome, factory.teardown(&direct).await)
}

/// The server of a private instance killed and restarted from its data in
/// the middle of the lost-replies workload.
pub async fn nemesis_server_killed_and_restarted<F: Factory>(
    factory: F,
    _test: String,
) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_server_killed_and_restarted";
    let private = match super::restart::start_private(&factory).await {
        Ok(private) => private,
        Err(outcome) => return outcome,
    };
    // Held here until the run ends: dropping the server stops it.
    let server = Arc::new(tokio::sync::Mutex::new(private.server));
    let strike = {
        let server = Arc::clone(&server);
        move || {
            let server = Arc::clone(&server);
            async move { server.lock().await.kill_and_restart(TTL * 2).await }
        }
    };
    let outcome = struck(
        name,
        Arc::new(private.store),
        (1, Duration::ZERO),
        strike,
        &[],
    )
    .await;
    drop(server);
    outcome
}

/// A primary with replicas ([`Factory::failover`]) failed over
/// [`FAILOVERS_VAR`] times (10 by default) in the middle of the
/// lost-replies workload, through the store's gate: each time the primary
/// killed, a replica promoted, the store following it. Fences must grow
/// and the gate never go back across every failover; on an asynchronous
/// topology ([`Topology::asynchronous`]) acknowledged writes may be lost
/// and ownerships overlap, which the line counts but does not fail.
pub async fn nemesis_failover<F: Factory>(factory: F, _test: String) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_failover";
    let Some(failover) = factory.failover() else {
        return unsupported("primary with replicas to fail over", "failover");
    };
    if let Some(reason) = failover.unavailable_reason() {
        return unavailable(reason);
    }
    let topology = match failover.start_topology().await {
        Ok(topology) => topology,
        Err(error) => {
            return CaseOutcome::Failed(format!("factory could not start the topology: {error}"))
        }
    };
    let allowed: &[Property] = if topology.asynchronous {
        &[
            Property::ExclusiveOwnership,
            Property::AcknowledgedWritesKept,
        ]
    } else {
        &[]
    };
    // Held here until the run ends: dropping the control stops everything.
    let control = Arc::new(tokio::sync::Mutex::new(topology.control));
    let strike = {
        let control = Arc::clone(&control);
        move || {
            let control = Arc::clone(&control);
            async move { control.lock().await.fail_over().await }
        }
    };
    let outcome = struck(
        name,
        Arc::new(topology.store),
        (failovers(), topology.failover_every),
        strike,
        allowed,
    )
    .await;
    drop(control);
    outcome
}

/// The environment variable setting how many failovers
/// [`nemesis_failover`] stages (default [`DEFAULT_FAILOVERS`]).
pub const FAILOVERS_VAR: &str = "TENURE_NEMESIS_FAILOVERS";
/// How many failovers [`nemesis_failover`] stages when [`FAILOVERS_VAR`]
/// is not set.
pub const DEFAULT_FAILOVERS: usize = 10;
fn failovers() -> usize {
    std::env::var(FAILOVERS_VAR)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(DEFAULT_FAILOVERS)
        .max(1)
}

/// Plays the lost-replies workload on `store` while `strike` breaks the
/// deployment `strikes` times, the first a quarter into the run and the
/// others `each` apart (or one after another when a strike takes longer;
/// the workload runs `each` longer for every strike after the first);
/// every strike must succeed and the history be clean but for `allowed`.
async fn struck<S, B, BFut>(
    name: &str,
    store: Arc<S>,
    (strikes, each): (usize, Duration),
    mut strike: B,
    allowed: &'static [Property],
) -> CaseOutcome
where
    S: Store,
    B: FnMut() -> BFut + Send + 'static,
    BFut: Future<Output = std::io::Result<()>> + Send,
{
    let bases = vec![Arc::clone(&store); CLIENTS];
    let extra = u32::try_from(strikes.saturating_sub(1)).unwrap_or(u32::MAX);
    let length = run_for().saturating_add(each.saturating_mul(extra));
    guarded_within(bound_for(length), async move {
        let struck = Arc::new(std::sync::Mutex::new(Vec::new()));
        let striking = {
            let struck = Arc::clone(&struck);
            move |workload: Arc<Workload<S>>, until: tokio::time::Instant| async move {
                let faults = tokio::spawn(inject_call_faults(workload, until));
                let quarter = run_for() / 4;
                tokio::time::sleep(quarter).await;
                let first = tokio::time::Instant::now();
                let mut succeeded = 0;
                for (_, index) in (0..strikes).zip(0_u32..) {
                    // Each strike at its turn, so the workload also runs on
                    // a healthy deployment between two.
                    tokio::time::sleep_until(first + each.saturating_mul(index)).await;
                    let outcome = strike().await;
                    succeeded += usize::from(outcome.is_ok());
                    let failed = outcome.is_err();
                    struck
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(outcome);
                    if failed {
                        break;
                    }
                }
                counted(faults.await) + succeeded
            }
        };
        let run = play(name, &bases, store, Writes::Gated, length, striking).await;
        let outcomes = std::mem::take(
            &mut *struck
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if let Some(Err(error)) = outcomes.iter().find(|outcome| outcome.is_err()) {
            return Err(Failure(format!(
                "strike {} of {strikes} on the deployment failed: {error}",
                outcomes.len()
            )));
        }
        if outcomes.len() < strikes {
            return Err(Failure(format!(
                "{} of {strikes} strikes on the deployment ran",
                outcomes.len()
            )));
        }
        run.judge(name, allowed)
    })
    .await
}

/// A keeper in a child process holds a lease and writes through the gate;
/// it is stopped with `SIGSTOP` for longer than its ttl, a rival takes the
/// lease over once the store judges it lapsed and writes with the new
/// fence, and the owner is resumed: its keeper must notice the loss, and
/// every write it makes with the old fence must be refused. Repeated for
/// [`OWNERS_VAR`] owners (5 by default); the line reports how soon after
/// the resume each owner noticed.
pub async fn nemesis_paused_owner_is_refused_after_a_takeover<F: Factory>(
    factory: F,
    test: String,
) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_paused_owner_is_refused_after_a_takeover";
    owners::owners_scenario(&factory, &test, name, owners::Blow::Pause).await
}

/// A keeper in a child process holds a lease and is killed with
/// `SIGKILL`; a rival takes the lease over once the store judges it lapsed
/// (never earlier: the fence must exceed the dead owner's) and writes. The
/// line reports the time from the death to the successor's first accepted
/// write against ttl + grace + one beat. Repeated for [`OWNERS_VAR`]
/// owners, one process each.
pub async fn nemesis_killed_owner_is_taken_over<F: Factory>(factory: F, test: String) -> CaseOutcome
where
    F::Store: Store,
{
    let name = "nemesis_killed_owner_is_taken_over";
    owners::owners_scenario(&factory, &test, name, owners::Blow::Kill).await
}
