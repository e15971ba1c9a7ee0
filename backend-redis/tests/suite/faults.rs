//! Faults the kit's factory does not stage: the failover nemesis with every
//! write confirmed by the replica. The kit's network and nemesis suites
//! run from `kit`, through [`common::RedisFactory`]'s capabilities.

use crate::common;

/// The recorded workload under faults, judged by the history checker, in
/// a setting the kit's factory does not stage.
mod nemesis {
    use super::*;

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
