//! The conformance kit's job-queue cases against PostgreSQL, one test per
//! case, each in its own schema. Skipped (one line each) when
//! `TENURE_PG_URL` is unset.

mod support;

tenure_conformance::tenure_queue_conformance!(support::PgFactory::from_env());
