//! A PostgreSQL restart in the middle of a busy run, on a private server
//! (`initdb` + `pg_ctl` in a temporary directory; the shared server at
//! `TENURE_PG_URL` is never stopped). The scenario is
//! [`tenure_test_support::servers::workload`]; this file only builds the server and
//! the store.
//!
//! Without PostgreSQL's server programs it prints one skip line (and fails
//! under `TENURE_REQUIRE_SERVICES=1`).

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tenure_backend_postgres::{PgStore, PgStoreConfig};
use tenure_test_support::servers::workload::{rides_through_restart, DOWN_FOR};
use tenure_test_support::servers::PrivatePostgres;

/// Bound on each call and on waiting for a connection, so calls during the
/// outage fail quickly instead of hanging.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_and_keeper_ride_through_a_server_restart() {
    const TEST: &str = "workload_and_keeper_ride_through_a_server_restart";
    if let Some(reason) = PrivatePostgres::unavailable_reason() {
        if tenure_conformance::services_required() {
            panic!(
                "{TEST}: {reason}, but {}=1 requires it",
                tenure_conformance::REQUIRE_SERVICES_VAR
            );
        }
        let _ = std::io::stderr().write_all(format!("SKIPPED {TEST}: {reason}\n").as_bytes());
        return;
    }
    let server = PrivatePostgres::start()
        .await
        .unwrap_or_else(|error| panic!("{TEST}: start a private server: {error}"));
    let store = PgStore::connect(
        &PgStoreConfig::new(server.url())
            .schema("restart")
            .max_connections(8)
            .acquire_timeout(CALL_TIMEOUT)
            .operation_timeout(CALL_TIMEOUT),
    )
    .await
    .unwrap_or_else(|error| panic!("{TEST}: connect to the private server: {error}"));

    let report = rides_through_restart(Arc::new(store.clone()), server.restart(DOWN_FOR)).await;
    let _ = std::io::stderr().write_all(format!("{TEST}: postgres {report}\n").as_bytes());
    store.close().await;
}
