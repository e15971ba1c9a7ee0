//! Connecting on private MariaDB servers: TLS verified by the URL's or the
//! config's authority, a stranger's refused with a configuration error;
//! wrong credentials and a missing database refused without the password
//! in the message.

use tenure_backend_mysql::{MySqlConfig, MySqlStore};
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{AdmitRequest, ErrorKind, LeaseStore};
use tenure_test_support::certificates::TestCertificates;
use tenure_test_support::servers::PrivateMariadb;

/// Whether private servers can run here; one skip line otherwise.
fn available(test: &str) -> bool {
    match PrivateMariadb::unavailable_reason() {
        None => true,
        Some(reason) => {
            tenure_conformance::skip_unless_required(test, &reason);
            false
        }
    }
}

/// Whether `store`'s session is encrypted, and it admits.
async fn encrypted_and_admits(store: &MySqlStore, id: &str) -> bool {
    let cipher: Option<(String, String)> = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_optional(store.pool())
        .await
        .expect("the session's cipher");
    let admitted = store
        .admit(&AdmitRequest::new(id, "worker").ttl(std::time::Duration::from_secs(30)))
        .await
        .expect("admits")
        .admitted()
        .is_some();
    admitted && cipher.is_some_and(|(_, cipher)| !cipher.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connects_when_the_server_certificate_is_trusted_and_refuses_otherwise() {
    const TEST: &str = "tls_connects_when_the_server_certificate_is_trusted_and_refuses_otherwise";
    if !available(TEST) {
        return;
    }
    let certificates = TestCertificates::generate("mariadb").expect("certificates");
    let stranger = TestCertificates::generate("stranger").expect("certificates");
    let server = PrivateMariadb::start_with(&[
        &format!("--ssl-cert={}", certificates.server_file().display()),
        &format!("--ssl-key={}", certificates.server_key_file().display()),
        &format!("--ssl-ca={}", certificates.ca_file().display()),
    ])
    .await
    .expect("a TLS server");

    let through_url = format!(
        "{}?tls_ca={}",
        server.url(),
        certificates.ca_file().display()
    );
    let store = MySqlStore::connect(through_url.as_str())
        .await
        .expect("the URL's authority");
    assert!(encrypted_and_admits(&store, "through-url").await);
    store.close().await;

    let trusted = TlsCertificates::new().trust_pem(certificates.ca_pem());
    let store = MySqlStore::connect(MySqlConfig::new(server.url()).tls(trusted))
        .await
        .expect("the config's authority");
    assert!(encrypted_and_admits(&store, "through-config").await);
    store.close().await;

    let refused = MySqlStore::connect(
        MySqlConfig::new(server.url()).tls(TlsCertificates::new().trust_pem(stranger.ca_pem())),
    )
    .await
    .expect_err("another authority");
    assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
    assert!(!refused.is_retryable(), "{refused}");
    assert!(refused.message().contains("TLS handshake"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_and_a_missing_database_are_configuration_errors() {
    const TEST: &str = "wrong_credentials_and_a_missing_database_are_configuration_errors";
    if !available(TEST) {
        return;
    }
    let server = PrivateMariadb::start().await.expect("a server");
    let port = server.port();
    for url in [
        format!("mysql://root:hunter2@127.0.0.1:{port}/test"),
        format!("mysql://nobody:hunter2@127.0.0.1:{port}/test"),
        format!("mysql://root@127.0.0.1:{port}/no_such_database"),
    ] {
        let refused = MySqlStore::connect(url.as_str()).await.expect_err(&url);
        assert_eq!(refused.kind(), ErrorKind::Config, "{url}: {refused}");
        assert!(!refused.message().contains("hunter2"), "{url}: {refused}");
        assert!(
            refused.message().contains(&port.to_string()),
            "{url}: {refused}"
        );
    }
    let unreachable = MySqlStore::connect("mysql://root:hunter2@127.0.0.1:1/test")
        .await
        .expect_err("nothing listens on port 1");
    assert!(unreachable.is_retryable(), "{unreachable}");
    assert!(!unreachable.message().contains("hunter2"), "{unreachable}");
}
