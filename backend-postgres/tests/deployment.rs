//! Deployments the PostgreSQL store must refuse at connect: the kit's
//! deployment suite, through [`support::PgFactory`]'s deployment
//! capability (a schema written by a newer version of tenure, staged in a
//! fresh schema and dropped afterwards). Without `TENURE_PG_URL` it prints
//! one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

mod support;

tenure_conformance::tenure_deployment_conformance!(support::PgFactory::from_env());
