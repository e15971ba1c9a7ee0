//! `Connect::check` and `Connect::migrate`: the deployment checks reported
//! one by one, and a PostgreSQL schema that only `migrate` changes.
//!
//! PostgreSQL runs on the server `TENURE_PG_URL` names, in a fresh schema
//! the test drops afterwards.

#[cfg(feature = "memory")]
#[tokio::test(flavor = "current_thread")]
async fn a_memory_store_passes_with_a_warning_that_it_keeps_nothing() {
    use tenure::{Connect, Verdict};
    let findings = Connect::new("memory:").check().await.expect("checks");
    let verdicts: Vec<_> = findings.iter().map(|f| (f.check, f.verdict)).collect();
    assert_eq!(
        verdicts,
        [("persistence", Verdict::Warn), ("clock", Verdict::Pass)]
    );
    Connect::new("memory:")
        .migrate()
        .await
        .expect("nothing to apply");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schema_changes_only_through_migrate() {
    use tenure::postgres::{PgStore, PgStoreConfig};
    use tenure::{Connect, ErrorKind, Verdict};
    let name = "postgres_schema_changes_only_through_migrate";
    let Some(base) = tenure_conformance::service_url("TENURE_PG_URL") else {
        tenure_conformance::skip_unless_required(name, "TENURE_PG_URL is not set");
        return;
    };
    let schema = format!("tenure_deploy_{}", tenure::generate_id().replace('-', ""));
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}schema={schema}");

    let refused = Connect::new(&url).migrate_schema(false).open().await;
    let before = Connect::new(&url).check().await;
    let migrated = Connect::new(&url).migrate().await;
    let again = Connect::new(&url).migrate().await;
    let opened = Connect::new(&url)
        .migrate_schema(false)
        .open()
        .await
        .map(drop);
    let after = Connect::new(&url).check().await;
    // Drop what `migrate` made before judging, so a failure leaves nothing.
    let owner = PgStore::connect(PgStoreConfig::new(&base).schema(&schema))
        .await
        .expect("connects to drop the schema");
    owner.drop_schema().await.expect("drops the schema");

    let error = refused.expect_err("a schema without migrations is refused");
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    let before = before.expect("checks");
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(
        (before[0].check, before[0].verdict),
        ("schema", Verdict::Fail)
    );
    assert!(before[0].detail.contains("tenure migrate"), "{before:?}");
    migrated.expect("migrates");
    again.expect("migrating twice is harmless");
    opened.expect("opens the migrated schema without changing it");
    let after = after.expect("checks");
    assert!(
        after.iter().all(|finding| finding.verdict != Verdict::Fail),
        "{after:?}"
    );
}
