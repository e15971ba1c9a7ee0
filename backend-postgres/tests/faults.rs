//! Network faults between the PostgreSQL store and its server: a call that
//! gets no answer, a connection dropped mid-call, a reply lost after the
//! commit, an admission cut at each step of its transaction, and a keeper
//! riding through (or fail-stopping in) an outage, and calls whose replies
//! never come, cut short by the store's operation timeout.
//!
//! Each test but the last runs one of `tenure_test_support::scenarios` on a store connected
//! through a [`FaultProxy`], judged by a store connected straight to the
//! server in the same fresh schema (dropped afterwards). The proxied pool
//! waits at most half a second for a connection: the pool checks an idle
//! connection before handing it out, so a silent server answers
//! `Timeout` within that bound. Without `TENURE_PG_URL` each test prints
//! one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_backend_postgres::{PgStore, PgStoreConfig};
use tenure_lease_core::{Admission, AdmitRequest, AdmitStrategy, ErrorKind, LeaseStore, Renewal};
use tenure_test_support::scenarios::{self, CutAfter, Rig, ScopeAfterCut};
use tenure_test_support::FaultProxy;

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
/// The request that interrupts the holders inside an admission's
/// transaction: the only one carrying the interrupted records' stop reason.
const INTERRUPT: &[u8] = tenure_lease_core::backend::rules::INTERRUPTED_BY_ADMISSION.as_bytes();

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
        let proxied_config = PgStoreConfig::new(plaintext(&proxied_url))
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

/// An admission that interrupts first reads the holders on its own (the
/// first request naming the new id), then interrupts them in a transaction:
/// cut after the read, or after the interrupt (before its `COMMIT`), it
/// leaves the scope as before; cut after the `COMMIT`, it lands whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted() {
    with_rig(
        "admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted",
        |rig| async move {
            for (cut, expected) in [
                (CutAfter::NewId, ScopeAfterCut::AsBefore),
                (CutAfter::Bytes(INTERRUPT), ScopeAfterCut::AsBefore),
                (CutAfter::Bytes(COMMIT), ScopeAfterCut::FullyAdmitted),
            ] {
                scenarios::admission_cut_mid_flight(rig.clone(), cut, Some(expected)).await;
            }
        },
    )
    .await;
}

/// An admission into a free scope is one call that commits on its own: the
/// reply to the request naming the new id is the one sent after its commit.
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

/// A renew whose request reached the server but whose reply never comes
/// answers `Timeout`, outcome unknown, once the store's operation timeout
/// runs out, instead of waiting on the silent connection. So does an
/// admission cut inside its transaction, which is then rolled back whole:
/// the record never appears, and its scope and holder are as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_with_lost_reply_times_out_after_operation_timeout() {
    const TEST: &str = "renew_with_lost_reply_times_out_after_operation_timeout";
    const OPERATION_TIMEOUT: Duration = Duration::from_millis(300);
    /// Room for a busy machine beyond the timeout, in the bounds below.
    const SLACK: Duration = Duration::from_secs(3);
    const LEASE: Duration = Duration::from_secs(600);
    support::with_store(TEST, |direct, url| async move {
        let (proxy, proxied_url) = match FaultProxy::in_front_of(&url).await {
            Ok(started) => started,
            Err(error) => panic!("{TEST}: could not start the proxy: {error}"),
        };
        let proxied = connect_patiently(
            TEST,
            &PgStoreConfig::new(plaintext(&proxied_url))
                .schema(direct.schema())
                .max_connections(PROXIED_POOL_SIZE)
                .acquire_timeout(CONNECTION_WAIT)
                .operation_timeout(OPERATION_TIMEOUT),
        )
        .await;
        let request = AdmitRequest::new("renewed-into-silence", "worker")
            .scope("silence")
            .ttl(LEASE);
        let claim = match direct.admit(&request).await {
            Ok(Admission::Admitted { record, .. }) => record.claim().expect("claim"),
            other => panic!("{TEST}: admission answered {other:?}"),
        };

        proxy.drop_reply_after(claim.id.as_bytes());
        let started = Instant::now();
        let renewal = tokio::spawn({
            let proxied = proxied.clone();
            let claim = claim.clone();
            async move { proxied.renew(&claim, LEASE).await }
        });
        assert!(
            proxy
                .request_reached_server(OPERATION_TIMEOUT + SLACK)
                .await,
            "the renewal never reached the server"
        );
        let answer = tokio::time::timeout(OPERATION_TIMEOUT + SLACK, renewal)
            .await
            .expect("the renewal outlived its operation timeout")
            .expect("renew task");
        let elapsed = started.elapsed();
        let error = answer.expect_err("a renewal without a reply cannot know its outcome");
        assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
        assert!(error.is_outcome_unknown(), "{error}");
        assert!(elapsed >= OPERATION_TIMEOUT, "answered after {elapsed:?}");

        proxy.heal();
        // Applied or not, the renewal changed no owner or fence.
        assert!(
            matches!(
                direct.renew(&claim, LEASE).await,
                Ok(Renewal::Renewed { .. })
            ),
            "the claim lost its record"
        );

        // An admission that interrupts a holder (it has no lease) loses the
        // reply to its interrupt, so its transaction is left open, holding
        // the scope lock and the interrupted holder.
        let holder = AdmitRequest::new("held-before-silence", "worker").scope("silent-scope");
        assert!(
            matches!(direct.admit(&holder).await, Ok(Admission::Admitted { .. })),
            "the holder was not admitted"
        );
        let cut = AdmitRequest::new("admitted-into-silence", "worker")
            .scope("silent-scope")
            .ttl(LEASE)
            .strategy(AdmitStrategy::Interrupt);
        proxy.drop_reply_after(INTERRUPT);
        let admission = tokio::time::timeout(OPERATION_TIMEOUT + SLACK, proxied.admit(&cut))
            .await
            .expect("the admission outlived its operation timeout");
        let error = admission.expect_err("an admission without a reply cannot know its outcome");
        assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
        proxy.heal();
        let retaken = AdmitRequest::new("admitted-after-silence", "other")
            .scope("silent-scope")
            .ttl(LEASE)
            .strategy(AdmitStrategy::Interrupt);
        let retaken = tokio::time::timeout(SLACK, direct.admit(&retaken))
            .await
            .expect("the cut admission kept its scope locked");
        // Rolled back whole: the holder was still there to interrupt.
        match retaken {
            Ok(Admission::Admitted { interrupted, .. }) => {
                let ids: Vec<&str> = interrupted
                    .iter()
                    .map(|record| record.id.as_str())
                    .collect();
                assert_eq!(ids, [holder.id.as_str()]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(direct.get(&cut.id).await.expect("get"), None);
        proxy.stop().await;
        proxied.close().await;
    })
    .await;
}

/// The proxied URL with TLS off: the proxy finds its markers in the bytes it
/// forwards, which a TLS session (negotiated whenever the `tls` feature is
/// on and the server offers it) would hide.
fn plaintext(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=disable")
}
