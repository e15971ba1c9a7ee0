//! The whole lease conformance kit against etcd, one test per case, each
//! under its own key prefix of one private cluster per test binary.

mod common;

tenure_conformance::tenure_conformance!(common::EtcdFactory);

/// The recorded workload under faults, judged by the history checker.
mod nemesis {
    use super::*;

    tenure_conformance::tenure_nemesis_conformance!(common::EtcdFactory);
}
