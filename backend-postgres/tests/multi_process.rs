//! Several OS processes racing on one schema: the kit's process suites,
//! through [`support::PgFactory`]'s process capability (a fresh schema per
//! test, opened by each child with its own connection pool, dropped
//! afterwards). The test binary re-invokes itself for the children. Without
//! `TENURE_PG_URL` each test prints one skip line (and fails under
//! `TENURE_REQUIRE_SERVICES=1`).

mod support;

tenure_conformance::tenure_process_conformance!(support::PgFactory::from_env());
tenure_conformance::tenure_queue_process_conformance!(support::PgFactory::from_env());
