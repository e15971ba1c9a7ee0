//! A PostgreSQL restart in the middle of a busy run: the kit's restart
//! suite, on a private server (`initdb` + `pg_ctl` in a temporary
//! directory; the shared server at `TENURE_PG_URL` is never stopped) from
//! [`support::PgFactory`]'s restart capability.
//!
//! Without PostgreSQL's server programs it prints one skip line (and fails
//! under `TENURE_REQUIRE_SERVICES=1`).

mod support;

tenure_conformance::tenure_restart_conformance!(support::PgFactory::from_env());
