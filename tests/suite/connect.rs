//! `tenure::connect`: every backend opened from its URL answers one store
//! that admits, enqueues and claims; bad URLs and options answer typed
//! errors that say what is accepted and never show a password.
//!
//! PostgreSQL, Redis and MySQL run on the servers `TENURE_PG_URL`,
//! `TENURE_REDIS_URL` and `TENURE_MYSQL_URL` name, each test in a fresh
//! schema, namespace or database that it removes afterwards.

use std::sync::Arc;

use tenure::{ErrorKind, ManualClock};

#[cfg(any(
    feature = "memory",
    feature = "sqlite",
    feature = "postgres",
    feature = "redis",
    feature = "etcd",
    feature = "mysql"
))]
/// Admits a lease and enqueues and claims a job through `store`; a
/// description of the first thing that went wrong otherwise, so the caller
/// cleans up before failing.
async fn admit_enqueue_claim(store: &dyn tenure::Store) -> Result<(), String> {
    use std::time::Duration;
    use tenure::queue::{ClaimRequest, NewJob};
    use tenure::AdmitRequest;

    let request = AdmitRequest::new(tenure::generate_id(), "worker-a")
        .scope("connect:scope")
        .ttl(Duration::from_secs(30));
    let admission = store.admit(&request).await.map_err(|e| e.to_string())?;
    if admission.admitted().is_none() {
        return Err(format!("the first admission was {}", admission.label()));
    }
    let job = store
        .enqueue(&NewJob::new("connect", serde_json::json!({ "n": 1 })))
        .await
        .map_err(|e| e.to_string())?;
    let claimed = store
        .claim(&ClaimRequest::new(
            "connect",
            "worker-a",
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    match claimed.as_slice() {
        [only] if only.job.id == job.id => Ok(()),
        other => Err(format!(
            "claimed {} jobs, expected job {}",
            other.len(),
            job.id
        )),
    }
}

#[cfg(feature = "memory")]
#[tokio::test]
async fn memory_by_url() {
    for url in ["memory:", "MEMORY://"] {
        let store = tenure::connect(url).await.expect(url);
        admit_enqueue_claim(&*store).await.expect(url);
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_by_url_and_with_a_clock() {
    use std::time::Duration;
    use tenure::Clock;
    let directory = tempfile::TempDir::with_prefix("tenure-connect-").expect("a temp dir");
    let path = directory.path().join("leases.db");
    let url = format!("SQLite://{}", path.display());
    let store = tenure::connect(&url).await.expect("the SQLite store opens");
    admit_enqueue_claim(&*store).await.expect("through the URL");
    assert!(path.exists(), "the file the URL names holds the store");

    let clock = Arc::new(ManualClock::starting_now());
    clock.advance(Duration::from_secs(3600));
    let store = tenure::Connect::new(&url)
        .clock(clock.clone())
        .open()
        .await
        .expect("the SQLite store reopens");
    assert_eq!(store.now().await.expect("now"), clock.now());
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_by_url_and_with_a_clock() {
    use std::time::Duration;
    use tenure::Clock;
    use tenure_test_support::etcd::PrivateEtcd;
    if let Some(reason) = PrivateEtcd::unavailable_reason() {
        tenure_conformance::skip_unless_required("etcd_by_url_and_with_a_clock", &reason);
        return;
    }
    let cluster = PrivateEtcd::start(1).await.expect("a private etcd cluster");
    let url = cluster.url(&format!("connect/{}", tenure::generate_id()));
    let store = tenure::connect(&url).await.expect("the etcd store opens");
    let outcome = admit_enqueue_claim(&*store).await;
    let clock = Arc::new(ManualClock::starting_now());
    clock.advance(Duration::from_secs(3600));
    let reopened = tenure::Connect::new(url.replace("etcd://", "ETCD://"))
        .clock(clock.clone())
        .open()
        .await
        .expect("the etcd store reopens");
    assert_eq!(reopened.now().await.expect("now"), clock.now());
    let store = tenure::etcd::EtcdStore::connect(url.as_str())
        .await
        .expect("the etcd store opens by its own connect");
    store.delete_prefix().await.expect("the prefix is deleted");
    outcome.expect("through the URL");
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn an_in_memory_sqlite_database_is_refused_with_the_alternatives() {
    let error = tenure::connect("sqlite::memory:")
        .await
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(error.message().contains("`memory:`"), "{error}");
}

/// Runs `sql` on the MySQL server at `url` (on a pool of one, whose future
/// is `Send`).
#[cfg(feature = "mysql")]
pub(crate) async fn mysql_execute(url: &str, sql: &str) {
    use tenure::mysql::sqlx;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connects to the MySQL server");
    sqlx::raw_sql(sql)
        .execute(&pool)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    pool.close().await;
}

/// `url` (`mysql://…/database`) on the database `database`.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_on(url: &str, database: &str) -> String {
    let base = url.split('?').next().unwrap_or(url);
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    format!("{server}/{database}")
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_and_mariadb_by_url() {
    let Some(base) = tenure_test_support::shared::mysql_url_for("mysql_and_mariadb_by_url") else {
        return;
    };
    let mut outcomes = Vec::new();
    for scheme in ["mysql://", "mariadb://"] {
        let database = format!("tenure_connect_{}", tenure::generate_id().replace('-', ""));
        mysql_execute(&base, &format!("CREATE DATABASE `{database}`")).await;
        let url = mysql_on(&base, &database).replacen("mysql://", scheme, 1);
        outcomes.push(match tenure::connect(&url).await {
            Ok(store) => admit_enqueue_claim(&*store).await,
            Err(error) => Err(format!("{scheme}: {error}")),
        });
        mysql_execute(&base, &format!("DROP DATABASE `{database}`")).await;
    }
    for outcome in outcomes {
        outcome.expect("connects, admits, enqueues and claims");
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_by_url_with_the_schema_in_the_url_or_the_builder() {
    use tenure::postgres::{PgStore, PgStoreConfig};
    use tenure::LeaseStore;
    let Some(base) = tenure_test_support::shared::postgres_url_for("postgres_by_url") else {
        return;
    };
    let fresh = || format!("tenure_connect_{}", tenure::generate_id().replace('-', ""));
    let (in_url, in_builder) = (fresh(), fresh());
    let separator = if base.contains('?') { '&' } else { '?' };
    let by_url = tenure::connect(&format!("{base}{separator}schema={in_url}")).await;
    let by_builder = tenure::Connect::new(base.replace("postgres://", "postgresql://"))
        .schema(&in_builder)
        .open()
        .await;
    let mut outcomes = Vec::new();
    for store in [&by_url, &by_builder].into_iter().flatten() {
        outcomes.push(admit_enqueue_claim(&**store).await);
    }
    let mut found = Vec::new();
    for schema in [&in_url, &in_builder] {
        let owner = PgStore::connect(PgStoreConfig::new(&base).schema(schema))
            .await
            .expect("connects to drop the schema");
        found.push(owner.list_active().await.map(|active| active.len()));
        owner.drop_schema().await.expect("drops the schema");
    }
    by_url.expect("connects with ?schema=");
    by_builder.expect("connects with .schema()");
    for outcome in outcomes {
        outcome.expect("admits, enqueues and claims");
    }
    for active in found {
        // The lease admitted through each store is in its own schema.
        assert_eq!(active.expect("lists"), 1);
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_by_url_with_the_namespace_in_the_url_or_the_builder() {
    use tenure::redis::{RedisConfig, RedisStore};
    use tenure::LeaseStore;
    let Some(base) = tenure_test_support::shared::redis_url_for("redis_by_url") else {
        return;
    };
    let (in_url, in_builder) = (
        format!("connect:{}", tenure::generate_id()),
        format!("connect:{}", tenure::generate_id()),
    );
    let separator = if base.contains('?') { '&' } else { '?' };
    let by_url = tenure::connect(&format!("{base}{separator}namespace={in_url}")).await;
    let by_builder = tenure::Connect::new(&base)
        .namespace(&in_builder)
        .open()
        .await;
    let mut outcomes = Vec::new();
    for store in [&by_url, &by_builder].into_iter().flatten() {
        outcomes.push(admit_enqueue_claim(&**store).await);
    }
    let mut found = Vec::new();
    for namespace in [&in_url, &in_builder] {
        let owner = RedisStore::connect(RedisConfig::new(&base, namespace))
            .await
            .expect("connects to delete the namespace");
        found.push(owner.list_active().await.map(|active| active.len()));
        owner
            .delete_namespace()
            .await
            .expect("deletes the namespace");
    }
    by_url.expect("connects with ?namespace=");
    by_builder.expect("connects with .namespace()");
    for outcome in outcomes {
        outcome.expect("admits, enqueues and claims");
    }
    for active in found {
        assert_eq!(active.expect("lists"), 1);
    }
}

#[tokio::test]
async fn malformed_urls_and_unknown_schemes_list_what_is_accepted_without_the_password() {
    for url in [
        "",
        "postgres//app:hunter2@db/jobs",
        "//app:hunter2@db",
        "mongodb://app:hunter2@db/jobs",
        "http://app:hunter2@db",
    ] {
        let error = tenure::connect(url).await.expect_err(url);
        assert_eq!(error.kind(), ErrorKind::Config, "{url}: {error}");
        let message = error.to_string();
        assert!(message.contains("postgres://"), "{url}: {message}");
        assert!(message.contains("memory:"), "{url}: {message}");
        assert!(message.contains("mysql://"), "{url}: {message}");
        assert!(!message.contains("hunter2"), "{url}: {message}");
    }
    let unknown = tenure::connect("mongodb://db").await.expect_err("unknown");
    assert!(unknown.message().contains("`mongodb:`"), "{unknown}");
}

#[tokio::test]
async fn a_server_url_without_slashes_is_refused_without_what_follows_the_scheme() {
    for url in [
        "postgres:app:hunter2@127.0.0.1/jobs",
        "redis:app:hunter2@127.0.0.1",
        "mysql:app:hunter2@127.0.0.1/jobs",
        "etcd:app:hunter2@127.0.0.1:2379",
    ] {
        let error = tenure::connect(url).await.expect_err(url);
        assert_eq!(error.kind(), ErrorKind::Config, "{url}: {error}");
        let message = error.to_string();
        assert!(
            message.contains("://[user[:password]@]host"),
            "{url}: {message}"
        );
        assert!(!message.contains("hunter2"), "{url}: {message}");
    }
}

#[tokio::test]
async fn options_a_backend_does_not_take_are_refused_naming_who_takes_them() {
    let cases = [
        (tenure::Connect::new("memory:").schema("s"), "PostgreSQL"),
        (tenure::Connect::new("sqlite:x.db").namespace("n"), "Redis"),
        (
            tenure::Connect::new("postgres://app:hunter2@127.0.0.1:1/db")
                .clock(Arc::new(ManualClock::starting_now())),
            "server's clock",
        ),
        (
            tenure::Connect::new("redis://127.0.0.1:1").schema("s"),
            "PostgreSQL",
        ),
        (
            tenure::Connect::new("etcd://app:hunter2@127.0.0.1:1/p").namespace("n"),
            "Redis",
        ),
    ];
    for (options, named) in cases {
        let shown = format!("{options:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let error = options.open().await.expect_err(&shown);
        assert_eq!(error.kind(), ErrorKind::Config, "{shown}: {error}");
        assert!(error.message().contains(named), "{shown}: {error}");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }
}

/// A misspelt parameter would leave its setting at the default without a
/// word (the drivers drop what they do not know): it is refused before
/// anything is reached, naming the parameter meant, on every backend.
#[tokio::test]
async fn misspelt_url_parameters_are_refused_at_once_naming_the_one_meant() {
    let cases = [
        ("postgres://app:hunter2@127.0.0.1:1/db?schmea=s", "`schema`"),
        (
            "postgres://app:hunter2@127.0.0.1:1/db?sslmode=disable&applicaton_name=x",
            "`application_name`",
        ),
        ("redis://:hunter2@127.0.0.1:1/?namespce=n", "`namespace`"),
        ("rediss://:hunter2@127.0.0.1:1/?tls_cq=/ca.pem", "`tls_ca`"),
        ("redis+unix:///tmp/nobody.sock?pass=hunter2&dv=1", "`db`"),
        (
            "etcd://app:hunter2@127.0.0.1:1/p?max_txn_op=8",
            "max_txn_ops",
        ),
        ("sqlite:leases.db?schema=s", "not supported"),
        ("memory:?namespace=n", "takes nothing"),
    ];
    for (url, named) in cases {
        let error = tenure::connect(url).await.expect_err(url);
        assert_eq!(error.kind(), ErrorKind::Config, "{url}: {error}");
        assert!(error.message().contains(named), "{url}: {error}");
        assert!(!error.to_string().contains("hunter2"), "{url}: {error}");
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_refused_connection_does_not_show_the_password() {
    let error = tenure::connect("postgres://app:hunter2@127.0.0.1:1/db?schema=s")
        .await
        .expect_err("nobody listens on port 1");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        !format!("{error} {error:?}").contains("hunter2"),
        "{error:?}"
    );
}

/// Built without every backend (`cargo test --no-default-features`), a URL
/// of a missing one names the feature to turn on; with all of them, the
/// error's wording is checked by the crate's unit test.
#[cfg(not(all(feature = "memory", feature = "redis")))]
#[tokio::test]
async fn a_scheme_whose_feature_is_off_names_the_feature() {
    let (url, feature) = if cfg!(feature = "memory") {
        ("redis://:hunter2@127.0.0.1:1", "`redis` feature")
    } else {
        ("memory:", "`memory` feature")
    };
    let error = tenure::connect(url).await.expect_err(url);
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(error.message().contains(feature), "{error}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
}
