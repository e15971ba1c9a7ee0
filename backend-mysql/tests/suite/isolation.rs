//! The conformance kit's cases an isolation level can change
//! ([`tenure_variant_conformance!`](tenure_conformance::tenure_variant_conformance):
//! races, concurrent histories, the model-based sequences of every
//! operation, hostile input), with the store's sessions at REPEATABLE READ
//! (InnoDB's default) and at SERIALIZABLE: every answer must be the same
//! as at READ COMMITTED, where `kit` runs the whole kit. At these levels
//! InnoDB also locks the gaps between rows, so contending transactions
//! deadlock more often, and the store must decide again each time.

use tenure_backend_mysql::Isolation;

use crate::support;

mod repeatable_read {
    tenure_conformance::tenure_variant_conformance!(
        crate::support::MySqlFactory::from_env_at_isolation("repeatable_read")
    );
}

mod serializable {
    tenure_conformance::tenure_variant_conformance!(
        crate::support::MySqlFactory::from_env_at_isolation("serializable")
    );
}

/// The store's sessions really run at the level the URL names, and
/// `server_default` leaves the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_at_the_level_the_url_names() {
    let Some(url) =
        tenure_test_support::shared::mysql_url_for("sessions_run_at_the_level_the_url_names")
    else {
        return;
    };
    let database = support::fresh_database();
    support::create_database(&url, &database)
        .await
        .expect("create");
    let server_default: String = {
        let store = support::connect(&url, &database).await.expect("connect");
        let level = sqlx::query_scalar("SELECT @@GLOBAL.tx_isolation")
            .fetch_one(store.pool())
            .await
            .expect("global level");
        store.close().await;
        level
    };
    for (named, expected, level) in [
        ("", "READ-COMMITTED", Isolation::ReadCommitted),
        (
            "?isolation=repeatable_read",
            "REPEATABLE-READ",
            Isolation::RepeatableRead,
        ),
        (
            "?isolation=serializable",
            "SERIALIZABLE",
            Isolation::Serializable,
        ),
        (
            "?isolation=server_default",
            server_default.as_str(),
            Isolation::ServerDefault,
        ),
    ] {
        let config = tenure_backend_mysql::MySqlConfig::new(format!(
            "{}{named}",
            support::on_database(&url, &database)
        ));
        assert_eq!(config.isolation_level(), level, "{named}");
        let store = tenure_backend_mysql::MySqlStore::connect(config)
            .await
            .expect("connect");
        let shown: String = sqlx::query_scalar("SELECT @@SESSION.tx_isolation")
            .fetch_one(store.pool())
            .await
            .expect("session level");
        store.close().await;
        assert_eq!(shown, expected, "{named}");
    }
    support::drop_database(&url, &database).await.expect("drop");
}
