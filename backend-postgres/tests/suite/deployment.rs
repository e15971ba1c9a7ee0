//! Deployments beyond the kit's deployment suite (which `kit::deployment`
//! runs through [`crate::support::PgFactory`]'s deployment capability).

mod topology {
    //! TLS and standbys, each on private servers (`initdb` + `pg_ctl`, a
    //! standby from `pg_basebackup -R`) with certificates the test makes.
    //! Without PostgreSQL's server programs each test prints one skip line
    //! (and fails under `TENURE_REQUIRE_SERVICES=1`).

    use std::time::Duration;

    use tenure_backend_postgres::{MigrationMode, PgStore, PgStoreConfig};
    use tenure_lease_core::tls::TlsCertificates;
    use tenure_lease_core::{
        Admission, AdmitRequest, ErrorKind, FenceCheck, FenceStore, LeaseStore,
    };
    use tenure_test_support::certificates::TestCertificates;
    use tenure_test_support::servers::PrivatePostgres;

    use crate::support;

    const TTL: Duration = Duration::from_secs(600);
    /// Long enough that a refusal answered within it was not a time-out
    /// (which would answer `Unavailable`), whatever the load of the machine.
    const PATIENT: Duration = Duration::from_secs(60);

    fn available(test: &str) -> bool {
        match PrivatePostgres::unavailable_reason() {
            Some(reason) => {
                tenure_conformance::skip_unless_required(test, &reason);
                false
            }
            None => true,
        }
    }

    fn config(url: impl Into<String>) -> PgStoreConfig {
        PgStoreConfig::new(url).acquire_timeout(PATIENT)
    }

    async fn admits(store: &PgStore, id: &str) {
        let admission = store
            .admit(&AdmitRequest::new(id, "worker").ttl(TTL))
            .await
            .expect("an admission");
        assert!(
            matches!(admission, Admission::Admitted { .. }),
            "{admission:?}"
        );
    }

    /// Whether the store's own sessions are encrypted, as the server sees
    /// them.
    async fn encrypted(url: &str) -> bool {
        let mut session: sqlx::PgConnection =
            sqlx::Connection::connect(url).await.expect("a session");
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut session)
            .await
            .expect("pg_stat_ssl")
    }

    /// A server with a certificate of a test authority: libpq's
    /// `sslmode=verify-full` with `sslrootcert=`, the URL's `tls_ca=` and
    /// [`PgStoreConfig::tls`] all connect, encrypted; trusting another
    /// authority is refused at once with a configuration error that says
    /// what to check, and so is `sslmode=require` on a server without TLS.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tls_connects_when_the_server_certificate_is_trusted_and_refuses_otherwise() {
        const TEST: &str =
            "tls_connects_when_the_server_certificate_is_trusted_and_refuses_otherwise";
        if !available(TEST) {
            return;
        }
        let certificates = TestCertificates::generate("postgres").expect("certificates");
        let stranger = TestCertificates::generate("stranger").expect("certificates");
        let server = PrivatePostgres::start_tls(&certificates)
            .await
            .expect("a TLS server");
        let ca = certificates.ca_file();
        let verified = format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            server.url(),
            ca.display()
        );
        assert!(encrypted(&verified).await, "verify-full is encrypted");
        let store = PgStore::connect(config(verified.as_str()))
            .await
            .expect("libpq's parameters");
        admits(&store, "libpq").await;

        let through_url = format!("{}?tls_ca={}", server.url(), ca.display());
        let store = PgStore::connect(config(through_url).schema("through_url"))
            .await
            .expect("the URL's authority");
        admits(&store, "url").await;

        let trusted = TlsCertificates::new().trust_pem(certificates.ca_pem());
        let store = PgStore::connect(config(server.url()).schema("through_config").tls(trusted))
            .await
            .expect("the config's authority");
        admits(&store, "config").await;

        let refused = PgStore::connect(
            config(server.url()).tls(TlsCertificates::new().trust_pem(stranger.ca_pem())),
        )
        .await
        .expect_err("another authority");
        assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
        assert!(!refused.is_retryable(), "{refused}");
        assert!(refused.message().contains("TLS handshake"), "{refused}");

        let plain = PrivatePostgres::start()
            .await
            .expect("a server without TLS");
        let refused = PgStore::connect(config(format!("{}?sslmode=require", plain.url())))
            .await
            .expect_err("sslmode=require without TLS");
        assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
        assert!(refused.message().contains("ssl = on"), "{refused}");
    }

    /// A streaming standby is refused at connect, in either migration mode,
    /// saying to connect to the primary; a session that turns read-only
    /// after connect (as a demoted server's do) answers each write with a
    /// retryable error saying the server is read-only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn standbys_are_refused_at_connect_and_read_only_writes_are_reported() {
        const TEST: &str = "standbys_are_refused_at_connect_and_read_only_writes_are_reported";
        if !available(TEST) {
            return;
        }
        let primary = PrivatePostgres::start().await.expect("a primary");
        PgStore::apply_migrations(&config(primary.url()))
            .await
            .expect("migrations on the primary");
        let standby = PrivatePostgres::start_standby_of(&primary)
            .await
            .expect("a standby");
        for mode in [MigrationMode::Apply, MigrationMode::VerifyOnly] {
            let error = PgStore::connect(config(standby.url()).migrations(mode))
                .await
                .expect_err("a standby");
            assert_eq!(error.kind(), ErrorKind::Config, "{mode:?}: {error}");
            assert!(!error.is_retryable(), "{mode:?}: {error}");
            assert!(error.message().contains("standby"), "{mode:?}: {error}");
            assert!(error.message().contains("primary"), "{mode:?}: {error}");
        }

        let read_only = support::with_option(&primary.url(), "default_transaction_read_only=on");
        let store = PgStore::connect(config(read_only).migrations(MigrationMode::VerifyOnly))
            .await
            .expect("a primary whose sessions are read-only");
        let error = store
            .admit(&AdmitRequest::new("read-only", "worker").ttl(TTL))
            .await
            .expect_err("a read-only session refuses writes");
        assert!(error.is_retryable(), "{error}");
        assert!(error.message().contains("read-only"), "{error}");
        assert!(error.message().contains("25006"), "{error}");
    }

    /// The fence of a new admission of `id` on `store`.
    async fn fence_of(store: &PgStore, id: &str) -> u64 {
        match store
            .admit(&AdmitRequest::new(id, "worker").ttl(TTL))
            .await
            .expect("an admission")
        {
            Admission::Admitted { record, .. } => record.fence,
            other => panic!("{id}: {other:?}"),
        }
    }

    /// A standby promoted after it stopped receiving the primary's log (the
    /// asynchronous default's worst case: everything after its last replay
    /// lost) hands out fences above every fence the old primary handed
    /// out, those it never received included. Its gates lost the old
    /// primary's last write: a plain store's gate then accepts a deposed
    /// owner's fence above what the standby holds, one refusing fences
    /// from before the promotion refuses it, and accepts the new owners.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_promoted_standby_never_hands_out_a_fence_again() {
        const TEST: &str = "a_promoted_standby_never_hands_out_a_fence_again";
        if !available(TEST) {
            return;
        }
        let primary = PrivatePostgres::start().await.expect("a primary");
        let old = PgStore::connect(config(primary.url()))
            .await
            .expect("the primary");
        let replicated = fence_of(&old, "replicated").await;
        let standby = PrivatePostgres::start_standby_of(&primary)
            .await
            .expect("a standby");
        standby.stop().await.expect("the standby stops receiving");

        let mut highest = replicated;
        for round in 0..200 {
            highest = highest.max(fence_of(&old, &format!("lost-{round}")).await);
        }
        let deposed = highest - 1;
        assert_eq!(
            old.check_fence("resource", highest).await.expect("a check"),
            FenceCheck::Accepted
        );
        drop(old);
        primary.stop().await.expect("the primary goes down");
        standby.resume().await.expect("the standby comes back");
        standby.promote().await.expect("promoted");

        let promoted =
            PgStore::connect(config(standby.url()).migrations(MigrationMode::VerifyOnly))
                .await
                .expect("the promoted standby");
        let successor = fence_of(&promoted, "after-promotion").await;
        assert!(
            successor > highest,
            "fence {successor} drawn after the promotion, {highest} before it"
        );
        // The documented loss of the plain store: the gate write at
        // `highest` never reached the standby.
        assert_eq!(
            promoted
                .check_fence("resource", deposed)
                .await
                .expect("a check"),
            FenceCheck::Accepted
        );
        let refusing = PgStore::connect(
            config(standby.url())
                .migrations(MigrationMode::VerifyOnly)
                .refuse_fences_from_before_failover(true),
        )
        .await
        .expect("a store refusing fences from before the promotion");
        let refused = refusing
            .check_fence("other-resource", deposed)
            .await
            .expect("a check");
        assert!(
            matches!(refused, FenceCheck::Stale(_)),
            "a deposed owner's fence: {refused:?}"
        );
        assert_eq!(
            refusing
                .check_fence("other-resource", successor)
                .await
                .expect("a check"),
            FenceCheck::Accepted
        );
    }
}
