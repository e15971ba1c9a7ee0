//! The deployment suite: a store refuses, at connect, a server it cannot
//! keep its promises on.
//!
//! Some deployments break the contract before the first call: a Redis
//! whose eviction policy may drop any key (a lease vanishes, a fence
//! counter restarts), a PostgreSQL schema written by a newer version of the
//! library. A backend that checks for them at connect answers a typed,
//! non-retryable error naming what is wrong and how to fix it, instead of
//! working until the day it loses a lease. The factory names the
//! misdeployments it can stage ([`Misdeployment`]) and connects to each on
//! request ([`DeploymentSupport`]); the kit checks the refusal.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{define_suite, unsupported};
pub use crate::capability::deployment::{DeploymentSupport, Misdeployment};
use crate::harness::{conclude, guarded, runtime, unavailable, CaseOutcome, Factory};

/// The most connecting to a misdeployed server may take: a refusal within
/// it was an answer, not a timeout, whatever the load of the machine.
const CONNECT_BOUND: Duration = Duration::from_secs(60);

define_suite! {$
    /// Expands to one `#[test]` per scenario of the [deployment
    /// suite](crate::suites::deployment), named after it; skipped with the
    /// reason when [`Factory::deployment`] answers `None`.
    ///
    /// ```ignore
    /// tenure_conformance::tenure_deployment_conformance!(MyFactory::from_env());
    /// ```
    tenure_deployment_conformance => deployment [misdeployed_servers_are_refused_at_connect]
}

/// What a deployment scenario returns.
pub type DeploymentFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The body of each test [`tenure_deployment_conformance!`](crate::tenure_deployment_conformance)
/// generates.
#[doc(hidden)]
pub fn run_named<F: Factory>(
    factory: F,
    _module: &str,
    name: &str,
    scenario: fn(&dyn DeploymentSupport) -> DeploymentFuture<'_>,
) {
    conclude(name, runtime().block_on(run_scenario(&factory, scenario)));
}

/// Runs one deployment `scenario` (one of this module's public functions)
/// with `factory`'s [`DeploymentSupport`].
pub async fn run_scenario<F: Factory>(
    factory: &F,
    scenario: fn(&dyn DeploymentSupport) -> DeploymentFuture<'_>,
) -> CaseOutcome {
    let Some(deployment) = factory.deployment() else {
        return unsupported("misdeployed servers to stage", "deployment");
    };
    if let Some(reason) = deployment.unavailable_reason() {
        return unavailable(reason);
    }
    guarded(async move {
        scenario(deployment).await;
        Ok(())
    })
    .await
}

/// Every misdeployment the factory stages is refused at connect, within
/// a minute, with the kind of error it names, not retryable (no
/// retry can fix a configuration), its message naming what it must.
pub fn misdeployed_servers_are_refused_at_connect(
    deployment: &dyn DeploymentSupport,
) -> DeploymentFuture<'_> {
    Box::pin(refused_at_connect(deployment))
}

/// The body of [`misdeployed_servers_are_refused_at_connect`].
async fn refused_at_connect(deployment: &dyn DeploymentSupport) {
    let misdeployments = deployment.misdeployments();
    assert!(
        !misdeployments.is_empty(),
        "the factory offers deployment checks, yet names no misdeployment"
    );
    for which in &misdeployments {
        let name = &which.name;
        let connected = tokio::time::timeout(CONNECT_BOUND, deployment.connect_misdeployed(which))
            .await
            .unwrap_or_else(|_| panic!("{name}: no answer within {CONNECT_BOUND:?}"));
        let error = match connected {
            Ok(()) => panic!("{name}: the store accepted the deployment"),
            Err(error) => error,
        };
        assert_eq!(error.kind(), which.refusal, "{name}: {error}");
        assert!(
            !error.is_retryable(),
            "{name}: refused as retryable: {error}"
        );
        let message = error.message();
        for word in &which.mentions {
            assert!(
                message.contains(word.as_str()),
                "{name}: the refusal does not name {word:?}: {message}"
            );
        }
    }
}
