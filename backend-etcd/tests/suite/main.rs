//! Every test of the etcd backend, in one binary: the whole conformance kit
//! (`kit`, one module per area, the opt-in suites the factory offers no
//! capability for reported skipped), and what the kit cannot reach: TLS
//! deployments, member failures and expiry on etcd's own timers (private
//! clusters), damaged and purged rate logs, how counted scopes are kept
//! and damaged slots.

mod common;
mod counted;
mod deployment;
mod faults;
mod rate;
mod timers;

/// The conformance kit, every area, on a fresh key prefix per test.
mod kit {
    use crate::common;

    tenure_conformance::tenure_kit!(common::EtcdFactory);
}
