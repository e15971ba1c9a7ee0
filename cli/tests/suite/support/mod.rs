//! What the CLI's tests share: the built `tenure` binary, run against a
//! store the test names by URL, and stores on each backend that are
//! removed afterwards, even when the test panics.
//!
//! * SQLite: a file in a fresh temporary directory;
//! * PostgreSQL: a fresh schema on the server `TENURE_PG_URL` names (else
//!   the binary's private server), dropped afterwards;
//! * Redis: a fresh key namespace on the server `TENURE_REDIS_URL` names
//!   (else the binary's private server), deleted afterwards.
//!
//! With neither a variable nor the server programs, a server test reports
//! itself skipped with what to install, and fails when
//! `TENURE_REQUIRE_SERVICES=1`.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use assert_cmd::Command;
use futures_util::FutureExt as _;

pub mod browser;

/// The `tenure` binary with `--url url` and `args`, the environment's
/// `TENURE_URL` removed.
pub fn tenure(url: &str, args: &[&str]) -> Command {
    let mut command = Command::cargo_bin("tenure").expect("the tenure binary is built");
    command
        .env_remove("TENURE_URL")
        .arg("--url")
        .arg(url)
        .args(args);
    command
}

/// The `tenure` binary with `args` only, `TENURE_URL` removed.
pub fn tenure_bare(args: &[&str]) -> Command {
    let mut command = Command::cargo_bin("tenure").expect("the tenure binary is built");
    command.env_remove("TENURE_URL").args(args);
    command
}

/// What the command printed on stdout, as JSON; panics unless it ran
/// successfully.
pub fn json(command: &mut Command) -> serde_json::Value {
    let output = command.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&output).expect("the command printed JSON")
}

/// A name no other test run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", tenure::generate_id().replace('-', "_"))
}

/// A loopback port nobody listens on (bound, then released).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// A store on one backend for one test: its URL, and the store itself
/// (opened through the library) to seed and inspect.
pub struct Subject {
    pub url: String,
    pub store: Arc<dyn tenure::Store>,
}

/// What a store leaves to remove after its test.
enum Cleanup {
    /// A SQLite file's directory, removed when dropped.
    Directory(tempfile::TempDir),
    Postgres(tenure::postgres::PgStore),
    Redis(tenure::redis::RedisStore),
}

/// Runs `test` on a store in a new SQLite file.
pub async fn with_sqlite<F, Fut>(test: F)
where
    F: FnOnce(Subject) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let store = tenure::connect(&url).await.expect("the SQLite store opens");
    run(Subject { url, store }, Cleanup::Directory(dir), test).await;
}

/// The base URL of the PostgreSQL server, or `None` after reporting the
/// test skipped (failing it when services are required).
pub fn pg_base(test: &str) -> Option<String> {
    tenure_test_support::shared::postgres_url_for(test)
}

/// The base URL of the Redis server, or `None` after reporting the test
/// skipped (failing it when services are required).
pub fn redis_base(test: &str) -> Option<String> {
    tenure_test_support::shared::redis_url_for(test)
}

/// `base` with the query parameter `name=value` added.
fn with_parameter(base: &str, name: &str, value: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}{name}={value}")
}

/// The URL of a fresh PostgreSQL schema, not created, and the config that
/// drops it.
pub fn pg_fresh_url(base: &str) -> (String, tenure::postgres::PgStoreConfig) {
    let schema = unique("cli");
    let config = tenure::postgres::PgStoreConfig::new(base).schema(&schema);
    (with_parameter(base, "schema", &schema), config)
}

/// Drops the schema `config` names, with everything in it.
pub async fn drop_pg_schema(config: tenure::postgres::PgStoreConfig) {
    let store = tenure::postgres::PgStore::connect(config)
        .await
        .expect("the admin store opens");
    store.drop_schema().await.expect("the schema is dropped");
}

/// Runs `test` on a store in a fresh, migrated PostgreSQL schema, dropped
/// afterwards; skipped without `TENURE_PG_URL`.
pub async fn with_postgres<F, Fut>(name: &str, test: F)
where
    F: FnOnce(Subject) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(base) = pg_base(name) else { return };
    let (url, config) = pg_fresh_url(&base);
    let admin = tenure::postgres::PgStore::connect(config)
        .await
        .expect("the PostgreSQL store opens");
    let store = tenure::connect(&url)
        .await
        .expect("the PostgreSQL store opens");
    run(Subject { url, store }, Cleanup::Postgres(admin), test).await;
}

/// Runs `test` on a store in a fresh Redis namespace, deleted afterwards;
/// skipped without `TENURE_REDIS_URL`.
pub async fn with_redis<F, Fut>(name: &str, test: F)
where
    F: FnOnce(Subject) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(base) = redis_base(name) else { return };
    let namespace = unique("cli");
    let url = with_parameter(&base, "namespace", &namespace);
    let admin =
        tenure::redis::RedisStore::connect(tenure::redis::RedisConfig::new(base, namespace))
            .await
            .expect("the Redis store opens");
    let store = tenure::connect(&url).await.expect("the Redis store opens");
    run(Subject { url, store }, Cleanup::Redis(admin), test).await;
}

/// Runs `test`, cleans up, then re-raises any panic of the test.
async fn run<F, Fut>(subject: Subject, cleanup: Cleanup, test: F)
where
    F: FnOnce(Subject) -> Fut,
    Fut: Future<Output = ()>,
{
    let outcome = AssertUnwindSafe(test(subject)).catch_unwind().await;
    match cleanup {
        Cleanup::Directory(dir) => drop(dir),
        Cleanup::Postgres(store) => store.drop_schema().await.expect("the schema is dropped"),
        Cleanup::Redis(store) => {
            store
                .delete_namespace()
                .await
                .expect("the namespace is deleted");
        }
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
