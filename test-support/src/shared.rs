//! The PostgreSQL, Redis and MariaDB servers the tests run on, found with
//! no set-up.
//!
//! A test binary uses the server an environment variable names
//! ([`PG_URL_VAR`], [`REDIS_URL_VAR`], [`MYSQL_URL_VAR`]; `.ci/run` sets
//! them, to the shared
//! servers it starts). Without one, it starts a private server of its own,
//! once, on a free loopback port (as the etcd tests always do), when the
//! server programs are installed; the server stops and its files are
//! deleted when the binary exits, however it exits. So `cargo test` on a
//! machine with PostgreSQL and Redis installed covers every backend with
//! nothing to configure. Without the programs either, the answer says what
//! to install, and the test skips (or fails, under
//! `TENURE_REQUIRE_SERVICES=1`).

use std::future::Future;
use std::io;

use tenure_conformance::service_url;

use crate::per_binary::PerBinary;
use crate::servers::{PrivateMariadb, PrivatePostgres, PrivateRedis};
use crate::watchdog::Lifeline;

/// The variable naming the PostgreSQL server to run on.
pub const PG_URL_VAR: &str = "TENURE_PG_URL";

/// The variable naming the Redis server to run on.
pub const REDIS_URL_VAR: &str = "TENURE_REDIS_URL";

/// The variable naming the MySQL or MariaDB server (and database) to run
/// on.
pub const MYSQL_URL_VAR: &str = "TENURE_MYSQL_URL";

/// A private server kept for the whole binary, with the shell that cleans
/// up after it.
struct Kept<T> {
    server: T,
    _lifeline: Lifeline,
}

static POSTGRES: PerBinary<Kept<PrivatePostgres>> = PerBinary::new();
static REDIS: PerBinary<Kept<PrivateRedis>> = PerBinary::new();
static MARIADB: PerBinary<Kept<PrivateMariadb>> = PerBinary::new();

/// The PostgreSQL server to run on: [`PG_URL_VAR`]'s, else this binary's
/// private server (started on first use).
///
/// # Errors
///
/// Why there is none: the variable is unset and the server programs are
/// missing (the message says what to install), or the private server did
/// not start.
pub fn postgres_url() -> Result<String, String> {
    if let Some(url) = service_url(PG_URL_VAR) {
        return Ok(url);
    }
    if let Some(why) = PrivatePostgres::unavailable_reason() {
        return Err(format!(
            "{PG_URL_VAR} is not set and {why}: install PostgreSQL's server \
             (Debian: apt-get install postgresql) or set {PG_URL_VAR}"
        ));
    }
    POSTGRES
        .get_or_start("a private PostgreSQL server", || {
            kept(PrivatePostgres::start(), PrivatePostgres::cleanup_script)
        })
        .map(|kept| kept.server.url())
}

/// The Redis server to run on: [`REDIS_URL_VAR`]'s, else this binary's
/// private server (started on first use).
///
/// # Errors
///
/// As [`postgres_url`].
pub fn redis_url() -> Result<String, String> {
    if let Some(url) = service_url(REDIS_URL_VAR) {
        return Ok(url);
    }
    if let Some(why) = PrivateRedis::unavailable_reason() {
        return Err(format!(
            "{REDIS_URL_VAR} is not set and {why}: install Redis \
             (Debian: apt-get install redis-server) or set {REDIS_URL_VAR}"
        ));
    }
    REDIS
        .get_or_start("a private Redis server", || {
            kept(PrivateRedis::start(), PrivateRedis::cleanup_script)
        })
        .map(|kept| kept.server.url())
}

/// The MySQL server to run on: [`MYSQL_URL_VAR`]'s, else this binary's
/// private MariaDB server (started on first use).
///
/// # Errors
///
/// As [`postgres_url`].
pub fn mysql_url() -> Result<String, String> {
    if let Some(url) = service_url(MYSQL_URL_VAR) {
        return Ok(url);
    }
    if let Some(why) = PrivateMariadb::unavailable_reason() {
        return Err(format!(
            "{MYSQL_URL_VAR} is not set and {why}: install MariaDB's server \
             (Debian: apt-get install mariadb-server) or set {MYSQL_URL_VAR}"
        ));
    }
    MARIADB
        .get_or_start("a private MariaDB server", || {
            kept(PrivateMariadb::start(), PrivateMariadb::cleanup_script)
        })
        .map(|kept| kept.server.url())
}

/// [`postgres_url`] for `test`, or `None` after reporting it skipped
/// (failed, under `TENURE_REQUIRE_SERVICES=1`) with the reason.
pub fn postgres_url_for(test: &str) -> Option<String> {
    found_for(test, postgres_url())
}

/// [`redis_url`] for `test`, or `None` after reporting it skipped (failed,
/// under `TENURE_REQUIRE_SERVICES=1`) with the reason.
pub fn redis_url_for(test: &str) -> Option<String> {
    found_for(test, redis_url())
}

/// [`mysql_url`] for `test`, or `None` after reporting it skipped (failed,
/// under `TENURE_REQUIRE_SERVICES=1`) with the reason.
pub fn mysql_url_for(test: &str) -> Option<String> {
    found_for(test, mysql_url())
}

fn found_for(test: &str, found: Result<String, String>) -> Option<String> {
    found
        .map_err(|why| tenure_conformance::skip_unless_required(test, &why))
        .ok()
}

/// Starts a server and the lifeline that cleans up after it.
async fn kept<T>(
    start: impl Future<Output = io::Result<T>>,
    cleanup_script: fn(&T) -> String,
) -> io::Result<Kept<T>> {
    let server = start.await?;
    let lifeline = Lifeline::spawn(&cleanup_script(&server))?;
    Ok(Kept {
        server,
        _lifeline: lifeline,
    })
}
