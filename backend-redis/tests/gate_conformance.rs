//! The kit's fence-gate cases against Redis, one test per case, each in its
//! own namespace. Needs `TENURE_REDIS_URL`; without it every case prints
//! one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

mod common;
mod scratch;

tenure_conformance::tenure_gate_conformance!(common::RedisFactory::from_env());
