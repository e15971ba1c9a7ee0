//! Several OS processes racing on one namespace.
//!
//! The test re-invokes its own binary as child processes (selected by an
//! environment variable), each with its own connection, and plays the
//! history of `tenure_test_support::history`: random admissions over three scopes,
//! renewals, transitions, takeovers of expired records and one contested
//! takeover per round. The parent checks mutual exclusion, single winners
//! and fences from the answers and from the namespace, which is deleted
//! afterwards. Without `TENURE_REDIS_URL` it prints one skip line (and
//! fails under `TENURE_REQUIRE_SERVICES=1`).

use std::io::Write as _;
use std::panic::AssertUnwindSafe;

use tenure_backend_redis::{RedisConfig, RedisStore};
use tenure_test_support::history;

const TEST_NAME: &str = "processes_race_on_one_namespace";
const URL_VAR: &str = "TENURE_REDIS_URL";
const WORKER_VAR: &str = "TENURE_REDIS_RACE_WORKER";
const NAMESPACE_VAR: &str = "TENURE_REDIS_RACE_NAMESPACE";
const PROCESSES: usize = 3;
const ROUNDS: usize = 15;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn processes_race_on_one_namespace() {
    let Some(url) = tenure_conformance::service_url(URL_VAR) else {
        assert!(
            !tenure_conformance::services_required(),
            "{TEST_NAME}: {URL_VAR} is not set, but {}=1 requires it",
            tenure_conformance::REQUIRE_SERVICES_VAR
        );
        let _ = std::io::stderr()
            .write_all(format!("SKIPPED {TEST_NAME}: {URL_VAR} is not set\n").as_bytes());
        return;
    };
    match std::env::var(WORKER_VAR) {
        Ok(worker) => play_as_child(&url, &worker),
        Err(_) => check_race_as_parent(&url),
    }
}

fn play_as_child(url: &str, worker: &str) {
    let namespace = std::env::var(NAMESPACE_VAR).expect("the parent names the namespace");
    let runtime = runtime();
    let store = runtime
        .block_on(RedisStore::connect(RedisConfig::new(url, namespace)))
        .expect("the child connects");
    history::wait_for_go();
    runtime.block_on(history::play_child(&store, worker, ROUNDS, history::seed()));
}

fn check_race_as_parent(url: &str) {
    let runtime = runtime();
    let namespace = format!("multi-process:{}", tenure_lease_core::generate_id());
    let store = runtime
        .block_on(RedisStore::connect(RedisConfig::new(url, &namespace)))
        .expect("the parent connects");
    let seed = history::seed();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        runtime.block_on(history::prepare(&store, ROUNDS));
        let results = history::run_children(
            TEST_NAME,
            WORKER_VAR,
            PROCESSES,
            &[
                (NAMESPACE_VAR, namespace.clone()),
                (history::SEED_VAR, seed.to_string()),
            ],
        );
        let summary = runtime.block_on(history::check_history(&store, &results, ROUNDS));
        eprintln!("{PROCESSES} processes, seed {seed}: {summary:?}");
    }));
    if let Err(error) = runtime.block_on(store.delete_namespace()) {
        panic!("{TEST_NAME}: could not delete {namespace}: {error}");
    }
    if let Err(panic) = outcome {
        eprintln!("{TEST_NAME} failed with seed {seed}");
        std::panic::resume_unwind(panic);
    }
}
