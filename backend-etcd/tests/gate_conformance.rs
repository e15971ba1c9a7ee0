//! The kit's fence-gate cases against etcd, one test per case, each under
//! its own key prefix of one private cluster per test binary.

mod common;

tenure_conformance::tenure_gate_conformance!(common::EtcdFactory);
