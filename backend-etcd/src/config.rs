//! Connection settings, checked before anything connects, and printed
//! without credentials.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::backend::url::{refuse_unknown_parameters, take_parameter};
use tenure_lease_core::limits::MAX_NAME_BYTES;
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Clock, Error, ErrorKind, Result, SystemClock};

/// How to reach an etcd cluster: its members, the key prefix every key of
/// this store lives under, optional credentials and timeouts.
///
/// Parsed from a URL
/// `etcd://[user:password@]host:port[,host:port...][/prefix][?max_txn_ops=N]`
/// by [`From<&str>`](#impl-From<%26str>-for-EtcdConfig); the prefix defaults
/// to [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX), `max_txn_ops` to
/// [`DEFAULT_MAX_TXN_OPS`](Self::DEFAULT_MAX_TXN_OPS). `etcds://` encrypts
/// every connection and verifies each member's certificate and name
/// against the system's trust store, or against the authorities of the
/// URL's `tls_ca=` file (`tls_cert=` and `tls_key=` for a client
/// certificate; see [`tenure_lease_core::tls`]). Its `Debug` never shows the
/// password.
#[derive(Clone)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    prefix: String,
    credentials: Option<(String, String)>,
    tls: Option<TlsCertificates>,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_txn_ops: usize,
    pub(crate) clock: Arc<dyn Clock>,
    /// Why the URL could not be read, reported by `connect`.
    problem: Option<String>,
}

impl EtcdConfig {
    /// How long one request may take before it answers
    /// [`ErrorKind::Timeout`] (outcome unknown).
    pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
    /// How long connecting to one member may take.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
    /// The key prefix when the URL names none.
    pub const DEFAULT_PREFIX: &'static str = "tenure";
    /// etcd's default `--max-txn-ops`: the most operations one transaction
    /// may hold.
    pub const DEFAULT_MAX_TXN_OPS: usize = 128;

    /// Settings for these member endpoints (`host:port`,
    /// `http://host:port`, or `https://host:port` for TLS with the
    /// system's trust store) and key prefix.
    pub fn new<E: Into<String>>(
        endpoints: impl IntoIterator<Item = E>,
        prefix: impl Into<String>,
    ) -> Self {
        EtcdConfig {
            endpoints: endpoints
                .into_iter()
                .map(|endpoint| {
                    let endpoint = endpoint.into();
                    if endpoint.contains("://") {
                        endpoint
                    } else {
                        format!("http://{endpoint}")
                    }
                })
                .collect(),
            prefix: prefix.into(),
            credentials: None,
            tls: None,
            operation_timeout: Self::DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            max_txn_ops: Self::DEFAULT_MAX_TXN_OPS,
            clock: Arc::new(SystemClock),
            problem: None,
        }
    }

    /// Authenticates as `user` (etcd's role-based access control).
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Connects to every member over TLS, trusting and presenting
    /// `certificates` (in place of any the URL names); `http://` endpoints
    /// become `https://`.
    pub fn tls(mut self, certificates: TlsCertificates) -> Self {
        self.endpoints = self
            .endpoints
            .iter()
            .map(|endpoint| encrypted(endpoint))
            .collect();
        self.tls = Some(certificates);
        self
    }

    /// Replaces the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one request may take ([`DEFAULT_OPERATION_TIMEOUT`](Self::DEFAULT_OPERATION_TIMEOUT)).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// How long connecting to one member may take ([`DEFAULT_CONNECT_TIMEOUT`](Self::DEFAULT_CONNECT_TIMEOUT)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The cluster's `--max-txn-ops` ([`DEFAULT_MAX_TXN_OPS`](Self::DEFAULT_MAX_TXN_OPS)):
    /// a claim takes at most this many jobs, `renew_many` renews
    /// in parts of this many, and a job batch must fit in it.
    pub fn max_txn_ops(mut self, ops: usize) -> Self {
        self.max_txn_ops = ops;
        self
    }

    /// The clock every timestamp is read from, and that judges expiry
    /// together with etcd's own lease timers ([`SystemClock`] unless
    /// replaced): etcd has no clock to offer (contract §2). A clock running
    /// ahead cannot end a lease etcd still keeps alive; moving a
    /// [`ManualClock`](tenure_lease_core::ManualClock) forward therefore
    /// ends none either.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The member endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix, without the `/` that follows it in every key.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The certificates to connect with, when the members are reached over
    /// TLS: those of [`tls`](Self::tls) or the URL, or none (the system's
    /// trust store) for `https://` endpoints.
    pub(crate) fn certificates(&self) -> Option<TlsCertificates> {
        let encrypted = self
            .endpoints
            .iter()
            .any(|endpoint| endpoint.to_ascii_lowercase().starts_with("https://"));
        self.tls
            .clone()
            .or_else(|| encrypted.then(TlsCertificates::new))
    }

    pub(crate) fn user(&self) -> Option<(&str, &str)> {
        self.credentials
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_str()))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(problem) = &self.problem {
            return Err(config_error(problem.clone()));
        }
        if self.endpoints.is_empty() {
            return Err(config_error("name at least one etcd member (host:port)"));
        }
        let prefix = &self.prefix;
        if prefix.is_empty() || prefix.len() > MAX_NAME_BYTES {
            return Err(config_error(format!(
                "the key prefix must be 1 to {} bytes long, got {}",
                MAX_NAME_BYTES,
                prefix.len()
            )));
        }
        if prefix.chars().any(char::is_control) {
            return Err(config_error(format!(
                "the key prefix {prefix:?} must not contain control characters"
            )));
        }
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(config_error("timeouts must be greater than zero"));
        }
        if self.max_txn_ops < 4 {
            return Err(config_error(format!(
                "max_txn_ops must be at least 4 (etcd's default is {}), got {}",
                Self::DEFAULT_MAX_TXN_OPS,
                self.max_txn_ops
            )));
        }
        Ok(())
    }

    /// Reads `etcd[s]://[user:password@]host:port[,host:port...][/prefix][?max_txn_ops=N]`
    /// (and the TLS parameters).
    fn parse(url: &str) -> Self {
        let (url, certificates) = match TlsCertificates::split_from_url(url) {
            Ok(split) => split,
            Err(error) => return Self::broken(error.message()),
        };
        if let Err(unknown) = refuse_unknown_parameters(&url, "etcd", URL_PARAMETERS) {
            return Self::broken(unknown.message());
        }
        let (url, max_txn_ops) = take_parameter(&url, "max_txn_ops");
        let max_txn_ops = match max_txn_ops.map(|value| value.parse()) {
            None => Self::DEFAULT_MAX_TXN_OPS,
            Some(Ok(ops)) => ops,
            Some(Err(_)) => return Self::broken("max_txn_ops in the etcd URL must be a number"),
        };
        let url = url.split_once('?').map_or(url.as_str(), |(url, _)| url);
        let Some((rest, tls)) = strip_scheme(url) else {
            return Self::broken(
                "an etcd URL starts with etcd:// or, for TLS, etcds:// \
                 (etcd://host:2379,host:2379/prefix)",
            );
        };
        let (authority, prefix) = match rest.split_once('/') {
            Some((authority, prefix)) if !prefix.is_empty() => (authority, prefix),
            Some((authority, _)) => (authority, Self::DEFAULT_PREFIX),
            None => (rest, Self::DEFAULT_PREFIX),
        };
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                (Some((user.to_owned(), password.to_owned())), hosts)
            }
            None => (None, authority),
        };
        let endpoints: Vec<&str> = hosts.split(',').filter(|host| !host.is_empty()).collect();
        if endpoints.is_empty() {
            return Self::broken("the etcd URL names no member: etcd://host:2379[,host:2379...]");
        }
        let mut config = EtcdConfig::new(endpoints, prefix).max_txn_ops(max_txn_ops);
        config.credentials = credentials;
        match (tls, certificates) {
            (true, certificates) => config.tls(certificates.unwrap_or_default()),
            (false, None) => config,
            (false, Some(_)) => {
                Self::broken("the etcd URL names certificates but is not encrypted: use etcds://")
            }
        }
    }

    fn broken(problem: &str) -> Self {
        let mut config = EtcdConfig::new(Vec::<String>::new(), Self::DEFAULT_PREFIX);
        config.problem = Some(problem.to_owned());
        config
    }
}

/// The URL schemes of an etcd cluster: plain and TLS.
pub const URL_SCHEMES: &[&str] = &["etcd", "etcds"];

/// The query parameters an etcd URL may carry; any other is refused
/// (a typo would otherwise leave a setting at its default).
pub const URL_PARAMETERS: &[&str] = &["max_txn_ops", "tls_ca", "tls_cert", "tls_key"];

/// The URL without its scheme, and whether it asks for TLS, when the
/// scheme is `etcd` or `etcds` (any case).
fn strip_scheme(url: &str) -> Option<(&str, bool)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.eq_ignore_ascii_case("etcd") {
        Some((rest, false))
    } else if scheme.eq_ignore_ascii_case("etcds") {
        Some((rest, true))
    } else {
        None
    }
}

/// `endpoint` reached over TLS.
fn encrypted(endpoint: &str) -> String {
    match endpoint.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => format!("https://{rest}"),
        _ => endpoint.to_owned(),
    }
}

impl From<&str> for EtcdConfig {
    fn from(url: &str) -> Self {
        EtcdConfig::parse(url)
    }
}

impl From<String> for EtcdConfig {
    fn from(url: String) -> Self {
        EtcdConfig::parse(&url)
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .field("operation_timeout", &self.operation_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_txn_ops", &self.max_txn_ops)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

pub(crate) fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_members_prefix_and_credentials() {
        let config = EtcdConfig::from("etcd://alice:hunter2@10.0.0.1:2379,10.0.0.2:2379/jobs");
        assert_eq!(
            config.endpoints(),
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(config.key_prefix(), "jobs");
        assert_eq!(config.user(), Some(("alice", "hunter2")));
        assert!(config.validate().is_ok());
        let wide = EtcdConfig::from("etcd://h:2379/p?max_txn_ops=4096");
        assert_eq!(wide.max_txn_ops, 4096);
        assert_eq!(wide.key_prefix(), "p");
        let plain = EtcdConfig::from("ETCD://127.0.0.1:2379");
        assert_eq!(plain.key_prefix(), EtcdConfig::DEFAULT_PREFIX);
        assert_eq!(plain.user(), None);
    }

    #[test]
    fn etcds_urls_reach_every_member_over_tls() {
        let config = EtcdConfig::from("etcds://alice:pw@10.0.0.1:2379,10.0.0.2:2379/jobs");
        assert_eq!(
            config.endpoints(),
            ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]
        );
        assert_eq!(config.certificates(), Some(TlsCertificates::new()));
        assert_eq!(EtcdConfig::from("etcd://h:2379").certificates(), None);
        let refused = EtcdConfig::from("etcd://h:2379?tls_ca=/etc/hostname");
        assert_eq!(
            refused.validate().map_err(|error| error.kind()),
            Err(ErrorKind::Config)
        );
        let missing = EtcdConfig::from("etcds://h:2379?tls_ca=/no/such/ca.pem");
        let error = missing.validate().expect_err("an unreadable file");
        assert!(error.message().contains("/no/such/ca.pem"), "{error}");
    }

    #[test]
    fn debug_hides_passwords() {
        let config = EtcdConfig::from("etcd://alice:hunter2@host:2379/p");
        let debug = format!("{config:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("alice"), "{debug}");
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for url in [
            "redis://host",
            "etcd://",
            "etcd:///prefix",
            "host:2379",
            "etcd://h:2379?max_txn_ops=many",
            "etcd://h:2379?namespace=x",
        ] {
            let error = EtcdConfig::from(url).validate().expect_err(url);
            assert_eq!(error.kind(), ErrorKind::Config, "{url}");
        }
    }

    #[test]
    fn a_parameter_typo_is_refused_naming_the_known_one() {
        let error = EtcdConfig::from("etcd://h:2379?max_txn_opz=8")
            .validate()
            .expect_err("a typo");
        let message = error.message();
        assert!(message.contains("did you mean `max_txn_ops`"), "{message}");
        assert!(message.contains("`tls_ca`"), "{message}");
        let config = EtcdConfig::from("etcd://h:2379/p?max_txn_ops=64");
        assert!(config.validate().is_ok());
        assert_eq!(config.max_txn_ops, 64);
        assert_eq!(config.key_prefix(), "p");
    }
}
