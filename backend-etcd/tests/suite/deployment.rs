//! Deployments beyond one friendly member: TLS with certificates the test
//! makes, each member asking every client for a certificate, on a private
//! cluster (the shared one is never reconfigured). Without etcd each test
//! prints one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

use std::time::Duration;

use tenure_backend_etcd::{EtcdConfig, EtcdStore};
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Admission, AdmitRequest, ErrorKind, LeaseStore};
use tenure_test_support::certificates::TestCertificates;
use tenure_test_support::etcd::{PrivateEtcd, MAX_TXN_OPS};

const TTL: Duration = Duration::from_secs(600);

fn config(url: &str) -> EtcdConfig {
    EtcdConfig::from(url).max_txn_ops(MAX_TXN_OPS)
}

/// Connects and takes a lease: the answer of the first real call.
async fn admit(config: EtcdConfig, id: &str) -> tenure_lease_core::Result<Admission> {
    let store = EtcdStore::connect(config).await?;
    store.admit(&AdmitRequest::new(id, "worker").ttl(TTL)).await
}

/// A member serving TLS with a certificate of a test authority and asking
/// for client certificates: the store works with the authority and client
/// certificate of the config or of the URL's files; trusting another
/// authority is a configuration error that says what to check, never
/// retried as a lost connection; presenting no certificate is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates_connects_and_refuses_strangers() {
    const TEST: &str = "tls_with_client_certificates_connects_and_refuses_strangers";
    if let Some(reason) = PrivateEtcd::unavailable_reason() {
        tenure_conformance::skip_unless_required(TEST, &reason);
        return;
    }
    let certificates = TestCertificates::generate("etcd").expect("certificates");
    let stranger = TestCertificates::generate("stranger").expect("certificates");
    let cluster = PrivateEtcd::start_tls(1, &certificates)
        .await
        .expect("a TLS member");
    let url = cluster.url("deployment");
    assert!(url.starts_with("etcds://"), "{url}");
    let (certificate, key) = certificates.client_pem();

    let identified = TlsCertificates::new()
        .trust_pem(certificates.ca_pem())
        .identity_pem(certificate, key);
    let admitted = admit(config(&url).tls(identified), "through-config")
        .await
        .expect("the config's certificates");
    assert!(
        matches!(admitted, Admission::Admitted { .. }),
        "{admitted:?}"
    );

    let with_files = format!(
        "{url}?tls_ca={}&tls_cert={}&tls_key={}",
        certificates.ca_file().display(),
        certificates.client_file().display(),
        certificates.client_key_file().display()
    );
    let admitted = admit(config(&with_files), "through-url")
        .await
        .expect("the URL's certificates");
    assert!(
        matches!(admitted, Admission::Admitted { .. }),
        "{admitted:?}"
    );

    let error = admit(
        config(&url).tls(
            TlsCertificates::new()
                .trust_pem(stranger.ca_pem())
                .identity_pem(certificate, key),
        ),
        "another authority",
    )
    .await
    .expect_err("another authority");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(!error.is_retryable(), "{error}");
    assert!(error.message().contains("TLS handshake"), "{error}");

    // Under TLS 1.3 the member refuses a missing client certificate after
    // the client's side of the handshake is done: the client sees a
    // closed connection, not a verdict, so the kind cannot be promised.
    admit(
        config(&url).tls(TlsCertificates::new().trust_pem(certificates.ca_pem())),
        "anonymous",
    )
    .await
    .expect_err("no client certificate");
}

/// A URL naming no live member is refused at connect, as unavailable
/// (retryable), rather than connecting lazily and failing at the first
/// operation.
#[tokio::test]
async fn a_url_naming_no_live_member_is_refused_at_connect() {
    let port = tenure_test_support::servers::free_port().expect("a free port");
    let error = EtcdStore::connect(EtcdConfig::from(format!("etcd://127.0.0.1:{port}")))
        .await
        .expect_err("nobody listens there");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error.message().contains("no etcd member answered")
            && error.message().contains(&port.to_string()),
        "{error}"
    );
}
