//! Certificates for encrypted connections to a server backend.
//!
//! PostgreSQL, Redis and etcd all take the same [`TlsCertificates`], from
//! code or from the URL, so a deployment configures TLS once and in one
//! vocabulary: the certificate authorities to trust instead of the system's,
//! and the client certificate to present when the server asks for one.
//!
//! In a URL the certificates are files, named by three query parameters
//! every backend understands (PostgreSQL also keeps libpq's own
//! `sslrootcert`, `sslcert` and `sslkey`):
//!
//! * `tls_ca=/path/ca.pem`: trust these certificate authorities (only them
//!   on Redis and etcd; besides the system's on PostgreSQL, as sqlx does);
//! * `tls_cert=/path/client.pem` and `tls_key=/path/client-key.pem`: present
//!   this certificate (both or neither).
//!
//! The server's certificate is always verified, its name included: there is
//! no switch to turn verification off.

use std::fmt;
use std::path::Path;

use crate::{Error, ErrorKind, Result};

/// The URL query parameter naming the certificate authorities' PEM file.
pub const CA_PARAMETER: &str = "tls_ca";
/// The URL query parameter naming the client certificate's PEM file.
pub const CERT_PARAMETER: &str = "tls_cert";
/// The URL query parameter naming the client key's PEM file.
pub const KEY_PARAMETER: &str = "tls_key";

/// What a TLS connection trusts and presents: certificate authorities
/// (replacing the system's trust store on Redis and etcd, added to it on
/// PostgreSQL), and a client certificate with its key. Both are PEM.
///
/// `Debug` says which parts are set, never their content.
///
/// ```
/// use tenure_lease_core::tls::TlsCertificates;
///
/// let certificates = TlsCertificates::new()
///     .trust_pem(b"-----BEGIN CERTIFICATE-----\n...".to_vec())
///     .identity_pem(b"cert".to_vec(), b"secret key".to_vec());
/// assert!(!format!("{certificates:?}").contains("secret"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsCertificates {
    roots: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsCertificates {
    /// Nothing set: the system's trust store, no client certificate.
    pub fn new() -> Self {
        TlsCertificates::default()
    }

    /// Trusts the certificate authorities in `pem` (one or more
    /// certificates): on Redis and etcd only them; on PostgreSQL (sqlx)
    /// them besides the system's trust store.
    pub fn trust_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.roots = Some(pem.into());
        self
    }

    /// Presents the client certificate (chain) `certificate_pem`, proven by
    /// `key_pem`, to a server that asks for one.
    pub fn identity_pem(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.identity = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// The trusted authorities, when replaced.
    pub fn roots(&self) -> Option<&[u8]> {
        self.roots.as_deref()
    }

    /// The client certificate and its key, when set.
    pub fn identity(&self) -> Option<(&[u8], &[u8])> {
        self.identity
            .as_ref()
            .map(|(certificate, key)| (certificate.as_slice(), key.as_slice()))
    }

    /// Splits the [`CA_PARAMETER`], [`CERT_PARAMETER`] and [`KEY_PARAMETER`]
    /// query parameters off `url` and reads the files they name: the URL
    /// without them, and the certificates when any was named.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`]: a file that cannot be read (the message names
    /// it), or a certificate without its key (or a key without its
    /// certificate).
    pub fn split_from_url(url: &str) -> Result<(String, Option<TlsCertificates>)> {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), None));
        };
        let (query, fragment) = match query.split_once('#') {
            Some((query, fragment)) => (query, Some(fragment)),
            None => (query, None),
        };
        let mut kept = Vec::new();
        let (mut ca, mut cert, mut key) = (None, None, None);
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some((CA_PARAMETER, path)) => ca = Some(path),
                Some((CERT_PARAMETER, path)) => cert = Some(path),
                Some((KEY_PARAMETER, path)) => key = Some(path),
                _ => kept.push(pair),
            }
        }
        let mut rest = base.to_owned();
        if !kept.is_empty() {
            rest.push('?');
            rest.push_str(&kept.join("&"));
        }
        if let Some(fragment) = fragment {
            rest.push('#');
            rest.push_str(fragment);
        }
        if ca.is_none() && cert.is_none() && key.is_none() {
            return Ok((rest, None));
        }
        let mut certificates = TlsCertificates::new();
        if let Some(path) = ca {
            certificates = certificates.trust_pem(read_pem(CA_PARAMETER, path)?);
        }
        match (cert, key) {
            (Some(cert), Some(key)) => {
                certificates = certificates.identity_pem(
                    read_pem(CERT_PARAMETER, cert)?,
                    read_pem(KEY_PARAMETER, key)?,
                );
            }
            (None, None) => {}
            _ => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "the URL names a client certificate without its key or a key without \
                         its certificate: give both {CERT_PARAMETER}= and {KEY_PARAMETER}="
                    ),
                ))
            }
        }
        Ok((rest, Some(certificates)))
    }
}

fn read_pem(parameter: &str, path: &str) -> Result<Vec<u8>> {
    std::fs::read(Path::new(path)).map_err(|error| {
        Error::new(
            ErrorKind::Config,
            format!("could not read the {parameter} file {path:?}: {error}"),
        )
        .with_source(error)
    })
}

impl fmt::Debug for TlsCertificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |set: bool| if set { "<set>" } else { "<system>" };
        f.debug_struct("TlsCertificates")
            .field("roots", &shown(self.roots.is_some()))
            .field(
                "identity",
                &if self.identity.is_some() {
                    "<set>"
                } else {
                    "<none>"
                },
            )
            .finish()
    }
}

/// An error shared between clones, as client libraries keep them.
type SharedError = std::sync::Arc<dyn std::error::Error + Send + Sync>;

/// The first error of type `T` in `error`'s chain of sources, looking
/// inside [`std::io::Error`]s and shared (`Arc`) errors too, whose
/// `source` skips the error they wrap (TLS libraries leave their verdicts
/// there): how a backend tells a refused certificate from a lost
/// connection.
pub fn find_cause<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(found) = current.downcast_ref::<T>() {
            return Some(found);
        }
        let wrapped: Option<&(dyn std::error::Error + 'static)> =
            if let Some(shared) = current.downcast_ref::<SharedError>() {
                Some(&**shared)
            } else {
                current
                    .downcast_ref::<std::io::Error>()
                    .and_then(std::io::Error::get_ref)
                    .map(|inner| inner as &(dyn std::error::Error + 'static))
            };
        if let Some(found) = wrapped.and_then(find_cause::<T>) {
            return Some(found);
        }
        next = current.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters_are_split_off_and_read() {
        let dir = std::env::temp_dir().join(format!("tenure-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "CA").expect("write");
        let url = format!("rediss://h:6380/0?db=1&tls_ca={}#insecure", ca.display());
        let (rest, certificates) = TlsCertificates::split_from_url(&url).expect("split");
        assert_eq!(rest, "rediss://h:6380/0?db=1#insecure");
        assert_eq!(
            certificates.as_ref().and_then(TlsCertificates::roots),
            Some(b"CA".as_slice())
        );
        assert_eq!(
            TlsCertificates::split_from_url("etcds://h:2379/p").expect("plain"),
            ("etcds://h:2379/p".to_owned(), None)
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn missing_files_and_half_identities_are_config_errors() {
        for url in [
            "rediss://h?tls_ca=/no/such/file.pem",
            "rediss://h?tls_cert=/etc/hostname",
            "rediss://h?tls_key=/etc/hostname",
        ] {
            let error = TlsCertificates::split_from_url(url).expect_err(url);
            assert_eq!(error.kind(), ErrorKind::Config, "{url}");
        }
    }

    #[test]
    fn causes_are_found_inside_io_errors() {
        #[derive(Debug, thiserror::Error)]
        #[error("bad certificate")]
        struct Refused;
        let wrapped = std::io::Error::other(Refused);
        assert!(find_cause::<Refused>(&wrapped).is_some());
        let shared: SharedError = std::sync::Arc::new(std::io::Error::other(Refused));
        assert!(find_cause::<Refused>(&shared).is_some());
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(find_cause::<Refused>(&plain).is_none());
    }
}
