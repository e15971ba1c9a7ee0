//! Network faults between the PostgreSQL store and its server: a call that
//! gets no answer, a connection dropped mid-call, a reply lost after the
//! commit, an admission cut at each step of its transaction, and a keeper
//! riding through (or fail-stopping in) an outage.
//!
//! Each test runs one of `test_support::scenarios` on a store connected
//! through a [`FaultProxy`], judged by a store connected straight to the
//! server in the same fresh schema (dropped afterwards). The proxied pool
//! waits at most half a second for a connection: the pool checks an idle
//! connection before handing it out, so a silent server answers
//! `Timeout` within that bound. Without `TENURE_PG_URL` each test prints
//! one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use backend_postgres::{PgStore, PgStoreConfig};
use test_support::scenarios::{self, CutAfter, Rig, ScopeAfterCut};
use test_support::FaultProxy;

/// How long the proxied pool waits for a connection (checked or new).
const CONNECTION_WAIT: Duration = Duration::from_millis(500);
/// Tries at connecting the proxied store.
const CONNECT_ATTEMPTS: u32 = 10;
/// Connections of the proxied pool.
const PROXIED_POOL_SIZE: u32 = 2;
/// The request that commits an admission's transaction: sqlx sends `COMMIT`
/// as a simple-query message (`Q`, length 11, the text, a NUL). The whole
/// message, because the bare word also occurs in the transaction's
/// `BEGIN ISOLATION LEVEL READ COMMITTED`.
const COMMIT: &[u8] = b"Q\x00\x00\x00\x0bCOMMIT\x00";

/// Runs `scenario` on a rig in a fresh schema, then stops the proxy, closes
/// the proxied pool and drops the schema, even when the scenario panics
/// (the panic is then re-raised). Skips when no server is configured.
async fn with_rig<F, Fut>(test: &str, scenario: F)
where
    F: FnOnce(Rig) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    support::with_store(test, |direct, url| async move {
        let (proxy, proxied_url) = match FaultProxy::in_front_of(&url).await {
            Ok(started) => started,
            Err(error) => panic!("{test}: could not start the proxy: {error}"),
        };
        let proxy = Arc::new(proxy);
        let proxied_config = PgStoreConfig::new(proxied_url)
            .schema(direct.schema())
            .max_connections(PROXIED_POOL_SIZE)
            .acquire_timeout(CONNECTION_WAIT);
        let proxied = connect_patiently(test, &proxied_config).await;
        let rig = Rig {
            direct: Arc::new(direct),
            proxied: Arc::new(proxied.clone()),
            proxy: Arc::clone(&proxy),
        };
        let outcome = tokio::spawn(scenario(rig)).await;
        // Stopping the proxy first ends any session a scenario left
        // hanging, so the pool closes and the schema drops without waiting.
        proxy.stop().await;
        proxied.close().await;
        if let Err(error) = outcome {
            match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(error) => panic!("{test}: the scenario did not finish: {error}"),
            }
        }
    })
    .await;
}

/// Connects the proxied store, trying again while connecting times out: on
/// a busy machine a new session can take longer than the short
/// [`CONNECTION_WAIT`] the scenarios need.
async fn connect_patiently(test: &str, config: &PgStoreConfig) -> PgStore {
    let mut attempts_left = CONNECT_ATTEMPTS;
    loop {
        attempts_left -= 1;
        match PgStore::connect(config).await {
            Ok(store) => return store,
            Err(error) if error.is_retryable() && attempts_left > 0 => {}
            Err(error) => panic!("{test}: could not connect through the proxy: {error}"),
        }
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

/// An admission is one transaction: cut before its `COMMIT` (after the
/// duplicate probe, or after the holders were interrupted inside it) it
/// rolls back whole; cut after, it lands whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted() {
    with_rig(
        "admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted",
        |rig| async move {
            for (cut, expected) in [
                (CutAfter::NewId, ScopeAfterCut::AsBefore),
                (CutAfter::NewOwner, ScopeAfterCut::AsBefore),
                (CutAfter::Bytes(COMMIT), ScopeAfterCut::FullyAdmitted),
            ] {
                scenarios::admission_cut_mid_flight(rig.clone(), cut, Some(expected)).await;
            }
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
                CutAfter::Bytes(COMMIT),
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
