//! An application role with only the grants the crate docs list: it
//! connects with `MigrationMode::VerifyOnly` and runs every operation (and
//! the conformance kit's variant cases), while an admin role applies the
//! migrations separately.

use crate::support;

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt as _;
use sqlx::postgres::PgConnectOptions;
use tenure_backend_postgres::{MigrationMode, PgStore, PgStoreConfig};
use tenure_lease_core::queue::{
    ClaimRequest, FailAction, JobQueue, JobSettle, NewJob, UniquePolicy,
};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, ErrorKind, ExpiredQuery, LeaseStore, Renewal,
    StatusChange, TakeoverRequest, Transition,
};

use support::{fresh_schema, offset_schema_clock, on_offset_clock, with_store, POOL_SIZE};
use tenure_conformance::offset_clock::ClockOffsetter;

const LONG: Duration = Duration::from_secs(600);

/// The grants of the crate docs' "Least privilege" section, for `role` on
/// `schema`.
fn grants(schema: &str, role: &str) -> String {
    format!(
        "GRANT USAGE ON SCHEMA \"{schema}\" TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON \"{schema}\".leases, \"{schema}\".lease_scopes, \
           \"{schema}\".held_scopes, \"{schema}\".jobs, \"{schema}\".fence_gates, \
           \"{schema}\".rate_logs TO {role}; \
         GRANT SELECT ON \"{schema}\"._sqlx_migrations TO {role}; \
         GRANT USAGE ON SEQUENCE \"{schema}\".fence_seq TO {role}; \
         GRANT EXECUTE ON FUNCTION \"{schema}\".admit_if_free(bigint[], text, text[], text, \
           text, interval, jsonb, boolean), \"{schema}\".admit_if_free_limited(bigint[], text, \
           text[], text, text, interval, jsonb, boolean, bigint, text, integer, bigint, bigint, \
           bigint), \"{schema}\".lock_rate_log(bigint, text, integer, bigint, bigint, bigint), \
           \"{schema}\".spent_rate_log(bigint[], integer, bigint, timestamptz, bigint, bigint), \
           \"{schema}\".admit_counted(bigint[], text, text[], integer[], integer[], text, text, \
           interval, jsonb, boolean, bigint, text, integer, bigint, bigint, bigint) \
           TO {role};"
    )
}

async fn execute(url: &str, sql: &str) {
    if let Err(error) = try_execute(url, sql).await {
        panic!("{sql}: {error}");
    }
}

/// Runs `sql` on a one-connection pool of its own (a pool keeps the
/// future `Send` for the kit's factory).
async fn try_execute(url: &str, sql: &str) -> Result<(), sqlx::Error> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?;
    let outcome = sqlx::raw_sql(sql).execute(&pool).await;
    pool.close().await;
    outcome.map(drop)
}

fn admin_error(error: sqlx::Error) -> tenure_lease_core::Error {
    tenure_lease_core::Error::unavailable(format!("admin statement failed: {error}"))
}

/// The conformance kit's factory for a restricted role: per case, an admin
/// applies the migrations to a fresh schema and creates a role holding only
/// the documented grants, which then connects with
/// `MigrationMode::VerifyOnly`; teardown drops both.
struct RestrictedFactory {
    /// The server, or why there is none.
    url: Result<String, String>,
}

impl RestrictedFactory {
    fn from_env() -> Self {
        RestrictedFactory {
            url: tenure_test_support::shared::postgres_url(),
        }
    }

    /// The role of a case's schema.
    fn role(schema: &str) -> String {
        format!("{schema}_app")
    }

    async fn remove(admin: &str, schema: &str) -> tenure_lease_core::Result<()> {
        let role = Self::role(schema);
        try_execute(
            admin,
            &format!(
                "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE; \
                 DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN \
                   EXECUTE 'DROP OWNED BY {role}'; EXECUTE 'DROP ROLE {role}'; END IF; END $$;"
            ),
        )
        .await
        .map_err(admin_error)
    }
}

#[async_trait::async_trait]
impl tenure_conformance::Factory for RestrictedFactory {
    type Store = PgStore;

    fn unavailable_reason(&self) -> Option<String> {
        self.url.as_ref().err().cloned()
    }

    async fn create(&self) -> tenure_lease_core::Result<tenure_conformance::Subject<PgStore>> {
        let admin = self
            .url
            .as_deref()
            .map_err(|why| tenure_lease_core::Error::new(ErrorKind::Config, why.clone()))?;
        let schema = fresh_schema();
        let role = Self::role(&schema);
        let created = async {
            PgStore::apply_migrations(&PgStoreConfig::new(admin).schema(&schema)).await?;
            try_execute(
                admin,
                &format!("CREATE ROLE {role} LOGIN; {}", grants(&schema, &role)),
            )
            .await
            .map_err(admin_error)?;
            PgStore::connect(
                PgStoreConfig::new(url_as(admin, &role))
                    .schema(&schema)
                    .max_connections(POOL_SIZE)
                    .migrations(MigrationMode::VerifyOnly),
            )
            .await
        }
        .await;
        match created {
            Ok(store) => Ok(tenure_conformance::Subject {
                store,
                clock: tenure_conformance::ClockControl::Real,
            }),
            Err(error) => {
                Self::remove(admin, &schema).await?;
                Err(error)
            }
        }
    }

    /// The case's schema with its clock offset by the admin, opened again
    /// by the restricted role.
    fn clock_offset(&self) -> Option<ClockOffsetter<PgStore>> {
        let admin = self.url.clone().unwrap_or_default();
        Some(std::sync::Arc::new(
            move |store: std::sync::Arc<PgStore>, offset: chrono::TimeDelta| {
                let admin = admin.clone();
                Box::pin(async move {
                    offset_schema_clock(&admin, &store, offset).await?;
                    let schema = store.schema();
                    let url = url_as(&admin, &Self::role(schema));
                    PgStore::connect(
                        PgStoreConfig::new(on_offset_clock(&url, schema))
                            .schema(schema)
                            .max_connections(POOL_SIZE)
                            .migrations(MigrationMode::VerifyOnly),
                    )
                    .await
                    .map(Into::into)
                })
            },
        ))
    }

    async fn teardown(&self, store: &PgStore) -> tenure_lease_core::Result<()> {
        store.close().await;
        match self.url.as_deref() {
            Ok(admin) => Self::remove(admin, store.schema()).await,
            Err(_) => Ok(()),
        }
    }
}

/// The kit's cases a role with fewer privileges can change: the
/// model-based sequences run every operation (every statement), the races
/// and hostile input every path besides.
mod variant {
    tenure_conformance::tenure_variant_conformance!(super::RestrictedFactory::from_env());
}

/// `url` with `role` as its user and no password.
fn url_as(url: &str, role: &str) -> String {
    let options: PgConnectOptions = url.parse().expect("url");
    format!(
        "postgres://{role}@{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("postgres")
    )
}

/// Every operation, as the restricted role.
async fn run_every_operation(app: &PgStore) {
    let admitted = match app
        .admit(&AdmitRequest::new("op", "worker-a").scope("s").ttl(LONG))
        .await
        .expect("admit")
    {
        Admission::Admitted { record, .. } => record,
        other => panic!("{other:?}"),
    };
    let claim = admitted.claim().expect("claim");
    assert!(matches!(
        app.renew(&claim, LONG).await.expect("renew"),
        Renewal::Renewed { .. }
    ));
    app.renew_many(std::slice::from_ref(&claim), LONG)
        .await
        .expect("renew_many");
    assert!(matches!(
        app.transition(&claim, &StatusChange::running())
            .await
            .expect("transition"),
        Transition::Applied(_)
    ));
    let successor = app
        .admit(
            &AdmitRequest::new("successor", "worker-a")
                .scope("s")
                .strategy(AdmitStrategy::Interrupt),
        )
        .await
        .expect("admit interrupting");
    assert!(
        matches!(successor, Admission::Admitted { .. }),
        "{successor:?}"
    );
    app.claim_for_takeover(&TakeoverRequest::fail("successor", "worker-b", "orphaned"))
        .await
        .expect("takeover");
    app.list_expired(&ExpiredQuery::new(Duration::ZERO))
        .await
        .expect("list_expired");
    app.list_by_scope("s").await.expect("list_by_scope");
    // Counted scopes: a free slot, a full scope, and an interruption there.
    for id in ["slot-0", "slot-1"] {
        let admitted = app
            .admit(&AdmitRequest::new(id, "worker-a").counted_scope("pool", 2))
            .await
            .expect("admit into a counted scope");
        assert!(admitted.admitted().is_some(), "{admitted:?}");
    }
    let full = app
        .admit(
            &AdmitRequest::new("slot-taken", "worker-a")
                .counted_scope("pool", 2)
                .strategy(AdmitStrategy::Interrupt),
        )
        .await
        .expect("admit into a full counted scope");
    assert!(
        matches!(&full, Admission::Admitted { interrupted, .. } if interrupted.len() == 1),
        "{full:?}"
    );
    app.list_active().await.expect("list_active");
    app.get("op").await.expect("get");
    app.now().await.expect("now");
    assert_eq!(
        app.count_purgeable(Duration::ZERO)
            .await
            .expect("count_purgeable"),
        3,
        "the two interrupted records and the failed one"
    );
    assert_eq!(
        app.purge(Duration::ZERO).await.expect("purge"),
        3,
        "the two interrupted records and the failed one"
    );

    let jobs: Vec<NewJob> = (0..4)
        .map(|n| {
            NewJob::new("work", serde_json::json!(n))
                .id(format!("job-{n}"))
                .max_attempts(1)
        })
        .collect();
    app.enqueue_batch(&jobs).await.expect("enqueue");
    let claimed = app
        .claim(&ClaimRequest::new("work", "worker-a", LONG).limit(4))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 4);
    app.renew_job(&claimed[0].claim, LONG)
        .await
        .expect("renew_job");
    assert!(matches!(
        app.complete(&claimed[0].claim).await.expect("complete"),
        JobSettle::Settled(_)
    ));
    app.fail(&claimed[1].claim, "boom", FailAction::DeadLetter)
        .await
        .expect("fail");
    app.defer(&claimed[2].claim, &BTreeSet::from(["gpu".to_owned()]))
        .await
        .expect("defer");
    app.reap(Duration::ZERO).await.expect("reap");
    app.take_back(&claimed[3].claim, LONG)
        .await
        .expect("take_back");
    app.list_dead_letters("work", 10)
        .await
        .expect("list_dead_letters");
    app.retry_dead_letter("job-1")
        .await
        .expect("retry_dead_letter");
    app.get_job("job-1").await.expect("get_job");
    app.list_jobs("work", None, 10).await.expect("list_jobs");
    let counted = app.count_jobs().await.expect("count_jobs");
    assert_eq!(counted.len(), 1, "{counted:?}");
    assert_eq!(counted[0].total(), 4, "{counted:?}");
    let keyed =
        || NewJob::new("unique", serde_json::json!({})).unique("k", UniquePolicy::WhileQueued);
    let first = app.enqueue_unique(&keyed()).await.expect("enqueue_unique");
    assert!(first.is_created(), "{first:?}");
    let second = app.enqueue_unique(&keyed()).await.expect("enqueue_unique");
    assert!(!second.is_created(), "{second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_role_verifies_the_schema_and_runs_every_operation() {
    with_store(
        "restricted_role_verifies_the_schema_and_runs_every_operation",
        |admin, url| async move {
            let role = format!(
                "tenure_app_{}",
                tenure_lease_core::generate_id().replace('-', "")
            );
            execute(&url, &format!("CREATE ROLE {role} LOGIN")).await;
            let outcome = AssertUnwindSafe(async {
                execute(&url, &grants(admin.schema(), &role)).await;
                let app_url = url_as(&url, &role);
                let config = PgStoreConfig::new(&app_url)
                    .schema(admin.schema())
                    .max_connections(2);

                // The default mode would create and migrate: refused.
                let error = PgStore::connect(config.clone())
                    .await
                    .expect_err("no CREATE");
                assert_eq!(error.kind(), ErrorKind::Config, "{error}");

                let app = PgStore::connect(config.clone().migrations(MigrationMode::VerifyOnly))
                    .await
                    .expect("verify-only connect");
                run_every_operation(&app).await;
                app.close().await;

                // A schema nobody migrated, and one that lacks a migration.
                let missing = PgStore::connect(
                    config
                        .clone()
                        .schema(fresh_schema())
                        .migrations(MigrationMode::VerifyOnly),
                )
                .await
                .expect_err("not migrated");
                assert_eq!(missing.kind(), ErrorKind::Incompatible, "{missing}");
                assert!(missing.message().contains("apply_migrations"), "{missing}");

                let behind = fresh_schema();
                PgStore::apply_migrations(&PgStoreConfig::new(&url).schema(&behind))
                    .await
                    .expect("apply migrations as admin");
                execute(
                    &url,
                    &format!(
                        "DELETE FROM \"{behind}\"._sqlx_migrations WHERE version = 3; {}",
                        grants(&behind, &role)
                    ),
                )
                .await;
                let error = PgStore::connect(
                    config
                        .clone()
                        .schema(&behind)
                        .migrations(MigrationMode::VerifyOnly),
                )
                .await
                .expect_err("behind");
                execute(&url, &format!("DROP SCHEMA \"{behind}\" CASCADE")).await;
                assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
                assert!(error.message().contains("migration 3"), "{error}");
                assert!(error.message().contains("apply_migrations"), "{error}");
            })
            .catch_unwind()
            .await;
            execute(&url, &format!("DROP OWNED BY {role}; DROP ROLE {role}")).await;
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        },
    )
    .await;
}
