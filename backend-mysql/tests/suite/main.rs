//! Every test of the MySQL backend, in one binary: the whole conformance
//! kit (`kit`, one module per area), the kit's variant cases at REPEATABLE
//! READ, at SERIALIZABLE and as a least-privilege account, and what the
//! kit cannot reach (unique jobs, rate limits and counted scopes among it). Tests on the
//! shared server read `TENURE_MYSQL_URL` (else start a private MariaDB
//! server), each in a fresh database dropped afterwards.

mod counted;
mod deployment;
mod fences;
mod isolation;
mod least_privilege;
mod rate;
mod sql_modes;
mod support;
mod unique;

/// The conformance kit, every area, in a fresh database per test.
mod kit {
    use crate::support;

    tenure_conformance::tenure_kit!(support::MySqlFactory::from_env());
}

/// The store names the kind of server it reached as OpenTelemetry does:
/// `mariadb` when the server's version says MariaDB, else `mysql`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_names_the_kind_of_server_it_reached() {
    use tenure_lease_core::LeaseStore;

    let Some(url) =
        tenure_test_support::shared::mysql_url_for("the_store_names_the_kind_of_server_it_reached")
    else {
        return;
    };
    let (store, database) = support::store_in_fresh_database(&url).await;
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(store.pool())
        .await
        .expect("version");
    let expected = if version.contains("MariaDB") {
        "mariadb"
    } else {
        "mysql"
    };
    assert_eq!(store.system_name(), expected, "server version {version}");
    store.close().await;
    support::drop_database(&url, &database).await.expect("drop");
}
