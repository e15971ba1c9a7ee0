//! Running cases: fresh store per case, clock control, failures, the report.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod capabilities;
mod renewal_hold;
mod running;

use async_trait::async_trait;
use tenure_lease_core::{LeaseStore, ManualClock, Timestamp};

use crate::capability::deployment::DeploymentSupport;
use crate::capability::nemesis::{FailoverSupport, NemesisSupport};
use crate::capability::network::NetworkSupport;
use crate::capability::process::ProcessSupport;
use crate::capability::restart::RestartSupport;
use crate::damage::Damager;
use crate::offset_clock::ClockOffsetter;
use crate::reopen::Reopener;

pub(crate) use renewal_hold::RenewalHold;
#[doc(hidden)]
pub use running::conclude;
pub(crate) use running::{guarded, guarded_within, runtime, unavailable, with_cleanup};
pub use running::{report_skip, skip_unless_required};

/// The environment variable that turns "service not configured" from a skip
/// into a failure (CI sets it).
pub const REQUIRE_SERVICES_VAR: &str = "TENURE_REQUIRE_SERVICES";

/// How long one case may run before it counts as hung.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long [`Factory::create`] may take before the kit gives up on it.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// After this many failed [`Factory::create`] calls in one process, the kit
/// runs no more cases there: each answers the last creation error at once
/// instead of trying (and maybe waiting out [`CREATE_TIMEOUT`]) again.
pub const CREATE_FAILURES_BEFORE_GIVING_UP: usize = 3;

/// Creates a fresh, isolated store for each case and removes it afterwards.
///
/// A backend's test file implements this once and hands it to
/// [`tenure_conformance!`](crate::tenure_conformance) or [`run_all`](crate::run_all).
#[async_trait]
pub trait Factory: Send + Sync + 'static {
    /// The store under test.
    type Store: LeaseStore + 'static;

    /// Why this factory cannot run here (e.g. its server URL is not set), or
    /// `None` when it can. Cases are then reported as skipped, unless
    /// `TENURE_REQUIRE_SERVICES=1`, which makes them fail.
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// A new store with its own namespace (schema, key prefix, file...),
    /// sharing nothing with any other case.
    async fn create(&self) -> tenure_lease_core::Result<Subject<Self::Store>>;

    /// Removes what [`create`](Factory::create) made. Runs after every case,
    /// passed or failed.
    async fn teardown(&self, store: &Self::Store) -> tenure_lease_core::Result<()> {
        let _ = store;
        Ok(())
    }

    /// How to count what a store of this factory keeps, or `None` (the
    /// default) when the factory cannot: the kit's growth case
    /// (`queue_purge_leaves_nothing_behind`) then checks only what the
    /// store's operations can see.
    fn footprint_probe(&self) -> Option<FootprintProbe<Self::Store>> {
        None
    }

    // Capabilities of the opt-in suites (`crate::suites`). Each answers
    // `None` unless the factory offers it; the suite's scenarios are then
    // reported skipped, with the reason.

    /// A second store behind network faults, for the [network
    /// suite](crate::suites::network).
    fn network(&self) -> Option<&dyn NetworkSupport<Self::Store>> {
        None
    }

    /// A store other processes can open, for the [process
    /// suite](crate::suites::process).
    fn processes(&self) -> Option<&dyn ProcessSupport<Self::Store>> {
        None
    }

    /// A private server the kit may restart, for the [restart
    /// suite](crate::suites::restart).
    fn restart(&self) -> Option<&dyn RestartSupport<Self::Store>> {
        None
    }

    /// Stores on the real clock, for the [nemesis
    /// suite](crate::suites::nemesis).
    fn nemeses(&self) -> Option<&dyn NemesisSupport<Self::Store>> {
        None
    }

    /// A primary with replicas to fail over, for the [nemesis
    /// suite](crate::suites::nemesis)'s failover scenario.
    fn failover(&self) -> Option<&dyn FailoverSupport<Self::Store>> {
        None
    }

    /// Misdeployed servers to connect to, for the [deployment
    /// suite](crate::suites::deployment).
    fn deployment(&self) -> Option<&dyn DeploymentSupport> {
        None
    }

    /// How to damage what a store of this factory keeps, one field of one
    /// lease record or job at a time ([`Damage`](crate::damage::Damage)),
    /// or `None` (the default) when the factory cannot: the kit's damage
    /// cases (`fault_damaged_*`) are then reported skipped.
    fn damager(&self) -> Option<Damager<Self::Store>> {
        None
    }

    /// How to open a fresh store on what a store of this factory keeps (the
    /// same file, schema or namespace), as a restarted worker would, or
    /// `None` (the default) when the factory cannot: the kit's cases that
    /// check what survives a reconnect are then reported skipped.
    fn reopen(&self) -> Option<Reopener<Self::Store>> {
        None
    }

    /// How to open a store whose clock runs a given offset from this
    /// process's clock ([`offset_clock`](crate::offset_clock)), or `None`
    /// (the default) when the factory cannot: the kit's clock cases, which
    /// catch a store deciding by the process clock instead of its own, are
    /// then reported skipped.
    fn clock_offset(&self) -> Option<ClockOffsetter<Self::Store>> {
        None
    }
}

/// What a store keeps, counted per structure (rows per table, entries per
/// key, entries per map), by a name of the factory's choosing. The kit only
/// compares two footprints of one store for equality.
pub type Footprint = BTreeMap<String, u64>;

/// Counts what a store keeps: see [`Factory::footprint_probe`].
pub type FootprintProbe<S> = Arc<
    dyn Fn(Arc<S>) -> Pin<Box<dyn Future<Output = tenure_lease_core::Result<Footprint>> + Send>>
        + Send
        + Sync,
>;

/// A store created for one case, and how the kit can move its clock.
#[derive(Debug)]
pub struct Subject<S> {
    /// The store under test.
    pub store: S,
    /// How its clock moves.
    pub clock: ClockControl,
}

/// How the kit moves a store's clock past a deadline.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClockControl {
    /// The store reads this clock: the kit advances it, no waiting.
    Manual(Arc<ManualClock>),
    /// The store reads a clock nobody can move (a server's): the kit waits
    /// until the store's own `now()` has passed the deadline. Cases keep
    /// such waits to fractions of a second.
    Real,
    /// The store reads a clock nobody can move, and also ends leases and
    /// job claims on timers of its own, which may keep one alive up to
    /// `overrun` past its stored expiry (etcd's lease timers count whole
    /// seconds on the cluster's leader): the kit waits until the store's
    /// own `now()` has passed the deadline by `overrun`. What a case checks
    /// before a deadline holds as on any store; only the waits grow.
    Timers {
        /// The longest a timer keeps a lease alive past its stored expiry,
        /// for the ttls the kit uses (a few seconds at most).
        overrun: Duration,
    },
}

/// A case's failure: what was expected and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<tenure_lease_core::Error> for Failure {
    fn from(error: tenure_lease_core::Error) -> Self {
        Failure(format!("unexpected store error: {error}"))
    }
}

/// What a case answers.
pub type CaseResult = Result<(), Failure>;

/// Fails the case with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return ::core::result::Result::Err($crate::Failure(::std::format!(
                "{} (at {}:{}: `{}`)",
                ::std::format!($($message)+),
                ::core::file!(),
                ::core::line!(),
                ::core::stringify!($cond),
            )));
        }
    };
}

/// Fails the case unless `actual == expected`, showing both, marked: the
/// first is what the store did, the second what the contract (or the
/// reference the case built) says it should have.
#[macro_export]
macro_rules! ensure_eq {
    ($actual:expr, $expected:expr $(,)?) => {
        $crate::ensure_eq!($actual, $expected, "values differ")
    };
    ($actual:expr, $expected:expr, $($message:tt)+) => {
        match (&$actual, &$expected) {
            (actual, expected) => {
                if !(*actual == *expected) {
                    return ::core::result::Result::Err($crate::Failure(::std::format!(
                        "{}\n    actual: {:?}\n  expected: {:?}\n (at {}:{}: `{} == {}`)",
                        ::std::format!($($message)+),
                        actual,
                        expected,
                        ::core::file!(),
                        ::core::line!(),
                        ::core::stringify!($actual),
                        ::core::stringify!($expected),
                    )));
                }
            }
        }
    };
}

/// What a case gets: the store under test, shareable across tasks, and the
/// means to move its clock.
pub struct Ctx<S> {
    /// The store under test.
    pub store: Arc<S>,
    clock: ClockControl,
    footprint: Option<FootprintProbe<S>>,
    pub(crate) damager: Option<Damager<S>>,
    pub(crate) reopener: Option<Reopener<S>>,
    pub(crate) clock_offsetter: Option<ClockOffsetter<S>>,
    pub(crate) renewals: RenewalHold,
    skipped: Arc<Mutex<Option<String>>>,
}

impl<S> Clone for Ctx<S> {
    fn clone(&self) -> Self {
        Ctx {
            store: Arc::clone(&self.store),
            clock: self.clock.clone(),
            footprint: self.footprint.clone(),
            damager: self.damager.clone(),
            reopener: self.reopener.clone(),
            clock_offsetter: self.clock_offsetter.clone(),
            renewals: self.renewals.clone(),
            skipped: Arc::clone(&self.skipped),
        }
    }
}

impl<S> Ctx<S> {
    /// Ends the case as skipped, saying why (e.g. it needs a clock the kit
    /// can place): the report counts it as not run, never as passed.
    /// Whatever the case checked before still had to hold.
    pub fn skip(&self, why: impl Into<String>) -> CaseResult {
        *self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why.into());
        Ok(())
    }

    fn skip_reason(&self) -> Option<String> {
        self.skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl<S: LeaseStore> Ctx<S> {
    /// A context for `store` whose clock moves as `clock` says.
    pub fn new(store: Arc<S>, clock: ClockControl) -> Self {
        Ctx {
            store,
            clock,
            footprint: None,
            damager: None,
            reopener: None,
            clock_offsetter: None,
            renewals: RenewalHold::default(),
            skipped: Arc::default(),
        }
    }

    /// The context, able to count what its store keeps with `probe`.
    pub fn with_footprint(mut self, probe: Option<FootprintProbe<S>>) -> Self {
        self.footprint = probe;
        self
    }

    /// What the store keeps now, when its factory can count it.
    pub async fn footprint(&self) -> Result<Option<Footprint>, Failure> {
        match &self.footprint {
            Some(probe) => Ok(Some(probe(Arc::clone(&self.store)).await.map_err(
                |error| {
                    Failure(format!(
                        "the factory could not count what the store keeps: {error}"
                    ))
                },
            )?)),
            None => Ok(None),
        }
    }

    /// How this store's clock moves.
    pub fn clock(&self) -> &ClockControl {
        &self.clock
    }

    /// The store's clock when the kit can place it at any instant, to the
    /// microsecond; `None` for a server's clock.
    pub fn manual_clock(&self) -> Option<&ManualClock> {
        match &self.clock {
            ClockControl::Manual(clock) => Some(clock),
            ClockControl::Real | ClockControl::Timers { .. } => None,
        }
    }

    /// How long the store's own timers may keep a lease alive past its
    /// stored expiry ([`ClockControl::Timers`]); zero on every other store.
    pub fn timer_overrun(&self) -> Duration {
        match &self.clock {
            ClockControl::Timers { overrun } => *overrun,
            _ => Duration::ZERO,
        }
    }

    /// Moves the store's clock until its `now()` is strictly after `instant`.
    pub async fn advance_past(&self, instant: Timestamp) -> Result<(), Failure> {
        match &self.clock {
            ClockControl::Manual(clock) => {
                clock.advance_to(tenure_lease_core::clock::add(
                    instant,
                    Duration::from_millis(1),
                ));
                Ok(())
            }
            ClockControl::Real => self.wait_past(instant).await,
            ClockControl::Timers { overrun } => {
                self.wait_past(tenure_lease_core::clock::add(instant, *overrun))
                    .await
            }
        }
    }

    /// Waits until the store's own `now()` is strictly after `instant`.
    async fn wait_past(&self, instant: Timestamp) -> Result<(), Failure> {
        loop {
            let now = self.store.now().await?;
            if now > instant {
                return Ok(());
            }
            let wait = tenure_lease_core::clock::until(now, instant) + Duration::from_millis(2);
            tokio::time::sleep(wait).await;
        }
    }

    /// Moves the store's clock by at least `by`: for ordering instants (a
    /// later write gets a later stamp). It does not wait out a store's own
    /// timers ([`ClockControl::Timers`]): a case that must see a lease's
    /// deadline crossed moves past it with [`advance_past`](Self::advance_past).
    pub async fn advance(&self, by: Duration) -> Result<(), Failure> {
        let now = self.store.now().await?;
        let instant = tenure_lease_core::clock::add(now, by);
        match &self.clock {
            ClockControl::Timers { .. } => self.wait_past(instant).await,
            _ => self.advance_past(instant).await,
        }
    }
}

/// The boxed future a case returns.
pub type CaseFuture = Pin<Box<dyn Future<Output = CaseResult> + Send>>;

/// One named case of the kit.
pub struct Case<S> {
    /// Its name, which is also its test name under [`tenure_conformance!`](crate::tenure_conformance).
    pub name: &'static str,
    /// What it checks.
    pub run: fn(Ctx<S>) -> CaseFuture,
}

impl<S> Clone for Case<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Case<S> {}

/// The result of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaseOutcome {
    /// The backend behaved as the contract says.
    Passed,
    /// It did not; why.
    Failed(String),
    /// The case could not run here; why. Never counted as passed.
    Skipped(String),
}

/// One line of a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// What happened.
    pub outcome: CaseOutcome,
}

/// What [`run_all`](crate::run_all) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every case, in kit order.
    pub cases: Vec<CaseReport>,
}

impl Report {
    fn count(&self, wanted: fn(&CaseOutcome) -> bool) -> usize {
        self.cases
            .iter()
            .filter(|case| wanted(&case.outcome))
            .count()
    }

    /// How many passed.
    pub fn passed(&self) -> usize {
        self.count(|outcome| matches!(outcome, CaseOutcome::Passed))
    }

    /// The failed cases.
    pub fn failures(&self) -> Vec<&CaseReport> {
        self.cases
            .iter()
            .filter(|case| matches!(case.outcome, CaseOutcome::Failed(_)))
            .collect()
    }

    /// How many were skipped.
    pub fn skipped(&self) -> usize {
        self.count(|outcome| matches!(outcome, CaseOutcome::Skipped(_)))
    }

    /// True when every case ran and passed.
    pub fn all_passed(&self) -> bool {
        self.passed() == self.cases.len()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for case in &self.cases {
            match &case.outcome {
                CaseOutcome::Passed => writeln!(f, "pass  {}", case.name)?,
                CaseOutcome::Failed(why) => writeln!(f, "FAIL  {}: {why}", case.name)?,
                CaseOutcome::Skipped(why) => writeln!(f, "skip  {}: {why}", case.name)?,
            }
        }
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failures().len(),
            self.skipped()
        )
    }
}

/// Whether `TENURE_REQUIRE_SERVICES=1` is set.
pub fn services_required() -> bool {
    std::env::var(REQUIRE_SERVICES_VAR).is_ok_and(|value| value == "1")
}

/// Reads a service URL from the environment variable `var`; `None` (and the
/// factory reports itself unavailable) when unset or empty.
pub fn service_url(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

/// Runs one case on a fresh store from `factory`: create, run (bounded by
/// [`CASE_TIMEOUT`]), tear down.
pub async fn run_case<F: Factory>(factory: &F, case: Case<F::Store>) -> CaseOutcome {
    if let Some(reason) = factory.unavailable_reason() {
        return unavailable(reason);
    }
    let subject = match create(factory).await {
        Ok(subject) => subject,
        Err(why) => return CaseOutcome::Failed(why),
    };
    let store = Arc::new(subject.store);
    let ctx = Ctx::new(Arc::clone(&store), subject.clock)
        .with_footprint(factory.footprint_probe())
        .with_damager(factory.damager())
        .with_reopener(factory.reopen())
        .with_clock_offsetter(factory.clock_offset());
    let outcome = match guarded((case.run)(ctx.clone())).await {
        CaseOutcome::Passed => ctx
            .skip_reason()
            .map_or(CaseOutcome::Passed, CaseOutcome::Skipped),
        other => other,
    };
    with_cleanup(outcome, factory.teardown(&store).await)
}

/// Failed creations so far in this process, and the last one's error.
static CREATE_FAILURES: AtomicUsize = AtomicUsize::new(0);
static LAST_CREATE_ERROR: Mutex<String> = Mutex::new(String::new());

/// A fresh store from `factory`, bounded by [`CREATE_TIMEOUT`]; after
/// [`CREATE_FAILURES_BEFORE_GIVING_UP`] failures in this process, the last
/// error at once.
async fn create<F: Factory>(factory: &F) -> Result<Subject<F::Store>, String> {
    let failures = CREATE_FAILURES.load(Ordering::SeqCst);
    if failures >= CREATE_FAILURES_BEFORE_GIVING_UP {
        let last = LAST_CREATE_ERROR
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        return Err(format!(
            "not run: the factory failed to create a store {failures} times in this process; \
             the last time: {last}"
        ));
    }
    let why = match tokio::time::timeout(CREATE_TIMEOUT, factory.create()).await {
        Ok(Ok(subject)) => return Ok(subject),
        Ok(Err(error)) => format!("factory could not create a store: {error}"),
        Err(_) => format!("factory did not create a store within {CREATE_TIMEOUT:?}"),
    };
    CREATE_FAILURES.fetch_add(1, Ordering::SeqCst);
    why.clone_into(
        &mut LAST_CREATE_ERROR
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Err(why)
}

/// The body of each test [`tenure_conformance!`](crate::tenure_conformance)
/// generates: runs the case called `name` on its own runtime and panics
/// when it fails. A skip prints one line to stderr, past the test harness's
/// output capture, so it is seen in a plain `cargo test`
/// ([`report_skip`](crate::report_skip)).
#[doc(hidden)]
pub fn run_named_case<F: Factory>(factory: F, name: &str, list: fn() -> Vec<Case<F::Store>>) {
    let case = list()
        .into_iter()
        .find(|case| case.name == name)
        .unwrap_or_else(|| panic!("no conformance case named {name}"));
    let outcome = runtime().block_on(run_case(&factory, case));
    conclude(name, outcome);
}
