//! Every test of the SQLite backend, in one binary: the whole conformance
//! kit (`kit`, one module per area, the opt-in suites the factory offers no
//! capability for reported skipped), and what the kit cannot see: damaged
//! rows, fence checks in the caller's transaction, the file across
//! reopenings.

mod common;
mod damaged_rows;
mod fenced_transaction;
mod store;

/// The conformance kit, every area, on a fresh database file per test.
mod kit {
    use crate::common;

    tenure_conformance::tenure_kit!(common::SqliteFactory::default());
}
