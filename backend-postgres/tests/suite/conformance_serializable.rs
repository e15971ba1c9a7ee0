//! The whole conformance kit, lease, job-queue and fence-gate cases, on
//! sessions whose default isolation level is SERIALIZABLE (set by a startup
//! option in the URL, as deployments do): every answer must be the same as
//! at READ COMMITTED. Skipped (one line each) when `TENURE_PG_URL` is unset.

use crate::support;

mod leases {
    tenure_conformance::tenure_conformance!(super::support::PgFactory::from_env_at_isolation(
        "serializable"
    ));
}

mod queue {
    tenure_conformance::tenure_queue_conformance!(
        super::support::PgFactory::from_env_at_isolation("serializable")
    );
}

mod gates {
    tenure_conformance::tenure_gate_conformance!(super::support::PgFactory::from_env_at_isolation(
        "serializable"
    ));
}

/// The factory's sessions really default to SERIALIZABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_sessions_default_to_serializable() {
    let Some(url) = support::server_url("factory_sessions_default_to_serializable") else {
        return;
    };
    for isolation in ["serializable", "repeatable read"] {
        let store = support::connect(
            &support::with_isolation(&url, isolation),
            &support::fresh_schema(),
        )
        .await
        .expect("connect");
        let shown: String = sqlx::query_scalar("SHOW default_transaction_isolation")
            .fetch_one(store.pool())
            .await
            .expect("show");
        store.drop_schema().await.expect("drop schema");
        assert_eq!(shown, isolation);
    }
}
