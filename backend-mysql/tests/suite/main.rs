//! Every test of the MySQL backend, in one binary: the whole conformance
//! kit (`kit`, one module per area), the kit's variant cases at REPEATABLE
//! READ, at SERIALIZABLE and as a least-privilege account, and what the
//! kit cannot reach. Tests on the shared server read `TENURE_MYSQL_URL`
//! (else start a private MariaDB server), each in a fresh database dropped
//! afterwards.

mod deployment;
mod fences;
mod isolation;
mod least_privilege;
mod sql_modes;
mod support;

/// The conformance kit, every area, in a fresh database per test.
mod kit {
    use crate::support;

    tenure_conformance::tenure_kit!(support::MySqlFactory::from_env());
}
