//! The opt-in suites: what only some factories can offer.
//!
//! The cases of [`cases()`](crate::cases()) need nothing but a fresh store. A
//! backend's strongest promises need more: a network that fails on demand
//! between the store and its server, several OS processes sharing one
//! store, a server of its own to restart, a deliberately misconfigured
//! server to refuse. Those live here, written once over the store traits,
//! so every backend (a third party's too) runs the same scenarios instead
//! of re-writing drivers for them.
//!
//! A factory opts in by answering a capability method of [`Factory`]
//! ([`network`](Factory::network), [`processes`](Factory::processes),
//! [`restart`](Factory::restart), [`deployment`](Factory::deployment)) with
//! the small trait the suite needs. Each suite has a macro generating one
//! `#[test]` per scenario, named after it:
//!
//! * [`tenure_network_conformance!`](crate::tenure_network_conformance) ([`network`]),
//! * [`tenure_process_conformance!`](crate::tenure_process_conformance) and
//!   [`tenure_queue_process_conformance!`](crate::tenure_queue_process_conformance) ([`process`]),
//! * [`tenure_restart_conformance!`](crate::tenure_restart_conformance) ([`restart`]),
//! * [`tenure_deployment_conformance!`](crate::tenure_deployment_conformance) ([`deployment`]).
//!
//! A scenario whose capability the factory lacks is reported skipped with
//! the reason, never passed; one whose server is not there is skipped too,
//! or fails under `TENURE_REQUIRE_SERVICES=1`.

pub mod deployment;
pub mod nemesis;
pub mod network;
pub mod process;
pub mod restart;

use std::future::Future;
use std::io::Write as _;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;

use crate::harness::{
    services_required, CaseOutcome, CaseResult, Factory, CASE_TIMEOUT, REQUIRE_SERVICES_VAR,
};

/// Prints the one line telling that the test `name` did not run, and why,
/// to stderr (past the test harness's output capture, so a plain
/// `cargo test` shows it). Every skip of the kit and of the backends' own
/// tests goes through here, so skips read alike and are found by one grep:
/// `SKIPPED [<backend>] <test>: <why>`, the format `.ci/run` tallies.
pub fn report_skip(name: &str, why: &str) {
    let package = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let backend = skip_backend(&package, name, why);
    let _ = writeln!(std::io::stderr(), "SKIPPED [{backend}] {name}: {why}");
}

/// The backend a skip belongs to: the package's own for a backend's tests
/// (`tenure-backend-<name>`, from the `CARGO_PKG_NAME` cargo sets when it
/// runs a test), else the first backend the test's name or reason names
/// (the facade's tests run every backend in one binary), else the package.
fn skip_backend(package: &str, name: &str, why: &str) -> String {
    if let Some(backend) = package.strip_prefix("tenure-backend-") {
        return backend.to_owned();
    }
    let text = format!("{name} {why}").to_lowercase();
    let named = [
        ("postgres", "postgres"),
        ("tenure_pg_url", "postgres"),
        ("redis", "redis"),
        ("etcd", "etcd"),
        ("sqlite", "sqlite"),
        ("memory", "memory"),
    ]
    .into_iter()
    .filter_map(|(word, backend)| text.find(word).map(|at| (at, backend)))
    .min_by_key(|&(at, _)| at);
    match named {
        Some((_, backend)) => backend.to_owned(),
        None if package.is_empty() => "unknown".to_owned(),
        None => package
            .strip_prefix("tenure-")
            .unwrap_or(package)
            .to_owned(),
    }
}

/// For a test whose service is not there: fails it under
/// `TENURE_REQUIRE_SERVICES=1`, else reports it skipped with
/// [`report_skip`]. A test calls this, then returns.
///
/// # Panics
///
/// When services are required.
pub fn skip_unless_required(name: &str, why: &str) {
    assert!(
        !services_required(),
        "{name}: {why}, but {REQUIRE_SERVICES_VAR}=1 requires it"
    );
    report_skip(name, why);
}

/// Prints a test's one summary line (what a scenario counted) to stderr.
fn report_note(name: &str, note: &str) {
    let _ = writeln!(std::io::stderr(), "{name}: {note}");
}

/// The outcome of a case whose service is not there: skipped, or failed
/// when services are required.
pub(crate) fn unavailable(reason: String) -> CaseOutcome {
    if services_required() {
        CaseOutcome::Failed(format!(
            "{reason}, but {REQUIRE_SERVICES_VAR}=1 requires it"
        ))
    } else {
        CaseOutcome::Skipped(reason)
    }
}

/// The outcome of a scenario whose capability the factory does not offer.
fn unsupported(capability: &str, method: &str) -> CaseOutcome {
    CaseOutcome::Skipped(format!(
        "the factory offers no {capability} (`Factory::{method}` answers `None`)"
    ))
}

/// Whether `factory`'s server is there; the outcome to report when not.
fn factory_unavailable<F: Factory>(factory: &F) -> Option<CaseOutcome> {
    factory.unavailable_reason().map(unavailable)
}

/// Awaits `scenario`, bounded by [`CASE_TIMEOUT`]: a panic or a hang is a
/// failure, not a crashed run.
pub(crate) async fn guarded<Fut>(scenario: Fut) -> CaseOutcome
where
    Fut: Future<Output = CaseResult>,
{
    guarded_within(CASE_TIMEOUT, scenario).await
}

/// [`guarded`], bounded by `limit`: for scenarios whose length is set by
/// the run (a soak).
pub(crate) async fn guarded_within<Fut>(limit: std::time::Duration, scenario: Fut) -> CaseOutcome
where
    Fut: Future<Output = CaseResult>,
{
    match tokio::time::timeout(limit, AssertUnwindSafe(scenario).catch_unwind()).await {
        Ok(Ok(Ok(()))) => CaseOutcome::Passed,
        Ok(Ok(Err(failure))) => CaseOutcome::Failed(failure.0),
        Ok(Err(panic)) => {
            CaseOutcome::Failed(format!("case panicked: {}", panic_message(panic.as_ref())))
        }
        Err(_) => CaseOutcome::Failed(format!("case did not finish within {limit:?}")),
    }
}

/// The text a panic carried.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// `outcome`, failed with `note` as well when a clean-up step failed.
pub(crate) fn with_cleanup(
    outcome: CaseOutcome,
    cleanup: tenure_lease_core::Result<()>,
) -> CaseOutcome {
    match cleanup {
        Ok(()) => outcome,
        Err(error) => {
            let note = format!("teardown failed: {error}");
            match outcome {
                CaseOutcome::Failed(why) => CaseOutcome::Failed(format!("{why}; {note}")),
                _ => CaseOutcome::Failed(note),
            }
        }
    }
}

/// A runtime for one generated test.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance case")
}

/// Ends a generated test: panics when the case failed, reports a skip
/// with [`report_skip`].
#[doc(hidden)]
pub fn conclude(name: &str, outcome: CaseOutcome) {
    match outcome {
        CaseOutcome::Passed => {}
        CaseOutcome::Failed(why) => panic!("conformance case {name} failed: {why}"),
        CaseOutcome::Skipped(why) => report_skip(name, &why),
    }
}

// `$d` carries a literal `$` into the generated macro, so it can declare its
// own metavariables (as `define_cases!` in lib.rs does).
macro_rules! define_suite {
    (
        $d:tt
        $(#[$doc:meta])*
        $macro_name:ident => $module:ident [$($name:ident),* $(,)?]
    ) => {
        $(#[$doc])*
        #[macro_export]
        macro_rules! $macro_name {
            ($d factory:expr $d(,)?) => {
                $(
                    #[test]
                    fn $name() {
                        $d crate::suites::$module::run_named(
                            $d factory,
                            ::core::module_path!(),
                            ::core::stringify!($name),
                            $d crate::suites::$module::$name,
                        );
                    }
                )*
            };
        }
    };
}
pub(crate) use define_suite;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryFactory;

    #[test]
    fn a_skip_names_its_backend() {
        let from_package = skip_backend("tenure-backend-redis", "t", "TENURE_PG_URL is not set");
        assert_eq!(from_package, "redis");
        assert_eq!(
            skip_backend("tenure", "lease_on", "TENURE_PG_URL is not set"),
            "postgres"
        );
        assert_eq!(skip_backend("tenure", "on_sqlite_then_redis", ""), "sqlite");
        assert_eq!(
            skip_backend("tenure-conformance", "t", "no network"),
            "conformance"
        );
        assert_eq!(skip_backend("", "t", "no network"), "unknown");
    }

    fn skipped_naming(outcome: CaseOutcome, method: &str) {
        match outcome {
            CaseOutcome::Skipped(why) => assert!(why.contains(method), "{why}"),
            other => panic!("a suite the factory lacks answered {other:?}"),
        }
    }

    /// The memory store has no network, no other process can open it, and
    /// it has no server: every suite is skipped, naming the capability.
    #[tokio::test]
    async fn a_factory_without_the_capability_is_skipped_not_passed() {
        let factory = MemoryFactory;
        skipped_naming(
            network::run_scenario(&factory, network::unanswered_call_is_retryable_unknown).await,
            "Factory::network",
        );
        skipped_naming(
            process::run_as_parent(
                &factory,
                "processes_race_random_history".to_owned(),
                process::processes_race_random_history(),
            )
            .await,
            "Factory::processes",
        );
        skipped_naming(
            restart::run_scenario(
                &factory,
                "workload_and_keeper_ride_through_a_server_restart",
                restart::workload_and_keeper_ride_through_a_server_restart,
            )
            .await,
            "Factory::restart",
        );
        skipped_naming(
            deployment::run_scenario(
                &factory,
                deployment::misdeployed_servers_are_refused_at_connect,
            )
            .await,
            "Factory::deployment",
        );
        let test = String::new();
        skipped_naming(
            nemesis::nemesis_partitions_and_resets(factory, test.clone()).await,
            "Factory::network",
        );
        skipped_naming(
            nemesis::nemesis_failover(factory, test.clone()).await,
            "Factory::failover",
        );
        skipped_naming(
            nemesis::nemesis_paused_owner_is_refused_after_a_takeover(factory, test).await,
            "Factory::processes",
        );
    }

    #[tokio::test]
    async fn a_panicking_scenario_is_a_failure_naming_the_panic() {
        let outcome = guarded(async { panic!("broken promise") }).await;
        assert_eq!(
            outcome,
            CaseOutcome::Failed("case panicked: broken promise".to_owned())
        );
    }
}
