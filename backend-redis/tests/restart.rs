//! A Redis restart (SIGKILL, then a fresh process on the same append-only
//! file) in the middle of a busy run: the kit's restart suite, on a private
//! server in a temporary directory from [`common::RedisFactory`]'s restart
//! capability; the shared server at `TENURE_REDIS_URL` is never stopped.
//!
//! Without `redis-server` it prints one skip line (and fails under
//! `TENURE_REQUIRE_SERVICES=1`).

mod common;
mod scratch;

tenure_conformance::tenure_restart_conformance!(common::RedisFactory::from_env());
