//! The conformance kit's cases an isolation level can change
//! ([`tenure_variant_conformance!`](tenure_conformance::tenure_variant_conformance):
//! races, concurrent histories, the model-based sequences of every
//! operation, hostile input), on sessions whose default isolation level is
//! SERIALIZABLE (set by a startup option in the URL, as deployments do):
//! every answer must be the same as at READ COMMITTED. The whole kit runs
//! at READ COMMITTED in `kit`. Skipped (one line each) when `TENURE_PG_URL`
//! is unset.

use crate::support;

mod variant {
    tenure_conformance::tenure_variant_conformance!(
        super::support::PgFactory::from_env_at_isolation("serializable")
    );
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
