//! The kit's fence-gate cases against PostgreSQL, one test per case, each
//! in its own schema. Skipped (one line each) when `TENURE_PG_URL` is unset.

mod support;

tenure_conformance::tenure_gate_conformance!(support::PgFactory::from_env());
