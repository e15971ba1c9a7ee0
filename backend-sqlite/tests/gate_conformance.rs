//! The kit's fence-gate cases against the SQLite backend, one test per
//! case, with the same factory as the lease kit.

mod common;

use common::SqliteFactory;

tenure_conformance::tenure_gate_conformance!(SqliteFactory::default());
