//! Production topologies, each on private servers the test binary starts:
//! the kit's cases a topology can change
//! ([`tenure_variant_conformance!`](tenure_conformance::tenure_variant_conformance):
//! races, concurrent histories, the model-based sequences of every
//! operation, hostile input, tricky names) behind Sentinel and on a
//! three-primary Redis Cluster, a fresh namespace per case (in the cluster
//! the cases' namespaces spread over the three primaries); the failover
//! nemesis on a cluster of its own with a replica per primary (Sentinel's
//! runs in the kit's `nemesis` area); and what a user meets connecting to a
//! cluster.

/// The kit's variant cases on the primary three Sentinels name.
mod sentinel {
    mod variant {
        tenure_conformance::tenure_variant_conformance!(
            crate::common::RedisFactory::behind_private_sentinels()
        );
    }
}

/// The kit's variant cases, the failover nemesis and connecting, on Redis
/// Cluster.
mod cluster {
    use tenure_backend_redis::{RedisConfig, RedisStore};
    use tenure_lease_core::tls::TlsCertificates;
    use tenure_lease_core::{AdmitRequest, ErrorKind, LeaseStore};
    use tenure_test_support::certificates::TestCertificates;
    use tenure_test_support::redis_cluster::PrivateRedisCluster;

    use crate::common::RedisFactory;
    use crate::scratch::{admitted, key_prefix, raw_connection};

    mod variant {
        tenure_conformance::tenure_variant_conformance!(
            crate::common::RedisFactory::on_private_cluster()
        );
    }

    /// The recorded workload through repeated failovers of the namespace's
    /// primary (its replica taking the slot over), judged by the history
    /// checker.
    #[test]
    fn nemesis_failover() {
        tenure_conformance::suites::nemesis::run_named(
            RedisFactory::on_private_cluster(),
            module_path!(),
            "nemesis_failover",
            tenure_conformance::suites::nemesis::nemesis_failover,
        );
    }

    /// The cluster's URL and each node's, or `None` (after a skip line) when
    /// no private cluster can be started here.
    fn cluster(test: &str) -> Option<(String, Vec<String>)> {
        let factory = RedisFactory::on_private_cluster();
        match tenure_conformance::Factory::unavailable_reason(&factory) {
            Some(reason) => {
                tenure_conformance::skip_unless_required(test, &reason);
                None
            }
            None => Some(factory.cluster_urls()),
        }
    }

    #[tokio::test]
    async fn namespaces_live_on_different_primaries_and_each_is_whole_on_its_own() {
        let Some((url, nodes)) = cluster("namespaces_live_on_different_primaries") else {
            return;
        };
        // Enough namespaces that every primary holds some (the slots are split
        // in three equal ranges; 24 random namespaces miss one with odds of
        // about 3 * (2/3)^24, one in 5,000).
        let mut holders = std::collections::BTreeMap::new();
        let mut stores = Vec::new();
        for index in 0..24 {
            let namespace = format!("spread:{index}:{}", tenure_lease_core::generate_id());
            let store = RedisStore::connect(RedisConfig::new(url.clone(), namespace.clone()))
                .await
                .expect("connect to the cluster");
            let record = admitted(
                &store,
                AdmitRequest::new("run", "worker").scope("account:7"),
            )
            .await;
            assert_eq!(record.owner.as_deref(), Some("worker"));
            let mut holder = None;
            for (at, node) in nodes.iter().enumerate() {
                let mut raw = raw_connection(std::slice::from_ref(node), &namespace)
                    .await
                    .expect("a raw connection");
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{}*", key_prefix(&namespace)))
                    .query_async(&mut raw)
                    .await
                    .expect("KEYS");
                if !keys.is_empty() {
                    assert_eq!(holder, None, "{namespace} has keys on two nodes");
                    holder = Some(at);
                }
            }
            let holder = holder.unwrap_or_else(|| panic!("{namespace} has no key on any node"));
            *holders.entry(holder).or_insert(0) += 1;
            stores.push(store);
        }
        assert_eq!(
            holders.len(),
            nodes.len(),
            "namespaces per node: {holders:?}"
        );
        for store in stores {
            let deleted = store
                .delete_namespace()
                .await
                .expect("delete the namespace");
            assert!(
                deleted > 0,
                "delete_namespace found none of the namespace's keys"
            );
            assert!(store.get("run").await.expect("read after delete").is_none());
        }
    }

    #[tokio::test]
    async fn a_cluster_node_named_as_a_single_server_is_refused_with_the_fix() {
        let Some((_, nodes)) = cluster("a_cluster_node_named_as_a_single_server") else {
            return;
        };
        let error = RedisStore::connect(RedisConfig::new(nodes[0].clone(), "single"))
            .await
            .expect_err("a cluster node is not a single server");
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(error.to_string().contains("redis+cluster://"), "{error}");
    }

    #[tokio::test]
    async fn refused_credentials_are_a_configuration_error_at_once() {
        let Some((url, _)) = cluster("refused_credentials_are_a_configuration_error") else {
            return;
        };
        let wrong = url.replacen("redis+cluster://", "redis+cluster://nobody:hunter2@", 1);
        // Were the refusal taken for an outage, connect would retry it until
        // this deadline and answer Unavailable.
        let config = RedisConfig::new(wrong, "credentials")
            .connect_timeout(std::time::Duration::from_secs(120));
        let error = RedisStore::connect(config).await.expect_err("no such user");
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(!error.is_retryable(), "{error}");
        assert!(error.to_string().contains("password"), "{error}");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[tokio::test]
    async fn a_single_server_named_as_a_cluster_is_refused_with_the_fix() {
        let single = match tenure_test_support::shared::redis_url() {
            Ok(url) => url,
            Err(why) => {
                return tenure_conformance::skip_unless_required(
                    "a_single_server_named_as_a_cluster_is_refused_with_the_fix",
                    &why,
                )
            }
        };
        let url = single.replacen("redis://", "redis+cluster://", 1);
        let config = RedisConfig::new(url, "not-a-cluster")
            .connect_timeout(std::time::Duration::from_secs(120));
        let error = RedisStore::connect(config)
            .await
            .expect_err("a single server is no cluster");
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(error.to_string().contains("redis://"), "{error}");
    }

    #[tokio::test]
    async fn a_cluster_url_with_a_path_is_refused_before_connecting() {
        let error = RedisStore::connect(RedisConfig::new(
            "redis+cluster://:hunter2@127.0.0.1:1/2",
            "path",
        ))
        .await
        .expect_err("a cluster has database 0 only");
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    /// `rediss+cluster://`: the store reaches every node over TLS when it
    /// trusts their authority, and a node's certificate it does not trust
    /// is a configuration error at once, not an outage retried until the
    /// connect timeout.
    #[tokio::test]
    async fn tls_clusters_are_reached_when_trusted_and_refused_otherwise() {
        const TEST: &str = "tls_clusters_are_reached_when_trusted_and_refused_otherwise";
        if let Some(reason) = PrivateRedisCluster::unavailable_reason() {
            return tenure_conformance::skip_unless_required(TEST, &reason);
        }
        let certificates = TestCertificates::generate("cluster").expect("certificates");
        let stranger = TestCertificates::generate("stranger").expect("certificates");
        let cluster = PrivateRedisCluster::start_tls(3, &certificates)
            .await
            .expect("a private TLS cluster");
        let url = cluster.url();
        assert!(url.starts_with("rediss+cluster://"), "{url}");
        let trusted = TlsCertificates::new().trust_pem(certificates.ca_pem());
        let store = RedisStore::connect(RedisConfig::new(url.clone(), "tls").tls(trusted))
            .await
            .expect("the authority is trusted");
        admitted(&store, AdmitRequest::new("over-tls", "worker")).await;
        let through_url = format!("{url}?tls_ca={}", certificates.ca_file().display());
        let store = RedisStore::connect(RedisConfig::new(through_url, "tls"))
            .await
            .expect("the URL's authority is trusted");
        assert!(store.get("over-tls").await.expect("read").is_some());

        let untrusted = RedisConfig::new(url, "tls")
            .tls(TlsCertificates::new().trust_pem(stranger.ca_pem()))
            .connect_timeout(std::time::Duration::from_secs(120));
        let error = RedisStore::connect(untrusted)
            .await
            .expect_err("another authority");
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(error.to_string().contains("TLS"), "{error}");
    }

    #[tokio::test]
    async fn waiting_writes_count_the_replicas_of_the_namespaces_primary() {
        const TEST: &str = "waiting_writes_count_the_replicas_of_the_namespaces_primary";
        if let Some(reason) = PrivateRedisCluster::unavailable_reason() {
            return tenure_conformance::skip_unless_required(TEST, &reason);
        }
        let _turn = crate::common::REPLICATED_TURN.lock().await;
        let cluster = PrivateRedisCluster::start_with_replicas(3, true)
            .await
            .expect("a private cluster with replicas");
        let wait = std::time::Duration::from_millis(200);
        let confirmed = RedisStore::connect(
            RedisConfig::new(cluster.url(), "waiting").wait_for_replicas(1, wait),
        )
        .await
        .expect("connect");
        assert_eq!(confirmed.durability().replicas, Some(1));
        admitted(&confirmed, AdmitRequest::new("confirmed", "worker")).await;
        // Each primary has one replica: a write waiting for two is on the
        // primary, unconfirmed, and says so.
        let unconfirmed = RedisStore::connect(
            RedisConfig::new(cluster.url(), "waiting").wait_for_replicas(2, wait),
        )
        .await
        .expect("connect");
        let error = unconfirmed
            .admit(&AdmitRequest::new("unconfirmed", "worker"))
            .await
            .expect_err("only one replica confirms");
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        assert!(
            error.to_string().contains("confirmed by 1 of the 2"),
            "{error}"
        );
    }
}
