//! The job-queue cases of the conformance kit against etcd, one test per
//! case, each under its own key prefix of one private cluster per test
//! binary.

mod common;

tenure_conformance::tenure_queue_conformance!(common::EtcdFactory);
