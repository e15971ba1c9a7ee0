//! Running a case or scenario: bounded, a panic or a hang a failure, the
//! clean-up's failure reported with it, a skip printed in the one format
//! `.ci/run` tallies. Shared by the kit's cases and its opt-in suites.

use std::future::Future;
use std::io::Write as _;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;

use super::{services_required, CaseOutcome, CaseResult, CASE_TIMEOUT, REQUIRE_SERVICES_VAR};

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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn a_panicking_scenario_is_a_failure_naming_the_panic() {
        let outcome = guarded(async { panic!("broken promise") }).await;
        assert_eq!(
            outcome,
            CaseOutcome::Failed("case panicked: broken promise".to_owned())
        );
    }
}
