//! The whole conformance kit against PostgreSQL, one test per case, each in
//! its own schema. Skipped (one line each) when `TENURE_PG_URL` is unset.

mod support;

tenure_conformance::tenure_conformance!(support::PgFactory::from_env());
