//! Every test of the PostgreSQL backend, in one binary: the whole
//! conformance kit (`kit`, one module per area: leases, gates, the queue,
//! the nemesis, processes, network faults, a server restart and refused
//! deployments), the kit again at SERIALIZABLE and as a least-privilege
//! role, and what the kit cannot reach. Tests on the shared server read
//! `TENURE_PG_URL`, each in a fresh schema dropped afterwards.

mod conformance_serializable;
mod damage;
mod deployment;
mod faults;
mod fenced_transaction;
mod hardening;
mod least_privilege;
mod postgres;
mod queue;
mod support;

/// The conformance kit, every area, in a fresh schema per test.
mod kit {
    use crate::support;

    tenure_conformance::tenure_kit!(support::PgFactory::from_env());
}
