//! Every test of the Redis backend, in one binary: the whole conformance
//! kit (`kit`, one module per area: leases, gates, the queue, the nemesis,
//! processes, network faults, a server restart and refused deployments),
//! the kit again behind Sentinel and on a Cluster (`topologies`), and what
//! the kit cannot check. Tests on the shared server read
//! `TENURE_REDIS_URL`, each in a fresh namespace deleted afterwards.

mod common;
mod counted;
mod damaged;
mod deployment;
mod faults;
mod fenced_write;
mod scratch;
mod store;
mod topologies;

/// The conformance kit, every area, in a fresh namespace per test.
mod kit {
    use crate::common;

    tenure_conformance::tenure_kit!(common::RedisFactory::from_env());
}
