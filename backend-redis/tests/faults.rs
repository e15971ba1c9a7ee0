//! Network faults between the Redis store and its server: a call that gets
//! no answer, a connection dropped mid-call, a reply lost after the script
//! ran, and a keeper riding through (or fail-stopping in) an outage.
//!
//! Each test runs one of `tenure_test_support::scenarios` on a store connected
//! through a [`FaultProxy`] (operation timeout of half a second), judged by
//! a store connected straight to the server in the same fresh namespace,
//! deleted afterwards. Without `TENURE_REDIS_URL` each prints one skip line
//! (and fails under `TENURE_REQUIRE_SERVICES=1`).

mod common;
mod scratch;

use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use common::RedisFactory;
use tenure_backend_redis::{RedisConfig, RedisStore};
use tenure_conformance::Factory as _;
use tenure_test_support::scenarios::{self, CutAfter, Rig, ScopeAfterCut};
use tenure_test_support::FaultProxy;

const URL_VAR: &str = "TENURE_REDIS_URL";
/// Bound on one call of the proxied store, reconnecting included.
const OPERATION_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs `scenario` on a rig in a fresh namespace, then stops the proxy and
/// deletes the namespace, even when the scenario panics (the panic is then
/// re-raised). Skips when no server is configured.
async fn with_rig<F, Fut, T>(test: &str, scenario: F) -> Option<T>
where
    F: FnOnce(Rig) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let factory = RedisFactory::from_env();
    let (Some(url), None) = (
        tenure_conformance::service_url(URL_VAR),
        factory.unavailable_reason(),
    ) else {
        assert!(
            !tenure_conformance::services_required(),
            "{test}: {URL_VAR} is not set, but {}=1 requires it",
            tenure_conformance::REQUIRE_SERVICES_VAR
        );
        let _ = std::io::stderr()
            .write_all(format!("SKIPPED {test}: {URL_VAR} is not set\n").as_bytes());
        return None;
    };
    let direct = match factory.create().await {
        Ok(subject) => subject.store,
        Err(error) => panic!("{test}: could not create a store: {error}"),
    };
    let (proxy, proxied_url) = match FaultProxy::in_front_of(&url).await {
        Ok(started) => started,
        Err(error) => panic!("{test}: could not start the proxy: {error}"),
    };
    let proxy = Arc::new(proxy);
    let proxied_config = RedisConfig::new(proxied_url, direct.config().namespace())
        .operation_timeout(OPERATION_TIMEOUT)
        .connect_timeout(OPERATION_TIMEOUT);
    let proxied = match RedisStore::connect(proxied_config).await {
        Ok(store) => store,
        Err(error) => panic!("{test}: could not connect through the proxy: {error}"),
    };
    let rig = Rig {
        direct: Arc::new(direct.clone()),
        proxied: Arc::new(proxied),
        proxy: Arc::clone(&proxy),
    };
    let outcome = tokio::spawn(scenario(rig)).await;
    proxy.stop().await;
    if let Err(error) = factory.teardown(&direct).await {
        panic!("{test}: could not delete the namespace: {error}");
    }
    match outcome {
        Ok(answer) => Some(answer),
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("{test}: the scenario did not finish: {error}"),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_call_is_retryable_unknown() {
    with_rig(
        "unanswered_call_is_retryable_unknown",
        scenarios::unanswered_call_is_retryable_unknown,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_connection_is_retryable_unknown() {
    with_rig(
        "reset_connection_is_retryable_unknown",
        scenarios::reset_connection_is_retryable_unknown,
    )
    .await;
}

/// One script is one admission: once it reached the server, the admission
/// lands whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted() {
    with_rig(
        "admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted",
        |rig| {
            scenarios::admission_cut_mid_flight(
                rig,
                CutAfter::NewId,
                Some(ScopeAfterCut::FullyAdmitted),
            )
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_dropped_after_commit_is_resolved_by_next_operation() {
    with_rig(
        "reply_dropped_after_commit_is_resolved_by_next_operation",
        |rig| {
            scenarios::reply_dropped_after_commit_is_resolved_by_next_operation(
                rig,
                CutAfter::NewId,
            )
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_rides_through_short_outage_and_fail_stops_through_long_one() {
    with_rig(
        "keeper_rides_through_short_outage_and_fail_stops_through_long_one",
        scenarios::keeper_rides_through_short_outage_and_fail_stops_through_long_one,
    )
    .await;
}
