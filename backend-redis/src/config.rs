//! Connection settings, checked before anything connects, and printed
//! without credentials.

use std::fmt;
use std::time::Duration;

use tenure_lease_core::backend::url::{refuse_unknown_parameters, take_parameter};
use tenure_lease_core::limits::MAX_NAME_BYTES;
use tenure_lease_core::redact::redact_url;
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Error, ErrorKind, Result};

/// How a [`RedisStore`](crate::RedisStore) reaches its server and which
/// namespace of keys it owns.
///
/// `Debug` never prints the password of the URL.
///
/// ```
/// use std::time::Duration;
/// use tenure_backend_redis::RedisConfig;
///
/// let config = RedisConfig::new("redis://:s3cret@cache.internal:6379/0", "billing")
///     .operation_timeout(Duration::from_secs(2));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    namespace: String,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    client_name: String,
    tls: Option<TlsCertificates>,
    refuse_fences_from_before_failover: bool,
    wait_for_replicas: Option<WaitForReplicas>,
}

/// How many replicas must confirm a write before the store acknowledges
/// it: [`RedisConfig::wait_for_replicas`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitForReplicas {
    /// Replicas that must confirm each write.
    pub replicas: u32,
    /// How long a write waits for them.
    pub timeout: Duration,
}

/// The URL parameter naming how many replicas confirm each write.
const WAIT_REPLICAS_PARAMETER: &str = "wait_replicas";
/// The URL parameter naming how long a write waits for them, in
/// milliseconds.
const WAIT_TIMEOUT_PARAMETER: &str = "wait_timeout_ms";
/// The URL schemes of a server (plain, TLS, a Unix socket), of Sentinels
/// and of a cluster.
pub const URL_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
];

/// The URL parameter naming the namespace.
const NAMESPACE_PARAMETER: &str = "namespace";
/// How long a write waits for its replicas unless told otherwise.
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(1);

/// The query parameters a single server's URL (`redis://`, `rediss://`,
/// `redis+unix://`) may carry: tenure's (`wait_replicas`,
/// `wait_timeout_ms`, `tls_ca`, `tls_cert`, `tls_key`) and those the
/// `redis` crate reads (`db`, `user`, `pass`, `protocol`), and
/// `namespace`, read when the config is made. Any other is refused at
/// connect: a misspelt one would otherwise be dropped without a word.
/// (Sentinel and cluster URLs say what they take in their own refusals.)
pub const URL_PARAMETERS: &[&str] = &[
    NAMESPACE_PARAMETER,
    WAIT_REPLICAS_PARAMETER,
    WAIT_TIMEOUT_PARAMETER,
    "tls_ca",
    "tls_cert",
    "tls_key",
    "db",
    "user",
    "pass",
    "protocol",
];

impl RedisConfig {
    /// How long one operation may take, reconnecting included, before it
    /// answers [`ErrorKind::Timeout`].
    pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
    /// How long connecting may take, retries included.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The namespace of a config made from a bare URL
    /// ([`From<&str>`](#impl-From%3C%26str%3E-for-RedisConfig)).
    pub const DEFAULT_NAMESPACE: &'static str = "tenure";
    /// The name the store gives its connection (`CLIENT SETNAME`).
    pub const DEFAULT_CLIENT_NAME: &'static str = "tenure";

    /// Settings for the server at `url` (`redis://[user:password@]host:port[/db]`,
    /// `rediss://...`, `redis+unix:///path?pass=...`), or for the primary
    /// that Sentinels name (`redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE`,
    /// `rediss+sentinel://...`), or for a Redis Cluster some of whose nodes
    /// the URL names (`redis+cluster://[user:password@]host:port[,host:port...]`,
    /// `rediss+cluster://...`), keeping every key under `namespace`.
    ///
    /// Behind Sentinel, `user:password` and `?db=N` are for the primary
    /// (`?sentinel_username=` and `?sentinel_password=` log in to the
    /// Sentinels), a Sentinel without a port listens on
    /// [`DEFAULT_SENTINEL_PORT`](crate::DEFAULT_SENTINEL_PORT), and
    /// `rediss+sentinel://` speaks TLS to the Sentinels and the primary
    /// alike. The store asks the Sentinels in the URL's order for the
    /// primary of `SERVICE` (checking with `ROLE` that it is one) and asks
    /// again whenever a call fails in a way a failover explains, so it
    /// follows failovers.
    ///
    /// In a cluster, `user:password` logs in to every node, a node without
    /// a port listens on 6379, and the namespace lives in one hash slot: the
    /// store sends every call to the primary serving it, and follows the
    /// cluster when the slot moves or a replica is promoted.
    ///
    /// `user:password` logs in as an ACL user (`AUTH user password`); a
    /// password alone (`redis://:password@host`) as the default user.
    /// `rediss://` encrypts the connection and verifies the server's
    /// certificate and name against the system's trust store, or against
    /// the authorities of [`tls`](Self::tls) or of the URL's `tls_ca=`
    /// file (with `tls_cert=` and `tls_key=` for a client certificate; see
    /// [`tenure_lease_core::tls`]).
    ///
    /// The namespace separates independent stores on one server: it must be
    /// non-empty, at most 256 bytes, without control characters and without
    /// `{` or `}` (it becomes the keys' hash tag). It wins over a
    /// `?namespace=` in the URL, which a config made from the URL alone
    /// reads ([`From<&str>`](#impl-From%3C%26str%3E-for-RedisConfig)).
    pub fn new(url: impl Into<String>, namespace: impl Into<String>) -> Self {
        let (url, _) = take_parameter(&url.into(), NAMESPACE_PARAMETER);
        RedisConfig {
            url,
            namespace: namespace.into(),
            operation_timeout: Self::DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            client_name: Self::DEFAULT_CLIENT_NAME.to_owned(),
            tls: None,
            refuse_fences_from_before_failover: false,
            wait_for_replicas: None,
        }
    }

    /// Acknowledges a write only once `replicas` replicas confirm that they
    /// received it (`WAIT`, after every operation that may write), within
    /// `timeout` (default: off). Also from the URL: `?wait_replicas=1`
    /// (with `&wait_timeout_ms=1000`, the default).
    ///
    /// Replication stays asynchronous in Redis, but what a write's caller
    /// was told succeeded is then on `replicas` replicas as well: a
    /// failover that promotes one of them keeps every acknowledged
    /// admission, transition, completion and gate write, provided every
    /// replica it may promote is one that confirmed (`replicas` equal to the
    /// number of replicas, or the others at `replica-priority 0`). A write
    /// the replicas do not confirm in time answers
    /// [`ErrorKind::Unavailable`], retryable with its outcome unknown (it is
    /// on the primary, and a failover may lose it). `WAIT` travels in the
    /// write's round trip, but the server reads nothing more from the
    /// store's one connection until the replicas confirm: every other call
    /// of the store, reads too, waits behind a waiting write. Zero replicas
    /// turns it off, also when the URL asks for some.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_for_replicas = Some(WaitForReplicas { replicas, timeout });
        self
    }

    /// How many replicas confirm each write, when they must
    /// ([`wait_for_replicas`](Self::wait_for_replicas), or the URL's
    /// `wait_replicas=`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] when the URL's parameters are malformed.
    pub fn waits_for_replicas(&self) -> Result<Option<WaitForReplicas>> {
        Ok(self.split_wait_parameters()?.1)
    }

    /// The URL without the waiting parameters, and the waiting they ask
    /// for, unless the config's own ([`wait_for_replicas`](Self::wait_for_replicas)) overrides them.
    fn split_wait_parameters(&self) -> Result<(String, Option<WaitForReplicas>)> {
        let Some((base, query)) = self.url.split_once('?') else {
            return Ok((self.url.clone(), self.wait_for_replicas));
        };
        let (mut replicas, mut timeout) = (None, None);
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some((WAIT_REPLICAS_PARAMETER, value)) => {
                    replicas = Some(value.parse::<u32>().map_err(|_| {
                        config_error(format!(
                            "{WAIT_REPLICAS_PARAMETER} must be a whole number of replicas, got \
                             {value:?}"
                        ))
                    })?);
                }
                Some((WAIT_TIMEOUT_PARAMETER, value)) => {
                    timeout = Some(Duration::from_millis(value.parse::<u64>().map_err(
                        |_| {
                            config_error(format!(
                                "{WAIT_TIMEOUT_PARAMETER} must be a whole number of milliseconds, \
                             got {value:?}"
                            ))
                        },
                    )?));
                }
                _ => kept.push(pair),
            }
        }
        if replicas.is_none() && timeout.is_some() {
            return Err(config_error(format!(
                "{WAIT_TIMEOUT_PARAMETER} was given without {WAIT_REPLICAS_PARAMETER}: say how \
                 many replicas each write waits for"
            )));
        }
        let mut url = base.to_owned();
        if !kept.is_empty() {
            url.push('?');
            url.push_str(&kept.join("&"));
        }
        let from_url = replicas
            .filter(|&replicas| replicas > 0)
            .map(|replicas| WaitForReplicas {
                replicas,
                timeout: timeout.unwrap_or(DEFAULT_WAIT_TIMEOUT),
            });
        let wait = match self.wait_for_replicas {
            Some(off) if off.replicas == 0 => None,
            Some(wait) => Some(wait),
            None => from_url,
        };
        Ok((url, wait))
    }

    /// Trusts and presents `certificates` on a `rediss://` connection,
    /// in place of any the URL names.
    pub fn tls(mut self, certificates: TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
    }

    /// Has the store's fence gates ([`FenceStore`](tenure_lease_core::FenceStore),
    /// [`write_fenced`](crate::RedisStore::write_fenced)) refuse every fence
    /// drawn before the server's last failover (default: off).
    ///
    /// A promoted replica holds the gates as it last received them: a
    /// successor's gate write the old primary acknowledged but never
    /// shipped is lost, and a deposed owner would pass. Every fence and
    /// gate script notes the server's replication id; under a new one (a
    /// promotion, or a restart that lost the replication state) the first
    /// of them records a floor above every fence drawn before. With this
    /// on, a gate refuses (as stale) every fence below the floor: no
    /// deposed owner is accepted, and every owner from before the failover
    /// must take its lease again. Turned on for a namespace first used by
    /// an older version, it refuses the fences drawn before the upgrade
    /// once, the same way.
    pub fn refuse_fences_from_before_failover(mut self, refuse: bool) -> Self {
        self.refuse_fences_from_before_failover = refuse;
        self
    }

    /// Whether the store's gates refuse fences from before a failover.
    pub fn refuses_fences_from_before_failover(&self) -> bool {
        self.refuse_fences_from_before_failover
    }

    /// Sets the bound on one operation.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Sets the bound on connecting.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the connection's name, as `CLIENT LIST` shows it (printable
    /// ASCII, no spaces). The store names every connection it opens,
    /// reconnections included.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// The namespace of this store's keys.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The connection's name.
    pub fn connection_name(&self) -> &str {
        &self.client_name
    }

    /// The URL, safe to log: any password replaced by `***`.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// The URL to hand the client, without tenure's TLS parameters, and
    /// the certificates to connect with: those of [`tls`](Self::tls), or
    /// else those the URL names.
    pub(crate) fn client_url(&self) -> Result<(String, Option<TlsCertificates>)> {
        let (url, _) = self.split_wait_parameters()?;
        let (url, from_url) = TlsCertificates::split_from_url(&url)?;
        let certificates = self.tls.clone().or(from_url);
        let lowercase = url.to_ascii_lowercase();
        let single_server = ["redis://", "rediss://", "redis+unix://", "unix://"]
            .iter()
            .any(|scheme| lowercase.starts_with(scheme));
        if single_server {
            refuse_unknown_parameters(&url, "Redis", URL_PARAMETERS)?;
        }
        let encrypted = ["rediss://", "rediss+sentinel://", "rediss+cluster://"]
            .iter()
            .any(|scheme| lowercase.starts_with(scheme));
        if certificates.is_some() && !encrypted {
            return Err(config_error(format!(
                "certificates were given for {}, which is not encrypted: use a rediss:// \
                 (or rediss+sentinel://, rediss+cluster://) URL",
                redact_url(&url)
            )));
        }
        Ok((url, certificates))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let namespace = &self.namespace;
        if namespace.is_empty() || namespace.len() > MAX_NAME_BYTES {
            return Err(config_error(format!(
                "the namespace must be 1 to {} bytes long, got {}",
                MAX_NAME_BYTES,
                namespace.len()
            )));
        }
        if namespace.contains(['{', '}']) || namespace.chars().any(char::is_control) {
            return Err(config_error(format!(
                "the namespace {namespace:?} must not contain `{{`, `}}` or control characters"
            )));
        }
        let name = &self.client_name;
        if name.is_empty() || !name.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(config_error(format!(
                "the client name {name:?} must be non-empty printable ASCII without spaces"
            )));
        }
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(config_error("timeouts must be greater than zero"));
        }
        if let Some(wait) = self.waits_for_replicas()? {
            if wait.timeout < Duration::from_millis(1) || wait.timeout >= self.operation_timeout {
                return Err(config_error(format!(
                    "a write may wait {:?} for its replicas, which must be at least a \
                     millisecond (WAIT counts milliseconds, and 0 waits for ever) and less than \
                     the operation timeout ({:?}), or every slow replica would look like a lost \
                     connection",
                    wait.timeout, self.operation_timeout
                )));
            }
        }
        Ok(())
    }
}

impl From<&str> for RedisConfig {
    /// [`RedisConfig::new`]`(url, namespace)` with the URL's `?namespace=`,
    /// or [`DEFAULT_NAMESPACE`](RedisConfig::DEFAULT_NAMESPACE) without one.
    fn from(url: &str) -> Self {
        let namespace = take_parameter(url, NAMESPACE_PARAMETER).1;
        RedisConfig::new(
            url,
            namespace.unwrap_or_else(|| RedisConfig::DEFAULT_NAMESPACE.to_owned()),
        )
    }
}

impl From<String> for RedisConfig {
    /// As [`From<&str>`](#impl-From%3C%26str%3E-for-RedisConfig).
    fn from(url: String) -> Self {
        RedisConfig::from(url.as_str())
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("namespace", &self.namespace)
            .field("operation_timeout", &self.operation_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("client_name", &self.client_name)
            .field("tls", &self.tls)
            .field(
                "refuse_fences_from_before_failover",
                &self.refuse_fences_from_before_failover,
            )
            .field("wait_for_replicas", &self.wait_for_replicas)
            .finish()
    }
}

pub(crate) fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_passwords() {
        for (url, shown) in [
            (
                "redis://user:hunter2@host:6379/1",
                "redis://user:***@host:6379/1",
            ),
            ("rediss://:hunter2@host", "rediss://:***@host"),
            (
                "redis+unix:///run/redis.sock?db=2&pass=hunter2",
                "redis+unix:///run/redis.sock?db=2&pass=***",
            ),
            (
                "unix:///run/redis.sock?password=hunter2",
                "unix:///run/redis.sock?password=***",
            ),
            ("redis://host:6379", "redis://host:6379"),
            (
                "redis+sentinel://app:hunter2@s1:26379,s2/svc?sentinel_password=hunter2",
                "redis+sentinel://app:***@s1:26379,s2/svc?sentinel_password=***",
            ),
            ("hunter2", "<not a URL>"),
        ] {
            let config = RedisConfig::new(url, "ns");
            let debug = format!("{config:?}");
            assert!(!debug.contains("hunter2"), "{debug}");
            assert!(debug.contains(shown), "{debug} should show {shown}");
        }
    }

    #[test]
    fn namespaces_with_braces_or_control_characters_are_refused() {
        for namespace in ["", "a{b", "a}b", "tab\there", &"n".repeat(257)] {
            let error = RedisConfig::new("redis://host", namespace)
                .validate()
                .expect_err(namespace);
            assert_eq!(error.kind(), ErrorKind::Config);
        }
        for namespace in ["tenant:1", "ünïcode spaces *?[", "n"] {
            assert!(RedisConfig::new("redis://host", namespace)
                .validate()
                .is_ok());
        }
    }

    #[test]
    fn replicas_to_wait_for_come_from_the_config_or_the_url() {
        let plain = RedisConfig::new("redis://host/0?db=1", "ns");
        assert_eq!(plain.waits_for_replicas().expect("valid"), None);
        let from_url = RedisConfig::new("redis://host?wait_replicas=2&db=1", "ns");
        assert_eq!(
            from_url.waits_for_replicas().expect("valid"),
            Some(WaitForReplicas {
                replicas: 2,
                timeout: DEFAULT_WAIT_TIMEOUT
            })
        );
        assert_eq!(
            from_url.client_url().expect("valid").0,
            "redis://host?db=1",
            "the client never sees tenure's parameters"
        );
        let timed = RedisConfig::new("redis://host?wait_timeout_ms=250&wait_replicas=1", "ns");
        assert_eq!(
            timed.waits_for_replicas().expect("valid"),
            Some(WaitForReplicas {
                replicas: 1,
                timeout: Duration::from_millis(250)
            })
        );
        assert_eq!(timed.client_url().expect("valid").0, "redis://host");
        let overridden = timed.wait_for_replicas(3, Duration::from_millis(10));
        assert_eq!(
            overridden
                .waits_for_replicas()
                .expect("valid")
                .map(|wait| wait.replicas),
            Some(3)
        );
        assert_eq!(
            RedisConfig::new("redis://host?wait_replicas=0", "ns")
                .waits_for_replicas()
                .expect("valid"),
            None
        );
        assert_eq!(
            RedisConfig::new("redis://host?wait_replicas=2", "ns")
                .wait_for_replicas(0, Duration::from_millis(10))
                .waits_for_replicas()
                .expect("valid"),
            None,
            "zero turns waiting off, whatever the URL asks"
        );
    }

    #[test]
    fn malformed_or_impossible_waits_are_refused() {
        for config in [
            RedisConfig::new("redis://host?wait_replicas=x", "ns"),
            RedisConfig::new("redis://host?wait_replicas=-1", "ns"),
            RedisConfig::new("redis://host?wait_replicas=1&wait_timeout_ms=soon", "ns"),
            RedisConfig::new("redis://host?wait_timeout_ms=100", "ns"),
            RedisConfig::new("redis://host", "ns").wait_for_replicas(1, Duration::ZERO),
            RedisConfig::new("redis://host", "ns").wait_for_replicas(1, Duration::from_micros(999)),
            RedisConfig::new("redis://host", "ns")
                .operation_timeout(Duration::from_secs(1))
                .wait_for_replicas(1, Duration::from_secs(1)),
        ] {
            let error = config.validate().expect_err("refused");
            assert_eq!(error.kind(), ErrorKind::Config, "{config:?}");
        }
    }

    #[test]
    fn client_names_must_be_printable_without_spaces() {
        let error = RedisConfig::new("redis://host", "ns")
            .client_name("has space")
            .validate()
            .expect_err("a space");
        assert_eq!(error.kind(), ErrorKind::Config);
    }
}
