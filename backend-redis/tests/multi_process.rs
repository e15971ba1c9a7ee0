//! Several OS processes racing on one namespace: the kit's process suites,
//! through [`common::RedisFactory`]'s process capability (a fresh namespace
//! per test, opened by each child with its own connection, deleted
//! afterwards). The test binary re-invokes itself for the children. Without
//! `TENURE_REDIS_URL` each test prints one skip line (and fails under
//! `TENURE_REQUIRE_SERVICES=1`).

mod common;
mod scratch;

tenure_conformance::tenure_process_conformance!(common::RedisFactory::from_env());
tenure_conformance::tenure_queue_process_conformance!(common::RedisFactory::from_env());
