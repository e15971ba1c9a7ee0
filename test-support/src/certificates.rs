//! Self-signed certificates for private TLS servers, made by the test that
//! needs them: a certificate authority, a server certificate it signed for
//! `localhost` and `127.0.0.1`, and a client certificate it signed, each
//! as PEM text and as a file.

use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::servers::fresh_dir;

/// A certificate authority and what it signed, in a temporary directory
/// removed on drop.
#[derive(Debug)]
pub struct TestCertificates {
    dir: PathBuf,
    ca: String,
    client: String,
    client_key: String,
}

/// The names of the files in [`TestCertificates::dir`].
const CA_FILE: &str = "ca.pem";
const SERVER_FILE: &str = "server.pem";
const SERVER_KEY_FILE: &str = "server-key.pem";
const CLIENT_FILE: &str = "client.pem";
const CLIENT_KEY_FILE: &str = "client-key.pem";

impl TestCertificates {
    /// A new authority (its common name `name`, so two are told apart in
    /// error messages) and the server and client certificates it signed.
    pub fn generate(name: &str) -> io::Result<Self> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(invalid)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(invalid)?)
            .map_err(invalid)?;

        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .map_err(invalid)?;
        server_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().map_err(invalid)?;
        let server = server_params.signed_by(&server_key, &ca).map_err(invalid)?;

        let mut client_params = CertificateParams::new(Vec::<String>::new()).map_err(invalid)?;
        client_params
            .distinguished_name
            .push(DnType::CommonName, "tenure");
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().map_err(invalid)?;
        let client = client_params.signed_by(&client_key, &ca).map_err(invalid)?;

        let certificates = TestCertificates {
            dir: fresh_dir("tenure-tls")?,
            ca: ca.pem(),
            client: client.pem(),
            client_key: client_key.serialize_pem(),
        };
        for (file, pem) in [
            (CA_FILE, certificates.ca.as_str()),
            (SERVER_FILE, &server.pem()),
            (SERVER_KEY_FILE, &server_key.serialize_pem()),
            (CLIENT_FILE, certificates.client.as_str()),
            (CLIENT_KEY_FILE, certificates.client_key.as_str()),
        ] {
            std::fs::write(certificates.dir.join(file), pem)?;
        }
        Ok(certificates)
    }

    /// The authority's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca
    }

    /// The client certificate and its key.
    pub fn client_pem(&self) -> (&str, &str) {
        (&self.client, &self.client_key)
    }

    /// The directory holding every file.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The authority's certificate file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join(CA_FILE)
    }

    /// The server certificate's file.
    pub fn server_file(&self) -> PathBuf {
        self.dir.join(SERVER_FILE)
    }

    /// The server key's file.
    pub fn server_key_file(&self) -> PathBuf {
        self.dir.join(SERVER_KEY_FILE)
    }

    /// The client certificate's file.
    pub fn client_file(&self) -> PathBuf {
        self.dir.join(CLIENT_FILE)
    }

    /// The client key's file.
    pub fn client_key_file(&self) -> PathBuf {
        self.dir.join(CLIENT_KEY_FILE)
    }
}

impl Drop for TestCertificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn invalid(error: rcgen::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}
