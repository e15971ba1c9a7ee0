//! The job-queue cases of the conformance kit against Redis, one test per
//! case, each in its own namespace, with the same factory as the lease cases.
//! Needs `TENURE_REDIS_URL`; without it every case prints one skip line (and
//! fails under `TENURE_REQUIRE_SERVICES=1`).

mod common;
mod scratch;

tenure_conformance::tenure_queue_conformance!(common::RedisFactory::from_env());
