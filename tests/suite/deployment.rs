//! `Connect::check` and `Connect::migrate`: the deployment checks reported
//! one by one, and a PostgreSQL schema and MySQL tables that only
//! `migrate` changes.
//!
//! PostgreSQL runs on the server `TENURE_PG_URL` names, in a fresh schema
//! the test drops afterwards; MySQL on `TENURE_MYSQL_URL`'s, in a fresh
//! database.

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
    let Some(base) = tenure_test_support::shared::postgres_url_for(name) else {
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

/// The findings of `check` on `url`, by name.
#[cfg(any(
    feature = "postgres",
    feature = "redis",
    feature = "etcd",
    feature = "mysql"
))]
async fn findings_of(url: &str) -> std::collections::HashMap<&'static str, tenure::Finding> {
    tenure::Connect::new(url)
        .check()
        .await
        .expect("checks")
        .into_iter()
        .map(|finding| (finding.check, finding))
        .collect()
}

/// A private PostgreSQL server with `settings`, its schema migrated, or
/// `None` after a skip line.
#[cfg(feature = "postgres")]
async fn private_postgres(
    test: &str,
    settings: &[&str],
) -> Option<tenure_test_support::servers::PrivatePostgres> {
    use tenure_test_support::servers::PrivatePostgres;
    if let Some(reason) = PrivatePostgres::unavailable_reason() {
        tenure_conformance::skip_unless_required(test, &reason);
        return None;
    }
    let server = PrivatePostgres::start_with_settings(settings)
        .await
        .expect("a private server");
    tenure::Connect::new(server.url())
        .migrate()
        .await
        .expect("migrations");
    Some(server)
}

/// `fsync` or `synchronous_commit` off fails the durability check, with
/// the setting to change; autovacuum off warns; a server without a
/// standby warns that losing it loses the store, and fails (and is refused
/// at connect) where the URL requires a synchronous standby; a synchronous
/// standby passes, and a store requiring it commits synchronously
/// whatever the server's default; a standby is refused with the fix.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_settings_that_lose_writes_are_caught() {
    use tenure::{ErrorKind, Verdict};
    use tenure_test_support::servers::PrivatePostgres;
    const TEST: &str = "postgres_settings_that_lose_writes_are_caught";
    let Some(careless) = private_postgres(TEST, &["fsync=off", "autovacuum=off"]).await else {
        return;
    };
    let findings = findings_of(&careless.url()).await;
    assert_eq!(
        findings["durability"].verdict,
        Verdict::Fail,
        "{findings:?}"
    );
    assert!(
        findings["durability"].detail.contains("fsync = on"),
        "{findings:?}"
    );
    assert_eq!(findings["vacuum"].verdict, Verdict::Warn, "{findings:?}");
    assert_eq!(
        findings["replication"].verdict,
        Verdict::Warn,
        "{findings:?}"
    );
    assert!(
        findings["replication"].detail.contains("no standby"),
        "{findings:?}"
    );
    // Requiring a synchronous standby of a server without one: the check
    // fails, and connecting is refused, both naming the setting.
    let findings = findings_of(&requiring_synchronous_standby(&careless.url())).await;
    assert_eq!(
        findings["replication"].verdict,
        Verdict::Fail,
        "{findings:?}"
    );
    assert!(
        findings["replication"]
            .detail
            .contains("synchronous_standby_names is empty"),
        "{findings:?}"
    );
    // In a schema of its own, to show the refusal comes before migrations.
    let untouched = format!("{}?schema=untouched", careless.url());
    let refused = tenure::connect(&requiring_synchronous_standby(&untouched))
        .await
        .expect_err("no synchronous standby");
    assert_eq!(refused.kind(), ErrorKind::Incompatible, "{refused}");
    assert!(
        refused.message().contains("synchronous_standby_names"),
        "{refused}"
    );
    let mut careless_session: tenure::postgres::sqlx::PgConnection =
        tenure::postgres::sqlx::Connection::connect(&careless.url())
            .await
            .expect("a session");
    let schemas: i64 = tenure::postgres::sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
    )
    .bind("untouched")
    .fetch_one(&mut careless_session)
    .await
    .expect("count the schemas");
    assert_eq!(schemas, 0, "the refused connect created the schema");
    let malformed = tenure::connect(&format!(
        "{}?require_synchronous_standby=yes",
        careless.url()
    ))
    .await
    .expect_err("not a boolean");
    assert_eq!(malformed.kind(), ErrorKind::Config, "{malformed}");

    let Some(hasty) = private_postgres(TEST, &["synchronous_commit=off"]).await else {
        return;
    };
    let findings = findings_of(&hasty.url()).await;
    assert_eq!(
        findings["durability"].verdict,
        Verdict::Fail,
        "{findings:?}"
    );
    assert!(
        findings["durability"]
            .detail
            .contains("synchronous_commit = on"),
        "{findings:?}"
    );
    assert_eq!(findings["vacuum"].verdict, Verdict::Pass, "{findings:?}");

    let Some(primary) = private_postgres(TEST, &[]).await else {
        return;
    };
    let standby = PrivatePostgres::start_standby_of(&primary)
        .await
        .expect("a standby");
    // Only once the standby streams: before, every commit would wait for
    // it. `*` matches whatever application name the standby gives.
    let mut session: tenure::postgres::sqlx::PgConnection =
        tenure::postgres::sqlx::Connection::connect(&primary.url())
            .await
            .expect("a session");
    for statement in [
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
        "SELECT pg_reload_conf()",
    ] {
        tenure::postgres::sqlx::query(statement)
            .execute(&mut session)
            .await
            .expect(statement);
    }
    synchronous_standbys_become(&mut session, 1).await;
    let findings = findings_of(&primary.url()).await;
    assert_eq!(
        findings["replication"].verdict,
        Verdict::Pass,
        "{findings:?}"
    );
    assert_eq!(
        findings["durability"].verdict,
        Verdict::Pass,
        "{findings:?}"
    );
    // Required and present: the check passes, and the store commits with
    // synchronous_commit = on even where the server's default is local.
    for statement in [
        "ALTER SYSTEM SET synchronous_commit = 'local'",
        "SELECT pg_reload_conf()",
    ] {
        tenure::postgres::sqlx::query(statement)
            .execute(&mut session)
            .await
            .expect(statement);
    }
    let findings = findings_of(&requiring_synchronous_standby(&primary.url())).await;
    assert_eq!(
        findings["replication"].verdict,
        Verdict::Pass,
        "{findings:?}"
    );
    let requiring = tenure::postgres::PgStore::connect(
        tenure::postgres::PgStoreConfig::new(primary.url()).require_synchronous_standby(true),
    )
    .await
    .expect("a synchronous standby streams");
    let settings = requiring.server_settings().await.expect("settings");
    assert_eq!(settings.synchronous_commit, "on", "{settings:?}");
    requiring.close().await;
    // A stronger default than `on` is kept.
    for statement in [
        "ALTER SYSTEM SET synchronous_commit = 'remote_apply'",
        "SELECT pg_reload_conf()",
    ] {
        tenure::postgres::sqlx::query(statement)
            .execute(&mut session)
            .await
            .expect(statement);
    }
    let applying =
        tenure::postgres::PgStore::connect(requiring_synchronous_standby(&primary.url()))
            .await
            .expect("a synchronous standby streams");
    let settings = applying.server_settings().await.expect("settings");
    assert_eq!(settings.synchronous_commit, "remote_apply", "{settings:?}");
    applying.close().await;
    // A standby that streams but is not the one the primary waits for is
    // no synchronous standby: every commit would wait for the one named.
    for statement in [
        "ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
        "SELECT pg_reload_conf()",
    ] {
        tenure::postgres::sqlx::query(statement)
            .execute(&mut session)
            .await
            .expect(statement);
    }
    synchronous_standbys_become(&mut session, 0).await;
    let findings = findings_of(&requiring_synchronous_standby(&primary.url())).await;
    assert_eq!(
        findings["replication"].verdict,
        Verdict::Fail,
        "{findings:?}"
    );
    assert!(
        findings["replication"]
            .detail
            .contains("no standby it names streams (1 connected)"),
        "{findings:?}"
    );
    let findings = findings_of(&primary.url()).await;
    assert_eq!(
        findings["replication"].verdict,
        Verdict::Warn,
        "{findings:?}"
    );
    let error = tenure::Connect::new(standby.url())
        .check()
        .await
        .expect_err("a standby");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(error.message().contains("primary"), "{error}");
}

/// Waits until `count` standbys stream synchronously from the primary of
/// `session`: the walsenders take a reloaded `synchronous_standby_names` up
/// a moment after the reload.
#[cfg(feature = "postgres")]
async fn synchronous_standbys_become(
    session: &mut tenure::postgres::sqlx::PgConnection,
    count: i64,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now: i64 = tenure::postgres::sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')",
        )
        .fetch_one(&mut *session)
        .await
        .expect("read pg_stat_replication");
        if now == count {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{now} synchronous standbys, never {count}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `url` with `require_synchronous_standby=true` added.
#[cfg(feature = "postgres")]
fn requiring_synchronous_standby(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}require_synchronous_standby=true")
}

/// A Redis primary says how many replicas follow it, and the check warns
/// that they are asynchronous.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_replicas_are_reported() {
    use tenure::Verdict;
    use tenure_test_support::servers::PrivateRedis;
    const TEST: &str = "redis_replicas_are_reported";
    if let Some(reason) = PrivateRedis::unavailable_reason() {
        tenure_conformance::skip_unless_required(TEST, &reason);
        return;
    }
    let primary = PrivateRedis::start().await.expect("a primary");
    let findings = findings_of(&primary.url()).await;
    assert!(
        findings["replication"].detail.contains("no replica"),
        "{findings:?}"
    );
    let port = primary.port().to_string();
    let _replica = PrivateRedis::start_with(&["--replicaof", "127.0.0.1", &port])
        .await
        .expect("a replica");
    // The replica attaches in its own time: there is no signal to wait on.
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let replication = loop {
        let findings = findings_of(&primary.url()).await;
        let replication = findings["replication"].clone();
        if replication.detail.contains("1 replica(s)") || tokio::time::Instant::now() > give_up {
            break replication;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(replication.verdict, Verdict::Warn, "{replication:?}");
    assert!(
        replication.detail.contains("1 replica(s)"),
        "{replication:?}"
    );
    assert!(
        replication.detail.contains("deposed owner"),
        "{replication:?}"
    );
}

/// A single etcd member warns that losing it loses the store.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_etcd_member_is_warned_about() {
    use tenure::Verdict;
    use tenure_test_support::etcd::PrivateEtcd;
    const TEST: &str = "a_single_etcd_member_is_warned_about";
    if let Some(reason) = PrivateEtcd::unavailable_reason() {
        tenure_conformance::skip_unless_required(TEST, &reason);
        return;
    }
    let cluster = PrivateEtcd::start(1).await.expect("one member");
    let findings = findings_of(&cluster.url("check")).await;
    assert_eq!(findings["members"].verdict, Verdict::Warn, "{findings:?}");
    assert!(
        findings["members"].detail.contains("three or five"),
        "{findings:?}"
    );
}

/// MySQL's tables change only through `migrate`, and `check` reports the
/// settings that lose acknowledged commits: a server flushing its log once
/// a second, with a statement-based binary log, fails both.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_tables_change_only_through_migrate_and_careless_settings_fail() {
    use tenure::{Connect, ErrorKind, Verdict};
    use tenure_test_support::servers::PrivateMariadb;

    use crate::connect::{mysql_execute, mysql_on};
    const TEST: &str = "mysql_tables_change_only_through_migrate_and_careless_settings_fail";
    let Some(base) = tenure_test_support::shared::mysql_url_for(TEST) else {
        return;
    };
    let database = format!("tenure_deploy_{}", tenure::generate_id().replace('-', ""));
    mysql_execute(&base, &format!("CREATE DATABASE `{database}`")).await;
    let url = mysql_on(&base, &database);
    let refused = Connect::new(&url).migrate_schema(false).open().await;
    let before = Connect::new(&url).check().await;
    let migrated = Connect::new(&url).migrate().await;
    let again = Connect::new(&url).migrate().await;
    let opened = Connect::new(&url)
        .migrate_schema(false)
        .open()
        .await
        .map(drop);
    let after = findings_of(&url).await;
    mysql_execute(&base, &format!("DROP DATABASE `{database}`")).await;

    let error = refused.expect_err("tables without migrations are refused");
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    let before = before.expect("checks");
    assert_eq!(
        before
            .iter()
            .map(|f| (f.check, f.verdict))
            .collect::<Vec<_>>(),
        [("schema", Verdict::Fail)],
        "{before:?}"
    );
    assert!(before[0].detail.contains("tenure migrate"), "{before:?}");
    migrated.expect("migrates");
    again.expect("migrating twice is harmless");
    opened.expect("opens the migrated tables without changing them");
    for check in ["schema", "durability", "clock"] {
        assert_eq!(after[check].verdict, Verdict::Pass, "{after:?}");
    }

    if let Some(reason) = PrivateMariadb::unavailable_reason() {
        tenure_conformance::skip_unless_required(TEST, &reason);
        return;
    }
    let careless = PrivateMariadb::start_with(&[
        "--innodb-flush-log-at-trx-commit=2",
        "--log-bin=binlog",
        "--binlog-format=STATEMENT",
        "--server-id=1",
    ])
    .await
    .expect("a private MariaDB");
    Connect::new(careless.url())
        .migrate()
        .await
        .expect("migrates on a careless server too");
    // Its statement log cannot take READ COMMITTED transactions, the
    // store's default: refused at connect, so the check cannot run...
    let refused = Connect::new(careless.url())
        .check()
        .await
        .expect_err("a statement binlog under READ COMMITTED");
    assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
    assert!(
        refused.message().contains("binlog_format = ROW"),
        "{refused}"
    );
    // ...but at REPEATABLE READ it runs, and fails both settings.
    let findings = findings_of(&format!("{}?isolation=repeatable_read", careless.url())).await;
    assert_eq!(
        findings["durability"].verdict,
        Verdict::Fail,
        "{findings:?}"
    );
    assert!(
        findings["durability"]
            .detail
            .contains("innodb_flush_log_at_trx_commit = 1"),
        "{findings:?}"
    );
    assert_eq!(
        findings["replication"].verdict,
        Verdict::Fail,
        "{findings:?}"
    );
    assert!(
        findings["replication"]
            .detail
            .contains("binlog_format = ROW"),
        "{findings:?}"
    );
}
