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

use std::io::Write as _;

use crate::harness::{unavailable, CaseOutcome, Factory};

/// Prints a test's one summary line (what a scenario counted) to stderr.
fn report_note(name: &str, note: &str) {
    let _ = writeln!(std::io::stderr(), "{name}: {note}");
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
}
