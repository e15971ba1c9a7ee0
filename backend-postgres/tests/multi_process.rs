//! Several OS processes racing on one schema.
//!
//! The test re-invokes its own binary as child processes (selected by an
//! environment variable), each with its own connection pool, and plays the
//! history of `tenure_test_support::history`: random admissions over three scopes,
//! renewals, transitions, takeovers of expired records and one contested
//! takeover per round. The parent checks mutual exclusion, single winners
//! and fences from the answers and from the schema, which is dropped
//! afterwards. Without `TENURE_PG_URL` it prints one skip line (and fails
//! under `TENURE_REQUIRE_SERVICES=1`).

mod support;

use std::panic::AssertUnwindSafe;

use tenure_test_support::history;

const TEST_NAME: &str = "processes_race_on_one_schema";
const WORKER_VAR: &str = "TENURE_PG_RACE_WORKER";
const SCHEMA_VAR: &str = "TENURE_PG_RACE_SCHEMA";
const PROCESSES: usize = 3;
const ROUNDS: usize = 15;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn processes_race_on_one_schema() {
    let Some(url) = support::server_url(TEST_NAME) else {
        return;
    };
    match std::env::var(WORKER_VAR) {
        Ok(worker) => play_as_child(&url, &worker),
        Err(_) => check_race_as_parent(&url),
    }
}

fn play_as_child(url: &str, worker: &str) {
    let schema = std::env::var(SCHEMA_VAR).expect("the parent names the schema");
    let seed = history::seed();
    let runtime = runtime();
    let store = runtime
        .block_on(support::connect(url, &schema))
        .expect("the child connects");
    history::wait_for_go();
    runtime.block_on(history::play_child(&store, worker, ROUNDS, seed));
    runtime.block_on(store.close());
}

fn check_race_as_parent(url: &str) {
    let runtime = runtime();
    let schema = support::fresh_schema();
    let store = runtime
        .block_on(support::connect(url, &schema))
        .expect("the parent creates the schema");
    let seed = history::seed();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        runtime.block_on(history::prepare(&store, ROUNDS));
        let results = history::run_children(
            TEST_NAME,
            WORKER_VAR,
            PROCESSES,
            &[
                (SCHEMA_VAR, schema.clone()),
                (history::SEED_VAR, seed.to_string()),
            ],
        );
        let summary = runtime.block_on(history::check_history(&store, &results, ROUNDS));
        eprintln!("{PROCESSES} processes, seed {seed}: {summary:?}");
    }));
    if let Err(error) = runtime.block_on(store.drop_schema()) {
        panic!("{TEST_NAME}: {error}");
    }
    if let Err(panic) = outcome {
        eprintln!("{TEST_NAME} failed with seed {seed}");
        std::panic::resume_unwind(panic);
    }
}
