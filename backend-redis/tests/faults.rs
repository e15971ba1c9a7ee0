//! Network faults between the Redis store and its server: the kit's
//! network suite (a call that gets no answer, a connection dropped
//! mid-call, a reply lost after the script ran, a keeper riding through or
//! fail-stopping in an outage), through [`common::RedisFactory`]'s network
//! capability: a store connected through a `FaultProxy` (operation timeout
//! of half a second), judged by a store connected straight to the server
//! in the same fresh namespace, deleted afterwards. Without
//! `TENURE_REDIS_URL` each test prints one skip line (and fails under
//! `TENURE_REQUIRE_SERVICES=1`).

mod common;
mod scratch;

tenure_conformance::tenure_network_conformance!(common::RedisFactory::from_env());

/// The recorded workload under faults, judged by the history checker.
mod nemesis {
    use super::*;

    tenure_conformance::tenure_nemesis_conformance!(common::RedisFactory::from_env());

    /// The failover scenario with every write confirmed by the replica
    /// (`RedisConfig::wait_for_replicas`): acknowledged writes must
    /// survive every failover too.
    #[test]
    fn nemesis_failover_waiting_for_replicas() {
        tenure_conformance::suites::nemesis::run_named(
            common::RedisFactory::waiting_for_replicas(),
            module_path!(),
            "nemesis_failover_waiting_for_replicas",
            tenure_conformance::suites::nemesis::nemesis_failover,
        );
    }
}
